/* rlock(1): run a command while holding a Redisson-compatible distributed
 * lock — flock(1) for a fleet. Argument parsing, help and dispatch; the
 * work is in run.c (NAME -- COMMAND) and admin.c (status, unlock). */
#include <errno.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"

/* The longest duration accepted anywhere: the library's option ranges end
 * at 2^31-1 ms (~24.8 days). */
#define DURATION_MAX_MS INT64_C(2147483647)

static const char usage_text[] =
    "Usage:\n"
    "  rlock [options] NAME [--] COMMAND [ARGS...]\n"
    "  rlock [options] NAME -c SHELL-COMMAND\n"
    "  rlock status [--json] [-u URI] [TLS/sentinel options] NAME...\n"
    "  rlock unlock --force [--any-type] [KIND] [-u URI] [TLS/sentinel "
    "options]\n"
    "               NAME...\n"
    "  rlock --help | --version\n"
    "\n"
    "Run COMMAND while holding the distributed lock NAME, a Redisson lock in\n"
    "Redis: Java services using getLock(NAME) and other rlock processes take\n"
    "turns with it. The lock is released when COMMAND exits, and rlock exits\n"
    "with COMMAND's status. Options come before NAME; everything after NAME\n"
    "(and an optional `--`) is COMMAND. Put `--` before a NAME that is\n"
    "`status` or `unlock`.\n"
    "\n"
    "Options (KIND is one of -s, -x, --fair, --fenced; see below):\n"
    "  -u, --uri URI           Redis server:\n"
    "                          redis://[[user]:password@]host[:port][/db],\n"
    "                          rediss://... (TLS, see below),\n"
    "                          unix:///path[?db=N],\n"
    "                          redis+sentinel://[[user]:password@]h1[:port]\n"
    "                          [,h2[:port]...]/MASTER[/db] (the master the\n"
    "                          sentinels name MASTER; port 26379; user and\n"
    "                          password are the master's),\n"
    "                          redis+cluster://[[user]:password@]h1[:port]\n"
    "                          [,h2[:port]...] (any nodes of a Redis Cluster;\n"
    "                          port 6379), or rediss+sentinel:// and\n"
    "                          rediss+cluster:// for TLS; default $REDIS_URL,\n"
    "                          else redis://127.0.0.1:6379\n"
    "  -n, --nonblock          fail at once (exit 1) if the lock is held\n"
    "  -w, --wait, --timeout DURATION\n"
    "                          give up (exit 1) after waiting DURATION; default:\n"
    "                          wait as long as it takes (-n is -w 0; the last of\n"
    "                          -n and -w wins)\n"
    "  -E, --conflict-exit-code CODE\n"
    "                          exit with CODE (0-255) instead of 1 when -n or -w\n"
    "                          gives up\n"
    "  -l, --lease DURATION    the lock expires DURATION after it was taken, even\n"
    "                          if COMMAND still runs (see --on-lost); default: no\n"
    "                          lease, the watchdog renews the lock until COMMAND\n"
    "                          exits\n"
    "      --watchdog DURATION watchdog lease, renewed every third of it (default\n"
    "                          30s, at least 300ms); a lost lock is noticed within\n"
    "                          a third of it\n"
    "      --on-lost=warn|kill when the lock is lost while COMMAND runs (deleted,\n"
    "                          expired, -l ran out): warn prints a warning (the\n"
    "                          default); kill sends SIGTERM to COMMAND, SIGKILL\n"
    "                          after --kill-after, and exits 79\n"
    "      --kill-after DURATION\n"
    "                          grace between SIGTERM and SIGKILL (default 5s)\n"
    "      --orphan-ok         let COMMAND run on if rlock itself dies (by\n"
    "                          default COMMAND gets SIGTERM then: nothing holds\n"
    "                          the lock for it any more); not with\n"
    "                          --on-lost=kill\n"
    "      --no-replica-sync   do not WAIT for the master's replicas after each\n"
    "                          acquire, release and renewal (by default, when\n"
    "                          the master has replicas, an acquire no replica\n"
    "                          confirmed is undone and rlock exits 75)\n"
    "      --replica-sync-timeout DURATION\n"
    "                          how long WAIT waits for the replicas (default\n"
    "                          1s, at least 1ms)\n"
    "  -c, --command STRING    (after NAME) run STRING with /bin/sh -c\n"
    "  -v, --verbose           report acquiring, giving up and releasing on\n"
    "                          stderr\n"
    "  -h, --help              show this help and exit\n"
    "  -V, --version           show the version and exit\n"
    "\n"
    ;

