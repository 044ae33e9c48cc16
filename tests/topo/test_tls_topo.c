/* rediss+cluster:// and rediss+sentinel://: the library over TLS against a
 * real Redis Cluster (3 masters, tls-cluster yes) and a real Sentinel setup
 * (master, replica, 3 sentinels, tls-replication yes), through rlock.h only.
 *
 * Each test makes a throw-away EC CA and a node certificate (subjectAltName
 * IP:127.0.0.1, DNS:localhost) with the openssl command line in its own
 * temporary directory, and starts the topology in the harness's TLS mode
 * (rt_topo_tls): every node listens on a TLS port beside its plain one. The
 * library is given only the TLS ports; the assertions look at the nodes
 * through their plain ports. That the library's connections really are the
 * TLS ones is checked with CLIENT LIST (laddr = the node's TLS port). The
 * suite never skips: a build without TLS fails it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tls.h"
#include "topo_client.h"

static char g_dir[256]; /* certificates: ca.crt, node.crt/key, other.crt */
static char g_ca[300], g_other_ca[300];
static char g_client_crt[300], g_client_key[300]; /* make_client_cert */

static const char cnf[] =
    "[req]\n"
    "distinguished_name = dn\n"
    "prompt = no\n"
    "[dn]\n"
    "CN = rlock topo tls test\n"
    "[v3_ca]\n"
    "basicConstraints = critical,CA:TRUE\n"
    "keyUsage = critical,keyCertSign,cRLSign\n"
    "subjectKeyIdentifier = hash\n"
    "[v3_node]\n"
    "basicConstraints = critical,CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    /* a node is a TLS client too: cluster bus, replication, sentinels */
    "extendedKeyUsage = serverAuth,clientAuth\n"
    "subjectAltName = IP:127.0.0.1,DNS:localhost\n"
    "[v3_client]\n"
    "basicConstraints = critical,CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = clientAuth\n";

static void openssl(const char *fmt, ...) {
  char args[600], cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "cd '%s' && openssl %s >>openssl.log 2>&1", g_dir,
           args);
  int st = system(cmd);
  cr_assert_eq(st, 0, "openssl %s: status %d (see %s/openssl.log)", args, st,
               g_dir);
}

/* <name>.key (P-256) and <name>.csr for CN=<name>, in g_dir. */
static void key_and_csr(const char *name) {
  openssl("ecparam -name prime256v1 -genkey -noout -out %s.key", name);
  openssl("req -new -key %s.key -config tls.cnf -subj /CN=%s -out %s.csr",
          name, name, name);
}

/* <out>.crt: <csr>.csr certified by the CA <ca>.crt/<ca>.key with the
 * tls.cnf extension section `ext`, valid 2 days. */
static void sign(const char *csr, const char *out, const char *ca, int serial,
                 const char *ext) {
  openssl("x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -set_serial %d "
          "-days 2 -sha256 -extfile tls.cnf -extensions %s -out %s.crt",
          csr, ca, ca, serial, ext, out);
}

/* ca.crt/key, node.crt/key signed by it, and otherca.crt (a CA that signed
 * nothing here). */
static void make_certs(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/rlock-topo-tls-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  cr_assert_not_null(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
  char path[300];
  snprintf(path, sizeof path, "%s/tls.cnf", g_dir);
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL && fputs(cnf, f) >= 0 && fclose(f) == 0);
  openssl("ecparam -name prime256v1 -genkey -noout -out ca.key");
  openssl("req -x509 -new -key ca.key -config tls.cnf -extensions v3_ca "
          "-days 2 -sha256 -out ca.crt");
  openssl("ecparam -name prime256v1 -genkey -noout -out otherca.key");
  openssl("req -x509 -new -key otherca.key -config tls.cnf -extensions v3_ca "
          "-subj /CN=other -days 2 -sha256 -out otherca.crt");
  key_and_csr("node");
  sign("node", "node", "ca", 2, "v3_node");
  snprintf(g_ca, sizeof g_ca, "%s/ca.crt", g_dir);
  snprintf(g_other_ca, sizeof g_other_ca, "%s/otherca.crt", g_dir);
}

