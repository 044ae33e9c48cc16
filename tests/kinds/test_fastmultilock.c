/* The FasterMultiLock (rlock_fast_multilock_*; Redisson getMultiLock(group,
 * values); docs/wire-protocol.md, "The FasterMultiLock"): one hash per
 * group, the fields named after HighwayHash-128 of each value, against a
 * real redis-server. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(fastmultilock, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

#define JACK "7pNoDdizVy2xY792MaFv+w"
#define MARY "kIX2DFOX4IWct7G7K6tV9A"
#define TOM "wtBowYvIhL9i3vllpQLwIg"

/* Vectors computed with Redisson's class and StringCodec, listed in
 * docs/wire-protocol.md ("The FasterMultiLock", Key). */
Test(fastmultilock, field_names_match_the_vectors) {
  static const struct {
    const char *value, *field;
  } v[] = {{"Jack_001", JACK}, {"Mary_002", MARY}, {"Tom_003", TOM},
           {"", "t6rZwibGo2uy1OSmNVe8pg"}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char out[RLOCK_FAST_MULTILOCK_FIELD_LEN + 1];
    cr_assert_eq(rlock_fast_multilock_field_name(v[i].value,
                                                 strlen(v[i].value), out),
                 0);
    cr_assert_str_eq(out, v[i].field, "value '%s'", v[i].value);
  }
  cr_assert_eq(rlock_fast_multilock_field_name(NULL, 3, NULL), RLOCK_EINVAL);
}

static rlock *fml(rlock_client *c, const char *group, const char *const *values,
                  size_t n) {
  rlock *f = NULL;
  int rc = rlock_new_fast_multilock(c, group, values, NULL, n, &f);
  cr_assert_eq(rc, 0, "get: %s %s", rlock_err_name(rc), rlock_last_error());
  return f;
}

static char *field_of(const char *group, const char *f, rlock_client *c,
                      uint64_t id, const char *what) {
  char owner[128], name[256];
  rt_owner(owner, sizeof owner, c, id);
  if (what == NULL)
    return rt_hget(group, f);
  snprintf(name, sizeof name, "%s:%s:%s", f, owner, what);
  return rt_hget(group, name);
}

Test(fastmultilock, bad_input) {
  rlock_client *c = rt_client();
  char g[64];
  rt_key(g, sizeof g, "fmlbad");
  rlock *f = NULL;
  const char *vals[2] = {"a", NULL};
  cr_assert_eq(rlock_new_fast_multilock(c, g, vals, NULL, 0, &f), RLOCK_EINVAL);
  cr_assert_eq(rlock_new_fast_multilock(c, g, vals, NULL, 2, &f), RLOCK_EINVAL);
  cr_assert_null(f);
  const char *dup[3] = {"Jack_001", "Jack_001", "Mary_002"};
  f = fml(c, g, dup, 3);
  cr_assert_eq(rlock_member_count(f), 2, "equal values count once");
  cr_assert_eq(rlock_try_lock(f, 0, 0), RLOCK_EINVAL);
  cr_assert_eq(rlock_try_lock(f, 0, INT64_C(1) << 41), RLOCK_EINVAL);
  cr_assert_eq(rlock_fast_multilock_renew_owner(f, 1, -1), RLOCK_EINVAL);
  cr_assert_eq(rt_exists(g), 0);
  rlock_free(f);
  rlock_client_free(c);
}

