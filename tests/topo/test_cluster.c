/* The library against a real Redis Cluster (3 masters, no replicas: WAIT is
 * never sent), through rlock.h only, with "redis+cluster://" seed URIs.
 * Each test starts its own cluster (Criterion runs every test in its own
 * process; a 3-node cluster comes up in about 2 s). What is asserted is
 * what is really on the owning node: the slot is computed with the
 * harness's CRC16 and checked with EXISTS / PTTL / HGET there. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "topo_client.h"

static void cluster3(void) { rt_cluster_start(3, 0); }

TestSuite(cluster, .init = cluster3, .fini = rt_topo_stop_all,
          .timeout = 120);

static int masters3(int *m) {
  int n = rt_cluster_masters(m, RT_MAX_NODES);
  cr_assert_eq(n, 3);
  return n;
}

/* Major version of the server on port (INFO server). */
static int redis_major(int port) {
  char *info = rt_node_str(port, "INFO server");
  const char *p = info ? strstr(info, "redis_version:") : NULL;
  int v = p ? atoi(p + strlen("redis_version:")) : 0;
  free(info);
  return v;
}

/* The owner field "<uuid>:<thread>" of the calling thread on client c. */
static void my_owner(char *buf, size_t n, rlock_client *c) {
  rt_owner(buf, n, c, rlock_thread_id());
}

/* a. A lock on every master: lock/unlock, and the hash lives on the master
 * that owns its slot (and only there). */
Test(cluster, lock_unlock_on_every_master) {
  int m[RT_MAX_NODES];
  masters3(m);
  rlock_client *c = tc_open(rt_cluster_uri(), NULL);
  char owner[128];
  my_owner(owner, sizeof owner, c);
  for (int i = 0; i < 3; i++) {
    char name[64], base[32];
    snprintf(base, sizeof base, "every:%d", i);
    rt_cluster_key_on(name, sizeof name, base, m[i]);
    rlock *l = tc_lock(c, name);
    TC_EQ(rlock_try_lock(l, 0, 10000), 1, "try_lock");
    cr_assert_eq(rt_node_int(m[i], "EXISTS %s", name), 1,
                 "%s not on its owner %d", name, m[i]);
    char *v = rt_node_str(m[i], "HGET %s %s", name, owner);
    cr_assert(v != NULL && strcmp(v, "1") == 0, "hold count on %d: %s", m[i],
              v ? v : "(nil)");
    free(v);
    long long pttl = rt_node_int(m[i], "PTTL %s", name);
    cr_assert(pttl > 5000 && pttl <= 10000, "PTTL %lld", pttl);
    /* The other masters do not have it: they redirect. */
    for (int j = 0; j < 3; j++) {
      if (j == i)
        continue;
      redisReply *r = rt_node_cmd(m[j], "EXISTS %s", name);
      cr_assert(r->type == REDIS_REPLY_ERROR &&
                    strncmp(r->str, "MOVED ", 6) == 0,
                "%d answered EXISTS for a key of %d", m[j], m[i]);
      freeReplyObject(r);
    }
    TC_EQ(rlock_is_locked(l), 1, "is_locked");
    TC_EQ(rlock_is_held(l), 1, "is_held");
    TC_EQ(rlock_try_lock(l, 0, 10000), 1, "re-entry");
    TC_EQ(rlock_hold_count(l), 2, "hold_count");
    TC_EQ(rlock_unlock(l), 0, "inner unlock");
    TC_EQ(rlock_unlock(l), 0, "unlock");
    cr_assert_eq(rt_node_int(m[i], "EXISTS %s", name), 0);
    TC_EQ(rlock_is_locked(l), 0, "is_locked after unlock");
    rlock_free(l);
  }
  rlock_client_free(c);
}

/* MONITOR on a node: a connection that streams every command it runs. */
static redisContext *monitor_start(int port) {
  redisContext *mc = rt_node_connect(port, 3000);
  redisReply *r = redisCommand(mc, "MONITOR");
  cr_assert(r && r->type == REDIS_REPLY_STATUS, "MONITOR");
  freeReplyObject(r);
  return mc;
}

