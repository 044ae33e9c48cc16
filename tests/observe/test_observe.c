/*
 * The `observe` suite (issue 28, items 2 and 3): the typed event hook and
 * the stats, against a real redis-server (the redis harness; faultkit for
 * connection kills). Every count asserted is what the test did: N
 * acquisitions give N ACQUIRED events and acquisitions == N, a forced
 * loss one LOST event and locks_lost == 1, a killed connection one
 * reconnect. The Prometheus text is checked by a parser of the exposition
 * format here, the JSON by python3's json module.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faultkit.h"

TestSuite(observe, .init = fk_init, .fini = fk_fini, .timeout = 60);

/* ---- an event recorder (the handler runs on the loop thread) ---- */

#define REC_MAX 256

typedef struct rec_event {
  rlock_event_type type;
  char kind[32], name[128], owner[96], detail[200], client_id[40];
  int64_t wait_ms, hold_ms, hold_count, remaining_ms, lease_ms;
  int attempts, cause, error, port;
  bool has_host;
} rec_event;

typedef struct recorder {
  pthread_mutex_t mu;
  rec_event ev[REC_MAX];
  int n;
  int dropped;
  /* set: the handler tries a blocking call on the first event it sees */
  rlock *block_on;
  int block_rc;
} recorder;

static void rec_init(recorder *r) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
  r->block_rc = 1;
}

static void copy(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src != NULL ? src : "");
}

static void on_event(const rlock_event *ev, void *data) {
  recorder *r = data;
  if (r->block_on != NULL && r->block_rc == 1)
    r->block_rc = rlock_lock(r->block_on, -1); /* must not deadlock */
  pthread_mutex_lock(&r->mu);
  if (r->n == REC_MAX) {
    r->dropped++;
  } else {
    rec_event *e = &r->ev[r->n++];
    e->type = ev->type;
    copy(e->kind, sizeof(e->kind), ev->kind);
    copy(e->name, sizeof(e->name), ev->name);
    copy(e->owner, sizeof(e->owner), ev->owner);
    copy(e->detail, sizeof(e->detail), ev->detail);
    copy(e->client_id, sizeof(e->client_id), ev->client_id);
    e->wait_ms = ev->wait_ms;
    e->hold_ms = ev->hold_ms;
    e->hold_count = ev->hold_count;
    e->remaining_ms = ev->remaining_ms;
    e->lease_ms = ev->lease_ms;
    e->attempts = ev->attempts;
    e->cause = ev->cause;
    e->error = ev->error;
    e->port = ev->port;
    e->has_host = ev->host != NULL;
  }
  pthread_mutex_unlock(&r->mu);
}

static int rec_count(recorder *r, rlock_event_type type) {
  pthread_mutex_lock(&r->mu);
  int n = 0;
  for (int i = 0; i < r->n; i++)
    n += r->ev[i].type == type;
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* Where the i-th event of `type` is among all recorded (-1: none). */
static int rec_pos(recorder *r, rlock_event_type type, int i) {
  pthread_mutex_lock(&r->mu);
  int pos = -1;
  for (int k = 0; k < r->n && pos < 0; k++)
    if (r->ev[k].type == type && i-- == 0)
      pos = k;
  pthread_mutex_unlock(&r->mu);
  return pos;
}

/* A copy of the i-th event of `type` (false if there is none). */
static bool rec_get(recorder *r, rlock_event_type type, int i,
                    rec_event *out) {
  int pos = rec_pos(r, type, i);
  if (pos < 0)
    return false;
  pthread_mutex_lock(&r->mu); /* the entry stays as recorded; the lock
                               * orders this read after its write */
  *out = r->ev[pos];
  pthread_mutex_unlock(&r->mu);
  return true;
}

typedef struct count_wait {
  recorder *r;
  rlock_event_type type;
  int want;
} count_wait;

static bool count_reached(void *arg) {
  count_wait *w = arg;
  return rec_count(w->r, w->type) >= w->want;
}

static void wait_events(recorder *r, rlock_event_type type, int want,
                        int64_t bound_ms) {
  count_wait w = {r, type, want};
  rt_wait_until_what(count_reached, &w, bound_ms, "events");
}

static rlock_client *open_observed(recorder *r, const char *name,
                                   int64_t watchdog_ms) {
  rlock_options o;
  rlock_options_init(&o);
  o.on_event = on_event;
  o.on_event_data = r;
  o.client_name = name;
  if (watchdog_ms > 0)
    o.watchdog_timeout_ms = watchdog_ms;
  return rt_client_opts(&o);
}

/* An observed client on a fresh key "<base>:..." (written to key) with
 * its lock handle. */
static rlock_client *setup(recorder *r, const char *name, int64_t watchdog_ms,
                           const char *base, char key[96], rlock **l) {
  rec_init(r);
  rlock_client *c = open_observed(r, name, watchdog_ms);
  rt_key(key, 96, base);
  *l = rt_lock(c, key);
  return c;
}

/* Another observed client on the same key. */
static rlock_client *setup_on(recorder *r, const char *name, const char *key,
                              rlock **l) {
  rec_init(r);
  rlock_client *c = open_observed(r, name, 0);
  *l = rt_lock(c, key);
  return c;
}

static rlock_stats stats_of(rlock_client *c) {
  rlock_stats s;
  rlock_stats_init(&s);
  cr_assert_eq(rlock_client_stats(c, &s), 0, "%s", rlock_last_error());
  return s;
}

static uint64_t bucket_sum(const rlock_histogram *h) {
  uint64_t n = 0;
  for (int i = 0; i < RLOCK_STATS_BUCKETS; i++)
    n += h->buckets[i];
  return n;
}

/* ---- acquisitions ---- */

Test(observe, n_acquisitions_give_n_events_and_counts) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-n", 0, "obs:n", key, &l);
  enum { N = 25 };
  for (int i = 0; i < N; i++) {
    cr_assert_eq(rlock_lock(l, -1), 0, "%s", rlock_last_error());
    cr_assert_eq(rlock_unlock(l), 0, "%s", rlock_last_error());
  }
  /* The events of the last unlock may trail its return by a loop turn. */
  wait_events(&r, RLOCK_EVENT_RELEASED, N, 2000);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_ACQUIRED), N);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_RELEASED), N);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_GAVE_UP), 0);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_ACQUIRED, N - 1, &e));
  char owner[96];
  rt_owner(owner, sizeof(owner), c, rlock_thread_id());
  cr_assert_str_eq(e.kind, "lock");
  cr_assert_str_eq(e.name, key);
  cr_assert_str_eq(e.owner, owner);
  cr_assert_str_eq(e.client_id, rlock_client_id(c));
  cr_assert_eq(e.attempts, 1);
  cr_assert_geq(e.wait_ms, 0);
  cr_assert(rec_get(&r, RLOCK_EVENT_RELEASED, 0, &e));
  cr_assert_eq(e.hold_count, 0);

  rlock_stats s = stats_of(c);
  cr_assert_eq(s.acquisitions, N);
  cr_assert_eq(s.acquisitions_contended, 0);
  cr_assert_eq(s.releases, N);
  cr_assert_eq(s.wait.count, N);
  cr_assert_eq(s.hold.count, N);
  cr_assert_eq(bucket_sum(&s.wait), s.wait.count);
  cr_assert_eq(bucket_sum(&s.hold), s.hold.count);
  /* at least one script per lock and per unlock */
  cr_assert_geq(s.commands_sent, 2 * N);
  cr_assert_eq(s.reconnects, 0);
  cr_assert_eq(s.locks_lost, 0);
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, reentrant_release_says_what_is_left) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-re", 0, "obs:re", key, &l);
  cr_assert_eq(rlock_lock(l, -1), 0);
  cr_assert_eq(rlock_lock(l, -1), 0);
  rt_sleep_ms(30);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rlock_unlock(l), 0);
  wait_events(&r, RLOCK_EVENT_RELEASED, 2, 2000);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_RELEASED, 0, &e));
  cr_assert_eq(e.hold_count, 1);
  cr_assert(rec_get(&r, RLOCK_EVENT_RELEASED, 1, &e));
  cr_assert_eq(e.hold_count, 0);
  cr_assert_geq(e.hold_ms, 30, "hold_ms %" PRId64 " counts from the outer "
                               "acquire", e.hold_ms);
  rlock_stats s = stats_of(c);
  cr_assert_eq(s.acquisitions, 2);
  cr_assert_eq(s.releases, 2);
  cr_assert_eq(s.hold.count, 1, "one hold freed the lock");
  cr_assert_geq(s.hold.sum_ms, 30);
  rlock_free(l);
  rlock_client_free(c);
}

