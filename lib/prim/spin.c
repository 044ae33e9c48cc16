/* Redisson's spin lock (getSpinLock): RLock's lock hash, no channel and no
 * message; a waiter polls with a back-off (the engine's `polls`). Wire
 * format: docs/wire-protocol.md, "The spin lock"; scripts: spin_*.lua. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

static const rlock__script acquire_script = {
    "spin_acquire", RLOCK__LUA_SPIN_ACQUIRE_BODY, RLOCK__LUA_SPIN_ACQUIRE_SHA,
    false};
static const rlock__script release_script = {
    "spin_release", RLOCK__LUA_SPIN_RELEASE_BODY, RLOCK__LUA_SPIN_RELEASE_SHA,
    false};
static const rlock__script force_script = {
    "spin_force_unlock", RLOCK__LUA_SPIN_FORCE_UNLOCK_BODY,
    RLOCK__LUA_SPIN_FORCE_UNLOCK_SHA, false};
static const rlock__script trim_script = {
    "spin_trim", RLOCK__LUA_SPIN_TRIM_BODY, RLOCK__LUA_SPIN_TRIM_SHA, true};

static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  return rlock__lock_send_try_script(op, &acquire_script, lease_ms, cb);
}

static rlock__cmd *send_release(rlock__op *op, const char *latch,
                                int64_t lease_ms, int64_t latch_ttl_ms,
                                rlock__reply_cb cb) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  rlock__argv_str(&a, latch);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_int(&a, latch_ttl_ms);
  return rlock__cmd_send(op->engine->net, &release_script, a.argc, a.argv,
                         a.lens, op->engine->core->opts.retry_attempts, cb,
                         op);
}

static void start_force(rlock__op *op) {
  const char *argv[2] = {"1", op->lock->name};
  size_t lens[2] = {1, op->lock->name_len};
  rlock__op_send(op, &force_script, 2, argv, lens,
                 op->engine->core->opts.retry_attempts, rlock__query_reply);
}

static const rlock__op_type force_type = {.name = "force_unlock",
                                          .start = start_force};

static const rlock__prim_ops spin_ops = {
    .force_unlock = &force_type,
    .is_locked = &rlock__q_is_locked,
    .is_held = &rlock__q_is_held,
    .hold_count = &rlock__q_hold_count,
    .remain_ttl = &rlock__q_remain_ttl};

static const rlock__prim_hold spin_hold = {
    .send_release = send_release,
    .read_release = rlock__lock_read_release,
    .trim = &trim_script,
    .renew = &rlock__lock_renew_script}; /* same hash and field as RLock */

/* No channel: the handle's is the bare tag, never subscribed. */
const rlock__prim rlock__prim_spin = {
    .kind = "spin",
    .send_try = send_try,
    .read_try = rlock__lock_read_try,
    .on_message = NULL,
    .polls = true,
    .ops = &spin_ops,
    .hold = &spin_hold};
