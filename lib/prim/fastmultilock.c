/* Redisson's FasterMultiLock (getMultiLock(group, values)): a set of values
 * of one group locked all-or-nothing in one script call, on one hash per
 * group (the group's name), whose fields are named after a hash of each
 * value: base64 of HighwayHash-128 with Redisson's key, without the
 * trailing "==" (docs/wire-protocol.md, "The FasterMultiLock"). Per field f
 * the hash keeps f -> holder, f:<owner>:expire_time (absolute client
 * wall-clock ms) and f:<owner>:lock_count. Waiters wait on the group's
 * RLock channel, with the script's reply (ms until the latest other hold
 * of one of the values ends) as the wake-up hint.
 *
 * The acquire and the release are the engine's, driven by this
 * descriptor: an acquisition is a hold the engine records, renews, and
 * releases (events, stats, lease safety as for a lock). A hold is one per
 * (group, owner, handle): the handle carries the values' field names, so
 * the engine renews each hold from its handle through the hold part's
 * send_renew (Java's FastMultilockTask script, every watchdog_timeout/3
 * for the holds taken without a lease). Nothing is trimmed after a lost
 * acquire reply (a re-sent try would count the values twice): the error
 * ends the call and what it may have taken expires with its lease. The
 * public lock calls reach this file through the descriptor's `calls`
 * (the async acquire and the member count; the others are left to the
 * engine) and `ops` (queries, force unlock). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

static const rlock__script acquire_script = {
    "fml_acquire", RLOCK__LUA_FML_ACQUIRE_BODY, RLOCK__LUA_FML_ACQUIRE_SHA,
    false};
static const rlock__script release_script = {
    "fml_release", RLOCK__LUA_FML_RELEASE_BODY, RLOCK__LUA_FML_RELEASE_SHA,
    false};
static const rlock__script force_script = {
    "fml_force_unlock", RLOCK__LUA_FML_FORCE_UNLOCK_BODY,
    RLOCK__LUA_FML_FORCE_UNLOCK_SHA, false};
static const rlock__script renew_script = {
    "fml_renew", RLOCK__LUA_FML_RENEW_BODY, RLOCK__LUA_FML_RENEW_SHA, false};
static const rlock__script query_script = {
    "fml_query", RLOCK__LUA_FML_QUERY_BODY, RLOCK__LUA_FML_QUERY_SHA, false};

/* ---- field names: HighwayHash-128 (Google's algorithm, as Redisson's
 * misc/Hash uses it) with Redisson's key, the two 64-bit halves
 * big-endian, base64 without padding ---- */

typedef struct hh_state {
  uint64_t v0[4], v1[4], mul0[4], mul1[4];
} hh_state;

static void hh_reset(const uint64_t key[4], hh_state *s) {
  static const uint64_t m0[4] = {0xdbe6d5d5fe4cce2full, 0xa4093822299f31d0ull,
                                 0x13198a2e03707344ull, 0x243f6a8885a308d3ull};
  static const uint64_t m1[4] = {0x3bd39e10cb0ef593ull, 0xc0acf169b5f18a8cull,
                                 0xbe5466cf34e90c6cull, 0x452821e638d01377ull};
  for (int i = 0; i < 4; i++) {
    s->mul0[i] = m0[i];
    s->mul1[i] = m1[i];
    s->v0[i] = m0[i] ^ key[i];
    s->v1[i] = m1[i] ^ ((key[i] >> 32) | (key[i] << 32));
  }
}

