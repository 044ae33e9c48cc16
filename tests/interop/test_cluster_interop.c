/*
 * Interop against a Redis Cluster (issue 16): the interop scenarios of
 * test_interop.c repeated on a real 3-master cluster (tests/topo's harness,
 * one cluster per test), with a lock on every master.
 *
 * Peers, each a cluster client over the same seeds:
 *   node  node-redisson@1.0.4 on an ioredis Cluster (peer.js --cluster). It
 *         has no sharded mode: it SUBSCRIBEs and its scripts PUBLISH, which
 *         a cluster carries to every node. rlock meets it with
 *         sharded_pubsub = -1.
 *   java  javapeer --cluster: Java Redisson 4.x against a Redis 7 cluster,
 *         sharded AUTO (SSUBSCRIBE on the channel's slot owner, SPUBLISH in
 *         the scripts, watchdog renewal per slot). rlock meets it with its
 *         default, sharded_pubsub = 0 (auto: sharded on Redis 7).
 * mode_mismatch_* is the control: node-redisson against rlock's default
 * sharded mode never hears (or is heard) by message, only by TTL - what a
 * wrong sharded_pubsub costs.
 *
 * As in test_interop.c, a timed release is of a lock with a >= 30 s TTL, so
 * a waiter that gets it within WAKE_BOUND_MS (net of machine stalls) was
 * woken by the message. What is asserted about keys is read on the node
 * that owns the key's slot.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "interop.h"
#include "topo_harness.h"

#define LONG_LEASE_MS 30000
#define N_MASTERS 3

static void cluster_init(void) {
  rt_cluster_start(N_MASTERS, 0);
  const char *uri = rt_cluster_uri();
  const char *prefix = "redis+cluster://";
  cr_assert(strncmp(uri, prefix, strlen(prefix)) == 0, "uri %s", uri);
  interop_init_cluster(uri + strlen(prefix), rt_cluster_dir());
}

static void cluster_fini(void) {
  interop_fini();
  rt_topo_stop_all();
}

TestSuite(interop_cluster, .init = cluster_init, .fini = cluster_fini,
          .timeout = 300);

static const char *kind_name(peer_kind kind) {
  return kind == PEER_NODE ? "node" : "java";
}

/* The pub/sub mode each peer speaks, and rlock's matching option. */
static bool sharded_for(peer_kind kind) { return kind == PEER_JAVA; }

static peer *start_peer(peer_kind kind, int64_t watchdog_ms) {
  return peer_start_ex(kind, watchdog_ms, sharded_for(kind));
}

static rlock_client *open_client(bool sharded, int64_t watchdog_ms) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_cluster_uri();
  o.sharded_pubsub = sharded ? 0 : -1;
  if (watchdog_ms > 0)
    o.watchdog_timeout_ms = watchdog_ms;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "open %s: %s (%s)", o.uri, rlock_err_name(rc),
               rlock_last_error());
  return c;
}

static rlock *get_lock(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new(%s): %s", name, rlock_err_name(rc));
  return l;
}

static void masters(int *m) {
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), N_MASTERS);
}

/* A lock name whose slot is on master `port`. */
static void name_on(char *buf, size_t n, const char *base, peer_kind kind,
                    int port) {
  char full[NAME_MAX_LEN];
  snprintf(full, sizeof full, "icl:%s:%s", base, kind_name(kind));
  rt_cluster_key_on(buf, n, full, port);
  cr_assert_eq(rt_cluster_key_owner(buf), port);
}

static void channel_of(char *buf, size_t n, const char *name) {
  char braced[NAME_MAX_LEN];
  interop_braced(braced, sizeof braced, name);
  snprintf(buf, n, "redisson_lock__channel:%s", braced);
}

static int64_t net_ms(int64_t from, int64_t to) {
  return (to - from) - interop_stalled_ms(from, to);
}

/* HGET on the key's owner; "(nil)" when absent. Into buf. */
static void owner_hget(const char *key, const char *field, char *buf,
                       size_t n) {
  char *v = rt_node_str(rt_cluster_key_owner(key), "HGET %s %s", key, field);
  snprintf(buf, n, "%s", v ? v : "(nil)");
  free(v);
}

static void assert_owner_field(const char *key, const char *field,
                               const char *count) {
  int port = rt_cluster_key_owner(key);
  cr_assert_eq(rt_node_int(port, "HLEN %s", key), 1,
               "%s on %d should have exactly one owner field", key, port);
  char got[64];
  owner_hget(key, field, got, sizeof got);
  cr_assert_str_eq(got, count, "HGET %s %s on %d", key, field, port);
}

static long long owner_exists(const char *key) {
  return rt_node_int(rt_cluster_key_owner(key), "EXISTS %s", key);
}

static long long owner_pttl(const char *key) {
  return rt_node_int(rt_cluster_key_owner(key), "PTTL %s", key);
}

/* Subscribers of `channel` over the whole cluster: SHARDNUMSUB on the
 * channel's owner (sharded), or NUMSUB summed over the masters. */
typedef struct subs_arg {
  const char *channel;
  bool sharded;
  long long want;
} subs_arg;

