/* The semaphore (rlock_semaphore_*; Redisson getSemaphore): a string
 * counter of permits under the name, the channel "redisson_sc:{name}"
 * carrying the new total after every change that adds permits
 * (docs/wire-protocol.md, "The semaphore"). Against a real redis-server. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

TestSuite(semaphore, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 120);

/* ---- helpers ---- */

static rlock_semaphore *sem_get(rlock_client *c, const char *name) {
  rlock_semaphore *s = NULL;
  int rc = rlock_semaphore_new(c, name, &s);
  cr_assert_eq(rc, 0, "rlock_semaphore_new: %s", rlock_err_name(rc));
  return s;
}

static void sem_channel(char *buf, size_t n, const char *name) {
  if (strchr(name, '{') != NULL)
    snprintf(buf, n, "redisson_sc:%s", name);
  else
    snprintf(buf, n, "redisson_sc:{%s}", name);
}

static long long stat_calls(const char *cmd) {
  char *info = rt_str("INFO commandstats");
  char needle[64];
  snprintf(needle, sizeof needle, "cmdstat_%s:calls=", cmd);
  const char *p = strstr(info, needle);
  long long n = p != NULL ? atoll(p + strlen(needle)) : 0;
  free(info);
  return n;
}

/* EVALSHA + EVAL calls since the last CONFIG RESETSTAT. */
static long long script_calls(void) {
  return stat_calls("evalsha") + stat_calls("eval");
}

static void assert_value(const char *key, const char *want) {
  char *v = rt_str("GET %s", key);
  if (want == NULL)
    cr_assert_null(v, "%s should be missing, holds %s", key, v);
  else {
    cr_assert_not_null(v, "%s is missing, want %s", key, want);
    cr_assert_str_eq(v, want, "%s = %s, want %s", key, v, want);
  }
  free(v);
}

static bool has_subscriber(void *channel) { return rt_numsub(channel) >= 1; }
static bool no_subscriber(void *channel) { return rt_numsub(channel) == 0; }

/* A blocking acquire on its own thread. */
typedef struct acquirer {
  rlock_semaphore *sem;
  int64_t permits;
  int64_t wait_ms;
  atomic_int rc;
  atomic_bool done;
  _Atomic int64_t done_at;
  rt_thread thread;
} acquirer;

static void acquirer_run(void *arg) {
  acquirer *a = arg;
  int rc = rlock_semaphore_try_acquire(a->sem, a->permits, a->wait_ms);
  atomic_store(&a->rc, rc);
  atomic_store(&a->done_at, rt_now_ms());
  atomic_store(&a->done, true);
}

static void acquirer_start(acquirer *a, rlock_semaphore *s, int64_t permits,
                           int64_t wait_ms) {
  memset(a, 0, sizeof(*a));
  a->sem = s;
  a->permits = permits;
  a->wait_ms = wait_ms;
  atomic_init(&a->rc, -1000);
  rt_thread_start(&a->thread, acquirer_run, a);
}

static bool acquirer_done(void *arg) {
  return atomic_load(&((acquirer *)arg)->done);
}

/* Script calls no longer changing for quiet_ms: every waiter is asleep. */
static void wait_quiet(int64_t quiet_ms, int64_t bound_ms) {
  int64_t until = rt_now_ms() + bound_ms;
  long long last = script_calls();
  int64_t since = rt_now_ms();
  while (rt_now_ms() < until) {
    rt_sleep_ms(20);
    long long now = script_calls();
    if (now != last) {
      last = now;
      since = rt_now_ms();
    } else if (rt_now_ms() - since >= quiet_ms) {
      return;
    }
  }
  cr_assert_fail("script calls did not settle within %lld ms",
                 (long long)bound_ms);
}

/* ---- state and replies ---- */

