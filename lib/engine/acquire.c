/* The acquire loop, for every primitive: try; if the lock is held, join
 * the primitive's channel and try again once subscribed (a release between
 * the failed try and the subscription would go unheard); sleep until a
 * message, at most the holder's TTL and the caller's deadline; try again.
 * A try whose reply is lost may or may not have run: it is never re-sent
 * (a second acquire would count one acquisition twice) but repaired - the
 * owner's count is trimmed back to what the client knows (repair.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"

static void send_try(rlock__op *op);

/* Whether an op may ride out a connection problem a little longer: until its
 * deadline, or, without one, for as long as an unlock keeps re-sending
 * ((retry_attempts + 1) x (command_timeout + retry_interval), counted from
 * the send of the try that went unanswered) - after that a dead server is
 * reported, not waited for. */
static bool has_time(rlock__op *op) {
  const rlock_options *o = &op->engine->core->opts;
  if (op->engine->core->closing || op->wait_ms == 0)
    return false;
  int64_t now = rlock__now_ms();
  if (op->wait_ms > 0)
    return now < op->deadline;
  if (op->u.acq.outage_until == 0)
    op->u.acq.outage_until = (op->u.acq.try_sent_ms > 0 ? op->u.acq.try_sent_ms : now) +
                       (int64_t)(o->retry_attempts + 1) *
                           (o->command_timeout_ms + o->retry_interval_ms);
  return now < op->u.acq.outage_until;
}

/* The time by which the op must have ended whatever is in flight: its
 * deadline, or while it rides out an outage without one, the outage's end;
 * 0: none. */
static int64_t end_by(const rlock__op *op) {
  if (op->wait_ms > 0)
    return op->deadline;
  if (op->wait_ms < 0)
    return op->u.acq.outage_until;
  return 0;
}

static void start_trim(rlock__op *op);

/* The lease the try sets (the watchdog timeout without one). */
static int64_t try_lease(const rlock__op *op) {
  return op->lease_ms < 0 ? op->engine->core->opts.watchdog_timeout_ms
                          : op->lease_ms;
}

/* A try (or trim) of op whose reply will not be read may still run: for a
 * hold this owner already has, its lease may then cut the expiry (lease
 * safety, hold.c). */
static void try_unknown(rlock__op *op) {
  if (op->lock->prim->hold != NULL)
    rlock__hold_lease_lost(op->engine, op->lock, op->owner, try_lease(op));
}

/* Gives up on an acquire whose outcome is unknown: the caller gets the
 * transport error and the client trims this owner's field in the
 * background, so no hold it doesn't know of survives. */
static void give_up(rlock__op *op) {
  rlock__suspect_add(op->engine, op->lock, op->owner);
  rlock__op_finish(op, op->u.acq.lost_err);
}

/* Between commands of an op riding out an outage: `fire` runs after
 * retry_interval_ms, or at the op's end if that comes first. */
static void retry_later(rlock__op *op, void (*fire)(rlock__timed *)) {
  op->state = RLOCK__ST_CMD;
  op->timer.fire = fire;
  int64_t at = rlock__now_ms() + op->engine->core->opts.retry_interval_ms;
  int64_t end = end_by(op);
  if (end > 0 && end < at)
    at = end;
  rlock__timed_start(op->engine->core, &op->timer, at);
}

static void trim_timer_fire(rlock__timed *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, timer);
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
static void deadline_fire(rlock__timed *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, timer);
  if (op->state != RLOCK__ST_CMD)
    return;
  if (op->cmd == NULL) { /* between commands: settled by their own paths */
    if (!has_time(op))
      give_up(op);
    return;
  }
  try_unknown(op);
  rlock__suspect_add(op->engine, op->lock, op->owner);
  if (op->u.acq.lost_err == RLOCK_ENOREPLICA) {
    /* The last the server said: the lock was free, and this op took it
     * and undid it for want of a replica's confirmation (try_reply). The
     * command in flight is that undo or the try after it: the lock is not
     * known to be busy, so never "not acquired" (issue 33). */
    rlock__op_finish(op, RLOCK_ENOREPLICA);
    return;
  }
  if (op->u.acq.answered) {
    rlock__op_finish(op, 0);
    return;
  }
  rlock__op_detail(op, "no answer from Redis within wait_ms (%" PRId64 " ms)",
                   op->wait_ms);
  rlock__op_finish(op, RLOCK_ETIMEDOUT);
}

