/* Introspection (rlock_client_info) and administration
 * (rlock_client_force_unlock, rlock_force_unlock_holder) against a real
 * redis-server: each kind's keys read back exactly as the test made them,
 * and the bad input of issue 25 - other data types, missing names, hashes
 * with foreign fields, a smaller struct_size - answered clearly, with
 * nothing changed. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

TestSuite(info, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

/* rlock_client_info asserting success. */
static void get(rlock_client *c, const char *name, rlock_info *info) {
  rlock_info_init(info);
  int rc = rlock_client_info(c, name, info);
  cr_assert_eq(rc, 0, "rlock_client_info(%s): %s (%s)", name,
               rlock_err_name(rc), rlock_last_error());
}

static void owner_of(char *buf, size_t n, rlock_client *c, uint64_t id) {
  rt_owner(buf, n, c, id);
}

/* ---- an async waiter, to be seen in the queue and as a subscriber ---- */

typedef struct waiter {
  atomic_int status; /* 2: pending */
  rlock_req *req;
} waiter;

static void waiter_cb(int status, int64_t value, void *data) {
  (void)value;
  atomic_store(&((waiter *)data)->status, status);
}

static void wait_start(waiter *w, rlock *lock, uint64_t owner,
                       int64_t wait_ms) {
  atomic_init(&w->status, 2);
  int rc = rlock_lock_async(lock, owner, wait_ms, -1, waiter_cb, w, &w->req);
  cr_assert_eq(rc, 0, "rlock_lock_async: %s", rlock_err_name(rc));
}

static bool waiter_done(void *arg) {
  return atomic_load(&((waiter *)arg)->status) != 2;
}

typedef struct numsub_arg {
  const char *channel;
  long long n;
} numsub_arg;

static bool numsub_is(void *arg) {
  numsub_arg *a = arg;
  return rt_numsub(a->channel) == a->n;
}

typedef struct llen_arg {
  const char *key;
  long long n;
} llen_arg;

static bool llen_is(void *arg) {
  llen_arg *a = arg;
  return rt_int("LLEN %s", a->key) == a->n;
}

/* ---- missing names and plain locks ---- */

Test(info, missing_name_is_an_empty_answer) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:none");
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_NONE);
  cr_assert_str_eq(info.type, "none");
  cr_assert_eq(info.ttl_ms, -2);
  cr_assert_eq(info.locked, 0);
  cr_assert_eq(info.holders_n, 0);
  cr_assert_eq(info.holders_total, 0);
  cr_assert_null(info.holders);
  cr_assert_null(info.mode);
  cr_assert_eq(info.queue_total, 0);
  cr_assert_eq(info.permits_total, 0);
  cr_assert_eq(info.token, -1);
  cr_assert_eq(info.count, -1);
  cr_assert_eq(info.waiters, 0);
  cr_assert(info.server_ms > 1700000000000LL, "server clock %" PRId64,
            info.server_ms);
  rlock_info_free(&info);
  cr_assert_null(info.mem_);
  rlock_info_free(&info); /* twice is fine */
  cr_assert_eq(rt_exists(key), 0, "the read created a key");
  rlock_client_free(c);
}

Test(info, lock_holder_count_ttl_and_waiters) {
  rlock_client *c = rt_client(), *c2 = rt_client();
  char key[64], channel[128], owner[96];
  rt_key(key, sizeof key, "info:lock");
  rt_lock_channel(channel, sizeof channel, key);
  rlock *lock = rt_lock(c, key);
  uint64_t me = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(lock, me, 20000), 0);
  cr_assert_eq(rlock_lock_owner(lock, me, 20000), 0); /* count 2 */
  rlock *lock2 = rt_lock(c2, key);
  waiter w;
  wait_start(&w, lock2, rlock_owner_new(), 60000);
  numsub_arg na = {channel, 1};
  rt_wait_until_what(numsub_is, &na, 5000, "the waiter subscribed");

  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_LOCK);
  cr_assert_str_eq(info.type, "hash");
  cr_assert_eq(info.locked, 1);
  cr_assert(info.ttl_ms > 15000 && info.ttl_ms <= 20000, "ttl %" PRId64,
            info.ttl_ms);
  cr_assert_eq(info.waiters, 1);
  cr_assert_eq(info.holders_n, 1);
  cr_assert_eq(info.holders_total, 1);
  owner_of(owner, sizeof owner, c, me);
  cr_assert_str_eq(info.holders[0].key, owner);
  cr_assert_eq(info.holders[0].key_len, strlen(owner));
  cr_assert_eq(info.holders[0].count, 2);
  cr_assert_str_eq(info.holders[0].value, "2");
  cr_assert_eq(info.holders[0].writer, 0);
  cr_assert_null(info.mode);
  cr_assert_eq(info.token, -1);
  cr_assert_eq(info.queue_total, 0);
  rlock_info_free(&info);

  cr_assert_eq(rlock_unlock_owner(lock, me), 0);
  cr_assert_eq(rlock_unlock_owner(lock, me), 0);
  rt_wait_until_what(waiter_done, &w, 5000, "the waiter acquired");
  cr_assert_eq(atomic_load(&w.status), 1);
  rlock_req_free(w.req);
  rlock_free(lock);
  rlock_free(lock2);
  rlock_client_free(c2);
  rlock_client_free(c);
}

/* The spin lock keeps RLock's hash: the same answer (documented). */
Test(info, spin_lock_reads_as_a_lock) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:spin");
  rlock *spin = NULL;
  cr_assert_eq(rlock_new_spin(c, key, &spin), 0);
  cr_assert_eq(rlock_lock(spin, 10000), 0);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_LOCK);
  cr_assert_eq(info.holders_n, 1);
  cr_assert_eq(info.holders[0].count, 1);
  rlock_info_free(&info);
  cr_assert_eq(rlock_unlock(spin), 0);
  rlock_free(spin);
  rlock_client_free(c);
}

/* ---- the fair lock's queue ---- */

