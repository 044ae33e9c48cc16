/* What this client believes it holds, and the watchdog that renews the
 * holds taken without a lease: every watchdog_timeout/3, one batched script
 * call per 100 holds of a primitive (as Java 3.44+ does), so 10 000 held
 * locks cost 100 commands per period, not 10 000. In a cluster a batch also
 * keeps to one hash slot (a script's keys must), so there it is one call
 * per 100 holds of a primitive in a slot. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

#define RENEW_BATCH 100
/* Batches filled at once in a round, one per (renew script, slot). Standalone
 * every slot is -1, so this is one per script, more than there are kinds. In
 * a cluster holds spread over many slots: when the table is full the fullest
 * batch goes early to make room (a hold is never left out of a round: one
 * missed period too many and its lock expires). */
#define RENEW_OPEN 16

/* Holds of a kind that renews them itself are one per handle. */
static bool per_handle(const rlock__prim *prim) {
  return prim->hold != NULL && prim->hold->send_renew != NULL;
}

/* Builds "name\0owner" (then "\0" and the handle's address, for a kind
 * whose holds are one per handle) into buf (or a malloc'd buffer when it
 * does not fit). Returns the key or NULL when out of memory. */
static char *hold_key(char *buf, size_t cap, const rlock *lock,
                      const char *owner, size_t *len) {
  size_t nl = lock->name_len, ol = strlen(owner);
  size_t hl = per_handle(lock->prim) ? 1 + sizeof(lock) : 0;
  *len = nl + 1 + ol + hl;
  char *key = *len + 1 <= cap ? buf : malloc(*len + 1);
  if (key == NULL)
    return NULL;
  memcpy(key, lock->name, nl + 1);
  memcpy(key + nl + 1, owner, ol + 1);
  if (hl > 0)
    memcpy(key + nl + 1 + ol + 1, &lock, sizeof(lock));
  key[*len] = '\0';
  return key;
}

rlock__hold *rlock__hold_find(rlock__engine *e, const rlock *lock,
                              const char *owner) {
  char buf[512];
  size_t len;
  char *key = hold_key(buf, sizeof(buf), lock, owner, &len);
  if (key == NULL)
    return NULL;
  rlock__hold *h = rlock__map_get(&e->holds, key, len);
  if (key != buf)
    free(key);
  return h;
}

/* ---- lease safety ---- */

/* What a command on h sent at sent_ms that sets the expiry to lease_ms
 * when it runs lets the client promise: the key lives at least until
 * sent_ms + lease_ms (it ran after it was sent), less the margin. A
 * command whose reply never came may still run after this one and set
 * its own (shorter) lease then; a read/write lock's hash may be cut to a
 * watchdog timeout by another holder's renewal. */
static int64_t lease_bound(const rlock__engine *e, const rlock__hold *h,
                           int64_t sent_ms, int64_t lease_ms) {
  if (h->lost_lease < lease_ms)
    lease_ms = h->lost_lease;
  if (h->prim->hold->shared_expiry &&
      lease_ms > e->core->opts.watchdog_timeout_ms)
    lease_ms = e->core->opts.watchdog_timeout_ms;
  return sent_ms + lease_ms - rlock__lease_margin_ms(lease_ms);
}

static void lease_lower(rlock__hold *h, int64_t bound) {
  if (bound < h->until_ms)
    h->until_ms = bound;
  if (bound < h->renew_cap)
    h->renew_cap = bound;
}

int64_t rlock__hold_guaranteed_until(const rlock__hold *h) {
  return h->until_ms;
}

/* The hold the lease-safety hooks act on: a live one. */
static rlock__hold *live_hold(rlock__engine *e, const rlock *lock,
                              const char *owner) {
  rlock__hold *h = rlock__hold_find(e, lock, owner);
  return h != NULL && !h->lost ? h : NULL;
}

void rlock__hold_lease_sent(rlock__engine *e, const rlock *lock,
                            const char *owner, int64_t sent_ms,
                            int64_t lease_ms) {
  rlock__hold *h = live_hold(e, lock, owner);
  if (h != NULL)
    lease_lower(h, lease_bound(e, h, sent_ms, lease_ms));
}

void rlock__hold_lease_lost(rlock__engine *e, const rlock *lock,
                            const char *owner, int64_t lease_ms) {
  rlock__hold *h = live_hold(e, lock, owner);
  if (h != NULL && lease_ms < h->lost_lease)
    h->lost_lease = lease_ms;
}

