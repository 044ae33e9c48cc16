/* The `cli` suite: the rlock command-line tool, run as a real process
 * ($RLOCK_CLI, set by tests/cli/meson.build) against a private
 * redis-server per test (tests/redis/harness.h). Each test checks exit
 * codes, what the tool printed, and what is really in Redis. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tls.h" /* rlock__tls_available */

#define MAX_ARGS 32
#define MAX_PROCS 16
/* How long any single rlock run may take before the test gives up on it. */
#define RUN_BOUND_MS 15000
/* "At once": process start, two connections and one script, on a loaded
 * 2-core machine. Far below every wait the tests would otherwise see. */
#define PROMPT_MS 2000

/* Per-test scratch directory, "/tmp/rlock-cli-test.XXXXXX"; file paths in
 * it fit in PATH_LEN. */
static char g_dir[64];
#define PATH_LEN 192

typedef struct cli_proc {
  pid_t pid;
  bool reaped;
  int exit_code; /* as a shell reports it: status, or 128+signal */
  int64_t started_ms, ended_ms;
  char out_path[PATH_LEN];
  char err_path[PATH_LEN];
} cli_proc;

/* Processes started and not yet reaped, killed at teardown. Pids, not
 * cli_proc pointers: those live on test functions' stacks. */
static pid_t g_pids[MAX_PROCS];
static int g_npids;

static void forget_pid(pid_t pid) {
  for (int i = 0; i < g_npids; i++) {
    if (g_pids[i] == pid) {
      g_pids[i] = g_pids[--g_npids];
      return;
    }
  }
}

/* ---- fixture ---- */

static void cli_setup(void) {
  rt_server_start();
  snprintf(g_dir, sizeof g_dir, "/tmp/rlock-cli-test.XXXXXX");
  cr_assert(mkdtemp(g_dir) != NULL, "mkdtemp: %s", strerror(errno));
  /* Every rlock run below uses the test's server unless it says -u. */
  cr_assert(setenv("REDIS_URL", rt_uri(), 1) == 0);
  cr_assert(getenv("RLOCK_CLI") != NULL,
            "RLOCK_CLI is not set (run through meson test)");
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  struct dirent *de;
  char path[PATH_LEN + 256];
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static void sentinel_stop(void);

static void cli_teardown(void) {
  sentinel_stop();
  /* Each rlock leads its own process group, which its COMMAND is in too:
   * a failed test leaves neither behind. */
  for (int i = 0; i < g_npids; i++) {
    if (kill(-g_pids[i], SIGKILL) != 0)
      kill(g_pids[i], SIGKILL);
    waitpid(g_pids[i], NULL, 0);
  }
  g_npids = 0;
  if (g_dir[0] != '\0')
    remove_tree(g_dir);
  rt_server_stop();
}

TestSuite(cli, .init = cli_setup, .fini = cli_teardown, .timeout = 90);

/* ---- files ---- */

static void path_in(char *buf, size_t n, const char *file) {
  snprintf(buf, n, "%s/%s", g_dir, file);
}

/* Whole file as a malloc'd string ("" if missing). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  cr_assert(buf != NULL);
  if (f != NULL) {
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
      len += n;
      if (len + 1 == cap) {
        cap *= 2;
        buf = realloc(buf, cap);
        cr_assert(buf != NULL);
      }
    }
    fclose(f);
  }
  buf[len] = '\0';
  return buf;
}

static char *slurp_in(const char *file) {
  char path[PATH_LEN];
  path_in(path, sizeof path, file);
  return slurp(path);
}

static bool exists_in(const char *file) {
  char path[PATH_LEN];
  path_in(path, sizeof path, file);
  return access(path, F_OK) == 0;
}

static void touch_in(const char *file) {
  char path[PATH_LEN];
  path_in(path, sizeof path, file);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  cr_assert(fd >= 0, "create %s: %s", path, strerror(errno));
  close(fd);
}

/* The first line of a file, without its newline. */
static char *first_line_in(const char *file) {
  char *s = slurp_in(file);
  s[strcspn(s, "\n")] = '\0';
  return s;
}

/* ---- processes ---- */

/* Starts $RLOCK_CLI with the NULL-terminated args, in g_dir, stdout and
 * stderr to files, stdin /dev/null, default signal handling, no
 * descriptors beyond 0-2 (so the tool's own descriptor handling is what
 * the tests see), in a process group of its own (for the teardown). */
static void cli_start(cli_proc *p, const char *const *args) {
  cr_assert(g_npids < MAX_PROCS);
  memset(p, 0, sizeof *p);
  static unsigned seq;
  seq++;
  snprintf(p->out_path, sizeof p->out_path, "%s/out.%u", g_dir, seq);
  snprintf(p->err_path, sizeof p->err_path, "%s/err.%u", g_dir, seq);
  const char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = getenv("RLOCK_CLI");
  for (int i = 0; args[i] != NULL; i++) {
    cr_assert(argc < MAX_ARGS);
    argv[argc++] = args[i];
  }
  argv[argc] = NULL;
  pid_t parent = getpid();
  p->started_ms = rt_now_ms();
  pid_t pid = fork();
  cr_assert(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(120);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
                        SIGUSR2, SIGPIPE, SIGCHLD};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
      signal(sigs[i], SIG_DFL);
    int in = open("/dev/null", O_RDONLY);
    int out = open(p->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(p->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0 || chdir(g_dir) != 0)
      _exit(121);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    for (int fd = 3; fd < 1024; fd++)
      close(fd);
    execv(argv[0], (char *const *)argv);
    _exit(122);
  }
  setpgid(pid, pid); /* also here: the teardown may come before the child */
  p->pid = pid;
  g_pids[g_npids++] = pid;
}

static bool cli_poll(cli_proc *p) {
  if (p->reaped)
    return true;
  int status;
  pid_t r = waitpid(p->pid, &status, WNOHANG);
  if (r != p->pid)
    return false;
  p->reaped = true;
  p->ended_ms = rt_now_ms();
  forget_pid(p->pid);
  p->exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                   : 128 + WTERMSIG(status);
  return true;
}

static bool cli_poll_cond(void *arg) { return cli_poll(arg); }

/* Waits for the process to end; returns its exit code. */
static int cli_wait(cli_proc *p, int64_t bound_ms) {
  bool ended = rt_poll_until(cli_poll_cond, p, bound_ms);
  if (!ended) {
    char *err = slurp(p->err_path);
    cr_assert_fail("rlock (pid %d) still runs after %" PRId64
                   " ms; stderr: %s",
                   (int)p->pid, bound_ms, err);
  }
  cr_assert(p->exit_code != 120 && p->exit_code != 121 &&
                p->exit_code != 122,
            "could not start rlock (code %d)", p->exit_code);
  return p->exit_code;
}

static int64_t cli_elapsed(const cli_proc *p) {
  return p->ended_ms - p->started_ms;
}

static bool cli_running(cli_proc *p) { return !cli_poll(p); }

/* Runs to completion: returns the exit code. */
static int cli_run(cli_proc *p, const char *const *args) {
  cli_start(p, args);
  return cli_wait(p, RUN_BOUND_MS);
}

static char *cli_out(const cli_proc *p) { return slurp(p->out_path); }
static char *cli_err(const cli_proc *p) { return slurp(p->err_path); }

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- conditions ---- */

static bool key_exists(void *key) { return rt_exists(key) == 1; }
static bool key_gone(void *key) { return rt_exists(key) == 0; }
static bool file_exists(void *file) { return exists_in(file); }

typedef struct numsub_arg {
  const char *channel;
  long long want;
} numsub_arg;

static bool numsub_is(void *arg) {
  numsub_arg *a = arg;
  return rt_numsub(a->channel) == a->want;
}

static void wait_numsub(const char *channel, long long want) {
  numsub_arg a = {channel, want};
  rt_wait_until_what(numsub_is, &a, 10000, channel);
}

typedef struct contains_arg {
  const char *path;
  const char *needle;
} contains_arg;

static bool file_contains(void *arg) {
  contains_arg *a = arg;
  char *s = slurp(a->path);
  bool found = strstr(s, a->needle) != NULL;
  free(s);
  return found;
}

/* An owner (hash field) as Redisson writes it: <uuid v4>:<thread id>. */
static bool is_owner(const char *s) {
  regex_t re;
  int rc = regcomp(&re,
                   "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                   "[0-9a-f]{12}:[0-9]+$",
                   REG_EXTENDED | REG_NOSUB);
  cr_assert_eq(rc, 0);
  bool ok = regexec(&re, s, 0, NULL, 0) == 0;
  regfree(&re);
  return ok;
}

/* A lock held by the test itself, through the library. */
typedef struct held {
  rlock_client *client;
  rlock *lock;
  char owner[96];
} held;

static void hold(held *h, const char *name) {
  h->client = rt_client();
  h->lock = rt_lock(h->client, name);
  int rc = rlock_lock(h->lock, -1);
  cr_assert_eq(rc, 0, "rlock_lock: %s", rlock_err_name(rc));
  rt_owner(h->owner, sizeof h->owner, h->client, rlock_thread_id());
}

static void unhold(held *h) {
  if (h->lock != NULL) {
    int rc = rlock_unlock(h->lock);
    cr_assert_eq(rc, 0, "rlock_unlock: %d", rc);
  }
  rlock_free(h->lock);
  rlock_client_free(h->client);
  h->lock = NULL;
  h->client = NULL;
}

/* ---- help, version, usage ---- */

Test(cli, version_prints_name_and_version) {
  const char *flags[] = {"--version", "-V"};
  for (int i = 0; i < 2; i++) {
    cli_proc p;
    cr_assert_eq(cli_run(&p, ARGS(flags[i])), 0);
    char *out = cli_out(&p), *err = cli_err(&p);
    cr_assert_str_eq(out, "rlock " RLOCK_VERSION_STRING "\n");
    cr_assert_str_eq(err, "");
    free(out);
    free(err);
  }
}

/* Issue 26: --help was 172 lines; it is now a short usage that sends the
 * reader to the manual page, for the lock command and the subcommands. */
Test(cli, help_is_short_and_names_the_man_page) {
  const char *const *cases[] = {ARGS("--help"), ARGS("-h"),
                                ARGS("status", "--help"),
                                ARGS("unlock", "--help")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    cr_assert_eq(cli_run(&p, cases[i]), 0, "case %zu", i);
    char *out = cli_out(&p), *err = cli_err(&p);
    int lines = 0;
    for (const char *c = out; *c != '\0'; c++)
      lines += *c == '\n';
    cr_assert(lines >= 10 && lines <= 40, "case %zu: %d lines", i, lines);
    cr_assert(strncmp(out, "Usage:\n", 7) == 0, "case %zu: %s", i, out);
    cr_assert(strstr(out, "man rlock") != NULL, "case %zu: %s", i, out);
    cr_assert(strstr(out, "status") != NULL && strstr(out, "unlock") != NULL);
    cr_assert_str_eq(err, "");
    free(out);
    free(err);
  }
}

/* The manual page's source with scdoc's markup taken out: `*` (bold),
 * backslashes, and `_` (underline) where it is not inside a word, so that
 * "*-u*, *--uri* _URI_" reads "-u, --uri URI" and RLOCK_OWNER stays. */
static char *man_text(void) {
  const char *src = getenv("RLOCK_MAN_SRC");
  cr_assert(src != NULL, "RLOCK_MAN_SRC is not set (run through meson test)");
  char *s = slurp(src);
  cr_assert(s[0] != '\0', "cannot read %s", src);
  size_t k = 0;
  for (size_t i = 0; s[i] != '\0'; i++) {
    char c = s[i];
    if (c == '*' || c == '\\')
      continue;
    if (c == '_' && !(i > 0 && isalnum((unsigned char)s[i - 1]) &&
                      isalnum((unsigned char)s[i + 1])))
      continue;
    s[k++] = c;
  }
  s[k] = '\0';
  return s;
}

/* What --help used to list, every option and exit status, is in rlock(1)
 * (tools/rlock.1.scd), with the sections and examples issue 26 asks for. */
Test(cli, man_page_lists_every_option_and_exit_code) {
  char *man = man_text();
  const char *must[] = {
      "# SYNOPSIS",     "-u, --uri",        "-n, --nonblock",
      "-w, --wait",     "--timeout",        "-E, --conflict-exit-code",
      "-l, --lease",    "--watchdog",       "--on-lost=warn|kill",
      "--kill-after",   "-c, --command",    "-v, --verbose",
      "-h, --help",     "-V, --version",    "rlock status",
      "--json",         "unlock --force",   "--any-type",
      "REDIS_URL",      "RLOCK_OWNER",      "# EXIT STATUS",
      "\n128+N\n",      "\n1\n",            "\n64\n",
      "\n69\n",         "\n70\n",           "\n71\n",
      "\n75\n",         "\n79\n",           "\n126\n",
      "\n127\n",        "rediss://",        "--tls-ca-file",
      "--tls-ca-dir",   "--tls-cert",       "--tls-key",
      "--tls-server-name", "--tls-insecure", "TLS failed",
      "-s, --shared",   "-x, --exclusive",  "--fair",
      "--fenced",       "RLOCK_TOKEN",      "another kind of lock",
      "redis+sentinel://", "redis+cluster://", "rediss+sentinel://",
      "rediss+cluster://", "--sentinel-user", "--sentinel-password-file",
      "--no-replica-sync", "--replica-sync-timeout", "no replica confirmed",
      "CLUSTERDOWN",
      /* issue 24 and 26 */
      "--orphan-ok", "--permits N", "1 to 2147483647", "RLOCK_NAME",
      /* issue 29 */
      "--take K",
      "# NAME", "# DESCRIPTION", "# ENVIRONMENT", "# EXAMPLES", "# SEE ALSO",
      "A cron job", "cleanup -- /usr/local/bin/cleanup", "[Service]", "ExecStart=/usr/bin/rlock",
      "rlock --permits 3", "--token \"$RLOCK_TOKEN\"",
      "rlock -u redis://redis.internal status",
      /* issue 28 */
      "rlock ls", "--limit", "--watch", "rlock: ls: skipped",
      /* issue 29 */
      "-m, --multi", "--no-reenter",
      /* issue 37 */
      "rlock fence", "fence check", "fence set", "# FENCING",
      /* issue 35 */
      "--uri-file", "a number of seconds as in", "is a busy lock",
      "replaced by stars",
  };
  for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
    cr_expect(strstr(man, must[i]) != NULL, "rlock(1) lacks \"%s\"", must[i]);
  free(man);
  /* Built by meson when scdoc is found: troff for man(1). */
  const char *page = getenv("RLOCK_MAN_PAGE");
  if (page != NULL) {
    char *troff = slurp(page);
    cr_assert(strstr(troff, ".TH \"rlock\" \"1\"") != NULL,
              "%s is not rlock(1) in troff", page);
    cr_assert(strstr(troff, ".SH EXIT STATUS") != NULL);
    free(troff);
  }
}

Test(cli, usage_errors_exit_64_with_one_message) {
  char key[64];
  rt_key(key, sizeof key, "cli:usage");
  const char *const *cases[] = {
      ARGS("--no-such-option"),
      ARGS("-Z", key, "--", "touch", "ran"), /* (-x is --exclusive) */
      ARGS("-w"),
      ARGS("-w", "soon", key, "--", "touch", "ran"),
      ARGS("-w", "-5", key, "--", "touch", "ran"),
      ARGS("-E", "256", key, "--", "touch", "ran"),
      ARGS("-l", "0", key, "--", "touch", "ran"),
      ARGS("--on-lost=maybe", key, "--", "touch", "ran"),
      ARGS("--watchdog", "100ms", key, "--", "touch", "ran"),
      /* durations: a bare number is seconds; bad forms, zero-rounding
       * and values over the library's limit are refused (issue 35) */
      ARGS("-w", "5x", key, "--", "touch", "ran"),
      ARGS("-w", "-1", key, "--", "touch", "ran"),
      ARGS("-w", "1e99", key, "--", "touch", "ran"),
      ARGS("-w", "0x10", key, "--", "touch", "ran"),
      ARGS("-w", "0.0001", key, "--", "touch", "ran"),
      ARGS("-w", "0.4ms", key, "--", "touch", "ran"),
      ARGS("-l", "0.0004", key, "--", "touch", "ran"),
      ARGS("-l", "25d", key, "--", "touch", "ran"),
      ARGS("-l", "2147484", key, "--", "touch", "ran"),
      ARGS("--watchdog", "0.2", key, "--", "touch", "ran"),
      ARGS("--kill-after", "1h1m", key, "--", "touch", "ran"),
      ARGS("status", "--watch=0.05", key),
      ARGS("--nonblock=1", key, "--", "touch", "ran"),
      ARGS(key),
      ARGS(key, "--"),
      ARGS(key, "-c"),
      ARGS(key, "-c", "touch ran", "extra"),
      ARGS("-u", "http://127.0.0.1:1", key, "--", "touch", "ran"),
      ARGS("-u", "redis://127.0.0.1:99999", key, "--", "touch", "ran"),
      ARGS("status"),
      ARGS("status", "--bogus", key),
      ARGS("unlock", key),
      ARGS("unlock", "--force"),
      /* TLS options need rediss:// ($REDIS_URL is the plain test server) */
      ARGS("--tls-insecure", key, "--", "touch", "ran"),
      ARGS("--tls-ca-file", "/nonexistent.pem", key, "--", "touch", "ran"),
      ARGS("status", "--tls-server-name", "localhost", key),
      ARGS("unlock", "--force", "--tls-ca-dir", "/", key),
      ARGS("status", "--tls-ca-file"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    int code = cli_run(&p, cases[i]);
    char *err = cli_err(&p), *out = cli_out(&p);
    cr_expect_eq(code, 64, "case %zu (%s ...): exit %d, stderr: %s", i,
                 cases[i][0], code, err);
    cr_expect(strncmp(err, "rlock: ", 7) == 0,
              "case %zu: stderr does not start with 'rlock: ': %s", i, err);
    /* one message line, plus at most the "Try 'rlock --help'" hint */
    char *second = strchr(err, '\n');
    cr_expect(second != NULL, "case %zu: no newline", i);
    if (second != NULL && second[1] != '\0')
      cr_expect(strncmp(second + 1, "Try 'rlock --help'", 18) == 0,
                "case %zu: more than one message: %s", i, err);
    cr_expect_str_eq(out, "", "case %zu: stdout: %s", i, out);
    free(err);
    free(out);
  }
  cr_assert(!exists_in("ran"), "a command ran despite a usage error");
  cr_assert_eq(rt_exists(key), 0);
}

/* A duration's message names the option and the accepted forms. */
Test(cli, bad_durations_name_the_option_and_the_forms) {
  char key[64];
  rt_key(key, sizeof key, "cli:dur");
  struct {
    const char *const *args;
    const char *says;
  } cases[] = {
      {ARGS("-w", "5x", key, "--", "true"), "invalid -w/--wait '5x' (a "
                                            "duration: a number of seconds "
                                            "(5, 0.5) or a number with a unit "
                                            "(250ms, 1.5s, 2m, 1h))"},
      {ARGS("--wait=0.0001", key, "--", "true"),
       "invalid -w/--wait '0.0001': rounds to 0 ms"},
      {ARGS("-l", "1e99", key, "--", "true"), "invalid -l/--lease '1e99' ("},
      {ARGS("-l", "0", key, "--", "true"),
       "invalid -l/--lease '0': the lease must be longer than 0"},
      {ARGS("-l", "30d", key, "--", "true"), "invalid -l/--lease '30d' ("},
      {ARGS("-l", "600h", key, "--", "true"),
       "invalid -l/--lease '600h': at most 24 days"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    cr_expect_eq(cli_run(&p, cases[i].args), 64, "case %zu", i);
    char *err = cli_err(&p);
    cr_expect(strstr(err, cases[i].says) != NULL, "case %zu: %s", i, err);
    free(err);
  }
  /* -l 2: a lease of 2 s (it was 2 ms) */
  cli_proc p;
  cli_start(&p, ARGS("-l", "2", key, "--", "sh", "-c",
                     "touch started; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "started", 10000, "COMMAND started");
  long long ttl = rt_pttl(key);
  cr_assert(ttl > 1000 && ttl <= 2000, "-l 2: TTL %lld", ttl);
  touch_in("go");
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
}

/* ---- exit status ---- */

Test(cli, exit_status_of_command_passes_through) {
  char key[64];
  rt_key(key, sizeof key, "cli:status");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "true")), 0);
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "sh", "-c", "exit 7")), 7);
  cr_assert_eq(cli_run(&p, ARGS(key, "sh", "-c", "exit 200")), 200,
               "the -- before COMMAND is optional");
  cr_assert_eq(cli_run(&p, ARGS(key, "-c", "exit 42")), 42);
  /* COMMAND's stdout is COMMAND's: the tool adds nothing to it */
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "echo", "hello")), 0);
  char *out = cli_out(&p), *err = cli_err(&p);
  cr_assert_str_eq(out, "hello\n");
  cr_assert_str_eq(err, "");
  free(out);
  free(err);
  cr_assert_eq(rt_exists(key), 0, "lock left behind");
}

Test(cli, command_killed_by_signal_gives_128_plus_signal) {
  char key[64];
  rt_key(key, sizeof key, "cli:sig");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS(key, "-c", "kill -TERM $$")), 128 + SIGTERM);
  cr_assert_eq(cli_run(&p, ARGS(key, "-c", "kill -KILL $$")), 128 + SIGKILL);
  cr_assert_eq(cli_run(&p, ARGS(key, "-c", "kill -SEGV $$")), 128 + SIGSEGV);
  cr_assert_eq(rt_exists(key), 0, "lock left behind");
}

Test(cli, command_not_found_127_not_executable_126) {
  char key[64];
  rt_key(key, sizeof key, "cli:exec");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "rlock-no-such-command-here")),
               127);
  char *err = cli_err(&p);
  cr_assert(strncmp(err, "rlock: cannot run 'rlock-no-such-command-here'",
                    46) == 0,
            "stderr: %s", err);
  cr_assert(strstr(err, "No such file") != NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "/nonexistent/dir/cmd")), 127);

  touch_in("not-executable"); /* mode 0644 */
  char path[PATH_LEN];
  path_in(path, sizeof path, "not-executable");
  cr_assert_eq(cli_run(&p, ARGS(key, "--", path)), 126);
  err = cli_err(&p);
  cr_assert(strstr(err, "Permission denied") != NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(rt_exists(key), 0, "lock left behind after exec failure");
}

/* ---- the lock itself ---- */

Test(cli, lock_is_held_while_command_runs_and_gone_after) {
  char key[64];
  rt_key(key, sizeof key, "cli:held");
  cli_proc p;
  cli_start(&p, ARGS(key, "--", "sh", "-c",
                     "echo \"$RLOCK_NAME\" > name;"
                     " echo \"$RLOCK_OWNER\" > owner.tmp && mv owner.tmp owner;"
                     " while [ ! -e go ]; do sleep 0.02; done; exit 3"));
  rt_wait_until_what(file_exists, "owner", 10000, "COMMAND started");
  char *owner = first_line_in("owner");
  char *name = first_line_in("name");
  cr_assert_str_eq(name, key, "RLOCK_NAME");
  cr_assert(is_owner(owner), "RLOCK_OWNER '%s' is not <uuid>:<thread-id>",
            owner);

  /* Exactly one field, the owner, count 1, with a watchdog TTL. */
  cr_assert_eq(rt_exists(key), 1, "COMMAND runs but the lock is not held");
  char *type = rt_type(key);
  cr_assert_str_eq(type, "hash");
  cr_assert_eq(rt_hlen(key), 1);
  char *count = rt_hget(key, owner);
  cr_assert(count != NULL, "field %s missing", owner);
  cr_assert_str_eq(count, "1");
  long long ttl = rt_pttl(key);
  cr_assert(ttl > 20000 && ttl <= 30000, "watchdog TTL %lld", ttl);
  cr_assert(cli_running(&p));

  touch_in("go");
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 3);
  /* rlock exits only after the release: nothing left at that moment */
  cr_assert_eq(rt_exists(key), 0, "lock still held after rlock exited");
  free(owner);
  free(name);
  free(type);
  free(count);
}

