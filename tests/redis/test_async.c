/*
 * Asynchronous API, explicit owners and cancellable waits (issue 7), against
 * a real redis-server:
 *
 *  - every async operation's callback fires exactly once, with what the
 *    blocking call would return, on the client's loop thread; a call that
 *    returns an error never fires its callback;
 *  - rlock_req_cancel(), rlock_client_interrupt() and rlock_client_free() end pending
 *    acquires with RLOCK_ECANCELED / RLOCK_ECLOSED and leave no hold, no
 *    renewal and no subscription behind - also when they race with the lock
 *    changing hands;
 *  - an explicit owner can lock on one thread and unlock on another;
 *  - 10 000 async waiters on one lock all get it in turn, at a bounded
 *    memory cost per waiter.
 *
 * "Exactly once" is checked after rlock_client_free(): close joins the loop
 * thread, so no callback can fire after it returned and the counts are
 * final.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <inttypes.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

/* Heap bytes in use: the sanitizers' allocators bypass glibc's arenas, so
 * mallinfo2() would not see what rlock allocates under them. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ASYNC_SANITIZER_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ASYNC_SANITIZER_HEAP 1
#endif
#endif
#ifdef ASYNC_SANITIZER_HEAP
/* From <sanitizer/allocator_interface.h>, which gcc does not install. */
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t heap_in_use(void) {
  return __sanitizer_get_current_allocated_bytes();
}
#define HEAP_SOURCE "sanitizer allocator"
#else
#define HEAP_SOURCE "mallinfo2 uordblks+hblkhd"
static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd; /* small chunks + mmapped big ones */
}
#endif

TestSuite(async, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 120);

#define KEY_MAX 160
#define CHAN_MAX 256
#define OWNER_MAX 96
#define CB_BOUND_MS 10000
#define JOIN_BOUND_MS 15000

/* ---- one callback's record ----
 * Written on the loop thread, read by the test's main thread: atomics. */

typedef struct rec {
  atomic_int calls;
  atomic_int status;
  _Atomic int64_t value;
  _Atomic uint64_t tid;   /* rlock_thread_id() of the thread it ran on */
  atomic_int blocking_rc; /* a blocking call made inside the callback */
  _Atomic int64_t at_ms;  /* rt_now_ms() when it ran */
  rlock *probe;           /* lock for the blocking probe, or NULL */
} rec;

static void rec_init(rec *r, rlock *probe) {
  memset(r, 0, sizeof *r);
  atomic_init(&r->calls, 0);
  atomic_init(&r->status, 12345);
  atomic_init(&r->blocking_rc, 12345);
  r->probe = probe;
}

static void rec_cb(int status, int64_t value, void *data) {
  rec *r = data;
  atomic_store(&r->status, status);
  atomic_store(&r->value, value);
  atomic_store(&r->tid, rlock_thread_id());
  atomic_store(&r->at_ms, rt_now_ms());
  /* A blocking call must be refused on the loop thread: proves where the
   * callback runs. */
  if (r->probe != NULL)
    atomic_store(&r->blocking_rc, rlock_is_locked(r->probe));
  atomic_fetch_add(&r->calls, 1); /* last: publishes the fields above */
}

static bool rec_fired(void *arg) {
  return atomic_load(&((rec *)arg)->calls) > 0;
}

/* Waits for the callback and returns its status. */
static int rec_wait(rec *r, const char *what) {
  rt_wait_until_what(rec_fired, r, CB_BOUND_MS, what);
  return atomic_load(&r->status);
}

/* Polled conditions. */
static bool has_subscriber(void *channel) { return rt_numsub(channel) >= 1; }
static bool no_channels(void *arg) {
  (void)arg;
  return rt_pubsub_channels(NULL, 0) == 0;
}
static bool key_gone(void *key) { return rt_exists(key) == 0; }

static void owner_field(char *buf, size_t n, rlock_client *c, uint64_t owner) {
  rt_owner(buf, n, c, owner);
}

/* ---- every operation: status, value, thread ---- */

/* Starts one async op (by kind), waits for its callback, checks that it ran
 * on the loop thread, returns the status and stores the value. */
typedef enum async_kind {
  A_LOCK,
  A_UNLOCK,
  A_FORCE,
  A_IS_LOCKED,
  A_IS_HELD,
  A_HOLD_COUNT,
  A_TTL,
} async_kind;

typedef struct op_ctx {
  rlock *lock;
  uint64_t loop_tid; /* 0 until the first callback told us */
  rec recs[64];
  size_t n_recs;
  char value_errors[512]; /* `value` not 0 where rlock.h says "else 0" */
} op_ctx;

/* rlock.h: `value` is the hold count or the TTL, "else 0". Collected and
 * asserted at the end, so the other checks still run. */
static void doc_value(op_ctx *ox, const char *call, int64_t value) {
  if (value == 0)
    return;
  size_t used = strlen(ox->value_errors);
  snprintf(ox->value_errors + used, sizeof ox->value_errors - used,
           "%s%s gave value %" PRId64, used ? ", " : "", call, value);
}

static int run_op(op_ctx *ox, async_kind kind, uint64_t owner, int64_t wait_ms,
                  int64_t lease_ms, int64_t *value) {
  cr_assert_lt(ox->n_recs, sizeof ox->recs / sizeof ox->recs[0]);
  rec *r = &ox->recs[ox->n_recs++];
  rec_init(r, ox->lock);
  rlock_req *req = (rlock_req *)&req; /* must be overwritten */
  int rc = -100;
  switch (kind) {
  case A_LOCK:
    rc = rlock_lock_async(ox->lock, owner, wait_ms, lease_ms, rec_cb, r, &req);
    break;
  case A_UNLOCK:
    rc = rlock_unlock_async(ox->lock, owner, rec_cb, r, &req);
    break;
  case A_FORCE:
    rc = rlock_force_unlock_async(ox->lock, rec_cb, r, &req);
    break;
  case A_IS_LOCKED:
    rc = rlock_is_locked_async(ox->lock, rec_cb, r, &req);
    break;
  case A_IS_HELD:
    rc = rlock_is_held_async(ox->lock, owner, rec_cb, r, &req);
    break;
  case A_HOLD_COUNT:
    rc = rlock_hold_count_async(ox->lock, owner, rec_cb, r, &req);
    break;
  case A_TTL:
    rc = rlock_remain_ttl_async(ox->lock, rec_cb, r, &req);
    break;
  }
  cr_assert_eq(rc, 0, "async op %d: %s (%s)", (int)kind, rlock_err_name(rc),
               rlock_last_error());
  cr_assert(req != NULL && req != (rlock_req *)&req,
            "async op %d: no request handle", (int)kind);
  int status = rec_wait(r, "async callback");
  rlock_req_free(req);

  uint64_t tid = atomic_load(&r->tid);
  cr_assert_neq(tid, rlock_thread_id(),
                "callback ran on the calling thread");
  if (ox->loop_tid == 0)
    ox->loop_tid = tid;
  cr_assert_eq(tid, ox->loop_tid, "callbacks ran on different threads");
  cr_assert_eq(atomic_load(&r->blocking_rc), RLOCK_EDEADLK,
               "a blocking call inside the callback returned %d, not "
               "RLOCK_EDEADLK: not on the client's loop thread",
               atomic_load(&r->blocking_rc));
  if (value != NULL)
    *value = atomic_load(&r->value);
  return status;
}