/* Reads MONITOR lines for up to bound_ms; true when one contains all of
 * the needles (case-insensitive). */
static bool monitor_saw(redisContext *mc, const char *n1, const char *n2,
                        int64_t bound_ms, char *line, size_t line_n) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
  redisSetTimeout(mc, tv);
  int64_t deadline = rt_now_ms() + bound_ms;
  while (rt_now_ms() < deadline) {
    void *rv = NULL;
    if (redisGetReply(mc, &rv) != REDIS_OK) {
      if (mc->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        mc->err = 0; /* read timeout: keep listening */
        continue;
      }
      return false;
    }
    redisReply *r = rv;
    bool hit = r->type == REDIS_REPLY_STATUS && strcasestr(r->str, n1) &&
               strcasestr(r->str, n2);
    if (hit)
      snprintf(line, line_n, "%s", r->str);
    freeReplyObject(r);
    if (hit)
      return true;
  }
  return false;
}

/* a. A waiter in another client is woken by the release message well
 * before the holder's lease ends, through sharded pub/sub on the node that
 * owns the lock's slot (Redis 7, sharded_pubsub auto). */
Test(cluster, waiter_woken_by_sharded_message) {
  int m[RT_MAX_NODES];
  masters3(m);
  char name[64], chan[128];
  rt_cluster_key_on(name, sizeof name, "wake", m[1]);
  rt_lock_channel(chan, sizeof chan, name);
  cr_assert_eq(rt_key_slot(chan), rt_key_slot(name));
  int node = m[1];

  rlock_client *a = tc_open(rt_cluster_uri(), NULL);
  rlock_client *b = tc_open(rt_cluster_uri(), NULL);
  rlock *la = tc_lock(a, name), *lb = tc_lock(b, name);
  TC_EQ(rlock_try_lock(la, 0, 10000), 1, "holder");

  tc_try w;
  tc_try_start(&w, lb, 8000, 10000, true);
  /* Redis 7: the waiter's subscription is sharded (auto), on the owning
   * node; before 7 there is no sharded pub/sub and it is a plain one. */
  bool v7 = redis_major(node) >= 7;
  const char *mine = v7 ? "SHARDNUMSUB" : "NUMSUB";
  int64_t dl = rt_now_ms() + 3000;
  long long subs = 0;
  while ((subs = tc_numsub(node, mine, chan)) == 0 && rt_now_ms() < dl)
    rt_sleep_ms(10);
  cr_assert_eq(subs, 1, "PUBSUB %s %s on %d: %lld subscribers", mine, chan,
               node, subs);
  if (v7)
    cr_assert_eq(tc_numsub(node, "NUMSUB", chan), 0,
                 "plain SUBSCRIBE used in a Redis 7 cluster");
  cr_assert_eq(atomic_load(&w.done), 0, "waiter returned while held: %d",
               w.rc);

  redisContext *mon = monitor_start(node);
  rt_sleep_ms(300 - (rt_now_ms() - w.started_at) > 0
                  ? 300 - (rt_now_ms() - w.started_at)
                  : 0);
  int64_t released_at = rt_now_ms();
  TC_EQ(rlock_unlock(la), 0, "holder unlock");
  char line[512] = "";
  bool saw = monitor_saw(mon, v7 ? "spublish" : "publish", chan, 2000, line,
                         sizeof line);
  redisFree(mon);
  rt_thread_join(&w.th, 10000);
  cr_assert_eq(w.rc, 1, "waiter: %d %s (%s)", w.rc, rlock_err_name(w.rc),
               w.err);
  cr_assert_lt(w.returned_at - released_at, 2000,
               "waiter took %lld ms after the release (lease was 10 s)",
               (long long)(w.returned_at - released_at));
  cr_assert_lt(w.returned_at - w.started_at, 2500);
  cr_assert_eq(w.unlock_rc, 0, "waiter unlock");
  cr_assert(saw, "MONITOR on %d never showed %s %s", node,
            v7 ? "SPUBLISH" : "PUBLISH", chan);
  cr_assert_eq(rt_node_int(node, "EXISTS %s", name), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* b. Mutual exclusion across processes: 3 children, each with its own
 * client, 200 non-atomic read-modify-write increments each under one
 * lock. */
#define MX_PROCS 3
#define MX_ROUNDS 200

static int mx_child(const char *uri, const char *name, const char *counter,
                    int port) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  rlock_client *c = NULL;
  if (rlock_client_new(&c, &o) != 0)
    return 10;
  rlock *l = NULL;
  if (rlock_new(c, name, &l) != 0)
    return 11;
  redisContext *rc = redisConnect("127.0.0.1", port);
  if (!rc || rc->err)
    return 12;
  int status = 0;
  for (int i = 0; i < MX_ROUNDS && status == 0; i++) {
    if (rlock_lock(l, 10000) != 0) {
      status = 13;
      break;
    }
    redisReply *r = redisCommand(rc, "GET %s", counter);
    long v = (r && r->type == REDIS_REPLY_STRING) ? atol(r->str) : 0;
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL))
      status = 14;
    if (r)
      freeReplyObject(r);
    if (i % 16 == 0)
      usleep(200); /* widen the window a lost exclusion would show in */
    r = redisCommand(rc, "SET %s %ld", counter, v + 1);
    if (!r || r->type != REDIS_REPLY_STATUS)
      status = 15;
    if (r)
      freeReplyObject(r);
    if (rlock_unlock(l) != 0)
      status = status ? status : 16;
  }
  redisFree(rc);
  rlock_free(l);
  rlock_client_free(c);
  return status;
}

