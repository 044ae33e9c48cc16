/* Redisson's semaphore (getSemaphore): a string counter of available
 * permits under the plain name, and the channel "redisson_sc:" + tag, on
 * which every change that adds permits publishes the new total. Permits
 * are not holds (no hold part): nothing is recorded, renewed or trimmed.
 * Wire format: docs/wire-protocol.md, "The semaphore"; scripts:
 * semaphore_*.lua beside this file.
 *
 * The acquire runs through the engine's loop (try, subscribe, re-try,
 * sleep until a message). A try's reply carries no wait hint: permits come
 * back only with a release, which publishes, so a waiter sleeps until a
 * message (at most watchdog_timeout_ms, then it re-checks).
 *
 * A try whose reply the caller never reads (cancel, interrupt, close, the
 * deadline, a lost connection) may still have taken permits on the server.
 * So a successful try leaves a short-lived take record, and such an
 * acquire ends with an abandon script that gives the recorded permits back
 * (and publishes): an acquire that does not return success leaves no
 * permit taken. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

#define TAKE_PREFIX "rlock_semaphore_take:"

static const rlock__script try_script = {
    "semaphore_try_acquire", RLOCK__LUA_SEMAPHORE_TRY_ACQUIRE_BODY,
    RLOCK__LUA_SEMAPHORE_TRY_ACQUIRE_SHA, false};
/* EVAL: an abandon must run behind its try; a NOSCRIPT re-send could land
 * behind later commands (harmless here, but pointless to risk). */
static const rlock__script abandon_script = {
    "semaphore_abandon", RLOCK__LUA_SEMAPHORE_ABANDON_BODY,
    RLOCK__LUA_SEMAPHORE_ABANDON_SHA, true};
static const rlock__script release_script = {
    "semaphore_release", RLOCK__LUA_SEMAPHORE_RELEASE_BODY,
    RLOCK__LUA_SEMAPHORE_RELEASE_SHA, false};
static const rlock__script try_set_script = {
    "semaphore_try_set_permits", RLOCK__LUA_SEMAPHORE_TRY_SET_PERMITS_BODY,
    RLOCK__LUA_SEMAPHORE_TRY_SET_PERMITS_SHA, false};
static const rlock__script release_if_exists_script = {
    "semaphore_release_if_exists", RLOCK__LUA_SEMAPHORE_RELEASE_IF_EXISTS_BODY,
    RLOCK__LUA_SEMAPHORE_RELEASE_IF_EXISTS_SHA, false};
static const rlock__script drain_script = {
    "semaphore_drain", RLOCK__LUA_SEMAPHORE_DRAIN_BODY,
    RLOCK__LUA_SEMAPHORE_DRAIN_SHA, false};

/* Take record ids: unique per acquire within the process (an owner may run
 * several async acquires at once). */
static atomic_uint_fast64_t next_take_id = 1;

/* A semaphore op: the engine's, and this kind's arguments and state. */
typedef struct sem_op {
  rlock__op op;
  int64_t permits; /* acquire, release, add, try_set */
  int64_t ttl_ms;  /* try_set: the TTL (0: none) */
  bool persist;    /* release / add: false keeps the TTL (release), true
                      drops it (add_permits) */
  /* acquire */
  uint64_t take_id; /* its take record's id */
  bool unread;      /* a try was sent and its reply not read */
} sem_op;

static sem_op *sem_of(rlock__op *op) {
  return RLOCK__CONTAINER_OF(op, sem_op, op);
}

/* "rlock_semaphore_take:" + tag + ":" + owner + ":" + id, malloc'd. */
static char *take_key(rlock__op *op, size_t *len) {
  const rlock *lock = op->lock;
  size_t cap = sizeof(TAKE_PREFIX) + lock->tag_len + 1 + strlen(op->owner) +
               1 + 21;
  char *key = malloc(cap);
  if (key == NULL)
    return NULL;
  int n = snprintf(key, cap, TAKE_PREFIX "%s:%s:%" PRIu64, lock->tag,
                   op->owner, sem_of(op)->take_id);
  *len = (size_t)n;
  return key;
}

/* How long a take record must outlive its try: until the abandon has
 * surely run, as long as a command may keep being re-sent
 * ((retry_attempts + 1) x (command_timeout + retry_interval)). */
