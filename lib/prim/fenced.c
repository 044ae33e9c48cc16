/* Redisson's fenced lock (getFencedLock): RLock's hash, channel and
 * release, plus a token counter (redisson_lock_token:{name}; no TTL unless
 * rlock_options.fenced_token_ttl_ms says so) incremented by every
 * acquisition, re-entry included, floored with the server's clock so that
 * tokens never go backwards after the counter was lost, and returned with
 * it; and the check call (rlock_check_token). Wire format:
 * docs/wire-protocol.md, "The fenced lock"; docs/fencing.md; scripts:
 * fenced_acquire.lua, fenced_check.lua (the rest is RLock's). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

#define TOKEN_PREFIX RLOCK__FENCED_TOKEN_PREFIX

static const rlock__script acquire_script = {
    "fenced_acquire", RLOCK__LUA_FENCED_ACQUIRE_BODY,
    RLOCK__LUA_FENCED_ACQUIRE_SHA, false};
static const rlock__script check_script = {
    "fenced_check", RLOCK__LUA_FENCED_CHECK_BODY, RLOCK__LUA_FENCED_CHECK_SHA,
    false};

/* The token key: "redisson_lock_token:" + tag, in buf (NULL if too long). */
static const char *token_key(const rlock *lock, char *buf, size_t cap,
                             size_t *len) {
  int n = snprintf(buf, cap, TOKEN_PREFIX "%s", lock->tag);
  if (n < 0 || (size_t)n >= cap)
    return NULL;
  *len = (size_t)n;
  return buf;
}

static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  rlock *lock = op->lock;
  char *key = malloc(sizeof(TOKEN_PREFIX) + lock->tag_len);
  if (key == NULL)
    return NULL;
  size_t key_len = 0;
  token_key(lock, key, sizeof(TOKEN_PREFIX) + lock->tag_len, &key_len);
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, key, key_len);
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, op->owner);
  rlock__argv_int(&a, op->engine->core->opts.fenced_token_ttl_ms);
  /* Never re-sent (as RLock's): a second try could count twice. */
  rlock__cmd *cmd = rlock__cmd_send(op->engine->net, &acquire_script, a.argc,
                                    a.argv, a.lens, 0, cb, op);
  free(key);
  return cmd;
}

/* {-1, token}: acquired, op->value = token. {pttl, -1}: held by another
 * (pttl -1: a lock key without TTL). */
static int read_try(rlock__op *op, const redisReply *reply, int64_t *ttl_ms) {
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
      reply->element[0]->type != REDIS_REPLY_INTEGER ||
      reply->element[1]->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "fenced acquire script replied an unexpected "
                         "value (type %d)", reply->type);
    return RLOCK_EPROTO;
  }
  long long token = reply->element[1]->integer;
  if (token >= 1) {
    op->value = token;
    return RLOCK__TRY_ACQUIRED;
  }
  *ttl_ms = reply->element[0]->integer;
  return RLOCK__TRY_WAIT;
}

/* ---- the current token (getToken) ---- */

static void token_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  if (reply->type == REDIS_REPLY_NIL) {
    op->value = 0;
    rlock__op_finish(op, 0);
    return;
  }
  char *end = NULL;
  if (reply->type == REDIS_REPLY_STRING)
    op->value = strtoll(reply->str, &end, 10);
  if (end == NULL || end == reply->str || *end != '\0') {
    rlock__op_detail(op, "the token key does not hold a number");
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  rlock__op_finish(op, 0);
}

/* The token key of op's lock, malloc'd; NULL: op finished with
 * RLOCK_ENOMEM. */
static char *op_token_key(rlock__op *op, size_t *len) {
  char *key = rlock__fenced_token_key(op->lock, len);
  if (key == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
  return key;
}

static void start_token(rlock__op *op) {
  size_t len = 0;
  char *key = op_token_key(op, &len);
  if (key == NULL)
    return;
  const char *argv[2] = {"GET", key};
  size_t lens[2] = {3, len};
  rlock__op_send(op, NULL, 2, argv, lens,
                 op->engine->core->opts.retry_attempts, token_reply);
  free(key); /* the command record copied it */
}

static const rlock__op_type token_type = {.name = "fenced_token",
                                          .start = start_token};

/* ---- the check call (rlock_check_token) ---- */

typedef struct check_op {
  rlock__op op;
  int64_t token; /* the caller's */
} check_op;

/* {held, token}: held 0/1, token a decimal string or nil. The state goes
 * to op->value. */
static void check_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  const redisReply *held = NULL, *tok = NULL;
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
    held = reply->element[0];
    tok = reply->element[1];
  }
  long long latest = 0;
  char *end = NULL;
  if (tok != NULL && tok->type == REDIS_REPLY_STRING && tok->len > 0)
    latest = strtoll(tok->str, &end, 10);
  bool no_counter = tok != NULL && tok->type == REDIS_REPLY_NIL;
  if (held == NULL || held->type != REDIS_REPLY_INTEGER ||
      (!no_counter && (end == NULL || end != tok->str + tok->len))) {
    rlock__op_detail(op, "fenced check script replied an unexpected value "
                         "(or the token key of '%s' does not hold a number)",
                     op->lock->name);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  int64_t token = RLOCK__CONTAINER_OF(op, check_op, op)->token;
  if (held->integer == 0)
    op->value = RLOCK_FENCE_FREE;
  else if (no_counter)
    op->value = RLOCK_FENCE_UNKNOWN;
  else
    op->value = token >= latest ? RLOCK_FENCE_CURRENT : RLOCK_FENCE_STALE;
  rlock__op_finish(op, 0);
}

