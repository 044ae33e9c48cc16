/* The RedLock (rlock_new_redlock; Redisson getRedLock(RLock...)): a
 * MultiLock over one lock per independent redis-server, held by a
 * majority, with Java's per-member wait and failed-locks limit. Every test
 * runs 3 or 5 real servers: the harness's (server 0, never stopped) and
 * extra ones from faultkit, stopped with SIGSTOP or killed with SIGKILL. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faultkit.h"
#include "harness.h"

TestSuite(redlock, .init = fk_init, .fini = fk_fini, .timeout = 60);

#define MAXS 5
/* Member clients' command timeout: what a member on a stopped server costs
 * when it is tried without a wait. */
#define CMD_TIMEOUT_MS 400

typedef struct servers {
  size_t n;
  fk_server extra[MAXS]; /* [1..n-1] */
  int port[MAXS];
  char uri[MAXS][64];
  redisContext *ctx[MAXS]; /* plain connections, for assertions */
  bool down[MAXS];
} servers;

static void servers_start(servers *s, size_t n) {
  memset(s, 0, sizeof(*s));
  s->n = n;
  s->port[0] = rt_port();
  snprintf(s->uri[0], sizeof s->uri[0], "%s", rt_uri());
  for (size_t i = 1; i < n; i++) {
    fk_server_spawn(&s->extra[i], 0, NULL);
    s->port[i] = s->extra[i].port;
    snprintf(s->uri[i], sizeof s->uri[i], "%s", s->extra[i].uri);
  }
  for (size_t i = 0; i < n; i++) {
    struct timeval tv = {.tv_sec = 2};
    s->ctx[i] = redisConnectWithTimeout("127.0.0.1", s->port[i], tv);
    cr_assert(s->ctx[i] != NULL && s->ctx[i]->err == 0, "connect %d",
              s->port[i]);
    redisSetTimeout(s->ctx[i], tv);
  }
}

static void servers_stop(servers *s) {
  for (size_t i = 0; i < s->n; i++)
    if (s->ctx[i] != NULL)
      redisFree(s->ctx[i]);
  for (size_t i = 1; i < s->n; i++)
    fk_server_halt(&s->extra[i]); /* SIGCONT first: a stopped one too */
}

static void freeze(servers *s, size_t i) {
  cr_assert(i > 0);
  cr_assert_eq(kill(s->extra[i].pid, SIGSTOP), 0, "SIGSTOP: %s",
               strerror(errno));
  s->down[i] = true;
}

static void thaw(servers *s, size_t i) {
  cr_assert_eq(kill(s->extra[i].pid, SIGCONT), 0);
  s->down[i] = false;
}

static void kill_server(servers *s, size_t i) {
  cr_assert(i > 0);
  cr_assert_eq(kill(s->extra[i].pid, SIGKILL), 0);
  waitpid(s->extra[i].pid, NULL, 0);
  s->extra[i].pid = 0;
  s->down[i] = true;
}

/* The owner fields of hash `name` on live server i (-1: the key is not a
 * hash or absent: 0). */
static long long hlen_on(servers *s, size_t i, const char *name) {
  redisReply *r = redisCommand(s->ctx[i], "HLEN %s", name);
  cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER, "HLEN on %zu", i);
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

static bool field_on(servers *s, size_t i, const char *name,
                     const char *field) {
  redisReply *r = redisCommand(s->ctx[i], "HEXISTS %s %s", name, field);
  cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER, "HEXISTS on %zu", i);
  bool v = r->integer == 1;
  freeReplyObject(r);
  return v;
}

static rlock_client *member_client(servers *s, size_t i) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = s->uri[i];
  o.command_timeout_ms = CMD_TIMEOUT_MS;
  o.connect_timeout_ms = CMD_TIMEOUT_MS;
  o.retry_attempts = 1;
  o.retry_interval_ms = 100;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "open %s: %s", s->uri[i], rlock_last_error());
  return c;
}

/* One side: a client per server and a RedLock over lock `name` on each. */
typedef struct side {
  size_t n;
  rlock_client *c[MAXS];
  rlock *m[MAXS];
  rlock *rl;
} side;

static void side_open(side *d, servers *s, const char *name) {
  memset(d, 0, sizeof(*d));
  d->n = s->n;
  for (size_t i = 0; i < s->n; i++) {
    d->c[i] = member_client(s, i);
    cr_assert_eq(rlock_new(d->c[i], name, &d->m[i]), 0);
  }
  int rc = rlock_new_redlock(d->m, d->n, &d->rl);
  cr_assert_eq(rc, 0, "rlock_new_redlock: %s", rlock_last_error());
  cr_assert_eq(rlock_member_count(d->rl), d->n);
  cr_assert_eq(rlock_quorum(d->rl), d->n / 2 + 1);
}

static void side_close(side *d) {
  rlock_free(d->rl);
  for (size_t i = 0; i < d->n; i++) {
    rlock_free(d->m[i]);
    rlock_client_free(d->c[i]);
  }
}

static void owner_of(side *d, size_t i, char *buf, size_t n) {
  rt_owner(buf, n, d->c[i], rlock_thread_id());
}

