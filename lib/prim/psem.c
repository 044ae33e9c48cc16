/* Redisson's permit-expirable semaphore (getPermitExpirableSemaphore): the
 * count of free permits under the plain name, and the zset
 * "{name}:timeout" holding each taken permit's id (16 raw bytes; shown to
 * the caller as 32 lowercase hex characters) scored by its absolute
 * wall-clock expiry in ms, or by the sentinel 922337203685477 when it has
 * no lease. The channel is the plain semaphore's ("redisson_sc:" + tag),
 * carrying the new count after every change that adds permits. Permits
 * are not holds (no hold part). Wire format: docs/wire-protocol.md, "The
 * permit-expirable semaphore"; scripts: psem_*.lua beside this file.
 *
 * The acquire runs through the engine's loop. A try that finds no free
 * permit replies the time until the earliest lease runs out, so a waiter
 * sleeps until a release message or that expiry, whichever comes first
 * (a permit whose lease runs out comes back without any message).
 *
 * An acquire of n permits sends n ids in one try, all taken or none; a
 * release of a list of ids is all or none too, and publishes the number
 * released (Java's), where the single-id release publishes the new count.
 *
 * Each acquire makes its permit ids itself (16 random bytes each) before
 * its first try. A try whose reply is never read (cancel, interrupt, close,
 * the deadline, a lost connection) may still have taken a permit under
 * those ids; the abandon script removes them and gives the permits back,
 * so an acquire that does not return success leaves no permit taken. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"
#include "util.h"

#define ID_BYTES 16
/* Java's "no lease" score (Long.MAX_VALUE / 10000, as a decimal). */
#define NO_LEASE "922337203685477"

static const rlock__script try_script = {
    "psem_try_acquire", RLOCK__LUA_PSEM_TRY_ACQUIRE_BODY,
    RLOCK__LUA_PSEM_TRY_ACQUIRE_SHA, false};
/* EVAL: an abandon must run behind its try (no NOSCRIPT round trip). */
static const rlock__script abandon_script = {
    "psem_abandon", RLOCK__LUA_PSEM_ABANDON_BODY, RLOCK__LUA_PSEM_ABANDON_SHA,
    true};
static const rlock__script release_script = {
    "psem_release", RLOCK__LUA_PSEM_RELEASE_BODY, RLOCK__LUA_PSEM_RELEASE_SHA,
    false};
static const rlock__script add_script = {
    "psem_add", RLOCK__LUA_PSEM_ADD_BODY, RLOCK__LUA_PSEM_ADD_SHA, false};
static const rlock__script count_script = {
    "psem_count", RLOCK__LUA_PSEM_COUNT_BODY, RLOCK__LUA_PSEM_COUNT_SHA,
    false};
static const rlock__script update_script = {
    "psem_update_lease", RLOCK__LUA_PSEM_UPDATE_LEASE_BODY,
    RLOCK__LUA_PSEM_UPDATE_LEASE_SHA, false};
/* trySetPermits is the plain semaphore's (same count and channel). */
static const rlock__script release_list_script = {
    "psem_release_list", RLOCK__LUA_PSEM_RELEASE_LIST_BODY,
    RLOCK__LUA_PSEM_RELEASE_LIST_SHA, false};
static const rlock__script set_script = {
    "psem_set_permits", RLOCK__LUA_PSEM_SET_PERMITS_BODY,
    RLOCK__LUA_PSEM_SET_PERMITS_SHA, false};
static const rlock__script lease_time_script = {
    "psem_lease_time", RLOCK__LUA_PSEM_LEASE_TIME_BODY,
    RLOCK__LUA_PSEM_LEASE_TIME_SHA, false};
static const rlock__script try_set_script = {
    "semaphore_try_set_permits", RLOCK__LUA_SEMAPHORE_TRY_SET_PERMITS_BODY,
    RLOCK__LUA_SEMAPHORE_TRY_SET_PERMITS_SHA, false};

