/* The permit-expirable semaphore (rlock_permit_semaphore_*; Redisson
 * getPermitExpirableSemaphore): the free count under the name, the zset
 * "{name}:timeout" of taken permit ids (16 raw bytes) scored by absolute
 * wall-clock expiry in ms (922337203685477: no lease), the channel
 * "redisson_sc:{name}" carrying the new count (docs/wire-protocol.md, "The
 * permit-expirable semaphore"). Against a real redis-server. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

TestSuite(psem, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 120);

#define NO_LEASE "922337203685477"

/* ---- helpers ---- */

static rlock_permit_semaphore *ps_get(rlock_client *c, const char *name) {
  rlock_permit_semaphore *s = NULL;
  int rc = rlock_permit_semaphore_new(c, name, &s);
  cr_assert_eq(rc, 0, "rlock_permit_semaphore_new: %s", rlock_err_name(rc));
  return s;
}

static void ps_names(const char *key, char *chan, size_t cn, char *zset,
                     size_t zn) {
  snprintf(chan, cn, "redisson_sc:{%s}", key);
  snprintf(zset, zn, "{%s}:timeout", key);
}

static int64_t wall_now(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void assert_id(const char *id) {
  cr_assert_eq(strlen(id), RLOCK_PERMIT_ID_LEN, "id '%s' length", id);
  for (size_t i = 0; i < RLOCK_PERMIT_ID_LEN; i++)
    cr_assert(isxdigit((unsigned char)id[i]) && !isupper((unsigned char)id[i]),
              "id '%s' is not lowercase hex", id);
}

static void hex_to_raw(const char *id, unsigned char raw[16]) {
  for (int i = 0; i < 16; i++) {
    unsigned v = 0;
    sscanf(id + 2 * i, "%2x", &v);
    raw[i] = (unsigned char)v;
  }
}

/* ZSCORE of the hex id's raw bytes; NULL when absent (caller frees). */
static char *zscore(const char *zset, const char *id) {
  unsigned char raw[16];
  hex_to_raw(id, raw);
  redisReply *r = rt_cmd("ZSCORE %s %b", zset, raw, (size_t)16);
  char *s = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
  freeReplyObject(r);
  return s;
}

static void assert_value(const char *key, const char *want) {
  char *v = rt_str("GET %s", key);
  cr_assert_not_null(v, "%s is missing, want %s", key, want);
  cr_assert_str_eq(v, want, "%s = %s, want %s", key, v, want);
  free(v);
}

static bool has_subscriber(void *channel) { return rt_numsub(channel) >= 1; }
static bool no_subscriber(void *channel) { return rt_numsub(channel) == 0; }

typedef struct acquirer {
  rlock_permit_semaphore *sem;
  int64_t wait_ms, lease_ms;
  char id[RLOCK_PERMIT_ID_LEN + 1];
  int64_t permits;                      /* > 1: try_acquire_n into ids */
  char (*ids)[RLOCK_PERMIT_ID_LEN + 1];
  atomic_int rc;
  atomic_bool done;
  _Atomic int64_t done_at;
  rt_thread thread;
} acquirer;

static void acquirer_run(void *arg) {
  acquirer *a = arg;
  int rc = a->permits > 1
               ? rlock_permit_semaphore_try_acquire_n(
                     a->sem, a->permits, a->wait_ms, a->lease_ms, a->ids)
               : rlock_permit_semaphore_try_acquire(a->sem, a->wait_ms,
                                                    a->lease_ms, a->id);
  atomic_store(&a->rc, rc);
  atomic_store(&a->done_at, rt_now_ms());
  atomic_store(&a->done, true);
}

static void acquirer_start_n(acquirer *a, rlock_permit_semaphore *s,
                             int64_t wait_ms, int64_t lease_ms,
                             int64_t permits,
                             char (*ids)[RLOCK_PERMIT_ID_LEN + 1]) {
  memset(a, 0, sizeof(*a));
  a->sem = s;
  a->wait_ms = wait_ms;
  a->lease_ms = lease_ms;
  a->permits = permits;
  a->ids = ids;
  atomic_init(&a->rc, -1000);
  rt_thread_start(&a->thread, acquirer_run, a);
}

static void acquirer_start(acquirer *a, rlock_permit_semaphore *s,
                           int64_t wait_ms, int64_t lease_ms) {
  acquirer_start_n(a, s, wait_ms, lease_ms, 1, NULL);
}

static bool acquirer_done(void *arg) {
  return atomic_load(&((acquirer *)arg)->done);
}

static rlock_client *client_30s(void) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 30000;
  return rt_client_opts(&o);
}

/* ---- tests ---- */

/* Two permits: two ids, then a third acquire waits and is woken by the
 * release's message (not by its 30 s re-check). */
