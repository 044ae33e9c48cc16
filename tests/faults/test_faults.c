/*
 * The `faults` suite: rlock against a real redis-server that misbehaves —
 * connections killed (command and subscriber), the server frozen (SIGSTOP,
 * CLIENT PAUSE), restarted on the same port, a holder process SIGKILLed,
 * leases running out under a working holder, locks deleted behind the
 * client's back, and acquire replies lost while the acquire itself runs.
 *
 * Every test asserts the same three things, whatever the fault:
 *  - mutual exclusion (a plain counter, incremented under the lock with a
 *    yield in the middle, equals the number of successful acquisitions);
 *  - every call returns within its bound, and a failure is a documented
 *    negative RLOCK_E* code with rlock_last_error() set;
 *  - nothing leaks: after rlock_client_free, PUBSUB CHANNELS is empty, the
 *    client's connections are gone from CLIENT LIST and no key is left
 *    (see fk_assert_clean for the one tolerated exception).
 *
 * Each test gets its own server (Criterion forks a process per test) and
 * names its clients (client_name) to find their connections.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faultkit.h"

TestSuite(faults, .init = fk_init, .fini = fk_fini, .timeout = 30);

#define KEY_MAX 160
#define CHAN_MAX 256
#define OWNER_MAX 96

/* Scheduling slack added to every time bound: the machine running the suite
 * may be a loaded 2-core box. Bounds are "documented time + SLACK_MS". */
#define SLACK_MS 1500

/* Time after which rlock_client_free's effects must be visible. */
#define CLEAN_BOUND_MS 3000

/* Name of a result: the RLOCK_E* name of an error, else a plain word. */
static const char *rc_name(int64_t rc) {
  if (rc < 0)
    return rlock_err_name((int)rc);
  return rc == 0 ? "(0)" : "(1)";
}

static bool is_transport_error(int64_t rc) {
  return rc == RLOCK_ECONN || rc == RLOCK_ETIMEDOUT;
}

/* Bound of an idempotent call (re-sent retry_attempts times). */
static int64_t idempotent_bound(const rlock_options *o) {
  return (int64_t)(o->retry_attempts + 1) * o->command_timeout_ms +
         (int64_t)o->retry_attempts * o->retry_interval_ms;
}

static rlock_client *open_named(rlock_options *o) {
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, 0, "rlock_client_new(%s, name %s): %s (%s)", o->uri,
               o->client_name ? o->client_name : "-", rc_name(rc),
               rlock_last_error());
  return c;
}

static bool has_subscriber(void *channel) { return rt_numsub(channel) >= 1; }

/* A connection of the client named `name` has a subscription. */
static bool client_subscribed(void *name) {
  fk_conn conns[8];
  size_t n = fk_client_list(name, conns, 8);
  for (size_t i = 0; i < n && i < 8; i++)
    if (conns[i].sub > 0 || conns[i].ssub > 0)
      return true;
  return false;
}

/* Waits until PTTL of key goes up (a renewal), within bound_ms. */
static bool saw_renewal(const char *key, int64_t bound_ms) {
  int64_t deadline = rt_now_ms() + bound_ms;
  long long last = rt_pttl(key);
  while (rt_now_ms() < deadline) {
    rt_sleep_ms(20);
    long long now = rt_pttl(key);
    if (now > last + 100)
      return true;
    last = now;
  }
  return false;
}

/* ==== contention under connection kills ==== */

#define CONTENDERS 4
#define MAX_ERR 32

#define CLIENTS 2 /* CONTENDERS threads spread over CLIENTS clients */

typedef struct contention {
  rlock *locks[CLIENTS]; /* one handle per client, same lock name */
  atomic_int next_worker;
  /* per worker: when its current call began (0: not in a call), which */
  _Atomic int64_t in_call_since[CONTENDERS];
  _Atomic int in_call_unlock[CONTENDERS];
  const char *key;
  int64_t wait_ms, lease_ms;
  int64_t try_bound_ms, unlock_bound_ms;
  /* Only the lock protects the counter: it is incremented by a separate
   * load and store (not an atomic read-modify-write), so two holders that
   * overlap lose an increment. The accesses are relaxed atomics only so that
   * TSan, which cannot see the ordering Redis gives between two clients,
   * does not call the (intended) contention a data race. */
  atomic_int counter;
  atomic_int acquired, not_acquired, unlock_zero, unlock_failed, problems;
  atomic_int lock_err[MAX_ERR], unlock_err[MAX_ERR];
  _Atomic int64_t max_try_ms, max_unlock_ms;
  atomic_bool stop;
  pthread_mutex_t problem_mutex;
  char first_problem[400]; /* under problem_mutex */
} contention;