static void hh_zipper(uint64_t v1, uint64_t v0, uint64_t *add1,
                      uint64_t *add0) {
  *add0 += (((v0 & 0xff000000ull) | (v1 & 0xff00000000ull)) >> 24) |
           (((v0 & 0xff0000000000ull) | (v1 & 0xff000000000000ull)) >> 16) |
           (v0 & 0xff0000ull) | ((v0 & 0xff00ull) << 32) |
           ((v1 & 0xff00000000000000ull) >> 8) | (v0 << 56);
  *add1 += (((v1 & 0xff000000ull) | (v0 & 0xff00000000ull)) >> 24) |
           (v1 & 0xff0000ull) | ((v1 & 0xff0000000000ull) >> 16) |
           ((v1 & 0xff00ull) << 24) | ((v0 & 0xff000000000000ull) >> 8) |
           ((v1 & 0xffull) << 48) | (v0 & 0xff00000000000000ull);
}

static void hh_update(const uint64_t lanes[4], hh_state *s) {
  for (int i = 0; i < 4; i++) {
    s->v1[i] += s->mul0[i] + lanes[i];
    s->mul0[i] ^= (s->v1[i] & 0xffffffffull) * (s->v0[i] >> 32);
    s->v0[i] += s->mul1[i];
    s->mul1[i] ^= (s->v0[i] & 0xffffffffull) * (s->v1[i] >> 32);
  }
  hh_zipper(s->v1[1], s->v1[0], &s->v0[1], &s->v0[0]);
  hh_zipper(s->v1[3], s->v1[2], &s->v0[3], &s->v0[2]);
  hh_zipper(s->v0[1], s->v0[0], &s->v1[1], &s->v1[0]);
  hh_zipper(s->v0[3], s->v0[2], &s->v1[3], &s->v1[2]);
}

static void hh_packet(const uint8_t *p, hh_state *s) {
  uint64_t lanes[4];
  for (int i = 0; i < 4; i++) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--) /* little-endian */
      v = (v << 8) | p[8 * i + b];
    lanes[i] = v;
  }
  hh_update(lanes, s);
}

static uint32_t rot32(uint32_t x, unsigned c) {
  return c == 0 ? x : (x << c) | (x >> (32 - c));
}

static void hh_remainder(const uint8_t *b, size_t m, hh_state *s) {
  size_t m4 = m & 3;
  const uint8_t *r = b + (m & ~(size_t)3);
  uint8_t pk[32] = {0};
  for (int i = 0; i < 4; i++) {
    s->v0[i] += ((uint64_t)m << 32) + m;
    uint64_t v = s->v1[i];
    s->v1[i] = rot32((uint32_t)v, (unsigned)m) |
               ((uint64_t)rot32((uint32_t)(v >> 32), (unsigned)m) << 32);
  }
  memcpy(pk, b, (size_t)(r - b));
  if (m & 16) {
    for (size_t i = 0; i < 4; i++)
      pk[28 + i] = r[i + m4 - 4];
  } else if (m4 != 0) {
    pk[16] = r[0];
    pk[17] = r[m4 >> 1];
    pk[18] = r[m4 - 1];
  }
  hh_packet(pk, s);
}

static void hh128(const uint8_t *d, size_t n, uint64_t h[2]) {
  static const uint64_t key[4] = {0x9e3779b97f4a7c15ull, 0xf39cc0605cedc834ull,
                                  0x1082276bf3a27251ull, 0xf86c6a11d0c18e95ull};
  hh_state s;
  hh_reset(key, &s);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    hh_packet(d + i, &s);
  if ((n & 31) != 0)
    hh_remainder(d + i, n & 31, &s);
  for (int k = 0; k < 6; k++) {
    uint64_t p[4];
    for (int j = 0; j < 4; j++) {
      uint64_t v = s.v0[(j + 2) & 3];
      p[j] = (v >> 32) | (v << 32);
    }
    hh_update(p, &s);
  }
  h[0] = s.v0[0] + s.mul0[0] + s.v1[2] + s.mul1[2];
  h[1] = s.v0[1] + s.mul0[1] + s.v1[3] + s.mul1[3];
}