/* The zset "{name}:timeout" (tag + ":timeout"), malloc'd. */
static char *zset_key(const rlock *lock, size_t *len) {
  size_t n = lock->tag_len + sizeof(RLOCK__PSEM_TIMEOUT_SUFFIX);
  char *key = malloc(n);
  if (key == NULL)
    return NULL;
  memcpy(key, lock->tag, lock->tag_len);
  memcpy(key + lock->tag_len, RLOCK__PSEM_TIMEOUT_SUFFIX,
         sizeof(RLOCK__PSEM_TIMEOUT_SUFFIX));
  *len = n - 1;
  return key;
}

/* Adds the expiry score of a lease started now (lease_ms < 0: none). */
static void argv_expiry(rlock__argv *a, int64_t lease_ms) {
  if (lease_ms < 0)
    rlock__argv_str(a, NO_LEASE);
  else
    rlock__argv_int(a, rlock__wall_ms() + lease_ms);
}

static int hex_val(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* 32 hex characters -> 16 bytes; false when id is not exactly that. */
static bool id_decode(const char *id, unsigned char raw[ID_BYTES]) {
  if (id == NULL || strlen(id) != RLOCK_PERMIT_ID_LEN)
    return false;
  for (int i = 0; i < ID_BYTES; i++) {
    int hi = hex_val(id[2 * i]), lo = hex_val(id[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    raw[i] = (unsigned char)(hi << 4 | lo);
  }
  return true;
}

static void id_encode(const unsigned char raw[ID_BYTES], char *out) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < ID_BYTES; i++) {
    out[2 * i] = digits[raw[i] >> 4];
    out[2 * i + 1] = digits[raw[i] & 15];
  }
  out[RLOCK_PERMIT_ID_LEN] = '\0';
}

/* A permit semaphore op: the engine's, and this kind's arguments and
 * state. The acquire's lease is the op's lease_ms (< 0: none). */
typedef struct psem_op {
  rlock__op op;
  unsigned char id[ID_BYTES]; /* the (first) permit id: made when an
                                 acquire starts, else the caller's */
  int64_t arg;    /* update_lease: the lease (< 0 none); add, try_set and
                     set: permits; count: a count_which */
  /* An acquire of several permits, a release of several ids: the ids after
   * the first (n - 1 of them, in the memory right after this struct). */
  int64_t n;      /* the number of ids: 1, or more */
  unsigned char (*more)[ID_BYTES];
  /* acquire */
  bool unread;    /* a try was sent and its reply not read */
  char (*id_out)[RLOCK_PERMIT_ID_LEN + 1]; /* the caller's buffers: the n
                                              ids, hex, when acquired */
} psem_op;

/* What psem_count.lua counts (its ARGV[3]). */
enum count_which { COUNT_FREE, COUNT_TAKEN, COUNT_TOTAL };

static psem_op *psem_of(rlock__op *op) {
  return RLOCK__CONTAINER_OF(op, psem_op, op);
}

static const unsigned char *op_id(rlock__op *op) { return psem_of(op)->id; }

/* A command's arguments: the fixed head (rlock__argv holds a dozen), then
 * the op's ids after the first, which can be many (an acquire or release
 * of several permits). */
typedef struct long_argv {
  int argc;
  const char **argv;
  size_t *lens;
  bool owned; /* argv and lens are malloc'd */
} long_argv;

/* head's arguments followed by p's further ids; false when out of memory.
 * Free with long_argv_free once sent (the sender copies them). */
static bool long_argv_make(long_argv *l, rlock__argv *head,
                           const psem_op *p) {
  int extra = p->n > 1 ? (int)(p->n - 1) : 0;
  l->argc = head->argc + extra;
  l->owned = extra > 0;
  if (!l->owned) {
    l->argv = head->argv;
    l->lens = head->lens;
    return true;
  }
  l->argv = malloc((size_t)l->argc * sizeof(*l->argv));
  l->lens = malloc((size_t)l->argc * sizeof(*l->lens));
  if (l->argv == NULL || l->lens == NULL) {
    free(l->argv);
    free(l->lens);
    return false;
  }
  memcpy(l->argv, head->argv, (size_t)head->argc * sizeof(*l->argv));
  memcpy(l->lens, head->lens, (size_t)head->argc * sizeof(*l->lens));
  for (int i = 0; i < extra; i++) {
    l->argv[head->argc + i] = (const char *)p->more[i];
    l->lens[head->argc + i] = ID_BYTES;
  }
  return true;
}

static void long_argv_free(long_argv *l) {
  if (l->owned) {
    free(l->argv);
    free(l->lens);
  }
}

/* rlock__cmd_send of head + the op's further ids. */
static rlock__cmd *send_with_ids(rlock__op *op, const rlock__script *script,
                                 rlock__argv *head, int retries,
                                 rlock__reply_cb cb, void *data) {
  long_argv l;
  if (!long_argv_make(&l, head, psem_of(op)))
    return NULL;
  rlock__cmd *cmd = rlock__cmd_send(op->engine->net, script, l.argc, l.argv,
                                    l.lens, retries, cb, data);
  long_argv_free(&l);
  return cmd;
}

/* ---- the descriptor ---- */

static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  (void)lease_ms; /* the engine's resolved lease: ours is op->lease_ms */
  rlock *lock = op->lock;
  size_t zlen = 0;
  char *zkey = zset_key(lock, &zlen);
  if (zkey == NULL)
    return NULL;
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, zkey, zlen);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_mem(&a, op_id(op), ID_BYTES);
  argv_expiry(&a, op->lease_ms);
  rlock__argv_int(&a, rlock__wall_ms());
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  /* Never re-sent: the abandon settles a try whose reply was lost. */
  rlock__cmd *cmd = send_with_ids(op, &try_script, &a, 0, cb, op);
  free(zkey);
  if (cmd != NULL)
    psem_of(op)->unread = true;
  return cmd;
}

