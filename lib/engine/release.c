/* Releasing one hold, for every primitive, with an unlock request latch: a
 * fresh key per unlock call that the release script sets to its answer, so
 * a re-send after a lost reply answers what the first send did instead of
 * releasing a second hold (docs/wire-protocol.md, Release). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* ---- latches ---- */

/* Unlock request ids need only be unique: 128 bits from a per-client random
 * seed and a counter, without a random-source call per unlock. */
static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static void put_hex64(char *p, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; i--) {
    p[i] = digits[v & 15];
    v >>= 4;
  }
}

/* 32 lower-case hex digits (no NUL). */
static void latch_id(rlock__engine *e, char hex[32]) {
  uint64_t n = ++e->latch_count;
  put_hex64(hex, mix64(e->latch_seed[0] ^ n));
  put_hex64(hex + 16, mix64(e->latch_seed[1] + n));
}

/* Latches are deleted in batches - one UNLINK per 64 keys or per 100 ms
 * (in a cluster, one per slot among them) - rather than one DEL per unlock:
 * under contention that is a quarter of the commands per acquisition. A
 * latch left behind expires by its TTL. */
#define LATCH_BATCH_MS 100

/* Sends UNLINK for every pending latch and forgets them: one UNLINK, or in
 * a cluster one per slot (a command's keys must share one), each in the
 * order the latches came. Returns how many were sent. */
static int latch_unlink(rlock__engine *e, rlock__reply_cb cb) {
  int n = e->latch_del_n;
  int slot[64];
  bool sent[64];
  for (int i = 0; i < n; i++) {
    slot[i] = rlock__net_key_slot(e->net, e->latch_del[i],
                                  strlen(e->latch_del[i]));
    sent[i] = false;
  }
  int cmds = 0;
  /* Standalone every slot is -1: the first pass takes them all. At most 64
   * names, so the passes cost nothing worth a sort. */
  for (int first = 0; first < n; first++) {
    if (sent[first])
      continue;
    const char *argv[65];
    size_t lens[65];
    int argc = 0;
    argv[argc] = "UNLINK";
    lens[argc++] = 6;
    for (int i = first; i < n; i++) {
      if (sent[i] || slot[i] != slot[first])
        continue;
      sent[i] = true;
      argv[argc] = e->latch_del[i];
      lens[argc++] = strlen(e->latch_del[i]);
    }
    if (rlock__cmd_send(e->net, NULL, argc, argv, lens, 0, cb, e) != NULL)
      cmds++;
  }
  rlock__latches_free(e); /* frees the names: the records copied them */
  return cmds;
}

static void latch_flush(rlock__engine *e) {
  rlock__timed_stop(e->core, &e->latch_timer);
  if (e->latch_del_n > 0)
    latch_unlink(e, NULL);
}

static void latch_timer_fire(rlock__timed *t) {
  latch_flush(RLOCK__CONTAINER_OF(t, rlock__engine, latch_timer));
}

static void latch_forget(rlock__engine *e, char *latch) {
  e->latch_del[e->latch_del_n++] = latch;
  if (e->latch_del_n == 64) {
    latch_flush(e);
  } else if (e->latch_del_n == 1) {
    e->latch_timer.fire = latch_timer_fire;
    rlock__timed_start(e->core, &e->latch_timer,
                       rlock__now_ms() + LATCH_BATCH_MS);
  }
}

static void latch_close_reply(rlock__net *n, redisReply *reply, int err,
                              void *data) {
  (void)n, (void)reply, (void)err;
  rlock__engine_drained_one(data);
}

int rlock__latches_flush_at_close(rlock__engine *e) {
  if (e->latch_del_n == 0 || !rlock__net_cmd_connected(e->net))
    return 0;
  /* Each UNLINK sent answers once (latch_close_reply): close waits for
   * that many replies. */
  return latch_unlink(e, latch_close_reply);
}

