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
 * engine records, renews or trims); the values' field names live in the
 * handle (rlock__handle_new_size), so its ops are plain rlock__ops. The
 * public lock calls reach this file through the descriptor's `calls`
 * (acquire and release: the watchdog) and `ops` (queries, force unlock).
 * Release, renewal, force unlock and the queries are ops of this file.
 * Without a lease (lease_ms < 0) the values are taken for the client's
 * watchdog timeout and renewed by a watchdog of this file (Java's
 * FastMultilockTask): a long-running op per (handle, owner) that sends the
 * renewal script every watchdog_timeout/3 until the owner's last release, the
 * loss of the hold, the handle's free or the client's close (which finishes
 * every running op). */
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
typedef struct fml_wd fml_wd;

/* The handle: an rlock of this kind (rlock__handle_new_size) with the
 * values' field names. Its references: the user's, those of calls in
 * flight, and one per watchdog op - a watchdog may outlive rlock_free()
 * until the loop thread has stopped it (fml_user_free). */
typedef struct fml {
  rlock h;               /* first: the handle */
  fml_wd *wds;           /* loop thread: the running watchdogs, one per owner */
  size_t n;              /* distinct values */
  atomic_llong lease_ms; /* the last acquire's, re-applied by a release */
  /* rlock_free() was called: a watchdog that starts after it (an async
   * acquire that ends later) stops at once - the values end with their
   * lease, as they would at the free. */
  atomic_bool user_freed;
  fml_field fields[];
} fml;

static fml *fml_of_lock(rlock *lock) { return (fml *)lock; }

size_t rlock__fast_multilock_size(size_t n) {
  if (n > (SIZE_MAX - sizeof(fml)) / sizeof(fml_field))
    return 0;
  return sizeof(fml) + n * sizeof(fml_field);
}

int rlock__fast_multilock_fill(rlock *h, const char *const *values,
                               const size_t *lens, size_t n) {
  fml *f = fml_of_lock(h);
  f->wds = NULL;
  f->n = 0;
  atomic_init(&f->lease_ms, 30000);
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

/* ---- ops: a command of fixed arguments, then the fields ---- */

#define FML_FIXED_MAX 10

/* Sends `script` with `fixed` (numkeys, keys, arguments) followed by the
 * fields; retries as given. */
static rlock__cmd *send_with_fields(rlock__op *op, const rlock__script *script,
                                    const rlock__argv *fixed, int retries,
                                    rlock__reply_cb cb, bool op_send) {
  const fml *f = fml_of_lock(op->lock);
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
                              rlock__reply_cb cb, bool op_send, int retries) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "1");
  rlock__argv_mem(&a, op->lock->name, op->lock->name_len);
  if (what != NULL)
    rlock__argv_str(&a, what);
  else
    rlock__argv_int(&a, ms);
  rlock__argv_int(&a, rlock__wall_ms());
  rlock__argv_str(&a, with_owner ? op->owner : "");
  return send_with_fields(op, script, &a, retries, cb, op_send);
}

/* The acquire's try (Java's wait-loop form): lease, now, owner, fields. */
static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  /* never re-sent (a second lock_count increment) */
  return send_group(op, &acquire_script, NULL, lease_ms, true, cb, false, 0);
}

/* A reply of the release, force unlock, renewal and queries: its integer,
 * or an error with op's detail set. */
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

/* ---- the watchdog (lease_ms < 0) ----
 * One op per (handle, owner), on the handle's list while it runs: armed
 * every watchdog_timeout/3, it sends the renewal script (lease = the
 * watchdog timeout; re-sent as any idempotent command). A renewal answered
 * 0 means the hold is gone (expired, deleted, taken over): the watchdog
 * stops renewing, says so (diagnostic, on_lock_lost with the group and
 * the owner) and stays on the list, idle, so that the owner's next unlock
 * answers RLOCK_ELOCKLOST. A transport or error reply only waits for the
 * next period (the lease is three periods long). The op finishes - and
 * leaves the list, dropping its reference on the handle - at the owner's
 * last release, at that unlock after a loss, at the handle's free (a task
 * on the loop thread) or when the client closes (the engine finishes
 * every running op). An unlock pauses it first (its renewal in flight is
 * abandoned: a "0" answered after the unlock ran is no loss) and the
 * release's reply resumes it when values stay held (re-entry). */

struct fml_wd {
  rlock__op op; /* first: the op */
  fml_wd *next;
  bool linked; /* on the handle's list (started) */
  bool lost;   /* a renewal found the hold gone */
};

