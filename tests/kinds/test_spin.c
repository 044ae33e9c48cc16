/* The spin lock (rlock_new_spin; Redisson getSpinLock): RLock's hash, no
 * channel, no message; a waiter polls with a back-off of 1 ms doubling (plus
 * jitter) up to 128 ms (docs/wire-protocol.md, "The spin lock"). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(spin, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

static rlock *spin(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_spin(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_spin: %s", rlock_err_name(rc));
  cr_assert_str_eq(rlock_kind(l), "spin");
  return l;
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

Test(spin, lock_unlock_reentry_no_publish_no_subscribe) {
  rlock_client *a = rt_client();
  char key[64], owner[96];
  rt_key(key, sizeof key, "sp");
  rlock *l = spin(a, key);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rlock_lock(l, 5000), 0);
  cr_assert_eq(rlock_lock(l, 5000), 0);
  rt_owner(owner, sizeof owner, a, rlock_thread_id());
  char *v = rt_hget(key, owner);
  cr_assert_str_eq(v, "2");
  free(v);
  cr_assert_eq(rlock_hold_count(l), 2);
  cr_assert_eq(rlock_is_locked(l), 1);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rlock_unlock(l), RLOCK_ENOTOWNER);
  cr_assert_eq(calls("publish"), 0, "a spin unlock publishes nothing");
  cr_assert_eq(calls("subscribe"), 0);
  rlock_free(l);
  rlock_client_free(a);
}

/* Against a 600 ms hold, a 300 ms try gives up after a handful of polls
 * that back off (the fact sheet saw 9 for Java), and a 2 s try gets the
 * lock soon after the hold expires - by polling, without any message. */
Test(spin, waiter_polls_with_backoff) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "sw");
  rlock *la = spin(a, key), *lb = spin(b, key);
  cr_assert_eq(rlock_lock(la, 600), 0);
  int64_t t0 = rt_now_ms();
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rlock_try_lock(lb, 300, 5000), 0);
  int64_t took = rt_now_ms() - t0;
  long long polls = calls("evalsha") + calls("eval");
  cr_assert(took >= 280 && took < 800, "gave up at its deadline: %lld ms",
            (long long)took);
  cr_assert(polls >= 4 && polls <= 14,
            "backed-off polling, not a busy loop: %lld tries in %lld ms",
            polls, (long long)took);
  cr_assert_eq(rlock_try_lock(lb, 2000, 5000), 1);
  int64_t got = rt_now_ms() - t0;
  cr_assert(got >= 550 && got < 900, "acquired once the hold expired (poll "
            "gap <= 128 ms): %lld ms", (long long)got);
  cr_assert_eq(rlock_unlock(lb), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* An RLock hash and a spin hash are the same: the kinds exclude each other
 * on one name. A spin unlock wakes no RLock waiter (no message): the RLock
 * waiter gets in by its TTL-bounded wait - documented, as in Java. */
Test(spin, excludes_rlock_on_the_same_name) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "sx");
  rlock *s = spin(a, key), *r = rt_lock(b, key);
  cr_assert_eq(rlock_lock(s, 800), 0);
  cr_assert_eq(rlock_try_lock(r, 0, 5000), 0);
  cr_assert_eq(rlock_unlock(s), 0);
  cr_assert_eq(rlock_lock(r, 800), 0);
  cr_assert_eq(rlock_try_lock(s, 0, 5000), 0);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(s, 3000, 5000), 1, "the spin waiter polls "
               "until the RLock hold expires");
  int64_t took = rt_now_ms() - t0;
  cr_assert(took < 1200, "%lld ms", (long long)took);
  cr_assert_eq(rlock_unlock(s), 0);
  rlock_free(s);
  rlock_free(r);
  rlock_client_free(a);
  rlock_client_free(b);
}

Test(spin, force_unlock_deletes_without_message) {
  rlock_client *a = rt_client();
  char key[64];
  rt_key(key, sizeof key, "sf");
  rlock *l = spin(a, key);
  cr_assert_eq(rlock_lock(l, 30000), 0);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rlock_force_unlock(l), 1);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rlock_force_unlock(l), 0);
  cr_assert_eq(calls("publish"), 0);
  rlock_free(l);
  rlock_client_free(a);
}

/* The watchdog renews a spin lock taken without a lease. */
Test(spin, watchdog_renews) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  rlock_client *a = rt_client_opts(&o);
  char key[64];
  rt_key(key, sizeof key, "sd");
  rlock *l = spin(a, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  rt_sleep_ms(2000);
  cr_assert_eq(rt_exists(key), 1, "renewed past two watchdog timeouts");
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(a);
}

typedef struct shared {
  rlock_client *c[2];
  char key[64];
  volatile long counter;
  atomic_int bad;
} shared;

static void worker(void *arg) {
  shared *s = arg;
  static atomic_int next;
  int me = atomic_fetch_add(&next, 1);
  rlock *l = NULL;
  if (rlock_new_spin(s->c[me % 2], s->key, &l) != 0) {
    atomic_fetch_add(&s->bad, 1);
    return;
  }
  for (int i = 0; i < 25; i++) {
    if (rlock_try_lock(l, 20000, 10000) != 1) {
      atomic_fetch_add(&s->bad, 1);
      continue;
    }
    long v = s->counter;
    rt_sleep_ms(1);
    s->counter = v + 1;
    if (rlock_unlock(l) != 0)
      atomic_fetch_add(&s->bad, 1);
  }
  rlock_free(l);
}

Test(spin, exclusion_across_clients) {
  static shared s;
  memset(&s, 0, sizeof s);
  s.c[0] = rt_client();
  s.c[1] = rt_client();
  rt_key(s.key, sizeof s.key, "sm");
  rt_thread t[4];
  for (int i = 0; i < 4; i++)
    rt_thread_start(&t[i], worker, &s);
  for (int i = 0; i < 4; i++)
    rt_thread_join(&t[i], 80000);
  cr_assert_eq(atomic_load(&s.bad), 0);
  cr_assert_eq(s.counter, 100);
  rlock_client_free(s.c[0]);
  rlock_client_free(s.c[1]);
}
