/* The local gate (lib/engine/gate.c): an acquire of a lock that another
 * owner of the same client holds, or that a try of the client is on its
 * way for, waits locally without sending a try; it goes back to the server
 * at once when what it trusted is gone (the sibling's hold lost, a
 * connection lost), and no later than the sibling's lease guarantee.
 * Counts are the server's (INFO commandstats of this test's own server) or
 * the client's events: they do not depend on the machine's load. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#include "faultkit.h"
#include "harness.h"

TestSuite(gate, .init = fk_init, .fini = fk_fini, .timeout = 60);

/* Scheduling slack on a loaded 2-core box. */
#define SLACK_MS 2500

typedef struct waiter {
  atomic_int status; /* -100 until the callback */
  atomic_llong at_ms;
} waiter;

static void waiter_init(waiter *w) {
  atomic_store(&w->status, -100);
  atomic_store(&w->at_ms, 0);
}

static void waiter_cb(int status, int64_t value, void *data) {
  (void)value;
  waiter *w = data;
  atomic_store(&w->at_ms, rt_now_ms());
  atomic_store(&w->status, status);
}

static bool waiter_done(void *arg) {
  return atomic_load(&((waiter *)arg)->status) != -100;
}

/* The last ACQUIRED event's attempts, per owner string. */
typedef struct seen {
  char owner[128];
  atomic_int attempts;
  atomic_llong lost_at_ms;
} seen;

static void on_event(const rlock_event *ev, void *data) {
  seen *s = data;
  if (ev->type == RLOCK_EVENT_ACQUIRED && strcmp(ev->owner, s->owner) == 0)
    atomic_store(&s->attempts, ev->attempts);
  if (ev->type == RLOCK_EVENT_LOST)
    atomic_store(&s->lost_at_ms, rt_now_ms());
}

/* A client named `name` (watchdog_ms > 0: its watchdog timeout), a lock
 * (the write lock when `write`), and two owners; events of owner 2 seen. */
typedef struct fixture {
  seen s;
  rlock_options o;
  rlock_client *c;
  char key[96];
  rlock *l;
  uint64_t o1, o2;
} fixture;