Test(psem, ids_then_waiter_woken_by_release_message) {
  rlock_client *a = client_30s();
  rlock_client *b = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemwake");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *sa = ps_get(a, key);
  rlock_permit_semaphore *sb = ps_get(b, key);

  cr_assert_eq(rlock_permit_semaphore_try_set_permits(sb, 2), 1);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(sb, 5), 0);
  char id1[RLOCK_PERMIT_ID_LEN + 1], id2[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_acquire(sb, -1, id1), 0);
  cr_assert_eq(rlock_permit_semaphore_try_acquire(sb, 0, -1, id2), 1);
  assert_id(id1);
  assert_id(id2);
  cr_assert_str_neq(id1, id2);
  char id3[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(sb, 0, -1, id3), 0,
               "no third permit");
  cr_assert_eq(rlock_permit_semaphore_available_permits(sb), 0);
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(sb), 2);

  acquirer w;
  acquirer_start(&w, sa, 20000, -1);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rt_sleep_ms(200);
  cr_assert(!atomic_load(&w.done), "no permit: the waiter must wait");

  int64_t released_at = rt_now_ms();
  cr_assert_eq(rlock_permit_semaphore_release(sb, id1), 0);
  rt_wait_until_what(acquirer_done, &w, 2000, "waiter woken");
  rt_thread_join(&w.thread, 1000);
  cr_assert_eq(atomic_load(&w.rc), 1);
  int64_t took = atomic_load(&w.done_at) - released_at;
  cr_assert(took < 1000, "woken %lld ms after the release", (long long)took);
  assert_id(w.id);
  cr_assert_str_neq(w.id, id1);
  cr_assert_str_neq(w.id, id2);
  assert_value(key, "0");
  cr_assert_eq(rt_int("ZCARD %s", zset), 2);
  /* the released id is gone: releasing it again is not allowed */
  cr_assert_eq(rlock_permit_semaphore_release(sb, id1), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_permit_semaphore_release(sb, id2), 0);
  cr_assert_eq(rlock_permit_semaphore_release(sa, w.id), 0);
  assert_value(key, "2");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);

  rlock_permit_semaphore_free(sa);
  rlock_permit_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* A permit with a 500 ms lease comes back by itself: a waiter gets it
 * after about the lease, though nobody released it. */
Test(psem, leased_permit_returns_by_itself) {
  rlock_client *a = client_30s();
  rlock_client *b = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemlease");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *sa = ps_get(a, key);
  rlock_permit_semaphore *sb = ps_get(b, key);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(sb, 1), 1);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  int64_t taken_at = rt_now_ms();
  cr_assert_eq(rlock_permit_semaphore_try_acquire(sb, 0, 500, id), 1);

  acquirer w;
  acquirer_start(&w, sa, 10000, -1);
  rt_wait_until_what(acquirer_done, &w, 3000, "waiter got the permit");
  rt_thread_join(&w.thread, 1000);
  cr_assert_eq(atomic_load(&w.rc), 1);
  int64_t took = atomic_load(&w.done_at) - taken_at;
  cr_assert(took >= 450 && took < 1500, "got it %lld ms after the take",
            (long long)took);
  /* the expired id no longer counts as taken */
  cr_assert_eq(rlock_permit_semaphore_try_release(sb, id), 0);
  cr_assert_eq(rlock_permit_semaphore_release(sb, id), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(sb), 1);
  cr_assert_eq(rlock_permit_semaphore_release(sa, w.id), 0);
  cr_assert_eq(rlock_permit_semaphore_available_permits(sb), 1);

  /* available_permits alone reclaims an expired lease */
  cr_assert_eq(rlock_permit_semaphore_try_acquire(sb, 0, 200, id), 1);
  cr_assert_eq(rlock_permit_semaphore_available_permits(sb), 0);
  rt_sleep_ms(350);
  cr_assert_eq(rlock_permit_semaphore_available_permits(sb), 1);
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(sb), 0);

  rlock_permit_semaphore_free(sa);
  rlock_permit_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* A child process (own client) takes a permit with a lease and is
 * SIGKILLed: the permit comes back after the lease. */
