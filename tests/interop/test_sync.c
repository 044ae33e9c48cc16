/*
 * Interop proof for rlock's semaphore and count-down latch against javapeer,
 * which speaks Redisson 4.7's RSemaphore and RCountDownLatch as a Java client
 * does on the wire (javapeer.c: the sem* and lt* commands; no rlock code).
 *
 * Neither primitive has a TTL to wake a waiter by: a Java-like waiter sleeps
 * for its whole remaining wait and an rlock waiter re-checks only after the
 * watchdog timeout (30 s), so a waiter that returns within WAKE_BOUND_MS of
 * the other side's release / count-down was woken by its message. Every
 * wait is bounded; times are judged without the time the machine stood
 * still (interop_stalled_ms).
 *
 * Tests (suite `sync`):
 *   sem_shared_permits_not_over_issued   N permits, rlock threads + the peer
 *                                        take and return them; the number of
 *                                        concurrent holders never exceeds N
 *   sem_release_wakes_other_side         rlock's release wakes the peer's
 *                                        waiter, the peer's wakes rlock's
 *   sem_rlock_release_one_wakes_one_peer two peer waiters: a release of 1
 *                                        by rlock lets exactly one in
 *   latch_opens_both_sides               awaiters on both sides open when
 *                                        the last count-down lands on the
 *                                        peer, then on rlock
 *   monitor_channels                     rlock's PUBLISHes: redisson_sc:<tag>
 *                                        with the new total, the latch
 *                                        channel (braces always) with 0 / 1
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interop.h"

TestSuite(sync, .init = interop_init, .fini = interop_fini, .timeout = 240);

#define LONG_WAIT_MS 20000
#define NEEDLE_MAX 1024

/* ---- helpers ---- */

static int64_t net_ms(int64_t from, int64_t to) {
  return (to - from) - interop_stalled_ms(from, to);
}

static rlock_semaphore *sem_get(rlock_client *c, const char *name) {
  rlock_semaphore *s = NULL;
  int rc = rlock_semaphore_get(c, name, &s);
  cr_assert_eq(rc, 0, "rlock_semaphore_get(%s): %s (%s)", name,
               rlock_err_name(rc), rlock_last_error());
  return s;
}

static rlock_latch *latch_get(rlock_client *c, const char *name) {
  rlock_latch *l = NULL;
  int rc = rlock_latch_get(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_latch_get(%s): %s (%s)", name, rlock_err_name(rc),
               rlock_last_error());
  return l;
}

static void sem_channel(char *buf, size_t n, const char *name) {
  char tag[NAME_MAX_LEN];
  interop_braced(tag, sizeof tag, name);
  snprintf(buf, n, "redisson_sc:%s", tag);
}

static void latch_channel(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "redisson_countdownlatch__channel__{%s}", name);
}

/* The peer answers `word` within WAKE_BOUND_MS of t_event. */
static void expect_peer_woke(peer *p, const char *word, int64_t t_event,
                             const char *what) {
  peer_expect(p, word, REPLY_BOUND_MS);
  int64_t latency = net_ms(t_event, rt_now_ms());
  interop_report("%s: %" PRId64 " ms", what, latency);
  cr_assert_lt(latency, WAKE_BOUND_MS,
               "%s: the peer answered %s %" PRId64 " ms after the event "
               "(its wait is %d ms): not by the message",
               what, word, latency, LONG_WAIT_MS);
}

static void assert_peer_waits(peer *p, const char *what) {
  cr_assert(!peer_has_answer(p, 0), "%s: the peer answered \"%s\"", what,
            peer_has_answer(p, 0) ? peer_next_answer(p, 0) : "");
}

/* An rlock thread running one blocking call (semaphore try_acquire or
 * latch await) with wait LONG_WAIT_MS. Never asserts. */
typedef struct waiter {
  rlock_semaphore *sem; /* one of these two */
  rlock_latch *latch;
  int64_t permits;
  atomic_int stage; /* 0 start, 1 calling, 2 returned */
  int rc;
  int64_t t_returned;
  rt_thread th;
} waiter;

