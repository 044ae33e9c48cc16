/* The engine layer: operations and what the client holds. Internal.
 *
 * An operation (rlock__op) is one public call - blocking or async - run as
 * a state machine on the loop thread: started once, finished exactly once.
 * Its kind is an rlock__op_type (start function and two flags); the
 * generic kinds live here (acquire, release, cancel, interrupt), the
 * queries and whatever else a primitive needs live with the primitive.
 * Acquire and release are driven through the primitive's descriptor
 * (rlock__prim): the engine owns the loop around them - try, subscribe,
 * sleep at most the holder's TTL, try again; deadlines; repairing the hold
 * count after a lost reply (trim); unlock latches; renewal of what is held.
 *
 * Calls go down only: to net (commands, the channel registry) and core
 * (timers, the task queue). The client above registers hooks (on_drained).
 * Everything here runs on the loop thread unless marked "any thread".
 */
#ifndef RLOCK_ENGINE_H
#define RLOCK_ENGINE_H

#include <assert.h>
#include <stdatomic.h>

#include "net.h"
#include "park.h"

typedef struct rlock__engine rlock__engine;
typedef struct rlock__op rlock__op;
typedef struct rlock__prim rlock__prim;
typedef struct rlock__op_type rlock__op_type;
typedef struct rlock__prim_ops rlock__prim_ops;
typedef struct rlock__event rlock__event;

/* ---- handles (the public `rlock`) ---- */

struct rlock {
  atomic_int refs; /* the user's handle + pending async ops */
  rlock__engine *engine;
  const rlock__prim *prim;
  char *name;
  size_t name_len;
  char *tag; /* {name}, or name when it contains '{' */
  size_t tag_len;
  char *channel; /* the primitive's channel */
  size_t channel_len;
};

/* A new handle on `name` for `prim` (its channel named as the descriptor
 * says). Takes a reference on the engine's core. 0 or RLOCK_ENOMEM. */
int rlock__handle_new(rlock__engine *e, const rlock__prim *prim,
                      const char *name, size_t len, rlock **out);
/* The same for a kind whose handle carries state of its own: `size` bytes
 * (zeroed), a struct that starts with the rlock (as ops embed rlock__op);
 * the descriptor's handle_free lets go of that state with the last
 * reference. */
int rlock__handle_new_size(rlock__engine *e, const rlock__prim *prim,
                           const char *name, size_t len, size_t size,
                           rlock **out);
/* Drops a reference (the handle is freed with the last). Any thread. */
void rlock__handle_release(rlock *lock);

/* ---- the primitive's descriptor ---- */

/* What read_try / read_release answer besides errors. */
enum { RLOCK__TRY_WAIT = 0, RLOCK__TRY_ACQUIRED = 1 };
/* RLOCK__REL_YIELD (a transfer's only): released, and another client's
 * waiters were told - this client holds its own tries back a moment
 * (gate.c) so that one of them can take the lock. */
enum { RLOCK__REL_HELD = 0, RLOCK__REL_RELEASED = 1, RLOCK__REL_NOT_HELD = 2,
       RLOCK__REL_YIELD = 3 };

/* The hold part of a descriptor: only kinds whose acquisition is a hold
 * (the locks) fill it. The engine records, renews, releases and repairs
 * holds through it. */