static int64_t take_ttl_ms(const rlock__op *op) {
  const rlock_options *o = &op->engine->core->opts;
  int64_t ttl = (int64_t)(o->retry_attempts + 1) *
                (o->command_timeout_ms + o->retry_interval_ms);
  return ttl < 1000 ? 1000 : ttl;
}

/* ---- the descriptor ---- */

static rlock__cmd *send_try(rlock__op *op, int64_t lease_ms,
                            rlock__reply_cb cb) {
  (void)lease_ms; /* permits are not leased */
  rlock *lock = op->lock;
  size_t key_len = 0;
  char *key = take_key(op, &key_len);
  if (key == NULL)
    return NULL;
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, key, key_len);
  rlock__argv_int(&a, sem_of(op)->permits);
  rlock__argv_int(&a, take_ttl_ms(op));
  /* Never re-sent: a second DECRBY after a lost reply would take the
   * permits twice (the abandon gives back what the one send took). */
  rlock__cmd *cmd = rlock__cmd_send(op->engine->net, &try_script, a.argc,
                                    a.argv, a.lens, 0, cb, op);
  free(key);
  if (cmd != NULL)
    sem_of(op)->unread = true;
  return cmd;
}

/* nil: taken. -1: not enough permits, no hint (sleep until a message). */
static int read_try(rlock__op *op, const redisReply *reply, int64_t *ttl_ms) {
  sem_of(op)->unread = false;
  if (reply->type == REDIS_REPLY_NIL)
    return RLOCK__TRY_ACQUIRED;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "semaphore acquire script replied type %d",
                     reply->type);
    return RLOCK_EPROTO;
  }
  *ttl_ms = -1;
  return RLOCK__TRY_WAIT;
}

/* Sent by the engine when an acquire that tried ends without success; only
 * a try whose reply was not read can have taken permits. The abandon goes
 * on the same connection behind the try, so it sees the try's take record
 * if the try ran (a try never written is dropped by the net layer). */
static rlock__cmd *abandon(rlock__op *op, rlock__reply_cb cb, void *data) {
  bool unread = sem_of(op)->unread;
  sem_of(op)->unread = false;
  if (!unread)
    return NULL;
  rlock *lock = op->lock;
  size_t key_len = 0;
  char *key = take_key(op, &key_len);
  if (key == NULL)
    return NULL;
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  rlock__argv_mem(&a, lock->channel, lock->channel_len);
  rlock__argv_mem(&a, key, key_len);
  rlock__argv_str(&a, rlock__engine_publish(op->engine));
  /* Re-sent freely: the record is deleted when the permits go back. */
  rlock__cmd *cmd =
      rlock__cmd_send(op->engine->net, &abandon_script, a.argc, a.argv,
                      a.lens, op->engine->core->opts.retry_attempts, cb, data);
  free(key);
  return cmd;
}

/* The payload is the new total v: it wakes min(v, local waiters) - as
 * Java, which releases that many local permits. v <= 0, or anything that
 * is not a decimal integer, wakes nobody. */
void rlock__semaphore_on_message(rlock__chan *ch, const char *payload,
                                 size_t len) {
  if (len == 0 || len > 20)
    return;
  char buf[24];
  memcpy(buf, payload, len);
  buf[len] = '\0';
  char *end = NULL;
  long long v = strtoll(buf, &end, 10);
  if (end != buf + len || v <= 0)
    return;
  rlock__chan_wake_n(ch, v);
}

const rlock__prim rlock__prim_semaphore = {
    .kind = "semaphore",
    .channel_prefix = RLOCK__SEMAPHORE_CHANNEL_PREFIX,
    .send_try = send_try,
    .read_try = read_try,
    .on_message = rlock__semaphore_on_message,
    .abandon = abandon};

/* ---- acquire ---- */

static void start_acquire(rlock__op *op) {
  sem_of(op)->take_id = (uint64_t)atomic_fetch_add(&next_take_id, 1);
  rlock__op_acquire.start(op);
}

/* The engine's acquire, with a take record id first. Touches no hold:
 * repair never waits for it. */
static const rlock__op_type acquire_type = {
    .name = "semaphore_acquire", .start = start_acquire,
    .finish = rlock__acquire_finish, .acquires = true};

/* ---- one-command operations ---- */

