/* The non-reentrant lock and fair lock (rlock_new_nonreentrant,
 * rlock_new_nonreentrant_fair; Redisson getNonReentrantLock /
 * getNonReentrantFairLock): RLock's
 * and the fair lock's keys and channels, an acquire whose last ARGV is the
 * marker NON_REENTRANT_REACQUIRE, and a re-acquire by the holder refused
 * at once with RLOCK_EREENTRY (docs/wire-protocol.md, "The non-reentrant
 * locks"). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(nonreentrant, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

#define MARKER "NON_REENTRANT_REACQUIRE"

static rlock *nr(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_nonreentrant(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_nonreentrant: %s", rlock_err_name(rc));
  cr_assert_str_eq(rlock_kind(l), "nonreentrant");
  return l;
}

static rlock *nr_fair(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_nonreentrant_fair(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_nonreentrant_fair: %s", rlock_err_name(rc));
  cr_assert_str_eq(rlock_kind(l), "nonreentrant_fair");
  return l;
}

/* HGET name owner as a number; 0 when absent. */
static long long count_of(rlock_client *c, const char *name, uint64_t id) {
  char owner[128];
  rt_owner(owner, sizeof owner, c, id);
  char *v = rt_hget(name, owner);
  long long n = v != NULL ? atoll(v) : 0;
  free(v);
  return n;
}

static long long evalsha_calls(void) {
  char *info = rt_str("INFO commandstats");
  long long n = 0;
  const char *p = strstr(info, "cmdstat_evalsha:calls=");
  if (p != NULL)
    n = atoll(p + strlen("cmdstat_evalsha:calls="));
  free(info);
  return n;
}

static long long eval_calls(void) {
  char *info = rt_str("INFO commandstats");
  long long n = 0;
  const char *p = strstr(info, "cmdstat_eval:calls=");
  if (p != NULL)
    n = atoll(p + strlen("cmdstat_eval:calls="));
  free(info);
  return n;
}

/* ---- async waiters ---- */

#define PENDING 1000

typedef struct waiter {
  atomic_int status;
  rlock_req *req;
} waiter;

static void waiter_cb(int status, int64_t value, void *data) {
  (void)value;
  atomic_store(&((waiter *)data)->status, status);
}

static void waiter_start(waiter *w, rlock *l, uint64_t owner,
                         int64_t wait_ms) {
  atomic_init(&w->status, PENDING);
  w->req = NULL;
  int rc = rlock_lock_async(l, owner, wait_ms, 30000, waiter_cb, w, &w->req);
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

typedef struct len_cond {
  const char *key;
  long long want;
} len_cond;

static bool llen_is(void *arg) {
  len_cond *c = arg;
  return rt_int("LLEN %s", c->key) == c->want;
}

static bool one_sub(void *arg) { return rt_numsub(arg) == 1; }

/* ---- the plain one ---- */

Test(nonreentrant, acquire_release_count_one) {
  rlock_client *c = rt_client();
  char name[64];
  rt_key(name, sizeof name, "nr");
  rlock *l = nr(c, name);
  cr_assert_eq(rlock_try_lock_owner(l, 1, 0, 30000), 1);
  cr_assert_eq(count_of(c, name, 1), 1);
  cr_assert_eq(rlock_hold_count_owner(l, 1), 1);
  cr_assert_eq(rlock_is_held_owner(l, 1), 1);
  cr_assert_gt(rt_pttl(name), 29000);
  cr_assert_eq(rlock_unlock_owner(l, 1), 0);
  cr_assert_eq(rt_exists(name), 0);
  /* and again, through rlock_lock */
  cr_assert_eq(rlock_lock_owner(l, 1, 30000), 0);
  cr_assert_eq(count_of(c, name, 1), 1);
  cr_assert_eq(rlock_unlock_owner(l, 1), 0);
  cr_assert_eq(rt_exists(name), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* The holder's second acquire fails on its first try: RLOCK_EREENTRY with
 * the marker in the detail, no wait (wait_ms 5 s), no SUBSCRIBE, the hash
 * unchanged (count 1, TTL not refreshed). */
Test(nonreentrant, reacquire_refused_at_once) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "nr");
  rt_lock_channel(chan, sizeof chan, name);
  rlock *l = nr(c, name);
  cr_assert_eq(rlock_try_lock_owner(l, 1, 0, 20000), 1);
  rt_ok("OK", "CONFIG RESETSTAT");
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock_owner(l, 1, 5000, 60000);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_EREENTRY, "got %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert(strstr(rlock_last_error(), MARKER) != NULL, "detail: %s",
            rlock_last_error());
  cr_assert_lt(took, 1000, "refused in %lld ms", (long long)took);
  cr_assert_eq(rlock_lock_owner(l, 1, 60000), RLOCK_EREENTRY);
  waiter w; /* and the async form's callback */
  waiter_start(&w, l, 1, 5000);
  cr_assert_eq(waiter_wait(&w, 1000, "async refusal"), RLOCK_EREENTRY);
  cr_assert_eq(rt_numsub(chan), 0);
  char *stats = rt_str("INFO commandstats");
  cr_assert(strstr(stats, "cmdstat_subscribe") == NULL, "%s", stats);
  free(stats);
  cr_assert_eq(count_of(c, name, 1), 1);
  cr_assert_lt(rt_pttl(name), 20001, "the lease was not refreshed");
  cr_assert_eq(rlock_hold_count_owner(l, 1), 1);
  /* still held: the refusal took nothing away */
  cr_assert_eq(rlock_unlock_owner(l, 1), 0);
  cr_assert_eq(rt_exists(name), 0);
  cr_assert_eq(rlock_unlock_owner(l, 1), RLOCK_ENOTOWNER);
  rlock_free(l);
  rlock_client_free(c);
}

