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
 *   pes_ids_cross_release                permit-expirable semaphore, several
 *                                        permits: ids taken on one side are
 *                                        released (all or none), leased and
 *                                        counted on the other; setPermits
 *                                        and getPermits agree
 *   pes_waiters_woken_across             a waiter for 2 permits on each side
 *                                        is woken by the other's release of
 *                                        a list
 *   pes_monitor_wire                     the acquire's and the list
 *                                        release's EVALSHA arguments in
 *                                        order (raw ids decoded from the
 *                                        MONITOR line), the channel, and the
 *                                        message: the number released
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  int rc = rlock_semaphore_new(c, name, &s);
  cr_assert_eq(rc, 0, "rlock_semaphore_new(%s): %s (%s)", name,
               rlock_err_name(rc), rlock_last_error());
  return s;
}

static rlock_latch *latch_get(rlock_client *c, const char *name) {
  rlock_latch *l = NULL;
  int rc = rlock_latch_new(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_latch_new(%s): %s (%s)", name, rlock_err_name(rc),
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
  rlock_semaphore *sem; /* one of these three */
  rlock_latch *latch;
  rlock_permit_semaphore *psem; /* `permits` permits, ids into ids */
  char (*ids)[RLOCK_PERMIT_ID_LEN + 1];
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
  else if (w->psem != NULL)
    w->rc = rlock_permit_semaphore_try_acquire_n(w->psem, w->permits,
                                                 LONG_WAIT_MS, -1, w->ids);
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
  rlock_client_free(c);
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
  rlock_client_free(c);
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
  rlock_client_free(c);
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
  cr_assert_eq(rlock_latch_count(l), 2);

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
  cr_assert_eq(rlock_latch_count(l), 0);

  peer_stop(aw);
  peer_stop(cd);
  rlock_latch_free(l);
  rlock_client_free(c);
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
  rlock_client_free(c);
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
  rlock_client_free(c);
}

Test(sync, monitor_channels) {
  monitor_sem("sync:sem-mon");
  monitor_sem("sync:a{t}b-sem"); /* channel redisson_sc:<name>, no braces */
  monitor_latch("sync:latch-mon");
  /* {a{t}b...}: braces added around a name that has its own. */
  monitor_latch("a{t}b");
}

/* ==================================================================== */
/* ---- the permit-expirable semaphore, several permits (issue 29) ---- */

typedef char pes_id[RLOCK_PERMIT_ID_LEN + 1];

static rlock_permit_semaphore *pes_get(rlock_client *c, const char *name) {
  rlock_permit_semaphore *s = NULL;
  int rc = rlock_permit_semaphore_new(c, name, &s);
  cr_assert_eq(rc, 0, "rlock_permit_semaphore_new(%s): %s", name,
               rlock_err_name(rc));
  return s;
}

static void pes_zset(char *buf, size_t n, const char *name) {
  char tag[NAME_MAX_LEN];
  interop_braced(tag, sizeof tag, name);
  snprintf(buf, n, "%s:timeout", tag);
}

/* Splits the peer's "ACQUIRED <ms> <id>,<id>,..." rest into want ids. */
static void pes_parse_ids(const char *rest, pes_id *ids, int want) {
  const char *p = strchr(rest, ' ');
  cr_assert_not_null(p, "no ids in \"%s\"", rest);
  p++;
  for (int i = 0; i < want; i++) {
    size_t len = strcspn(p, ",");
    cr_assert_eq(len, (size_t)RLOCK_PERMIT_ID_LEN, "id %d in \"%s\"", i, rest);
    memcpy(ids[i], p, len);
    ids[i][len] = '\0';
    p += len;
    cr_assert(*p == (i + 1 < want ? ',' : '\0'), "ids in \"%s\"", rest);
    if (*p == ',')
      p++;
  }
}

static void pes_join(char *buf, size_t n, pes_id *ids, int count) {
  buf[0] = '\0';
  for (int i = 0; i < count; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? "," : "",
             ids[i]);
}

static void assert_count(const char *name, const char *want) {
  char *v = rt_str("GET %s", name);
  cr_assert_not_null(v, "%s is missing, want %s", name, want);
  cr_assert_str_eq(v, want, "%s = %s, want %s", name, v, want);
  free(v);
}

Test(sync, pes_ids_cross_release) {
  char name[NAME_MAX_LEN], zset[NAME_MAX_LEN + 16], list[8 * 33];
  rt_key(name, sizeof name, "sync:pes-cross");
  pes_zset(zset, sizeof zset, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock_permit_semaphore *s = pes_get(c, name);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 4), 1);

  /* taken by rlock, released by the peer (Java's tryRelease(List)) */
  pes_id mine[3];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 3, 0, 60000, mine), 1);
  peer_call(p, "PERMITS 4", REPLY_BOUND_MS, "pespermits %s", name);
  int64_t left = 0;
  peer_call(p, "LEASETIME 0", REPLY_BOUND_MS, "pesleasetime %s %s", name,
            "0123456789abcdef0123456789abcdef");
  const char *lt = peer_call(p, "LEASETIME", REPLY_BOUND_MS,
                             "pesleasetime %s %s", name, mine[1]);
  left = strtoll(lt, NULL, 10);
  cr_assert(left > 50000 && left <= 60000, "peer sees lease %s", lt);
  /* one unknown id: Java releases nothing */
  snprintf(list, sizeof list, "%s,%s", mine[0],
           "0123456789abcdef0123456789abcdef");
  peer_call(p, "RELEASED 0", REPLY_BOUND_MS, "pesrelease %s %s", name, list);
  assert_count(name, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 3);
  pes_join(list, sizeof list, mine, 3);
  peer_call(p, "RELEASED 3", REPLY_BOUND_MS, "pesrelease %s %s", name, list);
  assert_count(name, "4");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);
  const char *gone[3] = {mine[0], mine[1], mine[2]};
  cr_assert_eq(rlock_permit_semaphore_release_n(s, gone, 3), RLOCK_ENOTOWNER,
               "released by the peer already");

  /* taken by the peer (no lease), released by rlock */
  const char *got = peer_call(p, "ACQUIRED", REPLY_BOUND_MS,
                              "pesacquire %s 2 0 -1", name);
  pes_id theirs[2];
  pes_parse_ids(got, theirs, 2);
  cr_assert_str_neq(theirs[0], theirs[1]);
  assert_count(name, "2");
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(s), 2);
  cr_assert_eq(rlock_permit_semaphore_permits(s), 4);
  cr_assert_eq(rlock_permit_semaphore_lease_time(s, theirs[0], &left), 0);
  cr_assert_eq(left, -1, "the peer's permit has no lease");
  const char *bad[2] = {theirs[0], "0123456789abcdef0123456789abcdef"};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, bad, 2), 0);
  cr_assert_eq(rt_int("ZCARD %s", zset), 2, "all or nothing");
  const char *both[2] = {theirs[0], theirs[1]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, both, 2), 2);
  assert_count(name, "4");
  peer_call(p, "RELEASED 0", REPLY_BOUND_MS, "pesrelease %s %s,%s", name,
            theirs[0], theirs[1]);

  /* setPermits on one side, getPermits on the other */
  peer_call(p, "SET", REPLY_BOUND_MS, "pessetpermits %s 6", name);
  cr_assert_eq(rlock_permit_semaphore_permits(s), 6);
  cr_assert_eq(rlock_permit_semaphore_acquire_n(s, 2, -1, mine), 0);
  cr_assert_eq(rlock_permit_semaphore_set_permits(s, 3), 0);
  peer_call(p, "PERMITS 3", REPLY_BOUND_MS, "pespermits %s", name);
  assert_count(name, "1");
  pes_join(list, sizeof list, mine, 2);
  peer_call(p, "RELEASED 2", REPLY_BOUND_MS, "pesrelease %s %s", name, list);
  assert_count(name, "3");

  peer_stop(p);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

