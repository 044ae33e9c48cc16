/* The count-down latch (rlock_latch_*; Redisson getCountDownLatch): a
 * decimal count under the plain name, no TTL; a count-down that reaches 0
 * deletes the key and publishes "0" on
 * "redisson_countdownlatch__channel__{name}" (braces always); try_set_count
 * and delete publish "1" (docs/wire-protocol.md, "The count-down latch"). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

TestSuite(latch, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

#define CHAN_PREFIX "redisson_countdownlatch__channel__"

static rlock_latch *latch(rlock_client *c, const char *name) {
  rlock_latch *l = NULL;
  int rc = rlock_latch_new(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_latch_new: %s", rlock_err_name(rc));
  return l;
}

static void chan_of(char *buf, size_t n, const char *name) {
  snprintf(buf, n, CHAN_PREFIX "{%s}", name);
}

/* Calls of a command since CONFIG RESETSTAT. */
static long long calls(const char *name) {
  char *info = rt_str("INFO commandstats");
  char needle[64];
  snprintf(needle, sizeof needle, "cmdstat_%s:calls=", name);
  const char *p = strstr(info, needle);
  long long n = p != NULL ? atoll(p + strlen(needle)) : 0;
  free(info);
  return n;
}

/* ---- a plain subscriber on one channel, to see what is published ---- */

static redisContext *sub_open(const char *channel) {
  redisContext *s = rt_redis_new(3000);
  redisReply *r = redisCommand(s, "SUBSCRIBE %s", channel);
  cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3,
            "SUBSCRIBE %s", channel);
  freeReplyObject(r);
  return s;
}

/* The next message must be `payload` on exactly `channel` (within 3 s). */
static void sub_expect(redisContext *s, const char *channel,
                       const char *payload) {
  redisReply *r = NULL;
  cr_assert_eq(redisGetReply(s, (void **)&r), REDIS_OK,
               "no message '%s' on %s", payload, channel);
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  cr_assert_str_eq(r->element[0]->str, "message");
  cr_assert_str_eq(r->element[1]->str, channel);
  cr_assert_str_eq(r->element[2]->str, payload, "payload on %s", channel);
  freeReplyObject(r);
}

/* Nothing was published since the last message: a PING sent now answers
 * behind anything already published to this subscriber. */
static void sub_expect_none(redisContext *s) {
  redisReply *r = NULL;
  cr_assert_eq(redisAppendCommand(s, "PING"), REDIS_OK);
  cr_assert_eq(redisGetReply(s, (void **)&r), REDIS_OK);
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements >= 1);
  cr_assert_str_eq(r->element[0]->str, "pong",
                   "a message came before the PONG: %s %s",
                   r->element[0]->str,
                   r->elements == 3 ? r->element[2]->str : "");
  freeReplyObject(r);
}

/* ---- async awaits ---- */

typedef struct await_rec {
  atomic_int status; /* 1000 while pending */
  atomic_llong at;   /* rt_now_ms() of the callback */
} await_rec;

static void await_rec_init(await_rec *a) {
  atomic_init(&a->status, 1000);
  atomic_init(&a->at, 0);
}

static void await_cb(int status, int64_t value, void *data) {
  (void)value;
  await_rec *a = data;
  atomic_store(&a->at, rt_now_ms());
  atomic_store(&a->status, status);
}

static bool await_done(void *arg) {
  return atomic_load(&((await_rec *)arg)->status) != 1000;
}

typedef struct numsub_arg {
  const char *channel;
  long long want;
} numsub_arg;

static bool numsub_is(void *arg) {
  numsub_arg *a = arg;
  return rt_numsub(a->channel) == a->want;
}

static void wait_numsub(const char *channel, long long want) {
  numsub_arg a = {channel, want};
  if (!rt_poll_until(numsub_is, &a, 5000))
    cr_assert_fail("PUBSUB NUMSUB %s: %lld, want %lld", channel,
                   rt_numsub(channel), want);
}

/* ---- three processes ---- */

