/* Redisson's MultiLock (getMultiLock(RLock...)): several lock handles of
 * any kinds taken all-or-nothing by one owner, with RedissonMultiLock's
 * algorithm (docs/wire-protocol.md, "MultiLock"; docs/multilock.md).
 *
 * It lives in prim, not in the engine: it has no keys, channel or script
 * of its own for acquiring - each member is taken, waited for, cancelled
 * and released by its own kind through the public lock calls
 * (rlock_lock_async, rlock_unlock_async, rlock_req_cancel), so a member keeps
 * every guarantee of its kind (a fair member leaves its queue when its
 * wait is given up, a late try is trimmed, the watchdog renews). The one
 * thing no public call does is Java's lease trick, a PEXPIRE of each
 * member's keys once all are held, which is an op of this file
 * (multilock_expire.lua) run through the engine like any kind's query.
 * It is above the engine and beside the kinds it composes; nothing in
 * lib/engine, lib/net or lib/core knows of it. Its handle is an rlock
 * whose descriptor fills only `calls` (prim.h): the public lock calls
 * (lock.c) dispatch to the group's, and its async calls hand out an
 * rlock_req of its own (rlock__req_custom_new) that rlock_req_cancel and
 * rlock_req_free take like any other.
 *
 * The acquire is a state machine driven by the members' callbacks (on
 * their clients' loop threads; members may belong to different clients):
 * take member `at`; on success the next; on a failure release the members
 * taken (last first) and start again from the first while time remains.
 * Its mutex only guards the member request in flight against
 * acq_cancel() from another thread.
 *
 * The RedLock (getRedLock; docs/multilock.md, "RedLock") is the same
 * machine with a quorum below n: Java's RedissonRedLock changes three
 * things of RedissonMultiLock - how many members may be missed in a round
 * (n - quorum), a member's wait (a share of the round's), and the unlock
 * (every member at once). Its members are on distinct clients whose URIs
 * name distinct servers, checked at construction. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lua_embed.h"
#include "prim.h"

static const rlock__script expire_script = {
    "multilock_expire", RLOCK__LUA_MULTILOCK_EXPIRE_BODY,
    RLOCK__LUA_MULTILOCK_EXPIRE_SHA, false};

/* The group handle: an rlock whose kind (rlock__prim_multilock or
 * rlock__prim_redlock) runs the lock calls itself (group_calls). */
typedef struct group {
  rlock h; /* first: the handle the caller holds */
  size_t n;
  size_t quorum; /* members a round must take: n, or n/2+1 for a RedLock */
  rlock *m[];    /* each with a reference of ours */
} group;

static group *group_of(rlock *lock) { return (group *)lock; }

static void group_free(rlock *lock) {
  group *g = group_of(lock);
  for (size_t i = 0; i < g->n; i++)
    rlock__handle_release(g->m[i]);
}

static void group_hold(group *g) { atomic_fetch_add(&g->h.refs, 1); }

static void group_release(group *g) { rlock__handle_release(&g->h); }

static bool client_closed(const rlock *lock) {
  rlock__core *core = lock->engine->core;
  uv_mutex_lock(&core->queue_mutex);
  bool closed = core->closed;
  uv_mutex_unlock(&core->queue_mutex);
  return closed;
}

/* The checks both constructors make of each member: 0, or the error with
 * its detail set (`what` names the group in the details). */
static int check_members(rlock *const *members, size_t n, const char *what) {
  if (n == 0) {
    rlock__set_last_error("a %s needs at least one member", what);
    return RLOCK_EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    if (members[i] == NULL) {
      rlock__set_last_error("member %zu is NULL", i);
      return RLOCK_EINVAL;
    }
    if (members[i]->prim->calls != NULL) {
      /* Java takes a RedissonMultiLock as a member (it is an RLock); here
       * the lease trick and the queries need the member's own keys. */
      rlock__set_last_error("member %zu is a %s: a %s's members are single "
                            "locks (put the inner group's members in it)",
                            i, members[i]->prim->kind, what);
      return RLOCK_EINVAL;
    }
    if (members[i]->prim->hold == NULL) {
      rlock__set_last_error("member %zu (%s) is a %s, not a lock", i,
                            members[i]->name, members[i]->prim->kind);
      return RLOCK_EINVAL;
    }
    if (client_closed(members[i])) {
      rlock__set_last_error("member %zu (%s): its client is closed", i,
                            members[i]->name);
      return RLOCK_ECLOSED;
    }
  }
  if (n > (SIZE_MAX - sizeof(group)) / sizeof(rlock *))
    return rlock__bad_arg("too many members");
  return 0;
}