static void problem(contention *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void problem(contention *x, const char *fmt, ...) {
  pthread_mutex_lock(&x->problem_mutex);
  if (atomic_fetch_add(&x->problems, 1) == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->first_problem, sizeof x->first_problem, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&x->problem_mutex);
}

/* A copy of the first problem, safe while the workers still run. */
static void first_problem(contention *x, char *buf, size_t n) {
  pthread_mutex_lock(&x->problem_mutex);
  snprintf(buf, n, "%s", x->first_problem);
  pthread_mutex_unlock(&x->problem_mutex);
}

static void count_err(atomic_int *table, int64_t rc) {
  int64_t i = -rc;
  if (i > 0 && i < MAX_ERR)
    atomic_fetch_add(&table[i], 1);
}

static void update_max(_Atomic int64_t *m, int64_t v) {
  int64_t cur = atomic_load(m);
  while (v > cur && !atomic_compare_exchange_weak(m, &cur, v)) {
  }
}

/* The thread believes it holds one hold: unlock until the outcome is known
 * (as a careful application does after ECONN/ETIMEDOUT). */
static void contention_release(contention *x, rlock *lock, int me) {
  for (int attempt = 0; attempt < 6; attempt++) {
    int64_t t0 = rt_now_ms();
    atomic_store(&x->in_call_unlock[me], 1);
    atomic_store(&x->in_call_since[me], t0);
    int rc = rlock_unlock(lock);
    atomic_store(&x->in_call_since[me], 0);
    int64_t dt = rt_now_ms() - t0;
    update_max(&x->max_unlock_ms, dt);
    if (dt > x->unlock_bound_ms)
      problem(x, "rlock_unlock took %" PRId64 " ms (bound %" PRId64
                 " ms), returned %s", dt, x->unlock_bound_ms,
              rc_name(rc));
    if (rc == 0) {
      /* Released one hold. Still held after releasing the only hold this
       * thread knows of means the server counted an acquisition the client
       * never saw (a lost acquire reply that executed anyway): release the
       * extra hold too so the others can go on, and report. The count is
       * asked of the server; if that fails too, the release stands. */
      int64_t left = rlock_hold_count(lock);
      if (left <= 0)
        return;
      atomic_fetch_add(&x->unlock_zero, 1);
      problem(x, "rlock_unlock left %" PRId64 " hold(s) for a thread that "
                 "held the lock once: a phantom re-entry from a lost acquire "
                 "reply", left);
      continue;
    }
    if (rc < 0 && rlock_last_error()[0] == '\0')
      problem(x, "rlock_unlock failed with %s but rlock_last_error() is "
                 "empty", rc_name(rc));
    count_err(x->unlock_err, rc);
    if (rc == RLOCK_ELOCKLOST || (attempt > 0 && rc == RLOCK_ENOTOWNER))
      return; /* expired meanwhile / released by the earlier attempt */
    if (is_transport_error(rc)) {
      atomic_fetch_add(&x->unlock_failed, 1);
      continue;
    }
    problem(x, "rlock_unlock returned %d %s (%s): not a documented outcome "
               "for a held lock under connection faults",
            rc, rc_name(rc), rlock_last_error());
    return;
  }
  problem(x, "rlock_unlock did not settle after 6 attempts");
}

static void contention_worker(void *arg) {
  contention *x = arg;
  int me = atomic_fetch_add(&x->next_worker, 1) % CONTENDERS;
  rlock *lock = x->locks[me % CLIENTS];
  while (!atomic_load(&x->stop)) {
    int64_t t0 = rt_now_ms();
    atomic_store(&x->in_call_unlock[me], 0);
    atomic_store(&x->in_call_since[me], t0);
    int rc = rlock_try_lock(lock, x->wait_ms, x->lease_ms);
    atomic_store(&x->in_call_since[me], 0);
    int64_t dt = rt_now_ms() - t0;
    update_max(&x->max_try_ms, dt);
    if (dt > x->try_bound_ms)
      problem(x, "rlock_try_lock(wait %" PRId64 ") took %" PRId64
                 " ms (bound %" PRId64 " ms), returned %s",
              x->wait_ms, dt, x->try_bound_ms, rc_name(rc));
    if (rc == 0) {
      atomic_fetch_add(&x->not_acquired, 1);
      continue;
    }
    if (rc < 0) {
      count_err(x->lock_err, rc);
      if (!is_transport_error(rc))
        problem(x, "rlock_try_lock returned %d %s (%s): not a documented "
                   "outcome of a connection fault",
                rc, rc_name(rc), rlock_last_error());
      else if (rlock_last_error()[0] == '\0')
        problem(x, "rlock_try_lock failed with %s but rlock_last_error() "
                   "is empty", rc_name(rc));
      rt_sleep_ms(5);
      continue;
    }
    if (rc != 1) {
      problem(x, "rlock_try_lock returned %d", rc);
      continue;
    }
    /* Read-modify-write with a yield in the middle: any overlap of two
     * holders loses an increment. */
    int v = atomic_load_explicit(&x->counter, memory_order_relaxed);
    sched_yield();
    atomic_store_explicit(&x->counter, v + 1, memory_order_relaxed);
    atomic_fetch_add(&x->acquired, 1);
    contention_release(x, lock, me);
  }
}

static void describe_key(const char *key, char *buf, size_t n);

typedef struct acq_wait {
  contention *x;
  int target;
} acq_wait;

static bool acquired_reached(void *arg) {
  acq_wait *w = arg;
  return atomic_load(&w->x->acquired) >= w->target;
}

static void wait_acquired(contention *x, int target, int64_t bound_ms,
                          const char *what) {
  acq_wait w = {x, target};
  if (!rt_poll_until(acquired_reached, &w, bound_ms)) {
    char who[512], calls[256] = "", first[400];
    describe_key(x->key, who, sizeof who);
    first_problem(x, first, sizeof first);
    size_t used = 0;
    int64_t now = rt_now_ms();
    for (int i = 0; i < CONTENDERS && used < sizeof calls; i++) {
      int64_t since = atomic_load(&x->in_call_since[i]);
      if (since != 0)
        used += (size_t)snprintf(calls + used, sizeof calls - used,
                                 " [thread %d in %s for %" PRId64 " ms]", i,
                                 atomic_load(&x->in_call_unlock[i])
                                     ? "rlock_unlock"
                                     : "rlock_try_lock",
                                 now - since);
    }
    cr_assert_fail("%s: only %d acquisitions (wanted %d) within %" PRId64
                   " ms; the lock key: %s; calls under way:%s; %d "
                   "unlock()==0; first problem: %s",
                   what, atomic_load(&x->acquired), target, bound_ms, who,
                   calls[0] ? calls : " none", atomic_load(&x->unlock_zero),
                   first);
  }
}

/* One line of statistics, for logs and failure messages. */
static void contention_stats(contention *x, int kills, char *buf, size_t n) {
  char errs[512] = "", hit[256];
  size_t used = 0;
  for (int i = 1; i < MAX_ERR; i++) {
    int l = atomic_load(&x->lock_err[i]), u = atomic_load(&x->unlock_err[i]);
    if ((l || u) && used < sizeof errs)
      used += (size_t)snprintf(errs + used, sizeof errs - used,
                               " %s: try %d unlock %d;", rlock_err_name(-i),
                               l, u);
  }
  fk_kill_summary(hit, sizeof hit);
  snprintf(buf, n,
           "%d kills (killed connections' last command: %s), %d "
           "acquisitions, %d not acquired in time, %d unlock transport "
           "failures, %d unlock()==0, max try %" PRId64 " ms, max unlock "
           "%" PRId64 " ms, errors:%s; longest CPU starvation of the test "
           "process %" PRId64 " ms",
           kills, hit, atomic_load(&x->acquired),
           atomic_load(&x->not_acquired), atomic_load(&x->unlock_failed),
           atomic_load(&x->unlock_zero), atomic_load(&x->max_try_ms),
           atomic_load(&x->max_unlock_ms), errs[0] ? errs : " none",
           fk_max_stall_ms());
}

/* The end-of-run assertions shared by both contention tests. */
static void check_contention(contention *x, int kills, int min_kills) {
  char stats[1024];
  contention_stats(x, kills, stats, sizeof stats);
  cr_log_info("%s", stats);
  cr_assert_geq(kills, min_kills, "only %d kills found their connection; %s",
                kills, stats);
  int lost = atomic_load(&x->unlock_err[-RLOCK_ELOCKLOST]);
  cr_assert_eq(atomic_load(&x->counter), atomic_load(&x->acquired),
               "mutual exclusion violated: counter %d != %d acquisitions "
               "(%d unlock(s) found the lease of %" PRId64 " ms expired under "
               "its holder%s); %s",
               atomic_load(&x->counter), atomic_load(&x->acquired), lost,
               x->lease_ms,
               lost ? ": a holder was stalled past its lease, or an acquire "
                      "reply was taken as valid after its lease ran out"
                    : "",
               stats);
  cr_assert_eq(atomic_load(&x->problems), 0, "%d problem(s); first: %s; %s",
               atomic_load(&x->problems), x->first_problem, stats);
}

static void contention_init(contention *x, rlock *const *locks,
                            const char *key, const rlock_options *o,
                            int64_t wait_ms, int64_t lease_ms) {
  memset(x, 0, sizeof *x);
  pthread_mutex_init(&x->problem_mutex, NULL);
  for (int i = 0; i < CLIENTS; i++)
    x->locks[i] = locks[i];
  x->key = key;
  x->wait_ms = wait_ms;
  x->lease_ms = lease_ms;
  /* The last try may be sent just before the deadline and then wait for its
   * reply (or for the connection to come back) one command timeout. */
  x->try_bound_ms = wait_ms + o->command_timeout_ms + SLACK_MS;
  x->unlock_bound_ms = idempotent_bound(o) + SLACK_MS;
}

/* Describes who holds `key` (for failure messages). */
static void describe_key(const char *key, char *buf, size_t n) {
  redisReply *r = rt_cmd("HGETALL %s", key);
  size_t used = (size_t)snprintf(buf, n, "pttl %lld, fields:", rt_pttl(key));
  if (r->type == REDIS_REPLY_ARRAY)
    for (size_t i = 0; i + 1 < r->elements && used < n; i += 2)
      used += (size_t)snprintf(buf + used, n - used, " %s=%s",
                               r->element[i]->str, r->element[i + 1]->str);
  freeReplyObject(r);
}

static bool key_gone(void *key) { return rt_exists(key) == 0; }

static void assert_key_released(const char *key, int64_t bound_ms,
                                const char *what) {
  if (!rt_poll_until(key_gone, (void *)key, bound_ms)) {
    char who[512];
    describe_key(key, who, sizeof who);
    cr_assert_fail("%s: lock key '%s' still exists %" PRId64
                   " ms after every thread released its holds (%s)",
                   what, key, bound_ms, who);
  }
}

/*
 * 4 threads on 2 clients contend (try_lock(wait 5000), lease 10 s) while
 * each client's command connection is killed every 100 ms for 2 s. (The
 * lease only bounds how long a holder whose unlock failed blocks the others;
 * a long one keeps a stalled holder from outliving its lease on a loaded
 * machine.)
 */
Test(faults, command_connection_killed_during_contention) {
  static const char *const names[CLIENTS] = {"fk-cmdkill-a", "fk-cmdkill-b"};
  char key[KEY_MAX];
  rt_key(key, sizeof key, "cmdkill");
  rlock_options o;
  rlock_client *c[CLIENTS];
  rlock *locks[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    fk_options(&o, names[i]);
    o.command_timeout_ms = 1000;
    o.retry_attempts = 3;
    o.retry_interval_ms = 100;
    c[i] = open_named(&o);
    locks[i] = rt_lock(c[i], key);
    fk_wait_conn_count(names[i], 2, 3000);
  }

  static contention x;
  contention_init(&x, locks, key, &o, 5000, 10000);
  rt_thread th[CONTENDERS];
  for (int i = 0; i < CONTENDERS; i++)
    rt_thread_start(&th[i], contention_worker, &x);
  wait_acquired(&x, 20, 5000, "warm-up before the faults");

  int kills = 0;
  int before = atomic_load(&x.acquired);
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < CLIENTS; i++)
      kills += fk_kill_cmd_conn(names[i]);
    rt_sleep_ms(100);
  }
  int during = atomic_load(&x.acquired) - before;
  /* Recovery: the clients reconnect by themselves and work goes on. */
  wait_acquired(&x, atomic_load(&x.acquired) + 20, 10000,
                "progress after the kills stopped");
  atomic_store(&x.stop, true);
  for (int i = 0; i < CONTENDERS; i++)
    rt_thread_join(&th[i], x.try_bound_ms + 2 * x.unlock_bound_ms);
  cr_log_info("%d acquisitions while the kills went on", during);
  check_contention(&x, kills, 20);
  assert_key_released(key, 1000, "after contention with connection kills");
  for (int i = 0; i < CLIENTS; i++) {
    fk_wait_conn_count(names[i], 2, 5000);
    rlock_free(locks[i]);
    rlock_client_free(c[i]);
  }
  for (int i = 0; i < CLIENTS; i++)
    fk_assert_clean(names[i], true, CLEAN_BOUND_MS);
}

