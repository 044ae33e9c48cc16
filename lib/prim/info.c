/* Introspection and administration across kinds: what is stored under a
 * name (rlock_client_info's read, one script: info_read.lua), and the release
 * of a foreign owner's holds (rlock_force_unlock_holder: the kind's own
 * trim). The key and channel names come from the primitives (their
 * handles and the rlock__*_key functions), never spelled here. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

static const rlock__script read_script = {
    "info_read", RLOCK__LUA_INFO_READ_BODY, RLOCK__LUA_INFO_READ_SHA, false};

/* Java's "no lease" score of a permit (psem.c's NO_LEASE). */
#define PERMIT_NO_LEASE INT64_C(922337203685477)

/* The elements of info_read.lua's reply. */
enum {
  R_TYPE, R_PTTL, R_NFIELDS, R_FIELDS, R_VALUE, R_SUBS, R_QLEN, R_QUEUE,
  R_DEADLINES, R_TOKEN, R_PCOUNT, R_PERMITS, R_SEC, R_USEC, R_N
};

typedef struct info_op {
  rlock__op op;
  rlock_info *out;
  /* the script's KEYS and ARGV, kept until it is sent */
  const char *argv[12];
  size_t lens[12];
} info_op;

/* ---- reading the reply ---- */

/* A decimal int64 filling the whole string. */
static bool int_of(const char *s, size_t len, int64_t *v) {
  if (len == 0 || len > 20)
    return false;
  char buf[24];
  memcpy(buf, s, len);
  buf[len] = '\0';
  char *end = NULL;
  errno = 0;
  long long n = strtoll(buf, &end, 10);
  if (errno != 0 || end != buf + len || !(buf[0] == '-' || (buf[0] >= '0' &&
                                                            buf[0] <= '9')))
    return false;
  *v = n;
  return true;
}

static bool is_str(const redisReply *r) {
  return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

static bool is_named(const redisReply *r, const char *name) {
  return is_str(r) && r->len == strlen(name) &&
         memcmp(r->str, name, r->len) == 0;
}

/* A score (Lua gives numbers back as strings) as int64; false if none. */
static bool score_of(const redisReply *r, int64_t *v) {
  if (!is_str(r))
    return false;
  char buf[64];
  size_t n = r->len < sizeof(buf) - 1 ? r->len : sizeof(buf) - 1;
  memcpy(buf, r->str, n);
  buf[n] = '\0';
  char *end = NULL;
  double d = strtod(buf, &end);
  if (end == buf || d != d || d > 9e18 || d < -9e18)
    return false;
  *v = (int64_t)d;
  return true;
}

/* Is the reply's shape the script's? (A server that answers something
 * else is reported, never trusted.) */
static bool shape_ok(const redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != R_N)
    return false;
  redisReply **e = r->element;
  if (!is_str(e[R_TYPE]) || e[R_PTTL]->type != REDIS_REPLY_INTEGER ||
      e[R_NFIELDS]->type != REDIS_REPLY_INTEGER ||
      e[R_FIELDS]->type != REDIS_REPLY_ARRAY ||
      e[R_FIELDS]->elements % 2 != 0 ||
      (e[R_VALUE]->type != REDIS_REPLY_NIL && !is_str(e[R_VALUE])) ||
      e[R_SUBS]->type != REDIS_REPLY_ARRAY || e[R_SUBS]->elements != 4 ||
      e[R_QLEN]->type != REDIS_REPLY_INTEGER ||
      e[R_QUEUE]->type != REDIS_REPLY_ARRAY ||
      e[R_DEADLINES]->type != REDIS_REPLY_ARRAY ||
      e[R_DEADLINES]->elements != e[R_QUEUE]->elements ||
      (e[R_TOKEN]->type != REDIS_REPLY_NIL && !is_str(e[R_TOKEN])) ||
      e[R_PCOUNT]->type != REDIS_REPLY_INTEGER ||
      e[R_PERMITS]->type != REDIS_REPLY_ARRAY ||
      e[R_PERMITS]->elements % 2 != 0 || !is_str(e[R_SEC]) ||
      !is_str(e[R_USEC]))
    return false;
  for (size_t i = 0; i < 4; i++)
    if (e[R_SUBS]->element[i]->type != REDIS_REPLY_INTEGER)
      return false;
  for (size_t i = 0; i < e[R_FIELDS]->elements; i++)
    if (!is_str(e[R_FIELDS]->element[i]))
      return false;
  for (size_t i = 0; i < e[R_QUEUE]->elements; i++)
    if (!is_str(e[R_QUEUE]->element[i]))
      return false;
  for (size_t i = 0; i < e[R_PERMITS]->elements; i++)
    if (!is_str(e[R_PERMITS]->element[i]))
      return false;
  return true;
}

