/* The redisson suite's harness and main() (see rs.h). */
#include "rs.h"
#include "harness.h"
#include "topo_harness.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef RS_PEER_SCRIPT
#error "RS_PEER_SCRIPT (tests/redisson/peer) must be defined by meson"
#endif
#ifndef RS_REPO_ROOT
#error "RS_REPO_ROOT must be defined by meson"
#endif

/* The first start may compile the driver (and, for a Maven version, fetch
 * it: fetch-maven runs before, bounded separately). */
#define JVM_START_BOUND_MS start_bound_ms()
#define FETCH_BOUND_MS 300000
#define STOP_BOUND_MS 5000
#define LINE_MAX_LEN 8192

/* ---- small things ---- */

int64_t rs_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rs_sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

static const char *env_or(const char *name, const char *fallback) {
  const char *v = getenv(name);
  return (v != NULL && *v != '\0') ? v : fallback;
}

int64_t rs_reply_bound_ms(void) { return atoll(env_or("RS_REPLY_BOUND_MS", "15000")); }
static int64_t start_bound_ms(void) { return atoll(env_or("RS_START_BOUND_MS", "120000")); }

static const char *driver(void) { return env_or("RLOCK_REDISSON_DRIVER", RS_PEER_SCRIPT); }

const char *rs_variant(void) { return env_or("RLOCK_REDISSON_VARIANT", "shared"); }
const char *rs_version(void) { return env_or("RS_REDISSON_VERSION", "?"); }
int rs_port(void) { return atoi(env_or("RS_REDIS_PORT", "0")); }

const char *rs_uri(void) {
  static char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", rs_port());
  return uri;
}

void rs_report(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[redisson %s] %s\n", rs_version(), line);
}

void rs_name(char *buf, size_t n, const char *base) {
  static atomic_int seq;
  snprintf(buf, n, "%s-%ld-%d", base, (long)getpid(), atomic_fetch_add(&seq, 1));
}

/* ---- the JVM ---- */

struct rs_jvm {
  pid_t pid;
  int in_fd;  /* its stdin: closing it ends the JVM */
  int out_fd; /* its stdout, read until LISTEN */
  int port;
  char log[PATH_MAX];
};

/* Reads one line from fd within the deadline; 1 line, 0 EOF, -1 timeout. */
static int read_line_fd(int fd, char *buf, size_t n, size_t *have,
                        int64_t deadline) {
  for (;;) {
    char *nl = memchr(buf, '\n', *have);
    if (nl != NULL) {
      *nl = '\0';
      return 1;
    }
    int64_t left = deadline - rs_now_ms();
    if (left <= 0)
      return -1;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, (int)left);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      continue;
    if (*have + 1 >= n)
      return 0;
    ssize_t got = read(fd, buf + *have, n - 1 - *have);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return 0;
    *have += (size_t)got;
  }
}

static void log_tail(const char *path, char *buf, size_t n) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    fseek(f, size > (long)n - 1 ? size - ((long)n - 1) : 0, SEEK_SET);
  }
  size_t got = fread(buf, 1, n - 1, f);
  buf[got] = '\0';
  fclose(f);
}