Test(info, fair_queue_in_order_with_deadlines) {
  rlock_client *c = rt_client(), *c2 = rt_client();
  char key[64], queue[128], owner[96];
  rt_key(key, sizeof key, "info:fair");
  snprintf(queue, sizeof queue, "redisson_lock_queue:{%s}", key);
  rlock *fair = NULL, *fair2 = NULL;
  cr_assert_eq(rlock_new_fair(c, key, &fair), 0);
  cr_assert_eq(rlock_new_fair(c2, key, &fair2), 0);
  uint64_t holder = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(fair, holder, 30000), 0);
  uint64_t first = rlock_owner_new(), second = rlock_owner_new();
  waiter w1, w2;
  wait_start(&w1, fair2, first, 60000);
  llen_arg la = {queue, 1};
  rt_wait_until_what(llen_is, &la, 5000, "first waiter queued");
  wait_start(&w2, fair2, second, 60000);
  la.n = 2;
  rt_wait_until_what(llen_is, &la, 5000, "second waiter queued");

  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FAIR);
  cr_assert_eq(info.locked, 1);
  cr_assert_eq(info.holders_n, 1);
  owner_of(owner, sizeof owner, c, holder);
  cr_assert_str_eq(info.holders[0].key, owner);
  cr_assert_eq(info.queue_total, 2);
  cr_assert_eq(info.queue_n, 2);
  owner_of(owner, sizeof owner, c2, first);
  cr_assert_str_eq(info.queue[0].key, owner);
  owner_of(owner, sizeof owner, c2, second);
  cr_assert_str_eq(info.queue[1].key, owner);
  /* deadlines: the holder's TTL + the announced wait, then one more wait */
  cr_assert(info.queue[0].ttl_ms > 60000 && info.queue[0].ttl_ms <= 91000,
            "first deadline in %" PRId64 " ms", info.queue[0].ttl_ms);
  cr_assert(info.queue[1].ttl_ms > info.queue[0].ttl_ms,
            "second deadline %" PRId64 " not after the first's %" PRId64,
            info.queue[1].ttl_ms, info.queue[0].ttl_ms);
  rlock_info_free(&info);

  cr_assert_eq(rlock_unlock_owner(fair, holder), 0);
  rt_wait_until_what(waiter_done, &w1, 5000, "first waiter acquired");
  cr_assert_eq(rlock_unlock_owner(fair2, first), 0);
  rt_wait_until_what(waiter_done, &w2, 5000, "second waiter acquired");
  cr_assert_eq(rlock_unlock_owner(fair2, second), 0);
  rlock_req_free(w1.req);
  rlock_req_free(w2.req);
  rlock_free(fair);
  rlock_free(fair2);
  rlock_client_free(c2);
  rlock_client_free(c);
}

/* ---- read/write, fenced ---- */

Test(info, read_write_lock_mode_readers_and_writer) {
  rlock_client *c = rt_client();
  char key[64], owner[96];
  rt_key(key, sizeof key, "info:rw");
  rlock *rd = NULL, *wr = NULL;
  cr_assert_eq(rlock_new_read(c, key, &rd), 0);
  cr_assert_eq(rlock_new_write(c, key, &wr), 0);
  uint64_t a = rlock_owner_new(), b = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(rd, a, 20000), 0);
  cr_assert_eq(rlock_lock_owner(rd, b, 20000), 0);
  cr_assert_eq(rlock_lock_owner(rd, b, 20000), 0);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_RWLOCK);
  cr_assert_str_eq(info.mode, "read");
  cr_assert_eq(info.locked, 1);
  cr_assert_eq(info.holders_n, 2, "the mode field is not a holder");
  cr_assert_eq(info.holders_total, 2);
  for (size_t i = 0; i < 2; i++) {
    const rlock_info_entry *h = &info.holders[i];
    char want_a[96], want_b[96];
    owner_of(want_a, sizeof want_a, c, a);
    owner_of(want_b, sizeof want_b, c, b);
    cr_assert_eq(h->writer, 0);
    if (strcmp(h->key, want_a) == 0)
      cr_assert_eq(h->count, 1);
    else if (strcmp(h->key, want_b) == 0)
      cr_assert_eq(h->count, 2);
    else
      cr_assert_fail("unexpected holder %s", h->key);
  }
  rlock_info_free(&info);
  cr_assert_eq(rlock_unlock_owner(rd, a), 0);
  cr_assert_eq(rlock_unlock_owner(rd, b), 0);
  cr_assert_eq(rlock_unlock_owner(rd, b), 0);

  uint64_t w = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(wr, w, 20000), 0);
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_RWLOCK);
  cr_assert_str_eq(info.mode, "write");
  cr_assert_eq(info.holders_n, 1);
  owner_of(owner, sizeof owner, c, w);
  strcat(owner, ":write");
  cr_assert_str_eq(info.holders[0].key, owner);
  cr_assert_eq(info.holders[0].writer, 1);
  cr_assert_eq(info.holders[0].count, 1);
  rlock_info_free(&info);
  cr_assert_eq(rlock_unlock_owner(wr, w), 0);
  rlock_free(rd);
  rlock_free(wr);
  rlock_client_free(c);
}

Test(info, fenced_token_held_and_not) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:fenced");
  rlock *f = NULL;
  cr_assert_eq(rlock_new_fenced(c, key, &f), 0);
  int64_t token = 0;
  cr_assert_eq(rlock_lock_fenced(f, 20000, &token), 0);
  int64_t first = token;
  cr_assert_eq(rlock_lock_fenced(f, 20000, &token), 0);
  cr_assert_gt(token, first);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FENCED);
  cr_assert_eq(info.locked, 1);
  cr_assert_eq(info.token, token);
  cr_assert_eq(info.holders_n, 1);
  cr_assert_eq(info.holders[0].count, 2);
  rlock_info_free(&info);
  cr_assert_eq(rlock_unlock(f), 0);
  cr_assert_eq(rlock_unlock(f), 0);
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FENCED, "the token outlives the lock");
  cr_assert_str_eq(info.type, "none");
  cr_assert_eq(info.locked, 0);
  cr_assert_eq(info.token, token);
  rlock_info_free(&info);
  rlock_free(f);
  rlock_client_free(c);
}

/* ---- semaphores and latches ---- */