/* The result's block: entry arrays first (malloc's alignment), then the
 * strings. */
typedef struct block {
  char *base;
  size_t entries_used, text_at, cap;
} block;

static rlock_info_entry *block_entries(block *b, size_t n) {
  rlock_info_entry *e = (rlock_info_entry *)(void *)b->base + b->entries_used;
  b->entries_used += n;
  return e;
}

static const char *block_text(block *b, const char *s, size_t len) {
  char *at = b->base + b->text_at;
  memcpy(at, s, len);
  at[len] = '\0';
  b->text_at += len + 1;
  return at;
}

static bool is_mode_field(const redisReply *f) { return is_named(f, "mode"); }

static bool ends_with(const rlock_info_entry *e, const char *suffix) {
  size_t n = strlen(suffix);
  return e->key_len > n && memcmp(e->key + e->key_len - n, suffix, n) == 0;
}

/* A FasterMultiLock group's hash (docs/wire-protocol.md, "The
 * FasterMultiLock"): each field f -> its holder's owner string, beside
 * integer fields f:<owner>:expire_time and f:<owner>:lock_count (Java may
 * leave ended holders' ones). True when every field is of that shape and at
 * least one holder has its expire_time; *live: one of them has not ended
 * by now_ms (the holders' wall clock against the server's). The integer
 * fields are no hold counts: they are then marked RLOCK_INFO_NOT_A_COUNT. */
static bool fml_group(rlock_info_entry *h, size_t n, int64_t now_ms,
                      bool *live) {
  bool pair = false;
  *live = false;
  for (size_t i = 0; i < n; i++) {
    if (h[i].count != RLOCK_INFO_NOT_A_COUNT) {
      if (!ends_with(&h[i], ":expire_time") && !ends_with(&h[i], ":lock_count"))
        return false;
      continue;
    }
    /* f -> owner: its f:<owner>:expire_time */
    size_t want = h[i].key_len + 1 + h[i].value_len + sizeof ":expire_time" - 1;
    bool found = false;
    for (size_t j = 0; j < n && !found; j++) {
      const rlock_info_entry *x = &h[j];
      if (x->count == RLOCK_INFO_NOT_A_COUNT || x->key_len != want ||
          memcmp(x->key, h[i].key, h[i].key_len) != 0 ||
          x->key[h[i].key_len] != ':' ||
          memcmp(x->key + h[i].key_len + 1, h[i].value, h[i].value_len) != 0 ||
          !ends_with(x, ":expire_time"))
        continue;
      found = true;
      if (x->count >= now_ms)
        *live = true;
    }
    if (!found)
      return false;
    pair = true;
  }
  return pair;
}

/* The index of the group's integer field "<f>:<owner><suffix>" for the
 * field entry f (key f, value owner), or n when there is none. */
