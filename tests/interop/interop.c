/* The interop suite's harness: peers, MONITOR, scripted rlock threads
 * (see interop.h). */
#include "interop.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "interop-config.h"

#define MAX_PEERS 8
#define PEER_DEADLINE_MS 300000 /* > the suite's per-test timeout */
#define SETUP_BOUND_MS 180000   /* npm ci on a slow network (< .timeout) */
#define STOP_BOUND_MS 5000
#define LOG_TAIL 3000
#define WHY_LEN (LOG_TAIL + 1024)

/* ---- small helpers ---- */

void interop_report(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[interop] ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static const char *env_or(const char *name, const char *fallback) {
  const char *v = getenv(name);
  return (v != NULL && *v != '\0') ? v : fallback;
}

/* The last bytes of a file, for failure messages. */
static void file_tail(const char *path, char *buf, size_t n) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    long from = size > (long)n - 1 ? size - ((long)n - 1) : 0;
    fseek(f, from, SEEK_SET);
  }
  size_t got = fread(buf, 1, n - 1, f);
  buf[got] = '\0';
  fclose(f);
}

/* Waits up to bound_ms for pid; true (and *status) if it exited. */
static bool reap_within(pid_t pid, int64_t bound_ms, int *status) {
  int64_t deadline = rt_now_ms() + bound_ms;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return true;
    if (rt_now_ms() >= deadline)
      return false;
    rt_sleep_ms(5);
  }
}