/*
 * 4 threads on 2 clients contend (try_lock(wait 5000), lease 3000) while
 * each client's subscriber connection is killed every 100 ms for 2 s:
 * waiters still get the lock (TTL-bounded sleeps, re-subscribe).
 * Afterwards a waiter is woken by the unlock message again, not by the
 * holder's TTL.
 */
Test(faults, subscriber_connection_killed_during_contention) {
  static const char *const names[CLIENTS] = {"fk-subkill-a", "fk-subkill-b"};
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "subkill");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_options o;
  rlock_client *c[CLIENTS];
  rlock *locks[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    fk_options(&o, names[i]);
    o.command_timeout_ms = 1000;
    o.retry_interval_ms = 100;
    c[i] = open_named(&o);
    locks[i] = rt_lock(c[i], key);
    fk_wait_conn_count(names[i], 2, 3000);
  }

  static contention x;
  contention_init(&x, locks, key, &o, 5000, 3000);
  rt_thread th[CONTENDERS];
  for (int i = 0; i < CONTENDERS; i++)
    rt_thread_start(&th[i], contention_worker, &x);
  wait_acquired(&x, 20, 5000, "warm-up before the faults");

  int kills = 0;
  int before = atomic_load(&x.acquired);
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < CLIENTS; i++)
      kills += fk_kill_sub_conn(names[i]);
    rt_sleep_ms(100);
  }
  int during = atomic_load(&x.acquired) - before;
  wait_acquired(&x, atomic_load(&x.acquired) + 20, 10000,
                "progress after the kills stopped");
  atomic_store(&x.stop, true);
  for (int i = 0; i < CONTENDERS; i++)
    rt_thread_join(&th[i], x.try_bound_ms + 2 * x.unlock_bound_ms);
  cr_log_info("%d acquisitions while the kills went on", during);
  check_contention(&x, kills, 10);
  cr_assert_geq(during, 4, "waiters stalled while the subscriber connections "
                "were being killed: %d acquisitions in 2 s", during);
  assert_key_released(key, 1000, "after contention with subscriber kills");
  for (int i = 0; i < CLIENTS; i++)
    fk_wait_conn_count(names[i], 2, 5000);

  /* Woken by message again, across clients: client b holds (lease 10 s),
   * client a waits; the wake-up must come right after the unlock. */
  rlock *holder = locks[1], *waited = locks[0];
  cr_assert_eq(rlock_try_lock(holder, 0, 10000), 1, "%s", rlock_last_error());
  fk_job waiter;
  fk_job_start(&waiter, waited, FK_TRY_LOCK, 8000, 5000, true);
  /* Client b may still be subscribed too (a client may keep an idle
   * subscription): wait for client a's own subscriber connection. */
  rt_wait_until_what(client_subscribed, (void *)names[0], 5000,
                     "waiter's client subscribed again");
  /* That subscription may be an idle one kept from the contention above;
   * give the waiter time to try, fail and go to sleep (not observable). */
  rt_sleep_ms(300);
  cr_assert_not(fk_job_done(&waiter), "waiter returned while the lock was "
                "held: %" PRId64 " %s", waiter.rc, waiter.err);
  cr_assert_leq(rt_numsub(chan), CLIENTS, "the lock channel has %lld "
                "subscribers (at most one connection per client expected)",
                rt_numsub(chan));
  int64_t t_unlock = rt_now_ms();
  cr_assert_eq(rlock_unlock(holder), 0, "%s", rlock_last_error());
  fk_job_wait_done(&waiter, 5000, "waiter after the unlock");
  cr_assert_eq(waiter.rc, 1, "waiter: %" PRId64 " %s (%s)", waiter.rc,
               rc_name(waiter.rc), waiter.err);
  int64_t woke = waiter.t_end - t_unlock;
  cr_assert_lt(woke, 1000, "waiter took %" PRId64 " ms after the unlock: woken "
               "by the TTL, not by the unlock message", woke);
  fk_job_release(&waiter);
  cr_assert_eq(rt_exists(key), 0);

  for (int i = 0; i < CLIENTS; i++) {
    rlock_free(locks[i]);
    rlock_client_free(c[i]);
  }
  for (int i = 0; i < CLIENTS; i++)
    fk_assert_clean(names[i], true, CLEAN_BOUND_MS);
}

/* ==== server restart ==== */

/*
 * A waiter in try_lock(wait 10 s) waits on a lock held (lease 60 s) by
 * another client; redis is SIGKILLed (frozen first, with two more calls in
 * flight) and restarted empty on the same port. The calls in flight fail
 * with ECONN/ETIMEDOUT (or, for the idempotent query, answer after its
 * retry), never hang; the waiter acquires soon after the server is back —
 * the holder's key vanished with the restart — long before its wait ends.
 */