/* Takes the RedLock with a minority of servers down (`down` of them, the
 * last ones), checks it is held on every live server and that a second
 * RedLock over the same name is refused and leaves nothing behind, then
 * releases it. */
static void minority_down(size_t n, size_t ndown, bool use_kill) {
  servers s;
  servers_start(&s, n);
  char name[64];
  rt_key(name, sizeof name, "redlock");
  side a, b;
  side_open(&a, &s, name);
  side_open(&b, &s, name);
  for (size_t k = 0; k < ndown; k++) {
    if (use_kill)
      kill_server(&s, n - 1 - k);
    else
      freeze(&s, n - 1 - k);
  }

  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(a.rl, 3000, -1);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, 1, "A try_lock: %d %s", rc, rlock_last_error());
  cr_assert_lt(took, 3000 + 1500, "A took %lld ms", (long long)took);
  cr_log_info("%zu of %zu down: taken in %lld ms", ndown, n, (long long)took);
  size_t held = 0;
  for (size_t i = 0; i < n; i++) {
    if (s.down[i])
      continue;
    char owner[160];
    owner_of(&a, i, owner, sizeof owner);
    cr_assert(field_on(&s, i, name, owner), "A not held on live server %zu",
              i);
    held++;
  }
  cr_assert_geq(held, n / 2 + 1);
  cr_assert_eq(rlock_is_held_owner(a.rl, rlock_thread_id()), 1, "%s",
               rlock_last_error());

  /* B: every live member is A's, so B misses a majority and gives up
   * within its wait, with nothing of its own left on a live server. */
  t0 = rt_now_ms();
  rc = rlock_try_lock(b.rl, 1200, -1);
  took = rt_now_ms() - t0;
  cr_assert(rc == 0 || rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONN,
            "B while A holds: %d %s", rc, rlock_last_error());
  cr_assert_lt(took, 1200 + 1500, "B took %lld ms", (long long)took);
  for (size_t i = 0; i < n; i++)
    if (!s.down[i]) {
      char owner[160];
      owner_of(&b, i, owner, sizeof owner);
      cr_assert(!field_on(&s, i, name, owner), "B left on server %zu", i);
      cr_assert_eq(hlen_on(&s, i, name), 1, "server %zu", i);
    }

  rc = rlock_unlock(a.rl);
  cr_assert_eq(rc, 0, "A unlock: %d %s", rc, rlock_last_error());
  for (size_t i = 0; i < n; i++)
    if (!s.down[i])
      cr_assert_eq(hlen_on(&s, i, name), 0, "server %zu still held", i);
  /* Now B gets it. */
  rc = rlock_try_lock(b.rl, 3000, -1);
  cr_assert_eq(rc, 1, "B after A: %d %s", rc, rlock_last_error());
  cr_assert_eq(rlock_unlock(b.rl), 0, "%s", rlock_last_error());

  if (!use_kill) {
    /* The tries that reached a stopped server run when it resumes: each
     * is trimmed by its client, so the resumed servers end up empty. */
    for (size_t k = 0; k < ndown; k++)
      thaw(&s, n - 1 - k);
    int64_t until = rt_now_ms() + 8000;
    for (size_t i = 0; i < n; i++)
      while (hlen_on(&s, i, name) != 0) {
        cr_assert_lt(rt_now_ms(), until, "server %zu still has %s", i, name);
        rt_sleep_ms(20);
      }
  }
  side_close(&a);
  side_close(&b);
  servers_stop(&s);
}

Test(redlock, three_one_stopped_locks_and_excludes) {
  minority_down(3, 1, false);
}

Test(redlock, five_two_stopped_locks_and_excludes) {
  minority_down(5, 2, false);
}

Test(redlock, five_two_killed_locks_and_excludes) {
  minority_down(5, 2, true);
}

/* Two members held elsewhere, every server up: each try_lock with a wait
 * returns 0, never an error. The member waits are shares of the wait
 * (wait / 3 each), so a round that starts late gives its last member a
 * sliver of a millisecond or two, which a busy machine leaves unanswered;
 * that member answered "held" earlier in the call, so its miss is the
 * call's deadline, not a fault of its server. Waits from 200 to 212 ms
 * put the sliver at every offset a round can end at. */
Test(redlock, busy_majority_with_a_wait_is_not_acquired_never_an_error) {
  servers s;
  servers_start(&s, 3);
  char name[64];
  rt_key(name, sizeof name, "redlock");
  side a;
  side_open(&a, &s, name);
  for (size_t i = 1; i < 3; i++) {
    redisReply *r = redisCommand(s.ctx[i], "HSET %s other:1 1", name);
    cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
    r = redisCommand(s.ctx[i], "PEXPIRE %s 60000", name);
    freeReplyObject(r);
  }
  for (int k = 0; k < 26; k++) {
    int64_t wait = 200 + k % 13;
    int64_t t0 = rt_now_ms();
    int rc = rlock_try_lock(a.rl, wait, -1);
    int64_t took = rt_now_ms() - t0;
    cr_assert_eq(rc, 0, "try %d, wait %lld: %d %s", k, (long long)wait, rc,
                 rlock_last_error());
    cr_assert_geq(took, wait - 5, "try %d gave up after %lld ms", k,
                  (long long)took);
    cr_assert_eq(hlen_on(&s, 0, name), 0, "try %d left member 0 held", k);
  }
  side_close(&a);
  servers_stop(&s);
}