static void kill_reap(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

/* fork + exec with stdin/stdout on the given fds (-1: /dev/null) and
 * stderr to log_fd. The child dies with the test process. */
static pid_t spawn(const char *const *argv, int in_fd, int out_fd, int log_fd) {
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  cr_assert(null_fd >= 0, "open /dev/null: %s", strerror(errno));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
    dup2(in_fd >= 0 ? in_fd : null_fd, STDIN_FILENO);
    dup2(out_fd >= 0 ? out_fd : log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execvp(argv[0], (char *const *)argv);
    /* Only async-signal-safe calls here: the parent has threads. */
    static const char failed[] = "exec failed: ";
    ssize_t ignored = write(STDERR_FILENO, failed, sizeof failed - 1);
    ignored = write(STDERR_FILENO, argv[0], strlen(argv[0]));
    ignored = write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    _exit(127);
  }
  int fork_errno = errno;
  close(null_fd);
  cr_assert(pid > 0, "fork: %s", strerror(fork_errno));
  return pid;
}

/* ---- machine stalls ---- */

#define STALL_TICK_MS 5
#define STALL_MIN_MS 50
#define STALL_SLOTS 1024

static struct {
  pthread_t tid;
  bool started;
  atomic_bool stop;
  pthread_mutex_t mu;
  struct {
    int64_t from, to;
  } gaps[STALL_SLOTS]; /* a ring: the newest STALL_SLOTS gaps */
  size_t count;
  _Atomic int64_t last_tick; /* the watcher's latest wake-up */
} g_stall = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *stall_watch(void *arg) {
  (void)arg;
  int64_t prev = rt_now_ms();
  atomic_store(&g_stall.last_tick, prev);
  while (!atomic_load(&g_stall.stop)) {
    rt_sleep_ms(STALL_TICK_MS);
    int64_t now = rt_now_ms();
    atomic_store(&g_stall.last_tick, now);
    if (now - prev - STALL_TICK_MS > STALL_MIN_MS) {
      pthread_mutex_lock(&g_stall.mu);
      size_t slot = g_stall.count++ % STALL_SLOTS;
      g_stall.gaps[slot].from = prev + STALL_TICK_MS;
      g_stall.gaps[slot].to = now;
      pthread_mutex_unlock(&g_stall.mu);
    }
    prev = now;
  }
  return NULL;
}

/* Sum (or, with longest, the maximum) of the stalls overlapping [from, to]. */
static int64_t stalls(int64_t from, int64_t to, bool longest) {
  int64_t total = 0;
  pthread_mutex_lock(&g_stall.mu);
  size_t n = g_stall.count < STALL_SLOTS ? g_stall.count : STALL_SLOTS;
  /* Plus the gap still open: right after a stall, the caller may run before
   * the watcher had its turn to record it. */
  int64_t open_from = atomic_load(&g_stall.last_tick) + STALL_TICK_MS;
  int64_t open_to = rt_now_ms();
  for (size_t i = 0; i <= n; i++) {
    int64_t gap_from = i < n ? g_stall.gaps[i].from : open_from;
    int64_t gap_to = i < n ? g_stall.gaps[i].to : open_to;
    if (i == n && (!g_stall.started || gap_to - gap_from <= STALL_MIN_MS))
      continue;
    int64_t a = gap_from > from ? gap_from : from;
    int64_t b = gap_to < to ? gap_to : to;
    if (b <= a)
      continue;
    if (longest)
      total = b - a > total ? b - a : total;
    else
      total += b - a;
  }
  pthread_mutex_unlock(&g_stall.mu);
  return total;
}

int64_t interop_stalled_ms(int64_t from, int64_t to) {
  return stalls(from, to, false);
}

int64_t interop_longest_stall(int64_t from, int64_t to) {
  return stalls(from, to, true);
}

/* Milliseconds left of a bound that started at `start`, not counting the
 * time the machine stood still. */
static int64_t bound_left(int64_t start, int64_t bound_ms) {
  int64_t now = rt_now_ms();
  return bound_ms - (now - start - interop_stalled_ms(start, now));
}

bool interop_poll_until(bool (*cond)(void *), void *arg, int64_t bound_ms) {
  int64_t start = rt_now_ms();
  for (;;) {
    if (cond(arg))
      return true;
    if (bound_left(start, bound_ms) <= 0)
      return cond(arg);
    rt_sleep_ms(2);
  }
}

void interop_wait_until(bool (*cond)(void *), void *arg, int64_t bound_ms,
                        const char *what) {
  int64_t start = rt_now_ms();
  bool ok = interop_poll_until(cond, arg, bound_ms);
  cr_assert(ok,
            "condition \"%s\" not met within %" PRId64 " ms (plus %" PRId64
            " ms the machine stalled)",
            what, bound_ms, interop_stalled_ms(start, rt_now_ms()));
}

/* ---- node-redisson installation ---- */

/* Runs setup-node.sh once per test process, under a file lock so that
 * parallel tests never run npm at the same time in the same folder. */
static const char *node_dir(void) {
  static bool ready;
  const char *dir = env_or("INTEROP_NODE_DIR", INTEROP_NODE_DIR);
  if (ready)
    return dir;
  char lock_path[PATH_MAX], log_path[PATH_MAX];
  snprintf(lock_path, sizeof lock_path, "%s.lock", dir);
  snprintf(log_path, sizeof log_path, "%s-setup.log", dir);
  int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  cr_assert(lock_fd >= 0, "open %s: %s", lock_path, strerror(errno));
  /* Bounded: the holder kills its npm after SETUP_BOUND_MS. */
  while (flock(lock_fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert(log_fd >= 0, "open %s: %s", log_path, strerror(errno));
  const char *argv[] = {"/bin/sh", INTEROP_SETUP_SH, dir, NULL};
  pid_t pid = spawn(argv, -1, -1, log_fd);
  close(log_fd);
  int status = 0;
  bool done = reap_within(pid, SETUP_BOUND_MS, &status);
  if (!done)
    kill_reap(pid);
  flock(lock_fd, LOCK_UN);
  close(lock_fd);
  char tail[LOG_TAIL];
  file_tail(log_path, tail, sizeof tail);
  cr_assert(done, "setup-node.sh did not finish within %d ms; log %s:\n%s",
            SETUP_BOUND_MS, log_path, tail);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  cr_assert(code != 2,
            "the interop suite needs Node.js and npm (node-redisson is one of "
            "its two peers) and they are missing; install Node.js >= 16 with "
            "npm, or set INTEROP_NODE. setup-node.sh said:\n%s",
            tail);
  cr_assert(code == 0,
            "installing node-redisson@1.0.4 + ioredis@5 into %s failed "
            "(setup-node.sh exit %d); log %s:\n%s",
            dir, code, log_path, tail);
  ready = true;
  return dir;
}

/* ---- peers ---- */

typedef struct peer_line {
  char *text;
  bool event;
  bool used;
} peer_line;

struct peer {
  peer_kind kind;
  pid_t pid;
  bool running;
  int to_fd, from_fd;
  char id[64];
  char log_path[512];
  char partial[8192];
  size_t partial_len;
  peer_line *lines;
  size_t n_lines, cap_lines;
  bool eof;
};

static peer *g_peers[MAX_PEERS];
static int g_peer_seq;
/* interop_init_cluster: the seeds peers get ("" = the private server), and
 * where their logs go. */
static char g_cluster_seeds[512];
static char g_log_dir[512];
static bool g_server_started;

const char *peer_label(const peer *p) {
  return p->kind == PEER_NODE ? "node-redisson" : "java-like";
}

const char *peer_id(const peer *p) { return p->id; }

static bool is_event_word(const char *line) {
  static const char *const events[] = {"WAITING", "RENEWED", "LOST"};
  for (size_t i = 0; i < sizeof events / sizeof *events; i++) {
    size_t n = strlen(events[i]);
    if (strncmp(line, events[i], n) == 0 && (line[n] == ' ' || !line[n]))
      return true;
  }
  return false;
}

static void add_line(peer *p, const char *text, size_t len) {
  if (p->n_lines == p->cap_lines) {
    size_t cap = p->cap_lines ? 2 * p->cap_lines : 64;
    peer_line *lines = realloc(p->lines, cap * sizeof *lines);
    cr_assert(lines != NULL, "out of memory");
    p->lines = lines;
    p->cap_lines = cap;
  }
  char *copy = malloc(len + 1);
  cr_assert(copy != NULL, "out of memory");
  memcpy(copy, text, len);
  copy[len] = '\0';
  p->lines[p->n_lines++] =
      (peer_line){.text = copy, .event = is_event_word(copy), .used = false};
}

/* Reads what the peer wrote, waiting up to wait_ms for something. */
static void read_some(peer *p, int64_t wait_ms) {
  if (p->eof)
    return;
  struct pollfd pfd = {.fd = p->from_fd, .events = POLLIN};
  int rc = poll(&pfd, 1, (int)(wait_ms < 0 ? 0 : wait_ms));
  if (rc <= 0)
    return;
  char buf[4096];
  ssize_t got = read(p->from_fd, buf, sizeof buf);
  if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
    p->eof = true;
    return;
  }
  for (ssize_t i = 0; i < got; i++) {
    if (buf[i] == '\n') {
      add_line(p, p->partial, p->partial_len);
      p->partial_len = 0;
    } else if (p->partial_len < sizeof p->partial - 1) {
      p->partial[p->partial_len++] = buf[i];
    }
  }
}

/* Why the peer is gone or silent, for failure messages. */
static void peer_state(peer *p, char *buf, size_t n) {
  char tail[LOG_TAIL];
  file_tail(p->log_path, tail, sizeof tail);
  int status = 0;
  const char *state = "running";
  char exited[64];
  if (p->running && waitpid(p->pid, &status, WNOHANG) == p->pid) {
    p->running = false;
    snprintf(exited, sizeof exited, "exited (%s %d)",
             WIFEXITED(status) ? "status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    state = exited;
  } else if (!p->running) {
    state = "exited";
  }
  snprintf(buf, n, "%s peer (pid %ld) %s; last answers: %s; stderr (%s):\n%s",
           peer_label(p), (long)p->pid, state,
           p->n_lines ? p->lines[p->n_lines - 1].text : "(none)", p->log_path,
           tail);
}

peer *peer_start(peer_kind kind, int64_t watchdog_ms) {
  return peer_start_ex(kind, watchdog_ms, false);
}

peer *peer_start_ex(peer_kind kind, int64_t watchdog_ms, bool sharded) {
  cr_assert(!sharded || kind == PEER_JAVA,
            "node-redisson has no sharded pub/sub mode");
  const char *modules = kind == PEER_NODE ? node_dir() : NULL;
  int slot = -1;
  for (int i = 0; i < MAX_PEERS && slot < 0; i++)
    if (g_peers[i] == NULL)
      slot = i;
  cr_assert(slot >= 0, "too many peers");
  peer *p = calloc(1, sizeof *p);
  cr_assert(p != NULL, "out of memory");
  p->kind = kind;
  int plen = snprintf(p->log_path, sizeof p->log_path, "%s/peer-%d-%s.log",
                      g_cluster_seeds[0] ? g_log_dir : rt_server_dir(),
                      ++g_peer_seq, kind == PEER_NODE ? "node" : "java");
  cr_assert(plen > 0 && (size_t)plen < sizeof p->log_path, "log path too long");
  int log_fd =
      open(p->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert(log_fd >= 0, "open %s: %s", p->log_path, strerror(errno));
  int to[2], from[2];
  cr_assert(pipe2(to, O_CLOEXEC) == 0 && pipe2(from, O_CLOEXEC) == 0,
            "pipe2: %s", strerror(errno));

  char port[16], watchdog[24], deadline[24];
  bool cluster = g_cluster_seeds[0] != '\0';
  if (!cluster)
    snprintf(port, sizeof port, "%d", rt_port());
  snprintf(watchdog, sizeof watchdog, "%" PRId64,
           watchdog_ms > 0 ? watchdog_ms : 30000);
  snprintf(deadline, sizeof deadline, "%d", PEER_DEADLINE_MS);
  const char *node_argv[] = {env_or("INTEROP_NODE", "node"),
                             INTEROP_PEER_JS,
                             cluster ? "--cluster" : "--port",
                             cluster ? g_cluster_seeds : port,
                             "--modules",
                             modules,
                             "--watchdog-ms",
                             watchdog,
                             "--deadline-ms",
                             deadline,
                             NULL};
  const char *java_argv[] = {env_or("INTEROP_JAVAPEER", INTEROP_JAVAPEER),
                             cluster ? "--cluster" : "--port",
                             cluster ? g_cluster_seeds : port,
                             "--watchdog-ms",
                             watchdog,
                             "--deadline-ms",
                             deadline,
                             "--sharded",
                             sharded ? "1" : "0",
                             NULL};
  p->pid =
      spawn(kind == PEER_NODE ? node_argv : java_argv, to[0], from[1], log_fd);
  p->running = true;
  close(to[0]);
  close(from[1]);
  close(log_fd);
  p->to_fd = to[1];
  p->from_fd = from[0];
  g_peers[slot] = p;

  const char *id = peer_expect(p, "READY", PEER_START_BOUND_MS);
  snprintf(p->id, sizeof p->id, "%s", id);
  return p;
}

void peer_send(peer *p, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  cr_assert(n > 0 && (size_t)n < sizeof line - 1, "peer command too long");
  line[n++] = '\n';
  size_t off = 0;
  while (off < (size_t)n) {
    ssize_t w = write(p->to_fd, line + off, (size_t)n - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      char why[WHY_LEN];
      peer_state(p, why, sizeof why);
      cr_assert_fail("cannot send \"%.*s\": %s", n - 1, line, why);
    }
    off += (size_t)w;
  }
}

static peer_line *next_answer(peer *p) {
  for (size_t i = 0; i < p->n_lines; i++)
    if (!p->lines[i].event && !p->lines[i].used)
      return &p->lines[i];
  return NULL;
}

static const char *rest_after(const char *text, const char *word) {
  size_t n = strlen(word);
  if (strncmp(text, word, n) != 0 || (text[n] != ' ' && text[n] != '\0'))
    return NULL;
  return text[n] == ' ' ? text + n + 1 : text + n;
}

const char *peer_expect(peer *p, const char *word, int64_t bound_ms) {
  int64_t start = rt_now_ms();
  for (;;) {
    peer_line *l = next_answer(p);
    if (l != NULL) {
      l->used = true;
      const char *rest = rest_after(l->text, word);
      if (rest == NULL) {
        char why[WHY_LEN];
        peer_state(p, why, sizeof why);
        cr_assert_fail("%s peer answered \"%s\" where %s was expected; %s",
                       peer_label(p), l->text, word, why);
      }
      return rest;
    }
    int64_t left = bound_left(start, bound_ms);
    if (p->eof || left <= 0) {
      read_some(p, 0); /* what came while we were not looking */
      if (next_answer(p) != NULL)
        continue;
      char why[WHY_LEN];
      peer_state(p, why, sizeof why);
      cr_assert_fail("no %s from the %s peer within %" PRId64 " ms; %s", word,
                     peer_label(p), bound_ms, why);
    }
    read_some(p, left);
  }
}

const char *peer_next_answer(peer *p, int64_t bound_ms) {
  int64_t start = rt_now_ms();
  for (;;) {
    peer_line *l = next_answer(p);
    if (l != NULL) {
      l->used = true;
      return l->text;
    }
    int64_t left = bound_left(start, bound_ms);
    if (p->eof || left <= 0) {
      read_some(p, 0);
      if (next_answer(p) != NULL)
        continue;
      char why[WHY_LEN];
      peer_state(p, why, sizeof why);
      cr_assert_fail("no answer from the %s peer within %" PRId64 " ms; %s",
                     peer_label(p), bound_ms, why);
    }
    read_some(p, left);
  }
}

const char *peer_call(peer *p, const char *word, int64_t bound_ms,
                      const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  peer_send(p, "%s", line);
  return peer_expect(p, word, bound_ms);
}

bool peer_has_answer(peer *p, int64_t bound_ms) {
  int64_t deadline = rt_now_ms() + bound_ms;
  do {
    read_some(p, 0);
    if (next_answer(p) != NULL)
      return true;
    if (bound_ms > 0)
      read_some(p, deadline - rt_now_ms());
  } while (rt_now_ms() < deadline);
  return next_answer(p) != NULL;
}

const char *peer_expect_event(peer *p, const char *word, int64_t bound_ms) {
  int64_t start = rt_now_ms();
  bool last_look = false;
  for (;;) {
    for (size_t i = 0; i < p->n_lines; i++) {
      peer_line *l = &p->lines[i];
      const char *rest =
          l->event && !l->used ? rest_after(l->text, word) : NULL;
      if (rest != NULL) {
        l->used = true;
        return rest;
      }
    }
    int64_t left = bound_left(start, bound_ms);
    if (p->eof || left <= 0) {
      if (!last_look && !p->eof) {
        last_look = true; /* what came while we were not looking */
        read_some(p, 0);
        continue;
      }
      char why[WHY_LEN];
      peer_state(p, why, sizeof why);
      cr_assert_fail("no %s line from the %s peer within %" PRId64 " ms; %s",
                     word, peer_label(p), bound_ms, why);
    }
    read_some(p, left);
  }
}

size_t peer_event_count(peer *p, const char *word) {
  read_some(p, 0);
  size_t count = 0;
  for (size_t i = 0; i < p->n_lines; i++)
    if (p->lines[i].event && rest_after(p->lines[i].text, word) != NULL)
      count++;
  return count;
}

void peer_skip_events(peer *p) {
  read_some(p, 0);
  for (size_t i = 0; i < p->n_lines; i++)
    if (p->lines[i].event)
      p->lines[i].used = true;
}

void peer_owner(peer *p, const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s",
           peer_call(p, "OWNER", REPLY_BOUND_MS, "owner %s", name));
}

static void peer_free(peer *p, bool polite) {
  for (int i = 0; i < MAX_PEERS; i++)
    if (g_peers[i] == p)
      g_peers[i] = NULL;
  if (p->running) {
    int status;
    if (polite) {
      static const char quit[] = "quit\n";
      ssize_t ignored = write(p->to_fd, quit, sizeof quit - 1);
      (void)ignored;
    }
    if (!polite || !reap_within(p->pid, STOP_BOUND_MS, &status))
      kill_reap(p->pid);
    p->running = false;
  }
  close(p->to_fd);
  close(p->from_fd);
  for (size_t i = 0; i < p->n_lines; i++)
    free(p->lines[i].text);
  free(p->lines);
  free(p);
}

void peer_stop(peer *p) {
  if (p != NULL)
    peer_free(p, true);
}

void peer_kill(peer *p) {
  if (p != NULL)
    peer_free(p, false);
}

/* ---- suite init / fini ---- */

static void start_stall_watch(void) {
  /* A peer that died must give a failed write, not kill the test. */
  signal(SIGPIPE, SIG_IGN);
  atomic_store(&g_stall.stop, false);
  g_stall.started = pthread_create(&g_stall.tid, NULL, stall_watch, NULL) == 0;
  cr_assert(g_stall.started, "cannot start the stall watcher thread");
}

void interop_init(void) {
  g_cluster_seeds[0] = '\0';
  start_stall_watch();
  rt_server_start();
  g_server_started = true;
}

void interop_init_cluster(const char *seeds, const char *log_dir) {
  cr_assert(seeds != NULL && seeds[0] != '\0' &&
                strlen(seeds) < sizeof g_cluster_seeds,
            "bad cluster seeds");
  snprintf(g_cluster_seeds, sizeof g_cluster_seeds, "%s", seeds);
  snprintf(g_log_dir, sizeof g_log_dir, "%s", log_dir);
  start_stall_watch();
}

void interop_kill_peers(void) {
  for (int i = 0; i < MAX_PEERS; i++)
    if (g_peers[i] != NULL)
      peer_free(g_peers[i], false);
}

void interop_fini(void) {
  interop_kill_peers();
  if (g_server_started)
    rt_server_stop();
  g_server_started = false;
  g_cluster_seeds[0] = '\0';
  if (g_stall.started) {
    atomic_store(&g_stall.stop, true);
    pthread_join(g_stall.tid, NULL);
    g_stall.started = false;
  }
}

/* ---- MONITOR ---- */

struct monitor {
  redisContext *ctx;
  int port; /* monitor_start_port; 0: the private server */
  char **lines;
  size_t n, cap;
  unsigned marker_seq;
};

monitor *monitor_start(void) {
  monitor *m = calloc(1, sizeof *m);
  cr_assert(m != NULL, "out of memory");
  m->ctx = rt_redis_new(5000);
  redisReply *r = redisCommand(m->ctx, "MONITOR");
  cr_assert(r != NULL && r->type == REDIS_REPLY_STATUS &&
                strcmp(r->str, "OK") == 0,
            "MONITOR was refused");
  freeReplyObject(r);
  return m;
}

monitor *monitor_start_port(int port) {
  monitor *m = calloc(1, sizeof *m);
  cr_assert(m != NULL, "out of memory");
  m->port = port;
  struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
  m->ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
  cr_assert(m->ctx != NULL && m->ctx->err == 0, "connect to %d: %s", port,
            m->ctx ? m->ctx->errstr : "out of memory");
  redisSetTimeout(m->ctx, tv);
  redisReply *r = redisCommand(m->ctx, "MONITOR");
  cr_assert(r != NULL && r->type == REDIS_REPLY_STATUS &&
                strcmp(r->str, "OK") == 0,
            "MONITOR was refused on %d", port);
  freeReplyObject(r);
  return m;
}

/* ECHO marker on the monitored server. */
static void monitor_echo(monitor *m, const char *marker) {
  if (m->port == 0) {
    freeReplyObject(rt_cmd("ECHO %s", marker));
    return;
  }
  struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", m->port, tv);
  cr_assert(c != NULL && c->err == 0, "connect to %d: %s", m->port,
            c ? c->errstr : "out of memory");
  redisSetTimeout(c, tv);
  redisReply *r = redisCommand(c, "ECHO %s", marker);
  cr_assert(r != NULL && r->type == REDIS_REPLY_STRING, "ECHO on %d failed",
            m->port);
  freeReplyObject(r);
  redisFree(c);
}

static void monitor_add(monitor *m, const char *text) {
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 256;
    char **lines = realloc(m->lines, cap * sizeof *lines);
    cr_assert(lines != NULL, "out of memory");
    m->lines = lines;
    m->cap = cap;
  }
  m->lines[m->n] = strdup(text);
  cr_assert(m->lines[m->n] != NULL, "out of memory");
  m->n++;
}

void monitor_sync(monitor *m) {
  char marker[96];
  snprintf(marker, sizeof marker, "interop-monitor-marker-%ld-%u",
           (long)getpid(), ++m->marker_seq);
  monitor_echo(m, marker);
  int64_t start = rt_now_ms();
  for (;;) {
    void *reply = NULL;
    while (redisReaderGetReply(m->ctx->reader, &reply) == REDIS_OK && reply) {
      redisReply *r = reply;
      bool found = false;
      if (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) {
        monitor_add(m, r->str);
        found = strstr(r->str, marker) != NULL;
      }
      freeReplyObject(r);
      reply = NULL;
      if (found)
        return;
    }
    int64_t left = bound_left(start, REPLY_BOUND_MS);
    cr_assert(left > 0, "MONITOR did not show the marker within %d ms",
              REPLY_BOUND_MS);
    struct pollfd pfd = {.fd = m->ctx->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)left) > 0)
      cr_assert(redisBufferRead(m->ctx) == REDIS_OK, "MONITOR connection: %s",
                m->ctx->errstr);
  }
}

