/* The MultiLock (rlock_multilock_*; Redisson getMultiLock(RLock...),
 * docs/wire-protocol.md, "The MultiLock", and docs/multilock.md): members
 * of any kinds taken all-or-nothing with Java's algorithm, against a real
 * redis-server. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(multilock, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

static rlock *get_kind(rlock_client *c, const char *kind, const char *name) {
  rlock *l = NULL;
  int rc = RLOCK_EINVAL;
  if (strcmp(kind, "lock") == 0)
    rc = rlock_new(c, name, &l);
  else if (strcmp(kind, "fair") == 0)
    rc = rlock_new_fair(c, name, &l);
  else if (strcmp(kind, "write") == 0)
    rc = rlock_new_write(c, name, &l);
  else if (strcmp(kind, "nonreentrant") == 0)
    rc = rlock_new_nonreentrant(c, name, &l);
  cr_assert_eq(rc, 0, "get %s %s: %s", kind, name, rlock_err_name(rc));
  return l;
}

static rlock *ml_of(rlock *const *m, size_t n) {
  rlock *ml = NULL;
  int rc = rlock_new_multilock(m, n, &ml);
  cr_assert_eq(rc, 0, "rlock_new_multilock: %s", rlock_err_name(rc));
  cr_assert_eq(rlock_member_count(ml), n);
  return ml;
}

/* The common case: a MultiLock of two members (kinds k0, k1) in one client,
 * and a handle of the second member in another client, to hold it. */
typedef struct two {
  rlock_client *c, *other;
  char a[64], b[64];
  rlock *m[2], *held;
  rlock *ml;
} two;

static void two_setup(two *t, const char *ka, const char *kb, const char *k0,
                      const char *k1) {
  t->c = rt_client();
  t->other = rt_client();
  rt_key(t->a, sizeof t->a, ka);
  rt_key(t->b, sizeof t->b, kb);
  t->m[0] = get_kind(t->c, k0, t->a);
  t->m[1] = get_kind(t->c, k1, t->b);
  t->held = get_kind(t->other, k1, t->b);
  t->ml = ml_of(t->m, 2);
}

static void two_teardown(two *t) {
  rlock_free(t->ml);
  rlock_free(t->m[0]);
  rlock_free(t->m[1]);
  rlock_free(t->held);
  rlock_client_free(t->other);
  rlock_client_free(t->c);
}

static bool held_by(rlock_client *c, const char *name, uint64_t id,
                    const char *suffix) {
  char owner[160];
  rt_owner(owner, sizeof owner, c, id);
  strcat(owner, suffix);
  char *v = rt_hget(name, owner);
  bool yes = v != NULL;
  free(v);
  return yes;
}

static long long llen_queue(const char *name) {
  return rt_int("LLEN redisson_lock_queue:{%s}", name);
}
static long long zcard_timeout(const char *name) {
  return rt_int("ZCARD redisson_lock_timeout:{%s}", name);
}

Test(multilock, bad_input_is_einval_and_sends_nothing) {
  rlock_client *c = rt_client();
  char k[64];
  rt_key(k, sizeof k, "mlbad");
  rlock *l = get_kind(c, "lock", k);
  rlock *ml = NULL;
  cr_assert_eq(rlock_new_multilock(&l, 0, &ml), RLOCK_EINVAL);
  cr_assert_null(ml);
  cr_assert(strstr(rlock_last_error(), "at least one member") != NULL);
  rlock *withnull[2] = {l, NULL};
  cr_assert_eq(rlock_new_multilock(withnull, 2, &ml), RLOCK_EINVAL);
  cr_assert_eq(rlock_new_multilock(NULL, 1, &ml), RLOCK_EINVAL);
  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c, k, &sem), 0);
  rlock *notalock[2] = {l, (rlock *)sem};
  cr_assert_eq(rlock_new_multilock(notalock, 2, &ml), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "not a lock") != NULL, "%s",
            rlock_last_error());
  ml = ml_of(&l, 1);
  cr_assert_eq(rlock_try_lock(ml, 100, 0), RLOCK_EINVAL);
  cr_assert_eq(rlock_lock_async(ml, 1, 100, 0, NULL, NULL, NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_req_cancel(NULL), RLOCK_EINVAL);
  cr_assert_eq(rt_exists(k), 0);
  rlock_free(ml);
  rlock_semaphore_free(sem);
  rlock_free(l);
  rlock_client_free(c);
}

