/* The tool's shared helpers (tools/cli.h): --help, messages and exit
 * codes, the lock kinds' options and constructors, durations, getopt
 * errors. Called by rlock.c and the subcommands' files; calls only out.c
 * and the library. */
#include <assert.h>
#include <errno.h>
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
    "after status, unlock, ls and fence; after elect and leader).\n"
    "\n"
    "Exit status: COMMAND's; 1 busy; 64 usage; 69 refused; 75 unreachable;\n"
    "79 lock lost while COMMAND ran; 126/127 COMMAND not runnable.\n"
    "\n"
    "Every option, exit status and example: man rlock (rlock(1)).\n";

void cli_help(FILE *out) { fputs(help_text, out); }

void cli_usage_hint(void) {
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
    cli_usage_hint();
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

bool cli_duration_opt(const char *opt, const char *text, int64_t *out) {
  switch (cli_parse_duration(text, out)) {
  case 0:
    return true;
  case CLI_DURATION_RANGE:
    cli_err("invalid %s '%s': at most 24 days (2147483647ms) (%s)", opt,
            text, CLI_DURATION_FORMS);
    break;
  case CLI_DURATION_ZERO:
    cli_err("invalid %s '%s': rounds to 0 ms, the smallest step is 1ms (%s)",
            opt, text, CLI_DURATION_FORMS);
    break;
  default:
    cli_err("invalid %s '%s' (%s)", opt, text, CLI_DURATION_FORMS);
  }
  cli_usage_hint();
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
  cli_usage_hint();
}

int cli_getopt_error(int c, char **argv) {
  if (c == ':') {
    cli_err("option '%s' needs a value", argv[optind - 1]);
    cli_usage_hint();
  } else {
    bad_option(argv[optind - 1]);
  }
  return CLI_EX_USAGE;
}