/* Acquisitions so far on member i's client. */
static uint64_t taken_on(side *d, size_t i) {
  rlock_stats st;
  rlock_stats_init(&st);
  cr_assert_eq(rlock_client_stats(d->c[i], &st), 0);
  return st.acquisitions;
}

/* A MultiLock (every member needed) whose first member is busy for most
 * of the wait: the second member, on a stopped server, is first reached
 * with what is left - less than its fair share (wait / 2) - and its
 * silence is the deadline's, not evidence: 0 (not acquired). With the
 * first member free, the second gets the whole wait, and its silence is
 * the call's error. Both calls leave nothing on the live server. */
Test(redlock, multilock_member_reached_late_is_not_judged_by_a_sliver) {
  servers s;
  servers_start(&s, 2);
  char name[64];
  rt_key(name, sizeof name, "multilock");
  side a;
  side_open(&a, &s, name);
  rlock *ml = NULL;
  cr_assert_eq(rlock_new_multilock(a.m, 2, &ml), 0, "%s", rlock_last_error());
  /* Member 1's connection is up before its server stops. */
  cr_assert_eq(rlock_try_lock(a.m[1], 0, 5000), 1, "%s", rlock_last_error());
  cr_assert_eq(rlock_unlock(a.m[1]), 0);
  freeze(&s, 1);

  const int64_t wait = 1000;
  redisReply *r = redisCommand(s.ctx[0], "HSET %s other:1 1", name);
  cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
  freeReplyObject(r);
  r = redisCommand(s.ctx[0], "PEXPIRE %s 650", name);
  cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  uint64_t before = taken_on(&a, 0);
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(ml, wait, -1);
  int64_t took = rt_now_ms() - t0;
  cr_log_info("member 1 reached late: %d after %lld ms", rc, (long long)took);
  cr_assert_eq(taken_on(&a, 0), before + 1,
               "member 0 was not taken within the wait (%lld ms): the "
               "second member was never reached late", (long long)took);
  cr_assert_eq(rc, 0, "%d %s", rc, rlock_last_error());
  cr_assert_geq(took, wait - 50, "gave up after %lld ms", (long long)took);
  cr_assert_eq(hlen_on(&s, 0, name), 0, "member 0 left held");

  t0 = rt_now_ms();
  rc = rlock_try_lock(ml, wait, -1);
  took = rt_now_ms() - t0;
  cr_assert(rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONN,
            "member 1 silent through the whole wait: %d %s", rc,
            rlock_last_error());
  cr_assert(strstr(rlock_last_error(), "member 1") != NULL, "%s",
            rlock_last_error());
  cr_assert_geq(took, wait - 50, "gave up after %lld ms", (long long)took);
  cr_assert_eq(hlen_on(&s, 0, name), 0, "member 0 left held");
  thaw(&s, 1);
  rlock_free(ml);
  side_close(&a);
  servers_stop(&s);
}

/* A majority down: the call fails within its wait (plus a member's
 * command timeout), and the live servers hold nothing afterwards. */
static void majority_down(size_t n, size_t ndown, bool use_kill) {
  servers s;
  servers_start(&s, n);
  char name[64];
  rt_key(name, sizeof name, "redlock");
  side a;
  side_open(&a, &s, name);
  for (size_t k = 0; k < ndown; k++) {
    if (use_kill)
      kill_server(&s, n - 1 - k);
    else
      freeze(&s, n - 1 - k);
  }
  const int64_t wait = 1500;
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(a.rl, wait, -1);
  int64_t took = rt_now_ms() - t0;
  cr_assert(rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONN,
            "with %zu of %zu down: %d %s", ndown, n, rc, rlock_last_error());
  cr_log_info("%zu of %zu down: gave up after %lld ms (wait %lld)", ndown, n,
              (long long)took, (long long)wait);
  cr_assert_geq(took, wait - 50, "gave up early: %lld ms", (long long)took);
  cr_assert_lt(took, wait + 1500, "took %lld ms", (long long)took);
  for (size_t i = 0; i < n; i++)
    if (!s.down[i])
      cr_assert_eq(hlen_on(&s, i, name), 0, "live server %zu holds %s", i,
                   name);
  cr_assert_eq(rlock_is_held_owner(a.rl, rlock_thread_id()) == 1, false);
  side_close(&a);
  servers_stop(&s);
}

Test(redlock, three_two_stopped_fails_within_wait_leaves_nothing) {
  majority_down(3, 2, false);
}

Test(redlock, five_three_killed_fails_within_wait_leaves_nothing) {
  majority_down(5, 3, true);
}

/* All servers up, one member held by someone else: a quorum is enough
 * (Java's limit), and the member missed is not held by the RedLock. */
