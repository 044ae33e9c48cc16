/* async_uv: rlock's asynchronous API driven from an application's own libuv
 * event loop.
 *
 * The application runs its own uv_loop on its main thread; all of its state
 * (the workers below, the timeline) belongs to that loop and is touched only
 * there. rlock runs its callbacks on the client's loop thread instead, so a
 * callback here does nothing but package its result, queue it and wake the
 * application loop with a uv_async_t. The application loop then acts on the
 * result - the same hand-over rlock itself uses between user threads and
 * its loop thread.
 *
 * K logical workers - owners from rlock_owner_new(), not threads - each take
 * the lock, run a short "job" on the application loop (a uv_timer), and
 * release it, ROUNDS times, printing a timeline. Ctrl-C cancels the waits.
 *
 * Usage: async_uv [REDIS_URL [WORKERS [ROUNDS]]]
 *        (server: argv[1] if not "", else $REDIS_URL, else
 *        redis://127.0.0.1:6379)
 */
/* uv.h needs POSIX types (pthread_rwlock_t, ...) that plain C11 hides:
 * ask for them, so that `cc -std=c11` builds this file too. */
#define _POSIX_C_SOURCE 200809L
#include <rlock.h>
#include <uv.h>

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_WORKERS 16
#define LOCK_NAME "examples:async_uv"

typedef struct worker worker;

/* What an rlock callback hands to the application loop. */
typedef enum event_kind { EV_ACQUIRED, EV_RELEASED } event_kind;

typedef struct ticket { /* one per worker and kind: the callback's `data` */
  worker *w;
  event_kind kind;
} ticket;

typedef struct event {
  struct event *next;
  ticket *t;
  int status;
} event;

struct worker {
  int id;
  uint64_t owner; /* the lock owner: this worker, on whatever thread */
  int round;
  uint64_t want_at;  /* now_ns() when it asked for the lock */
  uv_timer_t job;    /* the critical section's work, on the app loop */
  rlock_req *req;    /* the pending acquire, for rlock_req_cancel() */
  ticket on_acquired, on_released;
  int done;
};

static struct {
  uv_loop_t *loop;
  rlock_client *client;
  rlock *lock;
  worker workers[MAX_WORKERS];
  int n_workers, rounds, active, errors;
  worker *inside; /* who holds the lock, as the app loop sees it */
  uint64_t t0; /* now_ns() at start */
  uv_signal_t sigint;

  /* The hand-over from rlock's loop thread to ours. */
  uv_async_t inbox_wakeup;
  uv_mutex_t inbox_mutex; /* guards the three fields below */
  event *inbox_head, *inbox_tail;
  int inbox_closed; /* inbox_wakeup is being closed: no more sends */
} app;