static size_t fml_side(const rlock_info_entry *h, size_t n,
                       const rlock_info_entry *f, const char *suffix) {
  size_t sl = strlen(suffix);
  size_t want = f->key_len + 1 + f->value_len + sl;
  for (size_t j = 0; j < n; j++) {
    const rlock_info_entry *x = &h[j];
    if (x->count != RLOCK_INFO_NOT_A_COUNT && x->key_len == want &&
        memcmp(x->key, f->key, f->key_len) == 0 && x->key[f->key_len] == ':' &&
        memcmp(x->key + f->key_len + 1, f->value, f->value_len) == 0 &&
        memcmp(x->key + want - sl, suffix, sl) == 0)
      return j;
  }
  return n;
}

/* A group's fields as holds (fml_group() true): each value field f ->
 * owner with its f:<owner>:lock_count and f:<owner>:expire_time becomes one
 * entry, key the owner, value f, count the lock_count, ttl_ms the
 * expire_time less now_ms; those three fields are folded into it. Every
 * other field stays as stored, marked RLOCK_INFO_NOT_A_COUNT. Returns the
 * entries left (held values first, in field order). 0 or RLOCK_ENOMEM. */
static int fml_holds(rlock_info_entry *h, size_t n, int64_t now_ms,
                     size_t *left) {
  unsigned char *used = calloc(n > 0 ? n : 1, 1);
  rlock_info_entry *holds = calloc(n > 0 ? n : 1, sizeof *holds);
  if (used == NULL || holds == NULL) {
    free(used);
    free(holds);
    return RLOCK_ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (h[i].count != RLOCK_INFO_NOT_A_COUNT)
      continue;
    size_t c = fml_side(h, n, &h[i], ":lock_count");
    size_t x = fml_side(h, n, &h[i], ":expire_time");
    if (c == n || x == n || used[c] || used[x])
      continue;
    used[i] = used[c] = used[x] = 1;
    rlock_info_entry *e = &holds[k++];
    e->key = h[i].value;
    e->key_len = h[i].value_len;
    e->value = h[i].key;
    e->value_len = h[i].key_len;
    e->count = h[c].count;
    e->ttl_ms = h[x].count - now_ms;
  }
  for (size_t i = 0; i < n; i++)
    if (!used[i]) {
      holds[k] = h[i];
      holds[k++].count = RLOCK_INFO_NOT_A_COUNT;
    }
  memcpy(h, holds, k * sizeof *h);
  free(used);
  free(holds);
  *left = k;
  return 0;
}

static bool ends_with_write(const redisReply *f) {
  return f->len > 6 && memcmp(f->str + f->len - 6, ":write", 6) == 0;
}

/* A permit id as Java shows it: 16 raw bytes in lowercase hex (else the
 * member as it is). */
static const char *permit_id(block *b, const redisReply *m, size_t *len) {
  if (m->len != 16) {
    *len = m->len;
    return block_text(b, m->str, m->len);
  }
  static const char digits[] = "0123456789abcdef";
  char hex[33];
  for (int i = 0; i < 16; i++) {
    hex[2 * i] = digits[(unsigned char)m->str[i] >> 4];
    hex[2 * i + 1] = digits[(unsigned char)m->str[i] & 15];
  }
  *len = 32;
  return block_text(b, hex, 32);
}

