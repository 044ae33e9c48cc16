/* The fair lock (rlock_new_fair; Redisson getFairLock): RLock's hash plus
 * the waiting queue redisson_lock_queue:{name} (list) and the deadlines
 * redisson_lock_timeout:{name} (zset, client wall-clock ms); a release
 * tells only the first waiter, on its own channel
 * redisson_lock__channel:{name}:<owner> (docs/wire-protocol.md, "The fair
 * lock"). Java-shaped state is written by hand where a Java client would
 * have made it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "prim.h" /* the fair lock's descriptor: its trim script */

TestSuite(fair, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

/* ---- helpers ---- */

static rlock *fair(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_fair(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_fair: %s", rlock_err_name(rc));
  cr_assert_str_eq(rlock_kind(l), "fair");
  return l;
}

/* The wall clock in ms, as the fair lock's deadlines use it. */
static long long wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct names {
  char queue[160], timeout[160], chan[160];
} names;

/* The derived names, with the brace rule of docs/wire-protocol.md. */
static void fair_names(names *n, const char *key) {
  const char *fmt = strchr(key, '{') ? "%s%s" : "%s{%s}";
  snprintf(n->queue, sizeof n->queue, fmt, "redisson_lock_queue:", key);
  snprintf(n->timeout, sizeof n->timeout, fmt, "redisson_lock_timeout:", key);
  snprintf(n->chan, sizeof n->chan, fmt, "redisson_lock__channel:", key);
}

/* ZSCORE as a number; -1 when the member has no score. */
static long long zscore(const char *z, const char *member) {
  char *v = rt_str("ZSCORE %s %s", z, member);
  long long s = v != NULL ? atoll(v) : -1;
  free(v);
  return s;
}

/* LINDEX as a malloc'd string or NULL. */
static char *lindex(const char *q, int i) {
  return rt_str("LINDEX %s %d", q, i);
}

/* Calls of a command since CONFIG RESETSTAT. */
static long long calls(const char *name) {
  char *info = rt_str("INFO commandstats");
  char needle[64];
  snprintf(needle, sizeof needle, "cmdstat_%s:calls=", name);
  const char *p = strstr(info, needle);
  long long n = p != NULL ? atoll(p + strlen(needle)) : 0;
  free(info);
  return n;
}

typedef struct count_cond {
  const char *cmd; /* "LLEN" or "ZCARD" */
  const char *key;
  long long want;
} count_cond;

static bool count_is(void *arg) {
  count_cond *c = arg;
  return rt_int("%s %s", c->cmd, c->key) == c->want;
}

static void wait_len(const char *q, long long want, const char *what) {
  count_cond c = {"LLEN", q, want};
  rt_wait_until_what(count_is, &c, 5000, what);
}

/* The queue and the deadline set are both gone (no entry left behind). */
static void wait_queue_empty(const names *n, const char *what) {
  count_cond q = {"EXISTS", n->queue, 0}, z = {"EXISTS", n->timeout, 0};
  rt_wait_until_what(count_is, &q, 3000, what);
  rt_wait_until_what(count_is, &z, 3000, what);
}

static bool subscribed(void *arg) { return rt_numsub(arg) == 1; }

/* An async acquire and its outcome. */
#define PENDING 1000

typedef struct waiter {
  atomic_int status;
  atomic_llong t_done;
  rlock_req *req;
} waiter;

static void waiter_cb(int status, int64_t value, void *data) {
  (void)value;
  waiter *w = data;
  atomic_store(&w->t_done, rt_now_ms());
  atomic_store(&w->status, status);
}

static void waiter_start(waiter *w, rlock *l, uint64_t owner, int64_t wait_ms,
                         int64_t lease_ms) {
  atomic_init(&w->status, PENDING);
  atomic_init(&w->t_done, 0);
  w->req = NULL;
  int rc = rlock_lock_async(l, owner, wait_ms, lease_ms, waiter_cb, w, &w->req);
  cr_assert_eq(rc, 0, "rlock_lock_async: %s", rlock_err_name(rc));
}

static bool waiter_done(void *arg) {
  return atomic_load(&((waiter *)arg)->status) != PENDING;
}

static int waiter_wait(waiter *w, int64_t bound_ms, const char *what) {
  rt_wait_until_what(waiter_done, w, bound_ms, what);
  rlock_req_free(w->req);
  w->req = NULL;
  return atomic_load(&w->status);
}

/* A PSUBSCRIBE on every per-waiter channel of a lock, to see which
 * channels got a message. */
typedef struct sniffer {
  redisContext *ctx;
  char pattern[200], sentinel[200];
  int n;
  char chan[16][200];
  char payload[16][8];
} sniffer;

static void sniff_start(sniffer *s, const names *n) {
  memset(s, 0, sizeof *s);
  snprintf(s->pattern, sizeof s->pattern, "%s:*", n->chan);
  snprintf(s->sentinel, sizeof s->sentinel, "%s:~sentinel", n->chan);
  s->ctx = rt_redis_new(5000);
  redisReply *r = redisCommand(s->ctx, "PSUBSCRIBE %s", s->pattern);
  cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY, "PSUBSCRIBE");
  freeReplyObject(r);
}

/* Collects every message published so far (up to a sentinel published
 * now: messages arrive in publish order). */
static void sniff_collect(sniffer *s) {
  long long got = rt_int("PUBLISH %s x", s->sentinel);
  cr_assert_eq(got, 1, "the sniffer is subscribed");
  for (;;) {
    redisReply *r = NULL;
    cr_assert_eq(redisGetReply(s->ctx, (void **)&r), REDIS_OK,
                 "sniffer read");
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 4);
    const char *ch = r->element[2]->str;
    bool end = strcmp(ch, s->sentinel) == 0;
    if (!end && s->n < 16) {
      snprintf(s->chan[s->n], sizeof s->chan[0], "%s", ch);
      snprintf(s->payload[s->n], sizeof s->payload[0], "%s",
               r->element[3]->str);
      s->n++;
    }
    freeReplyObject(r);
    if (end)
      return;
  }
}

