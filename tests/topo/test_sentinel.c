/* The library against Redis Sentinel (1 master, 1 replica, 3 sentinels,
 * quorum 2) with "redis+sentinel://S1,S2,S3/mymaster" URIs, through rlock.h
 * only: locking on the master the sentinels name, failover, bad names and
 * passwords, and replica sync (WAIT; RLOCK_ENOREPLICA). Each test starts
 * its own setup (about 7 s). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "topo_client.h"

TestSuite(sentinel, .init = rt_sentinel_start, .fini = rt_topo_stop_all,
          .timeout = 120);

/* Reads what a MONITOR connection has buffered (200 ms read timeout) and
 * keeps the lines that mention `key` or WAIT, abridged, one per line. */
static void monitor_collect(redisContext *mon, const char *key, char *out,
                            size_t n) {
  const char *needles[] = {key, "\"wait\"", NULL};
  out[0] = '\0';
  tc_monitor_lines(mon, needles, 200, out, n);
}

/* g. Lock/unlock on the master; a waiter woken by the release message. */
Test(sentinel, lock_unlock_and_wake) {
  int master = rt_sentinel_master_port();
  rlock_client *a = tc_open(rt_sentinel_uri(), NULL);
  rlock_client *b = tc_open(rt_sentinel_uri(), NULL);
  char name[64], owner[128];
  rt_key(name, sizeof name, "sent");
  rt_owner(owner, sizeof owner, a, rlock_thread_id());
  rlock *la = tc_lock(a, name), *lb = tc_lock(b, name);

  TC_EQ(rlock_try_lock(la, 0, 10000), 1, "lock");
  char *v = rt_node_str(master, "HGET %s %s", name, owner);
  cr_assert(v && strcmp(v, "1") == 0, "on the master: %s", v ? v : "(nil)");
  free(v);
  /* Replicated (replica sync waited for it). */
  v = rt_node_str(rt_sentinel_replica_port(), "HGET %s %s", name, owner);
  cr_assert(v && strcmp(v, "1") == 0, "on the replica: %s", v ? v : "(nil)");
  free(v);

  tc_release_wakes(master, la, lb);
  cr_assert_eq(rt_node_int(master, "EXISTS %s", name), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* g. SIGKILL the master: the client follows the sentinels to the promoted
 * replica. A waiter across the failover returns within its deadline; a
 * watchdog lock is renewed on the new master or reported lost; a lock taken
 * afterwards works there. */
Test(sentinel, failover_kill_master) {
  int old = rt_sentinel_master_port();
  tc_lost lost = {0};
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 3000;
  o.command_timeout_ms = 2000;
  o.retry_interval_ms = 300;
  o.on_lock_lost = tc_on_lost;
  o.on_lock_lost_data = &lost;
  rlock_client *a = tc_open(rt_sentinel_uri(), &o);
  rlock_options ob;
  rlock_options_init(&ob);
  ob.command_timeout_ms = 2000;
  ob.retry_interval_ms = 300;
  rlock_client *b = tc_open(rt_sentinel_uri(), &ob);
  char wd[64], busy[64], after[64], owner[128];
  rt_key(wd, sizeof wd, "wd");
  rt_key(busy, sizeof busy, "busy");
  rt_key(after, sizeof after, "after");
  rt_owner(owner, sizeof owner, a, rlock_thread_id());
  rlock *lwd = tc_lock(a, wd), *lbusy = tc_lock(a, busy);
  rlock *lbusy_b = tc_lock(b, busy), *lafter = tc_lock(a, after);

  TC_EQ(rlock_try_lock(lwd, 0, -1), 1, "watchdog lock before the failover");
  TC_EQ(rlock_try_lock(lbusy, 0, 30000), 1, "busy lock");
  tc_try w;
  const int64_t wait_ms = 8000;
  tc_try_start(&w, lbusy_b, wait_ms, 5000, false);
  rt_sleep_ms(200);

  int64_t t0 = rt_now_ms();
  int promoted = rt_sentinel_kill_master(20000);
  fprintf(stderr, "sentinel failover in %lld ms\n",
          (long long)(rt_now_ms() - t0));
  cr_assert_neq(promoted, old);

  rt_thread_join(&w.th, wait_ms + 10000);
  cr_assert_lt(w.returned_at - w.started_at, wait_ms + 3000,
               "waiter (wait %lld ms) returned after %lld ms: %d %s",
               (long long)wait_ms, (long long)(w.returned_at - w.started_at),
               w.rc, w.rc < 0 ? rlock_err_name(w.rc) : "");
  cr_assert_neq(w.rc, 1, "waiter got a lock its holder still holds (%s)",
                atomic_load(&lost.count) ? "loss reported" : "no loss");

  /* A lock taken after the failover lands on the new master. */
  int64_t c0 = rt_now_ms();
  TC_EQ(rlock_try_lock(lafter, 5000, 10000), 1, "lock after the failover");
  cr_assert_lt(rt_now_ms() - c0, 15000);
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", after), 1);
  TC_EQ(rlock_unlock(lafter), 0, "unlock after the failover");
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", after), 0);

  /* The watchdog lock: renewed on the new master, or reported lost. */
  rt_sleep_ms(3500); /* more than one lease: held only if renewed there */
  if (atomic_load(&lost.count) == 0) {
    long long pttl = rt_node_int(promoted, "PTTL %s", wd);
    cr_assert(pttl > 0 && pttl <= 3000, "PTTL of the watchdog lock on the "
              "new master: %lld (and no loss reported)", pttl);
    char *v = rt_node_str(promoted, "HGET %s %s", wd, owner);
    cr_assert(v && strcmp(v, "1") == 0);
    free(v);
    TC_EQ(rlock_is_held(lwd), 1, "is_held");
    TC_EQ(rlock_unlock(lwd), 0, "unlock of the renewed lock");
  } else {
    TC_EQ(rlock_unlock(lwd), RLOCK_ELOCKLOST, "unlock of a lost lock");
  }
  rlock_free(lwd);
  rlock_free(lbusy);
  rlock_free(lbusy_b);
  rlock_free(lafter);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* g. A planned failover (SENTINEL FAILOVER): locks keep working, on the
 * new master. */
Test(sentinel, planned_failover) {
  rlock_client *a = tc_open(rt_sentinel_uri(), NULL);
  char name[64];
  rt_key(name, sizeof name, "planned");
  rlock *l = tc_lock(a, name);
  TC_EQ(rlock_try_lock(l, 0, 20000), 1, "lock");
  int promoted = rt_sentinel_failover(20000);
  TC_EQ(rlock_is_held(l), 1, "held across the failover");
  TC_EQ(rlock_unlock(l), 0, "unlock on the new master");
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", name), 0);
  TC_EQ(rlock_try_lock(l, 0, 20000), 1, "lock on the new master");
  cr_assert_eq(rt_node_int(promoted, "EXISTS %s", name), 1);
  TC_EQ(rlock_unlock(l), 0, "unlock");
  rlock_free(l);
  rlock_client_free(a);
}

/* h. An unknown master name: open fails quickly, naming it. */
Test(sentinel, unknown_master_name) {
  char uri[256];
  snprintf(uri, sizeof uri,
           "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/nosuchmaster",
           rt_sentinel_port(0), rt_sentinel_port(1));
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  rlock_client *c = NULL;
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = rt_now_ms() - t0;
  cr_assert(rc < 0, "open with an unknown master name: %d", rc);
  cr_assert_null(c);
  cr_assert_lt(took, 5000, "took %lld ms", (long long)took);
  cr_assert(strstr(rlock_last_error(), "nosuchmaster") != NULL,
            "last error does not name the master: \"%s\" (%s)",
            rlock_last_error(), rlock_err_name(rc));
}

/* h. Sentinels that require a password. */
static void sentinel_auth(void) { rt_sentinel_start_auth("s3ntinel"); }

/* A suite of its own: a test's .init runs after the suite's, so inside
 * `sentinel` it would start a second setup. */
TestSuite(sentinel_auth, .init = sentinel_auth, .fini = rt_topo_stop_all,
          .timeout = 120);

Test(sentinel_auth, wrong_missing_and_right_password) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_sentinel_uri();
  o.sentinel_password = "wrong";
  rlock_client *c = NULL;
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, RLOCK_EAUTH, "wrong sentinel password: %d %s (%s)", rc,
               rlock_err_name(rc), rlock_last_error());
  cr_assert_null(c);
  cr_assert_lt(rt_now_ms() - t0, 5000);

  o.sentinel_password = NULL;
  rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, RLOCK_EAUTH, "no sentinel password: %d %s (%s)", rc,
               rlock_err_name(rc), rlock_last_error());

  o.sentinel_password = "s3ntinel";
  c = tc_open(rt_sentinel_uri(), &o);
  char name[64];
  rt_key(name, sizeof name, "auth");
  rlock *l = tc_lock(c, name);
  TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock with the right password");
  cr_assert_eq(rt_node_int(rt_sentinel_master_port(), "EXISTS %s", name), 1);
  TC_EQ(rlock_unlock(l), 0, "unlock");
  rlock_free(l);
  rlock_client_free(c);
}