/* The layout after an acquire, re-entry counts, and the release. */
Test(fastmultilock, layout_reentry_and_release) {
  rlock_client *c = rt_client();
  char g[64];
  rt_key(g, sizeof g, "fmlgrp");
  const char *vals[2] = {"Jack_001", "Mary_002"};
  rlock *f = fml(c, g, vals, 2);
  uint64_t me = rlock_thread_id();
  int64_t wall0 = (int64_t)time(NULL) * 1000;
  cr_assert_eq(rlock_try_lock(f, 0, 10000), 1, "%s", rlock_last_error());
  char owner[128];
  rt_owner(owner, sizeof owner, c, me);
  const char *fields[2] = {JACK, MARY};
  for (int i = 0; i < 2; i++) {
    char *holder = field_of(g, fields[i], c, me, NULL);
    cr_assert_str_eq(holder, owner);
    free(holder);
    char *exp = field_of(g, fields[i], c, me, "expire_time");
    cr_assert_not_null(exp);
    long long e = atoll(exp);
    cr_assert(e >= wall0 + 9000 && e <= wall0 + 12000, "expire_time %lld", e);
    free(exp);
    char *cnt = field_of(g, fields[i], c, me, "lock_count");
    cr_assert_str_eq(cnt, "1");
    free(cnt);
  }
  cr_assert_eq(rt_hlen(g), 6);
  long long ttl = rt_pttl(g);
  cr_assert(ttl > 9000 && ttl <= 10000, "PTTL %lld", ttl);
  cr_assert_eq(rlock_is_held_owner(f, me), 1);
  cr_assert_eq(rlock_is_locked(f), 1);
  /* re-entry */
  cr_assert_eq(rlock_try_lock(f, 0, 10000), 1);
  char *cnt = field_of(g, JACK, c, me, "lock_count");
  cr_assert_str_eq(cnt, "2");
  free(cnt);
  cr_assert_eq(rlock_unlock(f), 0, "still held once");
  cr_assert_eq(rlock_unlock(f), 0);
  cr_assert_eq(rt_exists(g), 0, "every field deleted");
  cr_assert_eq(rlock_unlock(f), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_is_locked(f), 0);
  rlock_free(f);
  rlock_client_free(c);
}

typedef struct later {
  rlock *f;
  int rc;
} later;

static void unlock_later(void *arg) {
  later *l = arg;
  rt_sleep_ms(400);
  l->rc = rlock_unlock_owner(l->f, 88);
}

/* Overlapping value sets exclude each other, all or nothing; a disjoint
 * set is free; a waiter wakes on the group channel's message. */
Test(fastmultilock, overlapping_values_exclude_and_wake) {
  rlock_client *c = rt_client(), *other = rt_client();
  char g[64];
  rt_key(g, sizeof g, "fmlx");
  const char *mine[2] = {"Jack_001", "Mary_002"};
  const char *theirs[2] = {"Mary_002", "Tom_003"};
  const char *free1[1] = {"Jack_001"};
  rlock *a = fml(c, g, mine, 2), *b = fml(other, g, theirs, 2),
        *j = fml(c, g, free1, 1);
  cr_assert_eq(rlock_try_lock_owner(b, 88, 0, 20000), 1);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(a, 300, 20000), 0);
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= 290 && took < 1500, "took %lld", (long long)took);
  char *holder = rt_hget(g, JACK);
  cr_assert_null(holder, "all or nothing: Jack was taken");
  /* a disjoint set is free meanwhile */
  cr_assert_eq(rlock_try_lock_owner(j, 5, 0, 20000), 1);
  cr_assert_eq(rlock_unlock_owner(j, 5), 0);
  later l = {b, -100};
  rt_thread t;
  rt_thread_start(&t, unlock_later, &l);
  t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(a, 10000, 20000), 1);
  took = rt_now_ms() - t0;
  rt_thread_join(&t, 5000);
  cr_assert_eq(l.rc, 0);
  /* the hint was the holder's 20 s: only the message woke it this soon */
  cr_assert(took >= 350 && took < 3000, "took %lld", (long long)took);
  cr_assert_eq(rlock_unlock(a), 0);
  rlock_free(a);
  rlock_free(b);
  rlock_free(j);
  rlock_client_free(other);
  rlock_client_free(c);
}

/* Where rlock does better than Java without changing the wire: an unlock
 * with a value not held changes nothing (Java decrements the ones before
 * it); is_held checks the first value too (Java skips it); force unlock of
 * a value nobody holds is no Lua error; taking a value whose other holder's
 * hold ended deletes that holder's stale fields. */
