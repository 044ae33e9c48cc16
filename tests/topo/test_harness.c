/* The topology harness proven on its own, with hiredis only: slots, cluster
 * start/stop, slot migration (full and half-way, ASK), master failover,
 * sentinel start, planned and forced failover, sentinel auth, teardown that
 * leaves no process behind. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "topo_harness.h"

TestSuite(harness, .fini = rt_topo_stop_all, .timeout = 120);

/* Whether the server the harness started as `pid` for `port` still runs:
 * /proc/PID exists, is not a zombie, and its title names the port (a PID
 * reused by another process does not count). Checked by PID, never by
 * grepping the machine for the port: suites running beside this one start
 * servers of their own, on ports this one has just freed. */
static bool server_alive(pid_t pid, int port) {
  if (pid <= 0)
    return false;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
  if (paren == NULL || paren[1] != ' ' || paren[2] == 'Z')
    return false;
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
  f = fopen(path, "r");
  if (f == NULL)
    return false;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  for (size_t i = 0; i < n; i++)
    if (buf[i] == '\0')
      buf[i] = ' ';
  buf[n] = '\0';
  char needle[32];
  snprintf(needle, sizeof needle, ":%d", port);
  return strstr(buf, needle) != NULL;
}

Test(harness, crc16_matches_cluster_keyslot) {
  /* Known values (Redis Cluster spec and CLUSTER KEYSLOT). */
  cr_assert_eq(rt_crc16("123456789", 9), 0x31C3);
  cr_assert_eq(rt_key_slot("foo"), 12182);
  cr_assert_eq(rt_key_slot("somekey"), 11058);
  cr_assert_eq(rt_key_slot("{foo}bar"), 12182);
  cr_assert_eq(rt_key_slot("foo{}{bar}"), rt_crc16("foo{}{bar}", 10) & 16383);
  cr_assert_eq(rt_key_slot("redisson_lock__channel:{foo}"), 12182);
}

Test(harness, cluster_start_migrate_failover_stop) {
  int64_t t0 = rt_topo_now_ms();
  rt_cluster_start(3, 1);
  fprintf(stderr, "cluster 3x1 up in %lld ms\n", (long long)(rt_topo_now_ms() - t0));
  cr_assert_eq(rt_cluster_node_count(), 6);
  int masters[RT_MAX_NODES];
  cr_assert_eq(rt_cluster_masters(masters, RT_MAX_NODES), 3);
  int n_master = 0;
  for (int i = 0; i < 6; i++)
    n_master += rt_cluster_is_master(i);
  cr_assert_eq(n_master, 3);

  /* The slot our CRC16 computes is the one the server computes, for keys
   * on every master. */
  for (int m = 0; m < 3; m++) {
    char key[64];
    rt_cluster_key_on(key, sizeof key, "hk", masters[m]);
    cr_assert_eq(rt_node_int(masters[m], "CLUSTER KEYSLOT %s", key),
                 rt_key_slot(key));
    cr_assert_eq(rt_cluster_key_owner(key), masters[m]);
    redisReply *r = rt_node_cmd(masters[m], "SET %s v%d", key, m);
    cr_assert_eq(r->type, REDIS_REPLY_STATUS, "SET on owner: %s", r->str);
    freeReplyObject(r);
    /* Another master redirects. */
    r = rt_node_cmd(masters[(m + 1) % 3], "GET %s", key);
    cr_assert_eq(r->type, REDIS_REPLY_ERROR);
    cr_assert(strncmp(r->str, "MOVED ", 6) == 0, "%s", r->str);
    freeReplyObject(r);
  }
  const char *uri = rt_cluster_uri();
  char expect[128];
  snprintf(expect, sizeof expect, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d",
           masters[0], masters[1]);
  cr_assert_str_eq(uri, expect);

  /* Full migration of a slot holding a key. */
  char key[64];
  rt_cluster_key_on(key, sizeof key, "mig", masters[0]);
  int slot = rt_key_slot(key);
  freeReplyObject(rt_node_cmd(masters[0], "SET %s moved", key));
  t0 = rt_topo_now_ms();
  int from = rt_cluster_migrate_slot(slot, masters[1], false, NULL);
  fprintf(stderr, "slot migrated in %lld ms\n", (long long)(rt_topo_now_ms() - t0));
  cr_assert_eq(from, masters[0]);
  cr_assert_eq(rt_cluster_slot_owner(slot), masters[1]);
  char *v = rt_node_str(masters[1], "GET %s", key);
  cr_assert_str_eq(v, "moved");
  free(v);
  redisReply *r = rt_node_cmd(masters[0], "GET %s", key);
  cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0);
  freeReplyObject(r);

  /* Half-way: one key moved, one left; the moved one gets ASK. */
  char k2[96];
  snprintf(k2, sizeof k2, "{%s}:other", key);
  freeReplyObject(rt_node_cmd(masters[1], "SET %s stays", k2));
  const char *keys[] = {key, NULL};
  from = rt_cluster_migrate_slot(slot, masters[2], true, keys);
  cr_assert_eq(from, masters[1]);
  r = rt_node_cmd(masters[1], "GET %s", key);
  cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0,
            "expected ASK, got %d %s", r->type, r->str ? r->str : "");
  freeReplyObject(r);
  v = rt_node_str(masters[1], "GET %s", k2); /* still served by the source */
  cr_assert_str_eq(v, "stays");
  free(v);
  freeReplyObject(rt_node_cmd(masters[2], "ASKING"));
  v = rt_node_str(masters[2], "GET %s", key);
  cr_assert_str_eq(v, "moved");
  free(v);
  rt_cluster_finish_migration(slot, masters[1], masters[2]);
  cr_assert_eq(rt_cluster_slot_owner(slot), masters[2]);
  v = rt_node_str(masters[2], "GET %s", k2);
  cr_assert_str_eq(v, "stays");
  free(v);

  /* SIGKILL the master of the slot: its replica takes over (once it has
   * the migrated keys: replication is asynchronous). */
  cr_assert_eq(rt_node_int(masters[2], "WAIT 1 2000"), 1);
  pid_t killed = rt_cluster_pid(rt_cluster_index_of_port(masters[2]));
  cr_assert(server_alive(killed, masters[2]), "master %d not running",
            masters[2]);
  t0 = rt_topo_now_ms();
  int promoted = rt_cluster_fail_master(masters[2], false, 20000);
  fprintf(stderr, "failover (SIGKILL) in %lld ms\n",
          (long long)(rt_topo_now_ms() - t0));
  cr_assert_neq(promoted, masters[2]);
  cr_assert_eq(rt_cluster_slot_owner(slot), promoted);
  v = rt_node_str(promoted, "GET %s", k2);
  cr_assert_str_eq(v, "stays", "the replica had the data");
  free(v);
  cr_assert_not(server_alive(killed, masters[2]), "the SIGKILLed master "
                "still runs");
  /* Restarted, it rejoins as a replica. */
  rt_cluster_restart_node(masters[2], 20000);
  cr_assert_not(rt_cluster_is_master(rt_cluster_index_of_port(masters[2])));

  /* SIGSTOP another master: also failed over; SIGCONT brings it back. */
  int victim = masters[0];
  t0 = rt_topo_now_ms();
  promoted = rt_cluster_fail_master(victim, true, 20000);
  fprintf(stderr, "failover (SIGSTOP) in %lld ms\n",
          (long long)(rt_topo_now_ms() - t0));
  cr_assert_neq(promoted, victim);
  rt_cluster_restart_node(victim, 20000);

  int ports[RT_MAX_NODES];
  pid_t pids[RT_MAX_NODES];
  for (int i = 0; i < 6; i++) {
    ports[i] = rt_cluster_port(i);
    pids[i] = rt_cluster_pid(i);
  }
  for (int i = 0; i < 6; i++)
    cr_assert(server_alive(pids[i], ports[i]), "node %d running", ports[i]);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", rt_cluster_dir());
  rt_cluster_stop();
  for (int i = 0; i < 6; i++)
    cr_assert_not(server_alive(pids[i], ports[i]), "node %d left behind",
                  ports[i]);
  cr_assert_neq(access(dir, F_OK), 0, "cluster dir %s left behind", dir);
}