size_t monitor_count(const monitor *m) { return m->n; }

const char *monitor_line(const monitor *m, size_t i) {
  return i < m->n ? m->lines[i] : NULL;
}

size_t monitor_find(const monitor *m, size_t from, const char *needle) {
  for (size_t i = from; i < m->n; i++)
    if (strcasestr(m->lines[i], needle) != NULL)
      return i;
  return (size_t)-1;
}

bool monitor_arg_after(const monitor *m, size_t i, const char *needle,
                       char *buf, size_t n) {
  if (i >= m->n)
    return false;
  const char *at = strcasestr(m->lines[i], needle);
  if (at == NULL)
    return false;
  at += strlen(needle);
  const char *end = strchr(at, '"');
  if (end == NULL || (size_t)(end - at) >= n)
    return false;
  memcpy(buf, at, (size_t)(end - at));
  buf[end - at] = '\0';
  return true;
}

void monitor_stop(monitor *m) {
  if (m == NULL)
    return;
  redisFree(m->ctx);
  for (size_t i = 0; i < m->n; i++)
    free(m->lines[i]);
  free(m->lines);
  free(m);
}

/* ---- scripted rlock thread ---- */

static void worker_main(void *arg) {
  rl_worker *w = arg;
  snprintf(w->owner, sizeof w->owner, "%s:%" PRIu64, rlock_client_id(w->client),
           rlock_thread_id());
  w->t_call = rt_now_ms();
  atomic_store(&w->stage, 1);
  w->acquire_rc = rlock_try_lock(w->lock, w->wait_ms, w->lease_ms);
  w->t_returned = rt_now_ms();
  atomic_store(&w->stage, 2);
  if (w->acquire_rc != 1)
    return;
  int64_t deadline = rt_now_ms() + 4 * JOIN_BOUND_MS;
  while (!atomic_load(&w->release_now) && rt_now_ms() < deadline)
    rt_sleep_ms(1);
  int unlocks = w->unlocks > 0 ? w->unlocks : 1;
  for (int i = 0; i < unlocks && i < 4; i++)
    w->unlock_rc[i] = rlock_unlock(w->lock);
  w->t_unlocked = rt_now_ms();
  atomic_store(&w->stage, 3);
}

