/* Every lock kind both ways between rlock and a real Java Redisson client
 * (issue 32): a holder on one side blocks the other's tryLock; a release
 * on one side wakes the other's waiting lock() by message (within
 * RS_WAKE_BOUND_MS although the hold's TTL is 30 s); re-entry and foreign
 * unlock as in Java; forceUnlock from either side wakes the other's
 * waiter; watchdog renewal on either side keeps the other out past the
 * first lease. */
#include "rs.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An unlock that must answer `want` (1 released, 0 still re-entered). */
#define C_UNLOCK(e, want)                                                    \
  do {                                                                       \
    int rc_ = (e);                                                           \
    cr_assert_eq(rc_, (want), "%s: %d %s (%s)", #e, rc_,                     \
                 rc_ < 0 ? rlock_err_name(rc_) : "", rlock_last_error());    \
  } while (0)

TestSuite(locks, .timeout = 60);

typedef enum wait_how { W_CHANNEL, W_FAIR, W_RW, W_POLL } wait_how;

typedef struct kind {
  const char *label;
  const char *cside;  /* rlock getter: "lock", "fair", ... */
  const char *jprefix; /* Peer.java's name prefix for the Java side */
  wait_how wait;
  bool reentrant;
} kind;

static const kind K_LOCK = {"lock", "lock", "", W_CHANNEL, true};
static const kind K_FAIR = {"fair", "fair", "F/", W_FAIR, true};
static const kind K_WRITE = {"write", "write", "W/", W_RW, true};
static const kind K_READ_WRITE = {"C read / Java write", "read", "W/", W_RW, true};
static const kind K_WRITE_READ = {"C write / Java read", "write", "R/", W_RW, true};
static const kind K_FENCED = {"fenced", "fenced", "X/", W_CHANNEL, true};
static const kind K_SPIN = {"spin", "spin", "S/", W_POLL, true};
static const kind K_NONREENTRANT = {"nonreentrant", "nonreentrant", "N/", W_CHANNEL, false};
static const kind K_NONREENTRANT_FAIR = {"nonreentrant fair", "nonreentrant_fair", "Q/", W_FAIR, false};

static rlock *c_lock(rlock_client *c, const kind *k, const char *name) {
  return rs_lock_kind(c, k->cside, name);
}

/* Skips a kind this Redisson version does not have (3.x: non-reentrant). */
static bool java_has(rs_peer *p, const kind *k, const char *name) {
  if (k->jprefix[0] != 'N' && k->jprefix[0] != 'Q')
    return true;
  rs_send(p, "probe", "isLocked %s%s-probe", k->jprefix, name);
  const char *a = rs_answer(p, "probe", RS_REPLY_BOUND_MS);
  if (strncmp(a, "ERR UnsupportedOperationException", 33) == 0) {
    rs_report("%s: not in this Redisson version, not tested (%s)", k->label, a);
    return false;
  }
  cr_assert(strncmp(a, "OK", 2) == 0, "probe: %s", a);
  return true;
}

/* Waits until the side whose owner string is `owner` waits on name with
 * kind k (subscribed, or queued and subscribed for the fair kinds). */
static int64_t wait_waiting(const kind *k, const char *name, const char *owner) {
  char ch[512];
  switch (k->wait) {
  case W_CHANNEL:
    snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", name);
    return rs_wait_waiting(ch);
  case W_FAIR:
    snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}:%s", name, owner);
    return rs_wait_waiting(ch);
  case W_RW:
    /* (also: Redisson wakes its read/write waiters on "1", a write
     * unlock, by releasing as many permits as threads are parked right
     * then - getQueueLength - so a Java waiter still making its retry
     * would sleep until the TTL, Java against Java alike) */
    snprintf(ch, sizeof ch, "redisson_rwlock:{%s}", name);
    return rs_wait_waiting(ch);
  case W_POLL:
    rs_sleep_ms(RS_SETTLE_MS); /* polling: it is waiting by now */
    break;
  }
  return rs_now_ms();
}

typedef struct cwait {
  rlock *lock;
  uint64_t owner;
  int64_t wait_ms, lease_ms;
} cwait;

static int cwait_fn(void *arg) {
  cwait *w = arg;
  return rlock_try_lock_owner(w->lock, w->owner, w->wait_ms, w->lease_ms);
}

static void c_owner_str(rlock_client *c, uint64_t owner, char *buf, size_t n) {
  snprintf(buf, n, "%s:%" PRIu64, rlock_client_id(c), owner);
}

