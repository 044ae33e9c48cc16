/* Redisson's reentrant lock (RLock): the descriptor the engine drives, its
 * own operations (force unlock and the queries), and the public lock API.
 * Wire format: docs/wire-protocol.md, "The reentrant lock"; scripts:
 * lock_*.lua beside this file. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

/* ---- scripts ---- */

static const rlock__script acquire_script = {
    "lock_acquire", RLOCK__LUA_LOCK_ACQUIRE_BODY, RLOCK__LUA_LOCK_ACQUIRE_SHA,
    false};
static const rlock__script release_script = {
    "lock_release", RLOCK__LUA_LOCK_RELEASE_BODY, RLOCK__LUA_LOCK_RELEASE_SHA,
    false};
static const rlock__script transfer_script = {
    "lock_transfer", RLOCK__LUA_LOCK_TRANSFER_BODY,
    RLOCK__LUA_LOCK_TRANSFER_SHA, false};
static const rlock__script force_script = {
    "lock_force_unlock", RLOCK__LUA_LOCK_FORCE_UNLOCK_BODY,
    RLOCK__LUA_LOCK_FORCE_UNLOCK_SHA, false};
const rlock__script rlock__lock_renew_script = {
    "lock_renew", RLOCK__LUA_LOCK_RENEW_BODY, RLOCK__LUA_LOCK_RENEW_SHA, false};
/* Always sent as EVAL: the trim's place in the order matters, and an
 * EVALSHA answered NOSCRIPT would be re-sent behind later commands. */
const rlock__script rlock__lock_trim_script = {
    "lock_trim", RLOCK__LUA_LOCK_TRIM_BODY, RLOCK__LUA_LOCK_TRIM_SHA, true};

static const rlock__script *const all_scripts[] = {
    &acquire_script, &release_script, &force_script, &rlock__lock_renew_script,
    &rlock__lock_trim_script, &transfer_script, NULL};

const rlock__script *const *rlock__lock_scripts(void) { return all_scripts; }

/* ---- the descriptor ---- */

rlock__cmd *rlock__lock_send_try_script(rlock__op *op,
                                        const rlock__script *script,
                                        int64_t lease_ms, rlock__reply_cb cb) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "1");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  return rlock__cmd_send(op->engine->net, script, a.argc, a.argv, a.lens, 0,
                         cb, op);
}

static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  return rlock__lock_send_try_script(op, &acquire_script, lease_ms, cb);
}

int rlock__lock_read_try(rlock__op *op, const redisReply *reply,
                         int64_t *ttl_ms) {
  if (reply->type == REDIS_REPLY_NIL)
    return RLOCK__TRY_ACQUIRED;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "%s acquire script replied type %d",
                     op->lock->prim->kind, reply->type);
    return RLOCK_EPROTO;
  }
  /* -1 (a hold without TTL) is the engine's "unknown"; below that is not
   * a TTL Redis gives. */
  *ttl_ms = reply->integer < -1 ? -1 : reply->integer;
  return RLOCK__TRY_WAIT;
}

rlock__cmd *rlock__lock_send_release_script(
    rlock__op *op, const rlock__script *script, const char *message,
    const char *latch, int64_t lease_ms, int64_t latch_ttl_ms,
    rlock__reply_cb cb) {
  rlock *lock = op->lock;
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_str(&a, latch);
  rlock__argv_str(&a, message);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__argv_int(&a, latch_ttl_ms);
  /* Re-sent after a timeout or a lost connection: the latch makes that
   * safe. */
  return rlock__cmd_send(op->engine->net, script, a.argc, a.argv, a.lens,
                         op->engine->core->opts.retry_attempts, cb, op);
}

rlock__cmd *rlock__lock_send_release(rlock__op *op, const char *latch,
                                int64_t lease_ms, int64_t latch_ttl_ms,
                                rlock__reply_cb cb) {
  return rlock__lock_send_release_script(op, &release_script, "0", latch,
                                         lease_ms, latch_ttl_ms, cb);
}

/* The local transfer (lock_transfer.lua): the release's arguments and the
 * new owner with its lease. Re-sent as the release is: the latch, or for a
 * move the new owner's field, makes that safe (docs/wire-protocol.md,
 * "Transfer"). Its "2" (another client waits: released and published) is
 * read as RLOCK__REL_YIELD. */
