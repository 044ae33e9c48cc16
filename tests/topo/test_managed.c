/* What managed services and proxies do to rlock (issue 27), against real
 * servers: a master and replica without WAIT (rename-command, as a service
 * that lacks it), the capability probes at connect, and CLIENT SETINFO. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "topo_client.h"

static void nowait_init(void) {
  static const char *const args[] = {"--rename-command", "WAIT", "", NULL};
  rt_sentinel_data_args(args);
  rt_sentinel_start();
}

TestSuite(sentinel_nowait, .init = nowait_init, .fini = rt_topo_stop_all,
          .timeout = 120);

/* WAIT renamed away on the master (and its replica): the probe at connect
 * finds it unknown, replica sync is off for that node - acquires succeed
 * (before: every acquire's WAIT was refused, RLOCK_ENOREPLICA every time)
 * and the client says why, once. */
Test(sentinel_nowait, acquires_succeed_sync_reported_off) {
  int master = rt_sentinel_master_port();
  redisReply *w = rt_node_cmd(master, "WAIT 0 0");
  cr_assert_eq(w->type, REDIS_REPLY_ERROR, "WAIT still there");
  freeReplyObject(w);
  rlock_options o;
  rlock_options_init(&o);
  o.replica_sync_timeout_ms = 300;
  rlock_client *c = tc_open(rt_sentinel_uri(), &o);
  const char *report = rlock__net_sync_report(rlock__client_net(c));
  cr_assert(report != NULL && strstr(report, "replica sync is off") &&
                strstr(report, "unknown command"),
            "report: %s", report ? report : "(none)");
  char name[64];
  rt_key(name, sizeof name, "nowait");
  rlock *l = tc_lock(c, name);
  for (int i = 0; i < 3; i++) {
    TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock without WAIT");
    cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 1);
    TC_EQ(rlock_unlock(l), 1, "unlock");
  }
  cr_assert_eq(rlock__net_sync_report(rlock__client_net(c)), report,
               "reported once");
  rlock_free(l);
  rlock_client_close(c);
}

/* ---- a cluster ---- */

static void cluster3(void) { rt_cluster_start(3, 0); }

TestSuite(managed_cluster, .init = cluster3, .fini = rt_topo_stop_all,
          .timeout = 120);

/* MONITOR connections on every master, started before a client opens. */
typedef struct {
  redisContext *mon[RT_MAX_NODES];
  int n;
} monitors;

static void monitors_start(monitors *m) {
  int ports[RT_MAX_NODES];
  m->n = rt_cluster_masters(ports, RT_MAX_NODES);
  for (int i = 0; i < m->n; i++) {
    m->mon[i] = rt_node_connect(ports[i], 3000);
    redisReply *r = redisCommand(m->mon[i], "MONITOR");
    cr_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
  }
}

/* Appends every monitored line containing `needle` (case-insensitive) to
 * out, and frees the monitors. */
static void monitors_collect(monitors *m, const char *needle, char *out,
                             size_t n) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < m->n; i++) {
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    redisSetTimeout(m->mon[i], tv);
    void *rv = NULL;
    while (redisGetReply(m->mon[i], &rv) == REDIS_OK && rv) {
      redisReply *r = rv;
      if (r->type == REDIS_REPLY_STATUS && strcasestr(r->str, needle)) {
        const char *p = strchr(r->str, ']');
        int w = snprintf(out + used, n - used, "%s\n", p ? p + 2 : r->str);
        if (w > 0 && (size_t)w < n - used)
          used += (size_t)w;
      }
      freeReplyObject(r);
      rv = NULL;
    }
    redisFree(m->mon[i]);
  }
}

/* The sharded pub/sub probe carries one channel argument (Azure Managed
 * Redis never answers the bare PUBSUB SHARDNUMSUB), and the client goes
 * sharded on its answer. */
Test(managed_cluster, shardnumsub_probe_has_a_channel) {
  monitors m;
  monitors_start(&m);
  rlock_client *c = tc_open(rt_cluster_uri(), NULL);
  char seen[4000];
  monitors_collect(&m, "shardnumsub", seen, sizeof seen);
  cr_assert(strstr(seen, "\"PUBSUB\" \"SHARDNUMSUB\" \"0\"\n") != NULL,
            "the probe as the masters saw it:\n%s", seen);
  cr_assert(strstr(seen, "\"PUBSUB\" \"SHARDNUMSUB\"\n") == NULL,
            "a bare probe was sent:\n%s", seen);
  cr_assert(rlock__client_net(c)->sharded, "not sharded after the probe");
  rlock_client_close(c);
}

/* ---- WAITAOF ---- */

static void aof_init(void) {
  static const char *const args[] = {"--appendonly", "yes", NULL};
  rt_sentinel_data_args(args);
  rt_sentinel_start();
}

TestSuite(sentinel_aof, .init = aof_init, .fini = rt_topo_stop_all,
          .timeout = 120);

/* A MONITOR connection to port. */
static redisContext *monitor_on(int port) {
  redisContext *mon = rt_node_connect(port, 3000);
  redisReply *mr = redisCommand(mon, "MONITOR");
  cr_assert(mr && mr->type == REDIS_REPLY_STATUS);
  freeReplyObject(mr);
  return mon;
}

/* Lines a MONITOR connection has buffered that mention WAIT (WAITAOF
 * included) or `key`, as "cmd args" one per line; the connection is freed
 * (its read timed out). */