Test(psem, killed_holder_permit_returns_after_lease) {
  char key[64];
  rt_key(key, sizeof key, "psemkill");
  rt_ok("OK", "SET %s 1", key);
  char *shared_id = mmap(NULL, 64, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(shared_id, MAP_FAILED);
  memset(shared_id, 0, 64);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    rlock_options o;
    rlock_options_init(&o);
    o.uri = rt_uri();
    rlock_client *c = NULL;
    if (rlock_client_new(&c, &o) != 0)
      _exit(2);
    rlock_permit_semaphore *s = NULL;
    if (rlock_permit_semaphore_new(c, key, &s) != 0)
      _exit(3);
    char id[RLOCK_PERMIT_ID_LEN + 1];
    if (rlock_permit_semaphore_try_acquire(s, 0, 1000, id) != 1)
      _exit(4);
    memcpy(shared_id, id, sizeof id);
    for (;;)
      pause();
  }
  int64_t until = rt_now_ms() + 10000;
  while (shared_id[0] == '\0' && rt_now_ms() < until) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      cr_assert_fail("child ended early (status %d)", status);
    rt_sleep_ms(5);
  }
  int64_t taken_at = rt_now_ms();
  kill(pid, SIGKILL);
  cr_assert(rt_reap_bounded(pid, 5000), "child reaped");
  cr_assert_neq(shared_id[0], '\0', "child took a permit");
  assert_value(key, "0");

  rlock_client *c = rt_client();
  rlock_permit_semaphore *s = ps_get(c, key);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, -1, id), 0,
               "still held right after the kill");
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 5000, -1, id), 1);
  int64_t took = rt_now_ms() - taken_at;
  cr_assert(took >= 700 && took < 3000, "back %lld ms after the take",
            (long long)took);
  cr_assert_str_neq(id, shared_id);
  cr_assert_eq(rlock_permit_semaphore_try_release(s, shared_id), 0);
  cr_assert_eq(rlock_permit_semaphore_release(s, id), 0);
  assert_value(key, "1");
  munmap(shared_id, 64);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* The zset holds the ids as 16 raw bytes, scored by absolute wall-clock
 * expiry (or the no-lease sentinel); update_lease rewrites the score. */
Test(psem, zset_layout_and_update_lease) {
  rlock_client *c = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemzset");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *s = ps_get(c, key);
  cr_assert_eq(rlock_permit_semaphore_add_permits(s, 3), 0);
  assert_value(key, "3");
  char leased[RLOCK_PERMIT_ID_LEN + 1], free_id[RLOCK_PERMIT_ID_LEN + 1];
  int64_t before = wall_now();
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, 60000, leased), 1);
  int64_t after = wall_now();
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, -1, free_id), 1);
  assert_value(key, "1");

  redisReply *r = rt_cmd("ZRANGE %s 0 -1", zset);
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  cr_assert_eq(r->elements, 2);
  for (size_t i = 0; i < r->elements; i++)
    cr_assert_eq(r->element[i]->len, 16, "member %zu is %zu bytes", i,
                 r->element[i]->len);
  freeReplyObject(r);

  char *sc = zscore(zset, leased);
  cr_assert_not_null(sc);
  long long score = atoll(sc);
  free(sc);
  cr_assert(score >= before + 60000 && score <= after + 60000,
            "score %lld not now+lease (%lld..%lld)", score,
            (long long)(before + 60000), (long long)(after + 60000));
  sc = zscore(zset, free_id);
  cr_assert_not_null(sc);
  cr_assert_str_eq(sc, NO_LEASE);
  free(sc);

  /* update_lease: no lease, then a short one that runs out */
  cr_assert_eq(rlock_permit_semaphore_update_lease(s, leased, -1), 1);
  sc = zscore(zset, leased);
  cr_assert_str_eq(sc, NO_LEASE);
  free(sc);
  cr_assert_eq(rlock_permit_semaphore_update_lease(s, free_id, 200), 1);
  sc = zscore(zset, free_id);
  long long s2 = atoll(sc);
  free(sc);
  cr_assert(s2 > wall_now() && s2 <= wall_now() + 200, "score %lld", s2);
  cr_assert_eq(rlock_permit_semaphore_update_lease(s, leased, 0),
               RLOCK_EINVAL);
  rt_sleep_ms(300);
  cr_assert_eq(rlock_permit_semaphore_update_lease(s, free_id, 5000), 0,
               "an expired permit is not renewed");
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(s), 1);
  cr_assert_eq(rlock_permit_semaphore_available_permits(s), 2);
  char unknown[] = "00112233445566778899aabbccddeeff";
  cr_assert_eq(rlock_permit_semaphore_update_lease(s, unknown, 5000), 0);
  cr_assert_eq(rlock_permit_semaphore_release(s, leased), 0);
  assert_value(key, "3");

  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* Unknown and malformed ids: the right error, nothing changed. */