/* Reads an integer, a nil (0) or a decimal string into op->value. */
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
  } else if (reply->type == REDIS_REPLY_STRING) {
    char *end = NULL;
    op->value = strtoll(reply->str, &end, 10);
    if (end == reply->str || *end != '\0') {
      rlock__op_detail(op, "'%s' does not hold a permit count",
                       op->lock->name);
      rlock__op_finish(op, RLOCK_EPROTO);
      return;
    }
  } else {
    rlock__op_detail(op, "unexpected reply type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  rlock__op_finish(op, 0);
}

/* KEYS count, channel; ARGV permits, publish command: the start of the
 * release's and try_set's arguments. */
static void sem_args(rlock__op *op, rlock__argv *a) {
  rlock__argv_str(a, "2");
  rlock__argv_mem(a, op->lock->name, op->lock->name_len);
  rlock__argv_mem(a, op->lock->channel, op->lock->channel_len);
  rlock__argv_int(a, sem_of(op)->permits);
  rlock__argv_str(a, rlock__engine_publish(op->engine));
}

/* release and add_permits. Not re-sent: INCRBY twice would add the
 * permits twice. */
static void start_add(rlock__op *op) {
  rlock__argv a = {0};
  sem_args(op, &a);
  rlock__argv_str(&a, sem_of(op)->persist ? "1" : "0");
  rlock__op_send(op, &release_script, a.argc, a.argv, a.lens, 0,
                 value_reply);
}

/* release_if_exists. Not re-sent: INCRBY twice would add twice. */
static void start_add_if_exists(rlock__op *op) {
  rlock__argv a = {0};
  sem_args(op, &a);
  rlock__op_send(op, &release_if_exists_script, a.argc, a.argv, a.lens, 0,
                 value_reply);
}

/* Not re-sent: a second send after the first landed would answer 0 ("it
 * existed"). */
static void start_try_set(rlock__op *op) {
  rlock__argv a = {0};
  sem_args(op, &a);
  rlock__argv_int(&a, sem_of(op)->ttl_ms);
  rlock__op_send(op, &try_set_script, a.argc, a.argv, a.lens, 0,
                 value_reply);
}

/* Not re-sent: a second drain would answer 0, losing the count taken. */
static void start_drain(rlock__op *op) {
  const char *argv[2] = {"1", op->lock->name};
  size_t lens[2] = {1, op->lock->name_len};
  rlock__op_send(op, &drain_script, 2, argv, lens, 0, value_reply);
}

/* A read: re-sent like every query. */
static void start_available(rlock__op *op) {
  const char *argv[2] = {"GET", op->lock->name};
  size_t lens[2] = {3, op->lock->name_len};
  rlock__op_send(op, NULL, 2, argv, lens,
                 op->engine->core->opts.retry_attempts, value_reply);
}

static const rlock__op_type add_type = {.name = "semaphore_add",
                                        .start = start_add};
static const rlock__op_type add_if_exists_type = {
    .name = "semaphore_release_if_exists", .start = start_add_if_exists};
static const rlock__op_type try_set_type = {.name = "semaphore_try_set",
                                            .start = start_try_set};
static const rlock__op_type drain_type = {.name = "semaphore_drain",
                                          .start = start_drain};
static const rlock__op_type available_type = {.name = "semaphore_available",
                                              .start = start_available};

/* ---- the public API ---- */

rlock *rlock__semaphore_handle(void *h, const rlock__prim *prim,
                               const char *what, const char *getter) {
  rlock *lock = h;
  if (lock == NULL) {
    rlock__set_last_error("%s is NULL", what);
    return NULL;
  }
  if (lock->prim != prim) {
    rlock__set_last_error("not a %s (use %s)", what, getter);
    return NULL;
  }
  return lock;
}

/* The handle, or NULL with the last error set. */
static rlock *handle(rlock_semaphore *sem) {
  return rlock__semaphore_handle(sem, &rlock__prim_semaphore, "semaphore",
                                 "rlock_semaphore_new");
}

int rlock__semaphore_check_permits(int64_t permits) {
  if (permits <= 0)
    return rlock__bad_arg("permits must be >= 1");
  if (permits > RLOCK__PERMITS_MAX)
    return rlock__bad_arg("permits is too large (max 2^40)");
  return 0;
}

int rlock__semaphore_check_add(int64_t permits) {
  if (permits == 0)
    return rlock__bad_arg("permits must not be 0");
  if (permits > RLOCK__PERMITS_MAX || permits < -RLOCK__PERMITS_MAX)
    return rlock__bad_arg("permits is too large (max 2^40 either way)");
  return 0;
}


/* Runs a one-command op with its arguments; its value in *value. */
static int run(rlock *lock, const rlock__op_type *type, int64_t permits,
               int64_t ttl_ms, bool persist, int64_t *value) {
  sem_op s;
  memset(&s, 0, sizeof(s));
  rlock__op_init(&s.op, lock, type, 0);
  s.permits = permits;
  s.ttl_ms = ttl_ms;
  s.persist = persist;
  int rc = rlock__op_run_sync(&s.op);
  if (rc >= 0 && value != NULL)
    *value = s.op.value;
  return rc;
}

void rlock_semaphore_free(rlock_semaphore *sem) { rlock_free((rlock *)sem); }

int rlock_semaphore_try_set_permits(rlock_semaphore *sem, int64_t permits,
                                    int64_t ttl_ms) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__semaphore_check_permits(permits);
  if (rc != 0)
    return rc;
  if (ttl_ms > RLOCK__PERMITS_MAX)
    return rlock__bad_arg("ttl_ms is too large (max 2^40 ms)");
  int64_t set = 0;
  rc = run(lock, &try_set_type, permits, ttl_ms > 0 ? ttl_ms : 0, false,
           &set);
  return rc < 0 ? rc : (set == 1 ? 1 : 0);
}