/* tweak (may be NULL) changes the options before the client opens. */
static void fx_open_with(fixture *f, const char *name, int64_t watchdog_ms,
                         bool write, void (*tweak)(rlock_options *)) {
  memset(f, 0, sizeof(*f));
  fk_options(&f->o, name);
  if (watchdog_ms > 0)
    f->o.watchdog_timeout_ms = watchdog_ms;
  if (tweak != NULL)
    tweak(&f->o);
  f->o.on_event = on_event;
  f->o.on_event_data = &f->s;
  int rc = rlock_client_new(&f->c, &f->o);
  cr_assert_eq(rc, 0, "open: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  rt_key(f->key, sizeof f->key, name);
  if (write)
    cr_assert_eq(rlock_new_write(f->c, f->key, &f->l), 0);
  else
    f->l = rt_lock(f->c, f->key);
  f->o1 = rlock_owner_new();
  f->o2 = rlock_owner_new();
  rt_owner(f->s.owner, sizeof f->s.owner, f->c, f->o2);
}

static void fx_open(fixture *f, const char *name, int64_t watchdog_ms,
                    bool write) {
  fx_open_with(f, name, watchdog_ms, write, NULL);
}

static void fx_close(fixture *f) {
  rlock_free(f->l);
  rlock_client_free(f->c);
}

/* INFO commandstats calls of `cmd` (script-internal calls included). */
static long long calls_of(const char *cmd) {
  redisReply *r = rt_cmd("INFO commandstats");
  cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
  char needle[64];
  snprintf(needle, sizeof needle, "cmdstat_%s:calls=", cmd);
  const char *p = strstr(r->str, needle);
  long long calls = p != NULL ? atoll(p + strlen(needle)) : 0;
  freeReplyObject(r);
  return calls;
}

static long long evalshas(void) {
  return calls_of("evalsha") + calls_of("eval");
}

static bool lost_seen(void *arg) {
  return atomic_load(&((seen *)arg)->lost_at_ms) != 0;
}

/* One handoff from owner 1 to owner 2 and back to nobody, so that every
 * script of the lock is cached on the server. */
static void warm_up(fixture *f) {
  cr_assert_eq(rlock_lock_owner(f->l, f->o1, -1), 0);
  waiter w;
  waiter_init(&w);
  cr_assert_eq(rlock_lock_async(f->l, f->o2, -1, -1, waiter_cb, &w, NULL), 0);
  rt_sleep_ms(100);
  cr_assert_eq(rlock_unlock_owner(f->l, f->o1), 0);
  rt_wait_until_what(waiter_done, &w, 5000, "the warm-up handoff");
  cr_assert_eq(atomic_load(&w.status), 1);
  cr_assert_eq(rlock_unlock_owner(f->l, f->o2), 0);
  cr_assert_eq(rt_exists(f->key), 0);
}

/* A transfer test's start: the client open (tweak: its options), the
 * scripts cached, owner 1's field name in o1s. */
static void xfer_open(fixture *f, const char *name,
                      void (*tweak)(rlock_options *), char o1s[128]) {
  fx_open_with(f, name, 0, false, tweak);
  warm_up(f);
  rt_owner(o1s, 128, f->c, f->o1);
}

/* Owner 1 holds; owner 2 of the same client asks for the lock: it sends no
 * try while owner 1 holds, and gets the lock with one try when owner 1's
 * unlock hands it over. Its wait still counts as contended. */
Test(gate, a_sibling_waits_without_a_try) {
  fixture f;
  fx_open(&f, "gate-sib", 0, false);
  /* The scripts loaded first (one handoff): a first EVALSHA of a script
   * meets NOSCRIPT and is sent again. */
  warm_up(&f);
  rlock_stats st0;
  rlock_stats_init(&st0);
  cr_assert_eq(rlock_client_stats(f.c, &st0), 0);
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
  long long before = evalshas();
  waiter w;
  waiter_init(&w);
  cr_assert_eq(rlock_lock_async(f.l, f.o2, -1, -1, waiter_cb, &w, NULL), 0);
  rt_sleep_ms(300);
  cr_assert(!waiter_done(&w), "owner 2 got a lock owner 1 holds");
  cr_assert_eq(evalshas() - before, 0,
               "owner 2 sent a try while its sibling held the lock");
  cr_assert_eq(rlock_unlock_owner(f.l, f.o1), 0);
  rt_wait_until(waiter_done, &w, 5000);
  cr_assert_eq(atomic_load(&w.status), 1);
  cr_assert_eq(atomic_load(&f.s.attempts), 1, "attempts %d",
               atomic_load(&f.s.attempts));
  /* the unlock and owner 2's one try: one transfer (scripts loaded) */
  cr_assert_eq(evalshas() - before, 1);
  rlock_stats st;
  rlock_stats_init(&st);
  cr_assert_eq(rlock_client_stats(f.c, &st), 0);
  cr_assert_eq(st.acquisitions - st0.acquisitions, 2);
  cr_assert_eq(st.acquisitions_contended - st0.acquisitions_contended, 1);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o2), 0);
  fx_close(&f);
}

#define WRITERS 6

/* A write unlock publishes "1", which wakes every waiter: of this client's
 * writers only one tries; the others wait until it has its answer. Seven
 * writers of one client taking the write lock in turn: each acquisition
 * costs one try and one unlock, where every unlock used to wake all the
 * writers left (6 + 5 + ... + 1 = 21 tries). */