/* Interchangeable with RLock on one name, as in Java: an RLock handle of
 * the holder re-enters a non-reentrant hold (count 2); a non-reentrant
 * acquire over the owner's RLock hold is refused. */
Test(nonreentrant, mixed_with_rlock) {
  rlock_client *c = rt_client();
  char name[64];
  rt_key(name, sizeof name, "nr");
  rlock *n = nr(c, name), *r = rt_lock(c, name);
  cr_assert_eq(rlock_try_lock_owner(n, 1, 0, 30000), 1);
  cr_assert_eq(rlock_try_lock_owner(r, 1, 0, 30000), 1, "RLock re-enters");
  cr_assert_eq(count_of(c, name, 1), 2);
  cr_assert_eq(rlock_try_lock_owner(n, 1, 0, 30000), RLOCK_EREENTRY);
  cr_assert_eq(count_of(c, name, 1), 2);
  cr_assert_eq(rlock_unlock_owner(r, 1), 0, "still held (count 2 -> 1)");
  cr_assert_eq(count_of(c, name, 1), 1);
  cr_assert_eq(rlock_unlock_owner(n, 1), 0);
  cr_assert_eq(rt_exists(name), 0);

  /* the reverse: RLock first */
  cr_assert_eq(rlock_try_lock_owner(r, 2, 0, 30000), 1);
  cr_assert_eq(rlock_try_lock_owner(n, 2, 0, 30000), RLOCK_EREENTRY);
  cr_assert_eq(count_of(c, name, 2), 1);
  /* another owner just finds it busy */
  cr_assert_eq(rlock_try_lock_owner(n, 3, 100, 30000), 0);
  cr_assert_eq(rlock_unlock_owner(r, 2), 0);
  cr_assert_eq(rt_exists(name), 0);
  /* rlock_client_force_unlock knows the kinds by rlock_kind()'s names */
  cr_assert_eq(rlock_try_lock_owner(n, 4, 0, 30000), 1);
  cr_assert_eq(rlock_client_force_unlock(c, name, "nonreentrant", NULL), 1);
  cr_assert_eq(rt_exists(name), 0);
  cr_assert_eq(rlock_try_lock_owner(n, 4, 0, 30000), 1);
  cr_assert_eq(rlock_client_force_unlock(c, name, "nonreentrant_fair", NULL),
               1);
  cr_assert_eq(rt_exists(name), 0);
  rlock_free(n);
  rlock_free(r);
  rlock_client_free(c);
}

/* A waiter (another owner) sleeps on RLock's channel and is woken by the
 * release's "0", long before the holder's 30 s lease. */