Test(fastmultilock, java_bugs_not_repeated) {
  rlock_client *c = rt_client(), *other = rt_client();
  char g[64];
  rt_key(g, sizeof g, "fmlbugs");
  const char *jm[2] = {"Jack_001", "Mary_002"};
  const char *mj[2] = {"Mary_002", "Jack_001"};
  const char *j1[1] = {"Jack_001"};
  const char *t1[1] = {"Tom_003"};
  rlock *both = fml(c, g, jm, 2), *both2 = fml(c, g, mj, 2),
        *jack = fml(c, g, j1, 1), *tom = fml(other, g, t1, 1),
        *ojack = fml(other, g, j1, 1);
  uint64_t me = rlock_thread_id();
  cr_assert_eq(rlock_try_lock(jack, 0, 20000), 1);
  cr_assert_eq(rlock_unlock(both), RLOCK_ENOTOWNER);
  char *cnt = field_of(g, JACK, c, me, "lock_count");
  cr_assert_str_eq(cnt, "1", "the unlock changed Jack's count");
  free(cnt);
  /* Jack held, Mary not: Java's check (from the second value on) would
   * say held for [Jack, Mary]... and for [Mary, Jack] it skips Mary */
  cr_assert_eq(rlock_is_held_owner(both, me), 0);
  cr_assert_eq(rlock_is_held_owner(both2, me), 0);
  cr_assert_eq(rlock_force_unlock(both), 1, "one value had a holder");
  cr_assert_eq(rt_exists(g), 0);
  /* as for a lock: the client's hold of Jack was lost */
  cr_assert_eq(rlock_unlock(jack), RLOCK_ELOCKLOST);
  /* stale fields: the other owner's Jack hold ends (200 ms) while its Tom
   * keeps the hash alive */
  cr_assert_eq(rlock_try_lock_owner(tom, 9, 0, 20000), 1);
  cr_assert_eq(rlock_try_lock_owner(ojack, 9, 0, 200), 1);
  rt_sleep_ms(300);
  cr_assert_eq(rlock_try_lock(jack, 0, 20000), 1);
  char *stale = field_of(g, JACK, other, 9, "expire_time");
  cr_assert_null(stale, "the ended holder's fields were left");
  stale = field_of(g, JACK, other, 9, "lock_count");
  cr_assert_null(stale);
  /* renewal (Java's script) moves the expiry */
  cr_assert_eq(rlock_fast_multilock_renew_owner(jack, me, 60000), 1);
  char *exp = field_of(g, JACK, c, me, "expire_time");
  cr_assert(atoll(exp) > (long long)time(NULL) * 1000 + 50000);
  free(exp);
  cr_assert_eq(rlock_fast_multilock_renew_owner(tom, me, 60000), 0,
               "not the owner's");
  cr_assert_eq(rlock_unlock(jack), 0);
  cr_assert_eq(rlock_unlock_owner(tom, 9), 0);
  cr_assert_eq(rt_exists(g), 0);
  rlock_free(both);
  rlock_free(both2);
  rlock_free(jack);
  rlock_free(tom);
  rlock_free(ojack);
  rlock_client_free(other);
  rlock_client_free(c);
}

/* ---- watchdog mode (lease_ms < 0) ---- */

typedef struct fml_lost {
  atomic_int n;
  char name[96];
  char owner[128];
} fml_lost;

static void on_fml_lost(const char *name, const char *owner, void *data) {
  fml_lost *l = data;
  snprintf(l->name, sizeof l->name, "%s", name);
  snprintf(l->owner, sizeof l->owner, "%s", owner);
  atomic_fetch_add(&l->n, 1);
}

static bool fml_lost_seen(void *arg) {
  return atomic_load(&((fml_lost *)arg)->n) > 0;
}

static rlock_client *wd_client(fml_lost *seen) {
  memset(seen, 0, sizeof *seen);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  o.on_lock_lost = on_fml_lost;
  o.on_lock_lost_data = seen;
  return rt_client_opts(&o);
}

static long long expire_of(const char *g, const char *field, rlock_client *c,
                           uint64_t id) {
  char *v = field_of(g, field, c, id, "expire_time");
  cr_assert_not_null(v, "no expire_time for %s", field);
  long long e = atoll(v);
  free(v);
  return e;
}

/* Held for 3 s (more than three watchdog timeouts) with every field's
 * expire_time moving forward; a re-entry's release keeps renewing; the
 * last release stops it (a later renewal would find another owner's
 * fields and call the loss callback). */