static void sniff_stop(sniffer *s) { redisFree(s->ctx); }

/* ---- FIFO across two processes ---- */

#define FIFO_N 5
#define FIFO_WAIT_MS 20000

/* Shared between the test process and its child (MAP_SHARED). */
typedef struct fifo_shared {
  atomic_int go[FIFO_N];  /* the parent tells the child to start waiter k */
  atomic_int seq;         /* acquisitions so far */
  atomic_int order[FIFO_N];
  atomic_int done;        /* callbacks fired */
  atomic_int failed;      /* a callback saw something other than 1 */
  atomic_int child_ready;
  atomic_int child_exit;  /* the child's own verdict, set before _exit:
                             under valgrind the exit status also counts
                             Criterion's allocations in the forked worker */
  char child_id[64];
} fifo_shared;

typedef struct fifo_waiter {
  fifo_shared *sh;
  rlock *lock;
  int id;
  uint64_t owner;
} fifo_waiter;

/* Acquired: note the turn, release at once (the next one's turn). */
static void fifo_cb(int status, int64_t value, void *data) {
  (void)value;
  fifo_waiter *w = data;
  if (status == 1) {
    int pos = atomic_fetch_add(&w->sh->seq, 1);
    if (pos < FIFO_N)
      atomic_store(&w->sh->order[pos], w->id);
    if (rlock_unlock_async(w->lock, w->owner, NULL, NULL, NULL) != 0)
      atomic_fetch_add(&w->sh->failed, 1);
  } else {
    atomic_fetch_add(&w->sh->failed, 1);
  }
  atomic_fetch_add(&w->sh->done, 1);
}

static bool until_flag(atomic_int *flag, int64_t bound_ms) {
  int64_t end = rt_now_ms() + bound_ms;
  while (atomic_load(flag) == 0) {
    if (rt_now_ms() > end)
      return false;
    rt_sleep_ms(2);
  }
  return true;
}

/* The child: its own client, waiters 1 and 3 when told. Never returns. */
static void fifo_child(fifo_shared *sh, const char *key) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  rlock_client *c = NULL;
  rlock *l = NULL;
  if (rlock_client_new(&c, &o) != 0 || rlock_new_fair(c, key, &l) != 0)
    _exit(2);
  snprintf(sh->child_id, sizeof sh->child_id, "%s", rlock_client_id(c));
  atomic_store(&sh->child_ready, 1);
  static fifo_waiter ws[FIFO_N];
  for (int k = 1; k < FIFO_N; k += 2) {
    if (!until_flag(&sh->go[k], 20000))
      _exit(3);
    ws[k] = (fifo_waiter){sh, l, k, 1000 + (uint64_t)k};
    if (rlock_lock_async(l, ws[k].owner, FIFO_WAIT_MS, 30000, fifo_cb,
                         &ws[k], NULL) != 0)
      _exit(4);
  }
  int64_t end = rt_now_ms() + 30000;
  while (atomic_load(&sh->done) < FIFO_N && rt_now_ms() < end)
    rt_sleep_ms(5);
  rlock_free(l);
  rlock_client_free(c);
  atomic_store(&sh->child_exit, atomic_load(&sh->done) == FIFO_N ? 100 : 5);
  _exit(atomic_load(&sh->child_exit) == 100 ? 0 : 5);
}

