/* Redisson's fenced lock (getFencedLock): RLock's hash, channel and
 * release, plus a token counter (redisson_lock_token:{name}, no TTL)
 * incremented by every acquisition, re-entry included, and returned with
 * it. Wire format: docs/wire-protocol.md, "The fenced lock"; script:
 * fenced_acquire.lua (the rest is RLock's). */
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

static void start_token(rlock__op *op) {
  size_t cap = sizeof(TOKEN_PREFIX) + op->lock->tag_len, len = 0;
  char *key = malloc(cap);
  if (key == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  token_key(op->lock, key, cap, &len);
  const char *argv[2] = {"GET", key};
  size_t lens[2] = {3, len};
  rlock__op_send(op, NULL, 2, argv, lens,
                 op->engine->core->opts.retry_attempts, token_reply);
  free(key); /* the command record copied it */
}

static const rlock__op_type token_type = {.name = "fenced_token",
                                          .start = start_token};

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
    return rlock__bad_arg("not a fenced lock (use rlock_get_fenced)");
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
    return rlock__bad_arg("not a fenced lock (use rlock_get_fenced)");
  if (token == NULL)
    return rlock__bad_arg("token is NULL");
  rlock__op op;
  rlock__op_init(&op, lock, &token_type, 0);
  int rc = rlock__op_run_sync(&op);
  if (rc >= 0)
    *token = op.value;
  return rc;
}

/* ---- names for introspection (info.c) ---- */

char *rlock__fenced_token_key(const rlock *lock, size_t *len) {
  return rlock__prefixed(TOKEN_PREFIX, lock->tag, lock->tag_len, len);
}