typedef struct rlock__prim_hold {
  /* Sends the release of one hold, with its request latch key (a re-send
   * must answer what the first send did), the lease to re-apply while
   * still held and the latch's TTL. */
  rlock__cmd *(*send_release)(rlock__op *op, const char *latch,
                              int64_t lease_ms, int64_t latch_ttl_ms,
                              rlock__reply_cb cb);
  /* Reads its reply: RLOCK__REL_* or a negative RLOCK_E* code. */
  int (*read_release)(rlock__op *op, const redisReply *reply);
  /* Sets an owner's hold count on the server back to `want` (KEYS lock,
   * channel; ARGV owner, want, publish command, "0"; replies the count it
   * found). The engine's repair after lost replies. NULL: no repair - an
   * acquire whose reply was lost ends with the transport error, as for a
   * kind without holds, and the hold expires with its lease. */
  const rlock__script *trim;
  /* Renews a batch of holds (KEYS locks; ARGV timeout, owners; replies an
   * array of 1/0). */
  const rlock__script *renew;
  /* Instead of `renew`: the kind sends the renewal of one hold itself,
   * from the handle that took it (what the handle carries beyond its name,
   * e.g. fields of its own), to `timeout_ms`; the reply is an integer, 1
   * renewed, 0 gone, as one element of `renew`'s array; data goes to cb.
   * NULL return: out of memory (the next period tries again). With it, a
   * hold is one per (name, owner, handle) and keeps a reference on its
   * handle until it ends (hold.c): two handles on one name hold apart. */
  rlock__cmd *(*send_renew)(rlock__engine *e, rlock *lock, const char *owner,
                            int64_t timeout_ms, rlock__reply_cb cb, void *data);
  /* A release of an owner's last hold frees the lock for any one waiter:
   * a local waiter's try may follow it in the same write (release.c). */
  bool local_handoff;
  /* Local handoff by transfer (release.c; needs local_handoff): sends ONE
   * command that releases one hold of op->owner, as send_release does (the
   * same latch, lease and latch TTL; its reply read by read_release), and
   * when that was the owner's last hold, gives the lock to `to_owner` with
   * a hold count of 1 and `to_lease_ms` - never free in between, so
   * nothing is published - unless another client's waiters wait too:
   * then it releases and publishes as the release does, answering
   * RLOCK__REL_YIELD. RLOCK__REL_RELEASED means "moved to to_owner". NULL: the release and the waiter's try go as two commands
   * in one write. */
  rlock__cmd *(*transfer)(rlock__op *op, const char *latch, int64_t lease_ms,
                          int64_t latch_ttl_ms, const char *to_owner,
                          int64_t to_lease_ms, rlock__reply_cb cb);
  /* Appended to the owner id in every field this kind writes (the write
   * lock's ":write"); NULL: none. */
  const char *owner_suffix;
  /* The expiry is the hash's, shared with other owners' holds whose
   * renewals set it to their watchdog timeout, and a release re-applies
   * no lease (the read lock): lease safety bounds a hold by min(lease,
   * watchdog timeout) and leaves it alone at a release (hold.c). */
  bool shared_expiry;
  /* Holds exclude every other owner (the lock, the write lock): while
   * another owner of this client holds the lock, or a try of this client
   * for it is on its way, an acquire waits locally instead of sending a
   * try that must fail (gate.c). */
  bool local_gate;
} rlock__prim_hold;

/* A primitive's descriptor: a wait part every kind fills, and a hold part
 * for the kinds whose acquisition is a hold. */
struct rlock__prim {
  const char *kind; /* "lock", ... */
  /* ---- the wait part ---- */
  /* The handle's channel: channel_prefix + the name's tag ({name}, or the
   * name when it has braces) - unless channel_name makes it (malloc'd;
   * NULL: out of memory), as the count-down latch's always-braced one. */
  const char *channel_prefix;
  char *(*channel_name)(const char *name, size_t len, size_t *out_len);
  /* Sends one acquire try for op (op->lock, op->owner, op->lease_ms; the
   * lease already resolved to the watchdog timeout when < 0). Returns the
   * command, or NULL when out of memory. */
  rlock__cmd *(*send_try)(rlock__op *op, int64_t lease_ms,
                          rlock__reply_cb cb);
  /* Reads a try's reply: RLOCK__TRY_ACQUIRED, or RLOCK__TRY_WAIT with
   * *ttl_ms the longest it makes sense to sleep before trying again (-1:
   * unknown), or a negative RLOCK_E* code (detail set with
   * rlock__op_detail). */
  int (*read_try)(rlock__op *op, const redisReply *reply, int64_t *ttl_ms);
  /* What a message on the primitive's channel does to the waiters. */
  rlock__chan_message_fn on_message;
  /* The channel an acquire of op waits on, malloc'd (the fair lock's own
   * channel per waiter); NULL: the handle's channel. NULL return: out of
   * memory. */
  char *(*wait_channel)(const rlock__op *op, size_t *len);
  /* No channel at all (the spin lock): a waiter polls with a back-off of
   * 1 ms doubling (plus jitter) up to RLOCK__POLL_MAX_MS. */
  bool polls;
  /* An acquire that sent a try and ends without the lock (timeout,
   * cancel, interrupt, close, error) sends this, e.g. the fair lock's
   * queue-leave; NULL: nothing to undo. The engine owns the command. */
  rlock__cmd *(*abandon)(rlock__op *op, rlock__reply_cb cb, void *data);
  /* A try changes nothing on the server (the latch's await reads the
   * count): one whose reply was lost is simply sent again while the wait
   * has time. A kind without holds needs this or an abandon to ride out a
   * lost try; else the transport error ends the wait. */
  bool try_reads_only;
  /* The kind's own queries and force unlock (NULL entries: none). */
  const rlock__prim_ops *ops;
  /* The lock calls, when the kind runs them itself instead of through
   * the engine's acquire and release (a MultiLock, over other handles):
   * the public lock calls (lib/prim/lock.c) dispatch to them. Opaque here:
   * the engine never calls them. NULL: the engine's. */
  const struct rlock__prim_calls *calls;
  /* Lets go of what a handle of rlock__handle_new_size holds beyond the
   * rlock, when its last reference goes (NULL: nothing). Any thread. */
  void (*handle_free)(rlock *lock);
  /* rlock_free() of a handle of this kind: the kind lets go of the
   * user's reference itself, e.g. after stopping on the loop thread what
   * holds other references (NULL: it is released at once). Any thread. */
  void (*user_free)(rlock *lock);
  /* ---- the hold part ----
   * NULL: an acquisition is not a hold (semaphore permits, a latch's
   * await): nothing is recorded, renewed, released or trimmed, and an
   * acquire whose reply was lost reports the transport error without
   * repair (docs/wire-protocol.md says what that can leave). */
  const rlock__prim_hold *hold;
};