Test(info, semaphore_and_latch_counts) {
  rlock_client *c = rt_client();
  char skey[64], lkey[64];
  rt_key(skey, sizeof skey, "info:sem");
  rt_key(lkey, sizeof lkey, "info:latch");
  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c, skey, &sem), 0);
  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 5, 0), 1);
  cr_assert_eq(rlock_semaphore_try_acquire(sem, 2, 0), 1);
  rlock_info info;
  get(c, skey, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_COUNT);
  cr_assert_str_eq(info.type, "string");
  cr_assert_eq(info.count, 3);
  cr_assert_eq(info.ttl_ms, -1);
  cr_assert_eq(info.locked, 0);
  rlock_info_free(&info);

  rlock_latch *latch = NULL;
  cr_assert_eq(rlock_latch_new(c, lkey, &latch), 0);
  cr_assert_eq(rlock_latch_try_set_count(latch, 4), 1);
  cr_assert_eq(rlock_latch_count_down(latch), 0);
  get(c, lkey, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_COUNT);
  cr_assert_eq(info.count, 3);
  rlock_info_free(&info);
  rlock_semaphore_free(sem);
  rlock_latch_free(latch);
  rlock_client_free(c);
}

Test(info, permit_semaphore_ids_and_leases) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:psem");
  rlock_permit_semaphore *ps = NULL;
  cr_assert_eq(rlock_permit_semaphore_new(c, key, &ps), 0);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(ps, 3), 1);
  char leased[RLOCK_PERMIT_ID_LEN + 1], forever[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(ps, 0, 10000, leased), 1);
  cr_assert_eq(rlock_permit_semaphore_try_acquire(ps, 0, -1, forever), 1);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_PERMIT_SEMAPHORE);
  cr_assert_eq(info.count, 1);
  cr_assert_eq(info.permits_total, 2);
  cr_assert_eq(info.permits_n, 2);
  /* soonest expiry first: the leased one, then the one without lease */
  cr_assert_str_eq(info.permits[0].key, leased);
  cr_assert_eq(info.permits[0].key_len, RLOCK_PERMIT_ID_LEN);
  cr_assert(info.permits[0].ttl_ms > 5000 && info.permits[0].ttl_ms <= 10000,
            "lease left %" PRId64, info.permits[0].ttl_ms);
  cr_assert_str_eq(info.permits[1].key, forever);
  cr_assert_eq(info.permits[1].ttl_ms, RLOCK_INFO_NO_EXPIRY);
  rlock_info_free(&info);
  cr_assert_eq(rlock_permit_semaphore_release(ps, leased), 0);
  cr_assert_eq(rlock_permit_semaphore_release(ps, forever), 0);
  rlock_permit_semaphore_free(ps);
  rlock_client_free(c);
}

/* ---- bad input (issue 25) ---- */

Test(info, other_data_types_are_foreign_and_untouched) {
  rlock_client *c = rt_client();
  char skey[64], lkey[64], zkey[64];
  rt_key(skey, sizeof skey, "info:str");
  rt_key(lkey, sizeof lkey, "info:list");
  rt_key(zkey, sizeof zkey, "info:zset");
  rt_ok("OK", "SET %s hello PX 600000", skey);
  cr_assert_eq(rt_int("RPUSH %s a b c", lkey), 3);
  cr_assert_eq(rt_int("ZADD %s 1 m", zkey), 1);
  rlock_info info;
  get(c, skey, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FOREIGN);
  cr_assert_str_eq(info.type, "string");
  cr_assert_eq(info.count, -1);
  cr_assert(info.ttl_ms > 500000, "ttl %" PRId64, info.ttl_ms);
  rlock_info_free(&info);
  get(c, lkey, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FOREIGN);
  cr_assert_str_eq(info.type, "list");
  cr_assert_eq(info.holders_n, 0);
  rlock_info_free(&info);
  get(c, zkey, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FOREIGN);
  cr_assert_str_eq(info.type, "zset");
  rlock_info_free(&info);
  char *v = rt_str("GET %s", skey);
  cr_assert_str_eq(v, "hello");
  free(v);
  cr_assert_eq(rt_int("LLEN %s", lkey), 3);
  rlock_client_free(c);
}

Test(info, hash_with_foreign_fields_is_foreign) {
  rlock_client *c = rt_client();
  char key[64], mkey[64];
  rt_key(key, sizeof key, "info:user");
  rt_key(mkey, sizeof mkey, "info:mode");
  cr_assert_eq(rt_int("HSET %s name bob visits 3", key), 2);
  cr_assert_eq(rt_int("HSET %s mode banana someone:1 1", mkey), 2);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FOREIGN);
  cr_assert_str_eq(info.type, "hash");
  cr_assert_eq(info.locked, 0);
  cr_assert_eq(info.holders_n, 2);
  bool seen_name = false, seen_visits = false;
  for (size_t i = 0; i < 2; i++) {
    const rlock_info_entry *h = &info.holders[i];
    if (strcmp(h->key, "name") == 0) {
      seen_name = true;
      cr_assert_eq(h->count, RLOCK_INFO_NOT_A_COUNT);
      cr_assert_str_eq(h->value, "bob");
    } else if (strcmp(h->key, "visits") == 0) {
      seen_visits = true;
      cr_assert_eq(h->count, 3);
    }
  }
  cr_assert(seen_name && seen_visits);
  rlock_info_free(&info);
  get(c, mkey, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FOREIGN, "a mode no lock writes");
  cr_assert_str_eq(info.mode, "banana");
  cr_assert_eq(info.holders_n, 1);
  rlock_info_free(&info);
  cr_assert_eq(rt_hlen(key), 2);
  rlock_client_free(c);
}

/* The keys beside the name holding other types (someone's data under a
 * queue's or token's name) are ignored, never an error. */
Test(info, foreign_values_under_the_side_keys_are_ignored) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:side");
  rt_ok("OK", "SET redisson_lock_queue:{%s} x", key);
  cr_assert_eq(rt_int("RPUSH redisson_lock_token:{%s} 7", key), 1);
  rt_ok("OK", "SET {%s}:timeout y", key);
  cr_assert_eq(rt_int("HSET %s someone:1 1", key), 1);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_LOCK);
  cr_assert_eq(info.locked, 1);
  cr_assert_eq(info.ttl_ms, -1);
  cr_assert_eq(info.queue_total, 0);
  cr_assert_eq(info.token, -1);
  cr_assert_eq(info.permits_total, 0);
  rlock_info_free(&info);
  rlock_client_free(c);
}

