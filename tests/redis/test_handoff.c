/* Local handoff (lib/engine/release.c): a release of a last hold sends a
 * local waiter's try right behind it. Bounded by handoff_max, so that a
 * waiter of another client - another process, a Java client - is not
 * starved while this client's threads take turns on the lock. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"

TestSuite(handoff, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

#define NTHREADS 8

typedef struct hammer {
  rlock_client *c;
  const char *key;
  atomic_bool stop;
  atomic_int acquisitions;
  atomic_int overlap; /* two holders at once */
  atomic_int inside;
  atomic_int errors;
} hammer;

static void hammer_run(void *arg) {
  hammer *h = arg;
  rlock *l = NULL;
  if (rlock_new(h->c, h->key, &l) != 0) {
    atomic_fetch_add(&h->errors, 1);
    return;
  }
  while (!atomic_load(&h->stop)) {
    if (rlock_try_lock(l, 2000, 10000) != 1)
      continue;
    if (atomic_fetch_add(&h->inside, 1) != 0)
      atomic_fetch_add(&h->overlap, 1);
    rt_sleep_ms(1); /* the work */
    atomic_fetch_sub(&h->inside, 1);
    atomic_fetch_add(&h->acquisitions, 1);
    if (rlock_unlock(l) != 0)
      atomic_fetch_add(&h->errors, 1);
  }
  rlock_free(l);
}

/* Eight threads of client A take turns on a lock, back to back (A's releases hand off
 * to A's waiters); client B, standing for another process, waits for the
 * same lock. B gets it within seconds, A's threads never overlap, and the
 * handoffs did happen (A went on taking the lock meanwhile). */
static void other_client_gets_its_turn(int handoff_max) {
  rlock_options o;
  rlock_options_init(&o);
  o.handoff_max = handoff_max;
  rlock_client *a = rt_client_opts(&o);
  rlock_client *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "handoff");
  static hammer h;
  memset(&h, 0, sizeof h);
  h.c = a;
  h.key = key;
  rt_thread t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    rt_thread_start(&t[i], hammer_run, &h);
  rt_sleep_ms(300); /* the threads are taking turns */
  int before = atomic_load(&h.acquisitions);
  rlock *lb = rt_lock(b, key);
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(lb, 5000, 10000);
  int64_t took = rt_now_ms() - t0;
  int during = atomic_load(&h.acquisitions) - before;
  if (rc == 1) {
    if (atomic_fetch_add(&h.inside, 1) != 0)
      atomic_fetch_add(&h.overlap, 1);
    atomic_fetch_sub(&h.inside, 1);
    cr_assert_eq(rlock_unlock(lb), 0);
  }
  atomic_store(&h.stop, true);
  for (int i = 0; i < NTHREADS; i++)
    rt_thread_join(&t[i], 10000);
  cr_assert_eq(rc, 1,
               "handoff_max %d: the other client waited %lld ms in vain "
               "while this one took the lock %d times",
               handoff_max, (long long)took, during);
  cr_assert_eq(atomic_load(&h.overlap), 0, "two holders at once");
  cr_assert_eq(atomic_load(&h.errors), 0);
  cr_assert_gt(atomic_load(&h.acquisitions), before,
               "the local threads went on");
  rlock_free(lb);
  rlock_client_free(b);
  rlock_client_free(a);
}

Test(handoff, other_client_not_starved_default_bound) {
  other_client_gets_its_turn(3);
}

Test(handoff, other_client_not_starved_handoff_off) {
  other_client_gets_its_turn(0);
}

/* The handoff path itself: owner o2 of a client waits while o1 of the
 * same client holds; o1's release hands the lock to o2 at once. The
 * release message is still published (another subscriber hears it), as
 * Java's waiters need. */
static atomic_int o2_status = -100;

static void o2_done(int status, int64_t value, void *data) {
  (void)value;
  (void)data;
  atomic_store(&o2_status, status);
}

Test(handoff, release_still_publishes) {
  rlock_client *a = rt_client();
  char key[64], chan[96];
  rt_key(key, sizeof key, "handoff-pub");
  rt_lock_channel(chan, sizeof chan, key);
  redisContext *sub = rt_redis_new(3000);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
  cr_assert_not_null(r);
  freeReplyObject(r);
  rlock *l = rt_lock(a, key);
  uint64_t o1 = rlock_owner_new(), o2 = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(l, o1, 10000), 0);
  cr_assert_eq(rlock_lock_async(l, o2, 5000, 10000, o2_done, NULL, NULL), 0);
  rt_sleep_ms(200); /* o2 is asleep on the channel */
  cr_assert_eq(atomic_load(&o2_status), -100, "o2 still waits");
  cr_assert_eq(rlock_unlock_owner(l, o1), 0);
  int64_t t0 = rt_now_ms();
  while (atomic_load(&o2_status) == -100 && rt_now_ms() - t0 < 3000)
    rt_sleep_ms(1);
  cr_assert_eq(atomic_load(&o2_status), 1, "o2 got the lock");
  cr_assert_eq(rlock_is_held_owner(l, o2), 1);
  r = NULL;
  cr_assert_eq(redisGetReply(sub, (void **)&r), REDIS_OK,
               "no release message was published");
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  cr_assert_str_eq(r->element[0]->str, "message");
  cr_assert_str_eq(r->element[1]->str, chan);
  freeReplyObject(r);
  cr_assert_eq(rlock_unlock_owner(l, o2), 0);
  redisFree(sub);
  rlock_free(l);
  rlock_client_free(a);
}
