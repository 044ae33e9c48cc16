/*
 * The `lease` suite (issue 28, item 4): rlock_is_lease_guaranteed() never
 * lies. Whatever the fault - the server paused (CLIENT PAUSE WRITE / ALL),
 * blocked (DEBUG SLEEP), stopped (SIGSTOP of redis-server), or the
 * holder's own process stopped (SIGSTOP of a forked child) - the time it
 * reports is never later than the moment the key really expires.
 *
 * The key's expiry is measured from a separate raw hiredis connection
 * with PTTL: the server ran it between the send and the reply, so the key
 * expires before (reply time + pttl + 1) - the bound a guarantee must not
 * pass (expiry_hi). The stall tests read TIME and PTTL in one pipeline
 * right before the stall starts and place the expiry on the server's own
 * clock (stall_expiry). A renewal only moves the expiry later, so a
 * guarantee read before a PTTL sample must also be below that sample's
 * bound.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "faultkit.h"

TestSuite(lease, .init = fk_init, .fini = fk_fini, .timeout = 60);

#define KEY_MAX 160
#define SAMPLES 1024

static int64_t margin(int64_t lease) { return lease / 100 + 2; }

/* Expiry bound for a PTTL reply read after t_a: INT64_MIN when the key is
 * gone (-2), INT64_MAX when it has no TTL. */
static int64_t bound_of(int64_t t_a, long long pttl) {
  if (pttl == -2)
    return INT64_MIN;
  if (pttl == -1)
    return INT64_MAX;
  return t_a + pttl - 1;
}

/* The latest the key can expire, read now: the server ran PTTL between
 * t_a and the reply (*t_b), so the key expires before t_b + pttl + 1. A
 * guarantee after that is a lie whatever the scheduling; with the PTTL
 * round trip under a millisecond (the usual case) it is within 2-3 ms of
 * the lower bound t_a + pttl - 1. (The lower bound alone made a correct
 * guarantee fail when the test process was descheduled for longer than the
 * margin between t_a and the server running PTTL, in a loaded full run.)
 * The margin itself and the send time are pinned by the exact-window test
 * (fixed_lease_is_send_time_plus_lease_minus_margin_every_kind).
 * INT64_MIN when the key is gone, INT64_MAX without a TTL. */
static int64_t expiry_hi(const char *key, int64_t *t_b) {
  long long pttl = rt_pttl(key);
  int64_t b = rlock_now_ms();
  if (t_b != NULL)
    *t_b = b;
  return bound_of(b + 2, pttl); /* b + pttl + 1 */
}

/* The guarantee is below the key's expiry measured right after it; a
 * missing key must have expired after the guarantee passed. */
static void check_below_expiry(const char *what, const char *key,
                               int64_t until) {
  int64_t t_b = 0;
  int64_t hi = expiry_hi(key, &t_b);
  if (hi == INT64_MIN)
    cr_assert_leq(until, t_b, "%s: guarantee %" PRId64 " but the key was "
                  "already gone at %" PRId64, what, until, t_b);
  else
    cr_assert_leq(until, hi, "%s: guarantee %" PRId64 " is later than the "
                  "key's expiry (at most %" PRId64 ")", what, until, hi);
}

static rlock_client *open_named(rlock_options *o) {
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, 0, "open: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  return c;
}

typedef struct lost_log {
  atomic_int calls;
} lost_log;

static void on_lost(const char *name, const char *owner, void *data) {
  (void)name, (void)owner;
  atomic_fetch_add(&((lost_log *)data)->calls, 1);
}

static void wd_options(rlock_options *o, const char *name, int64_t wd,
                       lost_log *lost) {
  fk_options(o, name);
  o->watchdog_timeout_ms = wd;
  o->command_timeout_ms = 1000;
  o->retry_interval_ms = 200;
  o->on_lock_lost = on_lost;
  o->on_lock_lost_data = lost;
}

/* ==== the clock ==== */