Test(async, every_op_reports_status_and_value_on_loop_thread) {
  char key[KEY_MAX], fx[OWNER_MAX], fy[OWNER_MAX];
  rt_key(key, sizeof key, "async-ops");
  rlock_client *c = rt_client();
  static op_ctx ox;
  memset(&ox, 0, sizeof ox);
  ox.lock = rt_lock(c, key);
  uint64_t x = rlock_owner_new(), y = rlock_owner_new();
  owner_field(fx, sizeof fx, c, x);
  owner_field(fy, sizeof fy, c, y);
  int64_t v = -99;

  /* Nothing held yet. */
  cr_assert_eq(run_op(&ox, A_IS_LOCKED, 0, 0, 0, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(run_op(&ox, A_TTL, 0, 0, 0, &v), 0);
  cr_assert_eq(v, -2, "remain_ttl of a missing key: %" PRId64, v);
  cr_assert_eq(run_op(&ox, A_HOLD_COUNT, x, 0, 0, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(run_op(&ox, A_FORCE, 0, 0, 0, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(run_op(&ox, A_UNLOCK, x, 0, 0, &v), RLOCK_ENOTOWNER);
  cr_assert_eq(v, 0);

  /* Acquire (watchdog), re-enter with a lease. */
  cr_assert_eq(run_op(&ox, A_LOCK, x, -1, -1, &v), 1);
  cr_assert_eq(v, 0);
  char *count = rt_hget(key, fx);
  cr_assert(count != NULL && strcmp(count, "1") == 0, "HGET %s %s = %s", key,
            fx, count ? count : "(nil)");
  free(count);
  cr_assert_eq(rt_hlen(key), 1);
  cr_assert_eq(run_op(&ox, A_LOCK, x, 0, 10000, &v), 1);
  count = rt_hget(key, fx);
  cr_assert(count != NULL && strcmp(count, "2") == 0);
  free(count);

  cr_assert_eq(run_op(&ox, A_HOLD_COUNT, x, 0, 0, &v), 0);
  cr_assert_eq(v, 2, "hold_count value %" PRId64, v);
  cr_assert_eq(run_op(&ox, A_HOLD_COUNT, y, 0, 0, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(run_op(&ox, A_IS_HELD, x, 0, 0, &v), 1);
  doc_value(&ox, "rlock_is_held_async", v);
  cr_assert_eq(run_op(&ox, A_IS_HELD, y, 0, 0, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(run_op(&ox, A_IS_LOCKED, 0, 0, 0, &v), 1);
  doc_value(&ox, "rlock_is_locked_async", v);
  cr_assert_eq(run_op(&ox, A_TTL, 0, 0, 0, &v), 0);
  cr_assert(v > 0 && v <= 10000, "remain_ttl after a 10 s lease: %" PRId64, v);
  long long pttl = rt_pttl(key);
  cr_assert(v >= pttl - 1000 && v <= pttl + 1000,
            "remain_ttl %" PRId64 " far from PTTL %lld", v, pttl);

  /* Another owner: not acquired (no wait; short wait). */
  cr_assert_eq(run_op(&ox, A_LOCK, y, 0, -1, &v), 0);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(run_op(&ox, A_LOCK, y, 150, -1, &v), 0);
  int64_t waited = atomic_load(&ox.recs[ox.n_recs - 1].at_ms) - t0;
  cr_assert(waited >= 140 && waited < 3000,
            "a 150 ms wait ended after %" PRId64 " ms", waited);
  cr_assert_eq(run_op(&ox, A_UNLOCK, y, 0, 0, &v), RLOCK_ENOTOWNER);
  cr_assert_eq(rt_hlen(key), 1, "a failed acquire left a field");
  cr_assert_null(rt_hget(key, fy));

  /* Release both holds. */
  cr_assert_eq(run_op(&ox, A_UNLOCK, x, 0, 0, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(rt_exists(key), 1);
  cr_assert_eq(run_op(&ox, A_UNLOCK, x, 0, 0, &v), 1);
  cr_assert_eq(v, 0);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(run_op(&ox, A_UNLOCK, x, 0, 0, &v), RLOCK_ENOTOWNER);

  /* Force unlock of a held lock. */
  cr_assert_eq(run_op(&ox, A_LOCK, y, 0, 5000, &v), 1);
  cr_assert_eq(run_op(&ox, A_FORCE, 0, 0, 0, &v), 1);
  doc_value(&ox, "rlock_force_unlock_async", v);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(run_op(&ox, A_IS_LOCKED, 0, 0, 0, &v), 0);

  rlock_free(ox.lock); /* nothing pending any more */
  rlock_client_free(c);
  for (size_t i = 0; i < ox.n_recs; i++)
    cr_assert_eq(atomic_load(&ox.recs[i].calls), 1,
                 "callback %zu fired %d times", i,
                 atomic_load(&ox.recs[i].calls));
  cr_expect_eq(ox.value_errors[0], '\0',
               "rlock.h documents value 0 for these: %s", ox.value_errors);
}

/* ---- a call that fails never fires its callback ---- */

Test(async, failed_call_never_fires_callback) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "async-einval");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  static rec r[16];
  for (size_t i = 0; i < 16; i++)
    rec_init(&r[i], NULL);
  rlock_req *req = (rlock_req *)&req;

  cr_assert_eq(rlock_lock_async(lock, 1, -1, 0, rec_cb, &r[0], &req),
               RLOCK_EINVAL);
  cr_assert_null(req, "a failed call left a request handle");
  req = (rlock_req *)&req;
  cr_assert_eq(rlock_lock_async(lock, 1, -1, INT64_MAX, rec_cb, &r[1], &req),
               RLOCK_EINVAL);
  cr_assert_null(req);
  cr_assert_eq(rlock_lock_async(NULL, 1, -1, -1, rec_cb, &r[2], &req),
               RLOCK_EINVAL);
  cr_assert_eq(rlock_unlock_async(NULL, 1, rec_cb, &r[2], NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_is_locked_async(NULL, rec_cb, &r[2], NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_req_cancel(NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_client_interrupt(NULL, 1), RLOCK_EINVAL);
  rlock_req_free(NULL);

  /* rlock_req_cancel only takes acquires. */
  rlock_req *query = NULL;
  cr_assert_eq(rlock_is_locked_async(lock, rec_cb, &r[3], &query), 0);
  cr_assert_eq(rlock_req_cancel(query), RLOCK_EINVAL);
  cr_assert_eq(rec_wait(&r[3], "is_locked callback"), 0);
  rlock_req_free(query);
  cr_assert_eq(rt_exists(key), 0, "a refused acquire reached Redis");

  /* A pending acquire, then close: it gets RLOCK_ECLOSED; calls made after
   * the close fail and never call back. */
  rlock_client *holder_c = rt_client();
  rlock *held = rt_lock(holder_c, key);
  cr_assert_eq(rlock_lock(held, 20000), 0);
  rlock_req *pending = NULL;
  cr_assert_eq(rlock_lock_async(lock, 7, -1, -1, rec_cb, &r[4], &pending), 0);
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&r[4].calls), 1, "pending acquire at close");
  cr_assert_eq(atomic_load(&r[4].status), RLOCK_ECLOSED);
  cr_assert_eq(rlock_req_cancel(pending), RLOCK_ECLOSED);
  rlock_req_free(pending);

  req = (rlock_req *)&req;
  cr_assert_eq(rlock_lock_async(lock, 1, -1, -1, rec_cb, &r[5], &req),
               RLOCK_ECLOSED);
  cr_assert_null(req);
  cr_assert_eq(rlock_unlock_async(lock, 1, rec_cb, &r[6], &req),
               RLOCK_ECLOSED);
  cr_assert_eq(rlock_force_unlock_async(lock, rec_cb, &r[7], &req),
               RLOCK_ECLOSED);
  cr_assert_eq(rlock_is_locked_async(lock, rec_cb, &r[8], &req),
               RLOCK_ECLOSED);
  cr_assert_eq(rlock_is_held_async(lock, 1, rec_cb, &r[9], &req),
               RLOCK_ECLOSED);
  cr_assert_eq(rlock_hold_count_async(lock, 1, rec_cb, &r[10], &req),
               RLOCK_ECLOSED);
  cr_assert_eq(rlock_remain_ttl_async(lock, rec_cb, &r[11], &req),
               RLOCK_ECLOSED);
  cr_assert_null(req);
  cr_assert_eq(rlock_lock_async(lock, 1, -1, -1, rec_cb, &r[12], NULL),
               RLOCK_ECLOSED);
  cr_assert_eq(rlock_lock_async(lock, 1, -1, 0, rec_cb, &r[13], NULL),
               RLOCK_EINVAL, "argument checks come first");

  /* The loop thread is gone: whatever did not fire by now never will. */
  for (size_t i = 0; i < 16; i++) {
    if (i == 3 || i == 4)
      continue;
    cr_assert_eq(atomic_load(&r[i].calls), 0,
                 "callback %zu fired after its call failed", i);
  }
  rlock_free(lock);
  cr_assert_eq(rlock_unlock(held), 0);
  rlock_free(held);
  rlock_client_free(holder_c);
}

/* ---- cancel a pending acquire from another thread ---- */

typedef struct cancel_call {
  rlock_req *req;
  atomic_int rc;
  _Atomic int64_t at_ms;
} cancel_call;

static void cancel_thread(void *arg) {
  cancel_call *cc = arg;
  atomic_store(&cc->at_ms, rt_now_ms());
  atomic_store(&cc->rc, rlock_req_cancel(cc->req));
}

static atomic_int lost_calls;
static void count_lost(const char *name, const char *owner, void *data) {
  (void)name;
  (void)owner;
  (void)data;
  atomic_fetch_add(&lost_calls, 1);
}

Test(async, cancel_pending_acquire_from_other_thread) {
  char key[KEY_MAX], chan[CHAN_MAX], fx[OWNER_MAX], fh[OWNER_MAX];
  rt_key(key, sizeof key, "async-cancel");
  rt_lock_channel(chan, sizeof chan, key);
  atomic_store(&lost_calls, 0);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 600; /* renewals every 200 ms */
  o.on_lock_lost = count_lost;
  rlock_client *c = rt_client_opts(&o);
  rlock *lock = rt_lock(c, key);
  uint64_t h = rlock_owner_new(), x = rlock_owner_new();
  owner_field(fx, sizeof fx, c, x);
  owner_field(fh, sizeof fh, c, h);

  cr_assert_eq(rlock_lock_owner(lock, h, 8000), 0);
  static rec r;
  rec_init(&r, NULL);
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &r, &req), 0);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  cr_assert_eq(atomic_load(&r.calls), 0, "acquire returned while held");

  cancel_call cc = {.req = req};
  atomic_init(&cc.rc, 12345);
  rt_thread th;
  rt_thread_start(&th, cancel_thread, &cc);
  rt_thread_join(&th, JOIN_BOUND_MS);
  cr_assert_eq(atomic_load(&cc.rc), 0, "rlock_req_cancel: %s",
               rlock_err_name(atomic_load(&cc.rc)));
  cr_assert_eq(rec_wait(&r, "canceled callback"), RLOCK_ECANCELED,
               "status %s", rlock_err_name(atomic_load(&r.status)));
  int64_t took = atomic_load(&r.at_ms) - atomic_load(&cc.at_ms);
  cr_assert_lt(took, 1000, "cancel took %" PRId64 " ms", took);

  /* Canceling again, or after the callback, changes nothing. */
  cr_assert_eq(rlock_req_cancel(req), 0);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rlock_req_free(req);

  /* No hold for x, the holder untouched. */
  cr_assert_eq(rt_int("HEXISTS %s %s", key, fx), 0);
  cr_assert_eq(rt_hlen(key), 1);
  char *hc = rt_hget(key, fh);
  cr_assert(hc != NULL && strcmp(hc, "1") == 0, "holder's count %s",
            hc ? hc : "(nil)");
  free(hc);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 0 && pttl <= 8000, "holder's PTTL %lld", pttl);
  cr_assert_eq(rlock_is_held_owner(lock, x), 0);
  cr_assert_eq(rlock_hold_count_owner(lock, x), 0);

  /* No renewal for x: a hold the client wrongly believed in would be
   * renewed every 200 ms and, not being in Redis, reported lost. This is a
   * negative check, so it has to let a few renewal periods pass. */
  rt_sleep_ms(700);
  cr_assert_eq(atomic_load(&lost_calls), 0, "on_lock_lost fired");
  cr_assert_eq(rt_int("HEXISTS %s %s", key, fx), 0);
  long long pttl2 = rt_pttl(key);
  cr_assert(pttl2 > 0 && pttl2 < pttl, "holder's lease renewed? %lld -> %lld",
            pttl, pttl2);

  /* The waiter left the channel: after the holder's unlock nothing is
   * subscribed and nobody took the lock. */
  cr_assert_eq(rlock_unlock_owner(lock, h), 0);
  rt_wait_until_what(no_channels, NULL, 3000, "PUBSUB CHANNELS empty");
  cr_assert_eq(rt_exists(key), 0);
  rt_sleep_ms(300); /* a stray late acquire would show up here */
  cr_assert_eq(rt_exists(key), 0, "the canceled acquire took the lock");

  rlock_free(lock);
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&r.calls), 1);
  cr_assert_eq(atomic_load(&lost_calls), 0);
}

/* ---- cancels while the try is in flight (the server paused) ----
 * CLIENT PAUSE holds every command on the server, so a cancel reaches the
 * client while the acquire's try is certainly still unanswered: the try
 * then runs on the server after all and the client must trim it away. */

static bool field_gone(void *arg) {
  const char *const *kf = arg;
  return rt_int("HEXISTS %s %s", kf[0], kf[1]) == 0;
}

Test(async, two_cancels_in_flight_leave_no_phantom_hold) {
  char key[KEY_MAX], fx[OWNER_MAX];
  rt_key(key, sizeof key, "async-inflight2");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  uint64_t x = rlock_owner_new();
  owner_field(fx, sizeof fx, c, x);
  /* Load the scripts first: a cancelled EVALSHA never falls back to EVAL. */
  cr_assert_eq(rlock_lock_owner(lock, x, -1), 0);
  cr_assert_eq(rlock_unlock_owner(lock, x), 0);
  static rec r1, r2, r3;
  rec_init(&r1, NULL);
  rec_init(&r2, NULL);
  rec_init(&r3, NULL);
  rlock_req *q1 = NULL, *q2 = NULL, *q3 = NULL;
  /* Load the trim script too: one cancelled in-flight try. */
  rt_ok("OK", "CLIENT PAUSE 200 ALL");
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &r3, &q3), 0);
  cr_assert_eq(rlock_req_cancel(q3), 0);
  cr_assert_eq(rec_wait(&r3, "warm-up cancel"), RLOCK_ECANCELED);
  const char *kf[2] = {key, fx};
  rt_wait_until_what(field_gone, kf, 3000, "warm-up trimmed");

  /* The same owner twice, each cancelled while its try is held. */
  rt_ok("OK", "CLIENT PAUSE 300 ALL");
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &r1, &q1), 0);
  cr_assert_eq(rlock_req_cancel(q1), 0);
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &r2, &q2), 0);
  cr_assert_eq(rlock_req_cancel(q2), 0);
  cr_assert_eq(rec_wait(&r1, "first cancel"), RLOCK_ECANCELED);
  cr_assert_eq(rec_wait(&r2, "second cancel"), RLOCK_ECANCELED);
  bool gone = rt_poll_until(field_gone, kf, 3000);
  char *count = gone ? NULL : rt_hget(key, fx);
  char shown[32];
  snprintf(shown, sizeof shown, "%s", count ? count : "(nil)");
  free(count);
  long long pttl = rt_pttl(key);
  rlock_req_free(q1);
  rlock_req_free(q2);
  rlock_req_free(q3);
  rlock_free(lock);
  rlock_client_free(c);
  cr_assert(gone,
            "phantom hold: after two cancelled acquires HGET %s <owner> = %s "
            "(PTTL %lld ms); the second try's trim was never sent (its "
            "suspect was merged into the first one's, whose trim had "
            "already gone out)",
            key, shown, pttl);
  cr_assert_eq(rt_exists(key), 0);
}

