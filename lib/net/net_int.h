/* Inside the net layer only: what its files (net.c, conn.c, cmd.c, node.c,
 * pubsub.c, standalone.c, sentinel.c, cluster.c) share with one another.
 * Nothing outside lib/net includes this header; the layers above see net.h.
 *
 * Each file calls only files after it in this order: net.c (the layer's
 * life), cluster.c, sentinel.c, standalone.c (the deployments), pubsub.c,
 * conn.c and cmd.c (the one pair that call each other: a connection hands
 * each reply to its record, a record is sent on a connection), node.c,
 * topo_parse.c, link.c, tls_*.c. What goes up does so through hooks: the
 * deployment's rlock__topology (net.c picks it by the URI; conn.c, cmd.c
 * and pubsub.c call through it and never ask which deployment it is) and
 * the registry's rlock__sub_events (conn.c's subscriber connections).
 * scripts/check-layers keeps it so (no call circle of more than two
 * files). */
#ifndef RLOCK_NET_INT_H
#define RLOCK_NET_INT_H

#include "link.h"
#include "net.h"
#include "node.h"

/* A handshake error of the net layer's own, never seen by users: the
 * server is not the master (Sentinel; the sentinels are asked again). */
#define RLOCK__NOT_MASTER (-1000)

/* What a reply still to come answers. */
enum {
  EXP_AUTH,
  EXP_SELECT,
  EXP_SETNAME,
  EXP_ROLE, /* Sentinel: the server must be the master */
  EXP_PING,
  EXP_CMD,
  EXP_ASKING, /* before a command sent on an ASK redirect */
  EXP_WAIT,   /* replica sync, after a command */
  EXP_PROBE,  /* a capability probe (seq: which one): never fatal */
  EXP_LOAD,   /* SCRIPT LOAD before a command's EVALSHA: never fatal */
};

/* ---- command records (cmd.c) ---- */

enum { RLOCK__CMD_WAIT_REPLY, RLOCK__CMD_WAIT_RETRY, RLOCK__CMD_DONE };

struct rlock__cmd {
  rlock__net *net;
  rlock__reply_cb cb;
  void *data;
  rlock__timed timer; /* reply deadline, or retry delay */
  int state;
  int inflight;     /* replies still to come for this record (sends) */
  int retries_left; /* idempotent commands only */
  int fail_err;     /* refused before sending (RLOCK_EBACKLOG) */
  const rlock__script *script; /* EVALSHA, falling back to EVAL */
  bool use_eval;
  /* SCRIPT LOAD goes right before the next send's EVALSHA, in the same
   * write (after a NOSCRIPT). */
  bool load_first;
  /* The node a NOSCRIPT was answered with a SCRIPT LOAD on (a second
   * NOSCRIPT there: EVAL). */
  const rlock__node *loaded_on;
  rlock__cmd *pending_next;
  rlock__node *pending_on; /* whose pending list holds it; NULL: the
                              client's unrouted list (cluster, no map) */
  rlock__node *fixed;      /* sent to this node only (topology queries) */
  rlock__node *ask;        /* ASK: the next send goes here, after ASKING */
  int slot;                /* cluster slot of its first key, or -1 */
  int redirects;           /* MOVED / ASK / TRYAGAIN followed so far */
  rlock__timed redo;       /* re-send after TRYAGAIN / CLUSTERDOWN */
  bool is_pending;         /* on a pending list */
  rlock__node *sent_to;    /* the node of the latest send */
  uint32_t send_seq;       /* sends so far */
  uint32_t wait_seq;       /* the send the latest WAIT follows */
  int wait_inflight;       /* WAIT replies still to come */
  bool sync;               /* followed by WAIT (replica sync) */
  redisReply *held;        /* the script's reply, until WAIT's comes */
  rlock__cmd *all_prev, *all_next; /* every live record of the client */
  int argc;
  const char **argv;
  size_t *argvlen;
  /* argv strings follow in the same allocation */
};

/* A reply to one send of cmd on a connection (conn.c matched it), or NULL
 * when that connection was lost. */
void rlock__cmd_reply(rlock__cmd *cmd, redisReply *reply);
/* The reply to the WAIT / WAITAOF behind send `seq` of cmd (NULL: lost). */
void rlock__cmd_wait_reply(rlock__cmd *cmd, uint32_t seq, redisReply *reply);
/* Sends the record on the command connection of the node it goes to now,
 * or queues it for that node's next connection or for the slot map. */
void rlock__cmd_send_now(rlock__cmd *cmd);
/* Sends every record of a waiting list, oldest first, emptying it first
 * (what is not sent again joins a list anew): a node's, when its command
 * connection starts. */