Test(psem, unknown_and_malformed_ids) {
  rlock_client *c = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psembad");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *s = ps_get(c, key);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 2), 1);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, -1, id), 1);

  const char *unknown = "0123456789abcdef0123456789abcdef";
  cr_assert_eq(rlock_permit_semaphore_release(s, unknown), RLOCK_ENOTOWNER);
  cr_assert_eq(rlock_permit_semaphore_try_release(s, unknown), 0);
  const char *bad[] = {"0123456789abcdef0123456789abcde",  /* 31 */
                       "0123456789abcdef0123456789abcdeg", /* non-hex */
                       "0123456789abcdef0123456789abcdef0", /* 33 */
                       "", NULL};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(rlock_permit_semaphore_release(s, bad[i]), RLOCK_EINVAL,
                 "release bad id %zu", i);
    cr_assert_eq(rlock_permit_semaphore_try_release(s, bad[i]), RLOCK_EINVAL);
    cr_assert_eq(rlock_permit_semaphore_update_lease(s, bad[i], 100),
                 RLOCK_EINVAL);
  }
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, 0, id), RLOCK_EINVAL);
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, -1, NULL),
               RLOCK_EINVAL);
  cr_assert_eq(rlock_permit_semaphore_add_permits(s, 0), RLOCK_EINVAL);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 0), RLOCK_EINVAL);
  assert_value(key, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 1);
  /* an uppercase id is the same permit */
  char up[RLOCK_PERMIT_ID_LEN + 1];
  for (int i = 0; i <= RLOCK_PERMIT_ID_LEN; i++)
    up[i] = (char)toupper((unsigned char)id[i]);
  cr_assert_eq(rlock_permit_semaphore_try_release(s, up), 1);
  assert_value(key, "2");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);

  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* State as Java writes it, by hand: a raw 16-byte id with a score; our
 * release of its hex form returns it and publishes the new count. */
Test(psem, java_shaped_state_by_hand) {
  rlock_client *c = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemjava");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *s = ps_get(c, key);
  const char *hex = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
  unsigned char raw[16];
  hex_to_raw(hex, raw);
  rt_ok("OK", "SET %s 0", key);
  redisReply *r = rt_cmd("ZADD %s %lld %b", zset,
                         (long long)(wall_now() + 60000), raw, (size_t)16);
  cr_assert_eq(r->integer, 1);
  freeReplyObject(r);
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(s), 1);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, -1, id), 0);

  redisContext *sub = rt_redis_new(3000);
  r = redisCommand(sub, "SUBSCRIBE %s", chan);
  freeReplyObject(r);
  cr_assert_eq(rlock_permit_semaphore_release(s, hex), 0);
  void *msg = NULL;
  cr_assert_eq(redisGetReply(sub, &msg), REDIS_OK, "release published");
  r = msg;
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  cr_assert_str_eq(r->element[2]->str, "1");
  freeReplyObject(r);
  redisFree(sub);
  assert_value(key, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, -1, id), 1);
  cr_assert_eq(rlock_permit_semaphore_release(s, id), 0);

  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
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

static const char *g_zset;
static bool zset_empty(void *arg) {
  (void)arg;
  return rt_int("ZCARD %s", g_zset) == 0;
}

