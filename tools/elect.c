/* `rlock elect NAME [--value V] -- COMMAND` and `rlock leader NAME`:
 * leader election (docs/election.md) through the library's
 * rlock_election_* calls (public API only).
 *
 * elect: campaigns for NAME (blocking, -w bounds it); once leader, runs
 * COMMAND with the term in its environment; while it runs, checks every
 * 50 ms that this process still leads (rlock_election_leading: the lease
 * guarantee) and hears the term's end through the campaign's callback (a
 * self-pipe). On loss COMMAND gets SIGTERM, SIGKILL after --kill-after,
 * and rlock exits CLI_EX_LOCKLOST (79), as `--on-lost=kill` does. When
 * COMMAND ends, rlock resigns (the next candidate wins at once) and exits
 * with COMMAND's status. SIGINT, SIGTERM and SIGHUP are forwarded to
 * COMMAND.
 *
 * leader: prints who leads NAME now (exit 0; 1 when nobody leads), or with
 * --follow every change until interrupted; --json prints one JSON object a
 * line. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define CHECK_MS 50
#define DEFAULT_KILL_AFTER_MS 10000

static int g_pipe[2] = {-1, -1};
static volatile sig_atomic_t g_signal;

static void on_signal(int sig) {
  g_signal = sig;
  if (g_pipe[1] >= 0) {
    char b = 's';
    ssize_t n = write(g_pipe[1], &b, 1);
    (void)n;
  }
}

/* The term's end (loop thread): one byte on the pipe wakes the main loop. */
static void on_end(rlock_election *e, int status, int64_t term, void *data) {
  (void)e;
  (void)term;
  (void)data;
  char b = status == RLOCK_ELECTION_RESIGNED ? 'r' : 'l';
  ssize_t n = write(g_pipe[1], &b, 1);
  (void)n;
}

/* SIGINT, SIGTERM and SIGHUP set g_signal and wake the pipe. */
static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
}

static void usage_elect(FILE *out) {
  fprintf(out,
          "usage: rlock elect [connection options] [--value V] [-w WAIT] [--watchdog DURATION]\n"
          "                   [--kill-after DURATION] [-v] NAME -- COMMAND [ARG...]\n"
          "       rlock leader [connection options] [--follow] [--json] [--poll DURATION] NAME\n"
          "Connection options: -u, --uri-file, --tls-*, --sentinel-*.\n"
          "See rlock(1), ELECTION.\n");
}

/* The client, through the connection every command opens (cli_connect:
 * -u, --uri-file, $REDIS_URL, --tls-*, --sentinel-*). */
static int open_client(const char *uri_flag, const cli_tls_opts *tls,
                       cli_sentinel_opts *sentinel, int64_t watchdog_ms,
                       rlock_client **c) {
  rlock_options o;
  rlock_options_init(&o);
  if (watchdog_ms > 0)
    o.watchdog_timeout_ms = watchdog_ms;
  return cli_connect(uri_flag, tls, sentinel, &o, c);
}

static pid_t spawn(char **command, const char *name, int64_t term,
                   const char *value) {
  char t[32];
  snprintf(t, sizeof(t), "%" PRId64, term);
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  setenv("RLOCK_ELECTION_NAME", name, 1);
  setenv("RLOCK_ELECTION_TERM", t, 1);
  setenv("RLOCK_ELECTION_VALUE", value, 1);
  setenv("RLOCK_FENCING_TOKEN", t, 1);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  execvp(command[0], command);
  int e = errno;
  fprintf(stderr, CLI_PROG ": %s: %s\n", command[0], strerror(e));
  _exit(e == ENOENT ? CLI_EX_NOTFOUND : CLI_EX_NOEXEC);
}

static int exit_of(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return CLI_EX_SOFTWARE;
}

/* SIGTERM, then SIGKILL after kill_after_ms; reaps. */
static void stop_child(pid_t pid, int64_t kill_after_ms) {
  kill(pid, SIGTERM);
  int64_t deadline = cli_now_ms() + kill_after_ms;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR))
      return;
    if (cli_now_ms() >= deadline) {
      cli_err("COMMAND still runs %" PRId64 " ms after SIGTERM; sending "
              "SIGKILL", kill_after_ms);
      kill(pid, SIGKILL);
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      return;
    }
    usleep(10000);
  }
}

/* While COMMAND runs as leader: the exit code. */
static int lead(rlock_election *e, pid_t child, int64_t kill_after_ms,
                int verbose, int64_t term) {
  for (;;) {
    struct pollfd p = {g_pipe[0], POLLIN, 0};
    int n = poll(&p, 1, CHECK_MS);
    bool lost = false;
    if (n > 0) {
      char b;
      while (read(g_pipe[0], &b, 1) == 1) {
        if (b == 'l')
          lost = true;
      }
    }
    if (g_signal != 0) {
      kill(child, g_signal);
      g_signal = 0;
    }
    int st;
    pid_t r = waitpid(child, &st, WNOHANG);
    if (r == child) {
      int rc = rlock_election_resign(e);
      if (verbose)
        fprintf(stderr, CLI_PROG ": term %" PRId64 " resigned (%s)\n", term,
                rc == 0 ? "ok" : rlock_strerror(rc));
      return exit_of(st);
    }
    if (!lost && rlock_election_leading(e, NULL, NULL) != 1)
      lost = true;
    if (lost) {
      cli_err("leadership lost (term %" PRId64 "); stopping COMMAND", term);
      stop_child(child, kill_after_ms);
      return CLI_EX_LOCKLOST;
    }
  }
}

