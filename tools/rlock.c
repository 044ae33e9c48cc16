/* rlock(1): run a command while holding a Redisson-compatible distributed
 * lock — flock(1) for a fleet. Argument parsing, help and dispatch; the
 * work is in run.c (NAME -- COMMAND) and admin.c (status, unlock). */
#include <assert.h>
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

/* A short usage; every option, the exit statuses, the environment and
 * examples are in the manual page, rlock(1) (tools/rlock.1.scd). */
static const char help_text[] =
    "Usage:\n"
    "  rlock [options] NAME [--] COMMAND [ARGS...]\n"
    "  rlock [options] NAME -c SHELL-COMMAND\n"
    "  rlock [options] -m NAME1,NAME2,... [--] COMMAND [ARGS...]\n"
    "  rlock [connection options] status [--json] [--watch [INTERVAL]] NAME...\n"
    "  rlock [connection options] ls [--json] [--limit N] [PATTERN]\n"
    "  rlock [connection options] unlock --force [--any-type] [KIND] NAME...\n"
    "  rlock [connection options] fence check|set|hset|incrby|del ...\n"
    "  rlock [options] elect NAME [--value V] -- COMMAND; rlock leader NAME\n"
    "  rlock --help | --version\n"
    "\n"
    "Run COMMAND while holding the distributed lock NAME, a Redisson lock in\n"
    "Redis, and exit with COMMAND's status: COMMAND runs on one machine at a\n"
    "time. Options come before NAME; a lock called status, unlock or ls\n"
    "follows --.\n"
    "\n"
    "  -u, --uri URI           Redis (redis://, rediss://, unix://,\n"
    "                          redis+sentinel://, redis+cluster://); default\n"
    "                          $REDIS_URL, else redis://127.0.0.1:6379\n"
    "  --uri-file FILE         the URI from FILE's first line (keeps it from ps)\n"
    "  -n, --nonblock          exit 1 at once if the lock is held\n"
    "  -w, --wait DURATION     exit 1 after waiting DURATION\n"
    "  -l, --lease DURATION    a fixed lease instead of the renewing watchdog\n"
    "  DURATION: seconds (5, 0.5, as flock) or with a unit (250ms, 2m, 1h)\n"
    "  -s, -x, --fair, --fenced, --permits N [--take K]\n"
    "                          read, write, fair or fenced lock; K (1) of N\n"
    "                          semaphore permits\n"
    "  --no-reenter            the non-reentrant lock (with --fair: fair)\n"
    "  -m, --multi NAMES       hold all of the comma-separated NAMES (MultiLock)\n"
    "  --redlock URI,URI,...   NAME on each server, a majority held (RedLock)\n"
    "  -c, --command STRING    run STRING with /bin/sh -c\n"
    "  -v, --verbose           report acquiring and releasing, and the\n"
    "                          connection's events, on stderr (-vv: more)\n"
    "Connection options: -u, --uri-file, --tls-*, --sentinel-* (before or\n"
    "after status, unlock and ls).\n"
    "\n"
    "Exit status: COMMAND's; 1 busy; 64 usage; 69 refused; 75 unreachable;\n"
    "79 lock lost while COMMAND ran; 126/127 COMMAND not runnable.\n"
    "\n"
    "Every option, exit status and example: man rlock (rlock(1)).\n";

void cli_help(FILE *out) { fputs(help_text, out); }

static void usage_hint(void) {
  fprintf(stderr, "Try 'rlock --help' for more information.\n");
}

/* The message is escaped as a whole (out.c): names, owners and server
 * error text in it may carry bytes from Redis. One write per line. */
void cli_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = NULL;
  int n = vasprintf(&msg, fmt, ap);
  va_end(ap);
  if (n < 0) {
    fputs(CLI_PROG ": out of memory\n", stderr);
    return;
  }
  char *shown = cli_text_dup(msg, (size_t)n);
  fprintf(stderr, CLI_PROG ": %s\n", shown != NULL ? shown : msg);
  free(shown);
  free(msg);
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
  case RLOCK_EREENTRY:  /* a non-reentrant lock this owner holds already
                           (-m --no-reenter naming it twice): refused,
                           and waiting would not change that */
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
  case CLI_KIND_NONREENTRANT:
    return "--no-reenter";
  case CLI_KIND_NONREENTRANT_FAIR:
    return "--fair --no-reenter";
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
  /* the constructors of the registry, in its order */
  static int (*const constructors[])(rlock_client *, const char *,
                                     rlock **) = {
#define KIND_CONSTRUCTOR(id, kind_name, constructor) constructor,
      RLOCK_KIND_MAP(KIND_CONSTRUCTOR)
#undef KIND_CONSTRUCTOR
  };
  assert((size_t)kind < sizeof constructors / sizeof constructors[0]);
  return constructors[kind](client, name, lock);
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

