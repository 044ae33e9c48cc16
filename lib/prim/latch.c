/* Redisson's count-down latch (getCountDownLatch): a decimal count under the
 * plain name (no TTL) and the channel
 * "redisson_countdownlatch__channel__{name}" - braces always, even around a
 * name that has its own (.channel_braces_always). Wire format:
 * docs/wire-protocol.md, "The count-down latch"; scripts: latch_*.lua.
 *
 * An await is the engine's acquire loop with nothing held (no hold part): the
 * "try" reads the count, 0 or no key is "acquired" (open), anything else is
 * "wait" without a TTL hint, so a sleeper re-reads on a message, or at the
 * latest every watchdog_timeout_ms (a lost message costs that, never a
 * hang), always within the caller's deadline. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

#define LATCH_CHANNEL_PREFIX "redisson_countdownlatch__channel__"

/* ---- scripts ---- */

static const rlock__script set_script = {
    "latch_try_set_count", RLOCK__LUA_LATCH_TRY_SET_COUNT_BODY,
    RLOCK__LUA_LATCH_TRY_SET_COUNT_SHA, false};
static const rlock__script count_down_script = {
    "latch_count_down", RLOCK__LUA_LATCH_COUNT_DOWN_BODY,
    RLOCK__LUA_LATCH_COUNT_DOWN_SHA, false};
static const rlock__script delete_script = {
    "latch_delete", RLOCK__LUA_LATCH_DELETE_BODY, RLOCK__LUA_LATCH_DELETE_SHA,
    false};

/* The count in a GET reply: no key is 0, and so is anything below 0 (Java's
 * count-down deletes the key at 0 or below, so such a value can only have
 * been written by hand; it means "open" to Java's await as to ours, and a
 * negative count would read as an error code here). 0, or RLOCK_EPROTO with
 * the op's detail set. */
static int parse_count(rlock__op *op, const redisReply *reply,
                       int64_t *count) {
  if (reply->type == REDIS_REPLY_NIL) {
    *count = 0;
    return 0;
  }
  if (reply->type == REDIS_REPLY_STRING && reply->len > 0) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(reply->str, &end, 10);
    if (errno == 0 && end == reply->str + reply->len) {
      *count = v > 0 ? v : 0;
      return 0;
    }
  }
  rlock__op_detail(op, "latch '%s' does not hold a count (reply type %d)",
                   op->lock->name, reply->type);
  return RLOCK_EPROTO;
}

/* ---- await: the descriptor the acquire loop drives ---- */

/* A plain GET, as Java's await sends. A read: re-sent after a timeout or a
 * lost connection. */
static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  (void)lease_ms; /* nothing is held */
  const char *argv[2] = {"GET", op->lock->name};
  size_t lens[2] = {3, op->lock->name_len};
  return rlock__cmd_send(op->engine->net, NULL, 2, argv, lens,
                         op->engine->core->opts.retry_attempts, cb, op);
}

static int read_try(rlock__op *op, const redisReply *reply, int64_t *ttl_ms) {
  int64_t count = 0;
  int rc = parse_count(op, reply, &count);
  if (rc < 0)
    return rc;
  if (count == 0)
    return RLOCK__TRY_ACQUIRED;
  *ttl_ms = -1; /* no TTL to bound the sleep: a message, or the re-check */
  return RLOCK__TRY_WAIT;
}

/* Both messages make every local awaiter re-read the count; the server's
 * count decides. "0" (a count-down reached 0) opens them. "1" is a new
 * count (they read it and sleep again) or a delete (they find no key: open,
 * as rlock_latch_count says 0; Java's awaiters wait on after a delete).
 * With nobody asleep (a read in flight) wake_all keeps a permit per waiter,
 * so a message that overtakes a re-read is not lost. Other payloads are not
 * latch messages. */
static void on_message(rlock__chan *ch, const char *payload, size_t len) {
  if (len != 1 || (payload[0] != '0' && payload[0] != '1'))
    return;
  rlock__chan_wake_all(ch);
}

/* "redisson_countdownlatch__channel__{" + name + "}": braces even around a
 * name that has its own (Java's name), unlike every other kind's tag. */
static char *channel_name(const char *name, size_t len, size_t *out_len) {
  size_t plen = sizeof(LATCH_CHANNEL_PREFIX) - 1;
  char *ch = malloc(plen + len + 3);
  if (ch == NULL)
    return NULL;
  memcpy(ch, LATCH_CHANNEL_PREFIX, plen);
  ch[plen] = '{';
  memcpy(ch + plen + 1, name, len);
  memcpy(ch + plen + 1 + len, "}", 2);
  *out_len = plen + len + 2;
  return ch;
}

const rlock__prim rlock__prim_latch = {.kind = "latch",
                                       .channel_name = channel_name,
                                       .send_try = send_try,
                                       .read_try = read_try,
                                       .on_message = on_message,
                                       .try_reads_only = true};

/* ---- one-command operations ---- */

/* Defined below with their start functions. */
static const rlock__op_type count_down_type, delete_type;

/* The reply of a latch script: an integer. try_set_count and delete finish
 * with it (1/0); count_down with 0 (the count left goes to op->value). A
 * lost reply of a command that is never re-sent says so in the detail. */
