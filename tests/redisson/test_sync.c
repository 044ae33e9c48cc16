/* MultiLock, FasterMultiLock, semaphores, permit-expirable semaphores with
 * several permits, and count-down latches between rlock and a real Java
 * Redisson client (issue 32). */
#include "rs.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


TestSuite(sync, .timeout = 60);

/* ---- MultiLock over overlapping names ---- */

typedef struct cml {
  rlock *ml;
  uint64_t owner;
  int64_t wait_ms;
} cml;

static int cml_fn(void *arg) {
  cml *m = arg;
  return rlock_try_lock_owner(m->ml, m->owner, m->wait_ms, RS_LEASE_MS);
}

/* rlock's MultiLock over {a,b} and the Java spec of one over {b,c}. */
typedef struct mfix {
  rs_peer *p;
  rlock_client *c;
  char a[96], b[96], cc[96], jm[400];
  rlock *la, *lb;
  rlock *ml;
} mfix;

static void mfix_open(mfix *f, const char *base) {
  char n[32];
  f->p = rs_connect();
  f->c = rs_client(NULL, 0);
  snprintf(n, sizeof n, "%sa", base);
  rs_name(f->a, sizeof f->a, n);
  snprintf(n, sizeof n, "%sb", base);
  rs_name(f->b, sizeof f->b, n);
  snprintf(n, sizeof n, "%sc", base);
  rs_name(f->cc, sizeof f->cc, n);
  snprintf(f->jm, sizeof f->jm, "M/%s+%s", f->b, f->cc);
  cr_assert_eq(rlock_new(f->c, f->a, &f->la), 0);
  cr_assert_eq(rlock_new(f->c, f->b, &f->lb), 0);
  rlock *members[] = {f->la, f->lb};
  cr_assert_eq(rlock_new_multilock(members, 2, &f->ml), 0);
}

static void mfix_close(mfix *f) {
  rlock_free(f->ml);
  rlock_free(f->la);
  rlock_free(f->lb);
  rlock_client_free(f->c);
  rs_close(f->p);
}

/* rlock's MultiLock over {a,b} and Java's over {b,c}: never both held; each
 * side's unlock wakes the other's waiting MultiLock. */
Test(sync, multilock_overlapping_both_ways) {
  mfix f;
  mfix_open(&f, "m");
  rs_peer *p = f.p;
  rlock *ml = f.ml;
  const char *a = f.a, *b = f.b, *cc = f.cc, *jm = f.jm;
  char ch[256];
  uint64_t o1 = rlock_owner_new(), o2 = rlock_owner_new();
  snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", b);

  cr_assert_eq(rlock_try_lock_owner(ml, o1, 0, RS_LEASE_MS), 1);
  cr_assert_not(rs_call_bool(p, "A", "tryLock %s 300 %d", jm, RS_LEASE_MS),
                "Java's MultiLock {b,c} got in while rlock's {a,b} held");
  cr_assert_eq(rs_int("EXISTS %s", cc), 0, "Java's failed try left c taken");
  rs_send(p, "A", "lock %s %d", jm, RS_LEASE_MS);
  int64_t t0 = rs_wait_waiting(ch);
  cr_assert_eq(rlock_unlock_owner(ml, o1), 0);
  int64_t c_to_j = rs_java_woke(p, "A", t0, NULL);

  cr_assert_eq(rlock_try_lock_owner(ml, o2, 0, RS_LEASE_MS), 0,
               "rlock's MultiLock got in while Java's held");
  cr_assert_eq(rs_int("EXISTS %s", a), 0, "rlock's failed try left a taken");
  cml m = {ml, o2, 10000};
  rs_task t;
  rs_task_start(&t, cml_fn, &m);
  t0 = rs_wait_waiting(ch);
  rs_call(p, "A", "unlock %s", jm);
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  rs_report("MultiLock: C unlock -> Java lock() %" PRId64 " ms; Java unlock -> C %" PRId64 " ms",
            c_to_j, j_to_c);
  cr_assert_eq(rlock_unlock_owner(ml, o2), 0);
  mfix_close(&f);
}

/* Both MultiLocks guard one unguarded counter: each side increments it
 * under its own MultiLock ({a,b} and {b,c}); no update is lost. */
typedef struct mlc {
  rlock *ml;
  int port;
  const char *key;
  int rounds;
} mlc;

