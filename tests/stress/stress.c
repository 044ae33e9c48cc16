/*
 * Cross-thread stress of the async API, explicit owners, interrupts and
 * close (and of a MultiLock's async calls over two clients), as a plain
 * program (no Criterion: its sandbox cannot start under
 * ThreadSanitizer), so CI can run it under TSan as well as plain and ASan.
 *
 * It starts its own redis-server ($REDIS_SERVER, else `redis-server` on
 * PATH) on a free 127.0.0.1 port in a temporary directory, runs bounded
 * scenarios, prints `ok NAME` or `FAIL NAME: reason` for each, and ends with
 * the line `N passed, M failed`; the exit status is 0 only if M == 0.
 *
 * STRESS_SCALE (a positive number, default 1, or 0.5 under TSan) scales
 * the iteration counts; STRESS_ONLY=name[,name...] runs only those. A scenario
 * that overruns its time bound fails the whole run at once (a hang must not eat
 * the CI job).
 *
 * Everything shared between threads is an atomic or behind a mutex, except
 * where the point is that rlock itself orders the accesses (the counter of
 * `blocking_counter`, the payload of `ownership_transfer`): there TSan
 * checks that the library's own synchronisation makes them race-free.
 */
#include <rlock.h>

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRESS_TSAN 1
#endif
#endif

/* ---- time ---- */

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ms(void) { return now_us() / 1000; }

static void sleep_us(int64_t us) {
  if (us <= 0)
    return;
  struct timespec ts = {.tv_sec = (time_t)(us / 1000000),
                        .tv_nsec = (long)(us % 1000000) * 1000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void sleep_ms(int64_t ms) { sleep_us(ms * 1000); }

/* xorshift64*: one state per thread. */
static uint64_t rnd(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

/* ---- results ---- */

static double scale = 1.0;
static int n_passed, n_failed;
static pthread_mutex_t fail_mutex = PTHREAD_MUTEX_INITIALIZER;
static char fail_msg[512];
static atomic_int fail_count;

/* Records a failure of the current scenario (first message kept). Any
 * thread. */
static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...) {
  pthread_mutex_lock(&fail_mutex);
  if (fail_msg[0] == '\0') {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_msg, sizeof fail_msg, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&fail_mutex);
  atomic_fetch_add(&fail_count, 1);
}

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      failf(__VA_ARGS__);                                                      \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* Iterations scaled by STRESS_SCALE, at least 1. */
static int scaled(int base) {
  int n = (int)(base * scale);
  return n < 1 ? 1 : n;
}

/* ---- the server ---- */

static struct {
  pid_t pid;
  int port;
  char dir[PATH_MAX];
  char uri[64];
  redisContext *ctx; /* main thread only */
} srv;

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    char path[PATH_MAX + 256];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

static void server_stop(void) {
  if (srv.ctx != NULL) {
    redisFree(srv.ctx);
    srv.ctx = NULL;
  }
  if (srv.pid > 0) {
    kill(srv.pid, SIGTERM);
    int64_t deadline = now_ms() + 5000;
    while (waitpid(srv.pid, NULL, WNOHANG) == 0 && now_ms() < deadline)
      sleep_ms(5);
    if (kill(srv.pid, 0) == 0) {
      kill(srv.pid, SIGKILL);
      waitpid(srv.pid, NULL, 0);
    }
    srv.pid = 0;
  }
  if (srv.dir[0] != '\0') {
    remove_dir(srv.dir);
    srv.dir[0] = '\0';
  }
}

/* Is our child answering PING on the port? */
static bool server_ready(int port) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = 250000};
  redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
  bool ok = false;
  if (ctx != NULL && !ctx->err) {
    redisSetTimeout(ctx, tv);
    redisReply *r = redisCommand(ctx, "INFO server");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
      const char *p = strstr(r->str, "process_id:");
      ok = p != NULL && strtol(p + 11, NULL, 10) == (long)srv.pid;
    }
    if (r != NULL)
      freeReplyObject(r);
  }
  if (ctx != NULL)
    redisFree(ctx);
  return ok;
}

static bool server_start(char *why, size_t why_len) {
  const char *bin = getenv("REDIS_SERVER");
  if (bin == NULL || bin[0] == '\0')
    bin = "redis-server";
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0')
    tmp = "/tmp";
  snprintf(srv.dir, sizeof srv.dir, "%s/rlock-stress-XXXXXX", tmp);
  if (mkdtemp(srv.dir) == NULL) {
    snprintf(why, why_len, "mkdtemp in %s: %s", tmp, strerror(errno));
    srv.dir[0] = '\0';
    return false;
  }
  char log_path[PATH_MAX + 16];
  snprintf(log_path, sizeof log_path, "%s/redis.log", srv.dir);
  for (int attempt = 0; attempt < 5; attempt++) {
    int port = free_port();
    if (port <= 0) {
      snprintf(why, why_len, "no free port");
      return false;
    }
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    const char *argv[] = {bin,         "--save",    "",         "--appendonly",
                          "no",        "--bind",    "127.0.0.1", "--port",
                          port_s,      "--daemonize", "no",     "--dir",
                          srv.dir,     NULL};
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (log_fd < 0 || null_fd < 0) {
      snprintf(why, why_len, "open %.200s: %s", log_path, strerror(errno));
      if (log_fd >= 0)
        close(log_fd);
      if (null_fd >= 0)
        close(null_fd);
      return false;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      /* Child: the server dies with this program, whatever kills it. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(126);
      dup2(null_fd, STDIN_FILENO);
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      if (strchr(bin, '/') != NULL)
        execv(bin, (char *const *)argv);
      else
        execvp(bin, (char *const *)argv);
      _exit(127);
    }
    close(log_fd);
    close(null_fd);
    if (pid < 0) {
      snprintf(why, why_len, "fork: %s", strerror(errno));
      return false;
    }
    srv.pid = pid;
    int64_t deadline = now_ms() + 10000;
    bool exited = false;
    while (now_ms() < deadline) {
      if (waitpid(pid, NULL, WNOHANG) == pid) {
        exited = true;
        break;
      }
      if (server_ready(port)) {
        srv.port = port;
        snprintf(srv.uri, sizeof srv.uri, "redis://127.0.0.1:%d", port);
        return true;
      }
      sleep_ms(10);
    }
    if (!exited) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      srv.pid = 0;
      snprintf(why, why_len, "%.200s did not answer on port %d within 10 s",
               bin, port);
      return false;
    }
    srv.pid = 0; /* lost the port to someone else, or cannot run: retry */
    snprintf(why, why_len, "%.200s exited at start-up (see %.200s)", bin,
             log_path);
  }
  return false;
}

/* ---- plain Redis checks (main thread only) ---- */

static redisReply *rcmd(const char *fmt, ...) {
  if (srv.ctx == NULL) {
    struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
    srv.ctx = redisConnectWithTimeout("127.0.0.1", srv.port, tv);
    if (srv.ctx == NULL || srv.ctx->err) {
      if (srv.ctx != NULL)
        redisFree(srv.ctx);
      srv.ctx = NULL;
      return NULL;
    }
    redisSetTimeout(srv.ctx, tv);
  }
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(srv.ctx, fmt, ap);
  va_end(ap);
  if (r == NULL) {
    redisFree(srv.ctx);
    srv.ctx = NULL;
  }
  return r;
}

/* Integer reply, or LLONG_MIN on any failure. */
static long long rint_(const char *fmt, const char *arg) {
  redisReply *r = rcmd(fmt, arg);
  long long v = LLONG_MIN;
  if (r != NULL && r->type == REDIS_REPLY_INTEGER)
    v = r->integer;
  if (r != NULL)
    freeReplyObject(r);
  return v;
}

static long long pubsub_channels(void) {
  redisReply *r = rcmd("PUBSUB CHANNELS");
  long long n = -1;
  if (r != NULL && r->type == REDIS_REPLY_ARRAY)
    n = (long long)r->elements;
  if (r != NULL)
    freeReplyObject(r);
  return n;
}

static bool key_gone(void *key) {
  return rint_("EXISTS %s", (const char *)key) == 0;
}
static bool no_channels(void *arg) {
  (void)arg;
  return pubsub_channels() == 0;
}
static bool has_subscriber(void *channel) {
  redisReply *r = rcmd("PUBSUB NUMSUB %s", (const char *)channel);
  bool ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->integer >= 1;
  if (r != NULL)
    freeReplyObject(r);
  return ok;
}

static bool poll_until(bool (*cond)(void *), void *arg, int64_t bound_ms) {
  int64_t deadline = now_ms() + bound_ms;
  while (!cond(arg)) {
    if (now_ms() >= deadline)
      return cond(arg);
    sleep_ms(2);
  }
  return true;
}

/* The end state every scenario must leave: key gone, nothing subscribed. */
static void check_clean(const char *key) {
  if (!poll_until(key_gone, (void *)key, 5000)) {
    long long hlen = rint_("HLEN %s", key);
    failf("lock key %s still exists (%lld fields): a hold was left behind",
          key, hlen);
    return;
  }
  if (!poll_until(no_channels, NULL, 5000))
    failf("PUBSUB CHANNELS not empty (%lld)", pubsub_channels());
}

/* ---- rlock helpers ---- */

static atomic_int lost_count;
static void on_lost(const char *name, const char *owner, void *data) {
  (void)data;
  failf("on_lock_lost(%s, %s)", name, owner);
  atomic_fetch_add(&lost_count, 1);
}

static rlock_client *open_client(int64_t watchdog_ms) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = srv.uri;
  o.on_lock_lost = on_lost;
  if (watchdog_ms > 0)
    o.watchdog_timeout_ms = watchdog_ms;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc != 0) {
    failf("rlock_client_new: %s (%s)", rlock_err_name(rc),
          rlock_last_error());
    return NULL;
  }
  return c;
}