Test(info, long_lists_are_cut_with_their_total) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:big");
  for (int i = 0; i < 1500; i++)
    cr_assert_eq(rt_int("HSET %s owner:%d %d", key, i, i + 1), 1);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_LOCK);
  cr_assert_eq(info.holders_total, 1500);
  cr_assert_eq(info.holders_n, RLOCK_INFO_MAX_ENTRIES);
  for (size_t i = 0; i < info.holders_n; i++) {
    int j = atoi(info.holders[i].key + strlen("owner:"));
    cr_assert_eq(info.holders[i].count, j + 1, "%s", info.holders[i].key);
  }
  rlock_info_free(&info);
  rlock_client_free(c);
}

Test(info, smaller_struct_size_is_filled_only_as_far_as_it_reaches) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:size");
  rlock *lock = rt_lock(c, key);
  cr_assert_eq(rlock_lock(lock, 20000), 0);
  /* an older header's struct: ending before `holders` */
  size_t old = offsetof(rlock_info, holders);
  unsigned char raw[sizeof(rlock_info)];
  memset(raw, 0xAB, sizeof raw);
  rlock_info *info = (rlock_info *)(void *)raw;
  rlock_info_init_size(info, old);
  for (size_t i = old; i < sizeof raw; i++)
    cr_assert_eq(raw[i], 0xAB, "init wrote byte %zu", i);
  memset(raw + old, 0xAB, sizeof raw - old);
  cr_assert_eq(rlock_client_info(c, key, info), 0, "%s", rlock_last_error());
  cr_assert_eq(info->struct_size, old);
  cr_assert_eq(info->kind, RLOCK_INFO_LOCK);
  cr_assert_eq(info->locked, 1);
  cr_assert(info->ttl_ms > 15000 && info->ttl_ms <= 20000);
  for (size_t i = old; i < sizeof raw; i++)
    cr_assert_eq(raw[i], 0xAB, "byte %zu past struct_size written", i);
  rlock_info_free(info);
  for (size_t i = old; i < sizeof raw; i++)
    cr_assert_eq(raw[i], 0xAB, "free wrote byte %zu", i);
  cr_assert_null(info->mem_);

  /* not initialised, or a newer header's */
  rlock_info bad;
  memset(&bad, 0, sizeof bad);
  cr_assert_eq(rlock_client_info(c, key, &bad), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "struct_size") != NULL);
  bad.struct_size = sizeof bad + 8;
  cr_assert_eq(rlock_client_info(c, key, &bad), RLOCK_EINVAL);
  rlock_info_init(&bad);
  cr_assert_eq(rlock_client_info(c, "", &bad), RLOCK_EINVAL);
  cr_assert_eq(rlock_client_info(NULL, key, &bad), RLOCK_EINVAL);
  cr_assert_eq(rlock_client_info(c, key, NULL), RLOCK_EINVAL);
  cr_assert_null(bad.mem_);
  cr_assert_eq(rlock_unlock(lock), 0);
  rlock_free(lock);
  rlock_client_free(c);
}

/* ---- blocking rules ---- */

typedef struct loop_call {
  rlock_client *c;
  const char *key;
  atomic_int rc; /* 1: not yet */
} loop_call;

static void on_loop(int status, int64_t value, void *data) {
  (void)status;
  (void)value;
  loop_call *l = data;
  rlock_info info;
  rlock_info_init(&info);
  atomic_store(&l->rc, rlock_client_info(l->c, l->key, &info));
}

static bool loop_called(void *arg) {
  return atomic_load(&((loop_call *)arg)->rc) != 1;
}

Test(info, on_the_loop_thread_is_edeadlk) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:loop");
  rlock *lock = rt_lock(c, key);
  loop_call l = {c, key, 1};
  cr_assert_eq(rlock_is_locked_async(lock, on_loop, &l, NULL), 0);
  rt_wait_until_what(loop_called, &l, 5000, "callback ran");
  cr_assert_eq(atomic_load(&l.rc), RLOCK_EDEADLK);
  rlock_free(lock);
  rlock_client_free(c);
}

Test(info, closed_client_is_eclosed) {
  rlock_client *c = rt_client();
  rlock_info info;
  rlock_info_init(&info);
  /* a handle keeps the client's memory after close */
  rlock *keep = rt_lock(c, "info:closed");
  rlock_client_free(c);
  int rc = rlock_client_info(c, "info:closed", &info);
  cr_assert(rc == RLOCK_ECLOSED, "%s", rlock_err_name(rc));
  rlock_free(keep);
}

/* ---- kind-aware force unlock ---- */

Test(info, force_unlock_refuses_non_hash_values_and_leaves_them) {
  rlock_client *c = rt_client();
  char skey[64], lkey[64], none[64];
  rt_key(skey, sizeof skey, "info:f-str");
  rt_key(lkey, sizeof lkey, "info:f-list");
  rt_key(none, sizeof none, "info:f-none");
  rt_ok("OK", "SET %s 5 PX 600000", skey); /* a semaphore's count, say */
  cr_assert_eq(rt_int("RPUSH %s a", lkey), 1);
  rlock_info found;
  rlock_info_init(&found);
  cr_assert_eq(rlock_client_force_unlock(c, skey, NULL, &found),
               RLOCK_EWRONGTYPE);
  cr_assert_str_eq(rlock_last_error(), "not a lock (Redis type string)");
  cr_assert_eq(found.kind, RLOCK_INFO_COUNT);
  rlock_info_free(&found);
  cr_assert_eq(rlock_client_force_unlock(c, lkey, "write", NULL),
               RLOCK_EWRONGTYPE);
  cr_assert_str_eq(rlock_last_error(), "not a lock (Redis type list)");
  char *v = rt_str("GET %s", skey);
  cr_assert_str_eq(v, "5");
  free(v);
  cr_assert(rt_pttl(skey) > 500000);
  cr_assert_eq(rt_int("LLEN %s", lkey), 1);
  rlock_info_init(&found);
  cr_assert_eq(rlock_client_force_unlock(c, none, NULL, &found), 0);
  cr_assert_str_eq(found.type, "none");
  rlock_info_free(&found);
  cr_assert_eq(rlock_client_force_unlock(c, none, "mutex", NULL),
               RLOCK_EINVAL);
  /* the kinds it takes, from the registry (RLOCK_KIND_MAP) */
  cr_assert(strstr(rlock_last_error(), "(one of: lock fair read write fenced "
                                       "spin nonreentrant nonreentrant_fair)") !=
                NULL,
            "%s", rlock_last_error());
  rlock_client_free(c);
}

