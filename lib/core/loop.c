/* The client's loop thread, the cross-thread task queue, the timer heap and
 * the skeleton of close (the order of what closes is the owner's, through
 * its hooks). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

int64_t rlock__now_ms(void) { return (int64_t)(uv_hrtime() / 1000000u); }

/* ---- timed events: a binary min-heap behind one uv_timer ----
 *
 * Every deadline in the client (command replies, waits, subscribe bounds,
 * retries, reconnects, renewal) is a heap entry, so 10 000 waiters cost
 * 10 000 heap slots rather than 10 000 libuv handles that each need an
 * asynchronous close before their memory may be reused. */

/* The heap is a complete binary tree linked through its entries (libuv's
 * timer heap has the same shape): the path to slot n (1-based) is n's bits
 * below the leading one, read from the top, 0 = left and 1 = right. */

static bool heap_less(const rlock__timed *a, const rlock__timed *b) {
  return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

/* Exchanges child and its parent in the tree (their links, not their
 * deadlines). */
static void heap_swap(rlock__core *core, rlock__timed *parent,
                      rlock__timed *child) {
  rlock__timed *sibling;
  rlock__timed *pl = parent->left, *pr = parent->right, *pp = parent->parent;
  parent->left = child->left;
  parent->right = child->right;
  parent->parent = child;
  if (pl == child) {
    child->left = parent;
    child->right = sibling = pr;
  } else {
    child->right = parent;
    child->left = sibling = pl;
  }
  child->parent = pp;
  if (sibling != NULL)
    sibling->parent = child;
  if (parent->left != NULL)
    parent->left->parent = parent;
  if (parent->right != NULL)
    parent->right->parent = parent;
  if (pp == NULL)
    core->heap_min = child;
  else if (pp->left == parent)
    pp->left = child;
  else
    pp->right = child;
}

/* The link that holds (or would hold) slot n, n >= 1. */
static rlock__timed **heap_slot(rlock__core *core, size_t n,
                                rlock__timed **parent) {
  size_t path = 0, k = 0;
  for (; n >= 2; k++, n /= 2)
    path = (path << 1) | (n & 1);
  rlock__timed **link = &core->heap_min;
  *parent = NULL;
  while (k-- > 0) {
    *parent = *link;
    link = (path & 1) ? &(*link)->right : &(*link)->left;
    path >>= 1;
  }
  return link;
}

/* The heap's invariant around t (debug builds): the entry's links agree
 * with its neighbours', no parent fires later than it, no child earlier. */
static void heap_check_at(const rlock__core *core, const rlock__timed *t) {
  (void)core, (void)t;
  assert(t->active);
  assert(t->parent != NULL ? (t->parent->left == t || t->parent->right == t)
                           : core->heap_min == t);
  assert(t->parent == NULL || !heap_less(t, t->parent));
  assert(t->left == NULL ||
         (t->left->parent == t && !heap_less(t->left, t)));
  assert(t->right == NULL ||
         (t->right->parent == t && !heap_less(t->right, t)));
}

static void heap_timer_cb(uv_timer_t *timer);

static void arm_timer(rlock__core *core) {
  if (core->heap_len == 0 || core->closing)
    return;
  int64_t at = core->heap_min->at;
  if (core->heap_timer_at >= 0 && core->heap_timer_at <= at)
    return;
  int64_t delay = at - rlock__now_ms();
  if (delay < 0)
    delay = 0;
  core->heap_timer_at = at;
  uv_timer_start(&core->heap_timer, heap_timer_cb, (uint64_t)delay, 0);
}

static void heap_timer_cb(uv_timer_t *timer) {
  rlock__core *core = timer->data;
  core->heap_timer_at = -1;
  int64_t now = rlock__now_ms();
  while (core->heap_len > 0 && core->heap_min->at <= now && !core->closing) {
    rlock__timed *t = core->heap_min;
    rlock__timed_stop(core, t);
    t->fire(t);
  }
  arm_timer(core);
}

void rlock__timed_start(rlock__core *core, rlock__timed *t, int64_t at) {
  if (t->active)
    rlock__timed_stop(core, t);
  assert(t->fire != NULL);
  t->at = at;
  t->seq = core->heap_seq++;
  t->left = t->right = NULL;
  rlock__timed **link = heap_slot(core, core->heap_len + 1, &t->parent);
  *link = t;
  t->active = true;
  core->heap_len++;
  while (t->parent != NULL && heap_less(t, t->parent))
    heap_swap(core, t->parent, t);
  heap_check_at(core, t);
  arm_timer(core);
}

void rlock__timed_stop(rlock__core *core, rlock__timed *t) {
  if (!t->active)
    return;
  assert(core->heap_len > 0);
  t->active = false;
  /* Unlink the last slot's entry and put it where t was. */
  rlock__timed *unused;
  rlock__timed **last_link = heap_slot(core, core->heap_len, &unused);
  rlock__timed *last = *last_link;
  *last_link = NULL;
  core->heap_len--;
  if (last == t) {
    if (core->heap_min == t)
      core->heap_min = NULL;
    t->left = t->right = t->parent = NULL;
    return;
  }
  last->left = t->left;
  last->right = t->right;
  last->parent = t->parent;
  if (last->left != NULL)
    last->left->parent = last;
  if (last->right != NULL)
    last->right->parent = last;
  if (t->parent == NULL)
    core->heap_min = last;
  else if (t->parent->left == t)
    t->parent->left = last;
  else
    t->parent->right = last;
  t->left = t->right = t->parent = NULL;
  for (;;) {
    rlock__timed *m = last;
    if (last->left != NULL && heap_less(last->left, m))
      m = last->left;
    if (last->right != NULL && heap_less(last->right, m))
      m = last->right;
    if (m == last)
      break;
    heap_swap(core, last, m);
  }
  while (last->parent != NULL && heap_less(last, last->parent))
    heap_swap(core, last->parent, last);
  heap_check_at(core, last);
}

/* ---- the task queue ---- */

/* Bumped in every child of fork() (a pthread_atfork handler registered
 * once, with the first client): a client remembers the value it was opened
 * under, so the check on every call is one atomic read, not a getpid()
 * system call (glibc does not cache the pid; two calls per lock+unlock). */
static atomic_uint fork_generation;
static atomic_bool fork_hook_failed;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) { atomic_fetch_add(&fork_generation, 1); }