/* The handle, on member 0's engine, named after its members ("a,b,c"). */
static int group_new(const rlock__prim *prim, rlock *const *members, size_t n,
                     size_t quorum, rlock **out) {
  size_t len = 0;
  for (size_t i = 0; i < n; i++)
    len += members[i]->name_len + 1;
  char *name = calloc(1, len);
  rlock *h = NULL;
  int rc = RLOCK_ENOMEM;
  if (name != NULL) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
      if (i > 0)
        name[at++] = ',';
      memcpy(name + at, members[i]->name, members[i]->name_len);
      at += members[i]->name_len;
    }
    rc = rlock__handle_new_size(members[0]->engine, prim, name, at,
                                sizeof(group) + n * sizeof(rlock *), &h);
    free(name);
  }
  if (rc != 0) {
    rlock__set_last_error("out of memory");
    return rc;
  }
  group *g = group_of(h);
  g->n = n;
  g->quorum = quorum;
  for (size_t i = 0; i < n; i++) {
    g->m[i] = members[i];
    atomic_fetch_add(&members[i]->refs, 1);
  }
  rlock__clear_last_error();
  *out = h;
  return 0;
}

static const rlock__prim_calls group_calls;

const rlock__prim rlock__prim_multilock = {
    .kind = "multilock", .calls = &group_calls, .handle_free = group_free};
const rlock__prim rlock__prim_redlock = {
    .kind = "redlock", .calls = &group_calls, .handle_free = group_free};

int rlock_new_multilock(rlock *const *members, size_t n, rlock **out) {
  if (out != NULL)
    *out = NULL;
  if (members == NULL || out == NULL)
    return rlock__bad_arg("members or out is NULL");
  int rc = check_members(members, n, "MultiLock");
  return rc != 0 ? rc : group_new(&rlock__prim_multilock, members, n, n, out);
}

/* ---- RedLock: members on distinct servers ---- */

/* Whether two parsed URIs name a server in common: the same socket path,
 * or a host:port (any of a sentinel or cluster URI's) written alike. */
static bool addr_eq(const char *h1, int p1, const char *h2, int p2) {
  return h1 != NULL && h2 != NULL && p1 == p2 && strcasecmp(h1, h2) == 0;
}

static bool uris_share_server(const rlock__uri *a, const rlock__uri *b) {
  if (a->is_unix || b->is_unix)
    return a->is_unix && b->is_unix && strcmp(a->path, b->path) == 0;
  size_t na = a->naddrs > 0 ? a->naddrs : 1, nb = b->naddrs > 0 ? b->naddrs : 1;
  for (size_t i = 0; i < na; i++) {
    const char *ha = a->naddrs > 0 ? a->addrs[i].host : a->host;
    int pa = a->naddrs > 0 ? a->addrs[i].port : a->port;
    for (size_t j = 0; j < nb; j++) {
      const char *hb = b->naddrs > 0 ? b->addrs[j].host : b->host;
      int pb = b->naddrs > 0 ? b->addrs[j].port : b->port;
      if (addr_eq(ha, pa, hb, pb))
        return true;
    }
  }
  return false;
}

/* 0, or RLOCK_EINVAL when two members are on one client or on clients
 * whose URIs name the same server. */
static int check_distinct_servers(rlock *const *members, size_t n) {
  rlock__uri *u = calloc(n, sizeof(*u));
  if (u == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const rlock__core *ci = members[i]->engine->core;
    /* The client checked its URI at open: it parses again. */
    rc = rlock__uri_parse(ci->opts.uri, &u[i]);
    for (size_t j = 0; j < i && rc == 0; j++) {
      const rlock__core *cj = members[j]->engine->core;
      if (ci == cj) {
        rlock__set_last_error("members %zu (%s) and %zu (%s) are on the "
                              "same client: a RedLock takes one lock per "
                              "independent server, each through its own "
                              "client",
                              j, members[j]->name, i, members[i]->name);
        rc = RLOCK_EINVAL;
      } else if (uris_share_server(&u[i], &u[j])) {
        rlock__set_last_error("members %zu (%s) and %zu (%s) are on the "
                              "same server (their clients' URIs name it "
                              "alike): a RedLock needs independent servers",
                              j, members[j]->name, i, members[i]->name);
        rc = RLOCK_EINVAL;
      }
    }
  }
  for (size_t i = 0; i < n; i++)
    rlock__uri_free(&u[i]);
  free(u);
  return rc;
}

int rlock_new_redlock(rlock *const *members, size_t n, rlock **out) {
  if (out != NULL)
    *out = NULL;
  if (members == NULL || out == NULL)
    return rlock__bad_arg("members or out is NULL");
  int rc = check_members(members, n, "RedLock");
  if (rc == 0)
    rc = check_distinct_servers(members, n);
  return rc != 0 ? rc
                 : group_new(&rlock__prim_redlock, members, n, n / 2 + 1, out);
}

static size_t group_members(const rlock *lock, size_t *quorum) {
  const group *g = (const group *)lock;
  *quorum = g->quorum;
  return g->n;
}

/* ---- the lease trick: PEXPIRE of one member's keys ---- */

static bool is_fair(const rlock *lock) {
  return lock->prim == &rlock__prim_fair ||
         lock->prim == &rlock__prim_nonreentrant_fair;
}