Test(lease, now_is_clock_monotonic_ms) {
  for (int i = 0; i < 50; i++) {
    struct timespec ts;
    int64_t a = rlock_now_ms();
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t mono = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int64_t b = rlock_now_ms();
    cr_assert(a <= mono + 1 && mono <= b + 1,
              "rlock_now_ms %" PRId64 "..%" PRId64 ", CLOCK_MONOTONIC %" PRId64,
              a, b, mono);
    rt_sleep_ms(1);
  }
}

/* ==== a lease without the watchdog: exact, every kind ==== */

typedef int (*getter_fn)(rlock_client *, const char *, rlock **);

static const struct {
  const char *kind;
  getter_fn get;
} kinds[] = {
    {"lock", rlock_new},
    {"fair", rlock_new_fair},
    {"read", rlock_new_read},
    {"write", rlock_new_write},
    {"fenced", rlock_new_fenced},
    {"spin", rlock_new_spin},
    {"nonreentrant", rlock_new_nonreentrant},
    {"nonreentrant_fair", rlock_new_nonreentrant_fair},
};

#define FIXED_LEASE 4000

Test(lease, fixed_lease_is_send_time_plus_lease_minus_margin_every_kind) {
  rlock_client *c = rt_client();
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    char key[KEY_MAX];
    rt_key(key, sizeof key, kinds[k].kind);
    rlock *lock = NULL;
    cr_assert_eq(kinds[k].get(c, key, &lock), 0, "%s", rlock_last_error());
    int64_t t0 = rlock_now_ms();
    int rc = rlock_try_lock(lock, 0, FIXED_LEASE);
    int64_t t1 = rlock_now_ms();
    cr_assert_eq(rc, 1, "%s: try_lock %d (%s)", kinds[k].kind, rc,
                 rlock_last_error());
    int64_t until = 0;
    rc = rlock_is_lease_guaranteed(lock, &until);
    cr_assert_eq(rc, 1, "%s: %d %s (%s)", kinds[k].kind, rc,
                 rlock_err_name(rc), rlock_last_error());
    int64_t lo = t0 + FIXED_LEASE - margin(FIXED_LEASE);
    int64_t hi = t1 + FIXED_LEASE - margin(FIXED_LEASE);
    cr_assert(until >= lo && until <= hi,
              "%s: guarantee %" PRId64 " not within [%" PRId64 ", %" PRId64
              "] (send time + lease - margin)", kinds[k].kind, until, lo, hi);
    int64_t t_b;
    int64_t exp_hi = expiry_hi(key, &t_b);
    cr_assert_leq(until, exp_hi, "%s: guarantee %" PRId64 " after the "
                  "expiry %" PRId64, kinds[k].kind, until, exp_hi);
    cr_log_info("%s: guarantee %" PRId64 " ms before the latest expiry "
                "(margin %" PRId64 ", acquire round trip %" PRId64 ")",
                kinds[k].kind, exp_hi - until, margin(FIXED_LEASE), t1 - t0);
    cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
    rc = rlock_is_lease_guaranteed(lock, &until);
    cr_assert_eq(rc, RLOCK_ENOTOWNER, "%s after unlock: %d %s",
                 kinds[k].kind, rc, rlock_err_name(rc));
    cr_assert_neq(rlock_last_error()[0], '\0');
    rlock_free(lock);
  }
  rlock_client_free(c);
}

/* A re-entry with a shorter lease cuts the key's expiry (RLock's script
 * sets it to the new lease): the guarantee drops with it; an unlock that
 * leaves the lock held re-applies the watchdog timeout, and the guarantee
 * follows. */
