/* A shared counter under contention (issue 32): rlock threads and a real
 * Java Redisson client's threads (`count LOCK KEY N`: lock, GET, SET +1,
 * unlock) increment one value under one lock; a lost update would show
 * broken exclusion. RLock, fair and write locks; on the standalone server,
 * on a 3-master Redis Cluster and through Sentinel (one JVM per topology,
 * started in its test). */
#include "rs.h"
#include "topo_harness.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define C_THREADS 2
#define J_THREADS 2
#define ROUNDS 100
#define COUNT_BOUND_MS 60000
/* The counters' JVMs take Redisson's default lease (its watchdog, 30 s),
 * not the suite's short one (RS_WATCHDOG_MS, 2 s, for the expiry tests):
 * with 2 s, a JVM stalled for about 1.3 s on a loaded machine let Java's
 * hold expire under it, and its unlock answered IllegalMonitorState (one
 * clean-clone CI run). The counters check exclusion, not expiry. */
#define COUNTER_WATCHDOG_MS 30000

/* What the C threads of one counter share. The last value a C thread
 * wrote is read and written only under the lock, so a value read under it
 * that differs from it was written by Java: a handover from Java to C. */
typedef struct cshared {
  _Atomic long long last_c;
  atomic_int handovers;
} cshared;

typedef struct cctr {
  rlock *lock;
  int port; /* where the counter key lives */
  const char *key;
  int done;
  cshared *sh;
} cctr;

static int cctr_fn(void *arg) {
  cctr *m = arg;
  redisContext *r = redisConnect("127.0.0.1", m->port);
  if (r == NULL || r->err)
    return -1;
  uint64_t owner = rlock_owner_new();
  int rc = 0;
  for (int i = 0; i < ROUNDS && rc == 0; i++) {
    rc = rlock_lock_owner(m->lock, owner, -1);
    if (rc != 0)
      break;
    redisReply *g = redisCommand(r, "GET %s", m->key);
    long long v = (g && g->type == REDIS_REPLY_STRING) ? atoll(g->str) : 0;
    freeReplyObject(g);
    if (v != atomic_load(&m->sh->last_c))
      atomic_fetch_add(&m->sh->handovers, 1);
    atomic_store(&m->sh->last_c, v + 1);
    redisReply *s = redisCommand(r, "SET %s %lld", m->key, v + 1);
    if (s == NULL || s->type != REDIS_REPLY_STATUS)
      rc = -2;
    freeReplyObject(s);
    int u = rlock_unlock_owner(m->lock, owner);
    if (rc == 0 && u != 0)
      rc = u;
    if (rc == 0)
      m->done++;
    /* work outside the lock: without it rlock's threads re-take the
     * (unfair) lock before a woken Java waiter's retry arrives, and run
     * all their rounds in a row */
    rs_sleep_ms(2);
  }
  redisFree(r);
  return rc;
}

/* kinds: C getter and Java prefix */
typedef struct ckind {
  const char *label;
  int (*get)(rlock_client *, const char *, rlock **);
  const char *jprefix;
} ckind;

static const ckind CKINDS[] = {
    {"lock", rlock_new, ""},
    {"fair", rlock_new_fair, "F/"},
    {"write", rlock_new_write, "W/"},
};

/* Runs the three counters on (c, p); key_port(key) says where a key
 * lives. */