Test(nonreentrant, waiter_woken_by_release) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "nr");
  rt_lock_channel(chan, sizeof chan, name);
  rlock *l = nr(c, name);
  cr_assert_eq(rlock_try_lock_owner(l, 1, 0, 30000), 1);
  redisContext *sub = rt_redis_new(5000);
  redisReply *sr = redisCommand(sub, "SUBSCRIBE %s", chan);
  cr_assert(sr != NULL && sr->type == REDIS_REPLY_ARRAY);
  freeReplyObject(sr);
  waiter w;
  waiter_start(&w, l, 2, 20000);
  long long want = 2; /* ours and the sniffer */
  for (int i = 0; i < 2500 && rt_numsub(chan) != want; i++)
    rt_sleep_ms(2);
  cr_assert_eq(rt_numsub(chan), want, "the waiter subscribed");
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_unlock_owner(l, 1), 0);
  cr_assert_eq(waiter_wait(&w, 5000, "woken"), 1);
  cr_assert_lt(rt_now_ms() - t0, 3000);
  redisReply *m = NULL;
  cr_assert_eq(redisGetReply(sub, (void **)&m), REDIS_OK);
  cr_assert(m->type == REDIS_REPLY_ARRAY && m->elements == 3);
  cr_assert_str_eq(m->element[0]->str, "message");
  cr_assert_str_eq(m->element[2]->str, "0");
  freeReplyObject(m);
  redisFree(sub);
  cr_assert_eq(count_of(c, name, 2), 1);
  cr_assert_eq(rlock_unlock_owner(l, 2), 0);
  cr_assert_eq(rt_exists(name), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* Bad input: the name holds an RLock hash where this owner's count is 3
 * (made by a reentrant lock). The non-reentrant acquire reports it (the
 * owner: RLOCK_EREENTRY; another owner: busy) and changes nothing; a
 * read/write lock's hash is RLOCK_EKIND. */
Test(nonreentrant, reentrant_hash_reported_not_corrupted) {
  rlock_client *c = rt_client();
  char name[64], owner[128], rw[80];
  rt_key(name, sizeof name, "nr");
  rt_owner(owner, sizeof owner, c, 1);
  rt_int("HSET %s %s 3", name, owner);
  rt_int("PEXPIRE %s 20000", name);
  rlock *n = nr(c, name), *f = nr_fair(c, name);
  cr_assert_eq(rlock_try_lock_owner(n, 1, 0, 30000), RLOCK_EREENTRY);
  cr_assert_eq(rlock_try_lock_owner(f, 1, 0, 30000), RLOCK_EREENTRY);
  cr_assert_eq(rlock_try_lock_owner(f, 1, 300, 30000), RLOCK_EREENTRY);
  cr_assert_eq(rlock_try_lock_owner(n, 2, 0, 30000), 0);
  cr_assert_eq(rlock_hold_count_owner(n, 1), 3, "reported as it is");
  cr_assert_eq(count_of(c, name, 1), 3);
  cr_assert_eq(rt_hlen(name), 1);
  cr_assert_leq(rt_pttl(name), 20000);
  rt_key(rw, sizeof rw, "nrrw");
  rt_int("HSET %s mode write", rw);
  rlock *k = nr(c, rw), *kf = nr_fair(c, rw);
  cr_assert_eq(rlock_try_lock_owner(k, 1, 0, 30000), RLOCK_EKIND);
  cr_assert_eq(rlock_try_lock_owner(kf, 1, 0, 30000), RLOCK_EKIND);
  cr_assert_eq(rt_hlen(rw), 1);
  rlock_free(k);
  rlock_free(kf);
  rlock_free(n);
  rlock_free(f);
  rlock_client_free(c);
}

/* ---- the fair one ---- */

/* A refused re-acquire with a wait is never queued, subscribes to
 * nothing, and sends nothing after its one try (no queue-leave: Java's
 * acquireFailed is not needed either). */
Test(nonreentrant, fair_reacquire_not_queued) {
  rlock_client *c = rt_client();
  char name[64], q[128], z[128], chan[300], owner[128];
  rt_key(name, sizeof name, "nrf");
  snprintf(q, sizeof q, "redisson_lock_queue:{%s}", name);
  snprintf(z, sizeof z, "redisson_lock_timeout:{%s}", name);
  rt_owner(owner, sizeof owner, c, 1);
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}:%s", name, owner);
  rlock *l = nr_fair(c, name);
  cr_assert_eq(rlock_try_lock_owner(l, 1, 1000, 30000), 1);
  cr_assert_eq(count_of(c, name, 1), 1);
  /* the scripts are cached now (one each try form) */
  cr_assert_eq(rlock_try_lock_owner(l, 1, 0, 30000), RLOCK_EREENTRY);
  rt_ok("OK", "CONFIG RESETSTAT");
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock_owner(l, 1, 5000, 30000);
  cr_assert_eq(rc, RLOCK_EREENTRY, "%s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_lt(rt_now_ms() - t0, 1000);
  rt_sleep_ms(200); /* anything sent behind it would have run */
  cr_assert_eq(evalsha_calls(), 1, "one try, no queue-leave");
  cr_assert_eq(eval_calls(), 0);
  cr_assert_eq(rt_exists(q), 0);
  cr_assert_eq(rt_exists(z), 0);
  cr_assert_eq(rt_numsub(chan), 0);
  cr_assert_eq(count_of(c, name, 1), 1);
  cr_assert_eq(rlock_unlock_owner(l, 1), 0);
  cr_assert_eq(rt_exists(name), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* First come, first served as the fair lock: two waiters queue in order,
 * each is told on its own channel in turn; the last one then refuses its
 * own re-acquire, leaving the queue empty. An RLock-style fair handle of
 * the holder re-enters. */
Test(nonreentrant, fair_queue_order) {
  rlock_client *c = rt_client();
  char name[64], q[128];
  rt_key(name, sizeof name, "nrf");
  snprintf(q, sizeof q, "redisson_lock_queue:{%s}", name);
  rlock *l = nr_fair(c, name);
  cr_assert_eq(rlock_try_lock_owner(l, 1, 0, 30000), 1);
  waiter w2, w3;
  waiter_start(&w2, l, 2, 20000);
  len_cond one = {q, 1}, two = {q, 2}, none = {q, 0};
  rt_wait_until_what(llen_is, &one, 5000, "w2 queued");
  waiter_start(&w3, l, 3, 20000);
  rt_wait_until_what(llen_is, &two, 5000, "w3 queued");
  char owner2[128], chan2[300];
  rt_owner(owner2, sizeof owner2, c, 2);
  snprintf(chan2, sizeof chan2, "redisson_lock__channel:{%s}:%s", name,
           owner2);
  rt_wait_until_what(one_sub, chan2, 5000, "w2 on its own channel");
  char *head = rt_str("LINDEX %s 0", q);
  cr_assert_str_eq(head, owner2);
  free(head);
  cr_assert_eq(rlock_unlock_owner(l, 1), 0);
  cr_assert_eq(waiter_wait(&w2, 5000, "w2"), 1);
  cr_assert_eq(atomic_load(&w3.status), PENDING, "w3 still waits");
  cr_assert_eq(count_of(c, name, 2), 1);
  /* the fair lock (reentrant) of the holder re-enters */
  rlock *fl = NULL;
  cr_assert_eq(rlock_new_fair(c, name, &fl), 0);
  cr_assert_eq(rlock_try_lock_owner(fl, 2, 0, 30000), 1);
  cr_assert_eq(count_of(c, name, 2), 2);
  cr_assert_eq(rlock_unlock_owner(fl, 2), 0, "still held (count 2 -> 1)");
  cr_assert_eq(atomic_load(&w3.status), PENDING, "a count 2->1 tells nobody");
  cr_assert_eq(rlock_unlock_owner(l, 2), 0);
  cr_assert_eq(waiter_wait(&w3, 5000, "w3"), 1);
  rt_wait_until_what(llen_is, &none, 5000, "queue empty");
  cr_assert_eq(rlock_try_lock_owner(l, 3, 2000, 30000), RLOCK_EREENTRY);
  cr_assert_eq(rt_int("LLEN %s", q), 0);
  cr_assert_eq(rlock_unlock_owner(l, 3), 0);
  cr_assert_eq(rt_exists(name), 0);
  rlock_free(fl);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- the wire (MONITOR), against docs/wire-protocol.md, "The
 * non-reentrant locks" ---- */

/* Reads MONITOR lines until one contains `needle` (or fails after 3 s),
 * copying it to out. */
static void monitor_find(redisContext *m, const char *needle, char *out,
                         size_t n) {
  int64_t until = rt_now_ms() + 3000;
  bool after_load = false;
  while (rt_now_ms() < until) {
    redisReply *r = NULL;
    if (redisGetReply(m, (void **)&r) != REDIS_OK)
      break;
    /* the EVALSHA line, not an EVAL's (the body follows its SHA), nor the
     * same call's EVALSHA again after NOSCRIPT and SCRIPT LOAD */
    bool load = r->type == REDIS_REPLY_STATUS &&
                strstr(r->str, "\"SCRIPT\" \"LOAD\"") != NULL;
    bool hit = r->type == REDIS_REPLY_STATUS && strstr(r->str, needle) &&
               strlen(r->str) < n && !after_load;
    after_load = load;
    if (hit)
      snprintf(out, n, "%s", r->str);
    freeReplyObject(r);
    if (hit)
      return;
  }
  cr_assert_fail("MONITOR never showed %s", needle);
}

Test(nonreentrant, wire_monitor) {
  rlock_client *c = rt_client();
  char name[64], owner[128], chan[128], want[512], line[2048];
  rt_key(name, sizeof name, "nrw");
  rt_owner(owner, sizeof owner, c, 1);
  rt_lock_channel(chan, sizeof chan, name);
  rlock *l = nr(c, name), *f = nr_fair(c, name);
  redisContext *m = rt_redis_new(5000);
  char admin[64];
  redisReply *r = redisCommand(m, rt_admin("MONITOR", admin, sizeof admin));
  cr_assert(r != NULL && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);

  /* non-fair: KEYS [name], ARGV [lease, owner, marker] */
  cr_assert_eq(rlock_try_lock_owner(l, 1, 0, 25000), 1);
  snprintf(want, sizeof want, "\"1\" \"%s\" \"25000\" \"%s\" \"%s\"", name,
           owner, MARKER);
  monitor_find(m, want, line, sizeof line);
  cr_assert_eq(rlock_try_lock_owner(l, 1, 0, 25000), RLOCK_EREENTRY);
  monitor_find(m, want, line, sizeof line);
  /* the release: RLock's, "0" on RLock's channel */
  cr_assert_eq(rlock_unlock_owner(l, 1), 0);
  snprintf(want, sizeof want, "\"PUBLISH\" \"%s\" \"0\"", chan);
  monitor_find(m, want, line, sizeof line);
  cr_assert(strstr(line, "lua") != NULL, "from the script: %s", line);

  /* fair, single attempt: ARGV [lease, owner, now, wait, marker] */
  char q[128], z[128];
  snprintf(q, sizeof q, "redisson_lock_queue:{%s}", name);
  snprintf(z, sizeof z, "redisson_lock_timeout:{%s}", name);
  cr_assert_eq(rlock_try_lock_owner(f, 1, 0, 25000), 1);
  snprintf(want, sizeof want, "\"3\" \"%s\" \"%s\" \"%s\" \"25000\" \"%s\" \"",
           name, q, z, owner);
  monitor_find(m, want, line, sizeof line);
  long long now = 0, wait = 0;
  char tail[256];
  const char *p = strstr(line, want);
  cr_assert_not_null(p);
  p += strlen(want);
  cr_assert_eq(sscanf(p, "%lld\" \"%lld\" \"%255[^\"]\"", &now, &wait, tail),
               3, "%s", line);
  cr_assert_gt(now, 1700000000000LL, "now first: %s", line);
  cr_assert_eq(wait, 300000, "then the wait: %s", line);
  cr_assert_str_eq(tail, MARKER);
  /* fair, waiting form: ARGV [lease, owner, wait, now, marker] */
  cr_assert_eq(rlock_try_lock_owner(f, 1, 4000, 25000), RLOCK_EREENTRY);
  monitor_find(m, want, line, sizeof line);
  p = strstr(line, want);
  cr_assert_not_null(p);
  p += strlen(want);
  cr_assert_eq(sscanf(p, "%lld\" \"%lld\" \"%255[^\"]\"", &wait, &now, tail),
               3, "%s", line);
  cr_assert_eq(wait, 4000, "wait first: %s", line);
  cr_assert_gt(now, 1700000000000LL, "then now: %s", line);
  cr_assert_str_eq(tail, MARKER);
  cr_assert_eq(rlock_unlock_owner(f, 1), 0);
  redisFree(m);
  rlock_free(l);
  rlock_free(f);
  rlock_client_free(c);
}
