/*
 * javapeer — Peer B of the interop suite: one process behaves like one Java
 * Redisson 4.x client at the wire level, written from the wire contract (docs/wire-protocol.md)
 * with plain synchronous hiredis (no rlock code):
 *
 *  - owner `<client-uuid>:<thread id>` (a decimal long: the command thread's
 *    kernel tid), one random UUID per process;
 *  - acquire script: create-or-re-enter with HINCRBY + PEXPIRE, else reply
 *    the PTTL;
 *  - 4.x unlock: 3 keys (key, channel, unlock latch
 *    `redisson_unlock_latch:<braced>:<32 hex>`), 5 args (message `0`,
 *    lease, owner, `PUBLISH`, latch TTL), then DEL of the latch; and the
 *    3.x unlock (`unlock3`): 2 keys, 4 args, no latch;
 *  - force unlock: DEL, then PUBLISH `0` when something was deleted;
 *  - waiting: try; subscribe to the lock channel (one subscription per
 *    channel per process, reference counted); loop { try again; wait on the
 *    channel's semaphore for min(ttl, remaining) }; unsubscribe. A message
 *    `0` releases one permit, `1` one per sleeper;
 *  - watchdog: locks taken without a lease use the watchdog timeout and are
 *    renewed every watchdog/3 by one script call per 100 locks, which
 *    replies 1/0 per key; a 0 drops that lock from renewal.
 *
 * Threads: the main thread reads stdin (and ends the process on `quit` or
 * EOF); a command thread runs the commands one at a time (it is the "Java
 * thread" that owns the locks); a subscriber thread owns the pub/sub
 * connection; a renewal thread runs the watchdog. The command connection is
 * shared by the command and renewal threads under a mutex, as a Java client
 * shares its connection pool.
 *
 *   javapeer --port <port> [--host 127.0.0.1] [--watchdog-ms 30000]
 *            [--latch-ttl-ms 18000] [--subscribe-timeout-ms 7500]
 *            [--deadline-ms 120000] [--sharded 0|1]
 *
 * --sharded 1 uses SPUBLISH/SSUBSCRIBE, as Java does against a Redis 7+
 * cluster (on a standalone server it exercises the same commands).
 *
 * The line protocol on stdin/stdout is the one of peer.js (see there), plus
 * `unlock3 <name>` and the unprompted lines `RENEWED <keys>` (one renewal
 * call) and `LOST <name>` (renewal found the lock gone).
 */
#include <hiredis/hiredis.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RENEW_BATCH 100
#define LINE_MAX_LEN 4096

/* ---- the scripts (own Lua, from docs/wire-protocol.md) ---- */

/* KEYS[1] lock; ARGV[1] lease ms, ARGV[2] owner. nil = acquired, else PTTL. */
static const char acquire_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 "
    "or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  return nil "
    "end "
    "return redis.call('pttl', KEYS[1])";

/* 4.x. KEYS[1] lock, KEYS[2] channel, KEYS[3] latch; ARGV[1] message,
 * ARGV[2] lease, ARGV[3] owner, ARGV[4] publish command, ARGV[5] latch TTL.
 * nil = not held by owner, 0 = still held, 1 = released. */
static const char release4_lua[] =
    "local done = redis.call('get', KEYS[3]) "
    "if done ~= false then return tonumber(done) end "
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  redis.call('set', KEYS[3], 0, 'px', ARGV[5]) "
    "  return 0 "
    "end "
    "redis.call('del', KEYS[1]) "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]) "
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]) "
    "return 1";

/* 3.x before 3.24: no latch. KEYS[1] lock, KEYS[2] channel; ARGV[1] message,
 * ARGV[2] lease, ARGV[3] owner, ARGV[4] publish command. */
static const char release3_lua[] =
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  return 0 "
    "end "
    "redis.call('del', KEYS[1]) "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]) "
    "return 1";

/* KEYS[1] lock, KEYS[2] channel; ARGV[1] message, ARGV[2] publish command. */
static const char force_lua[] = "if redis.call('del', KEYS[1]) == 1 then "
                                "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
                                "  return 1 "
                                "end "
                                "return 0";

/* KEYS = locks; ARGV[1] watchdog ms, ARGV[i + 1] owner of KEYS[i].
 * Reply: 1 (renewed) or 0 (gone) per key. */