void rlock__hold_lease_confirmed(rlock__engine *e, const rlock *lock,
                                 const char *owner, int64_t sent_ms,
                                 int64_t lease_ms) {
  rlock__hold *h = live_hold(e, lock, owner);
  if (h == NULL)
    return;
  /* Inside the reply's callback: replica sync not confirmed, so a
   * replica may have only the expiry before it - the command may shorten
   * the guarantee, never lengthen it (issue 33). */
  if (rlock__net_reply_unsynced(e->net))
    lease_lower(h, lease_bound(e, h, sent_ms, lease_ms));
  else
    h->until_ms = lease_bound(e, h, sent_ms, lease_ms);
}

/* ---- holds ---- */

int rlock__hold_add(rlock__engine *e, const rlock *lock, const char *owner,
                    int64_t lease_ms, int64_t sent_ms, int streak) {
  rlock__hold *h = rlock__hold_find(e, lock, owner);
  bool fresh = h == NULL || h->lost;
  if (h == NULL) {
    h = calloc(1, sizeof(*h));
    if (h == NULL)
      return RLOCK_ENOMEM;
    h->key = hold_key(NULL, 0, lock, owner, &h->key_len);
    if (h->key == NULL ||
        rlock__map_put(&e->holds, h->key, h->key_len, h) != 0) {
      free(h->key);
      free(h);
      return RLOCK_ENOMEM;
    }
    h->name = h->key;
    h->owner = h->key + lock->name_len + 1;
    h->prim = lock->prim;
    if (per_handle(lock->prim)) {
      /* Renewed from this handle: it lives as long as the hold. */
      h->lock = (rlock *)lock;
      atomic_fetch_add(&h->lock->refs, 1);
    }
    h->gen = ++e->next_hold_gen;
    h->since_ms = rlock__now_ms();
  } else if (h->lost) {
    /* Re-entered after the watchdog saw the hold lost: the server holds 1
     * again, but the caller still counts its outer holds, which were lost:
     * the unlocks that end them say so (RLOCK_ELOCKLOST, release.c), as
     * when the loss went unnoticed until the inner unlock. A new
     * generation, so the renewals of the lost hold say nothing about this
     * one. */
    h->lost = false;
    h->releasing = 0;
    h->gen = ++e->next_hold_gen;
    h->since_ms = rlock__now_ms();
  }
  int64_t applied =
      lease_ms < 0 ? e->core->opts.watchdog_timeout_ms : lease_ms;
  if (fresh) {
    h->lost_lease = h->renew_cap = INT64_MAX;
    h->until_ms = lease_bound(e, h, sent_ms, applied);
  } else {
    /* A re-entry: RLock's script sets the expiry to this lease, which may
     * be shorter than what was promised (the write lock's adds it, the
     * read lock's keeps the longer): the lower of the two holds. */
    lease_lower(h, lease_bound(e, h, sent_ms, applied));
  }
  if (h->count == 0)
    h->handoff_streak = streak;
  if (fresh)
    rlock__gate_hold_added(e, lock, h);
  h->count++;
  if (lease_ms < 0)
    h->watchdog_count++;
  else
    h->lease_ms = lease_ms;
  assert(h->count > 0 && h->watchdog_count >= 0 &&
         h->watchdog_count <= h->count);
  return 0;
}

/* An event about hold h: what every hold event carries. */
static rlock__event hold_event(const rlock__hold *h, rlock_event_type type,
                               const char *detail) {
  rlock__event ev = {.pub = {.type = type,
                             .kind = h->prim->kind,
                             .name = h->name,
                             .owner = h->owner,
                             .hold_ms = rlock__now_ms() - h->since_ms,
                             .detail = detail}};
  return ev;
}

void rlock__hold_lost(rlock__engine *e, rlock__hold *h, int by) {
  if (h->lost)
    return;
  h->lost = true;
  rlock__gate_hold_gone(e, h);
  if (e->on_event == NULL)
    return;
  const char *how = by == RLOCK_EVENT_BY_WATCHDOG
                        ? "a renewal found the lock gone"
                        : "the unlock found the lock gone";
  rlock__event ev = hold_event(h, RLOCK_EVENT_LOST, how);
  ev.pub.cause = by;
  rlock__engine_emit(e, &ev);
}