Test(cli, lease_sets_the_ttl_and_is_not_renewed) {
  char key[64];
  rt_key(key, sizeof key, "cli:lease");
  cli_proc p;
  cli_start(&p, ARGS("-l", "20s", key, "--", "sh", "-c",
                     "touch started; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "started", 10000, "COMMAND started");
  long long ttl = rt_pttl(key);
  cr_assert(ttl > 15000 && ttl <= 20000, "lease TTL %lld", ttl);
  touch_in("go");
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  char *err = cli_err(&p);
  cr_assert_str_eq(err, "", "no warning when COMMAND ends within the lease");
  free(err);
  cr_assert_eq(rt_exists(key), 0);
}

Test(cli, fds_of_rlock_are_not_inherited_by_command) {
  char key[64];
  rt_key(key, sizeof key, "cli:fds");
  cli_proc p;
  /* COMMAND lists its descriptors: 0-2 and whatever ls opens itself,
   * but none of rlock's Redis sockets or pipes. */
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "sh", "-c",
                                "ls -l /proc/$$/fd > fds")),
               0);
  char *fds = slurp_in("fds");
  cr_assert(strstr(fds, "socket:") == NULL, "COMMAND inherited a socket:\n%s",
            fds);
  cr_assert(strstr(fds, "pipe:") == NULL, "COMMAND inherited a pipe:\n%s",
            fds);
  free(fds);
}

Test(cli, release_publishes_the_unlock_message_redisson_waits_for) {
  /* A Java Redisson waiter sleeps on the lock channel until it hears "0":
   * listen there like one and see the tool's release say it. */
  char key[64], channel[128];
  rt_key(key, sizeof key, "cli:pub");
  rt_lock_channel(channel, sizeof channel, key);
  redisContext *sub = rt_redis_new(5000);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel);
  cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "true")), 0);
  void *msg = NULL;
  cr_assert_eq(redisGetReply(sub, &msg), REDIS_OK, "no unlock message");
  r = msg;
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  cr_assert_str_eq(r->element[0]->str, "message");
  cr_assert_str_eq(r->element[1]->str, channel);
  cr_assert_str_eq(r->element[2]->str, "0");
  freeReplyObject(r);
  redisFree(sub);
}

/* ---- busy locks: -n, -w, -E ---- */

Test(cli, nonblock_when_busy_exits_1_at_once) {
  char key[64];
  rt_key(key, sizeof key, "cli:nb");
  held h;
  hold(&h, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-n", key, "--", "touch", "ran")), 1);
  cr_assert(cli_elapsed(&p) < PROMPT_MS, "-n took %" PRId64 " ms",
            cli_elapsed(&p));
  char *err = cli_err(&p);
  cr_assert_str_eq(err, "", "busy is not an error: silent, like flock");
  free(err);
  cr_assert(!exists_in("ran"), "COMMAND ran without the lock");
  /* -v says why; the holder is untouched */
  cr_assert_eq(cli_run(&p, ARGS("-v", "--nonblock", key, "--", "true")), 1);
  err = cli_err(&p);
  cr_assert(strstr(err, "is busy") != NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(rt_hlen(key), 1);
  char *count = rt_hget(key, h.owner);
  cr_assert(count != NULL && strcmp(count, "1") == 0);
  free(count);
  unhold(&h);
}

/* Lines of text matching the extended regex `re`. */
static int count_matching(const char *text, const char *re) {
  regex_t rx;
  cr_assert_eq(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE | REG_NOSUB), 0,
               "regex %s", re);
  int n = 0;
  for (const char *line = text; *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
    char *copy = strndup(line, len);
    cr_assert(copy != NULL);
    n += regexec(&rx, copy, 0, NULL, 0) == 0;
    free(copy);
    line += len + (end != NULL);
  }
  regfree(&rx);
  return n;
}

/* -v also prints the client's diagnostics, timestamped (ISO-8601 UTC, ms):
 * both connections killed while COMMAND runs give one "lost" line each,
 * with the cause, and one "reconnected" line each; -v leaves DEBUG out,
 * -vv prints it (the probes at connect). */
Test(cli, verbose_reports_a_killed_connection_and_its_reconnect) {
  char key[64];
  rt_key(key, sizeof key, "cli:diag");
  cli_proc p;
  cli_start(&p, ARGS("-v", key, "--", "sh", "-c",
                     "touch started; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "started", 10000, "COMMAND started");
  /* rlock's two connections (neither is subscribed): every normal
   * connection but this test's own. */
  redisReply *r = rt_cmd("CLIENT KILL TYPE normal SKIPME yes");
  cr_assert(r->type == REDIS_REPLY_INTEGER && r->integer == 2,
            "killed %lld connections", r->type == REDIS_REPLY_INTEGER
                                           ? (long long)r->integer : -1LL);
  freeReplyObject(r);
  char want[160];
  snprintf(want, sizeof want, "reconnected to 127.0.0.1:%d (pub/sub)",
           rt_port());
  contains_arg wait_args = {p.err_path, want};
  rt_wait_until_what(file_contains, &wait_args, 5000, "the reconnect line");
  snprintf(want, sizeof want, "reconnected to 127.0.0.1:%d (commands)",
           rt_port());
  rt_wait_until_what(file_contains, &wait_args, 5000, "the reconnect line");
  touch_in("go");
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  char *err = cli_err(&p);
  const char *stamp = "^rlock: [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
                      "[0-9]{2}\\.[0-9]{3}Z ";
  char re[512];
  for (int i = 0; i < 2; i++) {
    const char *role = i == 0 ? "commands" : "pub/sub";
    snprintf(re, sizeof re,
             "%sWARN lost connection to 127\\.0\\.0\\.1:%d \\(%s\\): "
             "RLOCK_ECONN: .+; reconnecting in [0-9]+ ms$",
             stamp, rt_port(), role);
    cr_assert_eq(count_matching(err, re), 1, "%s in stderr:\n%s", re, err);
    snprintf(re, sizeof re,
             "%sINFO reconnected to 127\\.0\\.0\\.1:%d \\(%s\\), attempt 1$",
             stamp, rt_port(), role);
    cr_assert_eq(count_matching(err, re), 1, "%s in stderr:\n%s", re, err);
    snprintf(re, sizeof re, "%sINFO connected to 127\\.0\\.0\\.1:%d \\(%s\\)$",
             stamp, rt_port(), role);
    cr_assert_eq(count_matching(err, re), 1, "%s in stderr:\n%s", re, err);
  }
  /* The -v lines of before are still there; DEBUG is not. */
  cr_assert_eq(count_matching(err, "^rlock: acquired '"), 1, "%s", err);
  cr_assert_eq(count_matching(err, "^rlock: released '"), 1, "%s", err);
  cr_assert_eq(count_matching(err, " DEBUG "), 0, "%s", err);
  cr_assert_eq(count_matching(err, " (WARN|ERROR) "), 2, "%s", err);
  free(err);

  cr_assert_eq(cli_run(&p, ARGS("-vv", key, "--", "true")), 0);
  err = cli_err(&p);
  snprintf(re, sizeof re, "%sDEBUG probes on 127\\.0\\.0\\.1:%d: ", stamp,
           rt_port());
  cr_assert_eq(count_matching(err, re), 1, "%s in stderr:\n%s", re, err);
  free(err);
  /* Without -v: nothing at all. */
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "true")), 0);
  err = cli_err(&p);
  cr_assert_str_eq(err, "");
  free(err);
}

Test(cli, wait_timeout_exits_1_after_the_wait) {
  char key[64];
  rt_key(key, sizeof key, "cli:wait");
  held h;
  hold(&h, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-w", "800ms", key, "--", "touch", "ran")), 1);
  int64_t took = cli_elapsed(&p);
  cr_assert(took >= 800 && took < 800 + PROMPT_MS,
            "-w 800 gave up after %" PRId64 " ms", took);
  cr_assert(!exists_in("ran"));
  /* units: 0.6s */
  cr_assert_eq(cli_run(&p, ARGS("--timeout=0.6s", key, "--", "touch", "ran")),
               1);
  took = cli_elapsed(&p);
  cr_assert(took >= 600 && took < 600 + PROMPT_MS, "0.6s: %" PRId64 " ms",
            took);
  cr_assert(!exists_in("ran"));
  /* a bare number is seconds, as flock's -w (issue 35: it was ms) */
  cr_assert_eq(cli_run(&p, ARGS("-w", "1.2", key, "--", "touch", "ran")), 1);
  took = cli_elapsed(&p);
  cr_assert(took >= 1200 && took < 1200 + PROMPT_MS, "-w 1.2: %" PRId64 " ms",
            took);
  cr_assert(!exists_in("ran"));
  /* the waiter unsubscribed when it gave up */
  char channel[128];
  rt_lock_channel(channel, sizeof channel, key);
  cr_assert_eq(rt_numsub(channel), 0);
  unhold(&h);
}

Test(cli, conflict_exit_code_changes_1) {
  char key[64];
  rt_key(key, sizeof key, "cli:E");
  held h;
  hold(&h, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-E", "42", "-n", key, "--", "true")), 42);
  cr_assert_eq(cli_run(&p, ARGS("--conflict-exit-code=7", "-w", "200ms", key,
                                "--", "true")),
               7);
  /* -E only concerns conflicts: COMMAND's status is still its own */
  unhold(&h);
  cr_assert_eq(cli_run(&p, ARGS("-E", "42", "-n", key, "-c", "exit 3")), 3);
}

Test(cli, waiter_runs_as_soon_as_the_lock_is_released) {
  char key[64], channel[128];
  rt_key(key, sizeof key, "cli:wake");
  rt_lock_channel(channel, sizeof channel, key);
  held h;
  hold(&h, key);
  cli_proc p;
  cli_start(&p, ARGS(key, "--", "touch", "ran")); /* no -w: waits forever */
  wait_numsub(channel, 1);
  rt_sleep_ms(300); /* a waiter that did not wait would have run by now */
  cr_assert(cli_running(&p));
  cr_assert(!exists_in("ran"), "COMMAND ran while the lock was held");
  int64_t released = rt_now_ms();
  unhold(&h);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  /* woken by the unlock message, not by the 30 s TTL running out */
  cr_assert(p.ended_ms - released < PROMPT_MS,
            "waiter ran %" PRId64 " ms after the release",
            p.ended_ms - released);
  cr_assert(exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rt_numsub(channel), 0);
}

/* ---- signals ---- */

Test(cli, signals_are_forwarded_and_the_lock_released) {
  const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1};
  const char *names[] = {"TERM", "INT", "HUP", "QUIT", "USR1"};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    char key[64], script[256], got[32];
    rt_key(key, sizeof key, "cli:fwd");
    snprintf(got, sizeof got, "got-%s", names[i]);
    /* COMMAND says which signal it got, then exits 3: the tool's status
     * is then COMMAND's own, proving the signal reached COMMAND. */
    snprintf(script, sizeof script,
             "trap 'echo %s > %s; exit 3' %s; touch ready-%s;"
             " while :; do sleep 0.02; done",
             names[i], got, names[i], names[i]);
    char ready[32];
    snprintf(ready, sizeof ready, "ready-%s", names[i]);
    cli_proc p;
    cli_start(&p, ARGS(key, "--", "sh", "-c", script));
    rt_wait_until_what(file_exists, ready, 10000, "COMMAND started");
    cr_assert_eq(rt_exists(key), 1);
    cr_assert_eq(kill(p.pid, sigs[i]), 0);
    cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 3, "SIG%s", names[i]);
    char *line = first_line_in(got);
    cr_assert_str_eq(line, names[i], "COMMAND did not get SIG%s", names[i]);
    free(line);
    cr_assert_eq(rt_exists(key), 0, "lock left after SIG%s", names[i]);
  }
}

Test(cli, sigterm_kills_command_and_rlock_exits_143) {
  char key[64];
  rt_key(key, sizeof key, "cli:term");
  cli_proc p;
  cli_start(&p, ARGS(key, "--", "sh", "-c", "touch ready; exec sleep 30"));
  rt_wait_until_what(file_exists, "ready", 10000, "COMMAND started");
  kill(p.pid, SIGTERM);
  cr_assert_eq(cli_wait(&p, PROMPT_MS + 1000), 128 + SIGTERM);
  cr_assert_eq(rt_exists(key), 0);
}

Test(cli, lock_released_when_command_is_sigkilled) {
  char key[64], channel[128];
  rt_key(key, sizeof key, "cli:sigkill");
  rt_lock_channel(channel, sizeof channel, key);
  cli_proc p, waiter;
  cli_start(&p, ARGS(key, "--", "sh", "-c",
                     "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 30"));
  rt_wait_until_what(file_exists, "pid", 10000, "COMMAND started");
  cli_start(&waiter, ARGS(key, "--", "touch", "waiter-ran"));
  wait_numsub(channel, 1);
  char *pid_text = first_line_in("pid");
  pid_t child = (pid_t)atoi(pid_text);
  free(pid_text);
  cr_assert(child > 1);
  int64_t killed = rt_now_ms();
  cr_assert_eq(kill(child, SIGKILL), 0);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 128 + SIGKILL);
  /* released at once, and the waiter got it */
  cr_assert_eq(cli_wait(&waiter, RUN_BOUND_MS), 0);
  cr_assert(waiter.ended_ms - killed < PROMPT_MS,
            "waiter ran %" PRId64 " ms after the kill",
            waiter.ended_ms - killed);
  cr_assert(exists_in("waiter-ran"));
  cr_assert_eq(rt_exists(key), 0);
}

Test(cli, signal_while_waiting_gives_up_without_running) {
  char key[64], channel[128];
  rt_key(key, sizeof key, "cli:intr");
  rt_lock_channel(channel, sizeof channel, key);
  held h;
  hold(&h, key);
  cli_proc p;
  cli_start(&p, ARGS(key, "--", "touch", "ran"));
  wait_numsub(channel, 1);
  int64_t sent = rt_now_ms();
  kill(p.pid, SIGINT);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 128 + SIGINT);
  cr_assert(p.ended_ms - sent < PROMPT_MS, "took %" PRId64 " ms",
            p.ended_ms - sent);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_numsub(channel), 0, "waiter still subscribed");
  /* the holder was not disturbed */
  char *count = rt_hget(key, h.owner);
  cr_assert(count != NULL && strcmp(count, "1") == 0);
  free(count);
  unhold(&h);
}

/* Gone, or a zombie waiting for its (new) parent to reap it. */
static bool process_ended(void *arg) {
  pid_t pid = *(pid_t *)arg;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  char *stat = slurp(path);
  const char *state = strrchr(stat, ')');
  bool ended = stat[0] == '\0' || (state != NULL && state[1] == ' ' &&
                                   (state[2] == 'Z' || state[2] == 'X'));
  free(stat);
  return ended;
}

/* --orphan-ok (issue 24): in warn mode COMMAND outlives rlock only when
 * asked to. */
Test(cli, rlock_sigkilled_lock_expires_and_kill_mode_stops_command) {
  for (int kill_mode = 0; kill_mode <= 1; kill_mode++) {
    char key[64];
    rt_key(key, sizeof key, "cli:rlockkilled");
    cli_proc p;
    if (kill_mode)
      cli_start(&p, ARGS("--watchdog", "900ms", "--on-lost=kill", key, "--",
                         "sh", "-c",
                         "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 30"));
    else
      cli_start(&p, ARGS("--watchdog", "900ms", "--on-lost=warn", "--orphan-ok",
                         key, "--", "sh", "-c",
                         "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 30"));
    rt_wait_until_what(file_exists, "pid", 10000, "COMMAND started");
    char *pid_text = first_line_in("pid");
    pid_t child = (pid_t)atoi(pid_text);
    free(pid_text);
    char pid_path[PATH_LEN];
    path_in(pid_path, sizeof pid_path, "pid");
    unlink(pid_path);
    cr_assert_eq(kill(p.pid, SIGKILL), 0);
    cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 128 + SIGKILL);
    /* nobody released it: it expires after the watchdog lease */
    cr_assert_eq(rt_exists(key), 1);
    rt_wait_until_what(key_gone, key, 900 + PROMPT_MS, "lock expired");
    if (kill_mode) {
      rt_wait_until_what(process_ended, &child, PROMPT_MS,
                         "COMMAND stopped when rlock died");
    } else {
      cr_assert(!process_ended(&child), "COMMAND stopped in warn mode");
      kill(child, SIGKILL);
    }
  }
}

/*
 * Issue 24: a SIGKILLed rlock left its COMMAND running with nothing holding
 * the lock, and after the lease a second rlock ran its COMMAND alongside.
 * By default COMMAND now gets SIGTERM when rlock dies: it is gone at once,
 * while the dead rlock's lock still exists, so no second holder can have
 * started. The default watchdog here (30 s): the lock is still there.
 */
Test(cli, sigkilled_rlock_takes_its_command_along_by_default) {
  char key[64];
  rt_key(key, sizeof key, "cli:deathsig");
  cli_proc p;
  cli_start(&p, ARGS(key, "--", "sh", "-c",
                     "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 30"));
  rt_wait_until_what(file_exists, "pid", 10000, "COMMAND started");
  char *pid_text = first_line_in("pid");
  pid_t child = (pid_t)atoi(pid_text);
  free(pid_text);
  cr_assert_gt(child, 0);
  cr_assert(!process_ended(&child));
  cr_assert_eq(kill(p.pid, SIGKILL), 0);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 128 + SIGKILL);
  int64_t died = rt_now_ms();
  bool ended = rt_poll_until(process_ended, &child, PROMPT_MS);
  if (!ended)
    kill(child, SIGKILL);
  cr_assert(ended, "COMMAND (pid %d) still runs %d ms after rlock died",
            (int)child, PROMPT_MS);
  cr_assert_lt(rt_now_ms() - died, PROMPT_MS);
  /* Stopped while the dead rlock's lock still stood: no overlap. */
  cr_assert_eq(rt_exists(key), 1);
}

Test(cli, orphan_ok_and_on_lost_kill_exclude_each_other) {
  char key[64];
  rt_key(key, sizeof key, "cli:orphankill");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--orphan-ok", "--on-lost=kill", key, "--",
                                "sh", "-c", "echo ran > ran")),
               64);
  char *err = slurp(p.err_path);
  cr_assert(strstr(err, "--orphan-ok and --on-lost=kill exclude each other")
                != NULL, "stderr: %s", err);
  free(err);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
}

/* ---- lost locks ---- */

Test(cli, on_lost_kill_stops_command_and_exits_79) {
  char key[64];
  rt_key(key, sizeof key, "cli:lostkill");
  cli_proc p;
  /* watchdog 900 ms: renewal, and so loss detection, every 300 ms */
  cli_start(&p, ARGS("--watchdog", "900ms", "--on-lost=kill", key, "--", "sh",
                     "-c", "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 30"));
  rt_wait_until_what(file_exists, "pid", 10000, "COMMAND started");
  rt_wait_until_what(key_exists, key, 10000, "lock held");
  char *pid_text = first_line_in("pid");
  pid_t child = (pid_t)atoi(pid_text);
  free(pid_text);
  int64_t deleted = rt_now_ms();
  cr_assert_eq(rt_int("DEL %s", key), 1);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 79);
  cr_assert(p.ended_ms - deleted < 300 + PROMPT_MS,
            "noticed after %" PRId64 " ms", p.ended_ms - deleted);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "rlock: lost the lock") != NULL, "stderr: %s", err);
  free(err);
  cr_assert(kill(child, 0) != 0 && errno == ESRCH, "COMMAND still runs");
}

/* --on-lost=kill sends COMMAND a SIGTERM and waits for it to end: a
 * COMMAND that traps TERM records it, takes 300 ms to finish, and has
 * finished by the time rlock exits 79 (a SIGKILL, no signal until the
 * grace's SIGKILL, or only the SIGTERM of rlock's own death would each
 * leave a file missing). */
Test(cli, on_lost_kill_sends_sigterm_and_waits_for_command) {
  char key[64];
  rt_key(key, sizeof key, "cli:lostterm");
  cli_proc p;
  cli_start(&p, ARGS("--watchdog", "900ms", "--on-lost=kill", key, "--", "sh",
                     "-c",
                     "trap 'echo TERM > term; sleep 0.3; echo done > done;"
                     " exit 3' TERM; echo $$ > pid.tmp && mv pid.tmp pid;"
                     " while :; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "pid", 10000, "COMMAND started");
  rt_wait_until_what(key_exists, key, 10000, "lock held");
  cr_assert_eq(rt_int("DEL %s", key), 1);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 79);
  bool term = exists_in("term"), done = exists_in("done");
  char *err = cli_err(&p);
  cr_assert(term, "COMMAND got no SIGTERM; stderr: %s", err);
  cr_assert(done, "rlock exited before COMMAND finished; stderr: %s", err);
  cr_assert(strstr(err, "stopping COMMAND") != NULL &&
                strstr(err, "sending SIGKILL") == NULL,
            "stderr: %s", err);
  free(err);
}

Test(cli, on_lost_warn_is_the_default_and_command_goes_on) {
  char key[64];
  rt_key(key, sizeof key, "cli:lostwarn");
  cli_proc p;
  cli_start(&p, ARGS("--watchdog", "900ms", key, "--", "sh", "-c",
                     "touch ready; while [ ! -e go ]; do sleep 0.02; done;"
                     " exit 5"));
  rt_wait_until_what(file_exists, "ready", 10000, "COMMAND started");
  rt_wait_until_what(key_exists, key, 10000, "lock held");
  cr_assert_eq(rt_int("DEL %s", key), 1);
  contains_arg warned = {p.err_path, "warning: lost the lock"};
  rt_wait_until_what(file_contains, &warned, 300 + PROMPT_MS, "warning");
  cr_assert(cli_running(&p), "COMMAND was stopped in warn mode");
  touch_in("go");
  /* a lost lock is never a success (issue 35): 79, COMMAND's 5 named */
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 79);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "rlock: COMMAND ended (status 5) after the lock '") !=
                NULL,
            "stderr: %s", err);
  /* one warning, not a second one at release */
  char *first = strstr(err, "lost the lock");
  cr_assert(first != NULL && strstr(first + 1, "lost the lock") == NULL &&
                strstr(err, "expired or was deleted") == NULL,
            "stderr: %s", err);
  free(err);
}

Test(cli, lease_running_out_counts_as_lost) {
  char key[64];
  rt_key(key, sizeof key, "cli:leaselost");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-l", "600ms", "--on-lost=kill", key, "--",
                                "sleep", "30")),
               79);
  int64_t took = cli_elapsed(&p);
  cr_assert(took >= 600 && took < 600 + PROMPT_MS, "took %" PRId64 " ms",
            took);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "lease of 600 ms ran out") != NULL, "stderr: %s",
            err);
  free(err);
  cr_assert_eq(rt_exists(key), 0);
}

/* Issue 35: `rlock -l 600` ran a longer COMMAND to exit 0 with the lock
 * gone after 600 ms: cron saw success. Now 79 in warn mode too. */
Test(cli, lease_running_out_in_warn_mode_exits_79_after_command) {
  char key[64];
  rt_key(key, sizeof key, "cli:leasewarn");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-l", "600ms", key, "--", "sh", "-c",
                                "sleep 1.5; touch done")),
               79);
  cr_assert(exists_in("done"), "COMMAND was stopped in warn mode");
  char *err = cli_err(&p);
  cr_assert(strstr(err, "warning: lost the lock") != NULL &&
                strstr(err, "COMMAND ended (status 0) after the lock") != NULL,
            "stderr: %s", err);
  free(err);
}

Test(cli, kill_escalates_to_sigkill_after_the_grace) {
  char key[64];
  rt_key(key, sizeof key, "cli:escalate");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-l", "300ms", "--on-lost=kill", "--kill-after",
                                "500ms", key, "--", "sh", "-c",
                                "trap '' TERM; while :; do sleep 0.02; done")),
               79);
  int64_t took = cli_elapsed(&p);
  cr_assert(took >= 800 && took < 800 + PROMPT_MS, "took %" PRId64 " ms",
            took);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "sending SIGKILL") != NULL, "stderr: %s", err);
  free(err);
}

