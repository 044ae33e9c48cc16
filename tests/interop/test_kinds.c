/*
 * Interop proof for the rest of Redisson's lock family (issue 14): rlock's
 * fair, read/write, fenced and spin locks against javapeer, which speaks
 * each kind as a Java Redisson 4.7 client does on the wire (javapeer.c:
 * the f*, rd*, wr*, fx* and sp* commands; no rlock code).
 *
 * node-redisson@1.0.4 (the other peer of the suite) only has getLock(): its
 * client offers no fair, read/write, fenced or spin lock, so every test here
 * runs against the Java-like peer only.
 *
 * As in test_interop.c, every lock whose release is timed has a >= 30 s TTL
 * (or is renewed), so a waiter that gets it within WAKE_BOUND_MS was woken
 * by the release message (or, for the spin lock, by its polling), never by
 * the TTL. Every wait is bounded; times are judged without the time the
 * machine stood still (interop_stalled_ms).
 *
 * Tests (suite `kinds`):
 *   fenced_wakes_both_ways_tokens_increase   wake-ups both ways, tokens
 *                                            strictly increase across sides
 *   fenced_monitor                           rlock's INCR, keys, PUBLISH 0
 *   spin_excludes_and_polls_both_ways        polling wake-ups, no pub/sub
 *   spin_counter_mixed                       exact non-atomic counter
 *   spin_monitor_no_pubsub                   no PUBLISH/SUBSCRIBE at all
 *   fair_wakes_both_ways                     per-waiter channels both ways
 *   fair_fifo_mixed                          4 waiters, rlock and peer
 *                                            interleaved, served in order
 *   fair_peer_gives_up_rlock_behind_gets_it  acquireFailed + rlock behind
 *   fair_rlock_gives_up_peer_behind_gets_it  rlock's abandon + peer behind
 *   fair_monitor                             keys, ARGV orders, channels
 *   rw_readers_share                         rlock and peer readers share
 *   rw_writer_waits_for_readers_both_ways    writer waits for the other
 *                                            side's readers, in both ways
 *   rw_write_unlock_wakes_readers_both_sides "1" wakes every reader (two
 *                                            rlock threads + the peer)
 *   rw_peer_read_unlock_keeps_rlock_hold     timeout keys honoured (and
 *                                            renewed by rlock's watchdog)
 *   rw_peer_watchdog_reader_keeps_rlock_writer_out  the peer's read renewal
 *   rw_monitor                               keys, timeout keys, 0 / 1
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "interop.h"

TestSuite(kinds, .init = interop_init, .fini = interop_fini, .timeout = 240);

#define LONG_LEASE_MS 30000
#define KEY_MAX_LEN (NAME_MAX_LEN + OWNER_MAX_LEN + 64)

/* ---- helpers ---- */

static int64_t net_ms(int64_t from, int64_t to) {
  return (to - from) - interop_stalled_ms(from, to);
}

static rlock *kind_get(rlock_client *c, const char *kind, const char *name) {
  rlock *lock = NULL;
  int rc;
  if (strcmp(kind, "fair") == 0)
    rc = rlock_new_fair(c, name, &lock);
  else if (strcmp(kind, "read") == 0)
    rc = rlock_new_read(c, name, &lock);
  else if (strcmp(kind, "write") == 0)
    rc = rlock_new_write(c, name, &lock);
  else if (strcmp(kind, "fenced") == 0)
    rc = rlock_new_fenced(c, name, &lock);
  else if (strcmp(kind, "nonreentrant") == 0)
    rc = rlock_new_nonreentrant(c, name, &lock);
  else if (strcmp(kind, "nonreentrant_fair") == 0)
    rc = rlock_new_nonreentrant_fair(c, name, &lock);
  else
    rc = rlock_new_spin(c, name, &lock);
  cr_assert_eq(rc, 0, "rlock_get_%s(%s): %s (%s)", kind, name,
               rlock_err_name(rc), rlock_last_error());
  cr_assert_str_eq(rlock_kind(lock), kind);
  return lock;
}

/* An rlock thread on any kind: try_lock (fenced: try_lock_fenced, keeping
 * the token), hold until release_now, unlock. Never asserts. */
typedef struct kworker {
  rlock_client *client;
  rlock *lock;
  int64_t wait_ms, lease_ms;
  bool fenced;
  atomic_int stage; /* 0 start, 1 calling, 2 returned, 3 unlocked */
  int rc, unlock_rc;
  int64_t token;
  int64_t t_call, t_returned;
  char owner[OWNER_MAX_LEN];
  atomic_bool release_now;
  rt_thread th;
} kworker;

static void kworker_main(void *arg) {
  kworker *w = arg;
  snprintf(w->owner, sizeof w->owner, "%s:%" PRIu64,
           rlock_client_id(w->client), rlock_thread_id());
  w->t_call = rt_now_ms();
  atomic_store(&w->stage, 1);
  if (w->fenced)
    w->rc = rlock_try_lock_fenced(w->lock, w->wait_ms, w->lease_ms, &w->token);
  else
    w->rc = rlock_try_lock(w->lock, w->wait_ms, w->lease_ms);
  w->t_returned = rt_now_ms();
  atomic_store(&w->stage, 2);
  if (w->rc != 1)
    return;
  int64_t deadline = rt_now_ms() + 4 * JOIN_BOUND_MS;
  while (!atomic_load(&w->release_now) && rt_now_ms() < deadline)
    rt_sleep_ms(1);
  w->unlock_rc = rlock_unlock(w->lock);
  atomic_store(&w->stage, 3);
}

static void kworker_start(kworker *w, rlock_client *c, rlock *lock,
                          int64_t wait_ms, int64_t lease_ms) {
  w->client = c;
  w->lock = lock;
  w->wait_ms = wait_ms;
  w->lease_ms = lease_ms;
  w->fenced = strcmp(rlock_kind(lock), "fenced") == 0;
  rt_thread_start(&w->th, kworker_main, w);
}

typedef struct stage_arg {
  kworker *w;
  int stage;
} stage_arg;

static bool stage_reached(void *arg) {
  stage_arg *s = arg;
  return atomic_load(&s->w->stage) >= s->stage;
}

static void kworker_wait(kworker *w, int stage, int64_t bound_ms) {
  stage_arg s = {w, stage};
  char what[64];
  snprintf(what, sizeof what, "rlock thread reaches stage %d", stage);
  interop_wait_until(stage_reached, &s, bound_ms, what);
}

/* Lets the worker unlock (if it holds) and joins it. */
static void kworker_finish(kworker *w) {
  atomic_store(&w->release_now, true);
  rt_thread_join(&w->th, JOIN_BOUND_MS);
}

/* The worker got the lock within WAKE_BOUND_MS of t_release. */
static void assert_woke(kworker *w, int64_t t_release, const char *what) {
  kworker_wait(w, 2, REPLY_BOUND_MS);
  cr_assert_eq(w->rc, 1, "%s: rlock_try_lock = %d (%s)", what, w->rc,
               rlock_err_name(w->rc));
  int64_t latency = net_ms(t_release, w->t_returned);
  interop_report("%s: %" PRId64 " ms", what, latency);
  cr_assert_lt(latency, WAKE_BOUND_MS,
               "%s: rlock woke %" PRId64 " ms after the release (the lease "
               "is %d ms): not by the message",
               what, latency, LONG_LEASE_MS);
}

/* The peer answers ACQUIRED within WAKE_BOUND_MS of t_release; returns the
 * rest of the line after the wait time (the fenced token, or ""). */
static const char *expect_peer_woke(peer *p, int64_t t_release,
                                    const char *what) {
  const char *rest = peer_expect(p, "ACQUIRED", REPLY_BOUND_MS);
  int64_t latency = net_ms(t_release, rt_now_ms());
  interop_report("%s: %" PRId64 " ms", what, latency);
  cr_assert_lt(latency, WAKE_BOUND_MS,
               "%s: the peer woke %" PRId64 " ms after the release (the "
               "lease is %d ms): not by the message",
               what, latency, LONG_LEASE_MS);
  const char *sp = strchr(rest, ' ');
  return sp ? sp + 1 : "";
}

/* The peer has not answered (still waiting). */
static void assert_peer_waits(peer *p, const char *what) {
  cr_assert(!peer_has_answer(p, 0), "%s: the peer answered \"%s\"", what,
            peer_has_answer(p, 0) ? peer_next_answer(p, 0) : "");
}

static void tag_of(char *buf, size_t n, const char *name) {
  interop_braced(buf, n, name);
}

typedef struct llen_arg {
  const char *key;
  long long want;
} llen_arg;

static bool llen_is(void *arg) {
  llen_arg *a = arg;
  return rt_int("LLEN %s", a->key) == a->want;
}

static void wait_llen(const char *key, long long want) {
  llen_arg a = {key, want};
  char what[KEY_MAX_LEN];
  snprintf(what, sizeof what, "LLEN %s == %lld", key, want);
  interop_wait_until(llen_is, &a, REPLY_BOUND_MS, what);
}

/* Asserts LRANGE key == expect[0..n). */
static void assert_queue(const char *key, const char *const *expect,
                         size_t n) {
  redisReply *r = rt_cmd("LRANGE %s 0 -1", key);
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  char got[1024] = "";
  for (size_t i = 0; i < r->elements; i++) {
    size_t len = strlen(got);
    snprintf(got + len, sizeof got - len, "%s%s", i ? ", " : "",
             r->element[i]->str);
  }
  bool same = r->elements == n;
  for (size_t i = 0; same && i < n; i++)
    same = strcmp(r->element[i]->str, expect[i]) == 0;
  freeReplyObject(r);
  cr_assert(same, "queue %s is [%s], expected %zu entries in order (first "
            "%s)",
            key, got, n, n ? expect[0] : "-");
}

/* ZSCORE as a number; INT64_MIN when absent. */
static int64_t zscore(const char *key, const char *member) {
  char *s = rt_str("ZSCORE %s %s", key, member);
  if (s == NULL)
    return INT64_MIN;
  int64_t v = (int64_t)strtod(s, NULL);
  free(s);
  return v;
}

/* Every recorded MONITOR line containing `needle`, counted. */
static size_t monitor_count_of(const monitor *m, const char *needle) {
  size_t n = 0;
  for (size_t i = monitor_find(m, 0, needle); i != (size_t)-1;
       i = monitor_find(m, i + 1, needle))
    n++;
  return n;
}

static void assert_monitor_has(const monitor *m, const char *needle,
                               const char *what) {
  cr_assert_neq(monitor_find(m, 0, needle), (size_t)-1,
                "MONITOR: no %s (looked for: %s)", what, needle);
}

/* ==================================================================== */
/* ---- fenced ---- */

/* The token in the rest of an "ACQUIRED <ms> <token>" answer. */
static int64_t token_of(const char *rest) {
  long long ms = -1, token = -1;
  cr_assert_eq(sscanf(rest, "%lld %lld", &ms, &token), 2,
               "no token in the peer's answer \"%s\"", rest);
  cr_assert_gt(token, 0);
  return token;
}