static const char commands_text[] =
    "status NAME...            for each lock: its owners (<client-uuid>:<thread-id>)\n"
    "                          with their hold counts, its time to live and the\n"
    "                          number of clients waiting (subscribed to its\n"
    "                          channel); and where it can tell, its kind: a\n"
    "                          read/write lock's mode and readers or writer, a\n"
    "                          fair lock's queue, a fenced lock's token; --json\n"
    "                          prints a JSON array instead\n"
    "unlock --force NAME...    delete the locks whoever holds them and wake a\n"
    "                          waiter; a NAME that holds another Redis type (not\n"
    "                          a hash) is left as it is, reported, and makes the\n"
    "                          exit status 69; the other NAMEs are still unlocked\n"
    "      --any-type          (with unlock --force) delete each NAME whatever\n"
    "                          its type, like Redisson's forceUnlock\n"
    "      KIND                (with unlock --force) that kind's force unlock:\n"
    "                          -s (-x) deletes a read/write lock only in read\n"
    "                          (write) mode; --fair also wakes the first fair\n"
    "                          waiter\n"
    "\n";

static const char kinds_text[] =
    "Kinds of lock (KIND; at most one; default Redisson's getLock(NAME)):\n"
    "  -s, --shared            the READ lock of the read/write lock NAME\n"
    "                          (getReadWriteLock(NAME).readLock()): shared with\n"
    "                          other -s holders, excluded by -x (like flock -s)\n"
    "  -x, --exclusive         its WRITE lock: excludes -s and -x (like flock -x)\n"
    "      --fair              the fair lock (getFairLock): waiters get it first\n"
    "                          come, first served, across the fleet\n"
    "      --fenced            the fenced lock (getFencedLock): COMMAND gets this\n"
    "                          acquisition's fencing token in RLOCK_TOKEN\n"
    "On one NAME the plain lock, --fenced and --fair (and Redisson's spin lock)\n"
    "share one hash and exclude each other (--fair's queue orders only fair\n"
    "waiters); a read/write lock (-s/-x) is another layout: another kind on its\n"
    "NAME, or -s/-x on theirs, fails with exit 69.\n"
    "\n"
    "Semaphore (instead of a KIND):\n"
    "      --permits N         hold ONE permit of the permit-expirable semaphore\n"
    "                          NAME (getPermitExpirableSemaphore) of N permits (1\n"
    "                          to 2147483647): at most N runs at once across the\n"
    "                          fleet. NAME is set to N permits if absent; if it has\n"
    "                          another size, a warning names both and the run goes\n"
    "                          on with the existing size. The permit has a lease of\n"
    "                          --watchdog (30s), renewed every third of it while\n"
    "                          COMMAND runs (with -l: that fixed lease, not\n"
    "                          renewed), so a crashed rlock's permit returns by\n"
    "                          itself. -n, -w, -E, --on-lost apply; RLOCK_OWNER is\n"
    "                          the permit id\n"
    "\n";

/* Three strings: ISO C guarantees string literals only up to 4095 bytes. */
static const char tls_text[] =
    "TLS options (with a rediss:// URI only; the lock command, status and\n"
    "unlock all take them):\n"
    "      --tls-ca-file FILE  trust the CA certificates in FILE (PEM) instead\n"
    "                          of the system's trust store\n"
    "      --tls-ca-dir DIR    trust the CA certificates in DIR (OpenSSL hashed\n"
    "                          form, c_rehash)\n"
    "      --tls-cert FILE     client certificate (PEM) for mutual TLS; needs\n"
    "                          --tls-key\n"
    "      --tls-key FILE      its private key (PEM, unencrypted)\n"
    "      --tls-server-name NAME\n"
    "                          the name sent as SNI and checked against the\n"
    "                          server's certificate (default: the URI's host)\n"
    "      --tls-insecure      accept any certificate and name (encryption\n"
    "                          without authentication: for tests only)\n"
    "The server's certificate and name are verified (TLS 1.2 or later). No\n"
    "environment variable sets these; $REDIS_URL may be a rediss:// URI.\n"
    "\n";