Test(fastmultilock, watchdog_renews_until_unlock) {
  static fml_lost seen;
  rlock_client *c = wd_client(&seen);
  char g[64];
  rt_key(g, sizeof g, "fmlwd");
  const char *vals[2] = {"Jack_001", "Mary_002"};
  rlock *f = fml(c, g, vals, 2);
  uint64_t me = rlock_thread_id();
  int64_t wall0 = (int64_t)time(NULL) * 1000;
  cr_assert_eq(rlock_try_lock(f, 0, -1), 1, "%s", rlock_last_error());
  long long ttl = rt_pttl(g);
  cr_assert(ttl > 0 && ttl <= 900, "lease = the watchdog timeout: %lld", ttl);
  long long last[2] = {expire_of(g, JACK, c, me), expire_of(g, MARY, c, me)};
  cr_assert(last[0] >= wall0 && last[0] <= wall0 + 2900, "%lld", last[0]);
  int moved[2] = {0, 0};
  int64_t end = rt_now_ms() + 3000;
  while (rt_now_ms() < end) {
    rt_sleep_ms(200);
    ttl = rt_pttl(g);
    cr_assert(ttl > 0 && ttl <= 900, "PTTL %lld", ttl);
    const char *fields[2] = {JACK, MARY};
    for (int i = 0; i < 2; i++) {
      long long e = expire_of(g, fields[i], c, me);
      cr_assert(e >= last[i], "expire_time went back");
      if (e > last[i])
        moved[i]++;
      last[i] = e;
    }
  }
  cr_assert(moved[0] >= 2 && moved[1] >= 2, "renewed %d and %d times",
            moved[0], moved[1]);
  /* a re-entry, released once: still held and still renewed */
  cr_assert_eq(rlock_try_lock(f, 0, -1), 1);
  cr_assert_eq(rlock_unlock(f), 0);
  long long before = expire_of(g, JACK, c, me);
  rt_sleep_ms(1200);
  cr_assert(expire_of(g, JACK, c, me) > before, "renewed after re-entry");
  cr_assert_eq(rlock_unlock(f), 0);
  cr_assert_eq(rt_exists(g), 0);
  /* another owner takes the values: a renewal by the first would answer 0
   * and be reported as a loss */
  cr_assert_eq(rlock_try_lock_owner(f, me + 1000, 0, 10000), 1);
  long long other = expire_of(g, JACK, c, me + 1000);
  rt_sleep_ms(1000);
  cr_assert_eq(atomic_load(&seen.n), 0, "renewals stopped at the unlock");
  cr_assert_eq(expire_of(g, JACK, c, me + 1000), other);
  cr_assert_eq(rlock_unlock_owner(f, me + 1000), 0);
  rlock_free(f);
  rlock_client_free(c);
}

/* The group deleted from outside: the next renewal reports the loss once,
 * the unlock answers RLOCK_ELOCKLOST, then nothing is held. */
Test(fastmultilock, watchdog_reports_loss) {
  static fml_lost seen;
  rlock_client *c = wd_client(&seen);
  char g[64], owner[128];
  rt_key(g, sizeof g, "fmlwdlost");
  const char *vals[2] = {"Jack_001", "Tom_003"};
  rlock *f = fml(c, g, vals, 2);
  cr_assert_eq(rlock_try_lock(f, 0, -1), 1);
  rt_sleep_ms(700);
  cr_assert_eq(atomic_load(&seen.n), 0);
  freeReplyObject(rt_cmd("DEL %s", g));
  rt_wait_until(fml_lost_seen, &seen, 3000);
  cr_assert_str_eq(seen.name, g);
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  cr_assert_str_eq(seen.owner, owner);
  rt_sleep_ms(1000);
  cr_assert_eq(atomic_load(&seen.n), 1, "said once");
  cr_assert_eq(rt_exists(g), 0, "a renewal creates nothing");
  cr_assert_eq(rlock_unlock(f), RLOCK_ELOCKLOST);
  cr_assert_eq(rlock_unlock(f), RLOCK_ENOTOWNER);
  rlock_free(f);
  rlock_client_free(c);
  cr_assert_eq(atomic_load(&seen.n), 1);
}