Test(sync, pes_waiters_woken_across) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], list[8 * 33];
  rt_key(name, sizeof name, "sync:pes-wake");
  sem_channel(channel, sizeof channel, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 30000;
  rlock_client *c = rt_client_opts(&o);
  rlock_permit_semaphore *s = pes_get(c, name);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 3), 1);

  /* rlock holds all 3 (no lease: no hint to wake by); the peer wants 2 */
  pes_id mine[3];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 3, 0, -1, mine), 1);
  peer_send(p, "pesacquire %s 2 %d -1", name, LONG_WAIT_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  const char *one[1] = {mine[2]};
  cr_assert_eq(rlock_permit_semaphore_release_n(s, one, 1), 0);
  rt_sleep_ms(300);
  assert_peer_waits(p, "1 of 2 free");
  int64_t t_release = rt_now_ms();
  const char *two[2] = {mine[0], mine[1]};
  cr_assert_eq(rlock_permit_semaphore_release_n(s, two, 2), 0);
  expect_peer_woke(p, "ACQUIRED", t_release, "rlock list release -> peer");
  /* (the answer's ids were consumed by expect_peer_woke: read them back
   * from the zset's size instead) */
  assert_count(name, "1");

  /* the peer holds 2, rlock wants 2 of the 1 free */
  pes_id want[2];
  memset(want, 0, sizeof want);
  waiter w = {.psem = s, .permits = 2, .ids = want};
  rt_thread_start(&w.th, waiter_main, &w);
  interop_wait_numsub(channel, 1, REPLY_BOUND_MS);
  rt_sleep_ms(300);
  cr_assert_eq(atomic_load(&w.stage), 1, "rlock took 2 with 1 free");
  /* the peer's ids: the zset's members */
  char zset[NAME_MAX_LEN + 16];
  pes_zset(zset, sizeof zset, name);
  redisReply *r = rt_cmd("ZRANGE %s 0 -1", zset);
  cr_assert_eq(r->elements, 2);
  list[0] = '\0';
  for (size_t i = 0; i < 2; i++) {
    cr_assert_eq(r->element[i]->len, 16);
    for (size_t b = 0; b < 16; b++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%02x",
               (unsigned char)r->element[i]->str[b]);
    if (i == 0)
      strcat(list, ",");
  }
  freeReplyObject(r);
  int64_t t_peer = rt_now_ms();
  peer_call(p, "RELEASED 2", REPLY_BOUND_MS, "pesrelease %s %s", name, list);
  assert_waiter_woke(&w, t_peer, "peer list release -> rlock");
  cr_assert_str_neq(want[0], want[1]);
  assert_count(name, "1");
  const char *back[2] = {want[0], want[1]};
  cr_assert_eq(rlock_permit_semaphore_release_n(s, back, 2), 0);
  assert_count(name, "3");

  peer_stop(p);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* A MONITOR line's quoted arguments after the "]", unescaped (\xHH, \",
 * \\, \n, \r, \t): up to max, each into args[i] (cap bytes), lengths in
 * lens. Returns the count. */