static rlock__cmd *send_transfer(rlock__op *op, const char *latch,
                                 int64_t lease_ms, int64_t latch_ttl_ms,
                                 const char *to_owner, int64_t to_lease_ms,
                                 rlock__reply_cb cb) {
  rlock *lock = op->lock;
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_str(&a, latch);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_int(&a, latch_ttl_ms);
  rlock__argv_str(&a, to_owner);
  rlock__argv_int(&a, to_lease_ms);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__argv_str(&a, "0");
  return rlock__cmd_send(op->engine->net, &transfer_script, a.argc, a.argv,
                         a.lens, op->engine->core->opts.retry_attempts, cb,
                         op);
}

int rlock__lock_read_release(rlock__op *op, const redisReply *reply) {
  if (reply->type == REDIS_REPLY_NIL)
    return RLOCK__REL_NOT_HELD;
  if (reply->type != REDIS_REPLY_INTEGER ||
      (reply->integer != 0 && reply->integer != 1)) {
    rlock__op_detail(op, "release script replied an unexpected value");
    return RLOCK_EPROTO;
  }
  return reply->integer == 1 ? RLOCK__REL_RELEASED : RLOCK__REL_HELD;
}

/* RLock's, for the release and the transfer: the transfer's "2" (released
 * and published: another client waits) is RLOCK__REL_YIELD. */
static int read_release(rlock__op *op, const redisReply *reply) {
  if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 2)
    return RLOCK__REL_YIELD;
  return rlock__lock_read_release(op, reply);
}

/* "0": one holder released - wake one waiter. "1": wake all (a read/write
 * lock's write unlock; honoured here too). Other payloads are not lock
 * messages (docs/wire-protocol.md, Messages). */
void rlock__lock_on_message(rlock__chan *ch, const char *payload,
                            size_t len) {
  if (len != 1 || (payload[0] != '0' && payload[0] != '1'))
    return;
  if (payload[0] == '0')
    rlock__chan_wake_one(ch);
  else
    rlock__chan_wake_all(ch);
}

const rlock__prim_hold rlock__lock_hold = {
    .send_release = rlock__lock_send_release,
    .read_release = rlock__lock_read_release,
    .trim = &rlock__lock_trim_script,
    .renew = &rlock__lock_renew_script,
    .local_handoff = true,
    .local_gate = true};

/* RLock's own: the lock's hold part with the local transfer (the fenced
 * and non-reentrant locks share rlock__lock_hold, without it: a fenced
 * acquisition takes a token, which a transfer would not). */
static const rlock__prim_hold lock_hold = {
    .send_release = rlock__lock_send_release,
    .read_release = read_release,
    .trim = &rlock__lock_trim_script,
    .renew = &rlock__lock_renew_script,
    .local_handoff = true,
    .local_gate = true,
    .transfer = send_transfer};

const rlock__prim rlock__prim_lock = {
    .kind = "lock",
    .channel_prefix = RLOCK__LOCK_CHANNEL_PREFIX,
    .send_try = send_try,
    .read_try = rlock__lock_read_try,
    .on_message = rlock__lock_on_message,
    .ops = &rlock__lock_ops,
    .hold = &lock_hold};

/* ---- force unlock and queries ---- */

static void start_force(rlock__op *op) {
  rlock *lock = op->lock;
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_str(&a, "0");
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__op_send(op, &force_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, rlock__query_reply);
}

/* A one-command query on the lock key, optionally with the owner. */
void rlock__query(rlock__op *op, const char *cmd, bool with_owner) {
  const char *argv[3] = {cmd, op->lock->name, op->owner};
  size_t lens[3] = {strlen(cmd), op->lock->name_len, strlen(op->owner)};
  rlock__op_send(op, NULL, with_owner ? 3 : 2, argv, lens,
                 op->engine->core->opts.retry_attempts, rlock__query_reply);
}

static void start_is_locked(rlock__op *op) {
  rlock__query(op, "EXISTS", false);
}
static void start_is_held(rlock__op *op) { rlock__query(op, "HEXISTS", true); }
static void start_hold_count(rlock__op *op) {
  rlock__query(op, "HGET", true);
}
static void start_ttl(rlock__op *op) { rlock__query(op, "PTTL", false); }

const rlock__op_type rlock__q_force_unlock = {.name = "force_unlock",
                                       .start = start_force};
const rlock__op_type rlock__q_is_locked = {.name = "is_locked",
                                           .start = start_is_locked};
