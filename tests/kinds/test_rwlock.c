/* The read/write lock (rlock_new_read / rlock_new_write; Redisson
 * getReadWriteLock(name).readLock() / .writeLock()): one hash `name` with
 * "mode", each reader's owner -> count and the writer's owner:write ->
 * count; a timeout key {name}:<owner>:rwlock_timeout:<i> per read hold;
 * channel redisson_rwlock:{name}, "0" from a read unlock that frees the
 * lock, "1" from a write unlock (docs/wire-protocol.md, "The read/write
 * lock"). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(rwlock, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 120);

static rlock *rd(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_read(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_read: %s", rlock_err_name(rc));
  cr_assert_str_eq(rlock_kind(l), "read");
  return l;
}

static rlock *wr(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new_write(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new_write: %s", rlock_err_name(rc));
  cr_assert_str_eq(rlock_kind(l), "write");
  return l;
}

/* {name}, or name when it has braces of its own. */
static void tag_of(char *buf, size_t n, const char *name) {
  if (strchr(name, '{') != NULL)
    snprintf(buf, n, "%s", name);
  else
    snprintf(buf, n, "{%s}", name);
}

static void channel_of(char *buf, size_t n, const char *name) {
  char tag[128];
  tag_of(tag, sizeof tag, name);
  snprintf(buf, n, "redisson_rwlock:%s", tag);
}

/* A read hold's timeout key, spelled as Redisson does. */
static void timeout_key(char *buf, size_t n, const char *name,
                        const char *owner, int i) {
  if (strchr(name, '{') != NULL)
    snprintf(buf, n, "%s:%s:rwlock_timeout:%d", name, owner, i);
  else
    snprintf(buf, n, "{%s}:%s:rwlock_timeout:%d", name, owner, i);
}

static void hget_eq(const char *key, const char *field, const char *want) {
  char *v = rt_hget(key, field);
  if (want == NULL) {
    cr_assert_null(v, "%s.%s: expected no field, got %s", key, field, v);
  } else {
    cr_assert_not_null(v, "%s.%s: expected %s, no field", key, field, want);
    cr_assert_str_eq(v, want, "%s.%s", key, field);
  }
  free(v);
}

/* An async acquire's outcome: 1 acquired, 100 + status otherwise. */
typedef struct got {
  atomic_int status;
  _Atomic int64_t at_ms;
} got;

static void got_cb(int status, int64_t value, void *data) {
  (void)value;
  got *g = data;
  atomic_store(&g->at_ms, rt_now_ms());
  atomic_store(&g->status, status == 1 ? 1 : 100 + status);
}

static bool got_done(void *arg) {
  return atomic_load(&((got *)arg)->status) != 0;
}

typedef struct gots {
  got *g;
  int n;
} gots;

static bool all_done(void *arg) {
  gots *s = arg;
  for (int i = 0; i < s->n; i++)
    if (atomic_load(&s->g[i].status) == 0)
      return false;
  return true;
}

/* A plain SUBSCRIBE connection on `chan` (read timeout timeout_ms). */
static redisContext *subscriber(const char *chan, int64_t timeout_ms) {
  redisContext *s = rt_redis_new(timeout_ms);
  cr_assert_not_null(s);
  redisReply *r = redisCommand(s, "SUBSCRIBE %s", chan);
  cr_assert_not_null(r, "SUBSCRIBE %s", chan);
  freeReplyObject(r);
  return s;
}

/* The next message's payload into buf; false when none came in time. */
static bool next_message(redisContext *s, char *buf, size_t n) {
  void *v = NULL;
  if (redisGetReply(s, &v) != REDIS_OK || v == NULL)
    return false;
  redisReply *r = v;
  bool ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[2]->type == REDIS_REPLY_STRING;
  if (ok)
    snprintf(buf, n, "%.*s", (int)r->element[2]->len, r->element[2]->str);
  freeReplyObject(r);
  return ok;
}

/* ---- sharing and exclusion ---- */

typedef struct reader_arg {
  rlock *lock;
  atomic_int *held;
  atomic_int *go;
  atomic_int rc_lock, rc_unlock;
} reader_arg;

static void reader_run(void *p) {
  reader_arg *a = p;
  atomic_store(&a->rc_lock, rlock_try_lock(a->lock, 5000, 60000));
  atomic_fetch_add(a->held, 1);
  for (int i = 0; i < 10000 && atomic_load(a->go) == 0; i++)
    rt_sleep_ms(1);
  atomic_store(&a->rc_unlock, rlock_unlock(a->lock));
}

typedef struct count_at_least {
  atomic_int *n;
  int want;
} count_at_least;

