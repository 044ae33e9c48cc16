/* `rlock fence ...` (issue 37; rlock(1), FENCING): a shell command's check
 * of a fencing token (rlock_check_token) and its guarded writes
 * (rlock_guard_write), through the public API only. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Exit statuses of `rlock fence` besides the tool's own (cli.h): a check
 * that finds the token stale, the lock free, or no token to judge by; a
 * guarded write refused as stale. */
enum {
  FENCE_EXIT_STALE = 1,
  FENCE_EXIT_FREE = 2,
  FENCE_EXIT_UNKNOWN = 3,
};

static const struct option fence_longopts[] = {
    {"uri", required_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    {NULL, 0, NULL, 0},
};

static const char fence_usage[] =
    "Usage:\n"
    "  rlock [connection options] fence check LOCK TOKEN\n"
    "  rlock [connection options] fence set GUARD LOCK TOKEN KEY VALUE\n"
    "  rlock [connection options] fence hset GUARD LOCK TOKEN KEY FIELD VALUE\n"
    "  rlock [connection options] fence incrby GUARD LOCK TOKEN KEY DELTA\n"
    "  rlock [connection options] fence del GUARD LOCK TOKEN KEY\n"
    "TOKEN is the fenced lock LOCK's token (rlock --fenced gives COMMAND\n"
    "$RLOCK_TOKEN). check exits 0 current, 1 stale, 2 free, 3 unknown; a\n"
    "write exits 0 written (printing its result), 1 refused as stale.\n"
    "See man rlock, FENCING.\n";

static bool parse_i64(const char *text, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0')
    return false;
  *out = v;
  return true;
}

static int parse_token(const char *text, int64_t *token) {
  if (!parse_i64(text, token) || *token < 1) {
    cli_err("fence: TOKEN is a fenced lock's token (a number >= 1), not "
            "'%s'", text);
    return CLI_EX_USAGE;
  }
  return 0;
}

static int fence_check(rlock_client *client, char **args) {
  int64_t token = 0;
  int rc = parse_token(args[1], &token);
  if (rc != 0)
    return rc;
  rlock *lock = NULL;
  int err = rlock_new_fenced(client, args[0], &lock);
  if (err == 0)
    err = rlock_check_token(lock, token);
  rlock_free(lock);
  static const char *const words[] = {"free", "current", "stale", "unknown"};
  static const int codes[] = {FENCE_EXIT_FREE, 0, FENCE_EXIT_STALE,
                              FENCE_EXIT_UNKNOWN};
  if (err < 0 || err > RLOCK_FENCE_UNKNOWN) {
    cli_err_rlock(err < 0 ? err : RLOCK_EPROTO, "fence check");
    return cli_exit_for(err < 0 ? err : RLOCK_EPROTO);
  }
  printf("%s\n", words[err]);
  return codes[err];
}

/* The write's fields after GUARD LOCK TOKEN KEY: how many each op takes. */
static int fence_write(rlock_client *client, const char *op, char **args,
                       int nargs) {
  static const struct {
    const char *word;
    rlock_guard_op op;
    int nargs; /* GUARD LOCK TOKEN KEY and the rest */
  } ops[] = {{"set", RLOCK_GUARD_SET, 5},
             {"hset", RLOCK_GUARD_HSET, 6},
             {"incrby", RLOCK_GUARD_INCRBY, 5},
             {"del", RLOCK_GUARD_DEL, 4}};
  size_t i = 0;
  while (strcmp(ops[i].word, op) != 0) /* cli_fence_main checked it */
    i++;
  if (nargs != ops[i].nargs) {
    cli_err("fence %s: %d arguments expected, %d given", op, ops[i].nargs,
            nargs);
    fputs(fence_usage, stderr);
    return CLI_EX_USAGE;
  }
  rlock_guarded_write w;
  rlock_guarded_write_init(&w);
  w.op = ops[i].op;
  w.lock_name = args[1];
  int rc = parse_token(args[2], &w.token);
  if (rc != 0)
    return rc;
  w.key = args[3];
  if (w.op == RLOCK_GUARD_SET)
    w.value = args[4];
  if (w.op == RLOCK_GUARD_HSET) {
    w.field = args[4];
    w.value = args[5];
  }
  if (w.op == RLOCK_GUARD_INCRBY && !parse_i64(args[4], &w.delta)) {
    cli_err("fence incrby: DELTA is a number, not '%s'", args[4]);
    return CLI_EX_USAGE;
  }
  rlock_guard *guard = NULL;
  int64_t result = 0;
  int err = rlock_guard_new(client, args[0], &guard);
  if (err == 0)
    err = rlock_guard_write(guard, &w, &result);
  rlock_guard_free(guard);
  if (err == RLOCK_ESTALE) {
    cli_err_rlock(err, "fence: refused");
    return FENCE_EXIT_STALE;
  }
  if (err < 0) {
    cli_err_rlock(err, "fence");
    return err == RLOCK_EFOREIGN ? CLI_EX_UNAVAILABLE : cli_exit_for(err);
  }
  if (w.op != RLOCK_GUARD_SET)
    printf("%" PRId64 "\n", result);
  return 0;
}

int cli_fence_main(int argc, char **argv) {
  const char *uri_flag = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  int c;
  optind = 1;
  /* "+": options end at the first operand (a VALUE may start with '-') */
  while ((c = getopt_long(argc, argv, "+:u:h", fence_longopts, NULL)) !=
         -1) {
    switch (c) {
    case 'u':
      uri_flag = cli_take_uri(optarg);
      break;
    case 'h':
      fputs(fence_usage, stdout);
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
    cli_err("fence: a subcommand is needed (check, set, hset, incrby, del)");
    fputs(fence_usage, stderr);
    return CLI_EX_USAGE;
  }
  const char *op = argv[optind];
  char **args = argv + optind + 1;
  int nargs = argc - optind - 1;
  if (strcmp(op, "check") != 0 && strcmp(op, "set") != 0 &&
      strcmp(op, "hset") != 0 && strcmp(op, "incrby") != 0 &&
      strcmp(op, "del") != 0) {
    cli_err("fence: unknown subcommand '%s' (check, set, hset, incrby, del)",
            op);
    return CLI_EX_USAGE;
  }
  if (strcmp(op, "check") == 0 && nargs != 2) {
    cli_err("fence check: LOCK TOKEN expected");
    return CLI_EX_USAGE;
  }
  rlock_client *client = NULL;
  int rc = cli_connect(uri_flag, &tls, &sentinel, NULL, &client);
  if (rc != 0)
    return rc;
  rc = strcmp(op, "check") == 0 ? fence_check(client, args)
                                 : fence_write(client, op, args, nargs);
  rlock_client_free(client);
  if (fflush(stdout) != 0 && rc == 0) {
    cli_err("writing the result: %s", strerror(errno));
    rc = CLI_EX_OSERR;
  }
  return rc;
}
