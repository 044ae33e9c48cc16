/* How a blocking call waits for its operation (park.c): it first polls the
 * completion without sleeping - a reply that comes back within
 * microseconds then costs no thread wake-up - and parks on a semaphore
 * only after a bounded spin. The bound adapts to the reply latency the
 * client observes, spinning stops where it rarely pays off, and nobody
 * spins while more than CPUs - 1 callers wait. Internal (core: the engine
 * waits with it; it knows nothing of operations). */
#ifndef RLOCK_PARK_H
#define RLOCK_PARK_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

/* Per client, shared by every thread that blocks on it. */
typedef struct rlock__parker {
  int64_t max_ns; /* the option's ceiling; 0: never spin */
  int cap;        /* spin only while at most this many callers wait */
  atomic_int waiting; /* blocking callers waiting right now */
  atomic_int_fast64_t ewma_ns; /* smoothed latency of spin-sized waits */
  atomic_int hits, misses;     /* spins that did / did not pay off */
  atomic_uint calls;
} rlock__parker;

/* One blocking call's completion. */
typedef struct rlock__wait {
  atomic_int state; /* RUNNING, PARKED, DONE */
  uv_sem_t sem;     /* made only when the caller parks */
} rlock__wait;

/* spin_us: the option (0 turns spinning off). */
void rlock__parker_init(rlock__parker *p, int64_t spin_us);
void rlock__wait_init(rlock__wait *w);
/* The calling thread waits until rlock__wait_wake(w): spin, then park
 * (when no semaphore can be made, it polls, yielding the CPU). */
void rlock__wait_for(rlock__parker *p, rlock__wait *w);
/* The loop thread: the operation is complete (its result written
 * before). w may be gone as soon as this returns. */
void rlock__wait_wake(rlock__wait *w);

#endif