static void kill_reap(pid_t pid, int64_t bound_ms) {
  if (pid <= 0)
    return;
  kill(pid, SIGTERM);
  int64_t deadline = rs_now_ms() + bound_ms;
  for (;;) {
    pid_t r = waitpid(pid, NULL, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return;
    if (rs_now_ms() >= deadline)
      break;
    rs_sleep_ms(10);
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

/* Starts tests/redisson/peer; on failure returns false with why. */
static bool jvm_spawn(rs_jvm *j, const char *target, int64_t watchdog_ms,
                      char *why, size_t why_n) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
    snprintf(why, why_n, "pipe: %s", strerror(errno));
    return false;
  }
  char tmpl[PATH_MAX];
  snprintf(tmpl, sizeof tmpl, "%s/rlock-redisson-peer-XXXXXX.log", env_or("TMPDIR", "/tmp"));
  int log_fd = mkstemps(tmpl, 4);
  if (log_fd < 0) {
    snprintf(why, why_n, "mkstemps: %s", strerror(errno));
    return false;
  }
  snprintf(j->log, sizeof j->log, "%s", tmpl);
  char variant[128], wd[32];
  snprintf(variant, sizeof variant, "--redisson=%s", rs_variant());
  snprintf(wd, sizeof wd, "%" PRId64, watchdog_ms);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, why_n, "fork: %s", strerror(errno));
    return false;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(log_fd, 2);
    execl(driver(), driver(), variant, target, "--watchdog", wd, "--listen",
          (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", driver(), strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(log_fd);
  j->pid = pid;
  j->in_fd = in[1];
  j->out_fd = out[0];

  char buf[LINE_MAX_LEN];
  size_t have = 0;
  int64_t deadline = rs_now_ms() + JVM_START_BOUND_MS;
  for (;;) {
    int r = read_line_fd(j->out_fd, buf, sizeof buf, &have, deadline);
    if (r <= 0) {
      char tail[2048];
      log_tail(j->log, tail, sizeof tail);
      snprintf(why, why_n, "the Redisson peer %s within %" PRId64 " ms; its log %s:\n%s",
               r == 0 ? "ended before LISTEN" : "did not print LISTEN",
               JVM_START_BOUND_MS, j->log, tail);
      return false;
    }
    size_t len = strlen(buf);
    if (strncmp(buf, "LISTEN ", 7) == 0) {
      j->port = atoi(buf + 7);
      memmove(buf, buf + len + 1, have - len - 1);
      return j->port > 0;
    }
    memmove(buf, buf + len + 1, have - len - 1);
    have -= len + 1;
  }
}

static void jvm_kill(rs_jvm *j) {
  if (j->in_fd >= 0)
    close(j->in_fd); /* end of stdin: the driver quits */
  if (j->out_fd >= 0)
    close(j->out_fd);
  j->in_fd = j->out_fd = -1;
  kill_reap(j->pid, STOP_BOUND_MS);
  j->pid = 0;
}

rs_jvm *rs_jvm_start(const char *target, int64_t watchdog_ms) {
  rs_jvm *j = calloc(1, sizeof *j);
  cr_assert(j != NULL);
  j->in_fd = j->out_fd = -1;
  char why[4096];
  bool ok = jvm_spawn(j, target, watchdog_ms, why, sizeof why);
  if (!ok) {
    jvm_kill(j);
    unlink(j->log);
    cr_assert_fail("%s", why);
  }
  return j;
}

void rs_jvm_stop(rs_jvm *j) {
  if (j == NULL)
    return;
  jvm_kill(j);
  unlink(j->log);
  free(j);
}

/* ---- sessions ---- */

#define RS_PENDING 64
struct rs_peer {
  int fd;     /* answers come from here */
  int wfd;    /* commands go here (fd, or the stdin of a peer of its own) */
  pid_t pid;  /* > 0: a peer process of this session (rs_shared_peer_start) */
  char buf[LINE_MAX_LEN * 4];
  size_t have;
  /* answers read but not asked for yet: "TAG: text" */
  char *pending[RS_PENDING];
  size_t n_pending;
  char answer[LINE_MAX_LEN];
  /* the last command sent per tag, for failure messages */
  char last_tag[RS_PENDING][32];
  char last_cmd[RS_PENDING][256];
  size_t n_last;
};

static void remember(rs_peer *p, const char *tag, const char *cmd) {
  size_t i = 0;
  while (i < p->n_last && strcmp(p->last_tag[i], tag) != 0)
    i++;
  if (i == p->n_last) {
    if (p->n_last == RS_PENDING)
      return;
    p->n_last++;
  }
  snprintf(p->last_tag[i], sizeof p->last_tag[i], "%s", tag);
  snprintf(p->last_cmd[i], sizeof p->last_cmd[i], "%s", cmd);
}

static const char *last_cmd(rs_peer *p, const char *tag) {
  for (size_t i = 0; i < p->n_last; i++)
    if (strcmp(p->last_tag[i], tag) == 0)
      return p->last_cmd[i];
  return "?";
}

static rs_peer *connect_port(int port) {
  rs_peer *p = calloc(1, sizeof *p);
  cr_assert(p != NULL);
  p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert(p->fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(connect(p->fd, (struct sockaddr *)&a, sizeof a) == 0,
            "connect to the Redisson peer on %d: %s", port, strerror(errno));
  int one = 1;
  setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  p->wfd = p->fd;
  return p;
}

rs_peer *rs_connect(void) {
  int port = atoi(env_or("RS_PEER_PORT", "0"));
  cr_assert(port > 0, "RS_PEER_PORT not set: run the suite's own binary");
  return connect_port(port);
}

rs_peer *rs_jvm_connect(rs_jvm *j) { return connect_port(j->port); }

rs_peer *rs_shared_peer_start(void) {
  char def[PATH_MAX];
  snprintf(def, sizeof def, "%s/../shared/redisson/peer", RS_REPO_ROOT);
  const char *cmd = env_or("RLOCK_REDISSON_PEER", def);
  char port[16];
  snprintf(port, sizeof port, "%d", rs_port());
  int in[2], out[2];
  cr_assert(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
  pid_t parent = getpid();
  pid_t pid = fork();
  cr_assert(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    dup2(in[0], 0);
    dup2(out[1], 1);
    int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0)
      dup2(null_fd, 2);
    execl(cmd, cmd, port, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  rs_peer *p = calloc(1, sizeof *p);
  cr_assert(p != NULL);
  p->fd = out[0];
  p->wfd = in[1];
  p->pid = pid;
  /* ID <uuid>, then READY (bounded: the first run compiles the driver) */
  char line[LINE_MAX_LEN];
  size_t have = 0;
  int64_t deadline = rs_now_ms() + JVM_START_BOUND_MS;
  for (;;) {
    int r = read_line_fd(p->fd, line, sizeof line, &have, deadline);
    if (r != 1) {
      rs_close(p);
      cr_assert_fail("%s %s: no READY within %" PRId64 " ms", cmd, port, JVM_START_BOUND_MS);
    }
    size_t len = strlen(line);
    bool ready = strcmp(line, "READY") == 0;
    cr_assert(ready || strncmp(line, "ID ", 3) == 0, "%s: unexpected line '%s'", cmd, line);
    memmove(line, line + len + 1, have - len - 1);
    have -= len + 1;
    if (ready)
      break;
  }
  cr_assert(have == 0);
  return p;
}

void rs_close(rs_peer *p) {
  if (p == NULL)
    return;
  (void)!write(p->wfd, "quit\n", 5);
  if (p->wfd != p->fd)
    close(p->wfd);
  close(p->fd);
  kill_reap(p->pid, STOP_BOUND_MS);
  for (size_t i = 0; i < p->n_pending; i++)
    free(p->pending[i]);
  free(p);
}

static void send_line(rs_peer *p, const char *tag, const char *fmt,
                      va_list ap) {
  char line[LINE_MAX_LEN];
  int w = snprintf(line, sizeof line, "%s: ", tag);
  w += vsnprintf(line + w, sizeof line - (size_t)w - 1, fmt, ap);
  cr_assert(w > 0 && (size_t)w < sizeof line - 1, "command too long");
  remember(p, tag, line + strlen(tag) + 2);
  line[w++] = '\n';
  for (int off = 0; off < w;) {
    ssize_t s = write(p->wfd, line + off, (size_t)(w - off));
    if (s < 0 && errno == EINTR)
      continue;
    cr_assert(s > 0, "write to the Redisson peer: %s", strerror(errno));
    off += (int)s;
  }
}

void rs_send(rs_peer *p, const char *tag, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_line(p, tag, fmt, ap);
  va_end(ap);
}

/* Reads what is there into pending lines, waiting up to bound_ms for
 * something. Fails the test on EOF or a line that is no tagged answer. */
static void pump(rs_peer *p, int64_t bound_ms) {
  struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
  int pr = poll(&pfd, 1, (int)(bound_ms < 0 ? 0 : bound_ms));
  if (pr <= 0)
    return;
  ssize_t got = read(p->fd, p->buf + p->have, sizeof p->buf - 1 - p->have);
  if (got < 0 && errno == EINTR)
    return;
  cr_assert(got > 0, "the Redisson peer closed the session (%s)",
            got < 0 ? strerror(errno) : "EOF");
  p->have += (size_t)got;
  char *nl;
  while ((nl = memchr(p->buf, '\n', p->have)) != NULL) {
    *nl = '\0';
    size_t len = (size_t)(nl - p->buf);
    cr_assert(strstr(p->buf, ": ") != NULL,
              "the Redisson peer answered a line that is no tagged answer: '%s'",
              p->buf);
    cr_assert(p->n_pending < RS_PENDING, "too many unread peer answers");
    p->pending[p->n_pending] = strdup(p->buf);
    cr_assert(p->pending[p->n_pending] != NULL);
    p->n_pending++;
    memmove(p->buf, nl + 1, p->have - len - 1);
    p->have -= len + 1;
  }
  cr_assert(p->have < sizeof p->buf - 1, "peer line too long");
}

/* Index of TAG's first pending answer, or -1. */
static int find_pending(rs_peer *p, const char *tag) {
  size_t tl = strlen(tag);
  for (size_t i = 0; i < p->n_pending; i++)
    if (strncmp(p->pending[i], tag, tl) == 0 && p->pending[i][tl] == ':' &&
        p->pending[i][tl + 1] == ' ')
      return (int)i;
  return -1;
}

bool rs_has_answer(rs_peer *p, const char *tag, int64_t bound_ms) {
  int64_t deadline = rs_now_ms() + bound_ms;
  for (;;) {
    if (find_pending(p, tag) >= 0)
      return true;
    int64_t left = deadline - rs_now_ms();
    if (left <= 0)
      return false;
    pump(p, left);
  }
}

const char *rs_answer(rs_peer *p, const char *tag, int64_t bound_ms) {
  cr_assert(rs_has_answer(p, tag, bound_ms),
            "the Redisson peer gave no answer on thread %s within %" PRId64
            " ms (its last command: %s)",
            tag, bound_ms, last_cmd(p, tag));
  int i = find_pending(p, tag);
  char *line = p->pending[i];
  memmove(&p->pending[i], &p->pending[i + 1],
          (p->n_pending - (size_t)i - 1) * sizeof p->pending[0]);
  p->n_pending--;
  const char *text = line + strlen(tag) + 2;
  /* strip the " (N ms)" every answer ends with */
  const char *paren = strrchr(text, '(');
  size_t len = strlen(text);
  cr_assert(paren != NULL && paren > text && len >= 5 &&
                strcmp(text + len - 4, " ms)") == 0,
            "the Redisson peer's answer has no timing: '%s'", line);
  size_t keep = (size_t)(paren - text) - 1;
  cr_assert(keep < sizeof p->answer);
  memcpy(p->answer, text, keep);
  p->answer[keep] = '\0';
  free(line);
  cr_assert(strncmp(p->answer, "OK", 2) == 0 || strncmp(p->answer, "ERR ", 4) == 0,
            "the Redisson peer answered something unknown: '%s'", p->answer);
  return p->answer;
}

const char *rs_ok(rs_peer *p, const char *tag, int64_t bound_ms) {
  const char *a = rs_answer(p, tag, bound_ms);
  cr_assert(strcmp(a, "OK") == 0 || strncmp(a, "OK ", 3) == 0,
            "Redisson (thread %s) answered '%s' to '%s', expected OK", tag, a,
            last_cmd(p, tag));
  return a[2] == ' ' ? a + 3 : a + 2;
}

const char *rs_call(rs_peer *p, const char *tag, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_line(p, tag, fmt, ap);
  va_end(ap);
  return rs_ok(p, tag, RS_REPLY_BOUND_MS);
}

bool rs_call_bool(rs_peer *p, const char *tag, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_line(p, tag, fmt, ap);
  va_end(ap);
  const char *r = rs_ok(p, tag, RS_REPLY_BOUND_MS);
  cr_assert(strcmp(r, "true") == 0 || strcmp(r, "false") == 0,
            "expected true/false from Redisson, got '%s'", r);
  return strcmp(r, "true") == 0;
}

long long rs_call_num(rs_peer *p, const char *tag, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_line(p, tag, fmt, ap);
  va_end(ap);
  const char *r = rs_ok(p, tag, RS_REPLY_BOUND_MS);
  char *end;
  long long v = strtoll(r, &end, 10);
  cr_assert(*r != '\0' && *end == '\0', "expected a number from Redisson, got '%s'", r);
  return v;
}

const char *rs_call_err(rs_peer *p, const char *tag, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_line(p, tag, fmt, ap);
  va_end(ap);
  const char *a = rs_answer(p, tag, RS_REPLY_BOUND_MS);
  cr_assert(strncmp(a, "ERR ", 4) == 0,
            "Redisson (thread %s) answered '%s', expected an exception", tag, a);
  return a + 4;
}

void rs_owner(rs_peer *p, const char *tag, char *buf, size_t n) {
  snprintf(buf, n, "%s", rs_call(p, tag, "owner"));
}

/* ---- Redis ---- */

static redisReply *vcmd(int port, const char *fmt, va_list ap) {
  static redisContext *ctx;
  static int ctx_port;
  if (ctx != NULL && (ctx->err || ctx_port != port)) {
    redisFree(ctx);
    ctx = NULL;
  }
  if (ctx == NULL) {
    ctx = rt_node_connect(port, 5000);
    ctx_port = port;
  }
  redisReply *r = redisvCommand(ctx, fmt, ap);
  cr_assert(r != NULL, "redis on %d: %s", port, ctx->errstr);
  return r;
}

redisReply *rs_cmd(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(rs_port(), fmt, ap);
  va_end(ap);
  return r;
}

long long rs_int(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(rs_port(), fmt, ap);
  va_end(ap);
  cr_assert(r->type == REDIS_REPLY_INTEGER, "expected an integer reply (%s)",
            r->type == REDIS_REPLY_ERROR ? r->str : "other type");
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

char *rs_str(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(rs_port(), fmt, ap);
  va_end(ap);
  char *s = NULL;
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
    s = strdup(r->str);
  else
    cr_assert(r->type == REDIS_REPLY_NIL, "expected a string reply (%s)",
              r->type == REDIS_REPLY_ERROR ? r->str : "other type");
  freeReplyObject(r);
  return s;
}

void rs_wait_numsub(int port, const char *channel, long long want,
                    int64_t bound_ms) {
  int64_t deadline = rs_now_ms() + bound_ms;
  long long got = -1;
  for (;;) {
    redisReply *r = rt_node_cmd(port, "PUBSUB NUMSUB %s", channel);
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    got = r->element[1]->integer;
    freeReplyObject(r);
    if (got >= want)
      return;
    cr_assert(rs_now_ms() < deadline,
              "%s has %lld subscribers after %" PRId64 " ms, want %lld",
              channel, got, bound_ms, want);
    rs_sleep_ms(3);
  }
}

int64_t rs_wait_waiting(const char *channel) {
  rs_wait_numsub(rs_port(), channel, 1, RS_REPLY_BOUND_MS);
  rs_sleep_ms(RS_SETTLE_MS);
  return rs_now_ms();
}

int64_t rs_java_woke(rs_peer *p, const char *tag, int64_t t0, const char **answer) {
  const char *a = rs_ok(p, tag, RS_REPLY_BOUND_MS);
  int64_t took = rs_now_ms() - t0;
  if (answer != NULL)
    *answer = a;
  cr_assert_lt(took, RS_WAKE_BOUND_MS, "Java (thread %s) woke %" PRId64 " ms after the release", tag, took);
  return took;
}

int64_t rs_c_woke(rs_task *t, int64_t t0, int want) {
  int rc = rs_task_join(t, RS_REPLY_BOUND_MS);
  cr_assert_eq(rc, want, "C's waiter ended with %d (%s), want %d", rc,
               rc < 0 ? rlock_err_name(rc) : "", want);
  int64_t took = t->t_done - t0;
  cr_assert_lt(took, RS_WAKE_BOUND_MS, "C woke %" PRId64 " ms after the release", took);
  return took;
}

void rs_wait_int(int port, long long want, int64_t bound_ms, const char *fmt,
                 ...) {
  int64_t deadline = rs_now_ms() + bound_ms;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(port, fmt, ap);
    va_end(ap);
    cr_assert(r->type == REDIS_REPLY_INTEGER, "expected an integer reply");
    long long got = r->integer;
    freeReplyObject(r);
    if (got >= want)
      return;
    cr_assert(rs_now_ms() < deadline, "'%s' is %lld after %" PRId64
              " ms, want >= %lld", fmt, got, bound_ms, want);
    rs_sleep_ms(3);
  }
}

rlock_client *rs_client(const char *uri, int64_t watchdog_ms) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri ? uri : rs_uri();
  if (watchdog_ms > 0)
    o.watchdog_timeout_ms = watchdog_ms;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert(rc == 0, "rlock_client_new(%s): %s (%s)", o.uri,
            rlock_err_name(rc), rlock_last_error());
  return c;
}

/* ---- tasks ---- */

static void *task_main(void *arg) {
  rs_task *t = arg;
  t->rc = t->fn(t->arg);
  t->t_done = rs_now_ms();
  atomic_store(&t->done, 1);
  return NULL;
}

void rs_task_start(rs_task *t, int (*fn)(void *), void *arg) {
  t->fn = fn;
  t->arg = arg;
  atomic_store(&t->done, 0);
  t->rc = 0;
  t->t_done = 0;
  cr_assert(pthread_create(&t->th, NULL, task_main, t) == 0);
}

bool rs_task_done(rs_task *t) { return atomic_load(&t->done) != 0; }

int rs_task_join(rs_task *t, int64_t bound_ms) {
  int64_t deadline = rs_now_ms() + bound_ms;
  while (!rs_task_done(t)) {
    cr_assert(rs_now_ms() < deadline, "a C task did not end within %" PRId64
              " ms", bound_ms);
    rs_sleep_ms(2);
  }
  pthread_join(t->th, NULL);
  return t->rc;
}

/* ---- main: the shared server and JVM ---- */

static int skip_or_fail(const char *why) {
  const char *req = getenv("RLOCK_REDISSON_REQUIRED");
  bool required = req != NULL && strcmp(req, "1") == 0;
  printf("redisson suite (%s): %s: %s\n", rs_variant(),
         required ? "FAILED, RLOCK_REDISSON_REQUIRED=1" : "not run", why);
  fflush(stdout);
  return required ? 1 : 77;
}

/* Is there a peer to run? For "shared", the command file; for a Maven
 * version, fetch-maven (bounded), which needs mvn and the network the first
 * time. */
static bool peer_available(char *why, size_t n) {
  if (strcmp(rs_variant(), "shared") == 0) {
    char def[PATH_MAX];
    snprintf(def, sizeof def, "%s/../shared/redisson/peer", RS_REPO_ROOT);
    const char *cmd = env_or("RLOCK_REDISSON_PEER", def);
    if (access(cmd, X_OK) != 0) {
      snprintf(why, n, "no Redisson peer command at %s (set RLOCK_REDISSON_PEER)",
               cmd);
      return false;
    }
    return true;
  }
  char fetch[PATH_MAX];
  snprintf(fetch, sizeof fetch, "%s", RS_PEER_SCRIPT);
  char *slash = strrchr(fetch, '/');
  snprintf(slash + 1, sizeof fetch - (size_t)(slash + 1 - fetch), "fetch-maven");
  char cmd[PATH_MAX + 256];
  snprintf(cmd, sizeof cmd, "timeout %d '%s' '%s' >/dev/null 2>&1",
           FETCH_BOUND_MS / 1000, fetch, rs_variant());
  int rc = system(cmd);
  if (rc != 0) {
    snprintf(why, n, "tests/redisson/fetch-maven %s failed (exit %d): no mvn, "
             "or Maven Central not reachable", rs_variant(),
             WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    return false;
  }
  return true;
}

static bool wait_ping(int port, int64_t bound_ms) {
  int64_t deadline = rs_now_ms() + bound_ms;
  while (rs_now_ms() < deadline) {
    struct timeval tv = {.tv_sec = 1};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && !c->err) {
      redisReply *r = redisCommand(c, "PING");
      bool ok = r && r->type == REDIS_REPLY_STATUS;
      freeReplyObject(r);
      redisFree(c);
      if (ok)
        return true;
    } else if (c) {
      redisFree(c);
    }
    rs_sleep_ms(20);
  }
  return false;
}

/* What a SIGTERM/SIGINT handler removes (async-signal-safe calls only). */
static struct {
  pid_t jvm, redis;
  char log[PATH_MAX], redis_log[PATH_MAX + 16], dir[PATH_MAX];
} on_term;

static void term_cleanup(int sig) {
  if (on_term.jvm > 0)
    kill(on_term.jvm, SIGKILL);
  if (on_term.redis > 0)
    kill(on_term.redis, SIGKILL);
  unlink(on_term.log);
  unlink(on_term.redis_log);
  rmdir(on_term.dir);
  _exit(128 + sig);
}

int main(int argc, char **argv) {
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (!criterion_handle_args(argc, argv, true)) {
    criterion_finalize(tests);
    return 0;
  }
  char why[4096];
  if (!peer_available(why, sizeof why)) {
    criterion_finalize(tests);
    return skip_or_fail(why);
  }

  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/rlock-redisson-XXXXXX", env_or("TMPDIR", "/tmp"));
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  int port = 0;
  pid_t redis = -1;
  for (int attempt = 0; attempt < 5 && redis < 0; attempt++) {
    port = rt_topo_free_port();
    redis = rt_spawn_redis(port, dir, true, NULL, why, sizeof why);
    if (redis > 0 && !wait_ping(port, 5000)) {
      kill_reap(redis, STOP_BOUND_MS);
      redis = -1;
    }
  }
  if (redis < 0) {
    fprintf(stderr, "redisson suite: no redis-server: %s\n", why);
    rt_remove_dir(dir);
    return 1;
  }
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  setenv("RS_REDIS_PORT", port_s, 1);

  rs_jvm jvm = {.in_fd = -1, .out_fd = -1};
  if (!jvm_spawn(&jvm, port_s, RS_WATCHDOG_MS, why, sizeof why)) {
    fprintf(stderr, "redisson suite: %s\n", why);
    jvm_kill(&jvm);
    unlink(jvm.log);
    kill_reap(redis, STOP_BOUND_MS);
    rt_remove_dir(dir);
    return 1;
  }
  char peer_port[16];
  snprintf(peer_port, sizeof peer_port, "%d", jvm.port);
  setenv("RS_PEER_PORT", peer_port, 1);
  /* Redisson's version, asked once (bounded like every answer). */
  {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)jvm.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char line[256] = "";
    size_t have = 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        write(fd, "V: version\n", 11) == 11 &&
        read_line_fd(fd, line, sizeof line, &have, rs_now_ms() + RS_REPLY_BOUND_MS) == 1 &&
        strncmp(line, "V: OK ", 6) == 0) {
      char *sp = strchr(line + 6, ' ');
      if (sp)
        *sp = '\0';
      setenv("RS_REDISSON_VERSION", line + 6, 1);
    }
    if (fd >= 0)
      close(fd);
  }
  fprintf(stderr, "redisson suite: Redisson %s (%s), JVM pid %d, %s pid %d port %d\n",
          rs_version(), rs_variant(), (int)jvm.pid, env_or("REDIS_SERVER", "redis-server"),
          (int)redis, port);

  /* meson ends a test that runs too long with SIGTERM: the JVM and the
   * server die with this process anyway (PR_SET_PDEATHSIG), their files
   * go here */
  on_term.jvm = jvm.pid;
  on_term.redis = redis;
  snprintf(on_term.log, sizeof on_term.log, "%s", jvm.log);
  snprintf(on_term.redis_log, sizeof on_term.redis_log, "%s/redis.log", dir);
  snprintf(on_term.dir, sizeof on_term.dir, "%s", dir);
  signal(SIGTERM, term_cleanup);
  signal(SIGINT, term_cleanup);

  result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);

  jvm_kill(&jvm);
  unlink(jvm.log);
  kill_reap(redis, STOP_BOUND_MS);
  rt_remove_dir(dir);
  return result;
}

/* ---- MONITOR ---- */

struct rs_monitor {
  redisContext *ctx;
  char **lines;
  size_t n, cap;
  unsigned seq;
};

rs_monitor *rs_monitor_start(void) {
  rs_monitor *m = calloc(1, sizeof *m);
  cr_assert(m != NULL);
  m->ctx = rt_node_connect(rs_port(), 5000);
  redisReply *r = redisCommand(m->ctx, "MONITOR");
  cr_assert(r != NULL && r->type == REDIS_REPLY_STATUS, "MONITOR refused");
  freeReplyObject(r);
  return m;
}

static void monitor_add(rs_monitor *m, const char *s) {
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 256;
    m->lines = realloc(m->lines, m->cap * sizeof *m->lines);
    cr_assert(m->lines != NULL);
  }
  m->lines[m->n] = strdup(s);
  cr_assert(m->lines[m->n] != NULL);
  m->n++;
}