int rlock_semaphore_try_acquire(rlock_semaphore *sem, int64_t permits,
                                int64_t wait_ms) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__semaphore_check_permits(permits);
  if (rc != 0)
    return rc;
  sem_op s;
  memset(&s, 0, sizeof(s));
  rlock__op_init(&s.op, lock, &acquire_type, rlock__thread_id());
  rlock__op_set_wait(&s.op, wait_ms, -1);
  s.permits = permits;
  return rlock__op_run_sync(&s.op);
}

int rlock_semaphore_acquire(rlock_semaphore *sem, int64_t permits) {
  int rc = rlock_semaphore_try_acquire(sem, permits, -1);
  return rc == 1 ? 0 : (rc == 0 ? RLOCK_EPROTO : rc);
}

int rlock_semaphore_release(rlock_semaphore *sem, int64_t permits) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__semaphore_check_permits(permits);
  if (rc != 0)
    return rc;
  rc = run(lock, &add_type, permits, 0, false, NULL);
  return rc < 0 ? rc : 0;
}

int rlock_semaphore_release_if_exists(rlock_semaphore *sem,
                                      int64_t permits) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  if (permits == 0)
    return 0; /* Java's: false, nothing sent */
  int rc = rlock__semaphore_check_permits(permits);
  if (rc != 0)
    return rc;
  int64_t done = 0;
  rc = run(lock, &add_if_exists_type, permits, 0, false, &done);
  return rc < 0 ? rc : (done == 1 ? 1 : 0);
}

int rlock_semaphore_add_permits(rlock_semaphore *sem, int64_t permits) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__semaphore_check_add(permits);
  if (rc != 0)
    return rc;
  rc = run(lock, &add_type, permits, 0, true, NULL);
  return rc < 0 ? rc : 0;
}

/* A count below 0 (addPermits with a negative number can leave one) means
 * no permits: these calls return >= 0, negative values being errors. */
int64_t rlock_semaphore_drain_permits(rlock_semaphore *sem) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int64_t taken = 0;
  int rc = run(lock, &drain_type, 0, 0, false, &taken);
  return rc < 0 ? rc : (taken > 0 ? taken : 0);
}

int64_t rlock_semaphore_available_permits(rlock_semaphore *sem) {
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int64_t have = 0;
  int rc = run(lock, &available_type, 0, 0, false, &have);
  return rc < 0 ? rc : (have > 0 ? have : 0);
}

int rlock_semaphore_acquire_async(rlock_semaphore *sem, int64_t permits,
                                  int64_t wait_ms, rlock_cb cb, void *data,
                                  rlock_req **req) {
  if (req != NULL)
    *req = NULL;
  rlock *lock = handle(sem);
  if (lock == NULL)
    return RLOCK_EINVAL;
  int rc = rlock__semaphore_check_permits(permits);
  if (rc != 0)
    return rc;
  sem_op *s = (sem_op *)(void *)rlock__req_new(
      lock, &acquire_type, rlock__thread_id(), sizeof(sem_op), cb, data);
  if (s == NULL)
    return RLOCK_ENOMEM;
  rlock__op_set_wait(&s->op, wait_ms, -1);
  s->permits = permits;
  return rlock__req_submit(&s->op, req);
}
