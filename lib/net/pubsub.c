/* The channel registry: one entry per channel the client listens on, shared
 * by every waiter of the client on that channel. The first waiter to join
 * SUBSCRIBEs, the last to leave UNSUBSCRIBEs (after a short linger). What a
 * message does is the primitive's business (its message function, given at
 * join); the registry offers it wake_one / wake_all. A wake-up that finds
 * nobody asleep is kept as a permit, because the waiter it was meant for
 * may be between a failed try and its sleep: the try's reply and the
 * message arrive on different connections in no fixed order. Permits are
 * capped at refs + 1: the waiter whose reply is still on its way has not
 * joined yet (refs may even be 0 while a subscription lingers), and one
 * wake-up is for one waiter, so one permit beyond the joined waiters is
 * enough and none is ever lost. Where a channel is subscribed, and what a
 * refused SUBSCRIBE means, the deployment says (rlock__topology); the
 * subscriber connections (conn.c) call back through rlock__sub_events. */
#include <stdlib.h>
#include <string.h>

#include "net_int.h"

enum { CHAN_NONE, CHAN_SUBSCRIBING, CHAN_SUBSCRIBED, CHAN_UNSUBSCRIBING };

struct rlock__chan {
  rlock__net *net;
  rlock__node *node; /* where it is (to be) subscribed; NULL: unknown yet */
  char *channel;
  size_t channel_len;
  int state;
  bool resubscribe; /* a SUBSCRIBE is wanted once the UNSUBSCRIBE lands */
  bool missed;      /* was unsubscribed while waiters slept: wake them */
  uint64_t epoch;   /* changes whenever the subscription (re)starts */
  int refs;         /* waiters joined to this entry */
  int permits;      /* wake-ups that found nobody waiting */
  /* Messages still to come for releases whose waiter was already woken
   * locally (rlock__chan_kick): they wake nobody. Void after absorb_until. */
  int absorb;
  int64_t absorb_until;
  rlock__chan_message_fn on_message;
  rlock__waiter *confirm_head, *confirm_tail; /* waiting for SUBSCRIBE reply */
  rlock__waiter *wait_head, *wait_tail;       /* waiting for a message */
  rlock__timed linger; /* UNSUBSCRIBE a little after the last waiter left */
  /* In the queue of (UN)SUBSCRIBEs awaiting their reply: an error reply
   * names no channel, so it belongs to the oldest request. An entry has at
   * most one request in flight and is not freed while it has one. */
  rlock__chan *req_next;
  bool req_queued;
};

/* ---- waiter lists (confirm / wait), doubly linked ---- */

static void list_append(rlock__waiter **head, rlock__waiter **tail,
                        rlock__waiter *w) {
  w->next = NULL;
  w->prev = *tail;
  if (*tail != NULL)
    (*tail)->next = w;
  else
    *head = w;
  *tail = w;
}

static void list_remove(rlock__waiter **head, rlock__waiter **tail,
                        rlock__waiter *w) {
  if (w->prev != NULL)
    w->prev->next = w->next;
  else
    *head = w->next;
  if (w->next != NULL)
    w->next->prev = w->prev;
  else
    *tail = w->prev;
  w->prev = w->next = NULL;
}

/* ---- requests awaiting their reply, oldest first ---- */

static void req_push(rlock__node *n, rlock__chan *e) {
  e->req_next = NULL;
  e->req_queued = true;
  if (n->sub_req_tail != NULL)
    n->sub_req_tail->req_next = e;
  else
    n->sub_req_head = e;
  n->sub_req_tail = e;
}

static rlock__chan *req_pop(rlock__node *n) {
  rlock__chan *e = n->sub_req_head;
  if (e == NULL)
    return NULL;
  n->sub_req_head = e->req_next;
  if (n->sub_req_head == NULL)
    n->sub_req_tail = NULL;
  e->req_next = NULL;
  e->req_queued = false;
  return e;
}

/* The connection is gone, and with it every reply still to come. */
static void req_clear(rlock__node *n) {
  while (req_pop(n) != NULL) {
  }
}

