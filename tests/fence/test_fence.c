/* Fencing (issue 37; docs/fencing.md): tokens that never go backwards (a
 * server restart without persistence, FLUSHALL), the token key's optional
 * TTL, the check call, and the guard - guarded writes refused with
 * RLOCK_ESTALE for an older token, the zombie test (a holder SIGSTOPped past
 * its lease, in a child process), bad input, async, stats and events -
 * against a real redis-server (faultkit: same-port restarts). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faultkit.h"
#include "fence_test.h"
#include "harness.h"

TestSuite(fence, .init = fk_init, .fini = fk_fini, .timeout = 90);

static rlock *fenced(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_fenced(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_fenced: %s", rlock_err_name(rc));
  return l;
}

static rlock_guard *guard(rlock_client *c, const char *name) {
  rlock_guard *g = NULL;
  int rc = rlock_guard_new(c, name, &g);
  cr_assert_eq(rc, 0, "rlock_guard_new: %s", rlock_err_name(rc));
  return g;
}

/* GET key as a number (0 for nil). */
static long long getnum(const char *key) {
  char *v = rt_str("GET %s", key);
  long long n = v != NULL ? atoll(v) : 0;
  free(v);
  return n;
}

static int64_t take(rlock *l, int64_t lease_ms) {
  int64_t t = 0;
  int rc = rlock_try_lock_fenced(l, 10000, lease_ms, &t);
  cr_assert_eq(rc, 1, "try_lock_fenced: %s %s", rlock_err_name(rc),
               rlock_last_error());
  return t;
}

/* ---- tokens that never go backwards ---- */

Test(fence, tokens_continue_upward_across_a_restart_without_persistence) {
  rlock_client *c = rt_client();
  char name[64], tk[128];
  rt_key(name, sizeof name, "fr");
  snprintf(tk, sizeof tk, "redisson_lock_token:{%s}", name);
  rlock *l = fenced(c, name);
  int64_t t1 = take(l, 30000);
  cr_assert_eq(rlock_unlock(l), 0);
  int64_t t2 = take(l, 30000);
  cr_assert_gt(t2, t1);
  cr_assert_eq(rlock_unlock(l), 0);
  fk_server_restart_same_port(); /* the token key is gone */
  cr_assert_eq(rt_exists(tk), 0);
  int64_t t3 = take(l, 30000);
  cr_assert_gt(t3, t2, "after the restart %lld is not above %lld",
               (long long)t3, (long long)t2);
  cr_assert_eq(rlock_unlock(l), 0);
  /* and after FLUSHALL */
  freeReplyObject(rt_cmd("FLUSHALL"));
  int64_t t4 = take(l, 30000);
  cr_assert_gt(t4, t3, "after FLUSHALL %lld is not above %lld",
               (long long)t4, (long long)t3);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}

Test(fence, token_key_ttl_option_expires_idle_token_keys) {
  rlock_options o;
  rlock_options_init(&o);
  o.fenced_token_ttl_ms = 60000;
  rlock_client *c = rt_client_opts(&o);
  char name[64], tk[128];
  rt_key(name, sizeof name, "ft");
  snprintf(tk, sizeof tk, "redisson_lock_token:{%s}", name);
  rlock *l = fenced(c, name);
  int64_t t1 = take(l, 5000);
  long long pttl = rt_pttl(tk);
  cr_assert(pttl > 50000 && pttl <= 60000, "token key TTL %lld", pttl);
  cr_assert_eq(rlock_unlock(l), 0);
  freeReplyObject(rt_cmd("DEL %s", tk)); /* as if it expired */
  int64_t t2 = take(l, 5000);
  cr_assert_gt(t2, t1, "tokens keep growing without the key");
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
  rlock_options_init(&o);
  o.fenced_token_ttl_ms = -1;
  o.uri = rt_uri();
  rlock_client *bad = NULL;
  cr_assert_eq(rlock_client_new(&bad, &o), RLOCK_EINVAL);
}

/* ---- the check call ---- */