static void waiter_main(void *arg) {
  waiter *w = arg;
  atomic_store(&w->stage, 1);
  if (w->sem != NULL)
    w->rc = rlock_semaphore_try_acquire(w->sem, w->permits, LONG_WAIT_MS);
  else
    w->rc = rlock_latch_await(w->latch, LONG_WAIT_MS);
  w->t_returned = rt_now_ms();
  atomic_store(&w->stage, 2);
}

static bool waiter_returned(void *arg) {
  return atomic_load(&((waiter *)arg)->stage) >= 2;
}

/* The waiter returned 1 within WAKE_BOUND_MS of t_event; joins it. */
static void assert_waiter_woke(waiter *w, int64_t t_event, const char *what) {
  interop_wait_until(waiter_returned, w, REPLY_BOUND_MS, what);
  rt_thread_join(&w->th, JOIN_BOUND_MS);
  cr_assert_eq(w->rc, 1, "%s: rlock returned %d (%s)", what, w->rc,
               w->rc < 0 ? rlock_err_name(w->rc) : "not within its wait");
  int64_t latency = net_ms(t_event, w->t_returned);
  interop_report("%s: %" PRId64 " ms", what, latency);
  cr_assert_lt(latency, WAKE_BOUND_MS,
               "%s: rlock returned %" PRId64 " ms after the event (its "
               "wait is %d ms): not by the message",
               what, latency, LONG_WAIT_MS);
}

static size_t monitor_count_of(const monitor *m, const char *needle) {
  size_t n = 0;
  for (size_t i = monitor_find(m, 0, needle); i != (size_t)-1;
       i = monitor_find(m, i + 1, needle))
    n++;
  return n;
}

static void dump_monitor(const monitor *m, const char *needle) {
  for (size_t i = monitor_find(m, 0, needle); i != (size_t)-1;
       i = monitor_find(m, i + 1, needle))
    interop_report("  MONITOR %s", monitor_line(m, i));
}

/* ==================================================================== */
/* ---- the semaphore ---- */

#define SEM_PERMITS 3
#define SEM_THREADS 4
#define SEM_ROUNDS 12

typedef struct holders {
  atomic_int now, max, taken;
} holders;

static void holders_enter(holders *h) {
  int v = atomic_fetch_add(&h->now, 1) + 1;
  int m = atomic_load(&h->max);
  while (v > m && !atomic_compare_exchange_weak(&h->max, &m, v)) {
  }
  atomic_fetch_add(&h->taken, 1);
}

static void holders_leave(holders *h) { atomic_fetch_sub(&h->now, 1); }

typedef struct sem_thread {
  rlock_semaphore *sem;
  holders *h;
  int fails; /* acquire or release not 1 / 0 */
  int last_rc;
  rt_thread th;
} sem_thread;

static void sem_thread_main(void *arg) {
  sem_thread *t = arg;
  for (int i = 0; i < SEM_ROUNDS; i++) {
    int rc = rlock_semaphore_try_acquire(t->sem, 1, LONG_WAIT_MS);
    if (rc != 1) {
      t->fails++;
      t->last_rc = rc;
      continue;
    }
    holders_enter(t->h);
    rt_sleep_ms(3 + i % 4);
    holders_leave(t->h);
    rc = rlock_semaphore_release(t->sem, 1);
    if (rc != 0) {
      t->fails++;
      t->last_rc = rc;
    }
  }
}