static bool counted(void *arg) {
  count_at_least *c = arg;
  return atomic_load(c->n) >= c->want;
}

/* Three threads on two clients hold the read lock at once; a writer of a
 * third client waits for all of them and gets in on the last read
 * unlock's message ("0"), not by the (60 s) TTL. */
Test(rwlock, readers_share_and_the_writer_waits_for_the_last_one) {
  rlock_client *a = rt_client(), *b = rt_client(), *w = rt_client();
  char key[64], chan[192];
  rt_key(key, sizeof key, "rws");
  channel_of(chan, sizeof chan, key);
  rlock *ra = rd(a, key), *rb = rd(b, key), *lw = wr(w, key);
  atomic_int held = 0, go = 0;
  reader_arg args[3] = {{.lock = ra, .held = &held, .go = &go},
                        {.lock = ra, .held = &held, .go = &go},
                        {.lock = rb, .held = &held, .go = &go}};
  rt_thread t[3];
  for (int i = 0; i < 3; i++)
    rt_thread_start(&t[i], reader_run, &args[i]);
  count_at_least three = {&held, 3};
  rt_wait_until_what(counted, &three, 10000, "three readers in");
  for (int i = 0; i < 3; i++)
    cr_assert_eq(atomic_load(&args[i].rc_lock), 1, "reader %d", i);
  hget_eq(key, "mode", "read");
  cr_assert_eq(rt_hlen(key), 4, "mode + three reader fields");
  cr_assert_eq(rlock_is_locked(ra), 1);
  cr_assert_eq(rlock_is_locked(lw), 0, "not write-locked");
  /* The writer can't get in now, and waits (async). */
  cr_assert_eq(rlock_try_lock(lw, 0, 60000), 0);
  got g = {0};
  uint64_t wowner = rlock_owner_new();
  cr_assert_eq(rlock_lock_async(lw, wowner, 30000, 60000, got_cb, &g, NULL),
               0);
  rt_sleep_ms(300);
  cr_assert_eq(atomic_load(&g.status), 0, "the writer waits for readers");
  cr_assert_eq(rt_numsub(chan), 1, "the writer listens on %s", chan);
  int64_t released = rt_now_ms();
  atomic_store(&go, 1);
  for (int i = 0; i < 3; i++)
    rt_thread_join(&t[i], 10000);
  int released_n = 0;
  for (int i = 0; i < 3; i++) {
    int rc = atomic_load(&args[i].rc_unlock);
    cr_assert(rc == 1, "reader %d unlock: %d", i, rc);
    released_n++;
  }
  cr_assert_eq(released_n, 3);
  rt_wait_until_what(got_done, &g, 5000, "the writer gets in");
  cr_assert_eq(atomic_load(&g.status), 1);
  int64_t took = atomic_load(&g.at_ms) - released;
  cr_assert(took < 2000, "woken by the message, not the TTL: %lld ms",
            (long long)took);
  hget_eq(key, "mode", "write");
  char wfield[160];
  rt_owner(wfield, sizeof wfield, w, wowner);
  strcat(wfield, ":write");
  hget_eq(key, wfield, "1");
  cr_assert_eq(rlock_is_locked(lw), 1);
  cr_assert_eq(rlock_is_locked(ra), 0, "a pure write hold is not read-locked");
  cr_assert_eq(rlock_unlock_owner(lw, wowner), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(ra);
  rlock_free(rb);
  rlock_free(lw);
  rlock_client_free(a);
  rlock_client_free(b);
  rlock_client_free(w);
}

/* ---- re-entry, timeout keys, TTLs ---- */

Test(rwlock, read_reentry_timeout_keys_and_ttl) {
  rlock_client *c = rt_client();
  char key[64], owner[128], k1[256], k2[256], k3[256];
  rt_key(key, sizeof key, "rwr");
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  timeout_key(k1, sizeof k1, key, owner, 1);
  timeout_key(k2, sizeof k2, key, owner, 2);
  timeout_key(k3, sizeof k3, key, owner, 3);
  rlock *l = rd(c, key);
  cr_assert_eq(rlock_try_lock(l, 0, 5000), 1);
  cr_assert_eq(rlock_try_lock(l, 0, 20000), 1, "read re-entry");
  cr_assert_eq(rlock_try_lock(l, 0, 10000), 1, "read re-entry");
  hget_eq(key, "mode", "read");
  hget_eq(key, owner, "3");
  cr_assert_eq(rlock_hold_count(l), 3);
  cr_assert_eq(rlock_is_held(l), 1);
  /* exactly {name}:<owner>:rwlock_timeout:<i>, i = 1..3, each its lease */
  char *v = rt_str("GET %s", k1);
  cr_assert_str_eq(v, "1");
  free(v);
  long long p1 = rt_pttl(k1), p2 = rt_pttl(k2), p3 = rt_pttl(k3);
  cr_assert(p1 > 4000 && p1 <= 5000, "%s: %lld", k1, p1);
  cr_assert(p2 > 19000 && p2 <= 20000, "%s: %lld", k2, p2);
  cr_assert(p3 > 9000 && p3 <= 10000, "%s: %lld", k3, p3);
  long long ph = rt_pttl(key);
  cr_assert(ph > 19000 && ph <= 20000, "the hash lives for the longest: %lld",
            ph);
  int64_t ttl = 0;
  cr_assert_eq(rlock_remain_ttl(l, &ttl), 0);
  cr_assert(ttl > 19000 && ttl <= 20000);
  /* the newest hold's key goes; the hash keeps the longest that is left */
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(k3), 0);
  cr_assert_eq(rt_exists(k2), 1);
  ph = rt_pttl(key);
  cr_assert(ph > 19000 && ph <= 20000, "%lld", ph);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(k2), 0);
  ph = rt_pttl(key);
  cr_assert(ph > 3000 && ph <= 5000, "down to hold 1's key: %lld", ph);
  hget_eq(key, owner, "1");
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rt_exists(k1), 0);
  cr_assert_eq(rlock_unlock(l), RLOCK_ENOTOWNER);
  rlock_free(l);
  rlock_client_free(c);
}

