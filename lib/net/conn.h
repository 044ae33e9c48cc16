/* Connections and command records: the net layer's own structs (included
 * by net.h; only net/ looks inside them). */
#ifndef RLOCK_CONN_H
#define RLOCK_CONN_H

#include "link.h"
#include "topo.h"

/* A handshake error of the net layer's own, never seen by users: the
 * server is not the master (Sentinel; the sentinels are asked again). */
#define RLOCK__NOT_MASTER (-1000)

enum { RLOCK__CONN_DOWN, RLOCK__CONN_CONNECTING, RLOCK__CONN_UP };

typedef struct rlock__conn {
  rlock__net *net;
  rlock__node *node; /* the server it connects to */
  bool is_sub;
  int state;
  rlock__link *link; /* NULL while down */
  rlock__timed reconnect;
  rlock__timed hs_timer; /* the handshake's deadline, once connected */
  int backoff_attempt;
  int proto_drops; /* connections dropped for a protocol violation */
  /* commands created while link == NULL, sent at the next connect */
  rlock__cmd *pending_head, *pending_tail;
  /* What each reply still to come on the link answers, oldest first: a
   * ring of exp_cap entries (conn.c). */
  struct rlock__expect *exp;
  size_t exp_head, exp_len, exp_cap;
  bool draining; /* handshake failed: nothing more is sent, dropped once
                    the replies still expected are in */
  int hs_err;    /* first error of the current handshake */
  char hs_detail[200];
} rlock__conn;

enum { RLOCK__CMD_WAIT_REPLY, RLOCK__CMD_WAIT_RETRY, RLOCK__CMD_DONE };

/* One server: its command connection, its subscriber connection (started
 * when a channel is first wanted there), and the (UN)SUBSCRIBEs in flight
 * on it. Standalone and Sentinel have one (the master, whose address a
 * sentinel may change); a cluster has one per node it has heard of. Nodes
 * live until the client closes (a cluster's are few). */
struct rlock__node {
  rlock__net *net;
  rlock__node *next; /* every node of the client */
  char host[RLOCK__HOST_MAX];
  int port;
  bool has_addr; /* Sentinel: false until a sentinel names the master */
  bool seed;     /* a host of the URI */
  rlock__conn cmd;
  rlock__conn sub;
  bool sub_started;
  rlock__chan *sub_req_head, *sub_req_tail; /* (UN)SUBSCRIBEs in flight */
  /* Replica sync (conn.c, wait_count): the replicas this master has
   * connected as far as known (Sentinel: ROLE; cluster: the shard's
   * replicas not failed), and the replicas the topology says it has
   * (Sentinel: SENTINEL REPLICAS; cluster: the shard's, failed or not),
   * which may be promoted in a failover whether connected or not. */
  int replicas;
  int replicas_listed;
  /* What the server of the current command connection supports (conn.c,
   * capability probes): 1 yes, -1 no, 0 not known (yet). */
  int cap_wait;    /* WAIT (-1: replica sync off on this node) */
  int cap_setinfo; /* CLIENT SETINFO */
  int cap_waitaof; /* WAITAOF */
  int aof_on;      /* INFO persistence says aof_enabled:1 (-1: :0) */
  int seed_failures; /* cluster open: handshakes failed on this seed */
};

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

#endif