static long long subscribers(const char *channel, bool sharded) {
  int m[RT_MAX_NODES];
  masters(m);
  long long total = 0;
  for (int i = 0; i < N_MASTERS; i++) {
    if (sharded && m[i] != rt_cluster_key_owner(channel))
      continue;
    redisReply *r = rt_node_cmd(m[i], "PUBSUB %s %s",
                                sharded ? "SHARDNUMSUB" : "NUMSUB", channel);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
      total += r->element[1]->integer;
    freeReplyObject(r);
  }
  return total;
}

static bool subs_are(void *arg) {
  subs_arg *a = arg;
  return subscribers(a->channel, a->sharded) == a->want;
}

static void wait_subscribers(const char *channel, bool sharded,
                             long long want) {
  subs_arg a = {channel, sharded, want};
  char what[2 * CHANNEL_MAX_LEN];
  snprintf(what, sizeof what, "%s subscribers of %.300s == %lld",
           sharded ? "sharded" : "plain", channel, want);
  interop_wait_until(subs_are, &a, REPLY_BOUND_MS, what);
}

/* ---- 1. a peer releases, rlock's waiter wakes: on every master ---- */

static void peer_release_wakes_rlock(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  bool sharded = sharded_for(kind);
  peer *p = start_peer(kind, 0);
  rlock_client *c = open_client(sharded, 0);
  for (int i = 0; i < N_MASTERS; i++) {
    char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], pown[OWNER_MAX_LEN];
    name_on(name, sizeof name, "wake-rlock", kind, m[i]);
    channel_of(channel, sizeof channel, name);
    peer_owner(p, name, pown, sizeof pown);
    peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "lock %s %d", name,
              LONG_LEASE_MS);
    int64_t t_acquired = rt_now_ms();
    assert_owner_field(name, pown, "1");

    rlock *lock = get_lock(c, name);
    rl_worker w = {0};
    rl_worker_start(&w, c, lock, 10000, LONG_LEASE_MS);
    wait_subscribers(channel, sharded, 1); /* rlock's waiter subscribed */
    rt_sleep_ms(t_acquired + 300 - rt_now_ms()); /* the peer holds 300 ms */
    cr_assert_eq(atomic_load(&w.stage), 1, "rlock got a lock the %s holds",
                 peer_label(p));

    int64_t t_release = rt_now_ms();
    peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "unlock %s", name);
    rl_worker_wait_stage(&w, 2, REPLY_BOUND_MS);
    int64_t latency = net_ms(t_release, w.t_returned);
    cr_assert_eq(w.acquire_rc, 1, "rlock_try_lock: %d (%s)", w.acquire_rc,
                 rlock_err_name(w.acquire_rc));
    interop_report("cluster, master %d: %s releases -> rlock acquires: "
                   "%" PRId64 " ms",
                   m[i], peer_label(p), latency);
    cr_assert_lt(latency, WAKE_BOUND_MS,
                 "rlock woke %" PRId64 " ms after the %s's release on %d: "
                 "not by its message",
                 latency, peer_label(p), m[i]);
    assert_owner_field(name, w.owner, "1");
    rl_worker_finish(&w);
    cr_assert_eq(w.unlock_rc[0], 0, "rlock_unlock: %d", w.unlock_rc[0]);
    cr_assert_eq(owner_exists(name), 0);
    rlock_free(lock);
  }
  peer_stop(p);
  rlock_client_free(c);
}

Test(interop_cluster, node_release_wakes_rlock) {
  peer_release_wakes_rlock(PEER_NODE);
}
Test(interop_cluster, java_release_wakes_rlock) {
  peer_release_wakes_rlock(PEER_JAVA);
}

/* ---- 2. rlock releases, the peer's waiter wakes: on every master ---- */

static void rlock_release_wakes_peer(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  bool sharded = sharded_for(kind);
  peer *p = start_peer(kind, 0);
  rlock_client *c = open_client(sharded, 0);
  for (int i = 0; i < N_MASTERS; i++) {
    char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], me[OWNER_MAX_LEN],
        pown[OWNER_MAX_LEN];
    name_on(name, sizeof name, "wake-peer", kind, m[i]);
    channel_of(channel, sizeof channel, name);
    rlock *lock = get_lock(c, name);
    cr_assert_eq(rlock_lock(lock, -1), 0); /* watchdog */
    interop_my_owner(me, sizeof me, c);
    assert_owner_field(name, me, "1");

    peer_owner(p, name, pown, sizeof pown);
    peer_send(p, "lock %s %d", name, LONG_LEASE_MS);
    const char *waiting = peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
    cr_assert_str_eq(waiting, channel, "the %s waits on another channel",
                     peer_label(p));
    wait_subscribers(channel, sharded, 1);
    cr_assert(!peer_has_answer(p, 0), "the %s answered while rlock holds",
              peer_label(p));

    int64_t t_release = rt_now_ms();
    cr_assert_eq(rlock_unlock(lock), 0);
    const char *took = peer_expect(p, "ACQUIRED", REPLY_BOUND_MS);
    int64_t latency = net_ms(t_release, rt_now_ms());
    interop_report("cluster, master %d: rlock releases -> %s acquires: "
                   "%" PRId64 " ms (waited %s ms)",
                   m[i], peer_label(p), latency, took);
    cr_assert_lt(latency, WAKE_BOUND_MS,
                 "the %s woke %" PRId64 " ms after rlock's release on %d: "
                 "not by its message",
                 peer_label(p), latency, m[i]);
    assert_owner_field(name, pown, "1");
    peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "unlock %s", name);
    cr_assert_eq(owner_exists(name), 0);
    rlock_free(lock);
  }
  peer_stop(p);
  rlock_client_free(c);
}