/* A name with its own hash tag keeps it in every derived key. */
Test(rwlock, braced_name_keys_and_channel) {
  rlock_client *c = rt_client();
  char key[64], owner[128], k1[256], chan[192];
  rt_key(key, sizeof key, "rw{t}b");
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  snprintf(k1, sizeof k1, "%s:%s:rwlock_timeout:1", key, owner);
  snprintf(chan, sizeof chan, "redisson_rwlock:%s", key);
  rlock *l = rd(c, key);
  redisContext *s = subscriber(chan, 3000);
  cr_assert_eq(rlock_lock(l, 8000), 0);
  cr_assert_eq(rt_exists(k1), 1, "%s", k1);
  cr_assert_eq(rlock_unlock(l), 0);
  char msg[16] = "";
  cr_assert(next_message(s, msg, sizeof msg), "a message on %s", chan);
  cr_assert_str_eq(msg, "0", "a read unlock publishes 0");
  redisFree(s);
  rlock_free(l);
  rlock_client_free(c);
}

Test(rwlock, write_reentry_ttl_is_additive) {
  rlock_client *c = rt_client();
  char key[64], field[160];
  rt_key(key, sizeof key, "rww");
  rt_owner(field, sizeof field, c, rlock_thread_id());
  strcat(field, ":write");
  rlock *l = wr(c, key);
  cr_assert_eq(rlock_try_lock(l, 0, 5000), 1);
  cr_assert_eq(rlock_try_lock(l, 0, 5000), 1, "write re-entry");
  hget_eq(key, "mode", "write");
  hget_eq(key, field, "2");
  cr_assert_eq(rt_hlen(key), 2);
  long long ph = rt_pttl(key);
  cr_assert(ph > 9000 && ph <= 10000, "PTTL + lease: %lld", ph);
  cr_assert_eq(rlock_hold_count(l), 2);
  cr_assert_eq(rlock_is_held(l), 1);
  cr_assert_eq(rlock_unlock(l), 0);
  ph = rt_pttl(key);
  cr_assert(ph > 4000 && ph <= 5000, "re-applied lease: %lld", ph);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rlock_unlock(l), RLOCK_ENOTOWNER);
  rlock_free(l);
  rlock_client_free(c);
}

/* The writer takes the read lock too; its write unlock then downgrades:
 * mode read, nothing published (the first message seen is the read
 * unlock's "0"). A waiting reader of the same client is let in at the
 * downgrade, long before the hash's TTL. */