/* Members of three kinds on three slots: all taken, each in its own
 * layout, and one unlock releases them all. The handles may be freed
 * before the MultiLock. */
Test(multilock, takes_every_kind_and_unlock_releases_all) {
  rlock_client *c = rt_client();
  char a[64], b[64], w[64];
  rt_key(a, sizeof a, "mla");
  rt_key(b, sizeof b, "mlb");
  rt_key(w, sizeof w, "mlw");
  rlock *m[3] = {get_kind(c, "lock", a), get_kind(c, "fair", b),
                 get_kind(c, "write", w)};
  rlock *ml = ml_of(m, 3);
  for (int i = 0; i < 3; i++)
    rlock_free(m[i]);
  uint64_t me = rlock_thread_id();
  cr_assert_eq(rlock_try_lock(ml, 0, -1), 1, "%s", rlock_last_error());
  cr_assert(held_by(c, a, me, ""));
  cr_assert(held_by(c, b, me, ""));
  cr_assert(held_by(c, w, me, ":write"));
  cr_assert_eq(rlock_is_held_owner(ml, me), 1);
  /* watchdog mode: every member has the watchdog's lease */
  cr_assert_gt(rt_pttl(a), 25000);
  cr_assert_eq(rlock_unlock(ml), 0, "%s", rlock_last_error());
  cr_assert_eq(rt_exists(a) + rt_exists(b) + rt_exists(w), 0);
  cr_assert_eq(rlock_is_held_owner(ml, me), 0);
  cr_assert_eq(rlock_unlock(ml), RLOCK_ENOTOWNER);
  rlock_free(ml);
  rlock_client_free(c);
}

/* Another client holds the last member: a try with a wait fails after the
 * wait, and the members taken before it are released (none held). */
Test(multilock, all_or_nothing_under_contention) {
  rlock_client *c = rt_client(), *other = rt_client();
  char a[64], b[64], d[64];
  rt_key(a, sizeof a, "mlca");
  rt_key(b, sizeof b, "mlcb");
  rt_key(d, sizeof d, "mlcd");
  rlock *m[3] = {get_kind(c, "lock", a), get_kind(c, "lock", b),
                 get_kind(c, "lock", d)};
  rlock *od = get_kind(other, "lock", d);
  cr_assert_eq(rlock_try_lock(od, 0, -1), 1);
  rlock *ml = ml_of(m, 3);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(ml, 400, -1), 0, "%s", rlock_last_error());
  int64_t took = rt_now_ms() - t0;
  cr_assert_geq(took, 390, "returned after %lld ms", (long long)took);
  cr_assert_lt(took, 1400, "returned after %lld ms", (long long)took);
  cr_assert_eq(rt_exists(a), 0, "a member taken before is still held");
  cr_assert_eq(rt_exists(b), 0, "a member taken before is still held");
  cr_assert(held_by(other, d, rlock_thread_id(), ""));
  /* one try (wait 0) fails at once, and leaves nothing either */
  t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(ml, 0, 10000), 0);
  cr_assert_lt(rt_now_ms() - t0, 300);
  cr_assert_eq(rt_exists(a) + rt_exists(b), 0);
  cr_assert_eq(rlock_unlock(od), 0);
  cr_assert_eq(rlock_try_lock(ml, 0, -1), 1);
  cr_assert_eq(rlock_unlock(ml), 0);
  rlock_free(ml);
  for (int i = 0; i < 3; i++)
    rlock_free(m[i]);
  rlock_free(od);
  rlock_client_free(other);
  rlock_client_free(c);
}

typedef struct later {
  rlock *lock;
  int64_t after_ms;
  int rc;
} later;

static void unlock_later(void *arg) {
  later *l = arg;
  rt_sleep_ms(l->after_ms);
  l->rc = rlock_unlock_owner(l->lock, 77);
}

/* A member held elsewhere for 500 ms: the MultiLock waits for it within
 * its wait (each member may use all the time left) and gets all. */
