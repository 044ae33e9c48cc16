/* Issue 33 (3, 7), against a private redis-server:
 * - every waiter of every kind (lock, semaphore, permit semaphore, latch
 *   await, MultiLock) rides out killed connections until its deadline;
 * - scripts flushed mid-run (SCRIPT FLUSH) are loaded again with SCRIPT
 *   LOAD and run with EVALSHA: no failure, no EVAL. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faultkit.h"
#include "harness.h"
#include "rlock.h"

TestSuite(waiters, .init = fk_init, .fini = fk_fini, .timeout = 60);

enum { K_LOCK, K_SEM, K_PSEM, K_LATCH, K_MULTI, K_N };
static const char *const kind_names[K_N] = {"lock", "semaphore",
                                            "permit semaphore", "latch await",
                                            "multilock"};

typedef struct waiter {
  int kind;
  rlock *lock;
  rlock_semaphore *sem;
  rlock_permit_semaphore *psem;
  rlock_latch *latch;
  rlock *ml;
  int rc;
  int64_t took;
  char err[200];
  rt_thread th;
} waiter;

static void wait_fn(void *p) {
  waiter *w = p;
  int64_t t0 = rt_now_ms();
  char id[RLOCK_PERMIT_ID_LEN + 1];
  switch (w->kind) {
  case K_LOCK:
    w->rc = rlock_try_lock(w->lock, 8000, 10000);
    break;
  case K_SEM:
    w->rc = rlock_semaphore_try_acquire(w->sem, 1, 8000);
    break;
  case K_PSEM:
    w->rc = rlock_permit_semaphore_try_acquire(w->psem, 8000, 10000, id);
    break;
  case K_LATCH:
    w->rc = rlock_latch_await(w->latch, 8000);
    break;
  case K_MULTI:
    w->rc = rlock_try_lock(w->ml, 8000, 10000);
    break;
  }
  w->took = rt_now_ms() - t0;
  snprintf(w->err, sizeof w->err, "%s", rlock_last_error());
}

/* Every kind waits on something another client holds; the waiting
 * client's connections are killed with tries in flight (twice); then
 * everything is let go: each waiter gets what it waited for, none ends with a transport
 * error (before: the semaphores and the permit semaphore ended with
 * RLOCK_ECONN at the first lost try). */