/* ---- status ---- */

Test(cli, status_shows_owner_count_ttl_and_waiters) {
  char key[64], channel[128];
  rt_key(key, sizeof key, "cli:st");
  rt_lock_channel(channel, sizeof channel, key);
  held h;
  hold(&h, key);
  cr_assert_eq(rlock_lock(h.lock, -1), 0); /* re-entered: count 2 */
  cli_proc waiter;
  cli_start(&waiter, ARGS(key, "--", "true"));
  wait_numsub(channel, 1);

  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  char expect[512];
  long long ttl = -1;
  char line1[192];
  snprintf(line1, sizeof line1, "%s: locked, expires in ", key);
  cr_assert(strncmp(out, line1, strlen(line1)) == 0, "status: %s", out);
  cr_assert(sscanf(out + strlen(line1), "%lld", &ttl) == 1);
  cr_assert(ttl > 0 && ttl <= 30000, "ttl %lld", ttl);
  cr_assert(strstr(out, " ms, 1 client waiting\n") != NULL, "status: %s", out);
  snprintf(expect, sizeof expect, "\n  owner %s  holds 2\n", h.owner);
  cr_assert(strstr(out, expect) != NULL, "status: %s", out);
  free(out);

  cr_assert_eq(cli_run(&p, ARGS("status", "--json", key)), 0);
  out = cli_out(&p);
  snprintf(expect, sizeof expect,
           "{\"name\":\"%s\",\"kind\":\"lock\",\"type\":\"hash\","
           "\"locked\":true,\"ttl_ms\":",
           key);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  snprintf(expect, sizeof expect, "\"holders\":[{\"owner\":\"%s\",", h.owner);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  cr_assert(strstr(out, ",\"count\":2,\"writer\":false,\"rlock_client\":true,"
                        "\"host\":") != NULL,
            "json: %s", out);
  cr_assert(strstr(out, ",\"waiters\":1,") != NULL, "json: %s", out);
  cr_assert(out[0] == '[' && strstr(out, "]\n") != NULL, "json: %s", out);
  free(out);

  cr_assert_eq(rlock_unlock(h.lock), 0);
  unhold(&h);
  cr_assert_eq(cli_wait(&waiter, RUN_BOUND_MS), 0);
}

Test(cli, status_of_unlocked_and_non_lock_keys) {
  char free_key[64], str_key[64];
  rt_key(free_key, sizeof free_key, "cli:free");
  rt_key(str_key, sizeof str_key, "cli:str");
  rt_ok("OK", "SET %s hello", str_key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", free_key, str_key)), 0);
  char *out = cli_out(&p);
  char expect[512];
  snprintf(expect, sizeof expect, "%s: unlocked\n%s: not a lock (Redis type string)\n",
           free_key, str_key);
  cr_assert_str_eq(out, expect);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("status", "--json", free_key)), 0);
  out = cli_out(&p);
  snprintf(expect, sizeof expect,
           "[\n  {\"name\":\"%s\",\"kind\":\"none\",\"type\":\"none\","
           "\"locked\":false,\"ttl_ms\":null,\"mode\":null,\"holders\":[],"
           "\"queue\":{\"length\":0,\"head\":null},\"token\":null,"
           "\"count\":null,\"permits_available\":null,"
           "\"permits_taken\":null,\"permits\":null,\"waiters\":0,"
           "\"election\":null}\n]\n",
           free_key);
  cr_assert_str_eq(out, expect);
  free(out);
  /* a lock hash without TTL (Java never makes one, but someone might) */
  rt_int("HSET %s someone:1 1", free_key);
  cr_assert_eq(cli_run(&p, ARGS("status", free_key)), 0);
  out = cli_out(&p);
  snprintf(expect, sizeof expect,
           "%s: locked, never expires (no TTL)\n  owner someone:1  holds 1\n",
           free_key);
  cr_assert_str_eq(out, expect);
  free(out);
}

Test(cli, status_counts_waiters_with_the_brace_rule) {
  /* A name with '{' gets no extra braces in its channel
   * (docs/wire-protocol.md, "Names"). */
  char key[64], channel[128], wrong[160];
  rt_key(key, sizeof key, "cli{tag}:st");
  snprintf(channel, sizeof channel, "redisson_lock__channel:%s", key);
  snprintf(wrong, sizeof wrong, "redisson_lock__channel:{%s}", key);
  held h;
  hold(&h, key);
  cli_proc w1, w2;
  cli_start(&w1, ARGS(key, "--", "true"));
  cli_start(&w2, ARGS(key, "--", "true"));
  wait_numsub(channel, 2);
  cr_assert_eq(rt_numsub(wrong), 0);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  cr_assert(strstr(out, ", 2 clients waiting\n") != NULL, "status: %s", out);
  free(out);
  unhold(&h);
  cr_assert_eq(cli_wait(&w1, RUN_BOUND_MS), 0);
  cr_assert_eq(cli_wait(&w2, RUN_BOUND_MS), 0);
}

/* ---- unlock --force ---- */

Test(cli, unlock_force_deletes_and_wakes_a_waiter) {
  char key[64], channel[128], other[64];
  rt_key(key, sizeof key, "cli:force");
  rt_key(other, sizeof other, "cli:force-free");
  rt_lock_channel(channel, sizeof channel, key);
  held h;
  hold(&h, key);
  cli_proc waiter;
  cli_start(&waiter, ARGS(key, "--", "touch", "ran"));
  wait_numsub(channel, 1);

  cli_proc p;
  int64_t forced = rt_now_ms();
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", key)), 0);
  char *out = cli_out(&p);
  char expect[128];
  snprintf(expect, sizeof expect, "%s: unlocked\n", key);
  cr_assert_str_eq(out, expect);
  free(out);
  cr_assert_eq(cli_wait(&waiter, RUN_BOUND_MS), 0);
  cr_assert(waiter.ended_ms - forced < PROMPT_MS + 1000,
            "waiter ran %" PRId64 " ms after the forced unlock",
            waiter.ended_ms - forced);
  cr_assert(exists_in("ran"));
  /* the old holder finds out at its unlock */
  cr_assert_eq(rlock_unlock(h.lock), RLOCK_ELOCKLOST);
  rlock_free(h.lock);
  h.lock = NULL;
  unhold(&h);

  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", other)), 1);
  out = cli_out(&p);
  snprintf(expect, sizeof expect, "%s: was not locked\n", other);
  cr_assert_str_eq(out, expect);
  free(out);
}

/* What unlock --force says on stderr about a NAME that is not a lock. */
static void not_a_lock_message(char *buf, size_t n, const char *key,
                               const char *type) {
  snprintf(buf, n,
           "rlock: unlock '%s': not a lock (Redis type %s); left as it is "
           "(--any-type deletes it)\n",
           key, type);
}

Test(cli, unlock_force_refuses_a_string_key_and_leaves_it) {
  char key[64];
  rt_key(key, sizeof key, "cli:force-str");
  rt_ok("OK", "SET %s hello PX 600000", key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", key)), 69);
  char *out = cli_out(&p), *err = cli_err(&p);
  char expect[256];
  not_a_lock_message(expect, sizeof expect, key, "string");
  cr_assert_str_eq(err, expect);
  cr_assert_str_eq(out, "");
  free(out);
  free(err);
  /* untouched: same value, TTL still running */
  char *value = rt_str("GET %s", key);
  cr_assert(value != NULL, "the string was deleted");
  cr_assert_str_eq(value, "hello");
  free(value);
  long long ttl = rt_pttl(key);
  cr_assert(ttl > 500000 && ttl <= 600000, "TTL %lld", ttl);
  /* status still reports it as before */
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  out = cli_out(&p);
  snprintf(expect, sizeof expect, "%s: not a lock (Redis type string)\n",
           key);
  cr_assert_str_eq(out, expect);
  free(out);
}

Test(cli, unlock_force_refuses_list_and_set_keys_and_goes_on) {
  char list_key[64], set_key[64];
  rt_key(list_key, sizeof list_key, "cli:force-list");
  rt_key(set_key, sizeof set_key, "cli:force-set");
  cr_assert_eq(rt_int("RPUSH %s a b c", list_key), 3);
  cr_assert_eq(rt_int("SADD %s x y", set_key), 2);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", list_key, set_key)), 69);
  char *out = cli_out(&p), *err = cli_err(&p);
  char expect[512], second[256];
  not_a_lock_message(expect, sizeof expect, list_key, "list");
  not_a_lock_message(second, sizeof second, set_key, "set");
  strncat(expect, second, sizeof expect - strlen(expect) - 1);
  cr_assert_str_eq(err, expect, "both NAMEs are reported");
  cr_assert_str_eq(out, "");
  free(out);
  free(err);
  cr_assert_eq(rt_int("LLEN %s", list_key), 3);
  cr_assert_eq(rt_int("SCARD %s", set_key), 2);
  cr_assert_eq(rt_int("SISMEMBER %s y", set_key), 1);
}

Test(cli, unlock_force_any_type_deletes_whatever_is_there) {
  char str_key[64], list_key[64];
  rt_key(str_key, sizeof str_key, "cli:any-str");
  rt_key(list_key, sizeof list_key, "cli:any-list");
  rt_ok("OK", "SET %s hello", str_key);
  cr_assert_eq(rt_int("RPUSH %s a", list_key), 1);
  cli_proc p;
  cr_assert_eq(
      cli_run(&p, ARGS("unlock", "--force", "--any-type", str_key, list_key)),
      0);
  char *out = cli_out(&p), *err = cli_err(&p);
  char expect[256];
  snprintf(expect, sizeof expect, "%s: unlocked\n%s: unlocked\n", str_key,
           list_key);
  cr_assert_str_eq(out, expect);
  cr_assert_str_eq(err, "");
  free(out);
  free(err);
  cr_assert_eq(rt_exists(str_key), 0, "the string is still there");
  cr_assert_eq(rt_exists(list_key), 0, "the list is still there");
}

Test(cli, unlock_force_of_a_lock_and_a_string_releases_the_lock_only) {
  char str_key[64], lock_key[64], free_key[64], channel[128];
  rt_key(str_key, sizeof str_key, "cli:mix-str");
  rt_key(lock_key, sizeof lock_key, "cli:mix-lock");
  rt_key(free_key, sizeof free_key, "cli:mix-free");
  rt_lock_channel(channel, sizeof channel, lock_key);
  rt_ok("OK", "SET %s hello", str_key);
  held h;
  hold(&h, lock_key);
  cli_proc waiter;
  cli_start(&waiter, ARGS(lock_key, "--", "touch", "ran"));
  wait_numsub(channel, 1);

  /* The string comes first: the lock after it is still released, and 69
   * (another type) wins over 1 (a NAME that was not locked). */
  cli_proc p;
  cr_assert_eq(
      cli_run(&p, ARGS("unlock", "--force", str_key, lock_key, free_key)),
      69);
  char *out = cli_out(&p), *err = cli_err(&p);
  char expect[256];
  snprintf(expect, sizeof expect, "%s: unlocked\n%s: was not locked\n",
           lock_key, free_key);
  cr_assert_str_eq(out, expect);
  not_a_lock_message(expect, sizeof expect, str_key, "string");
  cr_assert_str_eq(err, expect);
  free(out);
  free(err);

  char *value = rt_str("GET %s", str_key);
  cr_assert(value != NULL, "the string was deleted");
  cr_assert_str_eq(value, "hello");
  free(value);
  /* the lock was released the usual way: the waiter woke and ran */
  cr_assert_eq(cli_wait(&waiter, RUN_BOUND_MS), 0);
  cr_assert(exists_in("ran"));
  cr_assert_eq(rt_exists(lock_key), 0);
  cr_assert_eq(rlock_unlock(h.lock), RLOCK_ELOCKLOST);
  rlock_free(h.lock);
  h.lock = NULL;
  unhold(&h);
}

/* ---- connection and URI ---- */

Test(cli, unreachable_redis_exits_75) {
  char uri[64], key[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", rt_free_port());
  rt_key(key, sizeof key, "cli:down");
  const char *const *cases[] = {
      ARGS("-u", uri, key, "--", "touch", "ran"),
      ARGS("status", "-u", uri, key),
      ARGS("unlock", "--force", "-u", uri, key),
  };
  for (size_t i = 0; i < 3; i++) {
    cli_proc p;
    cr_assert_eq(cli_run(&p, cases[i]), 75, "case %zu", i);
    char *err = cli_err(&p);
    cr_assert(strncmp(err, "rlock: cannot connect to Redis", 30) == 0,
              "case %zu: %s", i, err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1,
              "case %zu: not one line: %s", i, err);
    free(err);
  }
  cr_assert(!exists_in("ran"));
}

Test(cli, uri_flag_overrides_redis_url) {
  char bad[64], key[64];
  snprintf(bad, sizeof bad, "redis://127.0.0.1:%d", rt_free_port());
  rt_key(key, sizeof key, "cli:env");
  char good[64];
  snprintf(good, sizeof good, "%s", rt_uri());
  cr_assert_eq(setenv("REDIS_URL", bad, 1), 0);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "true")), 75, "REDIS_URL used");
  cr_assert_eq(cli_run(&p, ARGS("-u", good, key, "--", "true")), 0);
  cr_assert_eq(cli_run(&p, ARGS("--uri", good, key, "--", "true")), 0);
  cr_assert_eq(cli_run(&p, ARGS("status", "-u", good, key)), 0);
}

/*
 * Issue 26: the connection options may come before status and unlock.
 * `rlock -u URI status job1` used to lock a lock called "status" and run
 * `job1` (exit 127). REDIS_URL points at nothing here, so a 0 proves that
 * the -u given before the subcommand was used.
 */
Test(cli, connection_options_before_the_subcommand) {
  char key[64], bad[64], good[64], uri_eq[96], uri_attached[96];
  rt_key(key, sizeof key, "cli:before");
  snprintf(bad, sizeof bad, "redis://127.0.0.1:%d", rt_free_port());
  snprintf(good, sizeof good, "%s", rt_uri());
  snprintf(uri_eq, sizeof uri_eq, "--uri=%s", good);
  snprintf(uri_attached, sizeof uri_attached, "-u%s", good);
  held h;
  hold(&h, key);
  cr_assert_eq(setenv("REDIS_URL", bad, 1), 0);
  char expect[192];
  snprintf(expect, sizeof expect, "\n  owner %s  holds 1\n", h.owner);
  const char *const *status_cases[] = {
      ARGS("-u", good, "status", key),
      ARGS(uri_eq, "status", key),
      ARGS(uri_attached, "status", "--json", key),
      ARGS("status", "-u", good, key), /* after, as before */
  };
  for (size_t i = 0; i < sizeof status_cases / sizeof status_cases[0]; i++) {
    cli_proc p;
    cr_assert_eq(cli_run(&p, status_cases[i]), 0, "case %zu", i);
    char *out = cli_out(&p);
    cr_assert(strstr(out, i == 2 ? h.owner : expect) != NULL, "case %zu: %s",
              i, out);
    free(out);
  }
  /* A --tls-* option before status reaches status's own check. */
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-u", good, "--tls-insecure", "status", key)),
               64);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "--tls-insecure needs a rediss:// URI") != NULL,
            "stderr: %s", err);
  free(err);
  /* unlock --force, options first: the lock is gone. */
  cr_assert_eq(cli_run(&p, ARGS("-u", good, "unlock", "--force", key)), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(h.lock);
  h.lock = NULL;
  unhold(&h);
  /* No lock called "status" or "unlock" was ever taken. */
  cr_assert_eq(rt_exists("status"), 0);
  cr_assert_eq(rt_exists("unlock"), 0);
  /* Options the subcommands do not take, then "status": refused, rather
   * than a lock called "status"; after --, it is that lock. */
  cr_assert_eq(cli_run(&p, ARGS("-u", good, "-n", "status", "--", "sh", "-c",
                                "echo ran > ran")),
               64);
  err = cli_err(&p);
  cr_assert(strstr(err, "-- status") != NULL, "stderr: %s", err);
  free(err);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(cli_run(&p, ARGS("-u", good, "-n", "--", "status", "sh", "-c",
                                "echo \"$RLOCK_NAME\" > ran")),
               0);
  char *ran = first_line_in("ran");
  cr_assert_str_eq(ran, "status");
  free(ran);
  cr_assert_eq(setenv("REDIS_URL", good, 1), 0);
}

/* ---- a peer that is not a Redis server ---- */

/* Answers every command (a RESP array of bulk strings, as hiredis sends
 * them) with "+OK": connection set-up passes, and then every reply rlock
 * looks at has the wrong type (RLOCK_EPROTO). */
#define PEER_CONNS 8

typedef struct fake_peer {
  int listen_fd;
  int port;
  atomic_bool stop;
  rt_thread thread;
} fake_peer;

typedef struct peer_conn {
  int fd;
  char *buf;
  size_t len, cap;
} peer_conn;

/* Parses "$<n>\r\n<n bytes>\r\n" or "*<n>\r\n" at *pos; false if
 * incomplete or malformed. */
static bool resp_header(const char *buf, size_t len, size_t *pos, char kind,
                        long *n) {
  if (*pos >= len || buf[*pos] != kind)
    return false;
  const char *crlf = memmem(buf + *pos, len - *pos, "\r\n", 2);
  if (crlf == NULL)
    return false;
  char *end;
  *n = strtol(buf + *pos + 1, &end, 10);
  if (end != crlf || *n < 0)
    return false;
  *pos = (size_t)(crlf - buf) + 2;
  return true;
}

/* Number of whole commands at the start of c->buf; drops them. */
static int peer_take_commands(peer_conn *c) {
  int count = 0;
  size_t done = 0;
  for (;;) {
    size_t pos = done;
    long args;
    if (!resp_header(c->buf, c->len, &pos, '*', &args))
      break;
    bool whole = true;
    for (long i = 0; i < args && whole; i++) {
      long n;
      whole = resp_header(c->buf, c->len, &pos, '$', &n) &&
              c->len - pos >= (size_t)n + 2;
      if (whole)
        pos += (size_t)n + 2;
    }
    if (!whole)
      break;
    done = pos;
    count++;
  }
  memmove(c->buf, c->buf + done, c->len - done);
  c->len -= done;
  return count;
}

static void peer_main(void *arg) {
  fake_peer *f = arg;
  peer_conn conns[PEER_CONNS];
  int n = 0;
  while (!atomic_load(&f->stop)) {
    struct pollfd pfds[PEER_CONNS + 1];
    pfds[0] = (struct pollfd){.fd = f->listen_fd, .events = POLLIN};
    for (int i = 0; i < n; i++)
      pfds[i + 1] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
    if (poll(pfds, (nfds_t)n + 1, 20) <= 0)
      continue;
    for (int i = n - 1; i >= 0; i--) {
      if (pfds[i + 1].revents == 0)
        continue;
      peer_conn *c = &conns[i];
      if (c->cap - c->len < 4096) {
        char *grown = realloc(c->buf, c->cap * 2);
        if (grown != NULL) {
          c->buf = grown;
          c->cap *= 2;
        }
      }
      ssize_t got = read(c->fd, c->buf + c->len, c->cap - c->len);
      bool keep = got > 0;
      if (keep) {
        c->len += (size_t)got;
        for (int k = peer_take_commands(c); k > 0 && keep; k--)
          keep = send(c->fd, "+OK\r\n", 5, MSG_NOSIGNAL) == 5;
      }
      if (!keep) {
        close(c->fd);
        free(c->buf);
        conns[i] = conns[--n];
      }
    }
    if ((pfds[0].revents & POLLIN) && n < PEER_CONNS) {
      int fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
      char *buf = fd >= 0 ? malloc(8192) : NULL;
      if (buf != NULL)
        conns[n++] = (peer_conn){.fd = fd, .buf = buf, .len = 0, .cap = 8192};
      else if (fd >= 0)
        close(fd);
    }
  }
  for (int i = 0; i < n; i++) {
    close(conns[i].fd);
    free(conns[i].buf);
  }
}