#define RLOCK__POLL_MAX_MS 128

/* The operations a public call on a handle runs, per kind. */
struct rlock__prim_ops {
  const rlock__op_type *force_unlock;
  const rlock__op_type *is_locked;
  const rlock__op_type *is_held;
  const rlock__op_type *hold_count;
  const rlock__op_type *remain_ttl;
};

/* ---- operations ---- */

struct rlock__op_type {
  const char *name;
  void (*start)(rlock__op *op);
  /* The type's own clean-up when the op finishes with `result` (NULL:
   * none): called once by rlock__op_finish after the op let go of its
   * command, channel and timer, before its completion runs. An acquire's
   * sends the kind's abandon; a release's forgets its latch. */
  void (*finish)(rlock__op *op, int result);
  bool acquires;      /* ended by rlock_req_cancel() / rlock_client_interrupt() */
  bool touches_hold;  /* an acquire or release: repair waits for it */
  bool control;       /* acts on other ops at once: never an active op */
  /* A release: the engine's result is 1 freed / 0 left holds (events and
   * hold bookkeeping need it), the caller sees 0 for both (CONTRIBUTING.md,
   * "Names and returns": a call that does something returns 0). */
  bool zero_on_success;
};

enum { RLOCK__ST_NEW, RLOCK__ST_CMD, RLOCK__ST_WAITING, RLOCK__ST_DONE };

#define RLOCK__OWNER_MAX (RLOCK_ID_LEN + 1 + 21 + 8)

/* The engine's state of an acquire (acquire.c). */
typedef struct rlock__acquire_state {
  uint64_t seen_epoch;  /* subscription epoch when the try was sent */
  int lost_err;         /* first transport error, or 0 */
  int64_t outage_until; /* how long a deadline-less op rides out errors */
  int64_t try_sent_ms;  /* when the last try was sent */
  int64_t trim_want;    /* count sent with the op's trim */
  bool answered;        /* the server answered one of this op's commands */
  bool tried;           /* a try was sent */
  int handoff_streak;   /* woken by a local handoff: the streak's length */
  char *wchan;          /* the channel it waits on (the handle's, or its
                           own, malloc'd) */
  size_t wchan_len;
  int polls;            /* back-offs so far (spin, or "try again now") */
  int64_t backoff_ms;   /* the last back-off */
  int tries;            /* tries sent (events: attempts) */
  bool sync_refused;    /* the server refused replica sync's WAIT: undo,
                           then fail; no retry (issue 33) */
  /* The local gate (gate.c): the gate this op's try in flight counts in;
   * parked by the gate (no try sent) with the subscription's epoch then;
   * woken by its channel since; let through once (a lost connection). */
  struct rlock__gate *gate;
  bool gate_parked;
  bool gate_waited; /* parked at least once (events: it had to wait) */
  bool woken;
  bool gate_bypass;
  uint64_t gate_epoch;
  /* A release's transfer is moving the lock to this op (release.c): the
   * op waits for that release's reply, which finishes it. xfer_maybe: the
   * reply came and the lock may be this owner's (moved, or unknown) - if
   * the op ends otherwise before it is told, its owner is trimmed. */
  struct rlock__xfer *transfer;
  bool xfer_maybe;
} rlock__acquire_state;

