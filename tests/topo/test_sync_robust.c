/* Replica sync under a replica that does not acknowledge, and under an ACL
 * that refuses WAIT (issue 33): through rlock.h only, on a Sentinel setup
 * (1 master, 1 replica, 3 sentinels), one setup per test.
 *
 * - a timed-out acquire closed at once leaves no hold (close waits for the
 *   undo queued behind the blocked WAIT);
 * - an acquire undone because no replica confirmed it ends in
 *   RLOCK_ENOREPLICA, never in "not acquired";
 * - the lease guarantee does not move on renewals no replica confirmed,
 *   and LEASE_AT_RISK fires as it runs down;
 * - a WAIT refused by the ACL fails the acquire once with RLOCK_ENOREPLICA
 *   and a detail naming the ACL, in a handful of commands. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "topo_client.h"

TestSuite(sync_robust, .init = rt_sentinel_start, .fini = rt_topo_stop_all,
          .timeout = 120);

typedef struct risk_rec {
  atomic_int at_risk;
  _Atomic int64_t remaining;
} risk_rec;

static void on_event(const rlock_event *ev, void *data) {
  risk_rec *r = data;
  if (ev->type == RLOCK_EVENT_LEASE_AT_RISK) {
    atomic_store(&r->remaining, ev->remaining_ms);
    atomic_fetch_add(&r->at_risk, 1);
  }
}

/* A client whose watchdog holds are renewed every second, replica sync
 * waiting 500 ms, events to risk. */
static rlock_client *open_watchdog(const char *uri, risk_rec *risk) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 3000;
  o.replica_sync_timeout_ms = 500;
  o.on_event = on_event;
  o.on_event_data = risk;
  return tc_open(uri, &o);
}

/* A watchdog hold taken while the replica acknowledges: its guarantee. */
static int64_t hold_guaranteed(rlock *lh) {
  TC_EQ(rlock_try_lock(lh, 0, -1), 1, "lock with the replica linked");
  int64_t g0 = 0;
  TC_EQ(rlock_is_lease_guaranteed(lh, &g0), 1, "guaranteed after the acquire");
  return g0;
}

/* (8) With the replica frozen, a free lock whose every acquire is undone
 * for want of a confirmation: RLOCK_ENOREPLICA (before: 0, "not
 * acquired", when the deadline came while the undo or the next try was in
 * flight), and nothing left on the master - by the op's own undo or, when
 * the deadline came with a command in flight, the repair behind it. */
static void free_lock_is_enoreplica(rlock *l, int master, const char *key) {
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(l, 2000, 10000);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ENOREPLICA, "try_lock(2000) on a free lock with "
               "the replica frozen: %d %s (%s) after %lld ms", rc,
               rlock_err_name(rc), rlock_last_error(), (long long)took);
  cr_assert_lt(took, 2000 + 2500, "took %lld ms", (long long)took);
  int64_t dl = rt_now_ms() + 3000;
  while (rt_node_int(master, "EXISTS %s", key) != 0 && rt_now_ms() < dl)
    rt_sleep_ms(50);
  cr_assert_eq(rt_node_int(master, "EXISTS %s", key), 0, "not undone");
}

/* (2) Renewals every second, none confirmed by a replica: looked at when
 * the acquire's guarantee g0 is about to pass (two or more renewals sent),
 * the guarantee is still g0 at most and LEASE_AT_RISK fired (before: it
 * moved on with every renewal). */
static void guarantee_held_back(rlock *lh, int64_t g0, risk_rec *risk) {
  int64_t dl = rt_now_ms() + 5000;
  while ((atomic_load(&risk->at_risk) == 0 || rlock_now_ms() < g0 - 300) &&
         rt_now_ms() < dl)
    rt_sleep_ms(50);
  int64_t g = 0;
  int rc = rlock_is_lease_guaranteed(lh, &g);
  cr_assert(rc == 0 || rc == 1, "lease_guaranteed: %d", rc);
  cr_assert_leq(g, g0, "the guarantee moved on unconfirmed renewals: %lld "
                "ms past the one the acquire gave (now %lld ms before it)",
                (long long)(g - g0), (long long)(g0 - rlock_now_ms()));
  cr_assert_geq(atomic_load(&risk->at_risk), 1, "no LEASE_AT_RISK while the "
                "guarantee ran down");
  cr_assert_lt(atomic_load(&risk->remaining), 3000 / 3 + 1);
}