Test(async, cancel_in_flight_then_reacquire_keeps_new_hold) {
  char key[KEY_MAX], fx[OWNER_MAX];
  rt_key(key, sizeof key, "async-inflight-reacq");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  uint64_t x = rlock_owner_new();
  owner_field(fx, sizeof fx, c, x);
  /* A fresh server: acquire and release scripts get cached here, the trim
   * script (only used after cancels and lost replies) is not yet. */
  rt_ok("OK", "SCRIPT FLUSH");
  cr_assert_eq(rlock_lock_owner(lock, x, -1), 0);
  cr_assert_eq(rlock_unlock_owner(lock, x), 0);

  static rec r1, r2;
  rec_init(&r1, NULL);
  rec_init(&r2, NULL);
  rlock_req *q1 = NULL;
  rt_ok("OK", "CLIENT PAUSE 300 ALL");
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &r1, &q1), 0);
  cr_assert_eq(rlock_req_cancel(q1), 0);
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &r2, NULL), 0);
  cr_assert_eq(rec_wait(&r1, "cancelled acquire"), RLOCK_ECANCELED);
  cr_assert_eq(rec_wait(&r2, "second acquire"), 1);
  /* Let the cancelled try's trim land (it is behind the second try). */
  rt_sleep_ms(300);
  char *count = rt_hget(key, fx);
  bool held = count != NULL && strcmp(count, "1") == 0;
  cr_expect(held,
            "the second acquire returned 1 but HGET %s <owner> = %s: the "
            "first try's trim (NOSCRIPT, re-sent as EVAL behind the second "
            "try) deleted the new hold",
            key, count ? count : "(nil)");
  free(count);
  /* Nobody else may get the lock while x holds it. */
  rlock_client *other_c = rt_client();
  rlock *other = rt_lock(other_c, key);
  int other_rc = rlock_try_lock(other, 0, 5000);
  cr_expect_eq(other_rc, 0, "another client acquired a lock owner x holds");
  if (other_rc == 1)
    cr_assert_eq(rlock_unlock(other), 0);
  rlock_free(other);
  rlock_client_free(other_c);
  cr_expect_eq(rlock_unlock_owner(lock, x), 0);
  rlock_req_free(q1);
  rlock_free(lock);
  rlock_client_free(c);
}

/* ---- a bounded wait that ends before the subscription is confirmed ----
 * Two acquires wait for the same SUBSCRIBE confirmation; the bounded one's
 * deadline passes first. The other must still be woken by the release. A
 * callback that holds the loop thread for 200 ms (callbacks must not block;
 * here it is the test's way to delay the confirmation) makes the order
 * certain: both tries are answered and joined, then the loop stalls, then
 * the expired deadline is handled before the confirmation is read. */

static void stall_loop_cb(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  rt_sleep_ms(200);
  atomic_fetch_add((atomic_int *)data, 1);
}

Test(async, expired_wait_before_subscribe_keeps_other_waiters) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "async-expire-awaitsub");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  uint64_t h = rlock_owner_new(), a = rlock_owner_new(),
           b = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(lock, h, 20000), 0);

  static rec ra, rb;
  static atomic_int stalled;
  rec_init(&ra, NULL);
  rec_init(&rb, NULL);
  atomic_store(&stalled, 0);
  cr_assert_eq(rlock_lock_async(lock, a, -1, -1, rec_cb, &ra, NULL), 0);
  cr_assert_eq(rlock_lock_async(lock, b, 100, -1, rec_cb, &rb, NULL), 0);
  cr_assert_eq(rlock_is_locked_async(lock, stall_loop_cb, &stalled, NULL), 0);
  cr_assert_eq(rec_wait(&rb, "bounded wait"), 0, "bounded wait: %s",
               rlock_err_name(atomic_load(&rb.status)));
  rt_wait_until_what(has_subscriber, chan, 5000, "subscribed");

  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_unlock_owner(lock, h), 0);
  /* The release wakes a at once (2 s is generous); a waiter dropped from
   * the confirmation list would sit out subscribe_timeout_ms (7.5 s) and
   * then fail with RLOCK_ETIMEDOUT. */
  bool woke = rt_poll_until(rec_fired, &ra, 2000);
  if (!woke)
    rec_wait(&ra, "unbounded waiter");
  int64_t took = atomic_load(&ra.at_ms) - t0;
  cr_assert(woke && atomic_load(&ra.status) == 1,
            "the other waiter got %s after %" PRId64 " ms instead of the "
            "lock: it was dropped from the subscription's confirm list when "
            "the bounded wait expired (op_timer_fire unlinks it, then "
            "rlock__sub_unwait unlinks it again and empties the list)",
            rlock_err_name(atomic_load(&ra.status)), took);
  cr_assert_eq(rlock_unlock_owner(lock, a), 0);
  cr_assert_eq(rt_exists(key), 0);
  rt_wait_until_what(no_channels, NULL, 3000, "PUBSUB CHANNELS empty");
  rlock_free(lock);
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&ra.calls), 1);
  cr_assert_eq(atomic_load(&rb.calls), 1);
  cr_assert_eq(atomic_load(&stalled), 1);
}

/* ---- rlock_req_free before and after the callback ---- */

Test(async, req_free_before_and_after_callback) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "async-reqfree");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  uint64_t h = rlock_owner_new(), x = rlock_owner_new(),
           y = rlock_owner_new();
  static rec rx, ry, rq, rn;
  rec_init(&rx, NULL);
  rec_init(&ry, NULL);
  rec_init(&rq, NULL);
  rec_init(&rn, NULL);
  cr_assert_eq(rlock_lock_owner(lock, h, -1), 0);

  /* Freed at once: the acquire goes on and calls back. */
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &rx, &req), 0);
  rlock_req_free(req);
  /* Canceled and freed at once: the cancel still lands. */
  req = NULL;
  cr_assert_eq(rlock_lock_async(lock, y, -1, -1, rec_cb, &ry, &req), 0);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rlock_req_free(req);
  cr_assert_eq(rec_wait(&ry, "canceled acquire"), RLOCK_ECANCELED);
  /* No handle asked for. */
  cr_assert_eq(rlock_is_locked_async(lock, rec_cb, &rn, NULL), 0);
  cr_assert_eq(rec_wait(&rn, "is_locked"), 1);

  rt_wait_until_what(has_subscriber, chan, 5000, "x subscribed");
  cr_assert_eq(atomic_load(&rx.calls), 0);
  cr_assert_eq(rlock_unlock_owner(lock, h), 0);
  cr_assert_eq(rec_wait(&rx, "x acquires"), 1);
  cr_assert_eq(rlock_is_held_owner(lock, x), 1);

  /* Freed after the callback. */
  req = NULL;
  cr_assert_eq(rlock_unlock_async(lock, x, rec_cb, &rq, &req), 0);
  cr_assert_eq(rec_wait(&rq, "x unlocks"), 1);
  rlock_req_free(req);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rlock_is_held_owner(lock, y), 0);

  /* Freeing the lock handle while an async op is pending is allowed. */
  rlock *lock2 = rt_lock(c, key);
  static rec r2;
  rec_init(&r2, NULL);
  cr_assert_eq(rlock_lock_async(lock2, x, -1, 5000, rec_cb, &r2, NULL), 0);
  rlock_free(lock2);
  cr_assert_eq(rec_wait(&r2, "acquire on a freed handle"), 1);
  cr_assert_eq(rlock_unlock_owner(lock, x), 0);

  rlock_free(lock);
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&rx.calls), 1);
  cr_assert_eq(atomic_load(&ry.calls), 1);
  cr_assert_eq(atomic_load(&rq.calls), 1);
  cr_assert_eq(atomic_load(&rn.calls), 1);
  cr_assert_eq(atomic_load(&r2.calls), 1);
}

