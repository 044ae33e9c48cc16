/* rlock(1): run a command while holding a Redisson-compatible distributed
 * lock — flock(1) for a fleet. main: the lock command's arguments and the
 * dispatch; the work is in run.c (NAME -- COMMAND) and the subcommands'
 * files (admin.c, ls.c, fence.c, elect.c), the shared helpers in cli.c and
 * connect.c (tools/cli.h). */
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
    cli_usage_hint();
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
    cli_usage_hint();
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
      cli_usage_hint();
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
                "(" CLI_DURATION_FORMS ")", optarg);
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
        cli_usage_hint();
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
    cli_usage_hint();
    return CLI_EX_USAGE;
  }
  if (o.orphan_ok && o.on_lost == CLI_ON_LOST_KILL) {
    cli_err("--orphan-ok and --on-lost=kill exclude each other (kill stops "
            "COMMAND when the lock is lost, and rlock's death loses it)");
    cli_usage_hint();
    return CLI_EX_USAGE;
  }
  if (o.permits > 0 && o.kind != CLI_KIND_LOCK) {
    cli_err("--permits and %s exclude each other (a semaphore is not a "
            "kind of lock)",
            cli_kind_option(o.kind));
    cli_usage_hint();
    return CLI_EX_USAGE;
  }
  if (o.take > (o.permits > 0 ? o.permits : 0)) {
    cli_err(o.permits > 0 ? "--take is more than --permits (a run cannot "
                            "take more permits than the semaphore has)"
                          : "--take needs --permits N");
    cli_usage_hint();
    return CLI_EX_USAGE;
  }
  int rc = run_kinds(&o, no_reenter);
  if (rc != 0)
    return rc;
  if (o.name == NULL && optind >= argc) {
    cli_err("missing lock NAME and COMMAND");
    cli_usage_hint();
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
    cli_usage_hint();
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
      cli_usage_hint();
      return CLI_EX_USAGE;
    }
    shell_argv[2] = argv[optind + 1];
    o.command = shell_argv;
  } else {
    if (optind < argc && strcmp(argv[optind], "--") == 0)
      optind++;
    if (optind >= argc) {
      cli_err("missing COMMAND after the lock name '%s'", o.name);
      cli_usage_hint();
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