/* client.crt/key: a client certificate (CN=client, extendedKeyUsage
 * clientAuth only) signed by ca.crt, for mutual TLS; otherclient.crt: the
 * same key certified by otherca.crt, which the nodes do not trust. After
 * make_certs. */
static void make_client_cert(void) {
  key_and_csr("client");
  sign("client", "client", "ca", 3, "v3_client");
  /* and one from the CA that signed nothing else (otherclient.crt) */
  sign("client", "otherclient", "otherca", 4, "v3_client");
  snprintf(g_client_crt, sizeof g_client_crt, "%s/client.crt", g_dir);
  snprintf(g_client_key, sizeof g_client_key, "%s/client.key", g_dir);
}

static void tls_fini(void) {
  rt_topo_stop_all();
  if (g_dir[0])
    rt_remove_dir(g_dir);
  g_dir[0] = '\0';
}

/* Certificates and TLS mode for one test; mutual: client certificates
 * too, and every node and sentinel requires one. The caller then starts
 * its topology. */
static void tls_setup(bool mutual) {
  cr_assert(rlock__tls_available,
            "this rlock is built without TLS: the tls topo suites need it");
  make_certs();
  if (mutual)
    make_client_cert();
  rt_topo_tls(g_dir);
  rt_topo_tls_auth_clients(mutual);
}

static void tls_cluster_init(void) {
  tls_setup(false);
  rt_cluster_start(3, 0);
}
static void tls_cluster_replicas_init(void) {
  tls_setup(false);
  rt_cluster_start(3, 1);
}
static void tls_sentinel_init(void) {
  tls_setup(false);
  rt_sentinel_start();
}
TestSuite(tls_cluster, .init = tls_cluster_init, .fini = tls_fini,
          .timeout = 120);
TestSuite(tls_cluster_failover, .init = tls_cluster_replicas_init,
          .fini = tls_fini, .timeout = 120);
TestSuite(tls_sentinel, .init = tls_sentinel_init, .fini = tls_fini,
          .timeout = 120);

/* Mutual TLS: the same topologies with --tls-auth-clients yes on every
 * node and sentinel (rt_topo_tls_auth_clients), and a client certificate
 * signed by the nodes' CA. */
static void mtls_cluster_init(void) {
  tls_setup(true);
  rt_cluster_start(3, 0);
}
static void mtls_sentinel_init(void) {
  tls_setup(true);
  rt_sentinel_start();
}
TestSuite(mtls_cluster, .init = mtls_cluster_init, .fini = tls_fini,
          .timeout = 120);
TestSuite(mtls_sentinel, .init = mtls_sentinel_init, .fini = tls_fini,
          .timeout = 120);

#define CLIENT_NAME "rlock-topo-tls"

static void tls_opts(rlock_options *o, const char *ca) {
  rlock_options_init(o);
  o->tls_ca_file = ca;
  o->client_name = CLIENT_NAME;
}

static rlock_client *tls_open(const char *uri) {
  rlock_options o;
  tls_opts(&o, g_ca);
  return tc_open(uri, &o);
}

/* tls_opts with the client certificate (make_client_cert). */
static void mtls_opts(rlock_options *o) {
  tls_opts(o, g_ca);
  o->tls_cert_file = g_client_crt;
  o->tls_key_file = g_client_key;
}

static rlock_client *mtls_open(const char *uri) {
  rlock_options o;
  mtls_opts(&o);
  return tc_open(uri, &o);
}

/* Connections named CLIENT_NAME on the node with plain port `port`: how
 * many; each must be on the node's TLS port (laddr), else the test fails
 * naming the line. */
static int named_conns_on_tls(int port) {
  char want[64];
  snprintf(want, sizeof want, "laddr=127.0.0.1:%d ", rt_topo_tls_port(port));
  char *list = rt_node_str(port, "CLIENT LIST");
  cr_assert(list != NULL);
  int n = 0;
  for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strstr(line, "name=" CLIENT_NAME " "))
      continue;
    cr_assert(strstr(line, want) != NULL,
              "a connection of the library on %d is not on its TLS port "
              "(want %s): %s",
              port, want, line);
    n++;
  }
  free(list);
  return n;
}