/* An op without deadline riding out an outage reaches the outage's end
 * with a command (a trim, or a try after one) still unanswered: it gives up
 * now rather than wait out that command's own timeout - the documented
 * bound holds (issue 24). The command may still run: trimmed later. */
static void outage_fire(rlock__timed *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, timer);
  if (op->state == RLOCK__ST_CMD) {
    try_unknown(op);
    give_up(op);
  }
}

/* Bounds the command just sent by the op's own deadline, or by the end of
 * the outage it rides out. */
static void arm_deadline(rlock__op *op) {
  int64_t at = end_by(op);
  if (at == 0 || op->state != RLOCK__ST_CMD || op->cmd == NULL)
    return;
  op->timer.fire = op->wait_ms > 0 ? deadline_fire : outage_fire;
  rlock__timed_start(op->engine->core, &op->timer, at);
}

static void trim_reply(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock__op *op = data;
  rlock__engine *e = op->engine;
  op->cmd = NULL;
  if (err == 0 && reply->type == REDIS_REPLY_ERROR) {
    rlock__op_failed(op, reply, err);
    return;
  }
  if (err != 0 || reply->type != REDIS_REPLY_INTEGER) {
    if (!has_time(op)) {
      give_up(op);
      return;
    }
    retry_later(op, trim_timer_fire);
    return;
  }
  op->u.acq.answered = true;
  rlock__hold_trimmed(e, op->lock, op->owner, reply->integer,
                      op->u.acq.trim_want);
  if (has_time(op) && !op->u.acq.sync_refused)
    send_try(op);
  else
    rlock__op_finish(op, op->u.acq.lost_err);
}

static void start_trim(rlock__op *op) {
  rlock__engine *e = op->engine;
  op->u.acq.trim_want = rlock__hold_count_known(e, op->lock, op->owner);
  op->state = RLOCK__ST_CMD;
  op->cmd = rlock__trim_send(e, op->lock, op->owner, op->u.acq.trim_want,
                             trim_reply, op);
  if (op->cmd == NULL)
    give_up(op);
  else
    arm_deadline(op);
}

static void start_undo(rlock__op *op);

static void retry_timer_fire(rlock__timed *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, timer);
  if (has_time(op))
    send_try(op);
  else
    rlock__op_finish(op, op->u.acq.lost_err);
}

static void undo_timer_fire(rlock__timed *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, timer);
  if (has_time(op))
    start_undo(op);
  else
    rlock__op_finish(op, op->u.acq.lost_err);
}

/* The undo of a lost try answered (or not): try again while there is
 * time; an undo whose reply is lost too is sent again after
 * retry_interval_ms. */
static void undo_reply(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (err == 0 && reply->type == REDIS_REPLY_ERROR) {
    rlock__op_failed(op, reply, err);
    return;
  }
  if (err != 0) {
    if (!has_time(op)) {
      rlock__op_finish(op, op->u.acq.lost_err);
      return;
    }
    retry_later(op, undo_timer_fire);
    return;
  }
  op->u.acq.answered = true;
  if (has_time(op))
    send_try(op);
  else
    rlock__op_finish(op, op->u.acq.lost_err);
}

/* A kind without holds (the semaphores, the latch's await) whose try's
 * reply was lost rides it out as a lock waiter does (issue 33): the
 * kind's abandon gives back what that try may have taken (the semaphores'
 * take record, the permit ids), sent on the connection that answers next,
 * so it runs after the lost try; then it tries again. A try that changes
 * nothing (try_reads_only) is sent again after retry_interval_ms. */
static void start_undo(rlock__op *op) {
  op->state = RLOCK__ST_CMD;
  if (op->lock->prim->abandon == NULL) {
    retry_later(op, retry_timer_fire);
    return;
  }
  op->cmd = op->lock->prim->abandon(op, undo_reply, op);
  if (op->cmd == NULL)
    rlock__op_finish(op, op->u.acq.lost_err);
  else
    arm_deadline(op);
}

