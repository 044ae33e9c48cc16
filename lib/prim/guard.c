/* The fencing guard (rlock_guard_new; docs/fencing.md): the resource-side
 * half of a fenced lock, for data kept in Redis. The guard is a hash under
 * its own name (fields "lock" and "token") beside the data it fences; a
 * guarded write runs the caller's write - SET, HSET, INCRBY, DEL or a
 * script of the caller's - only if its token is at least the highest the
 * guard has seen, and records it, in one script on the server. No Redisson
 * counterpart (Redisson leaves this check to its users). Scripts:
 * guard_write.lua, guard_eval.lua + guard_eval_tail.lua around a caller's
 * script, both over _guard_check.lua.
 *
 * A guard has no wait and no hold: its descriptor names only the kind. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

static const rlock__script write_script = {
    "guard_write", RLOCK__LUA_GUARD_WRITE_BODY, RLOCK__LUA_GUARD_WRITE_SHA,
    false};

const rlock__prim rlock__prim_guard = {.kind = "guard",
                                       .channel_prefix = ""};

/* A guarded write: the command's arguments (after EVALSHA/EVAL) in one
 * block of its own, so an async call may return before it runs; and for a
 * caller's script, the script sent (always as EVAL: its SHA is not known
 * here). */
typedef struct guard_op {
  rlock__op op;
  int argc;
  const char **argv;
  size_t *lens;
  void *mem; /* argv, lens and the strings */
  rlock__script script;
  char *body; /* head + the caller's script + tail; NULL: guard_write */
  int64_t token;
} guard_op;

static const char *op_word(rlock_guard_op op) {
  switch (op) {
  case RLOCK_GUARD_SET:
    return "set";
  case RLOCK_GUARD_HSET:
    return "hset";
  case RLOCK_GUARD_INCRBY:
    return "incrby";
  case RLOCK_GUARD_DEL:
    return "del";
  default:
    return NULL;
  }
}

/* The argument checks of every guarded write: 0, or RLOCK_EINVAL with the
 * last error set. */
static int check_write(const rlock_guard *g, const rlock_guarded_write *w) {
  const rlock *lock = (const rlock *)g;
  if (lock == NULL)
    return rlock__bad_arg("guard is NULL");
  if (lock->prim != &rlock__prim_guard)
    return rlock__bad_arg("not a guard (use rlock_guard_new)");
  if (w == NULL)
    return rlock__bad_arg("write is NULL");
  if (w->struct_size < offsetof(rlock_guarded_write, nargs) + sizeof(size_t)
      || w->struct_size > sizeof(*w))
    return rlock__bad_arg("rlock_guarded_write.struct_size is not set "
                          "(use rlock_guarded_write_init)");
  if (w->lock_name == NULL || w->lock_name[0] == '\0')
    return rlock__bad_arg("lock_name is NULL or empty (the fenced lock the "
                          "token is from)");
  if (w->token < 1)
    return rlock__bad_arg("token must be >= 1 (a fenced lock's token)");
  if (w->op == RLOCK_GUARD_EVAL) {
    if (w->script == NULL || w->script[0] == '\0')
      return rlock__bad_arg("RLOCK_GUARD_EVAL needs a script");
    if ((w->nkeys > 0 && w->keys == NULL) ||
        (w->nargs > 0 && w->args == NULL))
      return rlock__bad_arg("keys or args is NULL with a count above 0");
    if (w->nkeys > 1000 || w->nargs > 1000)
      return rlock__bad_arg("more than 1000 keys or args");
    for (size_t i = 0; i < w->nkeys; i++)
      if (w->keys[i] == NULL)
        return rlock__bad_arg("a key of keys is NULL");
    for (size_t i = 0; i < w->nargs; i++)
      if (w->args[i] == NULL)
        return rlock__bad_arg("an argument of args is NULL");
    return 0;
  }
  if (op_word(w->op) == NULL)
    return rlock__bad_arg("op is not an rlock_guard_op");
  if (w->key == NULL)
    return rlock__bad_arg("key is NULL");
  if ((w->op == RLOCK_GUARD_SET || w->op == RLOCK_GUARD_HSET) &&
      w->value == NULL)
    return rlock__bad_arg("value is NULL");
  if (w->op == RLOCK_GUARD_HSET && w->field == NULL)
    return rlock__bad_arg("field is NULL");
  return 0;
}

