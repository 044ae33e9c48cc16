/* Keeping this client's idea of its holds equal to the server's after a
 * lost reply (see the trim script in scripts.c).
 *
 * An acquire or unlock whose reply never came may or may not have run. The
 * client then "trims": one script sets its owner field back to the hold
 * count the client knows it has. Replies on one connection come in order
 * and a dead connection runs nothing more, so the trim is always applied
 * after the lost command. An op with time left trims and goes on (lock.c);
 * otherwise the (name, owner) pair becomes a suspect, trimmed here as soon
 * as the server answers and no op of that owner on that lock is running. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-private.h"

typedef struct suspect {
  char *key; /* name '\0' owner '\0' channel */
  size_t key_len;   /* name '\0' owner: the map key */
  const char *name, *owner, *channel;
  size_t name_len, channel_len;
  int64_t want; /* count sent with the trim in flight */
  bool inflight;
  bool again; /* doubted again after its trim went out: trim once more */
  bool at_close; /* sent by rlock__suspects_flush: close waits for it */
} suspect;

int64_t rlock__hold_count_known(rlock_client *c, const char *name,
                                const char *owner) {
  rlock__hold *h = rlock__hold_find(c, name, owner);
  return (h != NULL && !h->lost) ? h->count : 0;
}

void rlock__hold_trimmed(rlock_client *c, const char *name, const char *owner,
                         int64_t server_before, int64_t want) {
  int64_t now_held = server_before < want ? server_before : want;
  rlock__hold *h = rlock__hold_find(c, name, owner);
  if (h == NULL || h->count <= now_held)
    return;
  if (now_held == 0) {
    rlock__hold_drop(c, h);
  } else {
    h->count = now_held;
    if (h->watchdog_count > h->count)
      h->watchdog_count = h->count;
  }
}

rlock__cmd *rlock__send_trim(rlock_client *c, const char *name,
                             size_t name_len, const char *channel,
                             size_t channel_len, const char *owner,
                             int64_t want, rlock__reply_cb cb, void *data) {
  char want_s[24];
  snprintf(want_s, sizeof(want_s), "%lld", (long long)want);
  const char *publish = c->opts.sharded_pubsub ? "SPUBLISH" : "PUBLISH";
  const char *argv[7] = {"2", name, channel, owner, want_s, publish, "0"};
  size_t lens[7] = {1, name_len, channel_len, strlen(owner),
                    strlen(want_s), strlen(publish), 1};
  /* Never re-sent by the command layer: a re-send could run after a later
   * acquire of the same owner and undo it. The caller decides. */
  return rlock__cmd_send(c, rlock__script_get(RLOCK__SCRIPT_TRIM), 7, argv,
                         lens, 0, cb, data);
}

static void suspect_free(rlock_client *c, suspect *s) {
  rlock__map_remove(&c->suspects, s->key, s->key_len);
  free(s->key);
  free(s);
}

static void suspect_reply(rlock_client *c, redisReply *reply, int err,
                          void *data) {
  suspect *s = data;
  s->inflight = false;
  if (c->closing) {
    if (s->at_close && --c->trims_draining == 0)
      rlock__loop_drained(c);
    return;
  }
  if (err != 0 || reply->type != REDIS_REPLY_INTEGER)
    return; /* tried again on the next watchdog tick or reconnect */
  rlock__hold_trimmed(c, s->name, s->owner, reply->integer, s->want);
  if (s->again) { /* a command sent after that trim may have run too */
    s->again = false;
    rlock__suspects_run(c);
    return;
  }
  suspect_free(c, s);
}

static bool owner_busy(rlock_client *c, const suspect *s) {
  for (rlock__op *op = c->active_head; op != NULL; op = op->active_next) {
    if ((op->kind == RLOCK__OP_ACQUIRE || op->kind == RLOCK__OP_RELEASE) &&
        strcmp(op->owner, s->owner) == 0 &&
        strcmp(op->lock->name, s->name) == 0)
      return true;
  }
  return false;
}

static int run(rlock_client *c) {
  int sent = 0;
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &c->suspects);
  while ((n = rlock__map_next(&it)) != NULL) {
    suspect *s = n->value;
    if (s->inflight || owner_busy(c, s))
      continue;
    s->want = rlock__hold_count_known(c, s->name, s->owner);
    if (rlock__send_trim(c, s->name, s->name_len, s->channel, s->channel_len,
                         s->owner, s->want, suspect_reply, s) != NULL) {
      s->inflight = true;
      s->at_close = c->closing;
      sent++;
    }
  }
  return sent;
}

void rlock__suspects_run(rlock_client *c) {
  if (!c->closing && c->suspects.count > 0)
    run(c);
}

int rlock__suspects_flush(rlock_client *c) {
  int sent = c->suspects.count > 0 ? run(c) : 0;
  c->trims_draining += sent;
  return sent;
}

void rlock__suspect_add(rlock_client *c, const rlock *lock,
                        const char *owner) {
  size_t ol = strlen(owner);
  size_t key_len = lock->name_len + 1 + ol;
  suspect *s = calloc(1, sizeof(*s));
  char *key = malloc(key_len + 1 + lock->channel_len + 1);
  if (s == NULL || key == NULL) {
    free(s);
    free(key);
    return; /* the hold still expires with its TTL */
  }
  memcpy(key, lock->name, lock->name_len + 1);
  memcpy(key + lock->name_len + 1, owner, ol + 1);
  memcpy(key + key_len + 1, lock->channel, lock->channel_len + 1);
  suspect *old = rlock__map_get(&c->suspects, key, key_len);
  if (old != NULL && old->inflight)
    old->again = true; /* its trim went out before this doubt arose */
  if (old != NULL || rlock__map_put(&c->suspects, key, key_len, s) != 0) {
    free(s);
    free(key);
    return;
  }
  s->key = key;
  s->key_len = key_len;
  s->name = key;
  s->name_len = lock->name_len;
  s->owner = key + lock->name_len + 1;
  s->channel = key + key_len + 1;
  s->channel_len = lock->channel_len;
}

void rlock__suspects_shutdown(rlock_client *c) {
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &c->suspects);
  while ((n = rlock__map_next(&it)) != NULL) {
    suspect *s = n->value;
    free(s->key);
    free(s);
  }
  rlock__map_destroy(&c->suspects);
}
