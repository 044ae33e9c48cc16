/* The local gate: a client does not send a try it knows must fail.
 *
 * For kinds whose holds exclude every other owner (hold part's local_gate:
 * the lock, the write lock), the client knows two things the server would
 * only repeat: one of its owners holds the lock (a hold whose lease is
 * still guaranteed), or one of its tries for the lock is on its way (a
 * local handoff's, or a woken waiter's). While either is so, an acquire of
 * another owner sleeps on the lock's channel without sending a try; it is
 * woken as any waiter is (a local handoff picks the oldest sleeper, a
 * message wakes one), and the gate itself wakes one sleeper when it opens:
 * the hold ended or was lost (the watchdog found the key gone, the unlock
 * did), or a try that kept a wake-up waiting ended without the lock.
 *
 * So in a herd only one try per client is out at a time, a thread coming
 * back for the lock it just handed to a sibling waits instead of trying,
 * and a write unlock's "1", which wakes every waiter, lets one writer of
 * the client try; the others sleep again until that one has its answer -
 * if it lost, the wake-ups it held back are passed on (pending). Readers
 * have no gate: they may all get in. Other clients - Java's too - are
 * woken by the server's messages as before; nothing on the wire changes.
 *
 * The gate only decides whether a try is worth sending; the server still
 * decides who gets the lock. Its trust is bounded: a sibling's hold counts
 * only while its lease is guaranteed (a holder stopped with the whole
 * process, or cut off from the server, stops counting when its guarantee
 * runs out), a parked waiter sleeps at most until then (or a command
 * timeout behind a try), and a lost connection lets every parked waiter
 * try once at once.
 *
 * After handoff_max local handoffs in a row a release goes the pub/sub way
 * (release.c): the gate then holds this client's tries back until the
 * release's message wakes a waiter here (at most YIELD_MAX_MS), so its
 * next try leaves when other clients' woken waiters' do, not with the
 * release's reply. A transfer that found another client's waiter
 * subscribed releases and publishes instead (RLOCK__REL_YIELD): the gate
 * then holds this client's tries back until another client's release
 * message comes or FOREIGN_HOLD_MS pass - its own message is no reason to
 * try (docs/performance.md, "Fair share"). Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

struct rlock__gate {
  char *key; /* name '\0' kind (in the same block) */
  size_t key_len;
  char *channel; /* where its sleepers wait (in the same block) */
  size_t channel_len;
  rlock__hold *holder; /* this client's hold of the lock, or NULL */
  int trying;          /* this client's tries for it on their way */
  /* A wake-up was held back (a waiter woken while a try was out, a hold
   * that ended while one was out): the next opening passes it on. */
  bool pending;
  /* After handoff_max local handoffs in a row the lock goes the pub/sub
   * way: until the release's message wakes a waiter here (or this time
   * passes), no try of this client goes out - one woken by the message
   * tries, as other clients' waiters do. 0: none. */
  int64_t yield_until;
  /* A release told another client's waiters (rlock__gate_hold_back): no
   * try of this client until then, whatever wakes its waiters - its own
   * subscription hears the same message, and its loop thread would win
   * the race every time. 0: none. */
  int64_t hold_until;
  /* The messages of this client's own yielding releases still to come
   * while it holds back: they end nothing. A message beyond them is
   * another client's release - the lock went round; the hold-back ends. */
  int hold_own;
};

/* How long a yield waits for its message at most: the message comes with
 * the release's reply; this bounds a lost one. */
#define YIELD_MAX_MS 50

/* How long this client's tries wait after a release that told another
 * client's waiters (docs/performance.md, "Fair share"): long enough for a
 * woken waiter of another process - a Java thread included - to send its
 * try, short against a lock's hold. */
#define FOREIGN_HOLD_MS 3


static bool gated(const rlock__prim *prim) {
  return prim->hold != NULL && prim->hold->local_gate;
}

static rlock__gate *gate_find(rlock__engine *e, const char *name,
                              const char *kind) {
  char buf[256];
  size_t n = strlen(name), k = strlen(kind);
  char *key = n + k + 2 <= sizeof(buf) ? buf : malloc(n + k + 2);
  if (key == NULL)
    return NULL;
  memcpy(key, name, n + 1);
  memcpy(key + n + 1, kind, k + 1);
  rlock__gate *g = rlock__map_get(&e->gates, key, n + 1 + k);
  if (key != buf)
    free(key);
  return g;
}