/* The reply to an acquire never came: it may or may not have run. */
static void lost_acquire(rlock__op *op, int err) {
  if (op->u.acq.lost_err == 0)
    op->u.acq.lost_err = err;
  try_unknown(op);
  if (op->lock->prim->hold == NULL || op->lock->prim->hold->trim == NULL) {
    /* no holds, or no repair: nothing to trim */
    /* Ridden out when what the lost try did can be undone or did nothing;
     * else (the FasterMultiLock: a re-sent try could count its values
     * twice) the error ends the wait, as before. */
    if (has_time(op) &&
        (op->lock->prim->abandon != NULL || op->lock->prim->try_reads_only))
      start_undo(op);
    else
      rlock__op_finish(op, err);
    return;
  }
  if (has_time(op))
    start_trim(op);
  else
    give_up(op);
}

/* See try_reply: the longest sleep after a local handoff missed. */
#define HANDOFF_MISSED_SLEEP_MS 50

/* The next poll back-off: 1 ms, then twice the last plus a jitter below
 * the number of polls so far, at most RLOCK__POLL_MAX_MS
 * (docs/wire-protocol.md, "The spin lock"). */
static int64_t backoff_next(rlock__op *op) {
  op->u.acq.polls++;
  if (op->u.acq.backoff_ms <= 0) {
    op->u.acq.backoff_ms = 1;
  } else {
    /* jitter: a cheap hash of the op's address and poll count */
    uint64_t h = ((uint64_t)(uintptr_t)op ^ (uint64_t)op->u.acq.polls) *
                 UINT64_C(0x9e3779b97f4a7c15);
    op->u.acq.backoff_ms = op->u.acq.backoff_ms * 2 + (int64_t)((h >> 33) %
                                                    (uint64_t)op->u.acq.polls);
    if (op->u.acq.backoff_ms > RLOCK__POLL_MAX_MS)
      op->u.acq.backoff_ms = RLOCK__POLL_MAX_MS;
  }
  return op->u.acq.backoff_ms;
}

static void poll_timer_fire(rlock__timed *t) {
  send_try(RLOCK__CONTAINER_OF(t, rlock__op, timer));
}