#ifdef RLOCK_TEST_CLI
/* Runs `rlock -u URI -w 500ms NAME -- true` (the tool of this build,
 * output to /dev/null) and returns its exit status. */
static int cli_give_up(const char *uri, const char *name) {
  const char *cli = RLOCK_TEST_CLI;
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int dn = open("/dev/null", O_RDWR);
    if (dn >= 0) {
      dup2(dn, 0);
      dup2(dn, 1);
      dup2(dn, 2);
    }
    execl(cli, cli, "-u", uri, "-w", "500ms", name, "--", "true",
          (char *)NULL);
    _exit(127);
  }
  int status = 0;
  int64_t dl = rt_now_ms() + 15000;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (rt_now_ms() > dl) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      cr_assert_fail("rlock -w 500ms still running after 15 s");
    }
    rt_sleep_ms(20);
  }
  cr_assert(WIFEXITED(status), "rlock did not exit: status %d", status);
  return WEXITSTATUS(status);
}
#endif

/* Issue 33 (1, 2, 8), with the replica frozen (SIGSTOP: the master still
 * counts it, so every WAIT 1 times out unacknowledged). */
Test(sync_robust, frozen_replica_no_false_answers) {
  int master = rt_sentinel_master_port(), replica = rt_sentinel_replica_port();
  risk_rec risk = {0};
  rlock_client *a = open_watchdog(rt_sentinel_uri(), &risk);
  char held[64], k8[64], k1[64];
  rt_key(held, sizeof held, "guar");
  rt_key(k8, sizeof k8, "free");
  rt_key(k1, sizeof k1, "closed");
  rlock *lh = tc_lock(a, held), *l8 = tc_lock(a, k8);
  int64_t g0 = hold_guaranteed(lh);

  rt_sentinel_pause_node(replica, true);
  free_lock_is_enoreplica(l8, master, k8);

  /* (1) A try whose deadline passes while its WAIT blocks the connection,
   * then close at once: close waits for the undo queued behind that WAIT
   * (before: the connection went first and the server dropped the undo;
   * the hold stayed for its whole lease). */
  rlock_options ob;
  rlock_options_init(&ob);
  ob.replica_sync_timeout_ms = 1000;
  rlock_client *b = tc_open(rt_sentinel_uri(), &ob);
  rlock *l1 = tc_lock(b, k1);
  int rc = rlock_try_lock(l1, 300, 60000);
  cr_assert(rc == RLOCK_ETIMEDOUT || rc == RLOCK_ENOREPLICA,
            "try_lock(300) behind a blocked WAIT: %d %s (%s)", rc,
            rlock_err_name(rc), rlock_last_error());
  rlock_free(l1);
  int64_t t0 = rt_now_ms();
  rlock_client_free(b);
  int64_t close_took = rt_now_ms() - t0;
  long long pttl = rt_node_int(master, "PTTL %s", k1);
  cr_assert_eq(pttl, -2, "close left the timed-out acquire's hold on the "
               "master (PTTL %lld ms; close took %lld ms)", pttl,
               (long long)close_took);
  cr_assert_lt(close_took, ob.command_timeout_ms + 1500, "close took %lld ms",
               (long long)close_took);

#ifdef RLOCK_TEST_CLI
  /* (1) The tool's give-up path the same: `rlock -w 500ms` gives up (its
   * try's WAIT blocks past the wait) and leaves no hold when it exits. */
  char kc[64];
  rt_key(kc, sizeof kc, "cli");
  int code = cli_give_up(rt_sentinel_uri(), kc);
  pttl = rt_node_int(master, "PTTL %s", kc);
  cr_assert_eq(pttl, -2, "rlock -w 500ms (exit %d) left a hold on the "
               "master (PTTL %lld ms)", code, pttl);
  cr_assert(code != 0 && code != 127, "rlock -w 500ms exited %d", code);
#endif

  /* (2) Renewals ran meanwhile. */
  guarantee_held_back(lh, g0, &risk);

  /* The replica back: the next confirmed renewal moves it on again. */
  rt_sentinel_pause_node(replica, false);
  int64_t g = 0, dl = rt_now_ms() + 8000;
  while (rt_now_ms() < dl) {
    rlock_is_lease_guaranteed(lh, &g);
    if (g > g0)
      break;
    rt_sleep_ms(100);
  }
  cr_assert_gt(g, g0, "the guarantee did not move after the replica came "
               "back");
  TC_EQ(rlock_unlock(lh), 0, "unlock");
  rlock_free(lh);
  rlock_free(l8);
  rlock_client_free(a);
}