Test(multilock, waits_for_a_member_within_the_wait) {
  two fx;
  two_setup(&fx, "mlwa", "mlwb", "lock", "fair");
  rlock_client *c = fx.c;
  const char *a = fx.a;
  const char *b = fx.b;
  rlock *ob = fx.held;
  cr_assert_eq(rlock_try_lock_owner(ob, 77, 0, -1), 1);
  rlock *ml = fx.ml;
  later l = {ob, 500, -100};
  rt_thread t;
  rt_thread_start(&t, unlock_later, &l);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(ml, 5000, -1), 1, "%s", rlock_last_error());
  int64_t took = rt_now_ms() - t0;
  rt_thread_join(&t, 5000);
  cr_assert_eq(l.rc, 0);
  cr_assert_geq(took, 450, "took %lld ms", (long long)took);
  cr_assert_lt(took, 3000, "took %lld ms", (long long)took);
  cr_assert(held_by(c, a, rlock_thread_id(), ""));
  cr_assert(held_by(c, b, rlock_thread_id(), ""));
  cr_assert_eq(rlock_unlock(ml), 0);
  two_teardown(&fx);
}

/* wait + lease: members are taken with 2 x wait, then every member's keys
 * get the lease asked for (Java's expire; a fair member's queue keys too). */
Test(multilock, a_lease_with_a_wait_is_set_on_every_member_at_the_end) {
  rlock_client *c = rt_client();
  char a[64], b[64];
  rt_key(a, sizeof a, "mlla");
  rt_key(b, sizeof b, "mllb");
  rlock *m[2] = {get_kind(c, "lock", a), get_kind(c, "fair", b)};
  rlock *ml = ml_of(m, 2);
  cr_assert_eq(rlock_try_lock(ml, 1000, 9000), 1, "%s", rlock_last_error());
  /* without the final expire each member would have 2 x 1000 ms */
  long long ta = rt_pttl(a), tb = rt_pttl(b);
  cr_assert(ta > 8000 && ta <= 9000, "PTTL a %lld", ta);
  cr_assert(tb > 8000 && tb <= 9000, "PTTL b %lld", tb);
  cr_assert_eq(rlock_unlock(ml), 0);
  /* lease without a wait: the members are taken with the lease itself */
  cr_assert_eq(rlock_try_lock(ml, 0, 6000), 1);
  ta = rt_pttl(a);
  cr_assert(ta > 5000 && ta <= 6000, "PTTL a %lld", ta);
  cr_assert_eq(rlock_unlock(ml), 0);
  rlock_free(ml);
  rlock_free(m[0]);
  rlock_free(m[1]);
  rlock_client_free(c);
}

typedef struct ml_waiter {
  atomic_int status;
  atomic_int calls;
} ml_waiter;

static void ml_cb(int status, int64_t value, void *data) {
  (void)value;
  ml_waiter *w = data;
  atomic_store(&w->status, status);
  atomic_fetch_add(&w->calls, 1);
}

typedef struct qcond {
  const char *queue_of;
  rlock_client *c;
  const char *held;
} qcond;

static bool queued_and_first_held(void *arg) {
  qcond *q = arg;
  return llen_queue(q->queue_of) == 1 &&
         held_by(q->c, q->held, 5150, "");
}

/* An async MultiLock waiting in a fair member's queue, with the member
 * before it held: cancel leaves no member held and no queue entry. */
Test(multilock, async_cancel_leaves_nothing_held_or_queued) {
  two fx;
  two_setup(&fx, "mlxa", "mlxf", "lock", "fair");
  rlock_client *c = fx.c;
  rlock_client *other = fx.other;
  const char *a = fx.a;
  const char *f = fx.b;
  rlock *of = fx.held;
  cr_assert_eq(rlock_try_lock(of, 0, -1), 1);
  rlock *ml = fx.ml;
  ml_waiter w = {.status = 1000};
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(ml, 5150, -1, -1, ml_cb, &w, &req), 0);
  qcond q = {f, c, a};
  rt_wait_until_what(queued_and_first_held, &q, 5000,
                     "the first member held and the MultiLock queued");
  cr_assert_eq(rlock_req_cancel(req), 0);
  int64_t t0 = rt_now_ms();
  while (atomic_load(&w.calls) == 0 && rt_now_ms() - t0 < 5000)
    rt_sleep_ms(2);
  cr_assert_eq(atomic_load(&w.status), RLOCK_ECANCELED);
  rt_sleep_ms(100);
  cr_assert_eq(atomic_load(&w.calls), 1, "callback exactly once");
  cr_assert_eq(rt_exists(a), 0, "the first member is still held");
  cr_assert_eq(llen_queue(f), 0, "a queue entry was left");
  cr_assert_eq(zcard_timeout(f), 0, "a queue deadline was left");
  cr_assert(held_by(other, f, rlock_thread_id(), ""));
  cr_assert_eq(rlock_req_cancel(req), 0); /* after the end: harmless */
  rlock_req_free(req);
  two_teardown(&fx);
}