static int mlc_fn(void *arg) {
  mlc *m = arg;
  redisContext *r = redisConnect("127.0.0.1", m->port);
  if (r == NULL || r->err)
    return -1;
  uint64_t owner = rlock_owner_new();
  for (int i = 0; i < m->rounds; i++) {
    if (rlock_lock_owner(m->ml, owner, RS_LEASE_MS) != 0)
      return -2;
    redisReply *g = redisCommand(r, "GET %s", m->key);
    long long v = (g && g->type == REDIS_REPLY_STRING) ? atoll(g->str) : 0;
    freeReplyObject(g);
    freeReplyObject(redisCommand(r, "SET %s %lld", m->key, v + 1));
    if (rlock_unlock_owner(m->ml, owner) != 0)
      return -3;
  }
  redisFree(r);
  return 0;
}

Test(sync, multilock_overlapping_counter) {
  mfix f;
  mfix_open(&f, "mc");
  rs_peer *p = f.p;
  rlock *ml = f.ml;
  const char *jm = f.jm;
  char key[96];
  rs_name(key, sizeof key, "mccount");
  enum { ROUNDS = 50 };
  rs_send(p, "J1", "count %s %s %d", jm, key, ROUNDS);
  rs_send(p, "J2", "count %s %s %d", jm, key, ROUNDS);
  mlc m = {ml, rs_port(), key, ROUNDS};
  rs_task t1, t2;
  rs_task_start(&t1, mlc_fn, &m);
  rs_task_start(&t2, mlc_fn, &m);
  cr_assert_eq(rs_task_join(&t1, 45000), 0);
  cr_assert_eq(rs_task_join(&t2, 45000), 0);
  cr_assert_str_eq(rs_ok(p, "J1", 45000), "50");
  cr_assert_str_eq(rs_ok(p, "J2", 45000), "50");
  char *v = rs_str("GET %s", key);
  cr_assert(v != NULL && atoi(v) == 4 * ROUNDS, "counter %s, want %d", v ? v : "(nil)", 4 * ROUNDS);
  free(v);
  mfix_close(&f);
}

/* ---- FasterMultiLock ---- */

typedef struct cfml {
  rlock *f;
  uint64_t owner;
} cfml;

static int cfml_fn(void *arg) {
  cfml *m = arg;
  return rlock_try_lock_owner(m->f, m->owner, 10000, RS_LEASE_MS);
}

Test(sync, faster_multilock_both_ways) {
  rs_peer *p = rs_connect();
  rlock_client *c = rs_client(NULL, 0);
  char group[96], jm[300], ch[256];
  rs_name(group, sizeof group, "fg");
  snprintf(jm, sizeof jm, "G/%s=Mary_002,Bob_003", group);
  snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", group);
  const char *vals[] = {"Jack_001", "Mary_002"};
  rlock *f;
  cr_assert_eq(rlock_new_fast_multilock(c, group, vals, NULL, 2, &f), 0);
  uint64_t o1 = rlock_owner_new(), o2 = rlock_owner_new();

  cr_assert_eq(rlock_try_lock_owner(f, o1, 0, RS_LEASE_MS), 1);
  cr_assert_not(rs_call_bool(p, "A", "tryLock %s 200 %d", jm, RS_LEASE_MS),
                "Java's FasterMultiLock got Mary_002 while rlock held it");
  rs_send(p, "A", "lock %s %d", jm, RS_LEASE_MS);
  int64_t t0 = rs_wait_waiting(ch);
  cr_assert_eq(rlock_unlock_owner(f, o1), 0);
  int64_t c_to_j = rs_java_woke(p, "A", t0, NULL);

  cr_assert_eq(rlock_try_lock_owner(f, o2, 0, RS_LEASE_MS), 0,
               "rlock's FasterMultiLock got Mary_002 while Java held it");
  cfml m = {f, o2};
  rs_task t;
  rs_task_start(&t, cfml_fn, &m);
  t0 = rs_wait_waiting(ch);
  rs_call(p, "A", "unlock %s", jm);
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  rs_report("FasterMultiLock: C unlock -> Java %" PRId64 " ms; Java unlock -> C %" PRId64 " ms",
            c_to_j, j_to_c);
  cr_assert_eq(rlock_unlock_owner(f, o2), 0);
  rlock_free(f);
  rlock_client_free(c);
  rs_close(p);
}

/* ---- semaphore ---- */