static const rlock__op_type wd_type;

static fml_wd *wd_of(rlock__op *op) {
  return RLOCK__CONTAINER_OF(op, fml_wd, op);
}

static fml *fml_of(rlock__op *op) { return fml_of_lock(op->lock); }

static fml_wd *wd_find(fml *f, const char *owner) {
  for (fml_wd *w = f->wds; w != NULL; w = w->next)
    if (strcmp(w->op.owner, owner) == 0)
      return w;
  return NULL;
}

static void wd_arm(fml_wd *w) {
  rlock__op *op = &w->op;
  int64_t period = op->engine->core->opts.watchdog_timeout_ms / 3;
  op->state = RLOCK__ST_WAITING;
  rlock__timed_start(op->engine->core, &op->timer,
                     rlock__now_ms() + (period > 0 ? period : 1));
}

/* Stops renewing (loop thread): no timer, no command. */
static void wd_pause(fml_wd *w) {
  rlock__op *op = &w->op;
  rlock__cmd_abandon(op->cmd);
  op->cmd = NULL;
  rlock__timed_stop(op->engine->core, &op->timer);
}

static void wd_reply(rlock__net *n, redisReply *reply, int err, void *data) {
  (void)n;
  rlock__op *op = data;
  fml_wd *w = wd_of(op);
  rlock__core *core = op->engine->core;
  op->cmd = NULL;
  if (err == RLOCK_ECLOSED)
    return; /* the close finishes the op */
  if (err == 0 && reply->type == REDIS_REPLY_INTEGER && reply->integer == 0) {
    w->lost = true;
    op->state = RLOCK__ST_WAITING; /* idle until unlock, free or close */
    rlock__diag(core, RLOCK_DIAG_ERROR,
                "renewal found the FasterMultiLock '%.200s' no longer held "
                "by %s: lock lost",
                op->lock->name, op->owner);
    const rlock_options *o = &core->opts;
    if (o->on_lock_lost != NULL)
      o->on_lock_lost(op->lock->name, op->owner, o->on_lock_lost_data);
    return;
  }
  if (err != 0 || reply->type != REDIS_REPLY_INTEGER) {
    int rc = int_result(op, reply, err);
    rlock__diag(core, RLOCK_DIAG_WARN,
                "renewal of the FasterMultiLock '%.200s' by %s failed (%s: "
                "%s); trying again next period",
                op->lock->name, op->owner, rlock_err_name(rc),
                op->detail[0] != '\0' ? op->detail : rlock_strerror(rc));
    op->detail[0] = '\0';
  }
  wd_arm(w);
}

static void wd_fire(rlock__timed *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, timer);
  op->state = RLOCK__ST_CMD;
  op->cmd = send_group(op, &renew_script, NULL,
                       op->engine->core->opts.watchdog_timeout_ms, true,
                       wd_reply, false, op->engine->core->opts.retry_attempts);
  if (op->cmd == NULL) /* out of memory: the next period */
    wd_arm(wd_of(op));
}

static void wd_start(rlock__op *op) {
  fml_wd *w = wd_of(op);
  fml *f = fml_of(op);
  if (atomic_load(&f->user_freed)) {
    /* fml_user_free's stop may have run already: nothing would stop it */
    rlock__op_finish(op, 0);
    return;
  }
  fml_wd *old = wd_find(f, op->owner);
  if (old != NULL && !old->lost) {
    /* A re-entry: the running watchdog renews every value already. */
    rlock__op_finish(op, 0);
    return;
  }
  if (old != NULL) /* taken again after a loss: this one takes over */
    rlock__op_finish(&old->op, 0);
  w->next = f->wds;
  f->wds = w;
  w->linked = true;
  op->timer.fire = wd_fire;
  wd_arm(w);
}

/* Completion, exactly once (finished, or rejected before it started):
 * leaves the list and lets go of the handle. */
static void wd_done(rlock__op *op) {
  fml_wd *w = wd_of(op);
  fml *f = fml_of(op);
  if (w->linked) {
    fml_wd **p = &f->wds;
    while (*p != w)
      p = &(*p)->next;
    *p = w->next;
  }
  free(w);
  rlock__handle_release(&f->h);
}

static const rlock__op_type wd_type = {.name = "fml_watchdog",
                                       .start = wd_start};

/* A watchdog op for owner, not yet submitted (NULL: out of memory, last
 * error set). Any thread. */
