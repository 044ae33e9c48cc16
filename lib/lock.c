/* The reentrant lock: operations as state machines on the loop thread
 * (rlock__op), and the blocking public API as a thin facade over them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-private.h"

/* Leases up to ~34 years; beyond that a caller almost surely passed a
 * garbage value, and PEXPIRE arithmetic would overflow on the server. */
#define LEASE_MAX_MS (INT64_C(1) << 40)

/* ---- op bookkeeping ---- */

static void active_add(rlock_client *c, rlock__op *op) {
  op->active_prev = NULL;
  op->active_next = c->active_head;
  if (c->active_head != NULL)
    c->active_head->active_prev = op;
  c->active_head = op;
}

static void active_remove(rlock_client *c, rlock__op *op) {
  if (op->active_prev != NULL)
    op->active_prev->active_next = op->active_next;
  else
    c->active_head = op->active_next;
  if (op->active_next != NULL)
    op->active_next->active_prev = op->active_prev;
  op->active_prev = op->active_next = NULL;
}

static void set_detail(rlock__op *op, const char *fmt, ...)
    RLOCK__PRINTF(2, 3);
static void set_detail(rlock__op *op, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(op->detail, sizeof(op->detail), fmt, ap);
  va_end(ap);
}

/* A release counts on its hold as "releasing" while it runs (watchdog.c
 * neither renews such a hold nor takes a "0" for a loss). */
static void release_unmark(rlock__op *op) {
  if (op->hold_gen == 0)
    return;
  rlock__hold *h = rlock__hold_find(op->client, op->lock->name, op->owner);
  if (h != NULL && h->gen == op->hold_gen && h->releasing > 0)
    h->releasing--;
  op->hold_gen = 0;
}

void rlock__op_finish(rlock__op *op, int result) {
  if (op->state == RLOCK__ST_DONE)
    return;
  rlock_client *c = op->lock->client;
  release_unmark(op);
  rlock__cmd_abandon(op->cmd);
  op->cmd = NULL;
  rlock__sub_leave(op);
  rlock__timed_stop(c, &op->timer);
  active_remove(c, op);
  free(op->latch);
  op->latch = NULL;
  op->state = RLOCK__ST_DONE;
  op->result = result;
  if (result < 0 && op->detail[0] == '\0') {
    if (result == RLOCK_ETIMEDOUT)
      set_detail(op, "no reply from Redis within command_timeout_ms (%" PRId64
                     " ms)", c->opts.command_timeout_ms);
    else
      set_detail(op, "%s", rlock_strerror(result));
  }
  op->done(op); /* op may be gone after this (a blocking caller returned) */
  rlock__suspects_run(c);
}

/* Common handling of a reply that is a transport error or an error reply.
 * Returns true when the op was finished. */
static bool failed(rlock__op *op, redisReply *reply, int err) {
  if (err != 0) {
    rlock__op_finish(op, err);
    return true;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    set_detail(op, "%.*s", (int)reply->len, reply->str);
    rlock__op_finish(op, rlock__reply_error(reply));
    return true;
  }
  return false;
}