Test(sync, sem_shared_permits_not_over_issued) {
  char name[NAME_MAX_LEN];
  rt_key(name, sizeof name, "sync:sem-share");
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock_semaphore *sem = sem_get(c, name);

  peer_call(p, "RESULT 1", REPLY_BOUND_MS, "semtryset %s %d", name,
            SEM_PERMITS);
  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 7, 0), 0,
               "try_set_permits on the peer's semaphore must answer 0");
  cr_assert_eq(rlock_semaphore_available_permits(sem), SEM_PERMITS);

  holders h = {0};
  sem_thread t[SEM_THREADS];
  memset(t, 0, sizeof t);
  for (int i = 0; i < SEM_THREADS; i++) {
    t[i].sem = sem;
    t[i].h = &h;
    rt_thread_start(&t[i].th, sem_thread_main, &t[i]);
  }
  /* The peer takes part from this thread: its hold is counted between its
   * ACQUIRED and the release sent, inside its real hold on the server. */
  int peer_taken = 0;
  for (int i = 0; i < SEM_ROUNDS; i++) {
    peer_send(p, "semtryacquire %s 1 %d", name, LONG_WAIT_MS);
    const char *ans = peer_next_answer(p, LONG_WAIT_MS + REPLY_BOUND_MS);
    cr_assert(strncmp(ans, "ACQUIRED ", 9) == 0,
              "peer round %d: \"%s\" (expected ACQUIRED)", i, ans);
    holders_enter(&h);
    rt_sleep_ms(4);
    holders_leave(&h);
    peer_taken++;
    peer_call(p, "RELEASED", REPLY_BOUND_MS, "semrelease %s 1", name);
    peer_skip_events(p);
  }
  for (int i = 0; i < SEM_THREADS; i++)
    rt_thread_join(&t[i].th, 2 * LONG_WAIT_MS);
  for (int i = 0; i < SEM_THREADS; i++)
    cr_assert_eq(t[i].fails, 0, "rlock thread %d: %d failed calls (last %s)", i,
                 t[i].fails, rlock_err_name(t[i].last_rc));

  interop_report("semaphore: %d holds (%d by the peer), at most %d at once "
                 "of %d permits",
                 atomic_load(&h.taken), peer_taken, atomic_load(&h.max),
                 SEM_PERMITS);
  cr_assert_eq(atomic_load(&h.taken), (SEM_THREADS + 1) * SEM_ROUNDS);
  cr_assert_leq(atomic_load(&h.max), SEM_PERMITS,
                "%d holders at once with %d permits", atomic_load(&h.max),
                SEM_PERMITS);
  cr_assert_geq(atomic_load(&h.max), 2, "no contention happened at all");
  cr_assert_eq(rlock_semaphore_available_permits(sem), SEM_PERMITS,
               "every permit back");
  peer_call(p, "AVAILABLE 3", REPLY_BOUND_MS, "semavailable %s", name);

  peer_stop(p);
  rlock_semaphore_free(sem);
  rlock_client_close(c);
}

Test(sync, sem_release_wakes_other_side) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN];
  rt_key(name, sizeof name, "sync:sem-wake");
  sem_channel(channel, sizeof channel, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock_semaphore *sem = sem_get(c, name);

  /* rlock holds the only permit; the peer waits; rlock releases. */
  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 1, 0), 1);
  cr_assert_eq(rlock_semaphore_try_acquire(sem, 1, 0), 1);
  peer_send(p, "semtryacquire %s 1 %d", name, LONG_WAIT_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  rt_sleep_ms(200);
  assert_peer_waits(p, "no permit yet");
  int64_t t_release = rt_now_ms();
  cr_assert_eq(rlock_semaphore_release(sem, 1), 0);
  expect_peer_woke(p, "ACQUIRED", t_release, "rlock release -> peer");
  cr_assert_eq(rlock_semaphore_available_permits(sem), 0);

  /* The peer holds it; an rlock thread waits; the peer releases. */
  interop_wait_numsub(channel, 0, REPLY_BOUND_MS);
  waiter w = {.sem = sem, .permits = 1};
  rt_thread_start(&w.th, waiter_main, &w);
  interop_wait_numsub(channel, 1, REPLY_BOUND_MS);
  rt_sleep_ms(200);
  cr_assert_eq(atomic_load(&w.stage), 1, "rlock returned without a permit");
  t_release = rt_now_ms();
  peer_call(p, "RELEASED", REPLY_BOUND_MS, "semrelease %s 1", name);
  assert_waiter_woke(&w, t_release, "peer release -> rlock");
  cr_assert_eq(rlock_semaphore_available_permits(sem), 0);

  /* The same with addPermits on the peer side. */
  interop_wait_numsub(channel, 0, REPLY_BOUND_MS);
  waiter w2 = {.sem = sem, .permits = 2};
  rt_thread_start(&w2.th, waiter_main, &w2);
  interop_wait_numsub(channel, 1, REPLY_BOUND_MS);
  rt_sleep_ms(200);
  cr_assert_eq(atomic_load(&w2.stage), 1, "rlock returned without permits");
  t_release = rt_now_ms();
  peer_call(p, "ADDED", REPLY_BOUND_MS, "semadd %s 2", name);
  assert_waiter_woke(&w2, t_release, "peer addPermits -> rlock");
  cr_assert_eq(rlock_semaphore_available_permits(sem), 0);

  peer_stop(p);
  rlock_semaphore_free(sem);
  rlock_client_close(c);
}

