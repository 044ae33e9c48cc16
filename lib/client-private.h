/* Internal structures shared by the client's parts. Never installed.
 *
 * Threads: user threads only touch the request queue (under queue_mutex) and
 * immutable fields (id, options, names). Everything else is owned by the
 * loop thread and touched only there.
 */
#ifndef RLOCK_CLIENT_PRIVATE_H
#define RLOCK_CLIENT_PRIVATE_H

#include <async.h>
#include <hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "map.h"
#include "rlock.h"
#include "util.h"

typedef struct rlock__op rlock__op;
typedef struct rlock__cmd rlock__cmd;
typedef struct rlock__sub rlock__sub;
typedef struct rlock__hold rlock__hold;
typedef struct rlock__timed rlock__timed;

/* ---- loop.c: timed events (one uv_timer, a binary min-heap) ---- */

struct rlock__timed {
  int64_t at;   /* rlock__now_ms() deadline */
  size_t index; /* heap position + 1; 0 = not scheduled */
  void (*fire)(rlock_client *c, rlock__timed *t);
};

/* Monotonic milliseconds (uv_hrtime based), usable from any thread. */
int64_t rlock__now_ms(void);
void rlock__timed_start(rlock_client *c, rlock__timed *t, int64_t at);
void rlock__timed_stop(rlock_client *c, rlock__timed *t);
static inline bool rlock__timed_active(const rlock__timed *t) {
  return t->index != 0;
}

/* ---- scripts.c ---- */

typedef struct rlock__script {
  const char *name;
  const char *body;
  char sha[41]; /* computed at build time (lib/embed_lua.py) */
  /* Always sent as EVAL: a NOSCRIPT answer to EVALSHA is re-sent as EVAL
   * only when it arrives, behind whatever was sent meanwhile - fatal for a
   * script whose place in the order matters (the trim). */
  bool eval_only;
} rlock__script;

enum { RLOCK__SCRIPT_ACQUIRE, RLOCK__SCRIPT_RELEASE, RLOCK__SCRIPT_FORCE,
       RLOCK__SCRIPT_RENEW, RLOCK__SCRIPT_TRIM, RLOCK__SCRIPT_COUNT };
/* The script table (immutable; any thread). */
const rlock__script *rlock__script_get(int id);

/* ---- conn.c: connections and command records ---- */

enum { RLOCK__CONN_DOWN, RLOCK__CONN_CONNECTING, RLOCK__CONN_UP };

typedef struct rlock__conn {
  rlock_client *client;
  bool is_sub;
  int state;
  redisAsyncContext *ac; /* NULL while down */
  rlock__timed reconnect;
  int backoff_attempt;
  int proto_drops; /* connections dropped for a protocol violation */
  /* commands created while ac == NULL, sent at the next connect */
  rlock__cmd *pending_head, *pending_tail;
  /* What each reply still to come on ac answers, oldest first: a ring of
   * exp_cap entries (conn.c). rlock matches replies itself; hiredis only
   * connects, writes and parses. */
  struct rlock__expect *exp;
  size_t exp_head, exp_len, exp_cap;
  bool draining; /* handshake failed: nothing more is sent, dropped once
                    the replies still expected are in */
  int hs_err;    /* first error of the current handshake */
  char hs_detail[200];
} rlock__conn;

/* Completion of a command: reply is the server's reply (may be an error
 * reply) when err == 0; otherwise reply is NULL and err is RLOCK_ETIMEDOUT,
 * RLOCK_ECONN or RLOCK_ECLOSED. Runs on the loop thread. */
typedef void (*rlock__reply_cb)(rlock_client *c, redisReply *reply, int err,
                                void *data);

enum { RLOCK__CMD_WAIT_REPLY, RLOCK__CMD_WAIT_RETRY, RLOCK__CMD_DONE };

struct rlock__cmd {
  rlock_client *client;
  rlock__reply_cb cb;
  void *data;
  rlock__timed timer; /* reply deadline, or retry delay */
  int state;
  int inflight;      /* replies still to come for this record (sends) */
  int retries_left;  /* idempotent commands only */
  const rlock__script *script; /* EVALSHA, falling back to EVAL */
  bool use_eval;
  rlock__cmd *pending_next;
  rlock__cmd *all_prev, *all_next; /* every live record of the client */
  int argc;
  const char **argv;
  size_t *argvlen;
  /* argv strings follow in the same allocation */
};