static const char *g_uri_file; /* --uri-file */

bool cli_uri_file_option(int c, const char *arg) {
  if (c != CLI_OPT_URI_FILE)
    return false;
  g_uri_file = arg;
  return true;
}

const char *cli_take_uri(char *arg) {
  static char *copy; /* the last -u's, reachable until exit */
  free(copy);
  copy = strdup(arg);
  if (copy == NULL) {
    cli_err("out of memory");
    exit(CLI_EX_OSERR);
  }
  /* scheme://[user][:password]@host...: as the library splits it, the
   * authority ends at the first '/', '?' or '#' and the userinfo at its
   * last '@'; with no '@' there but one later (a raw '/' in the password,
   * which the library refuses), at that later '@'. Without a ':' the whole
   * userinfo is hidden: it may be a password. */
  char *start = strstr(arg, "://");
  if (start != NULL) {
    start += 3;
    size_t auth_len = strcspn(start, "/?#");
    char *at = NULL;
    for (char *p = start; *p != '\0'; p++)
      if (*p == '@' && (p < start + auth_len || at == NULL ||
                        at >= start + auth_len))
        at = p;
    if (at != NULL) {
      char *colon = memchr(start, ':', (size_t)(at - start));
      for (char *p = colon != NULL ? colon + 1 : start; p < at; p++)
        *p = '*';
    }
  }
  return copy;
}

/* The longest URI read from --uri-file. */
#define URI_FILE_MAX 4096

/* The first line of --uri-file's file, malloc'd; NULL with the reason
 * printed. */
static char *read_uri_file(const char *path) {
  if (path[0] == '\0') {
    cli_err("--uri-file: the path must not be empty");
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_err("cannot read --uri-file '%s': %s", path, strerror(errno));
    return NULL;
  }
  char *buf = calloc(1, URI_FILE_MAX + 2);
  size_t n = buf != NULL ? fread(buf, 1, URI_FILE_MAX + 1, f) : 0;
  int err = errno;
  bool failed = buf == NULL || ferror(f) != 0;
  fclose(f);
  const char *why = NULL;
  if (buf == NULL)
    why = "out of memory";
  else if (failed)
    why = strerror(err); /* a directory: EISDIR */
  else if (n > URI_FILE_MAX)
    why = "longer than 4096 bytes";
  else {
    size_t len = strcspn(buf, "\r\n");
    if (memchr(buf, '\0', n) != NULL)
      why = "it holds a NUL byte";
    else if (len == 0)
      why = "the file is empty (the URI is its first line)";
    buf[len] = '\0';
  }
  if (why != NULL) {
    cli_err("cannot use --uri-file '%s': %s", path, why);
    if (buf != NULL)
      explicit_bzero(buf, URI_FILE_MAX + 2);
    free(buf);
    return NULL;
  }
  return buf;
}