/* A timed-out MultiLock with a fair member held elsewhere: none held, and
 * the fair queue is left empty. */
Test(multilock, timeout_with_a_fair_member_leaves_no_queue_entry) {
  two fx;
  two_setup(&fx, "mlta", "mltf", "lock", "fair");
  const char *a = fx.a;
  const char *f = fx.b;
  rlock *of = fx.held;
  cr_assert_eq(rlock_try_lock(of, 0, -1), 1);
  rlock *ml = fx.ml;
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(ml, 300, 5000), 0);
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= 290 && took < 1300, "took %lld ms", (long long)took);
  cr_assert_eq(rt_exists(a), 0);
  cr_assert_eq(llen_queue(f), 0);
  cr_assert_eq(zcard_timeout(f), 0);
  two_teardown(&fx);
}

/* The same name twice, as Java: an RLock is entered twice (count 2) and
 * the unlock releases both; a non-reentrant lock fails with
 * RLOCK_EREENTRY at once and leaves nothing. */
Test(multilock, the_same_name_twice) {
  rlock_client *c = rt_client();
  char a[64], n[64];
  rt_key(a, sizeof a, "mlda");
  rt_key(n, sizeof n, "mldn");
  rlock *l = get_kind(c, "lock", a);
  rlock *twice[2] = {l, l};
  rlock *ml = ml_of(twice, 2);
  cr_assert_eq(rlock_try_lock(ml, 1000, -1), 1);
  cr_assert_eq(rlock_hold_count(l), 2);
  cr_assert_eq(rlock_unlock(ml), 0);
  cr_assert_eq(rt_exists(a), 0);
  rlock_free(ml);

  rlock *first = get_kind(c, "lock", a);
  rlock *nr = get_kind(c, "nonreentrant", n);
  rlock *nr2 = get_kind(c, "nonreentrant", n);
  rlock *m[3] = {first, nr, nr2};
  ml = ml_of(m, 3);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(ml, 3000, -1), RLOCK_EREENTRY);
  cr_assert_lt(rt_now_ms() - t0, 1000);
  cr_assert(strstr(rlock_last_error(), "member 2") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(rt_exists(a) + rt_exists(n), 0);
  rlock_free(ml);
  rlock_free(first);
  rlock_free(nr);
  rlock_free(nr2);
  rlock_free(l);
  rlock_client_free(c);
}

/* lock(): rounds until all are held; a member held elsewhere for 4.5 s
 * (its lease), longer than one round's wait of 2 x 1500 ms. */
Test(multilock, lock_waits_in_rounds_until_all_are_held) {
  two fx;
  two_setup(&fx, "mlra", "mlrb", "lock", "lock");
  rlock_client *c = fx.c;
  const char *a = fx.a;
  const char *b = fx.b;
  rlock *ob = fx.held;
  cr_assert_eq(rlock_try_lock_owner(ob, 77, 0, 4500), 1);
  rlock *ml = fx.ml;
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_lock(ml, -1), 0, "%s", rlock_last_error());
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= 4000 && took < 9000, "took %lld ms", (long long)took);
  cr_assert(held_by(c, a, rlock_thread_id(), ""));
  cr_assert(held_by(c, b, rlock_thread_id(), ""));
  cr_assert_eq(rlock_unlock(ml), 0);
  two_teardown(&fx);
}

/* Overlapping sets {a,b} and {b,c} exclude each other: while one holds,
 * the other's try fails and leaves its own first member free. */
Test(multilock, overlapping_sets_exclude_each_other) {
  rlock_client *c = rt_client(), *other = rt_client();
  char a[64], b[64], d[64];
  rt_key(a, sizeof a, "mloa");
  rt_key(b, sizeof b, "mlob");
  rt_key(d, sizeof d, "mlod");
  rlock *m1[2] = {get_kind(c, "lock", a), get_kind(c, "lock", b)};
  rlock *m2[2] = {get_kind(other, "lock", d), get_kind(other, "lock", b)};
  rlock *x = ml_of(m1, 2), *y = ml_of(m2, 2);
  cr_assert_eq(rlock_try_lock(x, 0, -1), 1);
  cr_assert_eq(rlock_try_lock(y, 200, -1), 0);
  cr_assert_eq(rt_exists(d), 0);
  cr_assert_eq(rlock_unlock(x), 0);
  cr_assert_eq(rlock_try_lock(y, 200, -1), 1);
  cr_assert_eq(rlock_try_lock(x, 100, -1), 0);
  cr_assert_eq(rt_exists(a), 0);
  cr_assert_eq(rlock_unlock(y), 0);
  rlock_free(x);
  rlock_free(y);
  for (int i = 0; i < 2; i++) {
    rlock_free(m1[i]);
    rlock_free(m2[i]);
  }
  rlock_client_free(other);
  rlock_client_free(c);
}