static void script_reply(rlock__net *n, redisReply *reply, int err,
                         void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__transient(err) && op->type != &delete_type)
    rlock__op_detail(op, "no reply to %s of latch '%s': it may or may not "
                         "have run (not re-sent: a second run %s); "
                         "rlock_latch_count tells",
                     op->type->name, op->lock->name,
                     op->type == &count_down_type
                         ? "would count down twice"
                         : "could close the latch again after it opened");
  if (rlock__op_failed(op, reply, err))
    return;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "%s script replied an unexpected value (type %d)",
                     op->type->name, reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  op->value = reply->integer;
  if (op->type == &count_down_type)
    rlock__op_finish(op, 0);
  else
    rlock__op_finish(op, reply->integer != 0 ? 1 : 0);
}

/* trySetCount's op: the count to set. */
typedef struct set_op {
  rlock__op op;
  int64_t count;
} set_op;

/* The scripts' head: both keys (the latch, its channel) and the message. */
static void latch_args(rlock__op *op, rlock__argv *a, const char *message) {
  rlock__argv_str(a, "2");
  rlock__argv_mem(a, op->lock->name, op->lock->name_len);
  rlock__argv_mem(a, op->lock->channel, op->lock->channel_len);
  rlock__argv_str(a, message);
}

/* trySetCount. Not re-sent after a lost reply: if the first send ran and the
 * latch then opened (and went), a second would close it again. */
static void start_set(rlock__op *op) {
  rlock__argv a = {0};
  latch_args(op, &a, "1");
  rlock__argv_int(&a, RLOCK__CONTAINER_OF(op, set_op, op)->count);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__op_send(op, &set_script, a.argc, a.argv, a.lens, 0, script_reply);
}

/* countDown. Never re-sent (as Java's): a second DECR after a lost reply
 * would count down twice. */
static void start_count_down(rlock__op *op) {
  rlock__argv a = {0};
  latch_args(op, &a, "0");
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__op_send(op, &count_down_script, a.argc, a.argv, a.lens, 0,
                 script_reply);
}

/* delete. Re-sent after a lost reply: the latch is gone either way (a
 * re-send after the first ran answers 0). */
static void start_delete(rlock__op *op) {
  rlock__argv a = {0};
  latch_args(op, &a, "1");
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__op_send(op, &delete_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, script_reply);
}

static void count_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  int rc = parse_count(op, reply, &op->value);
  rlock__op_finish(op, rc);
}

/* getCount: GET (a read, re-sent after a timeout). */
static void start_get_count(rlock__op *op) {
  const char *argv[2] = {"GET", op->lock->name};
  size_t lens[2] = {3, op->lock->name_len};
  rlock__op_send(op, NULL, 2, argv, lens,
                 op->engine->core->opts.retry_attempts, count_reply);
}

static const rlock__op_type set_type = {.name = "try_set_count",
                                        .start = start_set};
static const rlock__op_type count_down_type = {.name = "count_down",
                                               .start = start_count_down};
static const rlock__op_type delete_type = {.name = "delete",
                                           .start = start_delete};
static const rlock__op_type get_count_type = {.name = "get_count",
                                              .start = start_get_count};

/* ---- the public API ---- */

/* NULL or another kind's handle: RLOCK_EINVAL with the last error set. */
static int check(const rlock_latch *latch) {
  const rlock *lock = (const rlock *)latch;
  if (lock == NULL)
    return rlock__bad_arg("latch is NULL");
  if (lock->prim != &rlock__prim_latch)
    return rlock__bad_arg("not a count-down latch (use rlock_latch_new)");
  return 0;
}

/* Runs a one-command op (no arguments of its own); its value in *value. */
static int run(rlock_latch *latch, const rlock__op_type *type,
               int64_t *value) {
  rlock__op op;
  rlock__op_init(&op, (rlock *)latch, type, 0);
  int rc = rlock__op_run_sync(&op);
  if (value != NULL && rc >= 0)
    *value = op.value;
  return rc;
}

void rlock_latch_free(rlock_latch *latch) { rlock_free((rlock *)latch); }

int rlock_latch_try_set_count(rlock_latch *latch, int64_t count) {
  int rc = check(latch);
  if (rc != 0)
    return rc;
  if (count < 1)
    return rlock__bad_arg("count must be >= 1");
  set_op s;
  memset(&s, 0, sizeof(s));
  rlock__op_init(&s.op, (rlock *)latch, &set_type, 0);
  s.count = count;
  return rlock__op_run_sync(&s.op);
}

int rlock_latch_count_down(rlock_latch *latch) {
  int rc = check(latch);
  return rc != 0 ? rc : run(latch, &count_down_type, NULL);
}

int64_t rlock_latch_count(rlock_latch *latch) {
  int rc = check(latch);
  if (rc != 0)
    return rc;
  int64_t count = 0;
  rc = run(latch, &get_count_type, &count);
  return rc < 0 ? rc : count;
}

int rlock_latch_delete(rlock_latch *latch) {
  int rc = check(latch);
  return rc != 0 ? rc : run(latch, &delete_type, NULL);
}

/* The engine needs a lease it can check (not 0); with no hold part nothing is
 * held, so it is never sent or used. */
#define AWAIT_LEASE (-1)

int rlock_latch_await(rlock_latch *latch, int64_t wait_ms) {
  int rc = check(latch);
  if (rc != 0)
    return rc;
  /* The thread id as owner: rlock_client_interrupt() of this thread ends it. */
  return rlock__acquire((rlock *)latch, rlock__thread_id(), wait_ms,
                        AWAIT_LEASE, NULL);
}

int rlock_latch_await_async(rlock_latch *latch, int64_t wait_ms, rlock_cb cb,
                            void *data, rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  int rc = check(latch);
  if (rc != 0)
    return rc;
  return rlock__op_submit_async((rlock *)latch, &rlock__op_acquire,
                                rlock__thread_id(), wait_ms, AWAIT_LEASE, cb,
                                data, req);
}