void rlock__cmds_send_pending(rlock__cmd **head, rlock__cmd **tail);
/* Cluster: the slot map changed: commands waiting for it go out. */
void rlock__cmds_reroute(rlock__net *n);
/* At close, after every connection is shut: every record left is failed
 * (RLOCK_ECLOSED) and freed. */
void rlock__cmds_fail_all(rlock__net *n);

/* ---- connections (conn.c) ---- */

/* Opens the connection and pipelines its handshake, then what waited for
 * it. 0, or RLOCK_ENOMEM (a reconnect is scheduled). */
int rlock__conn_start(rlock__conn *conn);
/* Starts the node's command connection unless it is up, on its way, or
 * waiting for its reconnect (its address is known). */
void rlock__conn_start_cmd(rlock__node *node);
/* The node's subscriber connection, started on first use. */
void rlock__conn_want_sub(rlock__node *node);
/* The node's server is at host:port now (Sentinel names the master): a
 * node without an address starts both connections there; one whose server
 * moved drops both, and each comes back at once on the new address; what
 * was in flight is failed as after a lost connection. */
void rlock__conn_move(rlock__node *node, const char *host, int port);
/* rlock lets go of the connection (protocol violation, failed handshake,
 * a moved master). `detail` must outlive the call only. */
void rlock__conn_drop(rlock__conn *conn, int err, const char *detail);
/* The next attempt, after the back-off (nothing while closing or while
 * one is scheduled). */
void rlock__conn_schedule_reconnect(rlock__conn *conn);
/* Close: the link goes, every reply still expected fails. */
void rlock__conn_shutdown(rlock__conn *conn);
/* Sends a request whose reply is matched to `kind` (and cmd, seq): 0, or
 * RLOCK_ECONN (not connected, draining), RLOCK_ENOMEM, RLOCK_EBACKLOG. */
int rlock__conn_expect_seq(rlock__conn *conn, int kind, rlock__cmd *cmd,
                           uint32_t seq, int argc, const char **argv,
                           const size_t *lens);
int rlock__conn_expect(rlock__conn *conn, int kind, rlock__cmd *cmd,
                       int argc, const char **argv, const size_t *lens);
/* The server has no WAIT: replica sync off for conn's node (reported
 * once per client, rlock__net_sync_report). */
void rlock__conn_wait_missing(rlock__conn *conn, const redisReply *r);
/* The server refused WAITAOF (a failover to one without it): WAIT from
 * now on for conn's node. */
void rlock__conn_waitaof_missing(rlock__conn *conn, const redisReply *r);
/* What SCRIPT LOAD answered (the probe, or one before an EVALSHA): an
 * error turns the fallback to EVAL on for the node, said once. */
void rlock__conn_script_load_reply(rlock__conn *conn, const redisReply *r);
/* A NOSCRIPT right after this connection's SCRIPT LOAD of the script (a
 * proxy that sent the load elsewhere): EVAL from now on, said once. */
void rlock__conn_script_load_lost(rlock__conn *conn);
/* Standalone, Sentinel: `node` refused a command over keys of two slots
 * (CROSSSLOT: a cluster behind a proxy): multi-key commands keep to one
 * slot each from now on (n->per_slot), said once. */
void rlock__net_crossslot_refused(rlock__net *n, const rlock__node *node);
/* "ERR unknown command ..." */
bool rlock__reply_unknown_command(const redisReply *r);
/* Appends a command to the node's subscriber connection. 0 or RLOCK_ECONN
 * / RLOCK_ENOMEM. */
int rlock__sub_append(rlock__node *node, int argc, const char **argv,
                      const size_t *lens);

/* What the subscriber connections tell the channel registry, which sits
 * above conn.c and registers these at init (rlock__chans_init). */
typedef struct rlock__sub_events {
  /* The connection's handshake is on its way: what waits for it goes
   * behind it. */
  void (*connect)(rlock__node *node);
  /* The connection is gone (not at close): every reply still to come on
   * it with it. */
  void (*disconnect)(rlock__node *node);
  /* A reply after the handshake: a confirmation, a message or an error. */
  void (*reply)(rlock__node *node, const redisReply *reply);
} rlock__sub_events;

/* ---- nodes (node.c) ---- */

/* A new node: for host:port, or (host NULL) without an address until
 * Sentinel names it; no connection started. NULL when out of memory. */
rlock__node *rlock__node_new(rlock__net *n, const char *host, int port);
/* The node for host:port: found, or made (no connection started). NULL
 * when out of memory. */
rlock__node *rlock__node_get(rlock__net *n, const char *host, int port);
/* "host:port", "[v6]:port" or the unix socket's path, cut to fit n. */
void rlock__node_addr(const rlock__node *node, char *buf, size_t n);