static void fork_hook_install(void) {
  /* Fails only without memory; getpid() stays the check's second half. */
  if (pthread_atfork(NULL, NULL, on_fork_child) != 0)
    atomic_store(&fork_hook_failed, true);
}

int rlock__core_fork_check(const rlock__core *core) {
  /* After fork() only the forking thread exists in the child: a task
   * queued there would never be served, and the queue's wake-up would go to
   * the parent's loop through the inherited eventfd. */
  if (atomic_load_explicit(&fork_generation, memory_order_relaxed) !=
      core->fork_generation)
    return RLOCK_EFORK;
  if (atomic_load_explicit(&fork_hook_failed, memory_order_relaxed))
    return getpid() == core->pid ? 0 : RLOCK_EFORK;
  return 0;
}

const char *rlock__core_submit_error(int rc) {
  return rc == RLOCK_EFORK
             ? "the client was opened by another process (this is a forked "
               "child): open a new client in the child"
             : "client is closed";
}

int rlock__core_submit(rlock__core *core, rlock__task *t) {
  if (rlock__core_fork_check(core) != 0)
    return RLOCK_EFORK;
  t->next = NULL;
  uv_mutex_lock(&core->queue_mutex);
  if (core->closed) {
    uv_mutex_unlock(&core->queue_mutex);
    return RLOCK_ECLOSED;
  }
  bool was_empty = core->queue_head == NULL;
  if (was_empty)
    core->queue_head = t;
  else
    core->queue_tail->next = t;
  core->queue_tail = t;
  /* Sent under the mutex: the loop thread closes the async handle only
   * after it has seen `closed` under this mutex, so no sender can touch a
   * closed handle. A non-empty queue already has a wake-up on its way. */
  if (was_empty)
    uv_async_send(&core->wakeup);
  uv_mutex_unlock(&core->queue_mutex);
  return 0;
}