/* OK: taken. An integer: no free permit; >= 1 the ms until the earliest
 * lease runs out, -1 no lease to wait for (sleep until a message). */
static int read_try(rlock__op *op, const redisReply *reply, int64_t *ttl_ms) {
  psem_of(op)->unread = false;
  if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0)
    return RLOCK__TRY_ACQUIRED;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "permit semaphore acquire script replied type %d",
                     reply->type);
    return RLOCK_EPROTO;
  }
  *ttl_ms = reply->integer >= 1 ? reply->integer : -1;
  return RLOCK__TRY_WAIT;
}

/* numkeys and KEYS count, channel, zset into a: the head of every script
 * but the try's and the lease update's. Returns the zset key, which a
 * points into (malloc'd: free it once sent), or NULL when out of memory. */
static char *keys_args(rlock__op *op, rlock__argv *a) {
  size_t zlen = 0;
  char *zkey = zset_key(op->lock, &zlen);
  if (zkey == NULL)
    return NULL;
  rlock__argv_str(a, "3");
  rlock__argv_mem(a, op->lock->name, op->lock->name_len);
  rlock__argv_mem(a, op->lock->channel, op->lock->channel_len);
  rlock__argv_mem(a, zkey, zlen);
  return zkey;
}

/* Sent by the engine when an acquire that tried ends without success; only
 * a try whose reply was not read can have taken a permit. On the same
 * connection behind the try. */
static rlock__cmd *abandon(rlock__op *op, rlock__reply_cb cb, void *data) {
  bool unread = psem_of(op)->unread;
  psem_of(op)->unread = false;
  if (!unread)
    return NULL;
  rlock__argv a = {0};
  char *zkey = keys_args(op, &a);
  if (zkey == NULL)
    return NULL;
  rlock__argv_mem(&a, op_id(op), ID_BYTES);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  /* Re-sent freely: each id is removed once. */
  rlock__cmd *cmd = send_with_ids(op, &abandon_script, &a,
                                  op->engine->core->opts.retry_attempts, cb,
                                  data);
  free(zkey);
  return cmd;
}

const rlock__prim rlock__prim_permit_semaphore = {
    .kind = "permit_semaphore",
    .channel_prefix = RLOCK__SEMAPHORE_CHANNEL_PREFIX, /* the semaphore's */
    .send_try = send_try,
    .read_try = read_try,
    .on_message = rlock__semaphore_on_message, /* the same messages */
    .abandon = abandon};

