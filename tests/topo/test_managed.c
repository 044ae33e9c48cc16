/* What managed services and proxies do to rlock (issue 27), against real
 * servers: a master and replica without WAIT (rename-command, as a service
 * that lacks it), the capability probes at connect, and CLIENT SETINFO. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_rec.h"
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
  /* The same through the public call, as rlock status prints it. */
  rlock_client_caps caps;
  rlock_client_caps_init(&caps);
  TC_EQ(rlock_client_capabilities(c, &caps), 0, "rlock_client_capabilities");
  cr_assert_eq(caps.replica_sync_off, 1);
  cr_assert_str_eq(caps.replica_sync_note, report);
  /* A caller built with a header that knew only struct_size gets nothing
   * written past it. */
  struct {
    rlock_client_caps caps;
    char guard;
  } old_caller;
  memset(&old_caller, 0x5a, sizeof old_caller);
  old_caller.caps.struct_size = sizeof(size_t);
  TC_EQ(rlock_client_capabilities(c, &old_caller.caps), 0, "short struct");
  cr_assert_eq(old_caller.caps.replica_sync_off, 0x5a5a5a5a);
  cr_assert_eq(old_caller.guard, 0x5a);
  old_caller.caps.struct_size = sizeof(rlock_client_caps) + 1;
  TC_EQ(rlock_client_capabilities(c, &old_caller.caps), RLOCK_EINVAL,
        "struct_size too large");
  TC_EQ(rlock_client_capabilities(NULL, &caps), RLOCK_EINVAL, "NULL client");
  TC_EQ(rlock_client_capabilities(c, NULL), RLOCK_EINVAL, "NULL caps");
  char name[64];
  rt_key(name, sizeof name, "nowait");
  rlock *l = tc_lock(c, name);
  for (int i = 0; i < 3; i++) {
    TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock without WAIT");
    cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 1);
    TC_EQ(rlock_unlock(l), 0, "unlock");
  }
  cr_assert_eq(rlock__net_sync_report(rlock__client_net(c)), report,
               "reported once");
  rlock_free(l);
  rlock_client_free(c);
}

static void losewait_init(void) {
  static const char *const args[] = {"--rename-command", "WAIT", "", NULL};
  rt_sentinel_replica_args(args);
  rt_sentinel_start();
}

TestSuite(sentinel_losewait, .init = losewait_init,
          .fini = rt_topo_stop_all, .timeout = 120);

/* A failover to a replica that lacks WAIT (bad input, issue 27): before it,
 * acquires are confirmed by WAIT 1; after it, the new master's probe finds
 * WAIT unknown, replica sync is off for that node and said so, acquires
 * succeed without waiting for a confirmation that cannot come - no acquire
 * is held up past the command timeout, none is retried forever. */