Test(lease, reentry_with_shorter_lease_lowers_the_guarantee) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "reentry");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  int64_t wd = 30000;
  int64_t t0 = rlock_now_ms();
  cr_assert_eq(rlock_lock(lock, -1), 0, "%s", rlock_last_error());
  int64_t until = 0;
  cr_assert_eq(rlock_is_lease_guaranteed(lock, &until), 1, "%s",
               rlock_last_error());
  cr_assert_geq(until, t0 + wd - margin(wd));
  check_below_expiry("watchdog hold", key, until);

  int64_t t1 = rlock_now_ms();
  cr_assert_eq(rlock_try_lock(lock, 0, 800), 1, "%s", rlock_last_error());
  int64_t t2 = rlock_now_ms();
  cr_assert_eq(rlock_is_lease_guaranteed(lock, &until), 1, "%s",
               rlock_last_error());
  cr_assert(until >= t1 + 800 - margin(800) && until <= t2 + 800 - margin(800),
            "after a re-entry with an 800 ms lease: %" PRId64 " not in [%"
            PRId64 ", %" PRId64 "]", until, t1 + 800 - margin(800),
            t2 + 800 - margin(800));
  check_below_expiry("re-entered with 800 ms", key, until);

  int64_t t3 = rlock_now_ms();
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  int64_t t4 = rlock_now_ms();
  cr_assert_eq(rlock_is_lease_guaranteed(lock, &until), 1, "%s",
               rlock_last_error());
  cr_assert(until >= t3 + wd - margin(wd) && until <= t4 + wd - margin(wd),
            "after the inner unlock: %" PRId64, until);
  check_below_expiry("inner unlock", key, until);
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  rlock_free(lock);
  rlock_client_free(c);
}

/* ==== the watchdog: the guarantee moves with each confirmed renewal ==== */

Test(lease, watchdog_guarantee_advances_with_renewals) {
  const char *name = "lease-wd";
  char key[KEY_MAX];
  rt_key(key, sizeof key, "wd");
  static lost_log lost;
  rlock_options o;
  int64_t wd = 900;
  wd_options(&o, name, wd, &lost);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  int64_t t0 = rlock_now_ms();
  cr_assert_eq(rlock_lock(lock, -1), 0, "%s", rlock_last_error());
  int64_t t1 = rlock_now_ms();
  int64_t until = 0, last = 0;
  cr_assert_eq(rlock_is_lease_guaranteed(lock, &until), 1, "%s",
               rlock_last_error());
  cr_assert(until >= t0 + wd - margin(wd) && until <= t1 + wd - margin(wd),
            "first guarantee %" PRId64 " not in [%" PRId64 ", %" PRId64 "]",
            until, t0 + wd - margin(wd), t1 + wd - margin(wd));
  last = until;
  int advances = 0, samples = 0;
  int64_t min_head = INT64_MAX;
  while (rlock_now_ms() - t0 < 3000) {
    /* Judged by the time before the call: the library looked no earlier
     * (this thread may be descheduled between the call and a later read). */
    int64_t before = rlock_now_ms();
    int rc = rlock_is_lease_guaranteed(lock, &until);
    int64_t now = rlock_now_ms();
    cr_assert_eq(rc, 1, "sample %d: %d %s (%s)", samples, rc,
                 rlock_err_name(rc), rlock_last_error());
    cr_assert_gt(until, before,
                 "sample %d: 1 for a time passed (guarantee %" PRId64
                 ", asked at %" PRId64 ")",
                 samples, until, before);
    check_below_expiry("watchdog sample", key, until);
    cr_assert_geq(until, last, "the guarantee went back: %" PRId64
                  " -> %" PRId64, last, until);
    if (until > last)
      advances++;
    if (until - now < min_head)
      min_head = until - now;
    last = until;
    samples++;
    rt_sleep_ms(10);
  }
  cr_log_info("%d samples, %d advances in 3000 ms (watchdog %" PRId64
              " ms, renewal every %" PRId64 " ms); least head-room %" PRId64
              " ms", samples, advances, wd, wd / 3, min_head);
  /* A renewal every 300 ms: about 10 in 3 s. */
  cr_assert_geq(advances, 6, "only %d advances", advances);
  cr_assert_eq(atomic_load(&lost.calls), 0);
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  rlock_free(lock);
  rlock_client_free(c);
}

/* ==== the server stops answering ==== */

/* One call: it ran somewhere between `before` and `at`, and its answer is
 * judged at whichever end is the harder test of it (a thread may be
 * descheduled between any two lines, most of all under a sanitizer). */
typedef struct sample {
  int64_t before, at, until;
  int rc;
} sample;