/* Sends a command on the command connection. argv/argvlen are copied. With
 * script != NULL the command becomes EVALSHA sha argv... (argv then starts at
 * numkeys). retries: how often it may be re-sent after a timeout or a lost
 * connection (0 for commands that are not idempotent). Returns the record
 * (to abandon) or NULL when out of memory (cb not called). */
rlock__cmd *rlock__cmd_send(rlock_client *c, const rlock__script *script,
                            int argc, const char **argv, const size_t *argvlen,
                            int retries, rlock__reply_cb cb, void *data);
/* The callback will not be called for this record any more. */
void rlock__cmd_abandon(rlock__cmd *cmd);
/* At shutdown: fails and frees every record still alive. */
void rlock__cmd_shutdown_all(rlock_client *c);

int rlock__conn_start(rlock__conn *conn); /* connect (or reconnect) now */
/* Appends a command to the subscriber connection, whose replies after the
 * handshake go to rlock__pubsub_reply. 0 or RLOCK_ECONN/ENOMEM. */
int rlock__sub_append(rlock__conn *conn, int argc, const char **argv,
                      const size_t *lens);
void rlock__conn_shutdown(rlock__conn *conn);
/* Error code for an error reply, with its text put in op-visible detail. */
int rlock__reply_error(const redisReply *r);

/* ---- pubsub.c: one entry per subscribed channel ---- */

enum { RLOCK__SUB_NONE, RLOCK__SUB_SUBSCRIBING, RLOCK__SUB_SUBSCRIBED,
       RLOCK__SUB_UNSUBSCRIBING };

struct rlock__sub {
  rlock_client *client;
  char *channel;
  size_t channel_len;
  int state;
  bool resubscribe; /* a SUBSCRIBE is wanted once the UNSUBSCRIBE lands */
  bool missed;      /* was unsubscribed while ops slept: wake them on resubscribe */
  uint64_t epoch;   /* changes whenever the subscription (re)starts */
  int refs;         /* ops joined to this entry */
  int permits;      /* wake-ups that found nobody waiting */
  rlock__op *confirm_head, *confirm_tail; /* waiting for SUBSCRIBE reply */
  rlock__op *wait_head, *wait_tail;       /* waiting for a message */
  rlock__timed linger; /* UNSUBSCRIBE a little after the last op left */
  /* In the client's queue of (UN)SUBSCRIBEs awaiting their reply: an error
   * reply names no channel, so it belongs to the oldest request. An entry
   * has at most one request in flight and is not freed while it has one. */
  rlock__sub *req_next;
  bool req_queued;
};

/* Joins op to the channel's entry (creating and subscribing it). */
int rlock__sub_join(rlock_client *c, rlock__op *op, const char *channel,
                    size_t len);
void rlock__sub_leave(rlock__op *op);
/* Current epoch of a channel's live subscription, 0 when not subscribed. */
uint64_t rlock__sub_epoch(rlock_client *c, const char *channel, size_t len);
/* Puts a joined op to sleep until a message or `wait_ms`; a stored permit
 * wakes it at once. The op's on_wake runs either way. */
void rlock__sub_wait(rlock__op *op, int64_t wait_ms);
void rlock__pubsub_on_connect(rlock_client *c);
void rlock__pubsub_on_disconnect(rlock_client *c);
void rlock__pubsub_shutdown(rlock_client *c);
/* Every reply on the subscriber connection after its handshake. */
void rlock__pubsub_reply(rlock_client *c, const redisReply *reply);

/* ---- watchdog.c: what this client believes it holds ---- */

struct rlock__hold {
  char *key; /* name '\0' owner, the map key */
  size_t key_len;
  const char *name; /* points into key */
  const char *owner;
  int64_t count;          /* local hold count */
  int64_t watchdog_count; /* holds taken without a lease */
  int64_t lease_ms;       /* last explicit lease */
  uint64_t gen;
  bool lost;
  /* Unlocks of this hold in flight, and how many were ever started: while
   * one runs (or since a renewal was sent) a renewal's "0" may just mean the
   * unlock already ran on the server, so it is not a loss (watchdog.c). */
  int releasing;
  uint64_t release_seq;
};