/* A transfer in flight (release.c): the acquire it moves the lock to
 * (NULL once that op ended: cancelled, timed out, closed), its owner, and
 * what the reply said. Shared by the release and the acquire, freed by
 * the release once both are told. */
typedef struct rlock__xfer {
  rlock__op *to;
  bool moved;
  int err;
  char owner[RLOCK__OWNER_MAX];
} rlock__xfer;

/* The engine's state of a release (release.c). */
typedef struct rlock__release_state {
  char *latch;         /* its unlock latch key, malloc'd */
  int64_t sent_ms;     /* when it was sent, and the lease it re-applies */
  int64_t lease_ms;    /* while the lock stays held (lease safety) */
  uint64_t hold_gen;   /* the hold it counts as releasing, or 0 */
  int handoff_streak;  /* > 0 when it handed the lock off locally */
  int64_t held_since;  /* the hold's since_ms when it started (events) */
  rlock__xfer *xfer;    /* its transfer in flight, malloc'd, or NULL */
} rlock__release_state;

/* One public call. A kind whose ops need state of their own embeds this as
 * the first member of its own struct (as libuv's requests embed uv_req_t)
 * and finds it with RLOCK__CONTAINER_OF; the engine never looks past it. */
struct rlock__op {
  rlock__task task; /* the request queue (core) */
  rlock__op *active_prev, *active_next;
  const rlock__op_type *type;
  rlock *lock;
  rlock__engine *engine;
  uint64_t owner_id;
  char owner[RLOCK__OWNER_MAX];
  bool canceled;     /* canceled before it started */
  int64_t wait_ms;   /* acquires: < 0 no deadline */
  int64_t lease_ms;  /* acquires: < 0 watchdog */
  int64_t deadline;  /* rlock__now_ms() based; valid when wait_ms > 0 */
  int64_t called_ms; /* when the call made it (its thread): events' wait */
  int64_t started_ms; /* when it started on the loop thread */
  /* outcome */
  int result;
  int64_t value;
  char detail[256];
  /* completion: runs on the loop thread, exactly once */
  void (*done)(rlock__op *op);
  void *data;
  /* loop-thread state */
  int state;
  rlock__cmd *cmd;      /* command in flight */
  rlock__timed timer;   /* deadline, or a retry delay */
  rlock__waiter waiter; /* on the primitive's channel */
  /* the engine's state by the op's type */
  union {
    rlock__acquire_state acq; /* type->acquires */
    rlock__release_state rel; /* rlock__op_release */
    rlock__op *target;        /* cancel: the op to cancel */
  } u;
};

/* Sets up an op of `type` on `lock` for `owner` (op->owner gets the
 * hold part's owner_suffix). */
void rlock__op_init(rlock__op *op, rlock *lock, const rlock__op_type *type,
                    uint64_t owner);
/* Sets the op's detail (rlock_last_error() of its caller). */
void rlock__op_detail(rlock__op *op, const char *fmt, ...) RLOCK__PRINTF(2, 3);
/* Finishes op with `result` exactly once: abandons its command, leaves its
 * channel, stops its timer, runs its completion. */
void rlock__op_finish(rlock__op *op, int result);
/* Whether op's completion wakes a blocking caller (rlock__op_run_sync)
 * rather than calling a callback. */
bool rlock__op_blocking(const rlock__op *op);
/* A transport error or an error reply finishes op (true); else false. */
bool rlock__op_failed(rlock__op *op, redisReply *reply, int err);
/* Sends a command for op (state CMD); finishes it with RLOCK_ENOMEM when
 * that fails. */
void rlock__op_send(rlock__op *op, const rlock__script *script, int argc,
                    const char **argv, const size_t *lens, int retries,
                    rlock__reply_cb cb);