/* i. Replica sync: with the replica linked, an acquire is WAITed for; with
 * the replica frozen (SIGSTOP: the master still counts it), an acquire no
 * replica confirms fails with RLOCK_ENOREPLICA and leaves nothing behind;
 * with replica_sync = 0 the same acquire succeeds. */
Test(sentinel, replica_sync) {
  int master = rt_sentinel_master_port(), replica = rt_sentinel_replica_port();
  freeReplyObject(rt_node_cmd(master, "CONFIG RESETSTAT"));
  rlock_options o;
  rlock_options_init(&o);
  o.replica_sync_timeout_ms = 500;
  rlock_client *c = tc_open(rt_sentinel_uri(), &o);
  char k1[64], k2[64];
  rt_key(k1, sizeof k1, "sync");
  rt_key(k2, sizeof k2, "nosync");
  rlock *l1 = tc_lock(c, k1), *l2 = tc_lock(c, k2);

  TC_EQ(rlock_try_lock(l1, 0, 10000), 1, "lock with the replica linked");
  cr_assert_geq(tc_calls(master, "wait"), 1, "no WAIT was sent");
  cr_assert_eq(rt_node_int(replica, "EXISTS %s", k1), 1,
               "acknowledged, so on the replica");
  TC_EQ(rlock_unlock(l1), 0, "unlock");

  rt_sentinel_pause_node(replica, true);
  /* MONITOR on the master: what the failed acquire sent, for the failure
   * message. */
  redisContext *mon = NULL;
  if (!getenv("TOPO_NO_MONITOR")) { /* MONITOR slows the master a little */
    mon = rt_node_connect(master, 3000);
    redisReply *mr = redisCommand(mon, "MONITOR");
    cr_assert(mr && mr->type == REDIS_REPLY_STATUS);
    freeReplyObject(mr);
  }
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(l2, 0, 10000);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ENOREPLICA, "acquire with a frozen replica: %d %s (%s)",
               rc, rlock_err_name(rc), rlock_last_error());
  cr_assert_lt(took, o.replica_sync_timeout_ms + 2500, "took %lld ms",
               (long long)took);
  long long left = rt_node_int(master, "EXISTS %s", k2);
  long long pttl = rt_node_int(master, "PTTL %s", k2);
  rt_sleep_ms(1000);
  long long later = rt_node_int(master, "EXISTS %s", k2);
  char seen[3000] = "";
  if (mon) {
    monitor_collect(mon, k2, seen, sizeof seen);
    redisFree(mon);
  }
  cr_assert_eq(left, 0, "the failed acquire left its key on the master "
               "when it returned (PTTL %lld a moment later; 1 s later "
               "EXISTS = %lld). Commands on the master, in order:\n%s",
               pttl, later, seen);
  TC_EQ(rlock_is_held(l2), 0, "not held");

  rlock_options o0;
  rlock_options_init(&o0);
  o0.replica_sync = 0;
  rlock_client *c0 = tc_open(rt_sentinel_uri(), &o0);
  rlock *l0 = tc_lock(c0, k2);
  long long waits = tc_calls(master, "wait");
  TC_EQ(rlock_try_lock(l0, 0, 10000), 1, "replica_sync = 0");
  cr_assert_eq(rt_node_int(master, "EXISTS %s", k2), 1);
  TC_EQ(rlock_unlock(l0), 0, "unlock (replica_sync = 0)");
  cr_assert_eq(tc_calls(master, "wait"), waits, "WAIT sent with replica_sync 0");
  rt_sentinel_pause_node(replica, false);
  rlock_free(l0);
  rlock_free(l1);
  rlock_free(l2);
  rlock_client_free(c0);
  rlock_client_free(c);
}

