/* contend: THREADS threads of one process take turns on one lock, ROUNDS
 * times each, holding it HOLD_MS. Prints one line per event,
 *   <epoch-microseconds> <LABEL>.<thread> want|enter|leave <round>
 * so that scripts/demo can merge it with other processes' timelines.
 * Usage: contend URI NAME THREADS ROUNDS HOLD_MS LABEL */
/* nanosleep() and clock_gettime() are POSIX, not C11: ask for them, so
 * that `cc -std=c11` builds this file too. */
#define _POSIX_C_SOURCE 200809L
#include <rlock.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static rlock *lock;
static int rounds, hold_ms;
static const char *label;
static pthread_mutex_t out_mutex = PTHREAD_MUTEX_INITIALIZER;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void event(int thread, const char *what, int round) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* comparable across processes */
  pthread_mutex_lock(&out_mutex);
  printf("%lld%06ld %s.%d %s %d\n", (long long)ts.tv_sec, ts.tv_nsec / 1000,
         label, thread, what, round);
  fflush(stdout);
  pthread_mutex_unlock(&out_mutex);
}

static void *worker(void *arg) {
  int thread = (int)(intptr_t)arg;
  for (int round = 1; round <= rounds; round++) {
    event(thread, "want", round);
    int rc = rlock_lock(lock, -1); /* owner: <client-uuid>:<this thread> */
    if (rc != 0) {
      fprintf(stderr, "contend: %s: %s\n", rlock_err_name(rc),
              rlock_last_error());
      exit(1);
    }
    event(thread, "enter", round);
    sleep_ms(hold_ms); /* the critical section */
    event(thread, "leave", round);
    rlock_unlock(lock);
    sleep_ms((thread + round) % 4); /* a little time outside */
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: contend URI NAME THREADS ROUNDS HOLD_MS LABEL\n");
    return 2;
  }
  rlock_options opts;
  rlock_options_init(&opts);
  opts.uri = argv[1];
  int threads = atoi(argv[3]);
  rounds = atoi(argv[4]);
  hold_ms = atoi(argv[5]);
  label = argv[6];
  rlock_client *client; /* one client (two connections) for all threads */
  int rc = rlock_client_new(&client, &opts);
  if (rc == 0)
    rc = rlock_new(client, argv[2], &lock);
  if (rc != 0 || threads < 1 || threads > 64) {
    fprintf(stderr, "contend: %s: %s\n", rlock_err_name(rc),
            rlock_last_error());
    return 1;
  }
  pthread_t tids[64];
  for (int i = 0; i < threads; i++)
    pthread_create(&tids[i], NULL, worker, (void *)(intptr_t)(i + 1));
  for (int i = 0; i < threads; i++)
    pthread_join(tids[i], NULL);
  rlock_free(lock);
  rlock_client_free(client);
  return 0;
}