static void fake_peer_start(fake_peer *f) {
  memset(f, 0, sizeof *f);
  atomic_init(&f->stop, false);
  f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert(f->listen_fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  cr_assert(bind(f->listen_fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                listen(f->listen_fd, 16) == 0 &&
                getsockname(f->listen_fd, (struct sockaddr *)&a, &len) == 0,
            "listen: %s", strerror(errno));
  f->port = ntohs(a.sin_port);
  rt_thread_start(&f->thread, peer_main, f);
}

static void fake_peer_stop(fake_peer *f) {
  atomic_store(&f->stop, true);
  rt_thread_join(&f->thread, 5000);
  close(f->listen_fd);
}

Test(cli, a_peer_that_is_not_redis_exits_75) {
  fake_peer f;
  fake_peer_start(&f);
  char uri[64], key[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", f.port);
  rt_key(key, sizeof key, "cli:peer");
  const char *const *cases[] = {
      ARGS("unlock", "--force", "--any-type", "-u", uri, key),
      ARGS("status", "-u", uri, key),
      ARGS("-n", "-u", uri, key, "--", "touch", "ran"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    int code = cli_run(&p, cases[i]);
    char *err = cli_err(&p);
    cr_expect_eq(code, 75, "case %zu: exit %d, stderr: %s", i, code, err);
    cr_expect(strncmp(err, "rlock: ", 7) == 0, "case %zu: %s", i, err);
    cr_expect(strstr(err, "unexpected reply from Redis") != NULL,
              "case %zu: %s", i, err);
    free(err);
  }
  fake_peer_stop(&f);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
}

static void auth_setup(void) {
  const char *args[] = {"--requirepass", "s3cret", NULL};
  rt_server_start_args(args);
}

Test(cli, password_from_uri_and_wrong_password_exits_69,
     .init = auth_setup) {
  char key[64], good[96], bad[96], db1[112];
  rt_key(key, sizeof key, "cli:auth");
  snprintf(good, sizeof good, "redis://:s3cret@127.0.0.1:%d", rt_port());
  snprintf(bad, sizeof bad, "redis://:wrong@127.0.0.1:%d", rt_port());
  snprintf(db1, sizeof db1, "%s/1", good);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-u", good, key, "--", "true")), 0);
  cr_assert_eq(cli_run(&p, ARGS("-u", bad, key, "--", "touch", "ran")), 69);
  char *err = cli_err(&p);
  cr_assert(strncmp(err, "rlock: ", 7) == 0, "stderr: %s", err);
  cr_assert(strstr(err, "wrong") == NULL, "password echoed: %s", err);
  free(err);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(cli_run(&p, ARGS("status", "-u", bad, key)), 69);
  /* db 1: the lock is in db 1, status reads db 1 */
  cli_start(&p, ARGS("-u", db1, key, "--", "sh", "-c",
                     "touch ready; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "ready", 10000, "COMMAND started");
  cr_assert_eq(rt_exists(key), 0, "lock in db 0");
  cli_proc st;
  cr_assert_eq(cli_run(&st, ARGS("status", "-u", db1, key)), 0);
  char *out = cli_out(&st);
  cr_assert(strstr(out, ": locked, expires in ") != NULL, "status: %s", out);
  free(out);
  touch_in("go");
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
}

/* ---- TLS (rediss://) ---- */

/* Certificates made at test time in the test's scratch directory with the
 * openssl command line: EC P-256 keys, a CA, a server certificate for
 * IP:127.0.0.1 and DNS:localhost, and a client certificate (mutual TLS).
 * Nothing is kept: the directory goes at teardown. */
static const char tls_cnf[] =
    "[req]\n"
    "distinguished_name = dn\n"
    "prompt = no\n"
    "[dn]\n"
    "CN = rlock cli test CA\n"
    "[v3_ca]\n"
    "basicConstraints = critical,CA:TRUE\n"
    "keyUsage = critical,keyCertSign,cRLSign\n"
    "subjectKeyIdentifier = hash\n"
    "[v3_server]\n"
    "basicConstraints = critical,CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = serverAuth\n"
    "subjectAltName = IP:127.0.0.1,DNS:localhost\n"
    "[v3_client]\n"
    "basicConstraints = critical,CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = clientAuth\n";

static void openssl_in_dir(const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cd '%s' && openssl %s >>openssl.log 2>&1", g_dir,
           args);
  int st = system(cmd);
  if (st != 0) {
    char *log = slurp_in("openssl.log");
    cr_assert_fail("openssl %s: status %d; log:\n%s", args, st, log);
  }
}

static void make_certs(void) {
  char path[PATH_LEN];
  path_in(path, sizeof path, "tls.cnf");
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL && fputs(tls_cnf, f) >= 0 && fclose(f) == 0,
            "write %s", path);
  openssl_in_dir("ecparam -name prime256v1 -genkey -noout -out ca.key");
  openssl_in_dir("req -x509 -new -key ca.key -config tls.cnf -extensions "
                 "v3_ca -days 2 -sha256 -out ca.crt");
  const char *const who[] = {"server", "client"};
  for (int i = 0; i < 2; i++) {
    char args[512];
    snprintf(args, sizeof args,
             "ecparam -name prime256v1 -genkey -noout -out %s.key", who[i]);
    openssl_in_dir(args);
    snprintf(args, sizeof args,
             "req -new -key %s.key -config tls.cnf -subj /CN=%s -out %s.csr",
             who[i], i == 0 ? "localhost" : "rlock-cli-test", who[i]);
    openssl_in_dir(args);
    snprintf(args, sizeof args,
             "x509 -req -in %s.csr -CA ca.crt -CAkey ca.key -set_serial %d "
             "-days 2 -sha256 -extfile tls.cnf -extensions v3_%s -out %s.crt",
             who[i], i + 2, who[i], who[i]);
    openssl_in_dir(args);
  }
}

static char g_tls_uri[64];  /* rediss://127.0.0.1:<tls port> */
static char g_ca[PATH_LEN]; /* the CA certificate */

/* Replaces the suite's server with one that also has a TLS port (its
 * plain port stays: rt_* assertions and $REDIS_URL use it). Skips the
 * test in a build without TLS. */
static void tls_server_start(bool auth_clients) {
  if (!rlock__tls_available)
    cr_skip_test("this rlock is built without TLS (-Dtls)");
  make_certs();
  char cert[PATH_LEN], key[PATH_LEN];
  path_in(cert, sizeof cert, "server.crt");
  path_in(key, sizeof key, "server.key");
  path_in(g_ca, sizeof g_ca, "ca.crt");
  const char *args[] = {"--tls-port",       RT_EXTRA_PORT,
                        "--tls-cert-file",  cert,
                        "--tls-key-file",   key,
                        "--tls-ca-cert-file", g_ca,
                        "--tls-auth-clients", auth_clients ? "yes" : "no",
                        NULL};
  rt_server_start_args(args);
  cr_assert(setenv("REDIS_URL", rt_uri(), 1) == 0);
  snprintf(g_tls_uri, sizeof g_tls_uri, "rediss://127.0.0.1:%d",
           rt_extra_port());
}

/* Runs rlock to completion and asserts its exit code, showing its stderr
 * if it is another. */
static void run_expect(cli_proc *p, const char *const *args, int want) {
  int code = cli_run(p, args);
  if (code != want) {
    char *err = cli_err(p);
    cr_assert_fail("%s %s ...: exit %d, not %d; stderr: %s", args[0],
                   args[1] != NULL ? args[1] : "", code, want, err);
  }
}

/* stderr is one "rlock: " line containing each of the NULL-terminated
 * needles. */
static void expect_one_line_with(const cli_proc *p, const char *const *needles,
                                 const char *what) {
  char *err = cli_err(p);
  cr_expect(strncmp(err, "rlock: ", 7) == 0, "%s: %s", what, err);
  cr_expect(strchr(err, '\n') == err + strlen(err) - 1, "%s: not one line: %s",
            what, err);
  for (int i = 0; needles[i] != NULL; i++)
    cr_expect(strstr(err, needles[i]) != NULL, "%s: no \"%s\" in: %s", what,
              needles[i], err);
  free(err);
}

Test(cli, tls_lock_runs_command_with_ca_file) {
  tls_server_start(false);
  char key[64];
  rt_key(key, sizeof key, "cli:tls");
  const char *cli = getenv("RLOCK_CLI");
  cli_proc p;
  /* COMMAND is `rlock status` over TLS too: it sees the lock held. */
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", g_ca, key,
                                "--", cli, "status", "-u", g_tls_uri,
                                "--tls-ca-file", g_ca, key)),
               0);
  char *out = cli_out(&p), *err = cli_err(&p);
  char expect[128];
  snprintf(expect, sizeof expect, "%s: locked, expires in ", key);
  cr_assert(strncmp(out, expect, strlen(expect)) == 0, "out: %s", out);
  cr_assert(strstr(out, "  owner ") != NULL, "out: %s", out);
  cr_assert_str_eq(err, "");
  free(out);
  free(err);
  cr_assert_eq(rt_exists(key), 0, "lock left behind");

  /* the short form, $REDIS_URL as rediss://, a DNS name, the server name */
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", g_ca, key,
                                "--", "true")),
               0);
  cr_assert_eq(setenv("REDIS_URL", g_tls_uri, 1), 0);
  cr_assert_eq(cli_run(&p, ARGS("--tls-ca-file", g_ca, "--tls-server-name",
                                "localhost", key, "-c", "exit 3")),
               3);
  char by_name[80];
  snprintf(by_name, sizeof by_name, "rediss://localhost:%s",
           strrchr(g_tls_uri, ':') + 1);
  run_expect(&p, ARGS("-u", by_name, "--tls-ca-file", g_ca, key,
                                "--", "true"), 0);
  /* encryption without verification */
  cr_assert_eq(cli_run(&p, ARGS("--tls-insecure", key, "--", "true")), 0);
  /* a CA directory in OpenSSL's hashed form */
  openssl_in_dir("rehash . || c_rehash .");
  run_expect(&p, ARGS("--tls-ca-dir", g_dir, key, "--", "true"), 0);
  cr_assert_eq(rt_exists(key), 0, "lock left behind");
}

/* rlock elect and rlock leader open their client as the other commands
 * do (cli_connect): the --tls-* options over rediss://, checked against
 * the URI. */
Test(cli, tls_elect_and_leader_take_the_connection_options) {
  tls_server_start(false);
  char name[64];
  rt_key(name, sizeof name, "cli:tls-elect");
  cli_proc p;
  /* nobody leads yet: exit 1 */
  run_expect(&p, ARGS("leader", "-u", g_tls_uri, "--tls-ca-file", g_ca, name),
             1);
  char *out = cli_out(&p);
  char expect[128];
  snprintf(expect, sizeof expect, "%s: no leader\n", name);
  cr_assert_str_eq(out, expect);
  free(out);
  /* elect over TLS; its COMMAND asks `rlock leader --json` over TLS */
  const char *cli = getenv("RLOCK_CLI");
  run_expect(&p,
             ARGS("elect", "-u", g_tls_uri, "--tls-ca-file", g_ca, "--value",
                  "tls-v1", name, "--", cli, "leader", "--json", "-u",
                  g_tls_uri, "--tls-ca-file", g_ca, "--tls-server-name",
                  "localhost", name),
             0);
  out = cli_out(&p);
  cr_assert(strstr(out, "\"leader\":true,\"term\":") != NULL, "out: %s", out);
  cr_assert(strstr(out, "\"value\":\"tls-v1\"") != NULL, "out: %s", out);
  free(out);
  /* resigned when COMMAND ended: nobody leads again */
  run_expect(&p, ARGS("leader", "-u", g_tls_uri, "--tls-insecure", name), 1);
  /* without the CA the certificate is not trusted: 75, as for the others */
  run_expect(&p, ARGS("leader", "-u", g_tls_uri, name), 75);
  run_expect(&p, ARGS("elect", "-u", g_tls_uri, "-w", "1", name, "--", "true"),
             75);
  /* a --tls-* option needs rediss://: 64 with the reason, nothing opened */
  const char *const *bad[] = {
      ARGS("leader", "--tls-ca-file", g_ca, name),
      ARGS("elect", "--tls-insecure", name, "--", "touch", "ran"),
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    run_expect(&p, bad[i], 64);
    expect_one_line_with(&p, ARGS("needs a rediss:// URI"), bad[i][0]);
  }
  cr_assert(!exists_in("ran"));
}

Test(cli, tls_unverified_certificate_exits_75_and_names_it) {
  tls_server_start(false);
  char key[64];
  rt_key(key, sizeof key, "cli:tlsbad");
  /* No --tls-ca-file: the system's trust store does not know the CA. */
  const char *const *cases[] = {
      ARGS("-u", g_tls_uri, key, "--", "touch", "ran"),
      ARGS("status", "-u", g_tls_uri, key),
      ARGS("unlock", "--force", "-u", g_tls_uri, key),
      ARGS("unlock", "--force", "--any-type", "-u", g_tls_uri, key),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    int code = cli_run(&p, cases[i]);
    char *err = cli_err(&p);
    cr_expect_eq(code, 75, "case %zu: exit %d, stderr: %s", i, code, err);
    free(err);
    char what[32];
    snprintf(what, sizeof what, "case %zu", i);
    expect_one_line_with(&p,
                         ARGS("cannot connect to Redis", "TLS",
                              "certificate verify failed"),
                         what);
  }
  /* The right CA, the wrong name. */
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", g_ca,
                                "--tls-server-name", "redis.example.com",
                                key, "--", "touch", "ran")),
               75);
  expect_one_line_with(&p, ARGS("certificate", "hostname mismatch"),
                       "wrong name");
  cr_assert_eq(cli_run(&p, ARGS("status", "-u", g_tls_uri, "--tls-ca-file",
                                g_ca, "--tls-server-name",
                                "redis.example.com", key)),
               75);
  expect_one_line_with(&p, ARGS("certificate", "hostname mismatch"),
                       "status, wrong name");
  cr_assert(!exists_in("ran"), "COMMAND ran without the lock");
  cr_assert_eq(rt_exists(key), 0);
}

Test(cli, tls_status_and_unlock_force) {
  tls_server_start(false);
  char key[64], other[64];
  rt_key(key, sizeof key, "cli:tlsst");
  rt_key(other, sizeof other, "cli:tlsstr");
  rt_ok("OK", "SET %s v", other);
  held h;
  hold(&h, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", "--json", "-u", g_tls_uri,
                                "--tls-ca-file", g_ca, key)),
               0);
  char *out = cli_out(&p);
  char expect[512];
  snprintf(expect, sizeof expect, "\"holders\":[{\"owner\":\"%s\",", h.owner);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  cr_assert(strstr(out, ",\"count\":1,\"writer\":false,\"rlock_client\":true,") !=
                NULL,
            "json: %s", out);
  free(out);
  /* the type check runs over TLS too: the string is left alone */
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", "-u", g_tls_uri,
                                "--tls-ca-file", g_ca, key, other)),
               69);
  out = cli_out(&p);
  snprintf(expect, sizeof expect, "%s: unlocked\n", key);
  cr_assert_str_eq(out, expect);
  free(out);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rt_exists(other), 1);
  cr_assert_eq(rlock_unlock(h.lock), RLOCK_ELOCKLOST);
  rlock_free(h.lock);
  h.lock = NULL;
  unhold(&h);
}

Test(cli, tls_unusable_files_are_named) {
  tls_server_start(false);
  char key[64], missing[PATH_LEN], garbage[PATH_LEN];
  rt_key(key, sizeof key, "cli:tlsfile");
  path_in(missing, sizeof missing, "no-such-ca.pem");
  path_in(garbage, sizeof garbage, "garbage.pem");
  FILE *f = fopen(garbage, "w");
  cr_assert(f != NULL && fputs("not a certificate\n", f) >= 0 &&
            fclose(f) == 0);
  /* Unreadable: a usage error naming the option and the path. */
  const char *const *cases[] = {
      ARGS("-u", g_tls_uri, "--tls-ca-file", missing, key, "--", "touch",
           "ran"),
      ARGS("status", "-u", g_tls_uri, "--tls-ca-file", missing, key),
      ARGS("unlock", "--force", "-u", g_tls_uri, "--tls-ca-file", missing,
           key),
      ARGS("-u", g_tls_uri, "--tls-ca-file", g_dir, key, "--", "touch",
           "ran"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    int code = cli_run(&p, cases[i]);
    char *err = cli_err(&p);
    cr_expect_eq(code, 64, "case %zu: exit %d, stderr: %s", i, code, err);
    free(err);
    char what[32];
    snprintf(what, sizeof what, "case %zu", i);
    expect_one_line_with(
        &p, ARGS("cannot read --tls-ca-file", i == 3 ? g_dir : missing), what);
  }
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", g_ca,
                                "--tls-cert", garbage, key, "--", "touch",
                                "ran")),
               64);
  expect_one_line_with(&p, ARGS("--tls-cert needs --tls-key"), "cert alone");
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-dir", missing, key,
                                "--", "touch", "ran")),
               64);
  expect_one_line_with(&p, ARGS("cannot open --tls-ca-dir", missing),
                       "ca dir");
  /* Readable but no certificate in it: OpenSSL's reason, as a TLS
   * failure. */
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", garbage,
                                key, "--", "touch", "ran")),
               75);
  expect_one_line_with(&p, ARGS("TLS failed", garbage), "garbage, lock");
  cr_assert_eq(cli_run(&p, ARGS("status", "-u", g_tls_uri, "--tls-ca-file",
                                garbage, key)),
               75);
  expect_one_line_with(&p, ARGS("TLS failed", garbage), "garbage, status");
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
}

Test(cli, tls_client_certificate_for_mutual_tls) {
  tls_server_start(true);
  char key[64], cert[PATH_LEN], ckey[PATH_LEN];
  rt_key(key, sizeof key, "cli:mtls");
  path_in(cert, sizeof cert, "client.crt");
  path_in(ckey, sizeof ckey, "client.key");
  cli_proc p;
  run_expect(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", g_ca,
                                "--tls-cert", cert, "--tls-key", ckey, key,
                                "--", "true"), 0);
  run_expect(&p, ARGS("status", "-u", g_tls_uri, "--tls-ca-file",
                                g_ca, "--tls-cert", cert, "--tls-key", ckey,
                                key), 0);
  /* The server wants a client certificate: without one, no session. */
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", g_ca, key,
                                "--", "touch", "ran")),
               75);
  expect_one_line_with(&p, ARGS("cannot connect to Redis", "TLS"),
                       "no client certificate");
  cr_assert_eq(cli_run(&p, ARGS("status", "-u", g_tls_uri, "--tls-ca-file",
                                g_ca, key)),
               75);
  expect_one_line_with(&p, ARGS("cannot connect to Redis", "TLS"),
                       "status, no client certificate");
  /* A key that is not the certificate's. */
  char skey[PATH_LEN];
  path_in(skey, sizeof skey, "server.key");
  cr_assert_eq(cli_run(&p, ARGS("-u", g_tls_uri, "--tls-ca-file", g_ca,
                                "--tls-cert", cert, "--tls-key", skey, key,
                                "--", "touch", "ran")),
               75);
  expect_one_line_with(&p, ARGS("TLS failed", "tls_key_file", skey),
                       "key mismatch");
  cr_assert(!exists_in("ran"));
}

Test(cli, rediss_to_a_plain_text_port_exits_75) {
  tls_server_start(false);
  char key[64], uri[64];
  rt_key(key, sizeof key, "cli:tlsplain");
  snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d", rt_port());
  /* status's own connection gives up after its 5 s read timeout */
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", "-u", uri, "--tls-ca-file", g_ca,
                                key)),
               75);
  expect_one_line_with(&p, ARGS("TLS", "plain text"), "status");
}

/* ---- kinds of lock: -s/-x, --fair, --fenced (issue 14) ----
 *
 * Tests marked [rw] need the library's read/write lock, [fair] its fair
 * lock; the others need only the fenced lock and RLock's own checks. */

/* "redisson_rwlock:{NAME}" etc.: prefix + the name's tag (names made by
 * rt_key() have no '{'). */
static void tagged_key(char *buf, size_t n, const char *prefix,
                       const char *name) {
  snprintf(buf, n, "%s{%s}", prefix, name);
}

typedef struct llen_arg {
  const char *key;
  long long want;
} llen_arg;

static bool llen_is(void *arg) {
  llen_arg *a = arg;
  return rt_int("LLEN %s", a->key) == a->want;
}

/* HGETALL as one malloc'd "field=value\n" string, fields sorted, to compare
 * a hash before and after. */
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *hash_dump(const char *key) {
  redisReply *r = rt_cmd("HGETALL %s", key);
  cr_assert(r->type == REDIS_REPLY_ARRAY, "HGETALL %s: type %d", key,
            r->type);
  size_t n = r->elements / 2;
  char **lines = calloc(n + 1, sizeof *lines);
  size_t total = 1;
  for (size_t i = 0; i < n; i++) {
    size_t len = r->element[2 * i]->len + r->element[2 * i + 1]->len + 3;
    lines[i] = malloc(len);
    snprintf(lines[i], len, "%s=%s\n", r->element[2 * i]->str,
             r->element[2 * i + 1]->str);
    total += len;
  }
  qsort(lines, n, sizeof *lines, cmp_str);
  char *out = calloc(1, total);
  for (size_t i = 0; i < n; i++) {
    strcat(out, lines[i]);
    free(lines[i]);
  }
  free(lines);
  freeReplyObject(r);
  return out;
}

/* Lines of a file, as an array of n malloc'd strings (free each, and it). */
static char **lines_in(const char *file, size_t *n) {
  char *s = slurp_in(file);
  char **lines = calloc(64, sizeof *lines);
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(s, "\n", &save);
       tok != NULL && *n < 64; tok = strtok_r(NULL, "\n", &save))
    lines[(*n)++] = strdup(tok);
  free(s);
  return lines;
}

static void lines_free(char **lines, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(lines[i]);
  free(lines);
}

Test(cli, kinds_options_exclude_each_other_usage_64) {
  char key[64];
  rt_key(key, sizeof key, "cli:kinds-usage");
  const char *const *cases[] = {
      ARGS("-s", "-x", key, "--", "touch", "ran"),
      ARGS("-x", "-s", key, "--", "touch", "ran"),
      ARGS("--shared", "--exclusive", key, "--", "touch", "ran"),
      ARGS("-s", "--fair", key, "--", "touch", "ran"),
      ARGS("-x", "--fenced", key, "--", "touch", "ran"),
      ARGS("--fenced", "-s", key, "--", "touch", "ran"),
      ARGS("--fair", "--fenced", key, "--", "touch", "ran"),
      ARGS("-sx", key, "--", "touch", "ran"),
      ARGS("unlock", "--force", "-s", "-x", key),
      ARGS("unlock", "--force", "--fair", "--exclusive", key),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    int code = cli_run(&p, cases[i]);
    char *err = cli_err(&p), *out = cli_out(&p);
    cr_expect_eq(code, 64, "case %zu: exit %d, stderr: %s", i, code, err);
    cr_expect(strncmp(err, "rlock: ", 7) == 0 &&
                  strstr(err, "exclude each other") != NULL,
              "case %zu: stderr: %s", i, err);
    char *second = strchr(err, '\n');
    if (second != NULL && second[1] != '\0')
      cr_expect(strncmp(second + 1, "Try 'rlock --help'", 18) == 0,
                "case %zu: more than one message: %s", i, err);
    cr_expect_str_eq(out, "", "case %zu: stdout: %s", i, out);
    free(err);
    free(out);
  }
  cr_assert(!exists_in("ran"), "a command ran despite a usage error");
  cr_assert_eq(rt_exists(key), 0);
}

/* Tokens are floored with the server's clock (docs/fencing.md): the second
 * run's is above the first's, and the counter holds the latest. */
Test(cli, kinds_fenced_command_gets_rising_tokens) {
  char key[64], token_key[128];
  rt_key(key, sizeof key, "cli:fenced");
  tagged_key(token_key, sizeof token_key, "redisson_lock_token:", key);
  /* Not inherited from the test's own environment by accident. */
  unsetenv("RLOCK_TOKEN");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--fenced", key, "--", "sh", "-c",
                                "echo \"$RLOCK_TOKEN\" > t1;"
                                " echo \"$RLOCK_NAME\" > n1")),
               0);
  char *err = cli_err(&p), *out = cli_out(&p);
  cr_assert_str_eq(err, "", "--fenced prints nothing extra");
  cr_assert_str_eq(out, "");
  free(err);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("--fenced", key, "-c",
                                "echo \"$RLOCK_TOKEN\" > t2")),
               0);
  char *t1 = first_line_in("t1"), *t2 = first_line_in("t2");
  char *n1 = first_line_in("n1");
  long long v1 = atoll(t1), v2 = atoll(t2);
  cr_assert_gt(v1, 0, "first run's RLOCK_TOKEN: %s", t1);
  cr_assert_gt(v2, v1, "second run's RLOCK_TOKEN: %s after %s", t2, t1);
  cr_assert_str_eq(n1, key);
  char *counter = rt_str("GET %s", token_key);
  cr_assert(counter != NULL && strcmp(counter, t2) == 0, "token key: %s",
            counter ? counter : "(nil)");
  free(counter);
  free(t1);
  free(t2);
  free(n1);
  cr_assert_eq(rt_exists(key), 0, "lock left behind");

  /* -v says the token; the plain lock on the same name sets no RLOCK_TOKEN */
  cr_assert_eq(cli_run(&p, ARGS("-v", "--fenced", key, "--", "true")), 0);
  err = cli_err(&p);
  long long v3 = 0;
  const char *at = strstr(err, "(fenced lock, token ");
  cr_assert(at != NULL, "stderr: %s", err);
  v3 = atoll(at + strlen("(fenced lock, token "));
  cr_assert_gt(v3, v2, "stderr: %s", err);
  free(err);
  cr_assert_eq(cli_run(&p, ARGS(key, "-c",
                                "echo \"${RLOCK_TOKEN-unset}\" > t4")),
               0);
  char *t4 = first_line_in("t4");
  cr_assert_str_eq(t4, "unset");
  free(t4);

  /* status shows the counter, locked or not */
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  out = cli_out(&p);
  char expect[256];
  snprintf(expect, sizeof expect,
           "%s: unlocked\n  fenced lock: token %lld (the latest handed "
           "out)\n",
           key, v3);
  cr_assert_str_eq(out, expect);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("status", "--json", key)), 0);
  out = cli_out(&p);
  snprintf(expect, sizeof expect, ",\"kind\":\"fenced\",");
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  snprintf(expect, sizeof expect, ",\"token\":%lld,", v3);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  free(out);
}