/* Holder on client a holds `name` (lease 30 s); a waiter on client b is
 * subscribed on `node` (PUBSUB <sub>), then the holder's release wakes it
 * within 1.5 s. */
static void waiter_woken(rlock_client *a, rlock_client *b, const char *name,
                         int node, const char *sub) {
  char chan[128];
  rt_lock_channel(chan, sizeof chan, name);
  rlock *la = tc_lock(a, name), *lb = tc_lock(b, name);
  TC_EQ(rlock_try_lock(la, 0, 30000), 1, "holder");
  tc_try w;
  tc_try_start(&w, lb, 10000, 30000, true);
  int64_t dl = rt_now_ms() + 5000;
  long long subs = 0;
  while ((subs = tc_numsub(node, sub, chan)) == 0 && rt_now_ms() < dl)
    rt_sleep_ms(10);
  cr_assert_eq(subs, 1, "PUBSUB %s %s on %d: %lld subscribers", sub, chan,
               node, subs);
  if (strcmp(sub, "SHARDNUMSUB") == 0)
    cr_assert_eq(tc_numsub(node, "NUMSUB", chan), 0,
                 "plain SUBSCRIBE used in a Redis 7 cluster");
  rt_sleep_ms(200);
  cr_assert_eq(atomic_load(&w.done), 0, "waiter returned while held: %d",
               w.rc);
  int64_t released_at = rt_now_ms();
  TC_EQ(rlock_unlock(la), 0, "holder unlock");
  rt_thread_join(&w.th, 15000);
  cr_assert_eq(w.rc, 1, "waiter: %d %s (%s)", w.rc, rlock_err_name(w.rc),
               w.err);
  cr_assert_lt(w.returned_at - released_at, 1500,
               "waiter took %lld ms after the release (lease was 30 s): "
               "the release message did not wake it",
               (long long)(w.returned_at - released_at));
  cr_assert_eq(w.unlock_rc, 1, "waiter unlock");
  cr_assert_eq(rt_node_int(node, "EXISTS %s", name), 0);
  rlock_free(la);
  rlock_free(lb);
}

/* ---- cluster ---- */

/* What Redis 7.0 tells a TLS client (and a plain one) about the cluster:
 * the map the library reads has the TLS ports. */
Test(tls_cluster, map_has_tls_ports) {
  int m[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), 3);
  /* CLUSTER SHARDS on a plain connection lists both ports of each node */
  redisReply *r = rt_node_cmd(m[0], "CLUSTER SHARDS");
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  int seen = 0;
  for (size_t i = 0; i < r->elements; i++) {
    redisReply *shard = r->element[i];
    for (size_t f = 0; f + 1 < shard->elements; f += 2) {
      if (strcmp(shard->element[f]->str, "nodes") != 0)
        continue;
      redisReply *nodes = shard->element[f + 1];
      for (size_t k = 0; k < nodes->elements; k++) {
        redisReply *nd = nodes->element[k];
        long long port = -1, tls_port = -1;
        for (size_t g = 0; g + 1 < nd->elements; g += 2) {
          if (strcmp(nd->element[g]->str, "port") == 0)
            port = nd->element[g + 1]->integer;
          if (strcmp(nd->element[g]->str, "tls-port") == 0)
            tls_port = nd->element[g + 1]->integer;
        }
        cr_assert(port > 0, "CLUSTER SHARDS: a node without \"port\"");
        cr_assert_eq(tls_port, rt_topo_tls_port((int)port),
                     "CLUSTER SHARDS: node %lld tls-port %lld", port,
                     tls_port);
        seen++;
      }
    }
  }
  freeReplyObject(r);
  cr_assert_eq(seen, 3, "CLUSTER SHARDS listed %d nodes", seen);
  /* A plain connection is redirected to the plain port. */
  char key[64];
  rt_cluster_key_on(key, sizeof key, "map", m[1]);
  r = rt_node_cmd(m[0], "EXISTS %s", key);
  char want[64];
  snprintf(want, sizeof want, "MOVED %d 127.0.0.1:%d", rt_key_slot(key),
           m[1]);
  cr_assert(r->type == REDIS_REPLY_ERROR && strcmp(r->str, want) == 0,
            "plain EXISTS on %d: %s (want %s)", m[0], r->str ? r->str : "?",
            want);
  freeReplyObject(r);
}

