/* The client's loop thread, the cross-thread request queue and the timed
 * events heap. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client-private.h"

int64_t rlock__now_ms(void) { return (int64_t)(uv_hrtime() / 1000000u); }

/* ---- timed events: a binary min-heap behind one uv_timer ----
 *
 * Every deadline in the client (command replies, waits, subscribe bounds,
 * retries, reconnects) is a heap entry, so 10 000 waiters cost 10 000 heap
 * slots rather than 10 000 libuv handles that each need an asynchronous
 * close before their memory may be reused. */

static void heap_swap(rlock_client *c, size_t a, size_t b) {
  rlock__timed *t = c->heap[a];
  c->heap[a] = c->heap[b];
  c->heap[b] = t;
  c->heap[a]->index = a + 1;
  c->heap[b]->index = b + 1;
}

static void heap_up(rlock_client *c, size_t i) {
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (c->heap[parent]->at <= c->heap[i]->at)
      break;
    heap_swap(c, i, parent);
    i = parent;
  }
}

static void heap_down(rlock_client *c, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < c->heap_len && c->heap[l]->at < c->heap[m]->at)
      m = l;
    if (r < c->heap_len && c->heap[r]->at < c->heap[m]->at)
      m = r;
    if (m == i)
      return;
    heap_swap(c, i, m);
    i = m;
  }
}

static void heap_timer_cb(uv_timer_t *timer);

static void arm_timer(rlock_client *c) {
  if (c->heap_len == 0 || c->closing)
    return;
  int64_t at = c->heap[0]->at;
  if (c->heap_timer_at >= 0 && c->heap_timer_at <= at)
    return;
  int64_t delay = at - rlock__now_ms();
  if (delay < 0)
    delay = 0;
  c->heap_timer_at = at;
  uv_timer_start(&c->heap_timer, heap_timer_cb, (uint64_t)delay, 0);
}

static void heap_timer_cb(uv_timer_t *timer) {
  rlock_client *c = timer->data;
  c->heap_timer_at = -1;
  int64_t now = rlock__now_ms();
  while (c->heap_len > 0 && c->heap[0]->at <= now && !c->closing) {
    rlock__timed *t = c->heap[0];
    rlock__timed_stop(c, t);
    t->fire(c, t);
  }
  arm_timer(c);
}

void rlock__timed_start(rlock_client *c, rlock__timed *t, int64_t at) {
  if (t->index != 0)
    rlock__timed_stop(c, t);
  if (c->heap_len == c->heap_cap) {
    size_t cap = c->heap_cap ? c->heap_cap * 2 : 64;
    rlock__timed **h = realloc(c->heap, cap * sizeof(*h));
    if (h == NULL)
      abort(); /* a few pointers; treated like a failed stack push */
    c->heap = h;
    c->heap_cap = cap;
  }
  t->at = at;
  c->heap[c->heap_len] = t;
  t->index = ++c->heap_len;
  heap_up(c, c->heap_len - 1);
  arm_timer(c);
}

void rlock__timed_stop(rlock_client *c, rlock__timed *t) {
  if (t->index == 0)
    return;
  size_t i = t->index - 1;
  t->index = 0;
  c->heap_len--;
  if (i == c->heap_len)
    return;
  c->heap[i] = c->heap[c->heap_len];
  c->heap[i]->index = i + 1;
  heap_up(c, i);
  heap_down(c, c->heap[i]->index - 1);
}

/* ---- request queue ---- */

int rlock__fork_check(const rlock_client *c) {
  /* After fork() only the forking thread exists in the child: a request
   * queued there would never be served, and the queue's wake-up would go to
   * the parent's loop through the inherited eventfd. */
  return getpid() == c->pid ? 0 : RLOCK_EFORK;
}

const char *rlock__submit_error(int rc) {
  return rc == RLOCK_EFORK
             ? "the client was opened by another process (this is a forked "
               "child): open a new client in the child"
             : "client is closed";
}

int rlock__loop_submit(rlock_client *c, rlock__op *op) {
  if (rlock__fork_check(c) != 0)
    return RLOCK_EFORK;
  op->next = NULL;
  uv_mutex_lock(&c->queue_mutex);
  if (c->closed) {
    uv_mutex_unlock(&c->queue_mutex);
    return RLOCK_ECLOSED;
  }
  bool was_empty = c->queue_head == NULL;
  if (was_empty)
    c->queue_head = op;
  else
    c->queue_tail->next = op;
  c->queue_tail = op;
  /* Sent under the mutex: the loop thread closes the async handle only
   * after it has seen `closed` under this mutex, so no sender can touch a
   * closed handle. A non-empty queue already has a wake-up on its way. */
  if (was_empty)
    uv_async_send(&c->wakeup);
  uv_mutex_unlock(&c->queue_mutex);
  return 0;
}

bool rlock__on_loop_thread(rlock_client *c) {
  if (!c->thread_started)
    return false;
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &c->thread) != 0;
}

static void close_handle_cb(uv_handle_t *h) { (void)h; }

/* Close, second half: drop everything and let the loop run dry. */
static void shutdown_final(rlock_client *c) {
  if (c->shutdown_done)
    return;
  c->shutdown_done = true;
  uv_close((uv_handle_t *)&c->drain_timer, close_handle_cb);
  rlock__watchdog_shutdown(c);
  rlock__conn_shutdown(&c->sub);
  rlock__conn_shutdown(&c->cmd);
  rlock__cmd_shutdown_all(c);
  rlock__pubsub_shutdown(c);
  rlock__suspects_shutdown(c);
  rlock__latches_shutdown(c);
  /* Whatever is left in the heap belongs to records freed above. */
  c->heap_len = 0;
  uv_close((uv_handle_t *)&c->heap_timer, close_handle_cb);
  uv_close((uv_handle_t *)&c->wakeup, close_handle_cb);
}