Test(cli, kinds_fenced_excludes_the_plain_lock_and_unlock_force_fenced) {
  char key[64], channel[128];
  rt_key(key, sizeof key, "cli:fenced-force");
  rt_lock_channel(channel, sizeof channel, key);
  cli_proc holder, waiter;
  cli_start(&holder, ARGS("--fenced", key, "--", "sh", "-c",
                          "echo \"$RLOCK_OWNER\" > owner.tmp && mv owner.tmp"
                          " owner; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "owner", 10000, "fenced COMMAND started");
  /* one hash: the plain lock is busy, and so is a second fenced one */
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-n", key, "--", "touch", "ran")), 1);
  cr_assert_eq(cli_run(&p, ARGS("-n", "--fenced", key, "--", "touch", "ran")),
               1);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p), *owner = first_line_in("owner");
  char expect[256];
  char tk[128];
  tagged_key(tk, sizeof tk, "redisson_lock_token:", key);
  char *first = rt_str("GET %s", tk);
  cr_assert(first != NULL);
  snprintf(expect, sizeof expect,
           "\n  owner %s  holds 1\n    pid ",
           owner);
  cr_assert(strstr(out, expect) != NULL, "status: %s", out);
  snprintf(expect, sizeof expect,
           "\n  fenced lock: token %s (the latest handed out)\n", first);
  cr_assert(strstr(out, expect) != NULL, "status: %s", out);
  free(out);
  free(owner);

  cli_start(&waiter, ARGS("--fenced", key, "-c",
                          "echo \"$RLOCK_TOKEN\" > waiter-token"));
  wait_numsub(channel, 1);
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", "--fenced", key)), 0);
  out = cli_out(&p);
  snprintf(expect, sizeof expect, "%s: unlocked\n", key);
  cr_assert_str_eq(out, expect);
  free(out);
  cr_assert_eq(cli_wait(&waiter, RUN_BOUND_MS), 0);
  char *token = first_line_in("waiter-token");
  cr_assert_gt(atoll(token), atoll(first), "the waiter's token %s is above "
               "the first holder's %s", token, first);
  free(token);
  free(first);
  touch_in("go");
  /* its lock was force-unlocked under it: a lost lock, 79 (issue 35) */
  cr_assert_eq(cli_wait(&holder, RUN_BOUND_MS), 79);
  char *err = cli_err(&holder);
  cr_assert(strstr(err, "expired or was deleted") != NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", "--fenced", key)), 1);
}

/* A Java reader's read/write hash, by hand: mode=read, one reader. */
static void java_rw_hash(const char *key, const char *mode,
                         const char *field) {
  rt_int("HSET %s mode %s %s 1", key, mode, field);
  rt_int("PEXPIRE %s 600000", key);
}

/* Issue 35: another kind of lock on NAME is a busy lock, as Java's getLock()
 * sees it (it was exit 69 at once: two cron jobs failed only on the night
 * they overlapped): -n gives up at once, -w after its wait, changing
 * nothing. */
Test(cli, kinds_other_kinds_on_a_read_write_hash_are_busy_changing_nothing) {
  char key[64];
  rt_key(key, sizeof key, "cli:ekind");
  java_rw_hash(key, "read", "java-uuid:61");
  char *before = hash_dump(key);
  struct {
    const char *const *args;
    int64_t wait_ms;
  } cases[] = {
      {ARGS("-n", key, "--", "touch", "ran"), 0},
      {ARGS("-w", "600ms", key, "--", "touch", "ran"), 600},
      {ARGS("--fenced", "-n", key, "--", "touch", "ran"), 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    cr_assert_eq(cli_run(&p, cases[i].args), 1, "case %zu", i);
    cr_assert(cli_elapsed(&p) >= cases[i].wait_ms &&
                  cli_elapsed(&p) < cases[i].wait_ms + PROMPT_MS,
              "case %zu: waited %" PRId64 " ms", i, cli_elapsed(&p));
    char *err = cli_err(&p), *out = cli_out(&p);
    cr_assert_str_eq(err, "", "case %zu", i);
    cr_assert_str_eq(out, "");
    free(err);
    free(out);
  }
  cr_assert(!exists_in("ran"));
  char *after = hash_dump(key);
  cr_assert_str_eq(after, before, "the read/write hash changed");
  long long ttl = rt_pttl(key);
  cr_assert(ttl > 500000, "TTL touched: %lld", ttl);
  free(after);

  /* status tells the kind: mode and readers; then a writer */
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  char expect[256];
  snprintf(expect, sizeof expect,
           "%s: locked (read/write lock, read mode), expires in ", key);
  cr_assert(strncmp(out, expect, strlen(expect)) == 0, "status: %s", out);
  cr_assert(strstr(out, "\n  reader java-uuid:61  holds 1\n") != NULL,
            "status: %s", out);
  cr_assert(strstr(out, "field mode") == NULL, "status: %s", out);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("status", "--json", key)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, ",\"kind\":\"rwlock\",") != NULL &&
                strstr(out, ",\"mode\":\"read\",\"holders\":[{\"owner\":"
                            "\"java-uuid:61\",\"client\":\"java-uuid\","
                            "\"thread\":61,\"count\":1,\"writer\":false") !=
                    NULL &&
                strstr(out, "\"field\"") == NULL,
            "json: %s", out);
  free(out);
  free(before);

  char wkey[64];
  rt_key(wkey, sizeof wkey, "cli:ekind-w");
  java_rw_hash(wkey, "write", "java-uuid:62:write");
  cr_assert_eq(cli_run(&p, ARGS("status", wkey)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, "(read/write lock, write mode)") != NULL &&
                strstr(out, "\n  writer java-uuid:62  holds 1\n") != NULL,
            "status: %s", out);
  free(out);
  /* unlock --force without a kind is type-blind, as before: the default
   * force unlock deletes it */
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", wkey)), 0);
  cr_assert_eq(rt_exists(wkey), 0);
}

/* [fair] The fair lock on a read/write hash: busy the same way. */
Test(cli, kinds_fair_on_a_read_write_hash_is_busy) {
  char key[64];
  rt_key(key, sizeof key, "cli:ekind-fair");
  java_rw_hash(key, "read", "java-uuid:61");
  char *before = hash_dump(key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--fair", "-w", "600ms", key, "--", "touch",
                                "ran")),
               1);
  cr_assert(cli_elapsed(&p) >= 600 && cli_elapsed(&p) < 600 + PROMPT_MS);
  cr_assert(!exists_in("ran"));
  char *after = hash_dump(key);
  cr_assert_str_eq(after, before);
  free(after);
  free(before);
}

/* [rw] Two -s holders at once; -x waits for both. */
Test(cli, kinds_shared_holders_overlap_and_exclusive_waits_for_them) {
  char key[64], rw_channel[128];
  rt_key(key, sizeof key, "cli:rw");
  tagged_key(rw_channel, sizeof rw_channel, "redisson_rwlock:", key);
  const char *reader =
      "echo \"$R start\" >> log; touch \"started-$R\";"
      " while [ ! -e go ]; do sleep 0.02; done; echo \"$R end\" >> log";
  cli_proc r1, r2, w;
  setenv("R", "r1", 1);
  cli_start(&r1, ARGS("-s", key, "--", "sh", "-c", reader));
  rt_wait_until_what(file_exists, "started-r1", 10000, "first -s runs");
  setenv("R", "r2", 1);
  cli_start(&r2, ARGS("--shared", key, "--", "sh", "-c", reader));
  /* the second reader runs while the first still does: shared */
  rt_wait_until_what(file_exists, "started-r2", 10000,
                     "second -s runs beside the first");
  unsetenv("R");
  cr_assert(cli_running(&r1) && cli_running(&r2));
  char *mode = rt_hget(key, "mode");
  cr_assert(mode != NULL && strcmp(mode, "read") == 0, "mode %s",
            mode ? mode : "(nil)");
  free(mode);

  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  cr_assert(strstr(out, ": locked (read/write lock, read mode), expires in ")
                != NULL,
            "status: %s", out);
  char *first = strstr(out, "\n  reader ");
  cr_assert(first != NULL && strstr(first + 1, "\n  reader ") != NULL,
            "two readers: %s", out);
  free(out);

  /* -x: busy with -n, waits without */
  cr_assert_eq(cli_run(&p, ARGS("-x", "-n", key, "--", "touch", "ran")), 1);
  cli_start(&w, ARGS("-x", key, "-c", "echo 'w start' >> log"));
  wait_numsub(rw_channel, 1);
  rt_sleep_ms(300);
  cr_assert(cli_running(&w), "-x did not wait for the readers");
  touch_in("go");
  cr_assert_eq(cli_wait(&r1, RUN_BOUND_MS), 0);
  cr_assert_eq(cli_wait(&r2, RUN_BOUND_MS), 0);
  cr_assert_eq(cli_wait(&w, RUN_BOUND_MS), 0);
  cr_assert(!exists_in("ran"));
  size_t n;
  char **lines = lines_in("log", &n);
  cr_assert_eq(n, 5, "log has %zu lines", n);
  /* both started before either ended (they overlapped), the writer last */
  cr_assert(strstr(lines[0], " start") && strstr(lines[1], " start") &&
                strstr(lines[2], " end") && strstr(lines[3], " end"),
            "log: %s / %s / %s / %s", lines[0], lines[1], lines[2],
            lines[3]);
  cr_assert_str_eq(lines[4], "w start");
  lines_free(lines, n);
  cr_assert_eq(rt_exists(key), 0, "read/write lock left behind");
}

/* [rw] -x excludes -x (and -s). */
Test(cli, kinds_exclusive_excludes_exclusive) {
  char key[64], rw_channel[128];
  rt_key(key, sizeof key, "cli:rwx");
  tagged_key(rw_channel, sizeof rw_channel, "redisson_rwlock:", key);
  cli_proc w1, w2;
  cli_start(&w1, ARGS("-x", key, "--", "sh", "-c",
                      "echo \"$RLOCK_OWNER\" > owner.tmp && mv owner.tmp"
                      " owner; while [ ! -e go ]; do sleep 0.02; done;"
                      " echo w1 >> log"));
  rt_wait_until_what(file_exists, "owner", 10000, "first -x runs");
  char *mode = rt_hget(key, "mode");
  cr_assert(mode != NULL && strcmp(mode, "write") == 0);
  free(mode);
  char *owner = first_line_in("owner");
  cr_assert(is_owner(owner), "RLOCK_OWNER %s", owner);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  char expect[256];
  snprintf(expect, sizeof expect, "\n  writer %s  holds 1\n", owner);
  cr_assert(strstr(out, "(read/write lock, write mode)") != NULL &&
                strstr(out, expect) != NULL,
            "status: %s", out);
  free(out);
  free(owner);

  cr_assert_eq(cli_run(&p, ARGS("-x", "-n", key, "--", "touch", "ran")), 1);
  cr_assert_eq(cli_run(&p, ARGS("-s", "-n", key, "--", "touch", "ran")), 1);
  cr_assert_eq(cli_run(&p, ARGS("--exclusive", "-w", "400ms", key, "--",
                                "touch", "ran")),
               1);
  cli_start(&w2, ARGS("-x", key, "-c", "echo w2 >> log"));
  wait_numsub(rw_channel, 1);
  rt_sleep_ms(300);
  cr_assert(cli_running(&w2), "second -x ran beside the first");
  int64_t released = rt_now_ms();
  touch_in("go");
  cr_assert_eq(cli_wait(&w1, RUN_BOUND_MS), 0);
  cr_assert_eq(cli_wait(&w2, RUN_BOUND_MS), 0);
  cr_assert(w2.ended_ms - released < PROMPT_MS, "woken after %" PRId64 " ms",
            w2.ended_ms - released);
  char *log = slurp_in("log");
  cr_assert_str_eq(log, "w1\nw2\n");
  free(log);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
}

/* [rw] A plain lock on a name held by -s waits for it (issue 35: it was
 * exit 69 at once), then runs; the read/write hash is not touched while
 * it waits. */
Test(cli, kinds_plain_lock_waits_for_shared_then_runs) {
  char key[64];
  rt_key(key, sizeof key, "cli:rw-ekind");
  cli_proc r;
  cli_start(&r, ARGS("-s", key, "--", "sh", "-c",
                     "touch held; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "held", 10000, "-s runs");
  char *before = hash_dump(key);
  cr_assert(strstr(before, "mode=read\n") != NULL, "hash: %s", before);
  cli_proc p;
  cli_start(&p, ARGS("-w", "20s", key, "--", "sh", "-c",
                     "[ -e go ] && touch ran"));
  rt_sleep_ms(700);
  cr_assert(cli_running(&p), "the plain lock did not wait");
  cr_assert(!exists_in("ran"));
  char *after = hash_dump(key);
  cr_assert_str_eq(after, before, "the read/write hash changed");
  free(after);
  free(before);
  int64_t go = rt_now_ms();
  touch_in("go");
  cr_assert_eq(cli_wait(&r, RUN_BOUND_MS), 0);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  cr_assert(exists_in("ran"), "COMMAND ran before -s was done");
  cr_assert(p.ended_ms - go < PROMPT_MS, "ran %" PRId64 " ms after",
            p.ended_ms - go);
  char *rerr = cli_err(&r);
  cr_assert_str_eq(rerr, "", "the -s holder was disturbed");
  free(rerr);
  cr_assert_eq(rt_exists(key), 0);
}

/* [rw] flock's habit: `rlock -x NAME` in one job, `rlock NAME` in another.
 * -x waits for the plain holder and runs after it; -n is busy (1). */
Test(cli, kinds_exclusive_waits_for_a_plain_lock_like_flock) {
  char key[64];
  rt_key(key, sizeof key, "cli:rw-on-plain");
  held h;
  hold(&h, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-x", "-n", key, "--", "touch", "ran")), 1);
  cli_start(&p, ARGS("-x", "-w", "20s", key, "--", "touch", "ran"));
  rt_sleep_ms(700);
  cr_assert(cli_running(&p), "-x did not wait");
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_hlen(key), 1);
  unhold(&h);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  cr_assert(exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
}

/* [rw] unlock --force -s / -x: the kind's force unlock (only in its mode). */
Test(cli, kinds_unlock_force_shared_and_exclusive) {
  char key[64];
  rt_key(key, sizeof key, "cli:rw-force");
  java_rw_hash(key, "read", "java-uuid:61");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", "-x", key)), 1);
  char *out = cli_out(&p);
  char expect[128];
  snprintf(expect, sizeof expect, "%s: was not locked in write mode\n", key);
  cr_assert_str_eq(out, expect);
  free(out);
  cr_assert_eq(rt_exists(key), 1, "-x force-unlocked a read-mode lock");
  cr_assert_eq(cli_run(&p, ARGS("unlock", "--force", "-s", key)), 0);
  out = cli_out(&p);
  snprintf(expect, sizeof expect, "%s: unlocked\n", key);
  cr_assert_str_eq(out, expect);
  free(out);
  cr_assert_eq(rt_exists(key), 0);
}

/* [fair] Three --fair waiters run in the order they queued. */
Test(cli, kinds_fair_runs_in_arrival_order) {
  char key[64], queue[128];
  rt_key(key, sizeof key, "cli:fair");
  tagged_key(queue, sizeof queue, "redisson_lock_queue:", key);
  cli_proc holder, w[3];
  cli_start(&holder, ARGS("--fair", key, "--", "sh", "-c",
                          "touch held; while [ ! -e go ]; do sleep 0.02;"
                          " done; echo H >> order"));
  rt_wait_until_what(file_exists, "held", 10000, "--fair holder runs");
  const char *names[3] = {"A", "B", "C"};
  char script[3][64];
  for (int i = 0; i < 3; i++) {
    snprintf(script[i], sizeof script[i], "echo %s >> order", names[i]);
    cli_start(&w[i], ARGS("--fair", key, "-c", script[i]));
    llen_arg a = {queue, i + 1};
    rt_wait_until_what(llen_is, &a, 10000, "waiter queued");
  }
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  cr_assert(strstr(out, "\n  fair lock: 3 waiting in its queue\n") != NULL,
            "status: %s", out);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("status", "--json", key)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, ",\"queue\":{\"length\":3,\"head\":{\"owner\":") != NULL,
            "json: %s", out);
  free(out);
  for (int i = 0; i < 3; i++)
    cr_assert(cli_running(&w[i]), "waiter %s did not wait", names[i]);
  touch_in("go");
  cr_assert_eq(cli_wait(&holder, RUN_BOUND_MS), 0);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(cli_wait(&w[i], RUN_BOUND_MS), 0, "waiter %s", names[i]);
  char *order = slurp_in("order");
  cr_assert_str_eq(order, "H\nA\nB\nC\n", "not first come, first served");
  free(order);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rt_int("LLEN %s", queue), 0, "queue left behind");
}

/* [rw] A signal while -x waits behind -s: given up, the reader untouched. */
Test(cli, kinds_signal_while_exclusive_waits_gives_up) {
  char key[64], rw_channel[128];
  rt_key(key, sizeof key, "cli:rw-intr");
  tagged_key(rw_channel, sizeof rw_channel, "redisson_rwlock:", key);
  cli_proc r, w;
  cli_start(&r, ARGS("-s", key, "--", "sh", "-c",
                     "touch held; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "held", 10000, "-s runs");
  char *before = hash_dump(key);
  cli_start(&w, ARGS("-x", key, "--", "touch", "ran"));
  wait_numsub(rw_channel, 1);
  int64_t sent = rt_now_ms();
  kill(w.pid, SIGINT);
  cr_assert_eq(cli_wait(&w, RUN_BOUND_MS), 128 + SIGINT);
  cr_assert(w.ended_ms - sent < PROMPT_MS);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_numsub(rw_channel), 0, "waiter still subscribed");
  char *after = hash_dump(key);
  cr_assert_str_eq(after, before, "the reader's hash changed");
  free(after);
  free(before);
  touch_in("go");
  cr_assert_eq(cli_wait(&r, RUN_BOUND_MS), 0);
  cr_assert_eq(rt_exists(key), 0);
}

/* ---- --permits: a permit-expirable semaphore ---- */

Test(cli, permits_runs_at_most_n_at_once) {
  char key[64];
  rt_key(key, sizeof key, "cli:permits");
  const char *script = "echo S >> stamps; sleep 1; echo E >> stamps";
  cli_proc p[3];
  for (int i = 0; i < 3; i++)
    cli_start(&p[i], ARGS("--permits", "2", key, "-c", script));
  for (int i = 0; i < 3; i++)
    cr_assert_eq(cli_wait(&p[i], RUN_BOUND_MS), 0);
  char *stamps = slurp_in("stamps");
  int running = 0, max = 0, starts = 0, ends = 0, third_after_end = 0;
  for (const char *c = stamps; *c != '\0'; c++) {
    if (*c == 'S') {
      running++;
      starts++;
      if (starts == 3)
        third_after_end = ends > 0;
    } else if (*c == 'E') {
      running--;
      ends++;
    }
    if (running > max)
      max = running;
  }
  cr_assert_eq(starts, 3, "stamps: %s", stamps);
  cr_assert_eq(ends, 3, "stamps: %s", stamps);
  cr_assert(max <= 2, "%d ran at once: %s", max, stamps);
  cr_assert(third_after_end, "the third started before any ended: %s",
            stamps);
  free(stamps);
  /* all permits back, the semaphore of 2 kept */
  cr_assert_eq(rt_int("ZCARD {%s}:timeout", key), 0);
  char *count = rt_str("GET %s", key);
  cr_assert_str_eq(count, "2");
  free(count);
}

Test(cli, permits_of_a_sigkilled_rlock_return_after_the_lease) {
  char key[64];
  rt_key(key, sizeof key, "cli:permitkill");
  cli_proc p;
  cli_start(&p, ARGS("--permits", "1", "--watchdog", "900ms", key, "--", "sh",
                     "-c", "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 30"));
  rt_wait_until_what(file_exists, "pid", 10000, "COMMAND started");
  char *pid_text = first_line_in("pid");
  pid_t child = (pid_t)atoi(pid_text);
  free(pid_text);
  cr_assert_eq(kill(p.pid, SIGKILL), 0);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 128 + SIGKILL);
  kill(child, SIGKILL);
  /* still taken: nobody released it */
  cli_proc busy;
  cr_assert_eq(cli_run(&busy, ARGS("--permits", "1", "-n", key, "true")), 1);
  cli_proc next;
  cr_assert_eq(cli_run(&next, ARGS("--permits", "1", "-w", "10s", key, "--",
                                   "sh", "-c", "echo ran > ran")),
               0);
  cr_assert(cli_elapsed(&next) < 900 + PROMPT_MS, "took %" PRId64 " ms",
            cli_elapsed(&next));
  cr_assert(exists_in("ran"));
}

Test(cli, permits_usage_errors) {
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--permits", "0", "k", "true")), 64);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "--permits") != NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(cli_run(&p, ARGS("--permits", "x", "k", "true")), 64);
  cr_assert_eq(cli_run(&p, ARGS("--permits", "-1", "k", "true")), 64);
  cr_assert_eq(cli_run(&p, ARGS("--permits", "2", "-s", "k", "true")), 64);
  cr_assert_eq(cli_run(&p, ARGS("--fenced", "--permits", "2", "k", "true")),
               64);
}

/* Issue 29: --take K holds K permits at once (one acquire, K ids in
 * RLOCK_OWNER) and gives all K back at the end. */
Test(cli, take_holds_k_permits_at_once) {
  char key[64];
  rt_key(key, sizeof key, "cli:take");
  cli_proc p;
  cli_start(&p, ARGS("--permits", "3", "--take", "2", key, "--", "sh", "-c",
                     "echo \"$RLOCK_OWNER\" > owner.tmp && mv owner.tmp "
                     "owner; sleep 2"));
  rt_wait_until_what(file_exists, "owner", 10000, "COMMAND started");
  char *owner = first_line_in("owner");
  cr_assert_eq(strlen(owner), 2 * 32 + 1, "RLOCK_OWNER '%s'", owner);
  cr_assert_eq(owner[32], ',', "RLOCK_OWNER '%s'", owner);
  cr_assert_eq(rt_int("ZCARD {%s}:timeout", key), 2);
  char *count = rt_str("GET %s", key);
  cr_assert_str_eq(count, "1");
  free(count);
  /* each id is a member (16 raw bytes of its hex) */
  for (int i = 0; i < 2; i++) {
    unsigned char raw[16];
    for (int b = 0; b < 16; b++) {
      unsigned v = 0;
      sscanf(owner + i * 33 + 2 * b, "%2x", &v);
      raw[b] = (unsigned char)v;
    }
    redisReply *r = rt_cmd("ZSCORE {%s}:timeout %b", key, raw, (size_t)16);
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "id %d is not taken", i);
    freeReplyObject(r);
  }
  free(owner);
  cli_proc busy, one;
  cr_assert_eq(cli_run(&busy, ARGS("--permits", "3", "--take", "2", "-n",
                                   key, "true")),
               1, "2 more of 3 with 1 free: busy");
  cr_assert_eq(cli_run(&one, ARGS("--permits", "3", "-n", key, "true")), 0,
               "the third permit is free");
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  cr_assert_eq(rt_int("ZCARD {%s}:timeout", key), 0);
  count = rt_str("GET %s", key);
  cr_assert_str_eq(count, "3", "all back");
  free(count);
}

Test(cli, take_usage_errors) {
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--permits", "3", "--take", "4", "k",
                                "true")),
               64);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "--take is more than --permits") != NULL,
            "stderr: %s", err);
  free(err);
  cr_assert_eq(cli_run(&p, ARGS("--take", "2", "k", "true")), 64);
  err = cli_err(&p);
  cr_assert(strstr(err, "--take needs --permits") != NULL, "stderr: %s",
            err);
  free(err);
  cr_assert_eq(cli_run(&p, ARGS("--permits", "3", "--take", "0", "k",
                                "true")),
               64);
  cr_assert_eq(cli_run(&p, ARGS("--permits", "2000", "--take", "1025", "k",
                                "true")),
               64);
  cr_assert_eq(cli_run(&p, ARGS("--permits", "3", "--take", "x", "k",
                                "true")),
               64);
}

/* Issue 24: 2^31 and more were refused as if below 1 ("at least 1"). */
Test(cli, permits_out_of_range_names_the_range) {
  const char *const too_big[] = {"2147483648", "9223372036854775807",
                                 "99999999999999999999"};
  cli_proc p;
  for (size_t i = 0; i < sizeof too_big / sizeof too_big[0]; i++) {
    cr_assert_eq(cli_run(&p, ARGS("--permits", too_big[i], "k", "true")), 64);
    char *err = cli_err(&p);
    cr_assert(strstr(err, "from 1 to 2147483647") != NULL, "stderr: %s", err);
    cr_assert(strstr(err, "at least 1") == NULL, "stderr: %s", err);
    free(err);
  }
  /* The top of the range is taken. */
  char key[64];
  rt_key(key, sizeof key, "cli:permitsmax");
  cr_assert_eq(cli_run(&p, ARGS("--permits", "2147483647", "-n", key, "--",
                                "sh", "-c", "echo ran > ran")),
               0);
  cr_assert(exists_in("ran"));
  char *count = rt_str("GET %s", key);
  cr_assert_str_eq(count, "2147483647");
  free(count);
}

Test(cli, permits_other_size_warns_and_goes_on) {
  char key[64];
  rt_key(key, sizeof key, "cli:permitsize");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--permits", "3", key, "true")), 0);
  cr_assert_eq(cli_run(&p, ARGS("--permits", "2", key, "true")), 0);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "has 3 permits") != NULL &&
                strstr(err, "not the 2") != NULL,
            "stderr: %s", err);
  free(err);
}