static fml_wd *wd_new(fml *f, uint64_t owner) {
  fml_wd *w = calloc(1, sizeof(*w));
  if (w == NULL) {
    rlock__set_last_error("out of memory");
    return NULL;
  }
  rlock__op_init(&w->op, &f->h, &wd_type, owner);
  w->op.done = wd_done;
  return w;
}

/* Starts w on the loop thread after its owner took the values. When the
 * client is closed (or this is a forked child) nothing can renew: the
 * values end with their lease. */
static void wd_submit(fml *f, fml_wd *w) {
  atomic_fetch_add(&f->h.refs, 1);
  if (rlock__core_submit(f->h.engine->core, &w->op.task) != 0) {
    atomic_fetch_sub(&f->h.refs, 1);
    free(w);
  }
}

/* The free's task: stops the handle's watchdogs on the loop thread, then
 * drops the user's reference. Rejected (the client closes): the close
 * finishes them. */
typedef struct fml_stop {
  rlock__task task;
  fml *f;
} fml_stop;

static void stop_run(rlock__task *t) {
  fml_stop *s = RLOCK__CONTAINER_OF(t, fml_stop, task);
  while (s->f->wds != NULL) /* each finish unlinks it (wd_done) */
    rlock__op_finish(&s->f->wds->op, 0);
  rlock__handle_release(&s->f->h);
  free(s);
}

static void stop_reject(rlock__task *t, int err) {
  (void)err;
  fml_stop *s = RLOCK__CONTAINER_OF(t, fml_stop, task);
  rlock__handle_release(&s->f->h);
  free(s);
}

/* rlock_free() (the descriptor's user_free): stops the watchdogs first. */
static void fml_user_free(rlock *lock) {
  fml *f = fml_of_lock(lock);
  atomic_store(&f->user_freed, true);
  /* Only the user's calls submit watchdogs: with no reference but the
   * user's, none runs or will. */
  if (atomic_load(&f->h.refs) > 1) {
    fml_stop *s = malloc(sizeof(*s));
    if (s != NULL) {
      s->task.run = stop_run;
      s->task.reject = stop_reject;
      s->f = f;
      if (rlock__core_submit(f->h.engine->core, &s->task) == 0)
        return;
      free(s);
    }
    /* Closed (the close finishes the watchdogs), forked, or out of memory
     * (they run until the unlock or the close): the last one frees. */
  }
  rlock__handle_release(&f->h);
}

/* The release's reply: a watchdog of the owner resumes while values stay
 * held (0), else stops; after a loss the answer is RLOCK_ELOCKLOST. */
static void release_reply(rlock__net *n, redisReply *reply, int err,
                          void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  int rc = int_result(op, reply, err);
  fml_wd *w = wd_find(fml_of(op), op->owner);
  if (w != NULL) {
    if (w->lost) {
      rlock__op_detail(op, "the FasterMultiLock '%s' was lost: a renewal "
                           "found it no longer held by %s (it expired or "
                           "was deleted)",
                       op->lock->name, op->owner);
      rc = RLOCK_ELOCKLOST;
    }
    if (rc == 0 && !w->lost)
      wd_arm(w);
    else
      rlock__op_finish(&w->op, 0);
  }
  rlock__op_finish(op, rc);
}

/* KEYS [H, channel, latch]; ARGV owner, "0", lease, publish, latch TTL,
 * now, fields. Re-sent after a timeout: the latch answers a re-send. */