Test(kinds, fenced_wakes_both_ways_tokens_increase) {
  char name[NAME_MAX_LEN], tag[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN],
      token_key[NAME_MAX_LEN + 32], me[OWNER_MAX_LEN], po[OWNER_MAX_LEN];
  rt_key(name, sizeof name, "kinds:fenced");
  tag_of(tag, sizeof tag, name);
  rt_lock_channel(channel, sizeof channel, name);
  snprintf(token_key, sizeof token_key, "redisson_lock_token:%s", tag);
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, name, po, sizeof po);
  rlock_client *c = rt_client(), *c2 = rt_client();
  rlock *lock = kind_get(c, "fenced", name);
  rlock *lock2 = kind_get(c2, "fenced", name);
  interop_my_owner(me, sizeof me, c);

  /* The peer takes the first token (lockAndGetToken, watchdog 30 s). */
  int64_t tokens[8];
  size_t n_tokens = 0;
  tokens[n_tokens++] = token_of(peer_call(p, "ACQUIRED", REPLY_BOUND_MS,
                                          "fxlocktoken %s", name));
  {
    char *v = rt_str("GET %s", token_key);
    cr_assert(v != NULL, "no token counter %s after the peer's lock",
              token_key);
    cr_assert_eq(atoll(v), tokens[0], "the peer's token is the counter");
    free(v);
    cr_assert_eq(rt_pttl(token_key), -1, "the token counter has no TTL");
  }
  interop_assert_hget(name, po, "1");
  /* rlock cannot get in; it waits on the RLock channel. */
  int64_t tok = -5;
  cr_assert_eq(rlock_try_lock_fenced(lock, 0, LONG_LEASE_MS, &tok), 0);
  cr_assert_eq(tok, -5, "the token must not be written when not acquired");
  kworker w = {0};
  kworker_start(&w, c2, lock2, 10000, LONG_LEASE_MS);
  interop_wait_numsub(channel, 1, REPLY_BOUND_MS);
  int64_t t_release = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "fxunlock %s", name);
  assert_woke(&w, t_release, "fenced: java-like releases -> rlock acquires");
  tokens[n_tokens++] = w.token;

  /* The peer waits with tryLockAndGetToken; rlock releases. */
  peer_send(p, "fxtrylocktoken %s 10000 %d", name, LONG_LEASE_MS);
  cr_assert_str_eq(peer_expect_event(p, "WAITING", REPLY_BOUND_MS), channel);
  assert_peer_waits(p, "fenced, rlock holds");
  t_release = rt_now_ms();
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  const char *ptok = expect_peer_woke(p, t_release,
                                      "fenced: rlock releases -> java-like "
                                      "acquires");
  tokens[n_tokens++] = atoll(ptok);
  cr_assert_gt(tokens[n_tokens - 1], 0, "the peer's token: \"%s\"", ptok);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "fxunlock %s", name);

  /* rlock twice (re-entry counts too), then the peer's lock() (plain
   * script), and getToken from both sides. */
  cr_assert_eq(rlock_lock_fenced(lock, LONG_LEASE_MS, &tok), 0);
  tokens[n_tokens++] = tok;
  cr_assert_eq(rlock_try_lock_fenced(lock, 0, LONG_LEASE_MS, &tok), 1);
  tokens[n_tokens++] = tok;
  interop_assert_hget(name, me, "2");
  cr_assert_eq(rlock_unlock(lock), 0);
  cr_assert_eq(rlock_unlock(lock), 0);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "fxlock %s %d", name,
            LONG_LEASE_MS);
  tokens[n_tokens++] = atoll(peer_call(p, "TOKEN", REPLY_BOUND_MS,
                                       "fxtoken %s", name));
  int64_t latest = -1;
  cr_assert_eq(rlock_fenced_token(lock, &latest), 0);
  cr_assert_eq(latest, tokens[n_tokens - 1],
               "rlock_fenced_token %" PRId64 ", the peer's getToken %" PRId64,
               latest, tokens[n_tokens - 1]);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "fxunlock %s", name);

  char list[256] = "";
  for (size_t i = 0; i < n_tokens; i++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, "%s%" PRId64, i ? " " : "",
             tokens[i]);
  }
  interop_report("fenced tokens (java, rlock, java, rlock, rlock re-entry, "
                 "java): %s",
                 list);
  cr_assert_geq(tokens[0], 1);
  for (size_t i = 1; i < n_tokens; i++)
    cr_assert_gt(tokens[i], tokens[i - 1],
                 "tokens must strictly increase across rlock and the peer: "
                 "%s",
                 list);
  /* rlock floors its tokens with the server's clock (docs/fencing.md);
   * the peer's plain INCR continues right above rlock's: one more. */
  cr_assert_eq(tokens[2], tokens[1] + 1, "java after rlock: %s", list);
  cr_assert_eq(tokens[5], tokens[4] + 1, "java after rlock: %s", list);
  cr_assert_eq(rt_exists(name), 0);

  peer_stop(p);
  rlock_free(lock);
  rlock_free(lock2);
  rlock_client_free(c);
  rlock_client_free(c2);
}

/* getNonReentrantLock (docs/wire-protocol.md) both ways: each side
 * refuses its own re-acquire at once (the peer with Java's bare marker
 * error, rlock with RLOCK_EREENTRY) without subscribing, and each wakes on
 * the other's release, on RLock's channel, with count 1 throughout. */
Test(kinds, nonreentrant_both_ways) {
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], me[OWNER_MAX_LEN],
      po[OWNER_MAX_LEN];
  rt_key(name, sizeof name, "kinds:nonre");
  rt_lock_channel(channel, sizeof channel, name);
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, name, po, sizeof po);
  rlock_client *c = rt_client(), *c2 = rt_client();
  rlock *lock = kind_get(c, "nonreentrant", name);
  rlock *lock2 = kind_get(c2, "nonreentrant", name);
  interop_my_owner(me, sizeof me, c);

  /* The peer holds; its own re-acquire (with a wait) is refused at once. */
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "nrlock %s %d", name,
            LONG_LEASE_MS);
  interop_assert_hget(name, po, "1");
  int64_t t0 = rt_now_ms();
  const char *err = peer_call(p, "ERROR", REPLY_BOUND_MS,
                              "nrtrylock %s 5000 %d", name, LONG_LEASE_MS);
  cr_assert(strstr(err, "NON_REENTRANT_REACQUIRE") != NULL, "%s", err);
  cr_assert_lt(rt_now_ms() - t0, 2000, "refused at once");
  cr_assert_eq(rt_numsub(channel), 0, "no subscribe for a refusal");
  interop_assert_hget(name, po, "1");
  /* rlock waits on RLock's channel; the peer's release wakes it. */
  cr_assert_eq(rlock_try_lock(lock, 0, LONG_LEASE_MS), 0);
  kworker w = {0};
  kworker_start(&w, c2, lock2, 10000, LONG_LEASE_MS);
  interop_wait_numsub(channel, 1, REPLY_BOUND_MS);
  int64_t t_release = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "nrunlock %s", name);
  assert_woke(&w, t_release, "nonreentrant: java-like releases -> rlock "
                             "acquires");
  interop_assert_hget(name, w.owner, "1");
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  cr_assert_eq(rt_exists(name), 0);

  /* rlock holds; its own re-acquire is refused at once; the peer waits
   * and wakes on rlock's release. */
  cr_assert_eq(rlock_lock(lock, LONG_LEASE_MS), 0);
  interop_assert_hget(name, me, "1");
  t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(lock, 5000, LONG_LEASE_MS), RLOCK_EREENTRY);
  cr_assert_lt(rt_now_ms() - t0, 2000, "refused at once");
  interop_assert_hget(name, me, "1");
  peer_send(p, "nrtrylock %s 10000 %d", name, LONG_LEASE_MS);
  cr_assert_str_eq(peer_expect_event(p, "WAITING", REPLY_BOUND_MS), channel);
  assert_peer_waits(p, "nonreentrant, rlock holds");
  t_release = rt_now_ms();
  cr_assert_eq(rlock_unlock(lock), 0);
  expect_peer_woke(p, t_release, "nonreentrant: rlock releases -> java-like "
                                 "acquires");
  interop_assert_hget(name, po, "1");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "nrunlock %s", name);
  cr_assert_eq(rt_exists(name), 0);

  peer_stop(p);
  rlock_free(lock);
  rlock_free(lock2);
  rlock_client_free(c);
  rlock_client_free(c2);
}

Test(kinds, fenced_monitor) {
  char name[NAME_MAX_LEN], tag[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN],
      me[OWNER_MAX_LEN], needle[2048];
  rt_key(name, sizeof name, "kinds:fenced-mon");
  tag_of(tag, sizeof tag, name);
  rt_lock_channel(channel, sizeof channel, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock *lock = kind_get(c, "fenced", name);
  interop_my_owner(me, sizeof me, c);

  monitor *m = monitor_start();
  int64_t tok = 0;
  cr_assert_eq(rlock_lock_fenced(lock, LONG_LEASE_MS, &tok), 0);
  peer_send(p, "fxlock %s %d", name, LONG_LEASE_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  cr_assert_eq(rlock_unlock(lock), 0);
  peer_expect(p, "ACQUIRED", REPLY_BOUND_MS);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "fxunlock %s", name);
  monitor_sync(m);

  /* Acquire: KEYS [H, redisson_lock_token:{n}], ARGV [lease, owner]. */
  snprintf(needle, sizeof needle,
           "\"2\" \"%s\" \"redisson_lock_token:%s\" \"%d\" \"%s\"", name, tag,
           LONG_LEASE_MS, me);
  assert_monitor_has(m, needle, "rlock fenced acquire call");
  snprintf(needle, sizeof needle, "\"incr\" \"redisson_lock_token:%s\"", tag);
  cr_assert_geq(monitor_count_of(m, needle), 2,
                "an INCR of the token per acquisition (rlock and java-like)");
  /* Release: RLock's unlock, 0 on the RLock channel. */
  snprintf(needle, sizeof needle,
           "\"3\" \"%s\" \"%s\" \"redisson_unlock_latch:%s:", name, channel,
           tag);
  assert_monitor_has(m, needle, "rlock fenced release call");
  snprintf(needle, sizeof needle, "lua] \"publish\" \"%s\" \"0\"", channel);
  cr_assert_geq(monitor_count_of(m, needle), 2,
                "PUBLISH 0 on %s from both releases", channel);
  snprintf(needle, sizeof needle, "\"subscribe\" \"%s\"", channel);
  assert_monitor_has(m, needle, "java-like SUBSCRIBE of the RLock channel");
  interop_report("fenced MONITOR: token %" PRId64 ", %zu lines", tok,
                 monitor_count(m));
  monitor_stop(m);
  peer_stop(p);
  rlock_free(lock);
  rlock_client_free(c);
}

/* ==================================================================== */
/* ---- spin ---- */

/* The scenario of spin_excludes_and_polls_both_ways, shared with the
 * MONITOR test. */
static void spin_scenario(const char *name, peer *p, rlock_client *c,
                          rlock_client *c2) {
  char po[OWNER_MAX_LEN];
  peer_owner(p, name, po, sizeof po);
  rlock *lock = kind_get(c, "spin", name);
  rlock *lock2 = kind_get(c2, "spin", name);

  /* The peer holds: rlock polls and stays out. */
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "splock %s %d", name,
            LONG_LEASE_MS);
  cr_assert_eq(rlock_try_lock(lock, 0, LONG_LEASE_MS), 0);
  kworker w = {0};
  kworker_start(&w, c2, lock2, 10000, LONG_LEASE_MS);
  rt_sleep_ms(400); /* a deliberate hold while rlock polls */
  cr_assert_eq(atomic_load(&w.stage), 1, "rlock got a spin lock the peer "
                                         "holds");
  interop_assert_hget(name, po, "1");
  cr_assert_eq(rt_pubsub_channels(NULL, 0), 0,
               "a spin waiter must not subscribe to anything");
  int64_t t_release = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "spunlock %s", name);
  assert_woke(&w, t_release, "spin: java-like releases -> rlock polls in");
  interop_assert_hget(name, w.owner, "1");

  /* rlock holds: the peer polls and stays out. */
  peer_send(p, "sptrylock %s 10000 %d", name, LONG_LEASE_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  rt_sleep_ms(400);
  assert_peer_waits(p, "spin, rlock holds");
  cr_assert_eq(rt_pubsub_channels(NULL, 0), 0);
  t_release = rt_now_ms();
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  expect_peer_woke(p, t_release, "spin: rlock releases -> java-like polls in");
  interop_assert_hget(name, po, "1");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "spunlock %s", name);
  cr_assert_eq(rt_exists(name), 0);
  rlock_free(lock);
  rlock_free(lock2);
}