static void try_answer(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  rlock__op *op = data;
  rlock *lock = op->lock;
  rlock__engine *e = op->engine;
  op->cmd = NULL;
  if (rlock__transient(err)) {
    lost_acquire(op, err);
    return;
  }
  rlock__timed_stop(e->core, &op->timer); /* the deadline, if armed */
  if (rlock__op_failed(op, reply, err))
    return;
  op->u.acq.answered = true;
  int64_t outage_until = op->u.acq.outage_until;
  op->u.acq.lost_err = 0;
  op->u.acq.outage_until = 0;
  int64_t ttl = -1;
  int got = lock->prim->read_try(op, reply, &ttl);
  if (got < 0) {
    rlock__op_finish(op, got);
    return;
  }
  if (got == RLOCK__TRY_ACQUIRED) {
    if (lock->prim->hold == NULL) { /* nothing is held */
      rlock__op_finish(op, 1);
      return;
    }
    if (rlock__net_reply_unsynced(n)) {
      /* Replica sync: the master granted it, no replica confirmed it in
       * time - a failover now would hand the lock to someone else. As
       * Java does, the acquire is undone - the hold count trimmed back to
       * what this owner knew, before the call returns - and tried again
       * while the call has time (a wait without deadline: as long as an
       * outage is ridden out); then it fails with RLOCK_ENOREPLICA. */
      op->u.acq.outage_until = outage_until;
      op->u.acq.lost_err = RLOCK_ENOREPLICA;
      const char *refused = rlock__net_reply_sync_refused(n);
      if (refused != NULL) {
        /* The WAIT itself was refused (an ACL user without +wait): every
         * try would be, so undo once and fail - no retry (issue 33). */
        op->u.acq.sync_refused = true;
        rlock__op_detail(op, "replica sync's WAIT refused by the server "
                             "(%.120s): the ACL user needs +wait (and "
                             "+waitaof), or set replica_sync = 0; undone",
                         refused);
      } else {
        rlock__op_detail(op, "no replica confirmed the acquire within "
                             "replica_sync_timeout_ms (%lld ms); undone",
                         (long long)e->core->opts.replica_sync_timeout_ms);
      }
      start_trim(op);
      return;
    }
    int rc = rlock__hold_add(e, lock, op->owner, op->lease_ms,
                             op->u.acq.try_sent_ms, op->u.acq.handoff_streak);
    rlock__op_finish(op, rc < 0 ? rc : 1);
    return;
  }
  /* A local handoff that did not hand over: the release behind which this
   * try went did not free the lock first (it was re-sent after NOSCRIPT,
   * or another client came between). Its message must wake normally, and
   * if it was already taken for this try's, this waiter sleeps briefly. */
  bool handoff_missed = op->u.acq.handoff_streak > 0;
  if (handoff_missed)
    rlock__chan_unabsorb(e->net, op->u.acq.wchan, op->u.acq.wchan_len);
  op->u.acq.handoff_streak = 0;
  if (op->wait_ms == 0) {
    rlock__op_finish(op, 0);
    return;
  }
  int64_t now = rlock__now_ms();
  if (op->wait_ms > 0 && now >= op->deadline) {
    rlock__op_finish(op, 0);
    return;
  }
  if (lock->prim->polls) {
    /* No channel (the spin lock): the hint is not used; sleep a back-off. */
    int64_t sleep_ms = backoff_next(op);
    if (op->wait_ms > 0 && op->deadline - now < sleep_ms)
      sleep_ms = op->deadline - now;
    op->state = RLOCK__ST_WAITING;
    op->timer.fire = poll_timer_fire;
    rlock__timed_start(e->core, &op->timer, now + sleep_ms);
    return;
  }
  /* "Try again now" (the fair lock while the head of its queue has not
   * taken the lock yet): not a busy loop - wait for a message, at most a
   * back-off that doubles from 1 ms. */
  if (ttl == 0)
    ttl = backoff_next(op);
  else
    op->u.acq.backoff_ms = op->u.acq.polls = 0;
  if (op->waiter.chan == NULL) {
    int64_t confirm_by = now + e->core->opts.subscribe_timeout_ms;
    if (op->wait_ms > 0 && op->deadline < confirm_by)
      confirm_by = op->deadline;
    op->state = RLOCK__ST_WAITING;
    int joined = rlock__chan_join(e->net, &op->waiter, op->u.acq.wchan,
                                  op->u.acq.wchan_len, lock->prim->on_message,
                                  confirm_by);
    if (joined < 0) {
      rlock__op_finish(op, joined);
      return;
    }
    if (joined == 0)
      return; /* the registry calls back once subscribed (or not) */
    /* Already subscribed. If the subscription was live before this try was
     * sent, any release after the try is heard, so sleep now; otherwise try
     * once more (docs/wire-protocol.md, Waiting: subscribe before the
     * re-try). */
    if (op->u.acq.seen_epoch == 0 ||
        op->u.acq.seen_epoch !=
            rlock__chan_epoch(e->net, op->u.acq.wchan, op->u.acq.wchan_len)) {
      send_try(op);
      return;
    }
  }
  /* Sleep until a message, bounded by the holder's TTL (so a lost message
   * costs one TTL, never a hang) and by our own deadline. A key without
   * TTL (-1) is re-checked every watchdog timeout. */
  int64_t sleep_ms = ttl >= 0 ? ttl : e->core->opts.watchdog_timeout_ms;
  if (handoff_missed && sleep_ms > HANDOFF_MISSED_SLEEP_MS)
    sleep_ms = HANDOFF_MISSED_SLEEP_MS;
  if (op->wait_ms > 0 && op->deadline - now < sleep_ms)
    sleep_ms = op->deadline - now;
  op->state = RLOCK__ST_WAITING;
  rlock__chan_wait(&op->waiter, sleep_ms);
}

/* The try no longer counts in the local gate while its answer is acted on
 * (a re-send from there counts afresh); the gate may open after. */
static void try_reply(rlock__net *n, redisReply *reply, int err, void *data) {
  rlock__op *op = data;
  rlock__engine *e = op->engine;
  rlock__gate *g = rlock__gate_try_done(op, false);
  try_answer(n, reply, err, data); /* op may be gone after this */
  rlock__gate_settle(e, g);
}