#define ARG_CAP 128
static size_t monitor_args(const char *line, char (*args)[ARG_CAP],
                           size_t *lens, size_t max) {
  const char *p = strstr(line, "] ");
  size_t n = 0;
  if (p == NULL)
    return 0;
  p += 2;
  while (*p == '"' && n < max) {
    p++;
    size_t len = 0;
    while (*p != '\0' && *p != '"') {
      char ch = *p++;
      if (ch == '\\') {
        char e = *p++;
        if (e == 'x') {
          unsigned v = 0;
          sscanf(p, "%2x", &v);
          p += 2;
          ch = (char)v;
        } else {
          ch = e == 'n'   ? '\n'
               : e == 'r' ? '\r'
               : e == 't' ? '\t'
               : e == 'a' ? '\a'
               : e == 'b' ? '\b'
                          : e;
        }
      }
      if (len < ARG_CAP)
        args[n][len++] = ch;
    }
    args[n][len < ARG_CAP ? len : ARG_CAP - 1] = '\0';
    lens[n] = len;
    n++;
    if (*p == '"')
      p++;
    while (*p == ' ')
      p++;
  }
  return n;
}

/* args[i] holds the 16 raw bytes of the hex id. */
static void assert_raw_id(char (*args)[ARG_CAP], const size_t *lens, size_t i,
                          const char *hex) {
  cr_assert_eq(lens[i], 16, "argument %zu is %zu bytes, not a raw id", i,
               lens[i]);
  for (int b = 0; b < 16; b++) {
    unsigned v = 0;
    sscanf(hex + 2 * b, "%2x", &v);
    cr_assert_eq((unsigned char)args[i][b], v, "argument %zu is not id %s",
                 i, hex);
  }
}

/* The last line (EVALSHA, or EVAL after NOSCRIPT) whose KEYS start with
 * k1, k2, k3 (the 3 keys after numkeys "3"); its arguments in args. */
