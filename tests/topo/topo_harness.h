/*
 * Topology harness for the `topo` suite: real Redis Cluster and Sentinel
 * setups from the system's redis-server / redis-cli, on free 127.0.0.1 ports
 * in a temporary directory, torn down with SIGKILL to each process group.
 *
 * Every server is started in a process group of its own, with
 * PR_SET_PDEATHSIG(SIGKILL) as a second line of defence; rt_topo_stop_all()
 * (also registered with atexit() at the first start) kills and reaps them
 * all and removes the directories. Use it as a suite's .fini:
 *
 *   TestSuite(cl, .init = cl_init, .fini = rt_topo_stop_all, .timeout = 90);
 *
 * One cluster and one sentinel setup at a time per process (Criterion runs
 * every test in its own process). All functions assert (cr_assert) on
 * failure, so call them from the test's main thread only, except where
 * marked "any thread".
 */
#ifndef RLOCK_TOPO_HARNESS_H
#define RLOCK_TOPO_HARNESS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


/* Monotonic ms, sleep, and a free 127.0.0.1 port (any thread). The harness
 * has its own so that it links without the library (tests/redis/harness.c
 * needs rlock). */
int64_t rt_topo_now_ms(void);
void rt_topo_sleep_ms(int64_t ms);
int rt_topo_free_port(void);

#define RT_SLOTS 16384
#define RT_MAX_NODES 12

/* ---- TLS mode ---- */

/* TLS mode for the next rt_cluster_start / rt_sentinel_start in this
 * process: dir holds ca.crt, node.crt and node.key (PEM; the node
 * certificate signed by ca.crt, valid for 127.0.0.1, usable as server and
 * client certificate). Every redis-server then also listens on a TLS port
 * (--tls-port, --tls-auth-clients no unless rt_topo_tls_auth_clients,
 * --tls-replication yes; cluster nodes also --tls-cluster yes) beside
 * its plain port, which the harness
 * keeps using for its own admin traffic (rt_node_*: hiredis 0.14 has no
 * TLS). With tls-cluster, the nodes announce their TLS ports to each
 * other; Redis 7.0 answers CLUSTER SLOTS / NODES and MOVED with the TLS
 * ports on a TLS connection and the plain ports on a plain one (CLUSTER
 * SHARDS lists both, "port" and "tls-port"), so every port the harness
 * deals in (rt_cluster_port, rt_cluster_masters, ...) stays the plain
 * one; map with rt_topo_tls_port. With tls-replication, replicas follow
 * their master's TLS port and sentinels monitor, report (GET-MASTER-ADDR-
 * BY-NAME, rt_sentinel_reported_master) and announce TLS ports.
 * dir NULL or "": plain mode. rt_topo_stop_all() goes back to plain mode.
 * The files must stay until the topology is stopped. */
void rt_topo_tls(const char *dir);
/* Mutual TLS for the next start in TLS mode: yes gives every data node,
 * cluster node and sentinel --tls-auth-clients yes (tls-auth-clients yes
 * in the sentinel confs), so a client must present a certificate signed by
 * ca.crt on the TLS ports. The nodes use node.crt/node.key as client
 * certificate towards each other (cluster bus, replication, sentinels),
 * and so does the harness's `redis-cli --cluster create` (--cert/--key);
 * the harness's own admin traffic stays on the plain ports, which are
 * unaffected. Call before rt_cluster_start / rt_sentinel_start;
 * rt_topo_stop_all() goes back to no. */
void rt_topo_tls_auth_clients(bool yes);
/* The TLS port of the node (cluster node, sentinel data node or sentinel)
 * whose plain port is `port`; asserts it is ours and has one. */
int rt_topo_tls_port(int port);

/* ---- cluster slots ---- */

/* CRC16/XMODEM as Redis Cluster uses it. Any thread. */
uint16_t rt_crc16(const char *buf, size_t len);
/* The cluster slot of a key, with the hash-tag rule ({...} non-empty).
 * Any thread. */
int rt_key_slot(const char *key);
int rt_key_slot_n(const char *key, size_t len); /* binary-safe */

/* ---- generic per-node helpers ---- */

/* A new hiredis connection to 127.0.0.1:port (timeout_ms for connect and
 * replies); asserts it connected. Free with redisFree(). */