/* Locks on every master through clients a and b (opened by open(uri)):
 * held on the owning node, the library's connections on the TLS ports, and
 * a waiter (b) woken by the sharded release message although the lease is
 * 30 s. */
static void lock_every_master(rlock_client *(*open)(const char *uri)) {
  int m[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), 3);
  rlock_client *a = open(rt_cluster_tls_uri());
  rlock_client *b = open(rt_cluster_tls_uri());
  char owner[128];
  rt_owner(owner, sizeof owner, a, rlock_thread_id());
  for (int i = 0; i < 3; i++) {
    char name[64], base[32];
    snprintf(base, sizeof base, "tls-every:%d", i);
    rt_cluster_key_on(name, sizeof name, base, m[i]);
    rlock *l = tc_lock(a, name);
    TC_EQ(rlock_try_lock(l, 0, 10000), 1, "try_lock");
    cr_assert_eq(rt_node_int(m[i], "EXISTS %s", name), 1,
                 "%s not on its owner %d", name, m[i]);
    char *v = rt_node_str(m[i], "HGET %s %s", name, owner);
    cr_assert(v != NULL && strcmp(v, "1") == 0, "hold count on %d: %s", m[i],
              v ? v : "(nil)");
    free(v);
    long long pttl = rt_node_int(m[i], "PTTL %s", name);
    cr_assert(pttl > 5000 && pttl <= 10000, "PTTL %lld", pttl);
    cr_assert_geq(named_conns_on_tls(m[i]), 1,
                  "no connection of the library on %d (TLS port %d)", m[i],
                  rt_topo_tls_port(m[i]));
    TC_EQ(rlock_is_locked(l), 1, "is_locked");
    TC_EQ(rlock_unlock(l), 0, "unlock");
    cr_assert_eq(rt_node_int(m[i], "EXISTS %s", name), 0);
    rlock_free(l);
  }
  for (int i = 0; i < 3; i++) {
    char name[64], base[32];
    snprintf(base, sizeof base, "tls-wake:%d", i);
    rt_cluster_key_on(name, sizeof name, base, m[i]);
    waiter_woken(a, b, name, m[i], "SHARDNUMSUB");
  }
  /* Every connection of both clients, on every node, is a TLS one. */
  int total = 0;
  for (int i = 0; i < 3; i++)
    total += named_conns_on_tls(m[i]);
  cr_assert_geq(total, 3);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* A lock on every master over TLS (see lock_every_master). */
Test(tls_cluster, lock_on_every_master) { lock_every_master(tls_open); }

/* A CA that did not sign the nodes: open fails with RLOCK_ETLS (certificate
 * verify failed) within the connect timeout, leaving no descriptor behind;
 * the right CA still opens afterwards. */
Test(tls_cluster, wrong_ca_fails) {
  /* warm-up: what libuv and OpenSSL keep for the process */
  rlock_client *w = tls_open(rt_cluster_tls_uri());
  rlock_client_free(w);
  int fds0 = tc_count_dir("fd");

  rlock_options o;
  tls_opts(&o, g_other_ca);
  o.uri = rt_cluster_tls_uri();
  o.connect_timeout_ms = 3000;
  rlock_client *c = (rlock_client *)&o; /* must come back NULL */
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ETLS, "open with the wrong CA: %s (%s) after %lld ms",
               rlock_err_name(rc), rlock_last_error(), (long long)took);
  cr_assert_null(c, "*client is NULL after a failed open");
  cr_assert_not_null(strstr(rlock_last_error(), "certificate verify failed"),
                     "detail: %s", rlock_last_error());
  cr_assert_lt(took, 3000 + 1000, "failed open took %lld ms", (long long)took);

  int64_t dl = rt_now_ms() + 3000;
  int fds = tc_count_dir("fd");
  while (fds != fds0 && rt_now_ms() < dl) {
    rt_sleep_ms(20);
    fds = tc_count_dir("fd");
  }
  char list[2048];
  tc_list_fds(list, sizeof list);
  cr_assert_eq(fds, fds0, "%d descriptors before the failed open, %d after: %s",
               fds0, fds, list);

  /* the right CA still opens */
  rlock_client *ok = tls_open(rt_cluster_tls_uri());
  rlock_client_free(ok);
}

