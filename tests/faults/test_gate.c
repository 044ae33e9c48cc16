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

static void fx_open(fixture *f, const char *name, int64_t watchdog_ms,
                    bool write) {
  memset(f, 0, sizeof(*f));
  fk_options(&f->o, name);
  if (watchdog_ms > 0)
    f->o.watchdog_timeout_ms = watchdog_ms;
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

static void fx_close(fixture *f) {
  rlock_free(f->l);
  rlock_client_free(f->c);
}

static long long evalshas(void) {
  redisReply *r = rt_cmd("INFO commandstats");
  cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
  long long calls = 0;
  const char *p = strstr(r->str, "cmdstat_evalsha:calls=");
  if (p != NULL)
    calls = atoll(p + strlen("cmdstat_evalsha:calls="));
  p = strstr(r->str, "cmdstat_eval:calls=");
  if (p != NULL)
    calls += atoll(p + strlen("cmdstat_eval:calls="));
  freeReplyObject(r);
  return calls;
}

static bool lost_seen(void *arg) {
  return atomic_load(&((seen *)arg)->lost_at_ms) != 0;
}

/* Owner 1 holds; owner 2 of the same client asks for the lock: it sends no
 * try while owner 1 holds, and gets the lock with one try when owner 1's
 * unlock hands it over. Its wait still counts as contended. */
Test(gate, a_sibling_waits_without_a_try) {
  fixture f;
  fx_open(&f, "gate-sib", 0, false);
  /* The scripts loaded first: a release answered NOSCRIPT is re-sent
   * after the handed-off try, which then misses. */
  cr_assert_eq(rlock_lock_owner(f.l, f.o1, -1), 0);
  cr_assert_eq(rlock_unlock_owner(f.l, f.o1), 0);
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
  /* the unlock and owner 2's one try */
  cr_assert_eq(evalshas() - before, 2);
  rlock_stats st;
  rlock_stats_init(&st);
  cr_assert_eq(rlock_client_stats(f.c, &st), 0);
  cr_assert_eq(st.acquisitions, 3);
  cr_assert_eq(st.acquisitions_contended, 1);
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