typedef struct interrupter {
  rlock_client *c;
  uint64_t owner;
  int n;
} interrupter;

static void interrupt_later(void *arg) {
  interrupter *i = arg;
  rt_sleep_ms(300);
  i->n = rlock_client_interrupt(i->c, i->owner);
}

/* rlock_client_interrupt() of the owner ends a blocking MultiLock with
 * RLOCK_ECANCELED, nothing held. */
Test(multilock, interrupt_ends_a_blocking_multilock) {
  two fx;
  two_setup(&fx, "mlia", "mlib", "lock", "lock");
  rlock_client *c = fx.c;
  const char *a = fx.a;
  rlock *ob = fx.held;
  cr_assert_eq(rlock_try_lock(ob, 0, -1), 1);
  rlock *ml = fx.ml;
  interrupter in = {c, rlock_thread_id(), -1};
  rt_thread t;
  rt_thread_start(&t, interrupt_later, &in);
  cr_assert_eq(rlock_lock(ml, -1), RLOCK_ECANCELED);
  rt_thread_join(&t, 5000);
  cr_assert_eq(in.n, 1);
  cr_assert_eq(rt_exists(a), 0);
  two_teardown(&fx);
}

static void wait_calls(ml_waiter *w, int n) {
  int64_t t0 = rt_now_ms();
  while (atomic_load(&w->calls) < n && rt_now_ms() - t0 < 5000)
    rt_sleep_ms(2);
  cr_assert_eq(atomic_load(&w->calls), n, "callbacks: %d",
               atomic_load(&w->calls));
}

/* A MultiLock is an rlock *: taken, queried, guarded and released with the
 * lock calls, sync and async, each async call an rlock_req; the calls it
 * cannot make (Java's UnsupportedOperationException) are RLOCK_EINVAL with
 * a detail and change nothing. */