static void drain_timer_cb(uv_timer_t *timer) { shutdown_final(timer->data); }

void rlock__loop_drained(rlock_client *c) {
  /* Called from inside hiredis callbacks: finish outside them. */
  if (c->closing && !c->shutdown_done)
    uv_timer_start(&c->drain_timer, drain_timer_cb, 0, 0);
}

/* Close, first half. Every call still running ends with RLOCK_ECLOSED. An
 * acquire whose command is already on its way may still take the lock on
 * the server, so its (name, owner) is trimmed back first (reconcile.c), and
 * the command connection stays up until those trims have answered (at most
 * command_timeout_ms): close never leaves a hold nobody knows of while the
 * server answers. (hiredis 0.14's redisAsyncDisconnect cannot be used for
 * this: it drops replies still on their way once its write buffer is
 * empty.) */
static void shutdown_loop(rlock_client *c) {
  c->closing = true;
  while (c->active_head != NULL) {
    rlock__op *op = c->active_head;
    if (op->kind == RLOCK__OP_ACQUIRE && op->cmd != NULL)
      rlock__suspect_add(c, op->lock, op->owner);
    rlock__op_finish(op, RLOCK_ECLOSED);
  }
  uv_timer_stop(&c->watchdog_timer);
  rlock__conn_shutdown(&c->sub);
  int draining = 0;
  if (c->cmd.ac != NULL) {
    draining += rlock__suspects_flush(c);
    draining += rlock__latches_flush_at_close(c);
  }
  if (draining > 0) {
    uv_timer_start(&c->drain_timer, drain_timer_cb,
                   (uint64_t)c->opts.command_timeout_ms, 0);
    return; /* rlock__loop_drained() when the last trim answers */
  }
  shutdown_final(c);
}

static void wakeup_cb(uv_async_t *async) {
  rlock_client *c = async->data;
  uv_mutex_lock(&c->queue_mutex);
  rlock__op *op = c->queue_head;
  bool closed = c->closed;
  c->queue_head = c->queue_tail = NULL;
  uv_mutex_unlock(&c->queue_mutex);
  while (op != NULL) {
    rlock__op *next = op->next;
    if (c->closing || closed) {
      /* Same detail as a call refused at submit time: async callbacks show
       * op->detail as rlock_last_error(), which must not be empty. */
      snprintf(op->detail, sizeof(op->detail), "%s",
               rlock__submit_error(RLOCK_ECLOSED));
      op->result = RLOCK_ECLOSED;
      op->state = RLOCK__ST_DONE;
      op->done(op);
    } else {
      rlock__op_start(c, op);
    }
    op = next;
  }
  if (closed && !c->closing)
    shutdown_loop(c);
}

static void open_timeout(rlock_client *c, rlock__timed *t) {
  (void)t;
  char detail[128];
  snprintf(detail, sizeof(detail),
           "Redis did not answer PING within command_timeout_ms (%lld ms)",
           (long long)c->opts.command_timeout_ms);
  rlock__open_progress(c, RLOCK_ETIMEDOUT, detail);
}

static void loop_main(void *arg) {
  rlock_client *c = arg;
  /* Process signals belong to the application's threads. Blocking them
   * here also turns a write to a closed socket into EPIPE instead of a
   * SIGPIPE that would kill a program that never asked for one (all Redis
   * I/O happens on this thread). Faults stay deliverable. */
  sigset_t mask;
  sigfillset(&mask);
  sigdelset(&mask, SIGSEGV);
  sigdelset(&mask, SIGBUS);
  sigdelset(&mask, SIGFPE);
  sigdelset(&mask, SIGILL);
  sigdelset(&mask, SIGABRT);
  sigdelset(&mask, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &mask, NULL);
  c->open_timer.fire = open_timeout;
  rlock__timed_start(c, &c->open_timer,
                     rlock__now_ms() + c->opts.command_timeout_ms);
  if (rlock__conn_start(&c->cmd) != 0 || rlock__conn_start(&c->sub) != 0)
    rlock__open_progress(c, RLOCK_ECONN, "could not create a connection");
  rlock__watchdog_start(c);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  /* All handles are closed once uv_run returns after shutdown_loop. */
  uv_loop_close(&c->loop);
  free(c->heap);
  c->heap = NULL;
  rlock__client_release(c);
}

int rlock__loop_start(rlock_client *c) {
  if (uv_loop_init(&c->loop) != 0)
    return RLOCK_ESYS;
  c->loop.data = c;
  if (uv_async_init(&c->loop, &c->wakeup, wakeup_cb) != 0) {
    uv_loop_close(&c->loop);
    return RLOCK_ESYS;
  }
  c->wakeup.data = c;
  uv_timer_init(&c->loop, &c->heap_timer);
  c->heap_timer.data = c;
  c->heap_timer_at = -1;
  uv_timer_init(&c->loop, &c->watchdog_timer);
  c->watchdog_timer.data = c;
  uv_timer_init(&c->loop, &c->drain_timer);
  c->drain_timer.data = c;
  atomic_fetch_add(&c->refs, 1); /* the loop thread's own reference */
  if (uv_thread_create(&c->thread, loop_main, c) != 0) {
    atomic_fetch_sub(&c->refs, 1);
    uv_close((uv_handle_t *)&c->wakeup, NULL);
    uv_close((uv_handle_t *)&c->heap_timer, NULL);
    uv_close((uv_handle_t *)&c->watchdog_timer, NULL);
    uv_close((uv_handle_t *)&c->drain_timer, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    return RLOCK_ESYS;
  }
  c->thread_started = true;
  return 0;
}
