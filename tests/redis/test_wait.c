/* How blocking calls wait (lib/engine/park.c): spin briefly, then sleep.
 * spin_us = 0 turns the spin off; either way a long wait must sleep, not
 * burn a CPU, and the results are the same. */
#include <criterion/criterion.h>
#include <sys/resource.h>

#include "harness.h"

TestSuite(wait, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 60);

static int64_t cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

/* A 1000 ms wait for a lock held elsewhere: the caller must sleep through
 * it (the adaptive spin gives up within spin_us), so the whole process
 * spends a small part of that second on the CPU. */
static void long_wait_sleeps(int64_t spin_us) {
  rlock_options o;
  rlock_options_init(&o);
  o.spin_us = spin_us;
  rlock_client *holder = rt_client();
  rlock_client *waiter = rt_client_opts(&o);
  char key[64];
  rt_key(key, sizeof key, "wait-sleep");
  rlock *lh = rt_lock(holder, key), *lw = rt_lock(waiter, key);
  cr_assert_eq(rlock_lock(lh, 10000), 0);
  /* Uncontended calls first, so the spin has something to adapt to. */
  for (int i = 0; i < 50; i++)
    cr_assert_eq(rlock_is_locked(lw), 1);
  int64_t cpu0 = cpu_ms(), t0 = rt_now_ms();
  int rc = rlock_try_lock(lw, 1000, 10000);
  int64_t took = rt_now_ms() - t0, cpu = cpu_ms() - cpu0;
  cr_assert_eq(rc, 0, "try_lock of a held lock: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_geq(took, 990, "the wait lasted %lld ms", (long long)took);
  cr_assert_lt(cpu, 400, "spin_us=%lld: %lld ms of CPU during a %lld ms wait",
               (long long)spin_us, (long long)cpu, (long long)took);
  cr_assert_eq(rlock_unlock(lh), 0);
  /* ... and a waiter woken by the release still gets it at once. */
  cr_assert_eq(rlock_try_lock(lw, 2000, 10000), 1);
  cr_assert_eq(rlock_unlock(lw), 0);
  rlock_free(lh);
  rlock_free(lw);
  rlock_client_free(waiter);
  rlock_client_free(holder);
}

Test(wait, long_wait_sleeps_with_spin) { long_wait_sleeps(250); }

Test(wait, long_wait_sleeps_without_spin) { long_wait_sleeps(0); }

/* With the spin off, blocking calls from many threads still return their
 * own results (the completion hand-over is the same either way). */
typedef struct {
  rlock_client *c;
  int ok;
  int idx;
} worker;

static void work(void *arg) {
  worker *w = arg;
  char key[64];
  rt_key(key, sizeof key, "wait-many");
  rlock *l = NULL;
  if (rlock_new(w->c, key, &l) != 0)
    return;
  for (int i = 0; i < 100; i++) {
    if (rlock_lock(l, 10000) == 0 && rlock_is_held(l) == 1 &&
        rlock_hold_count(l) == 1 && rlock_unlock(l) == 0)
      w->ok++;
  }
  rlock_free(l);
}

Test(wait, many_threads_with_and_without_spin) {
  for (int spin = 0; spin <= 1; spin++) {
    rlock_options o;
    rlock_options_init(&o);
    o.spin_us = spin ? 250 : 0;
    rlock_client *c = rt_client_opts(&o);
    worker w[6];
    rt_thread t[6];
    for (int i = 0; i < 6; i++) {
      w[i] = (worker){c, 0, i};
      rt_thread_start(&t[i], work, &w[i]);
    }
    for (int i = 0; i < 6; i++)
      rt_thread_join(&t[i], 30000);
    for (int i = 0; i < 6; i++)
      cr_assert_eq(w[i].ok, 100, "spin %d, thread %d: %d of 100 rounds", spin,
                   i, w[i].ok);
    rlock_client_free(c);
  }
}

/* ---- the wait bound after a stray wake-up (issue 33, item 10) ----
 * A waiter woken by a message that frees nothing (an unlock message for a
 * lock someone else takes first, or a stray PUBLISH) tries again, fails,
 * and sleeps on - until the deadline of the call, never a new full wait
 * from the wake-up. Messages are published at 400, 800, 1200 and 1600 ms
 * of a 2000 ms wait: an acquire that restarted its wait at a wake-up
 * would return at 3600 ms or later. */

#define STRAY_WAIT_MS 2000

typedef struct stray_pub {
  redisContext *r; /* made on the test's thread */
  char channel[256];
  const char *payload;
  int64_t t0;
  long long heard; /* receivers of the messages, summed */
  long long last_heard; /* receivers of the last one (1600 ms) */
  int failed;
} stray_pub;

static void stray_run(void *arg) {
  stray_pub *p = arg;
  for (int64_t at = 400; at <= 1600; at += 400) {
    int64_t now = rt_now_ms() - p->t0;
    if (at > now)
      rt_sleep_ms(at - now);
    redisReply *rep = redisCommand(p->r, "PUBLISH %s %s", p->channel,
                                   p->payload);
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER) {
      p->heard += rep->integer;
      p->last_heard = rep->integer;
    }
    else
      p->failed = 1;
    freeReplyObject(rep);
  }
}