static const char sentinel_text[] =
    "Sentinel options (with a redis+sentinel:// or rediss+sentinel:// URI\n"
    "only; the lock command, status and unlock all take them):\n"
    "      --sentinel-user USER\n"
    "                          the ACL user the sentinels authenticate (needs\n"
    "                          --sentinel-password-file)\n"
    "      --sentinel-password-file FILE\n"
    "                          the sentinels' password, the first line of FILE\n"
    "                          (not an argument: it would show in ps)\n"
    "The URI's user and password are the master's. No environment variable\n"
    "sets these.\n"
    "\n";

static const char notes_text[] =
    "DURATION is milliseconds, or a number with a unit: 250ms, 1.5s, 2m, 1h.\n"
    "COMMAND gets RLOCK_NAME (the lock name) and RLOCK_OWNER (the lock's hash\n"
    "field, <client-uuid>:<thread-id>; -x's field is RLOCK_OWNER:write) in its\n"
    "environment, and with --fenced RLOCK_TOKEN (decimal). SIGINT, SIGTERM,\n"
    "SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to rlock are passed on to\n"
    "COMMAND (not those a terminal sends to both); the lock is released\n"
    "whichever way COMMAND ends. If rlock itself dies (SIGKILL, a crash),\n"
    "COMMAND gets SIGTERM (not with --orphan-ok; processes COMMAND started\n"
    "do not) and the lock expires after the watchdog lease (or -l).\n"
    "\n"
    "Exit status:\n"
    "  N      COMMAND's exit status\n"
    "  128+N  COMMAND died of signal N; or rlock got signal N while waiting\n"
    "  1      the lock was busy (-n) or -w ran out (change with -E)\n"
    "  64     usage error: bad option, DURATION, URI, unreadable --tls-*\n"
    "         or --sentinel-password-file file, TLS option without\n"
    "         rediss://, sentinel option without a sentinel URI, or no NAME\n"
    "         or COMMAND\n"
    "  69     Redis refused: authentication, ACL permission, NAME holds\n"
    "         another type, server error; or NAME holds another kind of lock\n"
    "         (a read/write lock without -s/-x, another lock with -s/-x)\n"
    "  70     internal error\n"
    "  71     system error: fork, pipe, thread or memory\n"
    "  75     cannot connect to Redis, it did not answer in time, what\n"
    "         answered is not a Redis server, or TLS failed (the server's\n"
    "         certificate or name did not verify, the handshake failed, the\n"
    "         server does not speak TLS on that port); no sentinel named\n"
    "         the master; no replica confirmed the acquire (replica sync:\n"
    "         it was undone, see --no-replica-sync); the cluster could not\n"
    "         serve NAME (CLUSTERDOWN, TRYAGAIN, redirect loop)\n"
    "  79     the lock was lost while COMMAND ran, with --on-lost=kill\n"
    "  126    COMMAND was found but could not be executed\n"
    "  127    COMMAND was not found\n"
    "  status exits 0. unlock --force exits with the highest status of its\n"
    "  NAMEs: 0 every lock was held and is deleted, 1 one was not locked, 69\n"
    "  one holds another type (left alone), or the error that stopped it.\n";

void cli_help(FILE *out) {
  fputs(usage_text, out);
  fputs(commands_text, out);
  fputs(kinds_text, out);
  fputs(tls_text, out);
  fputs(sentinel_text, out);
  fputs(notes_text, out);
}

static void usage_hint(void) {
  fprintf(stderr, "Try 'rlock --help' for more information.\n");
}

void cli_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs(CLI_PROG ": ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void cli_err_rlock(int err, const char *what) {
  const char *msg = rlock_strerror(err);
  const char *detail = rlock_last_error();
  if (detail[0] != '\0' && strcmp(detail, msg) != 0)
    cli_err("%s: %s (%s)", what, msg, detail);
  else
    cli_err("%s: %s", what, msg);
}

int cli_open_failed(int err) {
  if (err == RLOCK_EURI)
    cli_err("invalid Redis URI: %s", rlock_last_error());
  else
    cli_err_rlock(err, "cannot connect to Redis");
  return cli_exit_for(err);
}