char **rs_monitor_take(rs_monitor *m, size_t *n) {
  char marker[96];
  snprintf(marker, sizeof marker, "rs-monitor-marker-%ld-%u", (long)getpid(), ++m->seq);
  redisReply *e = rt_node_cmd(rs_port(), "ECHO %s", marker);
  freeReplyObject(e);
  int64_t deadline = rs_now_ms() + RS_REPLY_BOUND_MS;
  for (;;) {
    void *reply = NULL;
    bool found = false;
    while (!found && redisReaderGetReply(m->ctx->reader, &reply) == REDIS_OK && reply) {
      redisReply *r = reply;
      if (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) {
        if (strstr(r->str, marker) != NULL)
          found = true;
        else if (strstr(r->str, "rs-monitor-marker-") == NULL)
          monitor_add(m, r->str);
      }
      freeReplyObject(r);
      reply = NULL;
    }
    if (found)
      break;
    int64_t left = deadline - rs_now_ms();
    cr_assert(left > 0, "MONITOR did not show the marker within %" PRId64 " ms", RS_REPLY_BOUND_MS);
    struct pollfd pfd = {.fd = m->ctx->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)left) > 0)
      cr_assert(redisBufferRead(m->ctx) == REDIS_OK, "MONITOR: %s", m->ctx->errstr);
  }
  char **out = m->lines;
  *n = m->n;
  m->lines = NULL;
  m->n = m->cap = 0;
  return out;
}