static size_t find_script(const monitor *m, const char *k1, const char *k2,
                          const char *k3, char (*args)[ARG_CAP], size_t *lens,
                          size_t max) {
  char needle[NEEDLE_MAX];
  snprintf(needle, sizeof needle, "\"3\" \"%s\" \"%s\" \"%s\"", k1, k2, k3);
  size_t found = (size_t)-1;
  for (size_t i = monitor_find(m, 0, needle); i != (size_t)-1;
       i = monitor_find(m, i + 1, needle))
    if (strstr(monitor_line(m, i), "lua]") == NULL)
      found = i;
  cr_assert_neq(found, (size_t)-1, "MONITOR: no script call with %s",
                needle);
  size_t n = monitor_args(monitor_line(m, found), args, lens, max);
  cr_assert(n >= 6, "MONITOR line: %s", monitor_line(m, found));
  return n;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Test(sync, pes_monitor_wire) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], zset[NAME_MAX_LEN + 16];
  rt_key(name, sizeof name, "sync:pes-mon");
  sem_channel(channel, sizeof channel, name);
  pes_zset(zset, sizeof zset, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock_permit_semaphore *s = pes_get(c, name);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 5), 1);
  char (*args)[ARG_CAP] = calloc(32, ARG_CAP);
  size_t lens[32];

  /* rlock's acquire of 2: KEYS name, zset, channel; ARGV first id,
   * expiry, now, PUBLISH, second id (docs/wire-protocol.md) */
  monitor *m = monitor_start();
  pes_id ids[2];
  int64_t t0 = wall_ms();
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 2, 0, 60000, ids), 1);
  int64_t t1 = wall_ms();
  monitor_sync(m);
  size_t n = find_script(m, name, zset, channel, args, lens, 32);
  cr_assert_eq(n, 11, "numkeys, 3 keys, 5 ARGV for 2 ids: %zu arguments", n);
  assert_raw_id(args, lens, 6, ids[0]);
  long long expiry = atoll(args[7]), now = atoll(args[8]);
  cr_assert(now >= t0 - 1000 && now <= t1 + 1000, "ARGV now %lld", now);
  cr_assert_eq(expiry, now + 60000, "ARGV expiry %lld, now %lld", expiry, now);
  cr_assert_str_eq(args[9], "PUBLISH");
  assert_raw_id(args, lens, 10, ids[1]);
  monitor_stop(m);

  /* rlock's release of the list: KEYS name, channel, zset; ARGV now,
   * PUBLISH, the ids; the message is the number released */
  m = monitor_start();
  const char *list[2] = {ids[0], ids[1]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, list, 2), 2);
  monitor_sync(m);
  n = find_script(m, name, channel, zset, args, lens, 32);
  cr_assert_eq(n, 10, "numkeys, 3 keys, now, PUBLISH, 2 ids: %zu", n);
  cr_assert_str_eq(args[7], "PUBLISH");
  assert_raw_id(args, lens, 8, ids[0]);
  assert_raw_id(args, lens, 9, ids[1]);
  assert_publish(m, channel, "2", 1);
  cr_assert_eq(monitor_count_of(m, "\"publish\" \"redisson_sc:"), 1,
               "one message: the number released, not the count (5)");
  monitor_stop(m);

  /* the peer's acquire of 3 and release of the 3 (Java's ARGV order) */
  m = monitor_start();
  const char *got = peer_call(p, "ACQUIRED", REPLY_BOUND_MS,
                              "pesacquire %s 3 0 -1", name);
  pes_id theirs[3];
  pes_parse_ids(got, theirs, 3);
  char csv[4 * 33];
  pes_join(csv, sizeof csv, theirs, 3);
  peer_call(p, "RELEASED 3", REPLY_BOUND_MS, "pesrelease %s %s", name, csv);
  monitor_sync(m);
  n = find_script(m, name, zset, channel, args, lens, 32);
  cr_assert_eq(n, 14, "numkeys, 3 keys, n, expiry, now, sentinel, PUBLISH, "
                      "3 ids: %zu", n);
  cr_assert_str_eq(args[6], "3");
  cr_assert_str_eq(args[7], "922337203685477");
  cr_assert_str_eq(args[9], "922337203685477");
  cr_assert_str_eq(args[10], "PUBLISH");
  for (int i = 0; i < 3; i++)
    assert_raw_id(args, lens, 11 + (size_t)i, theirs[i]);
  n = find_script(m, name, channel, zset, args, lens, 32);
  cr_assert_eq(n, 12, "numkeys, 3 keys, count, now, PUBLISH, 3 ids: %zu", n);
  cr_assert_str_eq(args[6], "3");
  cr_assert_str_eq(args[8], "PUBLISH");
  for (int i = 0; i < 3; i++)
    assert_raw_id(args, lens, 9 + (size_t)i, theirs[i]);
  assert_publish(m, channel, "3", 1);
  cr_assert_eq(monitor_count_of(m, "\"publish\" \"redisson_sc:"), 1,
               "the peer's release: one message, 3 released");
  assert_only_channel(m, "redisson_sc:", channel);
  monitor_stop(m);
  assert_count(name, "5");

  free(args);
  peer_stop(p);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}