/* ---- acquire ---- */

static void start_acquire(rlock__op *op) {
  psem_op *p = psem_of(op);
  if (rlock__random_bytes(p->id, ID_BYTES) != 0 ||
      (p->n > 1 &&
       rlock__random_bytes(p->more, (size_t)(p->n - 1) * ID_BYTES) != 0)) {
    rlock__op_detail(op, "no random source for the permit id");
    rlock__op_finish(op, RLOCK_ESYS);
    return;
  }
  rlock__op_acquire.start(op);
}

/* Acquired: the ids go to the caller's buffers before its completion. */
static void finish_acquire(rlock__op *op, int result) {
  rlock__acquire_finish(op, result);
  psem_op *p = psem_of(op);
  if (result != 1)
    return;
  id_encode(p->id, p->id_out[0]);
  for (int64_t i = 0; i + 1 < p->n; i++)
    id_encode(p->more[i], p->id_out[i + 1]);
}

static const rlock__op_type acquire_type = {
    .name = "permit_semaphore_acquire", .start = start_acquire,
    .finish = finish_acquire, .acquires = true};

/* ---- one-command operations ---- */

static void value_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  if (reply->type == REDIS_REPLY_NIL) {
    op->value = 0;
  } else if (reply->type == REDIS_REPLY_INTEGER) {
    op->value = reply->integer;
  } else {
    rlock__op_detail(op, "unexpected reply type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  rlock__op_finish(op, 0);
}

/* Sends op's script: KEYS count, channel, zset, then the ARGV `tail`
 * adds, then the op's further ids (a list release); the reply's integer
 * becomes op->value. */
static void send_keyed(rlock__op *op, const rlock__script *script,
                       int retries,
                       void (*tail)(rlock__op *op, rlock__argv *a)) {
  rlock__argv a = {0};
  char *zkey = keys_args(op, &a);
  long_argv l;
  if (zkey != NULL) {
    tail(op, &a);
    if (!long_argv_make(&l, &a, psem_of(op))) {
      free(zkey);
      zkey = NULL;
    }
  }
  if (zkey == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  rlock__op_send(op, script, l.argc, l.argv, l.lens, retries, value_reply);
  long_argv_free(&l);
  free(zkey);
}

/* ARGV id, now, pub: the release's and the lease time's. */
static void tail_id_now_pub(rlock__op *op, rlock__argv *a) {
  rlock__argv_mem(a, op_id(op), ID_BYTES);
  rlock__argv_int(a, rlock__wall_ms());
  rlock__argv_str(a, rlock__engine_publish(op->engine));
}

/* ARGV now, pub, which count (arg: a count_which). */
static void tail_count(rlock__op *op, rlock__argv *a) {
  static const char *const which[] = {"free", "taken", "total"};
  rlock__argv_int(a, rlock__wall_ms());
  rlock__argv_str(a, rlock__engine_publish(op->engine));
  rlock__argv_str(a, which[psem_of(op)->arg]);
}

/* ARGV now, pub, the first id (the others follow): a list release's. */
static void tail_list(rlock__op *op, rlock__argv *a) {
  rlock__argv_int(a, rlock__wall_ms());
  rlock__argv_str(a, rlock__engine_publish(op->engine));
  rlock__argv_mem(a, op_id(op), ID_BYTES);
}

/* ARGV permits (arg), pub: set_permits's. */
static void tail_set(rlock__op *op, rlock__argv *a) {
  rlock__argv_int(a, psem_of(op)->arg);
  rlock__argv_str(a, rlock__engine_publish(op->engine));
}

/* release of one id. Not re-sent: a second send after the first landed
 * would answer "not taken". */
static void start_release(rlock__op *op) {
  send_keyed(op, &release_script, 0, tail_id_now_pub);
}

/* update lease: arg the lease (< 0 none). Re-sent: ZADD XX again is
 * harmless. */
static void start_update(rlock__op *op) {
  rlock *lock = op->lock;
  size_t zlen = 0;
  char *zkey = zset_key(lock, &zlen);
  if (zkey == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  rlock__argv a = {0};
  rlock__argv_str(&a, "1");
  rlock__argv_mem(&a, zkey, zlen);
  rlock__argv_mem(&a, op_id(op), ID_BYTES);
  argv_expiry(&a, psem_of(op)->arg);
  rlock__argv_int(&a, rlock__wall_ms());
  rlock__op_send(op, &update_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, value_reply);
  free(zkey);
}

/* KEYS count, channel; ARGV permits (arg), publish command: add's
 * arguments, and the start of try_set's. */
static void count_args(rlock__op *op, rlock__argv *a) {
  rlock__argv_str(a, "2");
  rlock__argv_mem(a, op->lock->name, op->lock->name_len);
  rlock__argv_mem(a, op->lock->channel, op->lock->channel_len);
  rlock__argv_int(a, psem_of(op)->arg);
  rlock__argv_str(a, rlock__engine_publish(op->engine));
}

/* add permits: arg. Not re-sent (INCRBY twice would add twice). */
static void start_add(rlock__op *op) {
  rlock__argv a = {0};
  count_args(op, &a);
  rlock__op_send(op, &add_script, a.argc, a.argv, a.lens, 0, value_reply);
}

/* try set: arg permits, no TTL. Not re-sent (a second send would answer
 * 0). */
static void start_try_set(rlock__op *op) {
  rlock__argv a = {0};
  count_args(op, &a);
  rlock__argv_str(&a, "0");
  rlock__op_send(op, &try_set_script, a.argc, a.argv, a.lens, 0,
                 value_reply);
}

/* free / taken / total counts: arg a count_which. Re-sent: the reclaim
 * happens once whatever the number of sends. */
static void start_count(rlock__op *op) {
  send_keyed(op, &count_script, op->engine->core->opts.retry_attempts,
             tail_count);
}

/* release of a list. Not re-sent: a second send after the first landed
 * would answer 0. */
static void start_release_list(rlock__op *op) {
  send_keyed(op, &release_list_script, 0, tail_list);
}

/* set permits: arg. Re-sent: setting the same size twice changes nothing
 * the second time. */
static void start_set(rlock__op *op) {
  send_keyed(op, &set_script, op->engine->core->opts.retry_attempts,
             tail_set);
}

/* lease time left of the id. Re-sent like the counts. */
static void start_lease_time(rlock__op *op) {
  send_keyed(op, &lease_time_script, op->engine->core->opts.retry_attempts,
             tail_id_now_pub);
}

static const rlock__op_type release_type = {.name = "psem_release",
                                            .start = start_release};
static const rlock__op_type release_list_type = {
    .name = "psem_release_list", .start = start_release_list};
static const rlock__op_type set_type = {.name = "psem_set_permits",
                                        .start = start_set};
static const rlock__op_type lease_time_type = {.name = "psem_lease_time",
                                               .start = start_lease_time};
static const rlock__op_type update_type = {.name = "psem_update_lease",
                                           .start = start_update};
static const rlock__op_type add_type = {.name = "psem_add",
                                        .start = start_add};
static const rlock__op_type try_set_type = {.name = "psem_try_set",
                                            .start = start_try_set};
static const rlock__op_type count_type = {.name = "psem_count",
                                          .start = start_count};

/* ---- the public API ---- */

static rlock *handle(rlock_permit_semaphore *sem) {
  return rlock__semaphore_handle(sem, &rlock__prim_permit_semaphore,
                                 "permit semaphore",
                                 "rlock_permit_semaphore_new");
}

/* Runs a one-command op with input arg and id (may be NULL); its value in
 * *value. */
static int run(rlock *lock, const rlock__op_type *type, int64_t arg,
               const unsigned char *id, int64_t *value) {
  psem_op p;
  memset(&p, 0, sizeof(p));
  rlock__op_init(&p.op, lock, type, 0);
  p.arg = arg;
  if (id != NULL)
    memcpy(p.id, id, ID_BYTES);
  int rc = rlock__op_run_sync(&p.op);
  if (rc >= 0 && value != NULL)
    *value = p.op.value;
  return rc;
}

/* The size of an op with n ids: the struct, then the ids after the first
 * (psem_op.more). */
static size_t op_size(int64_t n) {
  return sizeof(psem_op) + (size_t)(n > 1 ? n - 1 : 0) * ID_BYTES;
}

static void op_set_ids(psem_op *p, int64_t n) {
  p->n = n;
  p->more = (unsigned char(*)[ID_BYTES])(void *)(p + 1);
}

/* A sync op with room for n ids (malloc'd: the caller frees it), or NULL
 * with the last error set. */
static psem_op *op_new(rlock *lock, const rlock__op_type *type,
                       uint64_t owner, int64_t n) {
  psem_op *p = calloc(1, op_size(n));
  if (p == NULL) {
    rlock__set_last_error("out of memory");
    return NULL;
  }
  rlock__op_init(&p->op, lock, type, owner);
  op_set_ids(p, n);
  return p;
}

/* The number of permits of one acquire: 1..RLOCK_PERMIT_IDS_MAX (its ids
 * travel in one script call). */
static int check_n(int64_t permits) {
  if (permits < 1)
    return rlock__bad_arg("permits must be >= 1");
  if (permits > RLOCK_PERMIT_IDS_MAX)
    return rlock__bad_arg("permits is too large (at most "
                          "RLOCK_PERMIT_IDS_MAX = 1024 in one call)");
  return 0;
}

/* The checks every acquire form makes: the handle (*lock), the ids buffer,
 * permits and lease. 0 or RLOCK_EINVAL with the detail set. */
static int check_acquire(rlock_permit_semaphore *sem, rlock **lock,
                         int64_t permits, int64_t lease_ms, const void *ids) {
  *lock = handle(sem);
  if (*lock == NULL)
    return RLOCK_EINVAL;
  if (ids == NULL)
    return rlock__bad_arg("ids is NULL");
  int rc = check_n(permits);
  return rc != 0 ? rc : rlock__check_lease(lease_ms);
}

void rlock_permit_semaphore_free(rlock_permit_semaphore *sem) {
  rlock_free((rlock *)sem);
}

int rlock_permit_semaphore_try_set_permits(rlock_permit_semaphore *sem,
                                           int64_t permits) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__semaphore_check_permits(permits);
  if (rc != 0)
    return rc;
  int64_t set = 0;
  rc = run(lock, &try_set_type, permits, NULL, &set);
  return rc < 0 ? rc : (set == 1 ? 1 : 0);
}

int rlock_permit_semaphore_set_permits(rlock_permit_semaphore *sem,
                                       int64_t permits) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  if (permits < 0 || permits > RLOCK__PERMITS_MAX)
    return rlock__bad_arg("permits must be 0..2^40");
  int rc = run(lock, &set_type, permits, NULL, NULL);
  return rc < 0 ? rc : 0;
}

int rlock_permit_semaphore_add_permits(rlock_permit_semaphore *sem,
                                       int64_t permits) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__semaphore_check_add(permits);
  if (rc != 0)
    return rc;
  rc = run(lock, &add_type, permits, NULL, NULL);
  return rc < 0 ? rc : 0;
}

