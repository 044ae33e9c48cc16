/*
 * The `badinput` suite: one table, one row per bad (or borderline) input,
 * each with the documented outcome — a RLOCK_E* code with a non-empty
 * rlock_last_error(), or acceptance for inputs that are valid.
 *
 * Every row runs in its own process with its own redis-server, and after
 * every row nothing may be left behind: no key, no pub/sub channel, no
 * connection of the row's clients (all named ROW_CLIENT).
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faultkit.h"

TestSuite(badinput, .init = fk_init, .fini = fk_fini, .timeout = 30);

#define KEY_MAX 160
#define CHAN_MAX 256
#define OWNER_MAX 96
#define SLACK_MS 1500
#define ROW_CLIENT "fk-bad"

/* What a row observed: the return value of the call under test and the
 * calling thread's rlock_last_error() right after it. */
typedef struct row_result {
  int64_t rc;
  char err[512];
} row_result;

static void note(row_result *r, int64_t rc) {
  r->rc = rc;
  fk_copy_last_error(r->err, sizeof r->err);
}

static rlock_client *row_client(void) {
  rlock_options o;
  fk_options(&o, ROW_CLIENT);
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "rlock_client_new: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  return c;
}

static bool has_subscriber(void *channel) { return rt_numsub(channel) >= 1; }

static void assert_err_contains(const row_result *r, const char *text) {
  cr_assert(strstr(r->err, text) != NULL,
            "rlock_last_error() '%s' does not contain '%s'", r->err, text);
}

/* ---- names ---- */

static void row_null_name(row_result *r) {
  rlock_client *c = row_client();
  rlock *lock = (rlock *)&lock; /* must be reset to NULL */
  note(r, rlock_new(c, NULL, &lock));
  cr_assert_null(lock, "rlock_new left *lock set on failure");
  rlock_client_free(c);
}

static void row_empty_name(row_result *r) {
  rlock_client *c = row_client();
  rlock *lock = (rlock *)&lock;
  note(r, rlock_new(c, "", &lock));
  cr_assert_null(lock, "rlock_new left *lock set on failure");
  rlock_client_free(c);
}

/* A name containing '{' is valid; its channel is the bare name (the brace
 * rule, docs/wire-protocol.md "Names"), and waiting on it works end to
 * end. */
static void row_brace_name(row_result *r) {
  char key[KEY_MAX], chan[CHAN_MAX], wrong[CHAN_MAX];
  rt_key(key, sizeof key, "fk{brace}");
  snprintf(chan, sizeof chan, "redisson_lock__channel:%s", key);
  snprintf(wrong, sizeof wrong, "redisson_lock__channel:{%s}", key);
  rlock_client *hc = row_client();
  rlock_client *wc = row_client();
  rlock *held = NULL;
  note(r, rlock_new(hc, key, &held));
  cr_assert_not_null(held);
  rlock *waited = rt_lock(wc, key);

  cr_assert_eq(rlock_try_lock(held, 0, 10000), 1, "%s", rlock_last_error());
  char *type = rt_type(key);
  cr_assert_str_eq(type, "hash");
  free(type);
  fk_job waiter;
  fk_job_start(&waiter, waited, FK_TRY_LOCK, 8000, 5000, true);
  rt_wait_until_what(has_subscriber, chan, 5000,
                     "waiter subscribed to the bare-name channel");
  cr_assert_eq(rt_numsub(wrong), 0, "subscribed to '%s' (braces added to a "
               "name that already has '{')", wrong);
  int64_t t_unlock = rt_now_ms();
  cr_assert_eq(rlock_unlock(held), 0, "%s", rlock_last_error());
  fk_job_wait_done(&waiter, 5000, "waiter");
  cr_assert_eq(waiter.rc, 1, "%" PRId64 " %s", waiter.rc, waiter.err);
  cr_assert_lt(waiter.t_end - t_unlock, 1000,
               "the unlock message on '%s' did not wake the waiter", chan);
  fk_job_release(&waiter);
  rlock_free(waited);
  rlock_free(held);
  rlock_client_free(wc);
  rlock_client_free(hc);
}

static void row_name_1mib(row_result *r) {
  size_t len = (size_t)1 << 20;
  char *name = malloc(len + 1);
  cr_assert_not_null(name);
  memset(name, 'n', len);
  name[len] = '\0';
  rlock_client *c = row_client();
  rlock *lock = (rlock *)&lock;
  note(r, rlock_new(c, name, &lock));
  cr_assert_null(lock);
  free(name);
  rlock_client_free(c);
}

/* ---- URIs ---- */

/* Opens a client on `uri` ("%d" in it is replaced by the server's port). */
static void open_uri(row_result *r, const char *uri_fmt) {
  char uri[128];
  if (strstr(uri_fmt, "%d") != NULL)
    snprintf(uri, sizeof uri, uri_fmt, rt_port());
  else
    snprintf(uri, sizeof uri, "%s", uri_fmt);
  rlock_options o;
  fk_options(&o, ROW_CLIENT);
  o.uri = uri;
  rlock_client *c = (rlock_client *)&c;
  note(r, rlock_client_new(&c, &o));
  if (r->rc == 0)
    rlock_client_free(c);
  else
    cr_assert_null(c, "rlock_client_new(%s) failed but left a client", uri);
}