Test(waiters, every_kind_rides_out_killed_connections) {
  rlock_options oh;
  rlock_options_init(&oh);
  oh.uri = rt_uri();
  rlock_client *h = NULL;
  cr_assert_eq(rlock_client_new(&h, &oh), 0);
  rlock_options ow;
  rlock_options_init(&ow);
  ow.uri = rt_uri();
  ow.client_name = "i33-waiter";
  ow.retry_interval_ms = 100;
  rlock_client *c = NULL;
  cr_assert_eq(rlock_client_new(&c, &ow), 0);

  char lk[64], sk[64], pk[64], ck[64], m1[64], m2[64];
  rt_key(lk, sizeof lk, "w-lock");
  rt_key(sk, sizeof sk, "w-sem");
  rt_key(pk, sizeof pk, "w-psem");
  rt_key(ck, sizeof ck, "w-latch");
  rt_key(m1, sizeof m1, "w-m1");
  rt_key(m2, sizeof m2, "w-m2");
  /* The holder's side: the lock and both members held, no permits, the
   * latch closed. */
  rlock *hl = NULL, *hm1 = NULL, *hm2 = NULL;
  cr_assert_eq(rlock_new(h, lk, &hl), 0);
  cr_assert_eq(rlock_new(h, m1, &hm1), 0);
  cr_assert_eq(rlock_new(h, m2, &hm2), 0);
  cr_assert_eq(rlock_try_lock(hl, 0, -1), 1);
  cr_assert_eq(rlock_try_lock(hm1, 0, -1), 1);
  cr_assert_eq(rlock_try_lock(hm2, 0, -1), 1);
  rlock_semaphore *hs = NULL;
  cr_assert_eq(rlock_semaphore_new(h, sk, &hs), 0);
  cr_assert_eq(rlock_semaphore_try_set_permits(hs, 1, 0), 1);
  cr_assert_eq(rlock_semaphore_try_acquire(hs, 1, 0), 1);
  rlock_permit_semaphore *hp = NULL;
  cr_assert_eq(rlock_permit_semaphore_new(h, pk, &hp), 0);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(hp, 1), 1);
  char hid[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(hp, 0, -1, hid), 1);
  rlock_latch *hc = NULL;
  cr_assert_eq(rlock_latch_new(h, ck, &hc), 0);
  cr_assert_eq(rlock_latch_try_set_count(hc, 1), 1);

  waiter w[K_N];
  memset(w, 0, sizeof w);
  for (int k = 0; k < K_N; k++)
    w[k].kind = k;
  cr_assert_eq(rlock_new(c, lk, &w[K_LOCK].lock), 0);
  cr_assert_eq(rlock_semaphore_new(c, sk, &w[K_SEM].sem), 0);
  cr_assert_eq(rlock_permit_semaphore_new(c, pk, &w[K_PSEM].psem), 0);
  cr_assert_eq(rlock_latch_new(c, ck, &w[K_LATCH].latch), 0);
  rlock *wm[2] = {NULL, NULL};
  cr_assert_eq(rlock_new(c, m1, &wm[0]), 0);
  cr_assert_eq(rlock_new(c, m2, &wm[1]), 0);
  cr_assert_eq(rlock_new_multilock(wm, 2, &w[K_MULTI].ml), 0);
  for (int k = 0; k < K_N; k++)
    rt_thread_start(&w[k].th, wait_fn, &w[k]);
  rt_sleep_ms(300);

  /* Twice: with writes paused, the subscriber connection killed, so every
   * waiter tries again once resubscribed - its try held up by the pause -
   * and then the command connection killed under those tries. */
  int kills = 0;
  for (int round = 0; round < 2; round++) {
    rt_ok("OK", "CLIENT PAUSE 3000 WRITE");
    kills += fk_kill_sub_conn("i33-waiter");
    rt_sleep_ms(400);
    kills += fk_kill_cmd_conn("i33-waiter");
    rt_sleep_ms(100);
    rt_ok("OK", "CLIENT UNPAUSE");
    rt_sleep_ms(400);
  }
  cr_assert_geq(kills, 4, "only %d connections killed", kills);

  /* Let everything go. */
  cr_assert_eq(rlock_unlock(hl), 0);
  cr_assert_eq(rlock_unlock(hm1), 0);
  cr_assert_eq(rlock_unlock(hm2), 0);
  cr_assert_eq(rlock_semaphore_release(hs, 1), 0);
  cr_assert_eq(rlock_permit_semaphore_release(hp, hid), 0);
  cr_assert_eq(rlock_latch_count_down(hc), 0);
  for (int k = 0; k < K_N; k++)
    rt_thread_join(&w[k].th, 12000);
  for (int k = 0; k < K_N; k++)
    cr_expect_eq(w[k].rc, 1, "%s waiter through %d kills: %d %s (%s) after "
                 "%lld ms", kind_names[k], kills, w[k].rc,
                 w[k].rc < 0 ? rlock_err_name(w[k].rc) : "", w[k].err,
                 (long long)w[k].took);
  /* Nothing taken twice: the semaphore's one permit went to its waiter. */
  char *left = rt_str("GET %s", sk);
  cr_expect(left && strcmp(left, "0") == 0, "semaphore permits left: %s",
            left ? left : "(nil)");
  free(left);

  rlock_free(w[K_LOCK].lock);
  rlock_semaphore_free(w[K_SEM].sem);
  rlock_permit_semaphore_free(w[K_PSEM].psem);
  rlock_latch_free(w[K_LATCH].latch);
  rlock_free(w[K_MULTI].ml);
  rlock_free(wm[0]);
  rlock_free(wm[1]);
  rlock_free(hl);
  rlock_free(hm1);
  rlock_free(hm2);
  rlock_semaphore_free(hs);
  rlock_permit_semaphore_free(hp);
  rlock_latch_free(hc);
  rlock_client_free(c);
  rlock_client_free(h);
}

/* Scripts flushed twice mid-run (SCRIPT FLUSH, as an eviction does to one
 * script): every call still succeeds, the scripts come back by SCRIPT
 * LOAD, and no EVAL runs (before: each NOSCRIPT was answered by an EVAL,
 * whose cached scripts Redis 7.4+ may evict). */