/* ---- entries ---- */

static void entry_free(rlock__net *n, rlock__chan *e) {
  if (e->req_queued && e->node != NULL) { /* not expected: replies come in
                                             request order */
    rlock__node *nd = e->node;
    rlock__chan **slot = &nd->sub_req_head, *prev = NULL;
    while (*slot != NULL && *slot != e) {
      prev = *slot;
      slot = &(*slot)->req_next;
    }
    if (*slot != NULL) {
      *slot = e->req_next;
      if (nd->sub_req_tail == e)
        nd->sub_req_tail = prev;
    }
  }
  rlock__timed_stop(n->core, &e->linger);
  rlock__map_remove(&n->chans, e->channel, e->channel_len);
  free(e->channel);
  free(e);
}

/* SUBSCRIBE/UNSUBSCRIBE, or their sharded forms (as Java uses against a
 * Redis 7 cluster). */
static int send_sub_cmd(rlock__net *n, rlock__chan *e, bool subscribe) {
  const char *cmd = n->sharded
                        ? (subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE")
                        : (subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE");
  const char *argv[2] = {cmd, e->channel};
  size_t lens[2] = {strlen(cmd), e->channel_len};
  if (e->node == NULL)
    return RLOCK_ECONN;
  int rc = rlock__sub_append(e->node, 2, argv, lens);
  if (rc == 0)
    req_push(e->node, e);
  return rc;
}

/* The node a channel is subscribed on: the one server, or in a cluster
 * the master of the channel's slot (sharded pub/sub must be there; plain
 * pub/sub reaches every node, and the slot's master is as good as any). */
static void home(rlock__net *n, rlock__chan *e) {
  e->node = n->topo->route(n, rlock__key_slot(e->channel, e->channel_len));
  if (e->node != NULL)
    rlock__conn_want_sub(e->node);
}

static void send_subscribe(rlock__net *n, rlock__chan *e) {
  e->resubscribe = false;
  if (e->state == CHAN_NONE) {
    home(n, e);
    /* Starting the node's subscriber connection subscribed every channel
     * waiting for it, this one included. */
    if (e->state != CHAN_NONE)
      return;
  }
  /* Without a connection, chans_on_connect subscribes later. */
  e->state = send_sub_cmd(n, e, true) == 0 ? CHAN_SUBSCRIBING : CHAN_NONE;
}

/* A subscription outlives its last waiter by this much: a lock handed back
 * and forth (or a new waiter right after the last left) then neither
 * re-subscribes nor needs the extra try that a fresh subscription costs. */
#define LINGER_MS 100

static void linger_fire(rlock__timed *t) {
  rlock__chan *e = RLOCK__CONTAINER_OF(t, rlock__chan, linger);
  if (e->refs > 0 || e->state != CHAN_SUBSCRIBED)
    return;
  if (send_sub_cmd(e->net, e, false) == 0)
    e->state = CHAN_UNSUBSCRIBING;
  else
    entry_free(e->net, e);
}

/* The entry has no waiters left. A new SUBSCRIBE for a channel whose
 * UNSUBSCRIBE is still in flight waits for that reply (e->resubscribe), so
 * each entry has at most one request in flight and replies map to states
 * one to one. */
static void entry_idle(rlock__net *n, rlock__chan *e) {
  e->permits = 0;
  switch (e->state) {
  case CHAN_NONE:
    entry_free(n, e);
    break;
  case CHAN_SUBSCRIBING: /* unsubscribed when confirmed */
    break;
  case CHAN_UNSUBSCRIBING:
    e->resubscribe = false;
    break;
  case CHAN_SUBSCRIBED:
    e->linger.fire = linger_fire;
    rlock__timed_start(n->core, &e->linger, rlock__now_ms() + LINGER_MS);
    break;
  }
}

static void waiter_timer_fire(rlock__timed *t) {
  rlock__waiter *w = RLOCK__CONTAINER_OF(t, rlock__waiter, timer);
  rlock__chan *e = w->chan;
  /* Unlinked here, so the waiter leaves its list state first: its owner
   * leaving must not unlink it again (that would cut the list under the
   * other waiters). */
  if (w->state == RLOCK__W_CONFIRM) {
    list_remove(&e->confirm_head, &e->confirm_tail, w);
    w->state = RLOCK__W_JOINED;
    w->ops->sub_timeout(w);
  } else if (w->state == RLOCK__W_WAITING) {
    list_remove(&e->wait_head, &e->wait_tail, w);
    w->state = RLOCK__W_JOINED;
    w->ops->retry(w);
  }
}

static void wake(rlock__waiter *w) {
  rlock__chan *e = w->chan;
  rlock__timed_stop(e->net->core, &w->timer);
  list_remove(&e->wait_head, &e->wait_tail, w);
  w->state = RLOCK__W_JOINED;
  w->ops->retry(w);
}

int rlock__chan_join(rlock__net *n, rlock__waiter *w, const char *channel,
                     size_t len, rlock__chan_message_fn on_message,
                     int64_t confirm_by) {
  rlock__chan *e = rlock__map_get(&n->chans, channel, len);
  if (e == NULL) {
    e = calloc(1, sizeof(*e));
    if (e == NULL)
      return RLOCK_ENOMEM;
    e->channel = malloc(len + 1);
    if (e->channel == NULL || rlock__map_put(&n->chans, channel, len, e) != 0) {
      free(e->channel);
      free(e);
      return RLOCK_ENOMEM;
    }
    memcpy(e->channel, channel, len);
    e->channel[len] = '\0';
    e->channel_len = len;
    e->net = n;
    e->state = CHAN_NONE;
    e->on_message = on_message;
  }
  e->refs++;
  w->chan = e;
  w->state = RLOCK__W_JOINED;
  rlock__timed_stop(n->core, &e->linger);
  if (e->state == CHAN_SUBSCRIBED)
    return 1;
  if (e->state == CHAN_NONE)
    send_subscribe(n, e);
  else if (e->state == CHAN_UNSUBSCRIBING)
    e->resubscribe = true;
  w->state = RLOCK__W_CONFIRM;
  list_append(&e->confirm_head, &e->confirm_tail, w);
  w->timer.fire = waiter_timer_fire;
  rlock__timed_start(n->core, &w->timer, confirm_by);
  return 0;
}

static void unwait(rlock__waiter *w) {
  rlock__chan *e = w->chan;
  rlock__timed_stop(e->net->core, &w->timer);
  if (w->state == RLOCK__W_CONFIRM)
    list_remove(&e->confirm_head, &e->confirm_tail, w);
  else if (w->state == RLOCK__W_WAITING)
    list_remove(&e->wait_head, &e->wait_tail, w);
  w->state = RLOCK__W_JOINED;
}

void rlock__chan_leave(rlock__waiter *w) {
  rlock__chan *e = w->chan;
  if (e == NULL)
    return;
  unwait(w);
  w->chan = NULL;
  w->state = RLOCK__W_IDLE;
  if (--e->refs == 0)
    entry_idle(e->net, e);
  else if (e->permits > e->refs + 1)
    e->permits = e->refs + 1;
}

uint64_t rlock__chan_epoch(rlock__net *n, const char *channel, size_t len) {
  rlock__chan *e = rlock__map_get(&n->chans, channel, len);
  return (e != NULL && e->state == CHAN_SUBSCRIBED) ? e->epoch : 0;
}

void rlock__chan_wait(rlock__waiter *w, int64_t wait_ms) {
  rlock__chan *e = w->chan;
  if (e->permits > 0) {
    e->permits--;
    w->ops->retry(w);
    return;
  }
  w->state = RLOCK__W_WAITING;
  list_append(&e->wait_head, &e->wait_tail, w);
  w->timer.fire = waiter_timer_fire;
  rlock__timed_start(e->net->core, &w->timer, rlock__now_ms() + wait_ms);
}

/* Wakes every sleeper. Waking may free the entry (its last waiter leaves),
 * so the list is detached first. */
static void wake_list(rlock__net *n, rlock__chan *e) {
  rlock__waiter *w = e->wait_head;
  e->wait_head = e->wait_tail = NULL;
  while (w != NULL) {
    rlock__waiter *next = w->next;
    w->prev = w->next = NULL;
    w->state = RLOCK__W_JOINED;
    rlock__timed_stop(n->core, &w->timer);
    w->ops->retry(w);
    w = next;
  }
}

rlock__waiter *rlock__chan_sleeper(rlock__net *n, const char *channel,
                                   size_t len) {
  rlock__chan *e = rlock__map_get(&n->chans, channel, len);
  return (e != NULL && e->state == CHAN_SUBSCRIBED) ? e->wait_head : NULL;
}

void rlock__chan_wake_all_named(rlock__net *n, const char *channel,
                                size_t len) {
  rlock__chan *e = rlock__map_get(&n->chans, channel, len);
  if (e != NULL)
    rlock__chan_wake_all(e);
}

void rlock__chan_wake_one_named(rlock__net *n, const char *channel,
                                size_t len) {
  rlock__chan *e = rlock__map_get(&n->chans, channel, len);
  if (e != NULL && e->refs > 0)
    rlock__chan_wake_one(e);
}

void rlock__chan_kick(rlock__waiter *w, int64_t absorb_ms) {
  rlock__chan *e = w->chan;
  if (absorb_ms > 0) {
    e->absorb++;
    e->absorb_until = rlock__now_ms() + absorb_ms;
  }
  unwait(w);
  w->ops->retry(w);
}

void rlock__chan_take(rlock__waiter *w) { unwait(w); }

void rlock__chan_unabsorb(rlock__net *n, const char *channel, size_t len) {
  rlock__chan *e = rlock__map_get(&n->chans, channel, len);
  if (e != NULL && e->absorb > 0)
    e->absorb--;
}

void rlock__chan_wake_one(rlock__chan *e) {
  if (e->wait_head != NULL)
    wake(e->wait_head);
  else if (e->permits <= e->refs)
    e->permits++;
}

void rlock__chan_wake_n(rlock__chan *e, int64_t n) {
  /* each wake-up finds a sleeper or is kept as a permit, at most refs + 1
   * (taken before: a woken waiter may leave; the entry itself lingers) */
  int64_t max = (int64_t)e->refs + 1;
  for (int64_t i = 0; i < n && i < max; i++)
    rlock__chan_wake_one(e);
}

void rlock__chan_wake_all(rlock__chan *e) {
  if (e->wait_head == NULL) {
    e->permits = e->refs + 1;
    return;
  }
  wake_list(e->net, e);
}

/* ---- subscriber connection events ---- */

static void confirmed(rlock__net *n, rlock__chan *e) {
  e->state = CHAN_SUBSCRIBED;
  e->epoch = ++n->next_epoch;
  if (e->refs == 0) {
    entry_idle(n, e);
    return;
  }
  /* Every waiter that waited for this subscription tries again now that no
   * release can go unheard. */
  while (e->confirm_head != NULL) {
    rlock__waiter *w = e->confirm_head;
    rlock__timed_stop(n->core, &w->timer);
    list_remove(&e->confirm_head, &e->confirm_tail, w);
    w->state = RLOCK__W_JOINED;
    w->ops->retry(w);
    if (rlock__map_get(&n->chans, e->channel, e->channel_len) != e)
      return; /* the entry went away with its last waiter */
  }
  /* After a reconnect, messages may have been missed while unsubscribed:
   * let every sleeper try once more rather than sleep out its bound. */
  if (e->missed) {
    e->missed = false;
    wake_list(n, e);
  }
}

/* The server refused the entry's SUBSCRIBE (e.g. NOPERM: the ACL user may
 * not use the channel). Every waiter joined to it fails with the server's
 * code instead of waiting out subscribe_timeout_ms, and the entry starts
 * afresh: a later wait subscribes again (the ACL may have been fixed). */
static void refused(rlock__net *n, rlock__chan *e, const redisReply *reply) {
  /* A cluster: the channel's slot is served elsewhere (MOVED), or is
   * moving (TRYAGAIN...): subscribe where it is now, once the map says so
   * - waiters keep their own deadlines meanwhile. */
  int where = n->topo->sub_refused != NULL ? n->topo->sub_refused(n, reply) : 0;
  if (where != 0) {
    e->state = CHAN_NONE;
    e->missed = true;
    if (where == 1)
      send_subscribe(n, e);
    /* else rlock__chans_on_topology retries */
    return;
  }
  int err = rlock__reply_error(reply);
  e->state = CHAN_NONE;
  e->resubscribe = false;
  e->permits = 0;
  for (;;) {
    rlock__waiter *w = e->confirm_head != NULL ? e->confirm_head : e->wait_head;
    if (w == NULL)
      break;
    bool last = e->refs == 1;
    unwait(w);
    w->ops->sub_failed(w, err, reply->str, reply->len);
    if (last)
      return; /* the entry went away with its last waiter */
  }
  if (e->refs == 0) {
    entry_free(n, e);
    return;
  }
  /* Waiters between a try and their sleep are still joined: they get the
   * next SUBSCRIBE's outcome (and a retry, as after any missed stretch). */
  e->missed = true;
  send_subscribe(n, e);
}

/* Reply kinds are matched with and without the sharded "s" prefix. */
static bool kind_is(const redisReply *kind, const char *what) {
  const char *k = kind->str;
  if (k[0] == 's' && strcmp(k + 1, what) == 0)
    return true;
  return strcmp(k, what) == 0;
}

static void chans_reply(rlock__node *node, const redisReply *reply) {
  rlock__net *n = node->net;
  if (reply->type == REDIS_REPLY_ERROR) {
    /* An error names no channel: it answers the oldest request. */
    rlock__chan *e = req_pop(node);
    if (e == NULL)
      return;
    if (e->state == CHAN_SUBSCRIBING) {
      refused(n, e, reply);
    } else if (e->state == CHAN_UNSUBSCRIBING) {
      e->state = CHAN_NONE; /* as if it had gone through */
      if (e->refs > 0)
        send_subscribe(n, e);
      else
        entry_free(n, e);
    }
    return;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
      reply->element[0]->type != REDIS_REPLY_STRING ||
      reply->element[1]->type != REDIS_REPLY_STRING)
    return;
  const redisReply *kind = reply->element[0], *chan = reply->element[1];
  rlock__chan *e = rlock__map_get(&n->chans, chan->str, chan->len);
  if (e == NULL || e->node != node)
    return; /* not ours, or from where it no longer is */
  bool is_message = kind_is(kind, "message");
  /* A confirmation answers the oldest request, which is this entry's
   * (replies keep the order of requests). */
  bool answers = !is_message && node->sub_req_head == e;
  if (answers)
    req_pop(node);
  if (is_message) {
    if (e->absorb > 0 && rlock__now_ms() > e->absorb_until)
      e->absorb = 0;
    if (e->absorb > 0)
      e->absorb--; /* its waiter was woken before the message came */
    else if (e->state == CHAN_SUBSCRIBED &&
             reply->element[2]->type == REDIS_REPLY_STRING)
      e->on_message(e, reply->element[2]->str, reply->element[2]->len);
  } else if (kind_is(kind, "subscribe")) {
    if (e->state == CHAN_SUBSCRIBING)
      confirmed(n, e);
  } else if (kind_is(kind, "unsubscribe")) {
    if (e->state == CHAN_UNSUBSCRIBING) {
      e->state = CHAN_NONE;
      if (e->refs > 0)
        send_subscribe(n, e);
      else
        entry_free(n, e);
    } else if (!answers && e->state == CHAN_SUBSCRIBED) {
      /* Unasked: the server dropped the subscription (a sharded channel
       * whose slot moved to another node). Messages may be missed until
       * it is back: sleepers try again now, and it is made again where
       * the slot map says once it has been read. */
      e->state = CHAN_NONE;
      e->missed = true;
      rlock__diag(n->core, RLOCK_DIAG_INFO,
                  "%s:%d dropped the subscription to %.*s (its slot moved?)",
                  node->host, node->port, (int)(e->channel_len > 200 ? 200
                                                : e->channel_len),
                  e->channel);
      if (e->refs == 0) {
        entry_free(n, e);
        return;
      }
      if (n->topo->sub_dropped != NULL)
        n->topo->sub_dropped(n);
      wake_list(n, e);
    }
  }
}

/* Diagnostics: channels subscribed again after they were lost (`why`). */
static void diag_resubscribed(rlock__net *n, int count, const char *why) {
  if (count > 0)
    rlock__diag(n->core, RLOCK_DIAG_INFO, "resubscribing %d channel%s %s",
                count, count == 1 ? "" : "s", why);
}

static void chans_on_connect(rlock__node *nd) {
  rlock__net *n = nd->net;
  int again = 0;
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &n->chans);
  while ((node = rlock__map_next(&it)) != NULL) {
    rlock__chan *e = node->value;
    if (e->state != CHAN_NONE || (e->node != nd && e->node != NULL))
      continue;
    if (e->refs > 0) {
      /* (A first connection, started by a subscribe of the walk below,
       * leaves the count to that walk.) */
      again += e->missed && nd->sub.ever_up;
      if (nd->sub.was_up)
        rlock__count(&n->stats.resubscribes, 1);
      send_subscribe(n, e);
    } else {
      entry_free(n, e);
    }
  }
  if (again > 0 && rlock__diag_on(n->core)) {
    char on[160], peer[100];
    rlock__node_addr(nd, peer, sizeof(peer));
    snprintf(on, sizeof(on), "on %s (pub/sub connection back)", peer);
    diag_resubscribed(n, again, on);
  }
}

void rlock__chans_on_topology(rlock__net *n) {
  int again = 0;
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &n->chans);
  while ((node = rlock__map_next(&it)) != NULL) {
    rlock__chan *e = node->value;
    if (e->state != CHAN_NONE)
      continue;
    if (e->refs > 0) {
      again += e->missed;
      send_subscribe(n, e);
    } else {
      entry_free(n, e);
    }
  }
  diag_resubscribed(n, again, "after the slot map was read");
}