/* ---- cancel races ---- */

#define RACE_N 500

typedef struct race_slot {
  struct race_ctx *ctx;
  size_t index;
  uint64_t owner;
  _Atomic int64_t submitted_us; /* when rlock_lock_async returned */
  _Atomic(rlock_req *) req;
  atomic_int calls;
  atomic_int status;
  atomic_int unlock_calls;
  atomic_int unlock_status;
} race_slot;

typedef struct race_ctx {
  rlock *lock;
  race_slot slots[RACE_N];
  atomic_int fired;
  atomic_int acquired;
  atomic_int not_acquired;
  atomic_int canceled;
  atomic_int other;
  atomic_int first_other;
  atomic_int unlocked;
  atomic_int unlock_sent;
  atomic_int cancel_errors;
  atomic_int loop_cancels;
  atomic_bool stop_churn;
  atomic_int churn_rounds;
  atomic_int churn_errors;
  rlock *churn_lock;
} race_ctx;

/* xorshift64*, one state per thread. */
static uint64_t rnd_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

static void race_unlock_cb(int status, int64_t value, void *data) {
  (void)value;
  race_slot *s = data;
  atomic_store(&s->unlock_status, status);
  atomic_fetch_add(&s->unlock_calls, 1);
  atomic_fetch_add(&s->ctx->unlocked, 1);
}

static void race_acquire_cb(int status, int64_t value, void *data) {
  (void)value;
  race_slot *s = data;
  race_ctx *rx = s->ctx;
  atomic_store(&s->status, status);
  if (status == 1) {
    atomic_fetch_add(&rx->acquired, 1);
    /* Cancel another request from the loop thread too: it may still be
     * queued, waiting, mid-try or long done. */
    race_slot *other = &rx->slots[(s->index * 7919 + 13) % RACE_N];
    rlock_req *oreq = atomic_load(&other->req);
    if (oreq != NULL) {
      if (rlock_req_cancel(oreq) != 0)
        atomic_fetch_add(&rx->cancel_errors, 1);
      atomic_fetch_add(&rx->loop_cancels, 1);
    }
    int rc = rlock_unlock_async(rx->lock, s->owner, race_unlock_cb, s, NULL);
    if (rc == 0)
      atomic_fetch_add(&rx->unlock_sent, 1);
    else {
      atomic_store(&s->unlock_status, rc);
      atomic_fetch_add(&rx->other, 1);
    }
  } else if (status == 0 ||
             /* a bounded (20 ms) wait that ran out before the server's
              * first answer (a slow valgrind run): wait_ms bounds the call,
              * and the try is trimmed behind it (checked below: no hold) */
             (status == RLOCK_ETIMEDOUT && s->index % 5 == 4)) {
    atomic_fetch_add(&rx->not_acquired, 1);
  } else if (status == RLOCK_ECANCELED) {
    atomic_fetch_add(&rx->canceled, 1);
  } else {
    atomic_store(&rx->first_other, status);
    atomic_fetch_add(&rx->other, 1);
  }
  atomic_fetch_add(&s->calls, 1);
  atomic_fetch_add(&rx->fired, 1);
}

/* Another owner (on another client) takes and releases the lock over and
 * over, holding it for 1-4 ms. */
static void churn_thread(void *arg) {
  race_ctx *rx = arg;
  uint64_t seed = 0x9e3779b97f4a7c15u;
  while (!atomic_load(&rx->stop_churn)) {
    int rc = rlock_try_lock(rx->churn_lock, 2000, -1);
    if (rc == 1) {
      rt_sleep_ms(1 + (int64_t)(rnd_next(&seed) % 4));
      if (rlock_unlock(rx->churn_lock) != 0)
        atomic_fetch_add(&rx->churn_errors, 1);
    } else if (rc < 0) {
      atomic_fetch_add(&rx->churn_errors, 1);
    }
    atomic_fetch_add(&rx->churn_rounds, 1);
    rt_sleep_ms((int64_t)(rnd_next(&seed) % 2));
  }
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_until_us(int64_t at_us) {
  int64_t d = at_us - now_us();
  if (d <= 0)
    return;
  struct timespec ts = {.tv_sec = (time_t)(d / 1000000),
                        .tv_nsec = (long)(d % 1000000) * 1000L};
  nanosleep(&ts, NULL);
}

/* Cancels the requests in order, each 0-4 ms after it was submitted (some
 * at once, some never), so cancels land in every state of an acquire:
 * queued, try in flight, subscribing, sleeping, done. */
static void canceller_thread(void *arg) {
  race_ctx *rx = arg;
  uint64_t seed = 0x2545f4914f6cdd1du;
  for (size_t i = 0; i < RACE_N; i++) {
    race_slot *s = &rx->slots[i];
    rlock_req *req;
    int64_t deadline = rt_now_ms() + 30000;
    while ((req = atomic_load(&s->req)) == NULL && rt_now_ms() < deadline)
      sleep_until_us(now_us() + 100);
    if (req == NULL)
      return;
    uint64_t pick = rnd_next(&seed) % 8;
    if (pick == 0)
      continue; /* never canceled */
    if (pick > 1)
      sleep_until_us(atomic_load(&s->submitted_us) +
                     (int64_t)(rnd_next(&seed) % 4000));
    if (rlock_req_cancel(req) != 0)
      atomic_fetch_add(&rx->cancel_errors, 1);
  }
}

static bool race_all_fired(void *arg) {
  race_ctx *rx = arg;
  return atomic_load(&rx->fired) >= RACE_N;
}
static bool race_all_unlocked(void *arg) {
  race_ctx *rx = arg;
  return atomic_load(&rx->unlocked) >= atomic_load(&rx->unlock_sent);
}

/* Fields of `c` still in the lock hash (phantom holds). */
static size_t fields_of_client(const char *key, rlock_client *c, char *first,
                               size_t n) {
  redisReply *r = rt_cmd("HKEYS %s", key);
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  size_t count = 0;
  const char *id = rlock_client_id(c);
  if (first != NULL && n > 0)
    first[0] = '\0';
  for (size_t i = 0; i < r->elements; i++) {
    if (strncmp(r->element[i]->str, id, RLOCK_ID_LEN) == 0) {
      if (count == 0 && first != NULL)
        snprintf(first, n, "%s", r->element[i]->str);
      count++;
    }
  }
  freeReplyObject(r);
  return count;
}

Test(async, cancel_races_leave_no_phantom_holds) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "async-race");
  atomic_store(&lost_calls, 0);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 1500;
  o.on_lock_lost = count_lost;
  rlock_client *c = rt_client_opts(&o);
  rlock_client *churn_c = rt_client();
  static race_ctx rx;
  memset(&rx, 0, sizeof rx);
  rx.lock = rt_lock(c, key);
  rx.churn_lock = rt_lock(churn_c, key);
  for (size_t i = 0; i < RACE_N; i++) {
    rx.slots[i].ctx = &rx;
    rx.slots[i].index = i;
    rx.slots[i].owner = rlock_owner_new();
    atomic_init(&rx.slots[i].req, NULL);
  }

  rt_thread churn, canceller;
  rt_thread_start(&churn, churn_thread, &rx);
  rt_thread_start(&canceller, canceller_thread, &rx);
  uint64_t seed = 0xdeadbeefcafef00du;
  int64_t t0 = rt_now_ms();
  for (size_t i = 0; i < RACE_N; i++) {
    race_slot *s = &rx.slots[i];
    /* Mostly unbounded waits; some bounded ones that may time out. */
    int64_t wait_ms = (i % 5 == 4) ? 20 : -1;
    int64_t lease_ms = (i % 3 == 2) ? 10000 : -1;
    rlock_req *req = NULL;
    int rc = rlock_lock_async(rx.lock, s->owner, wait_ms, lease_ms,
                              race_acquire_cb, s, &req);
    cr_assert_eq(rc, 0, "rlock_lock_async %zu: %s", i, rlock_err_name(rc));
    atomic_store(&s->submitted_us, now_us());
    atomic_store(&s->req, req); /* publishes submitted_us too */
    if (rnd_next(&seed) % 4 == 0)
      sleep_until_us(now_us() + (int64_t)(rnd_next(&seed) % 1500));
  }
  rt_wait_until_what(race_all_fired, &rx, 60000, "every acquire called back");
  rt_thread_join(&canceller, JOIN_BOUND_MS);
  atomic_store(&rx.stop_churn, true);
  rt_thread_join(&churn, JOIN_BOUND_MS);
  rt_wait_until_what(race_all_unlocked, &rx, 10000, "every unlock called back");
  cr_log_info("cancel race: %d acquired, %d timed out, %d canceled (%d "
              "cancels from callbacks), churn %d rounds, %" PRId64 " ms",
              atomic_load(&rx.acquired), atomic_load(&rx.not_acquired),
              atomic_load(&rx.canceled), atomic_load(&rx.loop_cancels),
              atomic_load(&rx.churn_rounds), rt_now_ms() - t0);

  cr_assert_eq(atomic_load(&rx.other), 0, "%d unexpected statuses, e.g. %s",
               atomic_load(&rx.other),
               rlock_err_name(atomic_load(&rx.first_other)));
  cr_assert_eq(atomic_load(&rx.cancel_errors), 0);
  cr_assert_eq(atomic_load(&rx.churn_errors), 0);
  cr_assert_eq(atomic_load(&rx.acquired) + atomic_load(&rx.not_acquired) +
                   atomic_load(&rx.canceled),
               RACE_N);
  cr_assert_gt(atomic_load(&rx.canceled), 0, "no cancel ever landed");
  cr_assert_eq(atomic_load(&rx.unlock_sent), atomic_load(&rx.acquired));
  for (size_t i = 0; i < RACE_N; i++) {
    race_slot *s = &rx.slots[i];
    if (atomic_load(&s->status) == 1)
      cr_assert_eq(atomic_load(&s->unlock_status), 1,
                   "owner %zu acquired but its unlock returned %s", i,
                   rlock_err_name(atomic_load(&s->unlock_status)));
  }

  /* No phantom: the key goes away (a hold left behind by a canceled try
   * would keep it for its lease), and no field of this client remains. */
  char first[OWNER_MAX + 8];
  if (!rt_poll_until(key_gone, key, 5000)) {
    size_t n = fields_of_client(key, c, first, sizeof first);
    cr_assert_fail("lock key still there: %zu field(s) of the async client, "
                   "e.g. %s; HLEN %lld",
                   n, first, rt_hlen(key));
  }
  rt_wait_until_what(no_channels, NULL, 5000, "PUBSUB CHANNELS empty");
  for (size_t i = 0; i < RACE_N; i += 17)
    cr_assert_eq(rlock_hold_count_owner(rx.lock, rx.slots[i].owner), 0);
  /* A hold the client wrongly believes in is renewed and then reported
   * lost (renewal every 500 ms): give it two periods. */
  rt_sleep_ms(1100);
  cr_assert_eq(atomic_load(&lost_calls), 0, "on_lock_lost fired %d times",
               atomic_load(&lost_calls));
  cr_assert_eq(rt_exists(key), 0);

  rlock_free(rx.churn_lock);
  rlock_client_free(churn_c);
  rlock_client_free(c);
  for (size_t i = 0; i < RACE_N; i++) {
    race_slot *s = &rx.slots[i];
    cr_assert_eq(atomic_load(&s->calls), 1, "acquire %zu called back %d times",
                 i, atomic_load(&s->calls));
    cr_assert_eq(atomic_load(&s->unlock_calls),
                 atomic_load(&s->status) == 1 ? 1 : 0,
                 "unlock %zu called back %d times", i,
                 atomic_load(&s->unlock_calls));
    rlock_req_free(atomic_load(&s->req));
  }
  rlock_free(rx.lock);
}