void rlock__latches_free(rlock__engine *e) {
  for (int i = 0; i < e->latch_del_n; i++)
    free(e->latch_del[i]);
  e->latch_del_n = 0;
}

/* ---- release ---- */

/* A transfer's reply came, or never will (x->err): x says what became of
 * the lock. The acquire it was for is told after the release finished
 * (transfer_end) - as when the release's reply came before the try's;
 * until then, if it ends otherwise (a callback cancels it), its owner is
 * trimmed when the lock may be its (xfer_maybe). With no acquire left,
 * the owner is trimmed now. */
static void transfer_outcome(rlock__op *op, rlock__xfer *x, bool moved,
                             int err) {
  x->moved = moved;
  x->err = err;
  if (x->to != NULL)
    x->to->u.acq.xfer_maybe = moved || err != 0;
  else if (moved || err != 0)
    rlock__suspect_add(op->engine, op->lock, x->owner);
}

static void transfer_end(rlock__xfer *x) {
  if (x->to != NULL)
    rlock__acquire_claim_done(x->to, x->moved, x->err);
  free(x);
}

static void release_answer(rlock__net *n, redisReply *reply, int err,
                           rlock__op *op, rlock__xfer *x);

/* Stands in for a transfer's release op's `done` while its reply is
 * handled: the op stays (nobody has been told), and release_reply tells
 * its caller once the acquire has been. */
static void done_after_transfer(rlock__op *op) { (void)op; }

static void release_reply(rlock__net *n, redisReply *reply, int err,
                          void *data) {
  rlock__op *op = data;
  rlock__xfer *x = op->u.rel.xfer;
  op->u.rel.xfer = NULL;
  if (x == NULL || !rlock__op_blocking(op)) {
    release_answer(n, reply, err, op, x); /* op may be gone after this */
    if (x != NULL)
      transfer_end(x);
    return;
  }
  /* A blocking unlock: the new holder is woken first, since the lock is
   * its and the releasing thread's wake-up is off a herd's path (each
   * costs a system call here); the two threads race once awake either
   * way. Callbacks keep their order: the unlock's before the acquire's. */
  void (*done)(rlock__op *) = op->done;
  op->done = done_after_transfer;
  release_answer(n, reply, err, op, x);
  transfer_end(x);
  op->done = done;
  if (op->state == RLOCK__ST_DONE)
    done(op); /* op may be gone after this */
}