static void send_try(rlock__op *op) {
  rlock *lock = op->lock;
  rlock__engine *e = op->engine;
  if (rlock__gate_park(op))
    return; /* a sibling holds the lock, or a try is out: no try now */
  int64_t lease = try_lease(op);
  op->u.acq.seen_epoch = lock->prim->polls
                       ? 0
                       : rlock__chan_epoch(e->net, op->u.acq.wchan, op->u.acq.wchan_len);
  op->state = RLOCK__ST_CMD;
  op->u.acq.tried = true;
  op->u.acq.tries++;
  op->u.acq.try_sent_ms = rlock__now_ms();
  /* A re-entry may run before its reply comes: the guarantee of the hold
   * drops at once to what its lease promises (hold.c). */
  if (lock->prim->hold != NULL)
    rlock__hold_lease_sent(e, lock, op->owner, op->u.acq.try_sent_ms, lease);
  op->cmd = lock->prim->send_try(op, lease, try_reply);
  if (op->cmd == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  arm_deadline(op);
}

/* ---- local transfer (release.c) ---- */

/* wait_ms ran out while the release's transfer was on its way: not
 * acquired. That release, still waiting for its reply, trims this owner
 * if the lock was moved to it after all (release.c). */
static void claim_deadline_fire(rlock__timed *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, timer);
  if (op->state == RLOCK__ST_CMD)
    rlock__op_finish(op, 0);
}

int64_t rlock__acquire_claim(rlock__op *op, rlock__xfer *x, int streak) {
  rlock__engine *e = op->engine;
  assert(op->state == RLOCK__ST_WAITING && op->u.acq.transfer == NULL);
  rlock__chan_take(&op->waiter);
  /* It counts in the local gate as a try on its way (a handoff's streak
   * lets it through). */
  op->u.acq.handoff_streak = streak;
  bool parked = rlock__gate_park(op);
  assert(!parked);
  (void)parked;
  op->u.acq.transfer = x;
  op->u.acq.xfer_maybe = false;
  op->state = RLOCK__ST_CMD;
  op->u.acq.tried = true;
  op->u.acq.tries++;
  op->u.acq.try_sent_ms = rlock__now_ms();
  if (op->wait_ms > 0) {
    op->timer.fire = claim_deadline_fire;
    rlock__timed_start(e->core, &op->timer, op->deadline);
  }
  return try_lease(op);
}

void rlock__acquire_claim_done(rlock__op *op, bool moved, int err) {
  rlock__engine *e = op->engine;
  assert(op->u.acq.transfer != NULL);
  op->u.acq.transfer = NULL;
  op->u.acq.xfer_maybe = false;
  rlock__timed_stop(e->core, &op->timer);
  rlock__gate *g = rlock__gate_try_done(op, false);
  if (moved) {
    op->u.acq.answered = true;
    int rc = rlock__hold_add(e, op->lock, op->owner, op->lease_ms,
                             op->u.acq.try_sent_ms, op->u.acq.handoff_streak);
    rlock__op_finish(op, rc < 0 ? rc : 1);
  } else if (err != 0) {
    /* It may have been moved: trimmed back to what this owner knows (no
     * hold), then it tries again while it has time. */
    lost_acquire(op, err);
  } else {
    /* Not moved (the releasing owner still holds, or no longer did): the
     * gate decides, as for a woken waiter. */
    op->u.acq.answered = true;
    op->u.acq.handoff_streak = 0;
    send_try(op);
  }
  rlock__gate_settle(e, g);
}

/* ---- the waiter's callbacks (from the channel registry) ---- */

static void waiter_retry(rlock__waiter *w) {
  rlock__op *op = RLOCK__CONTAINER_OF(w, rlock__op, waiter);
  /* Parked by the local gate, woken after the subscription was lost (or
   * made again): what it trusted may have changed unheard - ask the
   * server once. */
  if (op->u.acq.gate_parked &&
      rlock__chan_epoch(op->engine->net, op->u.acq.wchan,
                        op->u.acq.wchan_len) != op->u.acq.gate_epoch)
    op->u.acq.gate_bypass = true;
  op->u.acq.woken = true;
  send_try(op);
}

static void waiter_sub_timeout(rlock__waiter *w) {
  rlock__op *op = RLOCK__CONTAINER_OF(w, rlock__op, waiter);
  if (op->wait_ms >= 0 && rlock__now_ms() >= op->deadline) {
    rlock__op_finish(op, 0);
    return;
  }
  rlock__op_detail(op, "SUBSCRIBE to %s not confirmed within "
                       "subscribe_timeout_ms", op->u.acq.wchan);
  rlock__op_finish(op, RLOCK_ETIMEDOUT);
}