/* ---- the channel registry (pubsub.c) ---- */

/* Makes the registry empty and registers its rlock__sub_events. */
void rlock__chans_init(rlock__net *n);
void rlock__chans_free(rlock__net *n);
/* Re-home channels after the slot map changed. */
void rlock__chans_on_topology(rlock__net *n);

/* ---- deployments: standalone.c, sentinel.c, cluster.c ---- */

/* What a deployment adds to the connections, commands and channels, as
 * hiredis's redisContextFuncs does for a context's transport: net.c picks
 * one by the URI's form at init, and the rest of the layer asks it, never
 * which deployment it is. Immutable; hooks marked "NULL ok" may be absent.
 * Every hook runs on the loop thread. */
typedef struct rlock__topology {
  const char *name; /* "standalone", "sentinel", "cluster" */
  /* Commands go to the master of their first key's slot, and multi-key
   * commands keep to one slot each, from the start: no cross-slot probe,
   * and a CROSSSLOT refusal is the caller's error, not a proxy's sign. */
  bool slot_routed;
  /* Its masters have replicas that a failover may promote: scripts are
   * followed by replica sync (cmd.c), whose WAIT is probed at each
   * command connection's handshake (conn.c). */
  bool replicated;
  /* Every handshake asks ROLE, and a server that answers it is not the
   * master (a failover demoted it) is refused; `lost` is then called. */
  bool master_by_role;
  /* The command connection's handshake asks ROLE for the replicas the
   * master has connected (node.h, replicas_role). */
  bool replicas_by_role;

  /* The layer's life (net.c). setup: the opening thread, before start; 0
   * or RLOCK_ENOMEM with the last error set. start: the loop thread,
   * connects. close: close begins (the subscriber connections go; links
   * of its own go too), NULL ok. free: last, before the nodes go; also
   * after a failed setup, NULL ok. */
  int (*setup)(rlock__net *n, const rlock_options *o);
  void (*start)(rlock__net *n);
  void (*close)(rlock__net *n);
  void (*free)(rlock__net *n);

  /* The node a command (or a channel) on `slot` goes to now - slot -1:
   * no key - or NULL while unknown (the command waits on the client's
   * unrouted list until rlock__cmds_reroute). Every send asks it. */
  rlock__node *(*route)(rlock__net *n, int slot);
  /* rlock__net_masters (net.h). */
  size_t (*masters)(rlock__net *n, rlock__node **out, size_t max);

  /* A connection's handshake was answered (err 0) or failed: open hears
   * of it as the deployment sees fit. */
  void (*progress)(rlock__conn *conn, int err, const char *detail);
  /* A connection was lost, or (master_by_role) its server is not the
   * master: where the servers are may have changed. NULL ok. */
  void (*lost)(rlock__net *n);

  /* An error reply to a command sent to `answered` (NULL ok): 0 when it
   * is no redirect; 1 a MOVED, followed (the slot's node is the named
   * one now), 2 an ASK (*to: the node for the next send only), -1 a
   * redirect that cannot be followed (out of memory: the error is the
   * answer). NULL ok: never redirected. */
  int (*redirect)(rlock__net *n, const redisReply *r,
                  const rlock__node *answered, rlock__node **to);
  /* A command was refused for now (TRYAGAIN, CLUSTERDOWN, READONLY,
   * MASTERDOWN, LOADING: a failover or a migration under way) and goes
   * again after a pause, within its deadline: read the deployment again
   * as the error says. NULL: such an error is the answer (one server:
   * waiting changes nothing). */
  void (*not_now)(rlock__net *n, const redisReply *r);

  /* The server refused a channel's SUBSCRIBE: 0 a refusal (its waiters
   * fail with it), 1 the channel belongs elsewhere now (subscribe again at
   * once: route says where), 2 not now (the deployment is read again, and
   * rlock__chans_on_topology subscribes it). NULL ok: always 0. */
  int (*sub_refused)(rlock__net *n, const redisReply *r);
  /* The server dropped a subscription unasked (a sharded channel's slot
   * moved): read the deployment again. NULL ok. */
  void (*sub_dropped)(rlock__net *n);
} rlock__topology;

extern const rlock__topology rlock__topology_standalone;
extern const rlock__topology rlock__topology_sentinel;
extern const rlock__topology rlock__topology_cluster;

/* standalone.c, shared with Sentinel (one master, at n->master). */
int rlock__standalone_setup_master(rlock__net *n, const char *host, int port);
rlock__node *rlock__standalone_route(rlock__net *n, int slot);
size_t rlock__standalone_masters(rlock__net *n, rlock__node **out, size_t max);
void rlock__standalone_progress(rlock__conn *conn, int err, const char *detail);

#endif