Test(rwlock, writer_takes_read_and_downgrades_without_publish) {
  rlock_client *c = rt_client();
  char key[64], chan[192], owner[128], field[160], k1[256];
  rt_key(key, sizeof key, "rwd");
  channel_of(chan, sizeof chan, key);
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  snprintf(field, sizeof field, "%s:write", owner);
  timeout_key(k1, sizeof k1, key, owner, 1);
  rlock *lr = rd(c, key), *lw = wr(c, key);
  cr_assert_eq(rlock_try_lock(lw, 0, 60000), 1);
  cr_assert_eq(rlock_try_lock(lr, 0, 60000), 1, "the writer may read");
  hget_eq(key, "mode", "write");
  hget_eq(key, field, "1");
  hget_eq(key, owner, "1");
  cr_assert_eq(rt_exists(k1), 1);
  cr_assert_eq(rlock_is_locked(lr), 1, "write mode with a reader");
  cr_assert_eq(rlock_is_locked(lw), 1);
  /* another owner of this client waits for the read lock */
  got g = {0};
  uint64_t other = rlock_owner_new();
  cr_assert_eq(rlock_lock_async(lr, other, 20000, 60000, got_cb, &g, NULL),
               0);
  rt_sleep_ms(200);
  cr_assert_eq(atomic_load(&g.status), 0, "a reader waits for the writer");
  redisContext *s = subscriber(chan, 3000);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_unlock(lw), 0, "write unlock releases the write hold");
  hget_eq(key, "mode", "read");
  hget_eq(key, field, NULL);
  hget_eq(key, owner, "1");
  cr_assert_eq(rlock_is_locked(lw), 0);
  cr_assert_eq(rlock_is_locked(lr), 1);
  rt_wait_until_what(got_done, &g, 3000, "the local reader gets in");
  cr_assert_eq(atomic_load(&g.status), 1);
  cr_assert(atomic_load(&g.at_ms) - t0 < 2000);
  cr_assert_eq(rlock_unlock_owner(lr, other), 0);
  cr_assert_eq(rt_exists(key), 1, "the downgraded read hold remains");
  cr_assert_eq(rlock_unlock(lr), 0);
  cr_assert_eq(rt_exists(key), 0);
  char msg[16] = "";
  cr_assert(next_message(s, msg, sizeof msg));
  cr_assert_str_eq(msg, "0", "no \"1\" at the downgrade; the last read "
                              "unlock's \"0\"");
  redisFree(s);
  rlock_free(lr);
  rlock_free(lw);
  rlock_client_free(c);
}

/* No upgrade: a reader asking for the write lock does not get it. */
Test(rwlock, reader_does_not_get_the_write_lock) {
  rlock_client *c = rt_client();
  char key[64];
  rt_key(key, sizeof key, "rwu");
  rlock *lr = rd(c, key), *lw = wr(c, key);
  cr_assert_eq(rlock_try_lock(lr, 0, 10000), 1);
  cr_assert_eq(rlock_try_lock(lw, 0, 10000), 0);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(lw, 300, 10000), 0);
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= 250 && took < 2000, "waited its wait_ms: %lld",
            (long long)took);
  cr_assert_eq(rlock_hold_count(lw), 0);
  cr_assert_eq(rlock_unlock(lw), RLOCK_ENOTOWNER, "no write hold to unlock");
  hget_eq(key, "mode", "read");
  cr_assert_eq(rlock_unlock(lr), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(lr);
  rlock_free(lw);
  rlock_client_free(c);
}

/* ---- renewal ---- */