/* Fills *out from the script's reply (shape checked). 0 or RLOCK_ENOMEM. */
static int fill(rlock_info *out, const redisReply *r) {
  redisReply **e = r->element;
  const redisReply *fields = e[R_FIELDS], *queue = e[R_QUEUE];
  const redisReply *deadlines = e[R_DEADLINES], *permits = e[R_PERMITS];
  snprintf(out->type, sizeof(out->type), "%.*s", (int)e[R_TYPE]->len,
           e[R_TYPE]->str);
  out->ttl_ms = e[R_PTTL]->integer;
  int64_t sec = 0, usec = 0;
  (void)int_of(e[R_SEC]->str, e[R_SEC]->len, &sec);
  (void)int_of(e[R_USEC]->str, e[R_USEC]->len, &usec);
  out->server_ms = sec * 1000 + usec / 1000;

  /* The mode field (a read/write lock's), then the size of the block. */
  const redisReply *mode = NULL;
  for (size_t i = 0; i + 1 < fields->elements; i += 2)
    if (is_mode_field(fields->element[i]))
      mode = fields->element[i + 1];
  size_t nholders = fields->elements / 2 - (mode != NULL ? 1 : 0);
  size_t nqueue = queue->elements, npermits = permits->elements / 2;
  size_t text = mode != NULL ? mode->len + 1 : 0;
  for (size_t i = 0; i < fields->elements; i++)
    text += fields->element[i]->len + 1;
  for (size_t i = 0; i < nqueue; i++)
    text += queue->element[i]->len + 1;
  for (size_t i = 0; i < permits->elements; i += 2)
    text += (permits->element[i]->len == 16 ? 32 : permits->element[i]->len)
            + 1;
  size_t n_entries = nholders + nqueue + npermits;
  block b = {NULL, 0, n_entries * sizeof(rlock_info_entry), 0};
  b.cap = b.text_at + text + 1;
  b.base = calloc(1, b.cap);
  if (b.base == NULL)
    return RLOCK_ENOMEM;
  out->mem_ = b.base;

  /* Holders: every field but the mode, counts where they are integers. */
  rlock_info_entry *h = block_entries(&b, nholders);
  size_t k = 0;
  bool foreign_field = false;
  for (size_t i = 0; i + 1 < fields->elements; i += 2) {
    const redisReply *f = fields->element[i], *v = fields->element[i + 1];
    if (mode != NULL && is_mode_field(f))
      continue;
    rlock_info_entry *en = &h[k++];
    en->key = block_text(&b, f->str, f->len);
    en->key_len = f->len;
    en->value = block_text(&b, v->str, v->len);
    en->value_len = v->len;
    if (!int_of(v->str, v->len, &en->count)) {
      en->count = RLOCK_INFO_NOT_A_COUNT;
      foreign_field = true;
    }
    en->writer = mode != NULL && en->count != RLOCK_INFO_NOT_A_COUNT &&
                 ends_with_write(f);
  }
  out->holders = nholders > 0 ? h : NULL;
  out->holders_n = nholders;
  int64_t total = e[R_NFIELDS]->integer - (mode != NULL ? 1 : 0);
  out->holders_total = total > 0 ? (size_t)total : 0;
  if (mode != NULL)
    out->mode = block_text(&b, mode->str, mode->len);

  /* The fair queue, deadlines as time left. */
  rlock_info_entry *q = block_entries(&b, nqueue);
  for (size_t i = 0; i < nqueue; i++) {
    q[i].key = block_text(&b, queue->element[i]->str, queue->element[i]->len);
    q[i].key_len = queue->element[i]->len;
    int64_t at;
    q[i].ttl_ms = score_of(deadlines->element[i], &at) ? at - out->server_ms
                                                       : RLOCK_INFO_NO_EXPIRY;
  }
  out->queue = nqueue > 0 ? q : NULL;
  out->queue_n = nqueue;
  out->queue_total = e[R_QLEN]->integer > 0 ? (size_t)e[R_QLEN]->integer : 0;

  /* Permits, leases as time left. */
  rlock_info_entry *p = block_entries(&b, npermits);
  for (size_t i = 0; i < npermits; i++) {
    p[i].key = permit_id(&b, permits->element[2 * i], &p[i].key_len);
    int64_t at;
    if (!score_of(permits->element[2 * i + 1], &at) || at >= PERMIT_NO_LEASE)
      p[i].ttl_ms = RLOCK_INFO_NO_EXPIRY;
    else
      p[i].ttl_ms = at - out->server_ms;
  }
  out->permits = npermits > 0 ? p : NULL;
  out->permits_n = npermits;
  out->permits_total =
      e[R_PCOUNT]->integer > 0 ? (size_t)e[R_PCOUNT]->integer : 0;

  out->token = -1;
  if (is_str(e[R_TOKEN]) && !int_of(e[R_TOKEN]->str, e[R_TOKEN]->len,
                                    &out->token))
    out->token = -1;
  out->count = -1;
  bool counted = is_str(e[R_VALUE]) &&
                 int_of(e[R_VALUE]->str, e[R_VALUE]->len, &out->count);
  if (!counted)
    out->count = -1;

  /* The kind, from what is there. */
  bool hash = strcmp(out->type, "hash") == 0;
  bool string = strcmp(out->type, "string") == 0;
  bool fair = out->queue_total > 0;
  bool group_live = false;
  bool group = hash && mode == NULL && foreign_field &&
               fml_group(h, nholders, out->server_ms, &group_live);
  out->locked = hash && (group ? group_live : !foreign_field && nholders > 0);
  if (group) {
    size_t left;
    if (fml_holds(h, nholders, out->server_ms, &left) != 0)
      return RLOCK_ENOMEM;
    /* the fields folded into the held values (two each) left out */
    size_t folded = nholders - left;
    out->holders_total =
        out->holders_total > folded ? out->holders_total - folded : 0;
    out->holders_n = left;
    out->holders = left > 0 ? h : NULL;
  }
  const redisReply *subs = e[R_SUBS];
  out->waiters = string ? subs->element[2]->integer + subs->element[3]->integer
                        : subs->element[0]->integer + subs->element[1]->integer;
  if (strcmp(out->type, "none") == 0)
    out->kind = out->token >= 0 ? RLOCK_INFO_FENCED
                : fair          ? RLOCK_INFO_FAIR
                                : RLOCK_INFO_NONE;
  else if (hash && mode != NULL)
    out->kind = !foreign_field && (is_named(mode, "read") ||
                                   is_named(mode, "write"))
                    ? RLOCK_INFO_RWLOCK
                    : RLOCK_INFO_FOREIGN;
  else if (group)
    out->kind = RLOCK_INFO_FAST_MULTILOCK;
  else if (hash)
    out->kind = foreign_field      ? RLOCK_INFO_FOREIGN
                : out->token >= 0  ? RLOCK_INFO_FENCED
                : fair             ? RLOCK_INFO_FAIR
                                   : RLOCK_INFO_LOCK;
  else if (string && counted)
    out->kind = out->permits_total > 0 ? RLOCK_INFO_PERMIT_SEMAPHORE
                                       : RLOCK_INFO_COUNT;
  else
    out->kind = RLOCK_INFO_FOREIGN;
  return 0;
}

