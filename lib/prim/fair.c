/* Redisson's fair lock (getFairLock): RLock's hash plus a FIFO of waiters
 * (the list redisson_lock_queue:{name}) and their absolute deadlines (the
 * zset redisson_lock_timeout:{name}, client wall-clock ms). A release tells
 * the first waiter only, on that waiter's own channel
 * (redisson_lock__channel:{name}:<owner>). Wire format:
 * docs/wire-protocol.md, "The fair lock"; scripts: fair_*.lua beside this
 * file (renewal is RLock's: the queue keys are never renewed). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

#define QUEUE_PREFIX RLOCK__FAIR_QUEUE_PREFIX
#define TIMEOUT_PREFIX RLOCK__FAIR_TIMEOUT_PREFIX

/* Redisson's fairLockWaitTimeout: the wait a waiter announces (and adds to
 * its deadline) when its caller gave none - lock(), or a try without a
 * positive wait. */
#define FAIR_DEFAULT_WAIT_MS 300000

/* ---- scripts ---- */

static const rlock__script acquire_script = {
    "fair_acquire", RLOCK__LUA_FAIR_ACQUIRE_BODY, RLOCK__LUA_FAIR_ACQUIRE_SHA,
    false};
static const rlock__script try_script = {
    "fair_try", RLOCK__LUA_FAIR_TRY_BODY, RLOCK__LUA_FAIR_TRY_SHA, false};
static const rlock__script release_script = {
    "fair_release", RLOCK__LUA_FAIR_RELEASE_BODY, RLOCK__LUA_FAIR_RELEASE_SHA,
    false};
static const rlock__script abandon_script = {
    "fair_abandon", RLOCK__LUA_FAIR_ABANDON_BODY, RLOCK__LUA_FAIR_ABANDON_SHA,
    false};
static const rlock__script force_script = {
    "fair_force_unlock", RLOCK__LUA_FAIR_FORCE_UNLOCK_BODY,
    RLOCK__LUA_FAIR_FORCE_UNLOCK_SHA, false};
/* Always sent as EVAL, as RLock's trim: its place in the order matters. */
static const rlock__script trim_script = {
    "fair_trim", RLOCK__LUA_FAIR_TRIM_BODY, RLOCK__LUA_FAIR_TRIM_SHA, true};

/* ---- helpers ---- */

/* The queue and deadline keys of a fair lock, in one allocation (free
 * keys->buf). */
typedef struct fair_keys {
  char *buf;
  const char *queue, *timeout;
  size_t queue_len, timeout_len;
} fair_keys;

static bool keys_make(const rlock *lock, fair_keys *k) {
  size_t ql = sizeof(QUEUE_PREFIX) - 1 + lock->tag_len;
  size_t tl = sizeof(TIMEOUT_PREFIX) - 1 + lock->tag_len;
  k->buf = malloc(ql + 1 + tl + 1);
  if (k->buf == NULL)
    return false;
  memcpy(k->buf, QUEUE_PREFIX, sizeof(QUEUE_PREFIX) - 1);
  memcpy(k->buf + sizeof(QUEUE_PREFIX) - 1, lock->tag, lock->tag_len);
  k->buf[ql] = '\0';
  char *t = k->buf + ql + 1;
  memcpy(t, TIMEOUT_PREFIX, sizeof(TIMEOUT_PREFIX) - 1);
  memcpy(t + sizeof(TIMEOUT_PREFIX) - 1, lock->tag, lock->tag_len);
  t[tl] = '\0';
  k->queue = k->buf;
  k->queue_len = ql;
  k->timeout = t;
  k->timeout_len = tl;
  return true;
}

/* The wait this acquire announces in the queue (Java: the caller's wait if
 * > 0, else fairLockWaitTimeout). */
static int64_t announced_wait(const rlock__op *op) {
  return op->wait_ms > 0 ? op->wait_ms : FAIR_DEFAULT_WAIT_MS;
}

/* ---- the descriptor ---- */

/* A caller with a wait runs the queueing acquire (ARGV lease, owner, wait,
 * now); a single attempt (wait_ms 0, Java's tryLock()) runs the one that
 * never queues, whose ARGV has now and wait swapped, as Java's. */
rlock__cmd *rlock__fair_send_try_scripts(rlock__op *op, int64_t lease_ms,
                                         rlock__reply_cb cb,
                                         const rlock__script *acquire,
                                         const rlock__script *single_try,
                                         const char *marker) {
  rlock *lock = op->lock;
  fair_keys k;
  if (!keys_make(lock, &k))
    return NULL;
  int64_t wait = announced_wait(op), now = rlock__wall_ms();
  bool single = op->wait_ms == 0;
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, k.queue, k.queue_len);
  rlock__argv_mem(&a, k.timeout, k.timeout_len);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_int(&a, single ? now : wait);
  rlock__argv_int(&a, single ? wait : now);
  if (marker != NULL)
    rlock__argv_str(&a, marker);
  /* Never re-sent (as RLock's): a second try could count one acquisition
   * twice. A lost reply is repaired by the trim, a queue entry left behind
   * by the abandon. */
  rlock__cmd *cmd = rlock__cmd_send(op->engine->net,
                                    single ? single_try : acquire,
                                    a.argc, a.argv, a.lens, 0, cb, op);
  free(k.buf);
  return cmd;
}

static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  return rlock__fair_send_try_scripts(op, lease_ms, cb, &acquire_script,
                                      &try_script, NULL);
}