/* The expire's reply: the guarantee follows what the server confirmed
 * (or may still run, when no reply came), then the query's reading. */
static void expire_reply(rlock__net *n, redisReply *reply, int err,
                         void *data) {
  rlock__op *op = data;
  if (err == 0 && reply != NULL && reply->type == REDIS_REPLY_INTEGER &&
      reply->integer == 1)
    rlock__hold_lease_confirmed(op->engine, op->lock, op->owner, op->started_ms,
                                op->lease_ms);
  else if (rlock__transient(err))
    rlock__hold_lease_lost(op->engine, op->lock, op->owner, op->lease_ms);
  rlock__query_reply(n, reply, err, data);
}

/* KEYS the member's name (a fair lock's queue and deadline zset too, as
 * Java's fair lock expires all three); ARGV lease, "". Idempotent:
 * re-sent after a timeout. */
static void start_expire(rlock__op *op) {
  rlock *lock = op->lock;
  char *queue = NULL, *timeout = NULL;
  size_t qlen = 0, tlen = 0;
  bool fair = is_fair(lock);
  if (fair) {
    queue = rlock__fair_queue_key(lock, &qlen);
    timeout = rlock__fair_timeout_key(lock, &tlen);
    if (queue == NULL || timeout == NULL) {
      free(queue);
      free(timeout);
      rlock__op_detail(op, "out of memory");
      rlock__op_finish(op, RLOCK_ENOMEM);
      return;
    }
  }
  rlock__argv a = {0};
  rlock__argv_str(&a, fair ? "3" : "1");
  rlock__argv_mem(&a, lock->name, lock->name_len);
  if (fair) {
    rlock__argv_mem(&a, queue, qlen);
    rlock__argv_mem(&a, timeout, tlen);
  }
  rlock__argv_int(&a, op->lease_ms);
  rlock__argv_str(&a, "");
  /* Lease safety: the member's expiry becomes the lease as soon as this
   * runs (it may be shorter than the 2 x wait it was taken with). */
  rlock__hold_lease_sent(op->engine, lock, op->owner, op->started_ms,
                         op->lease_ms);
  rlock__op_send(op, &expire_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, expire_reply);
  free(queue); /* the command keeps copies */
  free(timeout);
}

static const rlock__op_type expire_type = {.name = "multilock_expire",
                                           .start = start_expire};

/* ---- the acquire ---- */

/* An acquire's state: a kind's own rlock_req (rlock__req_custom_new),
 * with two references - the machine's and the caller's (when it took the
 * request). */
typedef struct acq {
  group *ml; /* with a reference */
  uint64_t owner;
  int64_t lease_ms;     /* the caller's */
  int64_t wait_ms;      /* this round's (0: one try of each member) */
  bool rounds;          /* lock(): rounds of random waits until held */
  int64_t deadline;     /* rlock__now_ms() based, when wait_ms > 0 */
  int64_t member_lease; /* what each member is taken with */
  int64_t member_wait;  /* RedLock: a member's wait, max(wait / n, 1) */
  size_t pos;           /* the member tried next */
  size_t fails_left;    /* RedLock: members this round may still miss */
  size_t nheld;         /* held[0..nheld-1]: the members taken, in order */
  size_t expired;       /* lease trick: members of held[] done */
  bool restart;         /* after the release: start again, or finish */
  int result;           /* ... with this */
  int last_err;         /* this round's transient error of a member that
                         * has not answered during the call */
  char detail[256];
  rlock_cb cb;
  void *data;
  uv_mutex_t mu; /* guards the four below */
  bool mu_ok;
  bool canceled, done;
  rlock_req *cur;          /* the member acquire in flight */
  const rlock__core *cur_core;
  int64_t cur_wait;     /* the wait the member in flight was given */
  bool *answered; /* [i]: member i answered (taken or busy) in this call */
  bool *silent;   /* [i]: member i left a try given a fair share of the
                   * wait (fair_share) unanswered in this call */
  size_t held[];  /* ml->n entries, then the ml->n of answered, then the
                   * ml->n of silent */
} acq;

static void acq_destroy(void *state) {
  acq *r = state;
  if (r->mu_ok)
    uv_mutex_destroy(&r->mu);
  if (r->ml != NULL)
    group_release(r->ml);
}

static void req_release(acq *r) { rlock__req_custom_unref(r); }

static bool is_canceled(acq *r) {
  uv_mutex_lock(&r->mu);
  bool c = r->canceled;
  uv_mutex_unlock(&r->mu);
  return c;
}

static void finish(acq *r, int result) {
  uv_mutex_lock(&r->mu);
  r->done = true;
  uv_mutex_unlock(&r->mu);
  if (result < 0)
    rlock__set_last_error("%s",
                          r->detail[0] ? r->detail : rlock_strerror(result));
  else
    rlock__clear_last_error();
  if (r->cb != NULL)
    r->cb(result, 0, r->data);
  req_release(r);
}