typedef struct waiter_arg {
  rlock *lock;
  int rc;
} waiter_arg;

static void lock_thread(void *arg) {
  waiter_arg *a = arg;
  a->rc = rlock_lock(a->lock, -1);
  if (a->rc == 0)
    a->rc = rlock_unlock(a->lock) == 0 ? 0 : -100;
}

/* holder takes the lock; a thread then waits for it on w's handle (and
 * unlocks once it has it); 300 ms later it has tried, subscribed and
 * sleeps. */
static void hold_and_wait(rlock *holder, waiter_arg *w, rt_thread *t) {
  cr_assert_eq(rlock_lock(holder, -1), 0);
  rt_thread_start(t, lock_thread, w);
  rt_sleep_ms(300);
}

Test(observe, a_waiting_acquire_counts_as_contended) {
  recorder ra, rb;
  char key[96];
  rlock *la, *lb;
  rlock_client *a = setup(&ra, "obs-ca", 0, "obs:contended", key, &la);
  rlock_client *b = setup_on(&rb, "obs-cb", key, &lb);
  waiter_arg w = {lb, 1};
  rt_thread t;
  hold_and_wait(la, &w, &t); /* b tried, subscribed and sleeps */
  cr_assert_eq(rlock_unlock(la), 0);
  rt_thread_join(&t, 5000);
  cr_assert_eq(w.rc, 0, "%s", rlock_err_name(w.rc));
  wait_events(&rb, RLOCK_EVENT_RELEASED, 1, 2000);
  rec_event e;
  cr_assert(rec_get(&rb, RLOCK_EVENT_ACQUIRED, 0, &e));
  cr_assert_geq(e.attempts, 2);
  cr_assert_geq(e.wait_ms, 250, "waited %" PRId64 " ms", e.wait_ms);
  rlock_stats sb = stats_of(b), sa = stats_of(a);
  cr_assert_eq(sb.acquisitions, 1);
  cr_assert_eq(sb.acquisitions_contended, 1);
  cr_assert_geq(sb.wait.sum_ms, 250);
  cr_assert_eq(sa.acquisitions, 1);
  cr_assert_eq(sa.acquisitions_contended, 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

Test(observe, gave_up_by_timeout_and_by_cancel) {
  recorder r;
  rec_init(&r);
  rlock_client *holder = rt_client();
  rlock_client *c = open_observed(&r, "obs-gu", 0);
  char key[96];
  rt_key(key, sizeof(key), "obs:gaveup");
  rlock *lh = rt_lock(holder, key), *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(lh, -1), 0);
  cr_assert_eq(rlock_try_lock(l, 0, -1), 0);
  cr_assert_eq(rlock_try_lock(l, 100, -1), 0);
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(l, rlock_owner_new(), -1, -1, NULL, NULL, &req),
               0, "%s", rlock_last_error());
  rt_sleep_ms(100);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rlock_req_free(req);
  wait_events(&r, RLOCK_EVENT_GAVE_UP, 3, 2000);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_GAVE_UP, 0, &e));
  cr_assert_eq(e.cause, RLOCK_EVENT_TIMEOUT);
  cr_assert_eq(e.attempts, 1);
  cr_assert(rec_get(&r, RLOCK_EVENT_GAVE_UP, 1, &e));
  cr_assert_eq(e.cause, RLOCK_EVENT_TIMEOUT);
  /* From the call, as the deadline: never below the wait given. */
  cr_assert_geq(e.wait_ms, 100);
  cr_assert(rec_get(&r, RLOCK_EVENT_GAVE_UP, 2, &e));
  cr_assert_eq(e.cause, RLOCK_EVENT_CANCELED);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_ACQUIRED), 0);
  rlock_stats s = stats_of(c);
  cr_assert_eq(s.acquisitions, 0);
  cr_assert_eq(s.gave_up_timeout, 2);
  cr_assert_eq(s.gave_up_canceled, 1);
  cr_assert_eq(s.failures[-RLOCK_ECANCELED], 1);
  rlock_free(l);
  rlock_free(lh);
  rlock_client_free(c);
  rlock_client_free(holder);
}