typedef struct csem {
  rlock_semaphore *s;
  int64_t permits;
} csem;

static int csem_fn(void *arg) {
  csem *m = arg;
  return rlock_semaphore_try_acquire(m->s, m->permits, 10000);
}

Test(sync, semaphore_both_ways) {
  rs_peer *p = rs_connect();
  rlock_client *c = rs_client(NULL, 0);
  char name[96], ch[256];
  rs_name(name, sizeof name, "sem");
  snprintf(ch, sizeof ch, "redisson_sc:{%s}", name);
  rlock_semaphore *s;
  cr_assert_eq(rlock_semaphore_new(c, name, &s), 0);
  cr_assert(rs_call_bool(p, "A", "semSet %s 3", name));
  cr_assert_eq(rlock_semaphore_available_permits(s), 3);
  cr_assert_eq(rlock_semaphore_try_acquire(s, 2, 0), 1);
  cr_assert_eq(rs_call_num(p, "A", "semAvailable %s", name), 1);
  cr_assert_not(rs_call_bool(p, "A", "semAcquire %s 2 200", name));
  rs_send(p, "A", "semAcquire %s 2 10000", name);
  int64_t t0 = rs_wait_waiting(ch);
  cr_assert_eq(rlock_semaphore_release(s, 1), 0);
  const char *woke;
  int64_t c_to_j = rs_java_woke(p, "A", t0, &woke);
  cr_assert_str_eq(woke, "true");
  /* Java has 2, C has 1 (of the 2 it took, one released): 0 left */
  cr_assert_eq(rlock_semaphore_available_permits(s), 0);
  csem m = {s, 2};
  rs_task t;
  rs_task_start(&t, csem_fn, &m);
  t0 = rs_wait_waiting(ch);
  rs_call(p, "A", "semRelease %s 2", name);
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  rs_report("semaphore: C release -> Java tryAcquire %" PRId64 " ms; Java release -> C %" PRId64 " ms",
            c_to_j, j_to_c);
  cr_assert_eq(rlock_semaphore_release(s, 3), 0);
  cr_assert_eq(rs_call_num(p, "A", "semAvailable %s", name), 3);
  rlock_semaphore_free(s);
  rlock_client_free(c);
  rs_close(p);
}

/* ---- permit-expirable semaphore, several permits ---- */

typedef struct cpsem {
  rlock_permit_semaphore *s;
  char ids[2][RLOCK_PERMIT_ID_LEN + 1];
} cpsem;

static int cpsem_fn(void *arg) {
  cpsem *m = arg;
  return rlock_permit_semaphore_try_acquire_n(m->s, 2, 10000, RS_LEASE_MS, m->ids);
}

