/* Operations: start, finish exactly once, cancel and interrupt; and the
 * two facades every public call goes through - blocking
 * (run and wait on a semaphore) and asynchronous (a callback on the loop
 * thread, with a reference-counted request handle). */
#include <assert.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* Leases up to ~34 years; beyond that a caller almost surely passed a
 * garbage value, and PEXPIRE arithmetic would overflow on the server. */
#define LEASE_MAX_MS (INT64_C(1) << 40)

/* ---- op bookkeeping ---- */

static void active_add(rlock__engine *e, rlock__op *op) {
  op->active_prev = NULL;
  op->active_next = e->active_head;
  if (e->active_head != NULL)
    e->active_head->active_prev = op;
  e->active_head = op;
}

static void active_remove(rlock__engine *e, rlock__op *op) {
  /* Only an op on the list leaves it (control ops never join it). */
  assert(op->active_prev != NULL ? op->active_prev->active_next == op
                                 : e->active_head == op);
  assert(op->active_next == NULL || op->active_next->active_prev == op);
  if (op->active_prev != NULL)
    op->active_prev->active_next = op->active_next;
  else
    e->active_head = op->active_next;
  if (op->active_next != NULL)
    op->active_next->active_prev = op->active_prev;
  op->active_prev = op->active_next = NULL;
}

void rlock__op_detail(rlock__op *op, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(op->detail, sizeof(op->detail), fmt, ap);
  va_end(ap);
}

void rlock__op_finish(rlock__op *op, int result) {
  /* Exactly once: every path that may race a finish (a reply, a timer, a
   * cancel, close) checks the state or lets go of its callback first. */
  assert(op->state != RLOCK__ST_DONE);
  assert(!op->type->control);
  if (op->state == RLOCK__ST_DONE)
    return;
  rlock__engine *e = op->engine;
  rlock__cmd_abandon(op->cmd);
  op->cmd = NULL;
  rlock__chan_leave(&op->waiter);
  rlock__timed_stop(e->core, &op->timer);
  active_remove(e, op);
  if (op->type->finish != NULL)
    op->type->finish(op, result);
  op->state = RLOCK__ST_DONE;
  op->result = result;
  if (result < 0 && op->detail[0] == '\0') {
    if (result == RLOCK_ETIMEDOUT)
      rlock__op_detail(op, "no reply from Redis within command_timeout_ms (%"
                           PRId64 " ms)", e->core->opts.command_timeout_ms);
    else
      rlock__op_detail(op, "%s", rlock_strerror(result));
  }
  if (result < 0 && e->on_event != NULL) {
    rlock__event ev = {.pub = {.type = (rlock_event_type)RLOCK__EV_FAILED,
                               .error = result}};
    rlock__engine_emit(e, &ev);
  }
  op->done(op); /* op may be gone after this (a blocking caller returned) */
  rlock__suspects_run(e);
}

bool rlock__op_failed(rlock__op *op, redisReply *reply, int err) {
  if (err != 0) {
    rlock__op_finish(op, err);
    return true;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    rlock__op_detail(op, "%.*s", (int)reply->len, reply->str);
    rlock__op_finish(op, rlock__reply_error(reply));
    return true;
  }
  return false;
}