/* Replicas the master still has connected, per its ROLE. */
static long long connected_replicas(int port) {
  redisReply *r = rt_node_cmd(port, "ROLE");
  long long n = r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
                        r->element[2]->type == REDIS_REPLY_ARRAY
                    ? (long long)r->element[2]->elements
                    : -1;
  freeReplyObject(r);
  return n;
}

/* Issue 24 (3): the master's link to its replica broken (the replica
 * frozen by SIGSTOP, then dropped by the master for overflowing a small
 * replica output buffer), so the master's ROLE lists no replica while the
 * sentinels still list one. An acquire must not succeed unreplicated:
 * WAIT 1 is sent, nobody acknowledges, RLOCK_ENOREPLICA and no key left.
 * With replica_sync_connected_only = 1 (availability) it succeeds without
 * WAIT. Then the master is SIGKILLed and the stale replica promoted: the
 * default client never held its lock, so a second client taking it is no
 * double holder; the availability client's lock is lost in the failover,
 * as its option documents. */
Test(sentinel, replica_link_broken) {
  int master = rt_sentinel_master_port(), replica = rt_sentinel_replica_port();
  freeReplyObject(rt_node_cmd(master, "CONFIG SET client-output-buffer-limit "
                                      "%s", "replica 256kb 256kb 0"));
  rt_sentinel_pause_node(replica, true);
  /* Overwrite one key until the replica's output buffer overflows: the
   * master drops the link (bounded: 8 s, 40 MB). */
  enum { BLOB = 64 * 1024 };
  char *blob = malloc(BLOB);
  cr_assert(blob);
  memset(blob, 'x', BLOB);
  int64_t dl = rt_now_ms() + 8000;
  int writes = 0;
  while (connected_replicas(master) != 0) {
    cr_assert(rt_now_ms() < dl && writes < 640,
              "the master kept its replica link after %d writes of %d bytes",
              writes, BLOB);
    for (int i = 0; i < 16; i++, writes++)
      freeReplyObject(rt_node_cmd(master, "SET fill %b", blob, (size_t)BLOB));
  }
  free(blob);
  freeReplyObject(rt_node_cmd(master, "DEL fill"));
  freeReplyObject(rt_node_cmd(master, "CONFIG RESETSTAT"));

  rlock_options o;
  rlock_options_init(&o);
  o.replica_sync_timeout_ms = 300;
  rlock_client *c = tc_open(rt_sentinel_uri(), &o);
  char k1[64], k2[64];
  rt_key(k1, sizeof k1, "safe");
  rt_key(k2, sizeof k2, "avail");
  rlock *l1 = tc_lock(c, k1);
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(l1, 0, 60000);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ENOREPLICA, "acquire with the replica link broken: "
               "%d %s (%s)", rc, rlock_err_name(rc), rlock_last_error());
  cr_assert_lt(took, o.replica_sync_timeout_ms + 2500, "took %lld ms",
               (long long)took);
  cr_assert_geq(tc_calls(master, "wait"), 1, "no WAIT was sent");
  cr_assert_eq(rt_node_int(master, "EXISTS %s", k1), 0, "undone");
  TC_EQ(rlock_is_held(l1), 0, "not held");

  rlock_options oa;
  rlock_options_init(&oa);
  oa.replica_sync_timeout_ms = 300;
  oa.replica_sync_connected_only = 1;
  rlock_client *ca = tc_open(rt_sentinel_uri(), &oa);
  rlock *la = tc_lock(ca, k2);
  long long waits = tc_calls(master, "wait");
  TC_EQ(rlock_try_lock(la, 0, 60000), 1, "replica_sync_connected_only = 1");
  cr_assert_eq(tc_calls(master, "wait"), waits, "WAIT sent without a "
               "connected replica under replica_sync_connected_only");
  cr_assert_eq(rt_node_int(master, "EXISTS %s", k2), 1);

  /* The failover to the replica that never saw either acquire. */
  int promoted = rt_sentinel_kill_master_resume_replica(30000);
  cr_assert_neq(promoted, master);
  rlock_options ob;
  rlock_options_init(&ob);
  ob.replica_sync_connected_only = 1; /* the old master, listed, is dead */
  rlock_client *b = tc_open(rt_sentinel_uri(), &ob);
  rlock *lb1 = tc_lock(b, k1), *lb2 = tc_lock(b, k2);
  TC_EQ(rlock_try_lock(lb1, 5000, 60000), 1, "second client, lock 1");
  TC_EQ(rlock_is_held(l1), 0,
        "first client's lock 1 after the failover (double holder)");
  /* The availability trade-off: the unreplicated lock did not survive. */
  TC_EQ(rlock_try_lock(lb2, 5000, 60000), 1, "second client, lock 2");
  rlock_free(l1);
  rlock_free(la);
  rlock_free(lb1);
  rlock_free(lb2);
  rlock_client_free(b);
  rlock_client_free(ca);
  rlock_client_free(c);
}