Test(redlock, one_member_held_elsewhere_is_a_tolerated_miss) {
  servers s;
  servers_start(&s, 3);
  char name[64];
  rt_key(name, sizeof name, "redlock");
  side a;
  side_open(&a, &s, name);
  rlock_client *other = member_client(&s, 0);
  rlock *o = NULL;
  cr_assert_eq(rlock_new(other, name, &o), 0);
  cr_assert_eq(rlock_try_lock(o, 0, 20000), 1);
  int rc = rlock_try_lock(a.rl, 0, -1); /* one try of each */
  cr_assert_eq(rc, 1, "%d %s", rc, rlock_last_error());
  char owner[160];
  owner_of(&a, 0, owner, sizeof owner);
  cr_assert(!field_on(&s, 0, name, owner));
  for (size_t i = 1; i < 3; i++) {
    owner_of(&a, i, owner, sizeof owner);
    cr_assert(field_on(&s, i, name, owner), "server %zu", i);
  }
  /* Unlock releases every member: the one not held answers
   * RLOCK_ENOTOWNER, which does not fail it (a quorum was released). */
  cr_assert_eq(rlock_unlock(a.rl), 0, "%s", rlock_last_error());
  cr_assert_eq(hlen_on(&s, 1, name), 0);
  cr_assert_eq(hlen_on(&s, 2, name), 0);
  cr_assert_eq(hlen_on(&s, 0, name), 1); /* the other owner's, untouched */
  /* A second unlock: nothing held -> RLOCK_ENOTOWNER. */
  cr_assert_eq(rlock_unlock(a.rl), RLOCK_ENOTOWNER);
  /* Two members held elsewhere: no quorum, one try each -> 0. */
  rlock_client *other2 = member_client(&s, 1);
  rlock *o2 = NULL;
  cr_assert_eq(rlock_new(other2, name, &o2), 0);
  cr_assert_eq(rlock_try_lock(o2, 0, 20000), 1);
  rc = rlock_try_lock(a.rl, 0, -1);
  cr_assert_eq(rc, 0, "%d %s", rc, rlock_last_error());
  cr_assert_eq(hlen_on(&s, 2, name), 0, "member 2 left held");
  /* With a lease: the held members get it (Java's lease trick). */
  cr_assert_eq(rlock_unlock(o2), 0);
  rc = rlock_try_lock(a.rl, 1000, 7000);
  cr_assert_eq(rc, 1, "%d %s", rc, rlock_last_error());
  for (size_t i = 1; i < 3; i++) {
    redisReply *r = redisCommand(s.ctx[i], "PTTL %s", name);
    cr_assert(r != NULL && r->integer > 5000 && r->integer <= 7000,
              "server %zu PTTL %lld", i, r ? r->integer : -9);
    freeReplyObject(r);
  }
  cr_assert_eq(rlock_unlock(a.rl), 0);
  rlock_free(o);
  rlock_free(o2);
  rlock_client_free(other);
  rlock_client_free(other2);
  side_close(&a);
  servers_stop(&s);
}

/* The quorum is n/2+1 for 1..5 members; a MultiLock's is n. */
Test(redlock, quorum_sizes) {
  servers s;
  servers_start(&s, 5);
  rlock_client *c[MAXS];
  rlock *m[MAXS];
  for (size_t i = 0; i < 5; i++) {
    c[i] = member_client(&s, i);
    cr_assert_eq(rlock_new(c[i], "q", &m[i]), 0);
  }
  for (size_t n = 1; n <= 5; n++) {
    rlock *rl = NULL;
    cr_assert_eq(rlock_new_redlock(m, n, &rl), 0, "%s", rlock_last_error());
    cr_assert_eq(rlock_quorum(rl), n / 2 + 1);
    rlock_free(rl);
    cr_assert_eq(rlock_new_multilock(m, n, &rl), 0);
    cr_assert_eq(rlock_quorum(rl), n);
    rlock_free(rl);
  }
  cr_assert_eq(rlock_quorum(NULL), 0);
  for (size_t i = 0; i < 5; i++) {
    rlock_free(m[i]);
    rlock_client_free(c[i]);
  }
  servers_stop(&s);
}

/* The async form and its cancel: a RedLock waiting (rounds, wait < 0) for
 * one held elsewhere ends with RLOCK_ECANCELED and leaves nothing; once
 * the other is released a new wait gets it. */
typedef struct async_res {
  atomic_int status;
  atomic_bool done;
} async_res;

static void async_cb(int status, int64_t value, void *data) {
  (void)value;
  async_res *r = data;
  atomic_store(&r->status, status);
  atomic_store(&r->done, true);
}

static bool async_done(void *arg) { return atomic_load(&((async_res *)arg)->done); }