Test(interop_cluster, rlock_release_wakes_node) {
  rlock_release_wakes_peer(PEER_NODE);
}
Test(interop_cluster, rlock_release_wakes_java) {
  rlock_release_wakes_peer(PEER_JAVA);
}

/* ---- 3. re-entrancy seen by the other side, and nobody unlocks the
 * other's lock; the peer reads the hash through its own cluster client ---- */

static void reentrancy_not_owner(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  peer *p = start_peer(kind, 0);
  rlock_client *c = open_client(sharded_for(kind), 0);
  for (int i = 0; i < N_MASTERS; i++) {
    char name[NAME_MAX_LEN], me[OWNER_MAX_LEN], pown[OWNER_MAX_LEN];
    name_on(name, sizeof name, "reentry", kind, m[i]);
    rlock *lock = get_lock(c, name);
    interop_my_owner(me, sizeof me, c);
    peer_owner(p, name, pown, sizeof pown);

    cr_assert_eq(rlock_lock(lock, LONG_LEASE_MS), 0);
    cr_assert_eq(rlock_lock(lock, LONG_LEASE_MS), 0);
    const char *v = peer_call(p, "HGET", REPLY_BOUND_MS, "hget %s %s", name, me);
    cr_assert_str_eq(v, "2", "the %s reads rlock's hold count", peer_label(p));
    const char *err = peer_call(p, "ERROR", REPLY_BOUND_MS, "unlock %s", name);
    cr_assert(strncmp(err, "NOTOWNER", 8) == 0, "the %s's unlock: %s",
              peer_label(p), err);
    peer_call(p, "NOTACQUIRED", REPLY_BOUND_MS, "trylock %s 0 %d", name,
              LONG_LEASE_MS);
    assert_owner_field(name, me, "2");
    cr_assert_eq(rlock_unlock(lock), 0);
    cr_assert_eq(rlock_unlock(lock), 0);
    cr_assert_eq(owner_exists(name), 0);

    peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "lock %s %d", name,
              LONG_LEASE_MS);
    peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "lock %s %d", name,
              LONG_LEASE_MS);
    assert_owner_field(name, pown, "2");
    cr_assert_eq(rlock_try_lock(lock, 0, LONG_LEASE_MS), 0);
    cr_assert_eq(rlock_unlock(lock), RLOCK_ENOTOWNER);
    cr_assert_eq(rlock_force_unlock(lock), 1);
    cr_assert_eq(owner_exists(name), 0);
    rlock_free(lock);
  }
  peer_stop(p);
  rlock_client_free(c);
}

Test(interop_cluster, reentrancy_not_owner_node) {
  reentrancy_not_owner(PEER_NODE);
}
Test(interop_cluster, reentrancy_not_owner_java) {
  reentrancy_not_owner(PEER_JAVA);
}

/* ---- 4. a non-atomic counter: rlock threads and two peer processes ---- */

#define COUNTER_WATCHDOG_MS 3000
#define COUNTER_RLOCK_THREADS 2
#define COUNTER_ROUNDS 100

typedef struct counter_thread {
  rlock *lock;
  const char *key;
  int port; /* the key's owner */
  int rounds, done;
  char error[256];
  rt_thread th;
} counter_thread;