static void release_answer(rlock__net *n, redisReply *reply, int err,
                           rlock__op *op, rlock__xfer *x) {
  rlock__engine *e = op->engine;
  op->cmd = NULL;
  if (x != NULL && rlock__transient(err))
    transfer_outcome(op, x, false, err);
  /* (The hold stops counting as releasing when the op finishes.) */
  rlock__hold *h = rlock__hold_find(e, op->lock, op->owner);
  if (rlock__transient(err)) {
    /* Every re-send (same latch) went unanswered. The caller asked to give
     * up one hold, so the client now counts one fewer and trims the
     * server's count down to that once it answers. */
    if (h != NULL && !op->lock->prim->hold->shared_expiry)
      rlock__hold_lease_lost(e, op->lock, op->owner, op->u.rel.lease_ms);
    if (h != NULL) {
      assert(h->count > 0);
      if (--h->count <= 0)
        rlock__hold_drop(e, h);
      else if (h->watchdog_count > h->count)
        h->watchdog_count = h->count;
    }
    rlock__suspect_add(e, op->lock, op->owner);
    rlock__op_finish(op, err);
    return;
  }
  int got = err != 0 || reply->type == REDIS_REPLY_ERROR
                ? RLOCK_ESERVER
                : op->lock->prim->hold->read_release(op, reply);
  bool yielded = got == RLOCK__REL_YIELD;
  if (got == RLOCK__REL_YIELD) {
    /* Released and published, not moved: another client waits. This
     * client's tries wait a moment (gate.c), so that its waiter can take
     * the lock - set before the waiter and the hold's end are told. */
    rlock__gate_hold_back(e, op->lock);
    got = RLOCK__REL_RELEASED;
  }
  if (x != NULL) {
    bool moved = got == RLOCK__REL_RELEASED && !yielded;
    if (moved && rlock__net_reply_unsynced(n))
      /* Replica sync: no replica confirmed it, so the acquire half is
       * undone as an acquire's would be (its owner trimmed, then it tries
       * again). The release half stands, as a release's does. */
      transfer_outcome(op, x, false, RLOCK_ENOREPLICA);
    else
      transfer_outcome(op, x, moved, err);
  } else if (op->u.rel.handoff_streak > 0 && got != RLOCK__REL_RELEASED)
    /* Not released: no message will come for the handoff to absorb. */
    rlock__chan_unabsorb(e->net, op->lock->channel, op->lock->channel_len);
  if (rlock__op_failed(op, reply, err))
    return;
  if (got < 0) {
    rlock__op_finish(op, got);
    return;
  }
  if (got == RLOCK__REL_NOT_HELD) {
    if (h != NULL) {
      /* We held it, the server says we don't: it expired or was deleted. */
      rlock__op_detail(op, "lock '%s' expired or was deleted before this "
                           "unlock", op->lock->name);
      rlock__hold_lost(e, h, RLOCK_EVENT_BY_UNLOCK);
      rlock__hold_drop(e, h);
      rlock__op_finish(op, RLOCK_ELOCKLOST);
    } else {
      rlock__op_detail(op, "lock '%s' is not held by %s", op->lock->name,
                       op->owner);
      rlock__op_finish(op, RLOCK_ENOTOWNER);
    }
    return;
  }
  /* The latch did its job once this reply arrived; Java deletes it too. */
  latch_forget(e, op->u.rel.latch);
  op->u.rel.latch = NULL;
  if (h != NULL) {
    if (got == RLOCK__REL_RELEASED && h->count > 1) {
      /* Released on the server while the client counted more holds: the
       * outer hold was lost (its lease ran out, or the key was deleted) and
       * this owner's later re-entry took the free lock afresh. The lock was
       * not held throughout, so say so; the outer unlocks that remain get
       * RLOCK_ELOCKLOST too. */
      h->count--;
      if (h->watchdog_count > h->count)
        h->watchdog_count = h->count;
      rlock__hold_lost(e, h, RLOCK_EVENT_BY_UNLOCK);
      rlock__op_detail(op, "lock '%s' was lost while re-entered (it expired "
                           "or was deleted after an outer hold was taken); "
                           "this unlock released a later hold",
                       op->lock->name);
      rlock__op_finish(op, RLOCK_ELOCKLOST);
      return;
    }
    if (got == RLOCK__REL_RELEASED) {
      rlock__hold_drop(e, h);
    } else {
      /* Still held: which kind of hold ended is unknown, so renewal goes on
       * while any watchdog hold may remain (as Redisson does). */
      if (!op->lock->prim->hold->shared_expiry)
        rlock__hold_lease_confirmed(e, op->lock, op->owner, op->u.rel.sent_ms,
                                    op->u.rel.lease_ms);
      if (h->count > 1)
        h->count--;
      if (h->watchdog_count > h->count)
        h->watchdog_count = h->count;
    }
  }
  rlock__op_finish(op, got == RLOCK__REL_RELEASED ? 1 : 0);
}

/* Whether the lock can be moved to `to` by the kind's transfer: an acquire
 * of the same kind (the channel is shared by kinds over one hash), asleep,
 * whose owner holds nothing here. */
static bool can_transfer(const rlock__op *op, const rlock__op *to) {
  const rlock__engine *e = op->engine;
  return op->lock->prim->hold->transfer != NULL && to->type->acquires &&
         to->lock->prim == op->lock->prim && to->wait_ms != 0 &&
         to->state == RLOCK__ST_WAITING && to->u.acq.transfer == NULL &&
         rlock__hold_find((rlock__engine *)e, to->lock, to->owner) == NULL;
}

