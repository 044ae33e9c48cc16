/* Spin, then park (park.h).
 *
 * Waking a parked thread costs a futex wake on the loop thread and a
 * scheduler round trip for the caller; on a VM that is tens to hundreds of
 * microseconds, as much as the Redis round trip itself. A caller that polls
 * its completion for about as long as a reply usually takes never parks.
 * But spinning burns a CPU that the loop thread and a local redis-server
 * may need, so:
 * - the spin lasts about twice the smoothed latency of the waits that a
 *   spin can cover, within [SPIN_MIN_NS, max_ns];
 * - when spins mostly fail (waits for a held lock, a slow server), only one
 *   call in PROBE_EVERY spins, to notice when that changes: a probe that
 *   succeeds halves the failures counted, so a few bring spinning back;
 * - only a spin that succeeded teaches the latency estimate: a failed one
 *   measured the park and the wake-up too, and learning from it would
 *   raise the estimate past what any spin covers and keep it there;
 * - a caller spins only while at most CPUs - 1 blocking calls of the
 *   client are waiting (itself included); with more, it parks at once. */
#include <sched.h>

#include "park.h"
#include "util.h"

enum { W_RUNNING, W_PARKED, W_DONE };

#define SPIN_MIN_NS INT64_C(20000)
#define PROBE_EVERY 32u

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void rlock__parker_init(rlock__parker *p, int64_t spin_us) {
  p->max_ns = spin_us * 1000;
  unsigned cpus = uv_available_parallelism();
  p->cap = cpus > 1 ? (int)cpus - 1 : 1;
  atomic_init(&p->waiting, 0);
  atomic_init(&p->ewma_ns, p->max_ns / 2);
  atomic_init(&p->hits, 0);
  atomic_init(&p->misses, 0);
  atomic_init(&p->calls, 0u);
}

void rlock__wait_init(rlock__wait *w) { atomic_init(&w->state, W_RUNNING); }

/* How long this call may spin (ns), 0 for not at all; *probe: spins mostly
 * failed lately and this is one of the calls that spins anyway. */
static int64_t budget(rlock__parker *p, bool *probe) {
  *probe = false;
  if (p->max_ns <= 0)
    return 0;
  unsigned n = atomic_fetch_add_explicit(&p->calls, 1u, memory_order_relaxed);
  int hits = atomic_load_explicit(&p->hits, memory_order_relaxed);
  int misses = atomic_load_explicit(&p->misses, memory_order_relaxed);
  if (misses > 4 * hits + 8) {
    if (n % PROBE_EVERY != 0)
      return 0;
    *probe = true;
  }
  int64_t b = 2 * atomic_load_explicit(&p->ewma_ns, memory_order_relaxed);
  if (b < SPIN_MIN_NS)
    b = SPIN_MIN_NS;
  return b > p->max_ns ? p->max_ns : b;
}

static void learn(rlock__parker *p, int64_t latency_ns, bool hit,
                  bool probe) {
  atomic_fetch_add_explicit(hit ? &p->hits : &p->misses, 1,
                            memory_order_relaxed);
  /* Forget slowly: halve both counts now and then (races only blur it). */
  int h = atomic_load_explicit(&p->hits, memory_order_relaxed);
  int m = atomic_load_explicit(&p->misses, memory_order_relaxed);
  if (h + m > 256) {
    atomic_store_explicit(&p->hits, h / 2, memory_order_relaxed);
    atomic_store_explicit(&p->misses, m / 2, memory_order_relaxed);
  }
  if (!hit)
    return; /* the wait includes parking: not a reply latency */
  if (probe) /* spinning pays again: give it its chance back quickly */
    atomic_store_explicit(
        &p->misses, atomic_load_explicit(&p->misses, memory_order_relaxed) / 2,
        memory_order_relaxed);
  int64_t e = atomic_load_explicit(&p->ewma_ns, memory_order_relaxed);
  atomic_store_explicit(&p->ewma_ns, e + (latency_ns - e) / 8,
                        memory_order_relaxed);
}

/* Sleeps until the wake (or, with no semaphore to be had, yields the CPU
 * until it). */
static void park(rlock__wait *w) {
  if (uv_sem_init(&w->sem, 0) != 0) {
    while (atomic_load_explicit(&w->state, memory_order_acquire) != W_DONE)
      sched_yield();
    return;
  }
  if (atomic_exchange(&w->state, W_PARKED) != W_DONE)
    uv_sem_wait(&w->sem);
  uv_sem_destroy(&w->sem);
}

void rlock__wait_for(rlock__parker *p, rlock__wait *w) {
  /* Spin only while few callers wait: with more, the loop thread and the
   * server are busy anyway, answers come in batches, and a spinner only
   * takes the CPU they need. */
  int waiting =
      atomic_fetch_add_explicit(&p->waiting, 1, memory_order_relaxed) + 1;
  bool probe = false;
  int64_t b = waiting <= p->cap ? budget(p, &probe) : 0;
  if (b == 0) {
    park(w);
    atomic_fetch_sub_explicit(&p->waiting, 1, memory_order_relaxed);
    return;
  }
  uint64_t start = uv_hrtime(), end = start + (uint64_t)b;
  bool hit = false;
  for (;;) {
    if (atomic_load_explicit(&w->state, memory_order_acquire) == W_DONE) {
      hit = true;
      break;
    }
    for (int i = 0; i < 16; i++)
      cpu_relax();
    if (uv_hrtime() >= end)
      break;
  }
  if (!hit)
    park(w);
  atomic_fetch_sub_explicit(&p->waiting, 1, memory_order_relaxed);
  learn(p, (int64_t)(uv_hrtime() - start), hit, probe);
}

void rlock__wait_wake(rlock__wait *w) {
  /* After the exchange, w belongs to its caller again unless it parked:
   * then it sleeps until this post. */
  if (atomic_exchange(&w->state, W_DONE) == W_PARKED)
    uv_sem_post(&w->sem);
}