/* One kind's test: a session, a client, a name and its C handle, two C
 * owners. Skips the test when this Redisson lacks the kind. */
typedef struct kfix {
  rs_peer *p;
  rlock_client *c;
  char name[96], jn[128];
  rlock *l;
  uint64_t o1, o2;
} kfix;

static void kfix_open(kfix *f, const kind *k, const char *base) {
  f->p = rs_connect();
  f->c = rs_client(NULL, 0);
  rs_name(f->name, sizeof f->name, base);
  if (!java_has(f->p, k, f->name)) {
    rlock_client_free(f->c);
    rs_close(f->p);
    cr_skip_test("%s: not in Redisson %s", k->label, rs_version());
  }
  snprintf(f->jn, sizeof f->jn, "%s%s", k->jprefix, f->name);
  f->l = c_lock(f->c, k, f->name);
  f->o1 = rlock_owner_new();
  f->o2 = rlock_owner_new();
}

static void kfix_close(kfix *f) {
  rlock_free(f->l);
  rlock_client_free(f->c);
  rs_close(f->p);
}

/* A C holder blocks Java's tryLock; C's unlock wakes Java's waiting lock();
 * a Java holder blocks C's try; Java's unlock wakes C's waiter. */
static void both_ways(const kind *k) {
  kfix f;
  kfix_open(&f, k, "bw");
  rs_peer *p = f.p;
  rlock_client *c = f.c;
  rlock *l = f.l;
  const char *name = f.name, *jn = f.jn;
  uint64_t o1 = f.o1, o2 = f.o2;
  char jowner[160], cowner[160];
  rs_owner(p, "A", jowner, sizeof jowner);

  /* C holds: Java's tryLock fails, and its lock() waits */
  cr_assert_eq(rlock_try_lock_owner(l, o1, 0, RS_LEASE_MS), 1);
  cr_assert_not(rs_call_bool(p, "A", "tryLock %s 200 -1", jn),
                "%s: Java got the lock while C held it", k->label);
  rs_send(p, "A", "lock %s %d", jn, RS_LEASE_MS);
  int64_t t0 = wait_waiting(k, name, jowner);
  cr_assert_not(rs_has_answer(p, "A", 0), "%s: Java's lock() returned while C held it", k->label);
  C_UNLOCK(rlock_unlock_owner(l, o1), 0);
  int64_t c_to_j = rs_java_woke(p, "A", t0, NULL);

  /* Java holds: C's try fails, and its waiter waits */
  cr_assert_eq(rlock_try_lock_owner(l, o2, 0, RS_LEASE_MS), 0,
               "%s: C got the lock while Java held it", k->label);
  cwait w = {l, o2, 10000, RS_LEASE_MS};
  rs_task t;
  rs_task_start(&t, cwait_fn, &w);
  c_owner_str(c, o2, cowner, sizeof cowner);
  t0 = wait_waiting(k, name, cowner);
  cr_assert_not(rs_task_done(&t), "%s: C's wait returned while Java held it", k->label);
  rs_call(p, "A", "unlock %s", jn);
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  rs_report("%s: C unlock -> Java lock() returned in %" PRId64
            " ms; Java unlock -> C try_lock returned in %" PRId64 " ms",
            k->label, c_to_j, j_to_c);
  C_UNLOCK(rlock_unlock_owner(l, o2), 0);
  kfix_close(&f);
}

/* A local handoff (issue 39) beside a Java waiter: C's owner 1 holds, a
 * Java lock() and C's owner 2 wait. With Java subscribed, owner 1's unlock
 * does not move the lock to owner 2 (docs/wire-protocol.md, "Transfer"):
 * it releases and publishes, and the C client holds its own tries back a
 * moment so that Java's woken thread can take it (docs/performance.md,
 * "Fair share"). Exactly one of the two gets the lock; the other gets it
 * within the usual wake bound once the first unlocks. Without the Java
 * waiter the same unlock moves the lock to owner 2 in one script (the
 * faults suite's gate tests). */