Test(sentinel_losewait, failover_to_a_master_without_wait) {
  int master = rt_sentinel_master_port();
  int replica = rt_sentinel_replica_port();
  redisReply *w = rt_node_cmd(replica, "WAIT 0 0");
  cr_assert_eq(w->type, REDIS_REPLY_ERROR, "the replica still has WAIT");
  freeReplyObject(w);
  rlock_options o;
  rlock_options_init(&o);
  o.replica_sync_timeout_ms = 300;
  o.command_timeout_ms = 2000;
  rlock_client *c = tc_open(rt_sentinel_uri(), &o);
  rlock_client_caps caps;
  rlock_client_caps_init(&caps);
  TC_EQ(rlock_client_capabilities(c, &caps), 0, "caps before");
  cr_assert_eq(caps.replica_sync_off, 0, "note: %s", caps.replica_sync_note);
  char name[64];
  rt_key(name, sizeof name, "losewait");
  rlock *l = tc_lock(c, name);
  TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock with WAIT");
  TC_EQ(rlock_unlock(l), 0, "unlock");
  char *stats = rt_node_str(master, "INFO commandstats");
  cr_assert(strstr(stats, "cmdstat_wait:") != NULL,
            "the first master saw no WAIT:\n%s", stats);
  free(stats);

  int next = rt_sentinel_failover(20000);
  cr_assert_eq(next, replica);
  /* The first acquire on the new master may still meet the switch (its
   * WAIT refused before the probe ran: RLOCK_ENOREPLICA, undone); within a
   * few seconds every acquire succeeds, each well inside the bound. */
  int64_t deadline = rt_topo_now_ms() + 15000;
  int ok = 0;
  while (ok < 3) {
    cr_assert(rt_topo_now_ms() < deadline, "no acquire succeeded on the new "
              "master without WAIT (last: %s)", rlock_last_error());
    int64_t t0 = rt_topo_now_ms();
    int rc = rlock_try_lock(l, 0, 10000);
    int64_t took = rt_topo_now_ms() - t0;
    cr_assert_leq(took, o.command_timeout_ms + 500, "acquire took %lld ms",
                  (long long)took);
    if (rc == 1) {
      cr_assert_eq(rt_node_int(next, "EXISTS %s", name), 1);
      TC_EQ(rlock_unlock(l), 0, "unlock");
      ok++;
      continue;
    }
    /* Never confirmed when it was not: a failed acquire leaves no key. */
    cr_assert(rc == RLOCK_ENOREPLICA || rc == RLOCK_ECONN ||
                  rc == RLOCK_ETIMEDOUT,
              "rc %d: %s", rc, rlock_last_error());
    cr_assert_eq(rt_node_int(next, "EXISTS %s", name), 0,
                 "a failed acquire (%d) left the key", rc);
    rt_topo_sleep_ms(200);
  }
  TC_EQ(rlock_client_capabilities(c, &caps), 0, "caps after");
  cr_assert_eq(caps.replica_sync_off, 1);
  char port_s[16];
  snprintf(port_s, sizeof port_s, ":%d", next);
  cr_assert(strstr(caps.replica_sync_note, port_s) != NULL &&
                strstr(caps.replica_sync_note, "unknown command") != NULL,
            "note: %s", caps.replica_sync_note);
  rlock_free(l);
  rlock_client_free(c);
}

/* Diagnostics (issue 28, item 1): the master the sentinels name is said
 * once, with its address; the server without WAIT gives one WARN line -
 * the note rlock_client_caps carries - once, however many locks follow. */
Test(sentinel_nowait, diagnostics_say_replica_sync_off_once) {
  int master = rt_sentinel_master_port();
  rlock_options o;
  rlock_options_init(&o);
  o.replica_sync_timeout_ms = 300;
  diag_rec rec;
  rec_init(&rec, &o);
  rlock_client *c = tc_open(rt_sentinel_uri(), &o);
  char at[64];
  snprintf(at, sizeof at, "127.0.0.1:%d", master);
  char name[64];
  rt_key(name, sizeof name, "diag-nowait");
  rlock *l = tc_lock(c, name);
  for (int i = 0; i < 3; i++) {
    TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock without WAIT");
    TC_EQ(rlock_unlock(l), 0, "unlock");
  }
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "master 'mymaster' is at", at,
             "(GET-MASTER-ADDR-BY-NAME)");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_WARN, "replica sync is off on", at,
             "unknown command");
  REC_EXPECT(&rec, 1, -1, "replica sync");
  rlock_client_caps caps;
  rlock_client_caps_init(&caps);
  TC_EQ(rlock_client_capabilities(c, &caps), 0, "caps");
  /* In the same words as the caps note. */
  REC_EXPECT(&rec, 1, RLOCK_DIAG_WARN, caps.replica_sync_note);
  REC_EXPECT(&rec, 1, RLOCK_DIAG_DEBUG, "probes on", at, "WAIT no");
  rlock_free(l);
  rlock_client_free(c);
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
  out[0] = '\0';
  const char *needles[] = {needle, NULL};
  for (int i = 0; i < m->n; i++) {
    tc_monitor_lines(m->mon[i], needles, 1000, out, n);
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
  rlock_client_free(c);
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
  const char *needles[] = {"\"wait", key, NULL};
  out[0] = '\0';
  tc_monitor_lines(mon, needles, 120, out, n);
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
  TC_EQ(rlock_unlock(l), 0, "unlock (AUTO)");
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
  TC_EQ(rlock_unlock(lw), 0, "unlock (WAIT mode)");
  monitor_lines(mon, namew, seen, sizeof seen);
  lock_line = strstr(seen, namew);
  cr_assert(lock_line != NULL, "no acquire seen:\n%s", seen);
  cr_assert(strstr(lock_line, "\"WAIT\" \"1\" \"1000\"") != NULL &&
                strstr(lock_line, "\"WAITAOF\" \"1\"") == NULL,
            "WAIT mode:\n%s", seen);
  rlock_free(l);
  rlock_free(lw);
  rlock_client_free(cw);
  rlock_client_free(c);
}