Test(cluster, mutual_exclusion_counter_across_processes) {
  int m[RT_MAX_NODES];
  masters3(m);
  char name[64], counter[96];
  rt_cluster_key_on(name, sizeof name, "mx", m[2]);
  snprintf(counter, sizeof counter, "{%s}:counter", name);
  int port = rt_cluster_key_owner(counter);
  cr_assert_eq(port, m[2]);
  char uri[512];
  snprintf(uri, sizeof uri, "%s", rt_cluster_uri());
  pid_t kids[MX_PROCS];
  int64_t t0 = rt_now_ms();
  for (int i = 0; i < MX_PROCS; i++) {
    kids[i] = fork();
    cr_assert(kids[i] >= 0);
    if (kids[i] == 0)
      _exit(mx_child(uri, name, counter, port)); /* no atexit: the cluster
                                                    belongs to the parent */
  }
  for (int i = 0; i < MX_PROCS; i++) {
    int st = 0;
    bool reaped = false;
    while (rt_now_ms() - t0 < 60000) {
      if (waitpid(kids[i], &st, WNOHANG) == kids[i]) {
        reaped = true;
        break;
      }
      rt_sleep_ms(20);
    }
    if (!reaped) {
      for (int k = 0; k < MX_PROCS; k++)
        kill(kids[k], SIGKILL);
      cr_assert_fail("child %d did not finish within 60 s", i);
    }
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "child %d failed: status %d", i,
              WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
  }
  fprintf(stderr, "mutual exclusion: %d increments in %lld ms\n",
          MX_PROCS * MX_ROUNDS, (long long)(rt_now_ms() - t0));
  char *v = rt_node_str(port, "GET %s", counter);
  cr_assert(v != NULL);
  cr_assert_eq(atol(v), MX_PROCS * MX_ROUNDS, "counter %s", v);
  free(v);
  cr_assert_eq(rt_node_int(port, "EXISTS %s", name), 0);
}

/* c. The watchdog renews locks in 5 different slots spread over all 3
 * masters: renewals never mix slots (a CROSSSLOT batch would lose them). */