/* How many transfers in a row a lock may see, per handoff_max: a transfer
 * asks the server whether another client waits on the channel and, if
 * one does, releases and publishes instead (docs/performance.md, "Fair
 * share"), so its bound only covers the waiters that question cannot see
 * (subscribed through another node of a cluster without sharded pub/sub,
 * or through a replica). */
#define TRANSFER_STREAK_FACTOR 16

/* Local handoff: this release ends the owner's last hold, so if another
 * owner of this client sleeps waiting for the lock, it gets the lock now
 * instead of one round trip later, when the release message has come
 * back. Returns that waiter, or NULL; *transfer: the lock can be moved to
 * it by the kind's transfer (can_transfer). After handoff_max two-command
 * handoffs in a row (TRANSFER_STREAK_FACTOR times as many transfers) the
 * release goes the pub/sub way only, so that waiters of other processes
 * are not starved. */
static rlock__op *handoff_waiter(rlock__op *op, rlock__hold *h,
                                 bool *transfer) {
  rlock__engine *e = op->engine;
  *transfer = false;
  rlock *lock = op->lock;
  int max = e->core->opts.handoff_max;
  if (!lock->prim->hold->local_handoff || max == 0)
    return NULL;
  rlock__waiter *w =
      rlock__chan_sleeper(e->net, lock->channel, lock->channel_len);
  if (w == NULL)
    return NULL;
  rlock__op *waiter = RLOCK__CONTAINER_OF(w, rlock__op, waiter);
  if (strcmp(waiter->owner, op->owner) == 0)
    waiter = NULL;
  bool moves = waiter != NULL && can_transfer(op, waiter);
  if (h->handoff_streak >= (moves ? TRANSFER_STREAK_FACTOR * max : max)) {
    /* The pub/sub way: this client's next try waits for the message, as
     * other clients' waiters do (gate.c). */
    rlock__gate_yield(e, lock);
    return NULL;
  }
  *transfer = moves;
  return waiter;
}

/* The two-command handoff: the release goes first and the waiter's try
 * follows in the same write. The message is published as always (other
 * processes' waiters hear it); here it wakes nobody more, since the woken
 * waiter is already trying. */
static void kick(rlock__op *op, rlock__op *waiter, int streak) {
  op->u.rel.handoff_streak = streak;
  waiter->u.acq.handoff_streak = streak;
  rlock__chan_kick(&waiter->waiter, op->engine->core->opts.command_timeout_ms);
}