Test(semaphore, counts_and_replies_on_the_plain_key) {
  rlock_client *c = rt_client();
  char key[64], key2[64];
  rt_key(key, sizeof key, "sem");
  rt_key(key2, sizeof key2, "semttl");
  rlock_semaphore *s = sem_get(c, key);

  cr_assert_eq(rlock_semaphore_available_permits(s), 0, "missing key = 0");
  cr_assert_eq(rlock_semaphore_drain_permits(s), 0);
  assert_value(key, NULL);

  cr_assert_eq(rlock_semaphore_try_set_permits(s, 3, 0), 1);
  cr_assert_eq(rlock_semaphore_try_set_permits(s, 7, 0), 0, "second set");
  assert_value(key, "3");
  cr_assert_eq(rt_pttl(key), -1);
  char *type = rt_type(key);
  cr_assert_str_eq(type, "string");
  free(type);

  cr_assert_eq(rlock_semaphore_acquire(s, 2), 0);
  assert_value(key, "1");
  cr_assert_eq(rlock_semaphore_try_acquire(s, 2, 0), 0, "only 1 left");
  assert_value(key, "1");
  cr_assert_eq(rlock_semaphore_try_acquire(s, 1, 0), 1);
  assert_value(key, "0");
  cr_assert_eq(rlock_semaphore_release(s, 2), 0);
  assert_value(key, "2");
  cr_assert_eq(rlock_semaphore_available_permits(s), 2);

  cr_assert_eq(rlock_semaphore_drain_permits(s), 2);
  assert_value(key, "0");
  cr_assert_eq(rlock_semaphore_drain_permits(s), 0);

  /* add_permits: negative allowed; a count below 0 means none available,
   * and a drain then changes nothing. */
  cr_assert_eq(rlock_semaphore_add_permits(s, -2), 0);
  assert_value(key, "-2");
  cr_assert_eq(rlock_semaphore_available_permits(s), 0);
  cr_assert_eq(rlock_semaphore_drain_permits(s), 0);
  assert_value(key, "-2");
  cr_assert_eq(rlock_semaphore_try_acquire(s, 1, 0), 0);
  cr_assert_eq(rlock_semaphore_add_permits(s, 5), 0);
  assert_value(key, "3");
  cr_assert_eq(rlock_semaphore_available_permits(s), 3);

  /* try_set with a TTL; add_permits drops it (as Java's SET), release
   * keeps it (as Java's INCRBY). */
  rlock_semaphore *t = sem_get(c, key2);
  cr_assert_eq(rlock_semaphore_try_set_permits(t, 4, 60000), 1);
  long long pttl = rt_pttl(key2);
  cr_assert(pttl > 50000 && pttl <= 60000, "pttl %lld", pttl);
  cr_assert_eq(rlock_semaphore_release(t, 1), 0);
  pttl = rt_pttl(key2);
  cr_assert(pttl > 50000 && pttl <= 60000, "release kept the TTL: %lld",
            pttl);
  cr_assert_eq(rlock_semaphore_add_permits(t, 1), 0);
  cr_assert_eq(rt_pttl(key2), -1);
  assert_value(key2, "6");

  rlock_semaphore_free(t);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* State as Java leaves it, written by hand: SET name 2, then acquire 2. */
Test(semaphore, java_shaped_state_by_hand) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "semj");
  rt_ok("OK", "SET %s 2", key);
  rlock_semaphore *s = sem_get(c, key);
  cr_assert_eq(rlock_semaphore_try_acquire(s, 2, 1000), 1);
  assert_value(key, "0");
  cr_assert_eq(rlock_semaphore_try_acquire(s, 1, 0), 0);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* ---- the wire: what is published, where ---- */

static redisReply *next_message(redisContext *sub) {
  redisReply *r = NULL;
  cr_assert_eq(redisGetReply(sub, (void **)&r), REDIS_OK,
               "no message within the read timeout");
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  return r;
}

static void expect_message(redisContext *sub, const char *channel,
                           const char *payload) {
  redisReply *r = next_message(sub);
  cr_assert_eq(r->elements, 4, "pmessage");
  cr_assert_str_eq(r->element[0]->str, "pmessage");
  cr_assert_str_eq(r->element[2]->str, channel);
  cr_assert_str_eq(r->element[3]->str, payload, "payload %s, want %s",
                   r->element[3]->str, payload);
  freeReplyObject(r);
}