int rlock_permit_semaphore_try_acquire_n(
    rlock_permit_semaphore *sem, int64_t permits, int64_t wait_ms,
    int64_t lease_ms, char (*ids)[RLOCK_PERMIT_ID_LEN + 1]) {
  rlock *lock = NULL;
  int rc = check_acquire(sem, &lock, permits, lease_ms, ids);
  if (rc != 0)
    return rc;
  psem_op *p = op_new(lock, &acquire_type, rlock__thread_id(), permits);
  if (p == NULL)
    return RLOCK_ENOMEM;
  rlock__op_set_wait(&p->op, wait_ms, lease_ms);
  p->id_out = ids;
  rc = rlock__op_run_sync(&p->op);
  free(p);
  return rc;
}

int rlock_permit_semaphore_acquire_n(rlock_permit_semaphore *sem,
                                     int64_t permits, int64_t lease_ms,
                                     char (*ids)[RLOCK_PERMIT_ID_LEN + 1]) {
  int rc = rlock_permit_semaphore_try_acquire_n(sem, permits, -1, lease_ms,
                                                ids);
  return rc == 1 ? 0 : (rc == 0 ? RLOCK_EPROTO : rc);
}

int rlock_permit_semaphore_acquire_n_async(
    rlock_permit_semaphore *sem, int64_t permits, int64_t wait_ms,
    int64_t lease_ms, char (*ids)[RLOCK_PERMIT_ID_LEN + 1], rlock_cb cb,
    void *data, rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  rlock *lock = NULL;
  int rc = check_acquire(sem, &lock, permits, lease_ms, ids);
  if (rc != 0)
    return rc;
  rlock__op *op = rlock__req_new(lock, &acquire_type, rlock__thread_id(),
                                 op_size(permits), cb, data);
  if (op == NULL)
    return RLOCK_ENOMEM;
  op_set_ids(psem_of(op), permits);
  rlock__op_set_wait(op, wait_ms, lease_ms);
  psem_of(op)->id_out = ids;
  return rlock__req_submit(op, req);
}

