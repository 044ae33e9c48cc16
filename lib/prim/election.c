/* Leader election over Redisson's fenced lock (docs/election.md). No
 * descriptor of the lock kinds: a candidate composes the fenced lock of
 * the name through its public calls (rlock_lock_async with the watchdog,
 * rlock_unlock_async, rlock_is_lease_guaranteed_owner), as the MultiLock
 * composes its members, and adds what a lock has not: the value key
 * rlock_election:{name} (value, term, holder) and the channel
 * rlock_election__channel:{name}, written by election_proclaim.lua and
 * election_clear.lua and read by election_read.lua. The descriptor below
 * (kind "election") only names that channel for the observers' waiters and
 * carries the election's own ops. Wire format: docs/wire-protocol.md,
 * "Leader election".
 *
 * A candidate's state (phase, term, value) is read by user threads under
 * its mutex and changed on the loop thread; every callback runs on the
 * loop thread. A term ends once: the phase leaves LEADER in exactly one
 * place for a loss (lose) and one for a resign (start_resign). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_embed.h"
#include "prim.h"

#define VALUE_PREFIX RLOCK__ELECTION_VALUE_PREFIX
#define CHANNEL_PREFIX RLOCK__ELECTION_CHANNEL_PREFIX
#define DEFAULT_POLL_MS 1000

static const rlock__script proclaim_script = {
    "election_proclaim", RLOCK__LUA_ELECTION_PROCLAIM_BODY,
    RLOCK__LUA_ELECTION_PROCLAIM_SHA, false};
static const rlock__script clear_script = {
    "election_clear", RLOCK__LUA_ELECTION_CLEAR_BODY,
    RLOCK__LUA_ELECTION_CLEAR_SHA, false};
static const rlock__script read_script = {
    "election_read", RLOCK__LUA_ELECTION_READ_BODY,
    RLOCK__LUA_ELECTION_READ_SHA, true};

static void on_message(rlock__chan *ch, const char *payload, size_t len) {
  (void)payload;
  (void)len;
  rlock__chan_wake_all(ch); /* every observer reads the state again */
}

const rlock__prim rlock__prim_election = {
    .kind = "election",
    .channel_prefix = CHANNEL_PREFIX,
    .on_message = on_message};

enum { PH_IDLE, PH_CAMPAIGN, PH_PROCLAIM, PH_LEADER, PH_RESIGN };

struct rlock_election {
  atomic_int refs; /* the user's, a campaign or term in flight, commands */
  rlock *lock;     /* the fenced lock of the name */
  rlock *self;     /* the election kind's handle: channel, ops */
  uint64_t owner;
  char owner_str[RLOCK__OWNER_MAX];
  char *vkey, *tkey;
  size_t vkey_len, tkey_len;
  uv_mutex_t mu; /* phase, term, value, cb */
  int phase;
  int64_t term;
  char *value;
  size_t value_len;
  rlock_election_cb cb;
  void *cb_data;
  /* A term's clean-up unlock is in flight; a campaign asked for meanwhile
   * starts when it is done (the same owner's acquire must not pass it). */
  bool unlocking, start_pending, cancel_pending;
  int64_t pending_wait;
  /* loop thread */
  rlock__timed tick;
  bool refresh_inflight;
  rlock__op *resign_op; /* the resign waiting for its unlock and clear */
  int resign_rc;
};

/* ---- names and small helpers ---- */

static int check_value(const char *value, size_t len) {
  if (value == NULL || len == 0)
    return rlock__bad_arg("the value is NULL or empty (1.."
                          "RLOCK_ELECTION_VALUE_MAX bytes)");
  if (len > RLOCK_ELECTION_VALUE_MAX) {
    rlock__set_last_error("the value is %zu bytes, more than "
                          "RLOCK_ELECTION_VALUE_MAX (%d)",
                          len, RLOCK_ELECTION_VALUE_MAX);
    return RLOCK_EINVAL;
  }
  return 0;
}

char *rlock__election_value_key(const rlock *lock, size_t *len) {
  return rlock__prefixed(VALUE_PREFIX, lock->tag, lock->tag_len, len);
}

/* The fenced handle and the election handle of `name`. */
static int handles(rlock_client *client, const char *name, rlock **lock,
                   rlock **self) {
  *lock = *self = NULL;
  int rc = rlock_new_fenced(client, name, lock);
  if (rc != 0)
    return rc;
  rc = rlock__handle_new((*lock)->engine, &rlock__prim_election,
                         (*lock)->name, (*lock)->name_len, self);
  if (rc != 0) {
    rlock_free(*lock);
    *lock = NULL;
    rlock__set_last_error("out of memory");
  }
  return rc;
}