Test(gate, a_write_unlock_lets_one_writer_try) {
  fixture f;
  fx_open(&f, "gate-w", 0, true);
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
  long long before = evalshas();
  uint64_t owner[WRITERS];
  static waiter w[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    owner[i] = rlock_owner_new();
    waiter_init(&w[i]);
    cr_assert_eq(
        rlock_lock_async(f.l, owner[i], -1, -1, waiter_cb, &w[i], NULL), 0);
  }
  rt_sleep_ms(200);
  uint64_t current = f.o1;
  for (int round = 0; round < WRITERS; round++) {
    cr_assert_eq(rlock_unlock_owner(f.l, current), 0);
    int64_t until = rt_now_ms() + 10000;
    int next = -1;
    while (next < 0 && rt_now_ms() < until) {
      for (int i = 0; i < WRITERS; i++)
        if (owner[i] != 0 && waiter_done(&w[i]))
          next = i;
      if (next < 0)
        rt_sleep_ms(2);
    }
    cr_assert_geq(next, 0, "round %d: no writer got the lock", round);
    cr_assert_eq(atomic_load(&w[next].status), 1);
    int held = 0;
    for (int i = 0; i < WRITERS; i++)
      held += owner[i] != 0 && waiter_done(&w[i]);
    cr_assert_eq(held, 1, "two writers hold the write lock");
    current = owner[next];
    owner[next] = 0;
  }
  cr_assert_eq(rlock_unlock_owner(f.l, current), 0);
  long long sent = evalshas() - before;
  /* 7 unlocks + 6 tries (+ the scripts' first EVALs); a little room for a
   * try a slow machine's timer re-check sends, far below the 7 + 21 of
   * waking every writer. */
  cr_assert_leq(sent, 7 + WRITERS + 3, "%lld scripts for %d acquisitions",
                sent, WRITERS);
  fx_close(&f);
}

/* Owner 1 takes the lock; owner 2 asks for it (async) and is left waiting
 * behind it for settle_ms. */
static void o2_behind_o1(fixture *f, waiter *w, int64_t settle_ms) {
  cr_assert_eq(rlock_lock_owner(f->l, f->o1, -1), 0);
  waiter_init(w);
  cr_assert_eq(rlock_lock_async(f->l, f->o2, -1, -1, waiter_cb, w, NULL), 0);
  rt_sleep_ms(settle_ms);
  cr_assert(!waiter_done(w), "owner 2 got a lock owner 1 holds");
}

/* The sibling's hold is lost (its key deleted; the watchdog's renewal
 * finds it gone): the parked waiter tries at once, not when the sibling's
 * lease guarantee would have run out (or, without the gate, at the end of
 * the TTL its failed try was told: 9 s here). */
Test(gate, a_lost_sibling_hold_sends_the_waiter_back_at_once) {
  fixture f;
  fx_open(&f, "gate-lost", 9000, false); /* renewal every 3 s */
  waiter w;
  o2_behind_o1(&f, &w, 200);
  cr_assert_eq(rt_int("DEL %s", f.key), 1); /* publishes nothing */
  rt_wait_until_what(lost_seen, &f.s, 3000 + SLACK_MS, "the loss");
  rt_wait_until_what(waiter_done, &w, 30000, "owner 2's acquire");
  int64_t after = atomic_load(&w.at_ms) - atomic_load(&f.s.lost_at_ms);
  cr_assert_eq(atomic_load(&w.status), 1);
  cr_assert_leq(after, SLACK_MS,
                "owner 2 got the lock %" PRId64 " ms after the loss", after);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o2), 0);
  fx_close(&f);
}

/* The connection is lost while a waiter is parked behind a sibling (and
 * the key went away meanwhile, as on a restarted server without
 * persistence): the parked waiter asks the server again at once - for a
 * lost command connection as for a lost subscriber connection. */
static void connection_lost(bool command) {
  fixture f;
  fx_open(&f, command ? "gate-cmd" : "gate-sub", 0, false);
  waiter w;
  o2_behind_o1(&f, &w, 300);
  cr_assert_eq(rt_int("DEL %s", f.key), 1);
  int64_t t0 = rt_now_ms();
  int killed = command ? fk_kill_cmd_conn(f.o.client_name)
                       : fk_kill_sub_conn(f.o.client_name);
  cr_assert_eq(killed, 1);
  /* Not the sibling's lease (30 s) nor the watchdog's period (10 s). */
  rt_wait_until_what(waiter_done, &w, 4000 + SLACK_MS, "owner 2's acquire");
  cr_assert_eq(atomic_load(&w.status), 1, "%d", atomic_load(&w.status));
  int64_t took = atomic_load(&w.at_ms) - t0;
  cr_assert_leq(took, 4000 + SLACK_MS, "%" PRId64 " ms", took);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o2), 0);
  fx_close(&f);
}