/* Samples the guarantee every 5 ms for ms milliseconds. */
static int sample_for(rlock *lock, int64_t ms, sample *s, int max) {
  int n = 0;
  int64_t end = rlock_now_ms() + ms;
  while (rlock_now_ms() < end && n < max) {
    s[n].until = 0;
    s[n].before = rlock_now_ms();
    s[n].rc = rlock_is_lease_guaranteed(lock, &s[n].until);
    s[n].at = rlock_now_ms();
    n++;
    rt_sleep_ms(5);
  }
  return n;
}

/* Every sample taken while nothing could renew the key: never later than
 * the expiry `exp` measured when the stall began; "guaranteed" (1) only
 * while the time is ahead; and at least one sample past the guarantee. */
static void check_stall(const char *what, const sample *s, int n,
                        int64_t exp) {
  int past = 0;
  int64_t first = s[0].until, lastu = s[0].until;
  for (int i = 0; i < n; i++) {
    cr_assert(s[i].rc == 1 || s[i].rc == 0,
              "%s: sample %d: %d %s", what, i, s[i].rc,
              rlock_err_name(s[i].rc));
    cr_assert_leq(s[i].until, exp, "%s: sample %d (at %" PRId64 "): "
                  "guarantee %" PRId64 " later than the expiry %" PRId64,
                  what, i, s[i].at, s[i].until, exp);
    /* 1 means "ahead of the clock when I looked", and the library looked
     * no earlier than `before`; 0 means "not ahead", no later than `at`. */
    if (s[i].rc == 1) {
      cr_assert_gt(s[i].until, s[i].before,
                   "%s: sample %d: 1 for a time "
                   "passed (guarantee %" PRId64 ", asked at %" PRId64 ")",
                   what, i, s[i].until, s[i].before);
    } else {
      cr_assert_leq(s[i].until, s[i].at,
                    "%s: sample %d: 0 for a time "
                    "still ahead (guarantee %" PRId64 ", answered by %" PRId64
                    ")",
                    what, i, s[i].until, s[i].at);
      past++;
    }
    lastu = s[i].until;
  }
  cr_assert_gt(past, 0, "%s: the guarantee never passed during the stall "
               "(last %" PRId64 ", stall measured expiry %" PRId64 ")",
               what, lastu, exp);
  cr_log_info("%s: %d samples, guarantee %" PRId64 " -> %" PRId64
              " (moved %" PRId64 " ms), %d past; expiry <= %" PRId64
              " (head-room %" PRId64 " ms)", what, n, first, lastu,
              lastu - first, past, exp, exp - lastu);
}

static bool lost_seen(void *arg) {
  return atomic_load(&((lost_log *)arg)->calls) > 0;
}

/* After the stall the key has expired: the next renewal says so. */
static void check_lost_after(rlock *lock, lost_log *lost) {
  rt_wait_until_what(lost_seen, lost, 5000, "on_lock_lost after the stall");
  int64_t until = 0;
  int rc = rlock_is_lease_guaranteed(lock, &until);
  cr_assert_eq(rc, RLOCK_ELOCKLOST, "after the stall: %d %s", rc,
               rlock_err_name(rc));
  cr_assert_neq(rlock_last_error()[0], '\0');
  cr_assert_eq(rlock_unlock(lock), RLOCK_ELOCKLOST);
}

/* CLOCK_REALTIME minus CLOCK_MONOTONIC in microseconds: maps the server's
 * TIME (gettimeofday on this same machine) onto rlock_now_ms()'s clock
 * (libuv's hrtime, CLOCK_MONOTONIC). */
static int64_t realtime_minus_mono_us(void) {
  struct timespec rt, mo;
  clock_gettime(CLOCK_MONOTONIC, &mo);
  clock_gettime(CLOCK_REALTIME, &rt);
  return ((int64_t)rt.tv_sec - (int64_t)mo.tv_sec) * 1000000 +
         ((int64_t)rt.tv_nsec - (int64_t)mo.tv_nsec) / 1000;
}

/* Sends TIME, PTTL key and then `then` on a connection of its own in one
 * write: the server runs them back to back, with no other client's
 * command between them, so nothing renews the key between the measure
 * and `then`. The replies are read by stall_expiry() and then_ok(). */