int rlock_fast_multilock_field_name(const void *value, size_t len,
                                    char out[RLOCK_FAST_MULTILOCK_FIELD_LEN +
                                             1]) {
  static const char b64[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if ((value == NULL && len > 0) || out == NULL)
    return rlock__bad_arg("value or out is NULL");
  uint64_t h[2];
  hh128(value != NULL ? value : (const void *)"", len, h);
  uint8_t by[18] = {0};
  for (int j = 0; j < 8; j++) {
    by[j] = (uint8_t)(h[0] >> (56 - 8 * j));
    by[8 + j] = (uint8_t)(h[1] >> (56 - 8 * j));
  }
  char tmp[24];
  for (int j = 0, o = 0; j < 18; j += 3) {
    uint32_t v = (uint32_t)by[j] << 16 | (uint32_t)by[j + 1] << 8 | by[j + 2];
    tmp[o++] = b64[v >> 18 & 63];
    tmp[o++] = b64[v >> 12 & 63];
    tmp[o++] = b64[v >> 6 & 63];
    tmp[o++] = b64[v & 63];
  }
  memcpy(out, tmp, RLOCK_FAST_MULTILOCK_FIELD_LEN);
  out[RLOCK_FAST_MULTILOCK_FIELD_LEN] = '\0';
  rlock__clear_last_error();
  return 0;
}

/* ---- the handle ---- */

typedef char fml_field[RLOCK_FAST_MULTILOCK_FIELD_LEN + 1];

/* The handle: an rlock of this kind (rlock__handle_new_size) with the
 * values' field names. Its references: the user's, those of calls in
 * flight, and one per hold the engine records through it (the engine
 * renews a hold from the handle that took it: send_renew). */
typedef struct fml {
  rlock h; /* first: the handle */
  /* rlock_free() was called: a hold taken after it (an async acquire that
   * ends later) ends at once - its values expire with their lease, as
   * those held at the free do. */
  atomic_bool user_freed;
  size_t n; /* distinct values */
  fml_field fields[];
} fml;

static const fml *fml_of_lock(const rlock *lock) { return (const fml *)lock; }

size_t rlock__fast_multilock_size(size_t n) {
  if (n > (SIZE_MAX - sizeof(fml)) / sizeof(fml_field))
    return 0;
  return sizeof(fml) + n * sizeof(fml_field);
}

int rlock__fast_multilock_fill(rlock *h, const char *const *values,
                               const size_t *lens, size_t n) {
  fml *f = (fml *)h;
  f->n = 0;
  atomic_init(&f->user_freed, false);
  for (size_t i = 0; i < n; i++) {
    fml_field name;
    if (values[i] == NULL ||
        rlock_fast_multilock_field_name(
            values[i], lens != NULL ? lens[i] : strlen(values[i]), name) != 0) {
      rlock__set_last_error("value %zu is NULL", i);
      return RLOCK_EINVAL;
    }
    /* Java de-duplicates the values (a HashSet); here the first of equal
     * values keeps its place. */
    bool dup = false;
    for (size_t j = 0; j < f->n && !dup; j++)
      dup = strcmp(f->fields[j], name) == 0;
    if (!dup)
      memcpy(f->fields[f->n++], name, sizeof(name));
  }
  rlock__clear_last_error();
  return 0;
}

/* ---- commands: fixed arguments, then the fields ---- */

/* Sends `script` on the handle's engine with `fixed` (numkeys, keys,
 * arguments) followed by the fields; retries as given; data to cb. For an
 * op (op != NULL) it is the op's command (rlock__op_send: an out of memory
 * finishes the op). */
static rlock__cmd *send_with_fields(const rlock *lock, rlock__op *op,
                                    const rlock__script *script,
                                    const rlock__argv *fixed, int retries,
                                    rlock__reply_cb cb, void *data) {
  const fml *f = fml_of_lock(lock);
  size_t argc = (size_t)fixed->argc + f->n;
  const char **argv = malloc(argc * sizeof(*argv));
  size_t *lens = malloc(argc * sizeof(*lens));
  rlock__cmd *cmd = NULL;
  if (argv != NULL && lens != NULL) {
    for (int i = 0; i < fixed->argc; i++) {
      argv[i] = fixed->argv[i];
      lens[i] = fixed->lens[i];
    }
    for (size_t i = 0; i < f->n; i++) {
      argv[(size_t)fixed->argc + i] = f->fields[i];
      lens[(size_t)fixed->argc + i] = RLOCK_FAST_MULTILOCK_FIELD_LEN;
    }
    if (op != NULL) {
      rlock__op_send(op, script, (int)argc, argv, lens, retries, cb);
      cmd = op->cmd;
    } else {
      cmd = rlock__cmd_send(lock->engine->net, script, (int)argc, argv, lens,
                            retries, cb, data);
    }
  } else if (op != NULL) {
    rlock__op_detail(op, "out of memory");
    rlock__op_finish(op, RLOCK_ENOMEM);
  }
  free(argv); /* the command keeps copies */
  free(lens);
  return cmd;
}

/* The shape of the acquire, the renewal and the queries: KEYS [H]; ARGV
 * `what` (a word, or the number `ms` when NULL), now, the owner (or ""),
 * the fields. */
static void group_args(rlock__argv *a, const rlock *lock, const char *what,
                       int64_t ms, const char *owner) {
  rlock__argv_str(a, "1");
  rlock__argv_mem(a, lock->name, lock->name_len);
  if (what != NULL)
    rlock__argv_str(a, what);
  else
    rlock__argv_int(a, ms);
  rlock__argv_int(a, rlock__wall_ms());
  rlock__argv_str(a, owner);
}

/* The acquire's try (Java's wait-loop form): lease, now, owner, fields. */
static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  rlock__argv a = {0};
  group_args(&a, op->lock, NULL, lease_ms, op->owner);
  /* never re-sent (a second lock_count increment) */
  return send_with_fields(op->lock, NULL, &acquire_script, &a, 0, cb, op);
}