void rlock__op_send(rlock__op *op, const rlock__script *script, int argc,
                    const char **argv, const size_t *lens, int retries,
                    rlock__reply_cb cb) {
  op->state = RLOCK__ST_CMD;
  op->cmd = rlock__cmd_send(op->engine->net, script, argc, argv, lens,
                            retries, cb, op);
  if (op->cmd == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
}

const char *rlock__engine_publish(const rlock__engine *e) {
  return rlock__net_publish(e->net);
}

/* ---- cancellation ---- */

/* Ends an active acquire with RLOCK_ECANCELED. A try or trim still in
 * flight may run on the server after all; the pair then becomes a suspect,
 * whose trim is sent right away - behind that command on the same
 * connection - so a cancelled acquire leaves no hold and no renewal. */
static void cancel_acquire(rlock__op *op) {
  if (op->cmd != NULL)
    rlock__suspect_add(op->engine, op->lock, op->owner);
  rlock__op_detail(op, "acquire of '%s' was canceled", op->lock->name);
  rlock__op_finish(op, RLOCK_ECANCELED);
}

static void start_cancel(rlock__op *op) {
  rlock__op *target = op->u.target;
  int count = 0;
  if (target->state != RLOCK__ST_DONE && target->state != RLOCK__ST_NEW) {
    cancel_acquire(target);
    count = 1;
  }
  op->result = count;
  op->state = RLOCK__ST_DONE;
  op->done(op);
}

/* Acquires still queued (e.g. started by the callback that interrupts)
 * end as soon as they start. Runs under the queue's lock. */
static void mark_queued(rlock__task *t, void *arg) {
  rlock__op *q = RLOCK__CONTAINER_OF(t, rlock__op, task);
  rlock__op *op = arg;
  if (q->type->acquires && q->owner_id == op->owner_id && !q->canceled &&
      q->engine == op->engine) {
    q->canceled = true;
    op->result++;
  }
}

static void start_interrupt(rlock__op *op) {
  rlock__engine *e = op->engine;
  op->result = 0;
  rlock__core_queue_each(e->core, mark_queued, op);
  /* Collect first: finishing an op (and the callbacks it runs, which may
   * cancel others) edits the active list. */
  size_t n = 0;
  for (rlock__op *a = e->active_head; a != NULL; a = a->active_next)
    if (a->type->acquires && a->owner_id == op->owner_id)
      n++;
  rlock__op **hit = n > 0 ? malloc(n * sizeof(*hit)) : NULL;
  if (hit != NULL) {
    size_t i = 0;
    for (rlock__op *a = e->active_head; a != NULL; a = a->active_next)
      if (a->type->acquires && a->owner_id == op->owner_id)
        hit[i++] = a;
    for (i = 0; i < n; i++)
      if (hit[i]->state != RLOCK__ST_DONE) /* a callback may have */
        cancel_acquire(hit[i]);
    free(hit);
  } else if (n > 0) {
    /* Out of memory: the first match from the head each time (only
     * finished ops leave the list, so this ends). */
    for (size_t i = 0; i < n; i++) {
      rlock__op *a = e->active_head;
      while (a != NULL &&
             !(a->type->acquires && a->owner_id == op->owner_id))
        a = a->active_next;
      if (a == NULL)
        break;
      cancel_acquire(a);
    }
  }
  op->result += (int)n;
  op->state = RLOCK__ST_DONE;
  op->done(op);
}

static const rlock__op_type cancel_type = {
    .name = "cancel", .start = start_cancel, .control = true};
static const rlock__op_type interrupt_type = {
    .name = "interrupt", .start = start_interrupt, .control = true};

/* ---- running ops on the loop thread ---- */

static void task_run(rlock__task *t) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, task);
  if (op->type->control) {
    op->type->start(op);
    return;
  }
  active_add(op->engine, op);
  op->started_ms = rlock__now_ms();
  if (op->canceled) {
    rlock__op_detail(op, "acquire of '%s' was canceled", op->lock->name);
    rlock__op_finish(op, RLOCK_ECANCELED);
    return;
  }
  op->type->start(op);
}

/* Queued when the client closed: never started. */
static void task_reject(rlock__task *t, int err) {
  rlock__op *op = RLOCK__CONTAINER_OF(t, rlock__op, task);
  op->result = err;
  op->state = RLOCK__ST_DONE;
  rlock__op_detail(op, "%s", rlock__core_submit_error(err));
  op->done(op);
}

static void waiter_unused(rlock__waiter *w) { (void)w; }
static void waiter_unused_failed(rlock__waiter *w, int err, const char *text,
                                 size_t len) {
  (void)w, (void)err, (void)text, (void)len;
}
/* Ops that never wait on a channel still carry a waiter (idle). */
static const rlock__waiter_ops no_waiting = {waiter_unused, waiter_unused,
                                             waiter_unused_failed};

static void op_base(rlock__op *op, rlock__engine *e,
                    const rlock__op_type *type) {
  memset(op, 0, sizeof(*op));
  op->task.run = task_run;
  op->task.reject = task_reject;
  op->type = type;
  op->engine = e;
  op->state = RLOCK__ST_NEW;
  op->wait_ms = -1;
  op->lease_ms = -1;
  op->waiter.ops = &no_waiting;
  /* The call's start: events' wait_ms, and an acquire's deadline
   * (rlock__op_set_wait), so a timed-out wait_ms is never below the wait. */
  op->called_ms = rlock__now_ms();
}

void rlock__op_init(rlock__op *op, rlock *lock, const rlock__op_type *type,
                    uint64_t owner) {
  op_base(op, lock->engine, type);
  op->lock = lock;
  op->owner_id = owner;
  const rlock__prim_hold *hold = lock->prim->hold;
  const char *suffix = hold != NULL ? hold->owner_suffix : NULL;
  /* "<client id>:<owner><suffix>", as snprintf would write it (cut at the
   * buffer's end), without printf on every call. */
  char digits[20];
  size_t nd = 0;
  do {
    digits[nd++] = (char)('0' + owner % 10);
    owner /= 10;
  } while (owner > 0);
  char *p = op->owner, *end = op->owner + sizeof(op->owner) - 1;
  for (const char *c = lock->engine->client_id; *c != '\0' && p < end; c++)
    *p++ = *c;
  if (p < end)
    *p++ = ':';
  while (nd > 0 && p < end)
    *p++ = digits[--nd];
  for (const char *c = suffix; c != NULL && *c != '\0' && p < end; c++)
    *p++ = *c;
  *p = '\0';
}

