/*
 * Client-level behaviour against a real redis-server: open/close, options
 * validation, connections seen by the server, failure when the server dies,
 * handle creation, closed-client behaviour, error strings, thread ids.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

TestSuite(client, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 60);

#define KEY_MAX 160
#define CHAN_MAX 256

/* A sentinel so tests can see that a failed open really wrote NULL. */
static int not_a_client;
#define SENTINEL ((rlock_client *)(void *)&not_a_client)

static void assert_uuid(const char *id) {
  cr_assert(id != NULL);
  cr_assert_eq(strlen(id), RLOCK_ID_LEN, "id \"%s\"", id);
  for (size_t i = 0; i < RLOCK_ID_LEN; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23)
      cr_assert_eq(id[i], '-', "id \"%s\": no '-' at %zu", id, i);
    else
      cr_assert(isxdigit((unsigned char)id[i]) &&
                    !isupper((unsigned char)id[i]),
                "id \"%s\": bad char at %zu", id, i);
  }
}

/* ---- open ---- */

Test(client, open_null_options_unreachable_is_econn) {
  int port = rt_free_port();
  cr_assert_gt(port, 0);
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  cr_assert_eq(setenv("REDIS_URL", url, 1), 0);

  rlock_client *c = SENTINEL;
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, NULL);
  int64_t elapsed = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ECONN, "open with REDIS_URL=%s: %s (%s)", url,
               rlock_err_name(rc), rlock_last_error());
  cr_assert_null(c, "*client must be NULL after a failed open");
  cr_assert_neq(rlock_last_error()[0], '\0', "no detail for ECONN");
  /* Refused on loopback is immediate; well under the default timeouts. */
  cr_assert_lt(elapsed, 5000, "failed open took %" PRId64 " ms", elapsed);
  unsetenv("REDIS_URL");
}

Test(client, open_null_options_uses_redis_url) {
  size_t before = rt_client_count();
  cr_assert_eq(setenv("REDIS_URL", rt_uri(), 1), 0);
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, NULL);
  unsetenv("REDIS_URL");
  cr_assert_eq(rc, 0, "%s (%s)", rlock_err_name(rc), rlock_last_error());
  cr_assert_not_null(c);
  /* It connected to our server, not to some default. */
  cr_assert_geq(rt_client_count(), before + 1);
  rlock_client_free(c);
}

/*
 * Issue 24: the first open in a process sets up libuv's process-wide
 * signal lock (a pipe), and libuv abort()s when that pipe cannot be made.
 * With 1 or 2 descriptors free the loop's own descriptor fitted and the
 * pipe did not: SIGABRT. Each case runs in a child forked from this test
 * process, which has opened no client, so its open is the process's first.
 * The child fills its descriptor table under a low limit, leaves `free_fds`
 * free, and must get RLOCK_ESYS with a detail; with the table emptied again
 * the same process then opens normally.
 */