#define PROCS 3
#define THREADS 2                    /* blocking awaiters per process */
#define AWAITERS (PROCS * (THREADS + 1)) /* + one async await each */
#define PARTY_WAIT_MS 20000

typedef struct party_shared {
  atomic_int count_set;      /* the parent set the count: await now */
  atomic_int ready[PROCS];   /* the process's awaiters have started */
  atomic_int go_down[PROCS]; /* count down once now */
  atomic_int down_rc[PROCS]; /* its result + 1000 when done */
  atomic_int released;       /* awaits that returned 1 */
  atomic_int wrong;          /* awaits that returned anything else */
  atomic_llong released_at[AWAITERS];
  atomic_int slot;
  atomic_int child_exit[PROCS];
} party_shared;

typedef struct party_thread {
  party_shared *sh;
  rlock_latch *l;
  int64_t wait_ms;
} party_thread;

static void party_note(party_shared *sh, int status) {
  int k = atomic_fetch_add(&sh->slot, 1);
  if (k < AWAITERS)
    atomic_store(&sh->released_at[k], rt_now_ms());
  if (status == 1)
    atomic_fetch_add(&sh->released, 1);
  else
    atomic_fetch_add(&sh->wrong, 1);
}

static bool until_flag(atomic_int *flag, int64_t bound_ms) {
  int64_t end = rt_now_ms() + bound_ms;
  while (atomic_load(flag) == 0) {
    if (rt_now_ms() > end)
      return false;
    rt_sleep_ms(2);
  }
  return true;
}

static void *party_await(void *arg) {
  party_thread *t = arg;
  party_note(t->sh, rlock_latch_await(t->l, t->wait_ms));
  return NULL;
}

static void party_async_cb(int status, int64_t value, void *data) {
  (void)value;
  party_note(data, status);
}


/* One process's awaiters: THREADS blocking threads (the first without a
 * limit) and one async await; counts down once when told. Used by the
 * children (never asserts) and the parent. Returns 0 when all went well. */
static int party_run(party_shared *sh, int me, const char *name,
                     rlock_client *c, pthread_t *tids, party_thread *ts) {
  rlock_latch *l = NULL;
  if (rlock_latch_new(c, name, &l) != 0)
    return 2;
  if (!until_flag(&sh->count_set, 20000))
    return 6;
  for (int i = 0; i < THREADS; i++) {
    ts[i] = (party_thread){sh, l, i == 0 ? -1 : PARTY_WAIT_MS};
    if (pthread_create(&tids[i], NULL, party_await, &ts[i]) != 0)
      return 3;
  }
  if (rlock_latch_await_async(l, PARTY_WAIT_MS, party_async_cb, sh, NULL) !=
      0)
    return 4;
  atomic_store(&sh->ready[me], 1);
  if (me != 0) { /* the parent counts down from the test body */
    if (!until_flag(&sh->go_down[me], 20000))
      return 5;
    atomic_store(&sh->down_rc[me], 1000 + rlock_latch_count_down(l));
  }
  rlock_latch_free(l);
  return 0;
}

static void party_child(party_shared *sh, int me, const char *name) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  rlock_client *c = NULL;
  if (rlock_client_new(&c, &o) != 0)
    _exit(2);
  pthread_t tids[THREADS];
  party_thread ts[THREADS];
  int rc = party_run(sh, me, name, c, tids, ts);
  if (rc != 0)
    _exit(rc);
  for (int i = 0; i < THREADS; i++)
    pthread_join(tids[i], NULL); /* bounded: PARTY_WAIT_MS, or the open */
  /* the async await's callback ran before close returns */
  int64_t end = rt_now_ms() + PARTY_WAIT_MS;
  while (atomic_load(&sh->released) + atomic_load(&sh->wrong) < AWAITERS &&
         rt_now_ms() < end)
    rt_sleep_ms(5);
  rlock_client_free(c);
  atomic_store(&sh->child_exit[me], 100);
  _exit(0);
}

