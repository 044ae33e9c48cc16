/* The pub/sub registry: one entry per lock channel, shared by every op of
 * the client that waits on that lock. The first waiter SUBSCRIBEs, the last
 * one to leave UNSUBSCRIBEs. A message "0" wakes one waiter, "1" wakes all;
 * a wake-up that finds nobody waiting is kept as a permit (as Java's
 * semaphore does), because the op it was meant for may be between a failed
 * try and its wait: the try's reply and the message arrive on different
 * connections in no fixed order. Permits are capped at refs + 1: the op
 * whose reply is still on its way has not joined yet (refs may even be 0
 * while a subscription lingers), and one release is one wake-up, so one
 * permit beyond the joined ops is enough and none is ever lost. */
#include <stdlib.h>
#include <string.h>

#include "client-private.h"

/* ---- op lists (confirm / wait), doubly linked through op->sub_* ---- */

static void list_append(rlock__op **head, rlock__op **tail, rlock__op *op) {
  op->sub_next = NULL;
  op->sub_prev = *tail;
  if (*tail != NULL)
    (*tail)->sub_next = op;
  else
    *head = op;
  *tail = op;
}

static void list_remove(rlock__op **head, rlock__op **tail, rlock__op *op) {
  if (op->sub_prev != NULL)
    op->sub_prev->sub_next = op->sub_next;
  else
    *head = op->sub_next;
  if (op->sub_next != NULL)
    op->sub_next->sub_prev = op->sub_prev;
  else
    *tail = op->sub_prev;
  op->sub_prev = op->sub_next = NULL;
}

/* ---- requests awaiting their reply, oldest first ---- */

static void req_push(rlock_client *c, rlock__sub *e) {
  e->req_next = NULL;
  e->req_queued = true;
  if (c->sub_req_tail != NULL)
    c->sub_req_tail->req_next = e;
  else
    c->sub_req_head = e;
  c->sub_req_tail = e;
}

static rlock__sub *req_pop(rlock_client *c) {
  rlock__sub *e = c->sub_req_head;
  if (e == NULL)
    return NULL;
  c->sub_req_head = e->req_next;
  if (c->sub_req_head == NULL)
    c->sub_req_tail = NULL;
  e->req_next = NULL;
  e->req_queued = false;
  return e;
}

/* The connection is gone, and with it every reply still to come. */
static void req_clear(rlock_client *c) {
  while (req_pop(c) != NULL) {
  }
}

/* ---- entries ---- */

static void entry_free(rlock_client *c, rlock__sub *e) {
  if (e->req_queued) { /* not expected: replies come in request order */
    rlock__sub **slot = &c->sub_req_head, *prev = NULL;
    while (*slot != e) {
      prev = *slot;
      slot = &(*slot)->req_next;
    }
    *slot = e->req_next;
    if (c->sub_req_tail == e)
      c->sub_req_tail = prev;
  }
  rlock__timed_stop(c, &e->linger);
  rlock__map_remove(&c->subs, e->channel, e->channel_len);
  free(e->channel);
  free(e);
}

/* SUBSCRIBE/UNSUBSCRIBE, or their sharded forms (as Java uses against a
 * Redis 7 cluster). */