static void e_ref(rlock_election *e) {
  atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

static void e_unref(rlock_election *e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
    return;
  rlock_free(e->lock);
  rlock__handle_release(e->self);
  uv_mutex_destroy(&e->mu);
  free(e->vkey);
  free(e->tkey);
  free(e->value);
  free(e);
}

static rlock__engine *engine_of(const rlock_election *e) {
  return e->lock->engine;
}

static int64_t retries_of(const rlock_election *e) {
  return engine_of(e)->core->opts.retry_attempts;
}

/* A reply to one of the election's scripts: its integer, or a negative
 * error with the last error set. */
static int64_t script_result(redisReply *reply, int err, const char *what) {
  if (err != 0) {
    rlock__set_last_error("%s: %s", what, rlock_strerror(err));
    return err;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    rlock__set_last_error("%s: %.*s", what, (int)reply->len, reply->str);
    return rlock__err_from_server(reply->str, (size_t)reply->len);
  }
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__set_last_error("%s: unexpected reply (type %d)", what,
                          reply->type);
    return RLOCK_EPROTO;
  }
  return reply->integer;
}

/* Events (lib/client/observe.c counts them, the user's handler hears them). */
static void emit(rlock_election *e, int type, int cause, int64_t term) {
  rlock__event ev;
  memset(&ev, 0, sizeof(ev));
  ev.pub.type = (rlock_event_type)type;
  ev.pub.kind = "election";
  ev.pub.name = e->lock->name;
  ev.pub.owner = e->owner_str;
  ev.pub.cause = cause;
  ev.pub.term = term;
  rlock__engine_emit(engine_of(e), &ev);
}

/* A campaign's callback, taken under the mutex in the same step that
 * moves the phase: once the phase is back to PH_IDLE a new campaign may
 * set its own callback at once, and what the old campaign still has to say
 * must not reach it. */
typedef struct cb_ref {
  rlock_election_cb cb;
  void *data;
} cb_ref;

/* Sets the phase and takes the callback (under the mutex). */
static cb_ref set_phase(rlock_election *e, int phase) {
  uv_mutex_lock(&e->mu);
  e->phase = phase;
  cb_ref r = {e->cb, e->cb_data};
  uv_mutex_unlock(&e->mu);
  return r;
}

/* Calls it without the lock held (it may call back in). */
static void deliver(rlock_election *e, cb_ref r, int status, int64_t term) {
  if (r.cb != NULL)
    r.cb(e, status, term, r.data);
}

/* ---- the value key's writes ---- */

static rlock__cmd *send_proclaim(rlock_election *e, const char *value,
                                 size_t len, int64_t term, bool publish,
                                 rlock__reply_cb cb, void *data) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, e->lock->name, e->lock->name_len);
  rlock__argv_mem(&a, e->vkey, e->vkey_len);
  rlock__argv_mem(&a, e->self->channel, e->self->channel_len);
  rlock__argv_str(&a, e->owner_str);
  rlock__argv_int(&a, term);
  rlock__argv_mem(&a, value, len);
  rlock__argv_str(&a, rlock__engine_publish(engine_of(e)));
  rlock__argv_str(&a, publish ? "1" : "0");
  rlock__argv_int(&a, engine_of(e)->core->opts.watchdog_timeout_ms);
  /* Re-sent after a lost reply: writing the same value twice is the same. */
  return rlock__cmd_send(engine_of(e)->net, &proclaim_script, a.argc, a.argv,
                         a.lens, (int)retries_of(e), cb, data);
}

static void clear_reply(rlock__net *n, redisReply *reply, int err,
                        void *data);

static rlock__cmd *send_clear(rlock_election *e, int64_t term,
                              rlock__reply_cb cb) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "2");
  rlock__argv_mem(&a, e->vkey, e->vkey_len);
  rlock__argv_mem(&a, e->self->channel, e->self->channel_len);
  rlock__argv_str(&a, e->owner_str);
  rlock__argv_int(&a, term);
  rlock__argv_str(&a, rlock__engine_publish(engine_of(e)));
  e_ref(e);
  rlock__cmd *cmd =
      rlock__cmd_send(engine_of(e)->net, &clear_script, a.argc, a.argv,
                      a.lens, (int)retries_of(e), cb, e);
  if (cmd == NULL)
    e_unref(e);
  return cmd;
}

/* A loss's clear: best effort (a stale value key is never shown: readers
 * check its holder and term against the lock; it expires by itself). */
static void clear_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  (void)reply;
  (void)err;
  e_unref(data);
}

/* ---- the term: loss checks ---- */

static void tick_fire(rlock__timed *t);

static void refresh_reply(rlock__net *n, redisReply *reply, int err,
                          void *data) {
  (void)n;
  rlock_election *e = data;
  e->refresh_inflight = false;
  /* 0 (not held) is for the tick to find through the hold: a renewal
   * says so first, or the guarantee runs out. */
  (void)script_result(reply, err, "election value refresh");
  e_unref(e);
}

static void arm_tick(rlock_election *e, int64_t until) {
  int64_t period = engine_of(e)->core->opts.watchdog_timeout_ms / 3;
  int64_t at = rlock__now_ms() + period;
  if (until < at)
    at = until;
  e->tick.fire = tick_fire;
  rlock__timed_start(engine_of(e)->core, &e->tick, at);
}

static void locked(int status, int64_t token, void *data);

/* Starts the fenced acquire of a campaign (the campaign's reference is
 * taken); a failure to queue it ends the campaign with that error. */
static void start_acquire(rlock_election *e, int64_t wait_ms) {
  int rc = rlock_lock_async(e->lock, e->owner, wait_ms, -1, locked, e, NULL);
  if (rc != 0)
    locked(rc, 0, e);
}