static bool all_ready(void *arg) {
  party_shared *sh = arg;
  for (int p = 0; p < PROCS; p++)
    if (atomic_load(&sh->ready[p]) == 0)
      return false;
  return true;
}

static bool all_released(void *arg) {
  party_shared *sh = arg;
  return atomic_load(&sh->released) + atomic_load(&sh->wrong) >= AWAITERS;
}

/* Three processes, each with its own client and three awaiters (two
 * blocking threads, one async): a count of 3, counted down once by each
 * process. Nobody opens before the last count-down; all nine open within
 * ~1 s of it - by the "0" message (watchdog_timeout_ms stays 30 s). */
Test(latch, three_processes_open_on_last_count_down) {
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  party_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(sh != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(sh, 0, sizeof *sh);
  /* Fork before this process has a client. */
  pid_t kids[PROCS] = {0};
  for (int p = 1; p < PROCS; p++) {
    kids[p] = fork();
    cr_assert_geq(kids[p], 0, "fork: %s", strerror(errno));
    if (kids[p] == 0)
      party_child(sh, p, name);
  }
  rlock_client *c = rt_client();
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 3), 1);
  atomic_store(&sh->count_set, 1);
  pthread_t tids[THREADS];
  party_thread ts[THREADS];
  cr_assert_eq(party_run(sh, 0, name, c, tids, ts), 0);
  rt_wait_until_what(all_ready, sh, 10000, "every process started");
  /* one subscription per client, i.e. every process listens */
  wait_numsub(chan, PROCS);
  for (int p = 1; p < PROCS; p++) {
    atomic_store(&sh->go_down[p], 1);
    cr_assert(until_flag(&sh->down_rc[p], 5000), "child %d counted down",
              p);
    cr_assert_eq(atomic_load(&sh->down_rc[p]), 1000, "child %d: %d", p,
                 atomic_load(&sh->down_rc[p]) - 1000);
  }
  cr_assert_eq(rlock_latch_count(l), 1);
  char *v = rt_str("GET %s", name);
  cr_assert_str_eq(v, "1");
  free(v);
  rt_sleep_ms(200); /* a wrong early release would show now */
  cr_assert_eq(atomic_load(&sh->released) + atomic_load(&sh->wrong), 0,
               "an awaiter returned before the count reached 0");
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_latch_count_down(l), 0);
  rt_wait_until_what(all_released, sh, 3000, "every awaiter released");
  cr_assert_eq(atomic_load(&sh->wrong), 0);
  cr_assert_eq(atomic_load(&sh->released), AWAITERS);
  for (int k = 0; k < AWAITERS; k++) {
    int64_t dt = atomic_load(&sh->released_at[k]) - t0;
    cr_assert(dt >= 0 && dt < 1000, "awaiter %d released %lld ms after the "
              "last count-down", k, (long long)dt);
  }
  cr_assert_eq(rt_exists(name), 0, "the open latch leaves no key");
  for (int i = 0; i < THREADS; i++)
    pthread_join(tids[i], NULL);
  for (int p = 1; p < PROCS; p++) {
    bool reaped = rt_reap_bounded(kids[p], 10000);
    if (!reaped)
      kill(kids[p], SIGKILL);
    cr_assert(reaped, "child %d ended", p);
    cr_assert_eq(atomic_load(&sh->child_exit[p]), 100, "child %d", p);
  }
  rlock_latch_free(l);
  rlock_client_free(c);
  munmap(sh, sizeof *sh);
}

/* A closed latch: await(t) answers 0 at its deadline, not before and not
 * much after; await(0) reads once; an absent latch is open at once. */