static int elect_main(int argc, char **argv) {
  const char *uri = NULL, *value = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  int64_t wait_ms = -1, watchdog_ms = 0, kill_after_ms = DEFAULT_KILL_AFTER_MS;
  int verbose = 0;
  enum { O_VALUE = 0x300, O_WATCHDOG, O_KILL_AFTER };
  static const struct option longopts[] = {
      {"uri", required_argument, NULL, 'u'},
      {"value", required_argument, NULL, O_VALUE},
      {"wait", required_argument, NULL, 'w'},
      {"watchdog", required_argument, NULL, O_WATCHDOG},
      {"kill-after", required_argument, NULL, O_KILL_AFTER},
      {"verbose", no_argument, NULL, 'v'},
      {"help", no_argument, NULL, 'h'},
      CLI_TLS_LONGOPTS,
      CLI_SENTINEL_LONGOPTS,
      {NULL, 0, NULL, 0}};
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "+:u:w:vh", longopts, NULL)) != -1) {
    switch (c) {
    case 'u':
      uri = cli_take_uri(optarg);
      break;
    case O_VALUE:
      value = optarg;
      break;
    case 'w':
    case O_WATCHDOG:
    case O_KILL_AFTER: {
      int64_t ms;
      if (!cli_duration_opt(c == 'w'          ? "-w/--wait"
                            : c == O_WATCHDOG ? "--watchdog"
                                              : "--kill-after",
                            optarg, &ms))
        return CLI_EX_USAGE;
      if (c == 'w')
        wait_ms = ms;
      else if (c == O_WATCHDOG)
        watchdog_ms = ms;
      else
        kill_after_ms = ms;
      break;
    }
    case 'v':
      verbose++;
      break;
    case 'h':
      usage_elect(stdout);
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
    cli_err("elect: NAME is missing");
    usage_elect(stderr);
    return CLI_EX_USAGE;
  }
  const char *name = argv[optind++];
  if (optind < argc && strcmp(argv[optind], "--") == 0)
    optind++;
  if (optind >= argc) {
    cli_err("elect: COMMAND is missing (rlock elect NAME -- COMMAND)");
    return CLI_EX_USAGE;
  }
  char **command = argv + optind;
  char host[256], defval[300];
  if (value == NULL) {
    if (gethostname(host, sizeof(host)) != 0)
      snprintf(host, sizeof(host), "unknown");
    host[sizeof(host) - 1] = '\0';
    snprintf(defval, sizeof(defval), "%s:%ld", host, (long)getpid());
    value = defval;
  }
  if (value[0] == '\0' || strlen(value) > RLOCK_ELECTION_VALUE_MAX) {
    cli_err("elect: --value must be 1..%d bytes", RLOCK_ELECTION_VALUE_MAX);
    return CLI_EX_USAGE;
  }
  if (pipe(g_pipe) != 0 || fcntl(g_pipe[0], F_SETFL, O_NONBLOCK) != 0) {
    cli_err("pipe: %s", strerror(errno));
    return CLI_EX_OSERR;
  }
  catch_signals();
  rlock_client *client = NULL;
  int rc = open_client(uri, &tls, &sentinel, watchdog_ms, &client);
  if (rc != 0)
    return rc;
  rlock_election *e = NULL;
  rc = rlock_election_new(client, name, &e);
  if (rc != 0) {
    cli_err_rlock(rc, "elect");
    rlock_client_free(client);
    return cli_exit_for(rc);
  }
  /* Wait in steps, so that a signal ends the wait. */
  int64_t deadline = wait_ms < 0 ? -1 : cli_now_ms() + wait_ms;
  int64_t term = 0;
  int exit_code;
  for (;;) {
    int64_t step = 500;
    if (deadline >= 0) {
      int64_t left = deadline - cli_now_ms();
      step = left < 0 ? 0 : (left < step ? left : step);
    }
    rc = rlock_election_campaign(e, value, strlen(value), step, on_end, NULL,
                                 &term);
    if (rc != 0 || g_signal != 0 || (deadline >= 0 && cli_now_ms() >= deadline))
      break;
  }
  if (rc == RLOCK_ELECTION_WON && g_signal != 0) {
    (void)rlock_election_resign(e);
    exit_code = 128 + g_signal;
  } else if (rc == RLOCK_ELECTION_WON) {
    if (verbose)
      fprintf(stderr, CLI_PROG ": leader of %s, term %" PRId64 "\n", name,
              term);
    pid_t child = spawn(command, name, term, value);
    if (child < 0) {
      cli_err("fork: %s", strerror(errno));
      (void)rlock_election_resign(e);
      exit_code = CLI_EX_OSERR;
    } else {
      exit_code = lead(e, child, kill_after_ms, verbose, term);
    }
  } else if (rc == RLOCK_ELECTION_NOT_WON) {
    if (g_signal != 0)
      exit_code = 128 + g_signal;
    else {
      cli_err("elect: not leader of %s within the wait", name);
      exit_code = CLI_EXIT_CONFLICT;
    }
  } else {
    cli_err_rlock(rc, "elect");
    exit_code = cli_exit_for(rc);
  }
  rlock_election_free(e);
  rlock_client_free(client);
  return exit_code;
}