const rlock__op_type rlock__q_is_held = {.name = "is_held",
                                         .start = start_is_held};
const rlock__op_type rlock__q_hold_count = {.name = "hold_count",
                                            .start = start_hold_count};
const rlock__op_type rlock__q_remain_ttl = {.name = "remain_ttl",
                                            .start = start_ttl};

const rlock__prim_ops rlock__lock_ops = {
    .force_unlock = &rlock__q_force_unlock,
    .is_locked = &rlock__q_is_locked,
    .is_held = &rlock__q_is_held,
    .hold_count = &rlock__q_hold_count,
    .remain_ttl = &rlock__q_remain_ttl};

void rlock__query_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  const rlock__prim_ops *ops = op->lock->prim->ops;
  if (op->type == ops->hold_count) {
    if (reply->type == REDIS_REPLY_NIL) {
      op->value = 0;
      rlock__op_finish(op, 0);
      return;
    }
    if (reply->type == REDIS_REPLY_STRING) {
      char *end = NULL;
      op->value = strtoll(reply->str, &end, 10);
      rlock__op_finish(op, end != reply->str ? 0 : RLOCK_EPROTO);
      return;
    }
  }
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "unexpected reply type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  if (op->type == ops->remain_ttl) {
    op->value = reply->integer;
    rlock__op_finish(op, 0);
  } else {
    rlock__op_finish(op, reply->integer != 0 ? 1 : 0); /* value stays 0 */
  }
}

/* ---- the blocking API ---- */

/* The lock calls take handles of a kind with a hold part only. A
 * semaphore, permit semaphore or latch handle (cast to rlock *) is refused
 * here, before an op exists: their scripts expect the state their own ops
 * embed, which a lock op does not carry. 0 or RLOCK_EINVAL. */
static int lock_handle(rlock *lock) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  if (lock->prim->calls != NULL) {
    rlock__set_last_error("%s", lock->prim->calls->unsupported);
    return RLOCK_EINVAL;
  }
  if (lock->prim->hold == NULL) {
    rlock__set_last_error("a %s is not a lock: use the rlock_%s_* calls",
                          lock->prim->kind, lock->prim->kind);
    return RLOCK_EINVAL;
  }
  return 0;
}

int rlock__acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                   int64_t lease_ms, int64_t *value) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  rlock__op op;
  rlock__op_init(&op, lock, &rlock__op_acquire, owner);
  rlock__op_set_wait(&op, wait_ms, lease_ms);
  rc = rlock__op_run_sync(&op);
  if (value != NULL && rc == 1)
    *value = op.value;
  return rc;
}

/* The kind's own lock calls (a MultiLock's), or NULL: the engine's. */
static const rlock__prim_calls *own_calls(const rlock *lock) {
  return lock != NULL ? lock->prim->calls : NULL;
}

/* Whether the engine's call may serve lock, its kind's own call being
 * NULL (or the kind having none): 0, or an error with the last error set.
 * A kind with own calls leaves NULL only what the engine does for it. */
static int engine_serves(rlock *lock, const rlock__prim_calls *own) {
  return own != NULL ? 0 : lock_handle(lock);
}

static int acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                   int64_t lease_ms) {
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL && own->acquire != NULL)
    return own->acquire(lock, owner, wait_ms, lease_ms);
  int rc = engine_serves(lock, own);
  return rc != 0 ? rc : rlock__acquire(lock, owner, wait_ms, lease_ms, NULL);
}

/* The kind's operation for a public call, or NULL with the last error set
 * when the kind has none. */
static const rlock__op_type *kind_op(rlock *lock, size_t offset) {
  const rlock__prim_ops *ops = lock->prim->ops;
  const rlock__op_type *t =
      ops == NULL
          ? NULL
          : *(const rlock__op_type *const *)((const char *)ops + offset);
  if (t == NULL && lock->prim->calls != NULL)
    rlock__set_last_error("%s", lock->prim->calls->unsupported);
  else if (t == NULL)
    rlock__set_last_error("not supported by a %s", lock->prim->kind);
  return t;
}
#define KIND_OP(lock, field) kind_op(lock, offsetof(rlock__prim_ops, field))

static int simple(rlock *lock, const rlock__op_type *type, uint64_t owner,
                  int64_t *value) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  if (type == NULL)
    return RLOCK_EINVAL;
  rlock__op op;
  rlock__op_init(&op, lock, type, owner);
  int rc = rlock__op_run_sync(&op);
  if (value != NULL && rc >= 0)
    *value = op.value;
  return rc;
}