/* The publish command of the client's pub/sub mode. */
const char *rlock__engine_publish(const rlock__engine *e);
/* A reply that never came (timeout, lost connection): the command may or
 * may not have run. */
static inline bool rlock__transient(int err) {
  return err == RLOCK_ETIMEDOUT || err == RLOCK_ECONN;
}

/* The facades: run op and wait for it (blocking; not on the loop thread),
 * or queue it with a callback. */
int rlock__op_run_sync(rlock__op *op);
typedef void (*rlock__async_cb)(int status, int64_t value, void *data);
/* An async request for an op of op_size bytes (sizeof(rlock__op), or the
 * kind's struct that starts with one), set up as rlock__op_init does; the
 * caller fills its arguments, then submits it. NULL: out of memory (last
 * error set). */
rlock__op *rlock__req_new(rlock *lock, const rlock__op_type *type,
                          uint64_t owner, size_t op_size, rlock__async_cb cb,
                          void *data);
/* Queues a request from rlock__req_new (freed when that fails): 0, or the
 * error with the last error set. out (may be NULL) gets the handle. */
int rlock__req_submit(rlock__op *op, rlock_req **out);
/* Both, for an op without state of its own; checks an acquire's lease. */
int rlock__op_submit_async(rlock *lock, const rlock__op_type *type,
                           uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                           rlock__async_cb cb, void *data, rlock_req **out);
/* A request whose work a kind runs itself (a MultiLock's acquire, driven
 * by its members' requests): an rlock_req like any other for the caller
 * (rlock_req_cancel, rlock_req_free), its reference count kept here, its
 * cancel and its state the kind's. */
typedef struct rlock__req_impl {
  /* rlock_req_cancel(): 0 or an error with the last error set; NULL: not
   * an acquire (RLOCK_EINVAL). Any thread. */
  int (*cancel)(void *state);
  /* The last reference went: let go of what the state holds (the memory
   * is freed here after it). Any thread. */
  void (*destroy)(void *state);
} rlock__req_impl;
/* `size` bytes of the kind's state (zeroed, aligned as malloc's) in a new
 * request with one reference, the kind's. NULL: out of memory (last error
 * set). */
void *rlock__req_custom_new(const rlock__req_impl *impl, size_t size);
/* The request of that state, as the caller receives it. */
rlock_req *rlock__req_custom_of(void *state);
/* One reference more (the caller's, when it takes the request), one less
 * (the last calls destroy and frees). Any thread. */
void rlock__req_custom_ref(void *state);
void rlock__req_custom_unref(void *state);
/* Argument checks shared by the facades (set the last error). */
int rlock__bad_arg(const char *what);
int rlock__check_lease(int64_t lease_ms);
void rlock__op_set_wait(rlock__op *op, int64_t wait_ms, int64_t lease_ms);

/* The generic kinds. The release is for handles with a hold part only. */
extern const rlock__op_type rlock__op_acquire;
extern const rlock__op_type rlock__op_release;
/* The release's finish (release.c), for a type that wraps its start. */
void rlock__release_finish(rlock__op *op, int result);

/* Local transfer (acquire.c, driven by release.c): the sleeping acquire
 * `to` is taken off its channel and waits for release `rel`'s reply
 * instead of sending a try; returns the lease it takes the lock with. */
int64_t rlock__acquire_claim(rlock__op *to, rlock__xfer *x, int streak);
/* That reply came (or never will): `moved` - the lock is to's now (its
 * hold is recorded and it finishes with 1); else to goes back to waiting
 * (err: the transfer's outcome is unknown - its owner is trimmed, then it
 * tries again). Called after the release finished, as when the release
 * and the waiter's try were two commands. */
void rlock__acquire_claim_done(rlock__op *to, bool moved, int err);

/* The acquire's finish (acquire.c), for kinds whose acquire type has a
 * finish of its own to call first: an acquire that sent a try and ends
 * without success sends the kind's abandon (close waits for the reply of
 * every abandon in flight). */
void rlock__acquire_finish(rlock__op *op, int result);

/* ---- what this client holds (hold.c) ---- */

