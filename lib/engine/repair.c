/* Keeping this client's idea of its holds equal to the server's after a
 * lost reply (docs/wire-protocol.md, Trim).
 *
 * An acquire or unlock whose reply never came may or may not have run. The
 * client then "trims": one script sets its owner field back to the hold
 * count the client knows it has. Replies on one connection come in order
 * and a dead connection runs nothing more, so the trim is always applied
 * after the lost command. An op with time left trims and goes on
 * (acquire.c); otherwise the (name, owner) pair becomes a suspect, trimmed
 * here as soon as the server answers and no op of that owner on that lock
 * is running. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

typedef struct suspect {
  rlock__engine *engine;
  rlock *lock;      /* a reference: the trim needs its names and script */
  char *key;        /* name '\0' owner: the map key */
  size_t key_len;
  const char *owner; /* points into key */
  int64_t want;      /* count sent with the trim in flight */
  bool inflight;
  bool again;    /* doubted again after its trim went out: trim once more */
  bool at_close; /* sent by rlock__suspects_flush: close waits for it */
} suspect;

rlock__cmd *rlock__trim_send(rlock__engine *e, const rlock *lock,
                             const char *owner, int64_t want,
                             rlock__reply_cb cb, void *data) {
  char want_s[24];
  snprintf(want_s, sizeof(want_s), "%lld", (long long)want);
  const char *publish = rlock__net_publish(e->net);
  const char *argv[7] = {"2",   lock->name, lock->channel, owner,
                         want_s, publish,   "0"};
  size_t lens[7] = {1, lock->name_len, lock->channel_len, strlen(owner),
                    strlen(want_s), strlen(publish), 1};
  /* Never re-sent by the command layer: a re-send could run after a later
   * acquire of the same owner and undo it. The caller decides. */
  return rlock__cmd_send(e->net, lock->prim->hold->trim, 7, argv, lens, 0, cb,
                         data);
}

static void suspect_free(rlock__engine *e, suspect *s) {
  rlock__map_remove(&e->suspects, s->key, s->key_len);
  rlock__handle_release(s->lock);
  free(s->key);
  free(s);
}

static void suspect_reply(rlock__net *n, redisReply *reply, int err,
                          void *data) {
  (void)n;
  suspect *s = data;
  rlock__engine *e = s->engine;
  s->inflight = false;
  if (e->core->closing) {
    if (s->at_close)
      rlock__engine_drained_one(e);
    return;
  }
  if (err != 0 || reply->type != REDIS_REPLY_INTEGER)
    return; /* tried again on the next renewal tick or reconnect */
  rlock__hold_trimmed(e, s->lock, s->owner, reply->integer, s->want);
  if (s->again) { /* a command sent after that trim may have run too */
    s->again = false;
    rlock__suspects_run(e);
    return;
  }
  suspect_free(e, s);
}

static bool owner_busy(rlock__engine *e, const suspect *s) {
  for (rlock__op *op = e->active_head; op != NULL; op = op->active_next) {
    if (op->type->touches_hold && strcmp(op->owner, s->owner) == 0 &&
        strcmp(op->lock->name, s->lock->name) == 0)
      return true;
  }
  return false;
}

static int run(rlock__engine *e) {
  int sent = 0;
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &e->suspects);
  while ((node = rlock__map_next(&it)) != NULL) {
    suspect *s = node->value;
    if (s->inflight || owner_busy(e, s))
      continue;
    s->want = rlock__hold_count_known(e, s->lock, s->owner);
    if (rlock__trim_send(e, s->lock, s->owner, s->want, suspect_reply, s) !=
        NULL) {
      s->inflight = true;
      s->at_close = e->core->closing;
      sent++;
    }
  }
  return sent;
}

void rlock__suspects_run(rlock__engine *e) {
  if (!e->core->closing && e->suspects.count > 0)
    run(e);
}

/* At close: the trims still to send go now, and close waits for those
 * and for every trim already in flight - one sent just before close (at
 * an acquire's deadline) may be queued behind a WAIT that blocks the
 * connection, and the server drops it if the connection goes first
 * (issue 33). */
int rlock__suspects_flush(rlock__engine *e) {
  if (e->suspects.count == 0)
    return 0;
  int waiting = 0;
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &e->suspects);
  while ((node = rlock__map_next(&it)) != NULL) {
    suspect *s = node->value;
    if (s->inflight && !s->at_close) {
      s->at_close = true;
      waiting++;
    }
  }
  return waiting + run(e);
}

void rlock__suspect_add(rlock__engine *e, const rlock *lock,
                        const char *owner) {
  if (lock->prim->hold == NULL || lock->prim->hold->trim == NULL)
    return; /* nothing to repair: no holds recorded, or no trim */
  size_t ol = strlen(owner);
  size_t key_len = lock->name_len + 1 + ol;
  char *key = malloc(key_len + 1);
  if (key == NULL)
    return; /* the hold still expires with its TTL */
  memcpy(key, lock->name, lock->name_len + 1);
  memcpy(key + lock->name_len + 1, owner, ol + 1);
  suspect *old = rlock__map_get(&e->suspects, key, key_len);
  if (old != NULL) {
    if (old->inflight)
      old->again = true; /* its trim went out before this doubt arose */
    free(key);
    return;
  }
  suspect *s = calloc(1, sizeof(*s));
  if (s == NULL || rlock__map_put(&e->suspects, key, key_len, s) != 0) {
    free(s);
    free(key);
    return;
  }
  s->engine = e;
  s->lock = (rlock *)lock;
  atomic_fetch_add(&s->lock->refs, 1);
  s->key = key;
  s->key_len = key_len;
  s->owner = key + lock->name_len + 1;
}

void rlock__suspects_free(rlock__engine *e) {
  rlock__map_iter it;
  rlock__map_node *node;
  rlock__map_iter_init(&it, &e->suspects);
  while ((node = rlock__map_next(&it)) != NULL) {
    suspect *s = node->value;
    rlock__handle_release(s->lock);
    free(s->key);
    free(s);
  }
  rlock__map_destroy(&e->suspects);
}
