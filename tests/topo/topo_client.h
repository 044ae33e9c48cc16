/* Small helpers shared by the topo suite's library tests (static, header
 * only): opening clients on a topology URI, timed blocking calls on a
 * thread, lost-lock bookkeeping, fd and thread counts. */
#ifndef RLOCK_TOPO_CLIENT_H
#define RLOCK_TOPO_CLIENT_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "harness.h"
#include "rlock.h"
#include "topo_harness.h"

/* Opens a client on uri with o (NULL: defaults); asserts success. */
static inline rlock_client *tc_open(const char *uri, rlock_options *o) {
  rlock_options d;
  if (!o) {
    rlock_options_init(&d);
    o = &d;
  }
  o->uri = uri;
  rlock_client *c = NULL;
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, 0, "rlock_client_new(%s): %s (%s) after %lld ms", uri,
               rlock_err_name(rc), rlock_last_error(),
               (long long)(rt_now_ms() - t0));
  cr_assert(c != NULL);
  return c;
}

static inline rlock *tc_lock(rlock_client *c, const char *name) {
  rlock *l = NULL;
  int rc = rlock_new(c, name, &l);
  cr_assert_eq(rc, 0, "rlock_new(%s): %s", name, rlock_err_name(rc));
  return l;
}

/* Asserts rc == want, naming the call and the error detail. */
#define TC_EQ(rc_expr, want, what)                                            \
  do {                                                                        \
    int tc_rc_ = (int)(rc_expr);                                              \
    cr_assert_eq(tc_rc_, (want), "%s: got %d %s (%s), want %d", (what),       \
                 tc_rc_, tc_rc_ < 0 ? rlock_err_name(tc_rc_) : "",           \
                 tc_rc_ < 0 ? rlock_last_error() : "", (int)(want));         \
  } while (0)

/* A try_lock run on a thread (the blocking call must not hold up the test's
 * main thread, which watches Redis meanwhile). */
typedef struct tc_try {
  rlock *lock;
  int64_t wait_ms, lease_ms;
  int64_t started_at, returned_at; /* rt_now_ms() */
  atomic_int done;
  int rc;
  char err[256];
  bool unlock_after; /* unlock right away when acquired */
  int unlock_rc;
  rt_thread th;
} tc_try;

static inline void tc_try_fn(void *p) {
  tc_try *t = p;
  t->started_at = rt_now_ms();
  t->rc = rlock_try_lock(t->lock, t->wait_ms, t->lease_ms);
  t->returned_at = rt_now_ms();
  if (t->rc < 0)
    snprintf(t->err, sizeof t->err, "%s", rlock_last_error());
  if (t->rc == 1 && t->unlock_after)
    t->unlock_rc = rlock_unlock(t->lock);
  atomic_store(&t->done, 1);
}

static inline void tc_try_start(tc_try *t, rlock *lock, int64_t wait_ms,
                                int64_t lease_ms, bool unlock_after) {
  memset(t, 0, sizeof *t);
  t->lock = lock;
  t->wait_ms = wait_ms;
  t->lease_ms = lease_ms;
  t->unlock_after = unlock_after;
  rt_thread_start(&t->th, tc_try_fn, t);
}

/* Lost-lock bookkeeping for on_lock_lost. */
typedef struct tc_lost {
  atomic_int count;
  _Atomic int64_t first_at; /* rt_now_ms() of the first call, 0: none */
  char name[256];
} tc_lost;

static inline void tc_on_lost(const char *name, const char *owner,
                              void *data) {
  (void)owner;
  tc_lost *l = data;
  int64_t zero = 0;
  atomic_compare_exchange_strong(&l->first_at, &zero, rt_now_ms());
  if (atomic_fetch_add(&l->count, 1) == 0)
    snprintf(l->name, sizeof l->name, "%s", name);
}

/* Entries in /proc/self/<what> ("fd", "task"), "." and ".." excluded. */
static inline int tc_count_dir(const char *what) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/%s", what);
  DIR *d = opendir(path);
  cr_assert(d != NULL);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - (strcmp(what, "fd") == 0 ? 1 : 0); /* the DIR's own fd */
}

/* tc_count_dir(what) once it is back to `want`, or after bound_ms: a
 * thread joined a moment ago (pthread_join returns when the thread clears
 * its id, before the kernel drops it from /proc/self/task) may still be
 * listed for a while on a loaded machine. */
static inline int tc_count_dir_back(const char *what, int want,
                                    int64_t bound_ms) {
  int64_t deadline = rt_now_ms() + bound_ms;
  int n = tc_count_dir(what);
  while (n != want && rt_now_ms() < deadline) {
    rt_sleep_ms(10);
    n = tc_count_dir(what);
  }
  return n;
}

/* "fd -> target" of every open fd, space-separated, into buf. */
static inline void tc_list_fds(char *buf, size_t n) {
  DIR *d = opendir("/proc/self/fd");
  cr_assert(d != NULL);
  size_t used = 0;
  buf[0] = '\0';
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len < 0)
      continue;
    target[len] = '\0';
    int w = snprintf(buf + used, n - used, "%s->%s ", e->d_name, target);
    if (w < 0 || (size_t)w >= n - used)
      break;
    used += (size_t)w;
  }
  closedir(d);
}