Test(psem, async_cancel_and_close_leave_nothing) {
  rlock_client *a = rt_client();
  rlock_client *b = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemcancel");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  g_zset = zset;
  rlock_permit_semaphore *sa = ps_get(a, key);
  rlock_permit_semaphore *sb = ps_get(b, key);
  rt_ok("OK", "SET %s 0", key);

  /* async success: the id arrives with the callback */
  char id0[RLOCK_PERMIT_ID_LEN + 1] = {0};
  rec r0 = {0};
  rlock_req *req = NULL;
  cr_assert_eq(rlock_permit_semaphore_acquire_async(sa, 5000, -1, id0,
                                                    rec_cb, &r0, &req), 0);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  cr_assert_eq(rlock_permit_semaphore_add_permits(sb, 1), 0);
  rt_wait_until_what(rec_fired, &r0, 3000, "async acquire");
  cr_assert_eq(atomic_load(&r0.status), 1);
  rlock_req_free(req);
  assert_id(id0);
  cr_assert_eq(rlock_permit_semaphore_release(sb, id0), 0);

  /* cancel while asleep */
  rt_ok("OK", "SET %s 0", key);
  char id1[RLOCK_PERMIT_ID_LEN + 1] = {0};
  rec r1 = {0};
  cr_assert_eq(rlock_permit_semaphore_acquire_async(sa, -1, -1, id1, rec_cb,
                                                    &r1, &req), 0);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rt_sleep_ms(100);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until_what(rec_fired, &r1, 3000, "cancel callback");
  cr_assert_eq(atomic_load(&r1.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  rt_wait_until_what(no_subscriber, chan, 5000, "unsubscribed after cancel");
  cr_assert_eq(rlock_permit_semaphore_add_permits(sb, 1), 0);
  rt_sleep_ms(200);
  assert_value(key, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);
  cr_assert_eq(atomic_load(&r1.calls), 1, "exactly once");
  cr_assert_eq(id1[0], '\0', "no id handed out");

  /* cancel while the try is in flight (server paused): the try lands
   * after the cancel and takes the permit; the abandon behind it gives
   * it back */
  rec r2 = {0};
  rt_ok("OK", "CONFIG RESETSTAT");
  rt_ok("OK", "CLIENT PAUSE 400 ALL");
  cr_assert_eq(rlock_permit_semaphore_acquire_async(sa, -1, 60000, id1,
                                                    rec_cb, &r2, &req), 0);
  rt_sleep_ms(100);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until_what(rec_fired, &r2, 3000, "in-flight cancel callback");
  cr_assert_eq(atomic_load(&r2.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  rt_sleep_ms(500);
  rt_wait_until_what(zset_empty, NULL, 5000, "permit id given back");
  assert_value(key, "1");
  redisReply *st = rt_cmd("INFO commandstats");
  cr_assert_not_null(strstr(st->str, "cmdstat_zadd:calls=1,"),
                     "the try ran after the cancel");
  cr_assert_not_null(strstr(st->str, "cmdstat_zrem:calls=1,"),
                     "and the abandon removed its id");
  freeReplyObject(st);

  /* close while waiting */
  rt_ok("OK", "SET %s 0", key);
  rec r3 = {0};
  cr_assert_eq(rlock_permit_semaphore_acquire_async(sa, 20000, -1, id1,
                                                    rec_cb, &r3, NULL), 0);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rlock_permit_semaphore_free(sa);
  rlock_client_free(a);
  rt_wait_until_what(rec_fired, &r3, 3000, "close callback");
  cr_assert_eq(atomic_load(&r3.status), RLOCK_ECLOSED);
  rt_wait_until_what(no_subscriber, chan, 5000, "unsubscribed after close");
  assert_value(key, "0");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);

  rlock_permit_semaphore_free(sb);
  rlock_client_free(b);
}

/* A user that may not publish: a release (which must publish) and an
 * acquire that would reclaim an expired permit are refused with
 * RLOCK_ENOPERM and change nothing (an acquire with nothing to reclaim
 * publishes nothing and is allowed); a user that may not ZADD cannot take
 * a permit. */
Test(psem, acl_refusal_changes_nothing) {
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemacl");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rt_ok("OK", "ACL SETUSER psemnopub on >pspass ~* resetchannels +@all");
  rt_ok("OK", "ACL SETUSER psemnozadd on >pspass ~* &* +@all -zadd");
  char uri[128];
  snprintf(uri, sizeof uri, "redis://psemnopub:pspass@127.0.0.1:%d",
           rt_port());
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  rlock_client *c = NULL;
  cr_assert_eq(rlock_client_new(&c, &o), 0, "%s", rlock_last_error());
  rlock_client *ok = rt_client();
  rlock_permit_semaphore *s = ps_get(c, key);
  rlock_permit_semaphore *sok = ps_get(ok, key);
  cr_assert_eq(rlock_permit_semaphore_add_permits(sok, 2), 0);
  char id[RLOCK_PERMIT_ID_LEN + 1], id2[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(sok, 0, -1, id), 1);
  int rc = rlock_permit_semaphore_release(s, id);
  cr_assert_eq(rc, RLOCK_ENOPERM, "release: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  assert_value(key, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 1);
  /* with nothing to reclaim, taking a permit needs no publish */
  cr_assert_eq(rlock_permit_semaphore_try_acquire(s, 0, 100, id2), 1);
  assert_value(key, "0");
  cr_assert_eq(rt_int("ZCARD %s", zset), 2);
  rt_sleep_ms(200); /* id2's lease ran out: the next try must publish */
  char id3[RLOCK_PERMIT_ID_LEN + 1];
  rc = rlock_permit_semaphore_try_acquire(s, 0, -1, id3);
  cr_assert_eq(rc, RLOCK_ENOPERM, "acquire: %s", rlock_err_name(rc));
  assert_value(key, "0");
  cr_assert_eq(rt_int("ZCARD %s", zset), 2);
  cr_assert_eq(rlock_permit_semaphore_available_permits(sok), 1,
               "reclaimed by an allowed user");
  cr_assert_eq(rt_int("ZCARD %s", zset), 1);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);

  snprintf(uri, sizeof uri, "redis://psemnozadd:pspass@127.0.0.1:%d",
           rt_port());
  c = NULL;
  cr_assert_eq(rlock_client_new(&c, &o), 0, "%s", rlock_last_error());
  s = ps_get(c, key);
  rc = rlock_permit_semaphore_try_acquire(s, 0, -1, id2);
  cr_assert_eq(rc, RLOCK_ENOPERM, "acquire: %s", rlock_err_name(rc));
  assert_value(key, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 1);
  cr_assert_eq(rlock_permit_semaphore_release(s, id), 0, "ZREM is allowed");
  assert_value(key, "2");
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
  rlock_permit_semaphore_free(sok);
  rlock_client_free(ok);
  cr_assert_eq(rt_int("ACL DELUSER psemnopub psemnozadd"), 2);
}

/* ---- several permits at once (issue 29, item 3) ---- */

typedef char ps_id[RLOCK_PERMIT_ID_LEN + 1];

/* Subscribes a fresh connection to chan (3 s read timeout). */
static redisContext *ps_subscribe(const char *chan) {
  redisContext *sub = rt_redis_new(3000);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
  cr_assert_not_null(r, "SUBSCRIBE %s", chan);
  freeReplyObject(r);
  return sub;
}

/* The next message on sub is `want`. */
static void assert_message(redisContext *sub, const char *want,
                           const char *what) {
  void *msg = NULL;
  cr_assert_eq(redisGetReply(sub, &msg), REDIS_OK, "%s: no message", what);
  redisReply *r = msg;
  cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
  cr_assert_str_eq(r->element[2]->str, want, "%s: message %s, want %s", what,
                   r->element[2]->str, want);
  freeReplyObject(r);
}

/* n ids taken at once: distinct, each in the zset with one expiry, the
 * counts exact; a try for more than is free takes nothing; lease_time. */
Test(psem, several_permits_exact_values) {
  rlock_client *c = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemn");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *s = ps_get(c, key);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 5), 1);

  ps_id ids[3];
  memset(ids, 0, sizeof ids);
  int64_t before = wall_now();
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 3, 0, 60000, ids), 1);
  int64_t after = wall_now();
  for (int i = 0; i < 3; i++) {
    assert_id(ids[i]);
    for (int j = 0; j < i; j++)
      cr_assert_str_neq(ids[i], ids[j], "ids %d and %d are the same", i, j);
    char *sc = zscore(zset, ids[i]);
    cr_assert_not_null(sc, "id %d is not in the zset", i);
    long long score = atoll(sc);
    free(sc);
    cr_assert(score >= before + 60000 && score <= after + 60000,
              "id %d: score %lld not now+lease", i, score);
    int64_t left = 0;
    cr_assert_eq(rlock_permit_semaphore_lease_time(s, ids[i], &left), 0);
    cr_assert(left > 59000 && left <= 60000, "lease left %lld",
              (long long)left);
  }
  assert_value(key, "2");
  cr_assert_eq(rt_int("ZCARD %s", zset), 3);
  cr_assert_eq(rlock_permit_semaphore_available_permits(s), 2);
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(s), 3);
  cr_assert_eq(rlock_permit_semaphore_permits(s), 5);

  /* 3 more with 2 free: nothing taken, nothing written */
  ps_id more[3];
  memset(more, 0, sizeof more);
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 3, 0, -1, more), 0);
  cr_assert_eq(more[0][0], '\0', "no id handed out");
  assert_value(key, "2");
  cr_assert_eq(rt_int("ZCARD %s", zset), 3);

  /* the last 2, without lease */
  cr_assert_eq(rlock_permit_semaphore_acquire_n(s, 2, -1, more), 0);
  for (int i = 0; i < 2; i++) {
    char *sc = zscore(zset, more[i]);
    cr_assert_not_null(sc);
    cr_assert_str_eq(sc, NO_LEASE);
    free(sc);
    int64_t left = 0;
    cr_assert_eq(rlock_permit_semaphore_lease_time(s, more[i], &left), 0);
    cr_assert_eq(left, -1, "no lease: -1, got %lld", (long long)left);
  }
  cr_assert_str_neq(more[0], more[1]);
  assert_value(key, "0");
  cr_assert_eq(rlock_permit_semaphore_permits(s), 5);
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(s), 5);

  /* lease_time of an id not taken; of a malformed one */
  int64_t left = 12345;
  cr_assert_eq(rlock_permit_semaphore_lease_time(
                   s, "0123456789abcdef0123456789abcdef", &left),
               RLOCK_ENOTOWNER);
  cr_assert_eq(left, 12345, "left untouched on an error");
  cr_assert_eq(rlock_permit_semaphore_lease_time(s, "xyz", &left),
               RLOCK_EINVAL);
  cr_assert_eq(rlock_permit_semaphore_lease_time(s, ids[0], NULL),
               RLOCK_EINVAL);

  const char *all[5] = {ids[0], ids[1], ids[2], more[0], more[1]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, all, 5), 5);
  assert_value(key, "5");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);

  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* A release of a list is all or nothing: one unknown, expired or repeated
 * id and nothing is released (and nothing published); a good list
 * publishes the number released, not the new count. */