Test(gate, a_lost_command_connection_sends_the_waiter_back) {
  connection_lost(true);
}

Test(gate, a_lost_subscriber_connection_sends_the_waiter_back) {
  connection_lost(false);
}

/* A sibling that holds with a lease and never comes back (as one stopped
 * with its process): the parked waiter trusts the hold only until its
 * guarantee runs out, and gets the lock once the key expired - as a
 * waiter of another client would. */
Test(gate, a_sibling_lease_bounds_the_local_wait) {
  fixture f;
  fx_open(&f, "gate-lease", 0, false);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, 1500), 0);
  waiter w;
  waiter_init(&w);
  cr_assert_eq(rlock_lock_async(f.l, f.o2, 20000, -1, waiter_cb, &w, NULL),
               0);
  rt_wait_until_what(waiter_done, &w, 1500 + SLACK_MS + 1000,
                     "owner 2's acquire");
  cr_assert_eq(atomic_load(&w.status), 1);
  int64_t took = atomic_load(&w.at_ms) - t0;
  cr_assert_geq(took, 1400, "owner 2 got a lock still leased: %" PRId64,
                took);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o2), 0);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o1), RLOCK_ELOCKLOST);
  fx_close(&f);
}

/* ---- the local transfer (issue 39): one command per local handoff ---- */

/* Owner 1's unlock with owner 2 waiting moves the hold in ONE script: no
 * release message, the hash goes from owner 1's field to owner 2's (count
 * 1) with owner 2's lease, and both calls complete from its reply. Before
 * the transfer it was two scripts (the release, with its PUBLISH, and
 * owner 2's acquire). */
Test(gate, a_local_handoff_is_one_command) {
  fixture f;
  char o1s[128];
  xfer_open(&f, "gate-xfer", NULL, o1s);
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
  waiter w;
  waiter_init(&w);
  cr_assert_eq(rlock_lock_async(f.l, f.o2, -1, 4000, waiter_cb, &w, NULL), 0);
  rt_sleep_ms(200);
  cr_assert(!waiter_done(&w), "owner 2 got a lock owner 1 holds");
  long long scripts = evalshas(), pubs = calls_of("publish");
  rlock_stats st0;
  rlock_stats_init(&st0);
  cr_assert_eq(rlock_client_stats(f.c, &st0), 0);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o1), 0);
  rt_wait_until_what(waiter_done, &w, 5000, "owner 2's acquire");
  cr_assert_eq(atomic_load(&w.status), 1);
  cr_assert_eq(evalshas() - scripts, 1,
               "%lld scripts for one local handoff", evalshas() - scripts);
  cr_assert_eq(calls_of("publish") - pubs, 0,
               "a local handoff published a release message");
  char *v2 = rt_hget(f.key, f.s.owner), *v1 = rt_hget(f.key, o1s);
  cr_assert(v2 != NULL && strcmp(v2, "1") == 0, "owner 2's count: %s",
            v2 ? v2 : "(nil)");
  cr_assert_null(v1, "owner 1's field left: %s", v1);
  free(v1);
  free(v2);
  cr_assert_eq(rt_hlen(f.key), 1);
  long long pttl = rt_pttl(f.key);
  cr_assert(pttl > 0 && pttl <= 4000, "PTTL %lld: not owner 2's 4 s lease",
            pttl);
  cr_assert_eq(atomic_load(&f.s.attempts), 1);
  cr_assert_eq(rlock_hold_count_owner(f.l, f.o2), 1);
  int64_t until = 0;
  cr_assert_eq(rlock_is_lease_guaranteed_owner(f.l, f.o2, &until), 1);
  rlock_stats st;
  rlock_stats_init(&st);
  cr_assert_eq(rlock_client_stats(f.c, &st), 0);
  cr_assert_eq(st.acquisitions - st0.acquisitions, 1);
  cr_assert_eq(st.releases - st0.releases, 1);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o2), 0);
  cr_assert_eq(rt_exists(f.key), 0);
  fx_close(&f);
}

#define XTHREADS 16
#define XROUNDS 150

typedef struct herd {
  rlock *l;
  atomic_int inside, overlaps, errors;
  long counter; /* changed only under the lock */
} herd;

