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
 * lib/engine, lib/net or lib/core knows of it.
 *
 * The acquire is a state machine driven by the members' callbacks (on
 * their clients' loop threads; members may belong to different clients):
 * take member `at`; on success the next; on a failure release the members
 * taken (last first) and start again from the first while time remains.
 * Its mutex only guards the member request in flight against
 * rlock_multilock_req_cancel() from another thread.
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

struct rlock_multilock {
  atomic_int refs; /* the user's + acquires running */
  size_t n;
  size_t quorum; /* members a round must take: n, or n/2+1 for a RedLock */
  rlock *m[];    /* each with a reference of ours */
};

static void ml_release(rlock_multilock *ml) {
  if (atomic_fetch_sub(&ml->refs, 1) != 1)
    return;
  for (size_t i = 0; i < ml->n; i++)
    rlock__handle_release(ml->m[i]);
  free(ml);
}

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
  if (n > (SIZE_MAX - sizeof(rlock_multilock)) / sizeof(rlock *))
    return rlock__bad_arg("too many members");
  return 0;
}

static int ml_new(rlock *const *members, size_t n, size_t quorum,
                  rlock_multilock **out) {
  rlock_multilock *ml = malloc(sizeof(*ml) + n * sizeof(rlock *));
  if (ml == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  atomic_init(&ml->refs, 1);
  ml->n = n;
  ml->quorum = quorum;
  for (size_t i = 0; i < n; i++) {
    ml->m[i] = members[i];
    atomic_fetch_add(&members[i]->refs, 1);
  }
  rlock__clear_last_error();
  *out = ml;
  return 0;
}

int rlock_multilock_new(rlock *const *members, size_t n,
                        rlock_multilock **out) {
  if (out != NULL)
    *out = NULL;
  if (members == NULL || out == NULL)
    return rlock__bad_arg("members or out is NULL");
  int rc = check_members(members, n, "MultiLock");
  return rc != 0 ? rc : ml_new(members, n, n, out);
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

int rlock_redlock_new(rlock *const *members, size_t n, rlock_multilock **out) {
  if (out != NULL)
    *out = NULL;
  if (members == NULL || out == NULL)
    return rlock__bad_arg("members or out is NULL");
  int rc = check_members(members, n, "RedLock");
  if (rc == 0)
    rc = check_distinct_servers(members, n);
  return rc != 0 ? rc : ml_new(members, n, n / 2 + 1, out);
}

size_t rlock_multilock_quorum(const rlock_multilock *ml) {
  return ml != NULL ? ml->quorum : 0;
}

void rlock_multilock_free(rlock_multilock *ml) {
  if (ml != NULL)
    ml_release(ml);
}

size_t rlock_multilock_size(const rlock_multilock *ml) {
  return ml != NULL ? ml->n : 0;
}

/* ---- the lease trick: PEXPIRE of one member's keys ---- */

static bool is_fair(const rlock *lock) {
  return lock->prim == &rlock__prim_fair ||
         lock->prim == &rlock__prim_nonreentrant_fair;
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
  rlock__op_send(op, &expire_script, a.argc, a.argv, a.lens,
                 op->engine->core->opts.retry_attempts, rlock__query_reply);
  free(queue); /* the command keeps copies */
  free(timeout);
}

static const rlock__op_type expire_type = {.name = "multilock_expire",
                                           .start = start_expire};

/* ---- the acquire ---- */

struct rlock_multilock_req {
  atomic_int refs; /* the machine's + the caller's */
  rlock_multilock *ml;
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
  bool canceled, done;
  rlock_req *cur;          /* the member acquire in flight */
  const rlock__core *cur_core;
  bool *answered; /* [i]: member i answered (taken or busy) in this call */
  size_t held[];  /* ml->n entries, then the ml->n of answered */
};

static void req_release(rlock_multilock_req *r) {
  if (atomic_fetch_sub(&r->refs, 1) != 1)
    return;
  uv_mutex_destroy(&r->mu);
  ml_release(r->ml);
  free(r);
}

static bool is_canceled(rlock_multilock_req *r) {
  uv_mutex_lock(&r->mu);
  bool c = r->canceled;
  uv_mutex_unlock(&r->mu);
  return c;
}

static void finish(rlock_multilock_req *r, int result) {
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

static void note(rlock_multilock_req *r, size_t i, int err) {
  const char *why = rlock_last_error();
  snprintf(r->detail, sizeof(r->detail), "member %zu (%s): %s", i,
           r->ml->m[i]->name, why[0] ? why : rlock_strerror(err));
}

static void next(rlock_multilock_req *r);
static void release_next(rlock_multilock_req *r);

/* Releases the members held (last first, each with its kind's unlock;
 * errors ignored, as Java ignores them), then starts again (restart) or
 * finishes with `result`. */
static void release_then(rlock_multilock_req *r, bool restart, int result) {
  r->restart = restart;
  r->result = result;
  release_next(r);
}

/* Java's lock(): the wait of a round, with n x 1500 ms as the base. */
static int64_t round_wait(const rlock_multilock_req *r) {
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

static void set_round(rlock_multilock_req *r, int64_t wait_ms) {
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

static void after_release(rlock_multilock_req *r) {
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

static void release_next(rlock_multilock_req *r) {
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

static void all_held(rlock_multilock_req *r);

static void member_result(rlock_multilock_req *r, int status) {
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
   * cutting its wait to a sliver (a 1 ms wait unanswered in 1 ms). */
  if (status < 0 && !r->answered[r->pos]) {
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
  rlock_multilock_req *r = data;
  uv_mutex_lock(&r->mu);
  rlock_req *cur = r->cur;
  r->cur = NULL;
  uv_mutex_unlock(&r->mu);
  rlock_req_free(cur);
  member_result(r, status);
}

static void expire_next(rlock_multilock_req *r);

static void expire_cb(int status, int64_t value, void *data) {
  (void)value;
  rlock_multilock_req *r = data;
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
static void expire_next(rlock_multilock_req *r) {
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
static void all_held(rlock_multilock_req *r) {
  if (r->lease_ms > 0) {
    r->expired = 0;
    expire_next(r);
  } else {
    finish(r, 1);
  }
}

/* Starts the acquire of member r->pos: 0, or the call's own error (the
 * callback will not fire). */
static int start_member(rlock_multilock_req *r, int64_t wait_ms) {
  rlock *m = r->ml->m[r->pos];
  uv_mutex_lock(&r->mu);
  int rc = rlock_lock_async(m, r->owner, wait_ms, r->member_lease, member_cb,
                            r, &r->cur);
  if (rc == 0)
    r->cur_core = m->engine->core;
  uv_mutex_unlock(&r->mu);
  return rc;
}

/* The step after a member was taken (or at a round's start). */
static void next(rlock_multilock_req *r) {
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

static int check_ml(const rlock_multilock *ml, int64_t lease_ms) {
  if (ml == NULL)
    return rlock__bad_arg("MultiLock is NULL");
  return rlock__check_lease(lease_ms);
}

int rlock_multilock_lock_async(rlock_multilock *ml, uint64_t owner,
                               int64_t wait_ms, int64_t lease_ms, rlock_cb cb,
                               void *data, rlock_multilock_req **out) {
  if (out != NULL)
    *out = NULL;
  int rc = check_ml(ml, lease_ms);
  if (rc != 0)
    return rc;
  rlock_multilock_req *r =
      calloc(1, sizeof(*r) + ml->n * (sizeof(size_t) + sizeof(bool)));
  if (r == NULL || uv_mutex_init(&r->mu) != 0) {
    free(r);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  r->answered = (bool *)&r->held[ml->n];
  atomic_init(&r->refs, out != NULL ? 2 : 1);
  atomic_fetch_add(&ml->refs, 1);
  r->ml = ml;
  r->owner = owner;
  r->lease_ms = lease_ms;
  r->rounds = wait_ms < 0;
  r->cb = cb;
  r->data = data;
  set_round(r, r->rounds ? round_wait(r) : wait_ms);
  r->fails_left = ml->n - ml->quorum;
  /* The first member from the caller's thread: its own error is the
   * call's (nothing is held yet, and the callback must not fire). */
  rc = start_member(r, r->member_wait);
  if (rc != 0) {
    char why[256];
    snprintf(why, sizeof(why), "%s", rlock_last_error());
    uv_mutex_destroy(&r->mu);
    ml_release(ml);
    free(r);
    rlock__set_last_error("member 0 (%s): %s", ml->m[0]->name, why);
    return rc;
  }
  if (out != NULL)
    *out = r;
  rlock__clear_last_error();
  return 0;
}

int rlock_multilock_req_cancel(rlock_multilock_req *r) {
  if (r == NULL)
    return rlock__bad_arg("MultiLock request is NULL");
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

void rlock_multilock_req_free(rlock_multilock_req *r) {
  if (r != NULL)
    req_release(r);
}

/* ---- the blocking calls ---- */

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

static int on_a_loop_thread(const rlock_multilock *ml) {
  for (size_t i = 0; i < ml->n; i++)
    if (rlock__core_on_loop_thread(ml->m[i]->engine->core)) {
      rlock__set_last_error("blocking rlock call made on a client's loop "
                            "thread (e.g. inside a callback)");
      return RLOCK_EDEADLK;
    }
  return 0;
}

static int acquire_sync(rlock_multilock *ml, uint64_t owner, int64_t wait_ms,
                        int64_t lease_ms) {
  int rc = check_ml(ml, lease_ms);
  if (rc == 0)
    rc = on_a_loop_thread(ml);
  if (rc != 0)
    return rc;
  sync_wait w = {.done = false};
  if (uv_mutex_init(&w.mu) != 0 || (uv_cond_init(&w.cv) != 0 &&
                                     (uv_mutex_destroy(&w.mu), true))) {
    rlock__set_last_error("no mutex or condition variable");
    return RLOCK_ESYS;
  }
  rc = rlock_multilock_lock_async(ml, owner, wait_ms, lease_ms, sync_cb, &w,
                                  NULL);
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

int rlock_multilock_try_lock_owner(rlock_multilock *ml, uint64_t owner,
                                   int64_t wait_ms, int64_t lease_ms) {
  return acquire_sync(ml, owner, wait_ms, lease_ms);
}

int rlock_multilock_try_lock(rlock_multilock *ml, int64_t wait_ms,
                             int64_t lease_ms) {
  return acquire_sync(ml, rlock__thread_id(), wait_ms, lease_ms);
}

int rlock_multilock_lock_owner(rlock_multilock *ml, uint64_t owner,
                               int64_t lease_ms) {
  int rc = acquire_sync(ml, owner, -1, lease_ms);
  return rc == 1 ? 0 : rc;
}

int rlock_multilock_lock(rlock_multilock *ml, int64_t lease_ms) {
  return rlock_multilock_lock_owner(ml, rlock__thread_id(), lease_ms);
}

/* A RedLock's unlock: every member's release at once (a stalled server
 * costs its timeout once, not once per member), then the answers. */
typedef struct unlock_all {
  uv_mutex_t mu;
  uv_cond_t cv;
  size_t left, released;
  int first;
  char why[256];
} unlock_all;

typedef struct unlock_one {
  unlock_all *all;
  size_t i;
  const char *name;
} unlock_one;

static void unlock_one_done(unlock_one *o, int status) {
  unlock_all *a = o->all;
  const char *why = rlock_last_error();
  uv_mutex_lock(&a->mu);
  if (status >= 0) {
    a->released++;
  } else if (a->first == 0 || (a->first == RLOCK_ENOTOWNER &&
                               status != RLOCK_ENOTOWNER)) {
    /* The first error, though one that is not "not held" (the members a
     * RedLock could not take) tells more. */
    a->first = status;
    snprintf(a->why, sizeof(a->why), "member %zu (%s): %s", o->i, o->name,
             why[0] ? why : rlock_strerror(status));
  }
  if (--a->left == 0)
    uv_cond_signal(&a->cv);
  uv_mutex_unlock(&a->mu);
}

static void unlock_one_cb(int status, int64_t value, void *data) {
  (void)value;
  unlock_one_done(data, status);
}

static int redlock_unlock(rlock_multilock *ml, uint64_t owner) {
  unlock_all a = {.left = ml->n};
  unlock_one *ones = calloc(ml->n, sizeof(*ones));
  if (ones == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  if (uv_mutex_init(&a.mu) != 0 ||
      (uv_cond_init(&a.cv) != 0 && (uv_mutex_destroy(&a.mu), true))) {
    free(ones);
    rlock__set_last_error("no mutex or condition variable");
    return RLOCK_ESYS;
  }
  for (size_t i = 0; i < ml->n; i++) {
    ones[i] = (unlock_one){.all = &a, .i = i, .name = ml->m[i]->name};
    int rc = rlock_unlock_async(ml->m[i], owner, unlock_one_cb, &ones[i],
                                NULL);
    if (rc != 0)
      unlock_one_done(&ones[i], rc);
  }
  uv_mutex_lock(&a.mu);
  while (a.left > 0)
    uv_cond_wait(&a.cv, &a.mu);
  uv_mutex_unlock(&a.mu);
  uv_cond_destroy(&a.cv);
  uv_mutex_destroy(&a.mu);
  free(ones);
  if (a.released >= ml->quorum || a.first == 0) {
    rlock__clear_last_error();
    return 0;
  }
  rlock__set_last_error("%s (%zu of %zu members released, %zu needed)", a.why,
                        a.released, ml->n, ml->quorum);
  return a.first;
}

int rlock_multilock_unlock_owner(rlock_multilock *ml, uint64_t owner) {
  if (ml == NULL)
    return rlock__bad_arg("MultiLock is NULL");
  if (ml->quorum < ml->n) {
    int rc = on_a_loop_thread(ml);
    return rc != 0 ? rc : redlock_unlock(ml, owner);
  }
  int first = 0;
  char why[256] = "";
  for (size_t i = 0; i < ml->n; i++) {
    int rc = rlock_unlock_owner(ml->m[i], owner);
    if (rc < 0 && first == 0) {
      first = rc;
      snprintf(why, sizeof(why), "member %zu (%s): %s", i, ml->m[i]->name,
               rlock_last_error());
    }
  }
  if (first < 0)
    rlock__set_last_error("%s", why);
  else
    rlock__clear_last_error();
  return first;
}

int rlock_multilock_unlock(rlock_multilock *ml) {
  return rlock_multilock_unlock_owner(ml, rlock__thread_id());
}

int rlock_multilock_is_held_owner(rlock_multilock *ml, uint64_t owner) {
  if (ml == NULL)
    return rlock__bad_arg("MultiLock is NULL");
  if (ml->quorum == ml->n) {
    for (size_t i = 0; i < ml->n; i++) {
      int rc = rlock_is_held_owner(ml->m[i], owner);
      if (rc != 1)
        return rc;
    }
    return 1;
  }
  /* A RedLock: held when a quorum of its members is. */
  size_t held = 0;
  int first = 0;
  char why[256] = "";
  for (size_t i = 0; i < ml->n && held < ml->quorum; i++) {
    int rc = rlock_is_held_owner(ml->m[i], owner);
    if (rc == 1) {
      held++;
    } else if (rc < 0 && first == 0) {
      first = rc;
      snprintf(why, sizeof(why), "member %zu (%s): %s", i, ml->m[i]->name,
               rlock_last_error());
    }
  }
  if (held >= ml->quorum || first == 0) {
    rlock__clear_last_error();
    return held >= ml->quorum ? 1 : 0;
  }
  rlock__set_last_error("%s", why);
  return first;
}