void rlock__core_queue_each(rlock__core *core,
                            void (*fn)(rlock__task *t, void *arg), void *arg) {
  uv_mutex_lock(&core->queue_mutex);
  for (rlock__task *t = core->queue_head; t != NULL; t = t->next)
    fn(t, arg);
  uv_mutex_unlock(&core->queue_mutex);
}

bool rlock__core_on_loop_thread(const rlock__core *core) {
  if (!core->thread_started)
    return false;
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &core->thread) != 0;
}

/* ---- close ---- */

static void close_handle_cb(uv_handle_t *h) { (void)h; }

static void final_timer_cb(uv_timer_t *timer) {
  rlock__core *core = timer->data;
  if (core->final_done)
    return;
  core->final_done = true;
  uv_close((uv_handle_t *)&core->final_timer, close_handle_cb);
  core->on_final(core);
  /* Whatever is left in the heap belongs to records freed above. */
  core->heap_min = NULL;
  core->heap_len = 0;
  uv_close((uv_handle_t *)&core->heap_timer, close_handle_cb);
  uv_close((uv_handle_t *)&core->wakeup, close_handle_cb);
}

void rlock__core_final_in(rlock__core *core, int64_t delay_ms) {
  if (!core->closing || core->final_done)
    return;
  if (delay_ms < 0)
    final_timer_cb(&core->final_timer);
  else
    uv_timer_start(&core->final_timer, final_timer_cb, (uint64_t)delay_ms, 0);
}

static void wakeup_cb(uv_async_t *async) {
  rlock__core *core = async->data;
  uv_mutex_lock(&core->queue_mutex);
  rlock__task *t = core->queue_head;
  bool closed = core->closed;
  core->queue_head = core->queue_tail = NULL;
  uv_mutex_unlock(&core->queue_mutex);
  while (t != NULL) {
    rlock__task *next = t->next;
    if (core->closing || closed)
      t->reject(t, RLOCK_ECLOSED);
    else
      t->run(t);
    t = next;
  }
  if (closed && !core->closing) {
    core->closing = true;
    core->on_close(core);
  }
}

void rlock__core_request_close(rlock__core *core) {
  uv_mutex_lock(&core->queue_mutex);
  core->closed = true;
  uv_async_send(&core->wakeup);
  uv_mutex_unlock(&core->queue_mutex);
}

void rlock__core_join(rlock__core *core) {
  if (rlock__core_on_loop_thread(core)) {
    /* Closed from a callback: the loop winds down after this callback
     * returns; the thread cleans up after itself. */
    pthread_detach(core->thread);
  } else {
    uv_thread_join(&core->thread);
  }
}

/* ---- the loop thread ---- */

static void loop_main(void *arg) {
  rlock__core *core = arg;
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
  core->on_loop_start(core);
  uv_run(&core->loop, UV_RUN_DEFAULT);
  /* All handles are closed once uv_run returns after the final step. */
  uv_loop_close(&core->loop);
  rlock__core_unref(core);
}

int rlock__core_init(rlock__core *core, const rlock_options *opts) {
  memset(core, 0, sizeof(*core));
  atomic_init(&core->refs, 1);
  core->opts = *opts;
  pthread_once(&fork_hook_once, fork_hook_install);
  core->pid = (int)getpid();
  core->fork_generation = atomic_load(&fork_generation);
  core->heap_timer_at = -1;
  int rc = uv_mutex_init(&core->queue_mutex);
  if (rc != 0) {
    rlock__set_last_error("uv_mutex_init: %s", uv_strerror(rc));
    return RLOCK_ESYS;
  }
  return 0;
}