static void herd_worker(void *arg) {
  herd *h = arg;
  uint64_t me = rlock_owner_new();
  for (int i = 0; i < XROUNDS; i++) {
    if (rlock_lock_owner(h->l, me, -1) != 0) {
      atomic_fetch_add(&h->errors, 1);
      continue;
    }
    if (atomic_fetch_add(&h->inside, 1) != 0)
      atomic_fetch_add(&h->overlaps, 1);
    long c = h->counter;
    if (i % 8 == 0)
      rt_sleep_ms(0);
    h->counter = c + 1;
    atomic_fetch_sub(&h->inside, 1);
    if (rlock_unlock_owner(h->l, me) != 0)
      atomic_fetch_add(&h->errors, 1);
  }
}

/* XTHREADS threads of one client take l XROUNDS times each; no two are
 * ever inside, no update is lost, no call fails. */
static void run_herd(rlock *l) {
  static herd h;
  memset(&h, 0, sizeof h);
  h.l = l;
  rt_thread t[XTHREADS];
  for (int i = 0; i < XTHREADS; i++)
    rt_thread_start(&t[i], herd_worker, &h);
  for (int i = 0; i < XTHREADS; i++)
    rt_thread_join(&t[i], 50000);
  cr_assert_eq(atomic_load(&h.errors), 0);
  cr_assert_eq(atomic_load(&h.overlaps), 0, "two threads held the lock");
  cr_assert_eq(h.counter, (long)XTHREADS * XROUNDS);
}

/* 16 threads of one client on one lock: the locks they hand over by
 * transfer exclude each other as any hold does (no two inside, no lost
 * update), and the transfers did happen (HSET runs only in the transfer
 * and the trim). */
Test(gate, transfers_exclude_across_sixteen_threads) {
  fixture f;
  fx_open(&f, "gate-xherd", 0, false);
  warm_up(&f);
  long long hsets = calls_of("hset");
  run_herd(f.l);
  cr_assert_gt(calls_of("hset") - hsets, 0, "no transfer happened");
  cr_assert_eq(rt_exists(f.key), 0, "the lock is left held");
  fx_close(&f);
}

static void handoff_max_2(rlock_options *o) { o->handoff_max = 2; }

/* A transfer asks the server whether another client waits, so its streak
 * is not cut at handoff_max (two-command handoffs are): with handoff_max 2
 * the herd of 16 still moves the lock by transfer many times per release
 * that goes the pub/sub way (before: two transfers, then one such
 * release, so hsets were about twice the publishes). */
Test(gate, a_streak_of_transfers_runs_past_handoff_max) {
  fixture f;
  char o1s[128];
  xfer_open(&f, "gate-xstreak", handoff_max_2, o1s);
  long long hsets = calls_of("hset"), pubs = calls_of("publish");
  run_herd(f.l);
  long long moved = calls_of("hset") - hsets;
  long long published = calls_of("publish") - pubs;
  cr_log_info("%lld transfers, %lld releases that published", moved, published);
  cr_assert_geq(moved, 8 * published,
                "%lld transfers, %lld releases that published: the streak "
                "of transfers was cut short",
                moved, published);
  cr_assert_eq(rt_exists(f.key), 0, "the lock is left held");
  fx_close(&f);
}

static void short_timeouts(rlock_options *o) {
  o->command_timeout_ms = 100;
  o->retry_interval_ms = 400;
  o->retry_attempts = 3;
}

static void no_resend(rlock_options *o) {
  o->command_timeout_ms = 100;
  o->retry_interval_ms = 100;
  o->retry_attempts = 0;
}

/* After a transfer whose reply may have been lost: owner 2 holds the lock
 * on the server and in the client (one field, count 1), owner 1 nothing;
 * one unlock of owner 2 frees it. */
