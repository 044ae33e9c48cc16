/* Redisson's read/write lock (getReadWriteLock(name).readLock() and
 * .writeLock()): two descriptors on one hash `name` - field "mode" (read or
 * write), each reader's owner -> its read count, the writer's
 * owner:write -> its write count - and one channel,
 * "redisson_rwlock:" + tag, where a read unlock that frees the lock
 * publishes "0" (wake one) and a write unlock "1" (wake all: every reader
 * may get in). Each read hold i also has its own timeout key
 * "{name}:<owner>:rwlock_timeout:<i>" with that hold's lease; the hash
 * lives as long as the longest of them, and Java treats a reader whose
 * keys are all gone as dead, so ours are created and renewed with exactly
 * that spelling. Wire format: docs/wire-protocol.md, "The read/write
 * lock"; scripts: rwlock_*.lua beside this file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

#define WRITE_SUFFIX ":write"
#define RWLOCK_CHANNEL_PREFIX "redisson_rwlock:"
#define TIMEOUT_SUFFIX RLOCK__RWLOCK_TIMEOUT_SUFFIX

/* ---- scripts ---- */

static const rlock__script read_acquire_script = {
    "rwlock_read_acquire", RLOCK__LUA_RWLOCK_READ_ACQUIRE_BODY,
    RLOCK__LUA_RWLOCK_READ_ACQUIRE_SHA, false};
static const rlock__script read_release_script = {
    "rwlock_read_release", RLOCK__LUA_RWLOCK_READ_RELEASE_BODY,
    RLOCK__LUA_RWLOCK_READ_RELEASE_SHA, false};
static const rlock__script read_renew_script = {
    "rwlock_read_renew", RLOCK__LUA_RWLOCK_READ_RENEW_BODY,
    RLOCK__LUA_RWLOCK_READ_RENEW_SHA, false};
static const rlock__script read_is_locked_script = {
    "rwlock_read_is_locked", RLOCK__LUA_RWLOCK_READ_IS_LOCKED_BODY,
    RLOCK__LUA_RWLOCK_READ_IS_LOCKED_SHA, false};
static const rlock__script write_acquire_script = {
    "rwlock_write_acquire", RLOCK__LUA_RWLOCK_WRITE_ACQUIRE_BODY,
    RLOCK__LUA_RWLOCK_WRITE_ACQUIRE_SHA, false};
static const rlock__script write_release_script = {
    "rwlock_write_release", RLOCK__LUA_RWLOCK_WRITE_RELEASE_BODY,
    RLOCK__LUA_RWLOCK_WRITE_RELEASE_SHA, false};
static const rlock__script force_script = {
    "rwlock_force_unlock", RLOCK__LUA_RWLOCK_FORCE_UNLOCK_BODY,
    RLOCK__LUA_RWLOCK_FORCE_UNLOCK_SHA, false};
/* The trims are always sent as EVAL, as RLock's: their place in the order
 * of commands matters. */
static const rlock__script read_trim_script = {
    "rwlock_read_trim", RLOCK__LUA_RWLOCK_READ_TRIM_BODY,
    RLOCK__LUA_RWLOCK_READ_TRIM_SHA, true};
static const rlock__script write_trim_script = {
    "rwlock_write_trim", RLOCK__LUA_RWLOCK_WRITE_TRIM_BODY,
    RLOCK__LUA_RWLOCK_WRITE_TRIM_SHA, true};

/* ---- helpers ---- */

/* The base of an owner's read-hold timeout keys, malloc'd:
 * tag ":" owner ":rwlock_timeout" (Redisson's suffixName(name, owner) +
 * ":rwlock_timeout"; each hold i adds ":" i). NULL: out of memory. */
static char *timeout_base(const rlock *lock, const char *owner, size_t *len) {
  size_t ol = strlen(owner);
  size_t n = lock->tag_len + 1 + ol + sizeof(TIMEOUT_SUFFIX) - 1;
  char *base = malloc(n + 1);
  if (base == NULL)
    return NULL;
  memcpy(base, lock->tag, lock->tag_len);
  base[lock->tag_len] = ':';
  memcpy(base + lock->tag_len + 1, owner, ol);
  memcpy(base + lock->tag_len + 1 + ol, TIMEOUT_SUFFIX,
         sizeof(TIMEOUT_SUFFIX));
  *len = n;
  return base;
}