Test(kinds, spin_excludes_and_polls_both_ways) {
  char name[NAME_MAX_LEN];
  rt_key(name, sizeof name, "kinds:spin");
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client(), *c2 = rt_client();
  spin_scenario(name, p, c, c2);
  peer_stop(p);
  rlock_client_free(c);
  rlock_client_free(c2);
}

typedef struct spin_counter {
  rlock *lock;
  redisContext *redis;
  const char *key;
  int min_rounds;
  atomic_bool *peer_done;
  atomic_int done;
  char error[256];
  rt_thread th;
} spin_counter;

/* Rounds of lock; GET; SET v+1; RPUSH key:log rlock; unlock; a 2 ms pause
 * (so that the peer, polling, finds the lock free now and then): at least
 * min_rounds, and on until the peer has finished its count (bounded). */
static void spin_counter_main(void *arg) {
  spin_counter *t = arg;
  int64_t deadline = rt_now_ms() + 60000;
  for (int i = 0; (i < t->min_rounds || !atomic_load(t->peer_done)) &&
                  rt_now_ms() < deadline;
       i++) {
    int rc = rlock_lock(t->lock, -1);
    if (rc != 0) {
      snprintf(t->error, sizeof t->error, "rlock_lock: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
      return;
    }
    redisReply *r = redisCommand(t->redis, "GET %s", t->key);
    long long v = (r && r->type == REDIS_REPLY_STRING) ? atoll(r->str) : 0;
    if (r)
      freeReplyObject(r);
    r = redisCommand(t->redis, "SET %s %lld", t->key, v + 1);
    if (r)
      freeReplyObject(r);
    r = redisCommand(t->redis, "RPUSH %s:log rlock", t->key);
    if (r)
      freeReplyObject(r);
    rc = rlock_unlock(t->lock);
    if (rc != 0) {
      snprintf(t->error, sizeof t->error, "round %d: unlock %s (%s)", i,
               rlock_err_name(rc), rlock_last_error());
      return;
    }
    atomic_fetch_add(&t->done, 1);
    rt_sleep_ms(2);
  }
}

static bool counter_started(void *arg) {
  return atomic_load(&((spin_counter *)arg)->done) >= 10;
}

#define SPIN_ROUNDS 50

Test(kinds, spin_counter_mixed) {
  char name[NAME_MAX_LEN], key[NAME_MAX_LEN];
  rt_key(name, sizeof name, "kinds:spin-counter");
  rt_key(key, sizeof key, "kinds:spin-counter-value");
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c1 = rt_client(), *c2 = rt_client();
  static atomic_bool peer_done;
  atomic_store(&peer_done, false);
  spin_counter t[2];
  memset(t, 0, sizeof t);
  t[0].lock = kind_get(c1, "spin", name);
  t[1].lock = kind_get(c2, "spin", name);
  int64_t t0 = rt_now_ms();
  for (int i = 0; i < 2; i++) {
    t[i].redis = rt_redis_new(10000);
    t[i].key = key;
    t[i].min_rounds = SPIN_ROUNDS;
    t[i].peer_done = &peer_done;
    rt_thread_start(&t[i].th, spin_counter_main, &t[i]);
  }
  /* The peer joins while rlock's threads are at it, and they go on until
   * it is done: the counter is contended from both sides. */
  interop_wait_until(counter_started, &t[0], REPLY_BOUND_MS,
                     "rlock's counter threads started");
  peer_send(p, "spcount %s %s %d %d java", name, key, SPIN_ROUNDS,
            LONG_LEASE_MS);
  const char *answer = peer_next_answer(p, 60000);
  atomic_store(&peer_done, true);
  cr_assert(strncmp(answer, "COUNTED ", 8) == 0, "the peer's count: %s",
            answer);
  long long rlock_rounds = 0;
  for (int i = 0; i < 2; i++) {
    rt_thread_join(&t[i].th, 70000);
    redisFree(t[i].redis);
    cr_assert_str_empty(t[i].error, "rlock thread %d: %s", i, t[i].error);
    cr_assert_geq(atomic_load(&t[i].done), SPIN_ROUNDS);
    rlock_rounds += atomic_load(&t[i].done);
  }
  char *v = rt_str("GET %s", key);
  cr_assert(v != NULL);
  long long got = atoll(v);
  free(v);
  interop_report("spin counter: 2 rlock threads (%lld rounds) + java-like "
                 "(%d), %lld increments in %" PRId64 " ms",
                 rlock_rounds, SPIN_ROUNDS, got, rt_now_ms() - t0);
  cr_assert_eq(got, rlock_rounds + SPIN_ROUNDS,
               "lost updates under the spin lock");
  /* rlock before the peer's first round and after its last. */
  redisReply *log = rt_cmd("LRANGE %s:log 0 -1", key);
  cr_assert_eq((long long)log->elements, got);
  size_t handovers = 0;
  for (size_t i = 1; i < log->elements; i++)
    if (strcmp(log->element[i - 1]->str, log->element[i]->str) != 0)
      handovers++;
  freeReplyObject(log);
  interop_report("spin counter: %zu handovers rlock<->java-like", handovers);
  cr_assert_geq(handovers, 2, "rlock and the peer never interleaved");
  cr_assert_eq(rt_exists(name), 0);
  peer_stop(p);
  rlock_free(t[0].lock);
  rlock_free(t[1].lock);
  rlock_client_free(c1);
  rlock_client_free(c2);
}

Test(kinds, spin_monitor_no_pubsub) {
  char name[NAME_MAX_LEN], tag[NAME_MAX_LEN], needle[2048];
  rt_key(name, sizeof name, "kinds:spin-mon");
  tag_of(tag, sizeof tag, name);
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client(), *c2 = rt_client();
  monitor *m = monitor_start();
  spin_scenario(name, p, c, c2);
  monitor_sync(m);
  /* Command names (client or script): right after the "[db addr] " tag;
   * "PUBLISH" as a script argument elsewhere on a line does not count. */
  static const char *const pubsub[] = {"] \"publish\"", "] \"spublish\"",
                                       "] \"subscribe\"", "] \"ssubscribe\"",
                                       "] \"psubscribe\""};
  for (size_t i = 0; i < sizeof pubsub / sizeof *pubsub; i++) {
    size_t at = monitor_find(m, 0, pubsub[i]);
    cr_assert_eq(at, (size_t)-1, "spin lock traffic has %s: %s", pubsub[i],
                 monitor_line(m, at));
  }
  /* rlock polled: several acquire calls of its waiter (KEYS [H], ARGV
   * [lease, owner]) while the peer held for 400 ms. */
  char c2_prefix[KEY_MAX_LEN];
  snprintf(c2_prefix, sizeof c2_prefix, "\"1\" \"%s\" \"%d\" \"%s:", name,
           LONG_LEASE_MS, rlock_client_id(c2));
  size_t polls = monitor_count_of(m, c2_prefix);
  interop_report("spin MONITOR: rlock's waiter made %zu acquire calls", polls);
  cr_assert_geq(polls, 4, "rlock's spin waiter should poll (1 ms doubling "
                          "to 128 ms): %zu calls in 400 ms",
                polls);
  cr_assert_leq(polls, 60, "rlock's spin waiter polls too fast: %zu calls",
                polls);
  /* rlock's spin unlock: KEYS [H, latch]. */
  snprintf(needle, sizeof needle, "\"2\" \"%s\" \"redisson_unlock_latch:%s:",
           name, tag);
  assert_monitor_has(m, needle, "rlock spin release call");
  monitor_stop(m);
  peer_stop(p);
  rlock_client_free(c);
  rlock_client_free(c2);
}

/* ==================================================================== */
/* ---- fair ---- */

typedef struct fair_names {
  char name[NAME_MAX_LEN], tag[NAME_MAX_LEN];
  char queue[NAME_MAX_LEN + 32], timeout[NAME_MAX_LEN + 32];
  char chan_base[CHANNEL_MAX_LEN];
} fair_names;

static void fair_names_make(fair_names *f, const char *base) {
  rt_key(f->name, sizeof f->name, base);
  tag_of(f->tag, sizeof f->tag, f->name);
  snprintf(f->queue, sizeof f->queue, "redisson_lock_queue:%s", f->tag);
  snprintf(f->timeout, sizeof f->timeout, "redisson_lock_timeout:%s",
           f->tag);
  rt_lock_channel(f->chan_base, sizeof f->chan_base, f->name);
}

static void fair_channel(char *buf, size_t n, const fair_names *f,
                         const char *owner) {
  snprintf(buf, n, "%s:%s", f->chan_base, owner);
}

/* Starts a fair rlock waiter and waits until it is queued (its own channel
 * subscribed and the queue `want_len` long). */
static void fair_rlock_waiter(kworker *w, rlock_client *c, rlock *lock,
                              const fair_names *f, int64_t wait_ms,
                              long long want_len) {
  kworker_start(w, c, lock, wait_ms, LONG_LEASE_MS);
  kworker_wait(w, 1, REPLY_BOUND_MS);
  char ch[CHANNEL_MAX_LEN + OWNER_MAX_LEN];
  fair_channel(ch, sizeof ch, f, w->owner);
  interop_wait_numsub(ch, 1, REPLY_BOUND_MS);
  wait_llen(f->queue, want_len);
}

/* Sends a fair peer wait and checks it waits on its own channel. */
static void fair_peer_waiter(peer *p, const fair_names *f, const char *cmd,
                             long long want_len) {
  char po[OWNER_MAX_LEN], ch[CHANNEL_MAX_LEN + OWNER_MAX_LEN];
  peer_owner(p, f->name, po, sizeof po);
  fair_channel(ch, sizeof ch, f, po);
  peer_send(p, "%s", cmd);
  cr_assert_str_eq(peer_expect_event(p, "WAITING", REPLY_BOUND_MS), ch,
                   "the peer's fair waiter listens on its own channel");
  wait_llen(f->queue, want_len);
}

Test(kinds, fair_wakes_both_ways) {
  fair_names f;
  fair_names_make(&f, "kinds:fair-wake");
  char po[OWNER_MAX_LEN], cmd[NAME_MAX_LEN + 64];
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, f.name, po, sizeof po);
  rlock_client *c = rt_client();
  rlock *lock = kind_get(c, "fair", f.name);

  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "flock %s %d", f.name,
            LONG_LEASE_MS);
  kworker w = {0};
  fair_rlock_waiter(&w, c, lock, &f, 10000, 1);
  const char *q1[] = {w.owner};
  assert_queue(f.queue, q1, 1);
  /* Its deadline: now + the holder's PTTL + its wait (wall clock). */
  int64_t score = zscore(f.timeout, w.owner);
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  int64_t wall = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  cr_assert(score > wall + LONG_LEASE_MS && score <= wall + LONG_LEASE_MS +
                                                        10000 + 1000,
            "rlock waiter's deadline %" PRId64 " should be about now + PTTL "
            "+ 10000 = %" PRId64,
            score, wall + LONG_LEASE_MS + 10000);
  int64_t t_release = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", f.name);
  assert_woke(&w, t_release, "fair: java-like releases -> rlock acquires");
  interop_assert_hget(f.name, w.owner, "1");
  cr_assert_eq(rt_exists(f.queue), 0, "the queue should be empty");
  cr_assert_eq(rt_exists(f.timeout), 0, "the deadline set should be empty");

  snprintf(cmd, sizeof cmd, "ftrylock %s 10000 %d", f.name, LONG_LEASE_MS);
  fair_peer_waiter(p, &f, cmd, 1);
  assert_peer_waits(p, "fair, rlock holds");
  t_release = rt_now_ms();
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  expect_peer_woke(p, t_release, "fair: rlock releases -> java-like acquires");
  interop_assert_hget(f.name, po, "1");
  cr_assert_eq(rt_exists(f.queue), 0);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", f.name);
  cr_assert_eq(rt_exists(f.name), 0);
  peer_stop(p);
  rlock_free(lock);
  rlock_client_free(c);
}