static void assert_moved_to_o2(fixture *f, const char *o1s) {
  char *v1 = rt_hget(f->key, o1s), *v2 = rt_hget(f->key, f->s.owner);
  cr_assert_null(v1, "owner 1's field left: %s", v1);
  cr_assert(v2 != NULL && strcmp(v2, "1") == 0,
            "owner 2 got the lock but its count on the server is %s",
            v2 ? v2 : "(nil)");
  free(v1);
  free(v2);
  cr_assert_eq(rt_hlen(f->key), 1);
  cr_assert_eq(rlock_hold_count_owner(f->l, f->o2), 1);
  cr_assert_eq(rlock_unlock_owner(f->l, f->o2), 0, "%s", rlock_last_error());
  cr_assert_eq(rt_exists(f->key), 0);
}

/* The transfer's first reply misses its deadline (writes paused 150 ms,
 * command timeout 100 ms) but the transfer runs when the pause ends; the
 * re-send 400 ms later finds owner 1 gone and owner 2 holding once (a move
 * sets no latch) and answers what the first did: the lock is moved once,
 * to owner 2, and both calls say so. */
Test(gate, a_transfer_whose_reply_is_late_moves_the_lock_once) {
  fixture f;
  char o1s[128];
  xfer_open(&f, "gate-xlate", short_timeouts, o1s);
  for (int round = 0; round < 3; round++) {
    cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
    waiter w;
    waiter_init(&w);
    cr_assert_eq(rlock_lock_async(f.l, f.o2, -1, -1, waiter_cb, &w, NULL), 0);
    rt_sleep_ms(200);
    rt_ok("OK", "CLIENT PAUSE 150 WRITE");
    int rc = rlock_unlock_owner(f.l, f.o1);
    cr_assert_eq(rc, 0, "round %d: unlock %s (%s)", round, rlock_err_name(rc),
                 rlock_last_error());
    rt_wait_until_what(waiter_done, &w, 5000, "owner 2's acquire");
    cr_assert_eq(atomic_load(&w.status), 1, "round %d: %d", round,
                 atomic_load(&w.status));
    assert_moved_to_o2(&f, o1s);
  }
  fx_close(&f);
}

/* No re-send (retry_attempts 0): the transfer's reply is lost for good
 * (writes paused past the command timeout) and it runs after all when the
 * pause ends. Owner 1's unlock reports the transport error; owner 2 is
 * not left believing what the server does not say: its field is trimmed
 * back and it takes the lock afresh - in the end it holds the lock on
 * both sides, once, and owner 1 holds nothing. */
Test(gate, a_transfer_whose_reply_is_lost_leaves_a_consistent_state) {
  fixture f;
  char o1s[128];
  xfer_open(&f, "gate-xlost", no_resend, o1s);
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
  waiter w;
  waiter_init(&w);
  /* A deadline: without one, an acquire rides out an outage only as long
   * as an unlock re-sends (here: one command timeout), and the pause is
   * longer. */
  cr_assert_eq(rlock_lock_async(f.l, f.o2, 5000, -1, waiter_cb, &w, NULL), 0);
  rt_sleep_ms(200);
  rt_ok("OK", "CLIENT PAUSE 400 WRITE");
  int rc = rlock_unlock_owner(f.l, f.o1);
  cr_assert(rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONN,
            "unlock whose reply was lost: %d %s", rc, rlock_err_name(rc));
  rt_wait_until_what(waiter_done, &w, 5000 + SLACK_MS, "owner 2's acquire");
  cr_assert_eq(atomic_load(&w.status), 1, "%d", atomic_load(&w.status));
  rt_sleep_ms(300); /* any repair in flight has landed */
  cr_assert_eq(rlock_hold_count_owner(f.l, f.o1), 0);
  assert_moved_to_o2(&f, o1s);
  fx_close(&f);
}

static bool key_gone(void *key) { return rt_exists(key) == 0; }

/* Owner 2's acquire is cancelled while the transfer to it is on its way
 * (writes paused): the transfer runs when the pause ends and gives the
 * lock to an acquire that no longer exists - that hold is released (owner
 * 2 trimmed), not left to its 30 s lease; owner 1's unlock succeeds. */