Test(locks, lock_java_waiter_beside_a_local_handoff) {
  kfix f;
  kfix_open(&f, &K_LOCK, "xfer");
  rs_peer *p = f.p;
  rlock *l = f.l;
  char jowner[160];
  rs_owner(p, "A", jowner, sizeof jowner);
  cr_assert_eq(rlock_try_lock_owner(l, f.o1, 0, RS_LEASE_MS), 1);
  rs_send(p, "A", "lock %s %d", f.jn, RS_LEASE_MS);
  wait_waiting(&K_LOCK, f.name, jowner);
  cwait w = {l, f.o2, 20000, RS_LEASE_MS};
  rs_task t;
  rs_task_start(&t, cwait_fn, &w);
  rs_sleep_ms(RS_SETTLE_MS); /* owner 2 waits locally */
  cr_assert_not(rs_task_done(&t), "owner 2 got a lock owner 1 holds");
  int64_t t0 = rs_now_ms();
  C_UNLOCK(rlock_unlock_owner(l, f.o1), 0);
  bool java = false, c = false;
  while (!java && !c && rs_now_ms() - t0 < RS_WAKE_BOUND_MS) {
    java = rs_has_answer(p, "A", 2);
    c = rs_task_done(&t);
  }
  cr_assert(java || c, "nobody got the lock within %d ms of the unlock",
            RS_WAKE_BOUND_MS);
  int64_t first = rs_now_ms() - t0;
  rs_sleep_ms(200);
  cr_assert(!(rs_has_answer(p, "A", 0) && rs_task_done(&t)),
            "Java and C's owner 2 both hold the lock");
  rs_report("lock: Java waiter beside a local handoff: %s got the lock %" PRId64
            " ms after the unlock", java ? "Java" : "C's owner 2", first);
  t0 = rs_now_ms();
  if (java) {
    rs_java_woke(p, "A", t0, NULL);
    rs_call(p, "A", "unlock %s", f.jn);
    rs_c_woke(&t, t0, 1);
    C_UNLOCK(rlock_unlock_owner(l, f.o2), 0);
  } else {
    rs_c_woke(&t, t0, 1);
    C_UNLOCK(rlock_unlock_owner(l, f.o2), 0);
    rs_java_woke(p, "A", t0, NULL);
    rs_call(p, "A", "unlock %s", f.jn);
  }
  cr_assert_eq(rlock_is_locked(l), 0);
  kfix_close(&f);
}

/* The hash field Java's hold of `k` is counted in. */
static void java_field(const kind *k, const char *owner, char *buf, size_t n) {
  snprintf(buf, n, "%s%s", owner, k->jprefix[0] == 'W' ? ":write" : "");
}

/* Re-entry is counted where both sides see it; neither side unlocks the
 * other's hold; the non-reentrant kinds refuse a second acquire on both
 * sides. */
static void reentry_foreign(const kind *k) {
  kfix f;
  kfix_open(&f, k, "re");
  rs_peer *p = f.p;
  rlock *l = f.l;
  const char *name = f.name, *jn = f.jn;
  uint64_t o1 = f.o1;
  char jowner[160], field[200];
  rs_owner(p, "A", jowner, sizeof jowner);
  java_field(k, jowner, field, sizeof field);

  /* Java holds, re-enters (or is refused) */
  rs_call(p, "A", "lock %s %d", jn, RS_LEASE_MS);
  if (k->reentrant) {
    rs_call(p, "A", "lock %s %d", jn, RS_LEASE_MS);
    cr_assert_eq(rs_call_num(p, "A", "holdCount %s", jn), 2);
  } else {
    const char *e = rs_call_err(p, "A", "lock %s %d", jn, RS_LEASE_MS);
    rs_report("%s: Java's second lock(): %s", k->label, e);
  }
  char *count = rs_str("HGET %s %s", name, field);
  cr_assert(count != NULL && strcmp(count, k->reentrant ? "2" : "1") == 0,
            "%s: Java's hold count in the hash is %s", k->label, count ? count : "(nil)");
  free(count);
  cr_assert_eq(rlock_is_locked(l), 1);
  cr_assert_eq(rlock_try_lock_owner(l, o1, 0, RS_LEASE_MS), 0);
  /* C cannot unlock Java's hold */
  cr_assert_eq(rlock_unlock_owner(l, o1), RLOCK_ENOTOWNER);
  rs_call(p, "A", "unlock %s", jn);
  if (k->reentrant) {
    cr_assert_eq(rlock_try_lock_owner(l, o1, 0, RS_LEASE_MS), 0,
                 "%s: C got in after Java's first of two unlocks", k->label);
    rs_call(p, "A", "unlock %s", jn);
  }
  cr_assert_eq(rlock_is_locked(l), 0, "%s: still locked after Java's last unlock", k->label);

  /* C holds, re-enters (or is refused) */
  cr_assert_eq(rlock_try_lock_owner(l, o1, 0, RS_LEASE_MS), 1);
  int second = rlock_try_lock_owner(l, o1, 0, RS_LEASE_MS);
  cr_assert_eq(second, k->reentrant ? 1 : RLOCK_EREENTRY, "%s: C's second acquire: %d", k->label, second);
  cr_assert_eq(rlock_hold_count_owner(l, o1), k->reentrant ? 2 : 1);
  cr_assert(rs_call_bool(p, "B", "isLocked %s", jn));
  cr_assert_not(rs_call_bool(p, "B", "isHeld %s", jn));
  cr_assert_eq(rs_call_num(p, "B", "holdCount %s", jn), 0);
  /* Java cannot unlock C's hold */
  const char *e = rs_call_err(p, "B", "unlock %s", jn);
  cr_assert(strncmp(e, "IllegalMonitorStateException", 28) == 0, "%s: Java's foreign unlock: %s", k->label, e);
  C_UNLOCK(rlock_unlock_owner(l, o1), 0);
  cr_assert_eq(rlock_hold_count_owner(l, o1), k->reentrant ? 1 : 0,
               "%s: holds left after C's first unlock", k->label);
  if (k->reentrant) {
    cr_assert_not(rs_call_bool(p, "B", "tryLock %s 0 -1", jn),
                  "%s: Java got in after C's first of two unlocks", k->label);
    C_UNLOCK(rlock_unlock_owner(l, o1), 0);
  }
  cr_assert(rs_call_bool(p, "B", "tryLock %s 0 %d", jn, RS_LEASE_MS));
  rs_call(p, "B", "unlock %s", jn);
  kfix_close(&f);
}