Test(faults, redis_restarted_on_same_port_mid_wait) {
  const char *wname = "fk-restart-w", *hname = "fk-restart-h";
  char key[KEY_MAX], other_key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "restart");
  rt_key(other_key, sizeof other_key, "restart-other");
  rt_lock_channel(chan, sizeof chan, key);

  rlock_options ho, wo;
  fk_options(&ho, hname);
  fk_options(&wo, wname);
  wo.command_timeout_ms = 1000;
  rlock_client *hc = open_named(&ho);
  rlock_client *wc = open_named(&wo);
  rlock *held = rt_lock(hc, key);
  rlock *waited = rt_lock(wc, key);
  rlock *other = rt_lock(wc, other_key);
  cr_assert_eq(rlock_try_lock(held, 0, 60000), 1, "%s", rlock_last_error());

  fk_job waiter;
  fk_job_start(&waiter, waited, FK_TRY_LOCK, 10000, 10000, true);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  cr_assert_not(fk_job_done(&waiter), "waiter returned early: %" PRId64 " %s",
                waiter.rc, waiter.err);

  /* Commands in flight at the crash. */
  fk_server_freeze();
  fk_job q_try, q_query;
  fk_job_start(&q_try, other, FK_TRY_LOCK, 0, 5000, false);
  fk_job_start(&q_query, other, FK_IS_LOCKED, 0, 0, false);
  rt_sleep_ms(300); /* let both be written; the frozen server cannot tell */
  int64_t t_up = fk_server_restart_same_port();
  cr_log_info("redis back on port %d %" PRId64 " ms after the freeze",
              rt_port(), t_up - q_try.t_start);

  /* Reconnect back-off is capped at retry_interval_ms (1500), then
   * re-subscribe and one more try. */
  int64_t bound = wo.retry_interval_ms + 1000 + SLACK_MS;
  fk_job_wait_until(&waiter, t_up + bound, "waiter after the restart");
  cr_assert_eq(waiter.rc, 1, "waiter: %" PRId64 " %s (%s)", waiter.rc,
               rc_name(waiter.rc), waiter.err);
  cr_log_info("waiter acquired %" PRId64 " ms after the server was back",
              waiter.t_end - t_up);

  fk_job_wait_until(&q_try,
                    fk_job_t_start(&q_try) + wo.command_timeout_ms + 300 +
                        SLACK_MS,
                    "try_lock in flight at the restart");
  cr_assert(is_transport_error(q_try.rc),
            "try_lock in flight at the restart: %" PRId64 " %s (%s); "
            "expected RLOCK_ECONN or RLOCK_ETIMEDOUT",
            q_try.rc, rc_name(q_try.rc), q_try.err);
  cr_assert_neq(q_try.err[0], '\0', "no rlock_last_error() detail");

  fk_job_wait_until(&q_query,
                    fk_job_t_start(&q_query) + idempotent_bound(&wo) +
                        SLACK_MS,
                    "is_locked in flight at the restart");
  cr_assert(q_query.rc == 0 || is_transport_error(q_query.rc),
            "is_locked in flight at the restart: %" PRId64 " %s (%s)",
            q_query.rc, rc_name(q_query.rc), q_query.err);
  fk_job_join(&q_try, 1000);
  fk_job_join(&q_query, 1000);

  char wowner[OWNER_MAX];
  fk_job_owner(&waiter, wc, wowner, sizeof wowner);
  char *v = rt_hget(key, wowner);
  cr_assert(v != NULL && strcmp(v, "1") == 0,
            "the new server has no hold of the waiter (%s)", v ? v : "nil");
  free(v);
  fk_job_release(&waiter);

  /* The holder's hold vanished with the restart. */
  int rc = rlock_unlock(held);
  cr_assert_eq(rc, RLOCK_ELOCKLOST, "holder unlock after the restart: %d %s "
               "(%s)", rc, rc_name(rc), rlock_last_error());
  cr_assert_neq(rlock_last_error()[0], '\0');

  /* Both clients work again on the new server without reopening. */
  cr_assert_eq(rlock_try_lock(other, 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(other), 0, "%s", rlock_last_error());
  cr_assert_eq(rlock_try_lock(held, 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(held), 0, "%s", rlock_last_error());
  fk_wait_conn_count(wname, 2, 5000);
  fk_wait_conn_count(hname, 2, 5000);

  rlock_free(other);
  rlock_free(waited);
  rlock_free(held);
  rlock_client_free(wc);
  rlock_client_free(hc);
  fk_assert_clean(wname, true, CLEAN_BOUND_MS);
  fk_assert_clean(hname, true, CLEAN_BOUND_MS);
}

/* ==== server frozen longer than the command timeout ==== */

#define PAUSE_CALLS 4

static void pause_scenario(bool sigstop) {
  const char *name = sigstop ? "fk-sigstop" : "fk-clientpause";
  char key[KEY_MAX], key2[KEY_MAX];
  rt_key(key, sizeof key, "paused");
  rt_key(key2, sizeof key2, "paused-after");
  rlock_client *hc = rt_client();
  rlock *held = rt_lock(hc, key);
  /* Held by another client: the try_lock below that times out and runs
   * late on the server changes nothing. */
  cr_assert_eq(rlock_try_lock(held, 0, 30000), 1, "%s", rlock_last_error());

  rlock_options o;
  fk_options(&o, name);
  o.command_timeout_ms = 1000;
  o.retry_attempts = 0; /* every call's bound is one command timeout */
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  rlock *lock2 = rt_lock(c, key2);

  int64_t pause_ms = 2 * o.command_timeout_ms;
  int64_t t0 = rt_now_ms();
  if (sigstop)
    fk_server_freeze();
  else
    rt_ok("OK", "CLIENT PAUSE %d ALL", (int)pause_ms);

  fk_job jobs[PAUSE_CALLS];
  static const fk_call calls[PAUSE_CALLS] = {FK_TRY_LOCK, FK_IS_LOCKED,
                                             FK_HOLD_COUNT, FK_REMAIN_TTL};
  for (int i = 0; i < PAUSE_CALLS; i++)
    fk_job_start(&jobs[i], lock, calls[i], 0, 5000, false);
  for (int i = 0; i < PAUSE_CALLS; i++)
    fk_job_wait_done(&jobs[i], o.command_timeout_ms + SLACK_MS,
                     "call to a paused server");
  if (sigstop) {
    int64_t left = t0 + pause_ms - rt_now_ms();
    rt_sleep_ms(left); /* the fault lasts 2 x command_timeout_ms */
    fk_server_thaw();
  } else {
    redisReply *r = rt_cmd("PING"); /* answered when the pause ends */
    freeReplyObject(r);
  }
  int64_t t_resumed = rt_now_ms();
  for (int i = 0; i < PAUSE_CALLS; i++) {
    fk_job *j = &jobs[i];
    fk_job_join(j, 1000);
    cr_assert_eq(j->rc, RLOCK_ETIMEDOUT,
                 "%s on a paused server: %" PRId64 " %s (%s); expected "
                 "RLOCK_ETIMEDOUT",
                 fk_call_name(j->call), j->rc, rc_name(j->rc),
                 j->err);
    cr_assert_neq(j->err[0], '\0', "%s: no rlock_last_error() detail",
                  fk_call_name(j->call));
    int64_t took = j->t_end - j->t_start;
    cr_assert_leq(took, o.command_timeout_ms + SLACK_MS,
                  "%s took %" PRId64 " ms (command timeout %" PRId64 ")",
                  fk_call_name(j->call), took, o.command_timeout_ms);
    cr_assert_geq(took, o.command_timeout_ms - 50,
                  "%s gave up after %" PRId64 " ms, before the command "
                  "timeout", fk_call_name(j->call), took);
  }

  /* The same client works again, at once. */
  int64_t t1 = rt_now_ms();
  int rc = rlock_try_lock(lock2, 0, 5000);
  cr_assert_eq(rc, 1, "first call after the pause: %d %s (%s)", rc,
               rc_name(rc), rlock_last_error());
  cr_assert_leq(rt_now_ms() - t1, o.command_timeout_ms,
                "first call after the pause took %" PRId64 " ms",
                rt_now_ms() - t1);
  cr_assert_eq(rlock_is_locked(lock), 1, "%s", rlock_last_error());
  int64_t ttl = 0;
  cr_assert_eq(rlock_remain_ttl(lock, &ttl), 0, "%s", rlock_last_error());
  cr_assert(ttl > 0 && ttl <= 30000, "ttl %" PRId64, ttl);
  cr_assert_eq(rlock_unlock(lock2), 0, "%s", rlock_last_error());
  cr_log_info("resumed after %" PRId64 " ms; client usable %" PRId64
              " ms later", t_resumed - t0, rt_now_ms() - t_resumed);

  cr_assert_eq(rlock_unlock(held), 0, "%s", rlock_last_error());
  rlock_free(lock2);
  rlock_free(lock);
  rlock_free(held);
  rlock_client_free(c);
  rlock_client_free(hc);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

Test(faults, server_sigstopped_longer_than_command_timeout) {
  pause_scenario(true);
}

Test(faults, server_client_paused_longer_than_command_timeout) {
  pause_scenario(false);
}

/* ==== holder process killed ==== */

#define CHILD_WATCHDOG_MS 1500

/* In the forked child: open a client, take the lock in watchdog mode, report
 * "OK <owner>" on the pipe, then wait to be killed. Never returns. */
static void holder_child(int wfd, const char *key) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  rlock_options o;
  fk_options(&o, "fk-child");
  o.watchdog_timeout_ms = CHILD_WATCHDOG_MS;
  rlock_client *c = NULL;
  rlock *lock = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc == 0)
    rc = rlock_new(c, key, &lock);
  if (rc == 0)
    rc = rlock_lock(lock, -1);
  char line[256];
  if (rc != 0) {
    snprintf(line, sizeof line, "ERR %s %s\n", rc_name(rc),
             rlock_last_error());
  } else {
    char owner[OWNER_MAX];
    fk_my_owner(c, owner, sizeof owner);
    snprintf(line, sizeof line, "OK %s\n", owner);
  }
  if (write(wfd, line, strlen(line)) < 0)
    _exit(3);
  if (rc != 0)
    _exit(2);
  for (;;)
    pause();
}