Test(observe, failures_are_counted_by_code) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-fail", 0, "obs:fail", key, &l);
  cr_assert_eq(rlock_unlock(l), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_unlock(l), RLOCK_ENOTOWNER);
  rlock_stats s = stats_of(c);
  cr_assert_eq(s.failures[-RLOCK_ENOTOWNER], 2);
  uint64_t all = 0;
  for (int i = 0; i < RLOCK_STATS_ERRORS; i++)
    all += s.failures[i];
  cr_assert_eq(all, 2);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_RELEASED), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- renewals and loss ---- */

/* The watchdog renews every watchdog_timeout_ms / 3 (docs/api.md): with a
 * 2400 ms timeout, one renewal every 800 ms. The times at which
 * renewals_sent grows are read every 5 ms for 5 s; the median gap
 * between two renewals must be nearer 800 ms than 1200 ms (a period of
 * lease/2) or 600 ms (lease/4). A median, so that a few late timers on a
 * loaded machine do not decide it. */
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

Test(observe, watchdog_renews_every_third_of_its_timeout) {
  recorder r;
  char key[96];
  rlock *l;
  const int64_t wd = 2400, period = wd / 3;
  rlock_client *c = setup(&r, "obs-period", wd, "obs:period", key, &l);
  cr_assert_eq(rlock_lock(l, -1), 0);
  int64_t at[32];
  int n = 0;
  uint64_t seen = stats_of(c).renewals_sent;
  int64_t t0 = rt_now_ms();
  while (rt_now_ms() - t0 < 5000 && n < 32) {
    uint64_t now_sent = stats_of(c).renewals_sent;
    if (now_sent != seen) {
      cr_assert_eq(now_sent, seen + 1, "two renewals within 5 ms");
      at[n++] = rt_now_ms();
      seen = now_sent;
    }
    rt_sleep_ms(5);
  }
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_geq(n, 4, "%d renewals in 5 s with a %lld ms period", n,
                (long long)period);
  int64_t gap[31];
  char list[400] = "";
  for (int i = 1; i < n; i++) {
    gap[i - 1] = at[i] - at[i - 1];
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, " %lld", (long long)gap[i - 1]);
  }
  qsort(gap, (size_t)(n - 1), sizeof gap[0], cmp_i64);
  int64_t median = gap[(n - 1) / 2];
  cr_assert_gt(median, period * 7 / 8,
               "median gap %lld ms between renewals (gaps:%s), want %lld",
               (long long)median, list, (long long)period);
  cr_assert_lt(median, period * 5 / 4,
               "median gap %lld ms between renewals (gaps:%s), want %lld",
               (long long)median, list, (long long)period);
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, renewals_are_counted_with_rtt_and_headroom) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-renew", 300, "obs:renew", key, &l);
  cr_assert_eq(rlock_lock(l, -1), 0);
  rt_sleep_ms(1000); /* about ten periods of 100 ms */
  cr_assert_eq(rlock_unlock(l), 0);
  rt_sleep_ms(200); /* a renewal in flight at the unlock has answered */
  rlock_stats s = stats_of(c);
  cr_assert_geq(s.renewals_sent, 3, "%" PRIu64, s.renewals_sent);
  cr_assert_eq(s.renewals_confirmed, s.renewals_sent);
  cr_assert_eq(s.renewals_failed, 0);
  cr_assert_eq(s.renewal_rtt_count, s.renewals_sent, "one hold per batch");
  cr_assert_geq(s.renewal_rtt_max_us, 1);
  cr_assert_leq(s.renewal_rtt_sum_us, s.renewal_rtt_count * 300000);
  cr_assert_leq(s.lease_headroom_min_ms, 300);
  cr_assert_geq(s.lease_headroom_min_ms, 0, "%" PRId64,
                s.lease_headroom_min_ms);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_RENEWAL_FAILED), 0);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_LEASE_AT_RISK), 0);
  cr_assert_eq(s.lease_at_risk, 0);
  cr_assert_eq(s.locks_lost, 0);
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, a_paused_server_fails_renewals) {
  recorder r;
  rec_init(&r);
  rlock_options o;
  rlock_options_init(&o);
  o.on_event = on_event;
  o.on_event_data = &r;
  o.client_name = "obs-rfail";
  o.watchdog_timeout_ms = 3000;
  o.command_timeout_ms = 100;
  o.retry_attempts = 0;
  rlock_client *c = rt_client_opts(&o);
  char key[96];
  rt_key(key, sizeof(key), "obs:rfail");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  /* Writes wait (the renewal is a script that writes) for 1.5 s: the
   * renewal at 1 s gets no answer within command_timeout_ms. */
  rt_ok("OK", "CLIENT PAUSE 1500 WRITE");
  wait_events(&r, RLOCK_EVENT_RENEWAL_FAILED, 1, 4000);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_RENEWAL_FAILED, 0, &e));
  cr_assert_eq(e.error, RLOCK_ETIMEDOUT, "%s", rlock_err_name(e.error));
  cr_assert_str_eq(e.name, key);
  cr_assert_str_eq(e.kind, "lock");
  rlock_stats s = stats_of(c);
  cr_assert_geq(s.renewals_failed, 1);
  cr_assert_geq(s.renewals_sent, s.renewals_failed + s.renewals_confirmed);
  cr_assert_eq(s.failures[-RLOCK_ETIMEDOUT], 0, "a renewal is no call");
  rt_sleep_ms(1600);
  cr_assert_eq(rlock_unlock(l), 0, "%s", rlock_last_error());
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, a_forced_loss_is_one_lost_event_and_one_count) {
  recorder r;
  rec_init(&r);
  rlock_client *c = open_observed(&r, "obs-lost", 300);
  rlock_client *other = rt_client();
  char key[96];
  rt_key(key, sizeof(key), "obs:lost");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  cr_assert_eq(rlock_client_force_unlock(other, key, NULL, NULL), 1, "%s",
               rlock_last_error());
  wait_events(&r, RLOCK_EVENT_LOST, 1, 3000);
  rt_sleep_ms(500); /* five more periods: nothing more is said */
  cr_assert_eq(rlock_unlock(l), RLOCK_ELOCKLOST);
  rt_sleep_ms(50);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_LOST), 1);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_LOST, 0, &e));
  cr_assert_eq(e.cause, RLOCK_EVENT_BY_WATCHDOG);
  cr_assert_str_eq(e.name, key);
  rlock_stats s = stats_of(c);
  cr_assert_eq(s.locks_lost, 1);
  cr_assert_eq(s.releases, 0);
  cr_assert_eq(s.failures[-RLOCK_ELOCKLOST], 1);
  rlock_free(l);
  rlock_client_free(c);
  rlock_client_free(other);
}