Test(redlock, async_wait_cancel_then_take) {
  servers s;
  servers_start(&s, 3);
  char name[64];
  rt_key(name, sizeof name, "redlock-async");
  side a, b;
  side_open(&a, &s, name);
  side_open(&b, &s, name);
  cr_assert_eq(rlock_try_lock(a.rl, 0, -1), 1, "%s", rlock_last_error());
  uint64_t owner = rlock_owner_new();
  async_res r1 = {0};
  rlock_req *req = NULL;
  cr_assert_eq(rlock_lock_async(b.rl, owner, -1, -1, async_cb, &r1, &req), 0,
               "%s", rlock_last_error());
  rt_sleep_ms(300);
  cr_assert(!atomic_load(&r1.done), "the wait ended early: %d",
            atomic_load(&r1.status));
  cr_assert_eq(rlock_req_cancel(req), 0);
  rt_wait_until_what(async_done, &r1, 5000, "the canceled RedLock's callback");
  cr_assert_eq(atomic_load(&r1.status), RLOCK_ECANCELED);
  rlock_req_free(req);
  for (size_t i = 0; i < 3; i++) {
    char ob[160];
    rt_owner(ob, sizeof ob, b.c[i], owner);
    cr_assert(!field_on(&s, i, name, ob), "canceled wait left on %zu", i);
    cr_assert_eq(hlen_on(&s, i, name), 1);
  }
  async_res r2 = {0};
  cr_assert_eq(rlock_lock_async(b.rl, owner, -1, -1, async_cb, &r2, NULL), 0);
  rt_sleep_ms(100);
  cr_assert_eq(rlock_unlock(a.rl), 0, "%s", rlock_last_error());
  rt_wait_until_what(async_done, &r2, 8000, "the second wait");
  cr_assert_eq(atomic_load(&r2.status), 1, "%d", atomic_load(&r2.status));
  cr_assert_eq(rlock_is_held_owner(b.rl, owner), 1);
  cr_assert_eq(rlock_unlock_owner(b.rl, owner), 0, "%s", rlock_last_error());
  for (size_t i = 0; i < 3; i++)
    cr_assert_eq(hlen_on(&s, i, name), 0);
  side_close(&a);
  side_close(&b);
  servers_stop(&s);
}

/* ---- bad input: each refused with its error, nothing made or sent ---- */

static long long total_commands(servers *s, size_t i) {
  redisReply *r = redisCommand(s->ctx[i], "INFO stats");
  cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
  const char *p = strstr(r->str, "total_commands_processed:");
  cr_assert(p != NULL);
  long long v = atoll(p + strlen("total_commands_processed:"));
  freeReplyObject(r);
  return v;
}

Test(redlock, bad_input) {
  servers s;
  servers_start(&s, 2);
  rlock_client *c0 = member_client(&s, 0), *c1 = member_client(&s, 1);
  rlock_client *c0b = member_client(&s, 0); /* the same server again */
  rlock *a = NULL, *a2 = NULL, *b = NULL, *a0b = NULL;
  cr_assert_eq(rlock_new(c0, "x", &a), 0);
  cr_assert_eq(rlock_new(c0, "y", &a2), 0);
  cr_assert_eq(rlock_new(c1, "x", &b), 0);
  cr_assert_eq(rlock_new(c0b, "x", &a0b), 0);
  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c1, "x", &sem), 0);
  /* Count what the servers have seen since: the checks send nothing (the
   * INFO itself counts one each). */
  long long before0 = total_commands(&s, 0), before1 = total_commands(&s, 1);

  rlock *rl = (rlock *)1;
  rlock *none[1] = {NULL};
  cr_assert_eq(rlock_new_redlock(none, 0, &rl), RLOCK_EINVAL);
  cr_assert_null(rl);
  cr_assert(strstr(rlock_last_error(), "at least one member"), "%s",
            rlock_last_error());
  cr_assert_eq(rlock_new_redlock(NULL, 1, &rl), RLOCK_EINVAL);
  cr_assert_eq(rlock_new_redlock(none, 1, &rl), RLOCK_EINVAL);
  rlock *same_client[2] = {a, a2};
  cr_assert_eq(rlock_new_redlock(same_client, 2, &rl), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "same client"), "%s",
            rlock_last_error());
  rlock *same_server[3] = {a, b, a0b};
  cr_assert_eq(rlock_new_redlock(same_server, 3, &rl), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "same server"), "%s",
            rlock_last_error());
  cr_assert_null(rl);
  rlock *not_lock[2] = {a, (rlock *)sem};
  cr_assert_eq(rlock_new_redlock(not_lock, 2, &rl), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "not a lock"), "%s", rlock_last_error());
  /* The MultiLock accepts one client twice (Java's MultiLock does). */
  cr_assert_eq(rlock_new_multilock(same_client, 2, &rl), 0);
  /* A group as a member of a RedLock or MultiLock: refused. */
  rlock *nested[2] = {rl, b}, *rl2 = (rlock *)1;
  cr_assert_eq(rlock_new_redlock(nested, 2, &rl2), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "member 0 is a multilock"), "%s",
            rlock_last_error());
  cr_assert_null(rl2);
  rlock_free(rl);
  rlock *pair[2] = {a, b};
  cr_assert_eq(rlock_new_redlock(pair, 2, &rl), 0);
  cr_assert_str_eq(rlock_kind(rl), "redlock");
  cr_assert_eq(rlock_member_count(rl), 2);
  cr_assert_eq(rlock_quorum(rl), 2);
  nested[0] = b;
  nested[1] = rl;
  cr_assert_eq(rlock_new_multilock(nested, 2, &rl2), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "member 1 is a redlock"), "%s",
            rlock_last_error());
  /* The lock calls a RedLock cannot make: RLOCK_EINVAL, nothing sent. */
  int64_t v = 0;
  cr_assert_eq(rlock_is_locked(rl), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "UnsupportedOperationException"), "%s",
            rlock_last_error());
  cr_assert_eq(rlock_force_unlock(rl), RLOCK_EINVAL);
  cr_assert_eq(rlock_hold_count_owner(rl, 1), RLOCK_EINVAL);
  cr_assert_eq(rlock_remain_ttl(rl, &v), RLOCK_EINVAL);
  cr_assert_eq(rlock_fenced_token(rl, &v), RLOCK_EINVAL);
  cr_assert_eq(rlock_try_lock(rl, 100, 0), RLOCK_EINVAL); /* lease 0 */
  rlock_free(rl);
  cr_assert_eq(rlock_new_multilock(none, 0, &rl), RLOCK_EINVAL);
  /* The lock calls on a semaphore: RLOCK_EINVAL with a detail. */
  cr_assert_eq(rlock_try_lock((rlock *)sem, 0, -1), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "not a lock"), "%s", rlock_last_error());
  cr_assert_eq(rlock_is_lease_guaranteed((rlock *)sem, &v), RLOCK_EINVAL);

  cr_assert_eq(total_commands(&s, 0), before0 + 1, "a check sent something");
  cr_assert_eq(total_commands(&s, 1), before1 + 1, "a check sent something");

  /* A member from a closed client: RLOCK_ECLOSED from both. */
  rlock_client_free(c1);
  rlock *closed[2] = {a, b};
  cr_assert_eq(rlock_new_redlock(closed, 2, &rl), RLOCK_ECLOSED);
  cr_assert(strstr(rlock_last_error(), "closed"), "%s", rlock_last_error());
  cr_assert_null(rl);
  cr_assert_eq(rlock_new_multilock(closed, 2, &rl), RLOCK_ECLOSED);
  cr_assert_null(rl);

  rlock_semaphore_free(sem);
  rlock_free(a);
  rlock_free(a2);
  rlock_free(b);
  rlock_free(a0b);
  rlock_client_free(c0);
  rlock_client_free(c0b);
  servers_stop(&s);
}

