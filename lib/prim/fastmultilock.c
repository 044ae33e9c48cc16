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
 * The acquire runs the engine's wait loop through this descriptor (its
 * wait part only: like the semaphores, an acquisition is not a hold the
 * engine records, renews or trims); the values' field names travel in the
 * op (fml_op embeds rlock__op). Release, renewal, force unlock and the
 * queries are ops of this file. A lease is required: nothing renews the
 * fields by itself (rlock_fast_multilock_renew_owner() does on request). */
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

struct rlock_fast_multilock {
  rlock *h;        /* the group's handle (this kind's descriptor) */
  size_t n;        /* distinct values */
  atomic_llong lease_ms; /* the last acquire's, re-applied by a release */
  fml_field fields[];
};

int rlock__fast_multilock_wrap(rlock *h, const char *const *values,
                               const size_t *lens, size_t n,
                               rlock_fast_multilock **out) {
  if (values == NULL || n == 0 ||
      n > (SIZE_MAX - sizeof(rlock_fast_multilock)) / sizeof(fml_field)) {
    rlock__handle_release(h);
    return rlock__bad_arg("a FasterMultiLock needs at least one value");
  }
  rlock_fast_multilock *f =
      malloc(sizeof(*f) + n * sizeof(fml_field));
  if (f == NULL) {
    rlock__handle_release(h);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  f->h = h;
  f->n = 0;
  atomic_init(&f->lease_ms, 30000);
  for (size_t i = 0; i < n; i++) {
    fml_field name;
    if (values[i] == NULL ||
        rlock_fast_multilock_field_name(
            values[i], lens != NULL ? lens[i] : strlen(values[i]), name) !=
            0) {
      free(f);
      rlock__handle_release(h);
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
  *out = f;
  rlock__clear_last_error();
  return 0;
}

void rlock_fast_multilock_free(rlock_fast_multilock *f) {
  if (f == NULL)
    return;
  rlock__handle_release(f->h);
  free(f);
}

size_t rlock_fast_multilock_size(const rlock_fast_multilock *f) {
  return f != NULL ? f->n : 0;
}

/* ---- ops: a command of fixed arguments, then the fields ---- */

typedef struct fml_op {
  rlock__op op; /* first: the engine's */
  const rlock_fast_multilock *fml;
} fml_op;

#define FML_FIXED_MAX 10

/* Sends `script` with `fixed` (numkeys, keys, arguments) followed by the
 * fields; retries as given. */
static rlock__cmd *send_with_fields(rlock__op *op, const rlock__script *script,
                                    const rlock__argv *fixed, int retries,
                                    rlock__reply_cb cb, bool op_send) {
  const rlock_fast_multilock *f = RLOCK__CONTAINER_OF(op, fml_op, op)->fml;
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
    if (op_send) {
      rlock__op_send(op, script, (int)argc, argv, lens, retries, cb);
      cmd = op->cmd;
    } else {
      cmd = rlock__cmd_send(op->engine->net, script, (int)argc, argv, lens,
                            retries, cb, op);
    }
  } else if (op_send) {
    rlock__op_detail(op, "out of memory");
    rlock__op_finish(op, RLOCK_ENOMEM);
  }
  free(argv); /* the command keeps copies */
  free(lens);
  return cmd;
}

/* The shape of the acquire, the renewal and the queries: KEYS [H]; ARGV
 * `what` (a word, or the number `ms` when NULL), now, the owner (or ""),
 * the fields. Sent for op (op_send) or returned (the acquire's try). */
static rlock__cmd *send_group(rlock__op *op, const rlock__script *script,
                              const char *what, int64_t ms, bool with_owner,
                              rlock__reply_cb cb, bool op_send) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "1");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  if (what != NULL)
    rlock__argv_str(&a, what);
  else
    rlock__argv_int(&a, ms);
  rlock__argv_int(&a, rlock__wall_ms());
  rlock__argv_str(&a, with_owner ? op->owner : "");
  /* the acquire is never re-sent (a second lock_count increment) */
  return send_with_fields(
      op, script, &a, op_send ? op->engine->core->opts.retry_attempts : 0, cb,
      op_send);
}

/* The acquire's try (Java's wait-loop form): lease, now, owner, fields. */
static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  return send_group(op, &acquire_script, NULL, lease_ms, true, cb, false);
}

static void int_reply(rlock__net *n, redisReply *reply, int err, void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  if (reply->type == REDIS_REPLY_NIL) {
    rlock__op_detail(op, "a value of the FasterMultiLock '%s' is not held "
                         "by this owner (never taken, or its hold ended)",
                     op->lock->name);
    rlock__op_finish(op, RLOCK_ENOTOWNER);
  } else if (reply->type == REDIS_REPLY_INTEGER) {
    rlock__op_finish(op, reply->integer > INT32_MAX ? INT32_MAX
                                                    : (int)reply->integer);
  } else {
    rlock__op_detail(op, "unexpected reply type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
  }
}

/* KEYS [H, channel, latch]; ARGV owner, "0", lease, publish, latch TTL,
 * now, fields. Re-sent after a timeout: the latch answers a re-send. */
static void start_release(rlock__op *op) {
  rlock *lock = op->lock;
  const rlock_fast_multilock *f = RLOCK__CONTAINER_OF(op, fml_op, op)->fml;
  uint8_t raw[16];
  char latch[RLOCK_NAME_MAX + 96];
  if (rlock__random_bytes(raw, sizeof(raw)) != 0) {
    rlock__op_detail(op, "no random bytes for the unlock latch");
    rlock__op_finish(op, RLOCK_ESYS);
    return;
  }
  int len = snprintf(latch, sizeof(latch), RLOCK__UNLOCK_LATCH_PREFIX "%.*s:",
                     (int)lock->tag_len, lock->tag);
  for (int i = 0; i < 16 && len > 0 && (size_t)len + 3 < sizeof(latch); i++)
    len += snprintf(latch + len, 3, "%02x", raw[i]);
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_mem(&a, latch, len > 0 ? (size_t)len : 0);
  rlock__argv_str(&a, op->owner);
  rlock__argv_str(&a, "0");
  rlock__argv_int(&a, (int64_t)atomic_load(&((rlock_fast_multilock *)f)->lease_ms));
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  /* the latch outlives every re-send of this release (Java's default) */
  rlock__argv_int(&a, (op->engine->core->opts.retry_attempts + 1) *
                          (op->engine->core->opts.command_timeout_ms +
                           op->engine->core->opts.retry_interval_ms));
  rlock__argv_int(&a, rlock__wall_ms());
  send_with_fields(op, &release_script, &a,
                   op->engine->core->opts.retry_attempts, int_reply, true);
}

static void start_force(rlock__op *op) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  rlock__argv_mem(&a, op->lock->channel, op->lock->channel_len);
  rlock__argv_str(&a, "0");
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  send_with_fields(op, &force_script, &a,
                   op->engine->core->opts.retry_attempts, int_reply, true);
}