void rlock__holds_check_risk(rlock__engine *e) {
  const rlock_options *o = &e->core->opts;
  if (o->lease_risk_ms < 0)
    return;
  int64_t now = rlock__now_ms();
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &e->holds);
  while ((node = rlock__map_next(&it)) != NULL) {
    rlock__hold *h = node->value;
    if (h->lost)
      continue;
    int64_t lease =
        h->watchdog_count > 0 ? o->watchdog_timeout_ms : h->lease_ms;
    int64_t limit = o->lease_risk_ms > 0 ? o->lease_risk_ms : lease / 3;
    int64_t left = rlock__hold_guaranteed_until(h) - now;
    if (left >= limit) {
      h->at_risk = false; /* recovered: a later fall is said again */
      continue;
    }
    if (h->at_risk)
      continue;
    h->at_risk = true;
    /* The one place LEASE_AT_RISK is told. */
    rlock__event ev = hold_event(h, RLOCK_EVENT_LEASE_AT_RISK, "");
    ev.pub.remaining_ms = left;
    ev.pub.lease_ms = lease;
    rlock__engine_emit(e, &ev);
  }
}

void rlock__hold_drop(rlock__engine *e, rlock__hold *h) {
  rlock__gate_hold_gone(e, h);
  rlock__map_remove(&e->holds, h->key, h->key_len);
  if (h->lock != NULL)
    rlock__handle_release(h->lock);
  free(h->key);
  free(h);
}

int64_t rlock__hold_count_known(rlock__engine *e, const rlock *lock,
                                const char *owner) {
  rlock__hold *h = rlock__hold_find(e, lock, owner);
  return (h != NULL && !h->lost) ? h->count : 0;
}

void rlock__hold_trimmed(rlock__engine *e, const rlock *lock, const char *owner,
                         int64_t server_before, int64_t want) {
  int64_t now_held = server_before < want ? server_before : want;
  rlock__hold *h = rlock__hold_find(e, lock, owner);
  if (h == NULL || h->count <= now_held)
    return;
  if (now_held == 0) {
    rlock__hold_drop(e, h);
  } else {
    h->count = now_held;
    if (h->watchdog_count > h->count)
      h->watchdog_count = h->count;
    assert(h->count > 0 && h->watchdog_count >= 0);
  }
}

/* ---- renewal ---- */

typedef struct renew_batch {
  rlock__engine *engine;
  const rlock__script *script;
  int slot; /* the cluster slot of every key, or -1 (not a cluster) */
  bool single; /* one hold, sent by the kind's send_renew: an integer reply */
  int64_t sent_ms; /* the round's start: no later than the send */
  int n;
  uint64_t sent_ns; /* when it was sent (round trip) */
  uint64_t gen[RENEW_BATCH];
  uint64_t release_seq[RENEW_BATCH]; /* the hold's unlock count when sent */
  char *key[RENEW_BATCH]; /* copies of hold keys: holds may go meanwhile */
  size_t key_len[RENEW_BATCH];
} renew_batch;

static void batch_free(renew_batch *b) {
  for (int i = 0; i < b->n; i++)
    free(b->key[i]);
  free(b);
}

static void renew_round(rlock__engine *e);

/* Diagnostics: a renewal batch got no answer, or an error reply. */
static void diag_renew_failed(rlock__engine *e, const renew_batch *b,
                              const redisReply *reply, int err) {
  int64_t every = e->core->opts.watchdog_timeout_ms / 3;
  if (err == RLOCK_ECLOSED)
    return; /* closing: nothing is renewed any more */
  if (err != 0)
    rlock__diag(e->core, RLOCK_DIAG_WARN,
                "renewal of %d lock%s ('%.200s'%s) failed: %s; the watchdog "
                "tries again every %lld ms",
                b->n, b->n == 1 ? "" : "s", b->key[0], b->n > 1 ? ", ..." : "",
                rlock_err_name(err), (long long)every);
  else if (reply->type != REDIS_REPLY_ARRAY &&
           !(b->single && reply->type == REDIS_REPLY_INTEGER))
    rlock__diag(e->core, RLOCK_DIAG_WARN,
                "renewal of %d lock%s ('%.200s'%s) failed: %.*s; the "
                "watchdog tries again every %lld ms",
                b->n, b->n == 1 ? "" : "s", b->key[0], b->n > 1 ? ", ..." : "",
                reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 15,
                reply->type == REDIS_REPLY_ERROR ? reply->str
                                                 : "unexpected reply",
                (long long)every);
}