Test(observe, a_loss_found_by_the_unlock_is_one_lost_event) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-lost2", 0, "obs:lost2", key, &l);
  cr_assert_eq(rlock_lock(l, 60000), 0); /* a lease: no watchdog */
  cr_assert_eq(rt_int("DEL %s", key), 1);
  cr_assert_eq(rlock_unlock(l), RLOCK_ELOCKLOST);
  wait_events(&r, RLOCK_EVENT_LOST, 1, 2000);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_LOST, 0, &e));
  cr_assert_eq(e.cause, RLOCK_EVENT_BY_UNLOCK);
  cr_assert_eq(stats_of(c).locks_lost, 1);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- connections ---- */

typedef struct reconn_wait {
  rlock_client *c;
  uint64_t want;
} reconn_wait;

static bool reconnects_reached(void *arg) {
  reconn_wait *w = arg;
  rlock_stats s;
  rlock_stats_init(&s);
  return rlock_client_stats(w->c, &s) == 0 && s.reconnects >= w->want;
}

Test(observe, a_killed_connection_is_one_reconnect) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-kill", 0, "obs:kill", key, &l);
  cr_assert_eq(rlock_lock(l, -1), 0);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(fk_kill_cmd_conn("obs-kill"), 1);
  reconn_wait w = {c, 1};
  rt_wait_until_what(reconnects_reached, &w, 5000, "reconnect");
  /* a lock call works on the new connection */
  cr_assert_eq(rlock_lock(l, -1), 0, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(l), 0);
  rt_sleep_ms(300);
  rlock_stats s = stats_of(c);
  cr_assert_eq(s.reconnects, 1);
  cr_assert_eq(s.resubscribes, 0);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_RECONNECTED), 1);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_RECONNECTED, 0, &e));
  cr_assert_eq(e.cause, 0, "the command connection");
  cr_assert_eq(e.error, RLOCK_ECONN, "%s", rlock_err_name(e.error));
  cr_assert_neq(e.detail[0], '\0');
  cr_assert(e.has_host);
  cr_assert_eq(e.port, rt_port());
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, a_killed_connection_is_one_disconnect_before_its_reconnect) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-disc", 0, "obs:disc", key, &l);
  cr_assert_eq(rlock_lock(l, -1), 0);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_DISCONNECTED), 0, "none at open");
  /* the command connection */
  cr_assert_eq(fk_kill_cmd_conn("obs-disc"), 1);
  reconn_wait w = {c, 1};
  rt_wait_until_what(reconnects_reached, &w, 5000, "reconnect");
  rt_sleep_ms(200);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_DISCONNECTED), 1);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_RECONNECTED), 1);
  cr_assert_lt(rec_pos(&r, RLOCK_EVENT_DISCONNECTED, 0),
               rec_pos(&r, RLOCK_EVENT_RECONNECTED, 0), "lost before back");
  rec_event d, u;
  cr_assert(rec_get(&r, RLOCK_EVENT_DISCONNECTED, 0, &d));
  cr_assert(rec_get(&r, RLOCK_EVENT_RECONNECTED, 0, &u));
  cr_assert_eq(d.cause, 0, "the command connection");
  cr_assert_eq(d.error, RLOCK_ECONN, "%s", rlock_err_name(d.error));
  cr_assert_neq(d.detail[0], '\0');
  cr_assert_str_eq(d.detail, u.detail, "the same cause, told twice");
  cr_assert(d.has_host);
  cr_assert_eq(d.port, rt_port());
  cr_assert_str_eq(d.kind, "", "no kind for a connection event");
  cr_assert_neq(d.client_id[0], '\0');
  /* the subscriber connection, while a waiter of c is subscribed (the
   * test finds it by its subscription) */
  recorder rh;
  rlock *lh;
  rlock_client *h = setup_on(&rh, "obs-disc-h", key, &lh);
  waiter_arg wa = {l, 1};
  rt_thread t;
  hold_and_wait(lh, &wa, &t);
  cr_assert_eq(fk_kill_sub_conn("obs-disc"), 1);
  w.want = 2;
  rt_wait_until_what(reconnects_reached, &w, 5000, "second reconnect");
  rt_sleep_ms(200);
  cr_assert_eq(rlock_unlock(lh), 0);
  rt_thread_join(&t, 10000);
  cr_assert_eq(wa.rc, 0, "the waiter got the lock after the resubscribe");
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_DISCONNECTED), 2);
  cr_assert(rec_get(&r, RLOCK_EVENT_DISCONNECTED, 1, &d));
  cr_assert_eq(d.cause, 1, "the subscriber connection");
  cr_assert_eq(d.port, rt_port());
  cr_assert_lt(rec_pos(&r, RLOCK_EVENT_DISCONNECTED, 1),
               rec_pos(&r, RLOCK_EVENT_RECONNECTED, 1));
  cr_assert_eq(rec_count(&rh, RLOCK_EVENT_DISCONNECTED), 0, "h lost none");
  /* closing is not a disconnect */
  rlock_free(l);
  rlock_free(lh);
  rlock_client_free(c);
  rlock_client_free(h);
  cr_assert_eq(rec_count(&rh, RLOCK_EVENT_DISCONNECTED), 0, "close told");
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_DISCONNECTED), 2, "close told");
  cr_assert_eq(r.dropped, 0);
}