static const char renew_lua[] =
    "local renewed = {} "
    "for i, key in ipairs(KEYS) do "
    "  if redis.call('hexists', key, ARGV[i + 1]) == 1 then "
    "    redis.call('pexpire', key, ARGV[1]) "
    "    renewed[i] = 1 "
    "  else "
    "    renewed[i] = 0 "
    "  end "
    "end "
    "return renewed";

enum { S_ACQUIRE, S_RELEASE4, S_RELEASE3, S_FORCE, S_RENEW, S_COUNT };
static struct {
  const char *body;
  char sha[41];
} scripts[S_COUNT] = {
    {acquire_lua, ""}, {release4_lua, ""}, {release3_lua, ""},
    {force_lua, ""},   {renew_lua, ""},
};

/* ---- process state ---- */

/* One pub/sub subscription per channel, shared by this process's waiters. */
enum { SUB_NONE, SUB_PENDING, SUB_SENT, SUB_LIVE, UNSUB_PENDING, UNSUB_SENT };

typedef struct entry {
  struct entry *next;
  char *channel;
  int state;
  int refs;     /* waiters using the subscription */
  long permits; /* Java's semaphore */
  int sleepers;
} entry;

/* A lock this process renews (taken without a lease). */
typedef struct renewal {
  struct renewal *next;
  char *name;
  char *owner;
  long holds;
} renewal;

/* Lease to re-apply on unlock, per lock name (Java's internalLockLeaseTime). */
typedef struct lease_rec {
  struct lease_rec *next;
  char *name;
  int64_t lease_ms;
} lease_rec;

static struct {
  const char *host;
  int port;
  int64_t watchdog_ms;
  int64_t latch_ttl_ms;
  int64_t subscribe_timeout_ms;
  int64_t deadline_ms;
  bool sharded;        /* SPUBLISH/SSUBSCRIBE, as Java against a cluster */
  const char *publish; /* "PUBLISH" or "SPUBLISH" */
  char id[37];
  char owner[64];

  pthread_mutex_t out_mu;

  pthread_mutex_t cmd_mu;
  redisContext *cmd;

  pthread_mutex_t sub_mu;
  pthread_cond_t sub_cond; /* CLOCK_MONOTONIC */
  redisContext *sub;
  int wake[2];
  entry *entries;
  bool quiet_waits;

  pthread_mutex_t renew_mu;
  renewal *renewals;

  lease_rec *leases; /* main thread only */
} g;

/* ---- small helpers ---- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                        .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void deadline_ts(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += (time_t)(ms / 1000);
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&g.out_mu);
  vprintf(fmt, ap);
  putchar('\n');
  fflush(stdout);
  pthread_mutex_unlock(&g.out_mu);
  va_end(ap);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  out("ERROR %s", msg);
  fprintf(stderr, "javapeer: %s\n", msg);
  _exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL)
    die("out of memory");
  return p;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

static void random_bytes(unsigned char *buf, size_t n) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    die("open /dev/urandom: %s", strerror(errno));
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0 && errno != EINTR)
      die("read /dev/urandom: %s", strerror(errno));
    if (r > 0)
      got += (size_t)r;
  }
  close(fd);
}

static void random_hex(char *out_hex, size_t bytes) {
  unsigned char raw[64];
  random_bytes(raw, bytes);
  for (size_t i = 0; i < bytes; i++)
    snprintf(out_hex + 2 * i, 3, "%02x", raw[i]);
}

/* A version 4 UUID, lowercase, 36 characters, like java.util.UUID. */
static void random_uuid(char out_id[37]) {
  unsigned char b[16];
  random_bytes(b, sizeof b);
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out_id, 37,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
}

/* "{name}", or the bare name when it already contains '{' (docs/wire-protocol.md). */
static char *braced(const char *name) {
  size_t n = strlen(name);
  char *s = xmalloc(n + 3);
  if (strchr(name, '{'))
    memcpy(s, name, n + 1);
  else
    snprintf(s, n + 3, "{%s}", name);
  return s;
}

static char *channel_of(const char *name) {
  char *b = braced(name);
  size_t n = strlen(b) + sizeof "redisson_lock__channel:";
  char *s = xmalloc(n);
  snprintf(s, n, "redisson_lock__channel:%s", b);
  free(b);
  return s;
}

static redisContext *connect_redis(void) {
  struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout(g.host, g.port, tv);
  if (c == NULL || c->err)
    die("connect %s:%d: %s", g.host, g.port, c ? c->errstr : "out of memory");
  redisSetTimeout(c, tv);
  return c;
}

/* ---- the command connection ---- */