/* Five waiters, alternately of this process and of a child process with its
 * own client, queue behind a holder; on its release they get the lock one
 * by one in the order they queued. Deadlines are the one ahead's plus the
 * waiter's own wait, and each waiter listens on its own channel only. */
Test(fair, fifo_order_across_two_processes) {
  char key[64];
  rt_key(key, sizeof key, "ff");
  names n;
  fair_names(&n, key);
  fifo_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(sh != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(sh, 0, sizeof *sh);
  /* Fork before this process has a client: the child inherits no loop
   * thread's half-done state. */
  pid_t child = fork();
  cr_assert_geq(child, 0, "fork: %s", strerror(errno));
  if (child == 0)
    fifo_child(sh, key);
  if (!until_flag(&sh->child_ready, 10000)) {
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    cr_assert_fail("the child did not open its client");
  }
  rlock_client *a = rt_client();
  rlock *l = fair(a, key);
  cr_assert_eq(rlock_lock_owner(l, 999, 30000), 0);
  fifo_waiter ws[FIFO_N];
  char owners[FIFO_N][96];
  for (int k = 0; k < FIFO_N; k++) {
    uint64_t owner = 1000 + (uint64_t)k;
    if (k % 2 == 0) {
      ws[k] = (fifo_waiter){sh, l, k, owner};
      rt_owner(owners[k], sizeof owners[k], a, owner);
      cr_assert_eq(rlock_lock_async(l, owner, FIFO_WAIT_MS, 30000, fifo_cb,
                                    &ws[k], NULL),
                   0);
    } else {
      snprintf(owners[k], sizeof owners[k], "%s:%llu", sh->child_id,
               (unsigned long long)owner);
      atomic_store(&sh->go[k], 1);
    }
    wait_len(n.queue, k + 1, "the waiter queued");
  }
  /* Java's layout: the queue in arrival order; each deadline is the one
   * ahead's plus this waiter's wait; one channel per waiter. */
  for (int k = 0; k < FIFO_N; k++) {
    char *v = lindex(n.queue, k);
    cr_assert(v != NULL && strcmp(v, owners[k]) == 0, "queue[%d] = %s, "
              "want %s", k, v ? v : "nil", owners[k]);
    free(v);
    if (k > 0)
      cr_assert_eq(zscore(n.timeout, owners[k]),
                   zscore(n.timeout, owners[k - 1]) + FIFO_WAIT_MS,
                   "deadline of waiter %d", k);
    char ch[700];
    snprintf(ch, sizeof ch, "%s:%s", n.chan, owners[k]);
    rt_wait_until_what(subscribed, ch, 5000, "the waiter's own channel");
  }
  cr_assert_eq(rt_numsub(n.chan), 0, "nobody listens on the base channel");
  cr_assert_eq(rlock_unlock_owner(l, 999), 0);
  int64_t end = rt_now_ms() + 15000;
  while (atomic_load(&sh->done) < FIFO_N && rt_now_ms() < end)
    rt_sleep_ms(5);
  int status = -1;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_assert_eq(atomic_load(&sh->done), FIFO_N, "every waiter finished");
  cr_assert_eq(atomic_load(&sh->failed), 0, "every waiter acquired");
  for (int k = 0; k < FIFO_N; k++)
    cr_assert_eq(atomic_load(&sh->order[k]), k, "turn %d went to waiter %d",
                 k, atomic_load(&sh->order[k]));
  cr_assert(WIFEXITED(status), "child status %d", status);
  cr_assert_eq(atomic_load(&sh->child_exit), 100,
               "the child's client closed cleanly (child status %d)", status);
  wait_queue_empty(&n, "queue empty after everyone's turn");
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(l);
  rlock_client_free(a);
  munmap(sh, sizeof *sh);
}

/* ---- Java's layout and score arithmetic ---- */

/* Fact sheet A1: P1 holds (lease 30 s); P2 tries with wait 20 s; P3 lock()s
 * (announcing 300000). P2's deadline = now + PTTL + 20000; P3's = P2's +
 * 300000 exactly; when P2 acquires, P3's moves by -20000 (P2's wait). A
 * name with its own hash tag keeps it in every derived key. */
Test(fair, java_layout_and_score_arithmetic) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64], p1[96], p2[96], p3[96];
  rt_key(key, sizeof key, "fl{t}");
  names n;
  fair_names(&n, key);
  cr_assert(strstr(n.queue, "redisson_lock_queue:fl{t}") == n.queue);
  rlock *la = fair(a, key), *lb = fair(b, key);
  cr_assert_eq(rlock_lock_owner(la, 1, 30000), 0);
  rt_owner(p1, sizeof p1, a, 1);
  rt_owner(p2, sizeof p2, b, 2);
  rt_owner(p3, sizeof p3, b, 3);
  char *v = rt_hget(key, p1);
  cr_assert_str_eq(v, "1", "the owner's field, as RLock's");
  free(v);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 29000 && pttl <= 30000, "lease: %lld", pttl);

  waiter w2, w3;
  long long before = wall_ms();
  waiter_start(&w2, lb, 2, 20000, 10000);
  wait_len(n.queue, 1, "P2 queued");
  long long after = wall_ms();
  long long s2 = zscore(n.timeout, p2);
  cr_assert(s2 >= before + 29000 + 20000 && s2 <= after + 30000 + 20000,
            "P2's deadline %lld in [%lld, %lld]", s2, before + 49000,
            after + 50000);
  waiter_start(&w3, lb, 3, -1, 10000);
  wait_len(n.queue, 2, "P3 queued");
  cr_assert_eq(zscore(n.timeout, p3), s2 + 300000,
               "lock() announces fairLockWaitTimeout behind P2");
  char *q0 = lindex(n.queue, 0), *q1 = lindex(n.queue, 1);
  cr_assert_str_eq(q0, p2);
  cr_assert_str_eq(q1, p3);
  free(q0);
  free(q1);
  cr_assert_eq(rt_int("TTL %s", n.queue), -1, "queue keys have no TTL");
  cr_assert_eq(rt_int("TTL %s", n.timeout), -1);
  char c2[300], c3[300];
  snprintf(c2, sizeof c2, "%s:%s", n.chan, p2);
  snprintf(c3, sizeof c3, "%s:%s", n.chan, p3);
  rt_wait_until_what(subscribed, c2, 5000, "P2's channel");
  rt_wait_until_what(subscribed, c3, 5000, "P3's channel");
  long long s3 = zscore(n.timeout, p3);

  cr_assert_eq(rlock_unlock_owner(la, 1), 0);
  cr_assert_eq(waiter_wait(&w2, 5000, "P2 acquires"), 1);
  cr_assert_eq(zscore(n.timeout, p3), s3 - 20000,
               "those behind move up by the acquirer's wait");
  cr_assert_eq(zscore(n.timeout, p2), -1, "the acquirer left the set");
  cr_assert_eq(rt_int("LLEN %s", n.queue), 1);
  cr_assert_eq(atomic_load(&w3.status), PENDING, "P3 still waits");
  cr_assert_eq(rlock_unlock_owner(lb, 2), 0);
  cr_assert_eq(waiter_wait(&w3, 5000, "P3 acquires"), 1);
  cr_assert_eq(rlock_hold_count_owner(lb, 3), 1);
  wait_queue_empty(&n, "both left the queue");
  cr_assert_eq(rlock_unlock_owner(lb, 3), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- only the head is told ---- */

Test(fair, release_tells_only_the_first_waiter) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64], w1[96], w2[96];
  rt_key(key, sizeof key, "fh");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key), *lb = fair(b, key);
  cr_assert_eq(rlock_lock_owner(la, 1, 30000), 0);
  waiter x, y;
  waiter_start(&x, lb, 2, 10000, 30000);
  wait_len(n.queue, 1, "first waiter queued");
  waiter_start(&y, lb, 3, 10000, 30000);
  wait_len(n.queue, 2, "second waiter queued");
  rt_owner(w1, sizeof w1, b, 2);
  rt_owner(w2, sizeof w2, b, 3);
  char c1[300], c2[300];
  snprintf(c1, sizeof c1, "%s:%s", n.chan, w1);
  snprintf(c2, sizeof c2, "%s:%s", n.chan, w2);
  rt_wait_until_what(subscribed, c1, 5000, "first waiter's channel");
  rt_wait_until_what(subscribed, c2, 5000, "second waiter's channel");
  /* Two own channels, nothing on the shared one. */
  char first[300];
  cr_assert_eq(rt_pubsub_channels(first, sizeof first), 2);
  cr_assert(strncmp(first, n.chan, strlen(n.chan)) == 0, "%s", first);

  sniffer s;
  sniff_start(&s, &n);
  cr_assert_eq(rlock_unlock_owner(la, 1), 0);
  cr_assert_eq(waiter_wait(&x, 5000, "the first waiter acquires"), 1);
  sniff_collect(&s);
  cr_assert_eq(s.n, 1, "one message for one release (got %d)", s.n);
  cr_assert_str_eq(s.chan[0], c1);
  cr_assert_str_eq(s.payload[0], "0");
  cr_assert_eq(atomic_load(&y.status), PENDING);
  cr_assert_eq(rlock_unlock_owner(lb, 2), 0);
  cr_assert_eq(waiter_wait(&y, 5000, "the second waiter acquires"), 1);
  sniff_collect(&s);
  cr_assert_eq(s.n, 2, "got %d messages", s.n);
  cr_assert_str_eq(s.chan[1], c2);
  cr_assert_eq(rlock_unlock_owner(lb, 3), 0);
  sniff_collect(&s);
  cr_assert_eq(s.n, 2, "the last release has nobody to tell");
  sniff_stop(&s);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- a crashed Java waiter at the head ---- */