static void send_cmd(rlock__op *op, const rlock__script *script, int argc,
                     const char **argv, const size_t *lens, int retries,
                     rlock__reply_cb cb) {
  rlock_client *c = op->lock->client;
  op->state = RLOCK__ST_CMD;
  op->cmd = rlock__cmd_send(c, script, argc, argv, lens, retries, cb, op);
  if (op->cmd == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
}

static int64_t effective_lease(rlock_client *c, int64_t lease_ms) {
  return lease_ms < 0 ? c->opts.watchdog_timeout_ms : lease_ms;
}

/* ---- acquire ---- */

static void send_try(rlock__op *op);

static bool transient(int err) {
  return err == RLOCK_ETIMEDOUT || err == RLOCK_ECONN;
}

/* Whether an op may ride out a connection problem a little longer: until its
 * deadline, or, without one, for as long as an unlock keeps re-sending
 * ((retry_attempts + 1) x (command_timeout + retry_interval)) - after that a
 * dead server is reported, not waited for. */
static bool has_time(rlock__op *op) {
  rlock_client *c = op->lock->client;
  if (c->closing || op->wait_ms == 0)
    return false;
  int64_t now = rlock__now_ms();
  if (op->wait_ms > 0)
    return now < op->deadline;
  if (op->outage_until == 0)
    op->outage_until =
        now + (int64_t)(c->opts.retry_attempts + 1) *
                  (c->opts.command_timeout_ms + c->opts.retry_interval_ms);
  return now < op->outage_until;
}

static void start_trim(rlock__op *op);

/* Gives up on an acquire whose outcome is unknown: the caller gets the
 * transport error and the client trims this owner's field in the
 * background (reconcile.c), so no hold it doesn't know of survives. */
static void give_up(rlock__op *op) {
  rlock__suspect_add(op->lock->client, op->lock, op->owner);
  rlock__op_finish(op, op->lost_err);
}

static void trim_timer_fire(rlock_client *c, rlock__timed *t) {
  (void)c;
  rlock__op *op = (rlock__op *)((char *)t - offsetof(rlock__op, timer));
  if (has_time(op))
    start_trim(op);
  else
    give_up(op);
}

/* wait_ms is the bound of the whole call, also when the server stalls: a
 * try (or trim) still unanswered at the deadline is abandoned and its
 * (name, owner) trimmed in the background once the server answers - the
 * same repair as for a lost reply, so an acquire that lands late leaves no
 * hold behind. The caller gets 0 (not acquired within wait_ms) if the
 * server answered this op before, else RLOCK_ETIMEDOUT. */
static void deadline_fire(rlock_client *c, rlock__timed *t) {
  rlock__op *op = (rlock__op *)((char *)t - offsetof(rlock__op, timer));
  if (op->state != RLOCK__ST_CMD)
    return;
  if (op->cmd == NULL) { /* between commands: settled by their own paths */
    if (!has_time(op))
      give_up(op);
    return;
  }
  rlock__suspect_add(c, op->lock, op->owner);
  if (op->answered) {
    rlock__op_finish(op, 0);
    return;
  }
  set_detail(op, "no answer from Redis within wait_ms (%" PRId64 " ms)",
             op->wait_ms);
  rlock__op_finish(op, RLOCK_ETIMEDOUT);
}

/* Bounds the command just sent by the op's own deadline (when it has one
 * shorter than the command's reply deadline would allow). */
static void arm_deadline(rlock__op *op) {
  if (op->wait_ms <= 0 || op->state != RLOCK__ST_CMD || op->cmd == NULL)
    return;
  op->timer.fire = deadline_fire;
  rlock__timed_start(op->lock->client, &op->timer, op->deadline);
}

static void trim_reply(rlock_client *c, redisReply *reply, int err,
                       void *data) {
  rlock__op *op = data;
  op->cmd = NULL;
  if (err == 0 && reply->type == REDIS_REPLY_ERROR) {
    failed(op, reply, err);
    return;
  }
  if (err != 0 || reply->type != REDIS_REPLY_INTEGER) {
    if (!has_time(op)) {
      give_up(op);
      return;
    }
    op->state = RLOCK__ST_CMD;
    op->timer.fire = trim_timer_fire;
    int64_t at = rlock__now_ms() + c->opts.retry_interval_ms;
    if (op->wait_ms > 0 && op->deadline < at)
      at = op->deadline;
    rlock__timed_start(c, &op->timer, at);
    return;
  }
  op->answered = true;
  rlock__hold_trimmed(c, op->lock->name, op->owner, reply->integer,
                      op->trim_want);
  if (has_time(op))
    send_try(op);
  else
    rlock__op_finish(op, op->lost_err);
}

static void start_trim(rlock__op *op) {
  rlock *lock = op->lock;
  rlock_client *c = lock->client;
  op->trim_want = rlock__hold_count_known(c, lock->name, op->owner);
  op->state = RLOCK__ST_CMD;
  op->cmd = rlock__send_trim(c, lock->name, lock->name_len, lock->channel,
                             lock->channel_len, op->owner, op->trim_want,
                             trim_reply, op);
  if (op->cmd == NULL)
    give_up(op);
  else
    arm_deadline(op);
}

/* The reply to an acquire never came: it may or may not have run. */
static void lost_acquire(rlock__op *op, int err) {
  if (op->lost_err == 0)
    op->lost_err = err;
  if (has_time(op))
    start_trim(op);
  else
    give_up(op);
}

static void try_reply(rlock_client *c, redisReply *reply, int err,
                      void *data) {
  rlock__op *op = data;
  rlock *lock = op->lock;
  op->cmd = NULL;
  if (transient(err)) {
    lost_acquire(op, err);
    return;
  }
  rlock__timed_stop(c, &op->timer); /* the deadline timer, if armed */
  if (failed(op, reply, err))
    return;
  op->answered = true;
  op->lost_err = 0;
  op->outage_until = 0;
  if (reply->type == REDIS_REPLY_NIL) {
    int rc = rlock__hold_add(c, lock->name, op->owner, op->lease_ms);
    rlock__op_finish(op, rc < 0 ? rc : 1);
    return;
  }
  if (reply->type != REDIS_REPLY_INTEGER) {
    set_detail(op, "acquire script replied type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  int64_t ttl = reply->integer;
  if (op->wait_ms == 0) {
    rlock__op_finish(op, 0);
    return;
  }
  int64_t now = rlock__now_ms();
  if (op->wait_ms > 0 && now >= op->deadline) {
    rlock__op_finish(op, 0);
    return;
  }
  if (op->sub == NULL) {
    int joined = rlock__sub_join(c, op, lock->channel, lock->channel_len);
    if (joined < 0) {
      rlock__op_finish(op, joined);
      return;
    }
    if (joined == 0)
      return; /* pubsub calls rlock__op_retry once subscribed */
    /* Already subscribed. If the subscription was live before this try was
     * sent, any release after the try is heard, so sleep now; otherwise try
     * once more (docs/wire-protocol.md, Waiting: subscribe before the
     * re-try). */
    if (op->seen_epoch == 0 ||
        op->seen_epoch !=
            rlock__sub_epoch(c, lock->channel, lock->channel_len)) {
      send_try(op);
      return;
    }
  }
  /* Sleep until a release message, bounded by the holder's TTL (so a lost
   * message costs one TTL, never a hang) and by our own deadline. A key
   * without TTL (-1) is re-checked every watchdog timeout. */
  int64_t sleep_ms = ttl >= 0 ? ttl : c->opts.watchdog_timeout_ms;
  if (op->wait_ms > 0 && op->deadline - now < sleep_ms)
    sleep_ms = op->deadline - now;
  rlock__sub_wait(op, sleep_ms);
}

static void send_try(rlock__op *op) {
  rlock *lock = op->lock;
  rlock_client *c = lock->client;
  char lease[24];
  snprintf(lease, sizeof(lease), "%" PRId64, effective_lease(c, op->lease_ms));
  const char *argv[4] = {"1", lock->name, lease, op->owner};
  size_t lens[4] = {1, lock->name_len, strlen(lease), strlen(op->owner)};
  op->seen_epoch = rlock__sub_epoch(c, lock->channel, lock->channel_len);
  /* Not re-sent on a timeout: a second HINCRBY after a lost reply would
   * count one acquisition twice. */
  send_cmd(op, rlock__script_get(RLOCK__SCRIPT_ACQUIRE), 4, argv, lens, 0,
           try_reply);
  arm_deadline(op);
}

void rlock__op_retry(rlock__op *op) { send_try(op); }

void rlock__op_sub_timeout(rlock__op *op) {
  if (op->wait_ms >= 0 && rlock__now_ms() >= op->deadline) {
    rlock__op_finish(op, 0);
    return;
  }
  set_detail(op, "SUBSCRIBE to %s not confirmed within subscribe_timeout_ms",
             op->lock->channel);
  rlock__op_finish(op, RLOCK_ETIMEDOUT);
}

void rlock__op_sub_failed(rlock__op *op, int err, const char *text,
                          size_t len) {
  set_detail(op, "SUBSCRIBE to %s refused: %.*s", op->lock->channel, (int)len,
             text);
  rlock__op_finish(op, err);
}

/* ---- release ---- */

/* Unlock request ids need only be unique: 128 bits from a per-client random
 * seed and a counter, without a getrandom() call per unlock. */
static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static void latch_id(rlock_client *c, char hex[33]) {
  uint64_t n = ++c->latch_count;
  snprintf(hex, 33, "%016" PRIx64 "%016" PRIx64, mix64(c->latch_seed[0] ^ n),
           mix64(c->latch_seed[1] + n));
}

/* Latches are deleted in batches - one UNLINK per 64 keys or per 100 ms -
 * rather than one DEL per unlock: under contention that is a quarter of the
 * commands per acquisition. A latch left behind expires by its TTL. */
#define LATCH_BATCH_MS 100

/* Sends one UNLINK for every pending latch and forgets them. */
static rlock__cmd *latch_unlink(rlock_client *c, rlock__reply_cb cb) {
  const char *argv[65];
  size_t lens[65];
  argv[0] = "UNLINK";
  lens[0] = 6;
  for (int i = 0; i < c->latch_del_n; i++) {
    argv[i + 1] = c->latch_del[i];
    lens[i + 1] = strlen(c->latch_del[i]);
  }
  rlock__cmd *cmd =
      rlock__cmd_send(c, NULL, c->latch_del_n + 1, argv, lens, 0, cb, NULL);
  rlock__latches_shutdown(c); /* frees the names: the record copied them */
  return cmd;
}

static void latch_flush(rlock_client *c) {
  rlock__timed_stop(c, &c->latch_timer);
  if (c->latch_del_n > 0)
    latch_unlink(c, NULL);
}

static void latch_timer_fire(rlock_client *c, rlock__timed *t) {
  (void)t;
  latch_flush(c);
}

static void latch_forget(rlock_client *c, char *latch) {
  c->latch_del[c->latch_del_n++] = latch;
  if (c->latch_del_n == 64) {
    latch_flush(c);
  } else if (c->latch_del_n == 1) {
    c->latch_timer.fire = latch_timer_fire;
    rlock__timed_start(c, &c->latch_timer, rlock__now_ms() + LATCH_BATCH_MS);
  }
}

static void latch_close_reply(rlock_client *c, redisReply *reply, int err,
                              void *data) {
  (void)reply, (void)err, (void)data;
  if (--c->trims_draining == 0)
    rlock__loop_drained(c);
}

int rlock__latches_flush_at_close(rlock_client *c) {
  if (c->latch_del_n == 0 || c->cmd.ac == NULL)
    return 0;
  if (latch_unlink(c, latch_close_reply) == NULL)
    return 0;
  c->trims_draining++;
  return 1;
}

void rlock__latches_shutdown(rlock_client *c) {
  for (int i = 0; i < c->latch_del_n; i++)
    free(c->latch_del[i]);
  c->latch_del_n = 0;
}

static void release_reply(rlock_client *c, redisReply *reply, int err,
                          void *data) {
  rlock__op *op = data;
  op->cmd = NULL;
  release_unmark(op);
  rlock__hold *h = rlock__hold_find(c, op->lock->name, op->owner);
  if (transient(err)) {
    /* Every re-send (same latch) went unanswered. The caller asked to give
     * up one hold, so the client now counts one fewer and trims the
     * server's count down to that once it answers. */
    if (h != NULL) {
      if (--h->count <= 0)
        rlock__hold_drop(c, h);
      else if (h->watchdog_count > h->count)
        h->watchdog_count = h->count;
    }
    rlock__suspect_add(c, op->lock, op->owner);
    rlock__op_finish(op, err);
    return;
  }
  if (failed(op, reply, err))
    return;
  if (reply->type == REDIS_REPLY_NIL) {
    if (h != NULL) {
      /* We held it, the server says we don't: it expired or was deleted. */
      set_detail(op, "lock '%s' expired or was deleted before this unlock",
                 op->lock->name);
      rlock__hold_drop(c, h);
      rlock__op_finish(op, RLOCK_ELOCKLOST);
    } else {
      set_detail(op, "lock '%s' is not held by %s", op->lock->name, op->owner);
      rlock__op_finish(op, RLOCK_ENOTOWNER);
    }
    return;
  }
  if (reply->type != REDIS_REPLY_INTEGER ||
      (reply->integer != 0 && reply->integer != 1)) {
    set_detail(op, "release script replied an unexpected value");
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  /* The latch did its job once this reply arrived; Java deletes it too. */
  latch_forget(c, op->latch);
  op->latch = NULL;
  if (h != NULL) {
    if (reply->integer == 1 && h->count > 1) {
      /* Released on the server while the client counted more holds: the
       * outer hold was lost (its lease ran out, or the key was deleted) and
       * this owner's later re-entry took the free lock afresh. The lock was
       * not held throughout, so say so; the outer unlocks that remain get
       * RLOCK_ELOCKLOST too. */
      h->count--;
      if (h->watchdog_count > h->count)
        h->watchdog_count = h->count;
      h->lost = true;
      set_detail(op, "lock '%s' was lost while re-entered (it expired or "
                     "was deleted after an outer hold was taken); this "
                     "unlock released a later hold",
                 op->lock->name);
      rlock__op_finish(op, RLOCK_ELOCKLOST);
      return;
    }
    if (reply->integer == 1) {
      rlock__hold_drop(c, h);
    } else {
      /* Still held: which kind of hold ended is unknown, so renewal goes on
       * while any watchdog hold may remain (as Redisson does). */
      if (h->count > 1)
        h->count--;
      if (h->watchdog_count > h->count)
        h->watchdog_count = h->count;
    }
  }
  rlock__op_finish(op, (int)reply->integer);
}

static void start_release(rlock__op *op) {
  rlock *lock = op->lock;
  rlock_client *c = lock->client;
  char hex[33];
  latch_id(c, hex);
  /* redisson_unlock_latch:{name}:<32 hex>, a fresh request id per unlock
   * call; re-sends of this call reuse it. */
  size_t latch_len = 22 + lock->braced_len + 1 + 32;
  op->latch = malloc(latch_len + 1);
  if (op->latch == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  snprintf(op->latch, latch_len + 1, "redisson_unlock_latch:%s:%s",
           lock->braced, hex);
  rlock__hold *h = rlock__hold_find(c, lock->name, op->owner);
  if (h != NULL) {
    h->releasing++;
    h->release_seq++;
    op->hold_gen = h->gen;
  }
  int64_t lease = c->opts.watchdog_timeout_ms;
  if (h != NULL && h->watchdog_count == 0 && h->lease_ms > 0)
    lease = h->lease_ms;
  char lease_s[24], latch_ttl[24];
  snprintf(lease_s, sizeof(lease_s), "%" PRId64, lease);
  /* The latch must outlive every re-send of this unlock. */
  int64_t ttl = (int64_t)(c->opts.retry_attempts + 1) *
                (c->opts.command_timeout_ms + c->opts.retry_interval_ms);
  snprintf(latch_ttl, sizeof(latch_ttl), "%" PRId64, ttl);
  const char *publish = c->opts.sharded_pubsub ? "SPUBLISH" : "PUBLISH";
  const char *argv[9] = {"3",     lock->name, lock->channel, op->latch, "0",
                         lease_s, op->owner,  publish,       latch_ttl};
  size_t lens[9];
  for (int i = 0; i < 9; i++)
    lens[i] = strlen(argv[i]);
  lens[1] = lock->name_len;
  send_cmd(op, rlock__script_get(RLOCK__SCRIPT_RELEASE), 9, argv, lens,
           c->opts.retry_attempts, release_reply);
}

/* ---- force unlock and queries ---- */

static void int_reply(rlock_client *c, redisReply *reply, int err,
                      void *data) {
  (void)c;
  rlock__op *op = data;
  op->cmd = NULL;
  if (failed(op, reply, err))
    return;
  if (op->kind == RLOCK__OP_HOLD_COUNT) {
    if (reply->type == REDIS_REPLY_NIL) {
      op->value = 0;
      rlock__op_finish(op, 0);
      return;
    }
    if (reply->type == REDIS_REPLY_STRING) {
      char *end = NULL;
      op->value = strtoll(reply->str, &end, 10);
      rlock__op_finish(op, end != reply->str ? 0 : RLOCK_EPROTO);
      return;
    }
  }
  if (reply->type != REDIS_REPLY_INTEGER) {
    set_detail(op, "unexpected reply type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  if (op->kind == RLOCK__OP_TTL) {
    op->value = reply->integer;
    rlock__op_finish(op, 0);
  } else {
    rlock__op_finish(op, reply->integer != 0 ? 1 : 0); /* value stays 0 */
  }
}

/* ---- cancellation ---- */

/* Ends an active acquire with RLOCK_ECANCELED. A try or trim still in
 * flight may run on the server after all; the pair then becomes a suspect,
 * whose trim is sent right away - behind that command on the same
 * connection - so a cancelled acquire leaves no hold and no renewal. */
static void cancel_acquire(rlock__op *op) {
  if (op->cmd != NULL)
    rlock__suspect_add(op->client, op->lock, op->owner);
  set_detail(op, "acquire of '%s' was canceled", op->lock->name);
  rlock__op_finish(op, RLOCK_ECANCELED);
}

static void run_control(rlock_client *c, rlock__op *op) {
  int count = 0;
  if (op->kind == RLOCK__OP_INTERRUPT) {
    /* Acquires still queued (e.g. started by the callback that interrupts)
     * end as soon as they start. */
    uv_mutex_lock(&c->queue_mutex);
    for (rlock__op *q = c->queue_head; q != NULL; q = q->next) {
      if (q->kind == RLOCK__OP_ACQUIRE && q->owner_id == op->owner_id &&
          !q->canceled) {
        q->canceled = true;
        count++;
      }
    }
    uv_mutex_unlock(&c->queue_mutex);
  }
  if (op->kind == RLOCK__OP_CANCEL) {
    rlock__op *target = op->target;
    if (target->state != RLOCK__ST_DONE && target->state != RLOCK__ST_NEW)
      cancel_acquire(target);
  } else {
    /* Collect first: finishing ops edits the active list. */
    rlock__op *hit = NULL;
    for (rlock__op *a = c->active_head; a != NULL; a = a->active_next) {
      if (a->kind == RLOCK__OP_ACQUIRE && a->owner_id == op->owner_id) {
        a->target = hit;
        hit = a;
        count++;
      }
    }
    while (hit != NULL) {
      rlock__op *next = hit->target;
      hit->target = NULL;
      cancel_acquire(hit);
      hit = next;
    }
  }
  op->result = count;
  op->state = RLOCK__ST_DONE;
  op->done(op);
}

void rlock__op_start(rlock_client *c, rlock__op *op) {
  if (op->kind == RLOCK__OP_CANCEL || op->kind == RLOCK__OP_INTERRUPT) {
    run_control(c, op);
    return;
  }
  rlock *lock = op->lock;
  active_add(c, op);
  if (op->canceled) {
    set_detail(op, "acquire of '%s' was canceled", lock->name);
    rlock__op_finish(op, RLOCK_ECANCELED);
    return;
  }
  int retries = c->opts.retry_attempts;
  switch (op->kind) {
  case RLOCK__OP_ACQUIRE:
    send_try(op);
    return;
  case RLOCK__OP_RELEASE:
    start_release(op);
    return;
  case RLOCK__OP_FORCE_UNLOCK: {
    const char *publish = c->opts.sharded_pubsub ? "SPUBLISH" : "PUBLISH";
    const char *argv[5] = {"2", lock->name, lock->channel, "0", publish};
    size_t lens[5] = {1, lock->name_len, lock->channel_len, 1,
                      strlen(publish)};
    send_cmd(op, rlock__script_get(RLOCK__SCRIPT_FORCE), 5, argv, lens,
             retries, int_reply);
    return;
  }
  case RLOCK__OP_IS_LOCKED: {
    const char *argv[2] = {"EXISTS", lock->name};
    size_t lens[2] = {6, lock->name_len};
    send_cmd(op, NULL, 2, argv, lens, retries, int_reply);
    return;
  }
  case RLOCK__OP_IS_HELD:
  case RLOCK__OP_HOLD_COUNT: {
    bool held = op->kind == RLOCK__OP_IS_HELD;
    const char *argv[3] = {held ? "HEXISTS" : "HGET", lock->name, op->owner};
    size_t lens[3] = {held ? 7u : 4u, lock->name_len, strlen(op->owner)};
    send_cmd(op, NULL, 3, argv, lens, retries, int_reply);
    return;
  }
  case RLOCK__OP_TTL: {
    const char *argv[2] = {"PTTL", lock->name};
    size_t lens[2] = {4, lock->name_len};
    send_cmd(op, NULL, 2, argv, lens, retries, int_reply);
    return;
  }
  case RLOCK__OP_CANCEL:
  case RLOCK__OP_INTERRUPT:
    return; /* handled above */
  }
}

/* ---- argument checks ---- */

static int bad_arg(const char *what) {
  rlock__set_last_error("%s", what);
  return RLOCK_EINVAL;
}

static int check_lease(int64_t lease_ms) {
  if (lease_ms == 0)
    return bad_arg("lease_ms must be > 0, or < 0 for watchdog mode");
  if (lease_ms > LEASE_MAX_MS)
    return bad_arg("lease_ms is too large (max 2^40 ms)");
  return 0;
}

static void op_init(rlock__op *op, rlock *lock, rlock__op_kind kind,
                    uint64_t owner) {
  memset(op, 0, sizeof(*op));
  op->kind = kind;
  op->lock = lock;
  op->client = lock->client;
  op->state = RLOCK__ST_NEW;
  op->wait_ms = -1;
  op->lease_ms = -1;
  op->owner_id = owner;
  snprintf(op->owner, sizeof(op->owner), "%s:%" PRIu64, lock->client->id,
           owner);
}

static void set_wait(rlock__op *op, int64_t wait_ms, int64_t lease_ms) {
  /* A wait too long to add to the clock is as good as forever. */
  op->wait_ms = (wait_ms > LEASE_MAX_MS) ? -1 : wait_ms;
  op->lease_ms = lease_ms;
  if (op->wait_ms > 0)
    op->deadline = rlock__now_ms() + op->wait_ms;
}

/* ---- blocking facade ---- */

static void sync_done(rlock__op *op) { uv_sem_post((uv_sem_t *)op->data); }

static int run_sync(rlock_client *c, rlock__op *op) {
  if (rlock__on_loop_thread(c)) {
    rlock__set_last_error("blocking rlock call made on the client's loop "
                          "thread (e.g. inside a callback)");
    return RLOCK_EDEADLK;
  }
  uv_sem_t sem;
  int sys = uv_sem_init(&sem, 0);
  if (sys != 0) {
    rlock__set_last_error("uv_sem_init failed: %s", uv_strerror(sys));
    return RLOCK_ESYS;
  }
  op->done = sync_done;
  op->data = &sem;
  int rc = rlock__loop_submit(c, op);
  if (rc == 0) {
    uv_sem_wait(&sem);
    rc = op->result;
  } else {
    snprintf(op->detail, sizeof(op->detail), "%s", rlock__submit_error(rc));
  }
  uv_sem_destroy(&sem);
  if (rc < 0)
    rlock__set_last_error("%s", op->detail[0] ? op->detail
                                              : rlock_strerror(rc));
  else
    rlock__clear_last_error();
  return rc;
}

static int acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                   int64_t lease_ms) {
  if (lock == NULL)
    return bad_arg("lock is NULL");
  int rc = check_lease(lease_ms);
  if (rc != 0)
    return rc;
  rlock__op op;
  op_init(&op, lock, RLOCK__OP_ACQUIRE, owner);
  set_wait(&op, wait_ms, lease_ms);
  return run_sync(lock->client, &op);
}

static int simple(rlock *lock, rlock__op_kind kind, uint64_t owner,
                  int64_t *value) {
  if (lock == NULL)
    return bad_arg("lock is NULL");
  rlock__op op;
  op_init(&op, lock, kind, owner);
  int rc = run_sync(lock->client, &op);
  if (value != NULL && rc >= 0)
    *value = op.value;
  return rc;
}

int rlock_lock_owner(rlock *lock, uint64_t owner, int64_t lease_ms) {
  int rc = acquire(lock, owner, -1, lease_ms);
  return rc == 1 ? 0 : (rc == 0 ? RLOCK_EPROTO : rc);
}

int rlock_try_lock_owner(rlock *lock, uint64_t owner, int64_t wait_ms,
                         int64_t lease_ms) {
  return acquire(lock, owner, wait_ms, lease_ms);
}

int rlock_unlock_owner(rlock *lock, uint64_t owner) {
  return simple(lock, RLOCK__OP_RELEASE, owner, NULL);
}

int rlock_is_held_by_owner(rlock *lock, uint64_t owner) {
  return simple(lock, RLOCK__OP_IS_HELD, owner, NULL);
}

int64_t rlock_hold_count_owner(rlock *lock, uint64_t owner) {
  int64_t count = 0;
  int rc = simple(lock, RLOCK__OP_HOLD_COUNT, owner, &count);
  return rc < 0 ? rc : count;
}

int rlock_lock(rlock *lock, int64_t lease_ms) {
  return rlock_lock_owner(lock, rlock_thread_id(), lease_ms);
}

int rlock_try_lock(rlock *lock, int64_t wait_ms, int64_t lease_ms) {
  return acquire(lock, rlock_thread_id(), wait_ms, lease_ms);
}

int rlock_unlock(rlock *lock) {
  return rlock_unlock_owner(lock, rlock_thread_id());
}

int rlock_force_unlock(rlock *lock) {
  return simple(lock, RLOCK__OP_FORCE_UNLOCK, 0, NULL);
}

int rlock_is_locked(rlock *lock) {
  return simple(lock, RLOCK__OP_IS_LOCKED, 0, NULL);
}

int rlock_is_held_by_current_thread(rlock *lock) {
  return rlock_is_held_by_owner(lock, rlock_thread_id());
}

int64_t rlock_hold_count(rlock *lock) {
  return rlock_hold_count_owner(lock, rlock_thread_id());
}

int rlock_remain_ttl(rlock *lock, int64_t *ttl_ms) {
  if (ttl_ms == NULL)
    return bad_arg("ttl_ms is NULL");
  return simple(lock, RLOCK__OP_TTL, 0, ttl_ms);
}

static void noop_done(rlock__op *op) { (void)op; }

static void interrupt_done(rlock__op *op) {
  uv_sem_post((uv_sem_t *)op->data);
}

int rlock_interrupt(rlock_client *c, uint64_t owner) {
  if (c == NULL)
    return bad_arg("client is NULL");
  rlock__op op;
  memset(&op, 0, sizeof(op));
  op.kind = RLOCK__OP_INTERRUPT;
  op.client = c;
  op.owner_id = owner;
  if (rlock__on_loop_thread(c)) { /* from a callback: act right here */
    op.done = noop_done;
    run_control(c, &op);
    rlock__clear_last_error(); /* a count, never an error */
    return op.result;
  }
  uv_sem_t sem;
  int sys = uv_sem_init(&sem, 0);
  if (sys != 0) {
    rlock__set_last_error("uv_sem_init failed: %s", uv_strerror(sys));
    return RLOCK_ESYS;
  }
  op.done = interrupt_done;
  op.data = &sem;
  int rc = rlock__loop_submit(c, &op);
  if (rc == 0) {
    uv_sem_wait(&sem);
    rc = op.result;
  } else {
    snprintf(op.detail, sizeof(op.detail), "%s", rlock__submit_error(rc));
  }
  uv_sem_destroy(&sem);
  /* Like every call: a detail on failure (also ECLOSED from the queue drain
   * at close), none left over from an earlier call on success. */
  if (rc < 0)
    rlock__set_last_error("%s", op.detail[0] ? op.detail : rlock_strerror(rc));
  else
    rlock__clear_last_error();
  return rc;
}

/* ---- asynchronous API ---- */

/* Two references: the caller's (rlock_req_free) and the loop's (dropped
 * after the callback), so rlock_cancel() never touches freed memory. */
struct rlock_req {
  atomic_int refs;
  rlock_cb cb;
  void *data;
  rlock__op op;
};

static void lock_release(rlock *lock);

static void req_release(rlock_req *req) {
  if (atomic_fetch_sub(&req->refs, 1) != 1)
    return;
  rlock *lock = req->op.lock;
  free(req);
  lock_release(lock);
}

static void async_done(rlock__op *op) {
  rlock_req *req = (rlock_req *)((char *)op - offsetof(rlock_req, op));
  /* Inside the callback, rlock_last_error() describes a failure. */
  if (op->result < 0)
    rlock__set_last_error("%s", op->detail);
  else
    rlock__clear_last_error();
  if (req->cb != NULL)
    req->cb(op->result, op->value, req->data);
  req_release(req);
}

static int submit_async(rlock *lock, rlock__op_kind kind, uint64_t owner,
                        int64_t wait_ms, int64_t lease_ms, rlock_cb cb,
                        void *data, rlock_req **out) {
  if (out != NULL)
    *out = NULL;
  if (lock == NULL)
    return bad_arg("lock is NULL");
  if (kind == RLOCK__OP_ACQUIRE) {
    int rc = check_lease(lease_ms);
    if (rc != 0)
      return rc;
  }
  rlock_req *req = malloc(sizeof(*req));
  if (req == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  atomic_init(&req->refs, out != NULL ? 2 : 1);
  req->cb = cb;
  req->data = data;
  op_init(&req->op, lock, kind, owner);
  if (kind == RLOCK__OP_ACQUIRE)
    set_wait(&req->op, wait_ms, lease_ms);
  req->op.done = async_done;
  atomic_fetch_add(&lock->refs, 1);
  if (out != NULL)
    *out = req;
  int rc = rlock__loop_submit(lock->client, &req->op);
  if (rc != 0) {
    if (out != NULL)
      *out = NULL;
    atomic_fetch_sub(&lock->refs, 1);
    free(req);
    rlock__set_last_error("%s", rlock__submit_error(rc));
    return rc;
  }
  rlock__clear_last_error();
  return 0;
}

int rlock_lock_async(rlock *lock, uint64_t owner, int64_t wait_ms,
                     int64_t lease_ms, rlock_cb cb, void *data,
                     rlock_req **req) {
  return submit_async(lock, RLOCK__OP_ACQUIRE, owner, wait_ms, lease_ms, cb,
                      data, req);
}

int rlock_unlock_async(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                       rlock_req **req) {
  return submit_async(lock, RLOCK__OP_RELEASE, owner, 0, 0, cb, data, req);
}

int rlock_force_unlock_async(rlock *lock, rlock_cb cb, void *data,
                             rlock_req **req) {
  return submit_async(lock, RLOCK__OP_FORCE_UNLOCK, 0, 0, 0, cb, data, req);
}

int rlock_is_locked_async(rlock *lock, rlock_cb cb, void *data,
                          rlock_req **req) {
  return submit_async(lock, RLOCK__OP_IS_LOCKED, 0, 0, 0, cb, data, req);
}

int rlock_is_held_async(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                        rlock_req **req) {
  return submit_async(lock, RLOCK__OP_IS_HELD, owner, 0, 0, cb, data, req);
}

int rlock_hold_count_async(rlock *lock, uint64_t owner, rlock_cb cb,
                           void *data, rlock_req **req) {
  return submit_async(lock, RLOCK__OP_HOLD_COUNT, owner, 0, 0, cb, data, req);
}

int rlock_remain_ttl_async(rlock *lock, rlock_cb cb, void *data,
                           rlock_req **req) {
  return submit_async(lock, RLOCK__OP_TTL, 0, 0, 0, cb, data, req);
}

static void cancel_done(rlock__op *op) {
  rlock_req *target =
      (rlock_req *)((char *)op->target - offsetof(rlock_req, op));
  free(op);
  req_release(target);
}

int rlock_cancel(rlock_req *req) {
  if (req == NULL || req->op.kind != RLOCK__OP_ACQUIRE)
    return bad_arg("rlock_cancel takes an acquire request");
  rlock_client *c = req->op.client;
  if (rlock__on_loop_thread(c)) {
    if (req->op.state == RLOCK__ST_NEW)
      req->op.canceled = true; /* still queued: ends as soon as it starts */
    else if (req->op.state != RLOCK__ST_DONE)
      cancel_acquire(&req->op);
    rlock__clear_last_error();
    return 0;
  }
  rlock__op *op = calloc(1, sizeof(*op));
  if (op == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  op->kind = RLOCK__OP_CANCEL;
  op->client = c;
  op->target = &req->op;
  op->done = cancel_done;
  atomic_fetch_add(&req->refs, 1); /* the target stays valid until then */
  int rc = rlock__loop_submit(c, op);
  if (rc != 0) {
    atomic_fetch_sub(&req->refs, 1);
    free(op);
    rlock__set_last_error("%s", rlock__submit_error(rc));
  } else {
    rlock__clear_last_error();
  }
  return rc;
}

void rlock_req_free(rlock_req *req) {
  if (req != NULL)
    req_release(req);
}

static void lock_release(rlock *lock) {
  if (atomic_fetch_sub(&lock->refs, 1) != 1)
    return;
  rlock_client *c = lock->client;
  free(lock->name);
  free(lock->braced);
  free(lock->channel);
  free(lock);
  rlock__client_release(c);
}

void rlock_free(rlock *lock) {
  if (lock != NULL)
    lock_release(lock);
}

uint64_t rlock_owner_new(void) { return rlock__id_next(); }