static void note(acq *r, size_t i, int err) {
  const char *why = rlock_last_error();
  snprintf(r->detail, sizeof(r->detail), "member %zu (%s): %s", i,
           r->ml->m[i]->name, why[0] ? why : rlock_strerror(err));
}

static void next(acq *r);
static void release_next(acq *r);

/* Releases the members held (last first, each with its kind's unlock;
 * errors ignored, as Java ignores them), then starts again (restart) or
 * finishes with `result`. */
static void release_then(acq *r, bool restart, int result) {
  r->restart = restart;
  r->result = result;
  release_next(r);
}

/* Java's lock(): the wait of a round, with n x 1500 ms as the base. */
static int64_t round_wait(const acq *r) {
  int64_t base = (int64_t)r->ml->n * 1500, lo = base, hi = 0;
  if (r->lease_ms < 0)
    return base;
  if (r->lease_ms <= base) {
    lo = r->lease_ms / 2;
    hi = r->lease_ms;
  } else {
    hi = r->lease_ms;
  }
  uint64_t x = 0;
  if (hi > lo && rlock__random_bytes(&x, sizeof(x)) == 0)
    lo += (int64_t)(x % (uint64_t)(hi - lo));
  return lo > 0 ? lo : 1; /* never 0: a round of single tries would spin */
}

static void set_round(acq *r, int64_t wait_ms) {
  r->wait_ms = wait_ms;
  r->deadline = rlock__now_ms() + wait_ms;
  /* Java's RedLock: each member may wait a share of the round's wait, at
   * least 1 ms; a MultiLock member all the time that is left. */
  int64_t share = wait_ms / (int64_t)r->ml->n;
  r->member_wait = r->ml->quorum == r->ml->n ? wait_ms
                   : wait_ms <= 0            ? wait_ms
                   : share > 1               ? share
                                             : 1;
  /* Java: no lease -> each member's watchdog; a lease with a wait -> twice
   * the wait, trimmed to the lease once all are held (the expire phase);
   * a lease without a wait -> the lease. */
  r->member_lease = r->lease_ms < 0 ? -1
                    : wait_ms > 0   ? 2 * wait_ms
                                    : r->lease_ms;
  r->last_err = 0;
}

static void after_release(acq *r) {
  if (!r->restart) {
    finish(r, r->result);
    return;
  }
  if (is_canceled(r)) {
    snprintf(r->detail, sizeof(r->detail), "MultiLock acquire canceled");
    finish(r, RLOCK_ECANCELED);
    return;
  }
  if (r->wait_ms > 0 && rlock__now_ms() >= r->deadline) {
    if (r->rounds) {
      set_round(r, round_wait(r));
    } else {
      finish(r, r->last_err);
      return;
    }
  }
  r->pos = 0;
  r->fails_left = r->ml->n - r->ml->quorum;
  r->last_err = 0; /* the call's result is the last round's */
  next(r);
}

static void release_cb(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  release_next(data);
}

static void release_next(acq *r) {
  while (r->nheld > 0) {
    r->nheld--;
    if (rlock_unlock_async(r->ml->m[r->held[r->nheld]], r->owner, release_cb,
                           r, NULL) == 0)
      return;
  }
  after_release(r);
}

/* Errors that Java's "any exception is a failure" may outlive: the round
 * starts again. Any other error ends the call (retrying an EREENTRY, an
 * EKIND or a denied ACL until the deadline would only hide it). */
static bool transient(int err) {
  return err == RLOCK_ETIMEDOUT || err == RLOCK_ECONN ||
         err == RLOCK_ENOREPLICA || err == RLOCK_ECLUSTER;
}

static void all_held(acq *r);

/* What a member's try must be given before its silence counts: its share
 * of the round's wait (a RedLock member's whole wait), at least 1 ms. */
static int64_t fair_share(const acq *r) {
  int64_t share = r->wait_ms / (int64_t)r->ml->n;
  return share > 1 ? share : 1;
}

static void member_result(acq *r, int status) {
  if (status >= 0)
    r->answered[r->pos] = true;
  if (status == 1) {
    r->held[r->nheld++] = r->pos++;
    next(r);
    return;
  }
  if (status < 0 && !transient(status)) {
    note(r, r->pos, status);
    release_then(r, false, status);
    return;
  }
  /* A transient error is the call's result at the deadline only from a
   * member that has not answered during the call: one that did is
   * reachable, and its miss now is most likely the call's own deadline
   * cutting its wait to a sliver (a 1 ms wait unanswered in 1 ms). An
   * unanswered try (RLOCK_ETIMEDOUT) counts only once the member has left
   * one given a fair share of the wait unanswered: a member first reached
   * in the call's last milliseconds, the members before it having taken
   * the rest, was given no time to answer (a clean-clone CI run under
   * ASan: a MultiLock with 300 ms of wait, its second member reached with
   * a sliver). Other errors (no connection, ...) say so by themselves. */
  if (status == RLOCK_ETIMEDOUT && r->cur_wait >= fair_share(r))
    r->silent[r->pos] = true;
  if (status < 0 && !r->answered[r->pos] &&
      (status != RLOCK_ETIMEDOUT || r->silent[r->pos])) {
    note(r, r->pos, status);
    r->last_err = status;
  }
  /* RedLock (Java's order of checks): with a quorum held, a member missed
   * ends the round a success (the members after it are not tried); else a
   * miss within the round's allowance goes on to the next member. */
  size_t allowed = r->ml->n - r->ml->quorum;
  if (allowed > 0 && r->ml->n - r->nheld == allowed) {
    all_held(r);
    return;
  }
  if (r->fails_left > 0) {
    r->fails_left--;
    r->pos++;
    next(r);
    return;
  }
  /* A member not taken: release the others; one try each -> done, else
   * start again from the first member while time remains. */
  if (r->wait_ms == 0)
    release_then(r, false, status);
  else
    release_then(r, true, 0);
}