Test(waiters, scripts_flushed_midrun_are_loaded_not_evaled) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  rlock_client *c = NULL;
  cr_assert_eq(rlock_client_new(&c, &o), 0);
  char name[64], sname[64];
  rt_key(name, sizeof name, "flush");
  rt_key(sname, sizeof sname, "flush-sem");
  rlock *l = NULL;
  cr_assert_eq(rlock_new(c, name, &l), 0);
  rlock_semaphore *s = NULL;
  cr_assert_eq(rlock_semaphore_new(c, sname, &s), 0);
  cr_assert_eq(rlock_semaphore_try_set_permits(s, 1, 0), 1);
  rt_ok("OK", "CONFIG RESETSTAT");
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 5; i++) {
      cr_assert_eq(rlock_try_lock(l, 0, 10000), 1, "round %d: %s", round,
                   rlock_last_error());
      cr_assert_eq(rlock_unlock(l), 0, "round %d: %s", round,
                   rlock_last_error());
      cr_assert_eq(rlock_semaphore_try_acquire(s, 1, 0), 1, "round %d: %s",
                   round, rlock_last_error());
      cr_assert_eq(rlock_semaphore_release(s, 1), 0);
    }
    rt_ok("OK", "SCRIPT FLUSH");
  }
  char *info = rt_str("INFO commandstats");
  cr_assert(info);
  bool eval = strstr(info, "cmdstat_eval:") != NULL;
  bool load = strstr(info, "cmdstat_script|load:") != NULL ||
              strstr(info, "cmdstat_script:") != NULL;
  char copy[2048];
  snprintf(copy, sizeof copy, "%s", info);
  free(info);
  cr_assert(!eval, "EVAL ran:\n%s", copy);
  cr_assert(load, "no SCRIPT LOAD:\n%s", copy);
  rlock_free(l);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

typedef struct diag_seen {
  atomic_int script_load; /* warnings naming SCRIPT LOAD */
} diag_seen;

static void on_diag(rlock_client *c, rlock_diag_level level,
                    const char *message, void *data) {
  (void)c;
  diag_seen *d = data;
  if (level == RLOCK_DIAG_WARN && strstr(message, "SCRIPT LOAD") != NULL)
    atomic_fetch_add(&d->script_load, 1);
}

/* An ACL user without +script (bad input): SCRIPT LOAD is refused at the
 * connect probe, said once as a warning, and scripts the server does not
 * have cached go as EVAL - every call still works, also after a flush. */
Test(waiters, without_script_permission_scripts_go_as_eval) {
  rt_ok("OK", "ACL SETUSER rl_noscript on >noscriptpw ~* &* +@all -script");
  char uri[256];
  snprintf(uri, sizeof uri, "redis://rl_noscript:noscriptpw@127.0.0.1:%d",
           rt_port());
  diag_seen seen = {0};
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  o.on_diag = on_diag;
  o.on_diag_data = &seen;
  rlock_client *c = NULL;
  cr_assert_eq(rlock_client_new(&c, &o), 0, "%s", rlock_last_error());
  rt_ok("OK", "CONFIG RESETSTAT"); /* not the connect's cross-slot probe */
  char name[64];
  rt_key(name, sizeof name, "noscript");
  rlock *l = NULL;
  cr_assert_eq(rlock_new(c, name, &l), 0);
  for (int round = 0; round < 2; round++) {
    cr_assert_eq(rlock_try_lock(l, 0, 10000), 1, "round %d: %s", round,
                 rlock_last_error());
    cr_assert_eq(rlock_unlock(l), 0, "round %d: %s", round,
                 rlock_last_error());
    rt_ok("OK", "SCRIPT FLUSH");
  }
  cr_assert_eq(atomic_load(&seen.script_load), 1,
               "warnings naming SCRIPT LOAD: %d",
               atomic_load(&seen.script_load));
  char *info = rt_str("INFO commandstats");
  cr_assert(info);
  bool eval = strstr(info, "cmdstat_eval:") != NULL;
  free(info);
  cr_assert(eval, "no EVAL although SCRIPT LOAD is refused");
  rlock_free(l);
  rlock_client_free(c);
}