/* PX_N locks with a PX_WATCHDOG_MS watchdog, taken through the slot
 * proxy, and how long the tests keep them (over two watchdog timeouts: a
 * lock whose renewals fail is gone by then). */
enum { PX_N = 300, PX_WATCHDOG_MS = 3000, PX_HOLD_MS = 7000 };
typedef struct {
  rlock_client *c;
  char names[PX_N][48];
  rlock *locks[PX_N];
} px_locks;

/* Starts the proxy, opens a redis:// client on it (asserting open takes
 * less than 1 s whatever the probes were answered) and takes the locks
 * (names "<base>:<n>"). */
static px_locks *px_lock_all(const char *base, long *refused_at_open) {
  static px_locks p;
  int port = rt_slot_proxy_start();
  char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
  rlock_options o;
  rlock_options_init(&o);
  /* A renewal every second: 300 locks through this synchronous proxy (a
   * thread of the test process) keep up on a loaded 2-core machine; with
   * a third of that, a full CI run saw a lock or two lapse now and then. */
  o.watchdog_timeout_ms = PX_WATCHDOG_MS;
  int64_t t0 = rt_now_ms();
  p.c = tc_open(uri, &o);
  cr_assert_lt(rt_now_ms() - t0, 3000, "open took %lld ms",
               (long long)(rt_now_ms() - t0));
  *refused_at_open = rt_slot_proxy_refused();
  for (int i = 0; i < PX_N; i++) {
    rt_key(p.names[i], sizeof p.names[i], base);
    p.locks[i] = tc_lock(p.c, p.names[i]);
    TC_EQ(rlock_try_lock(p.locks[i], 0, -1), 1, "lock through the proxy");
  }
  return &p;
}

/* How many locks have a TTL on their slot's master; the first missing
 * ones (name and PTTL) into missing. */
static int px_held(const px_locks *p, char *missing, size_t n) {
  int held = 0;
  missing[0] = '\0';
  for (int i = 0; i < PX_N; i++) {
    long long pttl = rt_node_int(rt_cluster_key_owner(p->names[i]),
                                 "PTTL %s", p->names[i]);
    size_t used = strlen(missing);
    if (pttl > 0)
      held++;
    else if (used + 60 < n)
      snprintf(missing + used, n - used, " %.40s(%lld)", p->names[i], pttl);
  }
  return held;
}

static void px_unlock_all(px_locks *p) {
  for (int i = 0; i < PX_N; i++) {
    TC_EQ(rlock_unlock(p->locks[i]), 0, "unlock through the proxy");
    rlock_free(p->locks[i]);
  }
  rlock_client_free(p->c);
  rt_slot_proxy_stop();
}

/* A cluster behind one slot-routing endpoint that refuses cross-slot
 * commands (rt_slot_proxy, as Envoy): a redis:// client finds out with
 * the cross-slot probe at connect and renews its watchdog locks in
 * batches of one slot each. 300 locks with a 3 s watchdog stay held for
 * 7 s (before: the mixed renewal batches were refused with CROSSSLOT and
 * every lock expired after the watchdog timeout). */
Test(managed_cluster, cluster_behind_a_proxy_keeps_300_locks) {
  long at_open = 0;
  px_locks *p = px_lock_all("px", &at_open);
  cr_assert_geq(at_open, 1, "the probe was not refused");
  long refused = rt_slot_proxy_refused();
  rt_sleep_ms(PX_HOLD_MS);
  char missing[256];
  int held = px_held(p, missing, sizeof missing);
  cr_assert_eq(held, PX_N, "%d of %d locks held after 7 s; refused with "
               "CROSSSLOT since the locks: %ld; gone:%s", held, PX_N,
               rt_slot_proxy_refused() - refused, missing);
  cr_assert_eq(rt_slot_proxy_refused(), refused, "cross-slot batches sent");
  px_unlock_all(p);
}

/* Bad answers to the probes: a proxy that answers CLIENT SETINFO with an
 * array, the cross-slot probe with a plain value (it lets the probe pass)
 * and WAIT with garbage. Open succeeds, and the first renewal batch the
 * proxy refuses with CROSSSLOT turns per-slot batching on: 300 locks with a
 * 3 s watchdog stay held for 7 s all the same. */