/* ---- against Java's RedissonRedLock (tests/redisson/peer --redlock) ---- */

/* A running Redisson peer with --redlock: its stdin, its stdout, what is
 * read. */
typedef struct jpeer {
  pid_t pid;
  FILE *in;
  int out;
  char buf[8192];
  size_t len;
  char line[4096];
} jpeer;

/* The next line, within bound_ms (the first start compiles the driver). */
static const char *jpeer_line(jpeer *p, int64_t bound_ms) {
  int64_t until = rt_now_ms() + bound_ms;
  for (;;) {
    char *nl = memchr(p->buf, '\n', p->len);
    if (nl != NULL) {
      size_t n = (size_t)(nl - p->buf);
      cr_assert_lt(n, sizeof p->line, "peer line too long");
      memcpy(p->line, p->buf, n);
      p->line[n] = '\0';
      memmove(p->buf, nl + 1, p->len - n - 1);
      p->len -= n + 1;
      return p->line;
    }
    int64_t left = until - rt_now_ms();
    cr_assert_gt(left, 0, "no line from the Java peer within %lld ms",
                 (long long)bound_ms);
    struct pollfd pfd = {.fd = p->out, .events = POLLIN};
    int rc = poll(&pfd, 1, (int)left);
    if (rc <= 0)
      continue;
    cr_assert_lt(p->len, sizeof p->buf - 1, "peer output overflow");
    ssize_t got = read(p->out, p->buf + p->len, sizeof p->buf - 1 - p->len);
    cr_assert_gt(got, 0, "the Java peer ended (see its stderr above)");
    p->len += (size_t)got;
  }
}