typedef struct rlock__hold {
  char *key; /* name '\0' owner (then '\0' handle for send_renew), the map
                key */
  size_t key_len;
  const char *name; /* points into key */
  const char *owner;
  const rlock__prim *prim;
  /* The handle that took it, a reference (kinds with send_renew); NULL. */
  rlock *lock;
  int64_t count;          /* local hold count */
  int64_t watchdog_count; /* holds taken without a lease */
  int64_t lease_ms;       /* last explicit lease */
  uint64_t gen;
  bool lost;
  /* Unlocks of this hold in flight, and how many were ever started: while
   * one runs (or since a renewal was sent) a renewal's "0" may just mean
   * the unlock already ran on the server, so it is not a loss. */
  int releasing;
  uint64_t release_seq;
  /* Local handoffs in a row that led to this hold (release.c). */
  int handoff_streak;
  /* Events and stats: when the outermost hold was taken; LEASE_AT_RISK
   * was said and the guarantee has not recovered since. */
  int64_t since_ms;
  bool at_risk;
  /* Lease safety (docs/api.md, "Lease safety"). The key cannot expire
   * before until_ms (rlock__now_ms() clock): the send time of the last
   * command the server confirmed that set the expiry, plus its lease,
   * minus rlock__lease_margin_ms(). Commands that may set a shorter
   * expiry lower it as soon as they are sent (they may run before their
   * reply comes). */
  int64_t until_ms;
  /* The lowest bound of commands sent since this hold joined the renewal
   * in flight: that renewal's confirmation may not raise until_ms above
   * it (they run after it). INT64_MAX: none. */
  int64_t renew_cap;
  /* The shortest lease of a command on this hold whose reply never came:
   * it may still run after any later confirmed command, so every later
   * bound uses at most this lease. INT64_MAX: none. */
  int64_t lost_lease;
} rlock__hold;

/* The hold owner has on lock's name (with send_renew: through that
 * handle), or NULL. */
rlock__hold *rlock__hold_find(rlock__engine *e, const rlock *lock,
                              const char *owner);
/* Adds one hold; streak: the local handoffs in a row that led to it;
 * sent_ms: when the try that took it was sent (lease safety). */
int rlock__hold_add(rlock__engine *e, const rlock *lock, const char *owner,
                    int64_t lease_ms, int64_t sent_ms, int streak);
/* The hold is lost (expired or deleted on the server): marks it, and says
 * so once (RLOCK_EVENT_LOST; by: RLOCK_EVENT_BY_WATCHDOG / _BY_UNLOCK). */
void rlock__hold_lost(rlock__engine *e, rlock__hold *h, int by);
void rlock__hold_drop(rlock__engine *e, rlock__hold *h);
/* The count the client knows it has (0 when lost or unknown). */
int64_t rlock__hold_count_known(rlock__engine *e, const rlock *lock,
                                const char *owner);
/* After a trim that found `server_before` holds and asked for `want`. */
void rlock__hold_trimmed(rlock__engine *e, const rlock *lock, const char *owner,
                         int64_t server_before, int64_t want);
/* ---- lease safety (hold.c; docs/api.md, "Lease safety") ----
 * Times are rlock__now_ms() (CLOCK_MONOTONIC ms, rlock_now_ms()). */

/* The margin taken off a lease for clock drift between this host and the
 * server, and for both sides' millisecond rounding: lease/100 + 2 ms, as
 * Redlock's drift factor. */
static inline int64_t rlock__lease_margin_ms(int64_t lease_ms) {
  return lease_ms / 100 + 2;
}
/* Until when the hold is guaranteed (see rlock__hold.until_ms), whether or
 * not that time has passed. Meaningless when h->lost (the server said the
 * hold is gone). Loop thread. */
int64_t rlock__hold_guaranteed_until(const rlock__hold *h);
/* A command that sets the expiry of the hold `owner` has on lock (when it
 * holds it) to `lease_ms` when it runs was sent at sent_ms (a re-entrant
 * try, a release that may leave the lock held): the guarantee drops to
 * what it can promise. */
void rlock__hold_lease_sent(rlock__engine *e, const rlock *lock,
                            const char *owner, int64_t sent_ms,
                            int64_t lease_ms);
/* The reply of such a command never came: it may still run later. */
void rlock__hold_lease_lost(rlock__engine *e, const rlock *lock,
                            const char *owner, int64_t lease_ms);