static void counter_main(void *arg) {
  counter_thread *t = arg;
  redisContext *r = rt_node_connect(t->port, 10000);
  for (int i = 0; i < t->rounds; i++) {
    int rc = rlock_lock(t->lock, -1);
    if (rc != 0) {
      snprintf(t->error, sizeof t->error, "rlock_lock: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
      break;
    }
    redisReply *g = redisCommand(r, "GET %s", t->key);
    long long v = (g && g->type == REDIS_REPLY_STRING) ? atoll(g->str) : 0;
    if (g)
      freeReplyObject(g);
    redisReply *s = redisCommand(r, "SET %s %lld", t->key, v + 1);
    bool ok = s && s->type == REDIS_REPLY_STATUS;
    if (s)
      freeReplyObject(s);
    redisReply *l = redisCommand(r, "RPUSH %s:log rlock", t->key);
    if (l)
      freeReplyObject(l);
    rc = rlock_unlock(t->lock);
    if (!ok || rc != 0) {
      snprintf(t->error, sizeof t->error, "round %d: SET %s, unlock %s (%s)",
               i, ok ? "ok" : "failed", rlock_err_name(rc),
               rlock_last_error());
      break;
    }
    t->done++;
  }
  redisFree(r);
}


static void counter(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  char name[NAME_MAX_LEN], key[NAME_MAX_LEN + 16];
  name_on(name, sizeof name, "counter", kind, m[1]);
  /* The counter shares the lock's slot ({name} tag). */
  snprintf(key, sizeof key, "{%s}:value", name);
  int port = rt_cluster_key_owner(key);
  cr_assert_eq(port, m[1]);

  peer *peers[2];
  for (int i = 0; i < 2; i++)
    peers[i] = start_peer(kind, COUNTER_WATCHDOG_MS);
  rlock_client *c1 = open_client(sharded_for(kind), COUNTER_WATCHDOG_MS);
  rlock_client *c2 = open_client(sharded_for(kind), COUNTER_WATCHDOG_MS);
  rlock *l1 = get_lock(c1, name), *l2 = get_lock(c2, name);
  counter_thread th[COUNTER_RLOCK_THREADS];
  memset(th, 0, sizeof th);

  int64_t t0 = rt_now_ms();
  for (int i = 0; i < 2; i++)
    peer_send(peers[i], "count %s %s %d -1 %s%d", name, key, COUNTER_ROUNDS,
              kind_name(kind), i);
  /* The rlock threads start once a peer has counted once: a peer still
   * connecting (node-redisson's cluster client reads the slot map first)
   * would otherwise let rlock's 200 increments run before the peers' 200
   * - mutual exclusion would still be checked, taking turns would not. */
  int64_t started = rt_now_ms();
  while (rt_node_int(port, "LLEN %s:log", key) == 0) {
    cr_assert(rt_now_ms() - started < 60000, "no peer counted in 60 s");
    rt_sleep_ms(1);
  }
  for (int i = 0; i < COUNTER_RLOCK_THREADS; i++) {
    th[i].lock = i == 0 ? l1 : l2;
    th[i].key = key;
    th[i].port = port;
    th[i].rounds = COUNTER_ROUNDS;
    rt_thread_start(&th[i].th, counter_main, &th[i]);
  }
  for (int i = 0; i < COUNTER_RLOCK_THREADS; i++)
    rt_thread_join(&th[i].th, 200000);
  const char *answers[2];
  for (int i = 0; i < 2; i++)
    answers[i] = peer_next_answer(peers[i], 200000);
  int64_t elapsed = rt_now_ms() - t0;
  for (int i = 0; i < COUNTER_RLOCK_THREADS; i++)
    cr_assert_eq(th[i].done, COUNTER_ROUNDS, "rlock thread %d: %s", i,
                 th[i].error);
  for (int i = 0; i < 2; i++)
    cr_assert(strncmp(answers[i], "COUNTED ", 8) == 0, "%s %d: %s",
              peer_label(peers[i]), i, answers[i]);

  long long want = (long long)(COUNTER_RLOCK_THREADS + 2) * COUNTER_ROUNDS;
  char *value = rt_node_str(port, "GET %s", key);
  cr_assert(value != NULL, "the counter was never written");
  long long got = atoll(value);
  free(value);
  interop_report("cluster counter: %d rlock threads + 2 %s peers, %lld "
                 "increments in %" PRId64 " ms",
                 COUNTER_RLOCK_THREADS, kind_name(kind), want, elapsed);
  cr_assert_eq(got, want, "lost updates: counter %lld, expected %lld", got,
               want);
  /* Who incremented, in order. Redisson's locks are not fair: a client
   * that unlocks and locks again at once usually beats the waiters its
   * release message wakes, so each side runs in bursts, and how often the
   * sides alternate is up to the scheduler (loaded CI runs saw 1 or 2
   * handovers, a sanitizer build fewer). What the protocol does promise is
   * checked: the exact counter above, both sides holding the lock in turn
   * (at least one handover), and rlock's acquires having waited for a
   * holder (its contended acquisitions; the peers count throughout: rlock
   * starts once they have counted once). */
  redisReply *log = rt_node_cmd(port, "LRANGE %s:log 0 -1", key);
  cr_assert_eq(log->type, REDIS_REPLY_ARRAY);
  cr_assert_eq((long long)log->elements, want);
  size_t handovers = 0;
  for (size_t i = 1; i < log->elements; i++)
    if ((strcmp(log->element[i - 1]->str, "rlock") == 0) !=
        (strcmp(log->element[i]->str, "rlock") == 0))
      handovers++;
  freeReplyObject(log);
  interop_report("cluster counter: %zu handovers rlock<->peer", handovers);
  cr_assert_geq(handovers, (size_t)1,
                "the lock never went between rlock and the peers");
  uint64_t waited = interop_contended(c1) + interop_contended(c2);
  interop_report("cluster counter: rlock's contended acquisitions: %" PRIu64,
                 waited);
  cr_assert_geq(waited, 1, "no rlock acquire waited for a holder");
  cr_assert_eq(owner_exists(name), 0, "the lock should be free at the end");

  for (int i = 0; i < 2; i++)
    peer_stop(peers[i]);
  rlock_free(l1);
  rlock_free(l2);
  rlock_client_free(c1);
  rlock_client_free(c2);
}

Test(interop_cluster, counter_node) { counter(PEER_NODE); }
Test(interop_cluster, counter_java) { counter(PEER_JAVA); }

/* ---- 5. watchdogs across slots: a lock on every master, renewed for more
 * than three watchdog timeouts, keeps the other side out ---- */

#define WD_MS 3000
#define WD_HOLD_MS 10000

static void watchdog_across_slots(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  char names[N_MASTERS][NAME_MAX_LEN];
  peer *p = start_peer(kind, WD_MS);
  rlock_client *c = open_client(sharded_for(kind), WD_MS);
  rlock *locks[N_MASTERS];

  /* The peer holds one lock per master, renewed by its watchdog. */
  for (int i = 0; i < N_MASTERS; i++) {
    name_on(names[i], sizeof names[i], "wd-peer", kind, m[i]);
    peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "lock %s -1", names[i]);
    locks[i] = get_lock(c, names[i]);
  }
  int64_t t0 = rt_now_ms();
  while (rt_now_ms() - t0 < WD_HOLD_MS) {
    for (int i = 0; i < N_MASTERS; i++) {
      long long ttl = owner_pttl(names[i]);
      cr_assert_gt(ttl, 0, "the %s's lock %s on %d lost its TTL (%lld) at "
                   "%lld ms", peer_label(p), names[i], m[i], ttl,
                   (long long)(rt_now_ms() - t0));
      cr_assert_eq(rlock_try_lock(locks[i], 0, LONG_LEASE_MS), 0);
    }
    rt_sleep_ms(500);
  }
  for (int i = 0; i < N_MASTERS; i++)
    peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "unlock %s", names[i]);
  if (kind == PEER_JAVA)
    cr_assert_geq(peer_event_count(p, "RENEWED"), 3,
                  "the java peer's watchdog never renewed");

  /* rlock holds one lock per master with its watchdog; the peer can't. */
  for (int i = 0; i < N_MASTERS; i++)
    cr_assert_eq(rlock_lock(locks[i], -1), 0);
  t0 = rt_now_ms();
  while (rt_now_ms() - t0 < WD_HOLD_MS) {
    for (int i = 0; i < N_MASTERS; i++) {
      long long ttl = owner_pttl(names[i]);
      cr_assert_gt(ttl, 0, "rlock's lock %s on %d lost its TTL (%lld)",
                   names[i], m[i], ttl);
      cr_assert_eq(rlock_is_held(locks[i]), 1);
    }
    peer_call(p, "NOTACQUIRED", REPLY_BOUND_MS, "trylock %s 0 %d",
              names[rt_now_ms() % N_MASTERS], LONG_LEASE_MS);
    rt_sleep_ms(500);
  }
  for (int i = 0; i < N_MASTERS; i++) {
    cr_assert_eq(rlock_unlock(locks[i]), 0);
    cr_assert_eq(owner_exists(names[i]), 0);
    rlock_free(locks[i]);
  }
  peer_stop(p);
  rlock_client_free(c);
}