/* EXISTS on a node after ASKING (a key in a slot being imported). */
static inline long long tc_exists_asking(int port, const char *key) {
  freeReplyObject(rt_node_cmd(port, "ASKING"));
  return rt_node_int(port, "EXISTS %s", key);
}

/* Field `field` ("calls", "rejected_calls", ...) of cmdstat_<cmd> in INFO
 * commandstats on a node; 0 when the command never ran there. */
static inline long long tc_cmdstat(int port, const char *cmd,
                                   const char *field) {
  char *info = rt_node_str(port, "INFO commandstats");
  char key[96], want[48];
  snprintf(key, sizeof key, "cmdstat_%s:", cmd);
  snprintf(want, sizeof want, "%s=", field);
  const char *line = info ? strstr(info, key) : NULL;
  const char *eol = line ? strchr(line, '\n') : NULL;
  const char *f = line ? strstr(line, want) : NULL;
  /* "calls=" is also the end of "rejected_calls=": take the field that
   * follows ':' or ',' */
  while (f && (!eol || f < eol) && f[-1] != ':' && f[-1] != ',')
    f = strstr(f + 1, want);
  long long v = f && (!eol || f < eol) ? atoll(f + strlen(want)) : 0;
  free(info);
  return v;
}

/* Calls of a command on a node since start (INFO commandstats). */
static inline long long tc_calls(int port, const char *cmd) {
  return tc_cmdstat(port, cmd, "calls");
}

/* PUBSUB NUMSUB / SHARDNUMSUB (`sub`) of one channel on a node. */
static inline long long tc_numsub(int port, const char *sub,
                                  const char *chan) {
  redisReply *r = rt_node_cmd(port, "PUBSUB %s %s", sub, chan);
  cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2,
            "PUBSUB %s: type %d %s", sub, r->type, r->str ? r->str : "");
  long long n = r->element[1]->integer;
  freeReplyObject(r);
  return n;
}

/* A waiter on `other` (another client's handle of the lock `held` holds,
 * on the master at `port`) is woken by held's release: it subscribes
 * (PUBSUB NUMSUB on port), waits at least 300 ms, and gets the lock within
 * 2 s of the unlock (then unlocks it). Asserts. */
static inline void tc_release_wakes(int port, rlock *held, rlock *other) {
  char chan[128];
  rt_lock_channel(chan, sizeof chan, rlock_name(held));
  tc_try w;
  tc_try_start(&w, other, 8000, 10000, true);
  int64_t dl = rt_now_ms() + 3000;
  while (tc_numsub(port, "NUMSUB", chan) == 0 && rt_now_ms() < dl)
    rt_sleep_ms(10);
  cr_assert_eq(tc_numsub(port, "NUMSUB", chan), 1,
               "waiter subscribed on the master");
  int64_t since = rt_now_ms() - w.started_at;
  rt_sleep_ms(since < 300 ? 300 - since : 0);
  int64_t released_at = rt_now_ms();
  TC_EQ(rlock_unlock(held), 0, "unlock");
  rt_thread_join(&w.th, 10000);
  cr_assert_eq(w.rc, 1, "waiter: %d %s (%s)", w.rc, rlock_err_name(w.rc),
               w.err);
  cr_assert_lt(w.returned_at - released_at, 2000, "woken after %lld ms",
               (long long)(w.returned_at - released_at));
  cr_assert_eq(w.unlock_rc, 0);
}

/* Reads what a MONITOR connection has buffered (200 ms read timeout: the
 * connection is of no use afterwards) and appends to out, one per line,
 * the lines that contain one of `needles` (NULL-terminated,
 * case-insensitive), without their "<time> [<db> <addr>] " prefix and cut
 * at maxline bytes. */
static inline void tc_monitor_lines(redisContext *mon,
                                    const char *const *needles,
                                    int maxline, char *out, size_t n) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
  redisSetTimeout(mon, tv);
  size_t used = strlen(out);
  void *rv = NULL;
  while (redisGetReply(mon, &rv) == REDIS_OK && rv) {
    redisReply *r = rv;
    bool hit = false;
    for (int i = 0; r->type == REDIS_REPLY_STATUS && needles[i]; i++)
      hit = hit || strcasestr(r->str, needles[i]) != NULL;
    if (hit) {
      const char *p = strchr(r->str, ']');
      int w = snprintf(out + used, n - used, "%.*s\n", maxline,
                       p ? p + 2 : r->str);
      if (w > 0 && (size_t)w < n - used)
        used += (size_t)w;
    }
    freeReplyObject(r);
    rv = NULL;
  }
}

/* rlock_unlock_owner on a thread (it blocks while the test finishes a
 * slot migration): start with rt_thread_start(&th, tc_unl_fn, &u). */
typedef struct tc_unl {
  rlock *lock;
  uint64_t owner; /* the thread that holds it */
  int rc;
  int64_t took;
  char err[256];
} tc_unl;

static inline void tc_unl_fn(void *p) {
  tc_unl *u = p;
  int64_t t0 = rt_now_ms();
  u->rc = rlock_unlock_owner(u->lock, u->owner);
  u->took = rt_now_ms() - t0;
  if (u->rc < 0)
    snprintf(u->err, sizeof u->err, "%s", rlock_last_error());
}

#endif