Test(psem, release_list_all_or_nothing) {
  rlock_client *c = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemrel");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *s = ps_get(c, key);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 6), 1);
  ps_id ids[3], short_id[1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 3, 0, -1, ids), 1);
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 1, 0, 150, short_id),
               1);
  assert_value(key, "2");
  redisContext *sub = ps_subscribe(chan);

  const char *unknown = "0123456789abcdef0123456789abcdef";
  const char *with_unknown[3] = {ids[0], ids[1], unknown};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, with_unknown, 3), 0);
  cr_assert_eq(rlock_permit_semaphore_release_n(s, with_unknown, 3),
               RLOCK_ENOTOWNER);
  const char *repeat[3] = {ids[0], ids[1], ids[0]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, repeat, 3),
               RLOCK_EINVAL);
  cr_assert_not_null(strstr(rlock_last_error(), "repeats"), "detail: %s",
                     rlock_last_error());
  const char *malformed[2] = {ids[0], "nothex"};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, malformed, 2),
               RLOCK_EINVAL);
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, with_unknown, 0),
               RLOCK_EINVAL);
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, NULL, 2),
               RLOCK_EINVAL);
  assert_value(key, "2");
  cr_assert_eq(rt_int("ZCARD %s", zset), 4);

  /* an expired id spoils the list too (its lease ran out: not held) */
  rt_sleep_ms(300);
  const char *with_expired[2] = {ids[2], short_id[0]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, with_expired, 2), 0);
  assert_value(key, "2");
  cr_assert_eq(rt_int("ZCARD %s", zset), 4, "nothing reclaimed either");

  /* the good list: 2 released, "2" published although the count is 5
   * after it (the expired permit is reclaimed first, publishing 3) */
  const char *good[2] = {ids[0], ids[1]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, good, 2), 2);
  assert_message(sub, "3", "the reclaim before the release");
  assert_message(sub, "2", "the list release");
  assert_value(key, "5");
  cr_assert_eq(rt_int("ZCARD %s", zset), 1);
  cr_assert_eq(rlock_permit_semaphore_release_n(s, good, 2), RLOCK_ENOTOWNER,
               "released already");
  const char *last[1] = {ids[2]};
  cr_assert_eq(rlock_permit_semaphore_release_n(s, last, 1), 0);
  assert_message(sub, "1", "the one-id list release");
  assert_value(key, "6");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);

  redisFree(sub);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* Bad counts: RLOCK_EINVAL, nothing sent; more than the pool has is Java's
 * behaviour: it waits and takes nothing. */