/* A renewal command failed as a whole (no answer, an error answer): each
 * hold it renewed still held is told RENEWAL_FAILED. */
static void renew_failed(rlock__engine *e, renew_batch *b, int err,
                         const redisReply *reply, rlock__event *sum) {
  sum->n_failed = b->n;
  if (e->on_event == NULL)
    return;
  char detail[160];
  if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
    snprintf(detail, sizeof(detail), "%.*s", (int)reply->len, reply->str);
  else
    snprintf(detail, sizeof(detail), "%s", rlock_strerror(err));
  for (int i = 0; i < b->n; i++) {
    rlock__hold *h = rlock__map_get(&e->holds, b->key[i], b->key_len[i]);
    if (h == NULL || h->gen != b->gen[i] || h->lost)
      continue;
    rlock__event ev = hold_event(h, RLOCK_EVENT_RENEWAL_FAILED, detail);
    ev.pub.error = err;
    rlock__engine_emit(e, &ev);
  }
}

static void renew_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  renew_batch *b = data;
  rlock__engine *e = b->engine;
  assert(e->renew_inflight > 0);
  e->renew_inflight--;
  const int64_t wd = e->core->opts.watchdog_timeout_ms;
  if (err != 0) {
    /* Never answered: it may still run later (lease safety). */
    for (int i = 0; i < b->n; i++) {
      rlock__hold *h = rlock__map_get(&e->holds, b->key[i], b->key_len[i]);
      if (h != NULL && h->gen == b->gen[i] && wd < h->lost_lease)
        h->lost_lease = wd;
    }
  }
  /* The one place renewal results are told (stats, RENEWAL_FAILED). */
  rlock__event sum = {.pub = {.type = (rlock_event_type)RLOCK__EV_RENEWED},
                      .rtt_us = (int64_t)((uv_hrtime() - b->sent_ns) / 1000),
                      .headroom_ms = INT64_MAX};
  /* The answers, one per hold: an array's elements, or send_renew's
   * integer. */
  redisReply *one[1] = {NULL};
  redisReply **answers = NULL;
  size_t nanswers = 0;
  if (err == 0 && reply->type == REDIS_REPLY_ARRAY) {
    answers = reply->element;
    nanswers = reply->elements;
  } else if (err == 0 && b->single && reply->type == REDIS_REPLY_INTEGER) {
    one[0] = reply;
    answers = one;
    nanswers = 1;
  }
  int failed = err != 0                           ? err
               : reply->type == REDIS_REPLY_ERROR ? rlock__reply_error(reply)
               : answers == NULL                  ? RLOCK_EPROTO
                                                  : 0;
  /* (At close the commands in flight end with RLOCK_ECLOSED: no renewal
   * failed, the client stopped.) */
  if (failed != 0 && failed != RLOCK_ECLOSED)
    renew_failed(e, b, failed, err == 0 ? reply : NULL, &sum);
  /* A batch refused whole for spanning slots (a cluster behind a proxy
   * that let the cross-slot probe pass): nothing ran, and the net layer
   * batches per slot from now on. Renew again as soon as this round is
   * over rather than a period later - a third of the lease less head-room
   * for every hold in it otherwise - once a period at most. */
  if (err == 0 && reply->type == REDIS_REPLY_ERROR && reply->len >= 9 &&
      memcmp(reply->str, "CROSSSLOT", 9) == 0 && !e->renew_crossslot_redone) {
    e->renew_crossslot_redone = true;
    e->renew_missed = true;
  }
  /* A failed renewal is tried again next period; only a definite "0" from
   * the server means the hold is gone. */
  if (rlock__diag_on(e->core))
    diag_renew_failed(e, b, reply, err);
  if (failed == 0) {
    int64_t now = rlock__now_ms();
    bool unsynced = rlock__net_reply_unsynced(n);
    for (size_t i = 0; i < nanswers && i < (size_t)b->n; i++) {
      const redisReply *r = answers[i];
      if (r->type != REDIS_REPLY_INTEGER)
        continue;
      if (r->integer == 1)
        sum.n_ok++;
      rlock__hold *h = rlock__map_get(&e->holds, b->key[i], b->key_len[i]);
      if (h == NULL || h->gen != b->gen[i] || h->lost)
        continue;
      if (r->integer == 1) {
        /* Head-room: what was still guaranteed when the confirmation
         * came, before it moves the guarantee on. */
        int64_t room = rlock__hold_guaranteed_until(h) - now;
        if (room < sum.headroom_ms)
          sum.headroom_ms = room;
        /* Replica sync asked for and not confirmed: the master has the
         * new expiry, a replica that a failover would promote may have
         * only the last confirmed one - the guarantee stays where that
         * put it and runs down (LEASE_AT_RISK; issue 33). */
        if (unsynced)
          continue;
        /* Confirmed: the key lives a watchdog timeout from when the
         * renewal ran, later than it was sent - unless a command sent
         * since (a re-entry with a shorter lease) ran after it. */
        int64_t bound = lease_bound(e, h, b->sent_ms, wd);
        h->until_ms = bound < h->renew_cap ? bound : h->renew_cap;
        continue;
      }
      if (r->integer != 0)
        continue;
      /* An unlock that started after this renewal was sent (or is still in
       * flight) may have run on the server before it: a command that timed
       * out is still executed once the server gets to it, and this renewal
       * may be a re-send that overtook the unlock's own re-send. The "0"
       * then only says the unlock worked; its own reply settles the hold. */
      if (h->releasing > 0 || h->release_seq != b->release_seq[i])
        continue;
      rlock__diag(e->core, RLOCK_DIAG_ERROR,
                  "renewal found '%.200s' no longer held by %s: lock lost",
                  h->name, h->owner);
      rlock__hold_lost(e, h, RLOCK_EVENT_BY_WATCHDOG);
      const rlock_options *o = &e->core->opts;
      if (o->on_lock_lost != NULL)
        o->on_lock_lost(h->name, h->owner, o->on_lock_lost_data);
    }
  }
  if (failed != RLOCK_ECLOSED)
    rlock__engine_emit(e, &sum);
  batch_free(b);
  /* A round that outlasted a period (a slow server or proxy, many slots'
   * batches) made the tick skip one: make it up now, not a whole period
   * later, or a hold renewed late in the slow round and skipped in the
   * next could go a lease without renewal. At most one round per period
   * still: a tick that finds this one in flight only marks it again. */
  if (e->renew_inflight == 0 && e->renew_missed && !e->core->closing) {
    e->renew_missed = false;
    renew_round(e);
  }
}