static void start_release(rlock__op *op) {
  rlock *lock = op->lock;
  fml *f = fml_of(op);
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
  rlock__argv_int(&a, (int64_t)atomic_load(&f->lease_ms));
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  /* the latch outlives every re-send of this release (Java's default) */
  rlock__argv_int(&a, (op->engine->core->opts.retry_attempts + 1) *
                          (op->engine->core->opts.command_timeout_ms +
                           op->engine->core->opts.retry_interval_ms));
  rlock__argv_int(&a, rlock__wall_ms());
  fml_wd *w = wd_find(fml_of(op), op->owner);
  if (w != NULL)
    wd_pause(w);
  send_with_fields(op, &release_script, &a,
                   op->engine->core->opts.retry_attempts, release_reply, true);
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

static void send_op(rlock__op *op, const rlock__script *script,
                    const char *what, int64_t ms, bool with_owner) {
  send_group(op, script, what, ms, with_owner, int_reply, true,
             op->engine->core->opts.retry_attempts);
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

static const rlock__op_type release_type = {.name = "fml_release",
                                            .start = start_release,
                                            .zero_on_success = true};
static const rlock__op_type force_type = {.name = "fml_force_unlock",
                                          .start = start_force};
static const rlock__op_type renew_type = {.name = "fml_renew",
                                          .start = start_renew};
static const rlock__op_type is_locked_type = {.name = "fml_is_locked",
                                              .start = start_is_locked};
static const rlock__op_type is_held_type = {.name = "fml_is_held",
                                            .start = start_is_held};

/* ---- the lock calls (rlock__prim_calls: the watchdog starts after an
 * acquire without a lease; the queries and force unlock are the ops) ---- */

static int run(rlock *lock, const rlock__op_type *type, uint64_t owner,
               int64_t wait_ms, int64_t lease_ms) {
  rlock__op op;
  rlock__op_init(&op, lock, type, owner);
  if (type->acquires)
    rlock__op_set_wait(&op, wait_ms, lease_ms);
  else
    op.lease_ms = lease_ms;
  return rlock__op_run_sync(&op);
}

/* Before an acquire: the lease a release re-applies, and (watchdog mode)
 * the watchdog to start once the values are taken - made first, so that
 * starting it then cannot fail. 0 or RLOCK_ENOMEM. */
static int before_acquire(fml *f, uint64_t owner, int64_t lease_ms,
                          fml_wd **w) {
  *w = NULL;
  if (lease_ms < 0 && (*w = wd_new(f, owner)) == NULL)
    return RLOCK_ENOMEM;
  atomic_store(&f->lease_ms, lease_ms > 0
                                 ? lease_ms
                                 : f->h.engine->core->opts.watchdog_timeout_ms);
  return 0;
}

static void after_acquire(fml *f, fml_wd *w, int rc) {
  if (w != NULL && rc == 1)
    wd_submit(f, w);
  else
    free(w);
}

/* The acquire: lease_ms > 0, or < 0 for the watchdog (the values taken for
 * watchdog_timeout_ms and renewed). The lease given is what a release
 * re-applies to values still held. */
static int fml_acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                       int64_t lease_ms) {
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  fml *f = fml_of_lock(lock);
  fml_wd *w = NULL;
  rc = before_acquire(f, owner, lease_ms, &w);
  if (rc != 0)
    return rc;
  rc = run(lock, &rlock__op_acquire, owner, wait_ms, lease_ms);
  after_acquire(f, w, rc);
  return rc;
}

/* The async acquire: the engine's acquire op, whose callback starts the
 * watchdog before the caller's (on the loop thread). */
typedef struct fml_async {
  fml *f;
  fml_wd *w;
  rlock_cb cb;
  void *data;
} fml_async;

static void acquired_cb(int status, int64_t value, void *data) {
  fml_async *a = data;
  after_acquire(a->f, a->w, status);
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
  fml_async *a = calloc(1, sizeof(*a));
  if (a == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  a->f = fml_of_lock(lock);
  a->cb = cb;
  a->data = data;
  rc = before_acquire(a->f, owner, lease_ms, &a->w);
  if (rc == 0)
    rc = rlock__op_submit_async(lock, &rlock__op_acquire, owner, wait_ms,
                                lease_ms, acquired_cb, a, req);
  if (rc != 0) {
    free(a->w);
    free(a);
  }
  return rc;
}

static int fml_release(rlock *lock, uint64_t owner) {
  return run(lock, &release_type, owner, 0, 0);
}

static int fml_release_async(rlock *lock, uint64_t owner, rlock_cb cb,
                             void *data, rlock_req **req) {
  return rlock__op_submit_async(lock, &release_type, owner, 0, 0, cb, data,
                                req);
}

static size_t fml_members(const rlock *lock, size_t *quorum) {
  *quorum = ((const fml *)lock)->n;
  return *quorum;
}

static const rlock__prim_calls fml_calls = {
    .acquire_async = fml_acquire_async,
    .acquire = fml_acquire,
    .release_async = fml_release_async,
    .release = fml_release,
    .members = fml_members,
    /* is_held, is_locked and force_unlock: fml_ops */
    .unsupported =
        "a FasterMultiLock keeps no hold count or TTL of its own, and its "
        "renewal is its own watchdog: hold_count, remain_ttl, "
        "force_unlock_holder, is_lease_guaranteed and the fenced calls are "
        "not supported"};

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
    .user_free = fml_user_free};

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
  return rc != 0 ? rc : run(lock, &renew_type, owner, 0, lease_ms);
}