static redisContext *time_pttl_then(const char *key, const char *then) {
  redisContext *ctx = rt_redis_new(10000);
  redisAppendCommand(ctx, "TIME");
  redisAppendCommand(ctx, "PTTL %s", key);
  redisAppendCommand(ctx, then);
  int done = 0;
  while (!done)
    cr_assert_eq(redisBufferWrite(ctx, &done), REDIS_OK, "%s", ctx->errstr);
  return ctx;
}

/* Reads the TIME and PTTL replies: the key's expiry, on rlock_now_ms()'s
 * clock, taken from the server's own clock when it ran PTTL - so neither
 * the test process being descheduled nor a reply held back by the stall
 * (DEBUG SLEEP writes its replies after the sleep) moves it. The result is
 * the latest the key can expire: PTTL truncates to the millisecond, and
 * one more for the two clocks' reading; at most 2 ms after the real
 * expiry. (Bounds taken around the round trip instead - t_a + pttl - 1 -
 * made a correct guarantee fail when the test was descheduled for more
 * than the margin between t_a and the server running PTTL: 24 ms in a
 * loaded CI run.) */
static int64_t stall_expiry(redisContext *ctx) {
  redisReply *r = NULL;
  cr_assert_eq(redisGetReply(ctx, (void **)&r), REDIS_OK, "%s", ctx->errstr);
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2,
            "TIME: type %d", r->type);
  int64_t server_us = strtoll(r->element[0]->str, NULL, 10) * 1000000 +
                      strtoll(r->element[1]->str, NULL, 10);
  freeReplyObject(r);
  int64_t mono_us = server_us - realtime_minus_mono_us();
  cr_assert_eq(redisGetReply(ctx, (void **)&r), REDIS_OK, "%s", ctx->errstr);
  cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
  long long pttl = r->integer;
  freeReplyObject(r);
  cr_assert_gt(pttl, 0, "the key has no TTL before the stall: %lld", pttl);
  return (mono_us + ((int64_t)pttl + 1) * 1000) / 1000 + 1;
}

/* Reads the reply to `then` and closes the connection. */
static void then_ok(redisContext *ctx, const char *then,
                    const char *then_reply) {
  redisReply *r = NULL;
  cr_assert_eq(redisGetReply(ctx, (void **)&r), REDIS_OK, "%s", ctx->errstr);
  cr_assert(r->type == REDIS_REPLY_STATUS &&
                strncmp(r->str, then_reply, strlen(then_reply)) == 0,
            "%s: %s", then, r->str ? r->str : "?");
  freeReplyObject(r);
  redisFree(ctx);
}

#define STALL_WD 1500
#define STALL_MS 3000

/* A client `name` holding a key in watchdog mode (STALL_WD) for a few
 * renewals, before a stall. */
typedef struct stall {
  char key[KEY_MAX];
  lost_log lost;
  rlock_client *c;
  rlock *lock;
} stall;

static void stall_begin(stall *st, const char *name) {
  rt_key(st->key, sizeof st->key, name);
  atomic_store(&st->lost.calls, 0);
  rlock_options o;
  wd_options(&o, name, STALL_WD, &st->lost);
  st->c = open_named(&o);
  st->lock = rt_lock(st->c, st->key);
  cr_assert_eq(rlock_lock(st->lock, -1), 0, "%s", rlock_last_error());
  rt_sleep_ms(1200); /* a few renewals first */
}

/* The key expired during the stall: the next renewal says so. */
static void stall_end(stall *st) {
  check_lost_after(st->lock, &st->lost);
  rlock_free(st->lock);
  rlock_client_free(st->c);
}

static void client_pause(const char *mode) {
  char name[64];
  snprintf(name, sizeof name, "lease-pause-%s", mode);
  static stall st;
  stall_begin(&st, name);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "CLIENT PAUSE %d %s", STALL_MS, mode);
  redisContext *ctx = time_pttl_then(st.key, cmd);
  int64_t exp = stall_expiry(ctx);
  then_ok(ctx, cmd, "OK");
  static sample s[SAMPLES];
  int n = sample_for(st.lock, STALL_MS - 300, s, SAMPLES);
  check_stall(name, s, n, exp);
  rt_sleep_ms(400); /* the pause is over */
  stall_end(&st);
}