Test(harness, cluster_without_replicas) {
  int64_t t0 = rt_topo_now_ms();
  rt_cluster_start(3, 0);
  fprintf(stderr, "cluster 3x0 up in %lld ms\n", (long long)(rt_topo_now_ms() - t0));
  cr_assert_eq(rt_cluster_node_count(), 3);
  for (int i = 0; i < 3; i++)
    cr_assert(rt_cluster_is_master(i));
  /* DELSLOTS everywhere leaves the slot uncovered: CLUSTERDOWN. */
  int slot = rt_key_slot("foo");
  int owner = rt_cluster_slot_owner(slot);
  for (int i = 0; i < 3; i++)
    freeReplyObject(rt_node_cmd(rt_cluster_port(i), "CLUSTER DELSLOTS %d",
                                slot));
  cr_assert_eq(rt_cluster_slot_owner(slot), -1);
  int64_t dl = rt_topo_now_ms() + 5000;
  redisReply *r;
  for (;;) {
    r = rt_node_cmd(owner, "GET foo");
    if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "CLUSTERDOWN"))
      break;
    freeReplyObject(r);
    cr_assert(rt_topo_now_ms() < dl, "no CLUSTERDOWN after DELSLOTS");
    rt_topo_sleep_ms(50);
  }
  freeReplyObject(r);
}

/* A process that dies without running fini: its servers die with it
 * (PR_SET_PDEATHSIG), and atexit() cleans up after a plain exit(). */