Test(kinds, fair_fifo_mixed) {
  fair_names f;
  fair_names_make(&f, "kinds:fair-fifo");
  char po1[OWNER_MAX_LEN], po2[OWNER_MAX_LEN], cmd[NAME_MAX_LEN + 64];
  peer *p1 = peer_start(PEER_JAVA, 0), *p2 = peer_start(PEER_JAVA, 0);
  peer_owner(p1, f.name, po1, sizeof po1);
  peer_owner(p2, f.name, po2, sizeof po2);
  rlock_client *holder = rt_client(), *c1 = rt_client(), *c2 = rt_client();
  rlock *held = kind_get(holder, "fair", f.name);
  rlock *l1 = kind_get(c1, "fair", f.name), *l2 = kind_get(c2, "fair", f.name);
  cr_assert_eq(rlock_lock(held, LONG_LEASE_MS), 0);

  /* Queue, alternating sides: java-like 1, rlock 1, java-like 2, rlock 2. */
  kworker w1 = {0}, w2 = {0};
  snprintf(cmd, sizeof cmd, "flock %s %d", f.name, LONG_LEASE_MS);
  fair_peer_waiter(p1, &f, cmd, 1);
  fair_rlock_waiter(&w1, c1, l1, &f, 20000, 2);
  fair_peer_waiter(p2, &f, cmd, 3);
  fair_rlock_waiter(&w2, c2, l2, &f, 20000, 4);
  const char *order[] = {po1, w1.owner, po2, w2.owner};
  assert_queue(f.queue, order, 4);
  /* Deadlines grow along the queue. */
  for (int i = 1; i < 4; i++)
    cr_assert_gt(zscore(f.timeout, order[i]), zscore(f.timeout, order[i - 1]),
                 "deadline of waiter %d should be after waiter %d's", i,
                 i - 1);

  /* Hand over along the queue; nobody behind the head moves. */
  int64_t t = rt_now_ms();
  cr_assert_eq(rlock_unlock(held), 0);
  expect_peer_woke(p1, t, "fair fifo: rlock holder -> java-like 1");
  cr_assert_eq(atomic_load(&w1.stage), 1);
  cr_assert_eq(atomic_load(&w2.stage), 1);
  assert_peer_waits(p2, "fair fifo: java-like 2 behind rlock 1");
  const char *rest1[] = {w1.owner, po2, w2.owner};
  assert_queue(f.queue, rest1, 3);

  t = rt_now_ms();
  peer_call(p1, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", f.name);
  assert_woke(&w1, t, "fair fifo: java-like 1 -> rlock 1");
  cr_assert_eq(atomic_load(&w2.stage), 1, "rlock 2 overtook java-like 2");
  assert_peer_waits(p2, "fair fifo: java-like 2 while rlock 1 holds");

  t = rt_now_ms();
  kworker_finish(&w1);
  cr_assert_eq(w1.unlock_rc, 0);
  expect_peer_woke(p2, t, "fair fifo: rlock 1 -> java-like 2");
  cr_assert_eq(atomic_load(&w2.stage), 1);
  const char *rest3[] = {w2.owner};
  assert_queue(f.queue, rest3, 1);

  t = rt_now_ms();
  peer_call(p2, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", f.name);
  assert_woke(&w2, t, "fair fifo: java-like 2 -> rlock 2");
  kworker_finish(&w2);
  cr_assert_eq(w2.unlock_rc, 0);
  cr_assert_eq(rt_exists(f.name), 0);
  cr_assert_eq(rt_exists(f.queue), 0);
  cr_assert_eq(rt_exists(f.timeout), 0);
  peer_stop(p1);
  peer_stop(p2);
  rlock_free(held);
  rlock_free(l1);
  rlock_free(l2);
  rlock_client_free(holder);
  rlock_client_free(c1);
  rlock_client_free(c2);
}

#define GIVE_UP_WAIT_MS 3000

Test(kinds, fair_peer_gives_up_rlock_behind_gets_it) {
  fair_names f;
  fair_names_make(&f, "kinds:fair-peer-gives-up");
  char po[OWNER_MAX_LEN], cmd[NAME_MAX_LEN + 64];
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, f.name, po, sizeof po);
  rlock_client *holder = rt_client(), *c = rt_client();
  rlock *held = kind_get(holder, "fair", f.name);
  rlock *lock = kind_get(c, "fair", f.name);
  cr_assert_eq(rlock_lock(held, LONG_LEASE_MS), 0);

  snprintf(cmd, sizeof cmd, "ftrylock %s %d %d", f.name, GIVE_UP_WAIT_MS,
           LONG_LEASE_MS);
  int64_t t_sent = rt_now_ms();
  fair_peer_waiter(p, &f, cmd, 1);
  kworker w = {0};
  fair_rlock_waiter(&w, c, lock, &f, 20000, 2);
  const char *both[] = {po, w.owner};
  assert_queue(f.queue, both, 2);
  int64_t before = zscore(f.timeout, w.owner);

  /* The peer gives up: acquireFailed takes it out of the queue and moves
   * rlock's deadline up by the peer's wait. */
  peer_expect(p, "NOTACQUIRED", GIVE_UP_WAIT_MS + REPLY_BOUND_MS);
  interop_report("fair: java-like gave up after %" PRId64 " ms",
                 rt_now_ms() - t_sent);
  const char *left[] = {w.owner};
  assert_queue(f.queue, left, 1);
  cr_assert_eq(zscore(f.timeout, po), INT64_MIN,
               "the peer's deadline entry should be gone");
  cr_assert_eq(zscore(f.timeout, w.owner), before - GIVE_UP_WAIT_MS,
               "rlock's deadline should move up by the peer's wait");
  cr_assert_eq(atomic_load(&w.stage), 1);

  int64_t t = rt_now_ms();
  cr_assert_eq(rlock_unlock(held), 0);
  assert_woke(&w, t, "fair: holder releases -> rlock (behind a java-like "
                     "waiter that gave up) acquires");
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  cr_assert_eq(rt_exists(f.queue), 0);
  cr_assert_eq(rt_exists(f.timeout), 0);
  peer_stop(p);
  rlock_free(held);
  rlock_free(lock);
  rlock_client_free(holder);
  rlock_client_free(c);
}

Test(kinds, fair_rlock_gives_up_peer_behind_gets_it) {
  fair_names f;
  fair_names_make(&f, "kinds:fair-rlock-gives-up");
  char po[OWNER_MAX_LEN], cmd[NAME_MAX_LEN + 64];
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, f.name, po, sizeof po);
  rlock_client *holder = rt_client(), *c = rt_client();
  rlock *held = kind_get(holder, "fair", f.name);
  rlock *lock = kind_get(c, "fair", f.name);
  cr_assert_eq(rlock_lock(held, LONG_LEASE_MS), 0);

  kworker w = {0};
  fair_rlock_waiter(&w, c, lock, &f, GIVE_UP_WAIT_MS, 1);
  snprintf(cmd, sizeof cmd, "flock %s %d", f.name, LONG_LEASE_MS);
  fair_peer_waiter(p, &f, cmd, 2);
  const char *both[] = {w.owner, po};
  assert_queue(f.queue, both, 2);
  int64_t before = zscore(f.timeout, po);

  kworker_wait(&w, 2, GIVE_UP_WAIT_MS + REPLY_BOUND_MS);
  cr_assert_eq(w.rc, 0, "rlock's fair try should time out: %d", w.rc);
  /* rlock sends its queue leave as the call returns, without waiting for
   * the reply (Java's tryLock returns after acquireFailed): allow it a
   * bounded moment, and say how long it took. */
  bool gone_at_return = rt_int("LLEN %s", f.queue) == 1;
  int64_t t_left = rt_now_ms();
  wait_llen(f.queue, 1);
  interop_report("fair: rlock's entry %s (%" PRId64 " ms after "
                 "rlock_try_lock returned)",
                 gone_at_return ? "was gone when the call returned"
                                : "left the queue after the call returned",
                 rt_now_ms() - w.t_returned);
  cr_assert_lt(net_ms(t_left, rt_now_ms()), WAKE_BOUND_MS);
  const char *left[] = {po};
  assert_queue(f.queue, left, 1);
  cr_assert_eq(zscore(f.timeout, w.owner), INT64_MIN,
               "rlock's deadline entry should be gone");
  cr_assert_eq(zscore(f.timeout, po), before - GIVE_UP_WAIT_MS,
               "the peer's deadline should move up by rlock's wait");
  assert_peer_waits(p, "fair: holder still holds");

  int64_t t = rt_now_ms();
  cr_assert_eq(rlock_unlock(held), 0);
  expect_peer_woke(p, t, "fair: holder releases -> java-like (behind an "
                         "rlock waiter that gave up) acquires");
  interop_assert_hget(f.name, po, "1");
  kworker_finish(&w);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", f.name);
  cr_assert_eq(rt_exists(f.queue), 0);
  cr_assert_eq(rt_exists(f.timeout), 0);
  cr_assert_eq(rt_exists(f.name), 0);
  peer_stop(p);
  rlock_free(held);
  rlock_free(lock);
  rlock_client_free(holder);
  rlock_client_free(c);
}