Test(interop_cluster, watchdog_across_slots_node) {
  watchdog_across_slots(PEER_NODE);
}
Test(interop_cluster, watchdog_across_slots_java) {
  watchdog_across_slots(PEER_JAVA);
}

/* ---- 6. a crashed peer's lock expires for rlock ---- */

static void crashed_peer_expires(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  char name[NAME_MAX_LEN];
  name_on(name, sizeof name, "crashed", kind, m[2]);
  peer *p = start_peer(kind, 0);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "lock %s 3000", name);
  int64_t t_acquired = rt_now_ms();
  peer_kill(p);
  rlock_client *c = open_client(sharded_for(kind), 0);
  rlock *lock = get_lock(c, name);
  int rc = rlock_try_lock(lock, 10000, LONG_LEASE_MS);
  int64_t at = rt_now_ms() - t_acquired;
  cr_assert_eq(rc, 1, "rlock_try_lock: %d (%s)", rc, rlock_err_name(rc));
  cr_assert_geq(at, 2500, "rlock got a crashed peer's lock after %lld ms, "
                "before its 3000 ms lease", (long long)at);
  interop_report("cluster: a crashed %s peer's 3000 ms lock went to rlock "
                 "after %" PRId64 " ms", kind_name(kind), at);
  cr_assert_eq(rlock_unlock(lock), 0);
  rlock_free(lock);
  rlock_client_free(c);
}

Test(interop_cluster, crashed_node_lock_expires_for_rlock) {
  crashed_peer_expires(PEER_NODE);
}
Test(interop_cluster, crashed_java_lock_expires_for_rlock) {
  crashed_peer_expires(PEER_JAVA);
}

/* ---- 7. force unlock wakes the other side, both ways ---- */