static void row_uri_bad_scheme(row_result *r) {
  open_uri(r, "http://127.0.0.1:%d");
}
static void row_uri_port_0(row_result *r) {
  open_uri(r, "redis://127.0.0.1:0");
}
static void row_uri_port_70000(row_result *r) {
  open_uri(r, "redis://127.0.0.1:70000");
}
static void row_uri_missing_host(row_result *r) {
  open_uri(r, "redis://:%d");
}
static void row_uri_bad_db(row_result *r) {
  open_uri(r, "redis://127.0.0.1:%d/abc");
}

/* ---- leases and waits ---- */

static void row_lease_zero(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "lease0");
  rlock_client *c = row_client();
  rlock *lock = rt_lock(c, key);
  note(r, rlock_lock(lock, 0));
  int rc = rlock_try_lock(lock, 0, 0);
  cr_assert_eq(rc, RLOCK_EINVAL, "try_lock(lease 0): %s", rlock_err_name(rc));
  cr_assert_neq(rlock_last_error()[0], '\0');
  cr_assert_eq(rt_exists(key), 0, "an invalid call reached Redis");
  rlock_free(lock);
  rlock_client_free(c);
}

static void row_lease_too_long(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "lease-huge");
  rlock_client *c = row_client();
  rlock *lock = rt_lock(c, key);
  int64_t max = INT64_C(1) << 40;
  note(r, rlock_try_lock(lock, 0, max + 1));
  int rc = rlock_lock(lock, INT64_MAX);
  cr_assert_eq(rc, RLOCK_EINVAL, "lock(lease INT64_MAX): %s",
               rlock_err_name(rc));
  cr_assert_eq(rt_exists(key), 0, "an invalid call reached Redis");
  /* 2^40 itself is the largest valid lease. */
  rc = rlock_try_lock(lock, 0, max);
  cr_assert_eq(rc, 1, "try_lock(lease 2^40): %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  long long pttl = rt_pttl(key);
  cr_assert(pttl > max - 60000 && pttl <= max, "pttl %lld", pttl);
  cr_assert_eq(rlock_unlock(lock), 0);
  rlock_free(lock);
  rlock_client_free(c);
}

/* A wait that must mean "as long as it takes": the waiter blocks while the
 * lock is held (it subscribes instead of giving up) and gets it on unlock.
 * The row's result is the waiter's try_lock result (1). */
static void wait_forever(row_result *r, int64_t wait_ms) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "wait-forever");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *hc = row_client();
  rlock_client *wc = row_client();
  rlock *held = rt_lock(hc, key);
  rlock *waited = rt_lock(wc, key);
  cr_assert_eq(rlock_try_lock(held, 0, 30000), 1, "%s", rlock_last_error());
  fk_job waiter;
  fk_job_start(&waiter, waited, FK_TRY_LOCK, wait_ms, 5000, true);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  rt_sleep_ms(300);
  cr_assert_not(fk_job_done(&waiter), "try_lock(wait %" PRId64 ") returned "
                "%" PRId64 " %s while the lock was held", wait_ms, waiter.rc,
                waiter.err);
  int64_t t_unlock = rt_now_ms();
  cr_assert_eq(rlock_unlock(held), 0);
  fk_job_wait_done(&waiter, 5000, "waiter after the unlock");
  r->rc = waiter.rc;
  snprintf(r->err, sizeof r->err, "%s", waiter.err);
  cr_assert_lt(waiter.t_end - t_unlock, 1000 + SLACK_MS);
  fk_job_release(&waiter);
  rlock_free(waited);
  rlock_free(held);
  rlock_client_free(wc);
  rlock_client_free(hc);
}

static void row_negative_wait(row_result *r) { wait_forever(r, -7); }
static void row_huge_wait(row_result *r) { wait_forever(r, INT64_MAX); }

/* ---- server-side refusals ---- */

static void row_wrong_type(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "wrongtype");
  rt_ok("OK", "SET %s x", key);
  rlock_client *c = row_client();
  rlock *lock = rt_lock(c, key);
  note(r, rlock_try_lock(lock, 0, 5000));
  assert_err_contains(r, "WRONGTYPE");
  /* Waiting forms fail the same way, at once: no wait on a non-lock. */
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(lock, 5000, 5000);
  cr_assert_eq(rc, RLOCK_EWRONGTYPE, "try_lock(wait 5000): %s",
               rlock_err_name(rc));
  rc = rlock_lock(lock, -1);
  cr_assert_eq(rc, RLOCK_EWRONGTYPE, "lock: %s", rlock_err_name(rc));
  cr_assert_lt(rt_now_ms() - t0, 1000 + SLACK_MS);
  char *v = rt_str("GET %s", key);
  cr_assert(v != NULL && strcmp(v, "x") == 0, "value changed: %s",
            v ? v : "nil");
  free(v);
  cr_assert_eq(rt_pttl(key), -1, "a TTL was put on the key");
  cr_assert_eq(rt_int("DEL %s", key), 1); /* the row's own key */
  rlock_free(lock);
  rlock_client_free(c);
}