Test(managed_cluster, proxy_garbles_the_probes) {
  rt_slot_proxy_answer("CLIENT SETINFO", "*1\r\n$3\r\nwho\r\n");
  rt_slot_proxy_answer("EVAL redis.call('get', KEYS[1]); redis.call",
                       "$2\r\nok\r\n");
  rt_slot_proxy_answer("WAIT", "+maybe\r\n");
  long at_open = 0;
  px_locks *p = px_lock_all("pg", &at_open);
  cr_assert_eq(at_open, 0, "the probe was refused");
  rt_sleep_ms(PX_HOLD_MS);
  char missing[256];
  int held = px_held(p, missing, sizeof missing);
  long refused = rt_slot_proxy_refused();
  cr_assert_eq(held, PX_N, "%d of %d locks held after 7 s (%ld refused); "
               "gone:%s", held, PX_N, refused, missing);
  cr_assert_geq(refused, 1, "no mixed batch was ever sent");
  cr_assert_lt(refused, 20, "%ld batches refused: per-slot batching did "
               "not stick", refused);
  px_unlock_all(p);
}

/* CLIENT SETINFO at connect: where the server has it (Redis 7.2+, Valkey)
 * CLIENT LIST shows lib-name=rlock lib-ver=<version> on the client's
 * connections; where it does not (Redis 7.0) the refusal is ignored and
 * the client works as before. */
Test(managed_cluster, client_setinfo_where_known) {
  int m[RT_MAX_NODES];
  int nm = rt_cluster_masters(m, RT_MAX_NODES);
  cr_assert_geq(nm, 1);
  redisContext *probe = rt_node_connect(m[0], 3000);
  redisReply *r = redisCommand(probe, "CLIENT SETINFO LIB-NAME probe");
  cr_assert(r != NULL);
  bool has = r->type == REDIS_REPLY_STATUS;
  freeReplyObject(r);
  redisFree(probe);

  rlock_options o;
  rlock_options_init(&o);
  o.client_name = "setinfo-test";
  rlock_client *c = tc_open(rt_cluster_uri(), &o);
  char name[64];
  rt_key(name, sizeof name, "si");
  rlock *l = tc_lock(c, name);
  TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock");
  TC_EQ(rlock_unlock(l), 0, "unlock");
  int mine = 0, labelled = 0;
  for (int i = 0; i < nm; i++) {
    char *list = rt_node_str(m[i], "CLIENT LIST");
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
      if (!strstr(line, " name=setinfo-test "))
        continue;
      mine++;
      if (strstr(line, " lib-name=rlock lib-ver=" RLOCK_VERSION_STRING))
        labelled++;
    }
    free(list);
  }
  cr_assert_geq(mine, nm, "the client's connections (%d) on %d masters",
                mine, nm);
  if (has)
    cr_assert_eq(labelled, mine, "%d of %d connections show lib-name=rlock",
                 labelled, mine);
  else
    cr_assert_eq(labelled, 0, "lib-name on a server without SETINFO?");
  /* Every master here has WAIT: replica sync stays on. */
  rlock_client_caps caps;
  rlock_client_caps_init(&caps);
  TC_EQ(rlock_client_capabilities(c, &caps), 0, "rlock_client_capabilities");
  cr_assert_eq(caps.replica_sync_off, 0, "%s", caps.replica_sync_note);
  cr_assert_str_empty(caps.replica_sync_note);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- commands a managed service disables ---- */

static void renamed_init(void) {
  static const char *const args[] = {
      "--rename-command", "CONFIG",  "", "--rename-command", "DEBUG",    "",
      "--rename-command", "KEYS",    "", "--rename-command", "MONITOR",  "",
      "--rename-command", "SCRIPT",  "", "--rename-command", "FLUSHALL", "",
      "--rename-command", "FLUSHDB", "", "--rename-command", "BGSAVE",   "",
      "--rename-command", "BGREWRITEAOF", "", NULL};
  rt_sentinel_data_args(args);
  rt_sentinel_start();
}

TestSuite(managed_renamed, .init = renamed_init, .fini = rt_topo_stop_all,
          .timeout = 120);