static rlock *get_lock(rlock_client *c, const char *name) {
  rlock *lock = NULL;
  int rc = rlock_new(c, name, &lock);
  if (rc != 0) {
    failf("rlock_new(%s): %s", name, rlock_err_name(rc));
    return NULL;
  }
  return lock;
}

static void make_key(char *buf, size_t n, const char *base) {
  static atomic_uint counter;
  snprintf(buf, n, "stress:%s:%ld:%u", base, (long)getpid(),
           atomic_fetch_add(&counter, 1));
}

static void make_channel(char *buf, size_t n, const char *key) {
  snprintf(buf, n, "redisson_lock__channel:{%s}", key);
}

typedef struct thread_set {
  pthread_t tid[32];
  int n;
} thread_set;

static void spawn(thread_set *ts, void *(*fn)(void *), void *arg) {
  if (ts->n >= 32 || pthread_create(&ts->tid[ts->n], NULL, fn, arg) != 0) {
    failf("cannot start a thread");
    return;
  }
  ts->n++;
}

static void join_all(thread_set *ts) {
  for (int i = 0; i < ts->n; i++)
    pthread_join(ts->tid[i], NULL);
  ts->n = 0;
}

/* Exactly-once bookkeeping for async callbacks: one record per call. */
typedef struct once {
  atomic_int calls;
  atomic_int status;
} once;

static atomic_int double_calls;

static void once_hit(once *o, int status) {
  atomic_store(&o->status, status);
  if (atomic_fetch_add(&o->calls, 1) != 0)
    atomic_fetch_add(&double_calls, 1);
}

/* ===================================================================== */
/* 1. blocking_counter: 8 threads x 500 lock/unlock, a plain int counter  */

typedef struct counter_ctx {
  rlock *lock;
  int rounds;
  int counter; /* not atomic: the lock is what orders the increments */
  atomic_int errors;
} counter_ctx;

static void *counter_thread(void *arg) {
  counter_ctx *cx = arg;
  for (int i = 0; i < cx->rounds; i++) {
    int rc = rlock_lock(cx->lock, -1);
    if (rc != 0) {
      failf("rlock_lock: %s", rlock_err_name(rc));
      atomic_fetch_add(&cx->errors, 1);
      return NULL;
    }
    int seen = cx->counter;
    if ((i & 7) == 0)
      sched_yield(); /* widen the window a lost exclusion would need */
    cx->counter = seen + 1;
    rc = rlock_unlock(cx->lock);
    if (rc != 0) {
      failf("rlock_unlock returned %d (%s)", rc, rlock_err_name(rc));
      atomic_fetch_add(&cx->errors, 1);
      return NULL;
    }
  }
  return NULL;
}

static void sc_blocking_counter(void) {
  char key[128];
  make_key(key, sizeof key, "counter");
  rlock_client *c = open_client(0);
  CHECK(c != NULL, "open");
  rlock *lock = get_lock(c, key);
  counter_ctx cx = {.lock = lock, .rounds = scaled(500), .counter = 0};
  atomic_init(&cx.errors, 0);
  thread_set ts = {.n = 0};
  int64_t t0 = now_ms();
  for (int i = 0; i < 8; i++)
    spawn(&ts, counter_thread, &cx);
  join_all(&ts);
  int64_t took = now_ms() - t0;
  printf("# blocking_counter: 8 x %d lock/unlock in %" PRId64 " ms\n",
         cx.rounds, took);
  rlock_free(lock);
  rlock_client_free(c);
  CHECK(atomic_load(&cx.errors) == 0, "lock/unlock errors");
  CHECK(cx.counter == 8 * cx.rounds, "counter %d, expected %d", cx.counter,
        8 * cx.rounds);
  check_clean(key);
}

/* ===================================================================== */
/* 2. async_cancel_race: async acquires cancelled from other threads and  */
/*    from callbacks while another client churns the lock                  */

#define RACE_SUBMITTERS 4
#define RACE_MAX 250

typedef struct race_ctx race_ctx;

typedef struct race_slot {
  race_ctx *ctx;
  uint64_t owner;
  once acq;
  once rel;
  _Atomic(rlock_req *) req;     /* kept until the end (even slots) */
  _Atomic int64_t submitted_us;
  atomic_bool ready;            /* req / submitted_us published */
  int64_t wait_ms;              /* set before the acquire is submitted */
} race_slot;