Test(kinds, fair_monitor) {
  fair_names f;
  fair_names_make(&f, "kinds:fair-mon");
  char po1[OWNER_MAX_LEN], po2[OWNER_MAX_LEN], me[OWNER_MAX_LEN],
      cmd[NAME_MAX_LEN + 64], needle[2048];
  peer *p1 = peer_start(PEER_JAVA, 0), *p2 = peer_start(PEER_JAVA, 0);
  peer_owner(p1, f.name, po1, sizeof po1);
  peer_owner(p2, f.name, po2, sizeof po2);
  rlock_client *c = rt_client(), *cm = rt_client();
  rlock *lock = kind_get(c, "fair", f.name);
  rlock *mine = kind_get(cm, "fair", f.name);
  interop_my_owner(me, sizeof me, cm);

  monitor *m = monitor_start();
  peer_call(p1, "ACQUIRED", REPLY_BOUND_MS, "flock %s %d", f.name,
            LONG_LEASE_MS);
  /* rlock's single attempt (tryLock(): now before the wait, no queueing). */
  cr_assert_eq(rlock_try_lock(mine, 0, LONG_LEASE_MS), 0);
  cr_assert_eq(rt_exists(f.queue), 0, "a single attempt must not queue");
  kworker w = {0};
  fair_rlock_waiter(&w, c, lock, &f, 10000, 1);
  snprintf(cmd, sizeof cmd, "flock %s %d", f.name, LONG_LEASE_MS);
  fair_peer_waiter(p2, &f, cmd, 2);
  int64_t t = rt_now_ms();
  peer_call(p1, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", f.name);
  assert_woke(&w, t, "fair MONITOR: java-like 1 -> rlock");
  t = rt_now_ms();
  kworker_finish(&w);
  expect_peer_woke(p2, t, "fair MONITOR: rlock -> java-like 2");
  peer_call(p2, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", f.name);
  /* rlock's release with nobody queued publishes nothing. */
  cr_assert_eq(rlock_lock(mine, LONG_LEASE_MS), 0);
  cr_assert_eq(rlock_unlock(mine), 0);
  monitor_sync(m);

  /* Single attempt: KEYS [H, Q, Z], ARGV [lease, owner, now, 300000]. */
  snprintf(needle, sizeof needle, "\"3\" \"%s\" \"%s\" \"%s\" \"%d\" \"%s\" \"",
           f.name, f.queue, f.timeout, LONG_LEASE_MS, me);
  size_t at = monitor_find(m, 0, needle);
  cr_assert_neq(at, (size_t)-1, "MONITOR: no rlock fair single attempt (%s)",
                needle);
  {
    const char *line = monitor_line(m, at);
    const char *args = strcasestr(line, needle) + strlen(needle);
    long long a1 = 0, a2 = 0;
    cr_assert_eq(sscanf(args, "%lld\" \"%lld\"", &a1, &a2), 2,
                 "fair single attempt args: %s", line);
    cr_assert(a1 > 1000000000000LL && a2 == 300000,
              "tryLock() ARGV must be [lease, owner, now, 300000]: %s", line);
  }
  /* Waiting acquire: ARGV [lease, owner, waitMs, now]. */
  snprintf(needle, sizeof needle,
           "\"3\" \"%s\" \"%s\" \"%s\" \"%d\" \"%s\" \"10000\" \"", f.name,
           f.queue, f.timeout, LONG_LEASE_MS, w.owner);
  assert_monitor_has(m, needle, "rlock fair waiting acquire, ARGV "
                                "[lease, owner, 10000, now]");
  snprintf(needle, sizeof needle, "\"rpush\" \"%s\" \"%s\"", f.queue,
           w.owner);
  assert_monitor_has(m, needle, "RPUSH of rlock's waiter on the queue");
  snprintf(needle, sizeof needle, "\"subscribe\" \"%s:%s\"", f.chan_base,
           w.owner);
  assert_monitor_has(m, needle, "rlock SUBSCRIBE to its own channel");
  /* java-like 1's release told rlock, rlock's told java-like 2: each
   * PUBLISH goes to the head's own channel with 0. */
  snprintf(needle, sizeof needle, "\"publish\" \"%s:%s\" \"0\"", f.chan_base,
           w.owner);
  assert_monitor_has(m, needle, "java-like's PUBLISH to rlock's channel");
  snprintf(needle, sizeof needle, "\"publish\" \"%s:%s\" \"0\"", f.chan_base,
           po2);
  assert_monitor_has(m, needle, "rlock's PUBLISH 0 to the head's channel");
  /* rlock's release: KEYS [H, Q, Z, channel base, latch], ARGV [0, lease,
   * owner, now, PUBLISH, latch TTL]. */
  snprintf(needle, sizeof needle,
           "\"5\" \"%s\" \"%s\" \"%s\" \"%s\" \"redisson_unlock_latch:%s:",
           f.name, f.queue, f.timeout, f.chan_base, f.tag);
  assert_monitor_has(m, needle, "rlock fair release call");
  snprintf(needle, sizeof needle, "\" \"0\" \"%d\" \"%s\" \"", LONG_LEASE_MS,
           w.owner);
  assert_monitor_has(m, needle, "rlock fair release ARGV [0, lease, owner]");
  /* Every PUBLISH went to a per-waiter channel, never the bare base. */
  snprintf(needle, sizeof needle, "\"publish\" \"%s\" ", f.chan_base);
  size_t bare = monitor_find(m, 0, needle);
  cr_assert_eq(bare, (size_t)-1, "a fair PUBLISH to the bare channel: %s",
               monitor_line(m, bare));
  size_t pubs = monitor_count_of(m, "lua] \"publish\"");
  cr_assert_eq(pubs, 2, "exactly two fair PUBLISHes (to the heads), got %zu",
               pubs);
  cr_assert_eq(rt_exists(f.name), 0);
  monitor_stop(m);
  peer_stop(p1);
  peer_stop(p2);
  rlock_free(lock);
  rlock_free(mine);
  rlock_client_free(c);
  rlock_client_free(cm);
}

/* ==================================================================== */
/* ---- read/write ---- */

typedef struct rw_names {
  char name[NAME_MAX_LEN], tag[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN];
} rw_names;

static void rw_names_make(rw_names *r, const char *base) {
  rt_key(r->name, sizeof r->name, base);
  tag_of(r->tag, sizeof r->tag, r->name);
  snprintf(r->channel, sizeof r->channel, "redisson_rwlock:%s", r->tag);
}

static void timeout_key(char *buf, size_t n, const rw_names *r,
                        const char *owner, int i) {
  snprintf(buf, n, "%s:%s:rwlock_timeout:%d", r->tag, owner, i);
}

static void assert_mode(const rw_names *r, const char *mode) {
  interop_assert_hget(r->name, "mode", mode);
}

Test(kinds, rw_readers_share) {
  rw_names r;
  rw_names_make(&r, "kinds:rw-share");
  char me[OWNER_MAX_LEN], po[OWNER_MAX_LEN], tk[KEY_MAX_LEN];
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, r.name, po, sizeof po);
  rlock_client *c = rt_client();
  rlock *rd = kind_get(c, "read", r.name);
  interop_my_owner(me, sizeof me, c);

  /* rlock reads first, then the peer joins at once, and the other way. */
  cr_assert_eq(rlock_lock(rd, LONG_LEASE_MS), 0);
  const char *took = peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "rdlock %s %d",
                               r.name, LONG_LEASE_MS);
  cr_assert_lt(atoll(took), WAKE_BOUND_MS, "the peer reader waited");
  assert_mode(&r, "read");
  interop_assert_hget(r.name, me, "1");
  interop_assert_hget(r.name, po, "1");
  timeout_key(tk, sizeof tk, &r, me, 1);
  cr_assert_eq(rt_exists(tk), 1, "rlock's read timeout key %s", tk);
  timeout_key(tk, sizeof tk, &r, po, 1);
  cr_assert_eq(rt_exists(tk), 1, "the peer's read timeout key %s", tk);
  /* rlock re-enters its read: a second timeout key. */
  cr_assert_eq(rlock_try_lock(rd, 0, LONG_LEASE_MS), 1);
  interop_assert_hget(r.name, me, "2");
  timeout_key(tk, sizeof tk, &r, me, 2);
  cr_assert_eq(rt_exists(tk), 1, "rlock's second read timeout key %s", tk);
  cr_assert_eq(rlock_unlock(rd), 0);
  cr_assert_eq(rt_exists(tk), 0, "the newest hold's key goes first");
  int rc = rlock_unlock(rd); /* its last hold; the peer still reads */
  cr_assert_geq(rc, 0, "rlock_unlock: %s", rlock_err_name(rc));
  cr_assert_eq(rt_exists(r.name), 1, "the peer's read hold must remain");
  interop_assert_hget(r.name, po, "1");
  cr_assert_eq(rt_hlen(r.name), 2, "mode + the peer's field");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  cr_assert_eq(rt_exists(r.name), 0);

  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "rdlock %s %d", r.name,
            LONG_LEASE_MS);
  cr_assert_eq(rlock_try_lock(rd, 0, LONG_LEASE_MS), 1,
               "rlock's reader must join the peer's read hold");
  cr_assert_eq(rlock_is_locked(rd), 1);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  cr_assert_eq(rlock_unlock(rd), 0);
  cr_assert_eq(rt_exists(r.name), 0);
  peer_stop(p);
  rlock_free(rd);
  rlock_client_free(c);
}