Test(latch, await_times_out_at_deadline) {
  rlock_client *c = rt_client();
  char name[64];
  rt_key(name, sizeof name, "lt");
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_await(l, 0), 1, "no latch: open");
  cr_assert_eq(rlock_latch_await(l, 300), 1);
  cr_assert_eq(rlock_latch_try_set_count(l, 1), 1);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_latch_await(l, 0), 0);
  cr_assert_lt(rt_now_ms() - t0, 200);
  t0 = rt_now_ms();
  cr_assert_eq(rlock_latch_await(l, 300), 0);
  int64_t dt = rt_now_ms() - t0;
  cr_assert(dt >= 290 && dt < 800, "await(300) took %lld ms", (long long)dt);
  await_rec a;
  await_rec_init(&a);
  t0 = rt_now_ms();
  cr_assert_eq(rlock_latch_await_async(l, 400, await_cb, &a, NULL), 0);
  rt_wait_until(await_done, &a, 3000);
  cr_assert_eq(atomic_load(&a.status), 0);
  dt = atomic_load(&a.at) - t0;
  cr_assert(dt >= 390 && dt < 900, "async await(400) took %lld ms",
            (long long)dt);
  cr_assert_eq(rlock_latch_count(l), 1, "a timeout changes nothing");
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* The wire of a count to 0: "1" for the new count, nothing for a step that
 * leaves it above 0, then DEL and "0" - on the channel with braces added,
 * also around a name that has its own. */
static void count_to_zero_wire(const char *name) {
  rlock_client *c = rt_client();
  char chan[128];
  chan_of(chan, sizeof chan, name);
  redisContext *s = sub_open(chan);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 2), 1);
  sub_expect(s, chan, "1");
  char *v = rt_str("GET %s", name);
  cr_assert_str_eq(v, "2", "the count is a decimal string");
  free(v);
  char *type = rt_type(name);
  cr_assert_str_eq(type, "string");
  free(type);
  cr_assert_eq(rt_pttl(name), -1, "no TTL");
  cr_assert_eq(rlock_latch_count_down(l), 0);
  sub_expect_none(s);
  v = rt_str("GET %s", name);
  cr_assert_str_eq(v, "1");
  free(v);
  cr_assert_eq(rlock_latch_count(l), 1);
  cr_assert_eq(rlock_latch_count_down(l), 0);
  sub_expect(s, chan, "0");
  cr_assert_eq(rt_exists(name), 0, "count 0 deletes the key");
  cr_assert_eq(rlock_latch_count(l), 0);
  cr_assert_eq(rlock_latch_await(l, 0), 1);
  redisFree(s);
  rlock_latch_free(l);
  rlock_client_free(c);
}

Test(latch, count_down_to_zero_deletes_and_publishes_0) {
  char name[64];
  rt_key(name, sizeof name, "lt");
  count_to_zero_wire(name);
}

Test(latch, name_with_braces_still_gets_braces_on_channel) {
  count_to_zero_wire("a{t}b");
  /* the exact channel of the fact sheet */
  char chan[128];
  chan_of(chan, sizeof chan, "a{t}b");
  cr_assert_str_eq(chan, "redisson_countdownlatch__channel__{a{t}b}");
}

/* A second try_set_count finds the latch: 0, no message, the first count
 * stays. */
Test(latch, try_set_count_twice) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  redisContext *s = sub_open(chan);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 5), 1);
  sub_expect(s, chan, "1");
  cr_assert_eq(rlock_latch_try_set_count(l, 7), 0);
  sub_expect_none(s);
  cr_assert_eq(rlock_latch_count(l), 5);
  redisFree(s);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* delete: 1 and "1" when there was a latch, 0 and silence when not. Our
 * awaiters re-read on "1" and find the latch gone: open. */
Test(latch, delete_publishes_1_and_opens_our_awaiters) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  redisContext *s = sub_open(chan);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 3), 1);
  sub_expect(s, chan, "1");
  await_rec a;
  await_rec_init(&a);
  cr_assert_eq(rlock_latch_await_async(l, 20000, await_cb, &a, NULL), 0);
  wait_numsub(chan, 2); /* ours and the test's subscriber */
  rt_sleep_ms(100);
  cr_assert(!await_done(&a), "closed: still waiting");
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_latch_delete(l), 1);
  sub_expect(s, chan, "1");
  cr_assert_eq(rt_exists(name), 0);
  rt_wait_until(await_done, &a, 3000);
  cr_assert_eq(atomic_load(&a.status), 1);
  cr_assert_lt(atomic_load(&a.at) - t0, 1000);
  cr_assert_eq(rlock_latch_delete(l), 0);
  sub_expect_none(s);
  redisFree(s);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* A count-down of a latch that is not there: no "-1" key, no message. */