Test(fence, check_says_current_stale_free) {
  rlock_client *a = rt_client(), *b = rt_client();
  char name[64], tk[128];
  rt_key(name, sizeof name, "fc");
  snprintf(tk, sizeof tk, "redisson_lock_token:{%s}", name);
  rlock *la = fenced(a, name), *lb = fenced(b, name);
  cr_assert_eq(rlock_check_token(la, 5), RLOCK_FENCE_FREE);
  int64_t ta = take(la, 30000);
  cr_assert_eq(rlock_check_token(lb, ta), RLOCK_FENCE_CURRENT);
  cr_assert_eq(rlock_check_token(lb, ta - 1), RLOCK_FENCE_STALE);
  cr_assert_eq(rlock_check_token(lb, ta + 1000), RLOCK_FENCE_CURRENT,
               "a higher token passes (Chubby)");
  cr_assert_eq(rlock_unlock(la), 0);
  cr_assert_eq(rlock_check_token(lb, ta), RLOCK_FENCE_FREE);
  int64_t tb = take(lb, 30000);
  cr_assert_eq(rlock_check_token(la, ta), RLOCK_FENCE_STALE);
  cr_assert_eq(rlock_check_token(la, tb), RLOCK_FENCE_CURRENT);
  freeReplyObject(rt_cmd("DEL %s", tk));
  cr_assert_eq(rlock_check_token(la, tb), RLOCK_FENCE_UNKNOWN);
  freeReplyObject(rt_cmd("SET %s notanumber", tk));
  cr_assert_eq(rlock_check_token(la, tb), RLOCK_EPROTO);
  cr_assert_eq(rlock_check_token(la, 0), RLOCK_EINVAL);
  rlock *plain = rt_lock(a, name);
  cr_assert_eq(rlock_check_token(plain, 3), RLOCK_EINVAL);
  cr_assert_eq(rlock_unlock(lb), 0);
  rlock_free(plain);
  rlock_free(la);
  rlock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ---- the guard ---- */

Test(fence, guard_accepts_rising_tokens_and_refuses_older_ones) {
  rlock_client *c = rt_client();
  char g[64], data[96], h[96], n[96];
  rt_key(g, sizeof g, "gd");
  snprintf(data, sizeof data, "{%s}:data", g);
  snprintf(h, sizeof h, "{%s}:h", g);
  snprintf(n, sizeof n, "{%s}:n", g);
  rlock_guard *gu = guard(c, g);
  cr_assert_eq(fence_set(gu, "L", 10, data, "ten"), 0);
  cr_assert_eq(fence_set(gu, "L", 10, data, "ten again"), 0, "equal passes");
  cr_assert_eq(fence_set(gu, "L", 12, data, "twelve"), 0);
  cr_assert_eq(fence_set(gu, "L", 11, data, "eleven"), RLOCK_ESTALE);
  cr_assert(strstr(rlock_last_error(), "STALE") != NULL, "%s",
            rlock_last_error());
  char *v = rt_str("GET %s", data);
  cr_assert_str_eq(v, "twelve", "the refused write wrote nothing");
  free(v);
  v = rt_hget(g, "token");
  cr_assert_str_eq(v, "12");
  free(v);
  /* tokens compared as numbers, not as text, beyond 2^53 too */
  cr_assert_eq(fence_set(gu, "L", 100, data, "100"), 0);
  cr_assert_eq(fence_set(gu, "L", 99, data, "99"), RLOCK_ESTALE);
  cr_assert_eq(fence_set(gu, "L", INT64_C(9007199254740993), data, "big"), 0);
  cr_assert_eq(fence_set(gu, "L", INT64_C(9007199254740992), data, "big-1"),
               RLOCK_ESTALE);
  /* hset, incrby, del, eval */
  int64_t t = INT64_C(9007199254740993), res = -1;
  rlock_guarded_write w;
  rlock_guarded_write_init(&w);
  w.lock_name = "L";
  w.token = t;
  w.op = RLOCK_GUARD_HSET;
  w.key = h;
  w.field = "f";
  w.value = "v";
  cr_assert_eq(rlock_guard_write(gu, &w, &res), 0);
  cr_assert_eq(res, 1);
  w.op = RLOCK_GUARD_INCRBY;
  w.key = n;
  w.delta = 5;
  cr_assert_eq(rlock_guard_write(gu, &w, &res), 0);
  cr_assert_eq(res, 5);
  w.token = 3;
  cr_assert_eq(rlock_guard_write(gu, &w, &res), RLOCK_ESTALE);
  cr_assert_eq(getnum(n), 5);
  w.token = t;
  w.op = RLOCK_GUARD_EVAL;
  const char *keys[] = {n, data};
  const char *args[] = {"7"};
  w.script = "redis.call('incrby', KEYS[1], ARGV[1]);"
             " return redis.call('strlen', KEYS[2]) + #KEYS + #ARGV";
  w.keys = keys;
  w.nkeys = 2;
  w.args = args;
  w.nargs = 1;
  cr_assert_eq(rlock_guard_write(gu, &w, &res), 0, "%s", rlock_last_error());
  cr_assert_eq(res, 3 + 2 + 1, "the script saw its own KEYS and ARGV");
  cr_assert_eq(getnum(n), 12);
  w.token = 50;
  cr_assert_eq(rlock_guard_write(gu, &w, &res), RLOCK_ESTALE);
  cr_assert_eq(getnum(n), 12, "the script did not run");
  /* a script's error reply: the guard does not record its token */
  w.token = t + 10;
  w.script = "return redis.error_reply('MINE no')";
  cr_assert_eq(rlock_guard_write(gu, &w, &res), RLOCK_ESERVER);
  v = rt_hget(g, "token");
  cr_assert_str_eq(v, "9007199254740993");
  free(v);
  w.op = RLOCK_GUARD_DEL;
  w.key = data;
  w.token = t;
  cr_assert_eq(rlock_guard_write(gu, &w, &res), 0);
  cr_assert_eq(res, 1);
  cr_assert_eq(rt_exists(data), 0);
  rlock_guard_free(gu);
  rlock_client_free(c);
}

Test(fence, guard_bad_input_is_refused_with_nothing_written) {
  rlock_client *c = rt_client();
  char g[64], data[96], other[64];
  rt_key(g, sizeof g, "gb");
  snprintf(data, sizeof data, "{%s}:data", g);
  rt_key(other, sizeof other, "gbo");
  rlock_guard *gu = guard(c, g);
  cr_assert_eq(fence_set(gu, "L", 0, data, "x"), RLOCK_EINVAL, "token 0");
  cr_assert_eq(fence_set(gu, "L", -4, data, "x"), RLOCK_EINVAL);
  cr_assert_eq(fence_set(gu, "", 4, data, "x"), RLOCK_EINVAL);
  cr_assert_eq(fence_set(gu, "L", 4, NULL, "x"), RLOCK_EINVAL);
  cr_assert_eq(fence_set(NULL, "L", 4, data, "x"), RLOCK_EINVAL);
  rlock_guarded_write w;
  rlock_guarded_write_init(&w);
  w.lock_name = "L";
  w.token = 4;
  w.op = (rlock_guard_op)42;
  w.key = data;
  cr_assert_eq(rlock_guard_write(gu, &w, NULL), RLOCK_EINVAL);
  w.op = RLOCK_GUARD_EVAL;
  cr_assert_eq(rlock_guard_write(gu, &w, NULL), RLOCK_EINVAL, "no script");
  w.struct_size = 0;
  cr_assert_eq(rlock_guard_write(gu, &w, NULL), RLOCK_EINVAL);
  cr_assert_eq(rt_exists(g), 0);
  cr_assert_eq(rt_exists(data), 0);
  /* a token from another lock */
  cr_assert_eq(fence_set(gu, "L", 4, data, "x"), 0);
  cr_assert_eq(fence_set(gu, "M", 40, data, "y"), RLOCK_EFOREIGN);
  char *v = rt_str("GET %s", data);
  cr_assert_str_eq(v, "x");
  free(v);
  /* a guard key of the wrong type */
  rlock_guard *wrong = guard(c, other);
  rt_ok("OK", "SET %s 5", other);
  cr_assert_eq(fence_set(wrong, "L", 4, data, "z"), RLOCK_EWRONGTYPE);
  freeReplyObject(rt_cmd("DEL %s", other));
  freeReplyObject(rt_cmd("HSET %s a b", other));
  cr_assert_eq(fence_set(wrong, "L", 4, data, "z"), RLOCK_EWRONGTYPE,
               "a hash that is not a guard");
  /* a data key of the wrong type: nothing written, token not recorded */
  char h[96];
  snprintf(h, sizeof h, "{%s}:h", g);
  freeReplyObject(rt_cmd("HSET %s a b", h));
  w.struct_size = sizeof w;
  w.op = RLOCK_GUARD_INCRBY;
  w.key = h;
  w.token = 9;
  w.delta = 1;
  cr_assert_eq(rlock_guard_write(gu, &w, NULL), RLOCK_EWRONGTYPE);
  v = rt_hget(g, "token");
  cr_assert_str_eq(v, "4");
  free(v);
  rlock_guard_free(wrong);
  rlock_guard_free(gu);
  rlock_client_free(c);
}

/* An unreachable resource store: the transport error, nothing left. */
Test(fence, guard_on_an_unreachable_server_is_a_transport_error) {
  rlock_options o;
  rlock_options_init(&o);
  o.command_timeout_ms = 300;
  o.retry_attempts = 0;
  rlock_client *c = rt_client_opts(&o);
  rlock_guard *gu = guard(c, "gu");
  fk_server_freeze();
  int rc = fence_set(gu, "L", 4, "{gu}:d", "x");
  fk_server_thaw();
  cr_assert(rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONN, "%s",
            rlock_err_name(rc));
  rlock_guard_free(gu);
  rlock_client_free(c);
}

/* ---- async, stats, events ---- */

typedef struct seen {
  atomic_int stale;
  char detail[256];
} seen;

static void on_event(const rlock_event *ev, void *data) {
  seen *s = data;
  if (ev->type == RLOCK_EVENT_STALE && ev->error == RLOCK_ESTALE &&
      strcmp(ev->kind, "guard") == 0) {
    snprintf(s->detail, sizeof s->detail, "%s", ev->detail);
    atomic_fetch_add(&s->stale, 1);
  }
}

static _Atomic int64_t async_out[2];

static void async_cb(int status, int64_t value, void *data) {
  (void)data;
  atomic_store(&async_out[1], value);
  atomic_store(&async_out[0], status == 0 ? 1 : 1000 - status);
}

static bool async_done(void *arg) {
  (void)arg;
  return atomic_load(&async_out[0]) != 0;
}

Test(fence, async_write_and_check_stale_counted_and_said) {
  static seen s;
  memset(&s, 0, sizeof s);
  rlock_options o;
  rlock_options_init(&o);
  o.on_event = on_event;
  o.on_event_data = &s;
  rlock_client *c = rt_client_opts(&o);
  char g[64], n[96];
  rt_key(g, sizeof g, "ga");
  snprintf(n, sizeof n, "{%s}:n", g);
  rlock_guard *gu = guard(c, g);
  rlock_guarded_write w;
  rlock_guarded_write_init(&w);
  w.lock_name = "L";
  w.token = 20;
  w.op = RLOCK_GUARD_INCRBY;
  w.key = n;
  w.delta = 2;
  atomic_store(&async_out[0], 0);
  cr_assert_eq(rlock_guard_write_async(gu, &w, async_cb, NULL, NULL), 0);
  rt_wait_until(async_done, NULL, 5000);
  cr_assert_eq(atomic_load(&async_out[0]), 1);
  cr_assert_eq(atomic_load(&async_out[1]), 2);
  w.token = 19;
  atomic_store(&async_out[0], 0);
  cr_assert_eq(rlock_guard_write_async(gu, &w, async_cb, NULL, NULL), 0);
  rt_wait_until(async_done, NULL, 5000);
  cr_assert_eq(atomic_load(&async_out[0]), 1000 - RLOCK_ESTALE);
  cr_assert_eq(fence_set(gu, "L", 18, n, "x"), RLOCK_ESTALE);
  cr_assert_eq(atomic_load(&s.stale), 2);
  cr_assert(strstr(s.detail, "18") != NULL, "%s", s.detail);
  rlock_stats st;
  rlock_stats_init(&st);
  cr_assert_eq(rlock_client_stats(c, &st), 0);
  cr_assert_eq(st.failures[-RLOCK_ESTALE], 2);
  /* the check, async */
  char name[64];
  rt_key(name, sizeof name, "fca");
  rlock *l = fenced(c, name);
  int64_t t = take(l, 30000);
  atomic_store(&async_out[0], 0);
  cr_assert_eq(rlock_check_token_async(l, t - 1, async_cb, NULL, NULL), 0);
  rt_wait_until(async_done, NULL, 5000);
  cr_assert_eq(atomic_load(&async_out[0]), 1);
  cr_assert_eq(atomic_load(&async_out[1]), RLOCK_FENCE_STALE);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_guard_free(gu);
  rlock_client_free(c);
}

/* ---- the zombie test ---- */

/* Holder A in a child process: its own client, the fenced lock with a
 * short lease, the token to the parent; then, when told, its guarded write
 * (a SET, or the same through a script of its own when `eval`). Exits with
 * -rc of that write (0: written). */
static void zombie_child(const char *name, const char *g, const char *data,
                         bool eval, int tok_fd, int go_fd) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  rlock_client *c = NULL;
  if (rlock_client_new(&c, &o) != 0)
    _exit(100);
  rlock *l = NULL;
  rlock_guard *gu = NULL;
  int64_t t = 0;
  if (rlock_new_fenced(c, name, &l) != 0 || rlock_guard_new(c, g, &gu) != 0 ||
      rlock_try_lock_fenced(l, 5000, 1000, &t) != 1)
    _exit(101);
  if (write(tok_fd, &t, sizeof t) != (ssize_t)sizeof t)
    _exit(102);
  char go;
  if (read(go_fd, &go, 1) != 1)
    _exit(103);
  rlock_guarded_write w;
  rlock_guarded_write_init(&w);
  w.lock_name = name;
  w.token = t;
  const char *keys[] = {data};
  const char *args[] = {"A's write"};
  if (eval) {
    w.op = RLOCK_GUARD_EVAL;
    w.script = "return redis.call('set', KEYS[1], ARGV[1])";
    w.keys = keys;
    w.nkeys = 1;
    w.args = args;
    w.nargs = 1;
  } else {
    w.op = RLOCK_GUARD_SET;
    w.key = data;
    w.value = "A's write";
  }
  int rc = rlock_guard_write(gu, &w, NULL);
  _exit(rc <= 0 ? -rc : 104);
}