/* forceUnlock in Java wakes C's waiter; rlock_force_unlock wakes Java's. */
static void force_unlock(const kind *k) {
  kfix f;
  kfix_open(&f, k, "fu");
  rs_peer *p = f.p;
  rlock_client *c = f.c;
  rlock *l = f.l;
  const char *name = f.name, *jn = f.jn;
  uint64_t o1 = f.o1, o2 = f.o2;
  char jowner[160], cowner[160];

  rs_call(p, "A", "lock %s %d", jn, RS_LEASE_MS);
  cwait w = {l, o1, 10000, RS_LEASE_MS};
  rs_task t;
  rs_task_start(&t, cwait_fn, &w);
  c_owner_str(c, o1, cowner, sizeof cowner);
  int64_t t0 = wait_waiting(k, name, cowner);
  cr_assert(rs_call_bool(p, "F", "forceUnlock %s", jn));
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  C_UNLOCK(rlock_unlock_owner(l, o1), 0);

  /* the other way */
  cr_assert_eq(rlock_try_lock_owner(l, o2, 0, RS_LEASE_MS), 1);
  rs_owner(p, "B", jowner, sizeof jowner);
  rs_send(p, "B", "lock %s %d", jn, RS_LEASE_MS);
  t0 = wait_waiting(k, name, jowner);
  cr_assert_eq(rlock_force_unlock(l), 1);
  int64_t c_to_j = rs_java_woke(p, "B", t0, NULL);
  rs_report("%s: Java forceUnlock -> C waiter in %" PRId64
            " ms; rlock_force_unlock -> Java lock() in %" PRId64 " ms",
            k->label, j_to_c, c_to_j);
  C_UNLOCK(rlock_unlock_owner(l, o2), RLOCK_ELOCKLOST); /* its hold was force-unlocked */
  rs_call(p, "B", "unlock %s", jn);
  kfix_close(&f);
}