static void counters(const char *where, rlock_client *c, rs_peer *p,
                     int (*key_port)(const char *)) {
  for (size_t k = 0; k < sizeof CKINDS / sizeof CKINDS[0]; k++) {
    char lname[96], key[96];
    rs_name(lname, sizeof lname, "ctr");
    rs_name(key, sizeof key, "ctrval");
    rlock *l;
    cr_assert_eq(CKINDS[k].get(c, lname, &l), 0);
    int64_t t0 = rs_now_ms();
    for (int j = 0; j < J_THREADS; j++) {
      char tag[8];
      snprintf(tag, sizeof tag, "J%d", j);
      rs_send(p, tag, "count %s%s %s %d", CKINDS[k].jprefix, lname, key, ROUNDS);
    }
    /* Java is counting (its JVM's first calls on a cluster take a while)
     * before rlock's threads start, so that the two really overlap */
    int64_t deadline = rs_now_ms() + COUNT_BOUND_MS;
    for (;;) {
      redisReply *r = rt_node_cmd(key_port(key), "GET %s", key);
      long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
      freeReplyObject(r);
      if (v >= 1)
        break;
      cr_assert(rs_now_ms() < deadline, "%s %s: Java did not start counting", where, CKINDS[k].label);
      rs_sleep_ms(2);
    }
    cctr m[C_THREADS];
    rs_task t[C_THREADS];
    cshared sh = {0};
    for (int i = 0; i < C_THREADS; i++) {
      m[i] = (cctr){l, key_port(key), key, 0, &sh};
      rs_task_start(&t[i], cctr_fn, &m[i]);
    }
    for (int i = 0; i < C_THREADS; i++)
      cr_assert_eq(rs_task_join(&t[i], COUNT_BOUND_MS), 0, "%s %s: C thread %d failed after %d rounds",
                   where, CKINDS[k].label, i, m[i].done);
    for (int j = 0; j < J_THREADS; j++) {
      char tag[8];
      snprintf(tag, sizeof tag, "J%d", j);
      const char *a = rs_ok(p, tag, COUNT_BOUND_MS);
      cr_assert_eq(atoi(a), ROUNDS, "%s %s: Java thread %d did %s rounds", where, CKINDS[k].label, j, a);
    }
    int64_t took = rs_now_ms() - t0;
    redisReply *r = rt_node_cmd(key_port(key), "GET %s", key);
    cr_assert(r->type == REDIS_REPLY_STRING, "%s: no counter", where);
    long long v = atoll(r->str);
    freeReplyObject(r);
    int handovers = atomic_load(&sh.handovers);
    rs_report("%s %s counter: %lld of %d (C %d x %d, Java %d x %d) in %" PRId64
              " ms, %d handovers from Java to C",
              where, CKINDS[k].label, v, (C_THREADS + J_THREADS) * ROUNDS, C_THREADS,
              ROUNDS, J_THREADS, ROUNDS, took, handovers);
    cr_assert_eq(v, (C_THREADS + J_THREADS) * ROUNDS, "%s %s: lost updates", where, CKINDS[k].label);
    /* The sides took turns: under the fair lock (first come, first
     * served across both clients) Java wrote between two C rounds many
     * times (47-158 seen). The unfair kinds are only reported: their
     * turns depend on scheduling (1-122 seen), and one side may run most
     * of its rounds in a row. */
    if (strcmp(CKINDS[k].label, "fair") == 0)
      cr_assert_geq(handovers, 10, "%s fair: the sides did not take turns", where);
    rlock_free(l);
  }
}

/* The counters on a JVM of their own against TARGET (a port,
 * "cluster:..." or "sentinel:..."), with COUNTER_WATCHDOG_MS, and an rlock
 * client on URI (NULL: the suite's server). */
static void counters_on(const char *where, const char *target, const char *uri,
                        int (*key_port)(const char *)) {
  rs_jvm *j = rs_jvm_start(target, COUNTER_WATCHDOG_MS);
  rs_peer *p = rs_jvm_connect(j);
  rlock_client *c = rs_client(uri, 0);
  counters(where, c, p, key_port);
  rlock_client_free(c);
  rs_close(p);
  rs_jvm_stop(j);
}

static int standalone_port(const char *key) {
  (void)key;
  return rs_port();
}

Test(counter, standalone, .timeout = 120) {
  char target[16];
  snprintf(target, sizeof target, "%d", rs_port());
  counters_on("standalone", target, NULL, standalone_port);
}

static int cluster_port(const char *key) { return rt_cluster_key_owner(key); }

Test(topo, cluster_counter, .fini = rt_topo_stop_all, .timeout = 180) {
  rt_cluster_start(3, 0);
  int masters[3];
  cr_assert_eq(rt_cluster_masters(masters, 3), 3);
  char target[160];
  snprintf(target, sizeof target, "cluster:127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
           masters[0], masters[1], masters[2]);
  counters_on("cluster", target, rt_cluster_uri(), cluster_port);
}

static int sentinel_port(const char *key) {
  (void)key;
  return rt_sentinel_master_port();
}

Test(topo, sentinel_counter, .fini = rt_topo_stop_all, .timeout = 180) {
  rt_sentinel_start();
  char target[200];
  snprintf(target, sizeof target, "sentinel:mymaster:127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
           rt_sentinel_port(0), rt_sentinel_port(1), rt_sentinel_port(2));
  counters_on("sentinel", target, rt_sentinel_uri(), sentinel_port);
}