/* Issue 33 (4): an ACL user without +wait. Each WAIT is refused (NOPERM):
 * the acquire of a free lock is undone and fails once with
 * RLOCK_ENOREPLICA naming the ACL - a lock waiter without deadline too -
 * in a handful of commands (before: acquire, undo, acquire... as fast as
 * the server answers). */
Test(sync_robust, wait_refused_by_acl) {
  int master = rt_sentinel_master_port();
  redisReply *r = rt_node_cmd(master, "ACL SETUSER rl_nowait on >nowaitpw "
                                      "~* &* +@all -wait");
  cr_assert(r->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s",
            r->str ? r->str : "?");
  freeReplyObject(r);
  /* WAITAOF too where the server has it (Redis 7.2+, Valkey). */
  freeReplyObject(rt_node_cmd(master, "ACL SETUSER rl_nowait -waitaof"));
  const char *base = rt_sentinel_uri(); /* redis+sentinel://hosts/master */
  const char *hosts = strstr(base, "://");
  cr_assert(hosts);
  char uri[512];
  snprintf(uri, sizeof uri, "%.*srl_nowait:nowaitpw@%s",
           (int)(hosts + 3 - base), base, hosts + 3);
  rlock_options o;
  rlock_options_init(&o);
  o.replica_sync_timeout_ms = 300;
  rlock_client *c = tc_open(uri, &o);
  char name[64];
  rt_key(name, sizeof name, "acl");
  rlock *l = tc_lock(c, name);
  freeReplyObject(rt_node_cmd(master, "CONFIG RESETSTAT"));

  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(l, 2000, 10000);
  int64_t took = rt_now_ms() - t0;
  char detail[256];
  snprintf(detail, sizeof detail, "%s", rlock_last_error());
  long long evals = tc_calls(master, "evalsha") + tc_calls(master, "eval");
  cr_assert_eq(rc, RLOCK_ENOREPLICA, "try_lock(2000) with WAIT refused: %d "
               "%s (%s) after %lld ms, %lld scripts", rc, rlock_err_name(rc),
               detail, (long long)took, evals);
  cr_assert(strstr(detail, "ACL") != NULL, "detail names no ACL: %s",
            detail);
  cr_assert_leq(evals, 4, "%lld scripts for one acquire", evals);
  cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 0, "undone");

  /* Without a deadline: the same, once. */
  rc = rlock_lock(l, 10000);
  cr_assert_eq(rc, RLOCK_ENOREPLICA, "lock() with WAIT refused: %d %s (%s)",
               rc, rlock_err_name(rc), rlock_last_error());
  evals = tc_calls(master, "evalsha") + tc_calls(master, "eval");
  cr_assert_leq(evals, 8, "%lld scripts for two acquires", evals);
  cr_assert_lt(rt_now_ms() - t0, 5000);
  rlock_free(l);
  rlock_client_free(c);
  freeReplyObject(rt_node_cmd(master, "ACL DELUSER rl_nowait"));
}

/* ---- the same on a cluster (3 masters x 1 replica) ---- */

static void cluster3x1(void) { rt_cluster_start(3, 1); }

TestSuite(sync_robust_cluster, .init = cluster3x1, .fini = rt_topo_stop_all,
          .timeout = 150);

/* The port of the first replica ROLE lists on the master on `port`. */
static int replica_of(int port) {
  redisReply *r = rt_node_cmd(port, "ROLE");
  int rport = -1;
  if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
      r->element[2]->type == REDIS_REPLY_ARRAY &&
      r->element[2]->elements >= 1) {
    redisReply *e = r->element[2]->element[0];
    if (e->type == REDIS_REPLY_ARRAY && e->elements >= 2 &&
        e->element[1]->type == REDIS_REPLY_STRING)
      rport = atoi(e->element[1]->str);
  }
  freeReplyObject(r);
  cr_assert_gt(rport, 0, "no replica listed by ROLE on %d", port);
  return rport;
}

/* Issue 33 (2, 8) on a cluster: the replica of the lock's shard frozen.
 * A free lock is never reported busy (RLOCK_ENOREPLICA), and the lease
 * guarantee does not move on renewals the replica did not confirm. */