/* Waits until one of the two peers has an answer; returns its index. */
static int first_answering(peer *p[2], int64_t bound_ms) {
  int64_t until = rt_now_ms() + bound_ms;
  while (rt_now_ms() < until) {
    for (int i = 0; i < 2; i++)
      if (peer_has_answer(p[i], 0))
        return i;
    rt_sleep_ms(2);
  }
  cr_assert_fail("neither peer answered within %" PRId64 " ms", bound_ms);
  return -1;
}

Test(sync, sem_rlock_release_one_wakes_one_peer) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN];
  rt_key(name, sizeof name, "sync:sem-one");
  sem_channel(channel, sizeof channel, name);
  peer *p[2] = {peer_start(PEER_JAVA, 0), peer_start(PEER_JAVA, 0)};
  rlock_client *c = rt_client();
  rlock_semaphore *sem = sem_get(c, name);

  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 1, 0), 1);
  cr_assert_eq(rlock_semaphore_try_acquire(sem, 1, 0), 1);
  for (int i = 0; i < 2; i++) {
    peer_send(p[i], "semtryacquire %s 1 %d", name, LONG_WAIT_MS);
    peer_expect_event(p[i], "WAITING", REPLY_BOUND_MS);
  }
  interop_wait_numsub(channel, 2, REPLY_BOUND_MS);
  int64_t t_release = rt_now_ms();
  cr_assert_eq(rlock_semaphore_release(sem, 1), 0);
  int first = first_answering(p, REPLY_BOUND_MS);
  int other = 1 - first;
  expect_peer_woke(p[first], "ACQUIRED", t_release,
                   "rlock release 1 -> one peer");
  /* The other one tried too (total 1 wakes each peer's one waiter), lost,
   * and sleeps again. */
  rt_sleep_ms(500);
  assert_peer_waits(p[other], "a release of 1 let a second peer in");
  cr_assert_eq(rlock_semaphore_available_permits(sem), 0);

  /* The winner returns it: the other peer gets it. */
  t_release = rt_now_ms();
  peer_call(p[first], "RELEASED", REPLY_BOUND_MS, "semrelease %s 1", name);
  expect_peer_woke(p[other], "ACQUIRED", t_release,
                   "peer release 1 -> the other peer");
  peer_call(p[other], "RELEASED", REPLY_BOUND_MS, "semrelease %s 1", name);
  cr_assert_eq(rlock_semaphore_available_permits(sem), 1);

  peer_stop(p[0]);
  peer_stop(p[1]);
  rlock_semaphore_free(sem);
  rlock_client_close(c);
}

/* ==================================================================== */
/* ---- the count-down latch ---- */

/* Count 2, a peer awaiter and an rlock awaiter; one count-down on the
 * `first` side leaves both closed, the last on the other opens both. */