static void row_unlock_not_held(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "not-held");
  rlock_client *c = row_client();
  rlock *lock = rt_lock(c, key);
  note(r, rlock_unlock(lock));
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(lock);
  rlock_client_free(c);
}

static void row_double_unlock(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "double-unlock");
  rlock_client *c = row_client();
  rlock *lock = rt_lock(c, key);
  cr_assert_eq(rlock_lock(lock, -1), 0, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  note(r, rlock_unlock(lock));
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(lock);
  rlock_client_free(c);
}

/* ---- lifetime ---- */

/* A lock handle outlives its client's close (documented: handles stay valid
 * to free). The handle also keeps the client's memory alive, which is what
 * makes rlock_new on the closed client a defined call here. */
static void row_calls_after_close(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "after-close");
  rlock_client *c = row_client();
  rlock *lock = rt_lock(c, key);
  rlock_client_free(c);
  note(r, rlock_lock(lock, -1));
  int64_t ttl = 0;
  struct {
    const char *what;
    int64_t rc;
  } calls[] = {
      {"try_lock", rlock_try_lock(lock, 1000, -1)},
      {"unlock", rlock_unlock(lock)},
      {"force_unlock", rlock_force_unlock(lock)},
      {"is_locked", rlock_is_locked(lock)},
      {"is_held_by_current_thread", rlock_is_held(lock)},
      {"hold_count", rlock_hold_count(lock)},
      {"remain_ttl", rlock_remain_ttl(lock, &ttl)},
  };
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    cr_assert_eq(calls[i].rc, RLOCK_ECLOSED, "%s after close: %" PRId64 " %s",
                 calls[i].what, calls[i].rc,
                 rlock_err_name((int)calls[i].rc));
  rlock *again = (rlock *)&again;
  int rc = rlock_new(c, key, &again);
  cr_assert_eq(rc, RLOCK_ECLOSED, "rlock_new after close: %s",
               rlock_err_name(rc));
  cr_assert_neq(rlock_last_error()[0], '\0');
  cr_assert_null(again);
  cr_assert_str_eq(rlock_name(lock), key);
  cr_assert_eq(rt_exists(key), 0, "a call after close reached Redis");
  rlock_free(lock);
}

#define BLOCKED 3

/* Three threads blocked in rlock_lock on a held lock; the client is closed
 * from the main thread: each returns RLOCK_ECLOSED within about 1 s. */
static void row_close_while_waiting(row_result *r) {
  char key[KEY_MAX], chan[CHAN_MAX];
  rt_key(key, sizeof key, "close-waiting");
  rt_lock_channel(chan, sizeof chan, key);
  rlock_client *hc = row_client();
  rlock_client *wc = row_client();
  rlock *held = rt_lock(hc, key);
  rlock *waited = rt_lock(wc, key);
  cr_assert_eq(rlock_try_lock(held, 0, 30000), 1, "%s", rlock_last_error());
  fk_job jobs[BLOCKED];
  for (int i = 0; i < BLOCKED; i++)
    fk_job_start(&jobs[i], waited, FK_LOCK, -1, -1, false);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiters subscribed");
  rt_sleep_ms(300); /* all three into their wait; not observable otherwise */
  for (int i = 0; i < BLOCKED; i++)
    cr_assert_not(fk_job_done(&jobs[i]), "waiter %d returned %" PRId64
                  " %s while the lock was held", i, jobs[i].rc, jobs[i].err);
  int64_t t_close = rt_now_ms();
  rlock_client_free(wc);
  int64_t close_took = rt_now_ms() - t_close;
  for (int i = 0; i < BLOCKED; i++) {
    fk_job_wait_done(&jobs[i], 1000, "blocked waiter after close");
    fk_job_join(&jobs[i], 1000);
    cr_assert_eq(jobs[i].rc, RLOCK_ECLOSED, "waiter %d: %" PRId64 " %s", i,
                 jobs[i].rc, rlock_err_name((int)jobs[i].rc));
    cr_assert_neq(jobs[i].err[0], '\0', "waiter %d: empty last error", i);
    cr_assert_leq(jobs[i].t_end - t_close, 1000,
                  "waiter %d took %" PRId64 " ms to see the close", i,
                  jobs[i].t_end - t_close);
  }
  cr_assert_leq(close_took, 1000, "rlock_client_free took %" PRId64 " ms",
                close_took);
  r->rc = jobs[0].rc;
  snprintf(r->err, sizeof r->err, "%s", jobs[0].err);
  rlock_free(waited);
  cr_assert_eq(rlock_unlock(held), 0);
  rlock_free(held);
  rlock_client_free(hc);
}

/* ---- server configuration ---- */