/* A held lock's slot is moved to another master: its unlock, sent to the
 * old owner, follows MOVED to the new owner's TLS address. Then a half-way
 * migration: a lock on a migrated key is unlocked through -ASK. */
Test(tls_cluster, moved_over_tls) {
  int m[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), 3);
  rlock_client *c = tls_open(rt_cluster_tls_uri());
  char name[64], owner[128];
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  rt_cluster_key_on(name, sizeof name, "tls-moved", m[0]);
  int slot = rt_key_slot(name);
  rlock *l = tc_lock(c, name);
  TC_EQ(rlock_try_lock(l, 0, 30000), 1, "lock before the move");
  cr_assert_eq(rt_node_int(m[0], "EXISTS %s", name), 1);

  int from = rt_cluster_migrate_slot(slot, m[1], false, NULL);
  cr_assert_eq(from, m[0]);
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", name), 1,
               "the lock did not move to %d", m[1]);
  TC_EQ(rlock_is_held(l), 1, "is_held after the move");
  TC_EQ(rlock_unlock(l), 0, "unlock after the move (MOVED)");
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", name), 0,
               "the lock is still on its new owner %d", m[1]);
  /* the unlock went over a TLS connection to the new owner */
  cr_assert_geq(named_conns_on_tls(m[1]), 1);
  /* and a new lock in that slot goes straight to the new owner */
  TC_EQ(rlock_try_lock(l, 0, 30000), 1, "lock again after the move");
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", name), 1);
  TC_EQ(rlock_unlock(l), 0, "unlock again");
  rlock_free(l);

  /* Half-way: k1 is on the target, the slot still MIGRATING/IMPORTING:
   * -ASK to the target's TLS address. */
  char tag[64], k1[96], k2[96];
  rt_cluster_key_on(tag, sizeof tag, "tls-ask", m[2]);
  snprintf(k1, sizeof k1, "{%s}:held", tag);
  snprintf(k2, sizeof k2, "{%s}:fresh", tag);
  int slot2 = rt_key_slot(tag);
  rlock *l1 = tc_lock(c, k1), *l2 = tc_lock(c, k2);
  TC_EQ(rlock_try_lock(l1, 0, 30000), 1, "lock k1 before the half-way move");
  const char *keys[] = {k1, NULL};
  int from2 = rt_cluster_migrate_slot(slot2, m[0], true, keys);
  cr_assert_eq(from2, m[2]);
  redisReply *r = rt_node_cmd(m[2], "EXISTS %s", k1);
  cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0,
            "EXISTS on the source %d: %s", m[2], r->str ? r->str : "?");
  freeReplyObject(r);
  cr_assert_eq(tc_exists_asking(m[0], k1), 1, "k1 not migrated to %d", m[0]);
  /* A new lock in the slot: not on the source, so -ASK to the target. */
  TC_EQ(rlock_try_lock(l2, 0, 30000), 1, "lock k2 through ASK");
  cr_assert_eq(tc_exists_asking(m[0], k2), 1, "k2 not taken on the target");
  TC_EQ(rlock_is_locked(l1), 1, "is_locked k1 (ASK)");
  TC_EQ(rlock_is_held(l1), 1, "is_held k1 (ASK)");
  cr_assert_geq(named_conns_on_tls(m[0]), 1);
  /* The unlock (2 keys: lock and channel) gets -TRYAGAIN on the importing
   * node until the migration ends, which it does 300 ms after the unlock
   * starts; the retried unlock must then succeed (see test_cluster.c
   * half_way_migration_ask). */
  tc_unl u = {.lock = l1, .owner = rlock_thread_id()};
  rt_thread th;
  rt_thread_start(&th, tc_unl_fn, &u);
  rt_sleep_ms(300);
  rt_cluster_finish_migration(slot2, m[2], m[0]);
  rt_thread_join(&th, 15000);
  cr_assert_eq(u.rc, 1, "unlock of k1 during the migration: %d %s (%s)", u.rc,
               rlock_err_name(u.rc), u.err);
  cr_assert_lt(u.took, 6000, "unlock took %lld ms", (long long)u.took);
  cr_assert_eq(rt_node_int(m[0], "EXISTS %s", k1), 0, "k1 not released");
  TC_EQ(rlock_unlock(l2), 0, "unlock k2 after the migration");
  cr_assert_eq(rt_node_int(m[0], "EXISTS %s", k2), 0, "k2 not released");
  rlock_free(l1);
  rlock_free(l2);
  rlock_client_free(c);
}