/* Puts h into b (a copy of its key, its generation and release count).
 * false: out of memory. */
static bool batch_add(renew_batch *b, rlock__hold *h) {
  b->key[b->n] = malloc(h->key_len + 1);
  if (b->key[b->n] == NULL)
    return false;
  memcpy(b->key[b->n], h->key, h->key_len + 1);
  b->key_len[b->n] = h->key_len;
  b->gen[b->n] = h->gen;
  b->release_seq[b->n] = h->release_seq;
  h->renew_cap = INT64_MAX; /* what is sent from now on runs after it */
  b->n++;
  return true;
}

/* b's command went out (cmd), or could not (NULL: b is freed). */
static void batch_sent(rlock__engine *e, renew_batch *b, rlock__cmd *cmd) {
  if (cmd == NULL) {
    batch_free(b);
    return;
  }
  e->renew_inflight++;
  rlock__event ev = {.pub = {.type = (rlock_event_type)RLOCK__EV_RENEW_SENT},
                     .n = b->n};
  rlock__engine_emit(e, &ev);
}

static void send_batch(rlock__engine *e, renew_batch *b, const char *timeout) {
  /* numkeys, keys..., timeout, owners... */
  const char *argv[2 + 2 * RENEW_BATCH];
  size_t lens[2 + 2 * RENEW_BATCH];
  char numkeys[16];
  int argc = 0;
  snprintf(numkeys, sizeof(numkeys), "%d", b->n);
  argv[argc] = numkeys;
  lens[argc++] = strlen(numkeys);
  for (int i = 0; i < b->n; i++) {
    argv[argc] = b->key[i];
    lens[argc++] = strlen(b->key[i]);
  }
  argv[argc] = timeout;
  lens[argc++] = strlen(timeout);
  for (int i = 0; i < b->n; i++) {
    const char *owner = b->key[i] + strlen(b->key[i]) + 1;
    argv[argc] = owner;
    lens[argc++] = strlen(owner);
  }
  b->sent_ns = uv_hrtime();
  batch_sent(e, b,
             rlock__cmd_send(e->net, b->script, argc, argv, lens,
                             e->core->opts.retry_attempts, renew_reply, b));
}