/* Runs a command (argv) on the command connection; caller frees the reply.
 * A transport failure ends the process: a test then sees the ERROR line. */
static redisReply *run_argv(int argc, const char **argv) {
  pthread_mutex_lock(&g.cmd_mu);
  redisReply *r = redisCommandArgv(g.cmd, argc, argv, NULL);
  if (r == NULL)
    die("redis: %s", g.cmd->errstr);
  pthread_mutex_unlock(&g.cmd_mu);
  return r;
}

static void load_scripts(void) {
  for (int i = 0; i < S_COUNT; i++) {
    const char *argv[3] = {"SCRIPT", "LOAD", scripts[i].body};
    redisReply *r = run_argv(3, argv);
    if (r->type != REDIS_REPLY_STRING || r->len != 40)
      die("SCRIPT LOAD failed: %s",
          r->type == REDIS_REPLY_ERROR ? r->str : "?");
    memcpy(scripts[i].sha, r->str, 41);
    freeReplyObject(r);
  }
}

/* EVALSHA, falling back to EVAL when the server lost the script cache.
 * args = numkeys, keys..., argv... */
static redisReply *run_script(int id, int argc, const char **args) {
  const char *argv[2 + 2 * RENEW_BATCH + 2];
  argv[0] = "EVALSHA";
  argv[1] = scripts[id].sha;
  memcpy(argv + 2, args, (size_t)argc * sizeof *args);
  redisReply *r = run_argv(argc + 2, argv);
  if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
    freeReplyObject(r);
    argv[0] = "EVAL";
    argv[1] = scripts[id].body;
    r = run_argv(argc + 2, argv);
  }
  return r;
}

/* ---- leases and renewals ---- */

static int64_t lease_get(const char *name) {
  for (lease_rec *l = g.leases; l; l = l->next)
    if (strcmp(l->name, name) == 0)
      return l->lease_ms;
  return g.watchdog_ms;
}

static void lease_set(const char *name, int64_t lease_ms) {
  for (lease_rec *l = g.leases; l; l = l->next)
    if (strcmp(l->name, name) == 0) {
      l->lease_ms = lease_ms;
      return;
    }
  lease_rec *l = xmalloc(sizeof *l);
  l->name = xstrdup(name);
  l->lease_ms = lease_ms;
  l->next = g.leases;
  g.leases = l;
}

static void renewal_add(const char *name, const char *owner) {
  pthread_mutex_lock(&g.renew_mu);
  renewal *r = g.renewals;
  while (r && !(strcmp(r->name, name) == 0 && strcmp(r->owner, owner) == 0))
    r = r->next;
  if (r == NULL) {
    r = xmalloc(sizeof *r);
    r->name = xstrdup(name);
    r->owner = xstrdup(owner);
    r->holds = 0;
    r->next = g.renewals;
    g.renewals = r;
  }
  r->holds++;
  pthread_mutex_unlock(&g.renew_mu);
}

/* Removes the renewal of (name, owner) — every one of name's when owner is
 * NULL (force unlock) — or, with all == false, one hold of it. */
static void renewal_cancel(const char *name, const char *owner, bool all) {
  pthread_mutex_lock(&g.renew_mu);
  for (renewal **p = &g.renewals; *p;) {
    renewal *r = *p;
    if (strcmp(r->name, name) == 0 &&
        (owner == NULL || strcmp(r->owner, owner) == 0) &&
        (all || --r->holds <= 0)) {
      *p = r->next;
      free(r->name);
      free(r->owner);
      free(r);
      continue;
    }
    p = &r->next;
  }
  pthread_mutex_unlock(&g.renew_mu);
}