Test(kinds, rw_writer_waits_for_readers_both_ways) {
  rw_names r;
  rw_names_make(&r, "kinds:rw-writer-waits");
  char po[OWNER_MAX_LEN], field[OWNER_MAX_LEN + 8];
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, r.name, po, sizeof po);
  rlock_client *c1 = rt_client(), *c2 = rt_client();
  rlock *rd1 = kind_get(c1, "read", r.name), *rd2 = kind_get(c2, "read", r.name);
  rlock *wr = kind_get(c2, "write", r.name);

  /* Two rlock readers (two clients); the peer's writer waits for both. */
  cr_assert_eq(rlock_lock(rd1, LONG_LEASE_MS), 0);
  cr_assert_eq(rlock_lock(rd2, LONG_LEASE_MS), 0);
  peer_send(p, "wrlock %s %d", r.name, LONG_LEASE_MS);
  cr_assert_str_eq(peer_expect_event(p, "WAITING", REPLY_BOUND_MS), r.channel);
  /* The first reader's unlock leaves the lock read-held: as Java's, it
   * publishes nothing (the fact sheet: only the unlock that deletes the
   * hash publishes 0). */
  monitor *m = monitor_start();
  int rc = rlock_unlock(rd1);
  cr_assert_geq(rc, 0, "rlock_unlock: %s", rlock_err_name(rc));
  rt_sleep_ms(200); /* a deliberate hold by the second reader */
  assert_peer_waits(p, "rw: one rlock reader still holds");
  assert_mode(&r, "read");
  monitor_sync(m);
  size_t pub = monitor_find(m, 0, "] \"publish\"");
  cr_assert_eq(pub, (size_t)-1,
               "a read unlock that leaves other readers published: %s",
               monitor_line(m, pub));
  monitor_stop(m);
  int64_t t = rt_now_ms();
  cr_assert_eq(rlock_unlock(rd2), 0);
  expect_peer_woke(p, t, "rw: last rlock reader releases -> java-like writer");
  assert_mode(&r, "write");
  snprintf(field, sizeof field, "%s:write", po);
  interop_assert_hget(r.name, field, "1");
  cr_assert_eq(rlock_try_lock(rd1, 0, LONG_LEASE_MS), 0,
               "no reader while the peer writes");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "wrunlock %s", r.name);
  cr_assert_eq(rt_exists(r.name), 0);

  /* The peer reads; rlock's writer waits for it. */
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "rdlock %s %d", r.name,
            LONG_LEASE_MS);
  kworker w = {0};
  kworker_start(&w, c2, wr, 10000, LONG_LEASE_MS);
  interop_wait_numsub(r.channel, 1, REPLY_BOUND_MS);
  rt_sleep_ms(200);
  cr_assert_eq(atomic_load(&w.stage), 1, "rlock wrote over a peer reader");
  t = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  assert_woke(&w, t, "rw: java-like reader releases -> rlock writer");
  assert_mode(&r, "write");
  snprintf(field, sizeof field, "%s:write", w.owner);
  interop_assert_hget(r.name, field, "1");
  peer_call(p, "NOTACQUIRED", REPLY_BOUND_MS, "rdtrylock %s 0 %d", r.name,
            LONG_LEASE_MS);
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  cr_assert_eq(rt_exists(r.name), 0);
  peer_stop(p);
  rlock_free(rd1);
  rlock_free(rd2);
  rlock_free(wr);
  rlock_client_free(c1);
  rlock_client_free(c2);
}

Test(kinds, rw_write_unlock_wakes_readers_both_sides) {
  rw_names r;
  rw_names_make(&r, "kinds:rw-wake-readers");
  peer *pw = peer_start(PEER_JAVA, 0), *pr = peer_start(PEER_JAVA, 0);
  rlock_client *cw = rt_client(), *cr = rt_client();
  rlock *wr = kind_get(cw, "write", r.name), *rd = kind_get(cr, "read", r.name);

  /* Two rlock reader threads in one client and one peer reader wait: a
   * "0" would wake one waiter per process, so only "1" (wake all) lets
   * both rlock threads in by message. */
  for (int round = 0; round < 2; round++) {
    bool peer_writes = round == 0;
    if (peer_writes)
      peer_call(pw, "ACQUIRED", REPLY_BOUND_MS, "wrlock %s %d", r.name,
                LONG_LEASE_MS);
    else
      cr_assert_eq(rlock_lock(wr, LONG_LEASE_MS), 0);
    kworker w[2];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 2; i++)
      kworker_start(&w[i], cr, rd, 10000, LONG_LEASE_MS);
    for (int i = 0; i < 2; i++)
      kworker_wait(&w[i], 1, REPLY_BOUND_MS);
    interop_wait_numsub(r.channel, 1, REPLY_BOUND_MS);
    peer_send(pr, "rdlock %s %d", r.name, LONG_LEASE_MS);
    peer_expect_event(pr, "WAITING", REPLY_BOUND_MS);
    interop_wait_numsub(r.channel, 2, REPLY_BOUND_MS);
    rt_sleep_ms(100); /* both rlock threads asleep on the message */
    cr_assert_eq(atomic_load(&w[0].stage), 1);
    cr_assert_eq(atomic_load(&w[1].stage), 1);
    int64_t t = rt_now_ms();
    if (peer_writes)
      peer_call(pw, "UNLOCKED", REPLY_BOUND_MS, "wrunlock %s", r.name);
    else
      cr_assert_eq(rlock_unlock(wr), 0);
    const char *who = peer_writes ? "java-like" : "rlock";
    char what[128];
    for (int i = 0; i < 2; i++) {
      snprintf(what, sizeof what, "rw: %s write unlock -> rlock reader %d",
               who, i + 1);
      assert_woke(&w[i], t, what);
    }
    snprintf(what, sizeof what, "rw: %s write unlock -> java-like reader",
             who);
    expect_peer_woke(pr, t, what);
    assert_mode(&r, "read");
    cr_assert_eq(rt_hlen(r.name), 4, "mode + three readers");
    for (int i = 0; i < 2; i++) {
      kworker_finish(&w[i]);
      cr_assert_geq(w[i].unlock_rc, 0, "rlock reader's unlock: %s",
                    rlock_err_name(w[i].unlock_rc));
    }
    cr_assert_eq(rt_exists(r.name), 1, "the peer reader still holds");
    peer_call(pr, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
    cr_assert_eq(rt_exists(r.name), 0);
  }
  peer_stop(pw);
  peer_stop(pr);
  rlock_free(wr);
  rlock_free(rd);
  rlock_client_free(cw);
  rlock_client_free(cr);
}

#define RW_WATCHDOG_MS 1500

Test(kinds, rw_peer_read_unlock_keeps_rlock_hold) {
  rw_names r;
  rw_names_make(&r, "kinds:rw-keep");
  char me[OWNER_MAX_LEN], po[OWNER_MAX_LEN], tk[KEY_MAX_LEN];
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, r.name, po, sizeof po);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = RW_WATCHDOG_MS;
  rlock_client *c = rt_client_opts(&o);
  rlock *rd = kind_get(c, "read", r.name);
  interop_my_owner(me, sizeof me, c);
  timeout_key(tk, sizeof tk, &r, me, 1);

  /* 1. A leased rlock read hold survives a peer reader's unlock: the
   * peer's script finds rlock's timeout key and keeps the hash for it. */
  cr_assert_eq(rlock_lock(rd, LONG_LEASE_MS), 0);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "rdlock %s %d", r.name, 5000);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  cr_assert_eq(rt_exists(r.name), 1, "the peer's read unlock deleted "
                                     "rlock's read hold");
  interop_assert_hget(r.name, me, "1");
  long long ttl = rt_pttl(r.name);
  cr_assert(ttl > LONG_LEASE_MS - 5000, "PTTL %lld: the hash should live as "
                                        "long as rlock's timeout key",
            ttl);
  cr_assert_eq(rlock_unlock(rd), 0);
  cr_assert_eq(rt_exists(r.name), 0);

  /* 2. A watchdog read hold, held for more than one watchdog timeout: the
   * renewal refreshes the timeout key too, so the peer's unlock still
   * counts rlock's reader alive. */
  monitor *m = monitor_start();
  cr_assert_eq(rlock_lock(rd, -1), 0);
  int64_t t0 = rt_now_ms();
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "rdlock %s %d", r.name,
            LONG_LEASE_MS);
  while (rt_now_ms() - t0 < RW_WATCHDOG_MS + 700) {
    long long kt = rt_pttl(tk);
    cr_assert(kt > 0 && kt <= RW_WATCHDOG_MS,
              "rlock's timeout key %s: PTTL %lld (watchdog %d)", tk, kt,
              RW_WATCHDOG_MS);
    rt_sleep_ms(100); /* sampling interval of the deliberate hold */
  }
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  cr_assert_eq(rt_exists(r.name), 1, "the peer's read unlock deleted "
                                     "rlock's renewed read hold");
  interop_assert_hget(r.name, me, "1");
  ttl = rt_pttl(r.name);
  cr_assert(ttl > 0 && ttl <= RW_WATCHDOG_MS, "PTTL %lld after the peer's "
                                              "unlock",
            ttl);
  monitor_sync(m);
  char needle[2048];
  snprintf(needle, sizeof needle, "lua] \"pexpire\" \"%s\" \"%d\"", tk,
           RW_WATCHDOG_MS);
  size_t renewals = monitor_count_of(m, needle);
  interop_report("rw: rlock's watchdog renewed its read timeout key %zu times",
                 renewals);
  cr_assert_geq(renewals, 2, "MONITOR: rlock's renewal should PEXPIRE %s",
                tk);
  monitor_stop(m);
  cr_assert_eq(rlock_unlock(rd), 0);
  cr_assert_eq(rt_exists(r.name), 0);
  cr_assert_eq(rt_exists(tk), 0);
  peer_stop(p);
  rlock_free(rd);
  rlock_client_free(c);
}

/* The peer's ReadLockTask-style renewal keeps a watchdog read hold (and
 * its timeout key) alive for more than three timeouts; rlock's writer
 * stays out, and gets in by message when the peer unlocks. */
Test(kinds, rw_peer_watchdog_reader_keeps_rlock_writer_out) {
  rw_names r;
  rw_names_make(&r, "kinds:rw-peer-watchdog");
  char po[OWNER_MAX_LEN], tk[KEY_MAX_LEN];
  peer *p = peer_start(PEER_JAVA, RW_WATCHDOG_MS);
  peer_owner(p, r.name, po, sizeof po);
  timeout_key(tk, sizeof tk, &r, po, 1);
  rlock_client *c = rt_client();
  rlock *wr = kind_get(c, "write", r.name);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "rdlock %s -1", r.name);
  int64_t t0 = rt_now_ms();
  kworker w = {0};
  kworker_start(&w, c, wr, 20000, LONG_LEASE_MS);
  interop_wait_numsub(r.channel, 1, REPLY_BOUND_MS);
  while (rt_now_ms() - t0 < 3 * RW_WATCHDOG_MS + 500) {
    long long kt = rt_pttl(tk), ht = rt_pttl(r.name);
    cr_assert(kt > 0 && kt <= RW_WATCHDOG_MS && ht > 0 &&
                  ht <= RW_WATCHDOG_MS,
              "the peer's renewed read hold: PTTL key %lld, hash %lld", kt,
              ht);
    cr_assert_eq(atomic_load(&w.stage), 1, "rlock wrote over a renewed "
                                           "peer reader");
    rt_sleep_ms(100); /* sampling interval of the deliberate hold */
  }
  cr_assert_geq(peer_event_count(p, "RENEWED"), 3);
  cr_assert_eq(peer_event_count(p, "LOST"), 0);
  int64_t t = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  assert_woke(&w, t, "rw: renewed java-like reader releases -> rlock writer");
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  cr_assert_eq(rt_exists(r.name), 0);
  cr_assert_eq(rt_exists(tk), 0);
  peer_stop(p);
  rlock_free(wr);
  rlock_client_free(c);
}