void rl_worker_start(rl_worker *w, rlock_client *c, rlock *lock,
                     int64_t wait_ms, int64_t lease_ms) {
  w->client = c;
  w->lock = lock;
  w->wait_ms = wait_ms;
  w->lease_ms = lease_ms;
  rt_thread_start(&w->th, worker_main, w);
}

typedef struct stage_arg {
  rl_worker *w;
  int stage;
} stage_arg;

static bool stage_reached(void *arg) {
  stage_arg *s = arg;
  return atomic_load(&s->w->stage) >= s->stage;
}

void rl_worker_wait_stage(rl_worker *w, int stage, int64_t bound_ms) {
  stage_arg s = {w, stage};
  char what[64];
  snprintf(what, sizeof what, "rlock thread reaches stage %d", stage);
  interop_wait_until(stage_reached, &s, bound_ms, what);
}

void rl_worker_finish(rl_worker *w) {
  atomic_store(&w->release_now, true);
  rt_thread_join(&w->th, JOIN_BOUND_MS);
}

/* ---- names and Redis ---- */

void interop_braced(char *buf, size_t n, const char *name) {
  if (strchr(name, '{'))
    snprintf(buf, n, "%s", name);
  else
    snprintf(buf, n, "{%s}", name);
}

typedef struct numsub_arg {
  const char *channel;
  long long want;
  bool sharded;
} numsub_arg;