/* No kind given: a read/write lock is released as one, so a reader
 * waiting on the read/write channel wakes at once (RLock's force unlock
 * would publish on the lock channel, and the reader would sleep on until
 * the deleted lock's TTL ran out). */
Test(info, force_unlock_without_kind_wakes_a_read_write_waiter) {
  rlock_client *c = rt_client(), *c2 = rt_client();
  char key[64], rw_channel[128];
  rt_key(key, sizeof key, "info:f-rw");
  snprintf(rw_channel, sizeof rw_channel, "redisson_rwlock:{%s}", key);
  rlock *wr = NULL, *rd = NULL;
  cr_assert_eq(rlock_new_write(c, key, &wr), 0);
  cr_assert_eq(rlock_new_read(c2, key, &rd), 0);
  uint64_t w = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(wr, w, 30000), 0);
  waiter r;
  wait_start(&r, rd, rlock_owner_new(), 60000);
  numsub_arg na = {rw_channel, 1};
  rt_wait_until_what(numsub_is, &na, 5000, "the reader subscribed");
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_client_force_unlock(c, key, NULL, NULL), 1);
  rt_wait_until_what(waiter_done, &r, 5000, "the reader woke");
  cr_assert_eq(atomic_load(&r.status), 1);
  cr_assert(rt_now_ms() - t0 < 2000, "reader took %" PRId64 " ms",
            rt_now_ms() - t0);
  cr_assert_eq(rlock_unlock_owner(wr, w), RLOCK_ELOCKLOST);
  rlock_req_free(r.req);
  rlock_free(wr);
  rlock_free(rd);
  rlock_client_free(c2);
  rlock_client_free(c);
}

Test(info, force_unlock_with_a_mode_releases_only_in_that_mode) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "info:f-mode");
  rlock *rd = NULL;
  cr_assert_eq(rlock_new_read(c, key, &rd), 0);
  cr_assert_eq(rlock_lock(rd, 30000), 0);
  rlock_info found;
  rlock_info_init(&found);
  cr_assert_eq(rlock_client_force_unlock(c, key, "write", &found), 0);
  cr_assert_eq(found.kind, RLOCK_INFO_RWLOCK);
  rlock_info_free(&found);
  cr_assert_eq(rt_exists(key), 1);
  cr_assert_eq(rlock_client_force_unlock(c, key, "read", NULL), 1);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(rd);
  rlock_client_free(c);
}

/* ---- a gone client's holds ---- */

Test(info, force_unlock_owner_releases_only_that_owner) {
  rlock_client *gone = rt_client(), *c = rt_client();
  char key[64], wkey[64], owner[96], channel[128];
  rt_key(key, sizeof key, "info:orphan");
  rt_key(wkey, sizeof wkey, "info:orphan-w");
  rt_lock_channel(channel, sizeof channel, key);
  rlock *held = rt_lock(gone, key);
  uint64_t id = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(held, id, 60000), 0);
  owner_of(owner, sizeof owner, gone, id);
  rlock *w = NULL;
  cr_assert_eq(rlock_new_write(gone, wkey, &w), 0);
  cr_assert_eq(rlock_lock_owner(w, id, 60000), 0);
  rlock_free(held);
  rlock_free(w);
  rlock_client_free(gone); /* the holds stay until their lease ends */
  cr_assert_eq(rt_exists(key), 1);

  rlock *lock = rt_lock(c, key);
  /* someone else: nothing happens */
  cr_assert_eq(rlock_force_unlock_holder(lock, "other-uuid:1"), 0);
  cr_assert_eq(rt_exists(key), 1);
  redisContext *sub = rt_redis_new(3000);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel);
  cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  cr_assert_eq(rlock_force_unlock_holder(lock, owner), 1);
  cr_assert_eq(rt_exists(key), 0);
  void *msg = NULL;
  cr_assert_eq(redisGetReply(sub, &msg), REDIS_OK, "no release message");
  r = msg;
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            strcmp(r->element[2]->str, "0") == 0);
  freeReplyObject(r);
  redisFree(sub);
  cr_assert_eq(rlock_force_unlock_holder(lock, owner), 0);

  /* the write lock: the owner without ":write" */
  rlock *wl = NULL;
  cr_assert_eq(rlock_new_write(c, wkey, &wl), 0);
  cr_assert_eq(rlock_force_unlock_holder(wl, owner), 1);
  cr_assert_eq(rt_exists(wkey), 0);
  rlock_free(wl);

  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c, key, &sem), 0);
  cr_assert_eq(rlock_force_unlock_holder((rlock *)sem, owner), RLOCK_EINVAL);
  rlock_semaphore_free(sem);
  cr_assert_eq(rlock_force_unlock_holder(lock, ""), RLOCK_EINVAL);
  rlock_free(lock);
  rlock_client_free(c);
}

/* An ACL user who may not run one of the reads: a clear RLOCK_ENOPERM with
 * the server's words, nothing left behind. */
Test(info, a_user_without_pubsub_gets_enoperm) {
  char key[64], uri[128];
  rt_key(key, sizeof key, "info:acl");
  rt_ok("OK", "ACL SETUSER nopubsub on >pw ~* &* +@all -pubsub");
  snprintf(uri, sizeof uri, "redis://nopubsub:pw@127.0.0.1:%d", rt_port());
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  rlock_client *c = NULL;
  cr_assert_eq(rlock_client_new(&c, &o), 0, "%s", rlock_last_error());
  rlock_info info;
  rlock_info_init(&info);
  int rc = rlock_client_info(c, key, &info);
  cr_assert_eq(rc, RLOCK_ENOPERM, "%s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert(strstr(rlock_last_error(), "pubsub") != NULL, "%s",
            rlock_last_error());
  cr_assert_null(info.mem_);
  rlock_info_free(&info);
  cr_assert_eq(rt_exists(key), 0);
  rlock_client_free(c);
}

/* ---- rlock_scan: the names in the keyspace (issue 28, item 5) ---- */

/* Every name a scan of `pattern` returns (COUNT `count`), sorted and
 * joined with ' '; asserts each comes once. */
