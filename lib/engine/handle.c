/* Lock handles (the public `rlock`): made by the client for a primitive's
 * descriptor, which names the handle's channel; reference-counted, since
 * async ops and blocking calls in flight keep a handle alive. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

int rlock__handle_new(rlock__engine *e, const rlock__prim *prim,
                      const char *name, size_t len, rlock **out) {
  return rlock__handle_new_size(e, prim, name, len, sizeof(rlock), out);
}

int rlock__handle_new_size(rlock__engine *e, const rlock__prim *prim,
                           const char *name, size_t len, size_t size,
                           rlock **out) {
  assert(size >= sizeof(rlock));
  rlock *lock = calloc(1, size);
  if (lock == NULL)
    return RLOCK_ENOMEM;
  lock->name = malloc(len + 1);
  if (lock->name != NULL) {
    memcpy(lock->name, name, len);
    lock->name[len] = '\0';
    lock->tag = rlock__tag(name, len, &lock->tag_len);
  }
  if (lock->tag != NULL && prim->channel_name != NULL)
    lock->channel = prim->channel_name(name, len, &lock->channel_len);
  else if (lock->tag != NULL)
    lock->channel = rlock__prefixed(
        prim->channel_prefix != NULL ? prim->channel_prefix : "", lock->tag,
        lock->tag_len, &lock->channel_len);
  if (lock->channel == NULL) {
    free(lock->name);
    free(lock->tag);
    free(lock);
    return RLOCK_ENOMEM;
  }
  lock->name_len = len;
  lock->engine = e;
  lock->prim = prim;
  atomic_init(&lock->refs, 1);
  rlock__core_ref(e->core);
  *out = lock;
  return 0;
}

void rlock__handle_release(rlock *lock) {
  int was = atomic_fetch_sub(&lock->refs, 1);
  assert(was >= 1);
  if (was != 1)
    return;
  rlock__core *core = lock->engine->core;
  if (lock->prim->handle_free != NULL)
    lock->prim->handle_free(lock);
  free(lock->name);
  free(lock->tag);
  free(lock->channel);
  free(lock);
  rlock__core_unref(core);
}

void rlock_free(rlock *lock) {
  if (lock != NULL && lock->prim->user_free != NULL)
    lock->prim->user_free(lock);
  else if (lock != NULL)
    rlock__handle_release(lock);
}

const char *rlock_name(const rlock *lock) {
  return lock != NULL ? lock->name : NULL;
}

const char *rlock_kind(const rlock *lock) {
  return lock != NULL ? lock->prim->kind : "";
}