static void chans_on_disconnect(rlock__node *nd) {
  rlock__net *n = nd->net;
  rlock__waiter *woken = NULL;
  req_clear(nd);
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &n->chans);
  while ((node = rlock__map_next(&it)) != NULL) {
    rlock__chan *e = node->value;
    if (e->node != nd)
      continue;
    e->state = CHAN_NONE;
    e->req_queued = false;
    if (e->refs == 0) {
      entry_free(n, e);
      continue;
    }
    /* Sleepers also get one retry when the subscription is back (see
     * confirmed()). */
    e->permits = 0;
    e->absorb = 0;
    e->missed = true;
    /* Nothing can wake the sleepers now: let each try once at once, so a
     * dead server is noticed now rather than after its bound. */
    while (e->wait_head != NULL) {
      rlock__waiter *w = e->wait_head;
      rlock__timed_stop(n->core, &w->timer);
      list_remove(&e->wait_head, &e->wait_tail, w);
      w->state = RLOCK__W_JOINED;
      w->next = woken;
      woken = w;
    }
  }
  /* Retried after the walk: a retry may end a waiter and free its entry. */
  while (woken != NULL) {
    rlock__waiter *w = woken;
    woken = w->next;
    w->next = NULL;
    w->ops->retry(w);
  }
}

static const rlock__sub_events sub_events = {chans_on_connect,
                                             chans_on_disconnect, chans_reply};

void rlock__chans_init(rlock__net *n) {
  rlock__map_init(&n->chans);
  n->sub_events = &sub_events;
}

void rlock__chans_free(rlock__net *n) {
  for (rlock__node *nd = n->nodes; nd != NULL; nd = nd->next)
    req_clear(nd);
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &n->chans);
  while ((node = rlock__map_next(&it)) != NULL)
    entry_free(n, node->value);
  rlock__map_destroy(&n->chans);
}