/* Free, or close, while renewing: the renewals stop (the hold then ends
 * with its lease) and nothing is left behind (ASan/LSan builds). */
Test(fastmultilock, watchdog_free_and_close_while_renewing) {
  static fml_lost seen;
  rlock_client *c = wd_client(&seen);
  char g[64], g2[64];
  rt_key(g, sizeof g, "fmlwdfree");
  rt_key(g2, sizeof g2, "fmlwdclose");
  const char *vals[2] = {"Jack_001", "Mary_002"};
  rlock *f = fml(c, g, vals, 2);
  rlock *f2 = fml(c, g2, vals, 2);
  cr_assert_eq(rlock_try_lock(f, 0, -1), 1);
  cr_assert_eq(rlock_try_lock(f2, 0, -1), 1);
  rt_sleep_ms(1000);
  cr_assert_eq(rt_exists(g), 1);
  rlock_free(f);
  rt_sleep_ms(1500);
  cr_assert_eq(rt_exists(g), 0, "free stopped the renewal");
  cr_assert_eq(rt_exists(g2), 1, "the other handle still renews");
  rlock_client_free(c); /* f2 still renewing, freed after the close */
  rlock_free(f2);
  rt_sleep_ms(1500);
  cr_assert_eq(rt_exists(g2), 0, "close stopped the renewal");
  cr_assert_eq(atomic_load(&seen.n), 0);
}

typedef struct fml_waiter {
  atomic_int status;
  atomic_int calls;
} fml_waiter;

static void fml_cb(int status, int64_t value, void *data) {
  (void)value;
  fml_waiter *w = data;
  atomic_store(&w->status, status);
  atomic_fetch_add(&w->calls, 1);
}

static void wait_calls(fml_waiter *w, int n) {
  int64_t t0 = rt_now_ms();
  while (atomic_load(&w->calls) < n && rt_now_ms() - t0 < 5000)
    rt_sleep_ms(2);
  cr_assert_eq(atomic_load(&w->calls), n, "callbacks: %d",
               atomic_load(&w->calls));
}

/* A FasterMultiLock is an rlock *: the lock calls take it, sync and async,
 * each async call an rlock_req; a cancelled async acquire leaves nothing
 * taken; the calls it cannot make are RLOCK_EINVAL with a detail. */