static void read_reply(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  info_op *io = RLOCK__CONTAINER_OF(op, info_op, op);
  if (!shape_ok(reply)) {
    rlock__op_detail(op, "the introspection script replied an unexpected "
                         "value (type %d)", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  rlock__op_finish(op, fill(io->out, reply));
}

static void start_read(rlock__op *op) {
  info_op *io = RLOCK__CONTAINER_OF(op, info_op, op);
  io->argv[6] = rlock__engine_publish(op->engine)[0] == 'S' ? "SHARDNUMSUB"
                                                            : "NUMSUB";
  io->lens[6] = strlen(io->argv[6]);
  rlock__op_send(op, &read_script, 12, io->argv, io->lens,
                 op->engine->core->opts.retry_attempts, read_reply);
}

static const rlock__op_type read_type = {.name = "info_read",
                                         .start = start_read};

/* A handle of `prim` on the same name, for its channel: the naming stays
 * the descriptor's. NULL when out of memory. */
static rlock *sibling(const rlock *lock, const rlock__prim *prim) {
  rlock *h = NULL;
  if (rlock__handle_new(lock->engine, prim, lock->name, lock->name_len,
                        &h) != 0)
    return NULL;
  return h;
}

int rlock__info_read(rlock *lock, rlock_info *out) {
  info_op io;
  memset(&io, 0, sizeof(io));
  rlock__op_init(&io.op, lock, &read_type, 0);
  io.out = out;
  size_t ql = 0, tl = 0, kl = 0, pl = 0;
  char *queue = rlock__fair_queue_key(lock, &ql);
  char *deadlines = rlock__fair_timeout_key(lock, &tl);
  char *token = rlock__fenced_token_key(lock, &kl);
  char *leases = rlock__psem_timeout_key(lock, &pl);
  rlock *rw = sibling(lock, &rlock__prim_read);
  rlock *sem = sibling(lock, &rlock__prim_semaphore);
  rlock *latch = sibling(lock, &rlock__prim_latch);
  char limit[24];
  snprintf(limit, sizeof(limit), "%d", RLOCK_INFO_MAX_ENTRIES);
  int rc = RLOCK_ENOMEM;
  if (queue != NULL && deadlines != NULL && token != NULL && leases != NULL &&
      rw != NULL && sem != NULL && latch != NULL) {
    /* KEYS, then ARGV; the PUBSUB subcommand ([6]) is set on the loop
     * thread, where the client's pub/sub mode is known. */
    const char *argv[12] = {"5",           lock->name,   queue,
                            deadlines,     token,        leases,
                            NULL,          lock->channel, rw->channel,
                            sem->channel,  latch->channel, limit};
    size_t lens[12] = {1,  lock->name_len,    ql,
                       tl, kl,                pl,
                       0,  lock->channel_len, rw->channel_len,
                       sem->channel_len, latch->channel_len, strlen(limit)};
    memcpy(io.argv, argv, sizeof(argv));
    memcpy(io.lens, lens, sizeof(lens));
    rc = rlock__op_run_sync(&io.op);
  } else {
    rlock__set_last_error("out of memory");
  }
  free(queue);
  free(deadlines);
  free(token);
  free(leases);
  if (rw != NULL)
    rlock__handle_release(rw);
  if (sem != NULL)
    rlock__handle_release(sem);
  if (latch != NULL)
    rlock__handle_release(latch);
  if (rc < 0) {
    free(out->mem_);
    memset(out, 0, sizeof(*out));
  }
  return rc;
}

/* ---- a foreign owner's holds (rlock_force_unlock_holder) ---- */

static void owner_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "the trim script replied an unexpected value "
                         "(type %d)", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  rlock__op_finish(op, reply->integer > 0 ? 1 : 0);
}

static void start_owner(rlock__op *op) {
  op->state = RLOCK__ST_CMD;
  op->cmd = rlock__trim_send(op->engine, op->lock, op->owner, 0, owner_reply,
                             op);
  if (op->cmd == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
}

static const rlock__op_type owner_type = {.name = "force_unlock_owner",
                                          .start = start_owner};

int rlock_force_unlock_holder(rlock *lock, const char *owner) {
  if (lock == NULL || owner == NULL || owner[0] == '\0')
    return rlock__bad_arg("lock and owner must be given");
  if (lock->prim->calls != NULL && lock->prim->hold != NULL &&
      lock->prim->hold->trim == NULL) {
    /* a kind of its own lock calls whose holds have no trim */
    rlock__set_last_error("%s", lock->prim->calls->unsupported);
    return RLOCK_EINVAL;
  }
  if (lock->prim->hold == NULL) {
    /* semaphores and latches; a MultiLock's holders are its members' */
    rlock__set_last_error("a %s has no holders of its own to release",
                          lock->prim->kind);
    return RLOCK_EINVAL;
  }
  rlock__op op;
  rlock__op_init(&op, lock, &owner_type, 0);
  const char *suffix = lock->prim->hold->owner_suffix;
  int n = snprintf(op.owner, sizeof(op.owner), "%s%s", owner,
                   suffix != NULL ? suffix : "");
  if (n < 0 || (size_t)n >= sizeof(op.owner))
    return rlock__bad_arg("owner is too long for an owner string "
                          "(<client-uuid>:<thread-id>)");
  return rlock__op_run_sync(&op);
}
