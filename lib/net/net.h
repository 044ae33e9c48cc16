/* The net layer, as the layers above see it: the two connections to Redis
 * (commands, subscriber) with their handshake and reconnect back-off,
 * command records (reply deadline, idempotent re-sends, the EVALSHA ->
 * EVAL fallback), and the channel registry that routes pub/sub messages
 * to waiters. Internal. What only the net layer's own files share is in
 * net_int.h, which nothing outside lib/net includes.
 *
 * Calls go down only (core, util). The owner learns about connection
 * events through the hooks it sets in rlock__net; a waiter learns about
 * its channel through its rlock__waiter_ops. Loop thread only.
 */
#ifndef RLOCK_NET_H
#define RLOCK_NET_H

#include <hiredis.h>
#include <stdatomic.h>

#include "core.h"
#include "map.h"
#include "topo.h"

typedef struct rlock__net rlock__net;
typedef struct rlock__cmd rlock__cmd;
typedef struct rlock__node rlock__node;
typedef struct rlock__tls_ctx rlock__tls_ctx; /* tls.h */

/* What on_disconnected and on_reconnected tell the owner about a
 * connection that went down, or is up again. */
typedef struct rlock__conn_change {
  bool is_sub;        /* the subscriber connection (else commands) */
  int err;            /* why it was lost: an RLOCK_E* code */
  const char *detail; /* and in words ("" if none) */
  const char *host;   /* the node it is connected to */
  int port;
} rlock__conn_change;

/* A node's address, as configured or as learnt from Sentinel or the slot
 * map (valid until the node moves or goes; loop thread). */
const char *rlock__node_host(const rlock__node *node);
int rlock__node_port(const rlock__node *node);

/* ---- scripts ---- */

typedef struct rlock__script {
  const char *name;
  const char *body;
  char sha[41]; /* computed at build time (lib/embed_lua.py) */
  /* Always sent as EVAL: a NOSCRIPT answer to EVALSHA is re-sent only
   * when it arrives, behind whatever was sent meanwhile - fatal for a
   * script whose place in the order matters (the trim). (Not SCRIPT LOAD
   * + EVALSHA in one write either: behind a proxy the two may reach
   * different servers, and the NOSCRIPT would come back all the same.) */
  bool eval_only;
} rlock__script;

/* ---- commands (cmd.c) ---- */

/* Completion of a command: reply is the server's reply (may be an error
 * reply) when err == 0; otherwise reply is NULL and err is RLOCK_ETIMEDOUT,
 * RLOCK_ECONN, RLOCK_ECLOSED, or RLOCK_EBACKLOG (never sent: the write
 * queue was full). */
typedef void (*rlock__reply_cb)(rlock__net *n, redisReply *reply, int err,
                                void *data);

/* Sends a command on the command connection (or queues it for the next
 * one). argv/argvlen are copied. With script != NULL the command becomes
 * EVALSHA sha argv... (argv then starts at numkeys). retries: how often it
 * may be re-sent after a timeout or a lost connection (0 for commands that
 * are not idempotent). Returns the record (to abandon) or NULL when out of
 * memory (cb not called). */
rlock__cmd *rlock__cmd_send(rlock__net *n, const rlock__script *script,
                            int argc, const char **argv, const size_t *argvlen,
                            int retries, rlock__reply_cb cb, void *data);
/* Sends a command to one node only (no slot routing, no redirects). */
rlock__cmd *rlock__cmd_send_to(rlock__node *node, int argc, const char **argv,
                               const size_t *argvlen, rlock__reply_cb cb,
                               void *data);
/* The cluster slot a command on `key` goes to, or -1 when the client is
 * not talking to a cluster (then any keys may share a command). Commands
 * that name several keys (batches) must keep to one slot each. A
 * standalone URI whose server refused the cross-slot probe (a proxy in
 * front of a cluster) counts as a cluster here. Loop thread. */
int rlock__net_key_slot(const rlock__net *n, const char *key, size_t len);
/* The masters, each once, for a command every master must run (a keyspace
 * SCAN; sent to each with rlock__cmd_send_to): in a cluster the nodes that
 * serve slots in the current map, in slot order; else the one master.
 * Writes up to `max` of them to out and returns how many there are (0: a
 * cluster whose map is not known yet; above max, a bound to call again
 * with). Node pointers live until close. */
size_t rlock__net_masters(rlock__net *n, rlock__node **out, size_t max);
/* The callback will not be called for this record any more. NULL ok. */
void rlock__cmd_abandon(rlock__cmd *cmd);
/* Error code for an error reply. */
int rlock__reply_error(const redisReply *r);

/* ---- the channel registry (pubsub.c) ---- */

typedef struct rlock__chan rlock__chan;
typedef struct rlock__waiter rlock__waiter;

/* What the registry tells a waiter. Each call ends the waiter's current
 * wait; the waiter stays joined until it leaves. */