void rs_lines_free(char **lines, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(lines[i]);
  free(lines);
}

void rs_monitor_stop(rs_monitor *m) {
  if (m == NULL)
    return;
  rs_lines_free(m->lines, m->n);
  redisFree(m->ctx);
  free(m);
}

rlock *rs_lock_kind(rlock_client *c, const char *kind, const char *name) {
  rlock *l = NULL;
  int rc;
  if (strcmp(kind, "lock") == 0)
    rc = rlock_new(c, name, &l);
  else if (strcmp(kind, "fair") == 0)
    rc = rlock_new_fair(c, name, &l);
  else if (strcmp(kind, "read") == 0)
    rc = rlock_new_read(c, name, &l);
  else if (strcmp(kind, "write") == 0)
    rc = rlock_new_write(c, name, &l);
  else if (strcmp(kind, "fenced") == 0)
    rc = rlock_new_fenced(c, name, &l);
  else if (strcmp(kind, "spin") == 0)
    rc = rlock_new_spin(c, name, &l);
  else if (strcmp(kind, "nonreentrant") == 0)
    rc = rlock_new_nonreentrant(c, name, &l);
  else if (strcmp(kind, "nonreentrant_fair") == 0)
    rc = rlock_new_nonreentrant_fair(c, name, &l);
  else
    cr_assert_fail("unknown kind %s", kind);
  cr_assert(rc == 0, "rlock_new %s: %s", kind, rlock_err_name(rc));
  return l;
}