static void waiter_sub_failed(rlock__waiter *w, int err, const char *text,
                              size_t len) {
  rlock__op *op = RLOCK__CONTAINER_OF(w, rlock__op, waiter);
  rlock__op_detail(op, "SUBSCRIBE to %s refused: %.*s", op->u.acq.wchan,
                   (int)len, text);
  rlock__op_finish(op, err);
}

static const rlock__waiter_ops acquire_waiter = {
    waiter_retry, waiter_sub_timeout, waiter_sub_failed};

static void start_acquire(rlock__op *op) {
  op->waiter.ops = &acquire_waiter;
  const rlock__prim *prim = op->lock->prim;
  if (prim->wait_channel != NULL) {
    op->u.acq.wchan = prim->wait_channel(op, &op->u.acq.wchan_len);
    if (op->u.acq.wchan == NULL) {
      rlock__op_finish(op, RLOCK_ENOMEM);
      return;
    }
  } else {
    op->u.acq.wchan = op->lock->channel;
    op->u.acq.wchan_len = op->lock->channel_len;
  }
  send_try(op);
}

/* ---- abandon: undoing a wait that ends without the lock ---- */

/* Every abandon in flight counts in e->abandons_inflight, whenever it was
 * sent: one sent by a give-up just before close may still be on its way
 * (an EVALSHA answered NOSCRIPT is re-sent as EVAL only when that answer
 * comes), and close waits for each (issue 24). */
static void abandon_reply(rlock__net *n, redisReply *reply, int err,
                          void *data) {
  (void)n, (void)reply, (void)err;
  rlock__engine *e = data;
  assert(e->abandons_inflight > 0);
  e->abandons_inflight--;
  /* Sent before close, answered after it began: counted in draining. */
  if (e->draining > 0)
    rlock__engine_drained_one(e);
}

/* The one place an acquire's end is told: ACQUIRED or GAVE_UP. */
static void acquire_event(rlock__op *op, int result) {
  rlock__engine *e = op->engine;
  if (e->on_event == NULL)
    return;
  rlock__event ev = {.pub = {.kind = op->lock->prim->kind,
                             .name = op->lock->name,
                             .owner = op->owner,
                             .wait_ms = rlock__now_ms() - op->called_ms,
                             .attempts = op->u.acq.tries,
                             .detail = ""}};
  if (result == 1) {
    ev.pub.type = RLOCK_EVENT_ACQUIRED;
    ev.n = op->u.acq.gate_waited;
  } else {
    ev.pub.type = RLOCK_EVENT_GAVE_UP;
    ev.pub.cause = result == 0                   ? RLOCK_EVENT_TIMEOUT
                   : result == RLOCK_ECANCELED ? RLOCK_EVENT_CANCELED
                                               : RLOCK_EVENT_ERROR;
    if (result < 0) {
      ev.pub.error = result;
      ev.pub.detail =
          op->detail[0] != '\0' ? op->detail : rlock_strerror(result);
    }
  }
  rlock__engine_emit(e, &ev);
}

void rlock__acquire_finish(rlock__op *op, int result) {
  rlock__engine *e = op->engine;
  acquire_event(op, result);
  /* A transfer to it still on its way: the release's reply decides what
   * became of the lock, and trims this owner if it was moved here. */
  if (op->u.acq.transfer != NULL) {
    op->u.acq.transfer->to = NULL;
    op->u.acq.transfer = NULL;
    if (op->u.acq.xfer_maybe && result != 1)
      rlock__suspect_add(e, op->lock, op->owner);
  }
  /* A try still on its way no longer counts in the local gate. */
  rlock__gate_settle(e, rlock__gate_try_done(op, true));
  if (op->u.acq.tried && result != 1 && op->lock->prim->abandon != NULL &&
      op->lock->prim->abandon(op, abandon_reply, e) != NULL)
    e->abandons_inflight++;
  if (op->u.acq.wchan != op->lock->channel)
    free(op->u.acq.wchan);
  op->u.acq.wchan = NULL;
}

const rlock__op_type rlock__op_acquire = {
    .name = "acquire", .start = start_acquire,
    .finish = rlock__acquire_finish, .acquires = true, .touches_hold = true};