static char *scan_all(rlock_client *c, const char *pattern, int count) {
  rlock_scan_options o;
  rlock_scan_options_init(&o);
  o.pattern = pattern;
  o.count = count;
  rlock_scan *s = NULL;
  int rc = rlock_scan_new(c, &o, &s);
  cr_assert_eq(rc, 0, "rlock_scan_new: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  char *names[64];
  size_t n = 0;
  const char *name;
  size_t len;
  while ((rc = rlock_scan_next(s, &name, &len)) == 1) {
    cr_assert(n < 64, "too many names");
    cr_assert_eq(strlen(name), len);
    for (size_t i = 0; i < n; i++)
      cr_assert_str_neq(names[i], name, "%s returned twice", name);
    names[n++] = strdup(name);
  }
  cr_assert_eq(rc, 0, "rlock_scan_next: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  rlock_scan_free(s);
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      char *t = names[j];
      names[j] = names[j - 1];
      names[j - 1] = t;
    }
  char *out = calloc(1, 4096);
  for (size_t i = 0; i < n; i++) {
    if (i > 0)
      strcat(out, " ");
    strcat(out, names[i]);
    free(names[i]);
  }
  return out;
}

/* Every kind once under its name, whatever side keys it has: fair queue
 * and deadlines, read-hold leases, a fenced token alone, permit leases,
 * an unlock latch; a count of 2 keys per SCAN makes the names come over
 * many round trips (each still once). */
Test(info, scan_lists_each_kind_once_under_its_name) {
  rlock_client *c = rt_client(), *c2 = rt_client();
  char p[64], n[16][96];
  rt_key(p, sizeof p, "scan");
  const char *suffix[] = {"fair", "fenced", "latch", "lock",
                          "psem", "rw",     "sem",   "str"};
  for (int i = 0; i < 8; i++)
    snprintf(n[i], sizeof n[i], "%s:%s", p, suffix[i]);
  /* fair: a holder and a queued waiter (queue and deadline keys) */
  rlock *fair = NULL, *fair2 = NULL;
  cr_assert_eq(rlock_new_fair(c, n[0], &fair), 0);
  cr_assert_eq(rlock_new_fair(c2, n[0], &fair2), 0);
  uint64_t holder = rlock_owner_new();
  cr_assert_eq(rlock_lock_owner(fair, holder, 30000), 0);
  waiter w;
  wait_start(&w, fair2, rlock_owner_new(), 60000);
  char queue[128];
  snprintf(queue, sizeof queue, "redisson_lock_queue:{%s}", n[0]);
  llen_arg la = {queue, 1};
  rt_wait_until_what(llen_is, &la, 5000, "waiter queued");
  /* fenced: locked and unlocked, so only its token key is left */
  rlock *f = NULL;
  cr_assert_eq(rlock_new_fenced(c, n[1], &f), 0);
  int64_t token;
  cr_assert_eq(rlock_lock_fenced(f, 20000, &token), 0);
  cr_assert_eq(rlock_unlock(f), 0);
  cr_assert_eq(rt_exists(n[1]), 0);
  /* latch, lock, permit semaphore with a leased permit, reader, semaphore */
  rlock_latch *latch = NULL;
  cr_assert_eq(rlock_latch_new(c, n[2], &latch), 0);
  cr_assert_eq(rlock_latch_try_set_count(latch, 2), 1);
  rlock *l = rt_lock(c, n[3]);
  cr_assert_eq(rlock_lock(l, 20000), 0);
  rlock_permit_semaphore *ps = NULL;
  cr_assert_eq(rlock_permit_semaphore_new(c, n[4], &ps), 0);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(ps, 2), 1);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire(ps, 0, 20000, id), 1);
  rlock *rd = NULL;
  cr_assert_eq(rlock_new_read(c, n[5], &rd), 0);
  cr_assert_eq(rlock_lock(rd, 20000), 0);
  rlock_semaphore *sem = NULL;
  cr_assert_eq(rlock_semaphore_new(c, n[6], &sem), 0);
  cr_assert_eq(rlock_semaphore_try_set_permits(sem, 3, 0), 1);
  /* a foreign value: a name like any other here (rlock_client_info tells) */
  rt_ok("OK", "SET %s v", n[7]);
  /* an unlock's request latch left behind for the lock */
  rt_ok("OK", "SET redisson_unlock_latch:{%s}:0123456789abcdef0123456789abcdef"
              " 1 PX 20000", n[3]);
  /* the side keys are there, each a key of its own */
  char pat[96];
  snprintf(pat, sizeof pat, "*%s*", p);
  long long keys = rt_int("EVAL %s 0 %s",
                          "return #redis.call('keys', ARGV[1])", pat);
  cr_assert(keys >= 8 + 6, "%lld keys", keys);

  snprintf(pat, sizeof pat, "%s:*", p);
  char want[1024] = "";
  for (int i = 0; i < 8; i++) {
    strcat(want, i > 0 ? " " : "");
    strcat(want, n[i]);
  }
  char *got = scan_all(c, pat, 2);
  cr_assert_str_eq(got, want);
  free(got);
  got = scan_all(c, pat, 0); /* COUNT 1000 */
  cr_assert_str_eq(got, want);
  free(got);
  /* a pattern every side key matches as well: still the names only */
  snprintf(pat, sizeof pat, "*%s:*", p);
  got = scan_all(c, pat, 5);
  cr_assert_str_eq(got, want);
  free(got);

  cr_assert_eq(rlock_unlock(rd), 0);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rlock_unlock_owner(fair, holder), 0);
  rt_wait_until_what(waiter_done, &w, 5000, "waiter acquired");
  rlock_req_free(w.req);
  rlock_free(rd);
  rlock_free(l);
  rlock_free(f);
  rlock_free(fair);
  rlock_free(fair2);
  rlock_latch_free(latch);
  rlock_semaphore_free(sem);
  rlock_permit_semaphore_free(ps);
  rlock_client_free(c2);
  rlock_client_free(c);
}

/* The pattern is a name's, in MATCH's syntax: a fenced lock known only by
 * its token key matches by its name; a name of another prefix and a key
 * that only looks like a side key (no braces) do not fold. */