/* The main lock paths on one client URI: lock and unlock, a waiter woken
 * by the release message, watchdog renewal, fair and read/write locks, a
 * semaphore and a count-down latch. */
static void main_paths(const char *uri, int master) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 1000;
  rlock_client *a = tc_open(uri, &o), *b = tc_open(uri, &o);
  char name[64], wd[64], fair[64], rw[64], sem[64], latch[64];
  rt_key(name, sizeof name, "mr");
  rt_key(wd, sizeof wd, "mrwd");
  rt_key(fair, sizeof fair, "mrfair");
  rt_key(rw, sizeof rw, "mrrw");
  rt_key(sem, sizeof sem, "mrsem");
  rt_key(latch, sizeof latch, "mrlatch");

  rlock *la = tc_lock(a, name), *lb = tc_lock(b, name);
  TC_EQ(rlock_try_lock(la, 0, 10000), 1, "lock");
  tc_release_wakes(master, la, lb);

  rlock *lw = tc_lock(a, wd);
  TC_EQ(rlock_try_lock(lw, 0, -1), 1, "watchdog lock");
  rt_sleep_ms(2500);
  long long pttl = rt_node_int(master, "PTTL %s", wd);
  cr_assert(pttl > 0 && pttl <= 1000, "renewed: PTTL %lld", pttl);
  TC_EQ(rlock_unlock(lw), 0, "unlock watchdog lock");

  rlock *lf = NULL, *lr = NULL, *lwr = NULL;
  cr_assert_eq(rlock_new_fair(a, fair, &lf), 0);
  TC_EQ(rlock_try_lock(lf, 1000, 10000), 1, "fair lock");
  TC_EQ(rlock_unlock(lf), 0, "fair unlock");
  cr_assert_eq(rlock_new_read(a, rw, &lr), 0);
  cr_assert_eq(rlock_new_write(b, rw, &lwr), 0);
  TC_EQ(rlock_try_lock(lr, 0, 10000), 1, "read lock");
  TC_EQ(rlock_try_lock(lwr, 0, 10000), 0, "write lock while read held");
  TC_EQ(rlock_unlock(lr), 0, "read unlock");
  TC_EQ(rlock_try_lock(lwr, 1000, 10000), 1, "write lock");
  TC_EQ(rlock_unlock(lwr), 0, "write unlock");

  rlock_semaphore *s = NULL;
  cr_assert_eq(rlock_semaphore_new(a, sem, &s), 0);
  TC_EQ(rlock_semaphore_try_set_permits(s, 1, 0), 1, "set permits");
  TC_EQ(rlock_semaphore_try_acquire(s, 1, 0), 1, "acquire a permit");
  TC_EQ(rlock_semaphore_try_acquire(s, 1, 0), 0, "no permit left");
  TC_EQ(rlock_semaphore_release(s, 1), 0, "release the permit");
  rlock_latch *l = NULL;
  cr_assert_eq(rlock_latch_new(b, latch, &l), 0);
  TC_EQ(rlock_latch_try_set_count(l, 1), 1, "latch count");
  TC_EQ(rlock_latch_count_down(l), 0, "count down");
  TC_EQ(rlock_latch_await(l, 1000), 1, "latch open");

  rlock_latch_free(l);
  rlock_semaphore_free(s);
  rlock_free(lf);
  rlock_free(lr);
  rlock_free(lwr);
  rlock_free(lw);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(b);
  rlock_client_free(a);
}

/* CONFIG, DEBUG, KEYS, MONITOR, SCRIPT, FLUSHALL, FLUSHDB, BGSAVE and
 * BGREWRITEAOF renamed away on master and replica (as ElastiCache and
 * others refuse them): the main paths work through the sentinels and on
 * the master's own redis:// URI, replica sync included. */
Test(managed_renamed, main_paths_without_admin_commands) {
  int master = rt_sentinel_master_port();
  static const char *const gone[] = {"CONFIG GET maxmemory", "KEYS *",
                                     "SCRIPT FLUSH", "DEBUG SLEEP 0", NULL};
  for (int i = 0; gone[i]; i++) {
    redisReply *r = rt_node_cmd(master, gone[i]);
    cr_assert_eq(r->type, REDIS_REPLY_ERROR, "%s still there", gone[i]);
    freeReplyObject(r);
  }
  main_paths(rt_sentinel_uri(), master);
  char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", master);
  main_paths(uri, master);
}