Test(cluster, watchdog_renews_locks_in_different_slots) {
  int m[RT_MAX_NODES];
  masters3(m);
  tc_lost lost = {0};
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 1000;
  o.on_lock_lost = tc_on_lost;
  o.on_lock_lost_data = &lost;
  rlock_client *c = tc_open(rt_cluster_uri(), &o);
  char owner[128];
  my_owner(owner, sizeof owner, c);
  enum { N = 5 };
  char names[N][64];
  int port[N], slots[N];
  rlock *l[N];
  for (int i = 0; i < N; i++) {
    char base[32];
    snprintf(base, sizeof base, "wd%d", i);
    /* masters 0,1,2,0,1 - each lock in a slot of its own */
    for (int k = 0;; k++) {
      rt_cluster_key_on(names[i], sizeof names[i], base, m[i % 3]);
      slots[i] = rt_key_slot(names[i]);
      int dup = 0;
      for (int j = 0; j < i; j++)
        dup |= slots[j] == slots[i];
      if (!dup)
        break;
      snprintf(base, sizeof base, "wd%d.%d", i, k);
    }
    port[i] = m[i % 3];
    l[i] = tc_lock(c, names[i]);
    TC_EQ(rlock_try_lock(l[i], 0, -1), 1, "watchdog lock");
  }
  rt_sleep_ms(3000); /* 3 leases: held only if renewed */
  for (int i = 0; i < N; i++) {
    long long pttl = rt_node_int(port[i], "PTTL %s", names[i]);
    cr_assert(pttl > 0 && pttl <= 1000, "%s (slot %d on %d): PTTL %lld",
              names[i], slots[i], port[i], pttl);
    char *v = rt_node_str(port[i], "HGET %s %s", names[i], owner);
    cr_assert(v && strcmp(v, "1") == 0, "%s: owner field %s", names[i],
              v ? v : "(nil)");
    free(v);
    TC_EQ(rlock_is_held(l[i]), 1, "is_held");
  }
  cr_assert_eq(atomic_load(&lost.count), 0, "lock lost: %s", lost.name);
  for (int i = 0; i < N; i++) {
    TC_EQ(rlock_unlock(l[i]), 0, "unlock");
    cr_assert_eq(rt_node_int(port[i], "EXISTS %s", names[i]), 0);
    rlock_free(l[i]);
  }
  rlock_client_free(c);
}

/* d. The lock's slot moves to another master while it is held and a
 * waiter waits: the holder's unlock follows MOVED, the waiter then gets
 * the lock (on the new owner). */