/* One watchdog round: every renewed lock, at most RENEW_BATCH per call. */
static void renew_round(void) {
  char timeout[24];
  snprintf(timeout, sizeof timeout, "%" PRId64, g.watchdog_ms);
  char *names[RENEW_BATCH], *owners[RENEW_BATCH];
  size_t done = 0;
  for (;;) {
    /* Copy the next batch, so the command runs without renew_mu held. */
    int n = 0;
    pthread_mutex_lock(&g.renew_mu);
    size_t skip = done;
    for (renewal *r = g.renewals; r && n < RENEW_BATCH; r = r->next) {
      if (skip > 0) {
        skip--;
        continue;
      }
      names[n] = xstrdup(r->name);
      owners[n] = xstrdup(r->owner);
      n++;
    }
    pthread_mutex_unlock(&g.renew_mu);
    if (n == 0)
      return;
    const char *args[1 + 2 * RENEW_BATCH + 1];
    char numkeys[16];
    snprintf(numkeys, sizeof numkeys, "%d", n);
    int argc = 0;
    args[argc++] = numkeys;
    for (int i = 0; i < n; i++)
      args[argc++] = names[i];
    args[argc++] = timeout;
    for (int i = 0; i < n; i++)
      args[argc++] = owners[i];
    redisReply *r = run_script(S_RENEW, argc, args);
    size_t lost = 0;
    if (r->type == REDIS_REPLY_ARRAY) {
      out("RENEWED %d", n);
      for (size_t i = 0; i < r->elements && i < (size_t)n; i++) {
        if (r->element[i]->type == REDIS_REPLY_INTEGER &&
            r->element[i]->integer == 0) {
          out("LOST %s", names[i]);
          renewal_cancel(names[i], owners[i], true);
          lost++;
        }
      }
    } else {
      out("ERROR renewal: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    }
    freeReplyObject(r);
    for (int i = 0; i < n; i++) {
      free(names[i]);
      free(owners[i]);
    }
    done += (size_t)n - lost;
    if (n < RENEW_BATCH)
      return;
  }
}

static void *renew_thread(void *arg) {
  (void)arg;
  int64_t period = g.watchdog_ms / 3;
  int64_t next = now_ms() + period;
  for (;;) {
    int64_t left = next - now_ms();
    if (left > 0)
      sleep_ms(left);
    renew_round();
    next += period;
  }
  return NULL;
}

/* ---- the subscriber connection ---- */

static entry *entry_find(const char *channel) {
  for (entry *e = g.entries; e; e = e->next)
    if (strcmp(e->channel, channel) == 0)
      return e;
  return NULL;
}

static void wake_subscriber(void) {
  char b = 1;
  while (write(g.wake[1], &b, 1) < 0 && errno == EINTR) {
  }
}

/* Sends what the entries ask for; sub_mu held. */
static void send_pending(void) {
  for (entry **p = &g.entries; *p;) {
    entry *e = *p;
    if (e->state == SUB_NONE && e->refs == 0) {
      *p = e->next;
      free(e->channel);
      free(e);
      continue;
    }
    if (e->state == SUB_PENDING) {
      redisAppendCommand(g.sub, g.sharded ? "SSUBSCRIBE %s" : "SUBSCRIBE %s",
                         e->channel);
      e->state = SUB_SENT;
    } else if (e->state == UNSUB_PENDING) {
      redisAppendCommand(
          g.sub, g.sharded ? "SUNSUBSCRIBE %s" : "UNSUBSCRIBE %s", e->channel);
      e->state = UNSUB_SENT;
    }
    p = &e->next;
  }
  int done = 0;
  while (!done)
    if (redisBufferWrite(g.sub, &done) != REDIS_OK)
      die("pub/sub connection: %s", g.sub->errstr);
}

/* Handles one push on the subscriber connection; sub_mu held. */
static void on_push(redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return;
  const char *kind = r->element[0]->str;
  entry *e = entry_find(r->element[1]->str);
  if (e == NULL)
    return;
  if (g.sharded && kind[0] == 's')
    kind++; /* ssubscribe, sunsubscribe, smessage */
  if (strcmp(kind, "subscribe") == 0 && e->state == SUB_SENT) {
    e->state = e->refs > 0 ? SUB_LIVE : UNSUB_PENDING;
  } else if (strcmp(kind, "unsubscribe") == 0 && e->state == UNSUB_SENT) {
    e->state = e->refs > 0 ? SUB_PENDING : SUB_NONE;
  } else if (strcmp(kind, "message") == 0 && e->state == SUB_LIVE &&
             r->element[2]->type == REDIS_REPLY_STRING) {
    const char *msg = r->element[2]->str;
    if (strcmp(msg, "0") == 0)
      e->permits++; /* UNLOCK: one waiter */
    else if (strcmp(msg, "1") == 0)
      e->permits += e->sleepers; /* READ_UNLOCK: every waiter */
  }
  pthread_cond_broadcast(&g.sub_cond);
}

static void *sub_thread(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&g.sub_mu);
    send_pending();
    void *reply = NULL;
    while (redisReaderGetReply(g.sub->reader, &reply) == REDIS_OK && reply) {
      on_push(reply);
      freeReplyObject(reply);
      reply = NULL;
    }
    send_pending();
    pthread_mutex_unlock(&g.sub_mu);

    struct pollfd fds[2] = {{.fd = g.sub->fd, .events = POLLIN},
                            {.fd = g.wake[0], .events = POLLIN}};
    if (poll(fds, 2, 1000) < 0 && errno != EINTR)
      die("poll: %s", strerror(errno));
    if (fds[1].revents & POLLIN) {
      char buf[64];
      while (read(g.wake[0], buf, sizeof buf) < 0 && errno == EINTR) {
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      pthread_mutex_lock(&g.sub_mu);
      int rc = redisBufferRead(g.sub);
      pthread_mutex_unlock(&g.sub_mu);
      if (rc != REDIS_OK)
        die("pub/sub connection: %s", g.sub->errstr);
    }
  }
  return NULL;
}

/* Joins the channel's subscription and waits until it is live. */
static entry *subscribe(const char *channel, int64_t bound_ms) {
  pthread_mutex_lock(&g.sub_mu);
  entry *e = entry_find(channel);
  if (e == NULL) {
    e = xmalloc(sizeof *e);
    memset(e, 0, sizeof *e);
    e->channel = xstrdup(channel);
    e->state = SUB_NONE;
    e->next = g.entries;
    g.entries = e;
  }
  e->refs++;
  if (e->state == SUB_NONE)
    e->state = SUB_PENDING;
  else if (e->state == UNSUB_PENDING)
    e->state = SUB_LIVE; /* never sent: keep the live subscription */
  wake_subscriber();
  struct timespec until;
  deadline_ts(&until, bound_ms);
  while (e->state != SUB_LIVE) {
    if (pthread_cond_timedwait(&g.sub_cond, &g.sub_mu, &until) == ETIMEDOUT &&
        e->state != SUB_LIVE) {
      e->refs--;
      pthread_mutex_unlock(&g.sub_mu);
      return NULL;
    }
  }
  pthread_mutex_unlock(&g.sub_mu);
  return e;
}

static void unsubscribe(entry *e) {
  pthread_mutex_lock(&g.sub_mu);
  if (--e->refs == 0) {
    e->permits = 0; /* Java drops the entry, and its semaphore, here */
    if (e->state == SUB_LIVE)
      e->state = UNSUB_PENDING;
    else if (e->state == SUB_PENDING)
      e->state = SUB_NONE;
    wake_subscriber();
  }
  pthread_mutex_unlock(&g.sub_mu);
}

/* Java's latch.tryAcquire(ms) (ms < 0: acquire()). True if a permit came. */
static bool permit_wait(entry *e, int64_t ms) {
  pthread_mutex_lock(&g.sub_mu);
  if (!g.quiet_waits)
    out("WAITING %s", e->channel);
  e->sleepers++;
  struct timespec until;
  deadline_ts(&until, ms < 0 ? INT64_C(1) << 40 : ms);
  while (e->permits == 0)
    if (pthread_cond_timedwait(&g.sub_cond, &g.sub_mu, &until) == ETIMEDOUT)
      break;
  bool got = e->permits > 0;
  if (got)
    e->permits--;
  e->sleepers--;
  pthread_mutex_unlock(&g.sub_mu);
  return got;
}

/* ---- lock operations (main thread) ---- */

/* 1 acquired, 0 held by someone else (*ttl set), -1 error (printed). */
static int try_acquire(const char *name, int64_t lease_ms, int64_t *ttl) {
  char lease[24];
  int64_t effective = lease_ms > 0 ? lease_ms : g.watchdog_ms;
  snprintf(lease, sizeof lease, "%" PRId64, effective);
  const char *args[4] = {"1", name, lease, g.owner};
  redisReply *r = run_script(S_ACQUIRE, 4, args);
  int rc;
  if (r->type == REDIS_REPLY_NIL) {
    rc = 1;
    lease_set(name, effective);
    if (lease_ms <= 0)
      renewal_add(name, g.owner);
  } else if (r->type == REDIS_REPLY_INTEGER) {
    rc = 0;
    *ttl = r->integer;
  } else {
    out("ERROR acquire: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    rc = -1;
  }
  freeReplyObject(r);
  return rc;
}

/* tryLock(wait, lease); wait < 0 is lock(lease). 1/0, or -1 (printed). */
static int lock_wait(const char *name, int64_t wait_ms, int64_t lease_ms) {
  int64_t ttl = 0;
  int rc = try_acquire(name, lease_ms, &ttl);
  if (rc != 0 || wait_ms == 0)
    return rc;
  int64_t deadline = now_ms() + wait_ms;
  char *channel = channel_of(name);
  int64_t sub_bound = g.subscribe_timeout_ms;
  if (wait_ms > 0 && wait_ms < sub_bound)
    sub_bound = wait_ms;
  /* Subscribe first, then try again: a release between the failed try and
   * the subscription cannot be missed. */
  entry *e = subscribe(channel, sub_bound);
  if (e == NULL) {
    free(channel);
    if (wait_ms > 0 && now_ms() >= deadline)
      return 0;
    out("ERROR subscribe to %s timed out", name);
    return -1;
  }
  for (;;) {
    rc = try_acquire(name, lease_ms, &ttl);
    if (rc != 0)
      break;
    int64_t remaining = wait_ms > 0 ? deadline - now_ms() : -1;
    if (wait_ms > 0 && remaining <= 0)
      break;
    int64_t sleep_for;
    if (ttl >= 0 && (wait_ms < 0 || ttl < remaining))
      sleep_for = ttl;
    else
      sleep_for = remaining; /* -1: until a message */
    permit_wait(e, sleep_for);
  }
  unsubscribe(e);
  free(channel);
  return rc;
}

/* One unlock call: 4.x (latch, then DEL of the latch) or 3.x (no latch).
 * Returns 1 released, 0 still held, -1 not held by this owner (nil), -2 an
 * error reply (printed). */
static int release(const char *name, bool v4) {
  char *channel = channel_of(name);
  char lease[24], latch_ttl[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_get(name));
  snprintf(latch_ttl, sizeof latch_ttl, "%" PRId64, g.latch_ttl_ms);
  char *latch = NULL;
  redisReply *r;
  if (v4) {
    /* A fresh request id per unlock call (Java retries reuse it). */
    char *b = braced(name);
    char hex[33];
    random_hex(hex, 16);
    size_t n = strlen(b) + 64;
    latch = xmalloc(n);
    snprintf(latch, n, "redisson_unlock_latch:%s:%s", b, hex);
    free(b);
    const char *args[9] = {"3",   name,    channel,   latch,    "0",
                           lease, g.owner, g.publish, latch_ttl};
    r = run_script(S_RELEASE4, 9, args);
  } else {
    const char *args[7] = {"2", name, channel, "0", lease, g.owner, g.publish};
    r = run_script(S_RELEASE3, 7, args);
  }
  if (latch != NULL) {
    const char *argv[2] = {"DEL", latch};
    freeReplyObject(run_argv(2, argv));
  }
  int rc;
  if (r->type == REDIS_REPLY_NIL) {
    rc = -1;
  } else if (r->type == REDIS_REPLY_INTEGER) {
    rc = r->integer == 1 ? 1 : 0;
  } else {
    out("ERROR unlock: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    rc = -2;
  }
  /* Java: cancelExpirationRenewal(threadId) after every unlock call. */
  if (rc != -2)
    renewal_cancel(name, g.owner, rc != 0);
  freeReplyObject(r);
  free(latch);
  free(channel);
  return rc;
}

static void unlock_cmd(const char *name, bool v4) {
  int rc = release(name, v4);
  if (rc == -1)
    out("ERROR NOTOWNER attempt to unlock lock, not locked by current thread "
        "by node id: %s thread-id: %s",
        g.id, strchr(g.owner, ':') + 1);
  else if (rc >= 0)
    out("UNLOCKED");
}

static void force_cmd(const char *name) {
  char *channel = channel_of(name);
  const char *args[5] = {"2", name, channel, "0", g.publish};
  redisReply *r = run_script(S_FORCE, 5, args);
  renewal_cancel(name, NULL, true);
  if (r->type == REDIS_REPLY_INTEGER)
    out("FORCED %lld", r->integer);
  else
    out("ERROR forceunlock: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
  freeReplyObject(r);
  free(channel);
}

static void set_quiet(bool quiet) {
  pthread_mutex_lock(&g.sub_mu);
  g.quiet_waits = quiet;
  pthread_mutex_unlock(&g.sub_mu);
}

static void count_cmd(const char *name, const char *key, long n,
                      int64_t lease_ms, const char *tag) {
  int64_t t0 = now_ms();
  set_quiet(true);
  for (long i = 0; i < n; i++) {
    if (lock_wait(name, -1, lease_ms) != 1) {
      set_quiet(false);
      return; /* the ERROR line is out */
    }
    /* Deliberately not atomic: only the lock keeps this exact. */
    const char *get[2] = {"GET", key};
    redisReply *r = run_argv(2, get);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    char next[24];
    snprintf(next, sizeof next, "%lld", v + 1);
    const char *set[3] = {"SET", key, next};
    freeReplyObject(run_argv(3, set));
    if (tag != NULL) {
      char log_key[512];
      snprintf(log_key, sizeof log_key, "%s:log", key);
      const char *push[3] = {"RPUSH", log_key, tag};
      freeReplyObject(run_argv(3, push));
    }
    int rc = release(name, true);
    if (rc != 1) {
      set_quiet(false);
      out("ERROR count: unlock in round %ld answered %d", i, rc);
      return;
    }
  }
  set_quiet(false);
  out("COUNTED %ld %" PRId64, n, now_ms() - t0);
}

static void simple_cmd(const char *what, int argc, const char **argv) {
  redisReply *r = run_argv(argc, argv);
  if (r->type == REDIS_REPLY_INTEGER)
    out("%s %lld", what, r->integer);
  else if (r->type == REDIS_REPLY_STRING)
    out("%s %s", what, r->str);
  else if (r->type == REDIS_REPLY_NIL)
    out("%s (nil)", what);
  else
    out("ERROR %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
  freeReplyObject(r);
}

static int64_t num(const char *s) {
  char *end = NULL;
  long long v = s ? strtoll(s, &end, 10) : 0;
  return (s && end != s && *end == '\0') ? (int64_t)v : INT64_MIN;
}

static void run_command(char *line) {
  char *words[8] = {0};
  int n = 0;
  for (char *save = NULL, *w = strtok_r(line, " \t\r\n", &save);
       w != NULL && n < 8; w = strtok_r(NULL, " \t\r\n", &save))
    words[n++] = w;
  if (n == 0)
    return;
  const char *cmd = words[0];
  int64_t t0 = now_ms();
  if (strcmp(cmd, "lock") == 0 && n == 3 && num(words[2]) != INT64_MIN) {
    if (lock_wait(words[1], -1, num(words[2])) == 1)
      out("ACQUIRED %" PRId64, now_ms() - t0);
  } else if (strcmp(cmd, "trylock") == 0 && n == 4 &&
             num(words[2]) != INT64_MIN && num(words[3]) != INT64_MIN) {
    int rc = lock_wait(words[1], num(words[2]), num(words[3]));
    if (rc >= 0)
      out("%s %" PRId64, rc == 1 ? "ACQUIRED" : "NOTACQUIRED", now_ms() - t0);
  } else if (strcmp(cmd, "unlock") == 0 && n == 2) {
    unlock_cmd(words[1], true);
  } else if (strcmp(cmd, "unlock3") == 0 && n == 2) {
    unlock_cmd(words[1], false);
  } else if (strcmp(cmd, "forceunlock") == 0 && n == 2) {
    force_cmd(words[1]);
  } else if (strcmp(cmd, "owner") == 0 && n == 2) {
    out("OWNER %s", g.owner);
  } else if (strcmp(cmd, "hget") == 0 && n == 3) {
    const char *argv[3] = {"HGET", words[1], words[2]};
    simple_cmd("HGET", 3, argv);
  } else if (strcmp(cmd, "exists") == 0 && n == 2) {
    const char *argv[2] = {"EXISTS", words[1]};
    simple_cmd("EXISTS", 2, argv);
  } else if (strcmp(cmd, "pttl") == 0 && n == 2) {
    const char *argv[2] = {"PTTL", words[1]};
    simple_cmd("PTTL", 2, argv);
  } else if (strcmp(cmd, "count") == 0 && (n == 5 || n == 6) &&
             num(words[3]) > 0 && num(words[4]) != INT64_MIN) {
    count_cmd(words[1], words[2], (long)num(words[3]), num(words[4]),
              n == 6 ? words[5] : NULL);
  } else {
    out("ERROR unknown command or bad arguments: %s", cmd);
  }
}

/* ---- the command thread (the "Java thread" owning the locks) ---- */

typedef struct queued {
  struct queued *next;
  char line[];
} queued;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  queued *head, *tail;
  bool owner_ready;
} q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, false};

static void *command_thread(void *arg) {
  (void)arg;
  /* Java's owner: <client uuid>:<Thread.getId()>; ours is the kernel tid of
   * this thread, a decimal long like Java's. */
  snprintf(g.owner, sizeof g.owner, "%s:%ld", g.id, (long)gettid());
  pthread_mutex_lock(&q.mu);
  q.owner_ready = true;
  pthread_cond_broadcast(&q.cond);
  for (;;) {
    while (q.head == NULL)
      pthread_cond_wait(&q.cond, &q.mu);
    queued *item = q.head;
    q.head = item->next;
    if (q.head == NULL)
      q.tail = NULL;
    pthread_mutex_unlock(&q.mu);
    run_command(item->line);
    free(item);
    pthread_mutex_lock(&q.mu);
  }
  return NULL;
}

static void enqueue(const char *line) {
  size_t n = strlen(line) + 1;
  queued *item = xmalloc(sizeof *item + n);
  memcpy(item->line, line, n);
  item->next = NULL;
  pthread_mutex_lock(&q.mu);
  if (q.tail != NULL)
    q.tail->next = item;
  else
    q.head = item;
  q.tail = item;
  pthread_cond_broadcast(&q.cond);
  pthread_mutex_unlock(&q.mu);
}

/* ---- main ---- */

static int64_t opt_num(const char *name, const char *value) {
  int64_t v = num(value);
  if (v == INT64_MIN || v < 0)
    die("bad value for %s: %s", name, value ? value : "(none)");
  return v;
}

int main(int argc, char **argv) {
  g.host = "127.0.0.1";
  g.watchdog_ms = 30000;
  g.latch_ttl_ms = 18000; /* Java 4.x: 16-20 s by default */
  g.subscribe_timeout_ms = 7500;
  g.deadline_ms = 120000;
  pthread_mutex_init(&g.out_mu, NULL);
  for (int i = 1; i < argc; i += 2) {
    const char *opt = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(opt, "--host") == 0 && value)
      g.host = value;
    else if (strcmp(opt, "--port") == 0)
      g.port = (int)opt_num(opt, value);
    else if (strcmp(opt, "--watchdog-ms") == 0)
      g.watchdog_ms = opt_num(opt, value);
    else if (strcmp(opt, "--latch-ttl-ms") == 0)
      g.latch_ttl_ms = opt_num(opt, value);
    else if (strcmp(opt, "--subscribe-timeout-ms") == 0)
      g.subscribe_timeout_ms = opt_num(opt, value);
    else if (strcmp(opt, "--deadline-ms") == 0)
      g.deadline_ms = opt_num(opt, value);
    else if (strcmp(opt, "--sharded") == 0)
      g.sharded = opt_num(opt, value) != 0;
    else
      die("unknown option %s", opt);
  }
  if (g.port <= 0 || g.watchdog_ms < 3)
    die("usage: javapeer --port <port> [--host h] [--watchdog-ms n] "
        "[--latch-ttl-ms n] [--subscribe-timeout-ms n] [--deadline-ms n] "
        "[--sharded 0|1]");
  g.publish = g.sharded ? "SPUBLISH" : "PUBLISH";

  /* Bounded life whatever the test does: SIGALRM's default action ends us. */
  alarm((unsigned)((g.deadline_ms + 999) / 1000));

  pthread_mutex_init(&g.cmd_mu, NULL);
  pthread_mutex_init(&g.sub_mu, NULL);
  pthread_mutex_init(&g.renew_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g.sub_cond, &ca);
  pthread_condattr_destroy(&ca);
  if (pipe2(g.wake, O_CLOEXEC | O_NONBLOCK) != 0)
    die("pipe: %s", strerror(errno));

  random_uuid(g.id);
  g.cmd = connect_redis();
  g.sub = connect_redis();
  load_scripts();

  pthread_t sub_tid, renew_tid, command_tid;
  if (pthread_create(&sub_tid, NULL, sub_thread, NULL) != 0 ||
      pthread_create(&renew_tid, NULL, renew_thread, NULL) != 0 ||
      pthread_create(&command_tid, NULL, command_thread, NULL) != 0)
    die("pthread_create failed");
  pthread_mutex_lock(&q.mu);
  while (!q.owner_ready)
    pthread_cond_wait(&q.cond, &q.mu);
  pthread_mutex_unlock(&q.mu);

  /* This thread only reads stdin, so `quit` (or EOF) ends the process at
   * once, even while the command thread waits for a lock. */
  out("READY %s", g.id);
  char line[LINE_MAX_LEN];
  while (fgets(line, sizeof line, stdin) != NULL) {
    if (strncmp(line, "quit", 4) == 0 &&
        (line[4] == '\n' || line[4] == '\0' || line[4] == ' '))
      break;
    enqueue(line);
  }
  /* Like a crashed client: locks are left to expire by their TTL. */
  fflush(stdout);
  _exit(0);
}