/* Fills op's arguments from w: numkeys, the guard, the data keys, the lock
 * name, the token, then the write's own. 0 or RLOCK_ENOMEM. */
static int build(guard_op *g, const rlock *guard,
                 const rlock_guarded_write *w) {
  const char *list[2048 + 8];
  size_t n = 0;
  char numkeys[24], token[24], delta[24];
  bool eval = w->op == RLOCK_GUARD_EVAL;
  size_t nkeys = eval ? w->nkeys : 1;
  snprintf(numkeys, sizeof numkeys, "%zu", nkeys + 1);
  snprintf(token, sizeof token, "%" PRId64, w->token);
  snprintf(delta, sizeof delta, "%" PRId64, w->delta);
  list[n++] = numkeys;
  list[n++] = guard->name;
  if (eval)
    for (size_t i = 0; i < w->nkeys; i++)
      list[n++] = w->keys[i];
  else
    list[n++] = w->key;
  list[n++] = w->lock_name;
  list[n++] = token;
  if (eval) {
    for (size_t i = 0; i < w->nargs; i++)
      list[n++] = w->args[i];
  } else {
    list[n++] = op_word(w->op);
    if (w->op == RLOCK_GUARD_SET)
      list[n++] = w->value;
    else if (w->op == RLOCK_GUARD_HSET) {
      list[n++] = w->field;
      list[n++] = w->value;
    } else if (w->op == RLOCK_GUARD_INCRBY)
      list[n++] = delta;
  }
  size_t text = 0;
  for (size_t i = 0; i < n; i++)
    text += strlen(list[i]) + 1;
  char *mem = malloc(n * (sizeof(char *) + sizeof(size_t)) + text);
  if (mem == NULL)
    return RLOCK_ENOMEM;
  g->mem = mem;
  g->argv = (const char **)(void *)mem;
  g->lens = (size_t *)(void *)(mem + n * sizeof(char *));
  char *p = mem + n * (sizeof(char *) + sizeof(size_t));
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(list[i]);
    memcpy(p, list[i], len + 1);
    g->argv[i] = p;
    g->lens[i] = len;
    p += len + 1;
  }
  g->argc = (int)n;
  g->token = w->token;
  if (!eval) {
    g->script = write_script;
    return 0;
  }
  static const char head[] = RLOCK__LUA_GUARD_EVAL_BODY "\n";
  static const char tail[] = "\n" RLOCK__LUA_GUARD_EVAL_TAIL_BODY;
  size_t blen = strlen(w->script);
  g->body = malloc(sizeof head + blen + sizeof tail);
  if (g->body == NULL) {
    free(g->mem);
    g->mem = NULL;
    return RLOCK_ENOMEM;
  }
  memcpy(g->body, head, sizeof head - 1);
  memcpy(g->body + sizeof head - 1, w->script, blen);
  memcpy(g->body + sizeof head - 1 + blen, tail, sizeof tail);
  g->script = (rlock__script){.name = "guard_eval", .body = g->body,
                              .eval_only = true};
  return 0;
}

static void free_args(guard_op *g) {
  free(g->mem);
  free(g->body);
  g->mem = NULL;
  g->body = NULL;
}

static void finish_write(rlock__op *op, int result) {
  (void)result;
  free_args(RLOCK__CONTAINER_OF(op, guard_op, op));
}

/* Says RLOCK_EVENT_STALE for a refused write (stats count it among the
 * failures, failures[-RLOCK_ESTALE], as every failed call). */
static void emit_stale(rlock__op *op, const redisReply *reply) {
  char detail[256];
  snprintf(detail, sizeof detail, "%.*s", (int)reply->len, reply->str);
  rlock__event ev = {.pub = {.type = RLOCK_EVENT_STALE,
                             .kind = "guard",
                             .name = op->lock->name,
                             .error = RLOCK_ESTALE,
                             .detail = detail}};
  rlock__engine_emit(op->engine, &ev);
}