struct race_ctx {
  rlock *lock;
  rlock *churn_lock;
  int per_submitter;
  race_slot slots[RACE_SUBMITTERS][RACE_MAX];
  atomic_int acquired, timed_out, canceled, released;
  atomic_int unlock_sent;
  atomic_bool stop_churn;
};

static void race_rel_cb(int status, int64_t value, void *data) {
  (void)value;
  race_slot *s = data;
  once_hit(&s->rel, status);
  if (status != 0)
    failf("unlock after async acquire: %s", rlock_err_name(status));
  atomic_fetch_add(&s->ctx->released, 1);
}

static void race_acq_cb(int status, int64_t value, void *data) {
  (void)value;
  race_slot *s = data;
  race_ctx *rx = s->ctx;
  once_hit(&s->acq, status);
  if (status == 1) {
    atomic_fetch_add(&rx->acquired, 1);
    /* Cancel an even-numbered request (those are never freed early) from
     * the loop thread. */
    size_t row = (size_t)(s->owner % RACE_SUBMITTERS);
    size_t col = (size_t)((s->owner * 31) % (uint64_t)rx->per_submitter);
    race_slot *other = &rx->slots[row][col & ~(size_t)1];
    if (atomic_load(&other->ready)) {
      int rc = rlock_req_cancel(atomic_load(&other->req));
      if (rc != 0)
        failf("rlock_req_cancel from a callback: %s", rlock_err_name(rc));
    }
    int rc = rlock_unlock_async(rx->lock, s->owner, race_rel_cb, s, NULL);
    if (rc != 0)
      failf("rlock_unlock_async from a callback: %s", rlock_err_name(rc));
    else
      atomic_fetch_add(&rx->unlock_sent, 1);
  } else if (status == 0 ||
             (status == RLOCK_ETIMEDOUT && s->wait_ms > 0)) {
    /* A short wait (5 ms) may run out before the loaded server answers the
     * first try: that is RLOCK_ETIMEDOUT (wait_ms bounds the call; the try
     * is trimmed behind, which check_clean() verifies), else 0. */
    atomic_fetch_add(&rx->timed_out, 1);
  } else if (status == RLOCK_ECANCELED) {
    atomic_fetch_add(&rx->canceled, 1);
  } else {
    failf("async acquire: %s %" PRId64 " ms after it was submitted",
          rlock_err_name(status),
          (now_us() - atomic_load(&s->submitted_us)) / 1000);
  }
}

typedef struct race_arg {
  race_ctx *ctx;
  int index;
} race_arg;

static void *race_submitter(void *arg) {
  race_arg *a = arg;
  race_ctx *rx = a->ctx;
  uint64_t seed = 0x1234567u + (uint64_t)a->index * 7777;
  for (int i = 0; i < rx->per_submitter; i++) {
    race_slot *s = &rx->slots[a->index % RACE_SUBMITTERS][i];
    rlock_req *req = NULL;
    int64_t wait_ms = (i % 5 == 4) ? 5 : -1;
    s->wait_ms = wait_ms; /* read by the callback, after the queue's mutex */
    int rc = rlock_lock_async(rx->lock, s->owner, wait_ms,
                              (i % 3 == 0) ? 10000 : -1, race_acq_cb, s, &req);
    if (rc != 0) {
      failf("rlock_lock_async: %s", rlock_err_name(rc));
      return NULL;
    }
    atomic_store(&s->req, req);
    atomic_store(&s->submitted_us, now_us());
    atomic_store(&s->ready, true);
    if (rnd(&seed) % 4 == 0)
      sleep_us((int64_t)(rnd(&seed) % 1000));
  }
  return NULL;
}

/* Cancels one submitter's requests, each 0-3 ms after submission; frees
 * the odd ones right after cancelling (while the loop may still use
 * them). */
static void *race_canceller(void *arg) {
  race_arg *a = arg;
  race_ctx *rx = a->ctx;
  uint64_t seed = 0xabcdefu + (uint64_t)a->index * 31337;
  for (int i = 0; i < rx->per_submitter; i++) {
    race_slot *s = &rx->slots[a->index % RACE_SUBMITTERS][i];
    int64_t deadline = now_ms() + 30000;
    while (!atomic_load(&s->ready) && now_ms() < deadline)
      sleep_us(50);
    if (!atomic_load(&s->ready)) {
      failf("submitter stalled");
      return NULL;
    }
    rlock_req *req = atomic_load(&s->req);
    uint64_t pick = rnd(&seed) % 6;
    if (pick != 0) {
      sleep_us(atomic_load(&s->submitted_us) + (int64_t)(rnd(&seed) % 3000) -
               now_us());
      int rc = rlock_req_cancel(req);
      if (rc != 0)
        failf("rlock_req_cancel: %s", rlock_err_name(rc));
    }
    if (i % 2 == 1) {
      atomic_store(&s->req, NULL);
      rlock_req_free(req);
    }
  }
  return NULL;
}

static void *race_churn(void *arg) {
  race_ctx *rx = arg;
  uint64_t seed = 99;
  while (!atomic_load(&rx->stop_churn)) {
    int rc = rlock_try_lock(rx->churn_lock, 2000, -1);
    if (rc == 1) {
      sleep_us(200 + (int64_t)(rnd(&seed) % 2000));
      rc = rlock_unlock(rx->churn_lock);
      if (rc != 0)
        failf("churn unlock: %s", rlock_err_name(rc));
    } else if (rc < 0) {
      failf("churn try_lock: %s", rlock_err_name(rc));
    }
    sleep_us((int64_t)(rnd(&seed) % 1000));
  }
  return NULL;
}

static bool race_settled(void *arg) {
  race_ctx *rx = arg;
  int total = RACE_SUBMITTERS * rx->per_submitter;
  return atomic_load(&rx->acquired) + atomic_load(&rx->timed_out) +
                 atomic_load(&rx->canceled) >=
             total &&
         atomic_load(&rx->released) >= atomic_load(&rx->unlock_sent);
}

static void race_round(int round) {
  char key[128];
  make_key(key, sizeof key, "cancel-race");
  rlock_client *c = open_client(1500);
  rlock_client *churn_c = open_client(0);
  CHECK(c != NULL && churn_c != NULL, "open");
  static race_ctx rx;
  memset(&rx, 0, sizeof rx);
  rx.lock = get_lock(c, key);
  rx.churn_lock = get_lock(churn_c, key);
  rx.per_submitter = RACE_MAX;
  for (int t = 0; t < RACE_SUBMITTERS; t++)
    for (int i = 0; i < rx.per_submitter; i++) {
      rx.slots[t][i].ctx = &rx;
      rx.slots[t][i].owner = rlock_owner_new();
    }
  race_arg args[RACE_SUBMITTERS];
  thread_set work = {.n = 0}, churn = {.n = 0};
  spawn(&churn, race_churn, &rx);
  for (int t = 0; t < RACE_SUBMITTERS; t++) {
    args[t] = (race_arg){.ctx = &rx, .index = t + round * RACE_SUBMITTERS};
    spawn(&work, race_submitter, &args[t]);
    spawn(&work, race_canceller, &args[t]);
  }
  join_all(&work);
  bool settled = poll_until(race_settled, &rx, 60000);
  atomic_store(&rx.stop_churn, true);
  join_all(&churn);
  if (round == 0)
    printf("# async_cancel_race round 0: %d acquired, %d timed out, %d "
           "canceled\n",
           atomic_load(&rx.acquired), atomic_load(&rx.timed_out),
           atomic_load(&rx.canceled));
  if (!settled)
    failf("not every callback fired within 60 s");
  check_clean(key);
  rlock_free(rx.churn_lock);
  rlock_client_free(churn_c);
  rlock_client_free(c); /* joins the loop: counts below are final */
  for (int t = 0; t < RACE_SUBMITTERS; t++)
    for (int i = 0; i < rx.per_submitter; i++) {
      race_slot *s = &rx.slots[t][i];
      if (atomic_load(&s->acq.calls) != 1)
        failf("acquire callback fired %d times", atomic_load(&s->acq.calls));
      if (atomic_load(&s->rel.calls) !=
          (atomic_load(&s->acq.status) == 1 ? 1 : 0))
        failf("unlock callback fired %d times", atomic_load(&s->rel.calls));
      rlock_req_free(atomic_load(&s->req));
    }
  rlock_free(rx.lock);
}