Test(semaphore, every_addition_publishes_the_new_total) {
  rlock_client *c = rt_client();
  char key[64], braced[80], chan[128], bchan[128];
  rt_key(key, sizeof key, "semw");
  snprintf(braced, sizeof braced, "x{%s}y", key);
  sem_channel(chan, sizeof chan, key);
  sem_channel(bchan, sizeof bchan, braced);
  cr_assert(strstr(chan, "{") != NULL);

  redisContext *sub = rt_redis_new(3000);
  redisReply *r = redisCommand(sub, "PSUBSCRIBE redisson_sc:*");
  cr_assert_not_null(r);
  freeReplyObject(r);

  rlock_semaphore *s = sem_get(c, key);
  cr_assert_eq(rlock_semaphore_try_set_permits(s, 1, 0), 1);
  expect_message(sub, chan, "1");
  cr_assert_eq(rlock_semaphore_release(s, 1), 0);
  expect_message(sub, chan, "2"); /* the total, not the increment */
  cr_assert_eq(rlock_semaphore_add_permits(s, 5), 0);
  expect_message(sub, chan, "7");
  cr_assert_eq(rlock_semaphore_add_permits(s, -3), 0);
  expect_message(sub, chan, "4");
  /* acquire and drain publish nothing; the next message is the release */
  cr_assert_eq(rlock_semaphore_try_acquire(s, 1, 0), 1);
  cr_assert_eq(rlock_semaphore_drain_permits(s), 3);
  cr_assert_eq(rlock_semaphore_release(s, 3), 0);
  expect_message(sub, chan, "3");

  /* A name with braces keeps them: channel redisson_sc:x{...}y. */
  rlock_semaphore *b = sem_get(c, braced);
  cr_assert_eq(rlock_semaphore_release(b, 1), 0);
  expect_message(sub, bchan, "1");
  assert_value(braced, "1");

  redisFree(sub);
  rlock_semaphore_free(b);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* ---- waiting ---- */

/* A waiter sleeps on the channel and is woken by the release's message,
 * not by its watchdog_timeout_ms (30 s) re-check. */
Test(semaphore, waiter_woken_by_release_message) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 30000;
  rlock_client *a = rt_client_opts(&o);
  rlock_client *b = rt_client();
  char key[64], chan[128];
  rt_key(key, sizeof key, "semwake");
  sem_channel(chan, sizeof chan, key);
  rlock_semaphore *sa = sem_get(a, key);
  rlock_semaphore *sb = sem_get(b, key);

  acquirer w;
  acquirer_start(&w, sa, 1, 20000);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rt_sleep_ms(200);
  cr_assert(!atomic_load(&w.done), "no permit: the waiter must wait");

  int64_t released_at = rt_now_ms();
  cr_assert_eq(rlock_semaphore_release(sb, 1), 0);
  rt_wait_until_what(acquirer_done, &w, 2000, "waiter woken");
  rt_thread_join(&w.thread, 1000);
  cr_assert_eq(atomic_load(&w.rc), 1);
  int64_t took = atomic_load(&w.done_at) - released_at;
  cr_assert(took < 1000, "woken %lld ms after the release", (long long)took);
  assert_value(key, "0");
  /* the waiter unsubscribes after the linger */
  rt_wait_until_what(no_subscriber, chan, 5000, "unsubscribed");

  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* A message published by hand (as Java's release) wakes our waiter; "0"
 * and garbage wake nobody (no extra try is sent). */
Test(semaphore, hand_publish_wakes_and_garbage_does_not) {
  rlock_client *c = rt_client();
  char key[64], chan[128];
  rt_key(key, sizeof key, "semhand");
  sem_channel(chan, sizeof chan, key);
  rlock_semaphore *s = sem_get(c, key);

  acquirer w;
  acquirer_start(&w, s, 2, 20000);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  wait_quiet(300, 5000);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rt_int("PUBLISH %s 0", chan), 1);
  cr_assert_eq(rt_int("PUBLISH %s -4", chan), 1);
  cr_assert_eq(rt_int("PUBLISH %s abc", chan), 1);
  rt_sleep_ms(300);
  cr_assert_eq(script_calls(), 0, "0, negative and garbage wake nobody");
  cr_assert(!atomic_load(&w.done));

  /* Java's release: INCRBY + PUBLISH of the total. */
  rt_ok("OK", "SET %s 2", key);
  int64_t at = rt_now_ms();
  cr_assert_eq(rt_int("PUBLISH %s 2", chan), 1);
  rt_wait_until_what(acquirer_done, &w, 2000, "woken by the hand message");
  rt_thread_join(&w.thread, 1000);
  cr_assert_eq(atomic_load(&w.rc), 1);
  cr_assert(atomic_load(&w.done_at) - at < 1000);
  assert_value(key, "0");
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* Four local waiters; a release of one permit (total 1) wakes exactly one
 * of them - one try, not four. A release of three wakes the rest. */
Test(semaphore, release_of_one_wakes_one_local_waiter) {
  rlock_client *a = rt_client();
  rlock_client *b = rt_client();
  char key[64], chan[128];
  rt_key(key, sizeof key, "semherd");
  sem_channel(chan, sizeof chan, key);
  rlock_semaphore *sa = sem_get(a, key);
  rlock_semaphore *sb = sem_get(b, key);
  enum { N = 4 };
  acquirer w[N];
  for (int i = 0; i < N; i++)
    acquirer_start(&w[i], sa, 1, 30000);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiters subscribed");
  wait_quiet(400, 5000);
  cr_assert_eq(rt_numsub(chan), 1, "one subscription for the client");

  /* load the release script first: a NOSCRIPT answer would count */
  char warm[80];
  snprintf(warm, sizeof warm, "%s:warm", key);
  rlock_semaphore *sw = sem_get(b, warm);
  cr_assert_eq(rlock_semaphore_release(sw, 1), 0);
  rlock_semaphore_free(sw);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rlock_semaphore_release(sb, 1), 0);
  rt_sleep_ms(500);
  int done = 0;
  for (int i = 0; i < N; i++)
    done += atomic_load(&w[i].done) ? 1 : 0;
  cr_assert_eq(done, 1, "one permit, one waiter through (got %d)", done);
  cr_assert_eq(script_calls(), 2, "the release and exactly one try (got %lld)",
               script_calls());

  cr_assert_eq(rlock_semaphore_release(sb, 3), 0);
  for (int i = 0; i < N; i++) {
    rt_wait_until_what(acquirer_done, &w[i], 3000, "every waiter through");
    rt_thread_join(&w[i].thread, 1000);
    cr_assert_eq(atomic_load(&w[i].rc), 1);
  }
  assert_value(key, "0");
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

Test(semaphore, try_acquire_times_out_and_multi_permit_wait) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "semto");
  rlock_semaphore *s = sem_get(c, key);
  cr_assert_eq(rlock_semaphore_try_set_permits(s, 1, 0), 1);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_semaphore_try_acquire(s, 2, 300), 0);
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= 250 && took < 2000, "gave up after %lld ms",
            (long long)took);
  assert_value(key, "1");

  /* Waiting for 2 with 1 there: a release of 1 (total 2) lets it through. */
  acquirer w;
  acquirer_start(&w, s, 2, 10000);
  char chan[128];
  sem_channel(chan, sizeof chan, key);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rlock_client *b = rt_client();
  rlock_semaphore *sb = sem_get(b, key);
  cr_assert_eq(rlock_semaphore_release(sb, 1), 0);
  rt_wait_until_what(acquirer_done, &w, 2000, "waiter for 2 through");
  rt_thread_join(&w.thread, 1000);
  cr_assert_eq(atomic_load(&w.rc), 1);
  assert_value(key, "0");
  rlock_semaphore_free(sb);
  rlock_client_free(b);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* ---- never over-issued: 3 processes x 4 threads, 3 permits ---- */