Test(sync, permit_semaphore_ids_cross_sides) {
  rs_peer *p = rs_connect();
  rlock_client *c = rs_client(NULL, 0);
  char name[96], ch[256];
  rs_name(name, sizeof name, "psem");
  snprintf(ch, sizeof ch, "redisson_sc:{%s}", name);
  rlock_permit_semaphore *s;
  cr_assert_eq(rlock_permit_semaphore_new(c, name, &s), 0);
  cr_assert(rs_call_bool(p, "A", "psemSet %s 5", name));
  cr_assert_eq(rlock_permit_semaphore_permits(s), 5);

  /* C takes 3; Java releases them by id */
  char cids[3][RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 3, 0, RS_LEASE_MS, cids), 1);
  cr_assert_eq(rs_call_num(p, "A", "psemAvailable %s", name), 2);
  cr_assert_str_eq(rs_call(p, "A", "psemAcquire %s 3 200 %d", name, RS_LEASE_MS), "none");
  cr_assert_eq(rs_call_num(p, "A", "psemRelease %s %s,%s,%s", name, cids[0], cids[1], cids[2]), 3);
  cr_assert_eq(rlock_permit_semaphore_available_permits(s), 5);
  cr_assert_eq(rlock_permit_semaphore_try_release(s, cids[0]), 0, "a released id released again");

  /* Java takes 4; C releases them by id */
  char jids[400];
  snprintf(jids, sizeof jids, "%s", rs_call(p, "A", "psemAcquire %s 4 0 %d", name, RS_LEASE_MS));
  const char *ids[4];
  size_t n = 0;
  for (char *tok = strtok(jids, ","); tok && n < 4; tok = strtok(NULL, ","))
    ids[n++] = tok;
  cr_assert_eq(n, 4, "Java's ids: %s", jids);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(strlen(ids[i]), RLOCK_PERMIT_ID_LEN, "Java id %s", ids[i]);
  cr_assert_eq(rlock_permit_semaphore_available_permits(s), 1);
  /* C waits for 2 (1 free): Java's release of one of its ids wakes it */
  cpsem m = {.s = s};
  rs_task t;
  rs_task_start(&t, cpsem_fn, &m);
  int64_t t0 = rs_wait_waiting(ch);
  cr_assert_eq(rs_call_num(p, "A", "psemRelease %s %s", name, ids[0]), 1);
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  /* C returns three of Java's ids (all or none: with one of its own already
   * released, the four-id release changes nothing) */
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, ids, 4), 0);
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, ids + 1, 3), 3);
  cr_assert_eq(rlock_permit_semaphore_available_permits(s), 3);
  /* Java waits for 4; C's release of its own 2 wakes it */
  rs_send(p, "B", "psemAcquire %s 4 10000 %d", name, RS_LEASE_MS);
  t0 = rs_wait_waiting(ch);
  const char *mine[] = {m.ids[0], m.ids[1]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, mine, 2), 2);
  const char *got;
  int64_t c_to_j = rs_java_woke(p, "B", t0, &got);
  cr_assert_neq(strcmp(got, "none"), 0, "Java got no permits after C's release");
  rs_report("permit semaphore: Java release -> C acquire_n %" PRId64 " ms; C release_n -> Java tryAcquire(4) %" PRId64 " ms",
            j_to_c, c_to_j);
  cr_assert_eq(rs_call_num(p, "A", "psemAvailable %s", name), 1);
  cr_assert_eq(rs_call_num(p, "A", "psemPermits %s", name), 5);
  rlock_permit_semaphore_free(s);
  rlock_client_free(c);
  rs_close(p);
}

/* ---- count-down latch ---- */

static int clatch_fn(void *arg) { return rlock_latch_await(arg, 10000); }

Test(sync, latch_both_ways) {
  rs_peer *p = rs_connect();
  rlock_client *c = rs_client(NULL, 0);
  char name[96], ch[256];
  rs_name(name, sizeof name, "latch");
  snprintf(ch, sizeof ch, "redisson_countdownlatch__channel__{%s}", name);
  rlock_latch *l;
  cr_assert_eq(rlock_latch_new(c, name, &l), 0);

  /* C sets 2; Java awaits; one count-down each side, C's last opens Java */
  cr_assert_eq(rlock_latch_try_set_count(l, 2), 1);
  cr_assert_eq(rs_call_num(p, "A", "latchCount %s", name), 2);
  cr_assert_not(rs_call_bool(p, "A", "latchAwait %s 100", name));
  rs_send(p, "A", "latchAwait %s 10000", name);
  rs_wait_waiting(ch);
  rs_call(p, "B", "latchDown %s", name);
  cr_assert_eq(rlock_latch_count(l), 1);
  cr_assert_not(rs_has_answer(p, "A", 100), "Java's await opened at count 1");
  int64_t t0 = rs_now_ms();
  cr_assert_eq(rlock_latch_count_down(l), 0);
  const char *woke;
  int64_t c_to_j = rs_java_woke(p, "A", t0, &woke);
  cr_assert_str_eq(woke, "true");

  /* Java sets 2; C awaits; Java's last count-down opens C */
  cr_assert(rs_call_bool(p, "A", "latchSet %s 2", name));
  cr_assert_eq(rlock_latch_count(l), 2);
  rs_task t;
  rs_task_start(&t, clatch_fn, l);
  rs_wait_waiting(ch);
  cr_assert_eq(rlock_latch_count_down(l), 0);
  rs_sleep_ms(100);
  cr_assert_not(rs_task_done(&t), "C's await opened at count 1");
  t0 = rs_now_ms();
  rs_call(p, "B", "latchDown %s", name);
  int64_t j_to_c = rs_c_woke(&t, t0, 1);
  rs_report("latch: C count-down -> Java await %" PRId64 " ms; Java count-down -> C await %" PRId64 " ms",
            c_to_j, j_to_c);
  cr_assert_eq(rs_call_num(p, "A", "latchCount %s", name), 0);
  rlock_latch_free(l);
  rlock_client_free(c);
  rs_close(p);
}