/* The gate of lock, made when missing (one block: the gate, its key and
 * its channel); NULL when out of memory (the client then simply sends its
 * tries). */
static rlock__gate *gate_get(rlock__engine *e, const rlock *lock) {
  rlock__gate *g = gate_find(e, lock->name, lock->prim->kind);
  if (g != NULL)
    return g;
  size_t n = lock->name_len, k = strlen(lock->prim->kind);
  g = calloc(1, sizeof(*g) + n + 1 + k + 1 + lock->channel_len + 1);
  if (g == NULL)
    return NULL;
  g->key = (char *)(g + 1);
  memcpy(g->key, lock->name, n + 1);
  memcpy(g->key + n + 1, lock->prim->kind, k + 1);
  g->key_len = n + 1 + k;
  g->channel = g->key + g->key_len + 1;
  memcpy(g->channel, lock->channel, lock->channel_len + 1);
  g->channel_len = lock->channel_len;
  if (rlock__map_put(&e->gates, g->key, g->key_len, g) != 0) {
    free(g);
    return NULL;
  }
  return g;
}

static void gate_free(rlock__gate *g) { free(g); }

/* Until when hold h is guaranteed: what rlock__hold_guaranteed_until()
 * answers, read here so that gate.c does not call back into hold.c (which
 * calls it). */
static int64_t guaranteed_until(const rlock__hold *h) { return h->until_ms; }

/* The sibling hold the gate trusts for op, or NULL. */
static const rlock__hold *trusted_holder(const rlock__gate *g,
                                         const rlock__op *op, int64_t now) {
  const rlock__hold *h = g->holder;
  if (h == NULL || h->lost || strcmp(h->owner, op->owner) == 0 ||
      guaranteed_until(h) <= now)
    return NULL;
  return h;
}

bool rlock__gate_park(rlock__op *op) {
  rlock__engine *e = op->engine;
  bool bypass = op->u.acq.gate_bypass || op->u.acq.handoff_streak > 0 ||
                e->gates_open;
  bool woken = op->u.acq.woken;
  op->u.acq.gate_bypass = op->u.acq.woken = false;
  op->u.acq.gate_parked = false;
  if (!gated(op->lock->prim) || op->wait_ms == 0 || e->core->closing)
    return false;
  rlock__gate *g = gate_get(e, op->lock);
  if (g == NULL)
    return false;
  int64_t now = rlock__now_ms();
  const rlock__hold *h = bypass ? NULL : trusted_holder(g, op, now);
  bool own = g->holder != NULL && !g->holder->lost &&
             strcmp(g->holder->owner, op->owner) == 0;
  bool yielding = g->yield_until > now;
  if (yielding && woken) /* the message came */
    g->yield_until = 0, yielding = false;
  bool held = g->hold_until > now;
  if (held && woken) {
    if (g->hold_own > 0)
      g->hold_own--; /* this client's own release message */
    else
      g->hold_until = 0, held = false; /* another client released */
  }
  if (bypass || own || (h == NULL && g->trying == 0 && !yielding && !held)) {
    g->trying++;
    op->u.acq.gate = g;
    return false;
  }
  /* Closed: sleep on the channel without a try. */
  if (op->wait_ms > 0 && now >= op->deadline) {
    rlock__op_finish(op, 0);
    return true;
  }
  if (h == NULL && woken)
    g->pending = true; /* this wake-up may have been for a release */
  int64_t until = h != NULL   ? guaranteed_until(h) + 1
                  : held     ? g->hold_until
                  : yielding ? g->yield_until
                             : now + e->core->opts.command_timeout_ms;
  if (op->wait_ms > 0 && op->deadline < until)
    until = op->deadline;
  op->state = RLOCK__ST_WAITING;
  if (op->waiter.chan == NULL) {
    int64_t confirm_by = now + e->core->opts.subscribe_timeout_ms;
    if (op->wait_ms > 0 && op->deadline < confirm_by)
      confirm_by = op->deadline;
    int joined = rlock__chan_join(e->net, &op->waiter, op->u.acq.wchan,
                                  op->u.acq.wchan_len,
                                  op->lock->prim->on_message, confirm_by);
    if (joined < 0) {
      rlock__op_finish(op, joined);
      return true;
    }
    if (joined == 0)
      return true; /* asked again once subscribed */
  }
  op->u.acq.gate_parked = op->u.acq.gate_waited = true;
  op->u.acq.gate_epoch =
      rlock__chan_epoch(e->net, op->u.acq.wchan, op->u.acq.wchan_len);
  rlock__chan_wait(&op->waiter, until > now ? until - now : 0);
  return true;
}

