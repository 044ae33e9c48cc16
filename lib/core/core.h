/* The core layer: the client's loop thread, the cross-thread task queue,
 * the timer heap, and the close sequence's skeleton. Internal.
 *
 * Threads: any thread may submit tasks (under queue_mutex) and read the
 * immutable fields (opts, pid, fork_generation). Everything else is owned
 * by the loop thread. The core knows nothing of connections or locks: its
 * owner (the client) registers hooks - what to do when the loop starts,
 * when close is asked for, when the last reference goes.
 */
#ifndef RLOCK_CORE_H
#define RLOCK_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "util.h"

typedef struct rlock__core rlock__core;

/* ---- timed events: one uv_timer over a binary min-heap ---- */

typedef struct rlock__timed rlock__timed;
struct rlock__timed {
  int64_t at; /* rlock__now_ms() deadline */
  /* The heap's links live in the entry itself, so starting a timer never
   * allocates and cannot fail. */
  rlock__timed *left, *right, *parent;
  uint64_t seq; /* start order: equal deadlines fire first-started first */
  bool active;  /* in the heap */
  void (*fire)(rlock__timed *t); /* the owner finds itself by container */
};

/* Monotonic milliseconds (uv_hrtime based), usable from any thread. */
int64_t rlock__now_ms(void);
void rlock__timed_start(rlock__core *core, rlock__timed *t, int64_t at);
void rlock__timed_stop(rlock__core *core, rlock__timed *t);
static inline bool rlock__timed_active(const rlock__timed *t) {
  return t->active;
}

/* ---- tasks: work handed to the loop thread ---- */

typedef struct rlock__task rlock__task;
struct rlock__task {
  rlock__task *next;
  /* On the loop thread. */
  void (*run)(rlock__task *t);
  /* On the loop thread, instead of run, when the client closed first. */
  void (*reject)(rlock__task *t, int err);
};

/* Queues t for the loop thread. 0, or RLOCK_ECLOSED / RLOCK_EFORK (t is
 * untouched). Any thread. */
int rlock__core_submit(rlock__core *core, rlock__task *t);
/* The detail for a failed rlock__core_submit(). */
const char *rlock__core_submit_error(int rc);
/* Calls fn on every queued task, under the queue's lock (loop thread). */
void rlock__core_queue_each(rlock__core *core,
                            void (*fn)(rlock__task *t, void *arg), void *arg);
bool rlock__core_on_loop_thread(const rlock__core *core);
/* RLOCK_EFORK when called in a process forked from the one that opened the
 * client (its loop thread does not exist there), else 0. Any thread. */
int rlock__core_fork_check(const rlock__core *core);

/* ---- ids (ids.c) ---- */

/* The calling thread's owner id (rlock_thread_id()): taken from the
 * process-wide counter on its first call. Any thread. */
uint64_t rlock__thread_id(void);
/* A new id from that counter, never handed out before (rlock_owner_new()).
 * Any thread. */
uint64_t rlock__id_next(void);

/* ---- the core ---- */

struct rlock__core {
  atomic_int refs; /* the client, its handles, the loop thread */
  rlock_options opts; /* validated; strings owned by the client */
  int pid;            /* the process that opened it */
  unsigned fork_generation; /* forks seen in this process when opened */

  /* Hooks, set by the owner before rlock__core_start(). */
  void (*on_loop_start)(rlock__core *core); /* first thing on the thread */
  void (*on_close)(rlock__core *core); /* close asked: wind down, then
                                          rlock__core_final_in() */
  void (*on_final)(rlock__core *core); /* free what runs on the loop */
  void (*on_destroy)(rlock__core *core); /* the last reference went */

  uv_loop_t loop;
  uv_thread_t thread;
  bool thread_started;
  uv_async_t wakeup;
  uv_timer_t heap_timer;
  int64_t heap_timer_at; /* when heap_timer is armed for, or -1 */
  uv_timer_t final_timer;
  bool final_done;
  rlock__timed *heap_min; /* the heap's root: the earliest deadline */
  size_t heap_len;
  uint64_t heap_seq;

  /* the task queue: the only state user threads write */
  uv_mutex_t queue_mutex;
  rlock__task *queue_head, *queue_tail;
  bool closed; /* under queue_mutex: no more tasks accepted */

  bool closing; /* loop thread: close has begun; timed events stop */

  /* What opts.on_diag is told the message is about (set by the owner). */
  rlock_client *diag_client;
};

/* ---- diagnostics (diag.c) ---- */

/* Whether opts.on_diag is set: guard any work done only for a message. */
static inline bool rlock__diag_on(const rlock__core *core) {
  return core->opts.on_diag != NULL;
}
/* Formats one line (control bytes shown as '?') and hands it to
 * opts.on_diag with its level (RLOCK_DIAG_*); nothing - not even the
 * formatting - without a callback. Loop thread. */
void rlock__diag(rlock__core *core, int level, const char *fmt, ...)
    RLOCK__PRINTF(3, 4);

/* Fills core (opts copied as given). 0 or RLOCK_ESYS. */
int rlock__core_init(rlock__core *core, const rlock_options *opts);
/* Starts the loop thread. 0 or RLOCK_ESYS (nothing left running). */
int rlock__core_start(rlock__core *core);
/* Any thread: no more tasks; the loop thread calls on_close. */
void rlock__core_request_close(rlock__core *core);
/* Waits for the loop thread to end (detaches it when called on it). */
void rlock__core_join(rlock__core *core);
/* Loop thread, during close: run on_final after delay_ms (0: next turn,
 * outside whatever callback asks; < 0: now, from on_close only), then stop
 * the loop. The first call that fires wins. */
void rlock__core_final_in(rlock__core *core, int64_t delay_ms);
void rlock__core_ref(rlock__core *core);
void rlock__core_unref(rlock__core *core); /* on_destroy with the last */
/* Frees what rlock__core_init made (from on_destroy). */
void rlock__core_destroy(rlock__core *core);

#endif