rlock__hold *rlock__hold_find(rlock_client *c, const char *name,
                              const char *owner);
int rlock__hold_add(rlock_client *c, const char *name, const char *owner,
                    int64_t lease_ms);
void rlock__hold_drop(rlock_client *c, rlock__hold *h);
void rlock__watchdog_start(rlock_client *c);

/* ---- reconcile.c: repairing holds after lost replies ---- */

int64_t rlock__hold_count_known(rlock_client *c, const char *name,
                                const char *owner);
/* After a trim that found `server_before` holds and asked for `want`. */
void rlock__hold_trimmed(rlock_client *c, const char *name, const char *owner,
                         int64_t server_before, int64_t want);
rlock__cmd *rlock__send_trim(rlock_client *c, const char *name,
                             size_t name_len, const char *channel,
                             size_t channel_len, const char *owner,
                             int64_t want, rlock__reply_cb cb, void *data);
void rlock__suspect_add(rlock_client *c, const rlock *lock, const char *owner);
void rlock__suspects_run(rlock_client *c);
/* At close: sends every pending trim now. Returns how many were sent. */
int rlock__suspects_flush(rlock_client *c);
void rlock__suspects_shutdown(rlock_client *c);
void rlock__watchdog_shutdown(rlock_client *c);

/* ---- lock.c: operations ---- */

typedef enum rlock__op_kind {
  RLOCK__OP_ACQUIRE,
  RLOCK__OP_RELEASE,
  RLOCK__OP_FORCE_UNLOCK,
  RLOCK__OP_IS_LOCKED,
  RLOCK__OP_IS_HELD,
  RLOCK__OP_HOLD_COUNT,
  RLOCK__OP_TTL,
  RLOCK__OP_CANCEL,    /* control: cancel `target` */
  RLOCK__OP_INTERRUPT, /* control: cancel acquires of owner_id */
} rlock__op_kind;

enum { RLOCK__ST_NEW, RLOCK__ST_CMD, RLOCK__ST_AWAIT_SUB, RLOCK__ST_WAITING,
       RLOCK__ST_DONE };

struct rlock__op {
  rlock__op *next; /* request queue, then the client's active list */
  rlock__op *active_prev, *active_next;
  rlock__op_kind kind;
  rlock *lock;
  rlock_client *client;
  uint64_t owner_id;
  char owner[RLOCK_ID_LEN + 1 + 21];
  rlock__op *target; /* RLOCK__OP_CANCEL */
  bool canceled;     /* canceled before it started */
  int64_t wait_ms;  /* < 0: no deadline */
  int64_t lease_ms; /* < 0: watchdog */
  int64_t deadline; /* rlock__now_ms() based; valid when wait_ms >= 0 */
  /* outcome */
  int result;
  int64_t value;
  char detail[256];
  /* completion: runs on the loop thread, exactly once */
  void (*done)(rlock__op *op);
  void *data;
  /* loop-thread state */
  int state;
  rlock__cmd *cmd;        /* command in flight */
  rlock__timed timer;     /* subscribe / wait bound */
  rlock__sub *sub;        /* joined channel entry */
  rlock__op *sub_prev, *sub_next; /* in sub's confirm or wait list */
  uint64_t seen_epoch;    /* subscription epoch when the try was sent */
  char *latch;            /* unlock latch key (request id), heap */
  int lost_err;           /* first transport error of an acquire, or 0 */
  int64_t outage_until;   /* how long a deadline-less op rides out errors */
  int64_t trim_want;      /* count sent with the op's trim */
  bool answered;          /* the server answered one of this op's commands */
  uint64_t hold_gen;      /* release: the hold it counted as releasing */
};

/* Runs an op on the loop thread (called from rlock__loop_submit's drain). */
void rlock__op_start(rlock_client *c, rlock__op *op);
/* Finishes an op with `result` (and detail), leaving any channel and
 * abandoning its command. */
void rlock__op_finish(rlock__op *op, int result);
/* Called by pubsub when a waiting op should retry (message, permit, timer or
 * subscription confirmed). */