static void timeline(const worker *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static uint64_t now_ns(void) { return uv_hrtime(); }

static void timeline(const worker *w, const char *fmt, ...) {
  printf("[%7.1f ms] worker %d (owner %" PRIu64 ") ",
         (double)(now_ns() - app.t0) / 1e6, w->id, w->owner);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

/* ---- rlock's loop thread: hand results over, nothing else ---- */

/* Runs on the client's loop thread. It must not block and must not touch
 * the application's state; it queues the result and wakes our loop.
 * uv_async_send() is the one libuv call that is safe from another thread;
 * several sends may wake our loop only once, hence the queue. */
static void on_rlock_result(int status, int64_t value, void *data) {
  (void)value;
  event *ev = malloc(sizeof *ev);
  if (ev == NULL)
    abort(); /* an example: no graceful out-of-memory path */
  ev->next = NULL;
  ev->t = data;
  ev->status = status;
  uv_mutex_lock(&app.inbox_mutex);
  if (app.inbox_tail != NULL)
    app.inbox_tail->next = ev;
  else
    app.inbox_head = ev;
  app.inbox_tail = ev;
  /* Sent under the mutex: the app loop closes the handle only after
   * setting inbox_closed under this same mutex, so we never send to a
   * closed handle. */
  if (!app.inbox_closed)
    uv_async_send(&app.inbox_wakeup);
  uv_mutex_unlock(&app.inbox_mutex);
}

/* ---- the application loop ---- */

static void want_lock(worker *w);
static void worker_finished(worker *w);

static void job_done(uv_timer_t *timer) {
  worker *w = timer->data;
  timeline(w, "job done, releasing");
  app.inside = NULL;
  int rc = rlock_unlock_async(app.lock, w->owner, on_rlock_result,
                              &w->on_released, NULL);
  if (rc != 0) { /* the call failed: no callback will come */
    timeline(w, "cannot release: %s", rlock_err_name(rc));
    app.errors++;
    worker_finished(w);
  }
}

static void on_acquired(worker *w, int status) {
  w->req = NULL; /* rlock_req_free()d below: the acquire is over */
  if (status == RLOCK_ECANCELED) {
    timeline(w, "wait cancelled");
    worker_finished(w);
    return;
  }
  if (status != 1) {
    timeline(w, "acquire failed: %s", rlock_err_name(status));
    app.errors++;
    worker_finished(w);
    return;
  }
  if (app.inside != NULL) { /* cannot happen: the lock is exclusive */
    timeline(w, "acquired while worker %d is inside!", app.inside->id);
    app.errors++;
  }
  app.inside = w;
  uint64_t job_ms = 20 + (uint64_t)(w->id * 7 + w->round * 13) % 40;
  timeline(w, "acquired after %.1f ms; job of %" PRIu64 " ms",
           (double)(now_ns() - w->want_at) / 1e6, job_ms);
  uv_timer_start(&w->job, job_done, job_ms, 0);
}

static void on_released(worker *w, int status) {
  if (status != 1) {
    timeline(w, "release failed: %s", rlock_err_name(status));
    app.errors++;
    worker_finished(w);
    return;
  }
  timeline(w, "released (round %d/%d)", w->round, app.rounds);
  if (w->round < app.rounds && !uv_is_closing((uv_handle_t *)&app.sigint))
    want_lock(w);
  else
    worker_finished(w);
}

/* Drains the inbox: every result queued since the last wake-up. */
static void inbox_cb(uv_async_t *handle) {
  (void)handle;
  uv_mutex_lock(&app.inbox_mutex);
  event *ev = app.inbox_head;
  app.inbox_head = app.inbox_tail = NULL;
  uv_mutex_unlock(&app.inbox_mutex);
  while (ev != NULL) {
    event *next = ev->next;
    worker *w = ev->t->w;
    if (ev->t->kind == EV_ACQUIRED) {
      rlock_req_free(w->req);
      on_acquired(w, ev->status);
    } else {
      on_released(w, ev->status);
    }
    free(ev);
    ev = next;
  }
}

static void want_lock(worker *w) {
  w->round++;
  w->want_at = now_ns();
  timeline(w, "wants the lock (round %d/%d)", w->round, app.rounds);
  /* wait_ms -1: as long as it takes; lease -1: watchdog renewal. */
  int rc = rlock_lock_async(app.lock, w->owner, -1, -1, on_rlock_result,
                            &w->on_acquired, &w->req);
  if (rc != 0) {
    timeline(w, "cannot ask: %s (%s)", rlock_err_name(rc),
             rlock_last_error());
    app.errors++;
    worker_finished(w);
  }
}

static void worker_finished(worker *w) {
  if (w->done)
    return;
  w->done = 1;
  uv_close((uv_handle_t *)&w->job, NULL);
  if (--app.active > 0)
    return;
  /* Every callback has come in: close our handles and let uv_run end. */
  uv_mutex_lock(&app.inbox_mutex);
  app.inbox_closed = 1;
  uv_mutex_unlock(&app.inbox_mutex);
  uv_close((uv_handle_t *)&app.inbox_wakeup, NULL);
  if (!uv_is_closing((uv_handle_t *)&app.sigint))
    uv_close((uv_handle_t *)&app.sigint, NULL);
}

/* Ctrl-C: cancel every pending wait (rlock_req_cancel is thread-safe and its
 * callback still comes, with RLOCK_ECANCELED); jobs in progress finish and
 * release normally, and nobody starts another round. */
static void on_sigint(uv_signal_t *handle, int signum) {
  (void)signum;
  printf("-- interrupted: cancelling pending waits\n");
  uv_close((uv_handle_t *)handle, NULL);
  for (int i = 0; i < app.n_workers; i++)
    if (app.workers[i].req != NULL)
      rlock_req_cancel(app.workers[i].req);
}

int main(int argc, char **argv) {
  app.n_workers = argc > 2 ? atoi(argv[2]) : 4;
  app.rounds = argc > 3 ? atoi(argv[3]) : 2;
  if (app.n_workers < 1 || app.n_workers > MAX_WORKERS || app.rounds < 1) {
    fprintf(stderr, "usage: async_uv [REDIS_URL [WORKERS 1..%d [ROUNDS]]]\n",
            MAX_WORKERS);
    return 2;
  }
  rlock_options opts;
  rlock_options_init(&opts);
  /* NULL (no argument, or ""): $REDIS_URL, else redis://127.0.0.1:6379. */
  opts.uri = argc > 1 && argv[1][0] != '\0' ? argv[1] : NULL;
  int rc = rlock_client_new(&app.client, &opts);
  if (rc == 0)
    rc = rlock_new(app.client, LOCK_NAME, &app.lock);
  if (rc != 0) {
    fprintf(stderr, "async_uv: %s: %s\n", rlock_err_name(rc),
            rlock_last_error());
    rlock_client_free(app.client);
    return 1;
  }

  app.loop = uv_default_loop();
  uv_mutex_init(&app.inbox_mutex);
  uv_async_init(app.loop, &app.inbox_wakeup, inbox_cb);
  uv_signal_init(app.loop, &app.sigint);
  uv_signal_start(&app.sigint, on_sigint, SIGINT);
  app.t0 = now_ns();
  printf("%d workers x %d rounds on lock '%s' (client %s)\n", app.n_workers,
         app.rounds, LOCK_NAME, rlock_client_id(app.client));

  app.active = app.n_workers;
  for (int i = 0; i < app.n_workers; i++) {
    worker *w = &app.workers[i];
    w->id = i + 1;
    w->owner = rlock_owner_new();
    w->on_acquired = (ticket){w, EV_ACQUIRED};
    w->on_released = (ticket){w, EV_RELEASED};
    uv_timer_init(app.loop, &w->job);
    w->job.data = w;
  }
  for (int i = 0; i < app.n_workers; i++)
    want_lock(&app.workers[i]);

  uv_run(app.loop, UV_RUN_DEFAULT);

  /* Nothing of ours is pending any more: close the client. */
  rlock_free(app.lock);
  rlock_client_free(app.client);
  uv_loop_close(app.loop);
  uv_mutex_destroy(&app.inbox_mutex);
  printf("done: %d error(s)\n", app.errors);
  return app.errors == 0 ? 0 : 1;
}