static void row_acl_no_eval(row_result *r) {
  char key[KEY_MAX], uri[128];
  rt_key(key, sizeof key, "acl");
  rt_ok("OK", "ACL SETUSER fkuser on >fkpass ~* &* +@all -eval -evalsha");
  snprintf(uri, sizeof uri, "redis://fkuser:fkpass@127.0.0.1:%d", rt_port());
  rlock_options o;
  fk_options(&o, ROW_CLIENT);
  o.uri = uri;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "open as a user without EVAL: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
  rlock *lock = rt_lock(c, key);
  note(r, rlock_try_lock(lock, 0, 5000));
  assert_err_contains(r, "NOPERM");
  int64_t t0 = rt_now_ms();
  rc = rlock_lock(lock, -1);
  cr_assert_eq(rc, RLOCK_ENOPERM, "lock: %s", rlock_err_name(rc));
  cr_assert_lt(rt_now_ms() - t0, 1000 + SLACK_MS);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(lock);
  rlock_client_free(c);
}

static void row_wrong_password(row_result *r) {
  static const char *const args[] = {"--requirepass", "s3cret", NULL};
  rt_server_start_args(args);
  char uri[128];
  rlock_options o;
  fk_options(&o, ROW_CLIENT);
  o.uri = uri;
  rlock_client *c = (rlock_client *)&c;

  snprintf(uri, sizeof uri, "redis://:wrong@127.0.0.1:%d", rt_port());
  note(r, rlock_client_new(&c, &o));
  cr_assert_null(c, "failed open left a client");

  /* No password at all: NOAUTH is an authentication failure too. */
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", rt_port());
  c = (rlock_client *)&c;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, RLOCK_EAUTH, "open without a password: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
  cr_assert_null(c);

  /* The right one works. */
  snprintf(uri, sizeof uri, "redis://:s3cret@127.0.0.1:%d", rt_port());
  rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "open with the right password: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
  rlock *lock = rt_lock(c, "fk-auth-ok");
  cr_assert_eq(rlock_try_lock(lock, 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(lock), 0, "%s", rlock_last_error());
  rlock_free(lock);
  rlock_client_free(c);
}

static long long used_memory(void) {
  char *info = rt_str("INFO memory");
  cr_assert_not_null(info);
  const char *p = strstr(info, "used_memory:");
  cr_assert_not_null(p);
  long long v = atoll(p + strlen("used_memory:"));
  free(info);
  return v;
}

#define FILL_KEYS 20000

static void row_oom(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "oom");
  rlock_client *c = row_client();
  rlock *lock = rt_lock(c, key);
  rt_ok("OK", "DEBUG POPULATE %d fk:fill 100", FILL_KEYS);
  rt_ok("OK", "CONFIG SET maxmemory-policy noeviction");
  rt_ok("OK", "CONFIG SET maxmemory %lld", used_memory() / 2);
  note(r, rlock_try_lock(lock, 0, 5000));
  assert_err_contains(r, "OOM");
  int rc = rlock_lock(lock, -1);
  cr_assert_eq(rc, RLOCK_EOOM, "lock: %s", rlock_err_name(rc));
  cr_assert_eq(rt_exists(key), 0);
  rt_ok("OK", "CONFIG SET maxmemory 0");
  /* Only the fill keys are there; drop them for the leak check. */
  cr_assert_eq(fk_dbsize(), FILL_KEYS, "keys besides the fill keys");
  rt_ok("OK", "FLUSHALL");
  rlock_free(lock);
  rlock_client_free(c);
}

static bool replica_linked(void *arg) {
  fk_server *s = arg;
  redisContext *ctx = redisConnect("127.0.0.1", s->port);
  bool up = false;
  if (ctx && !ctx->err) {
    redisReply *rep = redisCommand(ctx, "INFO replication");
    up = rep && rep->type == REDIS_REPLY_STRING &&
         strstr(rep->str, "master_link_status:up") != NULL;
    if (rep)
      freeReplyObject(rep);
  }
  if (ctx)
    redisFree(ctx);
  return up;
}

static bool no_named_conns_on(void *arg) {
  fk_server *s = arg;
  redisContext *ctx = redisConnect("127.0.0.1", s->port);
  bool none = false;
  if (ctx && !ctx->err) {
    redisReply *rep = redisCommand(ctx, "CLIENT LIST");
    none = rep && rep->type == REDIS_REPLY_STRING &&
           strstr(rep->str, " name=" ROW_CLIENT " ") == NULL;
    if (rep)
      freeReplyObject(rep);
  }
  if (ctx)
    redisFree(ctx);
  return none;
}

static void row_readonly_replica(row_result *r) {
  char key[KEY_MAX], port_s[16];
  rt_key(key, sizeof key, "replica");
  snprintf(port_s, sizeof port_s, "%d", rt_port());
  const char *args[] = {"--replicaof", "127.0.0.1", port_s, NULL};
  static fk_server replica;
  fk_server_spawn(&replica, 0, args);
  rt_wait_until_what(replica_linked, &replica, 10000, "replica in sync");
  rlock_options o;
  fk_options(&o, ROW_CLIENT);
  o.uri = replica.uri;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "open on the replica: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  rlock *lock = rt_lock(c, key);
  note(r, rlock_try_lock(lock, 0, 5000));
  assert_err_contains(r, "READONLY");
  rlock_free(lock);
  rlock_client_free(c);
  cr_assert_eq(rt_exists(key), 0, "the key reached the master");
  rt_wait_until_what(no_named_conns_on, &replica, 3000,
                     "the client's connections to the replica closed");
  fk_server_halt(&replica);
}