/* A reply of the force unlock, renewal and queries: its integer, or an
 * error with op's detail set. */
static int int_result(rlock__op *op, const redisReply *reply, int err) {
  if (err != 0)
    return err;
  if (reply->type == REDIS_REPLY_ERROR) {
    rlock__op_detail(op, "%.*s", (int)reply->len, reply->str);
    return rlock__reply_error(reply);
  }
  if (reply->type == REDIS_REPLY_NIL) {
    rlock__op_detail(op, "a value of the FasterMultiLock '%s' is not held "
                         "by this owner (never taken, or its hold ended)",
                     op->lock->name);
    return RLOCK_ENOTOWNER;
  }
  if (reply->type == REDIS_REPLY_INTEGER)
    return reply->integer > INT32_MAX ? INT32_MAX : (int)reply->integer;
  rlock__op_detail(op, "unexpected reply type %d", reply->type);
  return RLOCK_EPROTO;
}

static void int_reply(rlock__net *n, redisReply *reply, int err, void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  rlock__op_finish(op, int_result(op, reply, err));
}

/* ---- the hold part: the engine records, renews and releases the holds
 * (one per (group, owner, handle): send_renew) ---- */

/* The renewal (Java's FastMultilockTask script): KEYS [H]; ARGV the
 * watchdog timeout, now, owner, fields; 1 every field renewed, 0 gone.
 * Re-sent as any idempotent command. */
static rlock__cmd *send_renew(rlock__engine *e, rlock *lock, const char *owner,
                              int64_t timeout_ms, rlock__reply_cb cb,
                              void *data) {
  rlock__argv a = {0};
  group_args(&a, lock, NULL, timeout_ms, owner);
  return send_with_fields(lock, NULL, &renew_script, &a,
                          e->core->opts.retry_attempts, cb, data);
}

/* KEYS [H, channel, latch]; ARGV owner, "0", lease, publish, latch TTL,
 * now, fields. Re-sent after a timeout: the latch answers a re-send. */