static int send_sub_cmd(rlock_client *c, rlock__sub *e, bool subscribe) {
  const char *cmd = c->opts.sharded_pubsub
                        ? (subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE")
                        : (subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE");
  const char *argv[2] = {cmd, e->channel};
  size_t lens[2] = {strlen(cmd), e->channel_len};
  int rc = rlock__sub_append(&c->sub, 2, argv, lens);
  if (rc == 0)
    req_push(c, e);
  return rc;
}

static void send_subscribe(rlock_client *c, rlock__sub *e) {
  e->resubscribe = false;
  /* Without a connection, rlock__pubsub_on_connect subscribes later. */
  e->state = send_sub_cmd(c, e, true) == 0 ? RLOCK__SUB_SUBSCRIBING
                                           : RLOCK__SUB_NONE;
}

/* A subscription outlives its last waiter by this much: a lock handed back
 * and forth (or a new waiter right after the last left) then neither
 * re-subscribes nor needs the extra try that a fresh subscription costs. */
#define LINGER_MS 100

static void linger_fire(rlock_client *c, rlock__timed *t) {
  rlock__sub *e = (rlock__sub *)((char *)t - offsetof(rlock__sub, linger));
  if (e->refs > 0 || e->state != RLOCK__SUB_SUBSCRIBED)
    return;
  if (send_sub_cmd(c, e, false) == 0)
    e->state = RLOCK__SUB_UNSUBSCRIBING;
  else
    entry_free(c, e);
}

/* The entry has no ops left. A new SUBSCRIBE for a channel whose
 * UNSUBSCRIBE is still in flight waits for that reply (e->resubscribe), so
 * each entry has at most one request in flight and replies map to states
 * one to one. */
static void entry_idle(rlock_client *c, rlock__sub *e) {
  e->permits = 0;
  switch (e->state) {
  case RLOCK__SUB_NONE:
    entry_free(c, e);
    break;
  case RLOCK__SUB_SUBSCRIBING: /* unsubscribed when confirmed */
    break;
  case RLOCK__SUB_UNSUBSCRIBING:
    e->resubscribe = false;
    break;
  case RLOCK__SUB_SUBSCRIBED:
    e->linger.fire = linger_fire;
    rlock__timed_start(c, &e->linger, rlock__now_ms() + LINGER_MS);
    break;
  }
}

static void op_timer_fire(rlock_client *c, rlock__timed *t) {
  (void)c;
  rlock__op *op = (rlock__op *)((char *)t - offsetof(rlock__op, timer));
  rlock__sub *e = op->sub;
  /* Unlinked here, so the op leaves its list state first: finishing must
   * not unlink it again (that would cut the list under the other ops). */
  if (op->state == RLOCK__ST_AWAIT_SUB) {
    list_remove(&e->confirm_head, &e->confirm_tail, op);
    op->state = RLOCK__ST_CMD;
    rlock__op_sub_timeout(op);
  } else if (op->state == RLOCK__ST_WAITING) {
    list_remove(&e->wait_head, &e->wait_tail, op);
    op->state = RLOCK__ST_CMD;
    rlock__op_retry(op);
  }
}

static void wake(rlock__op *op) {
  rlock__sub *e = op->sub;
  rlock__timed_stop(e->client, &op->timer);
  list_remove(&e->wait_head, &e->wait_tail, op);
  op->state = RLOCK__ST_CMD;
  rlock__op_retry(op);
}

int rlock__sub_join(rlock_client *c, rlock__op *op, const char *channel,
                    size_t len) {
  rlock__sub *e = rlock__map_get(&c->subs, channel, len);
  if (e == NULL) {
    e = calloc(1, sizeof(*e));
    if (e == NULL)
      return RLOCK_ENOMEM;
    e->channel = malloc(len + 1);
    if (e->channel == NULL || rlock__map_put(&c->subs, channel, len, e) != 0) {
      free(e->channel);
      free(e);
      return RLOCK_ENOMEM;
    }
    memcpy(e->channel, channel, len);
    e->channel[len] = '\0';
    e->channel_len = len;
    e->client = c;
    e->state = RLOCK__SUB_NONE;
  }
  e->refs++;
  op->sub = e;
  rlock__timed_stop(c, &e->linger);
  if (e->state == RLOCK__SUB_SUBSCRIBED)
    return 1;
  if (e->state == RLOCK__SUB_NONE)
    send_subscribe(c, e);
  else if (e->state == RLOCK__SUB_UNSUBSCRIBING)
    e->resubscribe = true;
  op->state = RLOCK__ST_AWAIT_SUB;
  list_append(&e->confirm_head, &e->confirm_tail, op);
  int64_t at = rlock__now_ms() + c->opts.subscribe_timeout_ms;
  if (op->wait_ms >= 0 && op->deadline < at)
    at = op->deadline;
  op->timer.fire = op_timer_fire;
  rlock__timed_start(c, &op->timer, at);
  return 0;
}

static void sub_unwait(rlock__op *op) {
  rlock__sub *e = op->sub;
  if (e == NULL)
    return;
  rlock__timed_stop(e->client, &op->timer);
  if (op->state == RLOCK__ST_AWAIT_SUB)
    list_remove(&e->confirm_head, &e->confirm_tail, op);
  else if (op->state == RLOCK__ST_WAITING)
    list_remove(&e->wait_head, &e->wait_tail, op);
}

void rlock__sub_leave(rlock__op *op) {
  rlock__sub *e = op->sub;
  if (e == NULL)
    return;
  sub_unwait(op);
  op->sub = NULL;
  if (--e->refs == 0)
    entry_idle(e->client, e);
  else if (e->permits > e->refs + 1)
    e->permits = e->refs + 1;
}

uint64_t rlock__sub_epoch(rlock_client *c, const char *channel, size_t len) {
  rlock__sub *e = rlock__map_get(&c->subs, channel, len);
  return (e != NULL && e->state == RLOCK__SUB_SUBSCRIBED) ? e->epoch : 0;
}

void rlock__sub_wait(rlock__op *op, int64_t wait_ms) {
  rlock__sub *e = op->sub;
  if (e->permits > 0) {
    e->permits--;
    op->state = RLOCK__ST_CMD;
    rlock__op_retry(op);
    return;
  }
  op->state = RLOCK__ST_WAITING;
  list_append(&e->wait_head, &e->wait_tail, op);
  op->timer.fire = op_timer_fire;
  rlock__timed_start(e->client, &op->timer, rlock__now_ms() + wait_ms);
}

/* ---- subscriber connection events ---- */

/* Wakes every sleeper. Waking may free the entry (its last op leaves), so
 * the list is detached first. */
static void wake_all(rlock_client *c, rlock__sub *e) {
  rlock__op *op = e->wait_head;
  e->wait_head = e->wait_tail = NULL;
  while (op != NULL) {
    rlock__op *next = op->sub_next;
    op->sub_prev = op->sub_next = NULL;
    op->state = RLOCK__ST_CMD;
    rlock__timed_stop(c, &op->timer);
    rlock__op_retry(op);
    op = next;
  }
}

static void confirmed(rlock_client *c, rlock__sub *e) {
  e->state = RLOCK__SUB_SUBSCRIBED;
  e->epoch = ++c->next_epoch;
  if (e->refs == 0) {
    entry_idle(c, e);
    return;
  }
  /* Every op that waited for this subscription tries again now that no
   * release can go unheard. */
  while (e->confirm_head != NULL) {
    rlock__op *op = e->confirm_head;
    rlock__timed_stop(c, &op->timer);
    list_remove(&e->confirm_head, &e->confirm_tail, op);
    op->state = RLOCK__ST_CMD;
    rlock__op_retry(op);
    if (rlock__map_get(&c->subs, e->channel, e->channel_len) != e)
      return; /* the entry went away with its last op */
  }
  /* After a reconnect, messages may have been missed while unsubscribed:
   * let every sleeper try once more rather than sleep out its TTL. */
  if (e->missed) {
    e->missed = false;
    wake_all(c, e);
  }
}

static void on_message(rlock_client *c, rlock__sub *e, const char *payload,
                       size_t len) {
  (void)c;
  if (len != 1 || (payload[0] != '0' && payload[0] != '1'))
    return; /* other payloads are not lock messages (docs/wire-protocol.md, Messages) */
  if (payload[0] == '0') {
    if (e->wait_head != NULL)
      wake(e->wait_head);
    else if (e->permits <= e->refs)
      e->permits++;
    return;
  }
  if (e->wait_head == NULL) {
    e->permits = e->refs + 1;
    return;
  }
  wake_all(c, e);
}

/* Reply kinds are matched with and without the sharded "s" prefix. */
static bool kind_is(const redisReply *kind, const char *what) {
  const char *k = kind->str;
  if (k[0] == 's' && strcmp(k + 1, what) == 0)
    return true;
  return strcmp(k, what) == 0;
}

/* The server refused the entry's SUBSCRIBE (e.g. NOPERM: the ACL user
 * may not use the channel). Every op joined to it fails with the server's
 * code instead of waiting out subscribe_timeout_ms, and the entry starts
 * afresh: a later wait subscribes again (the ACL may have been fixed). */
static void refused(rlock_client *c, rlock__sub *e, const redisReply *reply) {
  int err = rlock__reply_error(reply);
  e->state = RLOCK__SUB_NONE;
  e->resubscribe = false;
  e->permits = 0;
  for (;;) {
    rlock__op *op = e->confirm_head != NULL ? e->confirm_head : e->wait_head;
    if (op == NULL)
      break;
    bool last = e->refs == 1;
    rlock__op_sub_failed(op, err, reply->str, reply->len);
    if (last)
      return; /* the entry went away with its last op */
  }
  if (e->refs == 0) {
    entry_free(c, e);
    return;
  }
  /* Ops between a try and its sleep are still joined: they get the next
   * SUBSCRIBE's outcome (and a retry, as after any missed stretch). */
  e->missed = true;
  send_subscribe(c, e);
}

void rlock__pubsub_reply(rlock_client *c, const redisReply *reply) {
  if (reply->type == REDIS_REPLY_ERROR) {
    /* An error names no channel: it answers the oldest request. */
    rlock__sub *e = req_pop(c);
    if (e == NULL)
      return;
    if (e->state == RLOCK__SUB_SUBSCRIBING) {
      refused(c, e, reply);
    } else if (e->state == RLOCK__SUB_UNSUBSCRIBING) {
      e->state = RLOCK__SUB_NONE; /* as if it had gone through */
      if (e->refs > 0)
        send_subscribe(c, e);
      else
        entry_free(c, e);
    }
    return;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
      reply->element[0]->type != REDIS_REPLY_STRING ||
      reply->element[1]->type != REDIS_REPLY_STRING)
    return;
  const redisReply *kind = reply->element[0], *chan = reply->element[1];
  rlock__sub *e = rlock__map_get(&c->subs, chan->str, chan->len);
  if (e == NULL)
    return;
  /* A confirmation answers the oldest request, which is this entry's
   * (replies keep the order of requests). */
  if (!kind_is(kind, "message") && c->sub_req_head == e)
    req_pop(c);
  if (kind_is(kind, "message")) {
    if (e->state == RLOCK__SUB_SUBSCRIBED &&
        reply->element[2]->type == REDIS_REPLY_STRING)
      on_message(c, e, reply->element[2]->str, reply->element[2]->len);
  } else if (kind_is(kind, "subscribe")) {
    if (e->state == RLOCK__SUB_SUBSCRIBING)
      confirmed(c, e);
  } else if (kind_is(kind, "unsubscribe")) {
    if (e->state == RLOCK__SUB_UNSUBSCRIBING) {
      e->state = RLOCK__SUB_NONE;
      if (e->refs > 0)
        send_subscribe(c, e);
      else
        entry_free(c, e);
    }
  }
}

void rlock__pubsub_on_connect(rlock_client *c) {
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &c->subs);
  while ((n = rlock__map_next(&it)) != NULL) {
    rlock__sub *e = n->value;
    if (e->state != RLOCK__SUB_NONE)
      continue;
    if (e->refs > 0)
      send_subscribe(c, e);
    else
      entry_free(c, e);
  }
}

void rlock__pubsub_on_disconnect(rlock_client *c) {
  rlock__op *wake_list = NULL;
  req_clear(c);
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &c->subs);
  while ((n = rlock__map_next(&it)) != NULL) {
    rlock__sub *e = n->value;
    e->state = RLOCK__SUB_NONE;
    if (e->refs == 0) {
      entry_free(c, e);
      continue;
    }
    /* Sleepers keep their TTL-bounded timers; they also get one retry when
     * the subscription is back (see confirmed()). */
    e->permits = 0;
    e->missed = true;
    /* Nothing can wake the sleepers now: let each try once at once, so a
     * dead server is noticed now rather than after the holder's TTL. */
    while (e->wait_head != NULL) {
      rlock__op *op = e->wait_head;
      rlock__timed_stop(c, &op->timer);
      list_remove(&e->wait_head, &e->wait_tail, op);
      op->sub_next = wake_list;
      wake_list = op;
    }
  }
  /* Retried after the walk: a retry may end an op and free its entry. */
  while (wake_list != NULL) {
    rlock__op *op = wake_list;
    wake_list = op->sub_next;
    op->sub_next = NULL;
    op->state = RLOCK__ST_CMD;
    rlock__op_retry(op);
  }
}

void rlock__pubsub_shutdown(rlock_client *c) {
  req_clear(c);
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &c->subs);
  while ((n = rlock__map_next(&it)) != NULL)
    entry_free(c, n->value);
  rlock__map_destroy(&c->subs);
}