enum { PERMITS = 3, PROCS = 3, THREADS = 4, ROUNDS = 40 };

typedef struct shared {
  atomic_int holders;
  atomic_int max_holders;
  atomic_int violations;
  atomic_int acquired;
  atomic_int errors;
  atomic_int child_ok; /* children that ended well: under valgrind a
                          forked worker's exit status also counts
                          Criterion's own allocations */
} shared;

typedef struct worker {
  shared *sh;
  rlock_semaphore *sem;
} worker;

static void *worker_run(void *arg) {
  worker *wk = arg;
  shared *sh = wk->sh;
  for (int i = 0; i < ROUNDS; i++) {
    int rc = rlock_semaphore_try_acquire(wk->sem, 1, 30000);
    if (rc != 1) {
      atomic_fetch_add(&sh->errors, 1);
      continue;
    }
    int now = atomic_fetch_add(&sh->holders, 1) + 1;
    if (now > PERMITS)
      atomic_fetch_add(&sh->violations, 1);
    int seen = atomic_load(&sh->max_holders);
    while (now > seen &&
           !atomic_compare_exchange_weak(&sh->max_holders, &seen, now)) {
    }
    atomic_fetch_add(&sh->acquired, 1);
    usleep(1000 + (unsigned)(i % 3) * 500);
    atomic_fetch_sub(&sh->holders, 1);
    if (rlock_semaphore_release(wk->sem, 1) != 0)
      atomic_fetch_add(&sh->errors, 1);
  }
  return NULL;
}

