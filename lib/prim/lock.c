/* Redisson's reentrant lock (RLock): the descriptor the engine drives, its
 * own operations (force unlock and the queries), and the public lock API.
 * Wire format: docs/wire-protocol.md, "The reentrant lock"; scripts:
 * lock_*.lua beside this file. */
#include <inttypes.h>
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
static const rlock__script force_script = {
    "lock_force_unlock", RLOCK__LUA_LOCK_FORCE_UNLOCK_BODY,
    RLOCK__LUA_LOCK_FORCE_UNLOCK_SHA, false};
static const rlock__script renew_script = {
    "lock_renew", RLOCK__LUA_LOCK_RENEW_BODY, RLOCK__LUA_LOCK_RENEW_SHA, false};
/* Always sent as EVAL: the trim's place in the order matters, and an
 * EVALSHA answered NOSCRIPT would be re-sent behind later commands. */
static const rlock__script trim_script = {
    "lock_trim", RLOCK__LUA_LOCK_TRIM_BODY, RLOCK__LUA_LOCK_TRIM_SHA, true};

static const rlock__script *const all_scripts[] = {
    &acquire_script, &release_script, &force_script, &renew_script,
    &trim_script, NULL};

const rlock__script *const *rlock__lock_scripts(void) { return all_scripts; }

/* ---- the descriptor ---- */

static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  rlock *lock = op->lock;
  char lease[24];
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  const char *argv[4] = {"1", lock->name, lease, op->owner};
  size_t lens[4] = {1, lock->name_len, strlen(lease), strlen(op->owner)};
  /* Not re-sent on a timeout: a second HINCRBY after a lost reply would
   * count one acquisition twice. */
  return rlock__cmd_send(op->engine->net, &acquire_script, 4, argv, lens, 0,
                         cb, op);
}

static int read_try(rlock__op *op, const redisReply *reply, int64_t *ttl_ms) {
  if (reply->type == REDIS_REPLY_NIL)
    return RLOCK__TRY_ACQUIRED;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "acquire script replied type %d", reply->type);
    return RLOCK_EPROTO;
  }
  *ttl_ms = reply->integer;
  return RLOCK__TRY_WAIT;
}

static rlock__cmd *send_release(rlock__op *op, const char *latch,
                                int64_t lease_ms, int64_t latch_ttl_ms,
                                rlock__reply_cb cb) {
  rlock *lock = op->lock;
  const rlock_options *o = &op->engine->core->opts;
  char lease_s[24], latch_ttl[24];
  snprintf(lease_s, sizeof(lease_s), "%" PRId64, lease_ms);
  snprintf(latch_ttl, sizeof(latch_ttl), "%" PRId64, latch_ttl_ms);
  const char *argv[9] = {"3",     lock->name, lock->channel,         latch,
                         "0",     lease_s,    op->owner,
                         rlock__engine_publish(op->engine), latch_ttl};
  size_t lens[9];
  for (int i = 0; i < 9; i++)
    lens[i] = strlen(argv[i]);
  lens[1] = lock->name_len;
  /* Re-sent after a timeout or a lost connection: the latch makes that
   * safe. */
  return rlock__cmd_send(op->engine->net, &release_script, 9, argv, lens,
                         o->retry_attempts, cb, op);
}

static int read_release(rlock__op *op, const redisReply *reply) {
  if (reply->type == REDIS_REPLY_NIL)
    return RLOCK__REL_NOT_HELD;
  if (reply->type != REDIS_REPLY_INTEGER ||
      (reply->integer != 0 && reply->integer != 1)) {
    rlock__op_detail(op, "release script replied an unexpected value");
    return RLOCK_EPROTO;
  }
  return reply->integer == 1 ? RLOCK__REL_RELEASED : RLOCK__REL_HELD;
}

/* "0": one holder released - wake one waiter. "1": wake all (a read/write
 * lock's write unlock; honoured here too). Other payloads are not lock
 * messages (docs/wire-protocol.md, Messages). */
static void on_message(rlock__chan *ch, const char *payload, size_t len) {
  if (len != 1 || (payload[0] != '0' && payload[0] != '1'))
    return;
  if (payload[0] == '0')
    rlock__chan_wake_one(ch);
  else
    rlock__chan_wake_all(ch);
}

const rlock__prim rlock__prim_lock = {
    .kind = "lock",
    .send_try = send_try,
    .read_try = read_try,
    .send_release = send_release,
    .read_release = read_release,
    .on_message = on_message,
    .trim = &trim_script,
    .renew = &renew_script,
    .local_handoff = true};

/* ---- force unlock and queries ---- */

static void int_reply(rlock__net *n, redisReply *reply, int err, void *data);

static void start_force(rlock__op *op) {
  rlock *lock = op->lock;
  const char *publish = rlock__engine_publish(op->engine);
  const char *argv[5] = {"2", lock->name, lock->channel, "0", publish};
  size_t lens[5] = {1, lock->name_len, lock->channel_len, 1, strlen(publish)};
  rlock__op_send(op, &force_script, 5, argv, lens,
                 op->engine->core->opts.retry_attempts, int_reply);
}