static void latch_round(const char *base, bool last_on_peer) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], what[128];
  rt_key(name, sizeof name, base);
  latch_channel(channel, sizeof channel, name);
  peer *aw = peer_start(PEER_JAVA, 0);
  peer *cd = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock_latch *l = latch_get(c, name);

  if (last_on_peer) {
    cr_assert_eq(rlock_latch_try_set_count(l, 2), 1);
    peer_call(cd, "RESULT 0", REPLY_BOUND_MS, "lttryset %s 5", name);
  } else {
    peer_call(cd, "RESULT 1", REPLY_BOUND_MS, "lttryset %s 2", name);
    cr_assert_eq(rlock_latch_try_set_count(l, 5), 0);
  }
  cr_assert_eq(rlock_latch_get_count(l), 2);

  peer_send(aw, "ltawait %s %d", name, LONG_WAIT_MS);
  peer_expect_event(aw, "WAITING", REPLY_BOUND_MS);
  waiter w = {.latch = l};
  rt_thread_start(&w.th, waiter_main, &w);
  interop_wait_numsub(channel, 2, REPLY_BOUND_MS);

  if (last_on_peer)
    cr_assert_eq(rlock_latch_count_down(l), 0);
  else
    peer_call(cd, "COUNTEDDOWN", REPLY_BOUND_MS, "ltcountdown %s", name);
  peer_call(cd, "COUNT 1", REPLY_BOUND_MS, "ltcount %s", name);
  rt_sleep_ms(300);
  assert_peer_waits(aw, "latch at 1");
  cr_assert_eq(atomic_load(&w.stage), 1, "rlock's await returned at 1");

  int64_t t_open = rt_now_ms();
  if (last_on_peer)
    peer_call(cd, "COUNTEDDOWN", REPLY_BOUND_MS, "ltcountdown %s", name);
  else
    cr_assert_eq(rlock_latch_count_down(l), 0);
  snprintf(what, sizeof what, "last count-down on %s -> peer awaiter",
           last_on_peer ? "the peer" : "rlock");
  expect_peer_woke(aw, "OPENED", t_open, what);
  snprintf(what, sizeof what, "last count-down on %s -> rlock awaiter",
           last_on_peer ? "the peer" : "rlock");
  assert_waiter_woke(&w, t_open, what);
  cr_assert_eq(rt_exists(name), 0, "the open latch's key is deleted");
  cr_assert_eq(rlock_latch_get_count(l), 0);

  peer_stop(aw);
  peer_stop(cd);
  rlock_latch_free(l);
  rlock_client_close(c);
}

Test(sync, latch_opens_both_sides) {
  latch_round("sync:latch-peer-last", true);
  latch_round("sync:latch-rlock-last", false);
}

/* ==================================================================== */
/* ---- MONITOR ---- */

static void assert_publish(const monitor *m, const char *channel,
                           const char *payload, size_t want_at_least) {
  char needle[NEEDLE_MAX];
  snprintf(needle, sizeof needle, "lua] \"publish\" \"%s\" \"%s\"", channel,
           payload);
  size_t n = monitor_count_of(m, needle);
  if (n < want_at_least)
    dump_monitor(m, "publish");
  cr_assert_geq(n, want_at_least, "MONITOR: %zu of %s, expected >= %zu", n,
                needle, want_at_least);
}

/* Every PUBLISH naming `prefix` names exactly `channel`. */
static void assert_only_channel(const monitor *m, const char *prefix,
                                const char *channel) {
  char any[NEEDLE_MAX], exact[NEEDLE_MAX];
  snprintf(any, sizeof any, "\"publish\" \"%s", prefix);
  snprintf(exact, sizeof exact, "\"publish\" \"%s\"", channel);
  size_t n_any = monitor_count_of(m, any), n_exact = monitor_count_of(m, exact);
  if (n_any != n_exact)
    dump_monitor(m, any);
  cr_assert_eq(n_any, n_exact,
               "MONITOR: %zu PUBLISHes on %s..., only %zu on %s", n_any, prefix,
               n_exact, channel);
}