/* The head of the queue is a waiter that died (its deadline ~2 s ahead)
 * and nobody holds the lock. Ours queues behind it (deadline = the ghost's
 * + its wait), is told "0" (try again) while the ghost is first, and gets
 * the lock once the prune drops the ghost - without Java's busy loop
 * (2,261 EVALSHA in 2 s, fact sheet A5): the engine backs off instead. */
Test(fair, dead_head_is_pruned_without_busy_looping) {
  rlock_client *a = rt_client();
  char key[64], me[96];
  rt_key(key, sizeof key, "fg");
  names n;
  fair_names(&n, key);
  rlock *l = fair(a, key);
  long long ghost = wall_ms() + 2000;
  rt_int("RPUSH %s ghost-uuid:1", n.queue);
  rt_int("ZADD %s %lld ghost-uuid:1", n.timeout, ghost);
  rt_ok("OK", "CONFIG RESETSTAT");
  int64_t t0 = rt_now_ms();
  waiter w;
  waiter_start(&w, l, 7, 6000, 30000);
  wait_len(n.queue, 2, "queued behind the ghost");
  rt_owner(me, sizeof me, a, 7);
  cr_assert_eq(zscore(n.timeout, me), ghost + 6000,
               "deadline = the ghost's + our wait");
  int rc = waiter_wait(&w, 6000, "acquired after the prune");
  int64_t took = rt_now_ms() - t0;
  long long scripts = calls("evalsha") + calls("eval");
  cr_log_info("acquired after %lld ms with %lld script calls",
              (long long)took, scripts);
  cr_assert_eq(rc, 1, "acquire: %s", rlock_err_name(rc));
  cr_assert(took >= 1800 && took < 3500, "took %lld ms", (long long)took);
  cr_assert(scripts >= 3 && scripts < 100,
            "%lld scripts in ~2 s: a busy loop", scripts);
  cr_assert_eq(rt_exists(n.queue), 0, "ghost pruned, we left the queue");
  cr_assert_eq(rt_exists(n.timeout), 0);
  cr_assert_eq(rlock_unlock_owner(l, 7), 0);
  rlock_free(l);
  rlock_client_free(a);
}