/* Runs attempt(arg) (an acquire of STRAY_WAIT_MS that must not succeed)
 * while stray messages go to `channel`, and checks its result and time. */
static void stray_bound(const char *what, int (*attempt)(void *), void *arg,
                        const char *channel, const char *payload) {
  stray_pub p = {.r = rt_redis_new(5000), .payload = payload};
  snprintf(p.channel, sizeof p.channel, "%s", channel);
  rt_thread t;
  p.t0 = rt_now_ms();
  rt_thread_start(&t, stray_run, &p);
  int rc = attempt(arg);
  int64_t took = rt_now_ms() - p.t0;
  rt_thread_join(&t, 10000);
  redisFree(p.r);
  cr_assert_eq(p.failed, 0, "%s: a PUBLISH failed", what);
  cr_assert_eq(rc, 0, "%s: %s (%s), want 0 (not acquired)", what,
               rlock_err_name(rc), rlock_last_error());
  /* The last message (at 1600 ms) must have been heard: a wait restarted
   * by it would end at 3600 ms. (The first may come before the waiter
   * subscribed, under valgrind.) */
  cr_assert_eq(p.last_heard, 1, "%s: the stray message at 1600 ms reached "
               "%lld subscribers (%lld receptions of 4 messages)", what,
               p.last_heard, p.heard);
  cr_log_info("%s: %lld ms, %lld of 4 stray messages heard", what,
              (long long)took, p.heard);
  cr_assert_geq(took, STRAY_WAIT_MS - 5, "%s: returned after %lld ms", what,
                (long long)took);
  cr_assert_lt(took, STRAY_WAIT_MS + 1000,
               "%s: a %d ms wait returned after %lld ms: the stray wake-ups "
               "restarted it", what, STRAY_WAIT_MS, (long long)took);
}

static int try_lock_owner_7(void *arg) {
  return rlock_try_lock_owner(arg, 7, STRAY_WAIT_MS, 30000);
}

static int try_acquire_1(void *arg) {
  return rlock_semaphore_try_acquire(arg, 1, STRAY_WAIT_MS);
}

/* A holder on one client, the waiter (owner 7) on another; `fair`: the
 * waiter listens on a channel of its own, <lock channel>:<owner>. */
static void stray_on_lock(const char *what,
                          int (*get)(rlock_client *, const char *, rlock **),
                          bool fair) {
  rlock_client *holder = rt_client(), *waiter = rt_client();
  char key[64], lchan[128], owner[128], chan[300];
  rt_key(key, sizeof key, fair ? "stray-fair" : "stray-lock");
  rt_lock_channel(lchan, sizeof lchan, key);
  rt_owner(owner, sizeof owner, waiter, 7);
  snprintf(chan, sizeof chan, fair ? "%s:%s" : "%s", lchan, owner);
  rlock *lh = NULL, *lw = NULL;
  cr_assert_eq(get(holder, key, &lh), 0);
  cr_assert_eq(get(waiter, key, &lw), 0);
  cr_assert_eq(rlock_lock(lh, 30000), 0);
  stray_bound(what, try_lock_owner_7, lw, chan, "0");
  cr_assert_eq(rlock_unlock(lh), 0);
  rlock_free(lw);
  rlock_free(lh);
  rlock_client_free(waiter);
  rlock_client_free(holder);
}

Test(wait, stray_unlock_message_keeps_the_lock_wait_bound) {
  stray_on_lock("lock", rlock_new, false);
}

Test(wait, stray_unlock_message_keeps_the_fair_wait_bound) {
  stray_on_lock("fair lock", rlock_new_fair, true);
}

Test(wait, stray_release_message_keeps_the_semaphore_wait_bound) {
  rlock_client *holder = rt_client(), *waiter = rt_client();
  char key[64], chan[128];
  rt_key(key, sizeof key, "stray-sem");
  snprintf(chan, sizeof chan, "redisson_sc:{%s}", key);
  rlock_semaphore *sh = NULL, *sw = NULL;
  cr_assert_eq(rlock_semaphore_new(holder, key, &sh), 0);
  cr_assert_eq(rlock_semaphore_new(waiter, key, &sw), 0);
  cr_assert_eq(rlock_semaphore_try_set_permits(sh, 1, 0), 1);
  cr_assert_eq(rlock_semaphore_try_acquire(sh, 1, 0), 1);
  /* "1": a total of one permit, which the waiter's try finds taken */
  stray_bound("semaphore", try_acquire_1, sw, chan, "1");
  cr_assert_eq(rlock_semaphore_available_permits(sw), 0);
  cr_assert_eq(rlock_semaphore_release(sh, 1), 0);
  rlock_semaphore_free(sw);
  rlock_semaphore_free(sh);
  rlock_client_free(waiter);
  rlock_client_free(holder);
}