static void force_unlock_wakes(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  bool sharded = sharded_for(kind);
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN];
  name_on(name, sizeof name, "force", kind, m[0]);
  channel_of(channel, sizeof channel, name);
  peer *holder = start_peer(kind, 0);
  rlock_client *c = open_client(sharded, 0);
  rlock *lock = get_lock(c, name);

  /* The peer force-unlocks rlock's waiter free. */
  peer_call(holder, "ACQUIRED", REPLY_BOUND_MS, "lock %s %d", name,
            LONG_LEASE_MS);
  rl_worker w = {0};
  rl_worker_start(&w, c, lock, 10000, LONG_LEASE_MS);
  wait_subscribers(channel, sharded, 1);
  int64_t t_force = rt_now_ms();
  const char *forced =
      peer_call(holder, "FORCED", REPLY_BOUND_MS, "forceunlock %s", name);
  cr_assert_str_eq(forced, "1");
  rl_worker_wait_stage(&w, 2, REPLY_BOUND_MS);
  int64_t latency = net_ms(t_force, w.t_returned);
  cr_assert_eq(w.acquire_rc, 1);
  cr_assert_lt(latency, WAKE_BOUND_MS,
               "rlock woke %" PRId64 " ms after the %s's force unlock",
               latency, peer_label(holder));

  /* rlock force-unlocks while the peer waits behind rlock's hold. */
  peer_send(holder, "lock %s %d", name, LONG_LEASE_MS);
  cr_assert_str_eq(peer_expect_event(holder, "WAITING", REPLY_BOUND_MS),
                   channel);
  wait_subscribers(channel, sharded, 1);
  t_force = rt_now_ms();
  cr_assert_eq(rlock_force_unlock(lock), 1);
  peer_expect(holder, "ACQUIRED", REPLY_BOUND_MS);
  latency = net_ms(t_force, rt_now_ms());
  cr_assert_lt(latency, WAKE_BOUND_MS,
               "the %s woke %" PRId64 " ms after rlock's force unlock",
               peer_label(holder), latency);
  interop_report("cluster: force unlocks woke the other side (%s)",
                 kind_name(kind));
  rl_worker_finish(&w); /* its hold is gone: unlock reports not held */
  peer_call(holder, "UNLOCKED", REPLY_BOUND_MS, "unlock %s", name);
  cr_assert_eq(owner_exists(name), 0);
  peer_stop(holder);
  rlock_free(lock);
  rlock_client_free(c);
}

Test(interop_cluster, force_unlock_wakes_node) { force_unlock_wakes(PEER_NODE); }
Test(interop_cluster, force_unlock_wakes_java) { force_unlock_wakes(PEER_JAVA); }

/* ---- 8. the wire, by MONITOR on the owning node and on another one ---- */

static void wire_on_owner(peer_kind kind) {
  int m[RT_MAX_NODES];
  masters(m);
  bool sharded = sharded_for(kind);
  const char *pub = sharded ? "\"spublish\"" : "\"publish\"";
  char name[NAME_MAX_LEN], channel[CHANNEL_MAX_LEN], needle[CHANNEL_MAX_LEN + 32];
  name_on(name, sizeof name, "wire", kind, m[1]);
  channel_of(channel, sizeof channel, name);
  monitor *own = monitor_start_port(m[1]);
  monitor *other = monitor_start_port(m[2]);

  peer *p = start_peer(kind, 0);
  rlock_client *c = open_client(sharded, 0);
  rlock *lock = get_lock(c, name);
  cr_assert_eq(rlock_lock(lock, LONG_LEASE_MS), 0);
  peer_send(p, "lock %s %d", name, LONG_LEASE_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  wait_subscribers(channel, sharded, 1);
  cr_assert_eq(rlock_unlock(lock), 0); /* rlock's message */
  peer_expect(p, "ACQUIRED", REPLY_BOUND_MS);
  rl_worker w = {0};
  rl_worker_start(&w, c, lock, 10000, LONG_LEASE_MS);
  wait_subscribers(channel, sharded, 1);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "unlock %s", name); /* the peer's */
  rl_worker_wait_stage(&w, 2, REPLY_BOUND_MS);
  cr_assert_eq(w.acquire_rc, 1);
  rl_worker_finish(&w);

  monitor_sync(own);
  monitor_sync(other);
  /* Both releases published on the lock's channel, from a script on the
   * owning node, with the pub/sub command of the mode. */
  snprintf(needle, sizeof needle, "%s \"%s\" \"0\"", pub, channel);
  size_t first = monitor_find(own, 0, needle);
  cr_assert_neq(first, (size_t)-1, "no %s on %d", needle, m[1]);
  cr_assert(strstr(monitor_line(own, first), "lua") != NULL,
            "published outside a script: %s", monitor_line(own, first));
  cr_assert_neq(monitor_find(own, first + 1, needle), (size_t)-1,
                "only one of the two releases published %s on %d", needle,
                m[1]);
  if (sharded) {
    snprintf(needle, sizeof needle, "\"ssubscribe\" \"%s\"", channel);
    cr_assert_neq(monitor_find(own, 0, needle), (size_t)-1,
                  "no SSUBSCRIBE of %s on its owner %d", channel, m[1]);
    cr_assert_eq(monitor_find(own, 0, "\"publish\""), (size_t)-1,
                 "a plain PUBLISH in sharded mode: %s",
                 monitor_line(own, monitor_find(own, 0, "\"publish\"")));
  }
  /* Nothing of this lock on another master (but this test's own PUBSUB
   * NUMSUB, which asks every master). */
  for (size_t i = monitor_find(other, 0, name); i != (size_t)-1;
       i = monitor_find(other, i + 1, name))
    cr_assert(strstr(monitor_line(other, i), "\"PUBSUB\"") != NULL,
              "lock %s showed on %d: %s", name, m[2], monitor_line(other, i));
  interop_report("cluster wire (%s): %s on the owner %d, nothing on %d",
                 kind_name(kind), pub, m[1], m[2]);
  monitor_stop(own);
  monitor_stop(other);
  peer_stop(p);
  rlock_free(lock);
  rlock_client_free(c);
}

Test(interop_cluster, wire_on_owner_node) { wire_on_owner(PEER_NODE); }
Test(interop_cluster, wire_on_owner_java) { wire_on_owner(PEER_JAVA); }