/* Reads one line from fd within bound_ms. */
static bool read_line(int fd, char *buf, size_t n, int64_t bound_ms) {
  size_t used = 0;
  int64_t deadline = rt_now_ms() + bound_ms;
  while (used + 1 < n) {
    int64_t left = deadline - rt_now_ms();
    if (left <= 0)
      break;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, (int)left);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      break;
    ssize_t got = read(fd, buf + used, 1);
    if (got <= 0)
      break;
    if (buf[used] == '\n') {
      buf[used] = '\0';
      return true;
    }
    used++;
  }
  buf[used] = '\0';
  return false;
}

/*
 * A child process holds the lock in watchdog mode (watchdog 1500 ms); the
 * parent's waiter (try_lock(wait 10 s)) is blocked on it; the child is
 * SIGKILLed: its renewals stop, and the waiter acquires within the watchdog
 * timeout.
 */
Test(faults, holder_process_sigkilled) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "holderkill");
  rt_lock_channel(chan, sizeof chan, key);

  /* Fork before this process has a client of its own: no rlock thread can
   * hold a lock (or half-written state) that the child would inherit. */
  int fds[2];
  cr_assert_eq(pipe(fds), 0, "pipe: %s", strerror(errno));
  pid_t child = fork();
  cr_assert_geq(child, 0, "fork: %s", strerror(errno));
  if (child == 0) {
    close(fds[0]);
    holder_child(fds[1], key);
  }
  close(fds[1]);
  char line[256];
  bool got = read_line(fds[0], line, sizeof line, 10000);
  close(fds[0]);
  if (!got || strncmp(line, "OK ", 3) != 0) {
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    cr_assert_fail("holder child did not take the lock: '%s'", line);
  }
  const char *child_owner = line + 3;
  char *v = rt_hget(key, child_owner);
  cr_assert(v != NULL && strcmp(v, "1") == 0, "child's hold: %s",
            v ? v : "nil");
  free(v);
  cr_assert(saw_renewal(key, 2 * CHILD_WATCHDOG_MS),
            "the child's watchdog does not renew its lock");

  const char *name = "fk-holderkill-w";
  rlock_options o;
  fk_options(&o, name);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  fk_job waiter;
  fk_job_start(&waiter, lock, FK_TRY_LOCK, 10000, 5000, true);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  cr_assert_not(fk_job_done(&waiter), "waiter returned while the child held "
                "the lock: %" PRId64 " %s", waiter.rc, waiter.err);

  int64_t t_kill = rt_now_ms();
  cr_assert_eq(kill(child, SIGKILL), 0);
  cr_assert_eq(waitpid(child, NULL, 0), child);

  fk_job_wait_done(&waiter, CHILD_WATCHDOG_MS + SLACK_MS,
                   "waiter after the holder died");
  cr_assert_eq(waiter.rc, 1, "waiter: %" PRId64 " %s (%s)", waiter.rc,
               rc_name(waiter.rc), waiter.err);
  int64_t took = waiter.t_end - t_kill;
  cr_log_info("waiter acquired %" PRId64 " ms after the holder was killed",
              took);
  cr_assert_leq(took, CHILD_WATCHDOG_MS + SLACK_MS);
  char wowner[OWNER_MAX];
  fk_job_owner(&waiter, c, wowner, sizeof wowner);
  v = rt_hget(key, wowner);
  cr_assert(v != NULL && strcmp(v, "1") == 0);
  free(v);
  cr_assert_eq(rt_hlen(key), 1, "the dead holder's field is still there");
  fk_job_release(&waiter);

  fk_wait_conn_count("fk-child", 0, 3000);
  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

/* ==== lease expiry under a working holder ==== */

/*
 * The main thread holds the lock with an 800 ms lease and "works" past it;
 * another thread acquires it. The old holder's unlock fails cleanly with
 * RLOCK_ELOCKLOST and leaves the new holder's field alone; a second unlock
 * is RLOCK_ENOTOWNER (the hold was forgotten).
 */
Test(faults, lease_expiry_while_holder_works) {
  const char *name = "fk-lease";
  char key[KEY_MAX], owner[OWNER_MAX], other_owner[OWNER_MAX];
  rt_key(key, sizeof key, "lease");
  rlock_options o;
  fk_options(&o, name);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  fk_my_owner(c, owner, sizeof owner);

  int64_t t_lock = rt_now_ms();
  cr_assert_eq(rlock_try_lock(lock, 0, 800), 1, "%s", rlock_last_error());
  fk_job other;
  fk_job_start(&other, lock, FK_TRY_LOCK, 5000, 10000, true);
  fk_job_wait_done(&other, 800 + SLACK_MS, "second thread after the lease");
  cr_assert_eq(other.rc, 1, "second thread: %" PRId64 " %s (%s)", other.rc,
               rc_name(other.rc), other.err);
  cr_assert_geq(other.t_end - t_lock, 700,
                "second thread got the lock %" PRId64 " ms after an 800 ms "
                "lease began", other.t_end - t_lock);
  fk_job_owner(&other, c, other_owner, sizeof other_owner);

  int rc = rlock_unlock(lock);
  cr_assert_eq(rc, RLOCK_ELOCKLOST, "old holder's unlock: %d %s (%s)", rc,
               rc_name(rc), rlock_last_error());
  cr_assert_neq(rlock_last_error()[0], '\0');
  char *v = rt_hget(key, other_owner);
  cr_assert(v != NULL && strcmp(v, "1") == 0,
            "the new holder's field was touched: %s", v ? v : "nil");
  free(v);
  cr_assert_eq(rt_hlen(key), 1);
  v = rt_hget(key, owner);
  cr_assert_null(v, "the old holder's field is back: %s", v);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 5000 && pttl <= 10000, "new holder's TTL changed: %lld",
            pttl);

  rc = rlock_unlock(lock);
  cr_assert_eq(rc, RLOCK_ENOTOWNER, "second unlock by the old holder: %d %s",
               rc, rc_name(rc));
  cr_assert_eq(rlock_is_held(lock), 0);

  fk_job_release(&other);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, false, CLEAN_BOUND_MS);
}

/* ==== the watchdog across reconnects ==== */

#define WD_MS 1500

typedef struct lost_log {
  atomic_int calls;
  _Atomic int64_t t_first;
  char name[KEY_MAX];
  char owner[OWNER_MAX];
} lost_log;

static void on_lost(const char *lock_name, const char *owner, void *data) {
  lost_log *l = data;
  if (atomic_load(&l->calls) == 0) {
    snprintf(l->name, sizeof l->name, "%s", lock_name);
    snprintf(l->owner, sizeof l->owner, "%s", owner);
    atomic_store(&l->t_first, rt_now_ms());
  }
  atomic_fetch_add(&l->calls, 1);
}

static bool lost_called(void *arg) {
  return atomic_load(&((lost_log *)arg)->calls) > 0;
}

