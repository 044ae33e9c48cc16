/* Kinds on one name (docs/api.md, "Lock kinds"): RLock, fenced, spin and fair
 * locks share RLock's hash and exclude each other; a read/write lock's hash
 * (its "mode" field) is another layout, and a call of another kind on it
 * fails with RLOCK_EKIND, changing nothing. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(mixed, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 60);

typedef int (*get_fn)(rlock_client *, const char *, rlock **);

/* A Java reader's read/write hash, by hand: mode=read, one reader. */
static void java_reader_hash(const char *key) {
  freeReplyObject(rt_cmd("HSET %s mode read java-uuid:61 1", key));
  freeReplyObject(rt_cmd("PEXPIRE %s 20000", key));
}

static void check_untouched(const char *key) {
  cr_assert_eq(rt_hlen(key), 2, "the read/write hash keeps its 2 fields");
  char *m = rt_hget(key, "mode");
  cr_assert_str_eq(m, "read");
  free(m);
  char *r = rt_hget(key, "java-uuid:61");
  cr_assert_str_eq(r, "1");
  free(r);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 15000, "TTL untouched: %lld", pttl);
}

static void kind_on_rw_hash(get_fn get, const char *kind) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, kind);
  java_reader_hash(key);
  rlock *l = NULL;
  cr_assert_eq(get(c, key, &l), 0);
  cr_assert_str_eq(rlock_kind(l), kind);
  int64_t t0 = rt_now_ms();
  int rc = rlock_try_lock(l, 3000, 10000);
  cr_assert_eq(rc, RLOCK_EKIND, "%s on a read/write hash: %s (%s)", kind,
               rlock_err_name(rc), rlock_last_error());
  cr_assert(rt_now_ms() - t0 < 1000, "failed at once, did not wait");
  cr_assert(strstr(rlock_last_error(), "read/write") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(rlock_lock(l, 10000), RLOCK_EKIND);
  check_untouched(key);
  cr_assert_eq(rlock_unlock(l), RLOCK_ENOTOWNER);
  check_untouched(key);
  rlock_free(l);
  rlock_client_free(c);
}

Test(mixed, rlock_on_a_read_write_hash_is_ekind) {
  kind_on_rw_hash(rlock_new, "lock");
}

Test(mixed, fenced_on_a_read_write_hash_is_ekind) {
  kind_on_rw_hash(rlock_new_fenced, "fenced");
}

Test(mixed, spin_on_a_read_write_hash_is_ekind) {
  kind_on_rw_hash(rlock_new_spin, "spin");
}

/* RLock, fenced and spin on one name: whoever holds it, the others wait. */
Test(mixed, rlock_fenced_spin_exclude_each_other) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "mx");
  get_fn gets[3] = {rlock_new, rlock_new_fenced, rlock_new_spin};
  for (int i = 0; i < 3; i++) {
    rlock *holder = NULL;
    cr_assert_eq(gets[i](a, key, &holder), 0);
    cr_assert_eq(rlock_lock(holder, 10000), 0);
    for (int k = 0; k < 3; k++) {
      rlock *other = NULL;
      cr_assert_eq(gets[k](b, key, &other), 0);
      cr_assert_eq(rlock_try_lock(other, 0, 10000), 0, "%s held, %s got it",
                   rlock_kind(holder), rlock_kind(other));
      rlock_free(other);
    }
    cr_assert_eq(rlock_unlock(holder), 0);
    rlock_free(holder);
  }
  rlock_client_free(a);
  rlock_client_free(b);
}

/* A key of another type (a string) is RLOCK_EWRONGTYPE for every kind. */
Test(mixed, wrongtype_for_every_kind) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "mt");
  rt_ok("OK", "SET %s hello", key);
  get_fn gets[3] = {rlock_new, rlock_new_fenced, rlock_new_spin};
  for (int i = 0; i < 3; i++) {
    rlock *l = NULL;
    cr_assert_eq(gets[i](c, key, &l), 0);
    int rc = rlock_try_lock(l, 0, 10000);
    cr_assert_eq(rc, RLOCK_EWRONGTYPE, "%s: %s", rlock_kind(l),
                 rlock_err_name(rc));
    rlock_free(l);
  }
  char *v = rt_str("GET %s", key);
  cr_assert_str_eq(v, "hello");
  free(v);
  rlock_client_free(c);
}

/* The watchdog renews every kind and reports a lost hold of any kind
 * through on_lock_lost (name and owner field: the write lock's ends in
 * ":write"). */
typedef struct lost {
  atomic_int n;
  char name[96];
  char owner[128];
} lost;

static void on_lost(const char *name, const char *owner, void *data) {
  lost *l = data;
  snprintf(l->name, sizeof l->name, "%s", name);
  snprintf(l->owner, sizeof l->owner, "%s", owner);
  atomic_fetch_add(&l->n, 1);
}

static bool lost_seen(void *arg) { return atomic_load(&((lost *)arg)->n) > 0; }

static void watchdog_and_loss(get_fn get, const char *kind,
                              const char *suffix) {
  static lost seen;
  memset(&seen, 0, sizeof seen);
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  o.on_lock_lost = on_lost;
  o.on_lock_lost_data = &seen;
  rlock_client *c = rt_client_opts(&o);
  char key[64], owner[128];
  rt_key(key, sizeof key, kind);
  rlock *l = NULL;
  cr_assert_eq(get(c, key, &l), 0);
  cr_assert_eq(rlock_lock(l, -1), 0);
  rt_sleep_ms(2200);
  cr_assert_eq(rt_exists(key), 1, "%s renewed past two watchdog timeouts",
               kind);
  long long pttl = rt_pttl(key);
  cr_assert(pttl > 0 && pttl <= 900, "%s: TTL %lld", kind, pttl);
  cr_assert_eq(atomic_load(&seen.n), 0);
  freeReplyObject(rt_cmd("DEL %s", key));
  rt_wait_until(lost_seen, &seen, 3000);
  cr_assert_str_eq(seen.name, key);
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  strcat(owner, suffix);
  cr_assert_str_eq(seen.owner, owner);
  cr_assert_eq(rlock_unlock(l), RLOCK_ELOCKLOST);
  rlock_free(l);
  rlock_client_free(c);
}

Test(mixed, watchdog_and_loss_fenced) {
  watchdog_and_loss(rlock_new_fenced, "fenced", "");
}
Test(mixed, watchdog_and_loss_spin) {
  watchdog_and_loss(rlock_new_spin, "spin", "");
}
Test(mixed, watchdog_and_loss_fair) {
  watchdog_and_loss(rlock_new_fair, "fair", "");
}
Test(mixed, watchdog_and_loss_write) {
  watchdog_and_loss(rlock_new_write, "write", ":write");
}
Test(mixed, watchdog_and_loss_read) {
  watchdog_and_loss(rlock_new_read, "read", "");
}