Test(latch, count_down_on_missing_key_leaves_no_key) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  redisContext *s = sub_open(chan);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_count_down(l), 0);
  cr_assert_eq(rt_exists(name), 0);
  sub_expect_none(s);
  cr_assert_eq(rlock_latch_count_down(l), 0);
  cr_assert_eq(rt_exists(name), 0);
  cr_assert_eq(rlock_latch_count(l), 0);
  redisFree(s);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* State written the way Java writes it (SET name 1), and Java's
 * count-down by hand (DECR, DEL, PUBLISH "0"): our awaiter (blocking and
 * async) opens on that message. */
typedef struct blocking_await {
  rlock_latch *l;
  int64_t wait_ms;
  atomic_int rc; /* 1000 while pending */
  atomic_llong at;
} blocking_await;

static void blocking_await_fn(void *arg) {
  blocking_await *b = arg;
  int rc = rlock_latch_await(b->l, b->wait_ms);
  atomic_store(&b->at, rt_now_ms());
  atomic_store(&b->rc, rc);
}

static bool blocking_done(void *arg) {
  return atomic_load(&((blocking_await *)arg)->rc) != 1000;
}

Test(latch, java_shaped_count_down_by_hand_opens_await) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  rt_ok("OK", "SET %s 1", name);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_count(l), 1);
  blocking_await b = {.l = l, .wait_ms = 20000};
  atomic_init(&b.rc, 1000);
  rt_thread t;
  rt_thread_start(&t, blocking_await_fn, &b);
  await_rec a;
  await_rec_init(&a);
  cr_assert_eq(rlock_latch_await_async(l, -1, await_cb, &a, NULL), 0);
  wait_numsub(chan, 1);
  rt_sleep_ms(150);
  cr_assert(!blocking_done(&b) && !await_done(&a), "closed: still waiting");
  cr_assert_eq(rt_int("DECR %s", name), 0);
  cr_assert_eq(rt_int("DEL %s", name), 1);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rt_int("PUBLISH %s 0", chan), 1, "one subscriber: ours");
  rt_wait_until(blocking_done, &b, 3000);
  rt_wait_until(await_done, &a, 3000);
  cr_assert_eq(atomic_load(&b.rc), 1);
  cr_assert_eq(atomic_load(&a.status), 1);
  cr_assert_lt(atomic_load(&b.at) - t0, 1000);
  cr_assert_lt(atomic_load(&a.at) - t0, 1000);
  rt_thread_join(&t, 3000);
  wait_numsub(chan, 0); /* the last awaiter out unsubscribes */
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* A "1" (a new count) or a stray payload does not open a closed latch. */
Test(latch, message_1_or_garbage_does_not_open) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 2), 1);
  await_rec a;
  await_rec_init(&a);
  cr_assert_eq(rlock_latch_await_async(l, 20000, await_cb, &a, NULL), 0);
  wait_numsub(chan, 1);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rt_int("PUBLISH %s 1", chan), 1);
  cr_assert_eq(rt_int("PUBLISH %s hello", chan), 1);
  cr_assert_eq(rt_int("PUBLISH %s 0", chan), 1, "a false '0': re-read");
  /* each "0"/"1" makes the awaiter re-read; the count says closed */
  int64_t end = rt_now_ms() + 2000;
  while (calls("get") < 2 && rt_now_ms() < end)
    rt_sleep_ms(5);
  cr_assert_geq(calls("get"), 1, "the awaiter re-read the count");
  rt_sleep_ms(100);
  cr_assert(!await_done(&a), "the count is 2: still closed");
  cr_assert_eq(rlock_latch_count_down(l), 0);
  cr_assert_eq(rlock_latch_count_down(l), 0);
  rt_wait_until(await_done, &a, 3000);
  cr_assert_eq(atomic_load(&a.status), 1);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* Cancel, and close, end an await and leave nothing subscribed. */