static void zombie(bool eval) {
  char name[64], g[96], data[96];
  rt_key(name, sizeof name, eval ? "ze" : "zs");
  snprintf(g, sizeof g, "{%s}:guard", name);
  snprintf(data, sizeof data, "{%s}:data", name);
  int tok[2], go[2];
  cr_assert_eq(pipe(tok), 0);
  cr_assert_eq(pipe(go), 0);
  pid_t a = fork();
  cr_assert_geq(a, 0);
  if (a == 0) {
    close(tok[0]);
    close(go[1]);
    zombie_child(name, g, data, eval, tok[1], go[0]);
  }
  close(tok[1]);
  close(go[0]);
  int64_t ta = 0;
  cr_assert_eq(read(tok[0], &ta, sizeof ta), (ssize_t)sizeof ta,
               "holder A took no token");
  cr_assert_eq(kill(a, SIGSTOP), 0); /* A pauses past its 1 s lease */
  rlock_client *c = rt_client();
  rlock *l = fenced(c, name);
  rlock_guard *gu = guard(c, g);
  int64_t tb = 0;
  int rc = rlock_try_lock_fenced(l, 10000, 30000, &tb);
  cr_assert_eq(rc, 1, "B waits out A's lease: %s", rlock_err_name(rc));
  cr_assert_gt(tb, ta);
  cr_assert_eq(rlock_check_token(l, ta), RLOCK_FENCE_STALE);
  cr_assert_eq(fence_set(gu, name, tb, data, "B's write"), 0);
  cr_assert_eq(kill(a, SIGCONT), 0);
  cr_assert_eq(write(go[1], "g", 1), 1);
  int st = 0;
  cr_assert_eq(waitpid(a, &st, 0), a);
  cr_assert(WIFEXITED(st), "A did not exit");
  cr_assert_eq(WEXITSTATUS(st), -RLOCK_ESTALE,
               "A's write with its old token: exit %d, not stale",
               WEXITSTATUS(st));
  char *v = rt_str("GET %s", data);
  cr_assert_str_eq(v, "B's write", "B's data is intact");
  free(v);
  cr_assert_eq(rlock_unlock(l), 0);
  close(tok[0]);
  close(go[1]);
  rlock_guard_free(gu);
  rlock_free(l);
  rlock_client_free(c);
}

Test(fence, zombie_holder_is_refused_by_a_guarded_set) { zombie(false); }

Test(fence, zombie_holder_is_refused_by_a_guarded_script) { zombie(true); }