/* ---- ACL users that may do part of what a lock needs (issue 10) ---- */

/* A client (named ROW_CLIENT) logged in as `user` with password fkpass. */
static rlock_client *acl_client(const char *user) {
  char uri[128];
  snprintf(uri, sizeof uri, "redis://%s:fkpass@127.0.0.1:%d", user,
           rt_port());
  rlock_options o;
  fk_options(&o, ROW_CLIENT);
  o.uri = uri;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "open as %s: %s (%s)", user, rlock_err_name(rc),
               rlock_last_error());
  return c;
}

/* After a waiter's job was started: wait until it is subscribed, release the
 * holder's lock, and assert the waiter got the lock by the release message
 * (within 1 s, although the holder's lease was 20 s). */
static void assert_woken_by_release(rlock *held, fk_job *waiter,
                                    const char *key) {
  char chan[CHAN_MAX];
  rt_lock_channel(chan, sizeof chan, key);
  rt_wait_until_what(has_subscriber, chan, 5000, "waiter subscribed");
  int64_t t_unlock = rt_now_ms();
  cr_assert_eq(rlock_unlock(held), 0, "%s", rlock_last_error());
  fk_job_wait_done(waiter, 5000, "waiter");
  cr_assert_eq(waiter->rc, 1, "waiter: %" PRId64 " %s", waiter->rc,
               waiter->err);
  cr_assert_lt(waiter->t_end - t_unlock, 1000,
               "the waiter was not woken by the release message");
  fk_job_release(waiter);
}

/* A user without channel permission (Redis 7's default: resetchannels)
 * waiting for a held lock: the SUBSCRIBE is refused. The wait fails at once
 * with the server's code instead of timing out, and the refusal does not
 * stick to the name: once the ACL allows channels, the next wait on the
 * same name by the same client subscribes and is woken by the release. */
static void row_acl_no_channel_wait(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "aclsub");
  rt_ok("OK", "ACL SETUSER fksub on >fkpass ~* resetchannels +@all");
  rlock_client *hc = row_client();
  rlock *held = rt_lock(hc, key);
  cr_assert_eq(rlock_try_lock(held, 0, 20000), 1, "%s", rlock_last_error());
  rlock_client *c = acl_client("fksub");
  rlock *lock = rt_lock(c, key);

  int64_t t0 = rt_now_ms();
  note(r, rlock_try_lock(lock, 4000, 5000));
  int64_t took = rt_now_ms() - t0;
  assert_err_contains(r, "NOPERM");
  cr_assert_lt(took, 1000, "the refused SUBSCRIBE took %" PRId64 " ms to "
               "fail (the wait was 4000 ms)", took);
  /* Again on the same name: refused again, not stuck "subscribing". */
  int rc = rlock_try_lock(lock, 4000, 5000);
  cr_assert_eq(rc, RLOCK_ENOPERM, "second wait: %s (%s)", rlock_err_name(rc),
               rlock_last_error());

  rt_ok("OK", "ACL SETUSER fksub allchannels");
  fk_job waiter;
  fk_job_start(&waiter, lock, FK_TRY_LOCK, 8000, 5000, true);
  assert_woken_by_release(held, &waiter, key);
  rlock_free(lock);
  rlock_free(held);
  rlock_client_free(c);
  rlock_client_free(hc);
}

/* A user that may not publish: its unlock would delete the lock and then
 * fail at PUBLISH, so nobody would hear the release. The unlock must change
 * nothing and say ENOPERM; the hold is still the client's (a second unlock
 * says ENOPERM again, not ELOCKLOST), and force_unlock is refused the same
 * way. Once the ACL allows channels, the unlock releases and wakes. */