Test(rwlock, watchdog_renews_the_timeout_keys_and_the_hash) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  rlock_client *c = rt_client_opts(&o);
  char key[64], owner[128], k1[256], k2[256];
  rt_key(key, sizeof key, "rwk");
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  timeout_key(k1, sizeof k1, key, owner, 1);
  timeout_key(k2, sizeof k2, key, owner, 2);
  rlock *l = rd(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  cr_assert_eq(rlock_lock(l, -1), 0);
  long long p1 = rt_pttl(k1);
  cr_assert(p1 > 0 && p1 <= 900, "%lld", p1);
  rt_sleep_ms(50);
  long long before = rt_pttl(k1);
  int64_t until = rt_now_ms() + 1500;
  long long now = before;
  while (rt_now_ms() < until) {
    now = rt_pttl(k1);
    if (now > before)
      break;
    rt_sleep_ms(5);
  }
  cr_assert(now > before, "the watchdog raised %s's PTTL (%lld -> %lld)", k1,
            before, now);
  rt_sleep_ms(2000); /* more than twice the watchdog timeout */
  cr_assert_eq(rt_exists(k1), 1, "%s renewed", k1);
  cr_assert_eq(rt_exists(k2), 1, "%s renewed", k2);
  cr_assert_eq(rt_exists(key), 1, "the hash renewed");
  long long ph = rt_pttl(key), p2 = rt_pttl(k2);
  cr_assert(ph > 0 && ph <= 900, "%lld", ph);
  cr_assert(p2 > 0 && p2 <= 900, "%lld", p2);
  hget_eq(key, owner, "2");
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- a Java reader, by hand ---- */

/* A Java reader's field and timeout key (another owner): our read unlock
 * keeps the hash alive for what is left of the Java hold's key, and our
 * writer waits for it (no message comes: the Java hold runs out). */
Test(rwlock, java_reader_keeps_the_hash_and_the_writer_waits) {
  rlock_client *c = rt_client();
  char key[64], jkey[256], owner[128];
  const char *java = "5b1c6ad4-8a57-4c25-9b1e-0f2a4f1c9d3e:61";
  rt_key(key, sizeof key, "rwj");
  timeout_key(jkey, sizeof jkey, key, java, 1);
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  freeReplyObject(rt_cmd("HSET %s mode read %s 1", key, java));
  rt_ok("OK", "SET %s 1 PX 2500", jkey);
  freeReplyObject(rt_cmd("PEXPIRE %s 2500", key));
  rlock *lr = rd(c, key), *lw = wr(c, key);
  cr_assert_eq(rlock_try_lock(lr, 0, 30000), 1, "readers share with Java's");
  long long ph = rt_pttl(key);
  cr_assert(ph > 29000, "max(PTTL, lease): %lld", ph);
  cr_assert_eq(rlock_unlock(lr), 0, "our last read hold ended");
  cr_assert_eq(rt_exists(key), 1, "the Java reader still holds");
  hget_eq(key, java, "1");
  hget_eq(key, owner, NULL);
  ph = rt_pttl(key);
  cr_assert(ph > 1000 && ph <= 2500, "the Java hold's key's TTL: %lld", ph);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_try_lock(lw, 8000, 10000), 1);
  int64_t took = rt_now_ms() - t0;
  cr_assert(took >= ph - 300 && took < ph + 2000,
            "waited out the Java hold (%lld ms left): %lld ms", ph,
            (long long)took);
  hget_eq(key, "mode", "write");
  cr_assert_eq(rlock_unlock(lw), 0);
  rlock_free(lr);
  rlock_free(lw);
  rlock_client_free(c);
}

/* A reader whose timeout keys are all gone is dead: the last live read
 * unlock deletes the hash and publishes "0", as Java's does. */
Test(rwlock, a_dead_reader_is_dropped_by_the_last_read_unlock) {
  rlock_client *c = rt_client();
  char key[64], chan[192];
  rt_key(key, sizeof key, "rwx");
  channel_of(chan, sizeof chan, key);
  freeReplyObject(rt_cmd("HSET %s mode read dead-uuid:7 2", key));
  freeReplyObject(rt_cmd("PEXPIRE %s 20000", key));
  rlock *lr = rd(c, key);
  redisContext *s = subscriber(chan, 3000);
  cr_assert_eq(rlock_try_lock(lr, 0, 20000), 1);
  cr_assert_eq(rt_hlen(key), 3);
  cr_assert_eq(rlock_unlock(lr), 0);
  cr_assert_eq(rt_exists(key), 0, "the dead reader's field went too");
  char msg[16] = "";
  cr_assert(next_message(s, msg, sizeof msg));
  cr_assert_str_eq(msg, "0");
  redisFree(s);
  rlock_free(lr);
  rlock_client_free(c);
}

/* ---- wake-ups ---- */

/* A write unlock publishes "1": every waiting reader of this client gets
 * in at once (the writer's lease is 60 s). */
Test(rwlock, write_unlock_wakes_all_local_readers) {
  rlock_client *w = rt_client(), *r = rt_client();
  char key[64], chan[192];
  rt_key(key, sizeof key, "rwa");
  channel_of(chan, sizeof chan, key);
  rlock *lw = wr(w, key), *lr = rd(r, key);
  cr_assert_eq(rlock_try_lock(lw, 0, 60000), 1);
  got g[4];
  memset(g, 0, sizeof g);
  uint64_t owners[4];
  for (int i = 0; i < 4; i++) {
    owners[i] = rlock_owner_new();
    cr_assert_eq(rlock_lock_async(lr, owners[i], 20000, 60000, got_cb, &g[i],
                                  NULL),
                 0);
  }
  rt_sleep_ms(300);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(atomic_load(&g[i].status), 0, "reader %d waits", i);
  redisContext *s = subscriber(chan, 3000);
  int64_t t0 = rt_now_ms();
  cr_assert_eq(rlock_unlock(lw), 0);
  gots all = {g, 4};
  rt_wait_until_what(all_done, &all, 5000, "every reader in");
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(atomic_load(&g[i].status), 1, "reader %d", i);
    cr_assert(atomic_load(&g[i].at_ms) - t0 < 2000, "reader %d woke late", i);
  }
  char msg[16] = "";
  cr_assert(next_message(s, msg, sizeof msg));
  cr_assert_str_eq(msg, "1", "a write unlock publishes 1");
  hget_eq(key, "mode", "read");
  cr_assert_eq(rt_hlen(key), 5);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(rlock_unlock_owner(lr, owners[i]), 0);
  cr_assert_eq(rt_exists(key), 0);
  redisFree(s);
  rlock_free(lw);
  rlock_free(lr);
  rlock_client_free(w);
  rlock_client_free(r);
}

