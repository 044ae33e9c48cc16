/* Redisson's non-reentrant lock and non-reentrant fair lock
 * (getNonReentrantLock, getNonReentrantFairLock; Redisson 4.4.0+): RLock's
 * and the fair lock's keys, channels, messages, release, renewal, trim and
 * queries, with one change - the acquire refuses the owner's own field
 * instead of re-entering it. Its scripts take the marker
 * NON_REENTRANT_REACQUIRE as their last ARGV (as Java's do) and answer a
 * re-acquire with an error reply starting with it, which the error table
 * maps to RLOCK_EREENTRY: the call fails on its first try, before any
 * subscribe or queue step. So a hold count is always 1 - unless an RLock
 * (or fair lock) handle of the same owner re-enters it, which Java allows
 * too. Wire format: docs/wire-protocol.md, "The non-reentrant locks";
 * scripts: nonreentrant_*.lua (bodies shared with lock_acquire.lua and
 * fair_*.lua). */
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

static const rlock__script acquire_script = {
    "nonreentrant_acquire", RLOCK__LUA_NONREENTRANT_ACQUIRE_BODY,
    RLOCK__LUA_NONREENTRANT_ACQUIRE_SHA, false};
static const rlock__script fair_acquire_script = {
    "nonreentrant_fair_acquire", RLOCK__LUA_NONREENTRANT_FAIR_ACQUIRE_BODY,
    RLOCK__LUA_NONREENTRANT_FAIR_ACQUIRE_SHA, false};
static const rlock__script fair_try_script = {
    "nonreentrant_fair_try", RLOCK__LUA_NONREENTRANT_FAIR_TRY_BODY,
    RLOCK__LUA_NONREENTRANT_FAIR_TRY_SHA, false};

/* KEYS[1] the name; ARGV lease, owner, marker. Never re-sent, as RLock's
 * try: a lost reply is repaired by the trim. */
static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "1");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_str(&a, RLOCK__NONREENTRANT_MARKER);
  return rlock__cmd_send(op->engine->net, &acquire_script, a.argc, a.argv,
                         a.lens, 0, cb, op);
}

const rlock__prim rlock__prim_nonreentrant = {
    .kind = "nonreentrant",
    .channel_prefix = RLOCK__LOCK_CHANNEL_PREFIX,
    .send_try = send_try,
    .read_try = rlock__lock_read_try,
    .on_message = rlock__lock_on_message,
    .ops = &rlock__lock_ops,
    .hold = &rlock__lock_hold};

/* ---- the fair one ---- */

static rlock__cmd *fair_send_try(rlock__op *op, int64_t lease_ms,
                                 rlock__reply_cb cb) {
  return rlock__fair_send_try_scripts(op, lease_ms, cb, &fair_acquire_script,
                                      &fair_try_script,
                                      RLOCK__NONREENTRANT_MARKER);
}

/* The fair lock's queue-leave, except after a refused re-acquire on the
 * op's first try: the script refuses before any queue step, and no earlier
 * try of this op could have queued it (op->u.acq.answered is still false:
 * this refusal is the first answer), so there is nothing to undo and, as
 * in Java, nothing is sent. A refusal after earlier answers (another op of
 * the same owner took the lock while this one waited in the queue) leaves
 * the queue as usual. The refusal is known by its text, which
 * rlock__op_failed put in the detail just before this runs - as Java
 * tells it by the marker in the message. */
static rlock__cmd *fair_abandon(rlock__op *op, rlock__reply_cb cb,
                                void *data) {
  if (!op->u.acq.answered &&
      rlock__err_from_server(op->detail, strlen(op->detail)) ==
          RLOCK_EREENTRY)
    return NULL;
  return rlock__fair_abandon(op, cb, data);
}

const rlock__prim rlock__prim_nonreentrant_fair = {
    .kind = "nonreentrant_fair",
    .channel_prefix = RLOCK__LOCK_CHANNEL_PREFIX,
    .send_try = fair_send_try,
    .read_try = rlock__lock_read_try,
    .on_message = rlock__fair_on_message,
    .wait_channel = rlock__fair_wait_channel,
    .abandon = fair_abandon,
    .ops = &rlock__fair_ops,
    .hold = &rlock__fair_hold};