Test(latch, cancel_and_close_leave_nothing_subscribed) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 1), 1);
  await_rec a;
  await_rec_init(&a);
  rlock_req *req = NULL;
  cr_assert_eq(rlock_latch_await_async(l, -1, await_cb, &a, &req), 0);
  cr_assert_not_null(req);
  wait_numsub(chan, 1);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until(await_done, &a, 3000);
  cr_assert_eq(atomic_load(&a.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  wait_numsub(chan, 0);
  cr_assert_eq(rlock_latch_count(l), 1, "a cancel changes nothing");

  await_rec b;
  await_rec_init(&b);
  cr_assert_eq(rlock_latch_await_async(l, 30000, await_cb, &b, NULL), 0);
  wait_numsub(chan, 1);
  rlock_latch_free(l); /* the pending await keeps the handle alive */
  rlock_client_free(c);
  cr_assert(await_done(&b), "close fired the callback");
  cr_assert_eq(atomic_load(&b.status), RLOCK_ECLOSED);
  wait_numsub(chan, 0);
  char *v = rt_str("GET %s", name);
  cr_assert_str_eq(v, "1", "a close changes nothing");
  free(v);
}

/* Bad input: nothing is sent; the server's WRONGTYPE maps to its code. */
Test(latch, bad_input) {
  rlock_client *c = rt_client();
  char name[64];
  rt_key(name, sizeof name, "lt");
  rlock_latch *l = latch(c, name);
  rt_ok("OK", "CONFIG RESETSTAT");
  cr_assert_eq(rlock_latch_try_set_count(l, 0), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "count") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(rlock_latch_try_set_count(l, -3), RLOCK_EINVAL);
  cr_assert_eq(rlock_latch_try_set_count(NULL, 1), RLOCK_EINVAL);
  cr_assert_eq(rlock_latch_count_down(NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_latch_count(NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_latch_delete(NULL), RLOCK_EINVAL);
  cr_assert_eq(rlock_latch_await(NULL, 10), RLOCK_EINVAL);
  rlock_req *req = (rlock_req *)&name; /* must be reset to NULL */
  cr_assert_eq(rlock_latch_await_async(NULL, 10, await_cb, NULL, &req),
               RLOCK_EINVAL);
  cr_assert_null(req);
  rlock_latch_free(NULL);
  cr_assert_eq(calls("evalsha") + calls("eval") + calls("get"), 0,
               "bad input sends nothing");
  cr_assert_eq(rt_exists(name), 0);

  /* another type under the name */
  cr_assert_eq(rt_int("HSET %s f v", name), 1);
  cr_assert_eq(rlock_latch_count(l), RLOCK_EWRONGTYPE);
  cr_assert(strstr(rlock_last_error(), "WRONGTYPE") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(rlock_latch_await(l, 100), RLOCK_EWRONGTYPE);
  cr_assert_eq(rlock_latch_count_down(l), RLOCK_EWRONGTYPE);
  cr_assert_eq(rlock_latch_try_set_count(l, 2), 0, "the key exists");
  cr_assert_eq(rt_hlen(name), 1, "the hash is untouched");
  /* a string that is no count */
  rt_ok("OK", "SET %s abc", name);
  cr_assert_eq(rlock_latch_count(l), RLOCK_EPROTO);
  cr_assert_eq(rlock_latch_await(l, 100), RLOCK_EPROTO);
  cr_assert_lt(rlock_latch_count_down(l), 0);
  char *v = rt_str("GET %s", name);
  cr_assert_str_eq(v, "abc");
  free(v);
  /* a negative count written by hand reads as open */
  rt_ok("OK", "SET %s -4", name);
  cr_assert_eq(rlock_latch_count(l), 0);
  cr_assert_eq(rlock_latch_await(l, 100), 1);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* rlock_client_interrupt() of the awaiting thread ends a blocking await (its
 * owner is the thread id) with RLOCK_ECANCELED, leaving no subscription. */
typedef struct interrupt_await {
  rlock_latch *l;
  atomic_ullong tid;
  atomic_int rc; /* 1000 while pending */
} interrupt_await;

static void interrupt_await_fn(void *arg) {
  interrupt_await *w = arg;
  atomic_store(&w->tid, rlock_thread_id());
  atomic_store(&w->rc, rlock_latch_await(w->l, 20000));
}

static bool interrupt_done(void *arg) {
  return atomic_load(&((interrupt_await *)arg)->rc) != 1000;
}

Test(latch, interrupt_ends_blocking_await) {
  rlock_client *c = rt_client();
  char name[64], chan[128];
  rt_key(name, sizeof name, "lt");
  chan_of(chan, sizeof chan, name);
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 1), 1);
  interrupt_await w = {.l = l};
  atomic_init(&w.tid, 0);
  atomic_init(&w.rc, 1000);
  rt_thread t;
  rt_thread_start(&t, interrupt_await_fn, &w);
  wait_numsub(chan, 1);
  cr_assert_eq(rlock_client_interrupt(c, (uint64_t)atomic_load(&w.tid)), 1,
               "one acquire (the await) ended");
  rt_wait_until(interrupt_done, &w, 3000);
  cr_assert_eq(atomic_load(&w.rc), RLOCK_ECANCELED);
  rt_thread_join(&t, 3000);
  wait_numsub(chan, 0);
  cr_assert_eq(rlock_latch_count(l), 1);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* Makes the server sleep ms without waiting for it (on its own
 * connection; redisFree() it after the sleep). */
static redisContext *server_sleep(int ms) {
  redisContext *s = rt_redis_new(5000);
  char admin[64];
  cr_assert_eq(redisAppendCommand(s, rt_admin("DEBUG SLEEP %f", admin,
                                              sizeof admin),
                                  ms / 1000.0),
               REDIS_OK);
  int done = 0;
  while (!done)
    cr_assert_eq(redisBufferWrite(s, &done), REDIS_OK);
  return s;
}

/* A count-down whose reply is late is not re-sent (a second DECR would
 * count twice): the caller gets the timeout, the count went down once.
 * A get_count is a read and rides the stall out by re-sending. */
Test(latch, count_down_is_never_resent) {
  rlock_options o;
  rlock_options_init(&o);
  o.command_timeout_ms = 150;
  o.retry_attempts = 4;
  o.retry_interval_ms = 100;
  rlock_client *c = rt_client_opts(&o);
  char name[64];
  rt_key(name, sizeof name, "lt");
  rlock_latch *l = latch(c, name);
  cr_assert_eq(rlock_latch_try_set_count(l, 10), 1);
  /* loads the script: a NOSCRIPT answered after the timeout would not be
   * followed by its EVAL */
  cr_assert_eq(rlock_latch_count_down(l), 0);
  redisContext *s = server_sleep(700);
  rt_sleep_ms(50); /* the DEBUG SLEEP is running */
  int rc = rlock_latch_count_down(l);
  cr_assert_eq(rc, RLOCK_ETIMEDOUT, "%s", rlock_err_name(rc));
  cr_assert(strstr(rlock_last_error(), "may or may not") != NULL, "%s",
            rlock_last_error());
  redisReply *r = NULL;
  cr_assert_eq(redisGetReply(s, (void **)&r), REDIS_OK);
  freeReplyObject(r);
  redisFree(s);
  char *v = rt_str("GET %s", name);
  cr_assert_str_eq(v, "8", "counted down exactly once: %s", v);
  free(v);
  s = server_sleep(300);
  rt_sleep_ms(50);
  cr_assert_eq(rlock_latch_count(l), 8, "the read was re-sent");
  r = NULL;
  cr_assert_eq(redisGetReply(s, (void **)&r), REDIS_OK);
  freeReplyObject(r);
  redisFree(s);
  rlock_latch_free(l);
  rlock_client_free(c);
}