static void member_cb(int status, int64_t value, void *data) {
  (void)value;
  acq *r = data;
  uv_mutex_lock(&r->mu);
  rlock_req *cur = r->cur;
  r->cur = NULL;
  uv_mutex_unlock(&r->mu);
  rlock_req_free(cur);
  member_result(r, status);
}

static void expire_next(acq *r);

static void expire_cb(int status, int64_t value, void *data) {
  (void)value;
  acq *r = data;
  if (status < 0) {
    note(r, r->held[r->expired], status);
    release_then(r, false, status);
    return;
  }
  r->expired++;
  expire_next(r);
}

/* Every member held with a lease of 2 x wait: each gets the lease asked
 * for (Java does it even when the members were taken with it). */
static void expire_next(acq *r) {
  if (is_canceled(r)) {
    snprintf(r->detail, sizeof(r->detail), "MultiLock acquire canceled");
    release_then(r, false, RLOCK_ECANCELED);
    return;
  }
  if (r->expired == r->nheld) {
    finish(r, 1);
    return;
  }
  rlock *m = r->ml->m[r->held[r->expired]];
  rlock__op *op = rlock__req_new(m, &expire_type, r->owner, sizeof(*op),
                                 expire_cb, r);
  if (op == NULL) {
    snprintf(r->detail, sizeof(r->detail), "out of memory");
    release_then(r, false, RLOCK_ENOMEM);
    return;
  }
  op->lease_ms = r->lease_ms;
  int rc = rlock__req_submit(op, NULL);
  if (rc != 0) {
    note(r, r->held[r->expired], rc);
    release_then(r, false, rc);
  }
}

/* The round has what it needs (every member, or a RedLock's quorum): the
 * lease trick when a lease was asked for, then success. */
static void all_held(acq *r) {
  if (r->lease_ms > 0) {
    r->expired = 0;
    expire_next(r);
  } else {
    finish(r, 1);
  }
}

/* Starts the acquire of member r->pos: 0, or the call's own error (the
 * callback will not fire). */
static int start_member(acq *r, int64_t wait_ms) {
  rlock *m = r->ml->m[r->pos];
  r->cur_wait = wait_ms;
  uv_mutex_lock(&r->mu);
  int rc = rlock_lock_async(m, r->owner, wait_ms, r->member_lease, member_cb,
                            r, &r->cur);
  if (rc == 0)
    r->cur_core = m->engine->core;
  uv_mutex_unlock(&r->mu);
  return rc;
}

/* The step after a member was taken (or at a round's start). */
static void next(acq *r) {
  if (is_canceled(r)) {
    snprintf(r->detail, sizeof(r->detail), "MultiLock acquire canceled");
    release_then(r, false, RLOCK_ECANCELED);
    return;
  }
  int64_t wait_ms = 0;
  if (r->wait_ms > 0) {
    /* Java checks the time left after each member, the last included. */
    wait_ms = r->deadline - rlock__now_ms();
    if (wait_ms <= 0) {
      release_then(r, true, 0); /* after_release ends it or starts a round */
      return;
    }
    if (r->member_wait < wait_ms)
      wait_ms = r->member_wait;
  }
  if (r->pos == r->ml->n) {
    assert(r->nheld >= r->ml->quorum);
    all_held(r);
    return;
  }
  int rc = start_member(r, wait_ms);
  if (rc != 0)
    member_result(r, rc);
}

static int acq_cancel(void *state);

static const rlock__req_impl acq_impl = {.cancel = acq_cancel,
                                         .destroy = acq_destroy};