Test(observe, a_killed_subscriber_resubscribes_a_waiter) {
  recorder ra, rb;
  char key[96];
  rlock *la, *lb;
  rlock_client *a = setup(&ra, "obs-sa", 0, "obs:sub", key, &la);
  rlock_client *b = setup_on(&rb, "obs-sb", key, &lb);
  waiter_arg w = {lb, 1};
  rt_thread t;
  hold_and_wait(la, &w, &t); /* b waits on the channel */
  cr_assert_eq(fk_kill_sub_conn("obs-sb"), 1);
  reconn_wait rw = {b, 1};
  rt_wait_until_what(reconnects_reached, &rw, 5000, "reconnect");
  rt_sleep_ms(200);
  cr_assert_eq(rlock_unlock(la), 0);
  rt_thread_join(&t, 10000);
  cr_assert_eq(w.rc, 0);
  rlock_stats s = stats_of(b);
  cr_assert_eq(s.reconnects, 1);
  cr_assert_eq(s.resubscribes, 1);
  rec_event e;
  cr_assert(rec_get(&rb, RLOCK_EVENT_RECONNECTED, 0, &e));
  cr_assert_eq(e.cause, 1, "the subscriber connection");
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- bad input ---- */

Test(observe, a_handler_that_blocks_gets_edeadlk) {
  recorder r;
  rec_init(&r);
  rlock_client *c = open_observed(&r, "obs-dl", 0);
  char key[96], other[96];
  rt_key(key, sizeof(key), "obs:dl");
  rt_key(other, sizeof(other), "obs:dl2");
  rlock *l = rt_lock(c, key);
  r.block_on = rt_lock(c, other);
  cr_assert_eq(rlock_lock(l, -1), 0);
  cr_assert_eq(rlock_unlock(l), 0);
  wait_events(&r, RLOCK_EVENT_RELEASED, 1, 2000);
  cr_assert_eq(r.block_rc, RLOCK_EDEADLK, "%s", rlock_err_name(r.block_rc));
  rlock_free(r.block_on);
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, a_smaller_struct_is_filled_only_as_far_as_it_reaches) {
  rlock_client *c = rt_client();
  char key[96];
  rt_key(key, sizeof(key), "obs:small");
  rlock *l = rt_lock(c, key);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(rlock_lock(l, -1), 0);
    cr_assert_eq(rlock_unlock(l), 0);
  }
  /* An "older" struct that ends after acquisitions_contended. */
  size_t cut = offsetof(rlock_stats, acquisitions_contended) +
               sizeof(uint64_t);
  unsigned char raw[sizeof(rlock_stats) + 16];
  memset(raw, 0xAB, sizeof(raw));
  rlock_stats *s = (rlock_stats *)(void *)raw;
  s->struct_size = cut;
  cr_assert_eq(rlock_client_stats(c, s), 0, "%s", rlock_last_error());
  cr_assert_eq(s->struct_size, cut);
  cr_assert_eq(s->acquisitions, 3);
  cr_assert_eq(s->acquisitions_contended, 0);
  for (size_t i = cut; i < sizeof(raw); i++)
    cr_assert_eq(raw[i], 0xAB, "byte %zu beyond struct_size was written", i);
  /* The formatters leave out what the struct does not have. */
  char buf[4096];
  int n = rlock_stats_format_prometheus(s, buf, sizeof(buf), "old");
  cr_assert_gt(n, 0);
  cr_assert_not_null(strstr(buf, "rlock_acquisitions_total{client=\"old\"} 3"));
  cr_assert_null(strstr(buf, "rlock_releases_total"));
  n = rlock_stats_format_json(s, buf, sizeof(buf), "old");
  cr_assert_gt(n, 0);
  cr_assert_null(strstr(buf, "releases"));

  rlock_stats bad;
  rlock_stats_init(&bad);
  bad.struct_size = 0;
  cr_assert_eq(rlock_client_stats(c, &bad), RLOCK_EINVAL);
  cr_assert_neq(rlock_last_error()[0], '\0');
  bad.struct_size = sizeof(rlock_stats) + 8;
  cr_assert_eq(rlock_client_stats(c, &bad), RLOCK_EINVAL);
  cr_assert_eq(rlock_client_stats(NULL, &bad), RLOCK_EINVAL);
  cr_assert_eq(rlock_client_stats(c, NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_stats_format_json(NULL, buf, sizeof(buf), NULL),
               RLOCK_EINVAL);
  rlock_stats ok;
  rlock_stats_init(&ok);
  cr_assert_eq(rlock_stats_format_prometheus(&ok, NULL, 10, NULL),
               RLOCK_EINVAL);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- the formatters ---- */

/* A metric name: [a-zA-Z_:][a-zA-Z0-9_:]*; returns its end. */
static const char *metric_name(const char *p) {
  if (!(isalpha((unsigned char)*p) || *p == '_' || *p == ':'))
    return NULL;
  while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
    p++;
  return p;
}

#define MAX_FAMILIES 64

typedef struct family {
  char name[96];
  char type[16];
  bool help;
} family;

typedef struct prom_check {
  family fam[MAX_FAMILIES];
  int nfam;
  /* the histogram being read */
  char hist[96];
  char hist_labels[256]; /* labels without le */
  double last_le;
  uint64_t last_cum;
  uint64_t inf;
  bool seen_inf;
  int samples;
} prom_check;

static family *fam_find(prom_check *pc, const char *name, size_t len) {
  for (int i = 0; i < pc->nfam; i++)
    if (strlen(pc->fam[i].name) == len &&
        strncmp(pc->fam[i].name, name, len) == 0)
      return &pc->fam[i];
  return NULL;
}

static family *fam_add(prom_check *pc, const char *name, size_t len) {
  family *f = fam_find(pc, name, len);
  if (f != NULL)
    return f;
  cr_assert_lt(pc->nfam, MAX_FAMILIES);
  f = &pc->fam[pc->nfam++];
  memset(f, 0, sizeof(*f));
  cr_assert_lt(len, sizeof(f->name));
  memcpy(f->name, name, len);
  return f;
}

static bool ends_with(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len >= n && strncmp(s + len - n, suffix, n) == 0;
}

/* Parses one sample line: name{labels} value; checks the grammar, that its
 * family has HELP and TYPE, counters' _total, and the histogram rules. */
static void prom_sample_line(prom_check *pc, const char *line) {
  const char *end = metric_name(line);
  cr_assert_not_null(end, "bad metric name: %s", line);
  size_t nlen = (size_t)(end - line);
  char labels[256] = "", le[32] = "";
  const char *p = end;
  if (*p == '{') {
    p++;
    size_t lp = 0;
    while (*p != '}') {
      const char *ln = metric_name(p);
      cr_assert_not_null(ln, "bad label name: %s", line);
      cr_assert_eq(*ln, '=', "no '=' after label: %s", line);
      cr_assert_eq(ln[1], '"', "label value not quoted: %s", line);
      bool is_le = (size_t)(ln - p) == 2 && strncmp(p, "le", 2) == 0;
      const char *v = ln + 2, *q = v;
      while (*q != '"') {
        cr_assert_neq(*q, '\0', "unterminated label value: %s", line);
        cr_assert_neq(*q, '\n');
        if (*q == '\\') {
          cr_assert(q[1] == '\\' || q[1] == '"' || q[1] == 'n',
                    "bad escape: %s", line);
          q++;
        }
        q++;
      }
      if (is_le) {
        snprintf(le, sizeof(le), "%.*s", (int)(q - v), v);
      } else {
        lp += (size_t)snprintf(labels + lp, sizeof(labels) - lp, "%.*s;",
                               (int)(q - p + 1), p);
      }
      p = q + 1;
      if (*p == ',')
        p++;
      else
        cr_assert_eq(*p, '}', "bad label separator: %s", line);
    }
    p++;
  }
  cr_assert_eq(*p, ' ', "no space before the value: %s", line);
  p++;
  char *vend;
  double value = strtod(p, &vend);
  cr_assert(vend != p && *vend == '\0', "bad value: %s", line);
  pc->samples++;

  /* its family: the name itself, or a histogram's/summary's base */
  family *f = fam_find(pc, line, nlen);
  const char *suffixes[] = {"_bucket", "_sum", "_count"};
  size_t base_len = nlen;
  const char *suffix = NULL;
  if (f == NULL)
    for (size_t i = 0; i < 3 && f == NULL; i++)
      if (ends_with(line, nlen, suffixes[i])) {
        base_len = nlen - strlen(suffixes[i]);
        f = fam_find(pc, line, base_len);
        suffix = suffixes[i];
      }
  cr_assert_not_null(f, "sample without # TYPE: %s", line);
  cr_assert(f->help, "sample without # HELP: %s", line);
  if (strcmp(f->type, "counter") == 0)
    cr_assert(ends_with(line, nlen, "_total"), "counter not _total: %s",
              line);
  if (strcmp(f->type, "histogram") != 0) {
    cr_assert_eq(le[0], '\0', "le outside a histogram: %s", line);
    return;
  }
  cr_assert_not_null(suffix, "histogram sample without suffix: %s", line);
  if (strcmp(suffix, "_bucket") == 0) {
    cr_assert_neq(le[0], '\0', "bucket without le: %s", line);
    if (strcmp(pc->hist, f->name) != 0 ||
        strcmp(pc->hist_labels, labels) != 0) {
      snprintf(pc->hist, sizeof(pc->hist), "%s", f->name);
      snprintf(pc->hist_labels, sizeof(pc->hist_labels), "%s", labels);
      pc->last_le = -1;
      pc->last_cum = 0;
      pc->seen_inf = false;
    }
    cr_assert(!pc->seen_inf, "bucket after +Inf: %s", line);
    double lev;
    if (strcmp(le, "+Inf") == 0) {
      pc->seen_inf = true;
      pc->inf = (uint64_t)value;
      lev = 1e300;
    } else {
      char *e2;
      lev = strtod(le, &e2);
      cr_assert_eq(*e2, '\0', "bad le: %s", line);
    }
    cr_assert_gt(lev, pc->last_le, "le not increasing: %s", line);
    cr_assert_geq((uint64_t)value, pc->last_cum, "buckets not cumulative: %s",
                  line);
    pc->last_le = lev;
    pc->last_cum = (uint64_t)value;
  } else if (strcmp(suffix, "_count") == 0) {
    cr_assert(pc->seen_inf && strcmp(pc->hist, f->name) == 0,
              "_count before the +Inf bucket: %s", line);
    cr_assert_eq((uint64_t)value, pc->inf, "+Inf != _count: %s", line);
  }
}

/* Checks a whole exposition text; returns how many samples it has. */
static int prom_validate(const char *text) {
  prom_check *pc = calloc(1, sizeof(*pc));
  cr_assert_not_null(pc);
  const char *p = text;
  cr_assert_neq(*p, '\0');
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    cr_assert_not_null(nl, "the text does not end in a newline");
    char line[512];
    cr_assert_lt((size_t)(nl - p), sizeof(line));
    memcpy(line, p, (size_t)(nl - p));
    line[nl - p] = '\0';
    p = nl + 1;
    if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
      const char *name = line + 7, *end = metric_name(name);
      cr_assert_not_null(end, "bad name: %s", line);
      cr_assert_eq(*end, ' ', "%s", line);
      family *f = fam_add(pc, name, (size_t)(end - name));
      if (line[2] == 'H') {
        cr_assert(!f->help, "second HELP: %s", line);
        f->help = true;
      } else {
        cr_assert_eq(f->type[0], '\0', "second TYPE: %s", line);
        const char *t = end + 1;
        cr_assert(strcmp(t, "counter") == 0 || strcmp(t, "gauge") == 0 ||
                      strcmp(t, "histogram") == 0 ||
                      strcmp(t, "summary") == 0 || strcmp(t, "untyped") == 0,
                  "bad type: %s", line);
        snprintf(f->type, sizeof(f->type), "%s", t);
      }
      continue;
    }
    cr_assert_neq(line[0], '#', "unknown comment: %s", line);
    cr_assert_neq(line[0], '\0', "empty line");
    prom_sample_line(pc, line);
  }
  for (int i = 0; i < pc->nfam; i++)
    cr_assert(pc->fam[i].help && pc->fam[i].type[0] != '\0',
              "%s lacks HELP or TYPE", pc->fam[i].name);
  int n = pc->samples;
  free(pc);
  return n;
}

