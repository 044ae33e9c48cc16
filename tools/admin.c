/* `rlock status NAME...` and `rlock unlock --force NAME...`.
 *
 * Both go through the library, like the lock command: status reads
 * each NAME with rlock_client_info() (one atomic script on the node serving
 * NAME: Cluster, Sentinel and TLS as the library does them, and failures
 * worded as the library words them); unlock --force releases with
 * rlock_client_force_unlock(), which leaves a NAME that holds something
 * other than a hash alone (--any-type: rlock_force_unlock(), type-blind as
 * Redisson's forceUnlock). The library subscribes to a channel only to
 * wait on it, so status does not count itself among the waiters it
 * shows.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- status ---- */

static bool is_type(const rlock_info *info, const char *type) {
  return strcmp(info->type, type) == 0;
}

/* A holder whose value is a hold count (not a foreign field). */
static bool counted(const rlock_info_entry *e) {
  return e->count != RLOCK_INFO_NOT_A_COUNT;
}

/* The string's integer: a semaphore's permits or a latch's count. */
static bool has_count(const rlock_info *info) {
  return info->kind == RLOCK_INFO_COUNT ||
         info->kind == RLOCK_INFO_PERMIT_SEMAPHORE;
}

static void print_kind_lines(const rlock_info *info) {
  if (info->queue_total > 0)
    printf("  fair lock: %zu waiting in its queue\n", info->queue_total);
  if (info->token >= 0)
    printf("  fenced lock: token %" PRId64 " (the latest handed out)\n",
           info->token);
}

static void print_permits_human(const char *name, const rlock_info *info) {
  cli_text(stdout, name);
  printf(": semaphore (permit-expirable), %" PRId64 " permit%s available, "
         "%zu taken\n",
         info->count, info->count == 1 ? "" : "s",
         info->permits_total);
  for (size_t i = 0; i < info->permits_n; i++) {
    const rlock_info_entry *p = &info->permits[i];
    fputs("  permit ", stdout);
    cli_text_write(stdout, p->key, p->key_len);
    if (p->ttl_ms == RLOCK_INFO_NO_EXPIRY)
      printf("  no lease (held until released)\n");
    else if (p->ttl_ms >= 0)
      printf("  lease expires in %" PRId64 " ms\n", p->ttl_ms);
    else
      printf("  lease expired %" PRId64 " ms ago (returned at "
             "the next acquire)\n",
             -p->ttl_ms);
  }
}

static void print_string_human(const char *name, const rlock_info *info) {
  if (!has_count(info)) {
    cli_text(stdout, name);
    printf(": not a lock (Redis type string)\n");
  } else if (info->kind == RLOCK_INFO_COUNT) {
    cli_text(stdout, name);
    printf(": count %" PRId64 " (a count-down latch's count, or a "
           "semaphore's available permits: Redis cannot tell them apart)\n",
           info->count);
  } else
    print_permits_human(name, info);
}