Test(cluster, full_slot_migration_while_held_and_waited) {
  int m[RT_MAX_NODES];
  masters3(m);
  char name[64], chan[128];
  rt_cluster_key_on(name, sizeof name, "move", m[0]);
  rt_lock_channel(chan, sizeof chan, name);
  int slot = rt_key_slot(name);
  rlock_client *a = tc_open(rt_cluster_uri(), NULL);
  rlock_client *b = tc_open(rt_cluster_uri(), NULL);
  rlock *la = tc_lock(a, name), *lb = tc_lock(b, name);
  TC_EQ(rlock_try_lock(la, 0, 20000), 1, "holder");
  tc_try w;
  tc_try_start(&w, lb, 15000, 10000, false);
  int64_t dl = rt_now_ms() + 3000;
  const char *sub = redis_major(m[0]) >= 7 ? "SHARDNUMSUB" : "NUMSUB";
  while (tc_numsub(m[0], sub, chan) == 0 && rt_now_ms() < dl)
    rt_sleep_ms(10);
  cr_assert_eq(tc_numsub(m[0], sub, chan), 1, "waiter subscribed");
  cr_assert_eq(atomic_load(&w.done), 0);

  int from = rt_cluster_migrate_slot(slot, m[1], false, NULL);
  cr_assert_eq(from, m[0]);
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", name), 1, "key moved");
  rt_sleep_ms(200);
  int64_t released_at = rt_now_ms();
  TC_EQ(rlock_unlock(la), 0, "holder unlock after MOVED");
  rt_thread_join(&w.th, 20000);
  cr_assert_eq(w.rc, 1, "waiter: %d %s (%s)", w.rc, rlock_err_name(w.rc),
               w.err);
  cr_assert_lt(w.returned_at - released_at, 3000,
               "waiter took %lld ms after the release",
               (long long)(w.returned_at - released_at));
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", name), 1, "waiter's hold on "
               "the new owner");
  /* The waiter thread's id is not known here: check the hash has exactly
   * one field, held once, by client b. */
  redisReply *r = rt_node_cmd(m[1], "HGETALL %s", name);
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  cr_assert(strncmp(r->element[0]->str, rlock_client_id(b), RLOCK_ID_LEN) == 0,
            "held by %s", r->element[0]->str);
  freeReplyObject(r);
  TC_EQ(rlock_force_unlock(lb), 1, "force unlock through the new owner");
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", name), 0);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* d. Half-way migration: keys already moved are reached through -ASK. */
Test(cluster, half_way_migration_ask) {
  int m[RT_MAX_NODES];
  masters3(m);
  char tag[64], k1[96], k2[96];
  rt_cluster_key_on(tag, sizeof tag, "ask", m[0]);
  snprintf(k1, sizeof k1, "{%s}:held", tag);
  snprintf(k2, sizeof k2, "{%s}:fresh", tag);
  int slot = rt_key_slot(tag);
  cr_assert_eq(rt_key_slot(k1), slot);
  cr_assert_eq(rt_key_slot(k2), slot);
  rlock_client *c = tc_open(rt_cluster_uri(), NULL);
  rlock *l1 = tc_lock(c, k1), *l2 = tc_lock(c, k2);
  TC_EQ(rlock_try_lock(l1, 0, 20000), 1, "lock k1");
  cr_assert_eq(rt_node_int(m[0], "EXISTS %s", k1), 1);

  const char *move[] = {k1, NULL};
  int from = rt_cluster_migrate_slot(slot, m[1], true, move);
  cr_assert_eq(from, m[0]);
  /* k1 is on m[1] now, reachable only with ASKING. */
  redisReply *r = rt_node_cmd(m[0], "EXISTS %s", k1);
  cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0);
  freeReplyObject(r);
  cr_assert_eq(tc_exists_asking(m[1], k1), 1);

  /* A new lock in the slot: the source has no such key, so -ASK. */
  TC_EQ(rlock_try_lock(l2, 0, 20000), 1, "lock k2 through ASK");
  cr_assert_eq(tc_exists_asking(m[1], k2), 1, "k2 taken on the target");
  /* Queries and the unlock of k1 follow ASK too. */
  TC_EQ(rlock_is_locked(l1), 1, "is_locked k1 (ASK)");
  TC_EQ(rlock_is_held(l1), 1, "is_held k1 (ASK)");
  /* The unlock script has 2 keys (the lock and its channel name), and a
   * multi-key command on a slot being migrated gets -TRYAGAIN while not
   * all of its keys are on the target: Redis means it to be retried, as
   * Redisson does. The migration ends 300 ms after the unlock starts; the
   * unlock must then succeed (default retries: 3 x 1500 ms). */
  tc_unl u = {.lock = l1, .owner = rlock_thread_id()};
  rt_thread th;
  rt_thread_start(&th, tc_unl_fn, &u);
  rt_sleep_ms(300);
  rt_cluster_finish_migration(slot, m[0], m[1]);
  rt_thread_join(&th, 10000);
  cr_assert_eq(u.rc, 0, "unlock of k1 during the migration: %d %s (%s)", u.rc,
               rlock_err_name(u.rc), u.err);
  cr_assert_lt(u.took, 6000, "unlock took %lld ms", (long long)u.took);
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", k1), 0, "k1 released");
  TC_EQ(rlock_is_locked(l2), 1, "is_locked k2 after the migration");
  TC_EQ(rlock_unlock(l2), 0, "unlock k2 (MOVED)");
  cr_assert_eq(rt_node_int(m[1], "EXISTS %s", k2), 0);
  rlock_free(l1);
  rlock_free(l2);
  rlock_client_free(c);
}

/* f. A slot no node serves: the lock call fails with RLOCK_ECLUSTER within
 * the command timeout (plus retries and a margin), nothing hangs, and
 * close leaves no thread and no fd behind. */