/* ---- argument checks ---- */

int rlock__bad_arg(const char *what) {
  rlock__set_last_error("%s", what);
  return RLOCK_EINVAL;
}

int rlock__check_lease(int64_t lease_ms) {
  if (lease_ms == 0)
    return rlock__bad_arg("lease_ms must be > 0, or < 0 for watchdog mode");
  if (lease_ms > LEASE_MAX_MS)
    return rlock__bad_arg("lease_ms is too large (max 2^40 ms)");
  return 0;
}

void rlock__op_set_wait(rlock__op *op, int64_t wait_ms, int64_t lease_ms) {
  /* A wait too long to add to the clock is as good as forever. */
  op->wait_ms = (wait_ms > LEASE_MAX_MS) ? -1 : wait_ms;
  op->lease_ms = lease_ms;
  if (op->wait_ms > 0)
    op->deadline = op->called_ms + op->wait_ms;
}

/* ---- blocking facade ---- */

/* What the caller is told: op->result, or 0 for any success of a type that
 * does something rather than answer a question. */
static int caller_result(const rlock__op *op) {
  return op->result > 0 && op->type->zero_on_success ? 0 : op->result;
}

static void sync_done(rlock__op *op) {
  rlock__wait_wake((rlock__wait *)op->data); /* op may be gone after this */
}

bool rlock__op_blocking(const rlock__op *op) { return op->done == sync_done; }

/* Runs op on the loop thread and waits for it (spin, then park: park.c);
 * the result, with the last error set from its detail. */
static int run_and_wait(rlock__engine *e, rlock__op *op) {
  rlock__wait wait;
  rlock__wait_init(&wait);
  op->done = sync_done;
  op->data = &wait;
  int rc = rlock__core_submit(e->core, &op->task);
  if (rc == 0) {
    rlock__wait_for(&e->parker, &wait);
    rc = caller_result(op);
  } else {
    snprintf(op->detail, sizeof(op->detail), "%s",
             rlock__core_submit_error(rc));
  }
  if (rc < 0)
    rlock__set_last_error("%s", op->detail[0] ? op->detail
                                              : rlock_strerror(rc));
  else
    rlock__clear_last_error();
  return rc;
}

int rlock__op_run_sync(rlock__op *op) {
  rlock__core *core = op->engine->core;
  if (rlock__core_on_loop_thread(core)) {
    rlock__set_last_error("blocking rlock call made on the client's loop "
                          "thread (e.g. inside a callback)");
    return RLOCK_EDEADLK;
  }
  /* The op holds a reference on its handle, as an async one does, so an
   * rlock_free() racing with a blocking call cannot free the handle under
   * the loop thread (e.g. a latch freed while other threads still await). */
  rlock *lock = op->lock;
  if (lock != NULL)
    atomic_fetch_add(&lock->refs, 1);
  int rc = run_and_wait(op->engine, op);
  if (lock != NULL)
    rlock__handle_release(lock);
  return rc;
}

static void noop_done(rlock__op *op) { (void)op; }

int rlock__engine_interrupt(rlock__engine *e, uint64_t owner) {
  rlock__op op;
  op_base(&op, e, &interrupt_type);
  op.owner_id = owner;
  if (rlock__core_on_loop_thread(e->core)) { /* from a callback: act here */
    op.done = noop_done;
    start_interrupt(&op);
    rlock__clear_last_error();
    return op.result;
  }
  return run_and_wait(e, &op);
}

/* ---- asynchronous facade ---- */

/* Two references: the caller's (rlock_req_free) and the loop's (dropped
 * after the callback), so rlock_req_cancel() never touches freed memory. The
 * op follows, as large as its kind's struct (rlock__req_new). */
struct rlock_req {
  atomic_int refs;
  rlock__async_cb cb;
  void *data;
  /* A kind's own request (rlock__req_custom_new): op[] holds its state,
   * not an op. NULL: an op. */
  const rlock__req_impl *impl;
  _Alignas(max_align_t) unsigned char op[];
};

static rlock__op *req_op(rlock_req *req) { return (rlock__op *)req->op; }

static rlock_req *req_of(rlock__op *op) {
  return (rlock_req *)((unsigned char *)op - offsetof(rlock_req, op));
}

static void req_release(rlock_req *req) {
  int was = atomic_fetch_sub(&req->refs, 1);
  assert(was >= 1);
  if (was != 1)
    return;
  if (req->impl != NULL) {
    req->impl->destroy(req->op);
    free(req);
    return;
  }
  rlock *lock = req_op(req)->lock;
  free(req);
  rlock__handle_release(lock);
}