Test(fastmultilock, the_lock_calls_take_it_sync_and_async) {
  rlock_client *c = rt_client(), *other = rt_client();
  char g[64];
  rt_key(g, sizeof g, "fmlu");
  const char *mine[2] = {"Jack_001", "Mary_002"};
  const char *theirs[1] = {"Mary_002"};
  rlock *a = fml(c, g, mine, 2), *b = fml(other, g, theirs, 1);
  cr_assert_str_eq(rlock_kind(a), "fast_multilock");
  cr_assert_eq(rlock_member_count(a), 2);
  cr_assert_eq(rlock_quorum(a), 2);
  cr_assert_eq(rlock_try_lock_owner(b, 88, 0, 20000), 1);

  /* an async acquire waiting for Mary, cancelled: nothing taken */
  fml_waiter w = {.status = 1000};
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(a, 7, -1, -1, fml_cb, &w, &req), 0);
  rt_sleep_ms(300);
  cr_assert_eq(atomic_load(&w.calls), 0, "it waits");
  cr_assert_eq(rlock_req_cancel(req), 0);
  wait_calls(&w, 1);
  cr_assert_eq(atomic_load(&w.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  char *jack = rt_hget(g, JACK);
  cr_assert_null(jack, "all or nothing: Jack was taken");
  cr_assert_eq(rlock_unlock_owner(b, 88), 0);

  /* the async acquire in watchdog mode, the queries, the async release */
  fml_waiter t = {.status = 1000}, q = {.status = 1000}, u = {.status = 1000};
  cr_assert_eq(rlock_lock_async(a, 7, 2000, -1, fml_cb, &t, NULL), 0);
  wait_calls(&t, 1);
  cr_assert_eq(atomic_load(&t.status), 1);
  cr_assert_eq(rlock_is_held_owner(a, 7), 1);
  cr_assert_eq(rlock_is_held_owner(a, 8), 0);
  cr_assert_eq(rlock_is_locked(a), 1);
  cr_assert_eq(rlock_is_held_async(a, 7, fml_cb, &q, NULL), 0);
  wait_calls(&q, 1);
  cr_assert_eq(atomic_load(&q.status), 1);
  int64_t v = 0;
  cr_assert_eq(rlock_hold_count_owner(a, 7), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "FasterMultiLock"), "%s",
            rlock_last_error());
  cr_assert_eq(rlock_remain_ttl(a, &v), RLOCK_EINVAL);
  /* the engine's hold: guaranteed for about the watchdog timeout */
  cr_assert_eq(rlock_is_lease_guaranteed_owner(a, 7, &v), 1, "%s",
               rlock_last_error());
  cr_assert(v > rlock_now_ms() && v <= rlock_now_ms() + 30000, "%lld",
            (long long)v);
  cr_assert_eq(rlock_is_lease_guaranteed_owner(a, 8, &v), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_force_unlock_holder(a, "x:1"), RLOCK_EINVAL);
  cr_assert_eq(rlock_lock_fenced(a, -1, &v), RLOCK_EINVAL);
  cr_assert_eq(rlock_is_held_owner(a, 7), 1, "nothing changed");
  /* a FasterMultiLock is no member of a MultiLock */
  rlock *m[1] = {a}, *ml = (rlock *)1;
  cr_assert_eq(rlock_new_multilock(m, 1, &ml), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "member 0 is a fast_multilock"), "%s",
            rlock_last_error());
  cr_assert_null(ml);
  rlock_req *ur = NULL;
  cr_assert_eq(rlock_unlock_async(a, 7, fml_cb, &u, &ur), 0);
  cr_assert_eq(rlock_req_cancel(ur), RLOCK_EINVAL);
  wait_calls(&u, 1);
  cr_assert_eq(atomic_load(&u.status), 0);
  rlock_req_free(ur);
  cr_assert_eq(rt_exists(g), 0);
  cr_assert_eq(rlock_unlock_owner(a, 7), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_force_unlock(a), 0);
  rlock_free(a);
  rlock_free(b);
  rlock_client_free(other);
  rlock_client_free(c);
}

/* The async acquire without a lease starts the owner's watchdog as the
 * blocking one does: the values outlive the watchdog timeout, renewed,
 * until the unlock. */
Test(fastmultilock, async_acquire_starts_the_watchdog) {
  static fml_lost seen;
  rlock_client *c = wd_client(&seen);
  char g[64];
  rt_key(g, sizeof g, "fmlaw");
  const char *vals[1] = {"Jack_001"};
  rlock *f = fml(c, g, vals, 1);
  fml_waiter w = {.status = 1000};
  cr_assert_eq(rlock_lock_async(f, 31, 0, -1, fml_cb, &w, NULL), 0);
  wait_calls(&w, 1);
  cr_assert_eq(atomic_load(&w.status), 1);
  long long first = expire_of(g, JACK, c, 31);
  rt_sleep_ms(2000); /* over twice the 900 ms watchdog timeout */
  cr_assert(rt_pttl(g) > 0, "the values expired: no watchdog");
  cr_assert(expire_of(g, JACK, c, 31) > first, "not renewed");
  cr_assert_eq(rlock_unlock_owner(f, 31), 0);
  cr_assert_eq(rt_exists(g), 0);
  cr_assert_eq(atomic_load(&seen.n), 0);
  rlock_free(f);
  rlock_client_free(c);
}

/* The holds are the engine's (issue 34): the same events as a lock's
 * (ACQUIRED, RELEASED; LOST when the group is deleted from outside), the
 * renewals counted in the stats, the lease guarantee moved by them; two
 * handles of one owner on overlapping values hold apart. */
typedef struct fml_events {
  atomic_int acquired, released, lost, at_risk;
  char lost_name[96];
} fml_events;