Test(cluster, uncovered_slot_fails_fast) {
  int m[RT_MAX_NODES];
  masters3(m);
  for (int i = 0; i < 3; i++) /* harness connections made before counting */
    freeReplyObject(rt_node_cmd(rt_cluster_port(i), "PING"));
  char name[64], other[64];
  rt_cluster_key_on(name, sizeof name, "hole", m[2]);
  rt_cluster_key_on(other, sizeof other, "fine", m[0]);
  int slot = rt_key_slot(name);
  /* libuv makes one process-wide pipe (its signal lock) at the first
   * uv_loop_init and keeps it: count from after a first client. */
  rlock_client_free(tc_open(rt_cluster_uri(), NULL));
  int fds0 = tc_count_dir("fd"), tasks0 = tc_count_dir("task");
  char fdlist0[4096];
  tc_list_fds(fdlist0, sizeof fdlist0);

  rlock_options o;
  rlock_options_init(&o);
  o.command_timeout_ms = 1000;
  o.retry_attempts = 1;
  o.retry_interval_ms = 200;
  o.cluster_refresh_ms = 500;
  rlock_client *c = tc_open(rt_cluster_uri(), &o);
  rlock *l = tc_lock(c, name), *ok = tc_lock(c, other);
  TC_EQ(rlock_try_lock(ok, 0, 10000), 1, "a covered slot works");
  TC_EQ(rlock_unlock(ok), 0, "unlock");

  for (int i = 0; i < 3; i++)
    freeReplyObject(rt_node_cmd(rt_cluster_port(i), "CLUSTER DELSLOTS %d",
                                slot));
  cr_assert_eq(rt_cluster_slot_owner(slot), -1);
  const int64_t bound = o.command_timeout_ms +
                        o.retry_attempts * o.retry_interval_ms + 2000;
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(l, 0, 10000);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ECLUSTER, "try_lock on an uncovered slot: %d %s (%s)",
               rc, rlock_err_name(rc), rlock_last_error());
  cr_assert_lt(took, bound, "took %lld ms", (long long)took);

  /* A lock call without a wait limit must not hang either. */
  tc_try w;
  memset(&w, 0, sizeof w);
  tc_try_start(&w, l, -1, 10000, false);
  rt_thread_join(&w.th, bound + 1000);
  cr_assert_eq(w.rc, RLOCK_ECLUSTER, "unbounded try_lock: %d %s (%s)", w.rc,
               rlock_err_name(w.rc), w.err);
  t0 = rt_now_ms();
  rc = rlock_is_locked(l);
  cr_assert_eq(rc, RLOCK_ECLUSTER, "is_locked: %d %s", rc, rlock_err_name(rc));
  cr_assert_lt(rt_now_ms() - t0, bound);

  rlock_free(l);
  rlock_free(ok);
  t0 = rt_now_ms();
  rlock_client_free(c);
  cr_assert_lt(rt_now_ms() - t0, 3000, "close took too long");
  int fds1 = tc_count_dir("fd"), tasks1 = tc_count_dir_back("task", tasks0,
                                                           1000);
  char fdlist1[4096];
  tc_list_fds(fdlist1, sizeof fdlist1);
  cr_assert_eq(fds1, fds0, "fds: %d before open, %d after close\nbefore: %s"
               "\nafter: %s", fds0, fds1, fdlist0, fdlist1);
  cr_assert_eq(tasks1, tasks0, "threads: %d before open, %d 1 s after close",
               tasks0, tasks1);
}

/* f. A seed that is a plain (non-cluster) redis-server: open fails fast,
 * with an error that says so. */
TestSuite(cluster_bad, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 60);

Test(cluster_bad, seed_is_not_a_cluster) {
  char uri[128];
  snprintf(uri, sizeof uri, "redis+cluster://127.0.0.1:%d", rt_port());
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  rlock_client *c = (rlock_client *)&o; /* must be set to NULL */
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = rt_now_ms() - t0;
  cr_assert(rc < 0, "open of a non-cluster seed succeeded");
  cr_assert(rc == RLOCK_ECLUSTER || rc == RLOCK_EPROTO, "got %d %s (%s)", rc,
            rlock_err_name(rc), rlock_last_error());
  cr_assert_null(c);
  cr_assert_lt(took, 5000, "open took %lld ms", (long long)took);
  cr_assert(strcasestr(rlock_last_error(), "cluster") != NULL,
            "last error does not mention the cluster: \"%s\"",
            rlock_last_error());
}

/* A seed list where the first seed is dead still opens through the
 * second. */
