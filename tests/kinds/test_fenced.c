/* The fenced lock (rlock_new_fenced; Redisson getFencedLock): RLock's hash
 * and channel plus the token counter redisson_lock_token:{name}, one more
 * per acquisition, re-entry included (docs/wire-protocol.md, "The fenced
 * lock"). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(fenced, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

static rlock *fenced(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_fenced(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_fenced: %s", rlock_err_name(rc));
  cr_assert_str_eq(rlock_kind(l), "fenced");
  return l;
}

/* GET key as a number (0 for nil). */
static long long getnum(const char *key) {
  char *v = rt_str("GET %s", key);
  long long n = v != NULL ? atoll(v) : 0;
  free(v);
  return n;
}

/* The server's clock in microseconds (TIME): the floor of the next token. */
static long long server_us(void) {
  redisReply *r = rt_cmd("TIME");
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  long long us = atoll(r->element[0]->str) * 1000000LL +
                 atoll(r->element[1]->str);
  freeReplyObject(r);
  return us;
}

static void token_key(char *buf, size_t n, const char *name) {
  if (strchr(name, '{'))
    snprintf(buf, n, "redisson_lock_token:%s", name);
  else
    snprintf(buf, n, "redisson_lock_token:{%s}", name);
}

Test(fenced, token_grows_with_every_acquisition_reentry_included) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64], tk[128];
  rt_key(key, sizeof key, "fx");
  token_key(tk, sizeof tk, key);
  rlock *la = fenced(a, key), *lb = fenced(b, key);
  int64_t t1 = 0, t2 = 0, t3 = 0, cur = -1;
  cr_assert_eq(rlock_fenced_token(la, &cur), 0);
  cr_assert_eq(cur, 0, "no token before the first acquisition");
  long long before = server_us();
  cr_assert_eq(rlock_lock_fenced(la, 30000, &t1), 0);
  cr_assert_geq(t1, before, "the first token is floored with the server's "
                "clock (us): %lld < %lld", (long long)t1, before);
  cr_assert_lt(t1, server_us() + 1, "and not above it");
  cr_assert_eq(rlock_lock_fenced(la, 30000, &t2), 0, "re-entry");
  cr_assert_gt(t2, t1, "re-entry takes a new token");
  cr_assert_eq(rt_hlen(key), 1);
  cr_assert_eq(rt_pttl(tk), -1, "the token key has no TTL");
  /* the other client waits; the token key is not touched by a failed try */
  int64_t tb = -7;
  cr_assert_eq(rlock_try_lock_fenced(lb, 0, 30000, &tb), 0);
  cr_assert_eq(tb, -7, "token not written when not acquired");
  cr_assert_eq(getnum(tk), t2);
  cr_assert_eq(rlock_unlock(la), 0);
  cr_assert_eq(rlock_unlock(la), 0);
  cr_assert_eq(rlock_try_lock_fenced(lb, 1000, 30000, &t3), 1);
  cr_assert_gt(t3, t2, "the next holder's token is above every earlier one");
  cr_assert_eq(rlock_fenced_token(la, &cur), 0);
  cr_assert_eq(cur, t3);
  cr_assert_eq(rlock_unlock(lb), 0);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(getnum(tk), t3, "unlock never resets the counter");
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

Test(fenced, wire_keys_and_java_layout) {
  rlock_client *c = rt_client();
  char key[64], tk[128], owner[96];
  rt_key(key, sizeof key, "fw{t}x"); /* a name with its own hash tag */
  token_key(tk, sizeof tk, key);
  rlock *l = fenced(c, key);
  int64_t t = 0;
  cr_assert_eq(rlock_lock_fenced(l, 5000, &t), 0);
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  char *v = rt_hget(key, owner);
  cr_assert_str_eq(v, "1", "owner field as RLock's");
  free(v);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 4000 && pttl <= 5000, "lease applied: %lld", pttl);
  cr_assert_eq(getnum(tk), t, "token key %s", tk);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* A Java client's token already at 41: ours jumps to the clock floor above
 * it; a Java holder (hash written by hand) makes our try wait for the
 * PTTL. */
Test(fenced, continues_a_java_counter_and_waits_for_a_java_holder) {
  rlock_client *c = rt_client();
  char key[64], tk[128];
  rt_key(key, sizeof key, "fj");
  token_key(tk, sizeof tk, key);
  rt_ok("OK", "SET %s 41", tk);
  freeReplyObject(rt_cmd("HSET %s java-uuid:61 1", key));
  freeReplyObject(rt_cmd("PEXPIRE %s 700", key));
  rlock *l = fenced(c, key);
  int64_t t = 0;
  long long floor = server_us();
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock_fenced(l, 3000, 10000, &t), 1);
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= 500 && took < 2500, "waited out the Java hold: %lld ms",
            (long long)took);
  cr_assert_gt(t, 41);
  cr_assert_geq(t, floor, "the clock floor (us)");
  cr_assert_eq(getnum(tk), t, "the counter holds the token: Java's INCR "
               "continues above it");
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* A counter above the clock (Java's INCRs after ours, or a clock that
 * stepped back): the INCR wins, tokens still grow by one. */