static int group_acquire_async(rlock *lock, uint64_t owner, int64_t wait_ms,
                               int64_t lease_ms, rlock_cb cb, void *data,
                               rlock_req **out) {
  if (out != NULL)
    *out = NULL;
  int rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  group *ml = group_of(lock);
  acq *r = rlock__req_custom_new(
      &acq_impl, sizeof(*r) + ml->n * (sizeof(size_t) + 2 * sizeof(bool)));
  if (r == NULL)
    return RLOCK_ENOMEM;
  if (uv_mutex_init(&r->mu) != 0) {
    req_release(r); /* destroy undoes nothing: no mutex, no group */
    rlock__set_last_error("no mutex");
    return RLOCK_ESYS;
  }
  r->mu_ok = true;
  r->answered = (bool *)&r->held[ml->n];
  r->silent = r->answered + ml->n;
  group_hold(ml);
  r->ml = ml;
  r->owner = owner;
  r->lease_ms = lease_ms;
  r->rounds = wait_ms < 0;
  r->cb = cb;
  r->data = data;
  set_round(r, r->rounds ? round_wait(r) : wait_ms);
  r->fails_left = ml->n - ml->quorum;
  if (out != NULL)
    rlock__req_custom_ref(r);
  /* The first member from the caller's thread: its own error is the
   * call's (nothing is held yet, and the callback must not fire). */
  rc = start_member(r, r->member_wait);
  if (rc != 0) {
    char why[256];
    snprintf(why, sizeof(why), "%s", rlock_last_error());
    if (out != NULL)
      req_release(r);
    req_release(r);
    rlock__set_last_error("member 0 (%s): %s", ml->m[0]->name, why);
    return rc;
  }
  if (out != NULL)
    *out = rlock__req_custom_of(r);
  rlock__clear_last_error();
  return 0;
}

static int acq_cancel(void *state) {
  acq *r = state;
  uv_mutex_lock(&r->mu);
  r->canceled = true;
  rlock_req *cur = r->done ? NULL : r->cur;
  /* Off the member's loop thread rlock_req_cancel() only queues the cancel, so
   * it may run under the mutex, which keeps `cur` from being freed by its
   * callback meanwhile. On that loop thread it may call the callback at
   * once, which takes the mutex: it runs outside it, and `cur` cannot be
   * freed meanwhile because only that thread frees it. */
  bool on_loop = cur != NULL && rlock__core_on_loop_thread(r->cur_core);
  if (cur != NULL && !on_loop)
    (void)rlock_req_cancel(cur);
  uv_mutex_unlock(&r->mu);
  if (on_loop)
    (void)rlock_req_cancel(cur);
  rlock__clear_last_error();
  return 0;
}

/* ---- release and is_held: a call on every member ---- */

/* The release (or the is_held question) of every member, as one request:
 * a MultiLock's members one after the other, in order (as Java's sync
 * unlock: the same lock twice is released twice, never at once); a
 * RedLock's all at once (a stalled server costs its timeout once, not
 * once per member). The answers are combined when the last has come. */
typedef struct fan {
  group *ml; /* with a reference */
  uint64_t owner;
  bool ask;      /* is_held, else the release */
  bool in_order; /* one member after the other */
  rlock_cb cb;
  void *data;
  uv_mutex_t mu;
  bool mu_ok;
  /* guarded by mu: answers still to come (a chain's: its last); the
   * group's call is still starting its members; an answer came by a
   * callback; every answer came while starting (the call's error) */
  size_t left;
  bool starting, called_back, deferred;
  int *status;      /* [i]: member i's answer */
  char (*why)[160]; /* [i]: its detail when an error */
  char mem[];
} fan;

static void fan_destroy(void *state) {
  fan *f = state;
  if (f->mu_ok)
    uv_mutex_destroy(&f->mu);
  if (f->ml != NULL)
    group_release(f->ml);
}

static const rlock__req_impl fan_impl = {.destroy = fan_destroy};

/* The result of the answers, with the last error set: a MultiLock's is
 * the first member's (in order) that is not yes (0 or its error); a
 * RedLock's is yes with a quorum of yes answers, else the first error
 * (a release: a server's error before RLOCK_ENOTOWNER, the members it
 * could not take), else no. */
static int fan_result(fan *f) {
  group *ml = f->ml;
  size_t yes = 0, bad = SIZE_MAX, err = SIZE_MAX, telling = SIZE_MAX;
  for (size_t i = 0; i < ml->n; i++) {
    int st = f->status[i];
    if (f->ask ? st == 1 : st >= 0) {
      yes++;
      continue;
    }
    if (bad == SIZE_MAX)
      bad = i;
    if (st < 0 && err == SIZE_MAX)
      err = i;
    if (st < 0 && st != RLOCK_ENOTOWNER && telling == SIZE_MAX)
      telling = i;
  }
  int yes_rc = f->ask ? 1 : 0;
  if (ml->quorum == ml->n) {
    if (bad == SIZE_MAX || f->status[bad] >= 0) {
      rlock__clear_last_error();
      return bad == SIZE_MAX ? yes_rc : f->status[bad];
    }
    rlock__set_last_error("member %zu (%s): %s", bad, ml->m[bad]->name,
                          f->why[bad]);
    return f->status[bad];
  }
  if (yes >= ml->quorum || err == SIZE_MAX) {
    rlock__clear_last_error();
    return yes >= ml->quorum ? yes_rc : 0;
  }
  size_t pick = !f->ask && telling != SIZE_MAX ? telling : err;
  rlock__set_last_error("member %zu (%s): %s (%zu of %zu members %s, %zu "
                        "needed)",
                        pick, ml->m[pick]->name, f->why[pick], yes, ml->n,
                        f->ask ? "held" : "released", ml->quorum);
  return f->status[pick];
}