int rlock_lock_owner(rlock *lock, uint64_t owner, int64_t lease_ms) {
  int rc = acquire(lock, owner, -1, lease_ms);
  return rc == 1 ? 0 : (rc == 0 ? RLOCK_EPROTO : rc);
}

int rlock_try_lock_owner(rlock *lock, uint64_t owner, int64_t wait_ms,
                         int64_t lease_ms) {
  return acquire(lock, owner, wait_ms, lease_ms);
}

int rlock_unlock_owner(rlock *lock, uint64_t owner) {
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL && own->release != NULL)
    return own->release(lock, owner);
  int rc = engine_serves(lock, own);
  return rc != 0 ? rc : simple(lock, &rlock__op_release, owner, NULL);
}

int rlock_is_held_owner(rlock *lock, uint64_t owner) {
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL && own->is_held != NULL)
    return own->is_held(lock, owner);
  return lock == NULL ? rlock__bad_arg("lock is NULL")
                      : simple(lock, KIND_OP(lock, is_held), owner, NULL);
}

int64_t rlock_hold_count_owner(rlock *lock, uint64_t owner) {
  int64_t count = 0;
  int rc = lock == NULL ? rlock__bad_arg("lock is NULL") : simple(lock, KIND_OP(lock, hold_count), owner, &count);
  return rc < 0 ? rc : count;
}

int rlock_lock(rlock *lock, int64_t lease_ms) {
  return rlock_lock_owner(lock, rlock__thread_id(), lease_ms);
}

int rlock_try_lock(rlock *lock, int64_t wait_ms, int64_t lease_ms) {
  return acquire(lock, rlock__thread_id(), wait_ms, lease_ms);
}

int rlock_unlock(rlock *lock) {
  return rlock_unlock_owner(lock, rlock__thread_id());
}

int rlock_force_unlock(rlock *lock) {
  return lock == NULL ? rlock__bad_arg("lock is NULL") : simple(lock, KIND_OP(lock, force_unlock), 0, NULL);
}

int rlock_is_locked(rlock *lock) {
  return lock == NULL ? rlock__bad_arg("lock is NULL") : simple(lock, KIND_OP(lock, is_locked), 0, NULL);
}

int rlock_is_held(rlock *lock) {
  return rlock_is_held_owner(lock, rlock__thread_id());
}

int64_t rlock_hold_count(rlock *lock) {
  return rlock_hold_count_owner(lock, rlock__thread_id());
}

int rlock_remain_ttl(rlock *lock, int64_t *ttl_ms) {
  if (ttl_ms == NULL)
    return rlock__bad_arg("ttl_ms is NULL");
  return lock == NULL ? rlock__bad_arg("lock is NULL") : simple(lock, KIND_OP(lock, remain_ttl), 0, ttl_ms);
}

/* ---- lease safety ---- */

/* Reads what the engine knows of op's hold (nothing is sent): the result,
 * with the guarantee in op->value. Loop thread. */
static int lease_read(rlock__op *op) {
  rlock__hold *h = rlock__hold_find(op->engine, op->lock, op->owner);
  if (h == NULL) {
    rlock__op_detail(op, "lock '%s' is not held by %s (this client knows "
                         "of no hold)", op->lock->name, op->owner);
    return RLOCK_ENOTOWNER;
  }
  if (h->lost) {
    rlock__op_detail(op, "lock '%s' was lost: a renewal found it no longer "
                         "held by %s (it expired or was deleted)",
                     op->lock->name, op->owner);
    return RLOCK_ELOCKLOST;
  }
  op->value = rlock__hold_guaranteed_until(h);
  int64_t now = rlock__now_ms();
  if (op->value > now)
    return 1;
  rlock__op_detail(op, "the hold of '%s' by %s was guaranteed until %" PRId64
                       " ms (now %" PRId64 ") and no renewal was confirmed "
                       "since: it may have expired",
                   op->lock->name, op->owner, op->value, now);
  return 0;
}

/* Control: it acts at once and never waits (never an active op). */
static void start_lease(rlock__op *op) {
  op->result = lease_read(op);
  op->state = RLOCK__ST_DONE;
  op->done(op);
}

static const rlock__op_type lease_type = {
    .name = "lease_guaranteed", .start = start_lease, .control = true};