Test(psem, several_permits_bad_counts) {
  rlock_client *c = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psembadn");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *s = ps_get(c, key);
  ps_id ids[2];
  int64_t bad[] = {0, -1, RLOCK_PERMIT_IDS_MAX + 1, INT64_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, bad[i], 0, -1, ids),
                 RLOCK_EINVAL, "permits %lld", (long long)bad[i]);
    cr_assert_eq(rlock_permit_semaphore_acquire_n(s, bad[i], -1, ids),
                 RLOCK_EINVAL);
    rlock_req *req = (rlock_req *)1;
    cr_assert_eq(rlock_permit_semaphore_acquire_n_async(s, bad[i], 0, -1, ids,
                                                        rec_cb, NULL, &req),
                 RLOCK_EINVAL);
    cr_assert_null(req);
  }
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 2, 0, -1, NULL),
               RLOCK_EINVAL);
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 2, 0, 0, ids),
               RLOCK_EINVAL, "lease 0");
  cr_assert_eq(rlock_permit_semaphore_set_permits(s, -1), RLOCK_EINVAL);
  cr_assert_eq(rt_exists(key), 0, "nothing written");

  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 1), 1);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 2, 300, -1, ids), 0,
               "2 of a pool of 1: not within the wait");
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= 250, "gave up after %lld ms", (long long)took);
  assert_value(key, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 0);
  rt_wait_until_what(no_subscriber, chan, 5000, "unsubscribed");

  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* set_permits: creates; resizes by the difference (the free count may go
 * below 0 while more are taken than the new size); publishes the size. */
Test(psem, set_permits_and_get_permits) {
  rlock_client *c = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemset");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *s = ps_get(c, key);
  redisContext *sub = ps_subscribe(chan);
  cr_assert_eq(rlock_permit_semaphore_permits(s), 0, "no semaphore");

  cr_assert_eq(rlock_permit_semaphore_set_permits(s, 4), 0);
  assert_message(sub, "4", "set on a missing semaphore");
  assert_value(key, "4");
  ps_id ids[3];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 3, 0, -1, ids), 1);
  cr_assert_eq(rlock_permit_semaphore_permits(s), 4);

  cr_assert_eq(rlock_permit_semaphore_set_permits(s, 2), 0);
  assert_message(sub, "2", "shrunk");
  assert_value(key, "-1");
  cr_assert_eq(rlock_permit_semaphore_permits(s), 2);
  cr_assert_eq(rlock_permit_semaphore_available_permits(s), 0);
  cr_assert_eq(rlock_permit_semaphore_acquired_permits(s), 3);
  ps_id one[1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 1, 0, -1, one), 0);

  cr_assert_eq(rlock_permit_semaphore_set_permits(s, 7), 0);
  assert_message(sub, "7", "grown");
  assert_value(key, "4");
  cr_assert_eq(rlock_permit_semaphore_permits(s), 7);
  /* the same size again: nothing changes, nothing is published (the next
   * message is the release's) */
  cr_assert_eq(rlock_permit_semaphore_set_permits(s, 7), 0);
  const char *all[3] = {ids[0], ids[1], ids[2]};
  cr_assert_eq(rlock_permit_semaphore_release_n(s, all, 3), 0);
  assert_message(sub, "3", "the release, no message before it");
  assert_value(key, "7");

  /* not a number: the scripts refuse it (EKIND) and write nothing */
  rt_ok("OK", "SET %s notanumber", key);
  cr_assert_eq(rlock_permit_semaphore_set_permits(s, 3), RLOCK_EKIND);
  cr_assert_eq(rlock_permit_semaphore_permits(s), RLOCK_EKIND);
  char *v = rt_str("GET %s", key);
  cr_assert_str_eq(v, "notanumber");
  free(v);

  redisFree(sub);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
}