static void sc_async_cancel_race(void) {
  int rounds = scaled(20);
  for (int r = 0; r < rounds && atomic_load(&fail_count) == 0; r++)
    race_round(r);
  printf("# async_cancel_race: %d rounds of %d async acquires\n", rounds,
         RACE_SUBMITTERS * RACE_MAX);
}

/* ===================================================================== */
/* 3. interrupt: blocked threads interrupted, also while the lock moves   */

#define INTR_THREADS 4

typedef struct intr_thread {
  rlock *lock;
  int rounds;
  bool expect_canceled; /* the lock is held by main all along */
  _Atomic uint64_t tid;
  atomic_int round; /* rounds started */
  atomic_int canceled, acquired;
  atomic_bool done;
} intr_thread;

static void *intr_worker(void *arg) {
  intr_thread *w = arg;
  atomic_store(&w->tid, rlock_thread_id());
  for (int i = 0; i < w->rounds; i++) {
    atomic_store(&w->round, i + 1);
    int rc = rlock_lock(w->lock, -1);
    if (rc == RLOCK_ECANCELED) {
      atomic_fetch_add(&w->canceled, 1);
    } else if (rc == 0 && !w->expect_canceled) {
      atomic_fetch_add(&w->acquired, 1);
      int u = rlock_unlock(w->lock);
      int64_t left = u == 0 ? rlock_hold_count(w->lock) : 0;
      if (u != 0)
        failf("unlock after an acquire among interrupts: %s",
              rlock_err_name(u));
      else if (left != 0)
        failf("after the unlock of a single acquire the lock is still held "
              "(%" PRId64 "): an interrupted acquire's try left a hold the "
              "client does not know of", left);
    } else {
      failf("rlock_lock among interrupts: %d (%s)", rc, rlock_err_name(rc));
      break;
    }
  }
  atomic_store(&w->done, true);
  return NULL;
}

static void sc_interrupt(void) {
  char key[128], chan[200];
  make_key(key, sizeof key, "interrupt");
  make_channel(chan, sizeof chan, key);
  rlock_client *c = open_client(1500);
  CHECK(c != NULL, "open");
  rlock *lock = get_lock(c, key);

  /* Phase 1: main holds the lock; each blocked rlock_lock is interrupted. */
  CHECK(rlock_lock(lock, -1) == 0, "main lock");
  static intr_thread w[INTR_THREADS];
  thread_set ts = {.n = 0};
  int rounds = scaled(250);
  for (int i = 0; i < INTR_THREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].lock = lock;
    w[i].rounds = rounds;
    w[i].expect_canceled = true;
    spawn(&ts, intr_worker, &w[i]);
  }
  int hits = 0;
  int64_t deadline = now_ms() + 60000;
  bool all_done = false;
  while (!all_done && now_ms() < deadline) {
    all_done = true;
    for (int i = 0; i < INTR_THREADS; i++) {
      if (atomic_load(&w[i].done))
        continue;
      all_done = false;
      uint64_t tid = atomic_load(&w[i].tid);
      if (tid == 0)
        continue;
      /* 0 when the thread is between calls: try again later. */
      int n = rlock_client_interrupt(c, tid);
      if (n < 0 || n > 1)
        failf("rlock_client_interrupt returned %d", n);
      hits += n > 0;
    }
    sleep_us(200);
  }
  join_all(&ts);
  int canceled = 0;
  for (int i = 0; i < INTR_THREADS; i++)
    canceled += atomic_load(&w[i].canceled);
  CHECK(all_done, "interrupted threads did not finish within 60 s");
  CHECK(canceled == INTR_THREADS * rounds, "%d of %d locks canceled", canceled,
        INTR_THREADS * rounds);
  CHECK(hits == canceled, "rlock_client_interrupt counted %d, %d calls canceled",
        hits, canceled);
  CHECK(rlock_hold_count(lock) == 1, "main's hold count changed");
  CHECK(rint_("HLEN %s", key) == 1, "fields besides main's");
  CHECK(rlock_unlock(lock) == 0, "main unlock");

  /* Phase 2: the threads contend for real while interrupts fly. */
  for (int i = 0; i < INTR_THREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].lock = lock;
    w[i].rounds = scaled(600);
    w[i].expect_canceled = false;
    spawn(&ts, intr_worker, &w[i]);
  }
  uint64_t seed = 4242;
  int interrupted = 0;
  deadline = now_ms() + 60000;
  all_done = false;
  while (!all_done && now_ms() < deadline) {
    all_done = true;
    for (int i = 0; i < INTR_THREADS; i++)
      all_done = all_done && atomic_load(&w[i].done);
    int pick = (int)(rnd(&seed) % INTR_THREADS);
    uint64_t tid = atomic_load(&w[pick].tid);
    if (tid != 0) {
      int n = rlock_client_interrupt(c, tid);
      if (n < 0)
        failf("rlock_client_interrupt: %s", rlock_err_name(n));
      else
        interrupted += n;
    }
    sleep_us((int64_t)(rnd(&seed) % 1500));
  }
  join_all(&ts);
  int acquired = 0;
  canceled = 0;
  for (int i = 0; i < INTR_THREADS; i++) {
    acquired += atomic_load(&w[i].acquired);
    canceled += atomic_load(&w[i].canceled);
  }
  printf("# interrupt: phase 1 %d interrupts; phase 2 %d acquired, %d "
         "interrupted\n",
         hits, acquired, canceled);
  CHECK(all_done, "contending threads did not finish within 60 s");
  CHECK(canceled == interrupted, "rlock_client_interrupt counted %d, %d canceled",
        interrupted, canceled);
  check_clean(key);
  rlock_free(lock);
  rlock_client_free(c);
}

/* ===================================================================== */
/* 4. ownership_transfer: lock with an owner on one thread, unlock on     */
/*    another (blocking and async acquires)                               */

#define XFER_PAIRS 2
#define XFER_QUEUE 8

typedef struct xfer_pair {
  rlock *lock;
  int rounds;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t queue[XFER_QUEUE];
  int head, len;
  bool producer_done;
  int *payload;    /* shared by all pairs, written under the lock */
  int payload_ok;  /* consumer's count of consistent payloads */
  atomic_int async_pending;
} xfer_pair;