/* The one-permit forms: n = 1, the caller's buffer as the only id's. */
typedef char id_buf[RLOCK_PERMIT_ID_LEN + 1];

int rlock_permit_semaphore_try_acquire(rlock_permit_semaphore *sem,
                                       int64_t wait_ms, int64_t lease_ms,
                                       char *id) {
  if (id == NULL && handle(sem) != NULL)
    return rlock__bad_arg("id is NULL");
  return rlock_permit_semaphore_try_acquire_n(sem, 1, wait_ms, lease_ms,
                                              (id_buf *)(void *)id);
}

int rlock_permit_semaphore_acquire(rlock_permit_semaphore *sem,
                                   int64_t lease_ms, char *id) {
  int rc = rlock_permit_semaphore_try_acquire(sem, -1, lease_ms, id);
  return rc == 1 ? 0 : (rc == 0 ? RLOCK_EPROTO : rc);
}

int rlock_permit_semaphore_acquire_async(rlock_permit_semaphore *sem,
                                         int64_t wait_ms, int64_t lease_ms,
                                         char *id, rlock_cb cb, void *data,
                                         rlock_req **req) {
  if (id == NULL && handle(sem) != NULL) {
    if (req != NULL)
      *req = NULL;
    return rlock__bad_arg("id is NULL");
  }
  return rlock_permit_semaphore_acquire_n_async(
      sem, 1, wait_ms, lease_ms, (id_buf *)(void *)id, cb, data, req);
}