const char *cli_resolve_uri(const char *flag) {
  if (flag != NULL && g_uri_file != NULL) {
    cli_err("-u and --uri-file exclude each other (one URI)");
    return NULL;
  }
  if (flag != NULL)
    return flag;
  if (g_uri_file != NULL) {
    static char *from_file; /* reachable until exit */
    if (from_file == NULL)
      from_file = read_uri_file(g_uri_file);
    return from_file;
  }
  const char *env = getenv("REDIS_URL");
  if (env != NULL && env[0] == '\0') {
    cli_err("REDIS_URL is set but empty: set it to a URI, unset it (for "
            "redis://127.0.0.1:6379), or give -u or --uri-file");
    return NULL;
  }
  if (env != NULL)
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

/* "5" (seconds, as flock's -w), "1.5", "250ms", "1.5s", "2m", "1h" ->
 * milliseconds: digits, an optional fraction, an optional unit; nothing
 * else (no sign, exponent, hex, blanks, "inf"). */
int cli_parse_duration(const char *text, int64_t *out_ms) {
  const char *p = text;
  size_t int_digits = 0, frac_digits = 0;
  while (*p >= '0' && *p <= '9')
    p++, int_digits++;
  if (*p == '.') {
    p++;
    while (*p >= '0' && *p <= '9')
      p++, frac_digits++;
  }
  if (int_digits + frac_digits == 0)
    return CLI_DURATION_BAD;
  double scale;
  if (*p == '\0' || strcmp(p, "s") == 0 || strcmp(p, "sec") == 0)
    scale = 1000;
  else if (strcmp(p, "ms") == 0)
    scale = 1;
  else if (strcmp(p, "m") == 0 || strcmp(p, "min") == 0)
    scale = 60000;
  else if (strcmp(p, "h") == 0)
    scale = 3600000;
  else
    return CLI_DURATION_BAD;
  if (int_digits > 12) /* far past the limit; strtod would still parse it */
    return CLI_DURATION_RANGE;
  char *end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (errno != 0 || end != p)
    return CLI_DURATION_BAD;
  double ms = value * scale;
  if (!(ms >= 0) || ms >= (double)DURATION_MAX_MS + 0.5)
    return CLI_DURATION_RANGE;
  int64_t rounded = (int64_t)llround(ms);
  if (rounded == 0 && value > 0)
    return CLI_DURATION_ZERO;
  *out_ms = rounded;
  return 0;
}

/* The accepted forms, for messages. */
#define DURATION_FORMS                                                         \
  "a duration: a number of seconds (5, 0.5) or a number with a unit (250ms, " \
  "1.5s, 2m, 1h)"

bool cli_duration_opt(const char *opt, const char *text, int64_t *out) {
  switch (cli_parse_duration(text, out)) {
  case 0:
    return true;
  case CLI_DURATION_RANGE:
    cli_err("invalid %s '%s': at most 24 days (2147483647ms) (%s)", opt,
            text, DURATION_FORMS);
    break;
  case CLI_DURATION_ZERO:
    cli_err("invalid %s '%s': rounds to 0 ms, the smallest step is 1ms (%s)",
            opt, text, DURATION_FORMS);
    break;
  default:
    cli_err("invalid %s '%s' (%s)", opt, text, DURATION_FORMS);
  }
  usage_hint();
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
  OPT_TAKE,
  OPT_NO_REPLICA_SYNC,
  OPT_REPLICA_SYNC_TIMEOUT,
  OPT_ORPHAN_OK,
  OPT_NO_REENTER,
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
    {"take", required_argument, NULL, OPT_TAKE},
    {"on-lost", required_argument, NULL, OPT_ON_LOST},
    {"kill-after", required_argument, NULL, OPT_KILL_AFTER},
    {"orphan-ok", no_argument, NULL, OPT_ORPHAN_OK},
    {"multi", required_argument, NULL, 'm'},
    {"redlock", required_argument, NULL, CLI_OPT_REDLOCK},
    {"no-reenter", no_argument, NULL, OPT_NO_REENTER},
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

/* After parsing: --no-reenter turns the RLock (or, with --fair, the fair
 * lock) into its non-reentrant kind; -m (o->name is its list) is split
 * into o->names. Kinds apply to every name of -m; --fenced and --permits
 * do not combine with it. 0, or CLI_EX_USAGE with the message printed. */
static int run_kinds(cli_run_opts *o, bool no_reenter) {
  const char *bad = NULL;
  if (no_reenter && o->kind != CLI_KIND_LOCK && o->kind != CLI_KIND_FAIR)
    bad = cli_kind_option(o->kind);
  else if (no_reenter && o->permits > 0)
    bad = "--permits";
  if (bad != NULL) {
    cli_err("--no-reenter and %s exclude each other (only the lock and the "
            "fair lock have a non-reentrant kind)", bad);
    usage_hint();
    return CLI_EX_USAGE;
  }
  if (no_reenter)
    o->kind = o->kind == CLI_KIND_FAIR ? CLI_KIND_NONREENTRANT_FAIR
                                       : CLI_KIND_NONREENTRANT;
  if (o->name == NULL)
    return 0;
  if (o->kind == CLI_KIND_FENCED || o->permits > 0) {
    cli_err("-m and %s exclude each other (a MultiLock holds locks without "
            "a token or permits)", o->permits > 0 ? "--permits" : "--fenced");
    usage_hint();
    return CLI_EX_USAGE;
  }
  size_t n = 1;
  for (const char *p = o->name; *p != '\0'; p++)
    n += *p == ',';
  /* static: reachable until exit, which frees them (names[0] is copy) */
  static char **names;
  static char *copy;
  o->names = names = calloc(n + 1, sizeof(char *));
  copy = strdup(o->name);
  if (names == NULL || copy == NULL) {
    free(copy);
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  for (char *s = copy, *e; s != NULL; s = e) {
    e = strchr(s, ',');
    if (e != NULL)
      *e++ = '\0';
    if (*s == '\0') {
      cli_err("-m '%s': empty lock name in the list (NAME1,NAME2,...)",
              o->name);
      usage_hint();
      free(copy);
      free(names);
      o->names = names = NULL;
      o->n_names = 0;
      return CLI_EX_USAGE;
    }
    o->names[o->n_names++] = s;
  }
  return 0;
}

static bool is_subcommand(const char *arg) {
  return strcmp(arg, "status") == 0 || strcmp(arg, "unlock") == 0 ||
         strcmp(arg, "ls") == 0 || strcmp(arg, "fence") == 0;
}

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
  bool no_reenter = false, at_command = false;
  int c;
  /* "+": stop at NAME, so COMMAND's own options are left alone. ":" first
   * lets us word the missing-argument message ourselves. */
  while (!at_command && (c = getopt_long(argc, argv, "+:u:nw:E:l:m:vhVsx",
                                         run_longopts, NULL)) != -1) {
    switch (c) {
    case 'u':
      uri_flag = cli_take_uri(optarg);
      break;
    case 'n':
      o.wait_ms = 0;
      break;
    case 'w':
      if (!cli_duration_opt("-w/--wait", optarg, &o.wait_ms))
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
      if (!cli_duration_opt("-l/--lease", optarg, &o.lease_ms))
        return CLI_EX_USAGE;
      if (o.lease_ms == 0) {
        cli_err("invalid -l/--lease '%s': the lease must be longer than 0 "
                "(" DURATION_FORMS ")", optarg);
        return CLI_EX_USAGE;
      }
      break;
    case OPT_WATCHDOG:
      if (!cli_duration_opt("--watchdog", optarg, &o.watchdog_ms))
        return CLI_EX_USAGE;
      if (o.watchdog_ms < 300) {
        cli_err("invalid --watchdog '%s': the watchdog lease must be at "
                "least 300ms", optarg);
        return CLI_EX_USAGE;
      }
      break;
    case OPT_PERMITS:
    case OPT_TAKE: {
      char *end = NULL;
      errno = 0;
      long long n = strtoll(optarg, &end, 10);
      long long max = c == OPT_TAKE ? RLOCK_PERMIT_IDS_MAX : 2147483647;
      if (errno != 0 || end == optarg || *end != '\0' || n < 1 || n > max) {
        cli_err("invalid --%s '%s' (a number of permits from 1 to %lld)",
                c == OPT_TAKE ? "take" : "permits", optarg, max);
        usage_hint();
        return CLI_EX_USAGE;
      }
      *(c == OPT_TAKE ? &o.take : &o.permits) = (int64_t)n;
      break;
    }
    case OPT_KILL_AFTER:
      if (!cli_duration_opt("--kill-after", optarg, &o.kill_after_ms))
        return CLI_EX_USAGE;
      break;
    case OPT_NO_REPLICA_SYNC:
      o.no_replica_sync = true;
      break;
    case OPT_ORPHAN_OK:
      o.orphan_ok = true;
      break;
    case 'm':
      o.name = optarg;
      break;
    case CLI_OPT_REDLOCK:
      o.redlock = optarg;
      break;
    case OPT_NO_REENTER:
      no_reenter = true;
      break;
    case OPT_REPLICA_SYNC_TIMEOUT:
      if (!cli_duration_opt("--replica-sync-timeout", optarg,
                        &o.replica_sync_timeout_ms))
        return CLI_EX_USAGE;
      if (o.replica_sync_timeout_ms < 1) {
        cli_err("invalid --replica-sync-timeout '%s': at least 1ms "
                "(--no-replica-sync turns replica sync off)", optarg);
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
      if (o.verbose < 2)
        o.verbose++;
      break;
    case 'h':
      cli_help(stdout);
      return fflush(stdout) == 0 ? 0 : CLI_EX_OSERR;
    case 'V':
      printf(CLI_PROG " %s\n", RLOCK_VERSION_STRING);
      return fflush(stdout) == 0 ? 0 : CLI_EX_OSERR;
    case '?': /* -m NAMES -c STRING: -c is not an option before NAME */
      if (o.name != NULL && (strcmp(argv[optind - 1], "-c") == 0 ||
                             strcmp(argv[optind - 1], "--command") == 0)) {
        optind--;
        at_command = true;
        break;
      }
      return cli_getopt_error(c, argv);
    default: { /* ':', or a kind or --tls-* option */
      int kind_rc = cli_kind_parse(&o.kind, c);
      if (kind_rc > 0)
        return kind_rc;
      if (kind_rc == 0 || cli_tls_option(&o.tls, c, optarg) ||
          cli_sentinel_option(&o.sentinel, c, optarg) ||
          cli_uri_file_option(c, optarg))
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
  if (o.take > (o.permits > 0 ? o.permits : 0)) {
    cli_err(o.permits > 0 ? "--take is more than --permits (a run cannot "
                            "take more permits than the semaphore has)"
                          : "--take needs --permits N");
    usage_hint();
    return CLI_EX_USAGE;
  }
  int rc = run_kinds(&o, no_reenter);
  if (rc != 0)
    return rc;
  if (o.name == NULL && optind >= argc) {
    cli_err("missing lock NAME and COMMAND");
    usage_hint();
    return CLI_EX_USAGE;
  }
  /* getopt consumed a `--` before NAME when the argument before it is one
   * (no option value here can be a bare "--"). */
  bool after_dashes = strcmp(argv[optind - 1], "--") == 0;
  if (o.name != NULL) /* -m: the names were its value, no NAME follows */
    after_dashes = true;
  else
    o.name = argv[optind++];
  if (is_subcommand(o.name) && !after_dashes) {
    /* `rlock -n status job` would lock a lock called "status": most likely
     * a subcommand given an option it does not take. */
    cli_err("'%s' after options that only the lock command takes: for a "
            "lock called '%s' write `-- %s`; %s takes -u, --tls-* and "
            "--sentinel-* before it",
            o.name, o.name, o.name, o.name);
    usage_hint();
    return CLI_EX_USAGE;
  }
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
  if (o.uri == NULL)
    return CLI_EX_USAGE;
  rc = o.redlock != NULL ? cli_redlock_check(&o, uri_flag) : 0;
  if (rc == 0)
    rc = cli_tls_check(&o.tls, o.uri);
  if (rc == 0)
    rc = cli_sentinel_check(&o.sentinel, o.uri);
  if (rc != 0)
    return rc;
  rc = cli_run(&o);
  cli_sentinel_free(&o.sentinel);
  return rc;
}

/* The connection options, which status and unlock take as well as the lock
 * command, and which may so come before a subcommand (issue 26). */
static const struct option global_longopts[] = {
    {"uri", required_argument, NULL, 'u'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    {NULL, 0, NULL, 0},
};

/* How many arguments the connection option at argv[i] spans (1 or 2), or 0
 * when argv[i] is not one. Full names only, as in the table: getopt itself
 * cannot look ahead without taking its state with it. */
static int global_option_span(int argc, char **argv, int i) {
  const char *a = argv[i];
  if (strcmp(a, "-u") == 0)
    return i + 1 < argc ? 2 : 0;
  if (strncmp(a, "-u", 2) == 0)
    return 1; /* -uURI */
  if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
    return 0;
  const char *name = a + 2;
  size_t len = strcspn(name, "=");
  for (const struct option *o = global_longopts; o->name != NULL; o++) {
    if (strlen(o->name) != len || strncmp(o->name, name, len) != 0)
      continue;
    if (o->has_arg == no_argument)
      return name[len] == '\0' ? 1 : 0;
    if (name[len] == '=')
      return 1;
    return i + 1 < argc ? 2 : 0;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && cli_is_elect(argv[1])) /* elect.c: elect, leader */
    return cli_elect_main(argc - 1, argv + 1);
  /* `rlock [connection options] status|unlock ...`: the subcommand gets its
   * arguments with the options moved after it, where its own parser (which
   * takes options anywhere) reads them. */
  int i = 1, span;
  while (i < argc && (span = global_option_span(argc, argv, i)) > 0)
    i += span;
  if (i < argc && is_subcommand(argv[i])) {
    /* argv without the program name: argc - 1 arguments. */
    char **sub = malloc((size_t)argc * sizeof *sub);
    if (sub == NULL) {
      cli_err("out of memory");
      return CLI_EX_OSERR;
    }
    sub[0] = argv[i];
    memcpy(sub + 1, argv + 1, (size_t)(i - 1) * sizeof *sub);
    memcpy(sub + i, argv + i + 1, (size_t)(argc - i - 1) * sizeof *sub);
    sub[argc - 1] = NULL;
    int rc = strcmp(sub[0], "status") == 0 ? cli_status_main(argc - 1, sub)
             : strcmp(sub[0], "ls") == 0   ? cli_ls_main(argc - 1, sub)
             : strcmp(sub[0], "fence") == 0 ? cli_fence_main(argc - 1, sub)
                                           : cli_unlock_main(argc - 1, sub);
    free(sub);
    return rc;
  }
  return run_main(argc, argv);
}