Test(info, scan_pattern_matches_names_not_keys) {
  rlock_client *c = rt_client();
  char p[64], name[128];
  rt_key(p, sizeof p, "scanp");
  const char *plain[] = {"a1", "a2", "b1", "a1:timeout"};
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof name, "%s:%s", p, plain[i]);
    rlock *l = rt_lock(c, name);
    cr_assert_eq(rlock_lock(l, 20000), 0);
    rlock_free(l); /* the hold stays (a lease) */
  }
  snprintf(name, sizeof name, "%s:a3", p);
  rt_ok("OK", "SET redisson_lock_token:{%s} 7", name);
  char pat[96], want[512];
  snprintf(pat, sizeof pat, "%s:a*", p);
  snprintf(want, sizeof want, "%s:a1 %s:a1:timeout %s:a2 %s:a3", p, p, p, p);
  char *got = scan_all(c, pat, 3);
  cr_assert_str_eq(got, want);
  free(got);
  snprintf(pat, sizeof pat, "%s:a[12]", p);
  snprintf(want, sizeof want, "%s:a1 %s:a2", p, p);
  got = scan_all(c, pat, 0);
  cr_assert_str_eq(got, want);
  free(got);
  snprintf(pat, sizeof pat, "%s:?1", p);
  snprintf(want, sizeof want, "%s:a1 %s:b1", p, p);
  got = scan_all(c, pat, 0);
  cr_assert_str_eq(got, want);
  free(got);
  snprintf(pat, sizeof pat, "%s:[^a]*", p);
  snprintf(want, sizeof want, "%s:b1", p);
  got = scan_all(c, pat, 0);
  cr_assert_str_eq(got, want);
  free(got);
  snprintf(pat, sizeof pat, "%s:nothing*", p);
  got = scan_all(c, pat, 0);
  cr_assert_str_eq(got, "");
  free(got);
  rlock_client_free(c);
}

Test(info, scan_bad_input_is_einval) {
  rlock_client *c = rt_client();
  rlock_scan *s = (rlock_scan *)1;
  cr_assert_eq(rlock_scan_new(NULL, NULL, &s), RLOCK_EINVAL);
  cr_assert_null(s);
  cr_assert_eq(rlock_scan_new(c, NULL, NULL), RLOCK_EINVAL);
  rlock_scan_options o;
  memset(&o, 0, sizeof o); /* struct_size not set */
  cr_assert_eq(rlock_scan_new(c, &o, &s), RLOCK_EINVAL);
  cr_assert(strstr(rlock_last_error(), "struct_size") != NULL);
  rlock_scan_options_init(&o);
  o.count = -1;
  cr_assert_eq(rlock_scan_new(c, &o, &s), RLOCK_EINVAL);
  o.count = 100001;
  cr_assert_eq(rlock_scan_new(c, &o, &s), RLOCK_EINVAL);
  cr_assert_eq(rlock_scan_next(NULL, NULL, NULL), RLOCK_EINVAL);
  /* an older, smaller options struct (no count): the default COUNT */
  rlock_scan_options_init_size(&o, offsetof(rlock_scan_options, count));
  o.pattern = "no-such-name-*";
  cr_assert_eq(rlock_scan_new(c, &o, &s), 0);
  const char *name = NULL;
  cr_assert_eq(rlock_scan_next(s, &name, NULL), 0);
  cr_assert_null(name);
  rlock_scan_free(s);
  rlock_scan_free(NULL);
  rlock_client_free(c);
}

Test(info, scan_denied_by_the_acl_is_enoperm) {
  rt_ok("OK", "ACL SETUSER noscan on >pw ~* &* +@all -scan");
  rlock_options o;
  rlock_options_init(&o);
  char uri[128];
  snprintf(uri, sizeof uri, "redis://noscan:pw@127.0.0.1:%d", rt_port());
  o.uri = uri;
  rlock_client *c = NULL;
  cr_assert_eq(rlock_client_new(&c, &o), 0);
  rlock_scan *s = NULL;
  cr_assert_eq(rlock_scan_new(c, NULL, &s), 0);
  const char *name;
  int rc = rlock_scan_next(s, &name, NULL);
  cr_assert_eq(rc, RLOCK_ENOPERM, "%s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert(strstr(rlock_last_error(), "SCAN on 127.0.0.1:") != NULL, "%s",
            rlock_last_error());
  rlock_scan_free(s);
  rlock_client_free(c);
}

/* rlock_client_holder: the automatic client name read back with CLIENT LIST
 * (issue 35); a client with its own client_name, a foreign owner and bad
 * owners. */
Test(info, holder_get_finds_the_process_behind_an_owner) {
  rlock_client *c = rt_client();
  rlock *l = rt_lock(c, "info:who");
  cr_assert_eq(rlock_lock(l, -1), 0);
  char owner[96], host[256] = "";
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  cr_assert_eq(gethostname(host, sizeof host - 1), 0);
  rlock_holder h;
  rlock_holder_init(&h);
  cr_assert_eq(rlock_client_holder(c, "info:who", owner, &h), 1, "%s",
               rlock_last_error());
  cr_assert_eq(h.pid, (int64_t)getpid());
  cr_assert_str_eq(h.host, host);
  cr_assert(h.program[0] != '\0' && strchr(h.program, '/') == NULL);
  cr_assert(strncmp(h.addr, "127.0.0.1:", 10) == 0, "addr %s", h.addr);
  cr_assert(h.connected_ms >= 0 && h.connected_ms < 60000);
  /* the same id with another thread: the same process */
  char other[96];
  snprintf(other, sizeof other, "%.*s:999", RLOCK_ID_LEN, owner);
  cr_assert_eq(rlock_client_holder(c, "info:who", other, &h), 1);
  /* a client with its own name is not found by id */
  rlock_options o;
  rlock_options_init(&o);
  o.client_name = "my-own-name";
  rlock_client *named = rt_client_opts(&o);
  char named_owner[96];
  rt_owner(named_owner, sizeof named_owner, named, 1);
  cr_assert_eq(rlock_client_holder(c, "info:who", named_owner, &h), 0);
  cr_assert(strstr(rlock_last_error(), "no connection named") != NULL);
  cr_assert_eq(rlock_client_holder(c, "info:who",
                                "0000aaaa-0000-4000-8000-000000000000:1", &h),
               0);
  /* owners without a uuid client id; h not set up */
  cr_assert_eq(rlock_client_holder(c, "info:who", "java-uuid:61", &h),
               RLOCK_EINVAL);
  cr_assert_eq(rlock_client_holder(c, "info:who",
                                "0000AAAA-0000-4000-8000-00000000000Z:1", &h),
               RLOCK_EINVAL);
  rlock_holder bare;
  memset(&bare, 0, sizeof bare);
  cr_assert_eq(rlock_client_holder(c, "info:who", owner, &bare), RLOCK_EINVAL);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(named);
  rlock_client_free(c);
}