/* A release the server answered "still held" re-applied its lease (not
 * for shared_expiry kinds: a read release re-applies none, and the hash
 * then lives as long as the longest read hold left, each no shorter than
 * the guarantee already). */
void rlock__hold_lease_confirmed(rlock__engine *e, const rlock *lock,
                                 const char *owner, int64_t sent_ms,
                                 int64_t lease_ms);

/* At each period (engine.c's tick): a hold whose guarantee left is below
 * the lease_risk_ms threshold is said LEASE_AT_RISK, once until it
 * recovers. */
void rlock__holds_check_risk(rlock__engine *e);
/* One renewal round (engine.c's tick, every watchdog_timeout/3), unless the
 * last one is still retrying. */
void rlock__holds_renew(rlock__engine *e);
/* The holds taken through handle `lock` (kinds with send_renew) end
 * without a release, no event: no longer renewed, they expire with their
 * lease (the kind calls it when the user frees the handle). Loop thread. */
void rlock__holds_end_of(rlock__engine *e, const rlock *lock);
void rlock__holds_free(rlock__engine *e);

/* ---- the local gate (gate.c) ----
 * Per lock name and kind whose hold part has local_gate: which hold of this
 * client has it and how many of this client's tries for it are on their
 * way. An acquire finds it closed while another owner's hold is guaranteed
 * or a try is out, and sleeps on the channel without sending a try; it
 * opens (one sleeper woken) when the hold ends or is lost, and when a try
 * that kept a wake-up waiting ends without the lock. */
typedef struct rlock__gate rlock__gate;

/* Called first by every try of op: true when op was parked (or finished at
 * its deadline) instead; false: send the try (op->u.acq.gate counts it). */
bool rlock__gate_park(rlock__op *op);
/* op's try has its answer (or was abandoned): it no longer counts. Call
 * rlock__gate_settle(e, g) after the answer was acted on. */
rlock__gate *rlock__gate_try_done(rlock__op *op, bool abandoned);
void rlock__gate_settle(rlock__engine *e, rlock__gate *g);
/* Hold h of lock was taken / ended or was lost (hold.c). */
void rlock__gate_hold_added(rlock__engine *e, const rlock *lock,
                            rlock__hold *h);
void rlock__gate_hold_gone(rlock__engine *e, rlock__hold *h);
/* A release of lock after handoff_max local handoffs in a row, with
 * waiters here: no try of this client until its message wakes one. */
void rlock__gate_yield(rlock__engine *e, const rlock *lock);
/* A release of lock told another client's waiters (RLOCK__REL_YIELD): no
 * try of this client for a moment (FOREIGN_HOLD_MS), whatever wakes its
 * waiters, so that one of those can take the lock. */
void rlock__gate_hold_back(rlock__engine *e, const rlock *lock);
/* The command connection is back: parked waiters try at once. */
void rlock__gates_reconnected(rlock__engine *e);
void rlock__gates_free(rlock__engine *e);

/* ---- repair after lost replies (repair.c) ---- */

rlock__cmd *rlock__trim_send(rlock__engine *e, const rlock *lock,
                             const char *owner, int64_t want,
                             rlock__reply_cb cb, void *data);
/* (lock, owner) may count holds the client does not know of: trim it as
 * soon as the server answers and no op of that owner on it runs. */
void rlock__suspect_add(rlock__engine *e, const rlock *lock,
                        const char *owner);
void rlock__suspects_run(rlock__engine *e);
/* At close: sends every pending trim now. Returns how many were sent. */
int rlock__suspects_flush(rlock__engine *e);
void rlock__suspects_free(rlock__engine *e);

/* ---- unlock latches (release.c) ---- */

/* An unlock's request latch: prefix + tag + ":" + 32 hex digits. */
#define RLOCK__UNLOCK_LATCH_PREFIX "redisson_unlock_latch:"

/* At close: sends the pending latch UNLINK (one per slot in a cluster).
 * Returns how many were sent: close waits for a reply to each. */
int rlock__latches_flush_at_close(rlock__engine *e);
void rlock__latches_free(rlock__engine *e);

/* ---- events (up to the client: lib/client/observe.c) ---- */

/* Engine-only event types, beside the public rlock_event_type: they feed
 * stats and are not shown to the user's handler. */