Test(sync_robust_cluster, frozen_replica_guarantee_and_answers) {
  int m[3];
  cr_assert_eq(rt_cluster_masters(m, 3), 3);
  int master = m[0], replica = replica_of(master);
  pid_t rpid = rt_cluster_pid(rt_cluster_index_of_port(replica));
  risk_rec risk = {0};
  rlock_client *a = open_watchdog(rt_cluster_uri(), &risk);
  char held[64], k8[64];
  rt_cluster_key_on(held, sizeof held, "cguar", master);
  rt_cluster_key_on(k8, sizeof k8, "cfree", master);
  rlock *lh = tc_lock(a, held), *l8 = tc_lock(a, k8);
  int64_t g0 = hold_guaranteed(lh);

  cr_assert_eq(kill(rpid, SIGSTOP), 0);
  free_lock_is_enoreplica(l8, master, k8);
  guarantee_held_back(lh, g0, &risk);
  cr_assert_eq(kill(rpid, SIGCONT), 0);
  rlock_unlock(lh);
  rlock_free(lh);
  rlock_free(l8);
  rlock_client_free(a);
}

/* The replicas a node lists beside `master` in its CLUSTER SLOTS; -1 when
 * it lists no range of that master. */
static int replicas_seen_by(int node, int master) {
  redisReply *r = rt_node_cmd(node, "CLUSTER SLOTS");
  int n = -1;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    redisReply *e = r->element[i];
    if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
        e->element[2]->type == REDIS_REPLY_ARRAY &&
        e->element[2]->elements >= 2 &&
        e->element[2]->element[1]->integer == master)
      n = (int)e->elements - 3;
  }
  freeReplyObject(r);
  return n;
}

static uint64_t synced(rlock_client *c, uint64_t *unconfirmed) {
  rlock_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  cr_assert_eq(rlock_client_stats(c, &st), 0);
  *unconfirmed = st.replica_sync_unconfirmed;
  return st.replica_sync_ok;
}

/* A replica that the node a client reads its slot map from does not list
 * (gossip has not told it yet: the first second after a replica joins, or
 * seconds on a loaded machine; here CLUSTER FORGET on that node hides it
 * for 60 s) is waited for all the same: the master's own ROLE counts it,
 * and the first lock, sent as the connection to the master opens, waits
 * for that answer. Before, the lock went without WAIT, and a failover to
 * that replica could lose it. */
Test(sync_robust_cluster, replica_unlisted_in_the_map_is_waited_for) {
  int m[3];
  cr_assert_eq(rt_cluster_masters(m, 3), 3);
  int seed = m[0], master = m[1], replica = replica_of(master);
  char *rid = rt_node_str(replica, "CLUSTER MYID");
  cr_assert(rid != NULL);
  redisReply *f = rt_node_cmd(seed, "CLUSTER FORGET %s", rid);
  cr_assert_eq(f->type, REDIS_REPLY_STATUS, "CLUSTER FORGET: %s", f->str);
  freeReplyObject(f);
  free(rid);
  cr_assert_eq(replicas_seen_by(seed, master), 0,
               "the seed still lists the replica");
  /* The master itself lists it (a node under load may flag a replica
   * failed for a moment, node timeout 1 s, and leave it out meanwhile). */
  int64_t dl = rt_now_ms() + 10000;
  int seen = replicas_seen_by(master, master);
  for (; seen != 1 && rt_now_ms() < dl; seen = replicas_seen_by(master, master))
    rt_sleep_ms(50);
  cr_assert_eq(seen, 1, "the master lists %d replica(s) of its own", seen);

  char uri[64];
  snprintf(uri, sizeof uri, "redis+cluster://127.0.0.1:%d", seed);
  rlock_options o;
  rlock_options_init(&o);
  o.cluster_refresh_ms = 60000; /* the seed's map, read once */
  rlock_client *c = tc_open(uri, &o);
  char key[64];
  rt_cluster_key_on(key, sizeof key, "unlisted", master);
  rlock *l = tc_lock(c, key);
  TC_EQ(rlock_try_lock(l, 0, 30000), 1, "lock");
  uint64_t unconfirmed = 0;
  cr_assert_eq(synced(c, &unconfirmed), 1, "the lock was not confirmed by "
               "the replica (%" PRIu64 " unconfirmed)", unconfirmed);
  cr_assert_eq(unconfirmed, 0);
  TC_EQ(rlock_unlock(l), 0, "unlock");
  cr_assert_eq(synced(c, &unconfirmed), 2);
  rlock_free(l);
  rlock_client_free(c);
}