/* The handle, with id decoded into raw; NULL (RLOCK_EINVAL, the detail
 * set) for a bad handle or id. */
static rlock *handle_id(rlock_permit_semaphore *sem, const char *id,
                        unsigned char raw[ID_BYTES]) {
  rlock *lock = handle(sem);
  if (lock != NULL && !id_decode(id, raw)) {
    rlock__bad_arg("id must be 32 hex characters");
    return NULL;
  }
  return lock;
}

/* 1 released, 0 not taken (also: its lease had run out), or an error. */
static int release_id(rlock_permit_semaphore *sem, const char *id) {
  unsigned char raw[ID_BYTES];
  rlock *lock = handle_id(sem, id, raw);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int64_t got = 0;
  int rc = run(lock, &release_type, 0, raw, &got);
  return rc < 0 ? rc : (got == 1 ? 1 : 0);
}

int rlock_permit_semaphore_release(rlock_permit_semaphore *sem,
                                   const char *id) {
  int rc = release_id(sem, id);
  if (rc == 0) {
    rlock__set_last_error("no permit with id %s is taken", id);
    return RLOCK_ENOTOWNER;
  }
  return rc < 0 ? rc : 0;
}

int rlock_permit_semaphore_try_release(rlock_permit_semaphore *sem,
                                       const char *id) {
  return release_id(sem, id);
}

/* Decodes count ids into p (which has room for them); RLOCK_EINVAL with
 * the detail set on a malformed id or a repeat (Java would release the
 * distinct ones and then throw: rlock refuses before sending). */