/* ---- giving up leaves no entry ---- */

/* A waiter that times out leaves the queue and the set (Java's
 * acquireFailed) and those behind it move up by its wait. */
Test(fair, timeout_leaves_the_queue_and_moves_those_behind_up) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64], w1[96], w2[96];
  rt_key(key, sizeof key, "ft");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key), *lb = fair(b, key);
  cr_assert_eq(rlock_lock_owner(la, 1, 30000), 0);
  waiter x, y;
  waiter_start(&x, lb, 2, 700, 30000);
  wait_len(n.queue, 1, "the short waiter queued");
  waiter_start(&y, lb, 3, 10000, 30000);
  wait_len(n.queue, 2, "the long waiter queued");
  rt_owner(w1, sizeof w1, b, 2);
  rt_owner(w2, sizeof w2, b, 3);
  long long s1 = zscore(n.timeout, w1), s2 = zscore(n.timeout, w2);
  cr_assert_eq(s2, s1 + 10000);
  cr_assert_eq(waiter_wait(&x, 3000, "the short waiter times out"), 0);
  wait_len(n.queue, 1, "the timed-out waiter left the queue");
  cr_assert_eq(zscore(n.timeout, w1), -1, "and the set");
  cr_assert_eq(zscore(n.timeout, w2), s2 - 700, "moved up by 700");
  char *q0 = lindex(n.queue, 0);
  cr_assert_str_eq(q0, w2);
  free(q0);
  /* A blocking try that times out does the same. */
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock_owner(la, 4, 400, 30000), 0);
  cr_assert(rt_now_ms() - t0 < 1500);
  wait_len(n.queue, 1, "the blocking try left the queue");
  cr_assert_eq(rt_int("ZCARD %s", n.timeout), 1);
  cr_assert_eq(rlock_unlock_owner(la, 1), 0);
  cr_assert_eq(waiter_wait(&y, 5000, "the long waiter acquires"), 1);
  wait_queue_empty(&n, "empty");
  cr_assert_eq(rlock_unlock_owner(lb, 3), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* Cancel, interrupt and close each leave no queue or set entry. */
Test(fair, cancel_interrupt_and_close_leave_no_entry) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fc");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key), *lb = fair(b, key);
  cr_assert_eq(rlock_lock_owner(la, 1, 30000), 0);

  waiter w;
  waiter_start(&w, lb, 2, -1, 30000);
  wait_len(n.queue, 1, "queued (cancel)");
  cr_assert_eq(rlock_req_cancel(w.req), 0);
  cr_assert_eq(waiter_wait(&w, 3000, "cancelled"), RLOCK_ECANCELED);
  wait_queue_empty(&n, "cancel left the queue");

  waiter_start(&w, lb, 3, 20000, 30000);
  wait_len(n.queue, 1, "queued (interrupt)");
  cr_assert_eq(rlock_client_interrupt(b, 3), 1);
  cr_assert_eq(waiter_wait(&w, 3000, "interrupted"), RLOCK_ECANCELED);
  wait_queue_empty(&n, "interrupt left the queue");

  rlock_client *c = rt_client();
  rlock *lc = fair(c, key);
  waiter_start(&w, lc, 4, -1, 30000);
  wait_len(n.queue, 1, "queued (close)");
  rlock_req_free(w.req);
  w.req = NULL;
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&w.status), RLOCK_ECLOSED);
  /* close waits for the queue-leave's reply */
  cr_assert_eq(rt_exists(n.queue), 0, "close left the queue");
  cr_assert_eq(rt_exists(n.timeout), 0);
  rlock_free(lc);

  cr_assert_eq(rlock_unlock_owner(la, 1), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* Issue 24: a waiter that gives up (its wait ran out) and whose client
 * closes right away still leaves the queue when the server's script cache
 * lacks the queue-leave script: its EVALSHA is answered NOSCRIPT, and the
 * EVAL sent then must not be dropped by the close. Three rounds, each with
 * a flushed script cache and a fresh client. */
Test(fair, give_up_then_close_leaves_no_entry_after_script_flush) {
  rlock_client *a = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fg");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key);
  cr_assert_eq(rlock_lock_owner(la, 1, 30000), 0);
  for (int round = 0; round < 3; round++) {
    rt_ok("OK", "SCRIPT FLUSH");
    rlock_client *b = rt_client();
    rlock *lb = fair(b, key);
    cr_assert_eq(rlock_try_lock_owner(lb, 2, 200, 30000), 0,
                 "round %d: the wait runs out", round);
    rlock_free(lb);
    rlock_client_free(b);
    /* close waited for the queue-leave's reply, EVAL re-send included */
    cr_assert_eq(rt_exists(n.queue), 0, "round %d: the give-up left the "
                 "queue entry behind", round);
    cr_assert_eq(rt_exists(n.timeout), 0, "round %d", round);
  }
  cr_assert_eq(rlock_unlock_owner(la, 1), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(la);
  rlock_client_free(a);
}

/* rlock's addition to the queue-leave: the first waiter leaving while the
 * lock is free tells the next one (else it would sleep on its hint, here
 * the old holder's ~30 s TTL). */
Test(fair, first_waiter_leaving_a_free_lock_tells_the_next) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fn");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key), *lb = fair(b, key);
  cr_assert_eq(rlock_lock_owner(la, 1, 30000), 0);
  waiter x, y;
  waiter_start(&x, lb, 2, 20000, 30000);
  wait_len(n.queue, 1, "first queued");
  waiter_start(&y, lb, 3, 20000, 30000);
  wait_len(n.queue, 2, "second queued");
  char w1[96], w2[96], c1[300], c2[300];
  rt_owner(w1, sizeof w1, b, 2);
  rt_owner(w2, sizeof w2, b, 3);
  snprintf(c1, sizeof c1, "%s:%s", n.chan, w1);
  snprintf(c2, sizeof c2, "%s:%s", n.chan, w2);
  rt_wait_until_what(subscribed, c1, 5000, "first waiter's channel");
  rt_wait_until_what(subscribed, c2, 5000, "second waiter's channel");
  /* Each sends one more try right after its subscription is confirmed and
   * then sleeps on its hint (~30 s); that try is not observable from here,
   * so give it a moment: the hash must vanish after it, or the first
   * waiter would simply take the free lock. */
  rt_sleep_ms(50);
  rt_int("DEL %s", key); /* the hold vanishes without a message */
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_req_cancel(x.req), 0);
  cr_assert_eq(waiter_wait(&x, 3000, "first cancelled"), RLOCK_ECANCELED);
  cr_assert_eq(waiter_wait(&y, 3000, "second acquires when told"), 1);
  cr_assert(rt_now_ms() - t0 < 2000);
  wait_queue_empty(&n, "empty");
  cr_assert_eq(rlock_unlock_owner(lb, 3), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- single attempt, queries, force unlock, renewal ---- */

Test(fair, single_attempt_never_queues) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fs");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key), *lb = fair(b, key);
  cr_assert_eq(rlock_try_lock_owner(la, 1, 0, 30000), 1);
  cr_assert_eq(rlock_try_lock_owner(la, 1, 0, 30000), 1, "re-entry");
  cr_assert_eq(rlock_hold_count_owner(la, 1), 2);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rlock_try_lock_owner(lb, 2, 0, 30000), 0);
  cr_assert_eq(rt_exists(n.queue), 0, "a single attempt does not queue");
  cr_assert_eq(rt_exists(n.timeout), 0);
  cr_assert_eq(calls("lrem") + calls("evalsha") + calls("eval"), 1,
               "one script, no queue-leave");
  cr_assert_eq(rlock_unlock_owner(la, 1), 0);
  cr_assert_eq(rlock_unlock_owner(la, 1), 0);
  cr_assert_eq(rlock_try_lock_owner(lb, 2, 0, 30000), 1);
  cr_assert_eq(rlock_unlock_owner(lb, 2), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

Test(fair, queries_force_unlock_and_watchdog) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  rlock_client *a = rt_client_opts(&o);
  char key[64];
  rt_key(key, sizeof key, "fq");
  names n;
  fair_names(&n, key);
  rlock *l = fair(a, key);
  cr_assert_eq(rlock_is_locked(l), 0);
  cr_assert_eq(rlock_force_unlock(l), 0);
  cr_assert_eq(rlock_lock(l, -1), 0); /* watchdog */
  cr_assert_eq(rlock_is_locked(l), 1);
  cr_assert_eq(rlock_is_held(l), 1);
  cr_assert_eq(rlock_hold_count(l), 1);
  rt_sleep_ms(1500); /* longer than the lease: renewed meanwhile */
  int64_t ttl = -5;
  cr_assert_eq(rlock_remain_ttl(l, &ttl), 0);
  cr_assert(ttl > 0 && ttl <= 900, "renewed: %lld", (long long)ttl);
  cr_assert_eq(rt_exists(n.queue), 0, "no queue keys for an uncontended lock");
  /* force unlock tells the first waiter */
  rt_int("RPUSH %s ghost-uuid:1", n.queue);
  rt_int("ZADD %s %lld ghost-uuid:1", n.timeout, wall_ms() + 60000);
  sniffer s;
  sniff_start(&s, &n);
  cr_assert_eq(rlock_force_unlock(l), 1);
  cr_assert_eq(rt_exists(key), 0);
  sniff_collect(&s);
  cr_assert_eq(s.n, 1);
  char want[300];
  snprintf(want, sizeof want, "%s:ghost-uuid:1", n.chan);
  cr_assert_str_eq(s.chan[0], want);
  cr_assert_eq(rt_int("LLEN %s", n.queue), 1, "the queue is kept");
  sniff_stop(&s);
  cr_assert_eq(rlock_unlock(l), RLOCK_ELOCKLOST, "the hold was deleted");
  rlock_free(l);
  rlock_client_free(a);
}

/* ---- mutual exclusion ---- */

#define MX_THREADS 4
#define MX_ROUNDS 40

typedef struct mx {
  atomic_int inside, overlaps, errors;
  volatile long counter;
} mx;

typedef struct mx_arg {
  mx *shared;
  rlock *lock;
} mx_arg;

static void mx_run(void *arg) {
  mx_arg *x = arg;
  mx *m = x->shared;
  for (int i = 0; i < MX_ROUNDS; i++) {
    if (rlock_lock(x->lock, 10000) != 0) {
      atomic_fetch_add(&m->errors, 1);
      continue;
    }
    if (atomic_fetch_add(&m->inside, 1) != 0)
      atomic_fetch_add(&m->overlaps, 1);
    long c = m->counter;
    sched_yield();
    m->counter = c + 1;
    atomic_fetch_sub(&m->inside, 1);
    if (rlock_unlock(x->lock) != 0)
      atomic_fetch_add(&m->errors, 1);
  }
}

/* Threads of two clients share one counter behind the fair lock. */
Test(fair, mutual_exclusion_counter) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fm");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key), *lb = fair(b, key);
  mx m;
  atomic_init(&m.inside, 0);
  atomic_init(&m.overlaps, 0);
  atomic_init(&m.errors, 0);
  m.counter = 0;
  rt_thread t[MX_THREADS];
  mx_arg args[MX_THREADS];
  for (int i = 0; i < MX_THREADS; i++) {
    args[i] = (mx_arg){&m, i % 2 == 0 ? la : lb};
    rt_thread_start(&t[i], mx_run, &args[i]);
  }
  for (int i = 0; i < MX_THREADS; i++)
    rt_thread_join(&t[i], 60000);
  cr_assert_eq(atomic_load(&m.errors), 0);
  cr_assert_eq(atomic_load(&m.overlaps), 0);
  cr_assert_eq(m.counter, MX_THREADS * MX_ROUNDS);
  cr_assert_eq(rt_exists(key), 0);
  wait_queue_empty(&n, "no entry left");
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- errors ---- */

Test(fair, read_write_hash_is_wrongkind_and_left_unchanged) {
  rlock_client *a = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fw");
  names n;
  fair_names(&n, key);
  rt_int("HSET %s mode read java-uuid:61 1", key);
  rlock *l = fair(a, key);
  cr_assert_eq(rlock_try_lock(l, 0, 30000), RLOCK_EKIND);
  cr_assert(strstr(rlock_last_error(), "WRONGKIND") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(rlock_try_lock(l, 500, 30000), RLOCK_EKIND);
  cr_assert_eq(rt_hlen(key), 2);
  char *mode = rt_hget(key, "mode"), *cnt = rt_hget(key, "java-uuid:61");
  cr_assert_str_eq(mode, "read");
  cr_assert_str_eq(cnt, "1");
  free(mode);
  free(cnt);
  cr_assert_eq(rt_pttl(key), -1, "no TTL added");
  wait_queue_empty(&n, "not queued");
  rlock_free(l);
  rlock_client_free(a);
}

/* Unlock without holding: RLOCK_ENOTOWNER (Java would return quietly when
 * the lock is free); a free lock still tells the first waiter. */
Test(fair, unlock_not_held_is_enotowner) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fu");
  names n;
  fair_names(&n, key);
  rlock *la = fair(a, key), *lb = fair(b, key);
  cr_assert_eq(rlock_unlock(la), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_lock_owner(lb, 5, 30000), 0);
  cr_assert_eq(rlock_unlock(la), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_hold_count_owner(lb, 5), 1, "the holder is untouched");
  cr_assert_eq(rlock_unlock_owner(lb, 5), 0);
  rt_int("RPUSH %s ghost-uuid:1", n.queue);
  rt_int("ZADD %s %lld ghost-uuid:1", n.timeout, wall_ms() + 60000);
  sniffer s;
  sniff_start(&s, &n);
  cr_assert_eq(rlock_unlock(la), RLOCK_ENOTOWNER);
  sniff_collect(&s);
  cr_assert_eq(s.n, 1, "the first waiter is told anyway");
  char want[300];
  snprintf(want, sizeof want, "%s:ghost-uuid:1", n.chan);
  cr_assert_str_eq(s.chan[0], want);
  sniff_stop(&s);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- the repair script ---- */

/* The trim (rlock's own; sent by the engine after a lost reply) sets the
 * owner's count back; at 0 it deletes the hash and tells the first waiter
 * on its own channel, the queue being found from the channel base. */
Test(fair, trim_sets_the_count_back_and_tells_the_first_waiter) {
  const rlock__script *trim = rlock__prim_fair.hold->trim;
  cr_assert(trim != NULL && trim->eval_only, "sent as EVAL only");
  char key[64];
  rt_key(key, sizeof key, "fr");
  names n;
  fair_names(&n, key);
  rt_int("HSET %s me:1 3", key);
  rt_int("PEXPIRE %s 30000", key);
  rt_int("RPUSH %s ghost-uuid:1", n.queue);
  rt_int("ZADD %s %lld ghost-uuid:1", n.timeout, wall_ms() + 60000);
  sniffer s;
  sniff_start(&s, &n);
  cr_assert_eq(rt_int("EVAL %s 2 %s %s me:1 5 PUBLISH 0", trim->body, key,
                      n.chan),
               3, "count found");
  char *v = rt_hget(key, "me:1");
  cr_assert_str_eq(v, "3", "nothing to trim below what the client knows");
  free(v);
  cr_assert_eq(rt_int("EVAL %s 2 %s %s me:1 1 PUBLISH 0", trim->body, key,
                      n.chan),
               3);
  v = rt_hget(key, "me:1");
  cr_assert_str_eq(v, "1");
  free(v);
  sniff_collect(&s);
  cr_assert_eq(s.n, 0, "still held: no message");
  cr_assert_eq(rt_int("EVAL %s 2 %s %s me:1 0 PUBLISH 0", trim->body, key,
                      n.chan),
               1);
  cr_assert_eq(rt_exists(key), 0);
  sniff_collect(&s);
  cr_assert_eq(s.n, 1);
  char want[300];
  snprintf(want, sizeof want, "%s:ghost-uuid:1", n.chan);
  cr_assert_str_eq(s.chan[0], want);
  cr_assert_str_eq(s.payload[0], "0");
  cr_assert_eq(rt_int("LLEN %s", n.queue), 1, "the queue is not touched");
  sniff_stop(&s);
}