static bool numsub_is(void *arg) {
  numsub_arg *a = arg;
  return (a->sharded ? rt_shardnumsub(a->channel) : rt_numsub(a->channel)) ==
         a->want;
}

static void wait_numsub(const char *channel, long long want, bool sharded,
                        int64_t bound_ms) {
  numsub_arg a = {channel, want, sharded};
  char what[CHANNEL_MAX_LEN + 64];
  snprintf(what, sizeof what, "PUBSUB %s %s == %lld",
           sharded ? "SHARDNUMSUB" : "NUMSUB", channel, want);
  interop_wait_until(numsub_is, &a, bound_ms, what);
}

void interop_wait_numsub(const char *channel, long long want,
                         int64_t bound_ms) {
  wait_numsub(channel, want, false, bound_ms);
}

long long interop_script_runs(const char *info) {
  long long total = 0;
  static const char *const rows[] = {"cmdstat_eval:", "cmdstat_evalsha:"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const char *at = strstr(info, rows[i]);
    if (at == NULL)
      continue;
    const char *end = strchr(at, '\n');
    const char *calls = strstr(at, "calls=");
    const char *failed = strstr(at, "failed_calls=");
    cr_assert(calls != NULL && failed != NULL && (end == NULL || failed < end),
              "commandstats row: %.80s", at);
    total += strtoll(calls + strlen("calls="), NULL, 10) -
             strtoll(failed + strlen("failed_calls="), NULL, 10);
  }
  return total;
}

void interop_wait_shardnumsub(const char *channel, long long want,
                              int64_t bound_ms) {
  wait_numsub(channel, want, true, bound_ms);
}

void interop_my_owner(char *buf, size_t n, rlock_client *c) {
  snprintf(buf, n, "%s:%" PRIu64, rlock_client_id(c), rlock_thread_id());
}

void interop_assert_hget(const char *key, const char *field,
                         const char *expect) {
  char *got = rt_hget(key, field);
  bool same = (got == NULL && expect == NULL) ||
              (got != NULL && expect != NULL && strcmp(got, expect) == 0);
  char got_s[64];
  snprintf(got_s, sizeof got_s, "%s", got ? got : "(nil)");
  free(got);
  cr_assert(same, "HGET %s %s: expected %s, got %s", key, field,
            expect ? expect : "(nil)", got_s);
}

uint64_t interop_contended(rlock_client *c) {
  rlock_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  cr_assert_eq(rlock_client_stats(c, &st), 0);
  return st.acquisitions_contended;
}