static void monitor_sem(const char *base) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN];
  rt_key(name, sizeof name, base);
  sem_channel(channel, sizeof channel, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock_semaphore *sem = sem_get(c, name);
  monitor *m = monitor_start();

  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 2, 0), 1); /* 2 */
  cr_assert_eq(rlock_semaphore_try_acquire(sem, 2, 0), 1);     /* 0 */
  peer_send(p, "semtryacquire %s 3 %d", name, LONG_WAIT_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  cr_assert_eq(rlock_semaphore_release(sem, 3), 0);      /* 3 */
  peer_expect(p, "ACQUIRED", REPLY_BOUND_MS);            /* 0 */
  cr_assert_eq(rlock_semaphore_add_permits(sem, 5), 0);  /* 5 */
  cr_assert_eq(rlock_semaphore_add_permits(sem, -1), 0); /* 4 */
  cr_assert_eq(rlock_semaphore_drain_permits(sem), 4);   /* 0 */
  cr_assert_eq(rlock_semaphore_release(sem, 1), 0);      /* 1 */
  monitor_sync(m);

  assert_publish(m, channel, "2", 1);
  assert_publish(m, channel, "3", 1);
  assert_publish(m, channel, "5", 1);
  assert_publish(m, channel, "4", 1);
  assert_publish(m, channel, "1", 1);
  assert_only_channel(m, "redisson_sc:", channel);
  cr_assert_eq(monitor_count_of(m, "\"publish\" \"redisson_sc:"), 5,
               "one PUBLISH per adding call, none for acquire / drain");
  char needle[NEEDLE_MAX];
  snprintf(needle, sizeof needle, "\"subscribe\" \"%s\"", channel);
  cr_assert_neq(monitor_find(m, 0, needle), (size_t)-1,
                "MONITOR: the java-like peer subscribed to %s", channel);
  interop_report("semaphore MONITOR (%s): %zu lines", channel,
                 monitor_count(m));
  monitor_stop(m);
  peer_stop(p);
  rlock_semaphore_free(sem);
  rlock_client_close(c);
}

static void monitor_latch(const char *base) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], needle[NEEDLE_MAX];
  rt_key(name, sizeof name, base);
  latch_channel(channel, sizeof channel, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock_latch *l = latch_get(c, name);
  monitor *m = monitor_start();

  cr_assert_eq(rlock_latch_try_set_count(l, 2), 1); /* publish 1 */
  peer_send(p, "ltawait %s %d", name, LONG_WAIT_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  cr_assert_eq(rlock_latch_count_down(l), 0); /* 1: nothing */
  cr_assert_eq(rlock_latch_count_down(l), 0); /* 0: publish 0 */
  peer_expect(p, "OPENED", REPLY_BOUND_MS);
  cr_assert_eq(rlock_latch_try_set_count(l, 1), 1); /* publish 1 */
  cr_assert_eq(rlock_latch_delete(l), 1);           /* publish 1 */
  cr_assert_eq(rlock_latch_delete(l), 0);           /* nothing */
  cr_assert_eq(rlock_latch_count_down(l), 0);       /* -1: nothing */
  monitor_sync(m);

  assert_publish(m, channel, "1", 3);
  assert_publish(m, channel, "0", 1);
  assert_only_channel(m, "redisson_countdownlatch__channel__", channel);
  cr_assert_eq(
      monitor_count_of(m, "\"publish\" \"redisson_countdownlatch__channel__"),
      4, "PUBLISH: set 1, open 0, set 1, delete 1 - and nothing else");
  snprintf(needle, sizeof needle, "\"subscribe\" \"%s\"", channel);
  cr_assert_neq(monitor_find(m, 0, needle), (size_t)-1,
                "MONITOR: the java-like peer subscribed to %s", channel);
  cr_assert_eq(rt_exists(name), 0, "a count-down from nothing leaves no key");
  interop_report("latch MONITOR (%s): %zu lines", channel, monitor_count(m));
  monitor_stop(m);
  peer_stop(p);
  rlock_latch_free(l);
  rlock_client_close(c);
}

Test(sync, monitor_channels) {
  monitor_sem("sync:sem-mon");
  monitor_sem("sync:a{t}b-sem"); /* channel redisson_sc:<name>, no braces */
  monitor_latch("sync:latch-mon");
  /* {a{t}b...}: braces added around a name that has its own. */
  monitor_latch("a{t}b");
}