/* The first uv_loop_init() in a process also sets up libuv's process-wide
 * signal lock, a pipe, and libuv abort()s when that pipe cannot be made
 * (libuv 1.44, src/unix/signal.c): with one or two descriptors free, the
 * loop's epoll descriptor fits and the pipe does not, and the host dies
 * (issue 24). So until a first loop exists, opens are serialized here and
 * each first checks that the three descriptors libuv takes before it can
 * report a failure itself (epoll, then the pipe) can be had. Descriptors
 * are numbered lowest-free-first, so the ones just closed are what libuv
 * gets, unless another thread of the host opens files in the microseconds
 * between; opens of rlock itself cannot. Once the setup is done (it stays
 * for the process; fork's re-creation closes its old pipe first), loops
 * start without this. */
static pthread_mutex_t first_loop_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool first_loop_done;

static int reserve_fds_for_libuv(void) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return errno;
  int third = fcntl(p[0], F_DUPFD_CLOEXEC, 0);
  int err = third < 0 ? errno : 0;
  close(p[0]);
  close(p[1]);
  if (third >= 0)
    close(third);
  return err;
}

static int loop_init(uv_loop_t *loop) {
  if (atomic_load(&first_loop_done))
    return uv_loop_init(loop);
  pthread_mutex_lock(&first_loop_mutex);
  int rc;
  if (atomic_load(&first_loop_done)) {
    rc = uv_loop_init(loop);
  } else {
    int err = reserve_fds_for_libuv();
    if (err != 0) {
      pthread_mutex_unlock(&first_loop_mutex);
      rlock__set_last_error("cannot start the event loop: %s (libuv needs 3 "
                            "free file descriptors for its first loop in "
                            "a process)", strerror(err));
      return RLOCK_ESYS;
    }
    rc = uv_loop_init(loop);
    if (rc == 0)
      atomic_store(&first_loop_done, true);
  }
  pthread_mutex_unlock(&first_loop_mutex);
  if (rc != 0) {
    rlock__set_last_error("uv_loop_init: %s", uv_strerror(rc));
    return RLOCK_ESYS;
  }
  return 0;
}

int rlock__core_start(rlock__core *core) {
  int rc = loop_init(&core->loop);
  if (rc != 0)
    return rc; /* the last error is set */
  core->loop.data = core;
  rc = uv_async_init(&core->loop, &core->wakeup, wakeup_cb);
  if (rc != 0) {
    uv_loop_close(&core->loop);
    rlock__set_last_error("uv_async_init: %s", uv_strerror(rc));
    return RLOCK_ESYS;
  }
  core->wakeup.data = core;
  uv_timer_init(&core->loop, &core->heap_timer);
  core->heap_timer.data = core;
  uv_timer_init(&core->loop, &core->final_timer);
  core->final_timer.data = core;
  atomic_fetch_add(&core->refs, 1); /* the loop thread's own reference */
  rc = uv_thread_create(&core->thread, loop_main, core);
  if (rc != 0) {
    atomic_fetch_sub(&core->refs, 1);
    uv_close((uv_handle_t *)&core->wakeup, NULL);
    uv_close((uv_handle_t *)&core->heap_timer, NULL);
    uv_close((uv_handle_t *)&core->final_timer, NULL);
    uv_run(&core->loop, UV_RUN_DEFAULT);
    uv_loop_close(&core->loop);
    rlock__set_last_error("cannot start the loop thread: %s",
                          uv_strerror(rc));
    return RLOCK_ESYS;
  }
  core->thread_started = true;
  return 0;
}

void rlock__core_ref(rlock__core *core) { atomic_fetch_add(&core->refs, 1); }

void rlock__core_unref(rlock__core *core) {
  if (atomic_fetch_sub(&core->refs, 1) == 1)
    core->on_destroy(core);
}

void rlock__core_destroy(rlock__core *core) {
  uv_mutex_destroy(&core->queue_mutex);
}