static void on_fml_event(const rlock_event *ev, void *data) {
  fml_events *r = data;
  if (strcmp(ev->kind, "fast_multilock") != 0)
    return;
  if (ev->type == RLOCK_EVENT_ACQUIRED)
    atomic_fetch_add(&r->acquired, 1);
  else if (ev->type == RLOCK_EVENT_RELEASED)
    atomic_fetch_add(&r->released, 1);
  else if (ev->type == RLOCK_EVENT_LEASE_AT_RISK)
    atomic_fetch_add(&r->at_risk, 1);
  else if (ev->type == RLOCK_EVENT_LOST) {
    snprintf(r->lost_name, sizeof r->lost_name, "%s", ev->name);
    atomic_fetch_add(&r->lost, 1);
  }
}

static bool fml_event_lost(void *arg) {
  return atomic_load(&((fml_events *)arg)->lost) > 0;
}

static uint64_t renewals_confirmed(rlock_client *c) {
  rlock_stats s;
  rlock_stats_init(&s);
  cr_assert_eq(rlock_client_stats(c, &s), 0);
  return s.renewals_confirmed;
}

Test(fastmultilock, holds_are_the_engines_events_stats_lease) {
  static fml_events r;
  memset(&r, 0, sizeof r);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  o.on_event = on_fml_event;
  o.on_event_data = &r;
  rlock_client *c = rt_client_opts(&o);
  char g[64];
  rt_key(g, sizeof g, "fmlev");
  const char *jm[2] = {"Jack_001", "Mary_002"};
  const char *mt[2] = {"Mary_002", "Tom_003"};
  rlock *f = fml(c, g, jm, 2), *f2 = fml(c, g, mt, 2);
  uint64_t me = rlock_thread_id();

  /* held past the watchdog timeout: renewals counted, guarantee moves */
  uint64_t before = renewals_confirmed(c);
  cr_assert_eq(rlock_try_lock(f, 0, -1), 1, "%s", rlock_last_error());
  int64_t v0 = 0, v1 = 0;
  cr_assert_eq(rlock_is_lease_guaranteed(f, &v0), 1);
  rt_sleep_ms(1500);
  cr_assert(renewals_confirmed(c) >= before + 2, "renewals %llu -> %llu",
            (unsigned long long)before,
            (unsigned long long)renewals_confirmed(c));
  cr_assert_eq(rlock_is_lease_guaranteed(f, &v1), 1, "%s", rlock_last_error());
  cr_assert(v1 > v0, "guarantee did not move: %lld, %lld", (long long)v0,
            (long long)v1);
  cr_assert_eq(rt_pttl(g) > 0, 1, "the values expired");

  /* a second handle of the same owner over an overlapping value: its own
   * hold; releasing the first ends only the first's */
  cr_assert_eq(rlock_try_lock(f2, 0, -1), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(f), 0);
  cr_assert_eq(atomic_load(&r.released), 1);
  cr_assert_eq(rlock_is_lease_guaranteed(f, &v1), RLOCK_ENOTOWNER);
  rt_sleep_ms(1500); /* f2's renewals keep Mary and Tom, no loss */
  cr_assert_eq(atomic_load(&r.lost), 0);
  cr_assert_eq(rlock_is_held_owner(f2, me), 1);
  cr_assert_eq(rlock_is_lease_guaranteed(f2, &v1), 1);

  /* deleted from outside: LOST once, no guarantee, the unlock says so */
  freeReplyObject(rt_cmd("DEL %s", g));
  rt_wait_until(fml_event_lost, &r, 3000);
  cr_assert_eq(atomic_load(&r.lost), 1);
  cr_assert_str_eq(r.lost_name, g);
  cr_assert_eq(rlock_is_lease_guaranteed(f2, &v1), RLOCK_ELOCKLOST);
  cr_assert_eq(rlock_is_held_owner(f2, me), 0);
  cr_assert_eq(rlock_unlock(f2), RLOCK_ELOCKLOST);
  cr_assert_eq(atomic_load(&r.acquired), 2);
  cr_assert_eq(atomic_load(&r.released), 1);
  rlock_free(f);
  rlock_free(f2);
  rlock_client_free(c);
}