Test(lease, client_pause_write_longer_than_watchdog) { client_pause("WRITE"); }

Test(lease, client_pause_all_longer_than_watchdog) { client_pause("ALL"); }

Test(lease, debug_sleep_longer_than_watchdog) {
  const char *name = "lease-debug-sleep";
  static stall st;
  stall_begin(&st, name);
  /* The server writes the replies only after the sleep: sample first,
   * compare once they came. */
  redisContext *ctx = time_pttl_then(st.key, "DEBUG SLEEP 3");
  static sample s[SAMPLES];
  int n = sample_for(st.lock, STALL_MS - 300, s, SAMPLES);
  int64_t exp = stall_expiry(ctx);
  then_ok(ctx, "DEBUG SLEEP", "OK");
  check_stall(name, s, n, exp);
  stall_end(&st);
}

Test(lease, server_sigstopped_longer_than_watchdog) {
  const char *name = "lease-sigstop";
  static stall st;
  stall_begin(&st, name);
  /* PTTL, then a pause that keeps every renewal out until the SIGSTOP
   * below has landed: no command runs between the measure and the stop. */
  int64_t t_a = rlock_now_ms();
  redisContext *ctx = time_pttl_then(st.key, "CLIENT PAUSE 1000 ALL");
  int64_t exp = stall_expiry(ctx);
  then_ok(ctx, "CLIENT PAUSE", "OK");
  fk_server_freeze();
  cr_assert_lt(rlock_now_ms() - t_a, 900, "too slow to stop the server "
               "within its pause (%" PRId64 " ms)", rlock_now_ms() - t_a);
  static sample s[SAMPLES];
  int n = sample_for(st.lock, STALL_MS, s, SAMPLES);
  fk_server_thaw();
  check_stall(name, s, n, exp);
  stall_end(&st);
}

/* ==== the holder's own process stopped (SIGSTOP of its loop) ==== */

/* In the forked child: hold `key` with the watchdog, then report the
 * guarantee every 5 ms as "rc until now\n" until killed. */
static void reporter_child(int wfd, const char *key) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  rlock_options o;
  fk_options(&o, "lease-child");
  o.watchdog_timeout_ms = STALL_WD;
  o.command_timeout_ms = 1000;
  rlock_client *c = NULL;
  rlock *lock = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc == 0)
    rc = rlock_new(c, key, &lock);
  if (rc == 0)
    rc = rlock_lock(lock, -1);
  if (rc != 0) {
    char line[300];
    snprintf(line, sizeof line, "ERR %d %s\n", rc, rlock_last_error());
    if (write(wfd, line, strlen(line)) < 0)
      _exit(3);
    _exit(2);
  }
  for (;;) {
    /* The call ran between `before` and `after`: the parent judges its
     * answer by `before` (a SIGSTOP may fall between any two lines) and
     * compares the guarantee with the expiry read after `after`. */
    int64_t until = 0, before = rlock_now_ms();
    int r = rlock_is_lease_guaranteed(lock, &until);
    int64_t after = rlock_now_ms();
    char line[128];
    snprintf(line, sizeof line, "%d %" PRId64 " %" PRId64 " %" PRId64 "\n",
             r, until, before, after);
    if (write(wfd, line, strlen(line)) < 0)
      _exit(3);
    usleep(5000);
  }
}

typedef struct report {
  int rc;
  int64_t until, at, after; /* at: just before the call; after: after it */
} report;

/* Reads the child's reports that are complete now (non-blocking). */
static int read_reports(int fd, char *buf, size_t *used, size_t cap,
                        report *out, int max) {
  int n = 0;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0)
      break;
    ssize_t got = read(fd, buf + *used, cap - 1 - *used);
    if (got <= 0)
      break;
    *used += (size_t)got;
  }
  buf[*used] = '\0';
  char *line = buf, *nl;
  while ((nl = strchr(line, '\n')) != NULL && n < max) {
    *nl = '\0';
    cr_assert_neq(strncmp(line, "ERR", 3), 0, "child: %s", line);
    cr_assert_eq(sscanf(line, "%d %" SCNd64 " %" SCNd64 " %" SCNd64,
                        &out[n].rc, &out[n].until, &out[n].at,
                        &out[n].after),
                 4, "bad report '%s'", line);
    n++;
    line = nl + 1;
  }
  size_t rest = strlen(line);
  memmove(buf, line, rest + 1);
  *used = rest;
  return n;
}