static void start_renew(rlock__op *op) {
  send_group(op, &renew_script, NULL, op->lease_ms, true, int_reply, true);
}
static void start_is_locked(rlock__op *op) {
  send_group(op, &query_script, "locked", 0, false, int_reply, true);
}
static void start_is_held(rlock__op *op) {
  send_group(op, &query_script, "held", 0, true, int_reply, true);
}

static const rlock__op_type release_type = {.name = "fml_release",
                                            .start = start_release};
static const rlock__op_type force_type = {.name = "fml_force_unlock",
                                          .start = start_force};
static const rlock__op_type renew_type = {.name = "fml_renew",
                                          .start = start_renew};
static const rlock__op_type is_locked_type = {.name = "fml_is_locked",
                                              .start = start_is_locked};
static const rlock__op_type is_held_type = {.name = "fml_is_held",
                                            .start = start_is_held};

/* No per-handle queries through the generic calls: a bare handle has no
 * values. */
static const rlock__prim_ops no_ops = {0};

const rlock__prim rlock__prim_fast_multilock = {
    .kind = "fast_multilock",
    .channel_prefix = RLOCK__LOCK_CHANNEL_PREFIX,
    .send_try = send_try,
    .read_try = rlock__lock_read_try,
    .on_message = rlock__lock_on_message,
    .ops = &no_ops};

/* ---- the public calls ---- */

static int run(rlock_fast_multilock *f, const rlock__op_type *type,
               uint64_t owner, int64_t wait_ms, int64_t lease_ms) {
  if (f == NULL)
    return rlock__bad_arg("FasterMultiLock is NULL");
  fml_op o;
  memset(&o, 0, sizeof(o));
  o.fml = f;
  rlock__op_init(&o.op, f->h, type, owner);
  if (type->acquires)
    rlock__op_set_wait(&o.op, wait_ms, lease_ms);
  else
    o.op.lease_ms = lease_ms;
  return rlock__op_run_sync(&o.op);
}

/* The acquire and the renewal: a lease is required; the last one given is
 * what a release re-applies to values still held. */
static int run_leased(rlock_fast_multilock *f, const rlock__op_type *type,
                      uint64_t owner, int64_t wait_ms, int64_t lease_ms) {
  if (lease_ms < 0) {
    rlock__set_last_error("a FasterMultiLock needs a lease (lease_ms > 0): "
                          "nothing renews its values by itself");
    return RLOCK_EINVAL;
  }
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  if (f != NULL)
    atomic_store(&f->lease_ms, lease_ms);
  return run(f, type, owner, wait_ms, lease_ms);
}

int rlock_fast_multilock_try_lock_owner(rlock_fast_multilock *f,
                                        uint64_t owner, int64_t wait_ms,
                                        int64_t lease_ms) {
  return run_leased(f, &rlock__op_acquire, owner, wait_ms, lease_ms);
}

int rlock_fast_multilock_try_lock(rlock_fast_multilock *f, int64_t wait_ms,
                                  int64_t lease_ms) {
  return rlock_fast_multilock_try_lock_owner(f, rlock__thread_id(), wait_ms,
                                             lease_ms);
}

int rlock_fast_multilock_lock(rlock_fast_multilock *f, int64_t lease_ms) {
  int rc = rlock_fast_multilock_try_lock(f, -1, lease_ms);
  return rc == 1 ? 0 : rc;
}

int rlock_fast_multilock_unlock_owner(rlock_fast_multilock *f,
                                      uint64_t owner) {
  return run(f, &release_type, owner, 0, 0);
}

int rlock_fast_multilock_unlock(rlock_fast_multilock *f) {
  return rlock_fast_multilock_unlock_owner(f, rlock__thread_id());
}

int rlock_fast_multilock_renew_owner(rlock_fast_multilock *f, uint64_t owner,
                                     int64_t lease_ms) {
  return run_leased(f, &renew_type, owner, 0, lease_ms);
}

int rlock_fast_multilock_force_unlock(rlock_fast_multilock *f) {
  return run(f, &force_type, 0, 0, 0);
}

int rlock_fast_multilock_is_locked(rlock_fast_multilock *f) {
  return run(f, &is_locked_type, 0, 0, 0);
}

int rlock_fast_multilock_is_held_by_owner(rlock_fast_multilock *f,
                                          uint64_t owner) {
  return run(f, &is_held_type, owner, 0, 0);
}
