/* The diagnostics callback (issue 28, item 1) against Sentinel and Cluster
 * topologies: what a client says about a failover and the cluster's slot
 * map - counted exactly (tests/redis/diag_rec.h records the lines). A
 * server without WAIT: test_managed.c, sentinel_nowait. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "diag_rec.h"
#include "topo_client.h"

static rlock_client *open_diag(const char *uri, rlock_options *o,
                               diag_rec *rec) {
  rec_init(rec, o);
  return tc_open(uri, o);
}

/* ---- Sentinel failover ---- */

TestSuite(diag_sentinel, .init = rt_sentinel_start, .fini = rt_topo_stop_all,
          .timeout = 120);

/* A planned failover: exactly one line saying the master moved from the
 * old port to the new one, the connections to the old master lost (with a
 * cause) and both back on the new one. */
Test(diag_sentinel, failover_says_the_master_moved_once) {
  int old_master = rt_sentinel_master_port();
  rlock_options o;
  rlock_options_init(&o);
  diag_rec rec;
  rlock_client *c = open_diag(rt_sentinel_uri(), &o, &rec);
  rec_clear(&rec);
  int promoted = rt_sentinel_failover(20000);
  cr_assert_neq(promoted, old_master);
  char from[64], to[64], moved[160];
  snprintf(from, sizeof from, "127.0.0.1:%d", old_master);
  snprintf(to, sizeof to, "127.0.0.1:%d", promoted);
  snprintf(moved, sizeof moved, "master 'mymaster' moved from %s to %s", from,
           to);
  rec_wait_for(&rec, RLOCK_DIAG_INFO, moved, NULL, 20000);
  rec_wait_for(&rec, RLOCK_DIAG_INFO, "reconnected to", to, 20000);
  /* A lock on the new master: the client works there. */
  char name[64];
  rt_key(name, sizeof name, "diag-failover");
  rlock *l = tc_lock(c, name);
  TC_EQ(rlock_try_lock(l, 5000, 10000), 1, "lock after the failover");
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", name), 1);
  TC_EQ(rlock_unlock(l), 0, "unlock");
  rt_sleep_ms(300);
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "moved from");
  cr_assert_geq(rec_count(&rec, RLOCK_DIAG_WARN, "lost connection to", from,
                          "(commands): RLOCK_", (const char *)NULL),
                1, "no line on the connection to %s", from);
  REC_EXPECT(&rec, 0, -1, "lost connection to", to);
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "reconnected to", to, "(commands)");
  REC_EXPECT(&rec, 0, RLOCK_DIAG_ERROR);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- Cluster ---- */

static void cluster3(void) { rt_cluster_start(3, 0); }

TestSuite(diag_cluster, .init = cluster3, .fini = rt_topo_stop_all,
          .timeout = 120);

/* The first slot map is said once (three masters, every slot) with the
 * node it came from, and the pub/sub probe's outcome; reading the same map
 * again says nothing. */
Test(diag_cluster, first_slot_map_and_pubsub_mode) {
  rlock_options o;
  rlock_options_init(&o);
  o.cluster_refresh_ms = 100; /* many refreshes below */
  diag_rec rec;
  rlock_client *c = open_diag(rt_cluster_uri(), &o, &rec);
  rt_sleep_ms(600); /* five more reads of the same map */
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "cluster slot map from ",
             ": 3 masters serve 16384 slots");
  REC_EXPECT(&rec, 1, -1, "slot map");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_DEBUG,
             "cluster pub/sub probe (PUBSUB SHARDNUMSUB): "
             "answered, sharded pub/sub");
  int ports[RT_MAX_NODES];
  int n = rt_cluster_masters(ports, RT_MAX_NODES);
  cr_assert_eq(n, 3);
  for (int i = 0; i < n; i++) {
    char at[64];
    snprintf(at, sizeof at, "127.0.0.1:%d", ports[i]);
    REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "connected to", at, "(commands)");
  }
  REC_EXPECT(&rec, 0, RLOCK_DIAG_WARN);
  rlock_client_free(c);
}