/* ---- cluster with replicas: failover ---- */

/* A master is killed: its replica (linked over TLS, tls-replication) takes
 * its slots; the client follows to the promoted node's TLS port and a lock
 * in the failed-over slot works there. The old master comes back as a
 * replica over TLS. */
Test(tls_cluster_failover, kill_master) {
  int m[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(m, RT_MAX_NODES), 3);
  rlock_options o;
  tls_opts(&o, g_ca);
  o.command_timeout_ms = 2000;
  o.retry_interval_ms = 300;
  rlock_client *c = tc_open(rt_cluster_tls_uri(), &o);
  char before[64], after[64];
  rt_cluster_key_on(before, sizeof before, "tls-fo-before", m[0]);
  int slot = rt_key_slot(before);
  rlock *lb = tc_lock(c, before);
  TC_EQ(rlock_try_lock(lb, 0, 10000), 1, "lock before the failover");
  cr_assert_eq(rt_node_int(m[0], "EXISTS %s", before), 1);
  TC_EQ(rlock_unlock(lb), 0, "unlock before the failover");
  rlock_free(lb);

  int64_t t0 = rt_now_ms();
  int promoted = rt_cluster_fail_master(m[0], false, 30000);
  fprintf(stderr, "tls cluster failover in %lld ms\n",
          (long long)(rt_now_ms() - t0));
  cr_assert_neq(promoted, m[0]);
  cr_assert_eq(rt_cluster_slot_owner(slot), promoted);

  rt_cluster_key_on(after, sizeof after, "tls-fo-after", promoted);
  rlock *la = tc_lock(c, after);
  int64_t c0 = rt_now_ms();
  TC_EQ(rlock_try_lock(la, 15000, 10000), 1, "lock after the failover");
  cr_assert_lt(rt_now_ms() - c0, 15000);
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", after), 1,
               "the lock is not on the promoted node %d", promoted);
  cr_assert_geq(named_conns_on_tls(promoted), 1);
  TC_EQ(rlock_unlock(la), 0, "unlock after the failover");
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", after), 0);
  rlock_free(la);

  /* the old master rejoins (TLS bus) as a replica of the promoted node */
  rt_cluster_restart_node(m[0], 30000);
  int64_t dl = rt_now_ms() + 20000;
  bool linked = false;
  while (!linked && rt_now_ms() < dl) {
    char *info = rt_node_str(m[0], "INFO replication");
    char want[64];
    snprintf(want, sizeof want, "master_port:%d", rt_topo_tls_port(promoted));
    linked = info && strstr(info, "role:slave") &&
             strstr(info, "master_link_status:up") && strstr(info, want);
    free(info);
    if (!linked)
      rt_sleep_ms(100);
  }
  cr_assert(linked, "old master %d not a linked replica of %d's TLS port",
            m[0], promoted);
  rlock_client_free(c);
}

/* ---- sentinel ---- */

/* Over rediss+sentinel://: the sentinels name the master's TLS port, the
 * lock lives on the master, a waiter is woken by the release message;
 * after the master is killed, a new lock works on the promoted replica. */