/* Each waiter waits on its own channel: the handle's channel + ":" +
 * owner. */
char *rlock__fair_wait_channel(const rlock__op *op, size_t *len) {
  const rlock *lock = op->lock;
  size_t owner_len = strlen(op->owner);
  size_t n = lock->channel_len + 1 + owner_len;
  char *ch = malloc(n + 1);
  if (ch == NULL)
    return NULL;
  memcpy(ch, lock->channel, lock->channel_len);
  ch[lock->channel_len] = ':';
  memcpy(ch + lock->channel_len + 1, op->owner, owner_len);
  ch[n] = '\0';
  *len = n;
  return ch;
}

/* "0" on a waiter's own channel: it is first in line and the lock was
 * released. Only that owner's acquire waits there, so wake all (one). */
void rlock__fair_on_message(rlock__chan *ch, const char *payload,
                            size_t len) {
  if (len == 1 && payload[0] == '0')
    rlock__chan_wake_all(ch);
}

/* Leaves the queue (Java's acquireFailed): without it our entry would
 * block everyone behind it until its deadline (minutes with the default
 * wait). A single attempt never queued, so it has nothing to undo. The
 * script is a no-op when the owner is not queued: safe to re-send. */
rlock__cmd *rlock__fair_abandon(rlock__op *op, rlock__reply_cb cb,
                                void *data) {
  if (op->wait_ms == 0)
    return NULL;
  rlock *lock = op->lock;
  fair_keys k;
  if (!keys_make(lock, &k))
    return NULL;
  rlock__argv a = {0};
  rlock__argv_str(&a, "4");
  rlock__argv_mem(&a, k.queue, k.queue_len);
  rlock__argv_mem(&a, k.timeout, k.timeout_len);
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_str(&a, op->owner);
  rlock__argv_int(&a, announced_wait(op));
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__cmd *cmd =
      rlock__cmd_send(op->engine->net, &abandon_script, a.argc, a.argv,
                      a.lens, op->engine->core->opts.retry_attempts, cb, data);
  free(k.buf);
  return cmd;
}

static rlock__cmd *send_release(rlock__op *op, const char *latch,
                                int64_t lease_ms, int64_t latch_ttl_ms,
                                rlock__reply_cb cb) {
  rlock *lock = op->lock;
  fair_keys k;
  if (!keys_make(lock, &k))
    return NULL;
  rlock__argv a = {0};
  rlock__argv_str(&a, "5");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, k.queue, k.queue_len);
  rlock__argv_mem(&a, k.timeout, k.timeout_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_str(&a, latch);
  rlock__argv_str(&a, "0");
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_int(&a, rlock__wall_ms());
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__argv_int(&a, latch_ttl_ms);
  /* Re-sent after a timeout or a lost connection: the latch makes that
   * safe. */
  rlock__cmd *cmd =
      rlock__cmd_send(op->engine->net, &release_script, a.argc, a.argv,
                      a.lens, op->engine->core->opts.retry_attempts, cb, op);
  free(k.buf);
  return cmd;
}

/* ---- force unlock ---- */

static void start_force(rlock__op *op) {
  rlock *lock = op->lock;
  fair_keys k;
  if (!keys_make(lock, &k)) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  rlock__argv a = {0};
  rlock__argv_str(&a, "4");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, k.queue, k.queue_len);
  rlock__argv_mem(&a, k.timeout, k.timeout_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_str(&a, "0");
  rlock__argv_int(&a, rlock__wall_ms());
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__op_send(op, &force_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, rlock__query_reply);
  free(k.buf); /* the command record copied the arguments */
}

static const rlock__op_type force_type = {.name = "force_unlock",
                                          .start = start_force};

const rlock__prim_ops rlock__fair_ops = {
    .force_unlock = &force_type,
    .is_locked = &rlock__q_is_locked,
    .is_held = &rlock__q_is_held,
    .hold_count = &rlock__q_hold_count,
    .remain_ttl = &rlock__q_remain_ttl};

const rlock__prim_hold rlock__fair_hold = {
    .send_release = send_release,
    .read_release = rlock__lock_read_release,
    .trim = &trim_script,
    .renew = &rlock__lock_renew_script, /* the lock hash only */
    /* First come, first served across clients: a release never hands the
     * lock to a local waiter ahead of the queue. */
    .local_handoff = false};

const rlock__prim rlock__prim_fair = {
    .kind = "fair",
    /* The base of each waiter's own channel (wait_channel). */
    .channel_prefix = RLOCK__LOCK_CHANNEL_PREFIX,
    .send_try = send_try,
    /* nil: acquired. An integer: the wait hint in ms (0: the lock is free
     * but another waiter is first in line - the engine then backs off from
     * 1 ms, cut short by a message, instead of trying again at once as
     * Java does). */
    .read_try = rlock__lock_read_try,
    .on_message = rlock__fair_on_message,
    .wait_channel = rlock__fair_wait_channel,
    .abandon = rlock__fair_abandon,
    .ops = &rlock__fair_ops,
    .hold = &rlock__fair_hold};

/* ---- names for introspection (info.c) ---- */

char *rlock__fair_queue_key(const rlock *lock, size_t *len) {
  return rlock__prefixed(QUEUE_PREFIX, lock->tag, lock->tag_len, len);
}

char *rlock__fair_timeout_key(const rlock *lock, size_t *len) {
  return rlock__prefixed(TIMEOUT_PREFIX, lock->tag, lock->tag_len, len);
}