static void jpeer_start(jpeer *p, servers *s) {
  memset(p, 0, sizeof(*p));
  char ports[128] = "", first[16];
  for (size_t i = 0; i < s->n; i++)
    snprintf(ports + strlen(ports), sizeof ports - strlen(ports), "%s%d",
             i ? "," : "", s->port[i]);
  snprintf(first, sizeof first, "%d", s->port[0]);
  int to[2], from[2];
  cr_assert_eq(pipe(to), 0);
  cr_assert_eq(pipe(from), 0);
  pid_t parent = getpid();
  p->pid = fork();
  cr_assert_geq(p->pid, 0);
  if (p->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
    dup2(to[0], STDIN_FILENO);
    dup2(from[1], STDOUT_FILENO);
    close(to[0]);
    close(to[1]);
    close(from[0]);
    close(from[1]);
    execl(REDLOCK_PEER_SCRIPT, REDLOCK_PEER_SCRIPT, first, "--redlock", ports,
          (char *)NULL);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  p->in = fdopen(to[1], "w");
  p->out = from[0];
  cr_assert(p->in != NULL);
  const char *l = jpeer_line(p, 120000);
  cr_assert(strncmp(l, "ID ", 3) == 0, "peer said: %s", l);
  l = jpeer_line(p, 30000);
  cr_assert_str_eq(l, "READY");
}

/* Sends a command and returns the rest of its answer after "OK" (""), or
 * fails the test on anything else. Tagged commands (A: ...) are answered
 * with their tag. */
static const char *jpeer_call(jpeer *p, const char *cmd) {
  fprintf(p->in, "%s\n", cmd);
  fflush(p->in);
  const char *l = jpeer_line(p, 30000);
  const char *colon = strchr(cmd, ':');
  if (colon != NULL && colon[1] == ' ') {
    size_t t = (size_t)(colon - cmd) + 2;
    cr_assert(strncmp(l, cmd, t) == 0, "'%s' answered '%s'", cmd, l);
    l += t;
  }
  cr_assert(strncmp(l, "OK", 2) == 0, "'%s' answered '%s'", cmd, l);
  l += 2;
  return *l == ' ' ? l + 1 : l;
}

static void jpeer_stop(jpeer *p) {
  fprintf(p->in, "quit\n");
  fclose(p->in);
  if (!rt_reap_bounded(p->pid, 10000)) {
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
  }
  close(p->out);
}

Test(redlock, java_and_c_redlocks_exclude_each_other, .timeout = 180) {
  servers s;
  servers_start(&s, 3);
  char name[64], cmd[256];
  rt_key(name, sizeof name, "redlock-java");
  jpeer j;
  jpeer_start(&j, &s);
  /* Java's member owners: "<id of client i>:<thread id of tag A>". */
  char ids[3][64];
  const char *r = jpeer_call(&j, "redlockIds");
  cr_assert_eq(sscanf(r, "%63[^,],%63[^,],%63[^ ]", ids[0], ids[1], ids[2]),
               3, "%s", r);
  r = jpeer_call(&j, "A: owner");
  const char *tid = strrchr(r, ':');
  cr_assert(tid != NULL);
  char jowner[3][256];
  for (size_t i = 0; i < 3; i++)
    snprintf(jowner[i], sizeof jowner[i], "%s:%.20s", ids[i], tid + 1);
  for (size_t i = 0; i < 3; i++) { /* " (0 ms)" follows the owner */
    char *sp = strchr(jowner[i], ' ');
    if (sp != NULL)
      *sp = '\0';
  }

  side c;
  side_open(&c, &s, name);

  /* Java holds: on every server under its member clients' owners. */
  snprintf(cmd, sizeof cmd, "A: tryLock L/%s 0", name);
  cr_assert(strncmp(jpeer_call(&j, cmd), "true", 4) == 0);
  for (size_t i = 0; i < 3; i++)
    cr_assert(field_on(&s, i, name, jowner[i]), "Java's hold on server %zu", i);
  cr_assert_eq(rlock_try_lock(c.rl, 300, -1), 0, "%s", rlock_last_error());
  snprintf(cmd, sizeof cmd, "A: unlock L/%s", name);
  jpeer_call(&j, cmd);
  for (size_t i = 0; i < 3; i++)
    cr_assert_eq(hlen_on(&s, i, name), 0);

  /* C holds: Java's RedLock is refused. */
  cr_assert_eq(rlock_try_lock(c.rl, 1000, -1), 1, "%s", rlock_last_error());
  snprintf(cmd, sizeof cmd, "B: tryLock L/%s 300", name);
  cr_assert(strncmp(jpeer_call(&j, cmd), "false", 5) == 0);
  for (size_t i = 0; i < 3; i++) {
    char owner[160];
    owner_of(&c, i, owner, sizeof owner);
    cr_assert(field_on(&s, i, name, owner), "C's hold on server %zu", i);
    cr_assert_eq(hlen_on(&s, i, name), 1);
  }
  cr_assert_eq(rlock_unlock(c.rl), 0, "%s", rlock_last_error());

  /* The same quorum on both sides: with server 0's lock held by a third
   * party, Java takes 2 of 3 and C is refused; then the other way. */
  rlock_client *third = member_client(&s, 0);
  rlock *t = NULL;
  cr_assert_eq(rlock_new(third, name, &t), 0);
  cr_assert_eq(rlock_try_lock(t, 0, 30000), 1);
  snprintf(cmd, sizeof cmd, "A: tryLock L/%s 0", name);
  cr_assert(strncmp(jpeer_call(&j, cmd), "true", 4) == 0);
  cr_assert(!field_on(&s, 0, name, jowner[0]));
  cr_assert(field_on(&s, 1, name, jowner[1]));
  cr_assert(field_on(&s, 2, name, jowner[2]));
  cr_assert_eq(rlock_try_lock(c.rl, 300, -1), 0, "%s", rlock_last_error());
  snprintf(cmd, sizeof cmd, "A: unlock L/%s", name);
  jpeer_call(&j, cmd); /* Java releases every member, server 0's fails */
  cr_assert_eq(hlen_on(&s, 0, name), 1); /* the third party's */
  cr_assert_eq(hlen_on(&s, 1, name), 0);
  cr_assert_eq(hlen_on(&s, 2, name), 0);

  cr_assert_eq(rlock_try_lock(c.rl, 1000, -1), 1, "%s", rlock_last_error());
  snprintf(cmd, sizeof cmd, "B: tryLock L/%s 300", name);
  cr_assert(strncmp(jpeer_call(&j, cmd), "false", 5) == 0);
  cr_assert_eq(rlock_unlock(c.rl), 0, "%s", rlock_last_error());
  cr_assert_eq(hlen_on(&s, 1, name), 0);
  cr_assert_eq(hlen_on(&s, 2, name), 0);
  cr_assert_eq(rlock_unlock(t), 0);

  jpeer_stop(&j);
  rlock_free(t);
  rlock_client_free(third);
  side_close(&c);
  servers_stop(&s);
}

/* ---- the tool: rlock --redlock URI,URI,... NAME -- COMMAND ---- */

#ifdef RLOCK_CLI_BIN
/* Starts the tool with argv (NULL-terminated, argv[0] left out), its
 * output to /dev/null. */
static pid_t cli_spawn(const char *const *args) {
  const char *argv[16] = {RLOCK_CLI_BIN};
  size_t a = 1;
  for (size_t i = 0; args[i] != NULL; i++) {
    cr_assert_lt(a, 15);
    argv[a++] = args[i];
  }
  argv[a] = NULL;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null_fd = open("/dev/null", O_RDWR);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(null_fd, STDERR_FILENO);
    execv(RLOCK_CLI_BIN, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

static int cli_run_tool(const char *const *args, int64_t bound_ms) {
  pid_t pid = cli_spawn(args);
  int64_t until = rt_now_ms() + bound_ms;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (rt_now_ms() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      cr_assert_fail("the tool did not end within %lld ms",
                     (long long)bound_ms);
    }
    rt_sleep_ms(10);
  }
  cr_assert(WIFEXITED(status), "the tool died: status %d", status);
  return WEXITSTATUS(status);
}

Test(redlock, tool_holds_a_majority_while_command_runs) {
  servers s;
  servers_start(&s, 3);
  char name[64], uris[256];
  rt_key(name, sizeof name, "redlock-cli");
  snprintf(uris, sizeof uris, "%s,%s,%s", s.uri[0], s.uri[1], s.uri[2]);
  kill_server(&s, 2); /* down from the start: a member never reached */

  const char *hold[] = {"--redlock", uris, name, "--", "sleep", "2", NULL};
  pid_t a = cli_spawn(hold);
  int64_t until = rt_now_ms() + 8000;
  while (hlen_on(&s, 0, name) != 1 || hlen_on(&s, 1, name) != 1) {
    cr_assert_lt(rt_now_ms(), until, "the tool's RedLock never showed");
    rt_sleep_ms(20);
  }
  /* A second one, without waiting: busy (exit 1). */
  const char *busy[] = {"--redlock", uris, "-n", name, "--", "true", NULL};
  cr_assert_eq(cli_run_tool(busy, 10000), 1);
  cr_assert(rt_reap_bounded(a, 10000), "the holding tool did not end");
  cr_assert_eq(hlen_on(&s, 0, name), 0, "not released on server 0");
  cr_assert_eq(hlen_on(&s, 1, name), 0, "not released on server 1");
  /* Free again: it runs COMMAND, whose status is the tool's. */
  const char *run[] = {"--redlock", uris, "-n", name, "--", "sh", "-c",
                       "exit 7", NULL};
  cr_assert_eq(cli_run_tool(run, 10000), 7);

  /* Usage errors (64): with -u, an empty URI, one server twice. */
  const char *with_u[] = {"--redlock", uris, "-u", s.uri[0], name, "--",
                          "true", NULL};
  cr_assert_eq(cli_run_tool(with_u, 10000), 64);
  char empty[256], twice[256];
  snprintf(empty, sizeof empty, "%s,,%s", s.uri[0], s.uri[1]);
  snprintf(twice, sizeof twice, "%s,%s", s.uri[0], s.uri[0]);
  const char *with_empty[] = {"--redlock", empty, name, "--", "true", NULL};
  cr_assert_eq(cli_run_tool(with_empty, 10000), 64);
  const char *with_twice[] = {"--redlock", twice, name, "--", "true", NULL};
  cr_assert_eq(cli_run_tool(with_twice, 10000), 64);
  cr_assert_eq(hlen_on(&s, 0, name), 0);

  /* Two of three down: no majority can be reached (75). */
  kill_server(&s, 1);
  const char *minority[] = {"--redlock", uris, "-n", name, "--", "true",
                            NULL};
  cr_assert_eq(cli_run_tool(minority, 10000), 75);
  cr_assert_eq(hlen_on(&s, 0, name), 0);
  servers_stop(&s);
}
#endif