/* ---- leader ---- */

static void print_state(const char *name, const rlock_election_state *st,
                        bool json) {
  if (json) {
    fputs("{\"name\":", stdout);
    cli_json_string(stdout, name, strlen(name));
    printf(",\"leader\":%s", st->has_leader ? "true" : "false");
    if (st->has_leader) {
      printf(",\"term\":%" PRId64 ",\"holder\":", st->term);
      cli_json_string(stdout, st->holder, strlen(st->holder));
      fputs(",\"value\":", stdout);
      if (st->has_value)
        cli_json_string(stdout, st->value, st->value_len);
      else
        fputs("null", stdout);
      printf(",\"ttl_ms\":%" PRId64, st->ttl_ms);
    }
    fputs("}\n", stdout);
  } else if (!st->has_leader) {
    printf("%s: no leader\n", name);
  } else {
    printf("%s: term %" PRId64 " holder %s value %s\n", name, st->term,
           st->holder, st->has_value ? st->value : "(none)");
  }
  fflush(stdout);
}

typedef struct follow {
  const char *name;
  bool json;
} follow;

static void on_state(const rlock_election_state *st, void *data) {
  follow *f = data;
  print_state(f->name, st, f->json);
}

static int leader_main(int argc, char **argv) {
  const char *uri = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  bool json = false, follow_mode = false;
  int64_t poll_ms = 0;
  enum { O_JSON = 0x300, O_FOLLOW, O_POLL };
  static const struct option longopts[] = {
      {"uri", required_argument, NULL, 'u'},
      {"json", no_argument, NULL, O_JSON},
      {"follow", no_argument, NULL, O_FOLLOW},
      {"poll", required_argument, NULL, O_POLL},
      {"help", no_argument, NULL, 'h'},
      CLI_TLS_LONGOPTS,
      CLI_SENTINEL_LONGOPTS,
      {NULL, 0, NULL, 0}};
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":u:fh", longopts, NULL)) != -1) {
    switch (c) {
    case 'u':
      uri = cli_take_uri(optarg);
      break;
    case O_JSON:
      json = true;
      break;
    case 'f':
    case O_FOLLOW:
      follow_mode = true;
      break;
    case O_POLL:
      if (!cli_duration_opt("--poll", optarg, &poll_ms))
        return CLI_EX_USAGE;
      if (poll_ms <= 0) {
        cli_err("invalid --poll '%s': it must be above 0", optarg);
        return CLI_EX_USAGE;
      }
      break;
    case 'h':
      usage_elect(stdout);
      return 0;
    default:
      if (cli_tls_option(&tls, c, optarg) ||
          cli_sentinel_option(&sentinel, c, optarg) ||
          cli_uri_file_option(c, optarg))
        break;
      return cli_getopt_error(c, argv);
    }
  }
  if (optind + 1 != argc) {
    cli_err("leader: one NAME is wanted");
    usage_elect(stderr);
    return CLI_EX_USAGE;
  }
  const char *name = argv[optind];
  rlock_client *client = NULL;
  int rc = open_client(uri, &tls, &sentinel, 0, &client);
  if (rc != 0)
    return rc;
  int exit_code = 0;
  if (!follow_mode) {
    rlock_election_state st;
    rlock_election_state_init(&st);
    rc = rlock_client_election_leader(client, name, &st);
    if (rc != 0) {
      cli_err_rlock(rc, "leader");
      exit_code = cli_exit_for(rc);
    } else {
      print_state(name, &st, json);
      exit_code = st.has_leader ? 0 : CLI_EXIT_CONFLICT;
    }
  } else {
    if (pipe(g_pipe) != 0) {
      cli_err("pipe: %s", strerror(errno));
      rlock_client_free(client);
      return CLI_EX_OSERR;
    }
    catch_signals();
    follow f = {name, json};
    rlock_election_observer *o = NULL;
    rc = rlock_election_observer_new(client, name, poll_ms, on_state, &f, &o);
    if (rc != 0) {
      cli_err_rlock(rc, "leader --follow");
      exit_code = cli_exit_for(rc);
    } else {
      char b;
      while (g_signal == 0 && read(g_pipe[0], &b, 1) < 0 && errno == EINTR) {
      }
      rlock_election_observer_free(o);
    }
  }
  rlock_client_free(client);
  return exit_code;
}

bool cli_is_elect(const char *arg) {
  return strcmp(arg, "elect") == 0 || strcmp(arg, "leader") == 0;
}

int cli_elect_main(int argc, char **argv) {
  return strcmp(argv[0], "elect") == 0 ? elect_main(argc, argv)
                                       : leader_main(argc, argv);
}