/* ---- the read lock ---- */

static rlock__cmd *read_send_try(rlock__op *op, int64_t lease_ms,
                                 rlock__reply_cb cb) {
  rlock *lock = op->lock;
  size_t base_len = 0;
  char *base = timeout_base(lock, op->owner, &base_len);
  if (base == NULL)
    return NULL;
  char writer[RLOCK__OWNER_MAX + sizeof(WRITE_SUFFIX)];
  snprintf(writer, sizeof(writer), "%s" WRITE_SUFFIX, op->owner);
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, base, base_len);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_str(&a, writer);
  /* Never re-sent: a second try after a lost reply would count twice (the
   * engine trims instead). */
  rlock__cmd *cmd = rlock__cmd_send(op->engine->net, &read_acquire_script,
                                    a.argc, a.argv, a.lens, 0, cb, op);
  free(base); /* the command record copied it */
  return cmd;
}

/* Java's read unlock has no lease argument: the hash's TTL is recomputed
 * from the readers' timeout keys, so lease_ms is not used. */
static rlock__cmd *read_send_release(rlock__op *op, const char *latch,
                                     int64_t lease_ms, int64_t latch_ttl_ms,
                                     rlock__reply_cb cb) {
  (void)lease_ms;
  rlock *lock = op->lock;
  size_t base_len = 0;
  char *base = timeout_base(lock, op->owner, &base_len);
  if (base == NULL)
    return NULL;
  rlock__argv a = {0};
  rlock__argv_str(&a, "5");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_mem(&a, base, base_len);
  rlock__argv_mem(&a, lock->tag, lock->tag_len);
  rlock__argv_str(&a, latch);
  rlock__argv_str(&a, "0");
  rlock__argv_str(&a, op->owner);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__argv_int(&a, latch_ttl_ms);
  /* Re-sent after a timeout or a lost connection: the latch makes that
   * safe. */
  rlock__cmd *cmd =
      rlock__cmd_send(op->engine->net, &read_release_script, a.argc, a.argv,
                      a.lens, op->engine->core->opts.retry_attempts, cb, op);
  free(base);
  return cmd;
}

/* ---- the write lock ---- */

static rlock__cmd *write_send_try(rlock__op *op, int64_t lease_ms,
                                  rlock__reply_cb cb) {
  /* op->owner already ends in ":write" (owner_suffix). */
  return rlock__lock_send_try_script(op, &write_acquire_script, lease_ms, cb);
}

static rlock__cmd *write_send_release(rlock__op *op, const char *latch,
                                      int64_t lease_ms, int64_t latch_ttl_ms,
                                      rlock__reply_cb cb) {
  /* "1": a write unlock wakes every waiter (readers may all get in). */
  return rlock__lock_send_release_script(op, &write_release_script, "1",
                                         latch, lease_ms, latch_ttl_ms, cb);
}

/* nil: not write-held by the owner; 0: still held; 1: released (hash
 * deleted, "1" published); 2: released by a downgrade - the owner's read
 * holds remain and the hash went to read mode. Redisson publishes nothing
 * then, so other processes' waiting readers sleep until some later message
 * or their TTL bound; this client's own waiters are woken here, as a "1"
 * would (readers get in, writers try and sleep again). */
static int write_read_release(rlock__op *op, const redisReply *reply) {
  if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 2) {
    rlock__chan_wake_all_named(op->engine->net, op->lock->channel,
                               op->lock->channel_len);
    return RLOCK__REL_RELEASED;
  }
  return rlock__lock_read_release(op, reply);
}

/* ---- force unlock and queries ---- */

static void force(rlock__op *op, const char *message, const char *mode) {
  rlock *lock = op->lock;
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_str(&a, message);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__argv_str(&a, mode);
  rlock__op_send(op, &force_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, rlock__query_reply);
}

static void start_force_read(rlock__op *op) { force(op, "0", "read"); }
static void start_force_write(rlock__op *op) { force(op, "1", "write"); }

/* Read-locked: read mode, or write mode with read holds beside the
 * writer's (Redisson's answer). */