static void monitor_lines(redisContext *mon, const char *key, char *out,
                          size_t n) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
  redisSetTimeout(mon, tv);
  size_t used = 0;
  out[0] = '\0';
  void *rv = NULL;
  while (redisGetReply(mon, &rv) == REDIS_OK && rv) {
    redisReply *r = rv;
    if (r->type == REDIS_REPLY_STATUS &&
        (strcasestr(r->str, "\"wait") || strstr(r->str, key))) {
      const char *p = strchr(r->str, ']');
      int w = snprintf(out + used, n - used, "%.120s\n", p ? p + 2 : r->str);
      if (w > 0 && (size_t)w < n - used)
        used += (size_t)w;
    }
    freeReplyObject(r);
    rv = NULL;
  }
  redisFree(mon);
}

/* appendonly yes on master and replica. AUTO (the default): where the
 * server knows WAITAOF (Redis 7.2+, Valkey) each acquire and release is
 * followed by WAITAOF 1 1 <timeout>; where it does not (Redis 7.0) the
 * probe's refusal keeps WAIT 1. replica_sync_mode WAIT: WAIT either way. */
Test(sentinel_aof, auto_uses_waitaof_where_known) {
  int master = rt_sentinel_master_port();
  redisReply *pr = rt_node_cmd(master, "WAITAOF 0 0 0");
  bool has_waitaof = pr->type == REDIS_REPLY_ARRAY;
  freeReplyObject(pr);
  redisContext *mon = monitor_on(master);
  rlock_client *c = tc_open(rt_sentinel_uri(), NULL);
  rlock_options ow;
  rlock_options_init(&ow);
  ow.replica_sync_mode = RLOCK_REPLICA_SYNC_WAIT;
  rlock_client *cw = tc_open(rt_sentinel_uri(), &ow);
  char name[64], namew[64];
  rt_key(name, sizeof name, "aof");
  rt_key(namew, sizeof namew, "aofw");
  rlock *l = tc_lock(c, name), *lw = tc_lock(cw, namew);
  TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock (AUTO)");
  cr_assert_eq(rt_node_int(rt_sentinel_replica_port(), "EXISTS %s", name), 1);
  TC_EQ(rlock_unlock(l), 1, "unlock (AUTO)");
  char seen[8000];
  monitor_lines(mon, name, seen, sizeof seen);
  const char *want = has_waitaof ? "\"WAITAOF\" \"1\" \"1\" \"1000\""
                                 : "\"WAIT\" \"1\" \"1000\"";
  const char *lock_line = strstr(seen, name);
  cr_assert(lock_line != NULL, "no acquire seen:\n%s", seen);
  const char *after = strstr(lock_line, want);
  cr_assert(after != NULL, "%s not behind the acquire (server %s "
            "WAITAOF):\n%s", want, has_waitaof ? "has" : "lacks", seen);

  mon = monitor_on(master);
  TC_EQ(rlock_try_lock(lw, 0, 10000), 1, "lock (WAIT mode)");
  TC_EQ(rlock_unlock(lw), 1, "unlock (WAIT mode)");
  monitor_lines(mon, namew, seen, sizeof seen);
  lock_line = strstr(seen, namew);
  cr_assert(lock_line != NULL, "no acquire seen:\n%s", seen);
  cr_assert(strstr(lock_line, "\"WAIT\" \"1\" \"1000\"") != NULL &&
                strstr(lock_line, "\"WAITAOF\" \"1\"") == NULL,
            "WAIT mode:\n%s", seen);
  rlock_free(l);
  rlock_free(lw);
  rlock_client_close(cw);
  rlock_client_close(c);
}

/* A cluster behind one slot-routing endpoint that refuses cross-slot
 * commands (rt_slot_proxy, as Envoy): a redis:// client finds out with
 * the cross-slot probe at connect and renews its watchdog locks in
 * batches of one slot each. 300 locks with a 1 s watchdog stay held for
 * 5 s (before: the mixed renewal batches were refused with CROSSSLOT and
 * every lock expired after 1 s). */
Test(managed_cluster, cluster_behind_a_proxy_keeps_300_locks) {
  int port = rt_slot_proxy_start();
  char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 1000;
  rlock_client *c = tc_open(uri, &o);
  cr_assert_geq(rt_slot_proxy_refused(), 1, "the probe was not refused");
  enum { N = 300 };
  static char names[N][48];
  static rlock *locks[N];
  for (int i = 0; i < N; i++) {
    rt_key(names[i], sizeof names[i], "px");
    locks[i] = tc_lock(c, names[i]);
    TC_EQ(rlock_try_lock(locks[i], 0, -1), 1, "lock through the proxy");
  }
  long refused = rt_slot_proxy_refused();
  rt_sleep_ms(5000);
  int held = 0;
  char missing[256] = "";
  for (int i = 0; i < N; i++) {
    int owner = rt_cluster_key_owner(names[i]);
    long long pttl = rt_node_int(owner, "PTTL %s", names[i]);
    if (pttl > 0)
      held++;
    else if (strlen(missing) < 200)
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
               " %.40s(%lld)", names[i], pttl);
  }
  cr_assert_eq(held, N, "%d of %d locks held after 5 s; refused with "
               "CROSSSLOT since the locks: %ld; gone:%s", held, N,
               rt_slot_proxy_refused() - refused, missing);
  cr_assert_eq(rt_slot_proxy_refused(), refused, "cross-slot batches sent");
  for (int i = 0; i < N; i++) {
    TC_EQ(rlock_unlock(locks[i]), 1, "unlock through the proxy");
    rlock_free(locks[i]);
  }
  rlock_client_close(c);
  rt_slot_proxy_stop();
}