static void fan_start(fan *f, size_t i);

/* Member i answered: on its loop thread (called_back), or on the thread
 * that started its call when that call failed at once. When every answer
 * was such a failure during the group's call itself, that call returns
 * the error and the callback never fires (fan_async). */
static void fan_answer(fan *f, size_t i, int status, bool called_back) {
  f->status[i] = status;
  if (status < 0) {
    const char *why = rlock_last_error();
    snprintf(f->why[i], sizeof(f->why[i]), "%s",
             why[0] ? why : rlock_strerror(status));
  }
  uv_mutex_lock(&f->mu);
  f->called_back = f->called_back || called_back;
  bool chain = f->in_order && i + 1 < f->ml->n;
  bool last = !chain && --f->left == 0;
  bool defer = last && f->starting && !f->called_back;
  f->deferred = defer;
  uv_mutex_unlock(&f->mu);
  if (chain) {
    fan_start(f, i + 1);
    return;
  }
  if (!last || defer)
    return;
  int rc = fan_result(f);
  if (f->cb != NULL)
    f->cb(rc, 0, f->data);
  rlock__req_custom_unref(f);
}

typedef struct fan_one {
  fan *f;
  size_t i;
} fan_one;

static fan_one *fan_slot(fan *f, size_t i);

static void fan_cb(int status, int64_t value, void *data) {
  (void)value;
  fan_one *o = data;
  fan_answer(o->f, o->i, status, true);
}

static void fan_start(fan *f, size_t i) {
  rlock *m = f->ml->m[i];
  fan_one *o = fan_slot(f, i);
  int rc = f->ask ? rlock_is_held_async(m, f->owner, fan_cb, o, NULL)
                  : rlock_unlock_async(m, f->owner, fan_cb, o, NULL);
  if (rc != 0)
    fan_answer(f, i, rc, false);
}

static fan_one *fan_slot(fan *f, size_t i) {
  return (fan_one *)(void *)(f->mem) + i;
}

static int fan_async(rlock *lock, uint64_t owner, bool ask, rlock_cb cb,
                     void *data, rlock_req **out) {
  if (out != NULL)
    *out = NULL;
  group *ml = group_of(lock);
  size_t n = ml->n;
  fan *f = rlock__req_custom_new(
      &fan_impl, sizeof(*f) + n * (sizeof(fan_one) + sizeof(int) + 160));
  if (f == NULL)
    return RLOCK_ENOMEM;
  if (uv_mutex_init(&f->mu) != 0) {
    rlock__req_custom_unref(f);
    rlock__set_last_error("no mutex");
    return RLOCK_ESYS;
  }
  f->mu_ok = true;
  /* mem: the slots (pointers' alignment), then the statuses, then the
   * details */
  f->status = (int *)(void *)(f->mem + n * sizeof(fan_one));
  f->why = (char(*)[160])(void *)(f->status + n);
  group_hold(ml);
  f->ml = ml;
  f->owner = owner;
  f->ask = ask;
  f->in_order = ml->quorum == ml->n && !ask;
  f->cb = cb;
  f->data = data;
  f->left = f->in_order ? 1 : n;
  f->starting = true;
  for (size_t i = 0; i < n; i++)
    *fan_slot(f, i) = (fan_one){.f = f, .i = i};
  /* The caller's reference first: a callback may come before the loop
   * below ends. */
  rlock__req_custom_ref(f);
  if (f->in_order) {
    fan_start(f, 0);
  } else {
    for (size_t i = 0; i < n; i++)
      fan_start(f, i);
  }
  uv_mutex_lock(&f->mu);
  f->starting = false;
  bool deferred = f->deferred;
  uv_mutex_unlock(&f->mu);
  if (deferred) {
    int rc = fan_result(f); /* every member failed at once: an error */
    assert(rc < 0);
    char why[256];
    snprintf(why, sizeof(why), "%s", rlock_last_error());
    rlock__req_custom_unref(f);
    rlock__req_custom_unref(f);
    rlock__set_last_error("%s", why);
    return rc;
  }
  if (out != NULL)
    *out = rlock__req_custom_of(f);
  else
    rlock__req_custom_unref(f);
  rlock__clear_last_error();
  return 0;
}

static int group_release_async(rlock *lock, uint64_t owner, rlock_cb cb,
                               void *data, rlock_req **out) {
  return fan_async(lock, owner, false, cb, data, out);
}

static int group_is_held_async(rlock *lock, uint64_t owner, rlock_cb cb,
                               void *data, rlock_req **out) {
  return fan_async(lock, owner, true, cb, data, out);
}