static void xfer_push(xfer_pair *p, uint64_t owner) {
  pthread_mutex_lock(&p->mu);
  while (p->len == XFER_QUEUE)
    pthread_cond_wait(&p->cv, &p->mu);
  p->queue[(p->head + p->len) % XFER_QUEUE] = owner;
  p->len++;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

/* Async acquire: the callback (loop thread) hands the owner on. */
static void xfer_acq_cb(int status, int64_t value, void *data) {
  (void)value;
  xfer_pair *p = data;
  if (status != 1) {
    failf("async acquire for transfer: %s", rlock_err_name(status));
    xfer_push(p, 0);
  }
  /* The owner travels through the queue with the status folded in. */
  atomic_fetch_sub(&p->async_pending, 1);
}

typedef struct xfer_async {
  xfer_pair *p;
  uint64_t owner;
} xfer_async;

static void xfer_acq_push_cb(int status, int64_t value, void *data) {
  xfer_async *xa = data;
  xfer_pair *p = xa->p;
  uint64_t owner = xa->owner;
  free(xa);
  if (status == 1)
    (*p->payload)++; /* ordered by the lock, via the loop thread */
  xfer_acq_cb(status, value, p);
  if (status == 1)
    xfer_push(p, owner);
}

static void *xfer_producer(void *arg) {
  xfer_pair *p = arg;
  for (int i = 0; i < p->rounds; i++) {
    uint64_t owner = rlock_owner_new();
    if (i % 2 == 0) {
      int rc = rlock_lock_owner(p->lock, owner, -1);
      if (rc != 0) {
        failf("rlock_lock_owner: %s", rlock_err_name(rc));
        break;
      }
      (*p->payload)++;
      xfer_push(p, owner);
    } else {
      xfer_async *xa = malloc(sizeof *xa);
      if (xa == NULL)
        break;
      xa->p = p;
      xa->owner = owner;
      atomic_fetch_add(&p->async_pending, 1);
      int rc = rlock_lock_async(p->lock, owner, -1, -1, xfer_acq_push_cb, xa,
                                NULL);
      if (rc != 0) {
        atomic_fetch_sub(&p->async_pending, 1);
        free(xa);
        failf("rlock_lock_async: %s", rlock_err_name(rc));
        break;
      }
      /* Wait for that hand-over before the next round, so rounds of one
       * producer never overlap. */
      while (atomic_load(&p->async_pending) > 0)
        sleep_us(50);
    }
  }
  pthread_mutex_lock(&p->mu);
  p->producer_done = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void *xfer_consumer(void *arg) {
  xfer_pair *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (p->len == 0 && !p->producer_done)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->len == 0) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    uint64_t owner = p->queue[p->head];
    p->head = (p->head + 1) % XFER_QUEUE;
    p->len--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (owner == 0)
      continue;
    /* Still holding: the payload is ours to read and change. */
    (*p->payload)++;
    p->payload_ok++;
    int own = rlock_unlock(p->lock);
    if (own != RLOCK_ENOTOWNER)
      failf("unlock with the consumer's own id: %d (%s)", own,
            rlock_err_name(own));
    int held = rlock_is_held_owner(p->lock, owner);
    if (held != 1)
      failf("is_held_by_owner on the consumer: %d", held);
    int rc = rlock_unlock_owner(p->lock, owner);
    if (rc != 0)
      failf("unlock for the producer's owner: %d (%s)", rc,
            rlock_err_name(rc));
  }
}

static void sc_ownership_transfer(void) {
  char key[128];
  make_key(key, sizeof key, "transfer");
  rlock_client *c = open_client(0);
  CHECK(c != NULL, "open");
  rlock *lock = get_lock(c, key);
  static xfer_pair pairs[XFER_PAIRS];
  static int payload;
  payload = 0;
  thread_set ts = {.n = 0};
  int rounds = scaled(1000);
  for (int i = 0; i < XFER_PAIRS; i++) {
    xfer_pair *p = &pairs[i];
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->lock = lock;
    p->rounds = rounds;
    p->payload = &payload;
    spawn(&ts, xfer_producer, p);
    spawn(&ts, xfer_consumer, p);
  }
  join_all(&ts);
  int ok = 0;
  for (int i = 0; i < XFER_PAIRS; i++) {
    ok += pairs[i].payload_ok;
    pthread_mutex_destroy(&pairs[i].mu);
    pthread_cond_destroy(&pairs[i].cv);
  }
  rlock_free(lock);
  rlock_client_free(c);
  CHECK(ok == XFER_PAIRS * rounds, "%d of %d hand-overs", ok,
        XFER_PAIRS * rounds);
  CHECK(payload == 2 * XFER_PAIRS * rounds, "payload %d, expected %d",
        payload, 2 * XFER_PAIRS * rounds);
  check_clean(key);
}

/* ===================================================================== */
/* 5. close_while_busy: close with threads blocked, async ops pending,    */
/*    submitters, cancels and interrupts in flight                        */

#define BUSY_BLOCKED 3
#define BUSY_SUBMITTERS 2
#define BUSY_SLOTS 4096

typedef struct busy_ctx {
  rlock_client *c;
  rlock *lock;
  once recs[BUSY_SUBMITTERS][BUSY_SLOTS];
  _Atomic(rlock_req *) reqs[BUSY_SUBMITTERS][BUSY_SLOTS];
  atomic_int accepted[BUSY_SUBMITTERS];
  atomic_int blocked_rc[BUSY_BLOCKED];
  _Atomic uint64_t blocked_tid[BUSY_BLOCKED];
  atomic_bool stop;
} busy_ctx;

static void once_cb(int status, int64_t value, void *data) {
  (void)value;
  once_hit(data, status);
}

static busy_ctx *busy;

static void *busy_blocked(void *arg) {
  int i = (int)(intptr_t)arg;
  atomic_store(&busy->blocked_tid[i], rlock_thread_id());
  atomic_store(&busy->blocked_rc[i], rlock_lock(busy->lock, -1));
  return NULL;
}

static void *busy_submitter(void *arg) {
  int t = (int)(intptr_t)arg;
  uint64_t owner = rlock_owner_new();
  for (int i = 0; i < BUSY_SLOTS; i++) {
    once *rec = &busy->recs[t][i];
    rlock_req *req = NULL;
    int rc;
    switch (i % 4) {
    case 0:
      rc = rlock_lock_async(busy->lock, rlock_owner_new(), -1, -1, once_cb,
                            rec, &req);
      break;
    case 1:
      rc = rlock_is_locked_async(busy->lock, once_cb, rec, NULL);
      break;
    case 2:
      rc = rlock_lock_async(busy->lock, owner, 0, 1000, once_cb, rec, NULL);
      break;
    default:
      rc = rlock_remain_ttl_async(busy->lock, once_cb, rec, NULL);
      break;
    }
    if (rc == RLOCK_ECLOSED)
      return NULL;
    if (rc != 0) {
      failf("async call while closing: %s", rlock_err_name(rc));
      return NULL;
    }
    atomic_store(&busy->reqs[t][i], req);
    atomic_fetch_add(&busy->accepted[t], 1);
    if (i % 32 == 31)
      sleep_us(1000);
  }
  return NULL;
}