Test(cluster, dead_first_seed) {
  int m[RT_MAX_NODES];
  masters3(m);
  char uri[256];
  snprintf(uri, sizeof uri, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d",
           rt_free_port(), m[1]);
  rlock_options o;
  rlock_options_init(&o);
  o.connect_timeout_ms = 1000;
  rlock_client *c = tc_open(uri, &o);
  char name[64];
  rt_cluster_key_on(name, sizeof name, "seed", m[2]);
  rlock *l = tc_lock(c, name);
  TC_EQ(rlock_try_lock(l, 0, 10000), 1, "lock");
  cr_assert_eq(rt_node_int(m[2], "EXISTS %s", name), 1);
  TC_EQ(rlock_unlock(l), 0, "unlock");
  rlock_free(l);
  rlock_client_free(c);
}

/* g. A key pattern that would cross slots: a braced latch name puts the
 * latch's channel ("...__{a{t}b}", tag "a{t") in another slot than its key
 * (tag "t"). The latch scripts name both as KEYS (as Java's do), which a
 * cluster refuses with CROSSSLOT (checked here on the node), so the handle
 * is refused up front with RLOCK_ECLUSTER in either pub/sub mode, leaving
 * nothing behind; a plain name works. */
Test(cluster, braced_latch_refused) {
  int m[RT_MAX_NODES];
  masters3(m);
  /* A braced name whose channel lands on another master than its key. */
  char name[64], chan[128];
  int i = 0;
  for (;; i++) {
    cr_assert_lt(i, 1000, "no braced name with key and channel apart");
    snprintf(name, sizeof name, "lt%d{t%d}x", i, i);
    snprintf(chan, sizeof chan, "redisson_countdownlatch__channel__{%s}",
             name);
    if (rt_cluster_key_owner(name) != rt_cluster_key_owner(chan))
      break;
  }
  int key_port = rt_cluster_key_owner(name);
  /* What the server does with a script over both. */
  redisReply *r = rt_node_cmd(key_port, "EVAL %s 2 %s %s", "return 1", name,
                              chan);
  cr_assert(r->type == REDIS_REPLY_ERROR && strstr(r->str, "CROSSSLOT"),
            "a script over key and channel: type %d %s", r->type,
            r->str ? r->str : "");
  freeReplyObject(r);

  for (int sharded = 0; sharded < 2; sharded++) {
    rlock_options o;
    rlock_options_init(&o);
    o.sharded_pubsub = sharded ? 0 : -1; /* auto (sharded on 7+) / plain */
    rlock_client *c = tc_open(rt_cluster_uri(), &o);
    int fds_before = tc_count_dir("fd");
    rlock_latch *bad = (rlock_latch *)&m; /* must be set to NULL */
    TC_EQ(rlock_latch_new(c, name, &bad), RLOCK_ECLUSTER, "braced latch");
    cr_assert_null(bad);
    cr_assert(strstr(rlock_last_error(), "slot") != NULL &&
                  strstr(rlock_last_error(), name) != NULL,
              "last error: \"%s\"", rlock_last_error());
    cr_assert_eq(tc_count_dir("fd"), fds_before, "an fd was left behind");
    cr_assert_eq(rt_node_int(key_port, "EXISTS %s", name), 0);

    /* A plain name: key and channel share the slot. */
    rlock_latch *ok = NULL;
    TC_EQ(rlock_latch_new(c, "plainlatch", &ok), 0, "plain latch");
    TC_EQ(rlock_latch_try_set_count(ok, 1), 1, "set count");
    TC_EQ(rlock_latch_count_down(ok), 0, "count down");
    cr_assert_eq(rlock_latch_count(ok), 0);
    rlock_latch_free(ok);
    rlock_client_free(c);
  }
}

/* An ACL user denied CLUSTER SHARDS but allowed CLUSTER SLOTS (as some
 * managed services set their users up): the map comes from CLUSTER SLOTS
 * (the same path as on Redis before 7.0), locks on every master work and
 * a waiter is woken by message. The nodes' command statistics show the
 * refused SHARDS and the SLOTS that followed. */