static void cleanup_done(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  rlock_election *e = data;
  uv_mutex_lock(&e->mu);
  e->unlocking = false;
  bool start = e->start_pending, canceled = e->cancel_pending;
  e->start_pending = e->cancel_pending = false;
  int64_t wait_ms = e->pending_wait;
  uv_mutex_unlock(&e->mu);
  if (start && canceled) {
    rlock__set_last_error("election '%s': campaign canceled", e->lock->name);
    locked(RLOCK_ECANCELED, 0, e);
  } else if (start) {
    start_acquire(e, wait_ms);
  }
  e_unref(e);
}

/* Gives up the hold after a term or a win that did not become one: frees
 * the lock if it is still this candidate's, forgets the hold if not. */
static void cleanup_unlock(rlock_election *e) {
  uv_mutex_lock(&e->mu);
  e->unlocking = true;
  uv_mutex_unlock(&e->mu);
  e_ref(e);
  int rc = rlock_unlock_async(e->lock, e->owner, cleanup_done, e, NULL);
  if (rc != 0)
    cleanup_done(rc, 0, e);
}

/* The term ends without a resign (loop thread): said once, the lock given
 * up (freed if it is still this candidate's, the hold forgotten if not). */
static void lose(rlock_election *e, const char *why) {
  uv_mutex_lock(&e->mu);
  if (e->phase != PH_LEADER) {
    uv_mutex_unlock(&e->mu);
    return;
  }
  e->phase = PH_IDLE;
  int64_t term = e->term;
  cb_ref r = {e->cb, e->cb_data};
  uv_mutex_unlock(&e->mu);
  rlock__timed_stop(engine_of(e)->core, &e->tick);
  rlock__diag(engine_of(e)->core, RLOCK_DIAG_WARN,
              "election '%s': term %" PRId64 " lost (%s)", e->lock->name,
              term, why);
  send_clear(e, term, clear_reply);
  cleanup_unlock(e);
  emit(e, RLOCK_EVENT_TERM_ENDED, RLOCK_ELECTION_LOST, term);
  deliver(e, r, RLOCK_ELECTION_LOST, term);
  e_unref(e); /* the term's reference */
}

static void tick_fire(rlock__timed *t) {
  rlock_election *e = RLOCK__CONTAINER_OF(t, rlock_election, tick);
  int64_t until = 0;
  int rc = rlock_is_lease_guaranteed_owner(e->lock, e->owner, &until);
  if (rc != 1) {
    lose(e, rc == 0 ? "its lease guarantee ran out with no renewal "
                      "confirmed"
                    : "the watchdog found the lock gone");
    return;
  }
  if (!e->refresh_inflight) {
    /* value and term change only on this thread while leading */
    e_ref(e);
    rlock__cmd *cmd = send_proclaim(e, e->value, e->value_len, e->term,
                                    false, refresh_reply, e);
    if (cmd == NULL)
      e_unref(e);
    else
      e->refresh_inflight = true;
  }
  arm_tick(e, until);
}

/* ---- campaign ---- */

static void proclaimed(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock_election *e = data;
  int64_t r = script_result(reply, err, "election proclaim");
  int64_t term = e->term; /* set on this thread */
  cb_ref cb = set_phase(e, r == 1 ? PH_LEADER : PH_IDLE);
  if (r == 1) {
    int64_t until = 0;
    if (rlock_is_lease_guaranteed_owner(e->lock, e->owner, &until) < 0)
      until = rlock__now_ms();
    arm_tick(e, until);
    emit(e, RLOCK_EVENT_ELECTED, 0, term);
    deliver(e, cb, RLOCK_ELECTION_WON, term); /* the reference stays: the term */
    return;
  }
  /* Lost before its value was written (0: no longer held), or the write
   * failed: not leader; the hold is given up. */
  int rc = r == 0 ? RLOCK_ELOCKLOST : (int)r;
  if (r == 0)
    rlock__set_last_error("election '%s': the lock was lost before the "
                          "value was written", e->lock->name);
  cleanup_unlock(e);
  deliver(e, cb, rc, 0);
  e_unref(e);
}

static void won(rlock_election *e, int64_t token);

/* The token counter, read when the acquire did not say its token. */
static void token_read(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock_election *e = data;
  int64_t token = 0;
  if (err == 0 && reply->type == REDIS_REPLY_STRING)
    token = strtoll(reply->str, NULL, 10);
  if (token >= 1) {
    won(e, token);
    return;
  }
  proclaimed(NULL, NULL, err != 0 ? err : RLOCK_EPROTO, e);
}

static void locked(int status, int64_t token, void *data) {
  rlock_election *e = data;
  if (status == 1 && token < 1) {
    /* Acquired, but the engine did not hand over the token (an acquire
     * whose reply was lost and that the engine found held afterwards).
     * While this candidate holds the lock nobody else takes a token, so
     * the counter's value now is this acquisition's (or a later one of
     * its own). */
    const char *argv[2] = {"GET", e->tkey};
    size_t lens[2] = {3, e->tkey_len};
    if (rlock__cmd_send(engine_of(e)->net, NULL, 2, argv, lens,
                        (int)retries_of(e), token_read, e) == NULL)
      proclaimed(NULL, NULL, RLOCK_ENOMEM, e);
    return;
  }
  if (status == 1) {
    won(e, token);
    return;
  }
  cb_ref cb = set_phase(e, PH_IDLE);
  deliver(e, cb, status, 0);
  e_unref(e);
}