static int open_with_free_fds(int free_fds) {
  alarm(20);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 90;
  rl.rlim_cur = 48;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 91;
  int fds[64], n = 0, fd;
  while (n < 64 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
    fds[n++] = fd;
  if (n == 64 || errno != EMFILE || n < free_fds)
    return 92;
  for (int i = 0; i < free_fds; i++)
    close(fds[--n]);
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  rlock_client *c = SENTINEL;
  int rc = rlock_client_new(&c, &o);
  if (rc != RLOCK_ESYS)
    return 100 + (rc < 0 ? -rc : 50);
  if (c != NULL)
    return 93;
  if (rlock_last_error()[0] == '\0')
    return 94;
  while (n > 0)
    close(fds[--n]);
  rc = rlock_client_new(&c, &o);
  if (rc != 0)
    return 95;
  rlock_client_free(c);
  return 0;
}

Test(client, open_with_few_fds_free_is_esys_not_abort) {
  for (int free_fds = 0; free_fds <= 3; free_fds++) {
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
      /* Ended by exec, as in the fork test above: under valgrind an
       * _exit() would report Criterion's heap as leaked (exit 1). */
      char code[12];
      snprintf(code, sizeof code, "%d", open_with_free_fds(free_fds));
      execl("/bin/sh", "sh", "-c", "exit \"$0\"", code, (char *)NULL);
      _exit(127);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(!WIFSIGNALED(status), "%d fd(s) free: the open killed its "
              "process with signal %d", free_fds,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    cr_assert_eq(WEXITSTATUS(status), 0, "%d fd(s) free: child check %d "
                 "failed (100 + -rc: the open's code was not ESYS)",
                 free_fds, WEXITSTATUS(status));
  }
}

Test(client, open_gives_distinct_uuids) {
  rlock_client *a = rt_client();
  rlock_client *b = rt_client();
  assert_uuid(rlock_client_id(a));
  assert_uuid(rlock_client_id(b));
  cr_assert_str_neq(rlock_client_id(a), rlock_client_id(b));
  /* Stable for the client's life. */
  char copy[RLOCK_ID_LEN + 1], key[KEY_MAX];
  snprintf(copy, sizeof copy, "%s", rlock_client_id(a));
  rt_key(key, sizeof key, "uuid-stable");
  rlock *lock = rt_lock(a, key);
  cr_assert_eq(rlock_lock(lock, -1), 0);
  cr_assert_str_eq(rlock_client_id(a), copy);
  cr_assert_eq(rlock_unlock(lock), 0);
  rlock_free(lock);
  rlock_client_free(a);
  rlock_client_free(b);
}

typedef struct bad_case {
  const char *what;
  int expect;
  void (*apply)(rlock_options *o);
} bad_case;

static void bad_watchdog_0(rlock_options *o) { o->watchdog_timeout_ms = 0; }
static void bad_watchdog_299(rlock_options *o) {
  o->watchdog_timeout_ms = 299;
}
static void bad_watchdog_big(rlock_options *o) {
  o->watchdog_timeout_ms = (int64_t)INT32_MAX + 1;
}
static void bad_cmd_timeout_neg(rlock_options *o) {
  o->command_timeout_ms = -1;
}
static void bad_cmd_timeout_9(rlock_options *o) { o->command_timeout_ms = 9; }
static void bad_sub_timeout_0(rlock_options *o) {
  o->subscribe_timeout_ms = 0;
}
static void bad_retry_neg(rlock_options *o) { o->retry_attempts = -1; }
static void bad_retry_101(rlock_options *o) { o->retry_attempts = 101; }
static void bad_interval_neg(rlock_options *o) { o->retry_interval_ms = -1; }
static void bad_name_empty(rlock_options *o) { o->client_name = ""; }
static void bad_name_space(rlock_options *o) { o->client_name = "has space"; }
static void bad_name_long(rlock_options *o) {
  o->client_name =
      "x123456789x123456789x123456789x123456789x123456789x123456789xxxxx";
}
static void bad_uri_scheme(rlock_options *o) {
  o->uri = "http://127.0.0.1:6379";
}
static void bad_uri_port(rlock_options *o) {
  o->uri = "redis://127.0.0.1:70000";
}
static void bad_uri_db(rlock_options *o) { o->uri = "redis://127.0.0.1:6379/x"; }
static void bad_uri_garbage(rlock_options *o) { o->uri = "not a uri"; }

Test(client, invalid_options_are_refused) {
  const bad_case cases[] = {
      {"watchdog 0", RLOCK_EINVAL, bad_watchdog_0},
      {"watchdog 299", RLOCK_EINVAL, bad_watchdog_299},
      {"watchdog 2^31", RLOCK_EINVAL, bad_watchdog_big},
      {"command_timeout -1", RLOCK_EINVAL, bad_cmd_timeout_neg},
      {"command_timeout 9", RLOCK_EINVAL, bad_cmd_timeout_9},
      {"subscribe_timeout 0", RLOCK_EINVAL, bad_sub_timeout_0},
      {"retry_attempts -1", RLOCK_EINVAL, bad_retry_neg},
      {"retry_attempts 101", RLOCK_EINVAL, bad_retry_101},
      {"retry_interval -1", RLOCK_EINVAL, bad_interval_neg},
      {"client_name empty", RLOCK_EINVAL, bad_name_empty},
      {"client_name with space", RLOCK_EINVAL, bad_name_space},
      {"client_name 65 chars", RLOCK_EINVAL, bad_name_long},
      {"uri http://", RLOCK_EURI, bad_uri_scheme},
      {"uri port 70000", RLOCK_EURI, bad_uri_port},
      {"uri db x", RLOCK_EURI, bad_uri_db},
      {"uri garbage", RLOCK_EURI, bad_uri_garbage},
  };
  size_t before = rt_client_count();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rlock_options o;
    rlock_options_init(&o);
    o.uri = rt_uri();
    cases[i].apply(&o);
    rlock_client *c = SENTINEL;
    int rc = rlock_client_new(&c, &o);
    cr_assert_eq(rc, cases[i].expect, "%s: got %s, expected %s", cases[i].what,
                 rlock_err_name(rc), rlock_err_name(cases[i].expect));
    cr_assert_null(c, "%s: *client not NULL", cases[i].what);
    cr_assert_neq(rlock_last_error()[0], '\0', "%s: no rlock_last_error()",
                  cases[i].what);
  }
  /* Nothing connected. */
  cr_assert_eq(rt_client_count(), before);
}

Test(client, boundary_options_are_accepted) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 300;
  o.retry_attempts = 100;
  o.retry_interval_ms = 0;
  o.client_name =
      "x123456789x123456789x123456789x123456789x123456789x123456789xxxx";
  cr_assert_eq(strlen(o.client_name), 64);
  rlock_client *c = rt_client_opts(&o);
  rlock_client_free(c);

  rlock_options_init(&o);
  o.retry_attempts = 0;
  c = rt_client_opts(&o);
  rlock_client_free(c);
}