Test(tls_sentinel, lock_and_wake) {
  int master = rt_sentinel_master_port();
  for (int i = 0; i < 3; i++)
    cr_assert_eq(rt_sentinel_reported_master(i), rt_topo_tls_port(master),
                 "sentinel %d reports master port %d (TLS port %d)", i,
                 rt_sentinel_reported_master(i), rt_topo_tls_port(master));
  rlock_options oa, ob;
  tls_opts(&oa, g_ca);
  oa.command_timeout_ms = 2000;
  oa.retry_interval_ms = 300;
  ob = oa;
  rlock_client *a = tc_open(rt_sentinel_tls_uri(), &oa);
  rlock_client *b = tc_open(rt_sentinel_tls_uri(), &ob);
  char name[64], owner[128];
  rt_key(name, sizeof name, "tls-sentinel");
  rt_owner(owner, sizeof owner, a, rlock_thread_id());
  rlock *l = tc_lock(a, name);
  TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock");
  cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 1);
  char *v = rt_node_str(master, "HGET %s %s", name, owner);
  cr_assert(v != NULL && strcmp(v, "1") == 0, "hold count: %s",
            v ? v : "(nil)");
  free(v);
  cr_assert_geq(named_conns_on_tls(master), 1,
                "the library's connections to the master are not TLS ones");
  TC_EQ(rlock_unlock(l), 0, "unlock");
  cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 0);
  rlock_free(l);

  char wake[64];
  rt_key(wake, sizeof wake, "tls-sentinel-wake");
  waiter_woken(a, b, wake, master, "NUMSUB");

  int64_t t0 = rt_now_ms();
  int promoted = rt_sentinel_kill_master(30000);
  fprintf(stderr, "tls sentinel failover in %lld ms\n",
          (long long)(rt_now_ms() - t0));
  cr_assert_neq(promoted, master);
  cr_assert_eq(rt_sentinel_reported_master(0), rt_topo_tls_port(promoted));
  char after[64];
  rt_key(after, sizeof after, "tls-sentinel-after");
  rlock *la = tc_lock(a, after);
  int64_t c0 = rt_now_ms();
  TC_EQ(rlock_try_lock(la, 10000, 10000), 1, "lock after the failover");
  cr_assert_lt(rt_now_ms() - c0, 15000);
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", after), 1,
               "the lock is not on the promoted master %d", promoted);
  cr_assert_geq(named_conns_on_tls(promoted), 1);
  TC_EQ(rlock_unlock(la), 0, "unlock after the failover");
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", after), 0);
  rlock_free(la);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- mutual TLS ---- */

/* Opening uri without a client certificate against nodes that require one
 * (--tls-auth-clients yes): RLOCK_ETLS, *client NULL, a detail that names
 * the server's complaint and the tls_cert_file hint, within the connect
 * timeout, and no descriptor left behind; then the certificate still
 * opens. */
static void no_client_cert_fails(const char *uri) {
  /* warm-up: what libuv and OpenSSL keep for the process */
  rlock_client *w = mtls_open(uri);
  rlock_client_free(w);
  int fds0 = tc_count_dir("fd");

  rlock_options o;
  tls_opts(&o, g_ca); /* the right CA, no client certificate */
  o.uri = uri;
  o.connect_timeout_ms = 3000;
  rlock_client *c = (rlock_client *)&o; /* must come back NULL */
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = rt_now_ms() - t0;
  char err[512];
  snprintf(err, sizeof err, "%s", rlock_last_error());
  fprintf(stderr, "open without a client certificate (%s): %s after %lld ms: "
          "%s\n", uri, rlock_err_name(rc), (long long)took, err);
  cr_assert_eq(rc, RLOCK_ETLS,
               "open without a client certificate: %s (%s) after %lld ms",
               rlock_err_name(rc), err, (long long)took);
  cr_assert_null(c, "*client is NULL after a failed open");
  cr_assert_not_null(strstr(err, "certificate required"),
                     "the server's alert is not named: %s", err);
  cr_assert_not_null(strstr(err, "tls_cert_file"),
                     "no hint to set tls_cert_file: %s", err);
  cr_assert_lt(took, 3000 + 1000, "failed open took %lld ms", (long long)took);

  int64_t dl = rt_now_ms() + 3000;
  int fds = tc_count_dir("fd");
  while (fds != fds0 && rt_now_ms() < dl) {
    rt_sleep_ms(20);
    fds = tc_count_dir("fd");
  }
  char list[2048];
  tc_list_fds(list, sizeof list);
  cr_assert_eq(fds, fds0, "%d descriptors before the failed open, %d after: %s",
               fds0, fds, list);

  /* the client certificate still opens */
  rlock_client *ok = mtls_open(uri);
  rlock_client_free(ok);
}