/* ---- the blocking calls: the async ones, waited for ---- */

typedef struct sync_wait {
  uv_mutex_t mu;
  uv_cond_t cv;
  bool done;
  int status;
  char detail[256];
} sync_wait;

static void sync_cb(int status, int64_t value, void *data) {
  (void)value;
  sync_wait *w = data;
  uv_mutex_lock(&w->mu);
  w->status = status;
  snprintf(w->detail, sizeof(w->detail), "%s", rlock_last_error());
  w->done = true;
  uv_cond_signal(&w->cv);
  uv_mutex_unlock(&w->mu);
}

static int on_a_loop_thread(const group *ml) {
  for (size_t i = 0; i < ml->n; i++)
    if (rlock__core_on_loop_thread(ml->m[i]->engine->core)) {
      rlock__set_last_error("blocking rlock call made on a client's loop "
                            "thread (e.g. inside a callback)");
      return RLOCK_EDEADLK;
    }
  return 0;
}

/* Runs an async call of the group (the acquire when `acquires`, else the
 * release or the question) and waits for its callback. */
static int run_sync(rlock *lock, uint64_t owner, int which, int64_t wait_ms,
                    int64_t lease_ms) {
  int rc = on_a_loop_thread(group_of(lock));
  if (rc == 0 && which == 0)
    rc = rlock__check_lease(lease_ms);
  if (rc != 0)
    return rc;
  sync_wait w = {.done = false};
  if (uv_mutex_init(&w.mu) != 0 || (uv_cond_init(&w.cv) != 0 &&
                                     (uv_mutex_destroy(&w.mu), true))) {
    rlock__set_last_error("no mutex or condition variable");
    return RLOCK_ESYS;
  }
  rc = which == 0 ? group_acquire_async(lock, owner, wait_ms, lease_ms, sync_cb,
                                        &w, NULL)
                  : fan_async(lock, owner, which == 2, sync_cb, &w, NULL);
  if (rc == 0) {
    uv_mutex_lock(&w.mu);
    while (!w.done)
      uv_cond_wait(&w.cv, &w.mu);
    uv_mutex_unlock(&w.mu);
    rc = w.status;
    if (rc < 0)
      rlock__set_last_error("%s", w.detail);
    else
      rlock__clear_last_error();
  }
  uv_cond_destroy(&w.cv);
  uv_mutex_destroy(&w.mu);
  return rc;
}

static int group_acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                         int64_t lease_ms) {
  return run_sync(lock, owner, 0, wait_ms, lease_ms);
}

static int group_release_sync(rlock *lock, uint64_t owner) {
  return run_sync(lock, owner, 1, 0, 0);
}

static int group_is_held(rlock *lock, uint64_t owner) {
  return run_sync(lock, owner, 2, 0, 0);
}

/* ---- lease safety ---- */

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* A MultiLock is guaranteed until its first member's guarantee ends; a
 * RedLock while a quorum of its members' are (the quorum-th latest). */
static int group_lease_guaranteed(rlock *lock, uint64_t owner,
                                  int64_t *until_ms) {
  group *ml = group_of(lock);
  int64_t *until = malloc(ml->n * sizeof(*until));
  if (until == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  size_t known = 0, pick = SIZE_MAX;
  int first = 0;
  char why[160] = "";
  for (size_t i = 0; i < ml->n; i++) {
    int64_t u = 0;
    int rc = rlock_is_lease_guaranteed_owner(ml->m[i], owner, &u);
    if (rc >= 0) {
      until[known++] = u;
    } else if (pick == SIZE_MAX) {
      pick = i;
      first = rc;
      snprintf(why, sizeof(why), "%s", rlock_last_error());
    }
  }
  int rc;
  if (known >= ml->quorum) {
    qsort(until, known, sizeof(*until), cmp_desc);
    *until_ms = until[ml->quorum - 1];
    rc = *until_ms > rlock__now_ms() ? 1 : 0;
    rlock__clear_last_error();
  } else if (ml->quorum < ml->n) {
    rlock__set_last_error("member %zu (%s): %s (%zu of %zu members with a "
                          "guarantee, %zu needed)",
                          pick, ml->m[pick]->name, why, known, ml->n,
                          ml->quorum);
    rc = first;
  } else {
    rlock__set_last_error("member %zu (%s): %s", pick, ml->m[pick]->name, why);
    rc = first;
  }
  free(until);
  return rc;
}

static const rlock__prim_calls group_calls = {
    .acquire_async = group_acquire_async,
    .acquire = group_acquire,
    .release_async = group_release_async,
    .release = group_release_sync,
    .is_held_async = group_is_held_async,
    .is_held = group_is_held,
    .lease_guaranteed = group_lease_guaranteed,
    .members = group_members,
    .unsupported =
        "a MultiLock or RedLock has no lock of its own: is_locked, "
        "force_unlock, hold_count and remain_ttl are not supported (Java's "
        "RedissonMultiLock throws UnsupportedOperationException); ask its "
        "members"};