/* A caller built against an older rlock.h (a smaller rlock_options) opens
 * with its own fields and the defaults for the rest. The tail here is
 * garbage that fails validation (retry_attempts, sharded_pubsub) if read. */
Test(client, options_prefix_size_opens_with_defaults_for_the_rest) {
  char key[128];
  rt_key(key, sizeof key, "opts-prefix");
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.watchdog_timeout_ms = 4000; /* inside the prefix: must be used */
  o.struct_size = offsetof(rlock_options, retry_attempts);
  memset((char *)&o + o.struct_size, 0x5a, sizeof o - o.struct_size);
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "%s: %s", rlock_err_name(rc), rlock_last_error());
  rlock *lock = rt_lock(c, key);
  cr_assert_eq(rlock_lock(lock, -1), 0);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 0 && pttl <= 4000,
            "PTTL %lld: the prefix's watchdog_timeout_ms was not used", pttl);
  cr_assert_eq(rlock_unlock(lock), 0);
  rlock_free(lock);
  rlock_client_free(c);

  /* Out of range either way: refused before connecting. */
  size_t before = rt_client_count();
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.struct_size = 0;
  c = (rlock_client *)&o;
  cr_assert_eq(rlock_client_new(&c, &o), RLOCK_EINVAL);
  cr_assert_null(c);
  cr_assert_not_null(strstr(rlock_last_error(), "rlock_options_init()"));
  cr_assert_eq(rt_client_count(), before);
}

Test(client, options_init_defaults) {
  rlock_options o;
  memset(&o, 0x5a, sizeof o);
  rlock_options_init(&o);
  cr_assert_null(o.uri);
  cr_assert_null(o.client_name);
  cr_assert_eq(o.watchdog_timeout_ms, 30000);
  cr_assert_eq(o.command_timeout_ms, 3000);
  cr_assert_eq(o.subscribe_timeout_ms, 7500);
  cr_assert_eq(o.retry_attempts, 3);
  cr_assert_eq(o.retry_interval_ms, 1500);
  cr_assert_eq(o.sharded_pubsub, 0);
  cr_assert_null(o.on_lock_lost_data);
  cr_assert(o.on_lock_lost == NULL);
}

/* ---- connections as the server sees them ---- */

typedef struct count_wait {
  size_t expect;
  const char *name; /* NULL: all clients */
} count_wait;

static bool client_count_is(void *arg) {
  count_wait *w = arg;
  size_t n = w->name ? rt_client_count_named(w->name) : rt_client_count();
  return n == w->expect;
}