Test(kinds, rw_monitor) {
  rw_names r;
  rw_names_make(&r, "kinds:rw-mon");
  char me[OWNER_MAX_LEN], needle[2048];
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock *rd = kind_get(c, "read", r.name), *wr = kind_get(c, "write", r.name);
  interop_my_owner(me, sizeof me, c);

  monitor *m = monitor_start();
  /* rlock reads; the peer's writer waits; rlock's read unlock publishes 0. */
  cr_assert_eq(rlock_lock(rd, LONG_LEASE_MS), 0);
  peer_send(p, "wrlock %s %d", r.name, LONG_LEASE_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  int64_t t = rt_now_ms();
  cr_assert_eq(rlock_unlock(rd), 0);
  expect_peer_woke(p, t, "rw MONITOR: rlock read unlock -> java-like writer");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "wrunlock %s", r.name);
  /* rlock writes; the peer's reader waits; rlock's write unlock publishes
   * 1. */
  cr_assert_eq(rlock_lock(wr, LONG_LEASE_MS), 0);
  peer_send(p, "rdlock %s %d", r.name, LONG_LEASE_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  t = rt_now_ms();
  cr_assert_eq(rlock_unlock(wr), 0);
  expect_peer_woke(p, t, "rw MONITOR: rlock write unlock -> java-like reader");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  /* rlock waits as a writer behind the peer's reader: it subscribes to the
   * rwlock channel. */
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "rdlock %s %d", r.name,
            LONG_LEASE_MS);
  kworker w = {0};
  kworker_start(&w, c, wr, 10000, LONG_LEASE_MS);
  interop_wait_numsub(r.channel, 1, REPLY_BOUND_MS);
  t = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "rdunlock %s", r.name);
  assert_woke(&w, t, "rw MONITOR: java-like read unlock -> rlock writer");
  kworker_finish(&w);
  monitor_sync(m);

  /* Read acquire: KEYS [H, {n}:<owner>:rwlock_timeout], ARGV [lease, owner,
   * owner:write]; it writes timeout key 1. */
  snprintf(needle, sizeof needle,
           "\"2\" \"%s\" \"%s:%s:rwlock_timeout\" \"%d\" \"%s\" \"%s:write\"",
           r.name, r.tag, me, LONG_LEASE_MS, me, me);
  assert_monitor_has(m, needle, "rlock read acquire call");
  snprintf(needle, sizeof needle, "\"%s:%s:rwlock_timeout:1\"", r.tag, me);
  size_t at = monitor_find(m, 0, needle);
  cr_assert_neq(at, (size_t)-1, "MONITOR: rlock's read acquire never touched "
                                "%s",
                needle);
  cr_assert(strcasestr(monitor_line(m, at), "\"set\"") != NULL,
            "the first touch of the timeout key should be its SET: %s",
            monitor_line(m, at));
  /* Read unlock: KEYS [H, channel, timeout base, {n}, latch], ARGV [0,
   * owner, PUBLISH, latch TTL]; it published 0. */
  snprintf(needle, sizeof needle,
           "\"5\" \"%s\" \"%s\" \"%s:%s:rwlock_timeout\" \"%s\" "
           "\"redisson_unlock_latch:%s:",
           r.name, r.channel, r.tag, me, r.tag, r.tag);
  assert_monitor_has(m, needle, "rlock read release call");
  snprintf(needle, sizeof needle, "\"0\" \"%s\" \"PUBLISH\" \"", me);
  assert_monitor_has(m, needle, "rlock read release ARGV [0, owner, PUBLISH]");
  /* Write acquire: KEYS [H], ARGV [lease, owner:write]. */
  snprintf(needle, sizeof needle, "\"1\" \"%s\" \"%d\" \"%s:write\"", r.name,
           LONG_LEASE_MS, me);
  assert_monitor_has(m, needle, "rlock write acquire call");
  /* Write unlock: KEYS [H, channel, latch], ARGV [1, lease, owner:write,
   * PUBLISH, latch TTL]; it published 1. */
  snprintf(needle, sizeof needle,
           "\"3\" \"%s\" \"%s\" \"redisson_unlock_latch:%s:", r.name,
           r.channel, r.tag);
  assert_monitor_has(m, needle, "rlock write release call");
  snprintf(needle, sizeof needle, "\"1\" \"%d\" \"%s:write\" \"PUBLISH\"",
           LONG_LEASE_MS, me);
  assert_monitor_has(m, needle, "rlock write release ARGV [1, lease, "
                                "owner:write, PUBLISH]");
  /* Messages: the read unlocks 0, the write unlocks 1, on the one channel
   * (rlock's read unlock, java-like's write unlock, rlock's write unlock,
   * java-like's read unlocks). */
  snprintf(needle, sizeof needle, "\"publish\" \"%s\" \"0\"", r.channel);
  size_t zeros = monitor_count_of(m, needle);
  snprintf(needle, sizeof needle, "\"publish\" \"%s\" \"1\"", r.channel);
  size_t ones = monitor_count_of(m, needle);
  interop_report("rw MONITOR: %zu PUBLISH 0, %zu PUBLISH 1 on %s", zeros, ones,
                 r.channel);
  cr_assert_eq(zeros, 3, "read unlocks that freed the lock publish 0");
  cr_assert_eq(ones, 3, "write unlocks publish 1");
  cr_assert_eq(monitor_count_of(m, "lua] \"publish\""), 6,
               "no other PUBLISH (e.g. to redisson_lock__channel)");
  snprintf(needle, sizeof needle, "\"subscribe\" \"%s\"", r.channel);
  assert_monitor_has(m, needle, "rlock's SUBSCRIBE to the rwlock channel");
  cr_assert_eq(rt_exists(r.name), 0);
  monitor_stop(m);
  peer_stop(p);
  rlock_free(rd);
  rlock_free(wr);
  rlock_client_free(c);
}

/* ==================================================================== */
/* ---- MultiLock (issue 29, items 2 and 5) ---- */

typedef struct ml_counter {
  rlock *ml;
  redisContext *redis;
  const char *key;
  int rounds;
  atomic_int done;
  char error[256];
  rt_thread th;
} ml_counter;

static void ml_counter_main(void *arg) {
  ml_counter *t = arg;
  for (int i = 0; i < t->rounds; i++) {
    int rc = rlock_lock(t->ml, -1);
    if (rc != 0) {
      snprintf(t->error, sizeof t->error, "lock: %s", rlock_err_name(rc));
      return;
    }
    /* Deliberately not atomic: only the MultiLock keeps this exact. */
    redisReply *r = redisCommand(t->redis, "GET %s", t->key);
    long long v = r != NULL && r->type == REDIS_REPLY_STRING ? atoll(r->str)
                                                              : 0;
    freeReplyObject(r);
    freeReplyObject(redisCommand(t->redis, "SET %s %lld", t->key, v + 1));
    rc = rlock_unlock(t->ml);
    if (rc != 0) {
      snprintf(t->error, sizeof t->error, "unlock: %s", rlock_err_name(rc));
      return;
    }
    atomic_fetch_add(&t->done, 1);
  }
}

#define ML_ROUNDS 40

/* A MultiLock in rlock over {a,b} and one in the java-like peer over
 * {b,c} (Java's algorithm over RLocks) never both hold: first step by
 * step, then counting together on one unguarded counter. */
Test(kinds, multilock_c_and_java_exclude_each_other) {
  char a[NAME_MAX_LEN], b[NAME_MAX_LEN], c3[NAME_MAX_LEN], key[NAME_MAX_LEN];
  rt_key(a, sizeof a, "kinds:mla");
  rt_key(b, sizeof b, "kinds:mlb");
  rt_key(c3, sizeof c3, "kinds:mlc");
  rt_key(key, sizeof key, "kinds:ml-counter");
  peer *p = peer_start(PEER_JAVA, 0);
  rlock_client *c = rt_client();
  rlock *m[2] = {rt_lock(c, a), rt_lock(c, b)};
  rlock *ml = NULL;
  cr_assert_eq(rlock_new_multilock(m, 2, &ml), 0);

  cr_assert_eq(rlock_try_lock(ml, 0, LONG_LEASE_MS), 1);
  const char *ans = peer_call(p, "NOTACQUIRED", REPLY_BOUND_MS,
                              "mtrylock %s,%s 300 -1", b, c3);
  cr_assert_geq(atoll(ans), 290, "the peer gave up after %s ms", ans);
  cr_assert_eq(rt_exists(c3), 0, "the peer left a member held");
  cr_assert_eq(rlock_unlock(ml), 0);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "mtrylock %s,%s 0 -1", b, c3);
  cr_assert_eq(rlock_try_lock(ml, 300, -1), 0);
  cr_assert_eq(rt_exists(a), 0, "rlock left a member held");
  /* rlock waits for b; the peer's unlock of both wakes it */
  peer_send(p, "munlock %s,%s", b, c3);
  cr_assert_eq(rlock_try_lock(ml, 10000, -1), 1);
  peer_expect(p, "UNLOCKED", REPLY_BOUND_MS);
  cr_assert_eq(rlock_unlock(ml), 0);
  cr_assert_eq(rt_exists(a) + rt_exists(b) + rt_exists(c3), 0);

  /* both count under their MultiLocks at once */
  ml_counter t = {.ml = ml, .key = key, .rounds = ML_ROUNDS};
  t.redis = rt_redis_new(10000);
  int64_t t0 = rt_now_ms();
  rt_thread_start(&t.th, ml_counter_main, &t);
  peer_send(p, "mcount %s,%s %s %d -1", b, c3, key, ML_ROUNDS);
  const char *answer = peer_next_answer(p, 120000);
  cr_assert(strncmp(answer, "COUNTED ", 8) == 0, "the peer's count: %s",
            answer);
  rt_thread_join(&t.th, 120000);
  redisFree(t.redis);
  cr_assert_str_empty(t.error, "%s", t.error);
  char *v = rt_str("GET %s", key);
  long long got = v != NULL ? atoll(v) : -1;
  free(v);
  interop_report("multilock counter: rlock {a,b} and java-like {b,c}, %d "
                 "rounds each, %lld increments in %" PRId64 " ms",
                 ML_ROUNDS, got, rt_now_ms() - t0);
  cr_assert_eq(got, 2 * ML_ROUNDS, "lost updates: both held b at once");
  cr_assert_eq(rt_exists(a) + rt_exists(b) + rt_exists(c3), 0);

  peer_stop(p);
  rlock_free(ml);
  rlock_free(m[0]);
  rlock_free(m[1]);
  rlock_client_free(c);
}

/* The wire of a MultiLock with a wait and a lease, as Java sends it: each
 * member's acquire with a lease of 2 x wait, then each member's keys
 * PEXPIREd to the lease (KEYS the member's keys - a fair member's queue
 * and deadlines too - ARGV [lease, ""]), from rlock and from the peer. */