Test(lease, holder_process_sigstopped_longer_than_watchdog) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "child");
  int fds[2];
  cr_assert_eq(pipe(fds), 0, "pipe: %s", strerror(errno));
  pid_t child = fork();
  cr_assert_geq(child, 0, "fork: %s", strerror(errno));
  if (child == 0) {
    close(fds[0]);
    reporter_child(fds[1], key);
  }
  close(fds[1]);
  static char buf[1 << 16];
  size_t used = 0;
  static report rep[4 * SAMPLES];
  int nrep = 0;
  /* PTTL samples: (t_a, bound) */
  static int64_t ps_t[4 * SAMPLES], ps_hi[4 * SAMPLES];
  int nps = 0;
  int64_t t0 = rlock_now_ms();
  int64_t t_stop = 0, t_cont = 0;
  bool gone_while_stopped = false;
  int checked = 0, after_cont = 0;
  while (rlock_now_ms() - t0 < 6500) {
    int64_t now = rlock_now_ms();
    if (t_stop == 0 && now - t0 >= 1500 && nrep > 0) {
      cr_assert_eq(kill(child, SIGSTOP), 0);
      t_stop = rlock_now_ms();
    }
    if (t_stop != 0 && t_cont == 0 && now - t_stop >= STALL_MS) {
      cr_assert_eq(kill(child, SIGCONT), 0);
      t_cont = rlock_now_ms();
    }
    int64_t t_a = rlock_now_ms();
    long long pttl = rt_pttl(key);
    if (nps < 4 * SAMPLES) {
      ps_t[nps] = t_a;
      /* the latest this reading allows (see expiry_hi) */
      ps_hi[nps] = bound_of(rlock_now_ms() + 2, pttl);
      nps++;
    }
    if (t_stop != 0 && t_cont == 0 && pttl == -2)
      gone_while_stopped = true;
    nrep += read_reports(fds[0], buf, &used, sizeof buf, rep + nrep,
                         4 * SAMPLES - nrep);
    rt_sleep_ms(5);
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  close(fds[0]);
  cr_assert_gt(t_stop, 0, "the child never reported");
  cr_assert_gt(t_cont, 0);
  cr_assert(gone_while_stopped, "the key did not expire while its holder "
            "was stopped for %d ms (watchdog %d)", STALL_MS, STALL_WD);
  /* Each report against the first PTTL sample sent after it was made. */
  for (int i = 0; i < nrep; i++) {
    int j = 0;
    while (j < nps && ps_t[j] < rep[i].after)
      j++;
    if (rep[i].at >= t_cont) {
      after_cont++;
      cr_assert(rep[i].rc == 0 || rep[i].rc == RLOCK_ELOCKLOST,
                "report at %" PRId64 " after SIGCONT (%" PRId64 "): %d "
                "(the key expired while stopped)", rep[i].at, t_cont,
                rep[i].rc);
    } else {
      cr_assert(rep[i].rc == 1 || rep[i].rc == 0, "report %d: rc %d", i,
                rep[i].rc);
    }
    if (rep[i].rc < 0)
      continue;
    if (j == nps)
      continue; /* no PTTL sample after it */
    if (ps_hi[j] == INT64_MIN)
      continue; /* gone by then: see last_hi below */
    cr_assert_leq(rep[i].until, ps_hi[j], "report %d (at %" PRId64 ", rc "
                  "%d): guarantee %" PRId64 " later than the expiry %"
                  PRId64, i, rep[i].at, rep[i].rc, rep[i].until, ps_hi[j]);
    checked++;
  }
  /* The last expiry measured before the key went: the guarantee of every
   * report after SIGCONT is below it. */
  int64_t last_hi = INT64_MIN;
  for (int j = 0; j < nps; j++)
    if (ps_hi[j] != INT64_MIN && ps_hi[j] != INT64_MAX)
      last_hi = ps_hi[j] > last_hi ? ps_hi[j] : last_hi;
  for (int i = 0; i < nrep; i++)
    if (rep[i].at >= t_cont && rep[i].rc == 0)
      cr_assert_leq(rep[i].until, last_hi, "report after SIGCONT: %" PRId64
                    " > last measured expiry %" PRId64, rep[i].until,
                    last_hi);
  cr_log_info("%d reports (%d checked against a later PTTL, %d after "
              "SIGCONT), %d PTTL samples; stopped %" PRId64 " ms", nrep,
              checked, after_cont, nps, t_cont - t_stop);
  cr_assert_gt(checked, 50);
  cr_assert_gt(after_cont, 0, "no report after SIGCONT");
}