Test(client, two_connections_per_client) {
  size_t base = rt_client_count(); /* the harness's own connection */
  cr_assert_eq(base, 1);
  rlock_client *c = rt_client();
  count_wait w = {base + 2, NULL};
  rt_wait_until_what(client_count_is, &w, 2000, "2 connections after open");
  cr_assert_eq(rt_client_count(), base + 2);

  /* Using it opens nothing more. */
  char key[KEY_MAX];
  rt_key(key, sizeof key, "conns");
  rlock *lock = rt_lock(c, key);
  cr_assert_eq(rlock_lock(lock, -1), 0);
  cr_assert_eq(rlock_unlock(lock), 0);
  cr_assert_eq(rt_client_count(), base + 2);
  rlock_free(lock);

  rlock_client_free(c);
  w.expect = base;
  rt_wait_until_what(client_count_is, &w, 2000, "0 extra after close");
}

Test(client, client_name_on_both_connections) {
  const char *name = "rlock-test-client";
  rlock_options o;
  rlock_options_init(&o);
  o.client_name = name;
  rlock_client *c = rt_client_opts(&o);
  count_wait w = {2, name};
  rt_wait_until_what(client_count_is, &w, 2000, "both connections named");
  cr_assert_eq(rt_client_count_named(name), 2);
  rlock_client_free(c);
  w.expect = 0;
  rt_wait_until_what(client_count_is, &w, 2000, "named connections closed");
}

/* ---- server death ---- */

Test(client, dead_server_fails_fast) {
  char key[KEY_MAX], key2[KEY_MAX];
  rt_key(key, sizeof key, "dead");
  rt_key(key2, sizeof key2, "dead-other");
  rlock_options o;
  rlock_options_init(&o);
  o.command_timeout_ms = 500;
  o.retry_attempts = 1;
  o.retry_interval_ms = 100;
  rlock_client *c = rt_client_opts(&o);
  rlock *lock = rt_lock(c, key);
  rlock *other = rt_lock(c, key2);
  cr_assert_eq(rlock_lock(lock, -1), 0);

  rt_server_kill(); /* SIGKILL rt_server_pid() and reap it */

  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(other, 0, -1);
  int64_t elapsed = rt_now_ms() - t0;
  cr_assert(rc == RLOCK_ECONN || rc == RLOCK_ETIMEDOUT,
            "try_lock on a dead server: %d %s", rc, rlock_err_name(rc));
  cr_assert_lt(elapsed, 500 + 2500, "try_lock took %" PRId64 " ms", elapsed);

  /* Idempotent calls retry once (500 ms + 100 ms + 500 ms at most). */
  t0 = rt_now_ms();
  rc = rlock_is_locked(other);
  elapsed = rt_now_ms() - t0;
  cr_assert_lt(rc, 0, "is_locked on a dead server: %d", rc);
  cr_assert_lt(elapsed, 1100 + 2500, "is_locked took %" PRId64 " ms",
               elapsed);

  t0 = rt_now_ms();
  rc = rlock_unlock(lock);
  elapsed = rt_now_ms() - t0;
  cr_assert_lt(rc, 0, "unlock on a dead server: %d", rc);
  cr_assert_lt(elapsed, 1100 + 2500, "unlock took %" PRId64 " ms", elapsed);

  t0 = rt_now_ms();
  rlock_client_free(c);
  cr_assert_lt(rt_now_ms() - t0, 3000, "close hung on a dead server");
  rlock_free(other);
  rlock_free(lock);
}

/* ---- handles ---- */