static void lease_done_here(rlock__op *op) { (void)op; }

int rlock_is_lease_guaranteed_owner(rlock *lock, uint64_t owner,
                                 int64_t *until_ms) {
  if (until_ms == NULL)
    return rlock__bad_arg("until_ms is NULL");
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL && own->lease_guaranteed != NULL)
    return own->lease_guaranteed(lock, owner, until_ms);
  int rc = engine_serves(lock, own);
  if (rc != 0)
    return rc;
  rlock__op op;
  rlock__op_init(&op, lock, &lease_type, owner);
  if (rlock__core_on_loop_thread(lock->engine->core)) {
    /* From a callback: the holds are the loop thread's, read them here. */
    op.done = lease_done_here;
    start_lease(&op);
    rc = op.result;
    if (op.detail[0] != '\0')
      rlock__set_last_error("%s", op.detail);
    else
      rlock__clear_last_error();
  } else {
    rc = rlock__op_run_sync(&op);
  }
  if (rc >= 0)
    *until_ms = op.value;
  return rc;
}

int rlock_is_lease_guaranteed(rlock *lock, int64_t *until_ms) {
  return rlock_is_lease_guaranteed_owner(lock, rlock__thread_id(), until_ms);
}

/* ---- the asynchronous API ---- */

int rlock_lock_async(rlock *lock, uint64_t owner, int64_t wait_ms,
                     int64_t lease_ms, rlock_cb cb, void *data,
                     rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL && own->acquire_async != NULL)
    return own->acquire_async(lock, owner, wait_ms, lease_ms, cb, data, req);
  int rc = engine_serves(lock, own);
  if (rc != 0)
    return rc;
  return rlock__op_submit_async(lock, &rlock__op_acquire, owner, wait_ms,
                                lease_ms, cb, data, req);
}

int rlock_unlock_async(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                       rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL && own->release_async != NULL)
    return own->release_async(lock, owner, cb, data, req);
  int rc = engine_serves(lock, own);
  if (rc != 0)
    return rc;
  return rlock__op_submit_async(lock, &rlock__op_release, owner, 0, 0, cb,
                                data, req);
}

/* A query or force unlock of the handle's kind, queued with a callback. */
static int async_kind(rlock *lock, size_t offset, uint64_t owner,
                      rlock_cb cb, void *data, rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  const rlock__op_type *t = kind_op(lock, offset);
  if (t == NULL)
    return RLOCK_EINVAL;
  return rlock__op_submit_async(lock, t, owner, 0, 0, cb, data, req);
}

int rlock_force_unlock_async(rlock *lock, rlock_cb cb, void *data,
                             rlock_req **req) {
  return async_kind(lock, offsetof(rlock__prim_ops, force_unlock), 0, cb,
                    data, req);
}

int rlock_is_locked_async(rlock *lock, rlock_cb cb, void *data,
                          rlock_req **req) {
  return async_kind(lock, offsetof(rlock__prim_ops, is_locked), 0, cb, data,
                    req);
}

int rlock_is_held_async(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                        rlock_req **req) {
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL && own->is_held_async != NULL) {
    if (req != NULL)
      *req = NULL;
    return own->is_held_async(lock, owner, cb, data, req);
  }
  return async_kind(lock, offsetof(rlock__prim_ops, is_held), owner, cb, data,
                    req);
}

int rlock_hold_count_async(rlock *lock, uint64_t owner, rlock_cb cb,
                           void *data, rlock_req **req) {
  return async_kind(lock, offsetof(rlock__prim_ops, hold_count), owner, cb,
                    data, req);
}

int rlock_remain_ttl_async(rlock *lock, rlock_cb cb, void *data,
                           rlock_req **req) {
  return async_kind(lock, offsetof(rlock__prim_ops, remain_ttl), 0, cb, data,
                    req);
}

/* ---- groups ---- */

size_t rlock_member_count(const rlock *lock) {
  size_t quorum = 0;
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL)
    return own->members(lock, &quorum);
  return lock != NULL && lock->prim->hold != NULL ? 1 : 0;
}

size_t rlock_quorum(const rlock *lock) {
  size_t quorum = 0;
  const rlock__prim_calls *own = own_calls(lock);
  if (own != NULL) {
    (void)own->members(lock, &quorum);
    return quorum;
  }
  return lock != NULL && lock->prim->hold != NULL ? 1 : 0;
}