/* A client taking and giving back a permit as fast as it can, until told
 * to stop: the semaphore's counts move all the time, its size never. */
typedef struct churn {
  const char *name;
  atomic_bool stop;
  long rounds;
} churn;

static void churn_permits(void *arg) {
  churn *c = arg;
  rlock_client *client = rt_client();
  rlock_permit_semaphore *sem = NULL;
  cr_assert_eq(rlock_permit_semaphore_new(client, c->name, &sem), 0);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  while (!atomic_load(&c->stop)) {
    if (rlock_permit_semaphore_try_acquire(sem, 0, 10000, id) == 1) {
      cr_assert_eq(rlock_permit_semaphore_release(sem, id), 0);
      c->rounds++;
    }
  }
  rlock_permit_semaphore_free(sem);
  rlock_client_free(client);
}

/* Issue 35: --permits read the size in two round trips (available, then
 * taken) and warned of a wrong size when a permit moved between them (1
 * run in 7 with 3 jobs at once). One atomic read now: no warning while
 * another client takes and returns permits all the time. */
Test(cli, permits_no_false_size_warning_while_permits_move) {
  char key[64];
  rt_key(key, sizeof key, "cli:permitchurn");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--permits", "3", key, "true")), 0);
  churn c = {.name = key};
  rt_thread t;
  rt_thread_start(&t, churn_permits, &c);
  for (int i = 0; i < 12; i++) {
    cr_assert_eq(cli_run(&p, ARGS("--permits", "3", "-w", "10", key, "true")),
                 0);
    char *err = cli_err(&p);
    cr_assert(strstr(err, "warning") == NULL, "run %d: stderr: %s", i, err);
    free(err);
  }
  atomic_store(&c.stop, true);
  rt_thread_join(&t, 10000);
  cr_assert(c.rounds > 12, "the permits hardly moved: %ld rounds", c.rounds);
}

Test(cli, status_shows_permits_and_latch_count) {
  char key[64], latch[64];
  rt_key(key, sizeof key, "cli:permitstatus");
  rt_key(latch, sizeof latch, "cli:latch");
  cli_proc p;
  cli_start(&p, ARGS("--permits", "2", key, "--", "sh", "-c",
                     "touch started; sleep 30"));
  rt_wait_until_what(file_exists, "started", 10000, "COMMAND started");
  cli_proc s;
  cr_assert_eq(cli_run(&s, ARGS("status", key)), 0);
  char *out = cli_out(&s);
  char expect[160];
  snprintf(expect, sizeof expect,
           "%s: semaphore (permit-expirable), 1 permit available, 1 taken\n"
           "  permit ",
           key);
  cr_assert(strncmp(out, expect, strlen(expect)) == 0, "status: %s", out);
  cr_assert(strstr(out, "lease expires in") != NULL, "status: %s", out);
  free(out);
  cr_assert_eq(cli_run(&s, ARGS("status", "--json", key)), 0);
  out = cli_out(&s);
  cr_assert(strstr(out, "\"permits_available\":1") != NULL &&
                strstr(out, "\"permits_taken\":1") != NULL,
            "status: %s", out);
  free(out);
  kill(p.pid, SIGTERM);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 128 + SIGTERM);
  cr_assert_eq(cli_run(&s, ARGS("status", key)), 0);
  out = cli_out(&s);
  /* no permit taken: Redis deleted the empty zset, so it reads as a count */
  snprintf(expect, sizeof expect, "%s: count 2 (", key);
  cr_assert(strncmp(out, expect, strlen(expect)) == 0, "status: %s", out);
  free(out);
  rt_ok("OK", "SET %s 3", latch);
  cr_assert_eq(cli_run(&s, ARGS("status", latch)), 0);
  out = cli_out(&s);
  snprintf(expect, sizeof expect, "%s: count 3 (", latch);
  cr_assert(strncmp(out, expect, strlen(expect)) == 0, "status: %s", out);
  free(out);
}

/* ---- Redis Sentinel and replica sync ---- */

/* A real sentinel (redis-server --sentinel) on a free port, its config in
 * the test's directory, monitoring the suite's server as `mymaster`;
 * stopped by the teardown (sentinel_stop). */
static pid_t g_sentinel_pid = -1;
static int g_sentinel_port;

static void sentinel_stop(void) {
  if (g_sentinel_pid > 0) {
    kill(g_sentinel_pid, SIGKILL);
    waitpid(g_sentinel_pid, NULL, 0);
  }
  g_sentinel_pid = -1;
}

static bool sentinel_answers(void *arg) {
  (void)arg;
  struct timeval tv = {0, 200000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", g_sentinel_port, tv);
  bool ok = false;
  if (c != NULL && !c->err) {
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, "PING");
    /* +PONG, or -NOAUTH from a sentinel with requirepass: it is up */
    ok = r != NULL && (r->type == REDIS_REPLY_STATUS ||
                       r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
  }
  if (c != NULL)
    redisFree(c);
  return ok;
}

/* Starts the sentinel; `extra_conf` (NULL: none) is appended to its
 * config, e.g. "requirepass ...\n". */
static void sentinel_start(const char *extra_conf) {
  const char *bin = getenv("REDIS_SERVER");
  if (bin == NULL || bin[0] == '\0')
    bin = "redis-server";
  for (int attempt = 0; attempt < 3; attempt++) {
    g_sentinel_port = rt_free_port();
    char conf[PATH_LEN], log[PATH_LEN];
    path_in(conf, sizeof conf, "sentinel.conf");
    path_in(log, sizeof log, "sentinel.log");
    FILE *f = fopen(conf, "w");
    cr_assert(f != NULL, "create %s: %s", conf, strerror(errno));
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndir %s\n"
            "sentinel monitor mymaster 127.0.0.1 %d 1\n%s",
            g_sentinel_port, g_dir, rt_port(),
            extra_conf != NULL ? extra_conf : "");
    cr_assert(fclose(f) == 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(120);
      int in = open("/dev/null", O_RDONLY);
      int out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in < 0 || out < 0)
        _exit(121);
      dup2(in, 0);
      dup2(out, 1);
      dup2(out, 2);
      execlp(bin, bin, conf, "--sentinel", (char *)NULL);
      _exit(122);
    }
    g_sentinel_pid = pid;
    if (rt_poll_until(sentinel_answers, NULL, 5000))
      return;
    sentinel_stop(); /* port taken meanwhile, or it failed: try again */
  }
  char *text = slurp_in("sentinel.log");
  cr_assert_fail("the sentinel did not start; its log: %s", text);
}

static void sentinel_uri(char *buf, size_t n, const char *master) {
  snprintf(buf, n, "redis+sentinel://127.0.0.1:%d/%s", g_sentinel_port,
           master);
}

Test(cli, sentinel_and_replica_sync_options_refuse_bad_values) {
  char key[64], uri[96], pw_empty[PATH_LEN], pw_two[PATH_LEN];
  rt_key(key, sizeof key, "cli:sentinel-usage");
  /* nothing listens there: each case must fail before connecting */
  snprintf(uri, sizeof uri, "redis+sentinel://127.0.0.1:%d/mymaster",
           rt_free_port());
  touch_in("pw.empty");
  path_in(pw_empty, sizeof pw_empty, "pw.empty");
  path_in(pw_two, sizeof pw_two, "pw.two");
  FILE *f = fopen(pw_two, "w");
  cr_assert(f != NULL);
  fputs("one\ntwo\n", f);
  cr_assert(fclose(f) == 0);
  struct {
    const char *const *args;
    const char *says;
  } cases[] = {
      {ARGS("--replica-sync-timeout", "0", key, "-c", "touch ran"),
       "at least 1ms"},
      {ARGS("--replica-sync-timeout", "soon", key, "-c", "touch ran"),
       "invalid --replica-sync-timeout 'soon'"},
      {ARGS("--replica-sync-timeout", "-1", key, "-c", "touch ran"),
       "invalid --replica-sync-timeout '-1'"},
      {ARGS("--replica-sync-timeout", key, "-c", "touch ran"),
       "invalid --replica-sync-timeout"},
      {ARGS("--no-replica-sync", "--replica-sync-timeout", "1s", key, "-c",
            "touch ran"),
       "exclude each other"},
      {ARGS("--no-replica-sync=1", key, "-c", "touch ran"),
       "--no-replica-sync"},
      {ARGS(key, "-c", "touch ran", "--replica-sync-timeout"), "exactly one"},
      /* sentinel options need a sentinel URI ($REDIS_URL is redis://) */
      {ARGS("--sentinel-user", "u", key, "-c", "touch ran"),
       "--sentinel-user needs a redis+sentinel://"},
      {ARGS("--sentinel-password-file", pw_two, key, "-c", "touch ran"),
       "--sentinel-password-file needs a redis+sentinel://"},
      {ARGS("status", "--sentinel-user", "u", key),
       "--sentinel-user needs a redis+sentinel://"},
      {ARGS("unlock", "--force", "--sentinel-password-file", pw_two, key),
       "--sentinel-password-file needs a redis+sentinel://"},
      {ARGS("-u", "redis+cluster://127.0.0.1:1", "--sentinel-user", "u",
            key, "-c", "touch ran"),
       "needs a redis+sentinel://"},
      {ARGS("-u", uri, "--sentinel-user", "u", key, "-c", "touch ran"),
       "--sentinel-user needs --sentinel-password-file"},
      {ARGS("-u", uri, "--sentinel-user", "", "--sentinel-password-file",
            pw_two, key, "-c", "touch ran"),
       "must not be empty"},
      {ARGS("-u", uri, "--sentinel-password-file", "/nonexistent/pw", key,
            "-c", "touch ran"),
       "cannot read --sentinel-password-file '/nonexistent/pw'"},
      {ARGS("-u", uri, "--sentinel-password-file", pw_empty, key, "-c",
            "touch ran"),
       "the file is empty"},
      {ARGS("-u", uri, "--sentinel-password-file", pw_two, key, "-c",
            "touch ran"),
       "more than one line"},
      {ARGS("-u", uri, "--sentinel-password-file", "/", key, "-c",
            "touch ran"),
       "cannot use --sentinel-password-file '/'"},
      {ARGS("status", "-u", uri, "--sentinel-password-file"), "needs a value"},
      /* a sentinel URI without a master name, an empty host list */
      {ARGS("-u", "redis+sentinel://127.0.0.1:26379", key, "-c", "touch ran"),
       "invalid Redis URI"},
      {ARGS("-u", "redis+cluster://", key, "-c", "touch ran"),
       "invalid Redis URI"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    int code = cli_run(&p, cases[i].args);
    char *err = cli_err(&p), *out = cli_out(&p);
    cr_expect_eq(code, 64, "case %zu: exit %d, stderr: %s", i, code, err);
    cr_expect(strncmp(err, "rlock: ", 7) == 0, "case %zu: %s", i, err);
    cr_expect(strstr(err, cases[i].says) != NULL,
              "case %zu: no \"%s\" in: %s", i, cases[i].says, err);
    char *second = strchr(err, '\n');
    if (second != NULL && second[1] != '\0')
      cr_expect(strncmp(second + 1, "Try 'rlock --help'", 18) == 0,
                "case %zu: more than one message: %s", i, err);
    cr_expect_str_eq(out, "", "case %zu: stdout: %s", i, out);
    free(err);
    free(out);
  }
  cr_assert(!exists_in("ran"), "a command ran despite a usage error");
}

Test(cli, replica_sync_options_are_accepted) {
  /* The suite's server has no replicas: with replica sync on, no WAIT is
   * sent and the run is as usual; each form parses. */
  char key[64];
  rt_key(key, sizeof key, "cli:replica-sync");
  const char *const *cases[] = {
      ARGS("--no-replica-sync", key, "-c", "touch ran0"),
      ARGS("--replica-sync-timeout", "1", key, "-c", "touch ran1"),
      ARGS("--replica-sync-timeout", "1.5s", key, "-c", "touch ran2"),
      ARGS("--replica-sync-timeout=250ms", "-s", key, "-c", "touch ran3"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    run_expect(&p, cases[i], 0);
    char file[8];
    snprintf(file, sizeof file, "ran%zu", i);
    cr_assert(exists_in(file), "case %zu: COMMAND did not run", i);
  }
  cr_assert_eq(rt_exists(key), 0, "the lock was not released");
}

Test(cli, sentinel_without_the_master_exits_75_naming_it) {
  sentinel_start(NULL);
  char key[64], uri[96];
  rt_key(key, sizeof key, "cli:sentinel-nomaster");
  sentinel_uri(uri, sizeof uri, "nosuchmaster");
  const char *const *cases[] = {
      ARGS("-u", uri, key, "-c", "touch ran"),
      ARGS("status", "-u", uri, key),
      ARGS("unlock", "--force", "-u", uri, key),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    run_expect(&p, cases[i], 75);
    cr_expect_lt(cli_elapsed(&p), RUN_BOUND_MS, "case %zu", i);
    expect_one_line_with(
        &p, ARGS("cannot connect to Redis", "'nosuchmaster'"), "no master");
  }
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
}

Test(cli, sentinel_uri_locks_on_the_master_it_names) {
  sentinel_start(NULL);
  char key[64], uri[96];
  rt_key(key, sizeof key, "cli:sentinel");
  sentinel_uri(uri, sizeof uri, "mymaster");
  cli_proc p;
  run_expect(&p, ARGS("-u", uri, key, "-c", "true"), 0);
  /* COMMAND runs while the lock is in the master (the suite's server):
   * status there, through the plain URI, shows the owner rlock gave it */
  run_expect(&p,
             ARGS("-u", uri, key, "-c",
                  "\"$RLOCK_CLI\" status --json -u \"$REDIS_URL\" "
                  "\"$RLOCK_NAME\" > st && echo \"$RLOCK_OWNER\" > owner"),
             0);
  char *st = slurp_in("st"), *owner = first_line_in("owner");
  cr_assert(owner[0] != '\0', "no RLOCK_OWNER");
  cr_assert(strstr(st, owner) != NULL, "status in the master: %s (owner %s)",
            st, owner);
  free(st);
  free(owner);
  cr_assert_eq(rt_exists(key), 0, "the lock was not released");
  /* status and unlock through the sentinel read the master too */
  cr_assert_eq(rt_int("HSET %s someone:1 1", key), 1);
  run_expect(&p, ARGS("status", "-u", uri, key), 0);
  char *out = cli_out(&p);
  cr_assert(strstr(out, "someone:1") != NULL, "status: %s", out);
  free(out);
  run_expect(&p, ARGS("unlock", "--force", "-u", uri, key), 0);
  cr_assert_eq(rt_exists(key), 0, "unlock --force through the sentinel");
  /* -n against a held lock, through the sentinel: exit 1 */
  cr_assert_eq(rt_int("HSET %s someone:1 1", key), 1);
  run_expect(&p, ARGS("-n", "-u", uri, key, "-c", "touch ran"), 1);
  cr_assert(!exists_in("ran"));
}

Test(cli, sentinel_password_file_authenticates_to_the_sentinel) {
  sentinel_start("requirepass s3ntinel\n");
  char key[64], uri[96], good[PATH_LEN], bad[PATH_LEN];
  rt_key(key, sizeof key, "cli:sentinel-auth");
  sentinel_uri(uri, sizeof uri, "mymaster");
  path_in(good, sizeof good, "pw.good");
  path_in(bad, sizeof bad, "pw.bad");
  FILE *f = fopen(good, "w");
  cr_assert(f != NULL);
  fputs("s3ntinel\n", f); /* the final newline is not part of it */
  cr_assert(fclose(f) == 0);
  f = fopen(bad, "w");
  cr_assert(f != NULL);
  fputs("wrong", f);
  cr_assert(fclose(f) == 0);
  cli_proc p;
  run_expect(&p,
             ARGS("-u", uri, "--sentinel-password-file", good, key, "-c",
                  "touch ran"),
             0);
  cr_assert(exists_in("ran"));
  run_expect(&p, ARGS("status", "-u", uri, "--sentinel-password-file", good,
                      key),
             0);
  /* the password reaches the sentinel only, never argv or stderr */
  run_expect(&p,
             ARGS("-u", uri, "--sentinel-password-file", bad, key, "-c",
                  "touch ran2"),
             69);
  char *err = cli_err(&p);
  cr_expect(strstr(err, "wrong") == NULL, "password in the message: %s", err);
  free(err);
  cr_assert(!exists_in("ran2"));
  /* without the password the sentinel refuses: exit 69 (authentication) */
  run_expect(&p, ARGS("-u", uri, key, "-c", "touch ran3"), 69);
  cr_assert(!exists_in("ran3"));
  /* rlock elect and rlock leader take the --sentinel-* options too */
  run_expect(&p, ARGS("leader", "-u", uri, "--sentinel-password-file", good,
                      key),
             1);
  run_expect(&p, ARGS("leader", "-u", uri, key), 69);
  run_expect(&p,
             ARGS("elect", "-u", uri, "--sentinel-password-file", good, key,
                  "--", "sh", "-c",
                  "\"$RLOCK_CLI\" leader -u \"$REDIS_URL\" \"$RLOCK_ELECTION_NAME\" "
                  "> leader"),
             0);
  char *leader = slurp_in("leader");
  cr_assert(strstr(leader, " term ") != NULL, "leader in the master: %s",
            leader);
  free(leader);
}

/* ---- rlock ls and status --watch (issue 28, item 5) ---- */

/* A small JSON checker: true when s is one well-formed JSON value
 * (objects, arrays, strings with escapes, numbers, true/false/null). */
static const char *json_value(const char *s);

static const char *json_ws(const char *s) {
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
    s++;
  return s;
}

static const char *json_str(const char *s) {
  if (*s++ != '"')
    return NULL;
  while (*s != '"') {
    if (*s == '\0' || (unsigned char)*s < 0x20)
      return NULL;
    if (*s == '\\') {
      s++;
      if (*s == 'u') {
        for (int i = 1; i <= 4; i++)
          if (!isxdigit((unsigned char)s[i]))
            return NULL;
        s += 4;
      } else if (strchr("\"\\/bfnrt", *s) == NULL || *s == '\0') {
        return NULL;
      }
    }
    s++;
  }
  return s + 1;
}

static const char *json_list(const char *s, char close, bool object) {
  s = json_ws(s + 1);
  if (*s == close)
    return s + 1;
  for (;;) {
    if (object) {
      s = json_str(json_ws(s));
      if (s == NULL || *(s = json_ws(s)) != ':')
        return NULL;
      s++;
    }
    s = json_value(s);
    if (s == NULL)
      return NULL;
    s = json_ws(s);
    if (*s == close)
      return s + 1;
    if (*s++ != ',')
      return NULL;
  }
}

static const char *json_value(const char *s) {
  s = json_ws(s);
  if (*s == '{')
    return json_list(s, '}', true);
  if (*s == '[')
    return json_list(s, ']', false);
  if (*s == '"')
    return json_str(s);
  for (const char *w = "true\0false\0null\0"; *w != '\0'; w += strlen(w) + 1)
    if (strncmp(s, w, strlen(w)) == 0)
      return s + strlen(w);
  char *end = NULL;
  if (*s == '-' || isdigit((unsigned char)*s)) {
    (void)strtod(s, &end);
    return end;
  }
  return NULL;
}

static bool json_ok(const char *s) {
  const char *end = json_value(s);
  return end != NULL && *json_ws(end) == '\0';
}

static size_t count_of(const char *s, const char *needle) {
  size_t n = 0;
  for (const char *at = s; (at = strstr(at, needle)) != NULL; at++)
    n++;
  return n;
}

static void ignore_cb(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  (void)data;
}

/* Every kind with its holders and counts; the pattern leaves other names
 * out; side keys are not names of their own; a list is skipped with a
 * note; --json says the same and parses. */
Test(cli, ls_lists_every_kind_with_holders_and_counts) {
  char p[64], n[10][96], pat[96], expect[512];
  rt_key(p, sizeof p, "cli:ls");
  const char *suffix[] = {"fair",  "fenced", "latch", "list", "lock",
                          "psem",  "rw",     "sem",   "other"};
  for (int i = 0; i < 9; i++)
    snprintf(n[i], sizeof n[i], "%s:%s", p, suffix[i]);
  snprintf(n[8], sizeof n[8], "%s-other:lock", p); /* outside the pattern */
  rlock_client *c = rt_client(), *c2 = rt_client();
  /* lock: one owner, count 2 */
  rlock *l = rt_lock(c, n[4]);
  uint64_t me = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(l, me, 30000), 0);
  cr_assert_eq(rlock_lock_owner(l, me, 30000), 0);
  char owner[96], client_id[64];
  rt_owner(owner, sizeof owner, c, me);
  snprintf(client_id, sizeof client_id, "%.*s",
           (int)(strrchr(owner, ':') - owner), owner);
  /* fair: a holder and one queued waiter from another client */
  rlock *fair = NULL, *fair2 = NULL;
  cr_assert_eq(rlock_new_fair(c, n[0], &fair), 0);
  cr_assert_eq(rlock_new_fair(c2, n[0], &fair2), 0);
  uint64_t fh = rlock_owner_new(), fw = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(fair, fh, 30000), 0);
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(fair2, fw, 60000, -1, ignore_cb, NULL, &req), 0);
  char queue[128];
  snprintf(queue, sizeof queue, "redisson_lock_queue:{%s}", n[0]);
  for (int i = 0; i < 100 && rt_int("LLEN %s", queue) != 1; i++)
    rt_sleep_ms(50);
  cr_assert_eq(rt_int("LLEN %s", queue), 1);
  /* fenced: its token left after the unlock */
  rlock *f = NULL;
  cr_assert_eq(rlock_new_fenced(c, n[1], &f), 0);
  int64_t token = 0;
  cr_assert_eq(rlock_lock_fenced(f, 20000, &token), 0);
  cr_assert_eq(rlock_unlock(f), 0);
  /* latch 2, semaphore 3, permit semaphore 2 of 3 left */
  rlock_latch *latch = NULL;
  cr_assert_eq(rlock_latch_new(c, n[2], &latch), 0);
  cr_assert_eq(rlock_latch_try_set_count(latch, 2), 1);
  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c, n[7], &sem), 0);
  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 3, 0), 1);
  rlock_permit_semaphore *ps = NULL;
  cr_assert_eq(rlock_permit_semaphore_new(c, n[5], &ps), 0);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(ps, 3), 1);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(ps, 0, 20000, id), 1);
  /* read lock: two holds of one reader (read-hold lease keys) */
  rlock *rd = NULL;
  cr_assert_eq(rlock_new_read(c, n[6], &rd), 0);
  uint64_t reader = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(rd, reader, 20000), 0);
  cr_assert_eq(rlock_lock_owner(rd, reader, 20000), 0);
  /* a waiter for the lock (subscribed to its channel) */
  rlock *l2 = rt_lock(c2, n[4]);
  rlock_req *lreq = NULL;
  cr_assert_eq(rlock_lock_async(l2, rlock_owner_new(), 60000, -1, ignore_cb,
                                NULL, &lreq),
               0);
  char channel[128];
  rt_lock_channel(channel, sizeof channel, n[4]);
  wait_numsub(channel, 1);
  /* a list, and a lock outside the pattern */
  rt_int("RPUSH %s a b", n[3]);
  rlock *other = rt_lock(c, n[8]);
  cr_assert_eq(rlock_lock(other, 20000), 0);

  snprintf(pat, sizeof pat, "%s:*", p);
  cli_proc pr;
  cr_assert_eq(cli_run(&pr, ARGS("ls", pat)), 0);
  char *out = cli_out(&pr), *err = cli_err(&pr);
  /* one line per name, in no set order, side keys folded */
  cr_assert_eq(count_of(out, p), 7, "ls: %s", out);
  cr_assert_null(strstr(out, "other"), "ls: %s", out);
  cr_assert_null(strstr(out, "redisson_"), "ls: %s", out);
  cr_assert_null(strstr(out, ":timeout"), "ls: %s", out);
  snprintf(expect, sizeof expect, "%s: lock, locked, ttl ", n[4]);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect,
           " ms, 1 waiting\n  holder %s (client %s, thread %" PRIu64
           "), count 2\n",
           owner, client_id, me);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect, "%s: fair lock, locked, ttl ", n[0]);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  rt_owner(owner, sizeof owner, c2, fw);
  snprintf(expect, sizeof expect, "  queue 1, head %s (client ", owner);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect,
           "%s: fenced lock, token %" PRId64 ", unlocked (token key only), "
           "0 waiting\n", n[1], token);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect,
           "%s: semaphore or latch, count 2, no ttl, 0 waiting\n", n[2]);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect,
           "%s: semaphore or latch, count 3, no ttl, 0 waiting\n", n[7]);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect,
           "%s: permit-expirable semaphore, 2 available, 1 taken, no ttl, "
           "0 waiting\n",
           n[5]);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect, "%s: read/write lock (read mode), locked",
           n[6]);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  rt_owner(owner, sizeof owner, c, reader);
  snprintf(expect, sizeof expect, "  reader %s (client %s, thread %" PRIu64
           "), count 2\n", owner, client_id, reader);
  cr_assert(strstr(out, expect) != NULL, "ls: %s", out);
  snprintf(expect, sizeof expect,
           "rlock: ls: skipped '%s': not a lock (Redis type list)\n", n[3]);
  cr_assert_str_eq(err, expect);
  free(out);
  free(err);

  cr_assert_eq(cli_run(&pr, ARGS("ls", "--json", pat)), 0);
  out = cli_out(&pr);
  err = cli_err(&pr);
  cr_assert(json_ok(out), "not JSON: %s", out);
  cr_assert_str_eq(err, "");
  rt_owner(owner, sizeof owner, c, me);
  snprintf(expect, sizeof expect,
           "{\"name\":\"%s\",\"kind\":\"lock\",\"type\":\"hash\","
           "\"locked\":true,\"ttl_ms\":",
           n[4]);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  snprintf(expect, sizeof expect,
           "\"holders\":[{\"owner\":\"%s\",\"client\":\"%s\",\"thread\":%"
           PRIu64 ",\"count\":2,\"writer\":false,\"rlock_client\":true,",
           owner, client_id, me);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  snprintf(expect, sizeof expect,
           "\"}],\"queue\":{\"length\":0,"
           "\"head\":null},\"token\":null,\"count\":null,"
           "\"permits_available\":null,\"permits_taken\":null,"
           "\"permits\":null,\"waiters\":1,\"election\":null}");
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  rt_owner(owner, sizeof owner, c2, fw);
  snprintf(expect, sizeof expect,
           "\"queue\":{\"length\":1,\"head\":{\"owner\":\"%s\"", owner);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  snprintf(expect, sizeof expect,
           "{\"name\":\"%s\",\"kind\":\"fenced\",\"type\":\"none\","
           "\"locked\":false,\"ttl_ms\":null",
           n[1]);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  snprintf(expect, sizeof expect, "\"token\":%" PRId64 ",", token);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  cr_assert(strstr(out, "\"kind\":\"count\"") != NULL, "json: %s", out);
  cr_assert(strstr(out, "\"count\":3,") != NULL, "json: %s", out);
  cr_assert(strstr(out, "\"permits_available\":2,\"permits_taken\":1") !=
                NULL,
            "json: %s", out);
  cr_assert(strstr(out, "\"kind\":\"rwlock\"") != NULL, "json: %s", out);
  cr_assert(strstr(out, "\"mode\":\"read\"") != NULL, "json: %s", out);
  snprintf(expect, sizeof expect,
           "\"skipped\":[{\"name\":\"%s\",\"type\":\"list\"}],\n  "
           "\"cut\":false,\"limit\":1000}\n",
           n[3]);
  cr_assert(strstr(out, expect) != NULL, "json: %s", out);
  cr_assert_eq(count_of(out, "{\"name\":"), 8, "json: %s", out);
  free(out);
  free(err);

  cr_assert_eq(rlock_unlock_owner(rd, reader), 0);
  cr_assert_eq(rlock_unlock_owner(rd, reader), 0);
  cr_assert_eq(rlock_req_cancel(req), 0);
  cr_assert_eq(rlock_req_cancel(lreq), 0);
  rlock_req_free(lreq);
  rlock_free(l2);
  cr_assert_eq(rlock_unlock_owner(fair, fh), 0);
  rlock_req_free(req);
  rlock_free(rd);
  rlock_free(l);
  rlock_free(other);
  rlock_free(f);
  rlock_free(fair);
  rlock_free(fair2);
  rlock_latch_free(latch);
  rlock_semaphore_free(sem);
  rlock_permit_semaphore_free(ps);
  rlock_client_free(c2);
  rlock_client_free(c);
}