/* Asserts the node on plain port `port` requires client certificates. */
static void assert_auth_clients(int port) {
  redisReply *r = rt_node_cmd(port, "CONFIG GET tls-auth-clients");
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                r->element[1]->str != NULL &&
                strcmp(r->element[1]->str, "yes") == 0,
            "node %d: tls-auth-clients is not yes", port);
  freeReplyObject(r);
}

/* With the client certificate: a lock on every master, a waiter woken by
 * the release, every connection of the library on a TLS port. */
Test(mtls_cluster, client_cert_locks_every_master) {
  for (int i = 0; i < rt_cluster_node_count(); i++)
    assert_auth_clients(rt_cluster_port(i));
  lock_every_master(mtls_open);
}

/* Without one: a clean RLOCK_ETLS at open. A client certificate from a CA
 * the nodes do not trust: RLOCK_ETLS too, with the server's alert. */
Test(mtls_cluster, no_client_cert_fails) {
  no_client_cert_fails(rt_cluster_tls_uri());

  char other[300];
  snprintf(other, sizeof other, "%s/otherclient.crt", g_dir);
  rlock_options o;
  mtls_opts(&o);
  o.tls_cert_file = other;
  o.uri = rt_cluster_tls_uri();
  o.connect_timeout_ms = 3000;
  rlock_client *c = (rlock_client *)&o; /* must come back NULL */
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = rt_now_ms() - t0;
  fprintf(stderr, "open with an untrusted client certificate: %s after %lld "
          "ms: %s\n", rlock_err_name(rc), (long long)took, rlock_last_error());
  cr_assert_eq(rc, RLOCK_ETLS,
               "open with an untrusted client certificate: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
  cr_assert_null(c);
  cr_assert_not_null(strstr(rlock_last_error(), "alert unknown ca"),
                     "the server's alert is not named: %s",
                     rlock_last_error());
  cr_assert_not_null(strstr(rlock_last_error(), "refused tls_cert_file"),
                     "no hint at the client certificate: %s",
                     rlock_last_error());
  cr_assert_lt(took, 3000 + 1000, "failed open took %lld ms", (long long)took);
}

/* Over rediss+sentinel:// with the client certificate: the sentinels
 * (which want one too) name the master's TLS port, the lock lives on the
 * master, the library's connections to the master and the sentinels are
 * TLS ones, a waiter is woken by the release message. */
Test(mtls_sentinel, client_cert_lock_and_wake) {
  int master = rt_sentinel_master_port();
  assert_auth_clients(master);
  assert_auth_clients(rt_sentinel_replica_port());
  for (int i = 0; i < 3; i++)
    cr_assert_eq(rt_sentinel_reported_master(i), rt_topo_tls_port(master),
                 "sentinel %d reports master port %d (TLS port %d)", i,
                 rt_sentinel_reported_master(i), rt_topo_tls_port(master));
  rlock_client *a = mtls_open(rt_sentinel_tls_uri());
  rlock_client *b = mtls_open(rt_sentinel_tls_uri());
  char name[64], owner[128];
  rt_key(name, sizeof name, "mtls-sentinel");
  rt_owner(owner, sizeof owner, a, rlock_thread_id());
  rlock *l = tc_lock(a, name);
  TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock");
  cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 1);
  char *v = rt_node_str(master, "HGET %s %s", name, owner);
  cr_assert(v != NULL && strcmp(v, "1") == 0, "hold count: %s",
            v ? v : "(nil)");
  free(v);
  cr_assert_geq(named_conns_on_tls(master), 1,
                "the library's connections to the master are not TLS ones");
  /* whatever the library keeps open to the sentinels is TLS too */
  for (int i = 0; i < 3; i++)
    (void)named_conns_on_tls(rt_sentinel_port(i));
  TC_EQ(rlock_unlock(l), 0, "unlock");
  cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 0);
  rlock_free(l);

  char wake[64];
  rt_key(wake, sizeof wake, "mtls-sentinel-wake");
  waiter_woken(a, b, wake, master, "NUMSUB");
  cr_assert_geq(named_conns_on_tls(master), 2);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* Without a client certificate: the sentinels refuse it, a clean
 * RLOCK_ETLS at open. */
Test(mtls_sentinel, no_client_cert_fails) {
  no_client_cert_fails(rt_sentinel_tls_uri());
}