static void start_release(rlock__op *op) {
  rlock *lock = op->lock;
  rlock__engine *e = op->engine;
  assert(lock->prim->hold != NULL); /* the facade refuses other kinds */
  const rlock_options *o = &e->core->opts;
  /* redisson_unlock_latch:{name}:<32 hex>, a fresh request id per unlock
   * call; re-sends of this call reuse it. */
  size_t prefix_len = sizeof(RLOCK__UNLOCK_LATCH_PREFIX) - 1;
  size_t latch_len = prefix_len + lock->tag_len + 1 + 32;
  char *latch = op->u.rel.latch = malloc(latch_len + 1);
  if (latch == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  memcpy(latch, RLOCK__UNLOCK_LATCH_PREFIX, prefix_len);
  memcpy(latch + prefix_len, lock->tag, lock->tag_len);
  latch[prefix_len + lock->tag_len] = ':';
  latch_id(e, latch + prefix_len + lock->tag_len + 1);
  latch[latch_len] = '\0';
  rlock__hold *h = rlock__hold_find(e, lock, op->owner);
  if (h != NULL) {
    h->releasing++;
    h->release_seq++;
    op->u.rel.hold_gen = h->gen;
    op->u.rel.held_since = h->since_ms;
  }
  int64_t lease = o->watchdog_timeout_ms;
  if (h != NULL && h->watchdog_count == 0 && h->lease_ms > 0)
    lease = h->lease_ms;
  /* The latch must outlive every re-send of this unlock. */
  int64_t latch_ttl = (int64_t)(o->retry_attempts + 1) *
                      (o->command_timeout_ms + o->retry_interval_ms);
  op->state = RLOCK__ST_CMD;
  op->u.rel.sent_ms = rlock__now_ms();
  op->u.rel.lease_ms = lease;
  /* One that leaves the lock held sets its expiry to this lease (a read
   * release sets none): it may run before its reply comes (hold.c). */
  if (!lock->prim->hold->shared_expiry)
    rlock__hold_lease_sent(e, lock, op->owner, op->u.rel.sent_ms, lease);
  bool transfer = false;
  rlock__op *to = h != NULL && h->count == 1 && h->releasing == 1
                      ? handoff_waiter(op, h, &transfer)
                      : NULL;
  int streak = h != NULL ? h->handoff_streak + 1 : 0;
  if (transfer) {
    /* One command moves the lock to the waiter (docs/wire-protocol.md,
     * "Transfer"); its reply completes both calls. */
    rlock__xfer *x = op->u.rel.xfer = calloc(1, sizeof(*x));
    if (x == NULL) {
      rlock__op_finish(op, RLOCK_ENOMEM);
      return;
    }
    op->u.rel.handoff_streak = streak;
    x->to = to;
    size_t owner_len = strlen(to->owner);
    assert(owner_len < sizeof(x->owner));
    memcpy(x->owner, to->owner, owner_len + 1);
    int64_t to_lease = rlock__acquire_claim(to, x, streak);
    op->cmd = lock->prim->hold->transfer(op, op->u.rel.latch, lease,
                                         latch_ttl, x->owner, to_lease,
                                         release_reply);
    if (op->cmd == NULL)
      rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  op->cmd = lock->prim->hold->send_release(op, op->u.rel.latch, lease, latch_ttl,
                                     release_reply);
  if (op->cmd == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  if (to != NULL)
    kick(op, to, streak);
}

/* A release counts on its hold as "releasing" while it runs (hold.c
 * neither renews such a hold nor takes a "0" for a loss); its latch, if
 * its reply never came, is left to expire by its TTL. */
void rlock__release_finish(rlock__op *op, int result) {
  /* The one place a release's success is told (RELEASED): 1 freed the
   * lock, 0 left holds. */
  rlock__engine *e = op->engine;
  /* Ended before its transfer's reply (close, out of memory): what became
   * of the lock is unknown - the new owner is trimmed. */
  if (op->u.rel.xfer != NULL) {
    rlock__xfer *x = op->u.rel.xfer;
    op->u.rel.xfer = NULL;
    transfer_outcome(op, x, false, result < 0 ? result : RLOCK_ECONN);
    transfer_end(x);
  }
  if (result >= 0 && e->on_event != NULL) {
    rlock__event ev = {.pub = {.type = RLOCK_EVENT_RELEASED,
                               .kind = op->lock->prim->kind,
                               .name = op->lock->name,
                               .owner = op->owner,
                               .detail = ""}};
    if (op->u.rel.hold_gen != 0)
      ev.pub.hold_ms = rlock__now_ms() - op->u.rel.held_since;
    if (result == 0)
      ev.pub.hold_count = rlock__hold_count_known(e, op->lock, op->owner);
    rlock__engine_emit(e, &ev);
  }
  if (op->u.rel.hold_gen != 0) {
    rlock__hold *h = rlock__hold_find(op->engine, op->lock, op->owner);
    if (h != NULL && h->gen == op->u.rel.hold_gen && h->releasing > 0)
      h->releasing--;
    op->u.rel.hold_gen = 0;
  }
  free(op->u.rel.latch);
  op->u.rel.latch = NULL;
}

const rlock__op_type rlock__op_release = {
    .name = "release", .start = start_release, .finish = rlock__release_finish,
    .touches_hold = true, .zero_on_success = true};