/* An rlock client has two connections with one name (commands and
 * subscriptions), and the server's CLIENT LIST is in no fixed order: Redis
 * rotates its client list as its cron visits clients: every 100 ms, when
 * it has more than 5). rlock_client_holder names the oldest
 * connection - the lowest id - every time, so `rlock status` and `rlock ls`
 * a moment apart describe a holder alike. */
Test(info, holder_get_names_the_oldest_connection_every_time) {
  /* More than 5 clients, or each cron visit turns the list full circle */
  redisContext *extra[6];
  for (int i = 0; i < 6; i++) {
    extra[i] = redisConnect("127.0.0.1", rt_port());
    cr_assert(extra[i] != NULL && extra[i]->err == 0);
  }
  rlock_client *c = rt_client();
  rlock *l = rt_lock(c, "info:who-oldest");
  cr_assert_eq(rlock_lock(l, -1), 0);
  char owner[96], want[64] = "", prefix[64];
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  snprintf(prefix, sizeof prefix, "name=rlock/%.*s/", RLOCK_ID_LEN, owner);
  /* the test's view: the named connections, the one with the lowest id */
  redisReply *r = rt_cmd("CLIENT LIST");
  cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
  long long best = -1;
  int named = 0;
  for (char *line = r->str; line != NULL && *line;) {
    char *eol = strchr(line, '\n');
    if (eol != NULL)
      *eol = '\0';
    if (strstr(line, prefix) != NULL) {
      named++;
      long long id = strtoll(line + 3, NULL, 10);
      char *a = strstr(line, " addr=");
      cr_assert_not_null(a);
      if (best < 0 || id < best) {
        best = id;
        snprintf(want, sizeof want, "%.*s", (int)strcspn(a + 6, " "), a + 6);
      }
    }
    line = eol != NULL ? eol + 1 : NULL;
  }
  freeReplyObject(r);
  cr_assert_eq(named, 2, "the client's connections named %s: %d", prefix,
               named);
  /* 12 reads 60 ms apart: across several turns of the server's list */
  for (int i = 0; i < 12; i++) {
    rlock_holder h;
    rlock_holder_init(&h);
    cr_assert_eq(rlock_client_holder(c, "info:who-oldest", owner, &h), 1, "%s",
                 rlock_last_error());
    cr_assert_str_eq(h.addr, want, "read %d: %s, not the oldest %s", i, h.addr,
                     want);
    rt_sleep_ms(60);
  }
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
  for (int i = 0; i < 6; i++)
    redisFree(extra[i]);
}

/* A FasterMultiLock group's hash is a kind of its own (issue 34 item 4):
 * its fields as holders, none a count; locked while a hold has not ended.
 * A hash with an owner string but no expire_time beside it stays foreign. */
Test(info, fast_multilock_group_is_its_own_kind) {
  rlock_client *c = rt_client();
  char key[64], fake[64];
  rt_key(key, sizeof key, "info:group");
  rt_key(fake, sizeof fake, "info:notgroup");
  const char *values[] = {"a", "b"};
  rlock *fml = NULL;
  cr_assert_eq(rlock_new_fast_multilock(c, key, values, NULL, 2, &fml), 0);
  uint64_t me = rlock_owner_new();
  cr_assert_eq(rlock_try_lock_owner(fml, me, 0, 20000), 1);
  /* a stale field beside them (another owner's expiry): kept as stored */
  char fa[RLOCK_FAST_MULTILOCK_FIELD_LEN + 1], fb[sizeof fa], owner[96];
  cr_assert_eq(rlock_fast_multilock_field_name("a", 1, fa), 0);
  cr_assert_eq(rlock_fast_multilock_field_name("b", 1, fb), 0);
  cr_assert_eq(rt_int("HSET %s %s:gone:7:expire_time 5", key, fa), 1);
  rlock_info info;
  get(c, key, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FAST_MULTILOCK);
  cr_assert_str_eq(info.type, "hash");
  cr_assert_eq(info.locked, 1);
  cr_assert(info.ttl_ms > 0 && info.ttl_ms <= 20000, "ttl %lld",
            (long long)info.ttl_ms);
  /* one hold per value: its owner, its field, count and expiry */
  owner_of(owner, sizeof owner, c, me);
  cr_assert_eq(info.holders_n, 3);
  cr_assert_eq(info.holders_total, 3);
  bool seen_a = false, seen_b = false;
  for (size_t i = 0; i < 2; i++) {
    const rlock_info_entry *h = &info.holders[i];
    cr_assert_str_eq(h->key, owner);
    cr_assert_eq(h->key_len, strlen(owner));
    cr_assert_eq(h->value_len, RLOCK_FAST_MULTILOCK_FIELD_LEN);
    seen_a |= strcmp(h->value, fa) == 0;
    seen_b |= strcmp(h->value, fb) == 0;
    cr_assert_eq(h->count, 1);
    cr_assert(h->ttl_ms > 0 && h->ttl_ms <= 20000, "ttl %lld",
              (long long)h->ttl_ms);
    cr_assert_eq(h->writer, 0);
  }
  cr_assert(seen_a && seen_b, "%s %s", info.holders[0].value,
            info.holders[1].value);
  char stale[128];
  snprintf(stale, sizeof stale, "%s:gone:7:expire_time", fa);
  cr_assert_str_eq(info.holders[2].key, stale);
  cr_assert_str_eq(info.holders[2].value, "5");
  cr_assert_eq(info.holders[2].count, RLOCK_INFO_NOT_A_COUNT);
  rlock_info_free(&info);
  /* held twice: count 2 */
  cr_assert_eq(rlock_try_lock_owner(fml, me, 0, 20000), 1);
  get(c, key, &info);
  cr_assert_eq(info.holders[0].count, 2);
  cr_assert_eq(info.holders[1].count, 2);
  rlock_info_free(&info);
  cr_assert_eq(rlock_unlock_owner(fml, me), 0);
  /* an owner string without its expire_time: not a group */
  cr_assert_eq(rt_int("HSET %s f x:1 f:x:1:lock_count 1", fake), 2);
  get(c, fake, &info);
  cr_assert_eq(info.kind, RLOCK_INFO_FOREIGN);
  rlock_info_free(&info);
  cr_assert_eq(rlock_unlock_owner(fml, me), 0);
  rlock_free(fml);
  rlock_client_free(c);
}