/* ---- mutual exclusion ---- */

typedef struct mx {
  rlock_client *c[2];
  char key[64];
  atomic_int next;
  atomic_int readers, writers;
  atomic_int bad, reads, max_readers;
  long counter; /* changed by writers only, unprotected */
} mx;

static void mx_run(void *p) {
  mx *s = p;
  int me = atomic_fetch_add(&s->next, 1);
  rlock *lr = NULL, *lw = NULL;
  if (rlock_new_read(s->c[me % 2], s->key, &lr) != 0 ||
      rlock_new_write(s->c[me % 2], s->key, &lw) != 0) {
    atomic_fetch_add(&s->bad, 1);
    rlock_free(lr);
    return;
  }
  for (int i = 0; i < 30; i++) {
    if ((i + me) % 3 == 0) {
      if (rlock_try_lock(lw, 20000, 10000) != 1) {
        atomic_fetch_add(&s->bad, 1);
        continue;
      }
      if (atomic_fetch_add(&s->writers, 1) != 0 ||
          atomic_load(&s->readers) != 0)
        atomic_fetch_add(&s->bad, 1);
      long v = s->counter;
      rt_sleep_ms(1);
      s->counter = v + 1;
      atomic_fetch_sub(&s->writers, 1);
      if (rlock_unlock(lw) != 0)
        atomic_fetch_add(&s->bad, 1);
    } else {
      if (rlock_try_lock(lr, 20000, 10000) != 1) {
        atomic_fetch_add(&s->bad, 1);
        continue;
      }
      int n = atomic_fetch_add(&s->readers, 1) + 1;
      int m = atomic_load(&s->max_readers);
      while (n > m && !atomic_compare_exchange_weak(&s->max_readers, &m, n))
        ;
      if (atomic_load(&s->writers) != 0)
        atomic_fetch_add(&s->bad, 1);
      rt_sleep_ms(2);
      atomic_fetch_sub(&s->readers, 1);
      atomic_fetch_add(&s->reads, 1);
      if (rlock_unlock(lr) != 0)
        atomic_fetch_add(&s->bad, 1);
      rt_sleep_ms(1);
    }
  }
  rlock_free(lr);
  rlock_free(lw);
}

Test(rwlock, writers_exclude_everyone_threads_and_two_clients) {
  static mx s;
  memset(&s, 0, sizeof s);
  s.c[0] = rt_client();
  s.c[1] = rt_client();
  rt_key(s.key, sizeof s.key, "rwm");
  rt_thread t[6];
  for (int i = 0; i < 6; i++)
    rt_thread_start(&t[i], mx_run, &s);
  for (int i = 0; i < 6; i++)
    rt_thread_join(&t[i], 90000);
  cr_assert_eq(atomic_load(&s.bad), 0);
  cr_assert_eq(s.counter, 60, "every write counted once");
  cr_assert_eq(atomic_load(&s.reads), 120);
  cr_assert(atomic_load(&s.max_readers) >= 2, "readers overlapped (max %d)",
            atomic_load(&s.max_readers));
  cr_assert_eq(rt_exists(s.key), 0);
  rlock_client_free(s.c[0]);
  rlock_client_free(s.c[1]);
}

/* ---- kinds, owners, queries ---- */

/* A plain RLock hash (no "mode"): both acquires answer RLOCK_EKIND and
 * change nothing. */