Test(client, get_validates_arguments) {
  rlock_client *c = rt_client();
  rlock *lock = NULL;
  cr_assert_eq(rlock_new(c, NULL, &lock), RLOCK_EINVAL);
  cr_assert_eq(rlock_new(c, "", &lock), RLOCK_EINVAL);
  cr_assert_eq(rlock_new(NULL, "x", &lock), RLOCK_EINVAL);
  cr_assert_eq(rlock_new(c, "x", NULL), RLOCK_EINVAL);

  char *name = malloc(RLOCK_NAME_MAX + 2);
  cr_assert_not_null(name);
  memset(name, 'n', RLOCK_NAME_MAX + 1);
  name[RLOCK_NAME_MAX + 1] = '\0';
  cr_assert_eq(rlock_new(c, name, &lock), RLOCK_ENAMETOOLONG);
  cr_assert_neq(rlock_last_error()[0], '\0');

  /* Exactly RLOCK_NAME_MAX bytes is fine, and works end to end. */
  rt_key(name, 64, "longname");
  size_t used = strlen(name);
  memset(name + used, 'n', RLOCK_NAME_MAX - used);
  name[RLOCK_NAME_MAX] = '\0';
  cr_assert_eq(rlock_new(c, name, &lock), 0, "%s", rlock_last_error());
  cr_assert_eq(rlock_last_error()[0], '\0',
               "last error not cleared by a successful call");
  cr_assert_str_eq(rlock_name(lock), name);
  cr_assert_eq(rlock_try_lock(lock, 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rt_int("EXISTS %b", name, (size_t)RLOCK_NAME_MAX), 1);
  cr_assert_eq(rlock_unlock(lock), 0);
  cr_assert_eq(rt_int("EXISTS %b", name, (size_t)RLOCK_NAME_MAX), 0);
  rlock_free(lock);
  free(name);

  /* The name is copied. */
  char buf[KEY_MAX];
  rt_key(buf, sizeof buf, "copied");
  char expect[KEY_MAX];
  snprintf(expect, sizeof expect, "%s", buf);
  cr_assert_eq(rlock_new(c, buf, &lock), 0);
  memset(buf, 'z', strlen(buf));
  cr_assert_str_eq(rlock_name(lock), expect);
  rlock_free(lock);

  rlock_free(NULL);
  rlock_client_free(c);
  rlock_client_free(NULL);
}

Test(client, closed_client_calls_return_eclosed) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "closed");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  rlock_client_free(c);

  cr_assert_eq(rlock_lock(lock, -1), RLOCK_ECLOSED);
  cr_assert_eq(rlock_try_lock(lock, 0, -1), RLOCK_ECLOSED);
  cr_assert_eq(rlock_unlock(lock), RLOCK_ECLOSED);
  cr_assert_eq(rlock_force_unlock(lock), RLOCK_ECLOSED);
  cr_assert_eq(rlock_is_locked(lock), RLOCK_ECLOSED);
  cr_assert_eq(rlock_is_held(lock), RLOCK_ECLOSED);
  cr_assert_eq(rlock_hold_count(lock), RLOCK_ECLOSED);
  int64_t ttl = 12345;
  cr_assert_eq(rlock_remain_ttl(lock, &ttl), RLOCK_ECLOSED);
  cr_assert_str_eq(rlock_name(lock), key);
  cr_assert_eq(rt_exists(key), 0, "calls on a closed client reached Redis");
  rlock_free(lock);
}

typedef struct blocked_call {
  rlock *lock;
  atomic_int rc;
  atomic_bool done;
  _Atomic int64_t t_end;
} blocked_call;

static void blocked_lock_thread(void *arg) {
  blocked_call *b = arg;
  atomic_store(&b->rc, rlock_lock(b->lock, -1));
  atomic_store(&b->t_end, rt_now_ms());
  atomic_store(&b->done, true);
}

static bool has_subscriber(void *channel) { return rt_numsub(channel) >= 1; }

Test(client, close_wakes_blocked_waiter_with_eclosed) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "close-wakes");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *holder_c = rt_client();
  rlock_client *waiter_c = rt_client();
  rlock *held = rt_lock(holder_c, key);
  cr_assert_eq(rlock_lock(held, 20000), 0);

  blocked_call b;
  memset(&b, 0, sizeof b);
  b.lock = rt_lock(waiter_c, key);
  rt_thread th;
  rt_thread_start(&th, blocked_lock_thread, &b);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  cr_assert_not(atomic_load(&b.done), "waiter returned while lock held");

  int64_t t_close = rt_now_ms();
  rlock_client_free(waiter_c);
  rt_thread_join(&th, 5000);
  cr_assert_eq(atomic_load(&b.rc), RLOCK_ECLOSED, "blocked lock: %s",
               rlock_err_name(atomic_load(&b.rc)));
  cr_assert_lt(atomic_load(&b.t_end) - t_close, 1000,
               "blocked waiter took %" PRId64 " ms to see the close",
               atomic_load(&b.t_end) - t_close);
  rlock_free(b.lock);

  cr_assert_eq(rlock_unlock(held), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(held);
  rlock_client_free(holder_c);
}