/* ---- control: a pub/sub mode mismatch is heard only by TTL ---- */

/* EVAL + EVALSHA calls node `port` has run to the end: rlock's first
 * try on a node without its script is an EVALSHA answered NOSCRIPT, then
 * the EVALSHA again, and must count as one try. */
static long long node_script_calls(int port) {
  char *info = rt_node_str(port, "INFO commandstats");
  long long total = interop_script_runs(info);
  free(info);
  return total;
}

typedef struct {
  int port;
  long long at_least;
} node_calls_bound;

static bool node_script_calls_reached(void *arg) {
  node_calls_bound *b = arg;
  return node_script_calls(b->port) >= b->at_least;
}

Test(interop_cluster, mode_mismatch_node_vs_sharded_rlock) {
  int m[RT_MAX_NODES];
  masters(m);
  char name[NAME_MAX_LEN];
  name_on(name, sizeof name, "mismatch", PEER_NODE, m[0]);
  peer *p = peer_start(PEER_NODE, 0);
  rlock_client *c = open_client(true, 0); /* rlock's default: sharded */
  rlock *lock = get_lock(c, name);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "lock %s 3000", name);
  int64_t t_acquired = rt_now_ms();
  /* rlock tries, subscribes, and tries once more once subscribed: the
   * release must come after that second try, or the try takes the freed
   * lock and there is no mismatch to see. */
  node_calls_bound tries = {m[0], node_script_calls(m[0]) + 2};
  rl_worker w = {0};
  rl_worker_start(&w, c, lock, 10000, LONG_LEASE_MS);
  char channel[CHANNEL_MAX_LEN];
  channel_of(channel, sizeof channel, name);
  wait_subscribers(channel, true, 1);
  rt_wait_until_what(node_script_calls_reached, &tries, REPLY_BOUND_MS,
                     "rlock's try after subscribing");
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "unlock %s", name); /* at ~0 ms */
  rl_worker_wait_stage(&w, 2, 10000);
  int64_t at = w.t_returned - t_acquired;
  cr_assert_eq(w.acquire_rc, 1);
  /* Not woken by the plain PUBLISH: only the retry at the TTL hint. */
  cr_assert_geq(at, 2000, "woken after %" PRId64 " ms: the plain PUBLISH "
                "reached a sharded subscriber?", at);
  interop_report("cluster: node-redisson vs sharded rlock: woken only by the "
                 "TTL, after %" PRId64 " ms", at);
  rl_worker_finish(&w);
  peer_stop(p);
  rlock_free(lock);
  rlock_client_free(c);
}

/* ---- the other kinds, Java-like peer, sharded: fair lock, semaphore and
 * latch on three different masters, woken by message both ways ---- */

typedef struct bg_call {
  int (*fn)(struct bg_call *);
  void *obj;
  int64_t wait_ms;
  int rc;
  int64_t t_returned;
  atomic_int done;
  rt_thread th;
} bg_call;

static void bg_main(void *arg) {
  bg_call *b = arg;
  b->rc = b->fn(b);
  b->t_returned = rt_now_ms();
  atomic_store(&b->done, 1);
}

static bool bg_done(void *arg) {
  return atomic_load(&((bg_call *)arg)->done) != 0;
}

static void bg_start(bg_call *b, int (*fn)(bg_call *), void *obj,
                     int64_t wait_ms) {
  b->fn = fn;
  b->obj = obj;
  b->wait_ms = wait_ms;
  atomic_init(&b->done, 0);
  rt_thread_start(&b->th, bg_main, b);
}

/* Waits for the call, asserts it returned `want` within WAKE_BOUND_MS of
 * t_event (net of stalls), and reports. */
static void bg_expect(bg_call *b, int want, int64_t t_event,
                      const char *what) {
  interop_wait_until(bg_done, b, REPLY_BOUND_MS, what);
  rt_thread_join(&b->th, REPLY_BOUND_MS);
  cr_assert_eq(b->rc, want, "%s: %d (%s)", what, b->rc,
               b->rc < 0 ? rlock_err_name(b->rc) : "");
  int64_t latency = net_ms(t_event, b->t_returned);
  interop_report("cluster, sharded: %s: %" PRId64 " ms", what, latency);
  cr_assert_lt(latency, WAKE_BOUND_MS, "%s took %" PRId64 " ms: not woken "
               "by the message", what, latency);
}

static int sem_take(bg_call *b) {
  return rlock_semaphore_try_acquire(b->obj, 1, b->wait_ms);
}
static int latch_wait(bg_call *b) {
  return rlock_latch_await(b->obj, b->wait_ms);
}