/* ---- close races ---- */

#define CLOSE_PENDING 300
#define CLOSE_SUBMITTERS 2
#define CLOSE_BLOCKED 2

typedef struct counted {
  atomic_int calls;
  atomic_int closed;   /* RLOCK_ECLOSED */
  atomic_int results;  /* a real result (>= 0) */
  atomic_int other;
} counted;

static void counted_cb(int status, int64_t value, void *data) {
  (void)value;
  counted *k = data;
  if (status == RLOCK_ECLOSED)
    atomic_fetch_add(&k->closed, 1);
  else if (status >= 0)
    atomic_fetch_add(&k->results, 1);
  else
    atomic_fetch_add(&k->other, 1);
  atomic_fetch_add(&k->calls, 1);
}

typedef struct submitter {
  rlock *lock;
  counted k;
  atomic_int submitted; /* calls that returned 0 */
  atomic_int refused;   /* calls that returned RLOCK_ECLOSED */
  atomic_int bad;       /* calls that returned anything else */
} submitter;

/* Submits async ops until the client refuses them. */
static void submitter_thread(void *arg) {
  submitter *s = arg;
  uint64_t owner = rlock_owner_new();
  for (unsigned i = 0;; i++) {
    int rc;
    switch (i % 3) {
    case 0:
      rc = rlock_is_locked_async(s->lock, counted_cb, &s->k, NULL);
      break;
    case 1:
      rc = rlock_lock_async(s->lock, owner, 0, 1000, counted_cb, &s->k, NULL);
      break;
    default:
      rc = rlock_hold_count_async(s->lock, owner, counted_cb, &s->k, NULL);
      break;
    }
    if (rc == 0) {
      atomic_fetch_add(&s->submitted, 1);
    } else if (rc == RLOCK_ECLOSED) {
      atomic_fetch_add(&s->refused, 1);
      return;
    } else {
      atomic_fetch_add(&s->bad, 1);
      return;
    }
    if (i % 64 == 63)
      rt_sleep_ms(1); /* let the loop thread breathe */
  }
}

typedef struct blocked {
  rlock *lock;
  atomic_int rc;
  atomic_bool done;
} blocked;

static void blocked_thread(void *arg) {
  blocked *b = arg;
  atomic_store(&b->rc, rlock_lock(b->lock, -1));
  atomic_store(&b->done, true);
}

typedef struct closer {
  rlock_client *c;
  _Atomic int64_t t0, t1;
} closer;

static void closer_thread(void *arg) {
  closer *cl = arg;
  atomic_store(&cl->t0, rt_now_ms());
  rlock_client_free(cl->c);
  atomic_store(&cl->t1, rt_now_ms());
}

/* Both submitters have calls answered and more queued. */
static bool submitters_busy(void *arg) {
  submitter *s = arg;
  for (int i = 0; i < CLOSE_SUBMITTERS; i++)
    if (atomic_load(&s[i].submitted) < 200 ||
        atomic_load(&s[i].k.results) < 20)
      return false;
  return true;
}

static const char *close_name;
static bool named_gone(void *arg) {
  (void)arg;
  return rt_client_count_named(close_name) == 0;
}

Test(async, close_with_pending_ops_calls_back_exactly_once) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "async-close");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *holder_c = rt_client();
  rlock *held = rt_lock(holder_c, key);
  cr_assert_eq(rlock_lock(held, -1), 0);

  rlock_options o;
  rlock_options_init(&o);
  o.client_name = "async-close-race";
  close_name = o.client_name;
  rlock_client *c = rt_client_opts(&o);
  rlock *lock = rt_lock(c, key);

  /* Pending acquires, half with a request handle (freed on both sides of
   * the close), half without. */
  static counted pend;
  memset(&pend, 0, sizeof pend);
  static rlock_req *reqs[CLOSE_PENDING];
  for (size_t i = 0; i < CLOSE_PENDING; i++) {
    rlock_req **out = (i % 2 == 0) ? &reqs[i] : NULL;
    reqs[i] = NULL;
    cr_assert_eq(rlock_lock_async(lock, rlock_owner_new(), -1,
                                  (i % 3 == 0) ? 5000 : -1, counted_cb, &pend,
                                  out),
                 0);
  }
  for (size_t i = 0; i < CLOSE_PENDING; i += 4) {
    rlock_req_free(reqs[i]); /* before the close */
    reqs[i] = NULL;
  }

  static blocked bl[CLOSE_BLOCKED];
  rt_thread bt[CLOSE_BLOCKED];
  for (int i = 0; i < CLOSE_BLOCKED; i++) {
    memset(&bl[i], 0, sizeof bl[i]);
    bl[i].lock = lock;
    atomic_init(&bl[i].rc, 12345);
    rt_thread_start(&bt[i], blocked_thread, &bl[i]);
  }
  static submitter sub[CLOSE_SUBMITTERS];
  rt_thread st[CLOSE_SUBMITTERS];
  for (int i = 0; i < CLOSE_SUBMITTERS; i++) {
    memset(&sub[i], 0, sizeof sub[i]);
    sub[i].lock = lock;
    rt_thread_start(&st[i], submitter_thread, &sub[i]);
  }
  rt_wait_until_what(has_subscriber, chan, 5000, "waiters subscribed");
  rt_wait_until_what(submitters_busy, sub, 10000, "submitters running");
  cr_assert_eq(atomic_load(&pend.calls), 0, "an acquire returned while held");

  closer cl = {.c = c};
  rt_thread ct;
  rt_thread_start(&ct, closer_thread, &cl);
  rt_thread_join(&ct, JOIN_BOUND_MS);
  int64_t close_ms = atomic_load(&cl.t1) - atomic_load(&cl.t0);
  cr_log_info("close with %d pending acquires, %d blocked threads and 2 "
              "submitters took %" PRId64 " ms",
              CLOSE_PENDING, CLOSE_BLOCKED, close_ms);
  cr_assert_lt(close_ms, 3000, "close took %" PRId64 " ms", close_ms);
  for (int i = 0; i < CLOSE_SUBMITTERS; i++)
    rt_thread_join(&st[i], JOIN_BOUND_MS);
  for (int i = 0; i < CLOSE_BLOCKED; i++) {
    rt_thread_join(&bt[i], JOIN_BOUND_MS);
    cr_assert_eq(atomic_load(&bl[i].rc), RLOCK_ECLOSED, "blocked lock: %s",
                 rlock_err_name(atomic_load(&bl[i].rc)));
  }

  /* The loop thread is gone: every count is final. */
  cr_assert_eq(atomic_load(&pend.calls), CLOSE_PENDING);
  cr_assert_eq(atomic_load(&pend.closed), CLOSE_PENDING,
               "pending acquires of a held lock: %d ECLOSED, %d results, "
               "%d other",
               atomic_load(&pend.closed), atomic_load(&pend.results),
               atomic_load(&pend.other));
  for (int i = 0; i < CLOSE_SUBMITTERS; i++) {
    submitter *s = &sub[i];
    cr_assert_eq(atomic_load(&s->bad), 0);
    cr_assert_eq(atomic_load(&s->refused), 1);
    cr_assert_eq(atomic_load(&s->k.calls), atomic_load(&s->submitted),
                 "submitter %d: %d accepted calls, %d callbacks", i,
                 atomic_load(&s->submitted), atomic_load(&s->k.calls));
    cr_assert_eq(atomic_load(&s->k.other), 0);
    cr_log_info("submitter %d: %d calls accepted (%d answered, %d ECLOSED)",
                i, atomic_load(&s->submitted), atomic_load(&s->k.results),
                atomic_load(&s->k.closed));
  }
  for (size_t i = 0; i < CLOSE_PENDING; i++)
    rlock_req_free(reqs[i]);
  cr_assert_eq(rlock_lock(lock, -1), RLOCK_ECLOSED);
  rlock_free(lock);

  rt_wait_until_what(named_gone, NULL, 3000, "closed client disconnected");
  /* Nobody but the holder ever got a field. */
  char first[OWNER_MAX + 8];
  cr_assert_eq(rt_hlen(key), 1);
  cr_assert_eq(fields_of_client(key, holder_c, first, sizeof first), 1);
  cr_assert_eq(rlock_unlock(held), 0);
  rt_wait_until_what(no_channels, NULL, 3000, "PUBSUB CHANNELS empty");
  rlock_free(held);
  rlock_client_free(holder_c);
}

/* ---- ECLOSED callbacks carry a detail ----
 *
 * rlock.h: inside a callback, rlock_last_error() describes a failure. Calls
 * still in the request queue when close runs are failed by the queue drain
 * (lib/core/loop.c wakeup_cb rejects the task), a different path from the
 * active ops that close finishes; both must leave a non-empty detail. */