static void start_read_is_locked(rlock__op *op) {
  const char *argv[2] = {"1", op->lock->name};
  size_t lens[2] = {1, op->lock->name_len};
  rlock__op_send(op, &read_is_locked_script, 2, argv, lens,
                 op->engine->core->opts.retry_attempts, rlock__query_reply);
}

static void write_is_locked_reply(rlock__net *n, redisReply *reply, int err,
                                  void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  if (reply->type == REDIS_REPLY_NIL) {
    rlock__op_finish(op, 0);
    return;
  }
  if (reply->type != REDIS_REPLY_STRING) {
    rlock__op_detail(op, "unexpected reply type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  rlock__op_finish(op, reply->len == 5 && memcmp(reply->str, "write", 5) == 0
                           ? 1
                           : 0);
}

/* Write-locked: HGET mode = "write" (as Redisson asks it). */
static void start_write_is_locked(rlock__op *op) {
  const char *argv[3] = {"HGET", op->lock->name, "mode"};
  size_t lens[3] = {4, op->lock->name_len, 4};
  rlock__op_send(op, NULL, 3, argv, lens,
                 op->engine->core->opts.retry_attempts,
                 write_is_locked_reply);
}

static const rlock__op_type read_force_type = {.name = "force_unlock",
                                               .start = start_force_read};
static const rlock__op_type write_force_type = {.name = "force_unlock",
                                                .start = start_force_write};
static const rlock__op_type read_is_locked_type = {
    .name = "is_locked", .start = start_read_is_locked};
static const rlock__op_type write_is_locked_type = {
    .name = "is_locked", .start = start_write_is_locked};

/* is_held, hold_count and remain_ttl are RLock's: HEXISTS / HGET of
 * op->owner (owner:write for the write lock) and PTTL of the hash. */
static const rlock__prim_ops read_ops = {
    .force_unlock = &read_force_type,
    .is_locked = &read_is_locked_type,
    .is_held = &rlock__q_is_held,
    .hold_count = &rlock__q_hold_count,
    .remain_ttl = &rlock__q_remain_ttl};

static const rlock__prim_ops write_ops = {
    .force_unlock = &write_force_type,
    .is_locked = &write_is_locked_type,
    .is_held = &rlock__q_is_held,
    .hold_count = &rlock__q_hold_count,
    .remain_ttl = &rlock__q_remain_ttl};

/* ---- the descriptors ---- */

/* No local handoff for either: a release that frees the lock may admit
 * every waiting reader, or one writer; the messages say which ("1" wakes
 * all, "0" one), and a handed-off try could not. */
static const rlock__prim_hold read_hold = {
    .send_release = read_send_release,
    /* nil: not read-held by the owner; 0: it still has read holds; 1: its
     * last one ended (other owners' reads may still hold the lock). */
    .read_release = rlock__lock_read_release,
    .trim = &read_trim_script,
    .renew = &read_renew_script,
    .local_handoff = false,
    .shared_expiry = true};

const rlock__prim rlock__prim_read = {
    .kind = "read",
    .channel_prefix = RWLOCK_CHANNEL_PREFIX,
    .send_try = read_send_try,
    .read_try = rlock__lock_read_try, /* nil, or the hash's PTTL */
    .on_message = rlock__lock_on_message,
    .ops = &read_ops,
    .hold = &read_hold};

static const rlock__prim_hold write_hold = {
    .send_release = write_send_release,
    .read_release = write_read_release,
    .trim = &write_trim_script,
    /* RLock's: owner:write field exists -> PEXPIRE the hash. */
    .renew = &rlock__lock_renew_script,
    .local_handoff = false,
    /* A write hold excludes every other owner: one writer of the client
     * tries at a time (a "1" wakes them all; gate.c). */
    .local_gate = true,
    .owner_suffix = WRITE_SUFFIX};

const rlock__prim rlock__prim_write = {
    .kind = "write",
    .channel_prefix = RWLOCK_CHANNEL_PREFIX,
    .send_try = write_send_try,
    .read_try = rlock__lock_read_try,
    .on_message = rlock__lock_on_message,
    .ops = &write_ops,
    .hold = &write_hold};