typedef struct rlock__waiter_ops {
  /* Try again: the subscription was confirmed, a message or a permit woke
   * it, its sleep ran out, or the subscription was lost. */
  void (*retry)(rlock__waiter *w);
  /* The SUBSCRIBE was not confirmed by the waiter's confirm_by. */
  void (*sub_timeout)(rlock__waiter *w);
  /* The server refused the SUBSCRIBE (err and the server's text). */
  void (*sub_failed)(rlock__waiter *w, int err, const char *text,
                     size_t len);
} rlock__waiter_ops;

enum { RLOCK__W_IDLE, RLOCK__W_JOINED, RLOCK__W_CONFIRM, RLOCK__W_WAITING };

struct rlock__waiter {
  const rlock__waiter_ops *ops; /* set by the owner */
  rlock__chan *chan;            /* joined channel, or NULL */
  rlock__waiter *prev, *next;
  int state;
  rlock__timed timer;
};

/* What a message on a channel does, decided by the primitive that joined
 * it first: it calls wake_one / wake_all. */
typedef void (*rlock__chan_message_fn)(rlock__chan *ch, const char *payload,
                                       size_t len);

/* Joins w to `channel` (subscribing when it is the first). Returns 1 when
 * the subscription is live, 0 when its confirmation is awaited (then one of
 * w's ops follows, at the latest at confirm_by), or RLOCK_ENOMEM. */
int rlock__chan_join(rlock__net *n, rlock__waiter *w, const char *channel,
                     size_t len, rlock__chan_message_fn on_message,
                     int64_t confirm_by);
/* Leaves the channel (the last waiter out unsubscribes, after a linger). */
void rlock__chan_leave(rlock__waiter *w);
/* Current epoch of a channel's live subscription, 0 when not subscribed. */
uint64_t rlock__chan_epoch(rlock__net *n, const char *channel, size_t len);
/* Puts a joined waiter to sleep until a message or wait_ms; a stored
 * wake-up (permit) makes it retry at once. */
void rlock__chan_wait(rlock__waiter *w, int64_t wait_ms);
/* Wakes up to n waiters of the channel, oldest first (a semaphore's new
 * total); wake-ups that find nobody asleep are kept as permits, as
 * rlock__chan_wake_one's. */
void rlock__chan_wake_n(rlock__chan *e, int64_t n);
/* Wakes every waiter of the client on `channel`, as a "1" message would
 * (a release the server announced to nobody: the read/write lock's
 * downgrade); nothing when the client has no entry for it. */
void rlock__chan_wake_all_named(rlock__net *n, const char *channel,
                                size_t len);
/* Wakes the oldest waiter of the client on `channel` - or, with nobody
 * asleep, keeps a permit for one joined (see rlock__chan_wake_one); nothing
 * when nobody is joined. */
void rlock__chan_wake_one_named(rlock__net *n, const char *channel,
                                size_t len);
/* Local handoff: the oldest waiter asleep on a live subscription of
 * `channel`, or NULL. */
rlock__waiter *rlock__chan_sleeper(rlock__net *n, const char *channel,
                                   size_t len);
/* Wakes that waiter now (its retry runs from here). With absorb_ms > 0,
 * the next message on its channel within absorb_ms wakes nobody: it is the
 * one of the release the waiter was woken for. */
void rlock__chan_kick(rlock__waiter *w, int64_t absorb_ms);
/* Takes that waiter out of its sleep without waking it (its retry does not
 * run; it stays joined): its lock is being moved to it by a command of
 * the release (a local transfer). */
void rlock__chan_take(rlock__waiter *w);
/* That release did not release (no message will come): forget one
 * absorbed message. */
void rlock__chan_unabsorb(rlock__net *n, const char *channel, size_t len);
/* Wakes the oldest sleeper, or keeps a permit when none sleeps. */
void rlock__chan_wake_one(rlock__chan *ch);
/* Wakes every sleeper (or keeps permits for every joined waiter). */
void rlock__chan_wake_all(rlock__chan *ch);

/* ---- the layer (net.c) ---- */

typedef struct rlock__cluster rlock__cluster;   /* cluster.c */
typedef struct rlock__sentinel rlock__sentinel; /* sentinel.c */
typedef struct rlock__topology rlock__topology; /* net_int.h */
typedef struct rlock__sub_events rlock__sub_events; /* net_int.h */

