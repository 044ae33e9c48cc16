/* What the fence suite's files share: a guarded SET (rlock_guard_write with
 * RLOCK_GUARD_SET of key to value, token of lock). */
#ifndef RLOCK_FENCE_TEST_H
#define RLOCK_FENCE_TEST_H

#include "rlock.h"

static inline int fence_set(rlock_guard *g, const char *lock, int64_t token,
                            const char *key, const char *value) {
  rlock_guarded_write w;
  rlock_guarded_write_init(&w);
  w.lock_name = lock;
  w.token = token;
  w.op = RLOCK_GUARD_SET;
  w.key = key;
  w.value = value;
  return rlock_guard_write(g, &w, NULL);
}

#endif