/* python3's json.loads accepts the text (written to a file, read by a
 * python3 -c through popen) and its acquisitions equals want. */
static void json_check(const char *text, uint64_t want) {
  char path[] = "/tmp/rlock-obs-json-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  char cmd[256];
  snprintf(cmd, sizeof(cmd),
           "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
           "assert sum(b[\"count\"] for b in d[\"wait\"][\"buckets\"]) == "
           "d[\"wait\"][\"count\"]; print(d[\"acquisitions\"])' %s 2>&1",
           path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char out[512] = "";
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  unlink(path);
  cr_assert_eq(st, 0, "python3 refused the JSON: %s\n%s", out, text);
  cr_assert_eq(strtoull(out, NULL, 10), want, "%s", out);
}

Test(observe, prometheus_and_json_are_valid) {
  recorder r;
  char key[96];
  rlock *l;
  rlock_client *c = setup(&r, "obs-fmt", 300, "obs:fmt", key, &l);
  for (int i = 0; i < 7; i++) {
    cr_assert_eq(rlock_lock(l, -1), 0);
    rt_sleep_ms(i * 20);
    cr_assert_eq(rlock_unlock(l), 0);
  }
  cr_assert_eq(rlock_unlock(l), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_lock(l, -1), 0);
  rt_sleep_ms(350); /* a few renewals */
  cr_assert_eq(rlock_unlock(l), 0);
  rt_sleep_ms(100);
  rlock_stats s = stats_of(c);
  cr_assert_eq(s.acquisitions, 8);
  cr_assert_eq(s.hold.count, 8);
  cr_assert_eq(bucket_sum(&s.hold), 8);

  /* the length first, as with snprintf */
  const char *label = "obs \"fmt\"\\x";
  int need = rlock_stats_format_prometheus(&s, NULL, 0, label);
  cr_assert_gt(need, 0);
  char *buf = malloc((size_t)need + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(rlock_stats_format_prometheus(&s, buf, (size_t)need + 1,
                                             label),
               need);
  cr_assert_eq(strlen(buf), (size_t)need);
  int samples = prom_validate(buf);
  cr_assert_gt(samples, 2 * RLOCK_STATS_BUCKETS);
  cr_assert_not_null(strstr(buf, "rlock_acquisitions_total{client=\"obs "
                                 "\\\"fmt\\\"\\\\x\"} 8\n"),
                     "%s", buf);
  cr_assert_not_null(strstr(buf, "rlock_hold_seconds_count{client=\"obs "
                                 "\\\"fmt\\\"\\\\x\"} 8\n"));
  cr_assert_not_null(strstr(buf, "code=\"RLOCK_ENOTOWNER\"} 1\n"));
  /* a short buffer: truncated, NUL-terminated, same answer */
  char small[64];
  cr_assert_eq(rlock_stats_format_prometheus(&s, small, sizeof(small), label),
               need);
  cr_assert_eq(strlen(small), sizeof(small) - 1);
  cr_assert_eq(strncmp(small, buf, sizeof(small) - 1), 0);
  free(buf);
  /* without a client label */
  need = rlock_stats_format_prometheus(&s, NULL, 0, NULL);
  buf = malloc((size_t)need + 1);
  rlock_stats_format_prometheus(&s, buf, (size_t)need + 1, NULL);
  prom_validate(buf);
  cr_assert_not_null(strstr(buf, "rlock_acquisitions_total 8\n"));
  free(buf);

  need = rlock_stats_format_json(&s, NULL, 0, label);
  cr_assert_gt(need, 0);
  buf = malloc((size_t)need + 1);
  cr_assert_eq(rlock_stats_format_json(&s, buf, (size_t)need + 1, label),
               need);
  json_check(buf, 8);
  free(buf);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- lease at risk ---- */

typedef struct renewed_wait {
  rlock_client *c;
  uint64_t after;
} renewed_wait;

static bool renewed_since(void *arg) {
  renewed_wait *w = arg;
  rlock_stats s;
  rlock_stats_init(&s);
  return rlock_client_stats(w->c, &s) == 0 &&
         s.renewals_confirmed > w->after;
}

Test(observe, a_paused_server_puts_the_lease_at_risk_once) {
  recorder r;
  rec_init(&r);
  rlock_options o;
  rlock_options_init(&o);
  o.on_event = on_event;
  o.on_event_data = &r;
  o.client_name = "obs-risk";
  /* periods of 1 s; at risk below a third of the lease (1 s) left */
  o.watchdog_timeout_ms = 3000;
  rlock_client *c = rt_client_opts(&o);
  char key[96];
  rt_key(key, sizeof(key), "obs:risk");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  /* Right after a renewal was confirmed (at a period's start T), writes
   * wait 2.5 s: the renewal at T + 1 s is confirmed only at about
   * T + 2.5 s, so the check at T + 2 s finds about 1 s - margin left - at
   * risk - and the key (expiring at T + 3 s) is renewed in time. */
  renewed_wait w = {c, stats_of(c).renewals_confirmed};
  rt_wait_until_what(renewed_since, &w, 3000, "a renewal");
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_LEASE_AT_RISK), 0);
  rt_ok("OK", "CLIENT PAUSE 2500 WRITE");
  wait_events(&r, RLOCK_EVENT_LEASE_AT_RISK, 1, 4000);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_LEASE_AT_RISK, 0, &e));
  cr_assert_str_eq(e.name, key);
  cr_assert_str_eq(e.kind, "lock");
  cr_assert_lt(e.remaining_ms, 1000, "%" PRId64, e.remaining_ms);
  cr_assert_gt(e.remaining_ms, 0, "%" PRId64, e.remaining_ms);
  cr_assert_eq(e.lease_ms, 3000);
  /* After the pause the renewal is confirmed: the guarantee recovers and
   * nothing more is said while it stays up. */
  rt_sleep_ms(2500);
  int64_t until = 0;
  cr_assert_eq(rlock_is_lease_guaranteed(l, &until), 1, "%s",
               rlock_last_error());
  cr_assert_gt(until - rlock_now_ms(), 1000);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_LEASE_AT_RISK), 1);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_LOST), 0);
  cr_assert_eq(stats_of(c).lease_at_risk, 1);
  cr_assert_eq(rlock_unlock(l), 0, "%s", rlock_last_error());
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, an_explicit_lease_is_at_risk_once_near_its_end) {
  recorder r;
  rec_init(&r);
  /* periods of 100 ms; a 900 ms lease is at risk below 300 ms left */
  rlock_client *c = open_observed(&r, "obs-risk2", 300);
  char key[96];
  rt_key(key, sizeof(key), "obs:risk2");
  rlock *l = rt_lock(c, key);
  int64_t t0 = rlock_now_ms();
  cr_assert_eq(rlock_lock(l, 900), 0);
  wait_events(&r, RLOCK_EVENT_LEASE_AT_RISK, 1, 3000);
  int64_t seen = rlock_now_ms() - t0;
  cr_assert_geq(seen, 550, "said after %" PRId64 " ms", seen);
  rec_event e;
  cr_assert(rec_get(&r, RLOCK_EVENT_LEASE_AT_RISK, 0, &e));
  cr_assert_lt(e.remaining_ms, 300);
  cr_assert_gt(e.remaining_ms, 0, "said within a period of crossing");
  cr_assert_eq(e.lease_ms, 900);
  rt_sleep_ms(800); /* the lease ran out: still said once */
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_LEASE_AT_RISK), 1);
  rlock_free(l);
  rlock_client_free(c);
}

Test(observe, lease_risk_off_says_nothing) {
  recorder r;
  rec_init(&r);
  rlock_options o;
  rlock_options_init(&o);
  cr_assert_eq(o.lease_risk_ms, 0);
  o.on_event = on_event;
  o.on_event_data = &r;
  o.watchdog_timeout_ms = 300;
  o.lease_risk_ms = -1;
  rlock_client *c = rt_client_opts(&o);
  char key[96];
  rt_key(key, sizeof(key), "obs:risk3");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, 400), 0);
  rt_sleep_ms(600);
  cr_assert_eq(rec_count(&r, RLOCK_EVENT_LEASE_AT_RISK), 0);
  cr_assert_eq(stats_of(c).lease_at_risk, 0);
  o.lease_risk_ms = -2;
  rlock_client *bad = NULL;
  o.uri = rt_uri();
  cr_assert_eq(rlock_client_new(&bad, &o), RLOCK_EINVAL);
  cr_assert_null(bad);
  rlock_free(l);
  rlock_client_free(c);
}