static void print_human(const char *name, const rlock_info *info,
                        cli_whois *w) {
  if (is_type(info, "string")) {
    print_string_human(name, info);
    return;
  }
  char waiting[48] = "";
  if (info->waiters > 0)
    snprintf(waiting, sizeof waiting, ", %" PRId64 " client%s waiting",
             info->waiters, info->waiters == 1 ? "" : "s");
  cli_text(stdout, name);
  if (is_type(info, "none")) {
    printf(": unlocked%s\n", waiting);
    print_kind_lines(info);
    return;
  }
  if (!is_type(info, "hash")) {
    printf(": not a lock (Redis type %s)\n", info->type);
    return;
  }
  char kind[96] = "";
  if (info->kind == RLOCK_INFO_FAST_MULTILOCK) {
    printf(": %s (%s)%s\n", info->locked ? "locked" : "unlocked",
           cli_info_kind_words(info->kind), waiting);
    for (size_t i = 0; i < info->holders_n; i++) {
      const rlock_info_entry *h = &info->holders[i];
      if (!counted(h)) {
        cli_field_text(h);
        continue;
      }
      cli_group_hold_text(h);
      const cli_whois_entry *e = cli_whois_get(w, name, h->key, h->key_len);
      if (e != NULL) {
        fputs("    ", stdout);
        cli_whois_text(stdout, e);
        fputc('\n', stdout);
      }
    }
    return;
  }
  if (info->mode != NULL) {
    char *mode = cli_text_dup(info->mode, strlen(info->mode));
    snprintf(kind, sizeof kind, " (read/write lock, %.40s mode)",
             mode != NULL ? mode : "?");
    free(mode);
  }
  if (info->ttl_ms >= 0)
    printf(": locked%s, expires in %" PRId64 " ms%s\n", kind, info->ttl_ms,
           waiting);
  else
    printf(": locked%s, never expires (no TTL)%s\n", kind, waiting);
  for (size_t i = 0; i < info->holders_n; i++) {
    const rlock_info_entry *h = &info->holders[i];
    fputs(h->writer                          ? "  writer "
          : info->mode != NULL && counted(h) ? "  reader "
          : counted(h)                       ? "  owner "
                                             : "  field ",
          stdout);
    cli_text_write(stdout, h->key, h->key_len - (h->writer ? 6 : 0));
    fputs(counted(h) ? "  holds " : " = ", stdout);
    cli_text_write(stdout, h->value, h->value_len);
    fputc('\n', stdout);
    const cli_whois_entry *e =
        counted(h) ? cli_whois_get(w, name, h->key, h->key_len) : NULL;
    if (e != NULL) {
      fputs("    ", stdout);
      cli_whois_text(stdout, e);
      fputc('\n', stdout);
    }
  }
  print_kind_lines(info);
}

/* The same object as rlock ls --json's entry for the name (describe.c). */
static void print_json(rlock_client *client, const char *name,
                       const rlock_info *info, bool first, cli_whois *w) {
  fputs(first ? "  " : ",\n  ", stdout);
  rlock_election_state st;
  bool elected = cli_election_of(client, name, info, &st);
  cli_info_json(name, strlen(name), info, elected ? &st : NULL, w);
}

/* One status of every NAME: 0, or the exit code with the error printed. */
static int status_once(rlock_client *client, char **names, int n,
                       bool json) {
  static cli_whois w; /* ~15 KB: not on the stack */
  memset(&w, 0, sizeof w);
  w.client = client;
  int rc = 0;
  if (json)
    fputs("[\n", stdout);
  for (int i = 0; i < n && rc == 0; i++) {
    rlock_info info;
    rlock_info_init(&info);
    int err = rlock_client_info(client, names[i], &info);
    if (err < 0) {
      char what[96];
      snprintf(what, sizeof what, "reading '%.80s'", names[i]);
      fflush(stdout); /* in order, when both go to one file */
      cli_err_rlock(err, what);
      rc = cli_exit_for(err);
      break;
    }
    if (json)
      print_json(client, names[i], &info, i == 0, &w);
    else
      print_human(names[i], &info, &w);
    rlock_info_free(&info);
  }
  if (json && rc == 0)
    fputs("\n]\n", stdout);
  return rc;
}

/* --watch: SIGINT ends it (exit 0). */
static volatile sig_atomic_t g_watch_stop;

static void on_watch_signal(int sig) {
  (void)sig;
  g_watch_stop = 1;
}

/* The status again every interval_ms until SIGINT (0) or an error (its
 * exit code): on a terminal the screen is cleared and redrawn; otherwise
 * each refresh follows the last, after a line with the time. */