Test(cluster, slot_map_from_cluster_slots_when_shards_denied) {
  int m[RT_MAX_NODES];
  masters3(m);
  long long slots0 = 0, rejected0 = 0;
  for (int i = 0; i < 3; i++) {
    redisReply *r = rt_node_cmd(m[i], "ACL SETUSER rl_slots on >slotspw ~* "
                                      "&* +@all -cluster|shards");
    cr_assert(r->type == REDIS_REPLY_STATUS, "ACL SETUSER on %d: %s", m[i],
              r->str ? r->str : "");
    freeReplyObject(r);
    slots0 += tc_cmdstat(m[i], "cluster|slots", "calls");
    rejected0 += tc_cmdstat(m[i], "cluster|shards", "rejected_calls");
  }
  char uri[256];
  snprintf(uri, sizeof uri,
           "redis+cluster://rl_slots:slotspw@127.0.0.1:%d,127.0.0.1:%d", m[0],
           m[1]);
  rlock_client *c = tc_open(uri, NULL);
  rlock_client *d = tc_open(uri, NULL);
  long long slots1 = 0, rejected1 = 0;
  for (int i = 0; i < 3; i++) {
    slots1 += tc_cmdstat(m[i], "cluster|slots", "calls");
    rejected1 += tc_cmdstat(m[i], "cluster|shards", "rejected_calls");
  }
  cr_assert_geq(rejected1 - rejected0, 2,
                "CLUSTER SHARDS refused %lld times for 2 opens",
                rejected1 - rejected0);
  cr_assert_geq(slots1 - slots0, 2, "CLUSTER SLOTS ran %lld times",
                slots1 - slots0);

  for (int i = 0; i < 3; i++) {
    char name[64], base[32];
    snprintf(base, sizeof base, "slotsmap:%d", i);
    rt_cluster_key_on(name, sizeof name, base, m[i]);
    rlock *l = tc_lock(c, name), *lw = tc_lock(d, name);
    TC_EQ(rlock_try_lock(l, 0, 10000), 1, "try_lock");
    cr_assert_eq(rt_node_int(m[i], "EXISTS %s", name), 1,
                 "%s not on its owner %d", name, m[i]);
    tc_try w;
    tc_try_start(&w, lw, 8000, 10000, true);
    rt_sleep_ms(200);
    cr_assert_eq(atomic_load(&w.done), 0, "waiter returned while held: %d",
                 w.rc);
    int64_t released_at = rt_now_ms();
    TC_EQ(rlock_unlock(l), 0, "unlock");
    rt_thread_join(&w.th, 10000);
    cr_assert_eq(w.rc, 1, "waiter on %d: %d %s (%s)", m[i], w.rc,
                 rlock_err_name(w.rc), w.err);
    cr_assert_lt(w.returned_at - released_at, 2000,
                 "waiter on %d took %lld ms after the release", m[i],
                 (long long)(w.returned_at - released_at));
    cr_assert_eq(w.unlock_rc, 0, "waiter unlock");
    cr_assert_eq(rt_node_int(m[i], "EXISTS %s", name), 0);
    rlock_free(l);
    rlock_free(lw);
  }
  rlock_client_free(c);
  rlock_client_free(d);
  /* A user denied both: a clear RLOCK_ECLUSTER at open, no fallback loop. */
  for (int i = 0; i < 3; i++)
    freeReplyObject(rt_node_cmd(m[i], "ACL SETUSER rl_slots -cluster|slots"));
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  o.connect_timeout_ms = 2000;
  o.command_timeout_ms = 2000;
  rlock_client *bad = NULL;
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&bad, &o);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ECLUSTER, "open denied both: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
  cr_assert_null(bad);
  cr_assert(strstr(rlock_last_error(), "CLUSTER SLOTS") != NULL &&
                strstr(rlock_last_error(), "NOPERM") != NULL,
            "last error: %s", rlock_last_error());
  cr_assert_lt(took, 5000, "failed open took %lld ms", (long long)took);
  for (int i = 0; i < 3; i++)
    freeReplyObject(rt_node_cmd(m[i], "ACL DELUSER rl_slots"));
}
