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
  cr_assert_eq(rlock_unlock(lh), 1);
  /* ... and a waiter woken by the release still gets it at once. */
  cr_assert_eq(rlock_try_lock(lw, 2000, 10000), 1);
  cr_assert_eq(rlock_unlock(lw), 1);
  rlock_free(lh);
  rlock_free(lw);
  rlock_client_close(waiter);
  rlock_client_close(holder);
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
  if (rlock_get(w->c, key, &l) != 0)
    return;
  for (int i = 0; i < 100; i++) {
    if (rlock_lock(l, 10000) == 0 && rlock_is_held_by_current_thread(l) == 1 &&
        rlock_hold_count(l) == 1 && rlock_unlock(l) == 1)
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
    rlock_client_close(c);
  }
}