/* A child: its own client, THREADS threads. Never asserts (exit code). */
static int child_main(shared *sh, const char *key) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  rlock_client *c = NULL;
  if (rlock_client_new(&c, &o) != 0)
    return 2;
  rlock_semaphore *s = NULL;
  if (rlock_semaphore_new(c, key, &s) != 0)
    return 3;
  pthread_t t[THREADS];
  worker wk = {sh, s};
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, worker_run, &wk) != 0)
      return 4;
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  rlock_semaphore_free(s);
  rlock_client_free(c);
  return 0;
}

Test(semaphore, permits_never_over_issued_across_processes, .timeout = 120) {
  char key[64];
  rt_key(key, sizeof key, "semstress");
  rt_ok("OK", "SET %s %d", key, PERMITS);
  shared *sh = mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    pids[p] = fork();
    cr_assert_neq(pids[p], -1);
    if (pids[p] == 0) {
      int rc = child_main(sh, key);
      if (rc == 0)
        atomic_fetch_add(&sh->child_ok, 1);
      _exit(rc);
    }
  }
  int64_t until = rt_now_ms() + 90000;
  for (int p = 0; p < PROCS; p++) {
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(pids[p], &status, WNOHANG)) == 0 &&
           rt_now_ms() < until)
      rt_sleep_ms(20);
    if (got == 0) {
      for (int q = 0; q < PROCS; q++)
        kill(pids[q], SIGKILL);
      cr_assert_fail("child %d did not finish within the bound", p);
    }
    cr_assert(WIFEXITED(status), "child %d failed (status %d)", p, status);
  }
  cr_assert_eq(atomic_load(&sh->child_ok), PROCS, "every child ended well");
  cr_assert_eq(atomic_load(&sh->errors), 0);
  cr_assert_eq(atomic_load(&sh->violations), 0, "more than %d holders",
               PERMITS);
  int max = atomic_load(&sh->max_holders);
  cr_assert(max > 1 && max <= PERMITS, "max concurrent holders %d", max);
  cr_assert_eq(atomic_load(&sh->acquired), PROCS * THREADS * ROUNDS);
  char want[8];
  snprintf(want, sizeof want, "%d", PERMITS);
  assert_value(key, want);
  munmap(sh, sizeof(*sh));
}

/* ---- cancel and close leave no permit taken and nothing subscribed ---- */

typedef struct rec {
  atomic_int calls;
  atomic_int status;
} rec;