static void watchdog_options(rlock_options *o, const char *name,
                             lost_log *lost) {
  fk_options(o, name);
  o->watchdog_timeout_ms = WD_MS;
  o->command_timeout_ms = 1000;
  /* Re-sends and reconnects within a fraction of the watchdog period: the
   * test is about reconnecting, not about tuning. */
  o->retry_interval_ms = 250;
  o->on_lock_lost = on_lost;
  o->on_lock_lost_data = lost;
}

/*
 * A lock in watchdog mode (1500 ms) stays held for 5 s (> 3 x 1500 ms)
 * while its client's command connection is killed three times.
 */
Test(faults, watchdog_renews_after_reconnect) {
  const char *name = "fk-wd-reconnect";
  char key[KEY_MAX], owner[OWNER_MAX];
  rt_key(key, sizeof key, "wd-reconnect");
  static lost_log lost;
  rlock_options o;
  watchdog_options(&o, name, &lost);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  fk_my_owner(c, owner, sizeof owner);
  fk_wait_conn_count(name, 2, 3000);

  cr_assert_eq(rlock_lock(lock, -1), 0, "%s", rlock_last_error());
  int64_t t0 = rt_now_ms();
  static const int64_t kill_at[] = {300, 1800, 3300};
  size_t next_kill = 0;
  int kills = 0;
  long long min_pttl = WD_MS;
  while (rt_now_ms() - t0 < 5000) {
    if (next_kill < 3 && rt_now_ms() - t0 >= kill_at[next_kill]) {
      kills += fk_kill_cmd_conn(name);
      next_kill++;
    }
    char *v = rt_hget(key, owner);
    long long pttl = rt_pttl(key);
    int64_t at = rt_now_ms() - t0;
    cr_assert(v != NULL && strcmp(v, "1") == 0,
              "lock lost %" PRId64 " ms after locking (%d kill(s) so far): "
              "field %s, pttl %lld",
              at, kills, v ? v : "nil", pttl);
    free(v);
    if (pttl < min_pttl)
      min_pttl = pttl;
    rt_sleep_ms(50);
  }
  char hit[256];
  fk_kill_summary(hit, sizeof hit);
  cr_log_info("held 5000 ms through %d kills (%s); lowest PTTL seen %lld ms",
              kills, hit, min_pttl);
  cr_assert_geq(kills, 2, "only %d of 3 kills found the command connection",
                kills);
  cr_assert_eq(atomic_load(&lost.calls), 0, "on_lock_lost called for a lock "
               "that was never lost");
  fk_wait_conn_count(name, 2, 5000);
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  cr_assert_eq(rt_exists(key), 0);

  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

/*
 * After a reconnect, a watchdog lock deleted behind the client's back (DEL)
 * is reported once through on_lock_lost within watchdog/3 + slack, and the
 * next unlock is RLOCK_ELOCKLOST.
 */
Test(faults, watchdog_reports_deleted_lock_after_reconnect) {
  const char *name = "fk-wd-deleted";
  char key[KEY_MAX], owner[OWNER_MAX];
  rt_key(key, sizeof key, "wd-deleted");
  static lost_log lost;
  rlock_options o;
  watchdog_options(&o, name, &lost);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  fk_my_owner(c, owner, sizeof owner);
  fk_wait_conn_count(name, 2, 3000);

  cr_assert_eq(rlock_lock(lock, -1), 0, "%s", rlock_last_error());
  cr_assert_eq(fk_kill_cmd_conn(name), 1, "no command connection to kill");
  fk_wait_conn_count(name, 2, 5000);
  cr_assert(saw_renewal(key, 2 * WD_MS), "no renewal after the reconnect");

  int64_t t_del = rt_now_ms();
  cr_assert_eq(rt_int("DEL %s", key), 1);
  int64_t bound = WD_MS / 3 + SLACK_MS;
  rt_wait_until_what(lost_called, &lost, bound, "on_lock_lost called");
  int64_t took = atomic_load(&lost.t_first) - t_del;
  cr_log_info("on_lock_lost %" PRId64 " ms after DEL", took);
  cr_assert_str_eq(lost.name, key);
  cr_assert_str_eq(lost.owner, owner);
  cr_assert_eq(rt_exists(key), 0, "the watchdog re-created the deleted lock");

  /* Reported once, not every period. */
  rt_sleep_ms(2 * WD_MS / 3 + 100);
  cr_assert_eq(atomic_load(&lost.calls), 1, "on_lock_lost called %d times",
               atomic_load(&lost.calls));

  int rc = rlock_unlock(lock);
  cr_assert_eq(rc, RLOCK_ELOCKLOST, "unlock of the deleted lock: %d %s (%s)",
               rc, rc_name(rc), rlock_last_error());
  cr_assert_neq(rlock_last_error()[0], '\0');
  rc = rlock_unlock(lock);
  cr_assert_eq(rc, RLOCK_ENOTOWNER, "second unlock: %d %s", rc,
               rc_name(rc));
  cr_assert_eq(rt_exists(key), 0);

  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

/* ==== phantom holds: acquire replies lost, acquires executed ====
 *
 * The server is frozen (SIGSTOP) or its writes paused (CLIENT PAUSE WRITE:
 * EVAL/EVALSHA wait) longer than the command timeout, so the acquire fails
 * client-side with ETIMEDOUT (or ECONN) but runs on the server when it
 * resumes. The application, told the acquire failed, does not unlock.
 *
 * The invariant, checked for PHANTOM_BOUND_MS after the server resumes
 * (well within the watchdog timeout, so a plain expiry cannot pass for a
 * fix): either the key does not hold this owner's field, or the client
 * knows it holds it — its watchdog renews it, rlock_is_held
 * and rlock_hold_count say 1, and one rlock_unlock releases it fully. Never
 * a field that stays without rlock knowing.
 */

#define PHANTOM_WD_MS 4000
#define PHANTOM_CMD_MS 500
#define PHANTOM_BOUND_MS 3000

static void phantom_options(rlock_options *o, const char *name) {
  fk_options(o, name);
  o->command_timeout_ms = PHANTOM_CMD_MS;
  o->retry_attempts = 3;
  o->retry_interval_ms = 200;
  o->watchdog_timeout_ms = PHANTOM_WD_MS;
}

typedef struct watch {
  bool ever_present;
  bool renewed;
  int64_t gone_at; /* ms after resume when it disappeared, -1 never */
  char last[64];   /* last value of the field, "" when absent */
  long long last_pttl;
} watch;

/* Watches HGET key owner and PTTL key until PHANTOM_BOUND_MS after
 * t_resume. */
static void watch_field(const char *key, const char *owner, int64_t t_resume,
                        watch *w) {
  memset(w, 0, sizeof *w);
  w->gone_at = -1;
  long long prev_pttl = -3;
  while (rt_now_ms() - t_resume < PHANTOM_BOUND_MS) {
    char *v = rt_hget(key, owner);
    long long pttl = rt_pttl(key);
    if (v != NULL) {
      w->ever_present = true;
      w->gone_at = -1;
      if (prev_pttl > 0 && pttl > prev_pttl + 150)
        w->renewed = true;
    } else if (w->ever_present && w->gone_at < 0) {
      w->gone_at = rt_now_ms() - t_resume;
    }
    snprintf(w->last, sizeof w->last, "%s", v ? v : "");
    free(v);
    prev_pttl = pttl;
    w->last_pttl = pttl;
    rt_sleep_ms(25);
  }
}

static void warm_up_scripts(rlock_client *c) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "warm-up");
  rlock *lock = rt_lock(c, key);
  cr_assert_eq(rlock_try_lock(lock, 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  rlock_free(lock);
}

static void phantom_acquire(bool sigstop) {
  const char *name = sigstop ? "fk-phantom-stop" : "fk-phantom-pause";
  char key[KEY_MAX], owner[OWNER_MAX];
  rt_key(key, sizeof key, sigstop ? "phantom-stop" : "phantom-pause");
  rlock_options o;
  phantom_options(&o, name);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  fk_my_owner(c, owner, sizeof owner);
  /* Warm-up: the acquire script is cached on the server from now on, so the
   * late EVALSHA really runs (a cold one would only meet NOSCRIPT). */
  warm_up_scripts(c);
  redisContext *events = fk_keyspace_watch(key);

  if (sigstop)
    fk_server_freeze();
  else
    rt_ok("OK", "CLIENT PAUSE 20000 WRITE");
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(lock, 0, -1);
  int64_t took = rt_now_ms() - t0;
  char err[256];
  fk_copy_last_error(err, sizeof err);
  if (!sigstop) {
    /* Reads still work under PAUSE WRITE: the acquire has not run yet. */
    cr_assert_eq(rt_exists(key), 0, "the acquire ran during the pause");
  }
  int64_t t_resume = rt_now_ms();
  if (sigstop)
    fk_server_thaw();
  else
    rt_ok("OK", "CLIENT UNPAUSE");
  cr_assert(is_transport_error(rc),
            "acquire against a paused server: %d %s (%s); expected "
            "RLOCK_ETIMEDOUT or RLOCK_ECONN",
            rc, rc_name(rc), err);
  cr_assert_neq(err[0], '\0');
  cr_assert_leq(took, PHANTOM_CMD_MS + SLACK_MS);

  watch w;
  watch_field(key, owner, t_resume, &w);
  char seen[512];
  fk_keyspace_collect(events, seen, sizeof seen);
  cr_log_info("after the lost acquire reply: key events on the server '%s'; "
              "field ever seen %d, renewed %d, now '%s' (pttl %lld)",
              seen, w.ever_present, w.renewed, w.last, w.last_pttl);
  if (w.last[0] != '\0') {
    cr_assert(w.renewed,
              "phantom hold: %" PRId64 " ms after the server resumed, key "
              "'%s' still holds this thread's field (count %s, pttl %lld, "
              "not renewed) although rlock_try_lock returned %s; rlock does "
              "not know it holds the lock, so nothing will release it before "
              "its %d ms lease runs out",
              (int64_t)PHANTOM_BOUND_MS, key, w.last, w.last_pttl,
              rc_name(rc), PHANTOM_WD_MS);
    /* The client knows: it must say so and release it with one unlock. */
    cr_assert_eq(rlock_is_held(lock), 1, "%s",
                 rlock_last_error());
    cr_assert_eq(rlock_hold_count(lock), 1, "%s", rlock_last_error());
    cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
    cr_assert_eq(rt_exists(key), 0);
  }
  /* Either way, this thread does not hold it now and can take it again. */
  cr_assert_eq(rlock_try_lock(lock, 0, -1), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_hold_count(lock), 1);
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  cr_assert_eq(rt_exists(key), 0);

  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

Test(faults, phantom_acquire_client_pause_write) { phantom_acquire(false); }

Test(faults, phantom_acquire_sigstop) { phantom_acquire(true); }

/*
 * The thread holds the lock once (watchdog mode); a re-entrant try_lock's
 * reply is lost while its HINCRBY runs. The thread believes it holds one
 * hold: Redis must say 1 too (not 2) within the bound, and one unlock must
 * release the lock fully.
 */
Test(faults, phantom_reentry_sigstop) {
  const char *name = "fk-phantom-reentry";
  char key[KEY_MAX], owner[OWNER_MAX];
  rt_key(key, sizeof key, "phantom-reentry");
  rlock_options o;
  phantom_options(&o, name);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  fk_my_owner(c, owner, sizeof owner);

  cr_assert_eq(rlock_try_lock(lock, 0, -1), 1, "%s", rlock_last_error());
  redisContext *events = fk_keyspace_watch(key);
  fk_server_freeze();
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(lock, 0, -1);
  int64_t took = rt_now_ms() - t0;
  char err[256];
  fk_copy_last_error(err, sizeof err);
  int64_t t_resume = rt_now_ms();
  fk_server_thaw();
  cr_assert(is_transport_error(rc),
            "re-entrant acquire against a frozen server: %d %s (%s)", rc,
            rc_name(rc), err);
  cr_assert_leq(took, PHANTOM_CMD_MS + SLACK_MS);

  watch w;
  watch_field(key, owner, t_resume, &w);
  char seen[512];
  fk_keyspace_collect(events, seen, sizeof seen);
  cr_log_info("after the lost re-entry reply: key events on the server '%s'; "
              "count now '%s' (pttl %lld), renewed %d",
              seen, w.last, w.last_pttl, w.renewed);
  cr_assert_str_eq(w.last, "1",
                   "%" PRId64 " ms after the server resumed, Redis counts %s "
                   "hold(s) of this thread, which believes it holds 1 (the "
                   "re-entry failed with %s)",
                   (int64_t)PHANTOM_BOUND_MS,
                   w.last[0] ? w.last : "no", rc_name(rc));
  int64_t count = rlock_hold_count(lock);
  cr_assert_eq(count, 1, "rlock_hold_count: %" PRId64, count);
  rc = rlock_unlock(lock);
  cr_assert_eq(rc, 0, "the thread's only unlock returned %d %s: the lock "
               "stays held", rc, rc_name(rc));
  assert_key_released(key, 500, "after the only unlock");

  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

/* ---- issue 10: an unlock in flight, and wait_ms as the call's bound ---- */

/*
 * An unlock whose first attempt misses its reply deadline still runs on the
 * server once the server gets to it; the latched re-send then answers 1.
 * The watchdog (900 ms, renewing every 300 ms) must neither renew that hold
 * meanwhile nor take the renewal's "0" for a lost lock: CLIENT PAUSE 150
 * WRITE holds the unlock past its 100 ms deadline, the re-send comes 400 ms
 * later. Five rounds; before the fix on_lock_lost fired in every one.
 * The scripts are cached first, as the test assumes: a cold EVALSHA held by
 * the pause answers NOSCRIPT after its deadline, so the script never ran
 * and only the re-send runs it. In round 0, on a loaded machine, the first
 * renewal (due at 300 ms) could be sent after the pause began and meet the
 * same fate; the lock then went unrenewed past its 900 ms TTL before the
 * re-sends came, and the unlock answered RLOCK_ELOCKLOST after 554 ms (one
 * CI run on the 2-core machine; the course the code and that time point
 * to, not reproduced in 30 runs here).
 */
Test(faults, unlock_in_flight_is_not_reported_lost) {
  const char *name = "fk-wd-unlocking";
  char key[KEY_MAX];
  rt_key(key, sizeof key, "wd-unlocking");
  static lost_log lost;
  rlock_options o;
  fk_options(&o, name);
  o.watchdog_timeout_ms = 900;
  o.command_timeout_ms = 100;
  o.retry_interval_ms = 400;
  o.on_lock_lost = on_lost;
  o.on_lock_lost_data = &lost;
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  warm_up_scripts(c);

  for (int round = 0; round < 5; round++) {
    cr_assert_eq(rlock_lock(lock, -1), 0, "round %d: %s", round,
                 rlock_last_error());
    /* Long enough for renewals of the fresh hold to come and go. */
    rt_sleep_ms(350);
    rt_ok("OK", "CLIENT PAUSE 150 WRITE");
    int64_t t0 = rt_now_ms();
    int rc = rlock_unlock(lock);
    int64_t took = rt_now_ms() - t0;
    cr_assert_eq(rc, 0, "round %d: unlock %s (%s) after %" PRId64 " ms",
                 round, rc_name(rc), rlock_last_error(), took);
    cr_assert_eq(rt_exists(key), 0, "round %d: key left", round);
    /* A renewal round sent during the unlock has answered by now. */
    rt_sleep_ms(400);
    cr_assert_eq(atomic_load(&lost.calls), 0,
                 "round %d: on_lock_lost('%s') called %" PRId64 " ms after "
                 "the unlock started, for a lock released normally (the "
                 "unlock took %" PRId64 " ms)",
                 round, lost.name, atomic_load(&lost.t_first) - t0, took);
  }
  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

static bool owner_field_gone(void *arg) {
  const char *const *ko = arg;
  char *v = rt_hget(ko[0], ko[1]);
  free(v);
  return v == NULL;
}

/*
 * wait_ms bounds the whole call, also when the server stalls mid-call: a
 * try_lock(wait_ms) returns within a small slack of wait_ms - RLOCK_ETIMEDOUT
 * when the server never answered it, 0 when it did (the lock was held) -
 * although the command timeout is longer. The acquires left unanswered run
 * once the server resumes, and the background trim removes what they took:
 * no hold survives. wait_ms == 0 is one attempt, bounded by the command
 * timeout.
 */
#define STALL_CMD_MS 1000
#define STALL_SLACK_MS 400
Test(faults, try_lock_wait_bounds_the_call_when_server_stalls) {
  const char *name = "fk-wait-bound";
  char key[KEY_MAX], held_key[KEY_MAX], owner[OWNER_MAX];
  rt_key(key, sizeof key, "wait-bound");
  rt_key(held_key, sizeof held_key, "wait-bound-held");
  rlock_options o;
  fk_options(&o, name);
  o.command_timeout_ms = STALL_CMD_MS;
  o.watchdog_timeout_ms = 900; /* pending trims are retried every 300 ms */
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  rlock *held_lock = rt_lock(c, held_key);
  fk_my_owner(c, owner, sizeof owner);
  rlock_client *hc = rt_client();
  rlock *holder = rt_lock(hc, held_key);
  /* Scripts cached and both connections warm. */
  cr_assert_eq(rlock_try_lock(lock, 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());

  /* The holder's lease runs out while the server is frozen: the waiter's
   * TTL-bounded sleep ends then and its retry is never answered. */
  cr_assert_eq(rlock_try_lock(holder, 0, 400), 1, "%s", rlock_last_error());
  fk_job waiter;
  fk_job_start(&waiter, held_lock, FK_TRY_LOCK, 1500, 5000, false);
  char chan[CHAN_MAX];
  rt_lock_channel(chan, sizeof chan, held_key);
  rt_wait_until_what(has_subscriber, chan, 3000, "waiter subscribed");

  fk_server_freeze();
  int64_t bound_errors = 0;
  char report[512] = "";
  static const int64_t waits[] = {100, 600};
  for (size_t i = 0; i < 2; i++) {
    int64_t t0 = rt_now_ms();
    int rc = rlock_try_lock(lock, waits[i], 5000);
    int64_t took = rt_now_ms() - t0;
    char err[256];
    fk_copy_last_error(err, sizeof err);
    size_t at = strlen(report);
    snprintf(report + at, sizeof report - at,
             "try_lock(%" PRId64 ") -> %s in %" PRId64 " ms (%s); ", waits[i],
             rc_name(rc), took, err);
    if (rc != RLOCK_ETIMEDOUT || took > waits[i] + STALL_SLACK_MS ||
        took < waits[i])
      bound_errors++;
  }
  fk_job_join(&waiter, 5000);
  {
    size_t at = strlen(report);
    snprintf(report + at, sizeof report - at,
             "waiter try_lock(1500) with an answered try -> %s in %" PRId64
             " ms (%s); ",
             rc_name(waiter.rc), waiter.t_end - waiter.t_start, waiter.err);
  }
  if (waiter.rc != 0 || waiter.t_end - waiter.t_start > 1500 + STALL_SLACK_MS)
    bound_errors++;
  int64_t t0 = rt_now_ms();
  int rc0 = rlock_try_lock(lock, 0, 5000);
  int64_t took0 = rt_now_ms() - t0;
  {
    size_t at = strlen(report);
    snprintf(report + at, sizeof report - at,
             "try_lock(0) -> %s in %" PRId64 " ms", rc_name(rc0), took0);
  }
  if (rc0 != RLOCK_ETIMEDOUT || took0 < STALL_CMD_MS ||
      took0 > STALL_CMD_MS + STALL_SLACK_MS)
    bound_errors++;
  fk_server_thaw();
  cr_log_info("frozen server: %s (longest stall of this process %" PRId64
              " ms)", report, fk_max_stall_ms());
  cr_assert_eq(bound_errors, 0, "calls overran their bound: %s (longest "
               "stall of this process %" PRId64 " ms)",
               report, fk_max_stall_ms());

  /* The unanswered acquires ran after the thaw; the trims undid them. */
  const char *k1[2] = {key, owner};
  char wowner[OWNER_MAX];
  fk_job_owner(&waiter, c, wowner, sizeof wowner);
  const char *k2[2] = {held_key, wowner};
  rt_wait_until_what(owner_field_gone, (void *)k1, 3000,
                     "no hold left by the abandoned try_lock calls");
  rt_wait_until_what(owner_field_gone, (void *)k2, 3000,
                     "no hold left by the waiter's abandoned retry");
  rt_sleep_ms(300);
  cr_assert_eq(rt_exists(key), 0, "a late acquire left '%s' held", key);
  cr_assert_eq(rt_exists(held_key), 0, "a late acquire left '%s' held",
               held_key);
  cr_assert_eq(rlock_hold_count(lock), 0);

  rlock_free(holder);
  rlock_client_free(hc);
  rlock_free(held_lock);
  rlock_free(lock);
  rlock_client_free(c);
  fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

/*
 * Issue 24: rlock_lock() (no deadline) rides out an outage for the
 * documented (retry_attempts + 1) x (command_timeout_ms + retry_interval_ms)
 * from the try that went unanswered, and no longer: a repair trim sent just
 * before the bound used to be waited for in full (up to one more
 * retry_interval_ms, or a command timeout). Server frozen (SIGSTOP: every
 * command times out) or killed (every connection attempt refused).
 */
#define OUTAGE_TOLERANCE_MS 150
static void lock_outage_bound(bool sigstop) {
  const char *name = sigstop ? "fk-outage-stop" : "fk-outage-kill";
  char key[KEY_MAX];
  rt_key(key, sizeof key, "outage-bound");
  rlock_options o;
  fk_options(&o, name);
  o.command_timeout_ms = 1000;
  o.retry_interval_ms = 500;
  o.retry_attempts = 1;
  int64_t bound = (int64_t)(o.retry_attempts + 1) *
                  (o.command_timeout_ms + o.retry_interval_ms);
  rlock_client *c = open_named(&o);
  rlock *lock = rt_lock(c, key);
  /* Scripts cached and the connection warm. */
  cr_assert_eq(rlock_try_lock(lock, 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());

  if (sigstop)
    fk_server_freeze();
  else
    rt_server_kill();
  int64_t t0 = rt_now_ms();
  int rc = rlock_lock(lock, 30000);
  int64_t took = rt_now_ms() - t0;
  char err[256];
  fk_copy_last_error(err, sizeof err);
  cr_log_info("rlock_lock during the outage: %s in %" PRId64 " ms (bound %"
              PRId64 "; %s; longest stall %" PRId64 " ms)", rc_name(rc),
              took, bound, err, fk_max_stall_ms());
  cr_assert(is_transport_error(rc), "rlock_lock during the outage: %s (%s)",
            rc_name(rc), err);
  cr_assert_leq(took, bound + OUTAGE_TOLERANCE_MS,
                "rlock_lock gave up after %" PRId64 " ms; documented bound %"
                PRId64 " ms (longest stall of this process %" PRId64 " ms)",
                took, bound, fk_max_stall_ms());
  cr_assert_geq(took, bound - OUTAGE_TOLERANCE_MS,
                "rlock_lock gave up after %" PRId64 " ms, before riding out "
                "the documented %" PRId64 " ms", took, bound);

  if (sigstop) {
    fk_server_thaw();
    /* The unanswered try ran after the thaw; the background trim undid it. */
    rt_wait_until_what(key_gone, key, 5000, "no hold left by the try");
    cr_assert_eq(rlock_hold_count(lock), 0);
  }
  rlock_free(lock);
  rlock_client_free(c);
  if (sigstop)
    fk_assert_clean(name, true, CLEAN_BOUND_MS);
}

Test(faults, lock_gives_up_within_documented_bound_server_sigstopped) {
  lock_outage_bound(true);
}

Test(faults, lock_gives_up_within_documented_bound_server_killed) {
  lock_outage_bound(false);
}