static void won(rlock_election *e, int64_t token) {
  uv_mutex_lock(&e->mu);
  e->term = token;
  e->phase = PH_PROCLAIM;
  uv_mutex_unlock(&e->mu);
  /* the value changes only in PH_IDLE (campaign) or on this thread */
  rlock__cmd *cmd = send_proclaim(e, e->value, e->value_len, token, true,
                                  proclaimed, e);
  if (cmd == NULL)
    proclaimed(NULL, NULL, RLOCK_ENOMEM, e);
}

int rlock_election_campaign_start(rlock_election *e, const char *value,
                                  size_t len, int64_t wait_ms,
                                  rlock_election_cb cb, void *data) {
  if (e == NULL)
    return rlock__bad_arg("election is NULL");
  int rc = check_value(value, len);
  if (rc != 0)
    return rc;
  char *copy = malloc(len + 1);
  if (copy == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  memcpy(copy, value, len);
  copy[len] = '\0';
  uv_mutex_lock(&e->mu);
  if (e->phase != PH_IDLE) {
    uv_mutex_unlock(&e->mu);
    free(copy);
    rlock__set_last_error("election '%s': this handle already campaigns or "
                          "leads (one campaign at a time)", e->lock->name);
    return RLOCK_EREENTRY;
  }
  e->phase = PH_CAMPAIGN;
  free(e->value);
  e->value = copy;
  e->value_len = len;
  e->term = 0;
  e->cb = cb;
  e->cb_data = data;
  e_ref(e);
  if (e->unlocking) { /* cleanup_done starts it */
    e->start_pending = true;
    e->cancel_pending = false;
    e->pending_wait = wait_ms;
    uv_mutex_unlock(&e->mu);
    return 0;
  }
  uv_mutex_unlock(&e->mu);
  rc = rlock_lock_async(e->lock, e->owner, wait_ms, -1, locked, e, NULL);
  if (rc != 0) {
    uv_mutex_lock(&e->mu);
    e->phase = PH_IDLE;
    e->cb = NULL;
    uv_mutex_unlock(&e->mu);
    e_unref(e);
  }
  return rc;
}

/* The blocking campaign: the async one, waited for. */
typedef struct sync_campaign {
  uv_sem_t sem;
  int status;
  int64_t term;
  char detail[256];
  rlock_election_cb on_end;
  void *data;
  rlock_election_cb *cb_slot;
} sync_campaign;

static void sync_cb(rlock_election *e, int status, int64_t term, void *d) {
  sync_campaign *s = d;
  /* a campaign's first callback is its result (never a term's end) */
  assert(status != RLOCK_ELECTION_LOST && status != RLOCK_ELECTION_RESIGNED);
  s->status = status;
  s->term = term;
  snprintf(s->detail, sizeof(s->detail), "%s", rlock_last_error());
  /* From now on the term's end goes to the caller's on_end. */
  uv_mutex_lock(&e->mu);
  e->cb = s->on_end;
  e->cb_data = s->data;
  uv_mutex_unlock(&e->mu);
  uv_sem_post(&s->sem);
}

int rlock_election_campaign(rlock_election *e, const char *value, size_t len,
                            int64_t wait_ms, rlock_election_cb on_end,
                            void *data, int64_t *term) {
  if (e == NULL)
    return rlock__bad_arg("election is NULL");
  if (rlock__core_on_loop_thread(engine_of(e)->core)) {
    rlock__set_last_error("blocking call made on the client's loop thread");
    return RLOCK_EDEADLK;
  }
  sync_campaign *s = calloc(1, sizeof(*s));
  if (s == NULL || uv_sem_init(&s->sem, 0) != 0) {
    free(s);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  s->on_end = on_end;
  s->data = data;
  int rc = rlock_election_campaign_start(e, value, len, wait_ms, sync_cb, s);
  if (rc == 0) {
    uv_sem_wait(&s->sem);
    rc = s->status;
    if (rc == RLOCK_ELECTION_WON && term != NULL)
      *term = s->term;
    if (rc < 0 || rc == RLOCK_ELECTION_NOT_WON)
      rlock__set_last_error("%s", s->detail);
    else
      rlock__clear_last_error();
  }
  uv_sem_destroy(&s->sem);
  free(s);
  return rc;
}

int rlock_election_cancel(rlock_election *e) {
  if (e == NULL)
    return rlock__bad_arg("election is NULL");
  uv_mutex_lock(&e->mu);
  bool pending = e->start_pending && !e->cancel_pending;
  if (pending)
    e->cancel_pending = true;
  uv_mutex_unlock(&e->mu);
  int rc = rlock__engine_interrupt(engine_of(e), e->owner);
  return pending && rc >= 0 ? rc + 1 : rc;
}

/* ---- ops on the loop thread: proclaim, resign, free ---- */

typedef struct election_op {
  rlock__op op; /* first */
  rlock_election *e;
  const char *value;
  size_t len;
} election_op;

static void proclaim_reply(rlock__net *n, redisReply *reply, int err,
                           void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (rlock__op_failed(op, reply, err))
    return;
  if (reply->type != REDIS_REPLY_INTEGER) {
    rlock__op_detail(op, "election proclaim replied type %d", reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  if (reply->integer != 1) {
    rlock__op_detail(op, "election '%s': the lock is no longer held by "
                         "this candidate", op->lock->name);
    rlock__op_finish(op, RLOCK_ELOCKLOST);
    return;
  }
  rlock__op_finish(op, 0);
}

static void start_proclaim(rlock__op *op) {
  election_op *x = (election_op *)op;
  rlock_election *e = x->e;
  uv_mutex_lock(&e->mu);
  if (e->phase != PH_LEADER) {
    uv_mutex_unlock(&e->mu);
    rlock__op_detail(op, "election '%s': not the leader", op->lock->name);
    rlock__op_finish(op, RLOCK_ENOTOWNER);
    return;
  }
  char *copy = malloc(x->len + 1);
  if (copy == NULL) {
    uv_mutex_unlock(&e->mu);
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  memcpy(copy, x->value, x->len);
  copy[x->len] = '\0';
  free(e->value);
  e->value = copy; /* the refreshes write it from now on */
  e->value_len = x->len;
  int64_t term = e->term;
  uv_mutex_unlock(&e->mu);
  op->state = RLOCK__ST_CMD;
  op->cmd = send_proclaim(e, x->value, x->len, term, true, proclaim_reply,
                          op);
  if (op->cmd == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
}

static const rlock__op_type proclaim_type = {.name = "election_proclaim",
                                             .start = start_proclaim};

int rlock_election_proclaim(rlock_election *e, const char *value,
                            size_t len) {
  if (e == NULL)
    return rlock__bad_arg("election is NULL");
  int rc = check_value(value, len);
  if (rc != 0)
    return rc;
  election_op x;
  rlock__op_init(&x.op, e->self, &proclaim_type, e->owner);
  x.e = e;
  x.value = value;
  x.len = len;
  return rlock__op_run_sync(&x.op);
}

/* Resign: unlock (the unlock message wakes the next candidate), then the
 * clear, then the term's end is said; the op finishes last. */
static void resign_done(rlock_election *e, int64_t term) {
  cb_ref cb = set_phase(e, PH_IDLE);
  emit(e, RLOCK_EVENT_TERM_ENDED, RLOCK_ELECTION_RESIGNED, term);
  deliver(e, cb, RLOCK_ELECTION_RESIGNED, term);
  if (e->resign_op != NULL) {
    rlock__op *op = e->resign_op;
    e->resign_op = NULL;
    rlock__op_finish(op, e->resign_rc);
  }
  e_unref(e); /* the term's reference */
}

static void resign_cleared(rlock__net *n, redisReply *reply, int err,
                           void *data) {
  (void)n;
  (void)reply;
  (void)err;
  rlock_election *e = data;
  resign_done(e, e->term);
  e_unref(e); /* the clear's */
}

static void resign_unlocked(int status, int64_t value, void *data) {
  (void)value;
  rlock_election *e = data;
  /* Released (1), or already gone (ELOCKLOST): either way the term is
   * over; a transport error leaves the lock to expire. */
  e->resign_rc = (status == 1 || status == RLOCK_ELOCKLOST ||
                  status == RLOCK_ENOTOWNER)
                     ? 0
                     : status;
  if (send_clear(e, e->term, resign_cleared) == NULL)
    resign_done(e, e->term);
}

static void resign_finish(rlock__op *op, int result) {
  (void)result;
  election_op *x = (election_op *)op;
  if (x->e->resign_op == op)
    x->e->resign_op = NULL;
}

static void start_resign(rlock__op *op) {
  election_op *x = (election_op *)op;
  rlock_election *e = x->e;
  uv_mutex_lock(&e->mu);
  if (e->phase != PH_LEADER) {
    uv_mutex_unlock(&e->mu);
    rlock__op_detail(op, "election '%s': not the leader (nothing to "
                         "resign)", op->lock->name);
    rlock__op_finish(op, RLOCK_ENOTOWNER);
    return;
  }
  e->phase = PH_RESIGN;
  uv_mutex_unlock(&e->mu);
  rlock__timed_stop(engine_of(e)->core, &e->tick);
  op->state = RLOCK__ST_WAITING;
  e->resign_op = op;
  e->resign_rc = 0;
  int rc = rlock_unlock_async(e->lock, e->owner, resign_unlocked, e, NULL);
  if (rc != 0)
    resign_unlocked(rc, 0, e);
}

static const rlock__op_type resign_type = {
    .name = "election_resign", .start = start_resign, .finish = resign_finish};

int rlock_election_resign(rlock_election *e) {
  if (e == NULL)
    return rlock__bad_arg("election is NULL");
  election_op x;
  rlock__op_init(&x.op, e->self, &resign_type, e->owner);
  x.e = e;
  x.value = NULL;
  x.len = 0;
  return rlock__op_run_sync(&x.op);
}

int rlock_election_leading(rlock_election *e, int64_t *term,
                           int64_t *until_ms) {
  if (e == NULL)
    return rlock__bad_arg("election is NULL");
  uv_mutex_lock(&e->mu);
  bool leader = e->phase == PH_LEADER;
  int64_t t = e->term;
  uv_mutex_unlock(&e->mu);
  int64_t until = 0;
  if (!leader ||
      rlock_is_lease_guaranteed_owner(e->lock, e->owner, &until) != 1) {
    rlock__clear_last_error();
    return 0;
  }
  if (term != NULL)
    *term = t;
  if (until_ms != NULL)
    *until_ms = until;
  return 1;
}

/* Free: no callback after it (the loop thread forgets the handle's cb). */
static void start_forget(rlock__op *op) {
  election_op *x = (election_op *)op;
  uv_mutex_lock(&x->e->mu);
  x->e->cb = NULL;
  uv_mutex_unlock(&x->e->mu);
  rlock__op_finish(op, 0);
}

static const rlock__op_type forget_type = {.name = "election_forget",
                                           .start = start_forget};

int rlock_election_new(rlock_client *client, const char *name,
                       rlock_election **out) {
  if (out == NULL)
    return rlock__bad_arg("out is NULL");
  *out = NULL;
  rlock_election *e = calloc(1, sizeof(*e));
  if (e == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  int rc = handles(client, name, &e->lock, &e->self);
  if (rc != 0) {
    free(e);
    return rc;
  }
  e->vkey = rlock__election_value_key(e->lock, &e->vkey_len);
  e->tkey = rlock__fenced_token_key(e->lock, &e->tkey_len);
  if (e->vkey == NULL || e->tkey == NULL || uv_mutex_init(&e->mu) != 0) {
    free(e->vkey);
    free(e->tkey);
    rlock_free(e->lock);
    rlock__handle_release(e->self);
    free(e);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  atomic_init(&e->refs, 1);
  e->owner = rlock__id_next();
  snprintf(e->owner_str, sizeof(e->owner_str), "%s:%" PRIu64,
           engine_of(e)->client_id, e->owner);
  *out = e;
  rlock__clear_last_error();
  return 0;
}

void rlock_election_free(rlock_election *e) {
  if (e == NULL)
    return;
  if (!rlock__core_on_loop_thread(engine_of(e)->core)) {
    (void)rlock_election_cancel(e);
    /* A campaign that has won may still be writing its value: wait for it
     * to become a term (or not) before the resign. */
    for (int i = 0; i < 2000; i++) {
      uv_mutex_lock(&e->mu);
      int ph = e->phase;
      uv_mutex_unlock(&e->mu);
      if (ph != PH_CAMPAIGN && ph != PH_PROCLAIM)
        break;
      uv_sleep(5);
    }
    int rc = rlock_election_resign(e);
    election_op x;
    rlock__op_init(&x.op, e->self, &forget_type, e->owner);
    x.e = e;
    (void)rlock__op_run_sync(&x.op);
    uv_mutex_lock(&e->mu);
    bool orphan = rc == RLOCK_ECLOSED && e->phase == PH_LEADER;
    if (orphan)
      e->phase = PH_IDLE;
    uv_mutex_unlock(&e->mu);
    /* The client closed while leading: its timers stopped, so no loss
     * will ever end the term; its reference goes here (the lock expires
     * on the server after its lease). */
    if (orphan)
      e_unref(e);
  } else {
    uv_mutex_lock(&e->mu);
    e->cb = NULL;
    int ph = e->phase;
    uv_mutex_unlock(&e->mu);
    (void)rlock_election_cancel(e);
    if (ph == PH_LEADER)
      lose(e, "the handle was freed");
  }
  e_unref(e);
}

/* ---- reading the leader ---- */

static int parse_state(const redisReply *r, const char *what,
                       rlock_election_state *st) {
  if (r->type == REDIS_REPLY_ERROR) {
    rlock__set_last_error("%s: %.*s", what, (int)r->len, r->str);
    return rlock__err_from_server(r->str, (size_t)r->len);
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 6 ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    rlock__set_last_error("%s: unexpected reply (type %d)", what, r->type);
    return RLOCK_EPROTO;
  }
  for (size_t i = 0; i < 6; i++)
    if (i != 1 && r->element[i]->type != REDIS_REPLY_STRING) {
      rlock__set_last_error("%s: unexpected reply element %zu", what, i);
      return RLOCK_EPROTO;
    }
  const redisReply *holder = r->element[0], *token = r->element[2],
                   *vholder = r->element[3], *vterm = r->element[4],
                   *value = r->element[5];
  rlock_election_state_init(st);
  st->ttl_ms = r->element[1]->integer;
  if (holder->len == 0)
    return 0;
  st->has_leader = 1;
  snprintf(st->holder, sizeof(st->holder), "%.*s", (int)holder->len,
           holder->str);
  if (vholder->len == holder->len &&
      memcmp(vholder->str, holder->str, holder->len) == 0 &&
      value->len <= RLOCK_ELECTION_VALUE_MAX) {
    st->has_value = 1;
    st->term = strtoll(vterm->str, NULL, 10);
    memcpy(st->value, value->str, value->len);
    st->value[value->len] = '\0';
    st->value_len = value->len;
  } else {
    st->term = token->len > 0 ? strtoll(token->str, NULL, 10) : 0;
  }
  return 0;
}

static rlock__cmd *send_read(rlock *self, const char *lock_name,
                             size_t lock_len, const char *tkey,
                             size_t tkey_len, const char *vkey,
                             size_t vkey_len, rlock__reply_cb cb,
                             void *data) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "3");
  rlock__argv_mem(&a, lock_name, lock_len);
  rlock__argv_mem(&a, tkey, tkey_len);
  rlock__argv_mem(&a, vkey, vkey_len);
  return rlock__cmd_send(self->engine->net, &read_script, a.argc, a.argv,
                         a.lens, self->engine->core->opts.retry_attempts, cb,
                         data);
}

typedef struct read_op {
  rlock__op op; /* first */
  rlock_election_state *out;
} read_op;

static void read_reply(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  if (err != 0 || reply->type == REDIS_REPLY_ERROR) {
    (void)rlock__op_failed(op, reply, err);
    return;
  }
  rlock_election_state st;
  int rc = parse_state(reply, "election read", &st);
  if (rc != 0) {
    rlock__op_detail(op, "%s", rlock_last_error());
    rlock__op_finish(op, rc);
    return;
  }
  read_op *x = (read_op *)op;
  size_t keep = x->out->struct_size;
  memcpy(x->out, &st, keep < sizeof(st) ? keep : sizeof(st));
  x->out->struct_size = keep;
  rlock__op_finish(op, 0);
}

static void start_read(rlock__op *op) {
  rlock *self = op->lock;
  size_t vlen = 0, tlen = 0;
  char *vkey = rlock__election_value_key(self, &vlen);
  char *tkey = rlock__fenced_token_key(self, &tlen);
  if (vkey != NULL && tkey != NULL) {
    op->state = RLOCK__ST_CMD;
    op->cmd = send_read(self, self->name, self->name_len, tkey, tlen, vkey,
                        vlen, read_reply, op);
  }
  free(vkey);
  free(tkey);
  if (op->cmd == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
}

static const rlock__op_type read_type = {.name = "election_read",
                                         .start = start_read};

int rlock_client_election_leader(rlock_client *client, const char *name,
                          rlock_election_state *out) {
  if (out == NULL || out->struct_size < offsetof(rlock_election_state,
                                                 holder))
    return rlock__bad_arg("state is NULL or its struct_size is not set "
                          "(rlock_election_state_init)");
  if (out->struct_size > sizeof(*out))
    return rlock__bad_arg("state's struct_size is larger than this "
                          "library's");
  rlock *lock = NULL, *self = NULL;
  int rc = handles(client, name, &lock, &self);
  if (rc != 0)
    return rc;
  read_op x;
  rlock__op_init(&x.op, self, &read_type, 0);
  x.out = out;
  rc = rlock__op_run_sync(&x.op);
  rlock_free(lock);
  rlock__handle_release(self);
  return rc;
}

/* ---- observers ---- */

struct rlock_election_observer {
  atomic_int refs; /* the user's, a read in flight */
  rlock *self;
  char *vkey, *tkey;
  size_t vkey_len, tkey_len;
  int64_t poll_ms;
  rlock_election_observe_cb cb;
  void *data;
  /* loop thread */
  rlock__waiter w;
  rlock__timed rejoin; /* after a refused SUBSCRIBE */
  bool stopped, reading, again;
  bool delivered;
  int64_t next_wait;
  rlock_election_state last;
};

static void o_unref(rlock_election_observer *o) {
  if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1)
    return;
  rlock__handle_release(o->self);
  free(o->vkey);
  free(o->tkey);
  free(o);
}

static bool same_state(const rlock_election_state *a,
                       const rlock_election_state *b) {
  return a->has_leader == b->has_leader && a->has_value == b->has_value &&
         a->term == b->term && strcmp(a->holder, b->holder) == 0 &&
         a->value_len == b->value_len &&
         memcmp(a->value, b->value, a->value_len) == 0;
}

static void o_read(rlock_election_observer *o);

static void o_wait(rlock_election_observer *o) {
  if (o->stopped || o->w.chan == NULL || o->w.state != RLOCK__W_JOINED)
    return;
  rlock__chan_wait(&o->w, o->next_wait);
}

static void o_read_reply(rlock__net *n, redisReply *reply, int err,
                         void *data) {
  (void)n;
  rlock_election_observer *o = data;
  o->reading = false;
  if (o->stopped) {
    o_unref(o);
    return;
  }
  o->next_wait = o->poll_ms;
  rlock_election_state st;
  if (err == 0 && parse_state(reply, "election observe", &st) == 0) {
    if (st.has_leader && st.ttl_ms >= 0 && st.ttl_ms + 5 < o->next_wait)
      o->next_wait = st.ttl_ms + 5; /* read again once it may have expired */
    if (!o->delivered || !same_state(&st, &o->last)) {
      o->delivered = true;
      o->last = st;
      o->cb(&o->last, o->data);
    }
  }
  if (o->again && !o->stopped) {
    o->again = false;
    o_read(o);
  } else {
    o_wait(o);
  }
  o_unref(o);
}

static void o_read(rlock_election_observer *o) {
  if (o->stopped)
    return;
  if (o->reading) {
    o->again = true;
    return;
  }
  o->reading = true;
  atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
  if (send_read(o->self, o->self->name, o->self->name_len, o->tkey,
                o->tkey_len, o->vkey, o->vkey_len, o_read_reply,
                o) == NULL) {
    o->reading = false;
    o_unref(o);
    /* out of memory now: the next poll tries again */
    o->next_wait = o->poll_ms;
    o_wait(o);
  }
}

static void o_retry(rlock__waiter *w) {
  o_read(RLOCK__CONTAINER_OF(w, rlock_election_observer, w));
}

static void o_join(rlock_election_observer *o);

static void o_rejoin_fire(rlock__timed *t) {
  rlock_election_observer *o =
      RLOCK__CONTAINER_OF(t, rlock_election_observer, rejoin);
  o_join(o);
}

static void o_sub_failed(rlock__waiter *w, int err, const char *text,
                         size_t len) {
  (void)err;
  rlock_election_observer *o =
      RLOCK__CONTAINER_OF(w, rlock_election_observer, w);
  rlock__diag(o->self->engine->core, RLOCK_DIAG_WARN,
              "election observer '%s': SUBSCRIBE refused (%.*s); polling",
              o->self->name, (int)len, text);
  rlock__chan_leave(w);
  o_read(o);
  o->rejoin.fire = o_rejoin_fire;
  rlock__timed_start(o->self->engine->core, &o->rejoin,
                     rlock__now_ms() + o->poll_ms);
}

static const rlock__waiter_ops o_ops = {
    .retry = o_retry, .sub_timeout = o_retry, .sub_failed = o_sub_failed};

static void o_join(rlock_election_observer *o) {
  if (o->stopped)
    return;
  o->w.ops = &o_ops;
  int rc = rlock__chan_join(
      o->self->engine->net, &o->w, o->self->channel, o->self->channel_len,
      on_message,
      rlock__now_ms() + o->self->engine->core->opts.subscribe_timeout_ms);
  if (rc == 1) {
    o_read(o);
  } else if (rc < 0) { /* out of memory: poll, join again later */
    o_read(o);
    o->rejoin.fire = o_rejoin_fire;
    rlock__timed_start(o->self->engine->core, &o->rejoin,
                       rlock__now_ms() + o->poll_ms);
  }
  /* rc == 0: a waiter op follows when the SUBSCRIBE is answered */
}

typedef struct observe_op {
  rlock__op op; /* first */
  rlock_election_observer *o;
} observe_op;

static void start_observe(rlock__op *op) {
  rlock_election_observer *o = ((observe_op *)op)->o;
  o_join(o);
  rlock__op_finish(op, 0);
}

static void start_unobserve(rlock__op *op) {
  rlock_election_observer *o = ((observe_op *)op)->o;
  o->stopped = true;
  rlock__timed_stop(op->engine->core, &o->rejoin);
  rlock__chan_leave(&o->w);
  rlock__op_finish(op, 0);
}

static const rlock__op_type observe_type = {.name = "election_observe",
                                            .start = start_observe};
static const rlock__op_type unobserve_type = {.name = "election_unobserve",
                                              .start = start_unobserve};

int rlock_election_observer_new(rlock_client *client, const char *name,
                           int64_t poll_ms, rlock_election_observe_cb cb,
                           void *data, rlock_election_observer **out) {
  if (out == NULL || cb == NULL || poll_ms < 0)
    return rlock__bad_arg("out or cb is NULL, or poll_ms < 0");
  *out = NULL;
  rlock_election_observer *o = calloc(1, sizeof(*o));
  if (o == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  rlock *lock = NULL;
  int rc = handles(client, name, &lock, &o->self);
  if (rc != 0) {
    free(o);
    return rc;
  }
  o->vkey = rlock__election_value_key(lock, &o->vkey_len);
  o->tkey = rlock__fenced_token_key(lock, &o->tkey_len);
  rlock_free(lock);
  atomic_init(&o->refs, 1);
  o->poll_ms = poll_ms == 0 ? DEFAULT_POLL_MS : poll_ms;
  o->next_wait = o->poll_ms;
  o->cb = cb;
  o->data = data;
  if (o->vkey == NULL || o->tkey == NULL) {
    o_unref(o);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  observe_op x;
  rlock__op_init(&x.op, o->self, &observe_type, 0);
  x.o = o;
  rc = rlock__op_run_sync(&x.op);
  if (rc != 0) {
    o_unref(o);
    return rc;
  }
  *out = o;
  return 0;
}

void rlock_election_observer_free(rlock_election_observer *o) {
  if (o == NULL)
    return;
  if (rlock__core_on_loop_thread(o->self->engine->core)) {
    o->stopped = true; /* from a callback: stop here */
    rlock__timed_stop(o->self->engine->core, &o->rejoin);
    rlock__chan_leave(&o->w);
  } else {
    observe_op x;
    rlock__op_init(&x.op, o->self, &unobserve_type, 0);
    x.o = o;
    (void)rlock__op_run_sync(&x.op);
  }
  o_unref(o);
}