/* --limit bounds the names read and says that it cut. */
Test(cli, ls_limit_cuts_and_says_so) {
  char p[64], name[96], pat[96];
  rt_key(p, sizeof p, "cli:lim");
  for (int i = 0; i < 5; i++) {
    snprintf(name, sizeof name, "%s:%d", p, i);
    rt_int("HSET %s someone:1 1", name);
  }
  snprintf(pat, sizeof pat, "%s:*", p);
  cli_proc pr;
  cr_assert_eq(cli_run(&pr, ARGS("ls", "--limit", "3", pat)), 0);
  char *out = cli_out(&pr), *err = cli_err(&pr);
  cr_assert_eq(count_of(out, ": lock, locked, no ttl, 0 waiting\n"), 3,
               "ls: %s", out);
  cr_assert_str_eq(err, "rlock: ls: stopped at --limit 3 names; more match "
                        "(narrow PATTERN or raise --limit)\n");
  free(out);
  free(err);
  cr_assert_eq(cli_run(&pr, ARGS("ls", "--json", "--limit=3", pat)), 0);
  out = cli_out(&pr);
  cr_assert(json_ok(out), "not JSON: %s", out);
  cr_assert_eq(count_of(out, "\"kind\":\"lock\""), 3, "json: %s", out);
  cr_assert(strstr(out, "\"cut\":true,\"limit\":3}") != NULL, "json: %s",
            out);
  free(out);
  /* exactly as many names as the limit: not cut */
  cr_assert_eq(cli_run(&pr, ARGS("ls", "--limit", "5", pat)), 0);
  out = cli_out(&pr);
  err = cli_err(&pr);
  cr_assert_eq(count_of(out, ": lock, locked"), 5, "ls: %s", out);
  cr_assert_str_eq(err, "");
  free(out);
  free(err);
  /* nothing matches: empty list, valid JSON */
  cr_assert_eq(cli_run(&pr, ARGS("ls", "--json", "cli:nothing:*")), 0);
  out = cli_out(&pr);
  cr_assert(json_ok(out), "not JSON: %s", out);
  cr_assert(strncmp(out, "{\"locks\":[],", 12) == 0, "json: %s", out);
  free(out);
  /* bad input */
  const char *const *bad[] = {ARGS("ls", "--limit", "0"),
                              ARGS("ls", "--limit", "x"),
                              ARGS("ls", "a*", "b*")};
  for (size_t i = 0; i < 3; i++) {
    cr_assert_eq(cli_run(&pr, bad[i]), 64, "case %zu", i);
    err = cli_err(&pr);
    cr_assert(strncmp(err, "rlock: ls: ", 11) == 0, "case %zu: %s", i, err);
    free(err);
  }
}

static bool two_refreshes(void *arg) {
  char *s = slurp(((cli_proc *)arg)->out_path);
  bool two = count_of(s, "# ") >= 2 && count_of(s, ": locked") >= 2;
  free(s);
  return two;
}

/* status --watch redraws until SIGINT, which ends it with 0. */
Test(cli, status_watch_refreshes_until_sigint) {
  char key[64];
  rt_key(key, sizeof key, "cli:watch");
  held h;
  hold(&h, key);
  cli_proc p;
  cli_start(&p, ARGS("status", key, "--watch", "0.2"));
  rt_wait_until_what(two_refreshes, &p, 10000, "two refreshes");
  cr_assert(cli_running(&p));
  cr_assert_eq(kill(p.pid, SIGINT), 0);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  char *out = cli_out(&p), *err = cli_err(&p);
  cr_assert(strncmp(out, "# ", 2) == 0, "watch: %s", out);
  cr_assert(strstr(out, ", every 200 ms\n") != NULL, "watch: %s", out);
  char expect[160];
  snprintf(expect, sizeof expect, "%s: locked, expires in ", key);
  cr_assert(count_of(out, expect) >= 2, "watch: %s", out);
  cr_assert_null(strstr(out, "\033["), "no screen control off a terminal");
  cr_assert_str_eq(err, "");
  free(out);
  free(err);
  /* a bad interval is a usage error */
  cr_assert_eq(cli_run(&p, ARGS("status", "--watch=0.01", key)), 64);
  unhold(&h);
}

/* ---- -m (a MultiLock) and --no-reenter (issue 29, item 4) ---- */

/* Every name is held while COMMAND runs, and all are released after. */
Test(cli, multi_holds_every_name_while_the_command_runs) {
  char a[64], b[64], c[64], list[200];
  rt_key(a, sizeof a, "cli:ma");
  rt_key(b, sizeof b, "cli:mb");
  rt_key(c, sizeof c, "cli:mc");
  snprintf(list, sizeof list, "%s,%s,%s", a, b, c);
  cli_proc p;
  cli_start(&p, ARGS("-m", list, "-c", "echo \"$RLOCK_NAME\" > started; "
                                       "sleep 1"));
  rt_wait_until_what(file_exists, "started", RUN_BOUND_MS, "started");
  cr_assert_eq(rt_exists(a) + rt_exists(b) + rt_exists(c), 3);
  cr_assert_eq(cli_wait(&p, RUN_BOUND_MS), 0);
  char *name = first_line_in("started");
  cr_assert_str_eq(name, list);
  free(name);
  cr_assert_eq(rt_exists(a) + rt_exists(b) + rt_exists(c), 0);
}

/* One name held elsewhere: -n exits 1 without running COMMAND, and the
 * names before it are not left held. */
Test(cli, multi_is_all_or_nothing) {
  char a[64], b[64], list[200];
  rt_key(a, sizeof a, "cli:mna");
  rt_key(b, sizeof b, "cli:mnb");
  snprintf(list, sizeof list, "%s,%s", a, b);
  held h;
  hold(&h, b);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-n", "-m", list, "--", "touch", "ran")), 1);
  cr_assert_eq(cli_run(&p, ARGS("-w", "300ms", "-m", list, "--", "touch",
                                "ran")),
               1);
  cr_assert_geq(cli_elapsed(&p), 300);
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_exists(a), 0, "the first name was left held");
  unhold(&h);
  cr_assert_eq(cli_run(&p, ARGS("-n", "-m", list, "--", "touch", "ran")), 0);
  cr_assert(exists_in("ran"));
}

/* Overlapping sets {a,b} and {b,c}: never both running. */
Test(cli, multi_overlapping_sets_never_run_together) {
  char a[64], b[64], c[64], l1[200], l2[200];
  rt_key(a, sizeof a, "cli:moa");
  rt_key(b, sizeof b, "cli:mob");
  rt_key(c, sizeof c, "cli:moc");
  snprintf(l1, sizeof l1, "%s,%s", a, b);
  snprintf(l2, sizeof l2, "%s,%s", b, c);
  const char *script = "echo S >> stamps; sleep 0.5; echo E >> stamps";
  cli_proc p[4];
  for (int i = 0; i < 4; i++)
    cli_start(&p[i], ARGS("-m", i % 2 ? l2 : l1, "-c", script));
  for (int i = 0; i < 4; i++)
    cr_assert_eq(cli_wait(&p[i], RUN_BOUND_MS), 0);
  char *stamps = slurp_in("stamps");
  cr_assert_str_eq(stamps, "S\nE\nS\nE\nS\nE\nS\nE\n");
  free(stamps);
  cr_assert_eq(rt_exists(a) + rt_exists(b) + rt_exists(c), 0);
}

Test(cli, multi_and_no_reenter_usage_errors_64) {
  char key[64], list[140];
  rt_key(key, sizeof key, "cli:mu");
  snprintf(list, sizeof list, "%s,%s2", key, key);
  const char *const *cases[] = {
      ARGS("-m", list, "--fenced", "--", "touch", "ran"),
      ARGS("-m", list, "--permits", "2", "--", "touch", "ran"),
      ARGS("--no-reenter", "-s", key, "--", "touch", "ran"),
      ARGS("-x", "--no-reenter", key, "--", "touch", "ran"),
      ARGS("--no-reenter", "--fenced", key, "--", "touch", "ran"),
      ARGS("--no-reenter", "--permits", "2", key, "--", "touch", "ran"),
      ARGS("-m", ",x", "--", "touch", "ran"),
      ARGS("-m", "x,", "--", "touch", "ran"),
      ARGS("-m", list),
      ARGS("-m"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    int code = cli_run(&p, cases[i]);
    char *err = cli_err(&p);
    cr_expect_eq(code, 64, "case %zu: exit %d, stderr: %s", i, code, err);
    cr_expect(strncmp(err, "rlock: ", 7) == 0, "case %zu: %s", i, err);
    free(err);
  }
  cr_assert(!exists_in("ran"));
  cr_assert_eq(rt_exists(key), 0);
}

/* --no-reenter selects the non-reentrant lock: a MultiLock naming it twice
 * is refused (RLOCK_EREENTRY, exit 69) where the RLock re-enters, and
 * --fair --no-reenter leaves no queue entry behind. */
Test(cli, no_reenter_refuses_a_second_hold_exit_69) {
  char key[64], twice[140];
  rt_key(key, sizeof key, "cli:nr");
  snprintf(twice, sizeof twice, "%s,%s", key, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-m", twice, "--", "touch", "ran1")), 0);
  cr_assert(exists_in("ran1"));
  cr_assert_eq(cli_run(&p, ARGS("--no-reenter", "-m", twice, "--", "touch",
                                "ran2")),
               69);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "non-reentrant") != NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(cli_run(&p, ARGS("--fair", "--no-reenter", "-m", twice, "--",
                                "touch", "ran2")),
               69);
  cr_assert(!exists_in("ran2"));
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rt_int("LLEN redisson_lock_queue:{%s}", key), 0);
  /* one name: an ordinary run of the non-reentrant lock */
  cr_assert_eq(cli_run(&p, ARGS("--no-reenter", key, "--", "touch", "ran3")),
               0);
  cr_assert(exists_in("ran3"));
}

/* `rlock fence` (issue 37): a COMMAND of `rlock --fenced` writes through a
 * guard with its $RLOCK_TOKEN; a stale token is refused (exit 1, nothing
 * written), the check says current / stale / free by its exit status. */
Test(cli, fence_guarded_write_and_check) {
  char key[64], guard[96], data[96], script[512];
  rt_key(key, sizeof key, "cli:fence");
  snprintf(guard, sizeof guard, "{%s}:guard", key);
  snprintf(data, sizeof data, "{%s}:data", key);
  const char *cli = getenv("RLOCK_CLI");
  snprintf(script, sizeof script,
           "echo \"$RLOCK_TOKEN\" > token;"
           " \"%s\" fence set '%s' '%s' \"$RLOCK_TOKEN\" '%s' first || exit 9;"
           " \"%s\" fence check '%s' \"$RLOCK_TOKEN\" > check",
           cli, guard, key, data, cli, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("--fenced", key, "-c", script)), 0);
  char *tok = first_line_in("token"), *check = first_line_in("check");
  cr_assert_str_eq(check, "current", "the holder's own token");
  char *v = rt_str("GET %s", data);
  cr_assert_str_eq(v, "first");
  free(v);
  /* the lock is free now */
  cr_assert_eq(cli_run(&p, ARGS("fence", "check", key, tok)), 2);
  char *out = cli_out(&p);
  cr_assert_str_eq(out, "free\n");
  free(out);
  /* a newer holder writes; the old token is refused */
  char newer[32];
  snprintf(newer, sizeof newer, "%lld", atoll(tok) + 5);
  char counter[128];
  snprintf(counter, sizeof counter, "%sn", data);
  cr_assert_eq(cli_run(&p, ARGS("fence", "incrby", guard, key, newer,
                                counter, "4")), 0, "incrby");
  out = cli_out(&p);
  cr_assert_str_eq(out, "4\n");
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("fence", "set", guard, key, tok, data,
                                "zombie")), 1);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "STALE") != NULL, "stderr: %s", err);
  free(err);
  v = rt_str("GET %s", data);
  cr_assert_str_eq(v, "first", "nothing written by the stale token");
  free(v);
  /* another lock's token, bad input */
  cr_assert_eq(cli_run(&p, ARGS("fence", "set", guard, "other", newer, data,
                                "x")), 69);
  cr_assert_eq(cli_run(&p, ARGS("fence", "set", guard, key, "0", data, "x")),
               64);
  cr_assert_eq(cli_run(&p, ARGS("fence", "frob", guard)), 64);
  cr_assert_eq(cli_run(&p, ARGS("fence", "check", key)), 64);
  free(tok);
  free(check);
}

/* ---- bytes from Redis in the output (issue 33, items 5 and 6) ---- */

/* No byte of s is a control byte other than newline, and s is valid UTF-8
 * (python3 decodes it strictly): what a terminal shows as text. */
static void assert_terminal_safe(const char *what, const char *path) {
  char *s = slurp(path);
  for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++)
    cr_assert((*c >= 0x20 && *c != 0x7f) || *c == '\n',
              "%s: raw byte 0x%02x at %zu: %s", what, *c,
              (size_t)(c - (const unsigned char *)s), s);
  free(s);
  char cmd[PATH_LEN + 128];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import sys; open(sys.argv[1], \"rb\").read()"
           ".decode(\"utf-8\")' '%s'",
           path);
  cr_assert_eq(system(cmd), 0, "%s is not valid UTF-8", what);
}

/* The JSON at path parses (python3's json) and holds, as a "name" at any
 * depth or as any string value ("owner", "field", "value"), each of the byte strings given in hex,
 * read back with surrogateescape. */
static void assert_json_names(const char *path, const char *hex_names) {
  char cmd[PATH_LEN + 1024];
  snprintf(cmd, sizeof cmd,
           "python3 -c '\n"
           "import json, sys\n"
           "raw = open(sys.argv[1], \"rb\").read()\n"
           "doc = json.loads(raw.decode(\"utf-8\"))\n"
           "seen = set()\n"
           "def walk(v):\n"
           "    if isinstance(v, dict):\n"
           "        for k, x in v.items():\n"
           "            seen.add(k)\n"
           "            if isinstance(x, str): seen.add(x)\n"
           "            walk(x)\n"
           "    elif isinstance(v, list):\n"
           "        for x in v: walk(x)\n"
           "walk(doc)\n"
           "got = {s.encode(\"utf-8\", \"surrogateescape\") for s in seen}\n"
           "for h in sys.argv[2].split(\",\"):\n"
           "    if bytes.fromhex(h) not in got:\n"
           "        sys.exit(\"missing %%r in %%r\" %% (bytes.fromhex(h), raw))\n"
           "' '%s' '%s'",
           path, hex_names);
  cr_assert_eq(system(cmd), 0, "JSON check failed for %s", path);
}

static void hex_of(char *buf, size_t n, const char *s, size_t len) {
  buf[0] = '\0';
  for (size_t i = 0; i < len && 2 * i + 3 <= n; i++)
    snprintf(buf + 2 * i, 3, "%02x", (unsigned char)s[i]);
}

Test(cli, ls_and_status_escape_bytes_from_redis_and_json_stays_valid) {
  char p[64];
  rt_key(p, sizeof p, "cli:esc");
  /* names: escape sequences (clear screen, set the title), a newline
   * forging a line, invalid UTF-8, a NUL; owners and values alike */
  char esc[128], nl[128], bad[128], nul[128], foreign[128];
  size_t esc_n = (size_t)snprintf(esc, sizeof esc, "%s:esc\033[2J\033]0;t\007",
                                  p);
  size_t nl_n = (size_t)snprintf(nl, sizeof nl,
                                 "%s:nl\nFORGED: unlocked, 0 waiting", p);
  size_t bad_n = (size_t)snprintf(bad, sizeof bad, "%s:bad\377\303(", p);
  size_t nul_n = (size_t)snprintf(nul, sizeof nul, "%s:nul", p);
  memcpy(nul + nul_n, "\0tail", 5);
  nul_n += 5;
  size_t foreign_n = (size_t)snprintf(foreign, sizeof foreign, "%s:foreign",
                                      p);
  const char esc_owner[] = "\033[31mown\nFORGED:7", bad_owner[] = "o\377\376:3";
  const char field[] = "f\033[0m", value[] = "v\0\033]0;x\007\377";
  freeReplyObject(rt_cmd("HSET %b %b 1", esc, esc_n, esc_owner,
                         sizeof esc_owner - 1));
  freeReplyObject(rt_cmd("HSET %b %b 2", nl, nl_n, bad_owner,
                         sizeof bad_owner - 1));
  freeReplyObject(rt_cmd("HSET %b a:1 1", bad, bad_n));
  freeReplyObject(rt_cmd("HSET %b a:1 1", nul, nul_n));
  freeReplyObject(rt_cmd("HSET %b %b %b", foreign, foreign_n, field,
                         sizeof field - 1, value, sizeof value - 1));
  char pat[96];
  snprintf(pat, sizeof pat, "%s:*", p);

  cli_proc ls;
  cr_assert_eq(cli_run(&ls, ARGS("ls", pat)), 0);
  assert_terminal_safe("ls stdout", ls.out_path);
  assert_terminal_safe("ls stderr", ls.err_path);
  char *out = cli_out(&ls), *err = cli_err(&ls);
  /* each name on one line of its own, escaped */
  cr_assert(strstr(out, ":esc\\x1b[2J\\x1b]0;t\\x07: lock") != NULL, "%s",
            out);
  cr_assert(strstr(out, ":nl\\nFORGED: unlocked, 0 waiting: lock") != NULL,
            "%s", out);
  cr_assert(strstr(out, ":bad\\xff\\xc3(: lock") != NULL, "%s", out);
  cr_assert(strstr(out, "\\x1b[31mown\\nFORGED:7") != NULL, "%s", out);
  cr_assert(strstr(out, "o\\xff\\xfe:3") != NULL, "%s", out);
  for (char *line = out; *line != '\0'; line = strchr(line, '\n') + 1) {
    cr_assert(strncmp(line, p, strlen(p)) == 0 || strncmp(line, "  ", 2) == 0,
              "a line neither a name nor an entry: %s", out);
    if (strchr(line, '\n') == NULL)
      break;
  }
  cr_assert(strstr(err, ":nul\\x00tail': the name holds a NUL byte") != NULL,
            "%s", err);
  cr_assert(strstr(err, ":foreign': not a lock") != NULL, "%s", err);
  free(out);
  free(err);

  cli_proc lj;
  cr_assert_eq(cli_run(&lj, ARGS("ls", "--json", pat)), 0);
  assert_terminal_safe("ls --json", lj.out_path);
  char names[1024], h[5][200];
  hex_of(h[0], sizeof h[0], esc, esc_n);
  hex_of(h[1], sizeof h[1], nl, nl_n);
  hex_of(h[2], sizeof h[2], bad, bad_n);
  hex_of(h[3], sizeof h[3], nul, nul_n);
  hex_of(h[4], sizeof h[4], bad_owner, sizeof bad_owner - 1);
  snprintf(names, sizeof names, "%s,%s,%s,%s,%s", h[0], h[1], h[2], h[3],
           h[4]);
  assert_json_names(lj.out_path, names);

  /* status: the owner, a foreign field and its value */
  cli_proc st;
  cr_assert_eq(cli_run(&st, ARGS("status", esc, foreign)), 0);
  assert_terminal_safe("status stdout", st.out_path);
  out = cli_out(&st);
  cr_assert(strstr(out, "owner \\x1b[31mown\\nFORGED:7  holds 1") != NULL,
            "%s", out);
  cr_assert(strstr(out, "field f\\x1b[0m = v\\x00\\x1b]0;x\\x07\\xff") != NULL,
            "%s", out);
  free(out);
  cli_proc sj;
  cr_assert_eq(cli_run(&sj, ARGS("status", "--json", esc, foreign)), 0);
  assert_terminal_safe("status --json", sj.out_path);
  hex_of(h[0], sizeof h[0], esc, esc_n);
  hex_of(h[1], sizeof h[1], esc_owner, sizeof esc_owner - 1);
  hex_of(h[2], sizeof h[2], value, sizeof value - 1);
  hex_of(h[3], sizeof h[3], field, sizeof field - 1);
  snprintf(names, sizeof names, "%s,%s,%s,%s", h[0], h[1], h[2], h[3]);
  assert_json_names(sj.out_path, names);
}