#define KIND_TESTS(id, k)                                                     \
  Test(locks, id##_both_ways) { both_ways(&k); }                              \
  Test(locks, id##_reentry_foreign_unlock) { reentry_foreign(&k); }           \
  Test(locks, id##_force_unlock_wakes) { force_unlock(&k); }

KIND_TESTS(lock, K_LOCK)
KIND_TESTS(fair, K_FAIR)
KIND_TESTS(write, K_WRITE)
KIND_TESTS(fenced, K_FENCED)
KIND_TESTS(spin, K_SPIN)
KIND_TESTS(nonreentrant, K_NONREENTRANT)
KIND_TESTS(nonreentrant_fair, K_NONREENTRANT_FAIR)
Test(locks, read_vs_write_both_ways) { both_ways(&K_READ_WRITE); }
Test(locks, write_vs_read_both_ways) { both_ways(&K_WRITE_READ); }
Test(locks, read_vs_write_force_unlock_wakes) { force_unlock(&K_READ_WRITE); }

/* Watchdogs: every kind held without a lease on each side (both
 * watchdogs at RS_WATCHDOG_MS) keeps the other side's waiter out for 2.5
 * timeouts; all kinds at once. */
static const kind *const WD_KINDS[] = {&K_LOCK, &K_FAIR, &K_WRITE, &K_FENCED,
                                       &K_SPIN, &K_NONREENTRANT,
                                       &K_NONREENTRANT_FAIR, &K_READ_WRITE};
#define N_WD (sizeof WD_KINDS / sizeof WD_KINDS[0])
#define WD_WAIT_MS (RS_WATCHDOG_MS * 5 / 2)

Test(locks, watchdogs_keep_the_other_side_out, .timeout = 60) {
  rs_peer *p = rs_connect();
  rlock_client *c = rs_client(NULL, RS_WATCHDOG_MS);
  char jname[N_WD][96], cname[N_WD][96], jn[1024], tag[16];
  rlock *jl[N_WD], *cl[N_WD];
  bool has[N_WD];
  uint64_t holder = rlock_owner_new();
  cwait w[N_WD];
  rs_task t[N_WD];
  for (size_t i = 0; i < N_WD; i++) {
    const kind *k = WD_KINDS[i];
    rs_name(jname[i], sizeof jname[i], "wdj");
    rs_name(cname[i], sizeof cname[i], "wdc");
    has[i] = java_has(p, k, jname[i]);
    if (!has[i])
      continue;
    jl[i] = c_lock(c, k, jname[i]);
    cl[i] = c_lock(c, k, cname[i]);
    snprintf(tag, sizeof tag, "H%zu", i);
    snprintf(jn, sizeof jn, "%s%s", k->jprefix, jname[i]);
    rs_call(p, tag, "lock %s", jn); /* no lease: Java's watchdog */
    cr_assert_eq(rlock_try_lock_owner(cl[i], holder, 0, -1), 1); /* rlock's */
  }
  int64_t t0 = rs_now_ms();
  for (size_t i = 0; i < N_WD; i++) {
    if (!has[i])
      continue;
    snprintf(tag, sizeof tag, "T%zu", i);
    rs_send(p, tag, "tryLock %s%s %d -1", WD_KINDS[i]->jprefix, cname[i], WD_WAIT_MS);
    w[i] = (cwait){jl[i], rlock_owner_new(), WD_WAIT_MS, RS_LEASE_MS};
    rs_task_start(&t[i], cwait_fn, &w[i]);
  }
  for (size_t i = 0; i < N_WD; i++) {
    if (!has[i])
      continue;
    snprintf(tag, sizeof tag, "T%zu", i);
    const char *a = rs_ok(p, tag, WD_WAIT_MS + RS_REPLY_BOUND_MS);
    cr_assert(strcmp(a, "false") == 0,
              "%s: Java got rlock's watchdog-renewed lock (%s)", WD_KINDS[i]->label, a);
    cr_assert_eq(rs_task_join(&t[i], WD_WAIT_MS + RS_REPLY_BOUND_MS), 0,
                 "%s: C got Java's watchdog-renewed lock", WD_KINDS[i]->label);
  }
  int64_t took = rs_now_ms() - t0;
  rs_report("watchdogs (%d ms) on both sides kept %zu kinds out for %" PRId64 " ms",
            RS_WATCHDOG_MS, N_WD, took);
  cr_assert_geq(took, WD_WAIT_MS);
  for (size_t i = 0; i < N_WD; i++) {
    if (!has[i])
      continue;
    snprintf(tag, sizeof tag, "H%zu", i);
    snprintf(jn, sizeof jn, "%s%s", WD_KINDS[i]->jprefix, jname[i]);
    cr_assert(rs_call_bool(p, tag, "isHeld %s", jn), "%s: Java lost its hold", WD_KINDS[i]->label);
    rs_call(p, tag, "unlock %s", jn);
    cr_assert_eq(rlock_unlock_owner(cl[i], holder), 0, "%s: rlock lost its hold", WD_KINDS[i]->label);
    rlock_free(jl[i]);
    rlock_free(cl[i]);
  }
  rlock_client_free(c);
  rs_close(p);
}

/* Fenced tokens interleave across the sides and only grow: every
 * acquisition (re-entry included) on either side takes a higher token.
 * rlock floors its token with the server's clock (docs/fencing.md), so its
 * token is above Java's last one but not that plus one; Java's plain INCR
 * gives exactly rlock's last token plus one. Java's getToken() and
 * rlock_fenced_token() read the same counter. */
/* 2020-01-01 in microseconds: a clock-floored token is above it */
#define RS_TOKEN_FLOOR INT64_C(1577836800000000)

Test(locks, fenced_tokens_interleave_and_grow) {
  rs_peer *p = rs_connect();
  rlock_client *c = rs_client(NULL, 0);
  char name[96], jn[128];
  rs_name(name, sizeof name, "tok");
  snprintf(jn, sizeof jn, "X/%s", name);
  rlock *l = c_lock(c, &K_FENCED, name);
  int64_t last = 0, t = 0;
  for (int round = 0; round < 3; round++) {
    cr_assert_eq(rlock_try_lock_fenced(l, 1000, RS_LEASE_MS, &t), 1);
    cr_assert_gt(t, last, "rlock's token %" PRId64 " after %" PRId64, t, last);
    cr_assert_gt(t, RS_TOKEN_FLOOR, "rlock's token %" PRId64 " is not floored by the clock", t);
    cr_assert_eq(rs_call_num(p, "A", "token %s", jn), t, "Java's getToken differs from rlock's");
    int64_t first = t;
    cr_assert_eq(rlock_try_lock_fenced(l, 0, RS_LEASE_MS, &t), 1); /* re-entry */
    cr_assert_gt(t, first, "rlock's re-entry token %" PRId64 " after %" PRId64, t, first);
    C_UNLOCK(rlock_unlock(l), 0);
    cr_assert_eq(rlock_hold_count(l), 1, "the re-entered hold is left");
    C_UNLOCK(rlock_unlock(l), 0);
    rs_call(p, "A", "lock %s %d", jn, RS_LEASE_MS);
    long long jt = rs_call_num(p, "A", "token %s", jn);
    cr_assert_eq(jt, t + 1, "Java's token %lld after rlock's %" PRId64, jt, t);
    int64_t ct = 0;
    cr_assert_eq(rlock_fenced_token(l, &ct), 0);
    cr_assert_eq(ct, jt, "rlock reads %" PRId64 ", Java took %lld", ct, jt);
    rs_call(p, "A", "unlock %s", jn);
    last = jt;
  }
  char *counter = rs_str("GET redisson_lock_token:{%s}", name);
  cr_assert(counter != NULL && atoll(counter) == last);
  free(counter);
  rs_report("fenced: tokens up to %" PRId64 " taken in turn by rlock (2 per round, clock-floored) "
            "and Java (1, rlock's + 1)", last);
  rlock_free(l);
  rlock_client_free(c);
  rs_close(p);
}

/* The shared peer command itself (../shared/redisson/peer PORT, its own
 * driver on stdin/stdout, not the project's copy): the same exclusion and
 * wake-up both ways, so the copy's results are the original's. */
Test(locks, shared_peer_command_unmodified) {
  if (strcmp(rs_variant(), "shared") != 0)
    cr_skip_test("the shared peer command runs the shared build only");
  rs_peer *p = rs_shared_peer_start();
  rlock_client *c = rs_client(NULL, 0);
  char name[96], ch[200];
  rs_name(name, sizeof name, "orig");
  snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", name);
  rlock *l = c_lock(c, &K_LOCK, name);
  uint64_t o = rlock_owner_new();
  cr_assert_eq(rlock_try_lock_owner(l, o, 0, RS_LEASE_MS), 1);
  cr_assert_not(rs_call_bool(p, "A", "tryLock %s 100 -1", name));
  rs_send(p, "B", "lock %s %d", name, RS_LEASE_MS);
  int64_t t0 = rs_wait_waiting(ch);
  C_UNLOCK(rlock_unlock_owner(l, o), 0);
  int64_t c_to_j = rs_java_woke(p, "B", t0, NULL);
  cr_assert_eq(rlock_try_lock_owner(l, o, 0, RS_LEASE_MS), 0);
  cwait w = {l, o, 10000, RS_LEASE_MS};
  rs_task t;
  rs_task_start(&t, cwait_fn, &w);
  t0 = rs_wait_waiting(ch);
  rs_call(p, "B", "unlock %s", name);
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  rs_report("shared peer command: C unlock -> Java lock() %" PRId64 " ms; Java unlock -> C %" PRId64 " ms",
            c_to_j, j_to_c);
  C_UNLOCK(rlock_unlock_owner(l, o), 0);
  rlock_free(l);
  rlock_client_free(c);
  rs_close(p);
}