int cli_exit_for(int err) {
  switch (err) {
  case RLOCK_EINVAL:
  case RLOCK_EURI:
  case RLOCK_ENAMETOOLONG:
    return CLI_EX_USAGE;
  case RLOCK_ECONN:
  case RLOCK_ETIMEDOUT:
  case RLOCK_EPROTO:    /* what answered is not a Redis server */
  case RLOCK_ETLS:      /* no TLS session: certificate, handshake, plain
                           text on the port (an unreadable --tls-* file is
                           caught before, as a usage error) */
  case RLOCK_EBACKLOG:  /* Redis stopped reading */
  case RLOCK_ENOREPLICA: /* no replica confirmed the acquire (undone): a
                            replica down or lagging, worth a retry */
  case RLOCK_ECLUSTER:  /* CLUSTERDOWN, TRYAGAIN, a resharding's redirect
                           loop: the cluster cannot serve NAME right now */
    return CLI_EX_TEMPFAIL;
  case RLOCK_EAUTH:
  case RLOCK_ENOPERM:
  case RLOCK_EWRONGTYPE:
  case RLOCK_ESERVER:
  case RLOCK_EOOM:
  case RLOCK_EREADONLY:
  case RLOCK_EKIND:     /* NAME holds another kind of lock: like a key of
                           another type (EWRONGTYPE), a refusal about what
                           NAME is, not a busy lock */
    return CLI_EX_UNAVAILABLE;
  case RLOCK_ENOMEM:
  case RLOCK_ESYS:
    return CLI_EX_OSERR;
  default:
    return CLI_EX_SOFTWARE;
  }
}

const char *cli_kind_option(cli_kind kind) {
  switch (kind) {
  case CLI_KIND_FAIR:
    return "--fair";
  case CLI_KIND_READ:
    return "--shared";
  case CLI_KIND_WRITE:
    return "--exclusive";
  case CLI_KIND_FENCED:
    return "--fenced";
  case CLI_KIND_LOCK:
  default:
    return "";
  }
}

int cli_kind_parse(cli_kind *kind, int c) {
  cli_kind k;
  switch (c) {
  case 's':
    k = CLI_KIND_READ;
    break;
  case 'x':
    k = CLI_KIND_WRITE;
    break;
  case CLI_OPT_KIND_FAIR:
    k = CLI_KIND_FAIR;
    break;
  case CLI_OPT_KIND_FENCED:
    k = CLI_KIND_FENCED;
    break;
  default:
    return -1;
  }
  if (*kind != CLI_KIND_LOCK && *kind != k) {
    cli_err("%s and %s exclude each other (one kind of lock per run)",
            cli_kind_option(*kind), cli_kind_option(k));
    usage_hint();
    return CLI_EX_USAGE;
  }
  *kind = k;
  return 0;
}

int cli_kind_get(rlock_client *client, cli_kind kind, const char *name,
                 rlock **lock) {
  switch (kind) {
  case CLI_KIND_FAIR:
    return rlock_get_fair(client, name, lock);
  case CLI_KIND_READ:
    return rlock_get_read(client, name, lock);
  case CLI_KIND_WRITE:
    return rlock_get_write(client, name, lock);
  case CLI_KIND_FENCED:
    return rlock_get_fenced(client, name, lock);
  case CLI_KIND_LOCK:
  default:
    return rlock_get(client, name, lock);
  }
}

void cli_err_kind(cli_kind kind, const char *name) {
  if (kind == CLI_KIND_READ || kind == CLI_KIND_WRITE)
    cli_err("cannot lock '%s': it holds another kind of lock, not a "
            "read/write lock (use it without -s/-x)",
            name);
  else
    cli_err("cannot lock '%s': it holds another kind of lock, a read/write "
            "lock (use -s or -x for it)",
            name);
}

const char *cli_resolve_uri(const char *flag) {
  if (flag != NULL)
    return flag;
  const char *env = getenv("REDIS_URL");
  if (env != NULL && env[0] != '\0')
    return env;
  return "redis://127.0.0.1:6379";
}

bool cli_tls_option(cli_tls_opts *t, int c, const char *arg) {
  const char *name;
  switch (c) {
  case CLI_OPT_TLS_CA_FILE:
    t->ca_file = arg;
    name = "--tls-ca-file";
    break;
  case CLI_OPT_TLS_CA_DIR:
    t->ca_dir = arg;
    name = "--tls-ca-dir";
    break;
  case CLI_OPT_TLS_CERT:
    t->cert_file = arg;
    name = "--tls-cert";
    break;
  case CLI_OPT_TLS_KEY:
    t->key_file = arg;
    name = "--tls-key";
    break;
  case CLI_OPT_TLS_SERVER_NAME:
    t->server_name = arg;
    name = "--tls-server-name";
    break;
  case CLI_OPT_TLS_INSECURE:
    t->insecure = true;
    name = "--tls-insecure";
    break;
  default:
    return false;
  }
  if (t->first == NULL)
    t->first = name;
  return true;
}