/* ---- secrets (issue 35, item 5) ---- */

#define SECRET_PW "Pw7f3a9cSecret"
#define WRONG_PW "Xq9WrongPwd"

static void secrets_setup(void) {
  const char *args[] = {"--requirepass", SECRET_PW, NULL};
  rt_server_start_args(args);
  snprintf(g_dir, sizeof g_dir, "/tmp/rlock-cli-test.XXXXXX");
  cr_assert(mkdtemp(g_dir) != NULL, "mkdtemp: %s", strerror(errno));
  cr_assert(unsetenv("REDIS_URL") == 0);
  cr_assert(getenv("RLOCK_CLI") != NULL);
}

/* Neither password in what the run printed. */
static void assert_no_secret(const cli_proc *p, const char *what) {
  char *out = cli_out(p), *err = cli_err(p);
  cr_assert(strstr(out, SECRET_PW) == NULL && strstr(err, SECRET_PW) == NULL &&
                strstr(out, WRONG_PW) == NULL && strstr(err, WRONG_PW) == NULL,
            "%s: a password was shown: stdout: %s stderr: %s", what, out, err);
  free(out);
  free(err);
}

/* The URI comes from -u, --uri-file or $REDIS_URL; -u's password is gone
 * from /proc/PID/cmdline once parsed; no output of any kind (status, ls,
 * --json, -v and -vv diagnostics, errors of every exit code) has it. */
Test(cli, secrets_uri_sources_and_no_password_anywhere,
     .init = secrets_setup, .fini = cli_teardown) {
  char key[64], uri[128], wrong[128], dead[128], badport[128], file[PATH_LEN];
  rt_key(key, sizeof key, "cli:secret");
  snprintf(uri, sizeof uri, "redis://:" SECRET_PW "@127.0.0.1:%d", rt_port());
  snprintf(wrong, sizeof wrong, "redis://:" WRONG_PW "@127.0.0.1:%d",
           rt_port());
  snprintf(dead, sizeof dead, "redis://:" SECRET_PW "@127.0.0.1:%d",
           rt_free_port());
  snprintf(badport, sizeof badport, "redis://:" SECRET_PW "@127.0.0.1:99999");
  path_in(file, sizeof file, "uri");
  FILE *f = fopen(file, "w");
  cr_assert(f != NULL);
  fprintf(f, "%s\n", uri);
  cr_assert(fclose(f) == 0);

  /* -u: the running rlock's command line shows stars */
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-vv", "-u", uri, key, "--", "sh", "-c",
                                "tr '\\000' ' ' < /proc/$PPID/cmdline > "
                                "cmdline")),
               0);
  assert_no_secret(&p, "-u -vv run");
  char *cmdline = slurp_in("cmdline");
  cr_assert(strstr(cmdline, "redis://:**************@127.0.0.1:") != NULL &&
                strstr(cmdline, SECRET_PW) == NULL,
            "cmdline: %s", cmdline);
  free(cmdline);
  /* --uri-file, for the lock command and the subcommands */
  cr_assert_eq(cli_run(&p, ARGS("-v", "--uri-file", file, key, "--", "true")),
               0);
  assert_no_secret(&p, "--uri-file run");
  cr_assert_eq(cli_run(&p, ARGS("--uri-file", file, "status", "--json", key)),
               0);
  assert_no_secret(&p, "--uri-file status");
  cr_assert_eq(cli_run(&p, ARGS("ls", "--json", "--uri-file", file)), 0);
  assert_no_secret(&p, "--uri-file ls");
  /* ... fence, elect and leader (nobody leads: 1; the lock is free: 2) */
  cr_assert_eq(cli_run(&p, ARGS("leader", "--uri-file", file, key)), 1);
  assert_no_secret(&p, "--uri-file leader");
  cr_assert_eq(cli_run(&p, ARGS("--uri-file", file, "fence", "check", key,
                                "1")),
               2);
  assert_no_secret(&p, "--uri-file fence");
  cr_assert_eq(cli_run(&p, ARGS("elect", "--uri-file", file, key, "--",
                                "true")),
               0);
  assert_no_secret(&p, "--uri-file elect");
  /* $REDIS_URL */
  cr_assert(setenv("REDIS_URL", uri, 1) == 0);
  cr_assert_eq(cli_run(&p, ARGS("-vv", key, "--", "true")), 0);
  assert_no_secret(&p, "REDIS_URL run");
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  assert_no_secret(&p, "REDIS_URL status");
  cr_assert(unsetenv("REDIS_URL") == 0);

  /* failures: wrong password (69), nothing listening (75), bad URI (64) */
  struct {
    const char *const *args;
    int code;
  } cases[] = {
      {ARGS("-vv", "-u", wrong, key, "--", "true"), 69},
      {ARGS("status", "--json", "-u", wrong, key), 69},
      {ARGS("ls", "-u", wrong), 69},
      {ARGS("unlock", "--force", "-u", wrong, key), 69},
      {ARGS("-vv", "-w", "1", "-u", dead, key, "--", "true"), 75},
      {ARGS("status", "-u", dead, key), 75},
      {ARGS("-u", badport, key, "--", "true"), 64},
      {ARGS("-u", "redis://:" SECRET_PW "@127.0.0.1/x", key, "--", "true"),
       64},
      {ARGS("-u", "redis://u:" SECRET_PW "@h@x:1", key, "--", "true"), 75},
      {ARGS("-u", "redis://u:" SECRET_PW "/x@h:1", key, "--", "true"), 64},
      {ARGS("-u", "rediss://:" SECRET_PW "@127.0.0.1:1", "--tls-ca-file",
            "/nonexistent", key, "--", "true"),
       64},
      {ARGS("-u", uri, "--uri-file", file, key, "--", "true"), 64},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char what[32];
    snprintf(what, sizeof what, "case %zu", i);
    cr_expect_eq(cli_run(&p, cases[i].args), cases[i].code, "%s", what);
    assert_no_secret(&p, what);
  }
  cr_assert_eq(rt_exists(key), 0);
}

/* An unreadable or empty --uri-file, or an empty $REDIS_URL: exit 64 with
 * the reason, before any connection. */
Test(cli, secrets_bad_uri_file_or_empty_redis_url_exit_64) {
  char key[64], empty[PATH_LEN];
  rt_key(key, sizeof key, "cli:urifile");
  touch_in("empty");
  path_in(empty, sizeof empty, "empty");
  struct {
    const char *const *args;
    const char *says;
  } cases[] = {
      {ARGS("--uri-file", "/nonexistent/uri", key, "--", "touch", "ran"),
       "cannot read --uri-file '/nonexistent/uri': No such file"},
      {ARGS("--uri-file", empty, key, "--", "touch", "ran"),
       "the file is empty"},
      {ARGS("status", "--uri-file", "/", key), "Is a directory"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_proc p;
    cr_expect_eq(cli_run(&p, cases[i].args), 64, "case %zu", i);
    char *err = cli_err(&p);
    cr_expect(strstr(err, cases[i].says) != NULL, "case %zu: %s", i, err);
    free(err);
  }
  cr_assert(setenv("REDIS_URL", "", 1) == 0);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS(key, "--", "touch", "ran")), 64);
  char *err = cli_err(&p);
  cr_assert(strstr(err, "REDIS_URL is set but empty") != NULL, "%s", err);
  free(err);
  cr_assert(!exists_in("ran"));
}

/* -v on a busy lock says who holds it (issue 35, item 4: the owner string;
 * host, pid and program are not done, see docs/cli.md). */
Test(cli, verbose_busy_lock_names_its_holder) {
  char key[64];
  rt_key(key, sizeof key, "cli:whoholds");
  held h;
  hold(&h, key);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("-v", "-n", key, "--", "touch", "ran")), 1);
  char *err = cli_err(&p), expect[160];
  snprintf(expect, sizeof expect, "rlock: held by %s (lock, hold count 1), "
                                  "expires in ",
           h.owner);
  cr_assert(strstr(err, expect) != NULL, "stderr: %s", err);
  free(err);
  cr_assert(!exists_in("ran"));
  unhold(&h);
}

/* ---- who holds it (issue 35, item 4) ---- */

/* An rlock holder names its connections at connect; status, ls (text and
 * JSON) and -v on a busy lock show its pid, program and host from CLIENT
 * LIST. A holder that is not an rlock client is said to be one, with its
 * id. */
Test(cli, who_holds_it_shows_pid_program_and_host) {
  char key[64], other[64], host[256] = "", line[400], pat[96];
  rt_key(key, sizeof key, "cli:who");
  rt_key(other, sizeof other, "cli:who-java");
  cr_assert_eq(gethostname(host, sizeof host - 1), 0);
  cli_proc holder;
  cli_start(&holder, ARGS(key, "--", "sh", "-c",
                          "touch held; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "held", 10000, "the holder runs");
  snprintf(line, sizeof line, "    pid %d (rlock) on %s, connected for ",
           (int)holder.pid, host);
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  cr_assert(strstr(out, line) != NULL, "status: %s", out);
  free(out);
  snprintf(pat, sizeof pat, "%s*", key);
  cr_assert_eq(cli_run(&p, ARGS("ls", pat)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, line) != NULL, "ls: %s", out);
  free(out);
  snprintf(line, sizeof line,
           "\"rlock_client\":true,\"host\":\"%s\",\"pid\":%d,\"program\":"
           "\"rlock\",\"connected_ms\":",
           host, (int)holder.pid);
  cr_assert_eq(cli_run(&p, ARGS("status", "--json", key)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, line) != NULL, "status --json: %s", out);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("ls", "--json", pat)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, line) != NULL, "ls --json: %s", out);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("-v", "-n", key, "--", "touch", "ran")), 1);
  char *err = cli_err(&p);
  snprintf(line, sizeof line, "rlock:   pid %d (rlock) on %s, connected for ",
           (int)holder.pid, host);
  cr_assert(strstr(err, line) != NULL, "-v: %s", err);
  free(err);
  /* a holder that is no rlock client (a Java client's owner, by hand) */
  rt_int("HSET %s 0000aaaa-0000-4000-8000-000000000000:1 1", other);
  cr_assert_eq(cli_run(&p, ARGS("status", other)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, "owner 0000aaaa-0000-4000-8000-000000000000:1  holds "
                        "1\n    not known as an rlock client (no connection "
                        "named by an rlock client with this id") != NULL,
            "status: %s", out);
  free(out);
  touch_in("go");
  cr_assert_eq(cli_wait(&holder, RUN_BOUND_MS), 0);
  cr_assert(!exists_in("ran"));
}

/* An ACL user without +client|setname still connects (the name is set as a
 * probe: its refusal is ignored), and is then not known by name; one
 * without +client|list gets the ids and why there is no more, exit 0. */
Test(cli, who_holds_it_when_the_acl_refuses_client_list_and_setname) {
  char key[64], uri[128];
  rt_key(key, sizeof key, "cli:who-acl");
  rt_ok("OK", "ACL SETUSER lim on >pw ~* &* +@all -client|list "
              "-client|setname");
  snprintf(uri, sizeof uri, "redis://lim:pw@127.0.0.1:%d", rt_port());
  cli_proc holder;
  cli_start(&holder, ARGS("-u", uri, key, "--", "sh", "-c",
                          "touch held; while [ ! -e go ]; do sleep 0.02; done"));
  rt_wait_until_what(file_exists, "held", 10000, "the holder runs");
  cli_proc p;
  cr_assert_eq(cli_run(&p, ARGS("status", key)), 0);
  char *out = cli_out(&p);
  cr_assert(strstr(out, "holds 1\n    not known as an rlock client (no "
                        "connection named by an rlock client") != NULL,
            "status: %s", out);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("status", "-u", uri, key)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, "  owner ") != NULL &&
                strstr(out, "holds 1\n    not known as an rlock client "
                            "(CLIENT LIST refused (") != NULL &&
                strstr(out, "the ACL needs +client|list)") != NULL,
            "status: %s", out);
  free(out);
  cr_assert_eq(cli_run(&p, ARGS("status", "--json", "-u", uri, key)), 0);
  out = cli_out(&p);
  cr_assert(strstr(out, "\"rlock_client\":false,\"why\":\"CLIENT LIST "
                        "refused (") != NULL,
            "json: %s", out);
  free(out);
  touch_in("go");
  cr_assert_eq(cli_wait(&holder, RUN_BOUND_MS), 0);
}

/* ---- one registry of kinds (issue 34, item 4) ---- */

/* Compares, with python3's json, the object `rlock status --json NAME`
 * wrote (in file status.<i>) with the entry `rlock ls --json` wrote for the
 * same name (file ls.json): the same fields with the same values, except
 * that times read at two moments (ttl_ms, lease_ms, deadline_ms,
 * connected_ms) need only agree in kind (both null or both numbers) and
 * lie within 10 s of each other. `expect` is "name=kind,..." in the order
 * of the status files. */
static const char same_script[] =
    "import json, sys\n"
    "d = sys.argv[1]\n"
    "pairs = [p.rsplit('=', 1) for p in sys.argv[2].split(',')]\n"
    "ls = {e['name']: e for e in json.load(open(d + '/ls.json'))['locks']}\n"
    "TIMES = {'ttl_ms', 'lease_ms', 'deadline_ms', 'connected_ms'}\n"
    "def same(a, b, where):\n"
    "    if isinstance(a, dict) and isinstance(b, dict):\n"
    "        if sorted(a) != sorted(b):\n"
    "            sys.exit('%s: fields %s vs %s' % (where, sorted(a), sorted(b)))\n"
    "        for k in a:\n"
    "            if k in TIMES and a[k] is not None and b[k] is not None:\n"
    "                if abs(a[k] - b[k]) > 10000:\n"
    "                    sys.exit('%s.%s: %r vs %r' % (where, k, a[k], b[k]))\n"
    "            else:\n"
    "                same(a[k], b[k], where + '.' + k)\n"
    "    elif isinstance(a, list) and isinstance(b, list):\n"
    "        if len(a) != len(b):\n"
    "            sys.exit('%s: %r vs %r' % (where, a, b))\n"
    "        for i, (x, y) in enumerate(zip(a, b)):\n"
    "            same(x, y, '%s[%d]' % (where, i))\n"
    "    elif a != b or type(a) != type(b):\n"
    "        sys.exit('%s: %r (status) vs %r (ls)' % (where, a, b))\n"
    "for i, (name, kind) in enumerate(pairs):\n"
    "    st = json.load(open('%s/status.%d' % (d, i)))\n"
    "    if len(st) != 1:\n"
    "        sys.exit('status of %s: %r' % (name, st))\n"
    "    st = st[0]\n"
    "    if st['kind'] != kind:\n"
    "        sys.exit('%s: kind %r, not %r' % (name, st['kind'], kind))\n"
    "    if name not in ls:\n"
    "        sys.exit('%s not listed by ls: %r' % (name, sorted(ls)))\n"
    "    same(st, ls[name], name)\n"
    "print(len(pairs))\n";

/* Every kind a handle or a count can be: `rlock status --json NAME` and the
 * `rlock ls --json` entry for NAME describe it alike (the same writer,
 * describe.c), with the kind's one name from RLOCK_INFO_KIND_MAP. */
Test(cli, status_json_and_ls_json_describe_every_kind_alike) {
  char p[64], pat[96];
  rt_key(p, sizeof p, "cli:same");
  enum { NKINDS = 13 };
  static const struct {
    const char *suffix, *kind;
  } k[NKINDS] = {
      {"lock", "lock"},     {"fair", "fair"},       {"read", "rwlock"},
      {"write", "rwlock"},  {"fenced", "fenced"},   {"spin", "lock"},
      {"nonre", "lock"},    {"nonrefair", "lock"},  {"sem", "count"},
      {"psem", "permit-semaphore"},                 {"latch", "count"},
      {"elect", "fenced"},  {"group", "fast-multilock"},
  };
  char n[NKINDS][128];
  for (int i = 0; i < NKINDS; i++)
    snprintf(n[i], sizeof n[i], "%s:%s", p, k[i].suffix);
  rlock_client *c = rt_client(), *c2 = rt_client();
  rlock *l[8] = {NULL};
  /* every lock kind of the registry (RLOCK_KIND_MAP), held: the lock
   * twice, the fair lock with a queued waiter */
  cr_assert_eq(rlock_new(c, n[0], &l[0]), 0);
  cr_assert_eq(rlock_new_fair(c, n[1], &l[1]), 0);
  cr_assert_eq(rlock_new_read(c, n[2], &l[2]), 0);
  cr_assert_eq(rlock_new_write(c, n[3], &l[3]), 0);
  cr_assert_eq(rlock_new_fenced(c, n[4], &l[4]), 0);
  cr_assert_eq(rlock_new_spin(c, n[5], &l[5]), 0);
  cr_assert_eq(rlock_new_nonreentrant(c, n[6], &l[6]), 0);
  cr_assert_eq(rlock_new_nonreentrant_fair(c, n[7], &l[7]), 0);
  for (int i = 0; i < 8; i++)
    cr_assert_eq(rlock_lock(l[i], 30000), 0, "%s", n[i]);
  cr_assert_eq(rlock_lock(l[0], 30000), 0);
  rlock *fair2 = NULL;
  cr_assert_eq(rlock_new_fair(c2, n[1], &fair2), 0);
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(fair2, rlock_owner_new(), 60000, -1,
                                ignore_cb, NULL, &req),
               0);
  char queue[160];
  snprintf(queue, sizeof queue, "redisson_lock_queue:{%s}", n[1]);
  for (int i = 0; i < 100 && rt_int("LLEN %s", queue) != 1; i++)
    rt_sleep_ms(50);
  cr_assert_eq(rt_int("LLEN %s", queue), 1);
  /* semaphore 3, permit semaphore with one of 3 taken, latch 2 */
  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c, n[8], &sem), 0);
  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 3, 0), 1);
  rlock_permit_semaphore *ps = NULL;
  cr_assert_eq(rlock_permit_semaphore_new(c, n[9], &ps), 0);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(ps, 3), 1);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(ps, 0, 30000, id), 1);
  rlock_latch *latch = NULL;
  cr_assert_eq(rlock_latch_new(c, n[10], &latch), 0);
  cr_assert_eq(rlock_latch_try_set_count(latch, 2), 1);
  /* an election's fenced lock, with its leader's value */
  rlock_election *e = NULL;
  cr_assert_eq(rlock_election_new(c, n[11], &e), 0);
  cr_assert_eq(rlock_election_campaign(e, "leader-A", 8, 10000, NULL, NULL,
                                       NULL),
               1);
  /* a FasterMultiLock group with two values held */
  const char *values[] = {"v1", "v2"};
  rlock *fml = NULL;
  cr_assert_eq(rlock_new_fast_multilock(c, n[12], values, NULL, 2, &fml), 0);
  uint64_t me = rlock_owner_new();
  cr_assert_eq(rlock_try_lock_owner(fml, me, 0, 30000), 1);

  char expect[2048] = "", path[PATH_LEN];
  cli_proc pr;
  for (int i = 0; i < NKINDS; i++) {
    cr_assert_eq(cli_run(&pr, ARGS("status", "--json", n[i])), 0, "%s", n[i]);
    char *out = cli_out(&pr), file[32];
    snprintf(file, sizeof file, "status.%d", i);
    path_in(path, sizeof path, file);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(out, f);
    fclose(f);
    free(out);
    size_t len = strlen(expect);
    snprintf(expect + len, sizeof expect - len, "%s%s=%s", i > 0 ? "," : "",
             n[i], k[i].kind);
  }
  snprintf(pat, sizeof pat, "%s:*", p);
  cr_assert_eq(cli_run(&pr, ARGS("ls", "--json", pat)), 0);
  char *out = cli_out(&pr);
  path_in(path, sizeof path, "ls.json");
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(out, f);
  fclose(f);
  /* the registry's names, and what each kind shows */
  cr_assert(strstr(out, "\"mode\":\"write\"") != NULL, "%s", out);
  cr_assert(strstr(out, "\"queue\":{\"length\":1,\"head\":{\"owner\":") !=
                NULL,
            "%s", out);
  cr_assert(strstr(out, "\"permits_available\":2,\"permits_taken\":1,"
                        "\"permits\":[{\"id\":\"") != NULL,
            "%s", out);
  cr_assert(strstr(out, "\"election\":{\"term\":") != NULL, "%s", out);
  cr_assert(strstr(out, "\"kind\":\"fast-multilock\",\"type\":\"hash\","
                        "\"locked\":true,") != NULL,
            "%s", out);
  free(out);
  char cmd[sizeof same_script + 4096];
  snprintf(cmd, sizeof cmd, "python3 -c \"$SCRIPT\" '%s' '%s' > %s/same.out",
           g_dir, expect, g_dir);
  cr_assert_eq(setenv("SCRIPT", same_script, 1), 0);
  cr_assert_eq(system(cmd), 0, "status --json and ls --json differ");
  unsetenv("SCRIPT");
  char *checked = first_line_in("same.out");
  cr_assert_str_eq(checked, "13");
  free(checked);
  /* the group in text: each value's field held by its owner, and who
   * that is (this process), in status and in ls */
  char field[RLOCK_FAST_MULTILOCK_FIELD_LEN + 1], owner[96];
  cr_assert_eq(rlock_fast_multilock_field_name("v1", 2, field), 0);
  rt_owner(owner, sizeof owner, c, me);
  char held[256], who[64];
  snprintf(held, sizeof held,
           "\n  value field %s: held by %s (count 1, expires in ", field,
           owner);
  snprintf(who, sizeof who, " ms)\n    pid %d ", (int)getpid());
  cr_assert_eq(cli_run(&pr, ARGS("status", n[12])), 0);
  out = cli_out(&pr);
  snprintf(path, sizeof path, "%s: locked (FasterMultiLock group)", n[12]);
  cr_assert(strncmp(out, path, strlen(path)) == 0, "%s", out);
  char *at = strstr(out, held);
  cr_assert(at != NULL, "%s", out);
  cr_assert(strstr(at, who) != NULL, "%s", out);
  cr_assert(strstr(out, "\n  field ") == NULL, "%s", out);
  free(out);
  cr_assert_eq(cli_run(&pr, ARGS("ls", n[12])), 0);
  out = cli_out(&pr);
  at = strstr(out, held);
  cr_assert(at != NULL, "%s", out);
  cr_assert(strstr(at, who) != NULL, "%s", out);
  free(out);
  cr_assert_eq(cli_run(&pr, ARGS("status", "--json", n[12])), 0);
  out = cli_out(&pr);
  snprintf(held, sizeof held, "{\"owner\":\"%s\",\"client\":", owner);
  cr_assert(strstr(out, held) != NULL, "%s", out);
  snprintf(held, sizeof held,
           ",\"count\":1,\"writer\":false,\"field\":\"%s\",\"ttl_ms\":", field);
  cr_assert(strstr(out, held) != NULL, "%s", out);
  free(out);
  /* the group released */
  cr_assert_eq(rlock_unlock_owner(fml, me), 0);
  rlock_free(fml);

  rlock_election_free(e);
  rlock_latch_free(latch);
  rlock_permit_semaphore_free(ps);
  rlock_semaphore_free(sem);
  rlock_req_cancel(req);
  rlock_req_free(req);
  rlock_free(fair2);
  for (int i = 0; i < 8; i++)
    rlock_free(l[i]);
  rlock_client_free(c2);
  rlock_client_free(c);
}