static rlock__cmd *send_release(rlock__op *op, const char *latch,
                                int64_t lease_ms, int64_t latch_ttl_ms,
                                rlock__reply_cb cb) {
  rlock *lock = op->lock;
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_str(&a, latch);
  rlock__argv_str(&a, op->owner);
  rlock__argv_str(&a, "0");
  rlock__argv_int(&a, lease_ms);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  rlock__argv_int(&a, latch_ttl_ms);
  rlock__argv_int(&a, rlock__wall_ms());
  return send_with_fields(lock, NULL, &release_script, &a,
                          op->engine->core->opts.retry_attempts, cb, op);
}

/* nil: a value not held by the owner; 1: every value's last hold ended;
 * 0: some value is still held by the owner - through this handle's own
 * re-entry (its hold goes on), or through another handle of the owner
 * whose values overlap (that handle's hold keeps them: this one ended). */
static int read_release(rlock__op *op, const redisReply *reply) {
  if (reply->type == REDIS_REPLY_NIL)
    return RLOCK__REL_NOT_HELD;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "unexpected reply type %d", reply->type);
    return RLOCK_EPROTO;
  }
  if (reply->integer == 1)
    return RLOCK__REL_RELEASED;
  return rlock__hold_count_known(op->engine, op->lock, op->owner) > 1
             ? RLOCK__REL_HELD
             : RLOCK__REL_RELEASED;
}

static const rlock__prim_hold fml_hold = {.send_release = send_release,
                                          .read_release = read_release,
                                          .send_renew = send_renew};

/* ---- ops: force unlock, the explicit renewal and the queries ---- */

static void start_force(rlock__op *op) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  rlock__argv_mem(&a, op->lock->channel, op->lock->channel_len);
  rlock__argv_str(&a, "0");
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  send_with_fields(op->lock, op, &force_script, &a,
                   op->engine->core->opts.retry_attempts, int_reply, op);
}

static void send_op(rlock__op *op, const rlock__script *script,
                    const char *what, int64_t ms, bool with_owner) {
  rlock__argv a = {0};
  group_args(&a, op->lock, what, ms, with_owner ? op->owner : "");
  send_with_fields(op->lock, op, script, &a,
                   op->engine->core->opts.retry_attempts, int_reply, op);
}
static void start_renew(rlock__op *op) {
  send_op(op, &renew_script, NULL, op->lease_ms, true);
}
static void start_is_locked(rlock__op *op) {
  send_op(op, &query_script, "locked", 0, false);
}
static void start_is_held(rlock__op *op) {
  send_op(op, &query_script, "held", 0, true);
}

static const rlock__op_type force_type = {.name = "fml_force_unlock",
                                          .start = start_force};
static const rlock__op_type renew_type = {.name = "fml_renew",
                                          .start = start_renew};
static const rlock__op_type is_locked_type = {.name = "fml_is_locked",
                                              .start = start_is_locked};
static const rlock__op_type is_held_type = {.name = "fml_is_held",
                                            .start = start_is_held};

/* ---- the lock calls (rlock__prim_calls): the engine's (the calls left
 * NULL), but for the async acquire; the queries and force unlock are the
 * ops ---- */

/* The async acquire: the engine's acquire op, whose callback (loop
 * thread) ends the hold at once when the handle was freed meanwhile. */
typedef struct fml_async {
  rlock *lock;
  rlock_cb cb;
  void *data;
} fml_async;

static void acquired_cb(int status, int64_t value, void *data) {
  fml_async *a = data;
  if (status == 1 && atomic_load(&((fml *)a->lock)->user_freed))
    rlock__holds_end_of(a->lock->engine, a->lock);
  if (a->cb != NULL)
    a->cb(status, value, a->data);
  free(a);
}