redisContext *rt_node_connect(int port, int64_t timeout_ms);
/* Runs one command on 127.0.0.1:port over a cached connection (one per
 * port, 5 s timeout, reconnected when broken); asserts a reply came back
 * (error replies are returned). freeReplyObject() it. */
redisReply *rt_node_cmd(int port, const char *fmt, ...);
/* As rt_node_cmd, but returns NULL instead of failing when the node does
 * not answer (dead or stopped node). */
redisReply *rt_node_try_cmd(int port, const char *fmt, ...);
/* Integer reply, asserted. */
long long rt_node_int(int port, const char *fmt, ...);
/* String/status reply as malloc'd copy, NULL for nil; asserted. */
char *rt_node_str(int port, const char *fmt, ...);
/* Drops the cached connection to port (after a kill/restart). */
void rt_node_forget(int port);

/* ---- cluster ---- */

/* Starts masters * (1 + replicas_per_master) cluster nodes
 * (--cluster-enabled yes --cluster-node-timeout 1000, no persistence),
 * creates the cluster with `redis-cli --cluster create ... --cluster-replicas
 * N --cluster-yes`, and waits until every node reports cluster_state:ok with
 * 16384 slots ok and every replica is attached to its master. Asserts. */
void rt_cluster_start(int masters, int replicas_per_master);
/* Kills every node (SIGKILL to its process group), reaps, removes the dir.
 * Safe to call when nothing runs. */
void rt_cluster_stop(void);
int rt_cluster_node_count(void);
int rt_cluster_port(int i);            /* port of node i (0..count-1) */
pid_t rt_cluster_pid(int i);
int rt_cluster_index_of_port(int port); /* -1 when unknown */
/* Whether node i is a master right now (ROLE on the node; a dead node is
 * not a master). */
bool rt_cluster_is_master(int i);
/* Ports of the current masters (alive, ROLE master, owning slots), at most
 * max; returns how many. Sorted by port. */
int rt_cluster_masters(int *ports, int max);
/* Port of the master that owns `slot` per CLUSTER SLOTS asked of a live
 * node; -1 when no node owns it. */
int rt_cluster_slot_owner(int slot);
/* Port of the master owning key's slot. */
int rt_cluster_key_owner(const char *key);
/* "redis+cluster://127.0.0.1:P1,127.0.0.1:P2" with the first two live
 * masters (static storage). */
const char *rt_cluster_uri(void);
/* TLS mode: "rediss+cluster://127.0.0.1:Q1,127.0.0.1:Q2", the TLS ports of
 * the first two live masters (static storage). */
const char *rt_cluster_tls_uri(void);
/* The cluster's temp directory (node-<port>/redis.log for each node). */
const char *rt_cluster_dir(void);

/* Finds a key "<base>:<n>" whose slot is owned by the master on `port`,
 * written to buf. Asserts one is found. */
void rt_cluster_key_on(char *buf, size_t n, const char *base, int port);
/* Finds a key "<base>:<n>" whose slot is not in used[0..n_used). */
void rt_cluster_key_new_slot(char *buf, size_t n, const char *base,
                             const int *used, int n_used);

/* Moves `slot` from its owner to the master on to_port by hand:
 * CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the source, MIGRATE
 * of every key in the slot, then (unless half_way) SETSLOT NODE on every
 * node. half_way: stops after the keys in `keys_to_move` (NULL: all) have
 * been migrated, leaving the slot MIGRATING/IMPORTING so that a command on
 * a migrated key gets -ASK. Returns the source port. */
int rt_cluster_migrate_slot(int slot, int to_port, bool half_way,
                            const char *const *keys_to_move);
/* Ends a half-way migration: moves the remaining keys and SETSLOT NODE on
 * every node. */
void rt_cluster_finish_migration(int slot, int from_port, int to_port);
/* Waits until every live node's CLUSTER SLOTS shows `slot` owned by port. */
void rt_cluster_wait_slot_owner(int slot, int port, int64_t bound_ms);

/* Kills the master on `port` (SIGKILL, or SIGSTOP when stop_only) and
 * waits (bound_ms) until one of its replicas is a master owning its slots
 * and every other live node says cluster_state:ok. Returns the new master's
 * port. */
int rt_cluster_fail_master(int port, bool stop_only, int64_t bound_ms);
/* Restarts a killed node (same port, same nodes.conf: it rejoins as a
 * replica of whoever took its slots) or SIGCONTs a stopped one; waits until
 * it answers PING and the cluster is ok. */
