/* lib/core/loop.c alone: the task queue between any thread and the loop
 * thread. The sender that finds the queue empty wakes the loop; the others
 * rely on that wake-up, whether the loop was asleep or busy. A lost wake-up
 * leaves a task queued with the loop asleep: these tests would see it as a
 * task not run within a second. No server. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

typedef struct box {
  rlock__core core;
  sem_t destroyed;
} box;

static void on_loop_start(rlock__core *core) { (void)core; }
static void on_close(rlock__core *core) { rlock__core_final_in(core, 0); }
static void on_final(rlock__core *core) { (void)core; }
static void on_destroy(rlock__core *core) {
  box *b = RLOCK__CONTAINER_OF(core, box, core);
  sem_post(&b->destroyed);
}

static void box_open(box *b) {
  memset(b, 0, sizeof(*b));
  cr_assert_eq(sem_init(&b->destroyed, 0, 0), 0);
  rlock_options opts;
  rlock_options_init(&opts);
  cr_assert_eq(rlock__core_init(&b->core, &opts), 0);
  b->core.on_loop_start = on_loop_start;
  b->core.on_close = on_close;
  b->core.on_final = on_final;
  b->core.on_destroy = on_destroy;
  cr_assert_eq(rlock__core_start(&b->core), 0);
}

/* After rlock__core_request_close: the loop thread ends, then the core. */
static void box_finish(box *b) {
  rlock__core_join(&b->core);
  rlock__core_unref(&b->core); /* the owner's reference: on_destroy */
  cr_assert_eq(sem_wait(&b->destroyed), 0);
  rlock__core_destroy(&b->core);
  sem_destroy(&b->destroyed);
}

static void box_close(box *b) {
  rlock__core_request_close(&b->core);
  box_finish(b);
}

/* Waits for s at most ms milliseconds: false when it timed out. */
static bool sem_wait_ms(sem_t *s, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  int rc;
  while ((rc = sem_timedwait(s, &ts)) != 0 && errno == EINTR)
    ;
  return rc == 0;
}

typedef struct job {
  rlock__task task;
  sem_t done;
  box *b;
  atomic_int *ran;
  /* Queues `chain` more jobs from the loop thread before it is done. */
  int chain;
  struct job *next_in_chain;
} job;

static void job_run(rlock__task *t) {
  job *j = RLOCK__CONTAINER_OF(t, job, task);
  atomic_fetch_add(j->ran, 1);
  if (j->chain > 0 && j->next_in_chain != NULL) {
    j->next_in_chain->chain = j->chain - 1;
    cr_assert_eq(rlock__core_submit(&j->b->core, &j->next_in_chain->task), 0);
  }
  sem_post(&j->done);
}

static void job_reject(rlock__task *t, int err) {
  (void)err;
  job *j = RLOCK__CONTAINER_OF(t, job, task);
  sem_post(&j->done);
}

static void job_init(job *j, box *b, atomic_int *ran) {
  memset(j, 0, sizeof(*j));
  j->task.run = job_run;
  j->task.reject = job_reject;
  j->b = b;
  j->ran = ran;
  cr_assert_eq(sem_init(&j->done, 0, 0), 0);
}

#define THREADS 4
#define ROUNDS 5000
#define BURST 4

typedef struct sender {
  box *b;
  int rounds;
  atomic_int ran;
  int lost; /* a burst not run within a second */
} sender;

/* Valgrind (scripts/test --valgrind) runs threads one at a time, ~50x
 * slower: fewer rounds there. */
static bool under_valgrind(void) {
  const char *preload = getenv("LD_PRELOAD");
  return preload != NULL && strstr(preload, "vgpreload") != NULL;
}

/* Bursts of BURST jobs, waited for together: jobs queued while the loop
 * runs the first of a burst find it awake (no wake-up of their own), the
 * next burst finds it asleep or about to be. */
static void *send_bursts(void *arg) {
  sender *s = arg;
  job jobs[BURST];
  for (int i = 0; i < BURST; i++)
    job_init(&jobs[i], s->b, &s->ran);
  for (int r = 0; r < s->rounds && s->lost == 0; r++) {
    for (int i = 0; i < BURST; i++)
      cr_assert_eq(rlock__core_submit(&s->b->core, &jobs[i].task), 0);
    for (int i = 0; i < BURST; i++)
      if (!sem_wait_ms(&jobs[i].done, 1000))
        s->lost++;
  }
  for (int i = 0; i < BURST; i++)
    sem_destroy(&jobs[i].done);
  return NULL;
}

Test(core, every_task_runs_whether_the_loop_was_asleep_or_busy,
     .timeout = 120) {
  static box b;
  box_open(&b);
  static sender s[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) {
    s[i].b = &b;
    s[i].rounds = under_valgrind() ? ROUNDS / 20 : ROUNDS;
    atomic_init(&s[i].ran, 0);
    s[i].lost = 0;
    cr_assert_eq(pthread_create(&th[i], NULL, send_bursts, &s[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < THREADS; i++) {
    cr_assert_eq(s[i].lost, 0,
                 "sender %d: a burst waited over a second "
                 "(a lost wake-up)",
                 i);
    cr_assert_eq(atomic_load(&s[i].ran), s[i].rounds * BURST);
  }
  box_close(&b);
}

/* A task queued by a task, on the loop thread, runs in the same wake-up's
 * turns: the loop never sleeps on it. */
Test(core, a_task_queued_on_the_loop_thread_runs) {
  static box b;
  box_open(&b);
  atomic_int ran;
  atomic_init(&ran, 0);
  enum { CHAIN = 200 };
  static job jobs[CHAIN + 1];
  for (int i = 0; i <= CHAIN; i++)
    job_init(&jobs[i], &b, &ran);
  for (int i = 0; i < CHAIN; i++)
    jobs[i].next_in_chain = &jobs[i + 1];
  jobs[0].chain = CHAIN;
  cr_assert_eq(rlock__core_submit(&b.core, &jobs[0].task), 0);
  for (int i = 0; i <= CHAIN; i++)
    cr_assert(sem_wait_ms(&jobs[i].done, 1000),
              "job %d of the chain did "
              "not run within a second",
              i);
  cr_assert_eq(atomic_load(&ran), CHAIN + 1);
  for (int i = 0; i <= CHAIN; i++)
    sem_destroy(&jobs[i].done);
  box_close(&b);
}

/* After close, a submit is refused (the caller's task untouched). */
Test(core, a_closed_core_refuses_tasks) {
  static box b;
  box_open(&b);
  rlock__core_request_close(&b.core);
  atomic_int ran;
  atomic_init(&ran, 0);
  job j;
  job_init(&j, &b, &ran);
  cr_assert_eq(rlock__core_submit(&b.core, &j.task), RLOCK_ECLOSED);
  box_finish(&b);
  sem_destroy(&j.done);
  cr_assert_eq(atomic_load(&ran), 0);
}