Test(gate, a_waiter_cancelled_during_a_transfer_leaves_nothing_held) {
  fixture f;
  fx_open(&f, "gate-xcancel", 0, false);
  warm_up(&f);
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
  waiter w, u;
  waiter_init(&w);
  waiter_init(&u);
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(f.l, f.o2, -1, -1, waiter_cb, &w, &req), 0);
  rt_sleep_ms(200);
  rt_ok("OK", "CLIENT PAUSE 600 WRITE");
  cr_assert_eq(rlock_unlock_async(f.l, f.o1, waiter_cb, &u, NULL), 0);
  rt_sleep_ms(100); /* the transfer is on its way */
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until_what(waiter_done, &w, 2000, "the cancelled acquire");
  cr_assert_eq(atomic_load(&w.status), RLOCK_ECANCELED, "%d",
               atomic_load(&w.status));
  rlock_req_free(req);
  rt_wait_until_what(waiter_done, &u, 5000, "owner 1's unlock");
  cr_assert_eq(atomic_load(&u.status), 0, "%d", atomic_load(&u.status));
  rt_wait_until_what(key_gone, f.key, 3000, "the lock's release");
  cr_assert_eq(rlock_hold_count_owner(f.l, f.o2), 0);
  /* and the lock is free for anyone */
  cr_assert_eq(rlock_try_lock_owner(f.l, f.o1, 0, -1), 1);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o1), 0);
  fx_close(&f);
}

/* Another client waits for the lock too (a second subscriber on the
 * channel): owner 1's unlock does not move the lock to its sibling; the
 * transfer script releases and publishes as a release does, so the other
 * client's waiter is woken and may take it (this client holds its own
 * tries back a moment: docs/performance.md, "Fair share"). Both waiters
 * get the lock, one after the other. */
Test(gate, another_clients_waiter_turns_the_transfer_into_a_release) {
  fixture f;
  fx_open(&f, "gate-xforeign", 0, false);
  warm_up(&f);
  rlock_options o2;
  fk_options(&o2, "gate-xforeign-2");
  rlock_client *c2 = NULL;
  cr_assert_eq(rlock_client_new(&c2, &o2), 0, "%s", rlock_last_error());
  rlock *l2 = rt_lock(c2, f.key);
  uint64_t other = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
  waiter w, x;
  waiter_init(&w);
  waiter_init(&x);
  cr_assert_eq(rlock_lock_async(l2, other, 10000, -1, waiter_cb, &x, NULL), 0);
  cr_assert_eq(rlock_lock_async(f.l, f.o2, 10000, -1, waiter_cb, &w, NULL), 0);
  rt_sleep_ms(300);
  char ch[160];
  rt_lock_channel(ch, sizeof ch, f.key);
  cr_assert_eq(rt_numsub(ch), 2);
  long long pubs = calls_of("publish"), hsets = calls_of("hset");
  cr_assert_eq(rlock_unlock_owner(f.l, f.o1), 0);
  rt_sleep_ms(300);
  cr_assert_eq(calls_of("publish") - pubs, 1,
               "the unlock did not publish: the lock was moved locally "
               "while another client waited");
  cr_assert_eq(calls_of("hset") - hsets, 0, "the lock was transferred");
  bool mine = waiter_done(&w), theirs = waiter_done(&x);
  cr_assert(mine != theirs, "owner 2 %d, the other client %d: exactly one "
            "holds the lock", mine, theirs);
  cr_log_info("after the unlock: the %s got the lock",
              theirs ? "other client's waiter" : "sibling");
  if (theirs) {
    cr_assert_eq(atomic_load(&x.status), 1);
    cr_assert_eq(rlock_unlock_owner(l2, other), 0);
    rt_wait_until_what(waiter_done, &w, 5000, "owner 2's acquire");
    cr_assert_eq(atomic_load(&w.status), 1);
    cr_assert_eq(rlock_unlock_owner(f.l, f.o2), 0);
  } else {
    cr_assert_eq(atomic_load(&w.status), 1);
    cr_assert_eq(rlock_unlock_owner(f.l, f.o2), 0);
    rt_wait_until_what(waiter_done, &x, 5000, "the other client's acquire");
    cr_assert_eq(atomic_load(&x.status), 1);
    cr_assert_eq(rlock_unlock_owner(l2, other), 0);
  }
  cr_assert_eq(rt_exists(f.key), 0);
  rlock_free(l2);
  rlock_client_free(c2);
  fx_close(&f);
}