Test(fenced, a_counter_above_the_clock_is_incremented) {
  rlock_client *c = rt_client();
  char key[64], tk[128];
  rt_key(key, sizeof key, "fk");
  token_key(tk, sizeof tk, key);
  long long ahead = server_us() + 3600LL * 1000000LL;
  rt_ok("OK", "SET %s %lld", tk, ahead);
  rlock *l = fenced(c, key);
  int64_t t = 0;
  cr_assert_eq(rlock_lock_fenced(l, 10000, &t), 0);
  cr_assert_eq(t, ahead + 1);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}

static void async_cb(int status, int64_t value, void *data) {
  int64_t *out = data;
  out[1] = value;
  atomic_store((_Atomic int64_t *)&out[0], status == 1 ? 1 : 100 + status);
}

static bool async_done(void *arg) {
  return atomic_load((_Atomic int64_t *)arg) != 0;
}

Test(fenced, async_gives_the_token_as_value) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fa");
  rlock *l = fenced(c, key);
  static int64_t out[2];
  memset(out, 0, sizeof out);
  cr_assert_eq(rlock_lock_async(l, 7, -1, 30000, async_cb, out, NULL), 0);
  rt_wait_until(async_done, out, 5000);
  cr_assert_eq(out[0], 1);
  cr_assert_gt(out[1], 1, "the token as the callback's value");
  int64_t cur = 0;
  cr_assert_eq(rlock_fenced_token(l, &cur), 0);
  cr_assert_eq(out[1], cur);
  cr_assert_eq(rlock_unlock_owner(l, 7), 0);
  rlock_free(l);
  rlock_client_free(c);
}

Test(fenced, bad_arguments) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "fb");
  rlock *plain = rt_lock(c, key);
  int64_t t = 0;
  cr_assert_eq(rlock_lock_fenced(plain, 1000, &t), RLOCK_EINVAL,
               "a plain lock handle is not fenced");
  cr_assert(strstr(rlock_last_error(), "fenced") != NULL);
  rlock *l = fenced(c, key);
  cr_assert_eq(rlock_lock_fenced(l, 1000, NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_lock_fenced(NULL, 1000, &t), RLOCK_EINVAL);
  cr_assert_eq(rlock_fenced_token(plain, &t), RLOCK_EINVAL);
  cr_assert_eq(rt_exists(key), 0, "nothing written");
  rlock_free(plain);
  rlock_free(l);
  rlock_client_free(c);
}

/* Several threads of two clients: the counter proves mutual exclusion and
 * the tokens seen inside the critical section strictly increase. */
typedef struct shared {
  rlock_client *c[2];
  char key[64];
  volatile long counter;
  int64_t last_token; /* inside the critical section only */
  atomic_int bad;
  atomic_int done;
} shared;

static void worker(void *arg) {
  shared *s = arg;
  static atomic_int next;
  int me = atomic_fetch_add(&next, 1);
  rlock *l = NULL;
  if (rlock_new_fenced(s->c[me % 2], s->key, &l) != 0) {
    atomic_fetch_add(&s->bad, 1);
    return;
  }
  for (int i = 0; i < 40; i++) {
    int64_t t = 0;
    if (rlock_try_lock_fenced(l, 10000, 10000, &t) != 1) {
      atomic_fetch_add(&s->bad, 1);
      continue;
    }
    if (t <= s->last_token)
      atomic_fetch_add(&s->bad, 1);
    s->last_token = t;
    long v = s->counter;
    rt_sleep_ms(0);
    s->counter = v + 1;
    if (rlock_unlock(l) != 0)
      atomic_fetch_add(&s->bad, 1);
  }
  rlock_free(l);
  atomic_fetch_add(&s->done, 1);
}

Test(fenced, exclusion_and_increasing_tokens_across_clients) {
  static shared s;
  memset(&s, 0, sizeof s);
  s.c[0] = rt_client();
  s.c[1] = rt_client();
  rt_key(s.key, sizeof s.key, "fm");
  rt_thread t[6];
  for (int i = 0; i < 6; i++)
    rt_thread_start(&t[i], worker, &s);
  for (int i = 0; i < 6; i++)
    rt_thread_join(&t[i], 60000);
  cr_assert_eq(atomic_load(&s.bad), 0);
  cr_assert_eq(s.counter, 240);
  char tk[128];
  token_key(tk, sizeof tk, s.key);
  cr_assert_eq(getnum(tk), s.last_token);
  rlock_client_free(s.c[0]);
  rlock_client_free(s.c[1]);
}
