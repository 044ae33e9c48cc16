/* rlock_client_info and rlock_client_force_unlock through a Redis Cluster and
 * through Sentinel: each name is read on the node that serves it (its
 * slot's master; the current master after a failover), waiters counted
 * with the client's pub/sub mode (sharded in a cluster). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo_client.h"

static void cluster3(void) { rt_cluster_start(3, 0); }

TestSuite(info_cluster, .init = cluster3, .fini = rt_topo_stop_all,
          .timeout = 120);
TestSuite(info_sentinel, .init = rt_sentinel_start, .fini = rt_topo_stop_all,
          .timeout = 120);

typedef struct waiter {
  atomic_int status; /* 2: pending */
} waiter;

static void waiter_cb(int status, int64_t value, void *data) {
  (void)value;
  atomic_store(&((waiter *)data)->status, status);
}

static bool waiter_done(void *arg) {
  return atomic_load(&((waiter *)arg)->status) != 2;
}

typedef struct shard_sub {
  int port;
  const char *channel;
} shard_sub;

static bool one_shard_subscriber(void *arg) {
  shard_sub *s = arg;
  redisReply *r = rt_node_cmd(s->port, "PUBSUB SHARDNUMSUB %s", s->channel);
  bool one = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[1]->integer == 1;
  freeReplyObject(r);
  return one;
}

Test(info_cluster, read_and_force_unlock_on_every_master) {
  int m[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), 3);
  rlock_client *c = tc_open(rt_cluster_uri(), NULL);
  rlock_client *c2 = tc_open(rt_cluster_uri(), NULL);
  for (int i = 0; i < 3; i++) {
    char name[64], base[32], channel[128], owner[96], str[64];
    snprintf(base, sizeof base, "info:%d", i);
    rt_cluster_key_on(name, sizeof name, base, m[i]);
    snprintf(channel, sizeof channel, "redisson_lock__channel:{%s}", name);
    rlock *l = tc_lock(c, name), *l2 = tc_lock(c2, name);
    uint64_t me = rlock_owner_new();
    TC_EQ(rlock_lock_owner(l, me, 30000), 0, "lock");
    TC_EQ(rlock_lock_owner(l, me, 30000), 0, "re-enter");
    waiter w;
    atomic_init(&w.status, 2);
    TC_EQ(rlock_lock_async(l2, rlock_owner_new(), 60000, 10000, waiter_cb, &w,
                           NULL),
          0, "waiter");
    shard_sub s = {m[i], channel};
    rt_wait_until_what(one_shard_subscriber, &s, 5000, "waiter subscribed");

    rlock_info info;
    rlock_info_init(&info);
    TC_EQ(rlock_client_info(c, name, &info), 0, "info");
    cr_assert_eq(info.kind, RLOCK_INFO_LOCK, "master %d", i);
    cr_assert_eq(info.holders_n, 1);
    rt_owner(owner, sizeof owner, c, me);
    cr_assert_str_eq(info.holders[0].key, owner);
    cr_assert_eq(info.holders[0].count, 2);
    cr_assert(info.ttl_ms > 25000 && info.ttl_ms <= 30000);
    cr_assert_eq(info.waiters, 1, "sharded subscribers on master %d", i);
    rlock_info_free(&info);

    TC_EQ(rlock_client_force_unlock(c, name, NULL, NULL), 1, "force");
    rt_wait_until_what(waiter_done, &w, 5000, "waiter woke");
    cr_assert_eq(atomic_load(&w.status), 1);
    /* the waiter holds it now (10 s lease), the old holder does not */
    cr_assert_eq(rt_node_int(m[i], "HEXISTS %s %s", name, owner), 0);
    cr_assert_eq(rt_node_int(m[i], "HLEN %s", name), 1);

    /* a string on that master: foreign, left alone */
    rt_cluster_key_on(str, sizeof str, "info:str", m[i]);
    redisReply *r = rt_node_cmd(m[i], "SET %s v", str);
    freeReplyObject(r);
    rlock_info_init(&info);
    TC_EQ(rlock_client_info(c, str, &info), 0, "info of a string");
    cr_assert_eq(info.kind, RLOCK_INFO_FOREIGN);
    cr_assert_str_eq(info.type, "string");
    rlock_info_free(&info);
    TC_EQ(rlock_client_force_unlock(c, str, NULL, NULL), RLOCK_EWRONGTYPE,
          "force on a string");
    cr_assert_eq(rt_node_int(m[i], "EXISTS %s", str), 1);
    rlock_free(l);
    rlock_free(l2);
  }
  rlock_client_free(c2);
  rlock_client_free(c);
}

/* rlock_scan goes to every master: a lock on each of the three, and a
 * fenced lock known only by its token key (on a fourth name's master), are
 * listed once each; a key of another prefix is not. */