typedef struct detail_counted {
  atomic_int calls;
  atomic_int closed;       /* callbacks with RLOCK_ECLOSED */
  atomic_int closed_empty; /* ... whose rlock_last_error() was "" */
} detail_counted;

static void detail_cb(int status, int64_t value, void *data) {
  (void)value;
  detail_counted *k = data;
  if (status == RLOCK_ECLOSED) {
    atomic_fetch_add(&k->closed, 1);
    /* Read here: the detail is only valid inside the callback. */
    if (rlock_last_error()[0] == '\0')
      atomic_fetch_add(&k->closed_empty, 1);
  }
  atomic_fetch_add(&k->calls, 1);
}

typedef struct detail_submitter {
  rlock *lock;
  detail_counted k;
  atomic_int submitted;
  atomic_int refused;
  atomic_int bad;
} detail_submitter;

/* Floods the queue (no pauses, unlike submitter_thread) so that close finds
 * calls still queued, until the client refuses them. */
static void detail_submitter_thread(void *arg) {
  detail_submitter *s = arg;
  uint64_t owner = rlock_owner_new();
  for (unsigned i = 0;; i++) {
    int rc = (i % 2 == 0)
                 ? rlock_is_locked_async(s->lock, detail_cb, &s->k, NULL)
                 : rlock_hold_count_async(s->lock, owner, detail_cb, &s->k,
                                          NULL);
    if (rc == 0) {
      atomic_fetch_add(&s->submitted, 1);
    } else if (rc == RLOCK_ECLOSED) {
      atomic_fetch_add(&s->refused, 1);
      return;
    } else {
      atomic_fetch_add(&s->bad, 1);
      return;
    }
  }
}

static bool detail_submitters_busy(void *arg) {
  detail_submitter *s = arg;
  for (int i = 0; i < CLOSE_SUBMITTERS; i++)
    if (atomic_load(&s[i].submitted) < 2000 ||
        atomic_load(&s[i].k.calls) < 100)
      return false;
  return true;
}

Test(async, eclosed_callbacks_during_close_have_detail) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "async-close-detail");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);

  static detail_submitter sub[CLOSE_SUBMITTERS];
  rt_thread st[CLOSE_SUBMITTERS];
  for (int i = 0; i < CLOSE_SUBMITTERS; i++) {
    memset(&sub[i], 0, sizeof sub[i]);
    sub[i].lock = lock;
    rt_thread_start(&st[i], detail_submitter_thread, &sub[i]);
  }
  /* Only the start: under valgrind, which runs one thread at a time, the
   * flooding submitters leave the loop thread little time on a loaded
   * machine (10 s was missed once in CI), so the bound is generous. */
  rt_wait_until_what(detail_submitters_busy, sub, 30000, "submitters running");
  rlock_client_free(c); /* races the submitters */
  int calls = 0, submitted = 0, closed = 0, empty = 0;
  for (int i = 0; i < CLOSE_SUBMITTERS; i++) {
    rt_thread_join(&st[i], JOIN_BOUND_MS);
    cr_assert_eq(atomic_load(&sub[i].bad), 0);
    cr_assert_eq(atomic_load(&sub[i].refused), 1);
    submitted += atomic_load(&sub[i].submitted);
    calls += atomic_load(&sub[i].k.calls);
    closed += atomic_load(&sub[i].k.closed);
    empty += atomic_load(&sub[i].k.closed_empty);
  }
  cr_log_info("%d calls accepted, %d ended with RLOCK_ECLOSED, %d of those "
              "with an empty rlock_last_error()",
              submitted, closed, empty);
  /* The loop thread is gone: the counts are final. */
  cr_assert_eq(calls, submitted);
  cr_assert_gt(closed, 0, "no callback got RLOCK_ECLOSED: the close did not "
                          "race the submitters, nothing was checked");
  cr_assert_eq(empty, 0,
               "%d of %d RLOCK_ECLOSED callbacks saw an empty "
               "rlock_last_error()",
               empty, closed);
  rlock_free(lock);
}

/* ---- rlock_req_cancel / rlock_client_interrupt and rlock_last_error() ----
 *
 * Like every rlock call, they leave rlock_last_error() empty on success and
 * describe a failure; each success is preceded by a failing call on the same
 * thread, so a success that does not clear the detail leaves it behind. */

typedef struct ctl_in_cb {
  rlock_client *c;
  rlock_req *cancel_req; /* a pending acquire to cancel from the callback */
  uint64_t interrupt_owner;
  atomic_int cancel_rc, cancel_empty;
  atomic_int interrupt_rc, interrupt_empty;
  atomic_int bad_cancel_empty, bad_interrupt_empty; /* failures' details */
  atomic_int calls;
} ctl_in_cb;

static int last_error_empty(void) { return rlock_last_error()[0] == '\0'; }

static void ctl_cb(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  ctl_in_cb *k = data;
  (void)rlock_req_cancel(NULL);
  atomic_store(&k->bad_cancel_empty, last_error_empty());
  atomic_store(&k->cancel_rc, rlock_req_cancel(k->cancel_req));
  atomic_store(&k->cancel_empty, last_error_empty());
  (void)rlock_client_interrupt(NULL, 1);
  atomic_store(&k->bad_interrupt_empty, last_error_empty());
  atomic_store(&k->interrupt_rc, rlock_client_interrupt(k->c, k->interrupt_owner));
  atomic_store(&k->interrupt_empty, last_error_empty());
  atomic_fetch_add(&k->calls, 1);
}

static bool ctl_fired(void *arg) {
  return atomic_load(&((ctl_in_cb *)arg)->calls) > 0;
}

Test(async, cancel_and_interrupt_set_and_clear_last_error) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "async-ctl-detail");
  rlock_client *holder_c = rt_client();
  rlock *held = rt_lock(holder_c, key);
  cr_assert_eq(rlock_lock(held, -1), 0);

  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  /* Four acquires that wait (the lock is held): cancelled and interrupted
   * from this thread and from the loop thread. */
  static rec w[4];
  rlock_req *reqs[4];
  uint64_t owners[4];
  for (int i = 0; i < 4; i++) {
    rec_init(&w[i], NULL);
    owners[i] = rlock_owner_new();
    cr_assert_eq(rlock_lock_async(lock, owners[i], -1, -1, rec_cb, &w[i],
                                  &reqs[i]),
                 0);
  }

  /* From a user thread. */
  cr_assert_eq(rlock_req_cancel(NULL), RLOCK_EINVAL);
  cr_assert_neq(rlock_last_error()[0], '\0', "EINVAL without a detail");
  cr_assert_eq(rlock_req_cancel(reqs[0]), 0);
  cr_assert_str_empty(rlock_last_error(),
                      "successful rlock_req_cancel left \"%s\"",
                      rlock_last_error());
  cr_assert_eq(rec_wait(&w[0], "cancelled acquire"), RLOCK_ECANCELED);

  cr_assert_eq(rlock_client_interrupt(NULL, 1), RLOCK_EINVAL);
  cr_assert_neq(rlock_last_error()[0], '\0', "EINVAL without a detail");
  cr_assert_eq(rlock_client_interrupt(c, owners[1]), 1);
  cr_assert_str_empty(rlock_last_error(),
                      "successful rlock_client_interrupt left \"%s\"",
                      rlock_last_error());
  cr_assert_eq(rec_wait(&w[1], "interrupted acquire"), RLOCK_ECANCELED);

  /* From the loop thread (a callback), where both act directly. */
  static ctl_in_cb k;
  memset(&k, 0, sizeof k);
  k.c = c;
  k.cancel_req = reqs[2];
  k.interrupt_owner = owners[3];
  atomic_init(&k.cancel_rc, 12345);
  atomic_init(&k.interrupt_rc, 12345);
  cr_assert_eq(rlock_is_locked_async(lock, ctl_cb, &k, NULL), 0);
  rt_wait_until_what(ctl_fired, &k, CB_BOUND_MS, "control callback");
  cr_assert_eq(atomic_load(&k.bad_cancel_empty), 0);
  cr_assert_eq(atomic_load(&k.bad_interrupt_empty), 0);
  cr_assert_eq(atomic_load(&k.cancel_rc), 0);
  cr_assert_eq(atomic_load(&k.cancel_empty), 1,
               "successful rlock_req_cancel in a callback left a detail");
  cr_assert_eq(atomic_load(&k.interrupt_rc), 1);
  cr_assert_eq(atomic_load(&k.interrupt_empty), 1,
               "successful rlock_client_interrupt in a callback left a detail");
  cr_assert_eq(rec_wait(&w[2], "acquire cancelled in a callback"),
               RLOCK_ECANCELED);
  cr_assert_eq(rec_wait(&w[3], "acquire interrupted in a callback"),
               RLOCK_ECANCELED);

  /* On a closed client (the lock handle keeps its memory alive). */
  rlock_client_free(c);
  cr_assert_eq(rlock_lock(held, -1), 0); /* a success: detail cleared */
  cr_assert_eq(rlock_client_interrupt(c, owners[0]), RLOCK_ECLOSED);
  cr_assert_neq(rlock_last_error()[0], '\0', "ECLOSED without a detail");
  cr_assert_eq(rlock_unlock(held), 0); /* re-entrant: still held once */
  cr_assert_str_empty(rlock_last_error());
  cr_assert_eq(rlock_req_cancel(reqs[0]), RLOCK_ECLOSED);
  cr_assert_neq(rlock_last_error()[0], '\0', "ECLOSED without a detail");

  for (int i = 0; i < 4; i++)
    rlock_req_free(reqs[i]);
  rlock_free(lock);
  cr_assert_eq(rlock_unlock(held), 0);
  rlock_free(held);
  rlock_client_free(holder_c);
}

/* ---- close from inside a callback ---- */

typedef struct closing_cb {
  rlock_client *c;
  rlock *lock;
  atomic_int calls;
  atomic_int status;
  atomic_int after_close_rc; /* an async call made after the close */
  atomic_int interrupt_rc;
} closing_cb;

static rec late_rec;