static void rec_cb(int status, int64_t value, void *data) {
  (void)value;
  rec *r = data;
  atomic_store(&r->status, status);
  atomic_fetch_add(&r->calls, 1);
}

static bool rec_fired(void *arg) {
  return atomic_load(&((rec *)arg)->calls) > 0;
}

static bool no_take_records(void *arg) {
  (void)arg;
  redisReply *r = rt_cmd("KEYS rlock_semaphore_take:*");
  bool none = r->type == REDIS_REPLY_ARRAY && r->elements == 0;
  freeReplyObject(r);
  return none;
}

Test(semaphore, cancel_and_close_leave_nothing) {
  rlock_client *a = rt_client();
  rlock_client *b = rt_client();
  char key[64], chan[128];
  rt_key(key, sizeof key, "semcancel");
  sem_channel(chan, sizeof chan, key);
  rlock_semaphore *sa = sem_get(a, key);
  rlock_semaphore *sb = sem_get(b, key);

  /* cancel while asleep */
  rec r1 = {0};
  rlock_req *req = NULL;
  cr_assert_eq(rlock_semaphore_acquire_async(sa, 1, -1, rec_cb, &r1, &req),
               0);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until_what(rec_fired, &r1, 3000, "cancel callback");
  cr_assert_eq(atomic_load(&r1.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  rt_wait_until_what(no_subscriber, chan, 5000, "unsubscribed after cancel");
  cr_assert_eq(rlock_semaphore_release(sb, 1), 0);
  rt_sleep_ms(200);
  assert_value(key, "1"); /* nobody took the released permit */
  cr_assert_eq(atomic_load(&r1.calls), 1, "exactly once");

  /* cancel while the try is in flight (server paused): the try lands
   * after the cancel and takes the permit; the abandon behind it gives
   * the permit back */
  rec r2 = {0};
  rt_ok("OK", "CONFIG RESETSTAT");
  rt_ok("OK", "CLIENT PAUSE 400 ALL");
  cr_assert_eq(rlock_semaphore_acquire_async(sa, 1, -1, rec_cb, &r2, &req),
               0);
  rt_sleep_ms(100);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until_what(rec_fired, &r2, 3000, "in-flight cancel callback");
  cr_assert_eq(atomic_load(&r2.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  rt_wait_until_what(no_take_records, NULL, 5000, "take record given back");
  assert_value(key, "1");
  cr_assert_eq(stat_calls("decrby"), 1, "the try ran after the cancel");
  cr_assert_eq(stat_calls("incrby"), 1, "and the abandon gave it back");

  /* close while waiting for 2 */
  rec r3 = {0};
  cr_assert_eq(rlock_semaphore_acquire_async(sa, 2, 20000, rec_cb, &r3,
                                             NULL), 0);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rlock_semaphore_free(sa);
  rlock_client_free(a);
  rt_wait_until_what(rec_fired, &r3, 3000, "close callback");
  cr_assert_eq(atomic_load(&r3.status), RLOCK_ECLOSED);
  rt_wait_until_what(no_subscriber, chan, 5000, "unsubscribed after close");
  assert_value(key, "1");
  cr_assert(no_take_records(NULL));

  rlock_semaphore_free(sb);
  rlock_client_free(b);
}

/* ---- bad input: nothing is sent, nothing changes ---- */

Test(semaphore, bad_input_changes_nothing) {
  rlock_client *c = rt_client();
  char key[64], hkey[64];
  rt_key(key, sizeof key, "sembad");
  rt_key(hkey, sizeof hkey, "sembadh");
  rlock_semaphore *s = sem_get(c, key);
  const int64_t big = (INT64_C(1) << 40) + 1;
  rt_ok("OK", "SET %s 5", key);
  rt_ok("OK", "CONFIG RESETSTAT");

  const int64_t bad[] = {0, -1, INT64_MIN, big};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t n = bad[i];
    cr_assert_eq(rlock_semaphore_acquire(s, n), RLOCK_EINVAL);
    cr_assert(rlock_last_error()[0] != '\0', "detail for %lld", (long long)n);
    cr_assert_eq(rlock_semaphore_try_acquire(s, n, 0), RLOCK_EINVAL);
    cr_assert_eq(rlock_semaphore_release(s, n), RLOCK_EINVAL);
    cr_assert_eq(rlock_semaphore_try_set_permits(s, n, 0), RLOCK_EINVAL);
    rec r = {0};
    rlock_req *req = (rlock_req *)&r; /* must be reset to NULL */
    cr_assert_eq(rlock_semaphore_acquire_async(s, n, 0, rec_cb, &r, &req),
                 RLOCK_EINVAL);
    cr_assert_null(req);
  }
  cr_assert_eq(rlock_semaphore_add_permits(s, 0), RLOCK_EINVAL);
  cr_assert_eq(rlock_semaphore_add_permits(s, big), RLOCK_EINVAL);
  cr_assert_eq(rlock_semaphore_add_permits(s, -big), RLOCK_EINVAL);
  cr_assert_eq(rlock_semaphore_try_set_permits(s, 1, big), RLOCK_EINVAL);
  cr_assert_eq(rlock_semaphore_available_permits(NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_semaphore_release(NULL, 1), RLOCK_EINVAL);
  rlock *plain = rt_lock(c, key);
  cr_assert_eq(rlock_semaphore_release((rlock_semaphore *)plain, 1),
               RLOCK_EINVAL, "a lock handle is not a semaphore");
  rlock_free(plain);
  cr_assert_eq(script_calls(), 0, "nothing sent");
  cr_assert_eq(stat_calls("get"), 0);
  assert_value(key, "5");

  /* WRONGTYPE: the name holds a hash */
  cr_assert_eq(rt_int("HSET %s f v", hkey), 1);
  rlock_semaphore *h = sem_get(c, hkey);
  cr_assert_eq(rlock_semaphore_try_acquire(h, 1, 0), RLOCK_EWRONGTYPE);
  cr_assert(strstr(rlock_last_error(), "WRONGTYPE") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(rlock_semaphore_try_acquire(h, 1, 200), RLOCK_EWRONGTYPE);
  cr_assert_eq(rlock_semaphore_release(h, 1), RLOCK_EWRONGTYPE);
  cr_assert_eq(rlock_semaphore_add_permits(h, 1), RLOCK_EWRONGTYPE);
  cr_assert_eq(rlock_semaphore_drain_permits(h), RLOCK_EWRONGTYPE);
  cr_assert_eq(rlock_semaphore_available_permits(h), RLOCK_EWRONGTYPE);
  cr_assert_eq(rlock_semaphore_try_set_permits(h, 1, 0), 0, "it exists");
  cr_assert_eq(rt_hlen(hkey), 1);
  char *v = rt_hget(hkey, "f");
  cr_assert_str_eq(v, "v");
  free(v);
  char *htype = rt_type(hkey);
  cr_assert_str_eq(htype, "hash");
  free(htype);
  cr_assert_eq(stat_calls("publish"), 0, "nothing published");
  cr_assert(no_take_records(NULL));

  /* not a number: the try refuses (EKIND), INCRBY refuses (ESERVER) */
  rt_ok("OK", "SET %s notanumber", key);
  cr_assert_eq(rlock_semaphore_try_acquire(s, 1, 0), RLOCK_EKIND);
  cr_assert_lt(rlock_semaphore_release(s, 1), 0);
  cr_assert_eq(rlock_semaphore_available_permits(s), RLOCK_EPROTO);
  assert_value(key, "notanumber");
  cr_assert_eq(stat_calls("publish"), 0);

  rlock_semaphore_free(h);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* A semaphore, permit semaphore or latch handle passed to a lock call (cast
 * to rlock *) is refused before anything runs: a lock op carries no state
 * of those kinds, so running their scripts on it would read past the op. */
Test(semaphore, lock_calls_refuse_handles_of_other_kinds, .timeout = 30) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "semlockcall");
  rlock_semaphore *s = sem_get(c, key);
  rlock_permit_semaphore *p = NULL;
  cr_assert_eq(rlock_permit_semaphore_new(c, key, &p), 0);
  rlock_latch *l = NULL;
  cr_assert_eq(rlock_latch_new(c, key, &l), 0);
  rt_ok("OK", "SET %s 5", key);
  rt_ok("OK", "CONFIG RESETSTAT");

  rlock *handles[] = {(rlock *)s, (rlock *)p, (rlock *)l};
  for (size_t i = 0; i < sizeof handles / sizeof handles[0]; i++) {
    rlock *h = handles[i];
    cr_assert_eq(rlock_try_lock(h, 0, -1), RLOCK_EINVAL, "handle %zu", i);
    cr_assert(strstr(rlock_last_error(), "not a lock") != NULL, "%s",
              rlock_last_error());
    cr_assert_eq(rlock_lock(h, -1), RLOCK_EINVAL, "handle %zu", i);
    cr_assert_eq(rlock_try_lock(h, 100, 1000), RLOCK_EINVAL);
    cr_assert_eq(rlock_unlock(h), RLOCK_EINVAL, "handle %zu", i);
    cr_assert(strstr(rlock_last_error(), "not a lock") != NULL, "%s",
              rlock_last_error());
    rec r = {0};
    rlock_req *req = (rlock_req *)&r; /* must be reset to NULL */
    cr_assert_eq(rlock_lock_async(h, 7, 0, -1, rec_cb, &r, &req),
                 RLOCK_EINVAL);
    cr_assert_null(req);
    req = (rlock_req *)&r;
    cr_assert_eq(rlock_unlock_async(h, 7, rec_cb, &r, &req), RLOCK_EINVAL);
    cr_assert_null(req);
    cr_assert_eq(atomic_load(&r.calls), 0, "no callback after an error");
  }
  cr_assert_eq(script_calls(), 0, "nothing sent");
  assert_value(key, "5");

  rlock_latch_free(l);
  rlock_permit_semaphore_free(p);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* release_if_exists (Java releaseIfExists): a missing semaphore is left
 * missing and nothing is published; an existing one gets the permits and
 * the new total is published. 0 permits: 0 without a command (Java's). */
Test(semaphore, release_if_exists_missing_vs_existing) {
  rlock_client *c = rt_client();
  char key[64], chan[128];
  rt_key(key, sizeof key, "semifexists");
  snprintf(chan, sizeof chan, "redisson_sc:{%s}", key);
  rlock_semaphore *s = NULL;
  cr_assert_eq(rlock_semaphore_new(c, key, &s), 0);
  redisContext *sub = rt_redis_new(3000);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
  freeReplyObject(r);

  cr_assert_eq(rlock_semaphore_release_if_exists(s, 2), 0);
  cr_assert_eq(rt_exists(key), 0, "not created");
  cr_assert_eq(rlock_semaphore_release_if_exists(s, -1), RLOCK_EINVAL);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rlock_semaphore_release_if_exists(s, 0), 0);
  r = rt_cmd("INFO commandstats");
  cr_assert_null(strstr(r->str, "cmdstat_eval"), "0 permits sent nothing");
  freeReplyObject(r);

  cr_assert_eq(rlock_semaphore_try_set_permits(s, 1, 0), 1);
  cr_assert_eq(rlock_semaphore_release_if_exists(s, 2), 1);
  char *v = rt_str("GET %s", key);
  cr_assert_str_eq(v, "3");
  free(v);
  /* the first message is the try_set's "1": the missing case published
   * nothing; then the release's new total */
  const char *want[2] = {"1", "3"};
  for (int i = 0; i < 2; i++) {
    void *msg = NULL;
    cr_assert_eq(redisGetReply(sub, &msg), REDIS_OK, "message %d", i);
    r = msg;
    cr_assert_str_eq(r->element[2]->str, want[i]);
    freeReplyObject(r);
  }
  redisFree(sub);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}