Test(rwlock, wrongkind_on_a_plain_lock_hash) {
  rlock_client *c = rt_client();
  char key[64], owner[128], k1[256];
  rt_key(key, sizeof key, "rwk");
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  timeout_key(k1, sizeof k1, key, owner, 1);
  freeReplyObject(rt_cmd("HSET %s someowner 1", key));
  freeReplyObject(rt_cmd("PEXPIRE %s 20000", key));
  rlock *lr = rd(c, key), *lw = wr(c, key);
  int rc = rlock_try_lock(lr, 0, 10000);
  cr_assert_eq(rc, RLOCK_EKIND, "read: %s", rlock_err_name(rc));
  cr_assert(strstr(rlock_last_error(), "WRONGKIND") != NULL, "%s",
            rlock_last_error());
  rc = rlock_try_lock(lw, 500, 10000);
  cr_assert_eq(rc, RLOCK_EKIND, "write: %s", rlock_err_name(rc));
  cr_assert_eq(rt_hlen(key), 1);
  hget_eq(key, "someowner", "1");
  hget_eq(key, "mode", NULL);
  cr_assert_eq(rt_exists(k1), 0, "no timeout key made");
  long long ph = rt_pttl(key);
  cr_assert(ph > 18000 && ph <= 20000, "TTL untouched: %lld", ph);
  cr_assert_eq(rlock_is_locked(lr), 0);
  cr_assert_eq(rlock_is_locked(lw), 0);
  cr_assert_eq(rlock_force_unlock(lr), 0, "not in read mode: kept");
  cr_assert_eq(rlock_force_unlock(lw), 0, "not in write mode: kept");
  cr_assert_eq(rt_hlen(key), 1);
  rlock_free(lr);
  rlock_free(lw);
  rlock_client_free(c);
}