Test(client, last_error_is_per_call_and_per_thread) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = "http://nope";
  rlock_client *c = SENTINEL;
  cr_assert_eq(rlock_client_new(&c, &o), RLOCK_EURI);
  cr_assert_neq(rlock_last_error()[0], '\0');

  c = rt_client();
  rlock *lock = NULL;
  cr_assert_eq(rlock_new(c, "", &lock), RLOCK_EINVAL);
  cr_assert_neq(rlock_last_error()[0], '\0');
  cr_assert_eq(rlock_new(c, "last-error", &lock), 0);
  cr_assert_str_eq(rlock_last_error(), "");
  rlock_free(lock);
  rlock_client_free(c);
}

/* ---- thread ids ---- */

typedef struct tid_probe {
  uint64_t first, second;
  atomic_bool ready;   /* first id read */
  atomic_bool release; /* may read the second id and end */
} tid_probe;

static void tid_thread(void *arg) {
  tid_probe *p = arg;
  p->first = rlock_thread_id();
  atomic_store(&p->ready, true);
  int64_t deadline = rt_now_ms() + 10000;
  while (!atomic_load(&p->release) && rt_now_ms() < deadline)
    rt_sleep_ms(1);
  p->second = rlock_thread_id();
}

static bool probe_ready(void *arg) {
  return atomic_load(&((tid_probe *)arg)->ready);
}

Test(client, thread_ids_unique_and_stable) {
  uint64_t main_id = rlock_thread_id();
  cr_assert_eq(rlock_thread_id(), main_id);

  tid_probe a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  rt_thread ta, tb;
  rt_thread_start(&ta, tid_thread, &a);
  rt_thread_start(&tb, tid_thread, &b);
  rt_wait_until(probe_ready, &a, 5000);
  rt_wait_until(probe_ready, &b, 5000);
  /* Both alive at once here. */
  atomic_store(&a.release, true);
  atomic_store(&b.release, true);
  rt_thread_join(&ta, 5000);
  rt_thread_join(&tb, 5000);

  cr_assert_eq(a.first, a.second, "thread id changed within a thread");
  cr_assert_eq(b.first, b.second);
  cr_assert_neq(a.first, b.first, "two live threads share an id");
  cr_assert_neq(a.first, main_id);
  cr_assert_neq(b.first, main_id);

  /* Never reused, even after the thread ended. */
  tid_probe c;
  memset(&c, 0, sizeof c);
  atomic_store(&c.release, true);
  rt_thread tc;
  rt_thread_start(&tc, tid_thread, &c);
  rt_thread_join(&tc, 5000);
  cr_assert_neq(c.first, a.first);
  cr_assert_neq(c.first, b.first);
  cr_assert_neq(c.first, main_id);
  cr_assert_eq(rlock_thread_id(), main_id);
}

/* ---- nothing left behind ---- */

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  cr_assert_not_null(d, "opendir %s", path);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

static bool has_channel_subscriber(void *name) {
  char chan[512];
  rt_lock_channel(chan, sizeof chan, name);
  return rt_numsub(chan) > 0;
}

static void *closer_waiter(void *p) {
  /* blocks on a held lock until the client is closed under it */
  return (void *)(intptr_t)rlock_lock((rlock *)p, -1);
}

Test(client, close_leaves_no_fd_thread_or_channel) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "leak");
  (void)rt_redis(); /* the harness's own connection stays open throughout */
  /* libuv makes one process-wide pipe (its signal lock) at the first
   * uv_loop_init and keeps it: count from after a first client. */
  rlock_client *warm = rt_client();
  rlock_client_free(warm);
  int fds0 = count_dir("/proc/self/fd");
  int threads0 = count_dir("/proc/self/task");
  for (int round = 0; round < 20; round++) {
    rlock_client *c = rt_client();
    rlock *lock = rt_lock(c, key);
    cr_assert_eq(rlock_try_lock(lock, 0, -1), 1);
    if (round % 4 == 0) {
      /* a second client blocks on it, so a subscription is open at close */
      rlock_client *c2 = rt_client();
      rlock *lock2 = rt_lock(c2, key);
      pthread_t t;
      pthread_create(&t, NULL, closer_waiter, lock2);
      rt_wait_until_what(has_channel_subscriber, key, 5000,
                         "waiter subscribed");
      rlock_client_free(c2);
      void *rc;
      pthread_join(t, &rc);
      cr_assert_eq((int)(intptr_t)rc, RLOCK_ECLOSED);
      rlock_free(lock2);
    }
    cr_assert_eq(rlock_unlock(lock), 0);
    rlock_free(lock);
    rlock_client_free(c);
  }
  cr_assert_eq(count_dir("/proc/self/fd"), fds0, "file descriptors leaked");
  /* A thread joined a moment ago may still be listed for a while (its
   * join returns before the kernel drops it from /proc/self/task). */
  int64_t deadline = rt_now_ms() + 1000;
  while (count_dir("/proc/self/task") != threads0 && rt_now_ms() < deadline)
    rt_sleep_ms(10);
  cr_assert_eq(count_dir("/proc/self/task"), threads0,
               "threads leaked (1 s after the last close)");
  redisReply *r = rt_cmd("PUBSUB CHANNELS *");
  cr_assert_eq(r->elements, 0, "channels left subscribed");
  freeReplyObject(r);
  cr_assert_eq(rt_exists(key), 0);
}