static void close_in_cb(int status, int64_t value, void *data) {
  (void)value;
  closing_cb *k = data;
  atomic_store(&k->status, status);
  rlock_client_free(k->c);
  atomic_store(&k->after_close_rc,
               rlock_is_locked_async(k->lock, rec_cb, &late_rec, NULL));
  atomic_fetch_add(&k->calls, 1);
}

Test(async, close_from_inside_callback) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "async-close-cb");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *holder_c = rt_client();
  rlock *held = rt_lock(holder_c, key);
  cr_assert_eq(rlock_lock(held, -1), 0);

  rlock_options o;
  rlock_options_init(&o);
  o.client_name = "async-close-in-cb";
  close_name = o.client_name;
  rlock_client *c = rt_client_opts(&o);
  rlock *lock = rt_lock(c, key);
  static rec waiters[5];
  rlock_req *reqs[5];
  for (int i = 0; i < 5; i++) {
    rec_init(&waiters[i], NULL);
    cr_assert_eq(rlock_lock_async(lock, rlock_owner_new(), -1, -1, rec_cb,
                                  &waiters[i], &reqs[i]),
                 0);
  }
  rec_init(&late_rec, NULL);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiters subscribed");

  static closing_cb k;
  memset(&k, 0, sizeof k);
  k.c = c;
  k.lock = lock;
  atomic_init(&k.after_close_rc, 12345);
  rlock_req *kreq = NULL;
  cr_assert_eq(rlock_is_locked_async(lock, close_in_cb, &k, &kreq), 0);
  for (int i = 0; i < 5; i++)
    cr_assert_eq(rec_wait(&waiters[i], "waiter after close"), RLOCK_ECLOSED);
  cr_assert_eq(atomic_load(&k.calls), 1);
  cr_assert_eq(atomic_load(&k.status), 1);
  cr_assert_eq(atomic_load(&k.after_close_rc), RLOCK_ECLOSED);
  rlock_req_free(kreq);
  for (int i = 0; i < 5; i++)
    rlock_req_free(reqs[i]);

  /* The client winds down by itself: its connections go away. */
  rt_wait_until_what(named_gone, NULL, 5000, "closed client disconnected");
  cr_assert_eq(rlock_lock(lock, -1), RLOCK_ECLOSED);
  cr_assert_eq(rlock_lock_async(lock, 1, -1, -1, rec_cb, &late_rec, NULL),
               RLOCK_ECLOSED);
  cr_assert_eq(atomic_load(&late_rec.calls), 0);
  for (int i = 0; i < 5; i++)
    cr_assert_eq(atomic_load(&waiters[i].calls), 1);
  rlock_free(lock); /* last reference: frees the client */

  cr_assert_eq(rlock_unlock(held), 0);
  rt_wait_until_what(no_channels, NULL, 3000, "PUBSUB CHANNELS empty");
  rlock_free(held);
  rlock_client_free(holder_c);
}

/* ---- rlock_client_interrupt ---- */

typedef struct locker {
  rlock *lock;
  _Atomic uint64_t tid;
  atomic_int rc;
  atomic_bool done;
  _Atomic int64_t t_end;
} locker;

static void locker_thread(void *arg) {
  locker *l = arg;
  atomic_store(&l->tid, rlock_thread_id());
  atomic_store(&l->rc, rlock_lock(l->lock, -1));
  atomic_store(&l->t_end, rt_now_ms());
  atomic_store(&l->done, true);
}

static bool locker_has_tid(void *arg) {
  return atomic_load(&((locker *)arg)->tid) != 0;
}

typedef struct interrupt_in_cb {
  rlock_client *c;
  uint64_t owner;
  atomic_int rc;
  atomic_int calls;
} interrupt_in_cb;

static void interrupt_cb(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  interrupt_in_cb *k = data;
  atomic_store(&k->rc, rlock_client_interrupt(k->c, k->owner));
  atomic_fetch_add(&k->calls, 1);
}

static bool interrupt_cb_fired(void *arg) {
  return atomic_load(&((interrupt_in_cb *)arg)->calls) > 0;
}

Test(async, interrupt_blocked_and_async_acquires) {
  char key[KEY_MAX], key2[KEY_MAX], chan[CHAN_MAX], field[OWNER_MAX];
  rt_key(key, sizeof key, "async-intr");
  rt_key(key2, sizeof key2, "async-intr2");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  rlock *lock2 = rt_lock(c, key2);
  cr_assert_eq(rlock_lock(lock, -1), 0);  /* main thread holds both */
  cr_assert_eq(rlock_lock(lock2, -1), 0);

  /* Nothing to interrupt. */
  cr_assert_eq(rlock_client_interrupt(c, rlock_owner_new()), 0);
  cr_assert_eq(rlock_client_interrupt(c, rlock_thread_id()), 0);

  /* A thread blocked in rlock_lock(). */
  static locker l;
  memset(&l, 0, sizeof l);
  l.lock = lock;
  atomic_init(&l.rc, 12345);
  rt_thread th;
  rt_thread_start(&th, locker_thread, &l);
  rt_wait_until_what(locker_has_tid, &l, 5000, "locker started");
  rt_wait_until_what(has_subscriber, chan, 5000, "locker waiting");
  cr_assert_not(atomic_load(&l.done), "rlock_lock returned while held");
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_client_interrupt(c, atomic_load(&l.tid)), 1);
  rt_thread_join(&th, JOIN_BOUND_MS);
  cr_assert_eq(atomic_load(&l.rc), RLOCK_ECANCELED, "interrupted lock: %s",
               rlock_err_name(atomic_load(&l.rc)));
  int64_t took = atomic_load(&l.t_end) - t0;
  cr_assert_lt(took, 1000, "interrupt took %" PRId64 " ms", took);
  owner_field(field, sizeof field, c, atomic_load(&l.tid));
  cr_assert_eq(rt_int("HEXISTS %s %s", key, field), 0);
  cr_assert_eq(rlock_is_held_owner(lock, atomic_load(&l.tid)), 0);
  cr_assert_eq(rlock_client_interrupt(c, atomic_load(&l.tid)), 0, "again: none");

  /* One owner, two async acquires (two locks), plus another owner that
   * must not be touched. */
  uint64_t x = rlock_owner_new(), y = rlock_owner_new();
  static rec rx1, rx2, ry;
  rec_init(&rx1, NULL);
  rec_init(&rx2, NULL);
  rec_init(&ry, NULL);
  cr_assert_eq(rlock_lock_async(lock, x, -1, -1, rec_cb, &rx1, NULL), 0);
  cr_assert_eq(rlock_lock_async(lock2, x, 60000, -1, rec_cb, &rx2, NULL), 0);
  cr_assert_eq(rlock_lock_async(lock, y, -1, -1, rec_cb, &ry, NULL), 0);
  /* Wait until all three are running (interrupt only sees started ops;
   * a query queued behind them has answered once they all started). */
  static rec barrier;
  rec_init(&barrier, NULL);
  cr_assert_eq(rlock_is_locked_async(lock, rec_cb, &barrier, NULL), 0);
  cr_assert_eq(rec_wait(&barrier, "barrier"), 1);
  cr_assert_eq(rlock_client_interrupt(c, x), 2);
  cr_assert_eq(rec_wait(&rx1, "x on lock 1"), RLOCK_ECANCELED);
  cr_assert_eq(rec_wait(&rx2, "x on lock 2"), RLOCK_ECANCELED);
  cr_assert_eq(rlock_client_interrupt(c, x), 0);
  cr_assert_eq(atomic_load(&ry.calls), 0, "y was interrupted too");

  /* rlock_client_interrupt from a callback (the loop thread). */
  uint64_t z = rlock_owner_new();
  static rec rz;
  rec_init(&rz, NULL);
  cr_assert_eq(rlock_lock_async(lock2, z, -1, -1, rec_cb, &rz, NULL), 0);
  static interrupt_in_cb k;
  memset(&k, 0, sizeof k);
  k.c = c;
  k.owner = z;
  atomic_init(&k.rc, 12345);
  cr_assert_eq(rlock_is_locked_async(lock2, interrupt_cb, &k, NULL), 0);
  cr_assert_eq(rec_wait(&rz, "z interrupted from a callback"),
               RLOCK_ECANCELED);
  rt_wait_until_what(interrupt_cb_fired, &k, CB_BOUND_MS,
                     "interrupting callback");
  cr_assert_eq(atomic_load(&k.rc), 1);

  /* y is still waiting and gets the lock when main releases it. */
  cr_assert_eq(rlock_unlock(lock), 0);
  cr_assert_eq(rec_wait(&ry, "y acquires"), 1);
  cr_assert_eq(rlock_unlock_owner(lock, y), 0);
  cr_assert_eq(rlock_unlock(lock2), 0);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rt_exists(key2), 0);
  rt_wait_until_what(no_channels, NULL, 3000, "PUBSUB CHANNELS empty");

  rlock_free(lock);
  rlock_free(lock2);
  rlock_client_free(c);
  cr_assert_eq(rlock_client_interrupt(NULL, 1), RLOCK_EINVAL);
  cr_assert_eq(atomic_load(&rx1.calls), 1);
  cr_assert_eq(atomic_load(&rx2.calls), 1);
  cr_assert_eq(atomic_load(&ry.calls), 1);
  cr_assert_eq(atomic_load(&rz.calls), 1);
  cr_assert_eq(atomic_load(&k.calls), 1);
}

/* ---- ownership transfer between threads ---- */

typedef struct transfer {
  rlock *lock;
  uint64_t owner;
  _Atomic uint64_t tid;
  atomic_int lock_rc;
  atomic_int own_unlock_rc; /* rlock_unlock() with the thread's own id */
  atomic_int held_rc;
  _Atomic int64_t count;
  atomic_int unlock_rc;
} transfer;

static void transfer_lock_thread(void *arg) {
  transfer *t = arg;
  atomic_store(&t->tid, rlock_thread_id());
  atomic_store(&t->lock_rc, rlock_lock_owner(t->lock, t->owner, -1));
}

static void transfer_unlock_thread(void *arg) {
  transfer *t = arg;
  atomic_store(&t->tid, rlock_thread_id());
  atomic_store(&t->own_unlock_rc, rlock_unlock(t->lock));
  atomic_store(&t->held_rc, rlock_is_held_owner(t->lock, t->owner));
  atomic_store(&t->count, rlock_hold_count_owner(t->lock, t->owner));
  atomic_store(&t->unlock_rc, rlock_unlock_owner(t->lock, t->owner));
}