static void write_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__transient(err))
    rlock__op_detail(op, "no reply to the guarded write on guard '%s': it "
                         "may or may not have run (not re-sent); a write "
                         "again with the same token is accepted",
                     op->lock->name);
  if (err == 0 && reply->type == REDIS_REPLY_ERROR &&
      rlock__reply_error(reply) == RLOCK_ESTALE)
    emit_stale(op, reply);
  if (rlock__op_failed(op, reply, err))
    return;
  op->value = 0;
  if (reply->type == REDIS_REPLY_INTEGER)
    op->value = reply->integer;
  else if (reply->type == REDIS_REPLY_STRING) {
    char *end = NULL;
    long long v = strtoll(reply->str, &end, 10);
    if (reply->len > 0 && end == reply->str + reply->len)
      op->value = v;
  }
  rlock__op_finish(op, 0);
}

/* In a cluster every key of the write must be in the guard's slot (the
 * script runs where the guard is): refused here with the slots named. */
static void start_write(rlock__op *op) {
  guard_op *g = RLOCK__CONTAINER_OF(op, guard_op, op);
  rlock__net *net = op->engine->net;
  int slot = rlock__net_key_slot(net, g->argv[1], g->lens[1]);
  int nkeys = atoi(g->argv[0]);
  for (int i = 2; i <= nkeys; i++) {
    int s = rlock__net_key_slot(net, g->argv[i], g->lens[i]);
    if (s != slot) {
      rlock__op_detail(op, "key '%s' is in cluster slot %d but guard '%s' "
                           "in slot %d: a guarded write runs where its "
                           "guard is; give the keys the guard's hash tag "
                           "(nothing was written)",
                       g->argv[i], s, op->lock->name, slot);
      rlock__op_finish(op, RLOCK_ECLUSTER);
      return;
    }
  }
  /* Never re-sent: an INCRBY or a caller's script could run twice. */
  rlock__op_send(op, &g->script, g->argc, g->argv, g->lens, 0, write_reply);
}

static const rlock__op_type write_type = {
    .name = "guarded_write", .start = start_write, .finish = finish_write};

/* ---- the public API ---- */

void rlock_guard_free(rlock_guard *guard) { rlock_free((rlock *)guard); }

int rlock_guard_write(rlock_guard *guard, const rlock_guarded_write *w,
                      int64_t *result) {
  int rc = check_write(guard, w);
  if (rc != 0)
    return rc;
  guard_op g;
  memset(&g, 0, sizeof(g));
  rlock__op_init(&g.op, (rlock *)guard, &write_type, 0);
  if (build(&g, (const rlock *)guard, w) != 0) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  rc = rlock__op_run_sync(&g.op);
  free_args(&g); /* when the op never started (already closed) */
  if (rc >= 0 && result != NULL)
    *result = g.op.value;
  return rc;
}

int rlock_guard_write_async(rlock_guard *guard, const rlock_guarded_write *w,
                            rlock_cb cb, void *data, rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  int rc = check_write(guard, w);
  if (rc != 0)
    return rc;
  guard_op args;
  memset(&args, 0, sizeof(args));
  if (build(&args, (const rlock *)guard, w) != 0) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  void *mem = args.mem, *body = args.body;
  rlock__op *op = rlock__req_new((rlock *)guard, &write_type, 0,
                                 sizeof(guard_op), cb, data);
  if (op == NULL) {
    free(mem);
    free(body);
    return RLOCK_ENOMEM;
  }
  guard_op *g = RLOCK__CONTAINER_OF(op, guard_op, op);
  g->argc = args.argc;
  g->argv = args.argv;
  g->lens = args.lens;
  g->mem = args.mem;
  g->body = args.body;
  g->script = args.script;
  g->token = args.token;
  rc = rlock__req_submit(op, req);
  if (rc != 0) { /* the request is gone, its arguments are not */
    free(mem);
    free(body);
  }
  return rc;
}