/* Cancels and interrupts whatever it finds until told to stop. */
static void *busy_canceller(void *arg) {
  (void)arg;
  uint64_t seed = 777;
  while (!atomic_load(&busy->stop)) {
    int t = (int)(rnd(&seed) % BUSY_SUBMITTERS);
    int n = atomic_load(&busy->accepted[t]);
    if (n > 0) {
      rlock_req *req = atomic_load(&busy->reqs[t][rnd(&seed) % (uint64_t)n]);
      if (req != NULL) {
        int rc = rlock_req_cancel(req);
        if (rc != 0 && rc != RLOCK_ECLOSED)
          failf("rlock_req_cancel while closing: %s", rlock_err_name(rc));
      }
    }
    uint64_t tid =
        atomic_load(&busy->blocked_tid[rnd(&seed) % BUSY_BLOCKED]);
    if (tid != 0 && rnd(&seed) % 16 == 0) {
      int rc = rlock_client_interrupt(busy->c, tid + 1000000); /* nobody: 0 */
      if (rc != 0 && rc != RLOCK_ECLOSED)
        failf("rlock_client_interrupt of nobody: %d", rc);
    }
    sleep_us(100);
  }
  return NULL;
}

typedef struct closer_arg {
  rlock_client *c;
  _Atomic int64_t took_ms;
} closer_arg;

static void *closer(void *arg) {
  closer_arg *ca = arg;
  int64_t t0 = now_ms();
  rlock_client_free(ca->c);
  atomic_store(&ca->took_ms, now_ms() - t0);
  return NULL;
}

static void close_busy_round(int round) {
  char key[128], chan[200];
  make_key(key, sizeof key, "close-busy");
  make_channel(chan, sizeof chan, key);
  rlock_client *holder_c = open_client(0);
  CHECK(holder_c != NULL, "open");
  rlock *held = get_lock(holder_c, key);
  CHECK(rlock_lock(held, -1) == 0, "holder lock");

  busy = calloc(1, sizeof *busy);
  CHECK(busy != NULL, "out of memory");
  busy->c = open_client(0);
  CHECK(busy->c != NULL, "open");
  busy->lock = get_lock(busy->c, key);
  for (int i = 0; i < BUSY_BLOCKED; i++)
    atomic_init(&busy->blocked_rc[i], 12345);
  thread_set blocked = {.n = 0}, work = {.n = 0}, cancel = {.n = 0};
  for (int i = 0; i < BUSY_BLOCKED; i++)
    spawn(&blocked, busy_blocked, (void *)(intptr_t)i);
  for (int t = 0; t < BUSY_SUBMITTERS; t++)
    spawn(&work, busy_submitter, (void *)(intptr_t)t);
  spawn(&cancel, busy_canceller, NULL);
  if (!poll_until(has_subscriber, chan, 10000))
    failf("waiters never subscribed");
  sleep_ms(5 + round % 5 * 15); /* let work pile up: 5-65 ms */

  closer_arg ca = {.c = busy->c};
  thread_set cl = {.n = 0};
  spawn(&cl, closer, &ca);
  join_all(&cl);
  join_all(&work);
  join_all(&blocked);
  atomic_store(&busy->stop, true);
  join_all(&cancel);

  int accepted = 0, fired = 0;
  for (int t = 0; t < BUSY_SUBMITTERS; t++) {
    int n = atomic_load(&busy->accepted[t]);
    accepted += n;
    for (int i = 0; i < BUSY_SLOTS; i++) {
      int calls = atomic_load(&busy->recs[t][i].calls);
      fired += calls;
      if (i < n && calls != 1)
        failf("accepted call %d/%d called back %d times", t, i, calls);
      if (i >= n && calls != 0)
        failf("refused call called back");
      rlock_req_free(atomic_load(&busy->reqs[t][i]));
    }
  }
  if (round == 0)
    printf("# close_while_busy round 0: close took %" PRId64 " ms, %d async "
           "calls accepted, %d callbacks\n",
           atomic_load(&ca.took_ms), accepted, fired);
  for (int i = 0; i < BUSY_BLOCKED; i++)
    if (atomic_load(&busy->blocked_rc[i]) != RLOCK_ECLOSED)
      failf("blocked rlock_lock returned %s at close",
            rlock_err_name(atomic_load(&busy->blocked_rc[i])));
  if (atomic_load(&ca.took_ms) > 5000)
    failf("close took %" PRId64 " ms", atomic_load(&ca.took_ms));
  rlock_free(busy->lock);
  free(busy);
  busy = NULL;
  CHECK(rlock_unlock(held) == 0, "holder unlock");
  rlock_free(held);
  rlock_client_free(holder_c);
  check_clean(key);
}

static void sc_close_while_busy(void) {
  int rounds = scaled(20);
  for (int r = 0; r < rounds && atomic_load(&fail_count) == 0; r++)
    close_busy_round(r);
}

/* ===================================================================== */
/* 6. open_close_cycles: open, use from several threads, close (from      */
/*    another thread or from a callback), 20 times                        */

#define CYCLE_RECS 8192

typedef struct cycle_ctx {
  rlock_client *c;
  rlock *lock;   /* for the blocking thread */
  rlock *alock;  /* for async work */
  once recs[CYCLE_RECS];
  atomic_int next_rec;
  atomic_int accepted;
  atomic_int closing_cb_fired;
  int closing_cb_expected;
} cycle_ctx;

static once *cycle_rec(cycle_ctx *cx) {
  int i = atomic_fetch_add(&cx->next_rec, 1);
  return i < CYCLE_RECS ? &cx->recs[i] : NULL;
}

static void cycle_unlock_cb(int status, int64_t value, void *data) {
  (void)value;
  once_hit(data, status);
}

typedef struct cycle_acq {
  cycle_ctx *cx;
  once *rec;
  uint64_t owner;
} cycle_acq;

/* Each cycle callback counts itself as its very last access to the cycle's
 * memory: after a close from a callback nobody joins the loop thread, and
 * the main thread reuses that memory once every count is in. */
static void cycle_acq_cb(int status, int64_t value, void *data) {
  (void)value;
  cycle_acq *ca = data;
  cycle_ctx *cx = ca->cx;
  once *rec = ca->rec;
  uint64_t owner = ca->owner;
  free(ca);
  if (status == 1) {
    once *r = cycle_rec(cx);
    if (r != NULL) {
      int rc = rlock_unlock_async(cx->alock, owner, cycle_unlock_cb, r, NULL);
      if (rc == 0)
        atomic_fetch_add(&cx->accepted, 1);
      else if (rc != RLOCK_ECLOSED)
        failf("unlock_async in a cycle: %s", rlock_err_name(rc));
    }
  } else if (status != 0 && status != RLOCK_ECLOSED &&
             status != RLOCK_ECANCELED &&
             /* its 50 ms wait ran out before the first answer (a slow
              * sanitizer build): wait_ms bounds the call */
             status != RLOCK_ETIMEDOUT) {
    failf("async acquire in a cycle: %s", rlock_err_name(status));
  }
  once_hit(rec, status);
}

