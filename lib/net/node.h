/* A node and its two connections: the structs (included at the top of
 * net.h). The layers above read a node's host and port only (lib/prim's
 * SCAN details); everything else in here is net's own, changed by net/
 * alone (node.c, conn.c, cmd.c). */
#ifndef RLOCK_NODE_H
#define RLOCK_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "topo.h"

typedef struct rlock__net rlock__net;
typedef struct rlock__cmd rlock__cmd;
typedef struct rlock__node rlock__node;
typedef struct rlock__chan rlock__chan;
typedef struct rlock__link rlock__link; /* link.h */

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
  bool ever_up; /* was connected once: the next time is a reconnect */
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
  /* The furthest step of the handshake's order (conn.c, hs_rank) pushed
   * and answered on the current link: checked by asserts only. */
  int hs_pushed, hs_answered;
  char hs_detail[200];
  /* Stats and events: it was up once (a later up is a reconnect), and why
   * it last went down from up. */
  bool was_up;
  int down_err;
  char down_detail[128];
} rlock__conn;

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
  /* Replica sync (cmd.c, wait_count): the replicas this master has
   * connected as far as known (Sentinel: ROLE; cluster: the shard's
   * replicas not failed), and the replicas the topology says it has
   * (Sentinel: SENTINEL REPLICAS; cluster: the shard's, failed or not),
   * which may be promoted in a failover whether connected or not. */
  int replicas;
  int replicas_listed;
  /* Cluster: the replicas the master itself has connected, from ROLE (a
   * probe of each command connection's handshake, and again at each read
   * of the slot map while the map lists none for it); -1: not known.
   * Counted where the map lists no replica for the master: a node lists
   * a replica only after gossip has told it, seconds later on a loaded
   * machine, and a lock taken meanwhile would not wait for it. While the
   * handshake's ROLE is unanswered and the map lists none, commands
   * followed by replica sync wait for it (cmd.c, on this node's pending
   * list); its answer sends them. */
  int replicas_role;
  bool role_asked;             /* the handshake's ROLE is unanswered */
  rlock__cmd *role_cmd;        /* the map-time ROLE in flight, or NULL */
  /* What the server of the current command connection supports (conn.c,
   * capability probes): 1 yes, -1 no, 0 not known (yet). */
  int cap_wait;    /* WAIT (-1: replica sync off on this node) */
  int cap_setinfo; /* CLIENT SETINFO */
  int cap_waitaof; /* WAITAOF */
  int cap_script_load; /* SCRIPT LOAD (-1: refused, an ACL without
                          +script: scripts fall back to EVAL) */
  int aof_on;      /* INFO persistence says aof_enabled:1 (-1: :0) */
  int seed_failures; /* cluster open: handshakes failed on this seed */
};

#endif
