/* Inside the net layer only: what its files (conn.c, cmd.c, node.c,
 * pubsub.c, cluster.c, sentinel.c) share with one another. Nothing outside
 * lib/net includes this header; the layers above see net.h. */
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

/* ---- nodes (node.c) ---- */

/* A node for host:port (found or made, connections started). NULL when
 * out of memory. */
rlock__node *rlock__node_get(rlock__net *n, const char *host, int port);
/* Starts the node's command connection (its address is known). */
void rlock__node_start(rlock__node *node);
/* The subscriber connection, started on first use. */
void rlock__node_want_sub(rlock__node *node);
/* "host:port", "[v6]:port" or the unix socket's path, cut to fit n. */
void rlock__node_addr(const rlock__node *node, char *buf, size_t n);
/* Sentinel: the master moved - both connections go and come back on the
 * new address; what was in flight is failed as after a lost connection. */
void rlock__node_set_addr(rlock__node *node, const char *host, int port);

/* ---- the channel registry (pubsub.c) ---- */

/* For conn.c: the subscriber connection's events and replies. */
void rlock__chans_on_connect(rlock__node *node);
void rlock__chans_on_disconnect(rlock__node *node);
void rlock__chans_reply(rlock__node *node, const redisReply *reply);
void rlock__chans_free(rlock__net *n);
/* Re-home channels after the slot map changed. */
void rlock__chans_on_topology(rlock__net *n);

/* ---- cluster (cluster.c) and Sentinel (sentinel.c) ---- */

/* Cluster: the node that serves `slot`, or NULL while unknown. */
rlock__node *rlock__cluster_node_of(rlock__net *n, int slot);
/* Cluster: read the slot map again soon (a MOVED, a lost node). */
void rlock__cluster_refresh_soon(rlock__net *n);
/* Cluster: a MOVED said slot is served by node. */
void rlock__cluster_moved(rlock__net *n, int slot, rlock__node *node);
/* A connection of node answered its handshake (err 0) or failed. */
void rlock__cluster_progress(rlock__node *node, int err, const char *detail);
int rlock__cluster_init(rlock__net *n);
void rlock__cluster_start(rlock__net *n);
void rlock__cluster_free(rlock__net *n);
int rlock__sentinel_init(rlock__net *n, const rlock_options *o);
void rlock__sentinel_start(rlock__net *n);
/* Sentinel: the master's connection was lost or is no master: ask again. */
void rlock__sentinel_requery(rlock__net *n);
void rlock__sentinel_free(rlock__net *n);

#endif