void rt_cluster_restart_node(int port, int64_t bound_ms);
/* SIGKILL of the node on port, no waiting for a failover
 * (rt_cluster_restart_node starts it again). */
void rt_cluster_kill_node(int port);
/* Waits until every live node reports cluster_state:ok and all slots ok. */
void rt_cluster_wait_ok(int64_t bound_ms);

/* ---- sentinel ---- */

/* Starts one master, one replica (replicaof) and 3 sentinels
 * (`redis-server sentinel-N.conf --sentinel`, monitor mymaster quorum 2,
 * down-after-milliseconds 1000, failover-timeout 3000), waits until every
 * sentinel reports the master, sees the replica and knows the other 2
 * sentinels. sentinel_pass != NULL: the sentinels require it (requirepass
 * in their conf). Asserts. */
void rt_sentinel_start(void);
/* Extra redis-server arguments for the data nodes (master and replica) of
 * the next rt_sentinel_start, e.g. {"--rename-command", "WAIT", "", NULL};
 * copied as pointers (keep them alive); rt_topo_stop_all() clears them. */
#define RT_DATA_ARGS_MAX 32
void rt_sentinel_data_args(const char *const *args);
/* The same for the first replica only (a master and replica that differ,
 * e.g. a replica without WAIT that a failover makes the master). */
void rt_sentinel_replica_args(const char *const *args);
void rt_sentinel_start_auth(const char *sentinel_pass);
void rt_sentinel_stop(void);
int rt_sentinel_port(int i);     /* sentinel i, 0..2 */
int rt_sentinel_master_port(void); /* the master as the harness last saw it */
int rt_sentinel_replica_port(void);
pid_t rt_sentinel_data_pid(int port); /* pid of the data node on port */
pid_t rt_sentinel_pid(int i);          /* pid of sentinel i, 0..2 */
/* get-master-addr-by-name on sentinel i: the port, -1 on error (in TLS
 * mode that is the TLS port of the master). */
int rt_sentinel_reported_master(int i);
/* "redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster"
 * (static storage). */
const char *rt_sentinel_uri(void);
/* TLS mode: "rediss+sentinel://127.0.0.1:S1,...,127.0.0.1:S3/mymaster"
 * with the sentinels' TLS ports (static storage). */
const char *rt_sentinel_tls_uri(void);
const char *rt_sentinel_dir(void);
/* SIGKILLs the master and waits until all sentinels report the replica as
 * master and it says ROLE master. Returns the new master's port. */
int rt_sentinel_kill_master(int64_t bound_ms);
/* The replica stopped (rt_sentinel_pause_node): SIGKILLs the master
 * first, then SIGCONTs the replica, so that it cannot sync again before it
 * is promoted with what it had; waits as above. Returns its port. */
int rt_sentinel_kill_master_resume_replica(int64_t bound_ms);
/* SENTINEL FAILOVER mymaster and waits as above (the old master becomes a
 * replica of the new one). Returns the new master's port. */
int rt_sentinel_failover(int64_t bound_ms);
/* SIGSTOP / SIGCONT the data node on port. */
void rt_sentinel_pause_node(int port, bool stop);

/* ---- a slot-routing proxy (slot_proxy.c) ---- */

/* Starts a forwarder on a free 127.0.0.1 port in front of the running
 * cluster (its slot map read once, now): every request goes to the master
 * owning its keys' slot (keyless ones to the first master); a request whose
 * keys span slots is answered -CROSSSLOT, as Envoy's and Redis
 * Enterprise's proxies do; no pub/sub. Returns the port. Threads of this
 * process; rt_topo_stop_all() stops it. */
int rt_slot_proxy_start(void);
void rt_slot_proxy_stop(void);
/* Before rt_slot_proxy_start: requests whose "<command> <first arg>"
 * starts with `match` (case-insensitive) are answered with the RESP bytes
 * `raw` instead of being forwarded (a proxy's own answers to probes). At
 * most 8; rt_slot_proxy_stop() forgets them. */
void rt_slot_proxy_answer(const char *match, const char *raw);
/* Requests refused with CROSSSLOT, and forwarded, since the start. Any
 * thread. */
long rt_slot_proxy_refused(void);
long rt_slot_proxy_forwarded(void);

/* ---- teardown ---- */

/* Stops everything this process started (cluster, sentinel). atexit() and
 * suite .fini. */
void rt_topo_stop_all(void);

#endif