Test(info_cluster, scan_lists_names_on_every_master) {
  int m[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), 3);
  rlock_client *c = tc_open(rt_cluster_uri(), NULL);
  char names[4][64], other[64];
  rlock *locks[3];
  for (int i = 0; i < 3; i++) {
    rt_cluster_key_on(names[i], sizeof names[i], "scan", m[i]);
    locks[i] = tc_lock(c, names[i]);
    TC_EQ(rlock_lock(locks[i], 30000), 0, "lock");
  }
  rt_cluster_key_on(names[3], sizeof names[3], "scan:fenced", m[1]);
  redisReply *r =
      rt_node_cmd(m[1], "SET redisson_lock_token:{%s} 3", names[3]);
  freeReplyObject(r);
  rt_cluster_key_on(other, sizeof other, "noscan", m[2]);
  r = rt_node_cmd(m[2], "SET %s v", other);
  freeReplyObject(r);

  rlock_scan_options o;
  rlock_scan_options_init(&o);
  o.pattern = "scan*";
  o.count = 1;
  rlock_scan *s = NULL;
  TC_EQ(rlock_scan_new(c, &o, &s), 0, "scan open");
  int seen[4] = {0, 0, 0, 0}, rc;
  const char *name;
  while ((rc = rlock_scan_next(s, &name, NULL)) == 1) {
    bool known = false;
    for (int i = 0; i < 4; i++)
      if (strcmp(name, names[i]) == 0) {
        seen[i]++;
        known = true;
      }
    cr_assert(known, "unexpected name %s", name);
  }
  TC_EQ(rc, 0, "scan next");
  rlock_scan_free(s);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(seen[i], 1, "%s seen %d times", names[i], seen[i]);
  for (int i = 0; i < 3; i++) {
    TC_EQ(rlock_unlock(locks[i]), 0, "unlock");
    rlock_free(locks[i]);
  }
  rlock_client_free(c);
}

Test(info_sentinel, reads_the_current_master_after_a_failover) {
  rlock_client *c = tc_open(rt_sentinel_uri(), NULL);
  rlock *l = tc_lock(c, "info:sentinel");
  uint64_t me = rlock_owner_new();
  TC_EQ(rlock_lock_owner(l, me, 60000), 0, "lock");
  rlock_info info;
  rlock_info_init(&info);
  TC_EQ(rlock_client_info(c, "info:sentinel", &info), 0, "info");
  cr_assert_eq(info.kind, RLOCK_INFO_LOCK);
  cr_assert_eq(info.holders_n, 1);
  rlock_info_free(&info);
  int old = rt_sentinel_master_port();
  int now = rt_sentinel_failover(30000);
  cr_assert_neq(now, old);
  /* the library follows the sentinels; the read goes to the new master */
  int rc = -1;
  for (int tries = 0; tries < 50; tries++) {
    rlock_info_init(&info);
    rc = rlock_client_info(c, "info:sentinel", &info);
    if (rc == 0)
      break;
    rt_topo_sleep_ms(100);
  }
  TC_EQ(rc, 0, "info after failover");
  cr_assert_eq(info.kind, RLOCK_INFO_LOCK);
  cr_assert_eq(info.holders_n, 1);
  char owner[96];
  rt_owner(owner, sizeof owner, c, me);
  cr_assert_str_eq(info.holders[0].key, owner);
  rlock_info_free(&info);
  /* the scan goes to the master the sentinels name now */
  rlock_scan_options o;
  rlock_scan_options_init(&o);
  o.pattern = "info:sentinel";
  rlock_scan *s = NULL;
  TC_EQ(rlock_scan_new(c, &o, &s), 0, "scan open");
  const char *name = NULL;
  TC_EQ(rlock_scan_next(s, &name, NULL), 1, "scan next");
  cr_assert_str_eq(name, "info:sentinel");
  TC_EQ(rlock_scan_next(s, &name, NULL), 0, "scan end");
  rlock_scan_free(s);
  TC_EQ(rlock_unlock_owner(l, me), 0, "unlock on the new master");
  rlock_free(l);
  rlock_client_free(c);
}

/* rlock_client_holder in a cluster: CLIENT LIST on the masters finds the
 * holder's named connections (issue 35). */
Test(info_cluster, holder_get_finds_the_holder_in_a_cluster) {
  int m[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), 3);
  rlock_client *c = tc_open(rt_cluster_uri(), NULL);
  rlock_client *c2 = tc_open(rt_cluster_uri(), NULL);
  char name[64], owner[96];
  rt_cluster_key_on(name, sizeof name, "info:who", m[2]);
  rlock *l = tc_lock(c, name);
  uint64_t me = rlock_owner_new();
  TC_EQ(rlock_lock_owner(l, me, 30000), 0, "lock");
  rt_owner(owner, sizeof owner, c, me);
  rlock_holder h;
  rlock_holder_init(&h);
  TC_EQ(rlock_client_holder(c2, name, owner, &h), 1, "holder_get");
  cr_assert_eq(h.pid, (int64_t)getpid());
  cr_assert(h.host[0] != '\0' && h.program[0] != '\0');
  TC_EQ(rlock_client_holder(c2, name, "0000aaaa-0000-4000-8000-000000000000:1",
                         &h),
        0, "no such client");
  TC_EQ(rlock_unlock_owner(l, me), 0, "unlock");
  rlock_free(l);
  rlock_client_free(c2);
  rlock_client_free(c);
}