/* A --tls-* file must be a readable file (or, for --tls-ca-dir, a
 * directory we may list): said here, naming the option, rather than later
 * as a TLS failure. */
static bool tls_file_ok(const char *opt, const char *path, bool dir) {
  if (path[0] == '\0') {
    cli_err("%s: the path must not be empty", opt);
    return false;
  }
  if (dir) {
    DIR *d = opendir(path);
    if (d == NULL) {
      cli_err("cannot open %s '%s': %s", opt, path, strerror(errno));
      return false;
    }
    closedir(d);
    return true;
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_err("cannot read %s '%s': %s", opt, path, strerror(errno));
    return false;
  }
  /* fopen succeeds on a directory; reading it fails with EISDIR. */
  char byte;
  bool ok = fread(&byte, 1, 1, f) == 1;
  int err = errno;
  if (!ok && ferror(f))
    cli_err("cannot read %s '%s': %s", opt, path, strerror(err));
  else if (!ok)
    cli_err("cannot read %s '%s': the file is empty", opt, path);
  fclose(f);
  return ok;
}

int cli_tls_check(const cli_tls_opts *t, const char *uri) {
  if (t->first == NULL)
    return 0;
  if (strncasecmp(uri, "rediss://", 9) != 0 &&
      strncasecmp(uri, "rediss+sentinel://", 18) != 0 &&
      strncasecmp(uri, "rediss+cluster://", 17) != 0) {
    cli_err("%s needs a rediss:// URI (TLS options apply to rediss://, "
            "rediss+sentinel:// and rediss+cluster:// only; -u or "
            "$REDIS_URL)",
            t->first);
    return CLI_EX_USAGE;
  }
  if ((t->cert_file == NULL) != (t->key_file == NULL)) {
    cli_err("%s needs %s: a client certificate goes with its key",
            t->cert_file != NULL ? "--tls-cert" : "--tls-key",
            t->cert_file != NULL ? "--tls-key" : "--tls-cert");
    return CLI_EX_USAGE;
  }
  if (t->server_name != NULL &&
      (t->server_name[0] == '\0' || strlen(t->server_name) > 253)) {
    cli_err("invalid --tls-server-name '%s' (1..253 characters)",
            t->server_name);
    return CLI_EX_USAGE;
  }
  if ((t->ca_file != NULL && !tls_file_ok("--tls-ca-file", t->ca_file, false)) ||
      (t->ca_dir != NULL && !tls_file_ok("--tls-ca-dir", t->ca_dir, true)) ||
      (t->cert_file != NULL && !tls_file_ok("--tls-cert", t->cert_file, false)) ||
      (t->key_file != NULL && !tls_file_ok("--tls-key", t->key_file, false)))
    return CLI_EX_USAGE;
  return 0;
}

void cli_tls_apply(const cli_tls_opts *t, rlock_options *o) {
  o->tls_ca_file = t->ca_file;
  o->tls_ca_dir = t->ca_dir;
  o->tls_cert_file = t->cert_file;
  o->tls_key_file = t->key_file;
  o->tls_server_name = t->server_name;
  o->tls_insecure = t->insecure ? 1 : 0;
}

bool cli_sentinel_option(cli_sentinel_opts *s, int c, const char *arg) {
  const char *name;
  switch (c) {
  case CLI_OPT_SENTINEL_USER:
    s->user = arg;
    name = "--sentinel-user";
    break;
  case CLI_OPT_SENTINEL_PASSWORD_FILE:
    s->password_file = arg;
    name = "--sentinel-password-file";
    break;
  default:
    return false;
  }
  if (s->first == NULL)
    s->first = name;
  return true;
}

/* The longest sentinel password read from a file. */
#define SENTINEL_PASSWORD_MAX 4096