static int decode_ids(psem_op *p, const char *const *ids, size_t count) {
  for (size_t i = 0; i < count; i++) {
    unsigned char *raw = i == 0 ? p->id : p->more[i - 1];
    if (!id_decode(ids[i], raw)) {
      rlock__set_last_error("ids[%zu] is not 32 hex characters", i);
      return RLOCK_EINVAL;
    }
    for (size_t j = 0; j < i; j++) {
      const unsigned char *other = j == 0 ? p->id : p->more[j - 1];
      if (memcmp(raw, other, ID_BYTES) == 0) {
        rlock__set_last_error("ids[%zu] repeats ids[%zu]", i, j);
        return RLOCK_EINVAL;
      }
    }
  }
  return 0;
}

int64_t rlock_permit_semaphore_try_release_n(rlock_permit_semaphore *sem,
                                             const char *const *ids,
                                             size_t count) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  if (ids == NULL || count == 0)
    return rlock__bad_arg("no ids to release (ids NULL or count 0)");
  if (count > RLOCK_PERMIT_IDS_MAX)
    return rlock__bad_arg("too many ids (at most RLOCK_PERMIT_IDS_MAX = "
                          "1024 in one call)");
  psem_op *p = op_new(lock, &release_list_type, 0, (int64_t)count);
  if (p == NULL)
    return RLOCK_ENOMEM;
  int rc = decode_ids(p, ids, count);
  if (rc == 0)
    rc = rlock__op_run_sync(&p->op);
  int64_t got = p->op.value;
  free(p);
  if (rc < 0)
    return rc;
  return got == (int64_t)count ? got : 0;
}

int rlock_permit_semaphore_release_n(rlock_permit_semaphore *sem,
                                     const char *const *ids, size_t count) {
  int64_t rc = rlock_permit_semaphore_try_release_n(sem, ids, count);
  if (rc == 0) {
    rlock__set_last_error("not every one of the %zu ids is a taken permit "
                          "(none was released)",
                          count);
    return RLOCK_ENOTOWNER;
  }
  return rc < 0 ? (int)rc : 0;
}

int rlock_permit_semaphore_update_lease(rlock_permit_semaphore *sem,
                                        const char *id, int64_t lease_ms) {
  unsigned char raw[ID_BYTES];
  rlock *lock = handle_id(sem, id, raw);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  int64_t got = 0;
  rc = run(lock, &update_type, lease_ms, raw, &got);
  return rc < 0 ? rc : (got == 1 ? 1 : 0);
}

int rlock_permit_semaphore_lease_time(rlock_permit_semaphore *sem,
                                      const char *id, int64_t *ms_left) {
  unsigned char raw[ID_BYTES];
  rlock *lock = handle_id(sem, id, raw);
  if (lock == NULL)
    return RLOCK_EINVAL;
  if (ms_left == NULL)
    return rlock__bad_arg("ms_left is NULL");
  int64_t left = 0;
  int rc = run(lock, &lease_time_type, 0, raw, &left);
  if (rc < 0)
    return rc;
  if (left == 0 || left < -1) { /* -2: not taken */
    rlock__set_last_error("no permit with id %s is taken", id);
    return RLOCK_ENOTOWNER;
  }
  *ms_left = left;
  return 0;
}

static int64_t count(rlock_permit_semaphore *sem, enum count_which which) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int64_t n = 0;
  int rc = run(lock, &count_type, which, NULL, &n);
  return rc < 0 ? rc : (n > 0 ? n : 0);
}

int64_t rlock_permit_semaphore_available_permits(rlock_permit_semaphore *sem) {
  return count(sem, COUNT_FREE);
}

int64_t rlock_permit_semaphore_acquired_permits(rlock_permit_semaphore *sem) {
  return count(sem, COUNT_TAKEN);
}

int64_t rlock_permit_semaphore_permits(rlock_permit_semaphore *sem) {
  return count(sem, COUNT_TOTAL);
}

/* ---- names for introspection (info.c) ---- */

char *rlock__psem_timeout_key(const rlock *lock, size_t *len) {
  return zset_key(lock, len);
}