/* The index in open[] of the open batch for (script, slot), or of a new
 * one in the first free entry; when none is free the fullest is sent to
 * make room. -1 when out of memory. */
static int batch_for(rlock__engine *e, renew_batch *open[RENEW_OPEN],
                     const rlock__script *script, int slot,
                     const char *timeout) {
  int at = -1;
  for (int i = 0; i < RENEW_OPEN; i++) {
    if (open[i] == NULL) {
      if (at < 0)
        at = i;
    } else if (open[i]->script == script && open[i]->slot == slot) {
      return i;
    }
  }
  if (at < 0) {
    /* Full (a cluster): of the batches that could go now, the fullest
     * wastes the least of a command by going early. */
    at = 0;
    for (int i = 1; i < RENEW_OPEN; i++)
      if (open[i]->n > open[at]->n)
        at = i;
    send_batch(e, open[at], timeout);
    open[at] = NULL;
  }
  renew_batch *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return -1;
  b->engine = e;
  b->sent_ms = rlock__now_ms();
  b->script = script;
  b->slot = slot;
  open[at] = b;
  return at;
}

/* A hold of a kind that renews from its handle (send_renew): a batch of
 * one, its command the kind's. */
static void renew_one(rlock__engine *e, rlock__hold *h) {
  renew_batch *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return; /* out of memory: the next period */
  b->engine = e;
  b->single = true;
  b->slot = -1;
  b->sent_ms = rlock__now_ms();
  if (!batch_add(b, h)) {
    free(b);
    return;
  }
  b->sent_ns = uv_hrtime();
  batch_sent(e, b,
             h->prim->hold->send_renew(e, h->lock, h->owner,
                                       e->core->opts.watchdog_timeout_ms,
                                       renew_reply, b));
}

static void renew_round(rlock__engine *e) {
  char timeout[24];
  snprintf(timeout, sizeof(timeout), "%" PRId64,
           e->core->opts.watchdog_timeout_ms);
  /* The open batches: a batch never mixes primitives, nor slots in a
   * cluster. Standalone they are opened, and sent at the end, in the order
   * of their script's first hold. */
  renew_batch *open[RENEW_OPEN] = {NULL};
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &e->holds);
  while ((node = rlock__map_next(&it)) != NULL) {
    rlock__hold *h = node->value;
    if (h->watchdog_count <= 0 || h->lost || h->releasing > 0)
      continue; /* an unlock in flight decides what is left to renew */
    if (h->lock != NULL) {
      renew_one(e, h);
      continue;
    }
    /* The renew script's key is the lock's name (the key's first part). */
    int slot = rlock__net_key_slot(e->net, h->name, strlen(h->name));
    int at = batch_for(e, open, h->prim->hold->renew, slot, timeout);
    if (at < 0)
      break; /* out of memory: what is batched still goes */
    renew_batch *b = open[at];
    if (!batch_add(b, h))
      break;
    if (b->n == RENEW_BATCH) {
      send_batch(e, b, timeout);
      open[at] = NULL;
    }
  }
  for (int i = 0; i < RENEW_OPEN; i++) {
    if (open[i] != NULL && open[i]->n > 0)
      send_batch(e, open[i], timeout);
    else
      free(open[i]);
  }
}

void rlock__holds_renew(rlock__engine *e) {
  if (e->renew_inflight > 0) {
    /* The previous round is still going (retrying, or slow): don't pile
     * up; it starts this one when it is done (renew_reply). */
    e->renew_missed = true;
    return;
  }
  e->renew_missed = false;
  e->renew_crossslot_redone = false;
  renew_round(e);
}

void rlock__holds_end_of(rlock__engine *e, const rlock *lock) {
  for (;;) {
    rlock__hold *found = NULL;
    rlock__map_iter it;
    rlock__map_node *node;
    rlock__map_iter_init(&it, &e->holds);
    while (found == NULL && (node = rlock__map_next(&it)) != NULL) {
      rlock__hold *h = node->value;
      if (h->lock == lock)
        found = h;
    }
    if (found == NULL)
      return;
    rlock__hold_drop(e, found); /* (not while iterating) */
  }
}

void rlock__holds_free(rlock__engine *e) {
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &e->holds);
  while ((node = rlock__map_next(&it)) != NULL) {
    rlock__hold *h = node->value;
    if (h->lock != NULL)
      rlock__handle_release(h->lock);
    free(h->key);
    free(h);
  }
  rlock__map_destroy(&e->holds);
}