static void *cycle_blocking(void *arg) {
  cycle_ctx *cx = arg;
  for (;;) {
    int rc = rlock_lock(cx->lock, -1);
    if (rc == RLOCK_ECLOSED)
      return NULL;
    if (rc != 0) {
      failf("rlock_lock in a cycle: %s", rlock_err_name(rc));
      return NULL;
    }
    rc = rlock_unlock(cx->lock);
    if (rc == RLOCK_ECLOSED)
      return NULL;
    if (rc != 0) {
      failf("rlock_unlock in a cycle: %s", rlock_err_name(rc));
      return NULL;
    }
  }
}

/* Calls accepted but not yet called back. */
static int cycle_in_flight(cycle_ctx *cx) {
  int n = atomic_load(&cx->next_rec), fired = 0;
  if (n > CYCLE_RECS)
    n = CYCLE_RECS;
  for (int i = 0; i < n; i++)
    fired += atomic_load(&cx->recs[i].calls) > 0;
  return atomic_load(&cx->accepted) - fired;
}

static void *cycle_async(void *arg) {
  cycle_ctx *cx = arg;
  for (int i = 0;; i++) {
    /* Keep the loop busy, not buried: a backlog of thousands would only
     * test the command timeout. */
    if (i % 16 == 0)
      while (cycle_in_flight(cx) > 200)
        sleep_us(200);
    once *r = cycle_rec(cx);
    if (r == NULL)
      return NULL;
    int rc;
    if (i % 2 == 0) {
      cycle_acq *ca = malloc(sizeof *ca);
      if (ca == NULL)
        return NULL;
      ca->cx = cx;
      ca->rec = r;
      ca->owner = rlock_owner_new();
      rlock_req *req = NULL;
      rc = rlock_lock_async(cx->alock, ca->owner, 50, -1, cycle_acq_cb, ca,
                            &req);
      if (rc != 0) {
        free(ca);
      } else {
        if (i % 6 == 0) {
          int crc = rlock_req_cancel(req);
          if (crc != 0 && crc != RLOCK_ECLOSED)
            failf("cancel in a cycle: %s", rlock_err_name(crc));
        }
        rlock_req_free(req);
      }
    } else {
      rc = rlock_hold_count_async(cx->alock, rlock_thread_id(), once_cb, r,
                                  NULL);
    }
    if (rc == RLOCK_ECLOSED)
      return NULL;
    if (rc != 0) {
      failf("async call in a cycle: %s", rlock_err_name(rc));
      return NULL;
    }
    atomic_fetch_add(&cx->accepted, 1);
  }
}

static void close_in_callback(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  cycle_ctx *cx = data;
  rlock_client_free(cx->c);
  atomic_fetch_add(&cx->closing_cb_fired, 1);
}

/* Every accepted call (and the closing callback, when there is one) has
 * called back. */
static bool cycle_all_called(void *arg) {
  cycle_ctx *cx = arg;
  int calls = 0, n = atomic_load(&cx->next_rec);
  if (n > CYCLE_RECS)
    n = CYCLE_RECS;
  for (int i = 0; i < n; i++)
    calls += atomic_load(&cx->recs[i].calls) > 0;
  return calls >= atomic_load(&cx->accepted) &&
         atomic_load(&cx->closing_cb_fired) >= cx->closing_cb_expected;
}

static void sc_open_close_cycles(void) {
  char keys[20][128];
  cycle_ctx *cx = malloc(sizeof *cx);
  CHECK(cx != NULL, "out of memory");
  int cycle;
  for (cycle = 0; cycle < 20; cycle++) {
    /* A fresh key each time: a lock held at a close stays until its lease
     * runs out, as in Redisson. */
    char *key = keys[cycle];
    make_key(key, sizeof keys[cycle], "cycles");
    memset(cx, 0, sizeof *cx);
    cx->c = open_client(0);
    CHECK(cx->c != NULL, "open in cycle %d", cycle);
    cx->lock = get_lock(cx->c, key);
    cx->alock = get_lock(cx->c, key);
    thread_set ts = {.n = 0};
    spawn(&ts, cycle_blocking, cx);
    spawn(&ts, cycle_async, cx);
    spawn(&ts, cycle_async, cx);
    sleep_ms(10 + cycle % 4 * 10);
    bool from_callback = cycle % 2 == 1;
    if (from_callback) {
      /* The loop thread closes its own client; nobody joins it. */
      cx->closing_cb_expected = 1;
      int rc = rlock_is_locked_async(cx->alock, close_in_callback, cx, NULL);
      if (rc != 0) {
        failf("is_locked_async to close from: %s", rlock_err_name(rc));
        rlock_client_free(cx->c);
      }
      join_all(&ts);
      if (!poll_until(cycle_all_called, cx, 10000))
        failf("cycle %d: callbacks missing after a close from a callback",
              cycle);
    } else {
      rlock_client_free(cx->c);
      join_all(&ts);
      if (!cycle_all_called(cx))
        failf("cycle %d: callbacks missing after close", cycle);
    }
    int accepted = atomic_load(&cx->accepted), fired = 0;
    int n = atomic_load(&cx->next_rec);
    for (int i = 0; i < (n < CYCLE_RECS ? n : CYCLE_RECS); i++)
      fired += atomic_load(&cx->recs[i].calls);
    if (atomic_load(&cx->closing_cb_fired) != cx->closing_cb_expected)
      failf("cycle %d: the closing callback fired %d times", cycle,
            atomic_load(&cx->closing_cb_fired));
    if (fired != accepted)
      failf("cycle %d: %d async calls accepted, %d callbacks", cycle,
            accepted, fired);
    rlock_free(cx->lock);
    rlock_free(cx->alock);
    if (atomic_load(&fail_count) != 0)
      break;
  }
  free(cx);
  /* Locks held at a close are not deleted (as in Redisson): they expire
   * with the watchdog lease, so only the subscriptions are checked. */
  if (!poll_until(no_channels, NULL, 5000))
    failf("PUBSUB CHANNELS not empty (%lld)", pubsub_channels());
  for (int i = 0; i < cycle && i < 20; i++)
    rint_("DEL %s", keys[i]);
}

/* ===================================================================== */
/* runner, with a watchdog against hangs                                  */

/* ===================================================================== */
/* 7. multilock_race: a MultiLock over two clients' locks, its async      */
/*    acquires cancelled at random from other threads, its async unlocks  */

#define ML_THREADS 4

typedef struct ml_ctx {
  rlock *ml;
  int rounds;
  atomic_int acquired, canceled;
} ml_ctx;

static void ml_once_cb(int status, int64_t value, void *data) {
  (void)value;
  once_hit(data, status);
}

static bool ml_called(void *arg) {
  return atomic_load(&((once *)arg)->calls) > 0;
}