/*
 * fork() (issue 10): the child has no loop thread, so its calls on the
 * parent's client would hang for ever. They return RLOCK_EFORK at once with
 * a detail; close in the child returns without touching what it shares with
 * the parent; a client the child opens works; the parent's client goes on
 * working.
 */
Test(client, forked_child_gets_efork_and_parent_keeps_working) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "fork");
  rlock_client *c = rt_client();
  rlock *lock = rt_lock(c, key);
  cr_assert_eq(rlock_try_lock(lock, 0, 20000), 1, "%s", rlock_last_error());

  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    alarm(10); /* a hang fails the test instead of blocking it */
    int bits = 0;
    if (rlock_try_lock(lock, 1000, 5000) == RLOCK_EFORK &&
        strstr(rlock_last_error(), "fork") != NULL)
      bits |= 1;
    if (rlock_unlock(lock) == RLOCK_EFORK)
      bits |= 2;
    if (rlock_is_locked(lock) == RLOCK_EFORK)
      bits |= 4;
    rlock *other = NULL;
    if (rlock_new(c, key, &other) == RLOCK_EFORK && other == NULL)
      bits |= 8;
    rlock_req *req = NULL;
    if (rlock_is_locked_async(lock, NULL, NULL, &req) == RLOCK_EFORK &&
        req == NULL)
      bits |= 16;
    rlock_client_free(c);
    /* A client the child opens itself is the child's: it works. */
    rlock_options o;
    rlock_options_init(&o);
    o.uri = rt_uri();
    rlock_client *mine = NULL;
    rlock *mine_lock = NULL;
    char mine_key[KEY_MAX + 8];
    snprintf(mine_key, sizeof mine_key, "%s-child", key);
    if (rlock_client_new(&mine, &o) == 0 &&
        rlock_new(mine, mine_key, &mine_lock) == 0 &&
        rlock_try_lock(mine_lock, 0, 5000) == 1 && rlock_unlock(mine_lock) == 0)
      bits |= 32;
    rlock_free(mine_lock);
    rlock_client_free(mine);
    /* The child ends by exec, as a forked program would: the parent's
     * client copy is left alone by design (close touches nothing in a
     * child), and exec discards it without a leak report under valgrind,
     * which follows children. */
    char code[8];
    snprintf(code, sizeof code, "%d", bits == 63 ? 0 : 100 + bits);
    execl("/bin/sh", "sh", "-c", "exit \"$0\"", code, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  int64_t t0 = rt_now_ms();
  pid_t got;
  while ((got = waitpid(pid, &status, WNOHANG)) == 0 && rt_now_ms() - t0 < 15000)
    rt_sleep_ms(10);
  cr_assert_eq(got, pid, "the child did not exit");
  cr_assert(WIFEXITED(status), "the child died of signal %d (a hang ends "
            "with SIGALRM)", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  cr_assert_eq(WEXITSTATUS(status), 0, "child checks failed: exit %d "
               "(100 + bits that passed)", WEXITSTATUS(status));
  /* The parent's client and its hold are untouched. */
  cr_assert_eq(rt_exists(key), 1);
  cr_assert_eq(rlock_is_locked(lock), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(lock);
  rlock_client_free(c);
}