/* ==== errors ==== */

typedef struct cb_state {
  rlock *lock;
  atomic_int rc;
} cb_state;

static void cb_record(int status, int64_t value, void *data) {
  (void)value;
  cb_state *st = data;
  int64_t until = 0;
  /* On the loop thread: allowed (reads local state only). */
  int rc = rlock_is_lease_guaranteed_owner(st->lock, 77, &until);
  atomic_store(&st->rc, status == 1 ? rc : -1000);
}

Test(lease, errors_and_loop_thread) {
  const char *name = "lease-errors";
  char key[KEY_MAX];
  rt_key(key, sizeof key, "errors");
  static lost_log lost;
  rlock_options o;
  wd_options(&o, name, 900, &lost);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  int64_t until = 12345;
  cr_assert_eq(rlock_is_lease_guaranteed(NULL, &until), RLOCK_EINVAL);
  cr_assert_neq(rlock_last_error()[0], '\0');
  cr_assert_eq(rlock_is_lease_guaranteed(lock, NULL), RLOCK_EINVAL);
  cr_assert_neq(rlock_last_error()[0], '\0');
  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c, key, &sem), 0);
  cr_assert_eq(rlock_is_lease_guaranteed((rlock *)sem, &until), RLOCK_EINVAL);
  cr_assert_neq(rlock_last_error()[0], '\0');
  rlock_semaphore_free(sem);
  cr_assert_eq(rlock_is_lease_guaranteed(lock, &until), RLOCK_ENOTOWNER);
  cr_assert(strstr(rlock_last_error(), "not held") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(until, 12345, "*until_ms written on failure");

  /* From an async callback, on the loop thread. */
  static cb_state st;
  st.lock = lock;
  atomic_store(&st.rc, 0);
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(lock, 77, -1, 5000, cb_record, &st, &req), 0);
  int64_t end = rt_now_ms() + 5000;
  while (atomic_load(&st.rc) == 0 && rt_now_ms() < end)
    rt_sleep_ms(2);
  cr_assert_eq(atomic_load(&st.rc), 1, "in the callback: %d",
               atomic_load(&st.rc));
  rlock_req_free(req);
  cr_assert_eq(rlock_unlock_owner(lock, 77), 0, "%s", rlock_last_error());

  /* Lost: deleted behind the watchdog's back. */
  cr_assert_eq(rlock_lock(lock, -1), 0, "%s", rlock_last_error());
  cr_assert_eq(rt_int("DEL %s", key), 1);
  rt_wait_until_what(lost_seen, &lost, 3000, "on_lock_lost");
  int rc = rlock_is_lease_guaranteed(lock, &until);
  cr_assert_eq(rc, RLOCK_ELOCKLOST, "%d %s", rc, rlock_err_name(rc));
  cr_assert(strstr(rlock_last_error(), "lost") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(rlock_unlock(lock), RLOCK_ELOCKLOST);
  cr_assert_eq(rlock_is_lease_guaranteed(lock, &until), RLOCK_ENOTOWNER);
  rlock_free(lock);
  rlock_client_free(c);
  cr_assert_eq(rlock_is_lease_guaranteed_owner(NULL, 1, &until), RLOCK_EINVAL);
}