/* One read (a script over the lock key and the token key, one slot);
 * re-sent after a timeout. */
static void start_check(rlock__op *op) {
  size_t len = 0;
  char *key = op_token_key(op, &len);
  if (key == NULL)
    return;
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  rlock__argv_mem(&a, key, len);
  rlock__op_send(op, &check_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, check_reply);
  free(key); /* the command record copied it */
}

static const rlock__op_type check_type = {.name = "fenced_check",
                                          .start = start_check};

const rlock__prim rlock__prim_fenced = {
    .kind = "fenced",
    .channel_prefix = RLOCK__LOCK_CHANNEL_PREFIX,
    .send_try = send_try,
    .read_try = read_try,
    .on_message = rlock__lock_on_message,
    .ops = &rlock__lock_ops,
    .hold = &rlock__lock_hold};

/* ---- the public API ---- */

static int fenced_acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                          int64_t lease_ms, int64_t *token) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  if (lock->prim != &rlock__prim_fenced)
    return rlock__bad_arg("not a fenced lock (use rlock_new_fenced)");
  if (token == NULL)
    return rlock__bad_arg("token is NULL");
  return rlock__acquire(lock, owner, wait_ms, lease_ms, token);
}

int rlock_lock_fenced_owner(rlock *lock, uint64_t owner, int64_t lease_ms,
                            int64_t *token) {
  int rc = fenced_acquire(lock, owner, -1, lease_ms, token);
  return rc == 1 ? 0 : (rc == 0 ? RLOCK_EPROTO : rc);
}

int rlock_try_lock_fenced_owner(rlock *lock, uint64_t owner, int64_t wait_ms,
                                int64_t lease_ms, int64_t *token) {
  return fenced_acquire(lock, owner, wait_ms, lease_ms, token);
}

int rlock_lock_fenced(rlock *lock, int64_t lease_ms, int64_t *token) {
  return rlock_lock_fenced_owner(lock, rlock__thread_id(), lease_ms, token);
}

int rlock_try_lock_fenced(rlock *lock, int64_t wait_ms, int64_t lease_ms,
                          int64_t *token) {
  return rlock_try_lock_fenced_owner(lock, rlock__thread_id(), wait_ms,
                                     lease_ms, token);
}

int rlock_fenced_token(rlock *lock, int64_t *token) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  if (lock->prim != &rlock__prim_fenced)
    return rlock__bad_arg("not a fenced lock (use rlock_new_fenced)");
  if (token == NULL)
    return rlock__bad_arg("token is NULL");
  rlock__op op;
  rlock__op_init(&op, lock, &token_type, 0);
  int rc = rlock__op_run_sync(&op);
  if (rc >= 0)
    *token = op.value;
  return rc;
}

static int check_args(const rlock *lock, int64_t token) {
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  if (lock->prim != &rlock__prim_fenced)
    return rlock__bad_arg("not a fenced lock (use rlock_new_fenced)");
  if (token < 1)
    return rlock__bad_arg("a fencing token is >= 1");
  return 0;
}

int rlock_check_token(rlock *lock, int64_t token) {
  int rc = check_args(lock, token);
  if (rc != 0)
    return rc;
  check_op c;
  memset(&c, 0, sizeof(c));
  rlock__op_init(&c.op, lock, &check_type, 0);
  c.token = token;
  rc = rlock__op_run_sync(&c.op);
  return rc < 0 ? rc : (int)c.op.value;
}

int rlock_check_token_async(rlock *lock, int64_t token, rlock_cb cb,
                             void *data, rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  int rc = check_args(lock, token);
  if (rc != 0)
    return rc;
  rlock__op *op = rlock__req_new(lock, &check_type, 0, sizeof(check_op),
                                 (rlock__async_cb)cb, data);
  if (op == NULL)
    return RLOCK_ENOMEM;
  RLOCK__CONTAINER_OF(op, check_op, op)->token = token;
  return rlock__req_submit(op, req);
}

/* ---- names for introspection (info.c) ---- */

char *rlock__fenced_token_key(const rlock *lock, size_t *len) {
  return rlock__prefixed(TOKEN_PREFIX, lock->tag, lock->tag_len, len);
}