Test(interop_cluster, kinds_java_sharded_both_ways) {
  int m[RT_MAX_NODES];
  masters(m);
  peer *p = start_peer(PEER_JAVA, 0);
  rlock_client *c = open_client(true, 0);
  char fair[NAME_MAX_LEN], sem[NAME_MAX_LEN], lt[NAME_MAX_LEN],
      chan[CHANNEL_MAX_LEN + OWNER_MAX_LEN], braced[NAME_MAX_LEN];

  /* Fair lock on master 0: the Java-like peer holds, rlock queues behind
   * it on its own channel, the peer's unlock wakes it. */
  name_on(fair, sizeof fair, "fair", PEER_JAVA, m[0]);
  rlock *fl = NULL;
  cr_assert_eq(rlock_new_fair(c, fair, &fl), 0);
  peer_call(p, "ACQUIRED", REPLY_BOUND_MS, "flock %s %d", fair, LONG_LEASE_MS);
  rl_worker w = {0};
  rl_worker_start(&w, c, fl, 10000, LONG_LEASE_MS);
  rl_worker_wait_stage(&w, 1, REPLY_BOUND_MS);
  interop_braced(braced, sizeof braced, fair);
  /* The worker's owner is set before it calls. */
  snprintf(chan, sizeof chan, "redisson_lock__channel:%s:%s", braced,
           w.owner);
  wait_subscribers(chan, true, 1);
  int64_t t0 = rt_now_ms();
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", fair);
  rl_worker_wait_stage(&w, 2, REPLY_BOUND_MS);
  cr_assert_eq(w.acquire_rc, 1, "fair try_lock: %d", w.acquire_rc);
  int64_t fair_ms = net_ms(t0, w.t_returned);
  interop_report("cluster, sharded: java fair unlock -> rlock: %" PRId64 " ms",
                 fair_ms);
  cr_assert_lt(fair_ms, WAKE_BOUND_MS, "fair: %" PRId64 " ms", fair_ms);
  /* ...and rlock's unlock wakes the peer queued behind it. */
  rl_worker_finish(&w);
  cr_assert_eq(w.unlock_rc[0], 0);
  cr_assert_eq(rlock_lock(fl, LONG_LEASE_MS), 0);
  peer_send(p, "flock %s %d", fair, LONG_LEASE_MS);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  t0 = rt_now_ms();
  cr_assert_eq(rlock_unlock(fl), 0);
  peer_expect(p, "ACQUIRED", REPLY_BOUND_MS);
  fair_ms = net_ms(t0, rt_now_ms());
  cr_assert_lt(fair_ms, WAKE_BOUND_MS, "fair, to the peer: %" PRId64 " ms",
               fair_ms);
  peer_call(p, "UNLOCKED", REPLY_BOUND_MS, "funlock %s", fair);
  rlock_free(fl);

  /* Semaphore on master 1: no permits; the peer's release wakes rlock's
   * acquire, rlock's release wakes the peer's. */
  name_on(sem, sizeof sem, "sem", PEER_JAVA, m[1]);
  rlock_semaphore *s = NULL;
  cr_assert_eq(rlock_semaphore_new(c, sem, &s), 0);
  bg_call b = {0};
  bg_start(&b, sem_take, s, 10000);
  interop_braced(braced, sizeof braced, sem);
  snprintf(chan, sizeof chan, "redisson_sc:%s", braced);
  wait_subscribers(chan, true, 1);
  t0 = rt_now_ms();
  peer_call(p, "RELEASED", REPLY_BOUND_MS, "semrelease %s 1", sem);
  bg_expect(&b, 1, t0, "java semaphore release -> rlock acquire");
  peer_send(p, "semacquire %s 1", sem);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  t0 = rt_now_ms();
  cr_assert_eq(rlock_semaphore_release(s, 1), 0);
  peer_expect(p, "ACQUIRED", REPLY_BOUND_MS);
  int64_t sem_ms = net_ms(t0, rt_now_ms());
  interop_report("cluster, sharded: rlock semaphore release -> java: %" PRId64
                 " ms", sem_ms);
  cr_assert_lt(sem_ms, WAKE_BOUND_MS, "semaphore, to the peer: %" PRId64 " ms",
               sem_ms);
  rlock_semaphore_free(s);

  /* Latch on master 2: the peer's count-down opens rlock's await, and
   * rlock's opens the peer's. */
  name_on(lt, sizeof lt, "latch", PEER_JAVA, m[2]);
  rlock_latch *l = NULL;
  cr_assert_eq(rlock_latch_new(c, lt, &l), 0);
  peer_call(p, "RESULT", REPLY_BOUND_MS, "lttryset %s 1", lt);
  bg_call a = {0};
  bg_start(&a, latch_wait, l, 10000);
  snprintf(chan, sizeof chan, "redisson_countdownlatch__channel__{%s}", lt);
  wait_subscribers(chan, true, 1);
  t0 = rt_now_ms();
  peer_call(p, "COUNTEDDOWN", REPLY_BOUND_MS, "ltcountdown %s", lt);
  bg_expect(&a, 1, t0, "java count-down -> rlock await");
  cr_assert_eq(rlock_latch_try_set_count(l, 1), 1);
  peer_send(p, "ltawait %s 10000", lt);
  peer_expect_event(p, "WAITING", REPLY_BOUND_MS);
  t0 = rt_now_ms();
  cr_assert_eq(rlock_latch_count_down(l), 0);
  peer_expect(p, "OPENED", REPLY_BOUND_MS);
  int64_t lt_ms = net_ms(t0, rt_now_ms());
  interop_report("cluster, sharded: rlock count-down -> java await: %" PRId64
                 " ms", lt_ms);
  cr_assert_lt(lt_ms, WAKE_BOUND_MS, "latch, to the peer: %" PRId64 " ms",
               lt_ms);
  rlock_latch_free(l);

  peer_stop(p);
  rlock_client_free(c);
}