Test(kinds, multilock_monitor) {
  char a[NAME_MAX_LEN], f[NAME_MAX_LEN], tag[NAME_MAX_LEN], me[OWNER_MAX_LEN],
      po[OWNER_MAX_LEN], needle[2048];
  rt_key(a, sizeof a, "kinds:mlm-a");
  rt_key(f, sizeof f, "kinds:mlm-f");
  tag_of(tag, sizeof tag, f);
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, a, po, sizeof po);
  rlock_client *c = rt_client();
  rlock *m[2] = {rt_lock(c, a), kind_get(c, "fair", f)};
  rlock *ml = NULL;
  cr_assert_eq(rlock_new_multilock(m, 2, &ml), 0);
  interop_my_owner(me, sizeof me, c);

  monitor *mon = monitor_start();
  cr_assert_eq(rlock_try_lock(ml, 1000, 9000), 1);
  cr_assert_eq(rlock_unlock(ml), 0);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "mtrylock %s 1000 9000", a);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "munlock %s", a);
  monitor_sync(mon);

  snprintf(needle, sizeof needle, "\"1\" \"%s\" \"2000\" \"%s\"", a, me);
  assert_monitor_has(mon, needle, "rlock member acquire with 2 x wait");
  snprintf(needle, sizeof needle, "\"1\" \"%s\" \"2000\" \"%s\"", a, po);
  assert_monitor_has(mon, needle, "java-like member acquire with 2 x wait");
  snprintf(needle, sizeof needle, "\"1\" \"%s\" \"9000\" \"\"", a);
  /* >= 2: a first EVALSHA of rlock's script comes again as EVAL */
  cr_assert_geq(monitor_count_of(mon, needle), 2,
                "an expire of the member to the lease from each side");
  snprintf(needle, sizeof needle, "\"EVAL\" \"local r = 0;");
  assert_monitor_has(mon, needle, "the java-like expire");
  snprintf(needle, sizeof needle,
           "\"3\" \"%s\" \"redisson_lock_queue:%s\" \"redisson_lock_timeout:%s\""
           " \"9000\" \"\"",
           f, tag, tag);
  assert_monitor_has(mon, needle, "rlock expire of the fair member's keys");
  snprintf(needle, sizeof needle, "lua] \"pexpire\" \"redisson_lock_queue:%s\"",
           tag);
  assert_monitor_has(mon, needle, "the fair queue key PEXPIREd");
  interop_report("multilock MONITOR: %zu lines", monitor_count(mon));
  monitor_stop(mon);
  peer_stop(p);
  rlock_free(ml);
  rlock_free(m[0]);
  rlock_free(m[1]);
  rlock_client_free(c);
}

/* The FasterMultiLock's wire as the study saw Java send it: the acquire
 * KEYS [group] ARGV [lease, now, owner, fields...], the unlock KEYS [group,
 * redisson_lock__channel:{group}, latch] ARGV [owner, 0, lease, PUBLISH,
 * latch TTL, now, fields...], "0" published on the group's channel, which
 * a waiter subscribes to. */
Test(kinds, fast_multilock_monitor) {
  char g[NAME_MAX_LEN], tag[NAME_MAX_LEN], me[OWNER_MAX_LEN], needle[2048];
  rt_key(g, sizeof g, "kinds:fml");
  tag_of(tag, sizeof tag, g);
  rlock_client *c = rt_client(), *c2 = rt_client();
  interop_my_owner(me, sizeof me, c);
  const char *vals[2] = {"Jack_001", "Mary_002"};
  rlock *f = NULL, *f2 = NULL;
  cr_assert_eq(rlock_new_fast_multilock(c, g, vals, NULL, 2, &f), 0);
  cr_assert_eq(rlock_new_fast_multilock(c2, g, vals + 1, NULL, 1, &f2), 0);
  monitor *mon = monitor_start();
  cr_assert_eq(rlock_try_lock(f, 0, 30000), 1);
  cr_assert_eq(rlock_try_lock(f2, 100, 30000), 0);
  cr_assert_eq(rlock_unlock(f), 0);
  monitor_sync(mon);

  snprintf(needle, sizeof needle, "\"1\" \"%s\" \"30000\" \"", g);
  size_t i = monitor_find(mon, 0, needle);
  cr_assert_neq(i, SIZE_MAX, "no acquire call");
  snprintf(needle, sizeof needle,
           "\" \"%s\" \"7pNoDdizVy2xY792MaFv+w\" \"kIX2DFOX4IWct7G7K6tV9A\"",
           me);
  cr_assert(strstr(monitor_line(mon, i), needle) != NULL,
            "acquire ARGV lease, now, owner, fields: %s",
            monitor_line(mon, i));
  snprintf(needle, sizeof needle,
           "\"3\" \"%s\" \"redisson_lock__channel:%s\" "
           "\"redisson_unlock_latch:%s:",
           g, tag, tag);
  i = monitor_find(mon, 0, needle);
  cr_assert_neq(i, SIZE_MAX, "no unlock call");
  snprintf(needle, sizeof needle, "\"%s\" \"0\" \"30000\" \"PUBLISH\" \"",
           me);
  cr_assert(strstr(monitor_line(mon, i), needle) != NULL &&
                strstr(monitor_line(mon, i),
                       "\"7pNoDdizVy2xY792MaFv+w\" "
                       "\"kIX2DFOX4IWct7G7K6tV9A\"") != NULL,
            "unlock ARGV: %s", monitor_line(mon, i));
  snprintf(needle, sizeof needle,
           "lua] \"publish\" \"redisson_lock__channel:%s\" \"0\"", tag);
  assert_monitor_has(mon, needle, "0 on the group's channel");
  snprintf(needle, sizeof needle, "\"subscribe\" \"redisson_lock__channel:%s\"",
           tag);
  assert_monitor_has(mon, needle, "the waiter's SUBSCRIBE");
  interop_report("fast multilock MONITOR: %zu lines", monitor_count(mon));
  monitor_stop(mon);
  rlock_free(f);
  rlock_free(f2);
  rlock_client_free(c2);
  rlock_client_free(c);
}

/* Watchdog mode (lease_ms < 0) on the wire, as Java's FastMultilockTask:
 * the acquire sends the watchdog timeout as the lease, then the renewal
 * KEYS [group] ARGV [watchdog timeout, now, owner, fields...] follows
 * every timeout/3 (one call per group), and the unlock re-applies it. */
Test(kinds, fast_multilock_watchdog_monitor) {
  char g[NAME_MAX_LEN], me[OWNER_MAX_LEN], needle[2048], tail[2048];
  rt_key(g, sizeof g, "kinds:fmlwd");
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  rlock_client *c = rt_client_opts(&o);
  interop_my_owner(me, sizeof me, c);
  const char *vals[2] = {"Jack_001", "Mary_002"};
  rlock *f = NULL;
  cr_assert_eq(rlock_new_fast_multilock(c, g, vals, NULL, 2, &f), 0);
  monitor *mon = monitor_start();
  cr_assert_eq(rlock_try_lock(f, 0, -1), 1);
  rt_sleep_ms(1500);
  cr_assert_eq(rlock_unlock(f), 0);
  monitor_sync(mon);

  snprintf(needle, sizeof needle, "\"1\" \"%s\" \"900\" \"", g);
  snprintf(tail, sizeof tail,
           "\" \"%s\" \"7pNoDdizVy2xY792MaFv+w\" \"kIX2DFOX4IWct7G7K6tV9A\"",
           me);
  size_t i = monitor_find(mon, 0, needle);
  cr_assert_neq(i, SIZE_MAX, "no acquire with the watchdog timeout");
  cr_assert(strstr(monitor_line(mon, i), tail) != NULL, "acquire: %s",
            monitor_line(mon, i));
  /* The acquire's own lines (EVALSHA, and EVAL after a NOSCRIPT) have
   * the same shape: told apart by its SHA and its script's text. */
  char sha[48] = "";
  const char *at = strcasestr(monitor_line(mon, i), "\"evalsha\" \"");
  if (at != NULL)
    snprintf(sha, sizeof sha, "%.40s", at + strlen("\"evalsha\" \""));
  int renewals = 0;
  for (size_t j = monitor_find(mon, i + 1, needle); j != SIZE_MAX;
       j = monitor_find(mon, j + 1, needle)) {
    const char *line = monitor_line(mon, j);
    if ((sha[0] != '\0' && strstr(line, sha) != NULL) ||
        strstr(line, "FasterMultiLock acquire") != NULL)
      continue;
    cr_assert(strstr(line, tail) != NULL, "renewal: %s", line);
    renewals++;
  }
  /* >= 3 lines: two renewals at least, even if the first was a NOSCRIPT
   * EVALSHA re-sent as EVAL */
  cr_assert(renewals >= 3, "%d renewal lines in 1.5 s at a 300 ms period",
            renewals);
  snprintf(needle, sizeof needle, "\"%s\" \"0\" \"900\" \"PUBLISH\" \"",
           me);
  assert_monitor_has(mon, needle, "the unlock re-applies the timeout");
  interop_report("fast multilock watchdog MONITOR: %d renewals", renewals);
  monitor_stop(mon);
  rlock_free(f);
  rlock_client_free(c);
}

static bool queue_len_is_1(void *name) {
  return rt_int("LLEN redisson_lock_queue:{%s}", (const char *)name) == 1;
}

/* getNonReentrantFairLock both ways (the peer's nf* commands): each side's
 * own re-acquire is refused at once without a queue entry; each side's
 * queued waiter is woken by the other's release. */
Test(kinds, nonreentrant_fair_both_ways) {
  char name[NAME_MAX_LEN], me[OWNER_MAX_LEN], po[OWNER_MAX_LEN];
  rt_key(name, sizeof name, "kinds:nonre-fair");
  peer *p = peer_start(PEER_JAVA, 0);
  peer_owner(p, name, po, sizeof po);
  rlock_client *c = rt_client(), *c2 = rt_client();
  rlock *lock = kind_get(c, "nonreentrant_fair", name);
  rlock *lock2 = kind_get(c2, "nonreentrant_fair", name);
  interop_my_owner(me, sizeof me, c);

  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "nflock %s %d", name,
            LONG_LEASE_MS);
  interop_assert_hget(name, po, "1");
  int64_t t0 = rt_now_ms();
  const char *err = peer_call(p, "ERROR", REPLY_BOUND_MS,
                              "nftrylock %s 5000 %d", name, LONG_LEASE_MS);
  cr_assert(strstr(err, "NON_REENTRANT_REACQUIRE") != NULL, "%s", err);
  cr_assert_lt(rt_now_ms() - t0, 2000, "refused at once");
  cr_assert_eq(rt_int("LLEN redisson_lock_queue:{%s}", name), 0,
               "a refused re-acquire was queued");
  kworker w = {0};
  kworker_start(&w, c2, lock2, 10000, LONG_LEASE_MS);
  interop_wait_until(queue_len_is_1, name, REPLY_BOUND_MS, "rlock queued");
  int64_t t_release = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "nfunlock %s", name);
  assert_woke(&w, t_release, "nonreentrant fair: java-like releases -> "
                             "rlock acquires");
  kworker_finish(&w);
  cr_assert_eq(w.unlock_rc, 0);
  cr_assert_eq(rt_exists(name), 0);

  cr_assert_eq(rlock_lock(lock, LONG_LEASE_MS), 0);
  interop_assert_hget(name, me, "1");
  cr_assert_eq(rlock_try_lock(lock, 5000, LONG_LEASE_MS), RLOCK_EREENTRY);
  cr_assert_eq(rt_int("LLEN redisson_lock_queue:{%s}", name), 0);
  peer_send(p, "nftrylock %s 10000 %d", name, LONG_LEASE_MS);
  interop_wait_until(queue_len_is_1, name, REPLY_BOUND_MS, "peer queued");
  t_release = rt_now_ms();
  cr_assert_eq(rlock_unlock(lock), 0);
  expect_peer_woke(p, t_release, "nonreentrant fair: rlock releases -> "
                                 "java-like acquires");
  interop_assert_hget(name, po, "1");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "nfunlock %s", name);
  cr_assert_eq(rt_exists(name), 0);

  peer_stop(p);
  rlock_free(lock);
  rlock_free(lock2);
  rlock_client_free(c);
  rlock_client_free(c2);
}