static void *ml_worker(void *arg) {
  ml_ctx *cx = arg;
  uint64_t owner = rlock_owner_new(), seed = owner * 2654435761u + 1;
  for (int i = 0; i < cx->rounds && atomic_load(&fail_count) == 0; i++) {
    once acq = {0}, rel = {0};
    rlock_req *req = NULL;
    int rc = rlock_lock_async(cx->ml, owner, 300, -1, ml_once_cb, &acq, &req);
    if (rc != 0) {
      failf("rlock_lock_async(MultiLock): %s", rlock_err_name(rc));
      break;
    }
    if (rnd(&seed) % 2 == 0) {
      sleep_us((int64_t)(rnd(&seed) % 3000));
      if (rlock_req_cancel(req) != 0)
        failf("rlock_req_cancel(MultiLock): %s", rlock_last_error());
    }
    if (!poll_until(ml_called, &acq, 10000)) {
      failf("a MultiLock acquire never called back");
      rlock_req_free(req);
      break;
    }
    rlock_req_free(req);
    int st = atomic_load(&acq.status);
    if (st == 1) {
      atomic_fetch_add(&cx->acquired, 1);
      if (rlock_unlock_async(cx->ml, owner, ml_once_cb, &rel, NULL) != 0 ||
          !poll_until(ml_called, &rel, 10000))
        failf("the MultiLock's async unlock did not call back");
      else if (atomic_load(&rel.status) != 0)
        failf("MultiLock unlock: %s", rlock_err_name(atomic_load(&rel.status)));
    } else if (st == RLOCK_ECANCELED) {
      atomic_fetch_add(&cx->canceled, 1);
    } else if (st != 0) {
      failf("MultiLock acquire: %s", rlock_err_name(st));
    }
  }
  return NULL;
}

static void sc_multilock_race(void) {
  rlock_client *c1 = open_client(0), *c2 = open_client(0);
  char k[3][96];
  rlock *m[3] = {NULL, NULL, NULL}, *ml = NULL;
  for (int i = 0; i < 3; i++) {
    make_key(k[i], sizeof k[i], "ml");
    m[i] = c1 != NULL && c2 != NULL ? get_lock(i == 1 ? c2 : c1, k[i]) : NULL;
  }
  if (m[0] != NULL && m[1] != NULL && m[2] != NULL &&
      rlock_new_multilock(m, 3, &ml) != 0)
    failf("rlock_new_multilock: %s", rlock_last_error());
  for (int i = 0; i < 3; i++)
    rlock_free(m[i]); /* the MultiLock keeps them */
  if (ml != NULL) {
    ml_ctx cx = {.ml = ml, .rounds = scaled(40)};
    thread_set ts = {.n = 0};
    for (int i = 0; i < ML_THREADS; i++)
      spawn(&ts, ml_worker, &cx);
    join_all(&ts);
    printf("# multilock_race: %d acquired, %d canceled\n",
           atomic_load(&cx.acquired), atomic_load(&cx.canceled));
    if (atomic_load(&cx.acquired) == 0)
      failf("no MultiLock acquire succeeded");
    rlock_free(ml);
  }
  for (int i = 0; i < 3; i++)
    check_clean(k[i]);
  rlock_client_free(c1);
  rlock_client_free(c2);
}

static pthread_mutex_t run_mutex = PTHREAD_MUTEX_INITIALIZER;
static const char *run_name;
static int64_t run_deadline; /* 0: nothing running */

static void *hang_watch(void *arg) {
  (void)arg;
  for (;;) {
    sleep_ms(200);
    pthread_mutex_lock(&run_mutex);
    bool hung = run_deadline != 0 && now_ms() > run_deadline;
    const char *name = run_name;
    pthread_mutex_unlock(&run_mutex);
    if (hung) {
      printf("FAIL %s: did not finish within its time bound (hang?)\n", name);
      printf("%d passed, %d failed\n", n_passed, n_failed + 1);
      fflush(stdout);
      if (srv.pid > 0)
        kill(srv.pid, SIGKILL);
      _exit(1);
    }
  }
  return NULL;
}

static const char *only; /* STRESS_ONLY: run just these (comma-separated) */

static bool selected(const char *name) {
  if (only == NULL || only[0] == '\0')
    return true;
  size_t len = strlen(name);
  for (const char *p = only; (p = strstr(p, name)) != NULL; p += len)
    if ((p == only || p[-1] == ',') && (p[len] == '\0' || p[len] == ','))
      return true;
  return false;
}

static void run(const char *name, void (*fn)(void), int64_t bound_ms) {
  if (!selected(name))
    return;
  fail_msg[0] = '\0';
  atomic_store(&fail_count, 0);
  atomic_store(&double_calls, 0);
  atomic_store(&lost_count, 0);
  pthread_mutex_lock(&run_mutex);
  run_name = name;
  run_deadline = now_ms() + bound_ms;
  pthread_mutex_unlock(&run_mutex);
  int64_t t0 = now_ms();
  fn();
  pthread_mutex_lock(&run_mutex);
  run_deadline = 0;
  pthread_mutex_unlock(&run_mutex);
  if (atomic_load(&double_calls) != 0)
    failf("%d callbacks fired more than once", atomic_load(&double_calls));
  if (atomic_load(&fail_count) == 0) {
    printf("ok %s (%" PRId64 " ms)\n", name, now_ms() - t0);
    n_passed++;
  } else {
    pthread_mutex_lock(&fail_mutex);
    printf("FAIL %s: %s (%d failures)\n", name, fail_msg,
           atomic_load(&fail_count));
    pthread_mutex_unlock(&fail_mutex);
    n_failed++;
  }
  fflush(stdout);
}

int main(void) {
#ifdef STRESS_TSAN
  scale = 0.5; /* TSan makes each step 5-10x slower */
#endif
  const char *s = getenv("STRESS_SCALE");
  if (s != NULL && s[0] != '\0') {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v <= 0) {
      fprintf(stderr, "stress: STRESS_SCALE must be a positive number\n");
      return 2;
    }
    scale = v;
  }
  only = getenv("STRESS_ONLY");
  setvbuf(stdout, NULL, _IOLBF, 0);
  char why[512] = "";
  if (!server_start(why, sizeof why)) {
    printf("FAIL server: %s\n", why);
    server_stop();
    printf("0 passed, 1 failed\n");
    return 1;
  }
  printf("# redis-server on port %d, scale %.2f\n", srv.port, scale);
  pthread_t watch;
  if (pthread_create(&watch, NULL, hang_watch, NULL) != 0) {
    printf("FAIL runner: cannot start the hang watch\n");
    server_stop();
    printf("0 passed, 1 failed\n");
    return 1;
  }
  pthread_detach(watch);

  int64_t t0 = now_ms();
  run("blocking_counter", sc_blocking_counter, 120000);
  run("async_cancel_race", sc_async_cancel_race, 120000);
  run("interrupt", sc_interrupt, 150000);
  run("ownership_transfer", sc_ownership_transfer, 120000);
  run("close_while_busy", sc_close_while_busy, 60000);
  run("open_close_cycles", sc_open_close_cycles, 120000);
  run("multilock_race", sc_multilock_race, 120000);
  printf("# total %" PRId64 " ms\n", now_ms() - t0);

  pthread_mutex_lock(&run_mutex);
  run_deadline = 0;
  pthread_mutex_unlock(&run_mutex);
  server_stop();
  printf("%d passed, %d failed\n", n_passed, n_failed);
  return n_failed == 0 ? 0 : 1;
}