struct rlock__net {
  rlock__core *core;
  const rlock__uri *uri;   /* owned by the client */
  const char *client_name; /* CLIENT SETNAME, or NULL */
  /* Without client_name: the name the client layer makes (its id, pid,
   * program and host), set as a probe - a refusal (ACL, a service without
   * CLIENT) is not an error. NULL: none. Set before the first connect. */
  const char *auto_name;
  /* The deployment: standalone, Sentinel or Cluster, chosen by the URI
   * at init (net.c); the net layer's files ask it through its hooks. */
  const rlock__topology *topo;
  rlock__node *nodes;      /* every node */
  rlock__node *master;     /* SINGLE, SENTINEL: the one node */
  rlock__cluster *cluster; /* CLUSTER: the slot map and its refresh */
  rlock__sentinel *sentinel; /* SENTINEL: discovery and +switch-master */
  /* CLUSTER: commands waiting for the first slot map */
  rlock__cmd *unrouted_head, *unrouted_tail;
  bool sharded;  /* SPUBLISH / SSUBSCRIBE (decided at open) */
  /* Standalone, Sentinel: the server refused a command whose keys span
   * slots (CROSSSLOT: a cluster behind a proxy), so multi-key commands
   * keep to one slot each (conn.c, the cross-slot probe). Loop thread. */
  bool per_slot;
  bool opened;   /* open has been told it succeeded */
  bool started;  /* rlock__net_start ran: new nodes connect at once */
  /* Set while a command's callback runs when replica sync was asked for
   * and no replica confirmed it (rlock__net_reply_unsynced). */
  bool reply_unsynced;
  /* Set with it when the server refused the WAIT itself (an error reply
   * other than "unknown command": an ACL without +wait): what it said
   * (rlock__net_reply_sync_refused). */
  const char *reply_sync_refused;
  void *reply_link; /* conn.c: the link whose command reply is handled */
  /* The first node found without WAIT (conn.c, probes): a sentence,
   * written once by the loop thread, readable from any thread once
   * sync_report_set is. */
  char sync_report[300];
  atomic_bool sync_report_set;
  rlock__tls_ctx *tls; /* rediss:// only */
  rlock__cmd *cmd_all; /* every live command record */
  rlock__map chans;    /* channel -> rlock__chan */
  const rlock__sub_events *sub_events; /* pubsub.c's, for conn.c */
  uint64_t next_epoch;
  /* Hooks, set by the owner. */
  void *owner;
  /* A connection's handshake answered (err 0) or failed, while open waits
   * (called for every attempt; the owner ignores it after open). Open
   * succeeds after two successes. */
  void (*on_open_progress)(rlock__net *n, int err, const char *detail);
  /* The command connection is up (again). */
  void (*on_cmd_ready)(rlock__net *n);
  /* During close: the command connection has finished closing. */
  void (*on_cmd_closed)(rlock__net *n);
  /* A connection that was up before is up again (its handshake answered).
   * The facts are valid for the call only. NULL: none. */
  void (*on_reconnected)(rlock__net *n, const rlock__conn_change *r);
  /* A connection that was up is lost (not at close); its reconnect is
   * scheduled. The facts are valid for the call only. NULL: none. */
  void (*on_disconnected)(rlock__net *n, const rlock__conn_change *r);
  /* Counts for the client's stats (loop thread writes, any thread reads). */
  struct {
    rlock__counter commands_sent; /* writes of a command, re-sends too */
    rlock__counter resubscribes;  /* channels subscribed again on a
                                     subscriber connection that was up */
    rlock__counter sync_ok;       /* replica sync: confirmed */
    rlock__counter sync_unconfirmed;
  } stats;
};

/* Inside a command's callback: the command asked for replica sync and no
 * replica confirmed it within replica_sync_timeout_ms (the reply is the
 * master's, which did run it). */
static inline bool rlock__net_reply_unsynced(const rlock__net *n) {
  return n->reply_unsynced;
}
/* Inside a command's callback, with rlock__net_reply_unsynced: the
 * server's refusal of the WAIT (e.g. "NOPERM ..."), NUL-terminated, valid
 * for the call; NULL when the WAIT ran and simply went unconfirmed. */
static inline const char *rlock__net_reply_sync_refused(const rlock__net *n) {
  return n->reply_sync_refused;
}
/* Why replica sync is off on a node although asked for (the server has no
 * WAIT: a managed service, rename-command), said once per client; NULL
 * while every node has it. Any thread. */
const char *rlock__net_sync_report(const rlock__net *n);
/* A client's net layer, for internal queries such as the one above (the
 * CLI, tests). Defined by the client (lib/client/client.c). */
const rlock__net *rlock__client_net(const rlock_client *c);
/* The publish command of the client's pub/sub mode. */
static inline const char *rlock__net_publish(const rlock__net *n) {
  return n->sharded ? "SPUBLISH" : "PUBLISH";
}

/* False in a cluster when `key` and `channel` hash to different slots:
 * scripts name the channel among their KEYS (as Java's do), so the server
 * refuses them with CROSSSLOT, and a sharded message could not cross slots
 * anyway. Only the count-down latch's channel, which puts braces around a
 * braced name, can. Any thread after open. */
bool rlock__net_slots_agree(const rlock__net *n, const char *key, size_t klen,
                            const char *channel, size_t clen);

void rlock__net_init(rlock__net *n, rlock__core *core, const rlock__uri *uri,
                     const char *client_name);
/* rediss://: builds the TLS context from the options; Sentinel and
 * Cluster: their state (the opening thread, before rlock__net_start): 0,
 * or RLOCK_ETLS / RLOCK_ENOMEM with the last error set. */
int rlock__net_setup(rlock__net *n, const rlock_options *o);
/* Connects both connections (loop thread). */
void rlock__net_start(rlock__net *n);
/* Whether the command connection can take commands now. */
bool rlock__net_cmd_connected(const rlock__net *n);
/* Close: the subscriber connection goes at once. */
void rlock__net_close_sub(rlock__net *n);
/* Close, last step: both connections go, every command record still alive
 * is failed (RLOCK_ECLOSED) and freed, the registry is emptied. */
void rlock__net_free(rlock__net *n);

#endif