static void row_acl_no_publish_unlock(row_result *r) {
  char key[KEY_MAX], owner[OWNER_MAX];
  rt_key(key, sizeof key, "aclpub");
  rt_ok("OK", "ACL SETUSER fkpub on >fkpass ~* resetchannels +@all");
  rlock_client *c = acl_client("fkpub");
  rlock *lock = rt_lock(c, key);
  fk_my_owner(c, owner, sizeof owner);
  cr_assert_eq(rlock_try_lock(lock, 0, 20000), 1, "%s", rlock_last_error());

  note(r, rlock_unlock(lock));
  assert_err_contains(r, "NOPERM");
  char *count = rt_hget(key, owner);
  cr_assert(count != NULL && strcmp(count, "1") == 0,
            "the refused unlock changed the lock: field %s",
            count ? count : "(nil)");
  free(count);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 15000 && pttl <= 20000, "pttl %lld", pttl);
  int rc = rlock_unlock(lock);
  cr_assert_eq(rc, RLOCK_ENOPERM, "second unlock: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
  cr_assert_eq(rlock_hold_count(lock), 1);
  rc = rlock_force_unlock(lock);
  cr_assert_eq(rc, RLOCK_ENOPERM, "force_unlock: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_eq(rt_exists(key), 1, "the refused force_unlock deleted the lock");

  rt_ok("OK", "ACL SETUSER fkpub allchannels");
  rlock_client *wc = row_client();
  rlock *waited = rt_lock(wc, key);
  fk_job waiter;
  fk_job_start(&waiter, waited, FK_TRY_LOCK, 8000, 5000, true);
  assert_woken_by_release(lock, &waiter, key);
  rlock_free(waited);
  rlock_free(lock);
  rlock_client_free(wc);
  rlock_client_free(c);
}

/* A user that may not PEXPIRE: an acquire would leave the owner's field
 * with no TTL, a hold that never expires. It must change nothing. */
static void row_acl_no_pexpire_acquire(row_result *r) {
  char key[KEY_MAX];
  rt_key(key, sizeof key, "aclpx");
  rt_ok("OK", "ACL SETUSER fkpx on >fkpass ~* &* +@all -pexpire");
  rlock_client *c = acl_client("fkpx");
  rlock *lock = rt_lock(c, key);
  note(r, rlock_try_lock(lock, 0, 5000));
  assert_err_contains(r, "NOPERM");
  cr_assert_eq(rt_exists(key), 0, "the refused acquire left the key (TTL "
               "%lld)", rt_pttl(key));
  int64_t t0 = rt_now_ms();
  int rc = rlock_lock(lock, -1);
  cr_assert_eq(rc, RLOCK_ENOPERM, "lock: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_lt(rt_now_ms() - t0, 1000 + SLACK_MS);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(lock);
  rlock_client_free(c);
}

/* ---- not Redis, or a Redis that refuses at the door (issue 10) ---- */

/* libuv keeps one process-wide pipe from the first loop on, and the
 * harness's own connection stays open: both are made before counting. */
static void warm_up(void) {
  (void)rt_redis();
  rlock_client_free(row_client());
}

/* Opens a client on the fake peer `p` (started here).
 * The open must fail within command_timeout_ms + slack, without killing the
 * process, and leave no descriptor or thread behind. */
static void open_on_peer(row_result *r, fk_peer *p) {
  warm_up();
  fk_peer_start(p);
  int fds0 = fk_count_fds(), threads0 = fk_count_threads();
  char uri[64];
  fk_peer_uri(p, uri, sizeof uri);
  /* No client name, as the CLI opens: the handshake is only PING, so a
   * second reply has no request at all (hiredis aborted on it). */
  rlock_options o;
  fk_options(&o, NULL);
  o.uri = uri;
  rlock_client *c = (rlock_client *)&c;
  int64_t t0 = rt_now_ms();
  note(r, rlock_client_new(&c, &o));
  int64_t took = rt_now_ms() - t0;
  if (r->rc == 0)
    rlock_client_free(c);
  else
    cr_assert_null(c, "the failed open left a client");
  cr_assert_lt(took, o.command_timeout_ms + SLACK_MS,
               "open took %" PRId64 " ms (longest stall %" PRId64 " ms)",
               took, fk_max_stall_ms());
  cr_assert_geq(atomic_load(&p->accepted), 1, "the client never connected");
  fk_assert_resources(fds0, threads0, 3000, "after the failed open");
  char where[32];
  snprintf(where, sizeof where, "127.0.0.1:%d", p->port);
  assert_err_contains(r, where);
  fk_peer_stop(p);
}

/* Replies before any request, as from a service that greets: hiredis's
 * async dispatch asserted (SIGABRT) on a reply it had no callback for. */
static void row_peer_unsolicited_replies(row_result *r) {
  fk_peer p;
  fk_peer_init(&p);
  p.greeting = "+OK\r\n+OK\r\n";
  open_on_peer(r, &p);
  assert_err_contains(r, "+OK");
}

/* An HTTP server on the port: its answer is no RESP at all. */
static void row_peer_http_server(row_result *r) {
  fk_peer p;
  fk_peer_init(&p);
  p.greeting = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
  p.hangup = true;
  open_on_peer(r, &p);
  assert_err_contains(r, "rotocol error");
}

/* A database the server does not have (SELECT fails): the URI is wrong. */
static void row_uri_db_out_of_range(row_result *r) {
  open_uri(r, "redis://127.0.0.1:%d/16");
  assert_err_contains(r, "16");
  assert_err_contains(r, "out of range");
}

/* A server at maxclients answers an error at accept and closes: a refused
 * connection (transient), not an error reply to a command. */
static void row_server_maxclients(row_result *r) {
  redisReply *rep = rt_cmd("CONFIG GET maxclients");
  cr_assert(rep->type == REDIS_REPLY_ARRAY && rep->elements == 2,
            "CONFIG GET maxclients");
  char old[32];
  snprintf(old, sizeof old, "%s", rep->element[1]->str);
  freeReplyObject(rep);
  /* The harness's connection (made above, kept open) fills the server. */
  long long connected = (long long)rt_client_count();
  rt_ok("OK", "CONFIG SET maxclients %lld", connected);
  open_uri(r, "redis://127.0.0.1:%d");
  rt_ok("OK", "CONFIG SET maxclients %s", old);
  assert_err_contains(r, "max number of clients");
}

/* An ACL user that may not PING (the handshake's last step). */
static void row_acl_denies_ping(row_result *r) {
  rt_ok("OK", "ACL SETUSER fkping on >fkpass ~* &* +@all -ping");
  open_uri(r, "redis://fkping:fkpass@127.0.0.1:%d");
  assert_err_contains(r, "NOPERM");
  cr_assert_eq(rt_int("ACL DELUSER fkping"), 1);
}

/* ---- the table ---- */

/* X(row, expected result): a negative RLOCK_E* code, or what a valid call
 * returns (0 from rlock_new, 1 from an acquiring try_lock). */
#define BADINPUT_ROWS(X)                                                       \
  X(null_name, RLOCK_EINVAL)                                                   \
  X(empty_name, RLOCK_EINVAL)                                                  \
  X(brace_name, 0)                                                             \
  X(name_1mib, RLOCK_ENAMETOOLONG)                                             \
  X(uri_bad_scheme, RLOCK_EURI)                                                \
  X(uri_port_0, RLOCK_EURI)                                                    \
  X(uri_port_70000, RLOCK_EURI)                                                \
  X(uri_missing_host, RLOCK_EURI)                                              \
  X(uri_bad_db, RLOCK_EURI)                                                    \
  X(lease_zero, RLOCK_EINVAL)                                                  \
  X(lease_too_long, RLOCK_EINVAL)                                              \
  X(negative_wait, 1)                                                          \
  X(huge_wait, 1)                                                              \
  X(wrong_type, RLOCK_EWRONGTYPE)                                              \
  X(unlock_not_held, RLOCK_ENOTOWNER)                                          \
  X(double_unlock, RLOCK_ENOTOWNER)                                            \
  X(calls_after_close, RLOCK_ECLOSED)                                          \
  X(close_while_waiting, RLOCK_ECLOSED)                                        \
  X(acl_no_eval, RLOCK_ENOPERM)                                                \
  X(wrong_password, RLOCK_EAUTH)                                               \
  X(oom, RLOCK_EOOM)                                                           \
  X(readonly_replica, RLOCK_EREADONLY)                                         \
  X(acl_no_channel_wait, RLOCK_ENOPERM)                                        \
  X(acl_no_publish_unlock, RLOCK_ENOPERM)                                      \
  X(acl_no_pexpire_acquire, RLOCK_ENOPERM)                                     \
  X(peer_unsolicited_replies, RLOCK_EPROTO)                                    \
  X(peer_http_server, RLOCK_EPROTO)                                            \
  X(uri_db_out_of_range, RLOCK_EURI)                                           \
  X(server_maxclients, RLOCK_ECONN)                                            \
  X(acl_denies_ping, RLOCK_ENOPERM)

/* "RLOCK_EINVAL (-1)", or "1" for non-negative results. */
typedef struct name_buf {
  char s[64];
} name_buf;

static const char *result_name(int64_t rc, name_buf *b) {
  if (rc < 0 && rc >= INT_MIN)
    snprintf(b->s, sizeof b->s, "%s (%" PRId64 ")", rlock_err_name((int)rc),
             rc);
  else
    snprintf(b->s, sizeof b->s, "%" PRId64, rc);
  return b->s;
}

static void run_row(const char *row, int64_t expect,
                    void (*fn)(row_result *)) {
  row_result r;
  r.rc = INT64_MIN;
  r.err[0] = '\0';
  fn(&r);
  name_buf got, want;
  cr_assert_eq(r.rc, expect, "%s: got %s (\"%s\"), expected %s", row,
               result_name(r.rc, &got), r.err, result_name(expect, &want));
  if (expect < 0)
    cr_assert_neq(r.err[0], '\0', "%s: %s but rlock_last_error() is empty",
                  row, rlock_err_name((int)expect));
  else
    cr_assert_eq(r.err[0], '\0', "%s: succeeded but rlock_last_error() is "
                 "'%s'", row, r.err);
  cr_log_info("%s -> %s: %s", row, result_name(r.rc, &got),
              r.err[0] ? r.err : "(no error)");
  fk_assert_clean(ROW_CLIENT, false, 3000);
}

#define BADINPUT_TEST(row, expect)                                             \
  Test(badinput, row) { run_row(#row, (expect), row_##row); }
BADINPUT_ROWS(BADINPUT_TEST)

/* ---- replies nobody asked for, on an established connection ---- */

static bool peer_dropped(void *p) {
  return atomic_load(&((fk_peer *)p)->inject_target_closed);
}

typedef struct above {
  atomic_int *counter;
  int than;
} above;

static bool counter_above(void *arg) {
  above *a = arg;
  return atomic_load(a->counter) > a->than;
}

static void wait_above(atomic_int *counter, int than, const char *what) {
  above a = {counter, than};
  rt_wait_until_what(counter_above, &a, 3000, what);
}

/* A peer that passes for Redis at the handshake (PING -> +PONG, the rest ->
 * +OK, EXISTS -> :0). rlock matches replies to requests in order, so an
 * extra reply can only be told apart from an answer when nothing is waiting
 * for one: on the idle command connection it drops the connection (and it
 * reconnects); bytes that are no RESP drop it whatever is in flight; and a
 * peer that adds an extra reply behind every handshake makes the call that
 * waits take that reply as its answer. Never an abort. */
Test(badinput, unsolicited_reply_established) {
  warm_up();
  fk_peer p;
  fk_peer_init(&p);
  p.answer = true;
  atomic_store(&p.other_reply, ":0\r\n");
  fk_peer_start(&p);
  int fds0 = fk_count_fds(), threads0 = fk_count_threads();
  char uri[64];
  fk_peer_uri(&p, uri, sizeof uri);
  rlock_options o;
  fk_options(&o, ROW_CLIENT);
  o.uri = uri;
  o.retry_attempts = 0; /* a failed call shows at once, not re-sent */
  o.command_timeout_ms = 2000;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "open on the Redis-like peer: %s (%s)",
               rlock_err_name(rc), rlock_last_error());
  rlock *lock = rt_lock(c, "fk-peer");
  /* Also shows the peer which connection is the command connection. */
  rc = rlock_is_locked(lock);
  cr_assert_eq(rc, 0, "is_locked: %s (%s)", rlock_err_name(rc),
               rlock_last_error());

  /* 1. "+OK" on the idle command connection: nothing waits for a reply, so
   * it is a protocol violation: the client drops the connection and makes a
   * new one, which works. */
  int pongs = atomic_load(&p.pongs);
  fk_peer_inject(&p, "+OK\r\n");
  rt_wait_until_what(peer_dropped, &p, 3000,
                     "the client dropped the connection with the extra reply");
  wait_above(&p.pongs, pongs, "the client reconnected (handshake PING)");
  rc = rlock_is_locked(lock);
  cr_assert_eq(rc, 0, "is_locked after the reconnect: %s (%s)",
               rlock_err_name(rc), rlock_last_error());

  /* 2. Bytes that are no RESP while EXISTS waits for its reply: the reader
   * fails, the connection is dropped, and the call fails as on any lost
   * connection (ECONN: retry_attempts is 0), at once rather than at its
   * 2000 ms deadline. */
  atomic_store(&p.other_reply, NULL);
  int others = atomic_load(&p.others);
  fk_job job;
  fk_job_start(&job, lock, FK_IS_LOCKED, 0, 0, false);
  wait_above(&p.others, others, "the peer got EXISTS");
  fk_peer_inject(&p, "HTTP/1.1 400 Bad Request\r\n\r\n");
  fk_job_wait_done(&job, 1500, "is_locked on a connection fed garbage");
  fk_job_join(&job, 1000);
  cr_assert_eq(job.rc, RLOCK_ECONN, "is_locked: %" PRId64 " %s (%s)", job.rc,
               rlock_err_name((int)job.rc), job.err);
  cr_assert_neq(job.err[0], '\0');
  rt_wait_until_what(peer_dropped, &p, 3000, "the client dropped it");

  /* 3. From now on the peer adds "+OK" behind every +PONG. The handshake
   * PINGs twice, before and after the capability probes, so the extra
   * "+OK" behind the first +PONG is taken by the first probe, every later
   * reply shifts by one, and the last PING gets the probe's ":0" instead of
   * +PONG: the handshake fails (RLOCK_EPROTO, "unexpected reply to PING"),
   * each new connection is dropped before it is ready, and a call waiting
   * for one fails as on any lost connection (RLOCK_ECONN: retry_attempts is
   * 0), as in 2. (Before the probes, the extra reply came after the
   * handshake's last reply and EXISTS took it for its answer:
   * RLOCK_EPROTO.) */
  atomic_store(&p.other_reply, ":0\r\n");
  rc = rlock_is_locked(lock); /* the command connection, for the peer */
  cr_assert_eq(rc, 0, "is_locked: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  atomic_store(&p.extra_after_pong, true);
  int accepted = atomic_load(&p.accepted);
  fk_peer_inject(&p, "+OK\r\n");
  wait_above(&p.accepted, accepted + 1, "two reconnects");
  rc = rlock_is_locked(lock);
  cr_assert_eq(rc, RLOCK_ECONN, "is_locked on a peer with extra replies: "
               "%s (%s)", rlock_err_name(rc), rlock_last_error());
  cr_assert_neq(rlock_last_error()[0], '\0');
  /* Reconnects back off (a peer that misbehaves after every handshake must
   * not get a reconnect loop): a handful per second, not hundreds. */
  accepted = atomic_load(&p.accepted);
  rt_sleep_ms(1000);
  int per_second = atomic_load(&p.accepted) - accepted;
  cr_assert_lt(per_second, 20, "%d reconnects in 1 s", per_second);

  int64_t t0 = rt_now_ms();
  rlock_client_free(c);
  int64_t took = rt_now_ms() - t0;
  cr_assert_lt(took, 1000, "rlock_client_free took %" PRId64 " ms", took);
  rlock_free(lock);
  fk_assert_resources(fds0, threads0, 3000, "after close");
  fk_peer_stop(&p);
  fk_assert_clean(ROW_CLIENT, false, 3000);
}