Test(multilock, the_lock_calls_take_query_and_release_a_group) {
  two fx;
  two_setup(&fx, "mlua", "mlub", "lock", "fair");
  rlock *ml = fx.ml;
  cr_assert_str_eq(rlock_kind(ml), "multilock");
  char name[160];
  snprintf(name, sizeof name, "%s,%s", fx.a, fx.b);
  cr_assert_str_eq(rlock_name(ml), name);
  cr_assert_eq(rlock_member_count(ml), 2);
  cr_assert_eq(rlock_quorum(ml), 2);
  cr_assert_eq(rlock_member_count(fx.m[0]), 1);
  cr_assert_eq(rlock_member_count(NULL), 0);

  cr_assert_eq(rlock_try_lock(ml, 1000, 5000), 1);
  cr_assert(held_by(fx.c, fx.a, rlock_thread_id(), ""));
  cr_assert(held_by(fx.c, fx.b, rlock_thread_id(), ""));
  cr_assert_eq(rlock_is_held(ml), 1);
  cr_assert_eq(rlock_is_held_owner(ml, 4242), 0);
  int64_t until = 0, now = rlock_now_ms();
  cr_assert_eq(rlock_is_lease_guaranteed(ml, &until), 1, "%s",
               rlock_last_error());
  /* members taken with 2 x wait (2000 ms), then given the lease (5000):
   * the earliest member's guarantee, at most the lease from now */
  cr_assert(until > now + 1000 && until <= now + 5000, "until %lld, now %lld",
            (long long)until, (long long)now);
  cr_assert_eq(rlock_is_lease_guaranteed_owner(ml, 4242, &until),
               RLOCK_ENOTOWNER);
  cr_assert(strstr(rlock_last_error(), "member 0") != NULL, "%s",
            rlock_last_error());

  /* what a MultiLock has not: an error with a detail, nothing changed */
  int64_t v = 0;
  cr_assert_eq(rlock_is_locked(ml), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "UnsupportedOperationException"), "%s",
            rlock_last_error());
  cr_assert_eq(rlock_force_unlock(ml), RLOCK_EINVAL);
  cr_assert_eq(rlock_hold_count(ml), RLOCK_EINVAL);
  cr_assert_eq(rlock_remain_ttl(ml, &v), RLOCK_EINVAL);
  cr_assert_eq(rlock_force_unlock_holder(ml, "x:1"), RLOCK_EINVAL);
  cr_assert_eq(rlock_lock_fenced(ml, -1, &v), RLOCK_EINVAL);
  cr_assert_eq(rlock_is_locked_async(ml, ml_cb, NULL, NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_force_unlock_async(ml, ml_cb, NULL, NULL), RLOCK_EINVAL);
  cr_assert(held_by(fx.c, fx.a, rlock_thread_id(), ""));
  cr_assert(held_by(fx.c, fx.b, rlock_thread_id(), ""));

  /* the async question and release: one rlock_req each, not an acquire */
  ml_waiter q = {.status = 1000}, u = {.status = 1000};
  rlock_req *qr = NULL, *ur = NULL;
  cr_assert_eq(rlock_is_held_async(ml, rlock_thread_id(), ml_cb, &q, &qr), 0);
  wait_calls(&q, 1);
  cr_assert_eq(atomic_load(&q.status), 1);
  cr_assert_eq(rlock_unlock_async(ml, rlock_thread_id(), ml_cb, &u, &ur), 0);
  cr_assert_eq(rlock_req_cancel(ur), RLOCK_EINVAL);
  wait_calls(&u, 1);
  cr_assert_eq(atomic_load(&u.status), 0, "%s",
               rlock_err_name(atomic_load(&u.status)));
  rlock_req_free(qr);
  rlock_req_free(ur);
  cr_assert_eq(rt_exists(fx.a), 0);
  cr_assert_eq(rt_exists(fx.b), 0);
  cr_assert_eq(rlock_unlock(ml), RLOCK_ENOTOWNER);
  cr_assert(strstr(rlock_last_error(), "member 0") != NULL, "%s",
            rlock_last_error());

  /* the async acquire: the callback once, with 1; then the owner's unlock */
  ml_waiter a = {.status = 1000};
  rlock_req *ar = NULL;
  cr_assert_eq(rlock_lock_async(ml, 77, 1000, -1, ml_cb, &a, &ar), 0);
  wait_calls(&a, 1);
  cr_assert_eq(atomic_load(&a.status), 1);
  cr_assert_eq(rlock_req_cancel(ar), 0); /* after the end: harmless */
  rlock_req_free(ar);
  cr_assert(held_by(fx.c, fx.a, 77, ""));
  cr_assert_eq(rlock_unlock_owner(ml, 77), 0);
  cr_assert_eq(rt_exists(fx.a), 0);
  cr_assert_eq(rt_exists(fx.b), 0);
  rt_sleep_ms(50);
  cr_assert_eq(atomic_load(&a.calls), 1, "callback exactly once");

  /* a lease below 2 x wait: the members' keys get it once all are held,
   * and the guarantee follows (not the 4000 ms they were taken with) */
  now = rlock_now_ms();
  cr_assert_eq(rlock_try_lock(ml, 2000, 800), 1);
  cr_assert_eq(rlock_is_lease_guaranteed(ml, &until), 1, "%s",
               rlock_last_error());
  cr_assert(until > now && until <= now + 800, "until %lld, now %lld",
            (long long)until, (long long)now);
  cr_assert_eq(rlock_unlock(ml), 0, "%s", rlock_last_error());
  two_teardown(&fx);
}

/* A member that is itself a MultiLock is refused (Java would nest it):
 * RLOCK_EINVAL, nothing made or sent. */
Test(multilock, a_group_as_a_member_is_einval) {
  two fx;
  two_setup(&fx, "mlna", "mlnb", "lock", "lock");
  rlock *inner[2] = {fx.m[0], fx.ml};
  rlock *ml = (rlock *)1;
  cr_assert_eq(rlock_new_multilock(inner, 2, &ml), RLOCK_EINVAL);
  cr_assert_null(ml);
  cr_assert(strstr(rlock_last_error(), "member 1 is a multilock"), "%s",
            rlock_last_error());
  cr_assert_eq(rt_exists(fx.a), 0);
  two_teardown(&fx);
}