Test(rwlock, unlock_not_held_is_enotowner) {
  rlock_client *a = rt_client(), *b = rt_client();
  char key[64];
  rt_key(key, sizeof key, "rwn");
  rlock *ra = rd(a, key), *wa = wr(a, key), *rb = rd(b, key),
        *wb = wr(b, key);
  cr_assert_eq(rlock_unlock(ra), RLOCK_ENOTOWNER, "read, no hash");
  cr_assert_eq(rlock_unlock(wa), RLOCK_ENOTOWNER, "write, no hash");
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rlock_try_lock(ra, 0, 10000), 1);
  cr_assert_eq(rlock_unlock(rb), RLOCK_ENOTOWNER, "another client's reader");
  cr_assert_eq(rlock_unlock(wa), RLOCK_ENOTOWNER, "read mode, no write hold");
  hget_eq(key, "mode", "read");
  cr_assert_eq(rlock_unlock(ra), 0);
  cr_assert_eq(rlock_try_lock(wb, 0, 10000), 1);
  cr_assert_eq(rlock_unlock(wa), RLOCK_ENOTOWNER, "another writer's hold");
  cr_assert_eq(rlock_unlock(ra), RLOCK_ENOTOWNER, "write mode, no read hold");
  cr_assert_eq(rlock_try_lock(ra, 0, 10000), 0, "a writer excludes readers");
  cr_assert_eq(rlock_is_held(wa), 0);
  cr_assert_eq(rlock_is_held(wb), 1);
  cr_assert_eq(rlock_hold_count(wb), 1);
  cr_assert_eq(rlock_unlock(wb), 0);
  cr_assert_eq(rt_exists(key), 0);
  rlock_free(ra);
  rlock_free(wa);
  rlock_free(rb);
  rlock_free(wb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* Force unlock acts only in its own mode and publishes that mode's
 * message. */
Test(rwlock, force_unlock_by_mode) {
  rlock_client *c = rt_client(), *o = rt_client();
  char key[64], chan[192];
  rt_key(key, sizeof key, "rwf");
  channel_of(chan, sizeof chan, key);
  rlock *lr = rd(c, key), *lw = wr(c, key), *or_ = rd(o, key),
        *ow = wr(o, key);
  redisContext *s = subscriber(chan, 3000);
  cr_assert_eq(rlock_try_lock(or_, 0, 30000), 1);
  cr_assert_eq(rlock_force_unlock(lw), 0, "read mode: the write side keeps");
  cr_assert_eq(rlock_force_unlock(lr), 1);
  cr_assert_eq(rt_exists(key), 0);
  char msg[16] = "";
  cr_assert(next_message(s, msg, sizeof msg));
  cr_assert_str_eq(msg, "0");
  cr_assert_eq(rlock_try_lock(ow, 0, 30000), 1);
  cr_assert_eq(rlock_force_unlock(lr), 0);
  cr_assert_eq(rlock_force_unlock(lw), 1);
  cr_assert(next_message(s, msg, sizeof msg));
  cr_assert_str_eq(msg, "1");
  cr_assert_eq(rt_exists(key), 0);
  /* the forced-out holders' unlocks: the hold was lost */
  cr_assert_eq(rlock_unlock(ow), RLOCK_ELOCKLOST);
  cr_assert_eq(rlock_unlock(or_), RLOCK_ELOCKLOST);
  redisFree(s);
  rlock_free(lr);
  rlock_free(lw);
  rlock_free(or_);
  rlock_free(ow);
  rlock_client_free(c);
  rlock_client_free(o);
}

/* ---- repair (trim) after an acquire whose outcome is unknown ---- */

/* The next message's payload must be `want` (skipping others up to 8). */
static bool message_seen(redisContext *s, const char *want) {
  char msg[64];
  for (int i = 0; i < 8; i++) {
    if (!next_message(s, msg, sizeof msg))
      return false;
    if (strcmp(msg, want) == 0)
      return true;
  }
  return false;
}

/* An acquire cancelled while its try is held by CLIENT PAUSE runs on the
 * server anyway; the client then trims the owner's count back to what it
 * knows. Read: the extra hold's timeout key is created, then deleted, and
 * the count goes back to 1; at 0 the hash goes with a "0". Write: at 0 the
 * hash goes with a "1". */
Test(rwlock, cancelled_acquires_are_trimmed) {
  rlock_client *c = rt_client();
  char key[64], chan[192], owner[128], field[160], k1[256], k2[256],
      ks[320];
  rt_key(key, sizeof key, "rwt");
  channel_of(chan, sizeof chan, key);
  uint64_t x = rlock_owner_new();
  rt_owner(owner, sizeof owner, c, x);
  snprintf(field, sizeof field, "%s:write", owner);
  timeout_key(k1, sizeof k1, key, owner, 1);
  timeout_key(k2, sizeof k2, key, owner, 2);
  snprintf(ks, sizeof ks, "__keyspace@0__:%s", k2);
  rlock *lr = rd(c, key), *lw = wr(c, key);
  /* Scripts cached first: a try answered NOSCRIPT while cancelled is
   * never re-sent (so it never runs, and there is nothing to trim). */
  cr_assert_eq(rlock_lock_owner(lw, x, 30000), 0);
  cr_assert_eq(rlock_unlock_owner(lw, x), 0);
  rt_ok("OK", "CONFIG SET notify-keyspace-events K$g");
  redisContext *kspace = subscriber(ks, 3000);
  redisContext *s = subscriber(chan, 3000);
  cr_assert_eq(rlock_lock_owner(lr, x, 30000), 0);

  /* a lost read re-entry: count 2 and key :2 on the server, 1 known */
  got g = {0};
  rlock_req *q = NULL;
  rt_ok("OK", "CLIENT PAUSE 300 ALL");
  cr_assert_eq(rlock_lock_async(lr, x, -1, 30000, got_cb, &g, &q), 0);
  cr_assert_eq(rlock_req_cancel(q), 0);
  rt_wait_until_what(got_done, &g, 3000, "cancelled");
  cr_assert_eq(atomic_load(&g.status), 100 + RLOCK_ECANCELED);
  rlock_req_free(q);
  cr_assert(message_seen(kspace, "set"), "the lost try made %s", k2);
  cr_assert(message_seen(kspace, "del"), "the trim deleted %s", k2);
  hget_eq(key, owner, "1");
  cr_assert_eq(rt_exists(k1), 1);
  cr_assert_eq(rt_exists(k2), 0);
  cr_assert_eq(rlock_hold_count_owner(lr, x), 1);

  /* unlock (publishes "0"), then a lost first read acquire: trimmed to 0,
   * the hash deleted with a "0" */
  cr_assert_eq(rlock_unlock_owner(lr, x), 0);
  cr_assert(message_seen(s, "0"));
  memset(&g, 0, sizeof g);
  rt_ok("OK", "CLIENT PAUSE 300 ALL");
  cr_assert_eq(rlock_lock_async(lr, x, -1, 30000, got_cb, &g, &q), 0);
  cr_assert_eq(rlock_req_cancel(q), 0);
  rt_wait_until_what(got_done, &g, 3000, "cancelled");
  rlock_req_free(q);
  cr_assert(message_seen(s, "0"), "the read trim published 0");
  cr_assert_eq(rt_exists(key), 0);
  cr_assert_eq(rt_exists(k1), 0, "the trim deleted the hold's key");

  /* a lost write acquire: trimmed to 0, the hash deleted with a "1" */
  memset(&g, 0, sizeof g);
  rt_ok("OK", "CLIENT PAUSE 300 ALL");
  cr_assert_eq(rlock_lock_async(lw, x, -1, 30000, got_cb, &g, &q), 0);
  cr_assert_eq(rlock_req_cancel(q), 0);
  rt_wait_until_what(got_done, &g, 3000, "cancelled");
  rlock_req_free(q);
  cr_assert(message_seen(s, "1"), "the write trim published 1");
  cr_assert_eq(rt_exists(key), 0);
  redisFree(kspace);
  redisFree(s);
  rlock_free(lr);
  rlock_free(lw);
  rlock_client_free(c);
}