enum {
  RLOCK__EV_RENEWED = 100, /* a renewal batch answered: n_ok, n_failed,
                              rtt_us, headroom_ms (-1: none) */
  RLOCK__EV_RENEW_SENT,    /* a renewal batch sent: n holds */
  RLOCK__EV_FAILED         /* a call of any kind failed: pub.error */
};

typedef struct rlock__event {
  rlock_event pub; /* pub.type: an rlock_event_type or RLOCK__EV_* */
  /* n: also ACQUIRED's 1 when it waited at the local gate (gate.c) without
   * a failed try: contended all the same. */
  int64_t n, n_ok, n_failed;
  int64_t rtt_us;
  int64_t headroom_ms;
} rlock__event;

/* ---- the engine ---- */

struct rlock__engine {
  rlock__core *core;
  rlock__parker parker; /* how blocking callers wait (park.c) */
  rlock__net *net;
  const char *client_id; /* owners are "<client_id>:<owner id>" */
  rlock__op *active_head;
  rlock__map holds;    /* name '\0' owner -> rlock__hold */
  rlock__map suspects; /* name '\0' owner: holds to re-check */
  rlock__map gates;    /* name '\0' kind -> rlock__gate (gate.c) */
  bool gates_open;     /* parked waiters are being let through */
  uint64_t next_hold_gen;
  rlock__timed tick; /* every watchdog_timeout/3: renewal, repairs */
  int renew_inflight;
  /* A period's round was skipped because the last one was still in
   * flight: it runs as soon as that one is done. */
  bool renew_missed;
  /* A batch of this period was refused whole for spanning slots and its
   * holds renewed again at once (at most once a period). */
  bool renew_crossslot_redone;
  /* unlock latches to delete, sent as one UNLINK (one per slot in a
   * cluster) */
  char *latch_del[64];
  int latch_del_n;
  rlock__timed latch_timer;
  uint64_t latch_seed[2]; /* unlock request ids: seeded once, then counted */
  uint64_t latch_count;
  /* close: trims (and the latch UNLINK) sent at close, unanswered */
  int draining;
  int abandons_inflight; /* abandons sent, unanswered: close waits */
  /* hook: every command sent at close has answered */
  void (*on_drained)(rlock__engine *e);
  /* hook: what happened to locks (events and stats,
   * lib/client/observe.c); NULL: nobody listens. Called through
   * rlock__engine_emit only. */
  void (*on_event)(rlock__engine *e, const rlock__event *ev);
};

/* Says ev to the on_event hook. Each event has one call site: acquire done
 * (rlock__acquire_finish), release done (rlock__release_finish), lost
 * (rlock__hold_lost), renewal results (hold.c, renew_reply), call failures
 * (rlock__op_finish). */
static inline void rlock__engine_emit(rlock__engine *e,
                                      const rlock__event *ev) {
  if (e->on_event != NULL)
    e->on_event(e, ev);
}

/* One of the replies close waits for has come (any of the trims, latch
 * deletes and abandons counted in draining): the last one calls
 * on_drained. */
static inline void rlock__engine_drained_one(rlock__engine *e) {
  assert(e->draining > 0);
  if (--e->draining == 0 && e->on_drained != NULL)
    e->on_drained(e);
}

/* 0 or RLOCK_ESYS (no random seed). */
int rlock__engine_init(rlock__engine *e, rlock__core *core, rlock__net *net,
                       const char *client_id);
/* The loop runs: the engine's period starts (renewal of what is held,
 * retries of pending repairs). */
void rlock__engine_start(rlock__engine *e);
/* The command connection is (back) up: pending repairs go out. */
void rlock__engine_on_cmd_ready(rlock__engine *e);
/* Close, first half: every running op ends with RLOCK_ECLOSED (acquires in
 * flight become suspects), renewal stops, pending trims and latch deletes
 * are sent. Returns how many replies close should wait for (on_drained is
 * called when the last arrives). */
int rlock__engine_close(rlock__engine *e);
/* Close, second half: frees what is left. */
void rlock__engine_free(rlock__engine *e);
/* rlock_client_interrupt(): ends the acquires `owner` runs (or has queued). The
 * count, or a negative error with the last error set. Any thread. */
int rlock__engine_interrupt(rlock__engine *e, uint64_t owner);

#endif