void rlock__op_retry(rlock__op *op);
/* Called by pubsub when the subscription could not be made in time. */
void rlock__op_sub_timeout(rlock__op *op);
/* Called by pubsub when the server refused the SUBSCRIBE (err, e.g.
 * RLOCK_ENOPERM, with the server's text). */
void rlock__op_sub_failed(rlock__op *op, int err, const char *text,
                          size_t len);

/* ---- client.c / loop.c ---- */

struct rlock {
  atomic_int refs; /* the user's handle + pending async ops */
  rlock_client *client;
  char *name;
  size_t name_len;
  char *channel; /* redisson_lock__channel:{name} */
  size_t channel_len;
  char *braced;  /* {name}, or name when it contains '{' */
  size_t braced_len;
};

struct rlock_client {
  atomic_int refs; /* user handle, lock handles, loop thread */
  char id[RLOCK_ID_LEN + 1];
  rlock_options opts;
  char *uri_text;
  char *client_name;
  rlock__uri uri;

  uv_loop_t loop;
  uv_thread_t thread;
  uv_async_t wakeup;
  uv_timer_t heap_timer;
  uv_timer_t watchdog_timer;
  uv_timer_t drain_timer; /* bounds the graceful close of the command conn */
  bool shutdown_done;
  int trims_draining; /* trims (and the latch UNLINK) sent at close, unanswered */
  int64_t heap_timer_at; /* when heap_timer is armed for, or -1 */

  /* request queue: the only state user threads write */
  uv_mutex_t queue_mutex;
  rlock__op *queue_head, *queue_tail;
  bool closed;         /* under queue_mutex: no more requests accepted */
  bool thread_started;
  int pid; /* the process that opened it (fork check) */

  /* loop-thread state */
  bool closing;
  rlock__conn cmd;
  rlock__conn sub;
  rlock__timed **heap;
  size_t heap_len, heap_cap;
  rlock__map subs;  /* channel -> rlock__sub */
  rlock__sub *sub_req_head, *sub_req_tail; /* requests awaiting replies */
  rlock__map holds; /* name '\0' owner -> rlock__hold */
  rlock__map suspects; /* name '\0' owner: holds to re-check (reconcile.c) */
  rlock__op *active_head;
  rlock__cmd *cmd_all;
  uint64_t next_epoch;
  uint64_t next_hold_gen;
  /* unlock latches to delete, sent as one UNLINK (lock.c) */
  char *latch_del[64];
  int latch_del_n;
  rlock__timed latch_timer;
  uint64_t latch_seed[2]; /* unlock request ids: seeded once, then counted */
  uint64_t latch_count;
  int renew_inflight;

  /* open handshake */
  uv_sem_t open_sem;
  rlock__timed open_timer;
  int open_result;
  char open_detail[256];
  int open_pending; /* connections still to answer their PING */
};

/* Queues op for the loop thread. Returns 0, or RLOCK_ECLOSED / RLOCK_EFORK
 * (op untouched). */
int rlock__loop_submit(rlock_client *c, rlock__op *op);
/* RLOCK_EFORK when called in a process forked from the one that opened the
 * client (its loop thread does not exist there), else 0. */
int rlock__fork_check(const rlock_client *c);
/* The detail for a failed rlock__loop_submit(). */
const char *rlock__submit_error(int rc);
bool rlock__on_loop_thread(rlock_client *c);
/* Next id from the counter shared by thread ids and rlock_owner_new(). */
uint64_t rlock__id_next(void);
int rlock__loop_start(rlock_client *c);
void rlock__client_release(rlock_client *c);
/* At close: sends the pending latch UNLINK as part of the drain. Returns 1
 * when sent (close waits for its reply), else 0. */
int rlock__latches_flush_at_close(rlock_client *c);
/* Frees unlock latches not yet deleted (they expire by their TTL). */
void rlock__latches_shutdown(rlock_client *c);
/* The command connection finished closing during close (conn.c). */
void rlock__loop_drained(rlock_client *c);
/* Called by conn.c when a connection's handshake PING answered (err 0) or
 * failed, while open() waits. */
void rlock__open_progress(rlock_client *c, int err, const char *detail);

#endif