static int fml_acquire_async(rlock *lock, uint64_t owner, int64_t wait_ms,
                             int64_t lease_ms, rlock_cb cb, void *data,
                             rlock_req **req) {
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  fml_async *a = malloc(sizeof(*a));
  if (a == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  *a = (fml_async){.lock = lock, .cb = cb, .data = data};
  rc = rlock__op_submit_async(lock, &rlock__op_acquire, owner, wait_ms,
                              lease_ms, acquired_cb, a, req);
  if (rc != 0)
    free(a);
  return rc;
}

/* The free's task: ends the handle's holds on the loop thread (their
 * values are no longer renewed and expire with their lease, as when the
 * watchdog was this file's), then drops the user's reference. Rejected
 * (the client closes): the close ends them. */
typedef struct fml_stop {
  rlock__task task;
  rlock *lock;
} fml_stop;

static void stop_run(rlock__task *t) {
  fml_stop *s = RLOCK__CONTAINER_OF(t, fml_stop, task);
  rlock__holds_end_of(s->lock->engine, s->lock);
  rlock__handle_release(s->lock);
  free(s);
}

static void stop_reject(rlock__task *t, int err) {
  (void)err;
  fml_stop *s = RLOCK__CONTAINER_OF(t, fml_stop, task);
  rlock__handle_release(s->lock);
  free(s);
}

/* rlock_free() (the descriptor's user_free). */
static void fml_user_free(rlock *lock) {
  atomic_store(&((fml *)lock)->user_freed, true);
  /* Holds and calls in flight take references: with none but the
   * user's, there is nothing to end. */
  if (atomic_load(&lock->refs) > 1) {
    fml_stop *s = malloc(sizeof(*s));
    if (s != NULL) {
      s->task.run = stop_run;
      s->task.reject = stop_reject;
      s->lock = lock;
      if (rlock__core_submit(lock->engine->core, &s->task) == 0)
        return;
      free(s);
    }
    /* Closed (the close ends the holds), forked, or out of memory (they
     * are renewed until the unlock or the close): the last one frees. */
  }
  rlock__handle_release(lock);
}

static size_t fml_members(const rlock *lock, size_t *quorum) {
  *quorum = fml_of_lock(lock)->n;
  return *quorum;
}

static const rlock__prim_calls fml_calls = {
    .acquire_async = fml_acquire_async,
    .members = fml_members,
    /* is_held, is_locked and force_unlock: fml_ops */
    .unsupported = "a FasterMultiLock keeps no hold count or TTL of its "
                   "own: hold_count, remain_ttl, force_unlock_holder and "
                   "the fenced calls are not supported"};

static const rlock__prim_ops fml_ops = {.force_unlock = &force_type,
                                        .is_locked = &is_locked_type,
                                        .is_held = &is_held_type};

const rlock__prim rlock__prim_fast_multilock = {
    .kind = "fast_multilock",
    .channel_prefix = RLOCK__LOCK_CHANNEL_PREFIX,
    .send_try = send_try,
    .read_try = rlock__lock_read_try,
    .on_message = rlock__lock_on_message,
    .ops = &fml_ops,
    .calls = &fml_calls,
    .user_free = fml_user_free,
    .hold = &fml_hold};

/* ---- the one call of its own ---- */

int rlock_fast_multilock_renew_owner(rlock *lock, uint64_t owner,
                                     int64_t lease_ms) {
  if (lock == NULL || lock->prim != &rlock__prim_fast_multilock) {
    rlock__set_last_error("%s is not a FasterMultiLock (use "
                          "rlock_new_fast_multilock)",
                          lock == NULL ? "lock" : lock->prim->kind);
    return RLOCK_EINVAL;
  }
  if (lease_ms < 0) {
    rlock__set_last_error("a FasterMultiLock renewal needs a lease "
                          "(lease_ms > 0)");
    return RLOCK_EINVAL;
  }
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  rlock__op op;
  rlock__op_init(&op, lock, &renew_type, owner);
  op.lease_ms = lease_ms;
  return rlock__op_run_sync(&op);
}