Test(harness, no_leftovers_when_the_test_process_dies) {
  int pipefd[2];
  cr_assert_eq(pipe(pipefd), 0);
  pid_t child = fork();
  cr_assert(child >= 0);
  if (child == 0) {
    close(pipefd[0]);
    rt_cluster_start(3, 0);
    struct {
      int ports[3];
      pid_t pids[3];
      char dir[512];
    } msg;
    memset(&msg, 0, sizeof msg);
    for (int i = 0; i < 3; i++) {
      msg.ports[i] = rt_cluster_port(i);
      msg.pids[i] = rt_cluster_pid(i);
    }
    snprintf(msg.dir, sizeof msg.dir, "%s", rt_cluster_dir());
    ssize_t w = write(pipefd[1], &msg, sizeof msg);
    (void)w;
    close(pipefd[1]);
    rt_topo_sleep_ms(60000); /* killed by the parent */
    _exit(0);
  }
  close(pipefd[1]);
  struct {
    int ports[3];
    pid_t pids[3];
    char dir[512];
  } msg;
  memset(&msg, 0, sizeof msg);
  ssize_t got = read(pipefd[0], &msg, sizeof msg);
  close(pipefd[0]);
  cr_assert_eq(got, (ssize_t)sizeof msg, "child did not start a cluster");
  int *ports = msg.ports;
  for (int i = 0; i < 3; i++)
    cr_assert(server_alive(msg.pids[i], ports[i]));
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  int64_t dl = rt_topo_now_ms() + 5000;
  int left;
  do {
    left = 0;
    for (int i = 0; i < 3; i++)
      left += server_alive(msg.pids[i], ports[i]);
    if (left)
      rt_topo_sleep_ms(50);
  } while (left && rt_topo_now_ms() < dl);
  /* The dead process could not remove its directory: do it here. */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", msg.dir);
  cr_assert(strncmp(msg.dir, "/", 1) == 0 && strstr(msg.dir, "rlock-topo-"));
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(left, 0, "servers outlived a SIGKILLed test process");
}

Test(harness, sentinel_start_failover_kill) {
  int64_t t0 = rt_topo_now_ms();
  rt_sentinel_start();
  fprintf(stderr, "sentinel up in %lld ms\n", (long long)(rt_topo_now_ms() - t0));
  int m = rt_sentinel_master_port(), rep = rt_sentinel_replica_port();
  for (int i = 0; i < 3; i++)
    cr_assert_eq(rt_sentinel_reported_master(i), m);
  char expect[200];
  snprintf(expect, sizeof expect,
           "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster",
           rt_sentinel_port(0), rt_sentinel_port(1), rt_sentinel_port(2));
  cr_assert_str_eq(rt_sentinel_uri(), expect);
  freeReplyObject(rt_node_cmd(m, "SET k v1"));
  cr_assert_eq(rt_node_int(m, "WAIT 1 2000"), 1, "replica acknowledged");
  char *v = rt_node_str(rep, "GET k");
  cr_assert_str_eq(v, "v1");
  free(v);

  /* Planned failover. */
  t0 = rt_topo_now_ms();
  int m2 = rt_sentinel_failover(20000);
  fprintf(stderr, "SENTINEL FAILOVER in %lld ms\n",
          (long long)(rt_topo_now_ms() - t0));
  cr_assert_eq(m2, rep);
  cr_assert_eq(rt_sentinel_replica_port(), m);
  freeReplyObject(rt_node_cmd(m2, "SET k v2"));
  cr_assert_eq(rt_node_int(m2, "WAIT 1 2000"), 1);
  redisReply *r = rt_node_cmd(m, "SET k nope");
  cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0);
  freeReplyObject(r);

  /* Forced failover: SIGKILL the master. */
  pid_t killed = rt_sentinel_data_pid(m2);
  cr_assert(server_alive(killed, m2));
  t0 = rt_topo_now_ms();
  int m3 = rt_sentinel_kill_master(20000);
  fprintf(stderr, "failover after SIGKILL in %lld ms\n",
          (long long)(rt_topo_now_ms() - t0));
  cr_assert_eq(m3, m);
  cr_assert_not(server_alive(killed, m2));
  v = rt_node_str(m3, "GET k");
  cr_assert_str_eq(v, "v2");
  free(v);

  int ports[4] = {m, rt_sentinel_port(0), rt_sentinel_port(1),
                  rt_sentinel_port(2)};
  pid_t pids[4] = {rt_sentinel_data_pid(m), rt_sentinel_pid(0),
                   rt_sentinel_pid(1), rt_sentinel_pid(2)};
  for (int i = 0; i < 4; i++)
    cr_assert(server_alive(pids[i], ports[i]), "%d not running", ports[i]);
  rt_sentinel_stop();
  for (int i = 0; i < 4; i++)
    cr_assert_not(server_alive(pids[i], ports[i]), "%d left behind",
                  ports[i]);
}

Test(harness, sentinel_with_password) {
  rt_sentinel_start_auth("s3ntinel");
  redisContext *c = redisConnect("127.0.0.1", rt_sentinel_port(1));
  cr_assert(c && !c->err);
  redisReply *r = redisCommand(c, "SENTINEL GET-MASTER-ADDR-BY-NAME mymaster");
  cr_assert(r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "NOAUTH"),
            "sentinel answered without AUTH");
  freeReplyObject(r);
  r = redisCommand(c, "AUTH wrong");
  cr_assert(r && r->type == REDIS_REPLY_ERROR);
  freeReplyObject(r);
  redisFree(c);
  /* The harness's own connections authenticate. */
  cr_assert_eq(rt_sentinel_reported_master(1), rt_sentinel_master_port());
}
