/* What this client believes it holds, and the watchdog that renews the
 * holds taken without a lease: every watchdog_timeout/3, one batched script
 * call per 100 locks (as Java 3.44+ does), so 10 000 held locks cost 100
 * commands per period, not 10 000. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-private.h"

#define RENEW_BATCH 100

/* Builds "name\0owner" into buf (or a malloc'd buffer when it does not
 * fit). Returns the key or NULL when out of memory. */
static char *hold_key(char *buf, size_t cap, const char *name,
                      const char *owner, size_t *len) {
  size_t nl = strlen(name), ol = strlen(owner);
  *len = nl + 1 + ol;
  char *key = *len + 1 <= cap ? buf : malloc(*len + 1);
  if (key == NULL)
    return NULL;
  memcpy(key, name, nl + 1);
  memcpy(key + nl + 1, owner, ol + 1);
  return key;
}

rlock__hold *rlock__hold_find(rlock_client *c, const char *name,
                              const char *owner) {
  char buf[512];
  size_t len;
  char *key = hold_key(buf, sizeof(buf), name, owner, &len);
  if (key == NULL)
    return NULL;
  rlock__hold *h = rlock__map_get(&c->holds, key, len);
  if (key != buf)
    free(key);
  return h;
}

int rlock__hold_add(rlock_client *c, const char *name, const char *owner,
                    int64_t lease_ms) {
  rlock__hold *h = rlock__hold_find(c, name, owner);
  if (h == NULL) {
    h = calloc(1, sizeof(*h));
    if (h == NULL)
      return RLOCK_ENOMEM;
    h->key = hold_key(NULL, 0, name, owner, &h->key_len);
    if (h->key == NULL ||
        rlock__map_put(&c->holds, h->key, h->key_len, h) != 0) {
      free(h->key);
      free(h);
      return RLOCK_ENOMEM;
    }
    h->name = h->key;
    h->owner = h->key + strlen(name) + 1;
    h->gen = ++c->next_hold_gen;
  } else if (h->lost) {
    /* Re-entered after the watchdog saw the hold lost: the server holds 1
     * again, but the caller still counts its outer holds, which were lost:
     * the unlocks that end them say so (RLOCK_ELOCKLOST, lock.c), as when
     * the loss went unnoticed until the inner unlock. A new generation, so
     * the renewals of the lost hold say nothing about this one. */
    h->lost = false;
    h->releasing = 0;
    h->gen = ++c->next_hold_gen;
  }
  h->count++;
  if (lease_ms < 0)
    h->watchdog_count++;
  else
    h->lease_ms = lease_ms;
  return 0;
}

void rlock__hold_drop(rlock_client *c, rlock__hold *h) {
  rlock__map_remove(&c->holds, h->key, h->key_len);
  free(h->key);
  free(h);
}

/* ---- renewal ---- */

typedef struct renew_batch {
  int n;
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

static void renew_reply(rlock_client *c, redisReply *reply, int err,
                        void *data) {
  renew_batch *b = data;
  c->renew_inflight--;
  /* A failed renewal is tried again next period; only a definite "0" from
   * the server means the lock is gone. */
  if (err == 0 && reply->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < reply->elements && i < (size_t)b->n; i++) {
      const redisReply *r = reply->element[i];
      if (r->type != REDIS_REPLY_INTEGER || r->integer != 0)
        continue;
      rlock__hold *h = rlock__map_get(&c->holds, b->key[i], b->key_len[i]);
      if (h == NULL || h->gen != b->gen[i] || h->lost)
        continue;
      /* An unlock that started after this renewal was sent (or is still in
       * flight) may have run on the server before it: a command that timed
       * out is still executed once the server gets to it, and this renewal
       * may be a re-send that overtook the unlock's own re-send. The "0"
       * then only says the unlock worked; its own reply settles the hold. */
      if (h->releasing > 0 || h->release_seq != b->release_seq[i])
        continue;
      h->lost = true;
      if (c->opts.on_lock_lost != NULL)
        c->opts.on_lock_lost(h->name, h->owner, c->opts.on_lock_lost_data);
    }
  }
  batch_free(b);
}

static void send_batch(rlock_client *c, renew_batch *b, const char *timeout) {
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
  rlock__cmd *cmd =
      rlock__cmd_send(c, rlock__script_get(RLOCK__SCRIPT_RENEW), argc, argv,
                      lens, c->opts.retry_attempts, renew_reply, b);
  if (cmd == NULL) {
    batch_free(b);
    return;
  }
  c->renew_inflight++;
}

static void watchdog_tick(uv_timer_t *timer) {
  rlock_client *c = timer->data;
  rlock__suspects_run(c);
  if (c->closing || c->renew_inflight > 0)
    return; /* the previous round is still retrying: don't pile up */
  char timeout[24];
  snprintf(timeout, sizeof(timeout), "%" PRId64, c->opts.watchdog_timeout_ms);
  renew_batch *b = NULL;
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &c->holds);
  while ((n = rlock__map_next(&it)) != NULL) {
    rlock__hold *h = n->value;
    if (h->watchdog_count <= 0 || h->lost || h->releasing > 0)
      continue; /* an unlock in flight decides what is left to renew */
    if (b == NULL && (b = calloc(1, sizeof(*b))) == NULL)
      return;
    b->key[b->n] = malloc(h->key_len + 1);
    if (b->key[b->n] == NULL)
      break;
    memcpy(b->key[b->n], h->key, h->key_len + 1);
    b->key_len[b->n] = h->key_len;
    b->gen[b->n] = h->gen;
    b->release_seq[b->n] = h->release_seq;
    if (++b->n == RENEW_BATCH) {
      send_batch(c, b, timeout);
      b = NULL;
    }
  }
  if (b != NULL && b->n > 0)
    send_batch(c, b, timeout);
  else
    free(b);
}

void rlock__watchdog_start(rlock_client *c) {
  uint64_t period = (uint64_t)(c->opts.watchdog_timeout_ms / 3);
  uv_timer_start(&c->watchdog_timer, watchdog_tick, period, period);
}

static void noop_close(uv_handle_t *h) { (void)h; }

void rlock__watchdog_shutdown(rlock_client *c) {
  uv_close((uv_handle_t *)&c->watchdog_timer, noop_close);
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &c->holds);
  while ((n = rlock__map_next(&it)) != NULL) {
    rlock__hold *h = n->value;
    free(h->key);
    free(h);
  }
  rlock__map_destroy(&c->holds);
}
