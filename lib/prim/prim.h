/* The primitives layer: one file per Redisson primitive (today: lock.c,
 * the reentrant lock), each filling an rlock__prim descriptor that the
 * engine drives, plus its Lua scripts (<kind>_*.lua beside it, embedded at
 * build time) and its public API. Internal. */
#ifndef RLOCK_PRIM_H
#define RLOCK_PRIM_H

#include "engine.h"

/* Redisson's RLock (getLock): channel "redisson_lock__channel:" + tag. */
extern const rlock__prim rlock__prim_lock;
#define RLOCK__LOCK_CHANNEL_PREFIX "redisson_lock__channel:"

/* The lock's scripts, NULL-terminated, in this order: acquire, release,
 * force unlock, renew, trim (for tests and the benchmark). */
const rlock__script *const *rlock__lock_scripts(void);

#endif