Test(async, ownership_transfer_between_threads) {
  char key[KEY_MAX], field[OWNER_MAX];
  rt_key(key, sizeof key, "async-transfer");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  uint64_t x = rlock_owner_new();
  uint64_t x2 = rlock_owner_new();
  cr_assert_neq(x, x2);
  cr_assert_neq(x, rlock_thread_id());

  transfer a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.lock = b.lock = lock;
  a.owner = b.owner = x;
  rt_thread ta, tb;
  rt_thread_start(&ta, transfer_lock_thread, &a);
  rt_thread_join(&ta, JOIN_BOUND_MS);
  cr_assert_eq(atomic_load(&a.lock_rc), 0);

  /* The field is "<client id>:<owner>", not the locking thread's id. */
  owner_field(field, sizeof field, c, x);
  cr_assert_eq(rt_hlen(key), 1);
  char *count = rt_hget(key, field);
  cr_assert(count != NULL && strcmp(count, "1") == 0, "HGET %s %s: %s", key,
            field, count ? count : "(nil)");
  free(count);
  cr_assert_neq(atomic_load(&a.tid), x);
  cr_assert_eq(rlock_is_held(lock), 0);
  cr_assert_eq(rlock_is_held_owner(lock, x), 1);
  cr_assert_eq(rlock_try_lock_owner(lock, x2, 0, -1), 0);
  cr_assert_eq(rlock_try_lock(lock, 0, -1), 0);

  rt_thread_start(&tb, transfer_unlock_thread, &b);
  rt_thread_join(&tb, JOIN_BOUND_MS);
  cr_assert_neq(atomic_load(&b.tid), atomic_load(&a.tid));
  cr_assert_eq(atomic_load(&b.own_unlock_rc), RLOCK_ENOTOWNER,
               "unlock with B's own thread id: %s",
               rlock_err_name(atomic_load(&b.own_unlock_rc)));
  cr_assert_eq(atomic_load(&b.held_rc), 1);
  cr_assert_eq(atomic_load(&b.count), 1);
  cr_assert_eq(atomic_load(&b.unlock_rc), 0, "unlock for x on thread B: %s",
               rlock_err_name(atomic_load(&b.unlock_rc)));
  cr_assert_eq(rt_exists(key), 0);

  /* Async on this thread, blocking release by owner on another. */
  static rec r;
  rec_init(&r, NULL);
  cr_assert_eq(rlock_lock_async(lock, x2, -1, 5000, rec_cb, &r, NULL), 0);
  cr_assert_eq(rec_wait(&r, "async acquire by x2"), 1);
  owner_field(field, sizeof field, c, x2);
  count = rt_hget(key, field);
  cr_assert(count != NULL && strcmp(count, "1") == 0);
  free(count);
  transfer b2;
  memset(&b2, 0, sizeof b2);
  b2.lock = lock;
  b2.owner = x2;
  rt_thread_start(&tb, transfer_unlock_thread, &b2);
  rt_thread_join(&tb, JOIN_BOUND_MS);
  cr_assert_eq(atomic_load(&b2.own_unlock_rc), RLOCK_ENOTOWNER);
  cr_assert_eq(atomic_load(&b2.unlock_rc), 0);
  cr_assert_eq(rt_exists(key), 0);

  rlock_free(lock);
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&r.calls), 1);
}

/* ---- 10 000 async waiters on one lock ---- */

#define MANY_N 10000

typedef struct many_ctx many_ctx;
typedef struct many_slot {
  many_ctx *ctx;
  uint64_t owner;
} many_slot;

struct many_ctx {
  rlock *lock;
  many_slot *slots;
  int n;
  /* Only the loop thread writes these; atomics so the main thread can
   * watch. */
  atomic_int acquired;
  atomic_int released;
  atomic_int inside;     /* 1 between an acquire and its release */
  atomic_int overlaps;   /* an acquire while another owner was inside */
  atomic_int errors;
  atomic_int first_error;
  _Atomic int64_t t_last;
};

static void many_err(many_ctx *m, int status) {
  if (atomic_fetch_add(&m->errors, 1) == 0)
    atomic_store(&m->first_error, status);
}

static void many_unlock_cb(int status, int64_t value, void *data) {
  (void)value;
  many_slot *s = data;
  many_ctx *m = s->ctx;
  if (status != 1)
    many_err(m, status);
  atomic_store(&m->inside, 0);
  atomic_fetch_add(&m->released, 1);
  atomic_store(&m->t_last, rt_now_ms());
}

static void many_acquire_cb(int status, int64_t value, void *data) {
  (void)value;
  many_slot *s = data;
  many_ctx *m = s->ctx;
  if (status != 1) {
    many_err(m, status);
    return;
  }
  if (atomic_exchange(&m->inside, 1) != 0)
    atomic_fetch_add(&m->overlaps, 1);
  atomic_fetch_add(&m->acquired, 1);
  int rc = rlock_unlock_async(m->lock, s->owner, many_unlock_cb, s, NULL);
  if (rc != 0)
    many_err(m, rc);
}

static bool many_done(void *arg) {
  many_ctx *m = arg;
  return atomic_load(&m->released) + atomic_load(&m->errors) >= m->n;
}

/* Calls of a command since CONFIG RESETSTAT (INFO commandstats). */
static long long command_calls(const char *name) {
  char *info = rt_str("INFO commandstats");
  cr_assert(info != NULL);
  char needle[64];
  snprintf(needle, sizeof needle, "cmdstat_%s:calls=", name);
  const char *p = strstr(info, needle);
  long long calls = p ? strtoll(p + strlen(needle), NULL, 10) : 0;
  free(info);
  return calls;
}

/* Valgrind (scripts/test --valgrind) is ~50x slower: fewer waiters there. */
static bool under_valgrind(void) {
  const char *preload = getenv("LD_PRELOAD");
  return preload != NULL && strstr(preload, "vgpreload") != NULL;
}

Test(async, ten_thousand_waiters_take_turns, .timeout = 240) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "async-many");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *c = rt_client();
  static many_ctx m;
  memset(&m, 0, sizeof m);
  m.lock = rt_lock(c, key);
  m.n = under_valgrind() ? MANY_N / 10 : MANY_N;
  m.slots = calloc((size_t)m.n, sizeof *m.slots);
  cr_assert(m.slots != NULL);
  for (int i = 0; i < m.n; i++) {
    m.slots[i].ctx = &m;
    m.slots[i].owner = rlock_owner_new();
  }
  uint64_t holder = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(m.lock, holder, -1), 0);
  /* Warm up: the first waiter's subscription machinery, scripts loaded. */
  cr_assert_eq(rlock_try_lock_owner(m.lock, rlock_owner_new(), 50, -1), 0);
  rt_wait_until_what(no_channels, NULL, 3000, "warm-up unsubscribed");
  rt_ok("OK", "CONFIG RESETSTAT");

  size_t heap0 = heap_in_use();
  int64_t t0 = rt_now_ms();
  for (int i = 0; i < m.n; i++) {
    int rc = rlock_lock_async(m.lock, m.slots[i].owner, -1, -1,
                              many_acquire_cb, &m.slots[i], NULL);
    cr_assert_eq(rc, 0, "rlock_lock_async %d: %s", i, rlock_err_name(rc));
  }
  int64_t t_submitted = rt_now_ms();

  /* Steady state: every waiter sleeps on the subscription. None sent a
   * try: another owner of this client holds the lock, so the local gate
   * (lib/engine/gate.c) keeps them off the server (each used to try twice,
   * once before and once after the subscription was confirmed). A query
   * sent after that answers after the loop handled what came before. */
  rt_wait_until_what(has_subscriber, chan, 60000, "subscribed");
  static rec barrier;
  rec_init(&barrier, NULL);
  cr_assert_eq(rlock_is_locked_async(m.lock, rec_cb, &barrier, NULL), 0);
  cr_assert_eq(rec_wait(&barrier, "barrier query"), 1);
  int64_t t_waiting = rt_now_ms();
  size_t heap1 = heap_in_use();
  cr_assert_eq(atomic_load(&m.acquired), 0, "acquired while held");
  cr_assert_eq(command_calls("evalsha") + command_calls("eval"), 0,
               "waiters tried a lock their sibling holds");
  cr_assert_eq(atomic_load(&m.errors), 0);
  cr_assert_eq(rt_numsub(chan), 1, "one subscription for all waiters");
  cr_assert_eq(rt_hlen(key), 1);

  double per_waiter =
      heap1 > heap0 ? (double)(heap1 - heap0) / (double)m.n : 0.0;
  cr_log_info("%d async waiters: submitted in %" PRId64 " ms, all waiting "
              "after %" PRId64 " ms; heap +%zu bytes = %.0f bytes per "
              "pending waiter (%s)",
              m.n, t_submitted - t0, t_waiting - t0, heap1 - heap0,
              per_waiter, HEAP_SOURCE);
  cr_assert_lt(per_waiter, 4096.0, "%.0f bytes per pending waiter",
               per_waiter);

  /* Release: each waiter takes the lock in turn and its callback unlocks. */
  int64_t t1 = rt_now_ms();
  cr_assert_eq(rlock_unlock_owner(m.lock, holder), 0);
  rt_wait_until_what(many_done, &m, 120000, "every waiter got the lock");
  int64_t t2 = atomic_load(&m.t_last);
  cr_log_info("%d hand-overs in %" PRId64 " ms (%.1f us each)", m.n, t2 - t1,
              (double)(t2 - t1) * 1000.0 / m.n);
  cr_assert_eq(atomic_load(&m.errors), 0, "%d errors, first %s",
               atomic_load(&m.errors),
               rlock_err_name(atomic_load(&m.first_error)));
  cr_assert_eq(atomic_load(&m.acquired), m.n);
  cr_assert_eq(atomic_load(&m.released), m.n);
  cr_assert_eq(atomic_load(&m.overlaps), 0, "two owners inside at once");
  cr_assert_lt(t2 - t1, 60000, "hand-overs took %" PRId64 " ms", t2 - t1);
  cr_assert_eq(rt_exists(key), 0);
  rt_wait_until_what(no_channels, NULL, 5000, "PUBSUB CHANNELS empty");

  rlock_free(m.lock);
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&m.acquired), m.n, "a callback after the end");
  cr_assert_eq(atomic_load(&m.released), m.n);
  free(m.slots);
}