static int status_watch(rlock_client *client, char **names, int n, bool json,
                        int64_t interval_ms) {
  struct sigaction sa, old_int;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_watch_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  bool tty = isatty(STDOUT_FILENO) == 1;
  int rc = 0;
  while (!g_watch_stop) {
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (tty)
      fputs("\033[H\033[2J", stdout);
    printf("%s%s, every %" PRId64 " ms%s\n", json ? "// " : "# ", stamp,
           interval_ms, tty ? " (Ctrl-C ends)" : "");
    rc = status_once(client, names, n, json);
    if (rc != 0)
      break;
    if (fflush(stdout) != 0) {
      cli_err("writing the status: %s", strerror(errno));
      rc = CLI_EX_OSERR;
      break;
    }
    for (int64_t until = cli_now_ms() + interval_ms;
         !g_watch_stop && cli_now_ms() < until;) {
      int64_t left = until - cli_now_ms();
      struct timespec ts = {0, (long)(left < 50 ? left : 50) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  return rc;
}

/* --watch's INTERVAL: a duration as for every option (a bare number is
 * seconds); at least 100 ms. False when it is none. */
static bool watch_interval(const char *text, int64_t *ms) {
  return cli_parse_duration(text, ms) == 0 && *ms >= 100;
}

enum { OPT_WATCH = 256 };

static const struct option status_longopts[] = {
    {"json", no_argument, NULL, 'j'},
    {"watch", optional_argument, NULL, OPT_WATCH},
    {"uri", required_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    {NULL, 0, NULL, 0},
};

int cli_status_main(int argc, char **argv) {
  const char *uri_flag = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  bool json = false, watch = false;
  int64_t interval_ms = 1000;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":u:jh", status_longopts, NULL)) !=
         -1) {
    switch (c) {
    case 'u':
      uri_flag = cli_take_uri(optarg);
      break;
    case 'j':
      json = true;
      break;
    case OPT_WATCH:
      watch = true;
      if (optarg != NULL) { /* --watch=INTERVAL */
        if (!watch_interval(optarg, &interval_ms)) {
          cli_err("status: invalid --watch interval '%s' (seconds, or 500ms, "
                  "2s; at least 100ms)",
                  optarg);
          return CLI_EX_USAGE;
        }
      } else if (optind < argc && argv[optind][0] >= '0' &&
                 argv[optind][0] <= '9' &&
                 watch_interval(argv[optind], &interval_ms)) {
        optind++; /* --watch INTERVAL */
      }
      break;
    case 'h':
      cli_help(stdout);
      return 0;
    default:
      if (cli_tls_option(&tls, c, optarg) ||
          cli_sentinel_option(&sentinel, c, optarg) ||
          cli_uri_file_option(c, optarg))
        break;
      return cli_getopt_error(c, argv);
    }
  }
  if (optind >= argc) {
    cli_err("status: missing lock NAME");
    return CLI_EX_USAGE;
  }
  for (int i = optind; i < argc; i++) {
    if (argv[i][0] == '\0') {
      cli_err("status: a lock NAME must not be empty");
      return CLI_EX_USAGE;
    }
  }
  rlock_client *client;
  int rc = cli_connect(uri_flag, &tls, &sentinel, NULL, &client);
  if (rc != 0)
    return rc;
  /* What the connect probes found that changes a lock's guarantees (a
   * server without WAIT: no replica sync there), on stderr so that the
   * status itself (and --json) stays as it is. */
  rlock_client_caps caps;
  rlock_client_caps_init(&caps);
  if (rlock_client_capabilities(client, &caps) == 0 && caps.replica_sync_off)
    cli_err("note: %s", caps.replica_sync_note);
  rc = watch ? status_watch(client, argv + optind, argc - optind, json,
                            interval_ms)
             : status_once(client, argv + optind, argc - optind, json);
  rlock_client_free(client);
  if (fflush(stdout) != 0 && rc == 0) {
    cli_err("writing the status: %s", strerror(errno));
    rc = CLI_EX_OSERR;
  }
  return rc;
}

/* ---- unlock --force ---- */

enum { OPT_ANY_TYPE = 256 };

static const struct option unlock_longopts[] = {
    {"force", no_argument, NULL, 'f'},
    {"any-type", no_argument, NULL, OPT_ANY_TYPE},
    {"uri", required_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    CLI_KIND_LONGOPTS,
    {NULL, 0, NULL, 0},
};

/* The exit status of several NAMEs: the highest (0 all released < 1 one
 * was not locked < 69 one holds another type < the errors). */
static int worst(int a, int b) { return a > b ? a : b; }

int cli_unlock_main(int argc, char **argv) {
  const char *uri_flag = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  bool force = false, any_type = false;
  cli_kind kind = CLI_KIND_LOCK;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":u:fhsx", unlock_longopts, NULL)) !=
         -1) {
    switch (c) {
    case 'u':
      uri_flag = cli_take_uri(optarg);
      break;
    case 'f':
      force = true;
      break;
    case OPT_ANY_TYPE:
      any_type = true;
      break;
    case 'h':
      cli_help(stdout);
      return 0;
    default: {
      int kind_rc = cli_kind_parse(&kind, c);
      if (kind_rc > 0)
        return kind_rc;
      if (kind_rc == 0 || cli_tls_option(&tls, c, optarg) ||
          cli_sentinel_option(&sentinel, c, optarg) ||
          cli_uri_file_option(c, optarg))
        break;
      return cli_getopt_error(c, argv);
    }
    }
  }
  if (!force) {
    cli_err("unlock: only the holder releases a lock (when its COMMAND "
            "exits); use --force to delete it whoever holds it");
    return CLI_EX_USAGE;
  }
  if (optind >= argc) {
    cli_err("unlock: missing lock NAME");
    return CLI_EX_USAGE;
  }
  rlock_client *client;
  int rc = cli_connect(uri_flag, &tls, &sentinel, NULL, &client);
  if (rc != 0)
    return rc;
  /* A NAME that is not a lock is reported and skipped; the other NAMEs are
   * still processed. An error (connection, permission, ...) stops at its
   * NAME. */
  int exit_code = 0;
  for (int i = optind; i < argc; i++) {
    rlock_info found; /* what was there: "none" says "was not locked" */
    rlock_info_init(&found);
    if (any_type) {
      rlock *lock;
      rc = cli_kind_get(client, kind, argv[i], &lock);
      if (rc == 0) {
        rc = rlock_force_unlock(lock);
        rlock_free(lock);
      }
    } else if (kind == CLI_KIND_LOCK) {
      /* no kind option: the kind the keys show (a read/write lock is
       * released as one, waking its waiters on its own channel) */
      rc = rlock_client_force_unlock(client, argv[i], NULL, &found);
    } else {
      /* the kind's name as the library spells it (rlock_kind) */
      rlock *lock;
      rc = cli_kind_get(client, kind, argv[i], &lock);
      if (rc == 0) {
        rc = rlock_client_force_unlock(client, argv[i], rlock_kind(lock),
                                       &found);
        rlock_free(lock);
      }
    }
    bool missing = strcmp(found.type, "none") == 0;
    rlock_info_free(&found);
    if (rc == RLOCK_EWRONGTYPE && !any_type) {
      fflush(stdout); /* in order, when both go to one file */
      cli_err("unlock '%s': %s; left as it is (--any-type deletes it)",
              argv[i], rlock_last_error());
      exit_code = worst(exit_code, CLI_EX_UNAVAILABLE);
      continue;
    }
    if (rc < 0) {
      char what[96];
      snprintf(what, sizeof what, "unlock '%.80s'", argv[i]);
      fflush(stdout);
      cli_err_rlock(rc, what);
      exit_code = worst(exit_code, cli_exit_for(rc));
      break;
    }
    /* -s/-x: Redisson's read (write) force unlock deletes the read/write
     * lock only in read (write) mode. */
    printf("%s: %s\n", argv[i],
           rc == 1                               ? "unlocked"
           : missing                             ? "was not locked"
           : kind == CLI_KIND_READ               ? "was not locked in read mode"
           : kind == CLI_KIND_WRITE              ? "was not locked in write mode"
                                                 : "was not locked");
    if (rc == 0)
      exit_code = worst(exit_code, CLI_EXIT_CONFLICT);
  }
  rlock_client_free(client);
  if (fflush(stdout) != 0 && exit_code == 0)
    exit_code = CLI_EX_OSERR;
  return exit_code;
}