void *rlock__req_custom_new(const rlock__req_impl *impl, size_t size) {
  rlock_req *req = calloc(1, sizeof(*req) + size);
  if (req == NULL) {
    rlock__set_last_error("out of memory");
    return NULL;
  }
  atomic_init(&req->refs, 1);
  req->impl = impl;
  return req->op;
}

rlock_req *rlock__req_custom_of(void *state) {
  return req_of((rlock__op *)state);
}

void rlock__req_custom_ref(void *state) {
  atomic_fetch_add(&req_of((rlock__op *)state)->refs, 1);
}

void rlock__req_custom_unref(void *state) {
  req_release(req_of((rlock__op *)state));
}

static void async_done(rlock__op *op) {
  rlock_req *req = req_of(op);
  /* Inside the callback, rlock_last_error() describes a failure. */
  if (op->result < 0)
    rlock__set_last_error("%s", op->detail[0] ? op->detail
                                              : rlock_strerror(op->result));
  else
    rlock__clear_last_error();
  if (req->cb != NULL)
    req->cb(caller_result(op), op->value, req->data);
  req_release(req);
}

rlock__op *rlock__req_new(rlock *lock, const rlock__op_type *type,
                          uint64_t owner, size_t op_size, rlock__async_cb cb,
                          void *data) {
  assert(op_size >= sizeof(rlock__op));
  rlock_req *req = malloc(sizeof(*req) + op_size);
  if (req == NULL) {
    rlock__set_last_error("out of memory");
    return NULL;
  }
  memset(req->op, 0, op_size);
  atomic_init(&req->refs, 1);
  req->impl = NULL;
  req->cb = cb;
  req->data = data;
  rlock__op *op = req_op(req);
  rlock__op_init(op, lock, type, owner);
  op->done = async_done;
  return op;
}

int rlock__req_submit(rlock__op *op, rlock_req **out) {
  rlock_req *req = req_of(op);
  rlock *lock = op->lock;
  if (out != NULL) {
    atomic_store(&req->refs, 2);
    *out = req;
  }
  atomic_fetch_add(&lock->refs, 1);
  int rc = rlock__core_submit(lock->engine->core, &op->task);
  if (rc != 0) {
    if (out != NULL)
      *out = NULL;
    atomic_fetch_sub(&lock->refs, 1);
    free(req);
    rlock__set_last_error("%s", rlock__core_submit_error(rc));
    return rc;
  }
  rlock__clear_last_error();
  return 0;
}

int rlock__op_submit_async(rlock *lock, const rlock__op_type *type,
                           uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                           rlock__async_cb cb, void *data, rlock_req **out) {
  if (out != NULL)
    *out = NULL;
  if (lock == NULL)
    return rlock__bad_arg("lock is NULL");
  if (type->acquires) {
    int rc = rlock__check_lease(lease_ms);
    if (rc != 0)
      return rc;
  }
  rlock__op *op =
      rlock__req_new(lock, type, owner, sizeof(rlock__op), cb, data);
  if (op == NULL)
    return RLOCK_ENOMEM;
  if (type->acquires)
    rlock__op_set_wait(op, wait_ms, lease_ms);
  return rlock__req_submit(op, out);
}

static void cancel_done(rlock__op *op) {
  rlock_req *target = req_of(op->u.target);
  free(op);
  req_release(target);
}

int rlock_req_cancel(rlock_req *req) {
  if (req != NULL && req->impl != NULL) {
    if (req->impl->cancel == NULL)
      return rlock__bad_arg("rlock_req_cancel takes an acquire request");
    return req->impl->cancel(req->op);
  }
  if (req == NULL || !req_op(req)->type->acquires)
    return rlock__bad_arg("rlock_req_cancel takes an acquire request");
  rlock__op *target = req_op(req);
  rlock__engine *e = target->engine;
  if (rlock__core_on_loop_thread(e->core)) {
    if (target->state == RLOCK__ST_NEW)
      target->canceled = true; /* still queued: ends as soon as it starts */
    else if (target->state != RLOCK__ST_DONE)
      cancel_acquire(target);
    rlock__clear_last_error();
    return 0;
  }
  rlock__op *op = malloc(sizeof(*op));
  if (op == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  op_base(op, e, &cancel_type);
  op->u.target = target;
  op->done = cancel_done;
  atomic_fetch_add(&req->refs, 1); /* the target stays valid until then */
  int rc = rlock__core_submit(e->core, &op->task);
  if (rc != 0) {
    atomic_fetch_sub(&req->refs, 1);
    free(op);
    rlock__set_last_error("%s", rlock__core_submit_error(rc));
    return rc;
  }
  rlock__clear_last_error();
  return 0;
}

void rlock_req_free(rlock_req *req) {
  if (req != NULL)
    req_release(req);
}