int cli_sentinel_check(cli_sentinel_opts *s, const char *uri) {
  if (s->first == NULL)
    return 0;
  if (strncasecmp(uri, "redis+sentinel://", 17) != 0 &&
      strncasecmp(uri, "rediss+sentinel://", 18) != 0) {
    cli_err("%s needs a redis+sentinel:// or rediss+sentinel:// URI "
            "(sentinel options apply to sentinel URIs only; -u or "
            "$REDIS_URL)",
            s->first);
    return CLI_EX_USAGE;
  }
  if (s->user != NULL && s->user[0] == '\0') {
    cli_err("--sentinel-user: the user must not be empty");
    return CLI_EX_USAGE;
  }
  if (s->user != NULL && s->password_file == NULL) {
    cli_err("--sentinel-user needs --sentinel-password-file: the sentinels "
            "authenticate a user with its password");
    return CLI_EX_USAGE;
  }
  if (s->password_file == NULL)
    return 0;
  const char *path = s->password_file;
  if (path[0] == '\0') {
    cli_err("--sentinel-password-file: the path must not be empty");
    return CLI_EX_USAGE;
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_err("cannot read --sentinel-password-file '%s': %s", path,
            strerror(errno));
    return CLI_EX_USAGE;
  }
  char *buf = calloc(1, SENTINEL_PASSWORD_MAX + 2);
  if (buf == NULL) {
    fclose(f);
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  size_t n = fread(buf, 1, SENTINEL_PASSWORD_MAX + 1, f);
  int err = errno;
  bool failed = ferror(f) != 0;
  fclose(f);
  const char *why = NULL;
  if (failed)
    why = strerror(err); /* a directory: EISDIR */
  else if (n > SENTINEL_PASSWORD_MAX)
    why = "longer than 4096 bytes";
  else {
    buf[n] = '\0';
    size_t len = strcspn(buf, "\r\n");
    /* Only one line, optionally ended by a newline. */
    size_t rest = len;
    if (rest < n && buf[rest] == '\r')
      rest++;
    if (rest < n && buf[rest] == '\n')
      rest++;
    if (rest != n)
      why = "more than one line (the password is the whole first line)";
    else if (len == 0)
      why = "the file is empty";
    else if (memchr(buf, '\0', len) != NULL)
      why = "it holds a NUL byte";
    buf[len] = '\0';
  }
  if (why != NULL) {
    cli_err("cannot use --sentinel-password-file '%s': %s", path, why);
    memset(buf, 0, SENTINEL_PASSWORD_MAX + 2);
    free(buf);
    return CLI_EX_USAGE;
  }
  s->password = buf;
  return 0;
}

void cli_sentinel_apply(const cli_sentinel_opts *s, rlock_options *o) {
  o->sentinel_user = s->user;
  o->sentinel_password = s->password;
}

void cli_sentinel_free(cli_sentinel_opts *s) {
  if (s->password != NULL) {
    volatile char *p = s->password;
    while (*p != '\0')
      *p++ = '\0';
    free(s->password);
    s->password = NULL;
  }
}

int64_t cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "1500", "1500ms", "1.5s", "2m", "1h" -> milliseconds. Returns false on a
 * malformed or out-of-range value. */
static bool parse_duration(const char *text, int64_t *out_ms) {
  if (text[0] < '0' || text[0] > '9') /* no sign, no blanks, no "inf" */
    return false;
  errno = 0;
  char *end = NULL;
  double value = strtod(text, &end);
  if (errno != 0 || end == text)
    return false;
  double scale;
  if (*end == '\0' || strcmp(end, "ms") == 0)
    scale = 1;
  else if (strcmp(end, "s") == 0)
    scale = 1000;
  else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
    scale = 60000;
  else if (strcmp(end, "h") == 0)
    scale = 3600000;
  else
    return false;
  double ms = value * scale;
  if (!(ms >= 0) || ms > (double)DURATION_MAX_MS)
    return false;
  *out_ms = (int64_t)llround(ms);
  return true;
}

static bool duration_opt(const char *opt, const char *text, int64_t *out) {
  if (parse_duration(text, out))
    return true;
  cli_err("invalid %s '%s' (a duration: 500, 500ms, 1.5s, 2m, 1h; at most "
          "24 days)",
          opt, text);
  return false;
}

/* After getopt_long returned '?': names the offending option. optopt is the
 * short option for "-x" (or, confusingly, the option's value for a long
 * option given an argument it does not take), 0 for an unknown long one. */
static void bad_option(const char *arg) {
  if (strncmp(arg, "--", 2) == 0 || optopt == 0)
    cli_err("invalid option '%s'", arg);
  else
    cli_err("invalid option '-%c'", optopt);
  usage_hint();
}

int cli_getopt_error(int c, char **argv) {
  if (c == ':') {
    cli_err("option '%s' needs a value", argv[optind - 1]);
    usage_hint();
  } else {
    bad_option(argv[optind - 1]);
  }
  return CLI_EX_USAGE;
}

enum {
  OPT_ON_LOST = 256,
  OPT_KILL_AFTER,
  OPT_WATCHDOG,
  OPT_PERMITS,
  OPT_NO_REPLICA_SYNC,
  OPT_REPLICA_SYNC_TIMEOUT,
  OPT_ORPHAN_OK,
};

static const struct option run_longopts[] = {
    {"uri", required_argument, NULL, 'u'},
    {"nonblock", no_argument, NULL, 'n'},
    {"nb", no_argument, NULL, 'n'},
    {"wait", required_argument, NULL, 'w'},
    {"timeout", required_argument, NULL, 'w'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"lease", required_argument, NULL, 'l'},
    {"watchdog", required_argument, NULL, OPT_WATCHDOG},
    {"permits", required_argument, NULL, OPT_PERMITS},
    {"on-lost", required_argument, NULL, OPT_ON_LOST},
    {"kill-after", required_argument, NULL, OPT_KILL_AFTER},
    {"orphan-ok", no_argument, NULL, OPT_ORPHAN_OK},
    {"no-replica-sync", no_argument, NULL, OPT_NO_REPLICA_SYNC},
    {"replica-sync-timeout", required_argument, NULL,
     OPT_REPLICA_SYNC_TIMEOUT},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    CLI_KIND_LONGOPTS,
    {NULL, 0, NULL, 0},
};

static int run_main(int argc, char **argv) {
  cli_run_opts o = {
      .wait_ms = -1,
      .lease_ms = -1,
      .watchdog_ms = 0,
      .kill_after_ms = 5000,
      .conflict_exit_code = CLI_EXIT_CONFLICT,
      .on_lost = CLI_ON_LOST_WARN,
  };
  const char *uri_flag = NULL;
  int c;
  /* "+": stop at NAME, so COMMAND's own options are left alone. ":" first
   * lets us word the missing-argument message ourselves. */
  while ((c = getopt_long(argc, argv, "+:u:nw:E:l:vhVsx", run_longopts,
                          NULL)) != -1) {
    switch (c) {
    case 'u':
      uri_flag = optarg;
      break;
    case 'n':
      o.wait_ms = 0;
      break;
    case 'w':
      if (!duration_opt("wait", optarg, &o.wait_ms))
        return CLI_EX_USAGE;
      break;
    case 'E': {
      char *end = NULL;
      errno = 0;
      long code = strtol(optarg, &end, 10);
      if (errno != 0 || end == optarg || *end != '\0' || code < 0 ||
          code > 255) {
        cli_err("invalid conflict exit code '%s' (0-255)", optarg);
        return CLI_EX_USAGE;
      }
      o.conflict_exit_code = (int)code;
      break;
    }
    case 'l':
      if (!duration_opt("lease", optarg, &o.lease_ms))
        return CLI_EX_USAGE;
      if (o.lease_ms == 0) {
        cli_err("the lease must be longer than 0 ms");
        return CLI_EX_USAGE;
      }
      break;
    case OPT_WATCHDOG:
      if (!duration_opt("watchdog", optarg, &o.watchdog_ms))
        return CLI_EX_USAGE;
      if (o.watchdog_ms < 300) {
        cli_err("the watchdog lease must be at least 300 ms");
        return CLI_EX_USAGE;
      }
      break;
    case OPT_PERMITS: {
      char *end = NULL;
      errno = 0;
      long long n = strtoll(optarg, &end, 10);
      if (errno != 0 || end == optarg || *end != '\0' || n < 1 ||
          n > INT64_C(2147483647)) {
        cli_err("invalid --permits '%s' (a number of permits from 1 to "
                "2147483647)",
                optarg);
        usage_hint();
        return CLI_EX_USAGE;
      }
      o.permits = (int64_t)n;
      break;
    }
    case OPT_KILL_AFTER:
      if (!duration_opt("kill-after", optarg, &o.kill_after_ms))
        return CLI_EX_USAGE;
      break;
    case OPT_NO_REPLICA_SYNC:
      o.no_replica_sync = true;
      break;
    case OPT_ORPHAN_OK:
      o.orphan_ok = true;
      break;
    case OPT_REPLICA_SYNC_TIMEOUT:
      if (!duration_opt("replica-sync-timeout", optarg,
                        &o.replica_sync_timeout_ms))
        return CLI_EX_USAGE;
      if (o.replica_sync_timeout_ms < 1) {
        cli_err("the replica sync timeout must be at least 1 ms "
                "(--no-replica-sync turns replica sync off)");
        return CLI_EX_USAGE;
      }
      break;
    case OPT_ON_LOST:
      if (strcmp(optarg, "warn") == 0) {
        o.on_lost = CLI_ON_LOST_WARN;
      } else if (strcmp(optarg, "kill") == 0) {
        o.on_lost = CLI_ON_LOST_KILL;
      } else {
        cli_err("invalid --on-lost '%s' (warn or kill)", optarg);
        return CLI_EX_USAGE;
      }
      break;
    case 'v':
      o.verbose = true;
      break;
    case 'h':
      cli_help(stdout);
      return fflush(stdout) == 0 ? 0 : CLI_EX_OSERR;
    case 'V':
      printf(CLI_PROG " %s\n", RLOCK_VERSION_STRING);
      return fflush(stdout) == 0 ? 0 : CLI_EX_OSERR;
    default: { /* ':' or '?', or a kind or --tls-* option */
      int kind_rc = cli_kind_parse(&o.kind, c);
      if (kind_rc > 0)
        return kind_rc;
      if (kind_rc == 0 || cli_tls_option(&o.tls, c, optarg) ||
          cli_sentinel_option(&o.sentinel, c, optarg))
        break;
      return cli_getopt_error(c, argv);
    }
    }
  }
  if (o.no_replica_sync && o.replica_sync_timeout_ms > 0) {
    cli_err("--replica-sync-timeout and --no-replica-sync exclude each "
            "other (no WAIT is sent without replica sync)");
    usage_hint();
    return CLI_EX_USAGE;
  }
  if (o.orphan_ok && o.on_lost == CLI_ON_LOST_KILL) {
    cli_err("--orphan-ok and --on-lost=kill exclude each other (kill stops "
            "COMMAND when the lock is lost, and rlock's death loses it)");
    usage_hint();
    return CLI_EX_USAGE;
  }
  if (o.permits > 0 && o.kind != CLI_KIND_LOCK) {
    cli_err("--permits and %s exclude each other (a semaphore is not a "
            "kind of lock)",
            cli_kind_option(o.kind));
    usage_hint();
    return CLI_EX_USAGE;
  }
  if (optind >= argc) {
    cli_err("missing lock NAME and COMMAND");
    usage_hint();
    return CLI_EX_USAGE;
  }
  o.name = argv[optind++];
  if (o.name[0] == '\0') {
    cli_err("the lock NAME must not be empty");
    return CLI_EX_USAGE;
  }
  /* NAME -c STRING (flock's form), NAME -- COMMAND..., or NAME COMMAND... */
  static char sh[] = "/bin/sh", dash_c[] = "-c";
  char *shell_argv[4] = {sh, dash_c, NULL, NULL};
  if (optind < argc && (strcmp(argv[optind], "-c") == 0 ||
                        strcmp(argv[optind], "--command") == 0)) {
    if (argc - optind != 2) {
      cli_err("%s takes exactly one argument, the shell command",
              argv[optind]);
      usage_hint();
      return CLI_EX_USAGE;
    }
    shell_argv[2] = argv[optind + 1];
    o.command = shell_argv;
  } else {
    if (optind < argc && strcmp(argv[optind], "--") == 0)
      optind++;
    if (optind >= argc) {
      cli_err("missing COMMAND after the lock name '%s'", o.name);
      usage_hint();
      return CLI_EX_USAGE;
    }
    o.command = &argv[optind];
  }
  o.uri = cli_resolve_uri(uri_flag);
  int rc = cli_tls_check(&o.tls, o.uri);
  if (rc == 0)
    rc = cli_sentinel_check(&o.sentinel, o.uri);
  if (rc != 0)
    return rc;
  rc = cli_run(&o);
  cli_sentinel_free(&o.sentinel);
  return rc;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "status") == 0)
    return cli_status_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "unlock") == 0)
    return cli_unlock_main(argc - 1, argv + 1);
  return run_main(argc, argv);
}