rlock__gate *rlock__gate_try_done(rlock__op *op, bool abandoned) {
  rlock__gate *g = op->u.acq.gate;
  if (g == NULL)
    return NULL;
  op->u.acq.gate = NULL;
  assert(g->trying > 0);
  g->trying--;
  if (abandoned)
    g->pending = true; /* its outcome is unknown: let another try */
  return g;
}

void rlock__gate_settle(rlock__engine *e, rlock__gate *g) {
  if (g == NULL || g->trying > 0 || g->holder != NULL)
    return;
  if (g->yield_until > rlock__now_ms()) {
    g->pending = false; /* the message wakes the one that tries */
    return;
  }
  if (g->hold_until > rlock__now_ms()) {
    g->pending = false; /* parked waiters wake when the hold-back ends */
    return;
  }
  bool wake = g->pending && !e->core->closing;
  g->pending = false;
  /* Idle: nothing to remember (a parked waiter finds it again). */
  rlock__map_remove(&e->gates, g->key, g->key_len);
  if (wake)
    rlock__chan_wake_one_named(e->net, g->channel, g->channel_len);
  gate_free(g);
}

void rlock__gate_hold_added(rlock__engine *e, const rlock *lock,
                            rlock__hold *h) {
  if (!gated(lock->prim))
    return;
  rlock__gate *g = gate_get(e, lock);
  if (g == NULL)
    return;
  g->holder = h;
  g->pending = false; /* the wake-ups held back were for this */
}

void rlock__gate_hold_gone(rlock__engine *e, rlock__hold *h) {
  if (!gated(h->prim))
    return;
  rlock__gate *g = gate_find(e, h->name, h->prim->kind);
  if (g == NULL || g->holder != h)
    return;
  g->holder = NULL;
  g->pending = true;
  rlock__gate_settle(e, g);
}

void rlock__gate_yield(rlock__engine *e, const rlock *lock) {
  if (!gated(lock->prim))
    return;
  rlock__gate *g = gate_get(e, lock);
  if (g == NULL)
    return;
  g->yield_until = rlock__now_ms() + YIELD_MAX_MS;
}

void rlock__gate_hold_back(rlock__engine *e, const rlock *lock) {
  if (!gated(lock->prim))
    return;
  rlock__gate *g = gate_get(e, lock);
  if (g == NULL)
    return;
  int64_t now = rlock__now_ms();
  g->hold_own = g->hold_until > now ? g->hold_own + 1 : 1;
  g->hold_until = now + FOREIGN_HOLD_MS;
}

void rlock__gates_reconnected(rlock__engine *e) {
  /* The channels to wake, copied first: a woken waiter's try changes the
   * gates under the walk. */
  size_t n = e->gates.count, i = 0;
  if (n == 0 || e->core->closing)
    return;
  char **chans = calloc(n, sizeof(*chans));
  size_t *lens = calloc(n, sizeof(*lens));
  if (chans != NULL && lens != NULL) {
    rlock__map_iter it;
    rlock__map_node *node;
    rlock__map_iter_init(&it, &e->gates);
    while ((node = rlock__map_next(&it)) != NULL && i < n) {
      rlock__gate *g = node->value;
      chans[i] = malloc(g->channel_len + 1);
      if (chans[i] == NULL)
        break;
      memcpy(chans[i], g->channel, g->channel_len + 1);
      lens[i++] = g->channel_len;
    }
    e->gates_open = true;
    for (size_t j = 0; j < i; j++)
      rlock__chan_wake_all_named(e->net, chans[j], lens[j]);
    e->gates_open = false;
  }
  for (size_t j = 0; j < i; j++)
    free(chans[j]);
  free(chans);
  free(lens);
}

void rlock__gates_free(rlock__engine *e) {
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &e->gates);
  while ((node = rlock__map_next(&it)) != NULL)
    gate_free(node->value);
  rlock__map_destroy(&e->gates);
}