/* A one-command query on the lock key, optionally with the owner. */
static void query(rlock__op *op, const char *cmd, bool with_owner) {
  const char *argv[3] = {cmd, op->lock->name, op->owner};
  size_t lens[3] = {strlen(cmd), op->lock->name_len, strlen(op->owner)};
  rlock__op_send(op, NULL, with_owner ? 3 : 2, argv, lens,
                 op->engine->core->opts.retry_attempts, int_reply);
}

static void start_is_locked(rlock__op *op) { query(op, "EXISTS", false); }
static void start_is_held(rlock__op *op) { query(op, "HEXISTS", true); }
static void start_hold_count(rlock__op *op) { query(op, "HGET", true); }
static void start_ttl(rlock__op *op) { query(op, "PTTL", false); }

static const rlock__op_type force_type = {.name = "force_unlock",
                                       .start = start_force};
static const rlock__op_type is_locked_type = {.name = "is_locked",
                                       .start = start_is_locked};
static const rlock__op_type is_held_type = {.name = "is_held",
                                       .start = start_is_held};
static const rlock__op_type hold_count_type = {.name = "hold_count",
                                       .start = start_hold_count};
static const rlock__op_type ttl_type = {.name = "remain_ttl",
                                       .start = start_ttl};

static void int_reply(rlock__net *n, redisReply *reply, int err, void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  if (op->type == &hold_count_type) {
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
  if (op->type == &ttl_type) {
    op->value = reply->integer;
    rlock__op_finish(op, 0);
  } else {
    rlock__op_finish(op, reply->integer != 0 ? 1 : 0); /* value stays 0 */
  }
}

/* ---- the blocking API ---- */

static int acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                   int64_t lease_ms) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  rlock__op op;
  rlock__op_init(&op, lock, &rlock__op_acquire, owner);
  rlock__op_set_wait(&op, wait_ms, lease_ms);
  return rlock__op_run_sync(&op);
}

static int simple(rlock *lock, const rlock__op_type *type, uint64_t owner,
                  int64_t *value) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
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
  return simple(lock, &rlock__op_release, owner, NULL);
}

int rlock_is_held_by_owner(rlock *lock, uint64_t owner) {
  return simple(lock, &is_held_type, owner, NULL);
}

int64_t rlock_hold_count_owner(rlock *lock, uint64_t owner) {
  int64_t count = 0;
  int rc = simple(lock, &hold_count_type, owner, &count);
  return rc < 0 ? rc : count;
}

int rlock_lock(rlock *lock, int64_t lease_ms) {
  return rlock_lock_owner(lock, rlock_thread_id(), lease_ms);
}

int rlock_try_lock(rlock *lock, int64_t wait_ms, int64_t lease_ms) {
  return acquire(lock, rlock_thread_id(), wait_ms, lease_ms);
}

int rlock_unlock(rlock *lock) {
  return rlock_unlock_owner(lock, rlock_thread_id());
}

int rlock_force_unlock(rlock *lock) {
  return simple(lock, &force_type, 0, NULL);
}

int rlock_is_locked(rlock *lock) {
  return simple(lock, &is_locked_type, 0, NULL);
}

int rlock_is_held_by_current_thread(rlock *lock) {
  return rlock_is_held_by_owner(lock, rlock_thread_id());
}

int64_t rlock_hold_count(rlock *lock) {
  return rlock_hold_count_owner(lock, rlock_thread_id());
}

int rlock_remain_ttl(rlock *lock, int64_t *ttl_ms) {
  if (ttl_ms == NULL)
    return rlock__bad_arg("ttl_ms is NULL");
  return simple(lock, &ttl_type, 0, ttl_ms);
}

/* ---- the asynchronous API ---- */

int rlock_lock_async(rlock *lock, uint64_t owner, int64_t wait_ms,
                     int64_t lease_ms, rlock_cb cb, void *data,
                     rlock_req **req) {
  return rlock__op_submit_async(lock, &rlock__op_acquire, owner, wait_ms,
                                lease_ms, cb, data, req);
}

int rlock_unlock_async(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                       rlock_req **req) {
  return rlock__op_submit_async(lock, &rlock__op_release, owner, 0, 0, cb,
                                data, req);
}

int rlock_force_unlock_async(rlock *lock, rlock_cb cb, void *data,
                             rlock_req **req) {
  return rlock__op_submit_async(lock, &force_type, 0, 0, 0, cb, data, req);
}

int rlock_is_locked_async(rlock *lock, rlock_cb cb, void *data,
                          rlock_req **req) {
  return rlock__op_submit_async(lock, &is_locked_type, 0, 0, 0, cb, data,
                                req);
}

int rlock_is_held_async(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                        rlock_req **req) {
  return rlock__op_submit_async(lock, &is_held_type, owner, 0, 0, cb, data,
                                req);
}

int rlock_hold_count_async(rlock *lock, uint64_t owner, rlock_cb cb,
                           void *data, rlock_req **req) {
  return rlock__op_submit_async(lock, &hold_count_type, owner, 0, 0, cb, data,
                                req);
}

int rlock_remain_ttl_async(rlock *lock, rlock_cb cb, void *data,
                           rlock_req **req) {
  return rlock__op_submit_async(lock, &ttl_type, 0, 0, 0, cb, data, req);
}