/* A waiter for 2 permits sleeps while only 1 is free and is woken by a
 * release of a list (whose message is the number released). */
Test(psem, waiter_for_several_woken_by_list_release) {
  rlock_client *a = client_30s();
  rlock_client *b = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemnwake");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  rlock_permit_semaphore *sa = ps_get(a, key);
  rlock_permit_semaphore *sb = ps_get(b, key);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(sb, 3), 1);
  ps_id held[2];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(sb, 2, 0, -1, held), 1);

  acquirer w;
  ps_id got[2];
  acquirer_start_n(&w, sa, 20000, 60000, 2, got);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rt_sleep_ms(200);
  cr_assert(!atomic_load(&w.done), "1 free of 2 wanted: must wait");
  assert_value(key, "1");

  int64_t released_at = rt_now_ms();
  const char *list[2] = {held[0], held[1]};
  cr_assert_eq(rlock_permit_semaphore_release_n(sb, list, 2), 0);
  rt_wait_until_what(acquirer_done, &w, 3000, "waiter woken");
  rt_thread_join(&w.thread, 1000);
  cr_assert_eq(atomic_load(&w.rc), 1);
  int64_t took = atomic_load(&w.done_at) - released_at;
  cr_assert(took < 1500, "woken %lld ms after the release", (long long)took);
  assert_id(got[0]);
  assert_id(got[1]);
  cr_assert_str_neq(got[0], got[1]);
  assert_value(key, "1");
  cr_assert_eq(rt_int("ZCARD %s", zset), 2);
  rt_wait_until_what(no_subscriber, chan, 5000, "unsubscribed");

  rlock_permit_semaphore_free(sa);
  rlock_permit_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* An async acquire of 3 cancelled while its try is in flight: the try
 * takes the 3 permits after the cancel, and the abandon behind it gives
 * every one back. */
Test(psem, several_permits_cancel_in_flight_gives_all_back) {
  rlock_client *a = rt_client();
  char key[64], chan[128], zset[128];
  rt_key(key, sizeof key, "psemncancel");
  ps_names(key, chan, sizeof chan, zset, sizeof zset);
  g_zset = zset;
  rlock_permit_semaphore *sa = ps_get(a, key);
  rt_ok("OK", "SET %s 3", key);

  /* async success hands out all 3 ids (and loads the script: the
   * cancelled try below must not meet NOSCRIPT) */
  ps_id ids[3];
  rlock_req *req = NULL;
  rec r2 = {0};
  cr_assert_eq(rlock_permit_semaphore_acquire_n_async(sa, 3, 1000, -1, ids,
                                                      rec_cb, &r2, &req), 0);
  rt_wait_until_what(rec_fired, &r2, 3000, "async acquire");
  cr_assert_eq(atomic_load(&r2.status), 1);
  rlock_req_free(req);
  for (int i = 0; i < 3; i++)
    assert_id(ids[i]);
  assert_value(key, "0");
  const char *all[3] = {ids[0], ids[1], ids[2]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(sa, all, 3), 3);
  assert_value(key, "3");

  /* cancel while the try is in flight (server paused) */
  memset(ids, 0, sizeof ids);
  rec r = {0};
  rt_ok("OK", "CONFIG RESETSTAT");
  rt_ok("OK", "CLIENT PAUSE 400 ALL");
  cr_assert_eq(rlock_permit_semaphore_acquire_n_async(sa, 3, -1, 60000, ids,
                                                      rec_cb, &r, &req), 0);
  rt_sleep_ms(100);
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until_what(rec_fired, &r, 3000, "cancel callback");
  cr_assert_eq(atomic_load(&r.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  rt_sleep_ms(500);
  rt_wait_until_what(zset_empty, NULL, 5000, "every id given back");
  assert_value(key, "3");
  redisReply *st = rt_cmd("INFO commandstats");
  cr_assert_not_null(strstr(st->str, "cmdstat_zadd:calls=3,"),
                     "the try took 3 permits after the cancel: %s", st->str);
  cr_assert_not_null(strstr(st->str, "cmdstat_zrem:calls=1,"),
                     "one abandon removed them");
  freeReplyObject(st);
  cr_assert_eq(ids[0][0], '\0', "no id handed out");
  cr_assert_eq(atomic_load(&r.calls), 1, "exactly once");

  rlock_permit_semaphore_free(sa);
  rlock_client_free(a);
}
