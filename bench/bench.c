/* rlock-bench: lock speed against the wire's limit, in one run.
 *
 * Against one Redis server (normally the private one bench/run starts) it
 * measures, in this order:
 *   B   the raw baseline: redis-benchmark EVALSHA-ing the library's own
 *       acquire script (1 connection, 8 connections, -P 16 -c 50);
 *   S1  uncontended lock+unlock on 1 thread (S1off: the same on a client
 *       with spin_us 0, which parks at once);
 *   S2  1/8/32/64 threads on distinct locks, one client (S2off: 8 and 32
 *       threads with spin_us 0);
 *   S3  handoff: 2 threads ping-pong one lock (S3b: the same, but the holder
 *       waits until the other thread sleeps on the channel: the pub/sub path;
 *       S3h0: S3 on a client with handoff_max 0, no local handoff); the
 *       handoff is timed from the holder's unlock call to the waiter's lock
 *       returning (as Java's benchmark times it; target <= 3 round trips)
 *       and, as before, from the unlock's return (which a transfer's one
 *       reply ends together with the waiter's wait: about 0 or below);
 *   S4  herd: 64 threads on one lock, server commands per acquisition (S4h0:
 *       the same with handoff_max 0), and its wire floor: the herd's
 *       transfer script replayed serially on one sync hiredis connection;
 *   K   S3 and S4 again on the fair lock (F3, F4) and on the write lock of
 *       a read/write lock (W3, W4), beside RLock's;
 *   M   semaphore acquire+release pairs at 1 and 8 threads (M1, M8), one
 *       semaphore with as many permits as threads, beside S1/S2;
 *   S5  10 000 locks held in watchdog mode: renewal commands/s and client
 *       memory per held lock;
 *   X   only when named in --only: two processes x 32 threads on one lock
 *       for BENCH_X_SECONDS (10), each process's share of the acquisitions
 *       (>= 30%); the second process a child rlock-bench (X), then the
 *       Java peer of BENCH_JAVA_PEER when set (XJ);
 * and prints one table (figure, baseline, ratio, target, PASS/MISS) that it
 * also writes as CSV, with notes on where the CPU time went (client, its
 * loop thread, redis-server) per pair or acquisition; "client CPU per pair"
 * rows are user+sys of the whole process, so a speed-up bought with burnt
 * CPU shows, and "client context switches" rows count the process's
 * threads put to sleep and woken (getrusage), which a loaded machine
 * moves far less than the times. The S1off/S2off/S3h0/S4h0 variants run over
 * plain TCP only, in the same run as the rows they compare with. S3 and S4
 * check mutual exclusion with a non-atomic counter and abort if it disagrees
 * with the number of acquisitions.
 *
 * TLS: given the server's TLS port (--tls-port; bench/run starts the server
 * with one), B and S1-S4 run a second time over rediss:// (verified against
 * --tls-ca), B with redis-benchmark --tls, so TLS ratios are against the raw
 * TLS server. Their rows get a "T" before the id (TB1, TS1, ..., TMEM) and
 * no targets (issue #4's are for plain TCP); the CSV's last column,
 * transport, is tcp or tls; a "TLS beside plain TCP" list follows the
 * table. The monitoring connection (INFO, SCRIPT LOAD, S1's sync hiredis
 * reference) stays on the plain port. S5 runs over plain TCP only.
 *
 * Cluster: given a Redis Cluster's seeds (--cluster h:p,h:p; bench/run
 * --cluster starts a private 3-master one), B and S1-S4 run once more, last,
 * on a client opened with redis+cluster://seeds. Rows get "C-" before the id
 * (C-B1, C-S1, ...), no targets, transport "cluster" in the CSV, and a
 * "cluster beside standalone" list follows the table. The monitoring side
 * connects to every master (from CLUSTER SLOTS) and sums their INFO
 * (commandstats, cpu, DBSIZE). Baseline: C-B1 is redis-benchmark -c 1
 * straight to the master owning C-S1's lock, on keys with that lock's hash
 * tag (the serial round trip to the node S1 talks to); C-B2 and C-B3 are
 * redis-benchmark --cluster (keys "{tag}...", clients spread over the
 * masters), so C-S2's ratio is to the whole cluster's capacity. The acquire
 * script is loaded on every master. S2's locks hash to different masters
 * (a note says how they spread); S3's and S4's one lock lives on one.
 * The variants (S1off, S2off, S3h0, S4h0) and the sync hiredis reference
 * are not repeated there.
 *
 * Usage: rlock-bench [--host H] [--port P] [--seconds S] [--csv PATH]
 *                    [--only B,S1,S2,S3,S4,K,M,S5] [--tls-port P --tls-ca FILE]
 *                    [--cluster HOST:PORT[,HOST:PORT...]]
 * Environment (flags win): BENCH_HOST, BENCH_PORT, BENCH_SECONDS, BENCH_CSV,
 * BENCH_ONLY, BENCH_TLS_PORT, BENCH_TLS_CA, BENCH_CLUSTER_NODES,
 * BENCH_BASE_SECONDS,
 * BENCH_HERD_THREADS, BENCH_WD_LOCKS,
 * BENCH_WD_MS, BENCH_WD_PERIODS, BENCH_S3_HOLD_US (S3b hold, 0 = no S3b),
 * BENCH_S2_THREADS (default 1,8,32,64), BENCH_S2_CLIENTS (diagnostic:
 * spread S2's threads over more clients), REDIS_BENCHMARK.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* The acquire and release scripts exactly as the library sends them:
 * embedded from lib/prim's .lua files by the library's own embedder
 * (bench/meson.build), so the bench sees nothing of the library but its
 * public header (scripts/check-layers). */
#include "bench_lua.h"
#include "rlock.h"

/* RLOCK_BENCH_TLS: 1 when this rlock is built with TLS (bench/meson.build). */
#ifndef RLOCK_BENCH_TLS
#define RLOCK_BENCH_TLS 0
#endif

typedef struct bench_script {
  const char *body, *sha;
} bench_script;
static const bench_script acquire_script = {RLOCK__LUA_LOCK_ACQUIRE_BODY,
                                            RLOCK__LUA_LOCK_ACQUIRE_SHA};
static const bench_script release_script = {RLOCK__LUA_LOCK_RELEASE_BODY,
                                            RLOCK__LUA_LOCK_RELEASE_SHA};
static const bench_script transfer_script = {RLOCK__LUA_LOCK_TRANSFER_BODY,
                                             RLOCK__LUA_LOCK_TRANSFER_SHA};

#define LEASE_MS 30000 /* S1-S4 leases (the baseline uses a short one) */
#define MAX_THREADS 256
#define OWNER_SAMPLE "00000000-0000-4000-8000-000000000000:1"

/* ---- configuration ---- */

static struct {
  const char *host;
  int port;
  double seconds;      /* per measured phase */
  double base_seconds; /* per redis-benchmark run */
  const char *csv;
  const char *only;
  const char *redis_benchmark;
  int herd_threads;
  int wd_locks;
  int64_t wd_ms;
  int wd_periods;
  int64_t s3_hold_us;
  int tls_port;       /* 0: no TLS run */
  const char *tls_ca; /* CA file for the TLS run; NULL: system trust */
  const char *cluster; /* cluster seeds "h:p,h:p"; NULL: no cluster run */
  char prefix[64]; /* key prefix unique to this run */
} cfg;

/* The TLS run (B, S1-S4 over rediss://) is in progress: rows get a "T"
 * before their id and no target, notes "[tls] " before their text. */
static bool tls_mode;

/* The cluster run (B, S1-S4 on redis+cluster://) is in progress: rows get
 * "C-" before their id and no target, notes "[cluster] " before their
 * text. */
static bool cluster_mode;

/* What progress lines and row ids start with in the current run. */
static const char *run_tag(void) {
  return cluster_mode ? "C-" : tls_mode ? "T" : "";
}

/* ---- small helpers ---- */

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rlock-bench: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

static void check_rc(int rc, const char *what) {
  if (rc < 0)
    die("%s failed: %s (%s)", what, rlock_err_name(rc), rlock_last_error());
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
  if (ns <= 0)
    return;
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000),
                        .tv_nsec = (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return (v != NULL && v[0] != '\0') ? v : dflt;
}

static bool phase_on(const char *phase) {
  if (cfg.only == NULL || cfg.only[0] == '\0')
    return true;
  size_t n = strlen(phase);
  for (const char *p = cfg.only; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncasecmp(p, phase, n) == 0)
      return true;
    if (end == NULL)
      break;
    p = end + 1;
  }
  return false;
}

/* VmRSS of this process in KiB. */
static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
      break;
  fclose(f);
  return kib;
}

/* Bytes handed out by malloc and not yet freed, all arenas. */
static size_t heap_in_use(void) { return mallinfo2().uordblks; }

/* ---- latency samples ---- */

typedef struct samples {
  int64_t *v;
  size_t n, cap;
} samples;

static void samples_push(samples *s, int64_t x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 4096;
    s->v = realloc(s->v, s->cap * sizeof(*s->v));
    if (s->v == NULL)
      die("out of memory");
  }
  s->v[s->n++] = x;
}

static void samples_append(samples *dst, const samples *src) {
  for (size_t i = 0; i < src->n; i++)
    samples_push(dst, src->v[i]);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile in µs (samples are ns). Sorts in place. */
static double samples_pct_us(samples *s, double pct) {
  if (s->n == 0)
    return NAN;
  qsort(s->v, s->n, sizeof(*s->v), cmp_i64);
  size_t rank = (size_t)ceil(pct / 100.0 * (double)s->n);
  if (rank < 1)
    rank = 1;
  return (double)s->v[rank - 1] / 1000.0;
}

/* ---- the monitoring connection (hiredis, synchronous) ---- */

static redisContext *mon;

/* The servers whose INFO figures are summed: the standalone server (mon),
 * or in the cluster run every master. */
static redisContext **mons = &mon;
static int nmons = 1;

static redisReply *ctx_vcmd(redisContext *c, const char *fmt, va_list ap) {
  redisReply *r = redisvCommand(c, fmt, ap);
  if (r == NULL)
    die("monitoring connection to %s:%d: %s", c->tcp.host ? c->tcp.host : "?",
        c->tcp.port, c->errstr);
  if (r->type == REDIS_REPLY_ERROR)
    die("monitoring connection to %s:%d: server error: %s",
        c->tcp.host ? c->tcp.host : "?", c->tcp.port, r->str);
  return r;
}

static redisReply *ctx_cmd(redisContext *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = ctx_vcmd(c, fmt, ap);
  va_end(ap);
  return r;
}

static redisReply *mon_cmd(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = ctx_vcmd(mon, fmt, ap);
  va_end(ap);
  return r;
}

/* redis-server's own CPU time so far (INFO cpu), seconds, summed over the
 * monitored servers. */
static double server_cpu_s(void) {
  double total = 0;
  for (int i = 0; i < nmons; i++) {
    redisReply *r = ctx_cmd(mons[i], "INFO cpu");
    double sys = 0, user = 0;
    const char *p = strstr(r->str, "used_cpu_sys:");
    if (p != NULL)
      sys = strtod(p + 13, NULL);
    p = strstr(r->str, "used_cpu_user:");
    if (p != NULL)
      user = strtod(p + 14, NULL);
    freeReplyObject(r);
    total += sys + user;
  }
  return total;
}

/* DBSIZE summed over the monitored servers. */
static long long dbsize_all(void) {
  long long n = 0;
  for (int i = 0; i < nmons; i++) {
    redisReply *r = ctx_cmd(mons[i], "DBSIZE");
    n += r->integer;
    freeReplyObject(r);
  }
  return n;
}

/* ---- the cluster run's view of the cluster ---- */

#define MAX_MASTERS 16
static struct {
  int n;
  char host[MAX_MASTERS][64];
  int port[MAX_MASTERS];
  redisContext *ctx[MAX_MASTERS];
  signed char slot_node[16384]; /* master index per slot, -1: none */
} cl;

/* Redis Cluster's key hash: CRC16-CCITT (XMODEM) of the key or of its hash
 * tag (the first {...} with something inside), mod 16384. */
static unsigned key_slot(const char *key) {
  size_t len = strlen(key);
  const char *open = strchr(key, '{');
  if (open != NULL) {
    const char *close = strchr(open + 1, '}');
    if (close != NULL && close > open + 1) {
      key = open + 1;
      len = (size_t)(close - open - 1);
    }
  }
  unsigned crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (unsigned)(unsigned char)key[i] << 8;
    for (int b = 0; b < 8; b++)
      crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff
                           : (crc << 1) & 0xffff;
  }
  return crc & 16383;
}

/* Master index that owns the lock (key) of that name. */
static int node_of(const char *name) {
  return cl.slot_node[key_slot(name)];
}

/* INFO commandstats as name -> calls. */
typedef struct cmdstats {
  int n;
  char name[128][40];
  long long calls[128];
} cmdstats;

static void cmdstats_take(cmdstats *cs) {
  cs->n = 0;
  for (int m = 0; m < nmons; m++) {
    redisReply *r = ctx_cmd(mons[m], "INFO commandstats");
    for (char *line = r->str; line != NULL && *line;) {
      char *eol = strchr(line, '\n');
      char name[40];
      long long calls;
      if (sscanf(line, "cmdstat_%39[^:]:calls=%lld", name, &calls) == 2) {
        int k = 0;
        while (k < cs->n && strcmp(cs->name[k], name) != 0)
          k++;
        if (k < cs->n) {
          cs->calls[k] += calls;
        } else if (cs->n < 128) {
          snprintf(cs->name[cs->n], sizeof(cs->name[0]), "%s", name);
          cs->calls[cs->n++] = calls;
        }
      }
      line = eol ? eol + 1 : NULL;
    }
    freeReplyObject(r);
  }
}

static long long cmdstats_get(const cmdstats *cs, const char *name) {
  for (int i = 0; i < cs->n; i++)
    if (strcmp(cs->name[i], name) == 0)
      return cs->calls[i];
  return 0;
}

static long long cmdstats_delta(const cmdstats *a, const cmdstats *b,
                                const char *name) {
  return cmdstats_get(b, name) - cmdstats_get(a, name);
}

/* Commands a client sent itself (top level), from two snapshots.
 *
 * Redis 7 also counts in commandstats the commands a script calls
 * (hexists, hincrby, pexpire, pttl, get, set, del, publish...). The
 * library's top-level commands are EVALSHA/EVAL, the unlock latch DEL,
 * (UN)SUBSCRIBE and the handshake PING; queries are not used by the bench.
 * DEL is the only name used both ways: a release script's DEL always comes
 * with its PUBLISH, so script DELs = PUBLISHes and top-level DEL = del -
 * publish. The monitoring connection's INFO is not counted. */
typedef struct cmdcount {
  long long evalsha, eval, del_top, subscribe, unsubscribe, ping, other;
  long long total_top;
  long long all; /* everything commandstats counted (incl. in-script) */
} cmdcount;

/* Commands only rlock's scripts run (Redis 7 counts them in commandstats
 * too): RLock's (the transfer's subscriber count included: the library
 * never sends PUBSUB itself), and the fair lock's queue and deadline
 * commands and the read/write lock's hash and timeout-key commands (phase
 * K). */
static const char *const script_internal[] = {
    "pubsub|numsub", "pubsub|shardnumsub",
    "exists", "hexists", "hincrby", "pexpire", "pttl",   "get",
    "set",    "publish", "spublish", "hget",   "hset",   "hdel",
    "hlen",   "hgetall", "hkeys",   "incr",   "lpop",   "lrem",
    "lrange", "lindex",  "llen",    "rpush",  "zadd",   "zrem",
    "zincrby", "zscore", "zrange",  "zcard",  "zrangebyscore", NULL};

static void cmdcount_diff(const cmdstats *a, const cmdstats *b,
                          cmdcount *out) {
  memset(out, 0, sizeof(*out));
  out->evalsha = cmdstats_delta(a, b, "evalsha");
  out->eval = cmdstats_delta(a, b, "eval");
  out->del_top = cmdstats_delta(a, b, "del") -
                 cmdstats_delta(a, b, "publish") -
                 cmdstats_delta(a, b, "spublish");
  out->subscribe = cmdstats_delta(a, b, "subscribe") +
                   cmdstats_delta(a, b, "ssubscribe");
  out->unsubscribe = cmdstats_delta(a, b, "unsubscribe") +
                     cmdstats_delta(a, b, "sunsubscribe");
  out->ping = cmdstats_delta(a, b, "ping");
  for (int i = 0; i < b->n; i++) {
    long long d = b->calls[i] - cmdstats_get(a, b->name[i]);
    if (d == 0 || strcmp(b->name[i], "info") == 0)
      continue;
    out->all += d;
    bool known = false;
    static const char *const top[] = {"evalsha",    "eval",       "del",
                                      "subscribe",  "ssubscribe", "unsubscribe",
                                      "sunsubscribe", "ping",     NULL};
    for (int k = 0; top[k] != NULL && !known; k++)
      known = strcmp(b->name[i], top[k]) == 0;
    for (int k = 0; script_internal[k] != NULL && !known; k++)
      known = strcmp(b->name[i], script_internal[k]) == 0;
    if (!known)
      out->other += d;
  }
  out->total_top = out->evalsha + out->eval + out->del_top + out->subscribe +
                   out->unsubscribe + out->ping + out->other;
}

/* Waits (bounded) until the server's counts stop moving: fire-and-forget
 * commands (the latch DEL, the last UNSUBSCRIBE) may still be in flight
 * when the last blocking call returned. */
static void cmdstats_settled(cmdstats *cs) {
  cmdstats prev;
  cmdstats_take(&prev);
  for (int i = 0; i < 100; i++) {
    sleep_ns(20 * 1000000);
    cmdstats_take(cs);
    if (cmdstats_get(cs, "evalsha") == cmdstats_get(&prev, "evalsha") &&
        cmdstats_get(cs, "eval") == cmdstats_get(&prev, "eval") &&
        cmdstats_get(cs, "del") == cmdstats_get(&prev, "del") &&
        cmdstats_get(cs, "unlink") == cmdstats_get(&prev, "unlink") &&
        cmdstats_get(cs, "unsubscribe") == cmdstats_get(&prev, "unsubscribe") &&
        cmdstats_get(cs, "sunsubscribe") ==
            cmdstats_get(&prev, "sunsubscribe"))
      return;
    prev = *cs;
  }
}

/* Free-text lines printed under the table. */
static char notes[64][400];
static int nnotes;

static void note(const char *fmt, ...) {
  if (nnotes >= 64)
    return;
  int off = cluster_mode ? snprintf(notes[nnotes], sizeof(notes[0]),
                                    "[cluster] ")
            : tls_mode ? snprintf(notes[nnotes], sizeof(notes[0]), "[tls] ")
                       : 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(notes[nnotes++] + off, sizeof(notes[0]) - (size_t)off, fmt, ap);
  va_end(ap);
}

/* ---- CPU accounting: where a phase's CPU time went ---- */

static pid_t loop_tid; /* the main client's loop thread, 0 if unknown */

/* utime+stime of one of our threads, seconds (clock-tick resolution). */
static double thread_cpu_s(pid_t tid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NAN;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* comm may contain spaces */
  unsigned long long ut = 0, st = 0;
  if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                                 "%*u %llu %llu", &ut, &st) != 2)
    return NAN;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Thread ids of this process, to find the thread rlock_client_new made. */
static int list_tids(pid_t *out, int cap) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL && n < cap)
    if (e->d_name[0] != '.')
      out[n++] = (pid_t)atoi(e->d_name);
  if (d != NULL)
    closedir(d);
  return n;
}

typedef struct cpu_snap {
  int64_t t_ns;
  double client_s, loop_s, server_s;
  long long csw; /* the process's context switches, voluntary or not */
  long long busy_ticks, total_ticks; /* whole machine, /proc/stat */
} cpu_snap;

static void cpu_take(cpu_snap *s) {
  s->t_ns = now_ns();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  s->client_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  s->csw = (long long)ru.ru_nvcsw + (long long)ru.ru_nivcsw;
  s->loop_s = loop_tid > 0 ? thread_cpu_s(loop_tid) : NAN;
  s->server_s = server_cpu_s();
  s->busy_ticks = s->total_ticks = 0;
  FILE *f = fopen("/proc/stat", "r");
  if (f != NULL) {
    unsigned long long v[10] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
               &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
               &v[9]) >= 8) {
      for (int i = 0; i < 8; i++) /* guest time is inside user already */
        s->total_ticks += (long long)v[i];
      s->busy_ticks = s->total_ticks - (long long)v[3] - (long long)v[4];
    }
    fclose(f);
  }
}

/* The client's context switches per unit of work between two snapshots,
 * as the last cpu_note or s2_run measured them: each is a thread that
 * slept and was woken (or preempted), a count that moves far less with
 * the machine's load than the time per unit does. */
static double last_csw = NAN;

static void csw_per(const cpu_snap *a, const cpu_snap *b, double units) {
  last_csw = units > 0 ? (double)(b->csw - a->csw) / units : NAN;
}

/* A note: CPU per unit of work, split by who spent it. */
/* Returns the client's CPU (user+sys of the whole process) per unit, us. */
static double cpu_note(const char *what, const cpu_snap *a,
                       const cpu_snap *b, double units, const char *unit) {
  double wall = (double)(b->t_ns - a->t_ns) / 1e9;
  double busy = b->total_ticks > a->total_ticks
                    ? (double)(b->busy_ticks - a->busy_ticks) /
                          (double)(b->total_ticks - a->total_ticks)
                    : NAN;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  note("%s CPU per %s: client %.1f us (loop thread %.1f us = %.0f%% of a "
       "core), redis-server %.1f us (%.0f%% of a core); machine %.0f%% busy "
       "of %ld CPUs",
       what, unit, (b->client_s - a->client_s) * 1e6 / units,
       (b->loop_s - a->loop_s) * 1e6 / units,
       (b->loop_s - a->loop_s) / wall * 100,
       (b->server_s - a->server_s) * 1e6 / units,
       (b->server_s - a->server_s) / wall * 100, busy * 100, ncpu);
  csw_per(a, b, units);
  return (b->client_s - a->client_s) * 1e6 / units;
}

/* ---- result table ---- */

enum { T_NONE, T_LE, T_GE };

typedef struct row {
  char id[8];
  char metric[72];
  double value;
  char unit[12];
  double base;       /* NAN: none */
  char base_desc[48];
  double ratio;      /* NAN: none */
  int target_kind;   /* T_* */
  bool target_on_ratio;
  double target;
  int status; /* -1 none, 0 MISS, 1 PASS */
  bool tls;   /* measured over TLS (id starts with "T") */
  bool cluster; /* measured on the cluster (id starts with "C-") */
} row;

static row rows[192];
static int nrows;
static row *add_row(const char *id, const char *metric, double value,
                    const char *unit, double base, const char *base_desc,
                    double ratio) {
  if (nrows >= 192)
    die("too many rows");
  row *r = &rows[nrows++];
  memset(r, 0, sizeof(*r));
  snprintf(r->id, sizeof(r->id), "%s%s", run_tag(), id);
  r->tls = tls_mode;
  r->cluster = cluster_mode;
  snprintf(r->metric, sizeof(r->metric), "%s", metric);
  r->value = value;
  snprintf(r->unit, sizeof(r->unit), "%s", unit);
  r->base = base;
  snprintf(r->base_desc, sizeof(r->base_desc), "%s", base_desc);
  r->ratio = ratio;
  r->target_kind = T_NONE;
  r->status = -1;
  return r;
}

static void set_target(row *r, int kind, double target, bool on_ratio) {
  if (r->tls || r->cluster)
    return; /* informational: the targets are for one server, plain TCP */
  r->target_kind = kind;
  r->target = target;
  r->target_on_ratio = on_ratio;
  double x = on_ratio ? r->ratio : r->value;
  if (isnan(x))
    r->status = -1; /* no baseline measured in this run (--only) */
  else
    r->status = kind == T_LE ? x <= target : x >= target;
}

static void fmt_num(char *buf, size_t cap, double x) {
  if (isnan(x))
    snprintf(buf, cap, "-");
  else if (fabs(x) >= 1000)
    snprintf(buf, cap, "%.0f", x);
  else if (fabs(x) >= 100)
    snprintf(buf, cap, "%.1f", x);
  else if (fabs(x) >= 10)
    snprintf(buf, cap, "%.2f", x);
  else
    snprintf(buf, cap, "%.3f", x);
}

static void fmt_target(const row *r, char *buf, size_t cap) {
  if (r->target_kind == T_NONE) {
    snprintf(buf, cap, "-");
    return;
  }
  char num[32];
  fmt_num(num, sizeof(num), r->target);
  snprintf(buf, cap, "%s%s %s", r->target_on_ratio ? "ratio " : "",
           r->target_kind == T_LE ? "<=" : ">=", num);
}

static const char *status_text(const row *r) {
  return r->status < 0 ? "-" : (r->status ? "PASS" : "MISS");
}

static void print_table(void) {
  printf("\n%-5s %-46s %12s %-7s %12s %-26s %7s %-14s %s\n", "id", "metric",
         "value", "unit", "baseline", "baseline is", "ratio", "target",
         "result");
  for (int i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    char v[32], b[32], q[32], t[64];
    fmt_num(v, sizeof(v), r->value);
    fmt_num(b, sizeof(b), r->base);
    fmt_num(q, sizeof(q), r->ratio);
    fmt_target(r, t, sizeof(t));
    printf("%-5s %-46s %12s %-7s %12s %-26s %7s %-14s %s\n", r->id, r->metric,
           v, r->unit, b, r->base_desc[0] ? r->base_desc : "-", q, t,
           status_text(r));
  }
  for (int i = 0; i < nnotes; i++)
    printf("note: %s\n", notes[i]);
}

/* Each TLS row beside its plain TCP row (same id after the "T", same
 * metric, same occurrence of that pair: S2 repeats its sub-rows per thread
 * count): both values and TLS / TCP. cluster: each cluster row beside its
 * standalone plain TCP row (same id after the "C-"), cluster / standalone. */
static void print_beside(bool cluster) {
  bool any = false;
  size_t skip = cluster ? 2 : 1;
  for (int i = 0; i < nrows; i++) {
    const row *t = &rows[i];
    if (cluster ? !t->cluster : !t->tls)
      continue;
    int nth = 0; /* earlier rows of this run with the same id and metric */
    for (int k = 0; k < i; k++)
      if (rows[k].tls == t->tls && rows[k].cluster == t->cluster &&
          strcmp(rows[k].id, t->id) == 0 &&
          strcmp(rows[k].metric, t->metric) == 0)
        nth++;
    const row *p = NULL;
    for (int k = 0; k < nrows && p == NULL; k++)
      if (!rows[k].tls && !rows[k].cluster &&
          strcmp(rows[k].id, t->id + skip) == 0 &&
          strcmp(rows[k].metric, t->metric) == 0 && nth-- == 0)
        p = &rows[k];
    if (p == NULL)
      continue;
    if (!any && cluster)
      printf("\nCluster beside standalone (plain TCP, same run; ratios "
             "in the table are to each one's own baseline)\n"
             "%-5s %-46s %12s %12s %-7s %9s\n",
             "id", "metric", "standalone", "cluster", "unit", "cl/sa");
    else if (!any)
      printf("\nTLS beside plain TCP (same server, same run)\n"
             "%-5s %-46s %12s %12s %-7s %9s\n",
             "id", "metric", "tcp", "tls", "unit", "tls/tcp");
    any = true;
    char a[32], b[32], q[32];
    fmt_num(a, sizeof(a), p->value);
    fmt_num(b, sizeof(b), t->value);
    fmt_num(q, sizeof(q), p->value != 0 ? t->value / p->value : NAN);
    printf("%-5s %-46s %12s %12s %-7s %9s\n", p->id, p->metric, a, b,
           p->unit, q);
  }
}

static void csv_num(char *buf, size_t size, const char *fmt, double x) {
  if (isnan(x))
    buf[0] = '\0';
  else
    snprintf(buf, size, fmt, x);
}

static void csv_field(FILE *f, const char *s, bool last) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
  fputc(last ? '\n' : ',', f);
}

static void write_csv(const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "rlock-bench: cannot write %s: %s\n", path,
            strerror(errno));
    return;
  }
  fprintf(f, "id,metric,value,unit,baseline,baseline_is,ratio,target,"
             "result,transport\n");
  for (int i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    char v[32], b[32], q[32], t[64];
    /* NaN: an empty field (one format per call: clang -Wformat-zero-length
     * refuses an empty format string even in a conditional). */
    csv_num(v, sizeof(v), "%.6g", r->value);
    csv_num(b, sizeof(b), "%.6g", r->base);
    csv_num(q, sizeof(q), "%.4g", r->ratio);
    fmt_target(r, t, sizeof(t));
    csv_field(f, r->id, false);
    csv_field(f, r->metric, false);
    csv_field(f, v, false);
    csv_field(f, r->unit, false);
    csv_field(f, b, false);
    csv_field(f, r->base_desc, false);
    csv_field(f, q, false);
    csv_field(f, r->target_kind == T_NONE ? "" : t, false);
    csv_field(f, r->status < 0 ? "" : status_text(r), false);
    csv_field(f, r->cluster ? "cluster" : r->tls ? "tls" : "tcp", true);
  }
  fclose(f);
  printf("csv: %s\n", path);
}

/* ---- B: the raw baseline ---- */

static struct {
  bool have;
  double serial_rps, serial_p50_ms, serial_rtt_us; /* -c 1 */
  double c8_rps;
  double pipe_rps; /* -P 16 -c 50: the server's capacity for the script */
  char sha[41];
  int node; /* cluster run: the master C-B1 measured (owns C-S1's lock) */
} base;

typedef struct rb_result {
  double rps, avg_ms, p50_ms, p99_ms;
} rb_result;

/* The S1 lock's name (get_lock(c, "s1")): C-B1 runs on its master, with
 * its hash tag. */
static void s1_lock_name(char *buf, size_t cap) {
  snprintf(buf, cap, "%ss1", cfg.prefix);
}

static rb_result redis_benchmark(long n, int conns, int pipeline) {
  char cmd[2048];
  char pipe_opt[16] = "";
  if (pipeline > 1)
    snprintf(pipe_opt, sizeof(pipe_opt), "-P %d", pipeline);
  /* -r randomizes __rand_int__ so most calls take a fresh key (acquire
   * path: EXISTS, HINCRBY, PEXPIRE); the short lease keeps the keyspace
   * from filling up. Same owner length as the library's owners. */
  char tls_opt[600] = "";
  if (tls_mode && cfg.tls_ca != NULL)
    snprintf(tls_opt, sizeof(tls_opt), "--tls --cacert '%s'", cfg.tls_ca);
  else if (tls_mode)
    snprintf(tls_opt, sizeof(tls_opt), "--tls");
  if (cluster_mode && conns == 1) {
    /* The serial round trip to the master S1's lock lives on: straight to
     * it, every key in that lock's slot (its name as hash tag). */
    char s1[160];
    s1_lock_name(s1, sizeof(s1));
    snprintf(cmd, sizeof(cmd),
             "'%s' -h %s -p %d -n %ld -c %d %s -r 1000000 --csv "
             "EVALSHA %s 1 '{%s}base:__rand_int__' 5000 %s",
             cfg.redis_benchmark, cl.host[base.node], cl.port[base.node], n,
             conns, pipe_opt, base.sha, s1, OWNER_SAMPLE);
  } else if (cluster_mode) {
    /* redis-benchmark --cluster: clients spread over the masters, each
     * sending to its own node's slots ({tag}). */
    snprintf(cmd, sizeof(cmd),
             "'%s' --cluster -h %s -p %d -n %ld -c %d %s -r 1000000 --csv "
             "EVALSHA %s 1 '{tag}%sbase:__rand_int__' 5000 %s",
             cfg.redis_benchmark, cl.host[0], cl.port[0], n, conns, pipe_opt,
             base.sha, cfg.prefix, OWNER_SAMPLE);
  } else {
    snprintf(cmd, sizeof(cmd),
             "'%s' -h %s -p %d %s -n %ld -c %d %s -r 1000000 --csv "
             "EVALSHA %s 1 %sbase:__rand_int__ 5000 %s",
             cfg.redis_benchmark, cfg.host,
             tls_mode ? cfg.tls_port : cfg.port, tls_opt, n, conns, pipe_opt,
             base.sha, cfg.prefix, OWNER_SAMPLE);
  }
  cmdstats before, after;
  cmdstats_take(&before);
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    die("cannot run %s", cfg.redis_benchmark);
  char line[1024];
  rb_result res = {NAN, NAN, NAN, NAN};
  bool found = false;
  while (fgets(line, sizeof(line), p) != NULL) {
    /* "EVALSHA ...","rps","avg","min","p50","p95","p99","max" */
    if (strncmp(line, "\"EVALSHA", 8) != 0)
      continue;
    double f[8];
    int k = 0;
    for (char *q = line; q != NULL && k < 8; q = strstr(q, ",\"")) {
      if (*q == ',')
        q++;
      if (*q == '"')
        q++;
      f[k] = k == 0 ? 0 : strtod(q, NULL);
      k++;
      q = strchr(q, '"');
    }
    if (k >= 7) {
      res.rps = f[1];
      res.avg_ms = f[2];
      res.p50_ms = f[4];
      res.p99_ms = f[6];
      found = true;
    }
  }
  int st = pclose(p);
  if (!found || st != 0)
    die("redis-benchmark failed (exit status %d): %s", st, cmd);
  /* Every call must have run the script and taken the acquire path. */
  cmdstats_take(&after);
  long long evals = cmdstats_delta(&before, &after, "evalsha");
  long long incrs = cmdstats_delta(&before, &after, "hincrby");
  if (evals < n || incrs != evals)
    die("baseline: %lld EVALSHA for %ld requests, %lld of them acquired",
        evals, n, incrs);
  return res;
}

/* Runs a short calibration, then a run sized to last ~base_seconds. */
static rb_result redis_benchmark_timed(int conns, int pipeline, long calib_n) {
  rb_result cal = redis_benchmark(calib_n, conns, pipeline);
  long n = (long)(cal.rps * cfg.base_seconds);
  if (n < calib_n)
    n = calib_n;
  return redis_benchmark(n, conns, pipeline);
}

static void phase_baseline(void) {
  const bench_script *acq = &acquire_script;
  for (int i = 0; i < nmons; i++) { /* cluster: on every master */
    redisReply *r = ctx_cmd(mons[i], "SCRIPT LOAD %s", acq->body);
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, acq->sha) != 0)
      die("SCRIPT LOAD returned %s, the library computes %s",
          r->type == REDIS_REPLY_STRING ? r->str : "?", acq->sha);
    freeReplyObject(r);
  }
  snprintf(base.sha, sizeof(base.sha), "%s", acq->sha);
  if (cluster_mode) {
    char s1[160];
    s1_lock_name(s1, sizeof(s1));
    base.node = node_of(s1);
  }

  if (cluster_mode)
    printf("C-B: redis-benchmark EVALSHA %.12s... (the library's acquire "
           "script): -c 1 on master %s:%d (S1's lock), the rest --cluster\n",
           base.sha, cl.host[base.node], cl.port[base.node]);
  else
    printf("%sB: redis-benchmark%s EVALSHA %.12s... (the library's acquire "
           "script)\n", run_tag(), tls_mode ? " --tls" : "", base.sha);
  fflush(stdout);
  long long keys_before = dbsize_all();
  rb_result c1 = redis_benchmark_timed(1, 1, 2000);
  rb_result c8 = redis_benchmark_timed(8, 1, 10000);
  rb_result pp = redis_benchmark_timed(50, 16, 40000);
  /* The baseline leaves up to a few hundred thousand keys with a 5 s lease;
   * while the server expires them it answers everyone more slowly, and the
   * phase after B (S1) would measure that. Wait until they are gone. */
  int64_t w0 = now_ns();
  long long left = 0;
  for (int i = 0; i < 400; i++) {
    left = dbsize_all();
    if (left <= keys_before)
      break;
    sleep_ns(50 * 1000000);
  }
  /* ... and until it is idle again (it shrinks and rehashes its tables
   * after the expiry): below 10 % of a core over 200 ms. */
  double idle_pct = 100;
  for (int i = 0; i < 60; i++) {
    double c0 = server_cpu_s();
    sleep_ns(200 * 1000000);
    idle_pct = (server_cpu_s() - c0) / 0.2 * 100;
    if (idle_pct < 10)
      break;
  }
  note("%sB: waited %.1f s for the baseline's keys to expire (%lld left) "
       "and the server to settle (%.0f%% of a core)",
       run_tag(), (double)(now_ns() - w0) / 1e9,
       left - keys_before > 0 ? left - keys_before : 0, idle_pct);
  base.have = true;
  base.serial_rps = c1.rps;
  base.serial_p50_ms = c1.p50_ms;
  base.serial_rtt_us = 1e6 / c1.rps;
  base.c8_rps = c8.rps;
  base.pipe_rps = pp.rps;

  add_row("B1", "EVALSHA acquire, 1 connection (serial)", c1.rps, "ops/s",
          NAN, "", NAN);
  if (cluster_mode)
    snprintf(rows[nrows - 1].base_desc, sizeof(rows[0].base_desc),
             "(master :%d, S1's lock)", cl.port[base.node]);
  add_row("B1", "  serial round trip (1e6 / ops/s)", base.serial_rtt_us, "us",
          NAN, "", NAN);
  add_row("B1", "  serial round trip p50 (redis-benchmark)",
          c1.p50_ms * 1000, "us", NAN, "", NAN);
  add_row("B1", "  serial round trip p99 (redis-benchmark)",
          c1.p99_ms * 1000, "us", NAN, "", NAN);
  add_row("B2", "EVALSHA acquire, 8 connections", c8.rps, "ops/s", NAN, "",
          NAN);
  if (cluster_mode)
    snprintf(rows[nrows - 1].base_desc, sizeof(rows[0].base_desc),
             "(--cluster, %d masters)", cl.n);
  add_row("B3", "EVALSHA acquire, -P 16 -c 50 (server capacity)", pp.rps,
          "ops/s", NAN, "", NAN);
  if (cluster_mode) {
    snprintf(rows[nrows - 1].base_desc, sizeof(rows[0].base_desc),
             "(--cluster, %d masters)", cl.n);
    note("C-B1 is redis-benchmark -c 1 straight to master %s:%d, which owns "
         "C-S1's lock (keys with that lock's hash tag); C-B2/C-B3 are "
         "redis-benchmark --cluster over all %d masters; redis-server CPU "
         "in the cluster notes is the sum over the masters",
         cl.host[base.node], cl.port[base.node], cl.n);
  }
}

/* ---- clients and locks ---- */

/* A client variant for the issue-13 comparisons: -1 keeps the default. */
typedef struct variant {
  int spin_us;     /* rlock_options.spin_us */
  int handoff_max; /* rlock_options.handoff_max */
} variant;
static const variant V_DEFAULT = {-1, -1};
static const variant V_SPIN_OFF = {0, -1};
static const variant V_HANDOFF_OFF = {-1, 0};

/* watchdog_ms <= 0: the default. track: remember its loop thread for CPU
 * accounting. */
static rlock_client *open_client_v(int64_t watchdog_ms, bool track,
                                   variant v) {
  rlock_options o;
  rlock_options_init(&o);
  char uri[1100];
  if (cluster_mode)
    snprintf(uri, sizeof(uri), "redis+cluster://%s", cfg.cluster);
  else
    snprintf(uri, sizeof(uri), "%s://%s:%d", tls_mode ? "rediss" : "redis",
             cfg.host, tls_mode ? cfg.tls_port : cfg.port);
  o.uri = uri;
  if (tls_mode)
    o.tls_ca_file = cfg.tls_ca;
  o.client_name = "rlock-bench";
  if (watchdog_ms > 0)
    o.watchdog_timeout_ms = watchdog_ms;
  if (v.spin_us >= 0)
    o.spin_us = v.spin_us;
  if (v.handoff_max >= 0)
    o.handoff_max = v.handoff_max;
  pid_t before[MAX_THREADS * 2], after[MAX_THREADS * 2];
  int nb = list_tids(before, MAX_THREADS * 2);
  rlock_client *c = NULL;
  check_rc(rlock_client_new(&c, &o), "rlock_client_new");
  int na = list_tids(after, MAX_THREADS * 2);
  int found = 0;
  pid_t tid = 0;
  for (int i = 0; i < na; i++) {
    bool old = false;
    for (int k = 0; k < nb && !old; k++)
      old = after[i] == before[k];
    if (!old) {
      tid = after[i];
      found++;
    }
  }
  if (track)
    loop_tid = found == 1 ? tid : 0;
  return c;
}

static rlock_client *open_client(int64_t watchdog_ms, bool track) {
  return open_client_v(watchdog_ms, track, V_DEFAULT);
}

/* The kind get_lock() makes (phase K switches it to the fair and the write
 * lock); kind_label names it in the rows, NULL for RLock. */
static int (*lock_getter)(rlock_client *, const char *, rlock **) = rlock_new;
static const char *kind_label;

static rlock *get_lock(rlock_client *c, const char *fmt, ...) {
  char name[256];
  int off = snprintf(name, sizeof(name), "%s", cfg.prefix);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name + off, sizeof(name) - (size_t)off, fmt, ap);
  va_end(ap);
  rlock *l = NULL;
  check_rc(lock_getter(c, name, &l), "rlock_new");
  return l;
}

static void lock_pair(rlock *l) {
  check_rc(rlock_lock(l, LEASE_MS), "rlock_lock");
  int rc = rlock_unlock(l);
  check_rc(rc, "rlock_unlock");
  if (rc != 0)
    die("rlock_unlock returned %d, expected 0", rc);
}

/* Cluster run: a note naming the master that holds lock prefix+suffix. */
static void note_lock_node(const char *id, const char *suffix) {
  if (!cluster_mode)
    return;
  char name[256];
  snprintf(name, sizeof(name), "%s%s", cfg.prefix, suffix);
  int n = node_of(name);
  note("%s%s: its lock is on master %s:%d (slot %u)%s", run_tag(), id,
       cl.host[n], cl.port[n], key_slot(name),
       base.have && n == base.node ? ", the one C-B1 measured" : "");
}

static double base_pair_us(void) {
  return base.have ? 2 * base.serial_rtt_us : NAN;
}

/* ---- S1: uncontended, one thread ---- */

/* The library's wire traffic for one lock+unlock, replayed serially on one
 * synchronous hiredis connection: EVALSHA acquire, EVALSHA release, and the
 * latch DEL, which (as the library does) is not waited for but goes out
 * ahead of the next acquire. Separates the cost of the commands themselves
 * from the cost of the client's threads. Returns pairs/s. */
static double wire_pairs(double seconds, samples *lat) {
  const bench_script *acq = &acquire_script;
  const bench_script *rel = &release_script;
  freeReplyObject(mon_cmd("SCRIPT LOAD %s", acq->body));
  freeReplyObject(mon_cmd("SCRIPT LOAD %s", rel->body));
  char name[128], channel[192], latch[256];
  snprintf(name, sizeof(name), "%swire", cfg.prefix);
  snprintf(channel, sizeof(channel), "redisson_lock__channel:{%s}", name);
  char lease[16];
  snprintf(lease, sizeof(lease), "%d", LEASE_MS);
  /* Pre-split argument vectors, as the library sends them (no format
   * strings: printf-style formatting would bill this reference for work the
   * library does not do). */
  const char *acq_argv[6] = {"EVALSHA", acq->sha, "1", name, lease,
                             OWNER_SAMPLE};
  const char *rel_argv[11] = {"EVALSHA", rel->sha, "3",   name,
                              channel,   latch,    "0",   lease,
                              OWNER_SAMPLE, "PUBLISH", "18000"};
  const char *del_argv[2] = {"DEL", latch};
  size_t acq_len[6], rel_len[11], del_len[2];
  for (int i = 0; i < 6; i++)
    acq_len[i] = strlen(acq_argv[i]);
  long n = 0;
  bool del_pending = false;
  redisReply *r;
  int64_t start = now_ns(), end = start + (int64_t)(seconds * 1e9), t;
  do {
    int64_t t0 = now_ns();
    redisAppendCommandArgv(mon, 6, acq_argv, acq_len);
    if (del_pending) {
      if (redisGetReply(mon, (void **)&r) != REDIS_OK)
        die("wire: %s", mon->errstr);
      freeReplyObject(r);
    }
    if (redisGetReply(mon, (void **)&r) != REDIS_OK)
      die("wire: %s", mon->errstr);
    if (r->type != REDIS_REPLY_NIL)
      die("wire: acquire script did not acquire (reply type %d)", r->type);
    freeReplyObject(r);
    snprintf(latch, sizeof(latch), "redisson_unlock_latch:{%s}:%032lx", name,
             n);
    for (int i = 0; i < 11; i++)
      rel_len[i] = strlen(rel_argv[i]);
    redisAppendCommandArgv(mon, 11, rel_argv, rel_len);
    if (redisGetReply(mon, (void **)&r) != REDIS_OK || r->type !=
        REDIS_REPLY_INTEGER || r->integer != 1)
      die("wire: release script did not release");
    freeReplyObject(r);
    del_len[0] = 3;
    del_len[1] = strlen(latch);
    redisAppendCommandArgv(mon, 2, del_argv, del_len);
    del_pending = true;
    t = now_ns();
    if (lat != NULL)
      samples_push(lat, t - t0);
    n++;
  } while (t < end);
  if (redisGetReply(mon, (void **)&r) == REDIS_OK)
    freeReplyObject(r);
  return (double)n / ((double)(t - start) / 1e9);
}

typedef struct s1_result {
  double rate, mean_us, p50, p99, cpu_us; /* cpu_us: client CPU per pair */
} s1_result;

/* lock+unlock on one thread for `seconds`, on lock `l`. */
static s1_result s1_measure(rlock *l, const char *what, double seconds) {
  samples s = {0};
  cpu_snap c0, c1;
  cpu_take(&c0);
  int64_t start = now_ns(), end = start + (int64_t)(seconds * 1e9), t;
  do {
    int64_t t0 = now_ns();
    lock_pair(l);
    t = now_ns();
    samples_push(&s, t - t0);
  } while (t < end);
  cpu_take(&c1);
  s1_result r;
  double secs = (double)(t - start) / 1e9;
  r.rate = (double)s.n / secs;
  r.mean_us = 1e6 / r.rate;
  r.p50 = samples_pct_us(&s, 50);
  r.p99 = samples_pct_us(&s, 99);
  r.cpu_us = cpu_note(what, &c0, &c1, (double)s.n, "pair");
  free(s.v);
  return r;
}

/* S1 again on a client with spin_us = 0 (park at once), in the same run. */
static s1_result s1_spin_off(void) {
  pid_t keep = loop_tid;
  rlock_client *c = open_client_v(0, true, V_SPIN_OFF);
  rlock *l = get_lock(c, "s1off");
  for (int i = 0; i < 300; i++)
    lock_pair(l);
  s1_result r = s1_measure(l, "S1 spin off", cfg.seconds);
  rlock_free(l);
  rlock_client_free(c);
  loop_tid = keep;
  return r;
}

static void phase_s1(rlock_client *c) {
  rlock *l = get_lock(c, "s1");
  for (int i = 0; i < 300; i++) /* warm-up: loads the release script too */
    lock_pair(l);
  /* The sync hiredis reference is plain TCP (the monitoring connection):
   * not repeated in the TLS run. */
  samples ws = {0};
  bool extra_run = tls_mode || cluster_mode;
  double wire_rate = extra_run ? NAN : wire_pairs(cfg.seconds / 2, &ws);
  double wire_p50 = extra_run ? NAN : samples_pct_us(&ws, 50);
  free(ws.v);
  s1_result on = s1_measure(l, "S1", cfg.seconds);
  rlock_free(l);

  double bp = base_pair_us();
  add_row("S1", "uncontended lock+unlock, 1 thread", on.rate, "pairs/s",
          base.have ? 1e6 / bp : NAN, "serial ops/s / 2",
          base.have ? on.rate / (1e6 / bp) : NAN);
  add_row("S1", "  pair time (mean)", on.mean_us, "us", bp,
          "2 serial round trips", on.mean_us / bp);
  /* Judged on medians (on a shared machine means follow the noise tail).
   * Issue #4 asked <= 1.15 x two serial round trips; issue #13 (spin then
   * park) asks <= 1.0. */
  double bp50 = base.have ? 2 * base.serial_p50_ms * 1000 : NAN;
  row *r = add_row("S1", "  pair time p50", on.p50, "us", bp50,
                   "2 x serial p50", on.p50 / bp50);
  set_target(r, T_LE, 1.0, true);
  add_row("S1", "  pair time p99", on.p99, "us", NAN, "", NAN);
  add_row("S1", "  client CPU per pair (user+sys)", on.cpu_us, "us", NAN, "",
          NAN);
  note_lock_node("S1", "s1");
  if (extra_run)
    return;
  add_row("S1", "  same 3 cmds, sync hiredis: pair mean", 1e6 / wire_rate,
          "us", bp, "2 serial round trips", 1e6 / wire_rate / bp);
  add_row("S1", "  same 3 cmds, sync hiredis: pair p50", wire_p50, "us",
          NAN, "", NAN);

  s1_result off = s1_spin_off();
  add_row("S1off", "S1 with spin off (spin_us 0)", off.rate, "pairs/s",
          base.have ? 1e6 / bp : NAN, "serial ops/s / 2",
          base.have ? off.rate / (1e6 / bp) : NAN);
  add_row("S1off", "  pair time p50", off.p50, "us", bp50, "2 x serial p50",
          off.p50 / bp50);
  add_row("S1off", "  client CPU per pair (user+sys)", off.cpu_us, "us", NAN,
          "", NAN);
  add_row("S1off", "  spin on: p50 / spin-off p50", on.p50 / off.p50, "x",
          NAN, "", NAN);
  add_row("S1off", "  spin on: CPU per pair / spin-off's", on.cpu_us /
          off.cpu_us, "x", NAN, "", NAN);
  printf("S1: spin on p50 %.0f us, spin off p50 %.0f us\n", on.p50, off.p50);
  fflush(stdout);
}

/* ---- S2: distinct locks, N threads, one client ---- */

typedef struct s2_worker {
  pthread_t tid;
  rlock *lock;
  pthread_barrier_t *start;
  atomic_bool *stop;
  long pairs;
} s2_worker;

static void *s2_main(void *arg) {
  s2_worker *w = arg;
  pthread_barrier_wait(w->start);
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    lock_pair(w->lock);
    w->pairs++;
  }
  return NULL;
}

static long s2_peak_rss;

static rlock_client *s2_extra[8]; /* BENCH_S2_CLIENTS > 1: diagnostic only */
static int s2_nextra;

/* Returns pairs/s; *cpu_us: the client's CPU per pair. note_cpu: also a
 * note with the split (loop thread, server). */
static double s2_run(rlock_client *c, const char *id, int nthreads,
                     bool note_cpu, double *cpu_us) {
  s2_worker w[MAX_THREADS];
  pthread_barrier_t start;
  atomic_bool stop = false;
  pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
  for (int i = 0; i < nthreads; i++) {
    rlock_client *ci = c;
    if (s2_nextra > 0 && i % (s2_nextra + 1) != 0)
      ci = s2_extra[i % (s2_nextra + 1) - 1];
    w[i] = (s2_worker){.lock = get_lock(ci, "%s:%d:%d", id, nthreads, i),
                       .start = &start,
                       .stop = &stop};
    if (pthread_create(&w[i].tid, NULL, s2_main, &w[i]) != 0)
      die("pthread_create failed");
  }
  cpu_snap c0, c1;
  cpu_take(&c0);
  pthread_barrier_wait(&start);
  int64_t t0 = now_ns(), end = t0 + (int64_t)(cfg.seconds * 1e9);
  while (now_ns() < end) {
    sleep_ns(50 * 1000000);
    long kib = rss_kib();
    if (kib > s2_peak_rss)
      s2_peak_rss = kib;
  }
  atomic_store(&stop, true);
  long pairs = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    pairs += w[i].pairs;
    rlock_free(w[i].lock);
  }
  double secs = (double)(now_ns() - t0) / 1e9;
  cpu_take(&c1);
  *cpu_us = (c1.client_s - c0.client_s) * 1e6 / (double)pairs;
  csw_per(&c0, &c1, (double)pairs);
  if (note_cpu) {
    char what[40];
    snprintf(what, sizeof(what), "%s (%d threads)", id, nthreads);
    cpu_note(what, &c0, &c1, (double)pairs, "pair");
  }
  pthread_barrier_destroy(&start);
  return (double)pairs / secs;
}

/* S2 at 8 and 32 threads on a client with spin_us = 0, same run. */
static void s2_spin_off(const double *on_rate, const int *counts,
                        int ncounts) {
  pid_t keep = loop_tid;
  rlock_client *c = open_client_v(0, true, V_SPIN_OFF);
  double cap = base.have ? base.pipe_rps / 2 : NAN;
  static const int offs[] = {8, 32};
  for (int k = 0; k < 2; k++) {
    double cpu;
    double rate = s2_run(c, "S2off", offs[k], offs[k] == 32, &cpu);
    char metric[72];
    snprintf(metric, sizeof(metric), "S2 with spin off, %d threads", offs[k]);
    add_row("S2off", metric, rate, "pairs/s", cap, "pipelined capacity / 2",
            rate / cap);
    add_row("S2off", "  client CPU per pair (user+sys)", cpu, "us", NAN, "",
            NAN);
    add_row("S2off", "  client context switches per pair", last_csw, "n", NAN,
            "", NAN);
    printf("S2off: %2d threads: %.0f pairs/s\n", offs[k], rate);
    fflush(stdout);
    for (int i = 0; i < ncounts; i++) {
      if (counts[i] != offs[k])
        continue;
      snprintf(metric, sizeof(metric), "  %d threads: spin on / spin off",
               offs[k]);
      row *r = add_row("S2off", metric, on_rate[i] / rate, "x", NAN, "", NAN);
      /* issue #13: with 32 threads on 2 CPUs spinning must not cost
       * throughput. Equal figures land either side of 1.0 on this noisy
       * machine; 0.95 allows that much and no more. */
      if (offs[k] == 32)
        set_target(r, T_GE, 0.95, false);
    }
  }
  rlock_client_free(c);
  loop_tid = keep;
}

static void phase_s2(rlock_client *c) {
  int counts[16], ncounts = 0;
  double rates[16];
  const char *list = env_or("BENCH_S2_THREADS", "1,8,32,64");
  for (const char *p = list; *p && ncounts < 16;) {
    int n = atoi(p);
    if (n < 1 || n > MAX_THREADS)
      die("BENCH_S2_THREADS: bad thread count in '%s'", list);
    counts[ncounts++] = n;
    p = strchr(p, ',');
    if (p == NULL)
      break;
    p++;
  }
  s2_nextra = atoi(env_or("BENCH_S2_CLIENTS", "1")) - 1;
  if (s2_nextra < 0 || s2_nextra > 8)
    die("BENCH_S2_CLIENTS must be 1..9");
  for (int i = 0; i < s2_nextra; i++)
    s2_extra[i] = open_client(0, false);
  if (s2_nextra > 0)
    note("S2 ran on %d clients (BENCH_S2_CLIENTS), not one: diagnostic",
         s2_nextra + 1);
  double cap = base.have ? base.pipe_rps / 2 : NAN;
  for (int i = 0; i < ncounts; i++) {
    double cpu;
    double rate = s2_run(c, "S2", counts[i], counts[i] == 32, &cpu);
    rates[i] = rate;
    char metric[72];
    snprintf(metric, sizeof(metric), "distinct locks, %d thread%s", counts[i],
             counts[i] == 1 ? "" : "s");
    row *r = add_row("S2", metric, rate, "pairs/s", cap,
                     "pipelined capacity / 2", rate / cap);
    if (counts[i] == 8) /* issues #4, #13: 8 threads >= 60 % of cap / 2 */
      set_target(r, T_GE, 0.6, true);
    add_row("S2", "  client CPU per pair (user+sys)", cpu, "us", NAN, "",
            NAN);
    add_row("S2", "  client context switches per pair", last_csw, "n", NAN, "",
            NAN);
    printf("%sS2: %2d threads: %.0f pairs/s\n", run_tag(), counts[i], rate);
    fflush(stdout);
    if (cluster_mode && counts[i] > 1) {
      /* One lock per thread: their names hash to different masters. */
      int per[MAX_MASTERS] = {0};
      for (int t = 0; t < counts[i]; t++) {
        char name[256];
        snprintf(name, sizeof(name), "%sS2:%d:%d", cfg.prefix, counts[i], t);
        per[node_of(name)]++;
      }
      char spread[256] = "";
      size_t len = 0;
      for (int m = 0; m < cl.n && len < sizeof(spread); m++)
        len += (size_t)snprintf(spread + len, sizeof(spread) - len, "%s:%d %d",
                                m ? ", " : "", cl.port[m], per[m]);
      note("C-S2 %d threads: the %d locks hash to different masters: %s",
           counts[i], counts[i], spread);
    }
  }
  for (int i = 0; i < s2_nextra; i++)
    rlock_client_free(s2_extra[i]);
  if (!tls_mode && !cluster_mode && s2_nextra == 0)
    s2_spin_off(rates, counts, ncounts);
}

/* ---- S3: handoff ping-pong between two threads ---- */

static void correctness_failure(const char *phase, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "\n*** rlock-bench: MUTUAL EXCLUSION VIOLATED in %s: ",
          phase);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " ***\n");
  va_end(ap);
  fflush(NULL);
  abort();
}

static atomic_int holders; /* threads inside a critical section right now */

static void enter_critical(const char *phase) {
  int was = atomic_fetch_add(&holders, 1);
  if (was != 0)
    correctness_failure(phase, "%d other thread(s) inside the critical "
                        "section at acquisition", was);
}

static void leave_critical(void) { atomic_fetch_sub(&holders, 1); }


typedef struct s3_shared {
  rlock *lock;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* under mu */
  bool entering[2];   /* thread i is inside (or about to call) rlock_lock */
  uint64_t acquired;  /* acquisitions so far */
  uint64_t released;  /* the acquisition whose release time is t_release */
  int64_t t_release;  /* when rlock_unlock returned in its thread */
  int64_t t_unlock;   /* when that rlock_unlock was called (Java's start) */
  int last_holder;    /* thread of the latest acquisition, -1 at first */
  int64_t hold_us;    /* extra hold once the other thread waits */
  bool stop;
  /* the critical section's witness: deliberately not atomic */
  volatile long counter;
} s3_shared;

typedef struct s3_worker {
  pthread_t tid;
  int me;
  s3_shared *sh;
  long acquisitions;
  long negative; /* handoffs where B ran before A's clock read */
  samples lat;   /* from A's unlock returning to B's lock returning */
  samples lat_call; /* from A's unlock call to B's lock returning */
} s3_worker;

static void *s3_main(void *arg) {
  s3_worker *w = arg;
  s3_shared *sh = w->sh;
  int me = w->me, other = 1 - me;
  pthread_mutex_lock(&sh->mu);
  for (;;) {
    if (sh->stop)
      break;
    sh->entering[me] = true;
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);

    check_rc(rlock_lock(sh->lock, LEASE_MS), "rlock_lock (S3)");
    int64_t t_acq = now_ns();

    /* Critical section: a read-modify-write that loses updates if two
     * threads ever overlap here. */
    enter_critical("S3");
    long v = sh->counter;
    sh->counter = v + 1;
    w->acquisitions++;
    leave_critical();

    pthread_mutex_lock(&sh->mu);
    sh->entering[me] = false;
    uint64_t mine = ++sh->acquired;
    int prev_holder = sh->last_holder;
    sh->last_holder = me;
    pthread_cond_broadcast(&sh->cv);
    /* The releaser stamps t_release right after its unlock returned; this
     * thread may have been scheduled first, so wait for the stamp. */
    if (prev_holder == other) {
      while (sh->released != mine - 1)
        pthread_cond_wait(&sh->cv, &sh->mu);
      int64_t d = t_acq - sh->t_release;
      if (d < 0)
        w->negative++;
      samples_push(&w->lat, d);
      samples_push(&w->lat_call, t_acq - sh->t_unlock);
    }
    /* Hand off only to a thread that is already waiting for the lock. */
    while (!sh->entering[other] && !sh->stop)
      pthread_cond_wait(&sh->cv, &sh->mu);
    pthread_mutex_unlock(&sh->mu);

    if (sh->hold_us > 0)
      sleep_ns(sh->hold_us * 1000);
    int64_t t_call = now_ns();
    int rc = rlock_unlock(sh->lock);
    int64_t t_rel = now_ns();
    check_rc(rc, "rlock_unlock (S3)");
    if (rc != 0)
      die("S3: rlock_unlock returned %d, expected 0", rc);

    pthread_mutex_lock(&sh->mu);
    sh->t_release = t_rel;
    sh->t_unlock = t_call;
    sh->released = mine;
    pthread_cond_broadcast(&sh->cv);
    /* Strict alternation: lock again only after the other thread got it. */
    while (sh->acquired == mine && !sh->stop)
      pthread_cond_wait(&sh->cv, &sh->mu);
  }
  pthread_mutex_unlock(&sh->mu);
  return NULL;
}

/* hold_us == 0: plain ping-pong (S3). hold_us > 0 (S3b): the holder keeps
 * the lock hold_us after the other thread called rlock_lock, so that thread
 * is normally asleep on the channel and the handoff is the pub/sub path. */
static void phase_s3(rlock_client *c, const char *id, int64_t hold_us,
                     double seconds) {
  s3_shared sh;
  memset(&sh, 0, sizeof(sh));
  sh.lock = get_lock(c, "%s", id);
  sh.last_holder = -1;
  sh.hold_us = hold_us;
  pthread_mutex_init(&sh.mu, NULL);
  pthread_cond_init(&sh.cv, NULL);
  s3_worker w[2];
  cmdstats cs0, cs1;
  cpu_snap u0, u1;
  cmdstats_take(&cs0);
  cpu_take(&u0);
  int64_t t0 = now_ns();
  for (int i = 0; i < 2; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].me = i;
    w[i].sh = &sh;
    if (pthread_create(&w[i].tid, NULL, s3_main, &w[i]) != 0)
      die("pthread_create failed");
  }
  sleep_ns((int64_t)(seconds * 1e9));
  pthread_mutex_lock(&sh.mu);
  sh.stop = true;
  pthread_cond_broadcast(&sh.cv);
  pthread_mutex_unlock(&sh.mu);
  for (int i = 0; i < 2; i++)
    pthread_join(w[i].tid, NULL);
  double secs = (double)(now_ns() - t0) / 1e9;
  cpu_take(&u1);
  cmdstats_settled(&cs1);

  long acq = w[0].acquisitions + w[1].acquisitions;
  double cpu_us = cpu_note(id, &u0, &u1, (double)acq, "acquisition");
  if (sh.counter != acq)
    correctness_failure(id, "counter %ld != acquisitions %ld", sh.counter,
                        acq);
  if (acq < 2)
    die("%s: only %ld acquisitions", id, acq);
  samples lat = {0};
  samples_append(&lat, &w[0].lat);
  samples_append(&lat, &w[1].lat);
  samples lat_call = {0};
  samples_append(&lat_call, &w[0].lat_call);
  samples_append(&lat_call, &w[1].lat_call);
  long negative = w[0].negative + w[1].negative;
  double p50 = samples_pct_us(&lat, 50), p99 = samples_pct_us(&lat, 99);
  double c50 = samples_pct_us(&lat_call, 50);
  double c99 = samples_pct_us(&lat_call, 99);
  cmdcount cc;
  cmdcount_diff(&cs0, &cs1, &cc);
  printf("%s%s: %ld acquisitions (%ld + %ld), %zu handoffs timed, counter "
         "ok\n", run_tag(), id, acq, w[0].acquisitions,
         w[1].acquisitions, lat.n);
  fflush(stdout);

  double rtt = base.have ? base.serial_rtt_us : NAN;
  char metric[72];
  if (kind_label != NULL)
    snprintf(metric, sizeof(metric), "ping-pong, 2 threads, %s", kind_label);
  else if (hold_us == 0 && strcmp(id, "S3") != 0)
    snprintf(metric, sizeof(metric), "ping-pong, local handoff off "
             "(handoff_max 0)");
  else if (hold_us == 0)
    snprintf(metric, sizeof(metric), "handoff ping-pong, 2 threads");
  else
    snprintf(metric, sizeof(metric), "handoff to a sleeping waiter (hold %lld "
             "us)", (long long)hold_us);
  add_row(id, metric, (double)acq / secs, "acq/s",
          base.have ? base.serial_rps : NAN, "serial ops/s",
          base.have ? (double)acq / secs / base.serial_rps : NAN);
  add_row(id, "  handoff latency p50", p50, "us", rtt, "serial round trip",
          p50 / rtt);
  add_row(id, "  handoff latency p99", p99, "us", rtt, "serial round trip",
          p99 / rtt);
  /* From the holder's unlock call instead of its return: what Java's S3
   * times (JavaBench stamps t0 before lock.unlock()), and the only start
   * that sees a transfer's round trip, which ends both calls at once. */
  row *r = add_row(id, "  handoff from the unlock call p50", c50, "us", rtt,
                   "serial round trip", c50 / rtt);
  if (strcmp(id, "S3") == 0) /* issue #4: handoff <= 3 round trips */
    set_target(r, T_LE, 3.0, true);
  add_row(id, "  handoff from the unlock call p99", c99, "us", rtt,
          "serial round trip", c99 / rtt);
  add_row(id, "  client-sent commands per acquisition",
          (double)cc.total_top / (double)acq, "cmds", 2,
          "acquire + release script",
          (double)cc.total_top / (double)acq / 2);
  add_row(id, "  client CPU per acquisition (user+sys)", cpu_us, "us", NAN,
          "", NAN);
  add_row(id, "  client context switches per acquisition", last_csw, "n", NAN,
          "", NAN);
  note_lock_node(id, id);
  if (negative > 0)
    note("%s: %ld of %zu handoffs had B's acquire return before A's clock "
         "read after unlock (counted as <0 us)", id, negative, lat.n);
  note("%s per acquisition: evalsha %.2f, eval %.2f, del %.2f, subscribe "
       "%.2f, unsubscribe %.2f", id, (double)cc.evalsha / acq,
       (double)cc.eval / acq, (double)cc.del_top / acq,
       (double)cc.subscribe / acq, (double)cc.unsubscribe / acq);
  for (int i = 0; i < 2; i++) {
    free(w[i].lat.v);
    free(w[i].lat_call.v);
  }
  free(lat.v);
  free(lat_call.v);
  pthread_mutex_destroy(&sh.mu);
  pthread_cond_destroy(&sh.cv);
  rlock_free(sh.lock);
}

/* ---- S4: herd, many threads on one lock ---- */

typedef struct s4_shared {
  rlock *lock;
  pthread_barrier_t start;
  atomic_bool stop;
  volatile long counter; /* deliberately not atomic */
} s4_shared;

typedef struct s4_worker {
  pthread_t tid;
  s4_shared *sh;
  long acquisitions;
} s4_worker;

static void *s4_main(void *arg) {
  s4_worker *w = arg;
  s4_shared *sh = w->sh;
  pthread_barrier_wait(&sh->start);
  while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
    check_rc(rlock_lock(sh->lock, LEASE_MS), "rlock_lock (S4)");
    enter_critical("S4");
    long v = sh->counter;
    for (volatile int spin = 0; spin < 200; spin++) {
    } /* widen the window a lost update would need */
    sh->counter = v + 1;
    w->acquisitions++;
    leave_critical();
    int rc = rlock_unlock(sh->lock);
    check_rc(rc, "rlock_unlock (S4)");
    if (rc != 0)
      die("S4: rlock_unlock returned %d, expected 0", rc);
  }
  return NULL;
}

/* id "S4": the herd on the default client, with issue #13's targets;
 * "S4h0": the same on a client with handoff_max = 0 (no local handoff). */
/* S4's wire floor: the command a local handoff sends (the transfer
 * script, moving the lock from one owner to the next), replayed serially
 * on one synchronous hiredis connection, each with its own latch as the
 * library sends it. Nothing of a client's threads is in it: the rate a
 * herd on one client would reach if the client cost nothing. Returns
 * transfers/s. */
static double wire_transfers(double seconds) {
  const bench_script *acq = &acquire_script;
  const bench_script *tr = &transfer_script;
  freeReplyObject(mon_cmd("SCRIPT LOAD %s", acq->body));
  freeReplyObject(mon_cmd("SCRIPT LOAD %s", tr->body));
  char name[128], channel[192], latch[256], lease[16];
  snprintf(name, sizeof(name), "%swire4", cfg.prefix);
  snprintf(channel, sizeof(channel), "redisson_lock__channel:{%s}", name);
  snprintf(lease, sizeof(lease), "%d", LEASE_MS);
  const char *owners[2] = {"00000000-0000-4000-8000-000000000000:1",
                           "00000000-0000-4000-8000-000000000000:2"};
  freeReplyObject(mon_cmd("DEL %s", name));
  redisReply *r =
      mon_cmd("EVALSHA %s 1 %s %s %s", acq->sha, name, lease, owners[0]);
  if (r->type != REDIS_REPLY_NIL)
    die("wire4: acquire script did not acquire (reply type %d)", r->type);
  freeReplyObject(r);
  const char *argv[14] = {"EVALSHA", tr->sha,   "3",  name,    latch,
                          channel,   lease,     NULL, "18000", NULL,
                          lease,     "PUBLISH", "0"};
  size_t len[14];
  long n = 0;
  int64_t start = now_ns(), end = start + (int64_t)(seconds * 1e9), t;
  do {
    snprintf(latch, sizeof(latch), "redisson_unlock_latch:{%s}:%032lx", name,
             n);
    argv[7] = owners[n & 1];
    argv[9] = owners[(n + 1) & 1];
    for (int i = 0; i < 13; i++)
      len[i] = strlen(argv[i]);
    redisAppendCommandArgv(mon, 13, argv, len);
    if (redisGetReply(mon, (void **)&r) != REDIS_OK)
      die("wire4: %s", mon->errstr);
    if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
      die("wire4: the transfer did not move the lock (reply type %d)", r->type);
    freeReplyObject(r);
    n++;
    t = now_ns();
  } while (t < end);
  freeReplyObject(mon_cmd("DEL %s", name));
  return (double)n / ((double)(t - start) / 1e9);
}

static void phase_s4(rlock_client *c, const char *id) {
  bool main_run = strcmp(id, "S4") == 0;
  /* The wire floor is plain TCP on the monitoring connection: not in the
   * TLS or cluster runs, and only beside the main herd. */
  double floor_rate =
      main_run && !tls_mode && !cluster_mode && kind_label == NULL
          ? wire_transfers(cfg.seconds / 2)
          : NAN;
  int n = cfg.herd_threads;
  s4_shared sh;
  memset(&sh, 0, sizeof(sh));
  sh.lock = get_lock(c, "%s", id);
  pthread_barrier_init(&sh.start, NULL, (unsigned)n + 1);
  s4_worker *w = calloc((size_t)n, sizeof(*w));
  if (w == NULL)
    die("out of memory");
  for (int i = 0; i < n; i++) {
    w[i].sh = &sh;
    if (pthread_create(&w[i].tid, NULL, s4_main, &w[i]) != 0)
      die("pthread_create failed");
  }
  cmdstats cs0, cs1;
  cpu_snap u0, u1;
  cmdstats_take(&cs0);
  cpu_take(&u0);
  pthread_barrier_wait(&sh.start);
  int64_t t0 = now_ns();
  sleep_ns((int64_t)(cfg.seconds * 1e9));
  atomic_store(&sh.stop, true);
  long acq = 0, min_acq = -1, max_acq = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(w[i].tid, NULL);
    acq += w[i].acquisitions;
    if (min_acq < 0 || w[i].acquisitions < min_acq)
      min_acq = w[i].acquisitions;
    if (w[i].acquisitions > max_acq)
      max_acq = w[i].acquisitions;
  }
  double secs = (double)(now_ns() - t0) / 1e9;
  cpu_take(&u1);
  cmdstats_settled(&cs1);
  double cpu_us = acq > 0 ? cpu_note(id, &u0, &u1, (double)acq,
                                     "acquisition")
                           : NAN;
  if (sh.counter != acq)
    correctness_failure(id, "counter %ld != acquisitions %ld", sh.counter,
                        acq);
  if (acq == 0)
    die("%s: no acquisitions", id);
  cmdcount cc;
  cmdcount_diff(&cs0, &cs1, &cc);
  printf("%s%s: %ld acquisitions by %d threads (per thread min %ld, max "
         "%ld), counter ok\n", run_tag(), id, acq, n, min_acq,
         max_acq);
  fflush(stdout);

  char metric[72];
  if (kind_label != NULL)
    snprintf(metric, sizeof(metric), "herd of %d, %s", n, kind_label);
  else if (main_run)
    snprintf(metric, sizeof(metric), "herd, %d threads on one lock", n);
  else
    snprintf(metric, sizeof(metric), "herd of %d, local handoff off "
             "(handoff_max 0)", n);
  row *r = add_row(id, metric, (double)acq / secs, "acq/s",
          base.have ? base.serial_rps / 2 : NAN, "serial ops/s / 2",
          base.have ? (double)acq / secs / (base.serial_rps / 2) : NAN);
  /* issue #13: acquisitions/s >= 2 x (serial ops/s / 2) */
  if (main_run)
    set_target(r, T_GE, 2.0, true);
  double per = (double)cc.total_top / (double)acq;
  r = add_row(id, "  client-sent commands per acquisition", per, "cmds", 2,
              "acquire + release script", per / 2);
  if (main_run) /* issue #4 asked <= 4; #13 <= 2.5; #39 <= 2.1 */
    set_target(r, T_LE, 2.1, false);
  else if (lock_getter == rlock_new_write) /* issue #39: W4 <= 4 */
    set_target(r, T_LE, 4.0, false);
  add_row(id, "  client CPU per acquisition (user+sys)", cpu_us, "us", NAN,
          "", NAN);
  add_row(id, "  client context switches per acquisition", last_csw, "n", NAN,
          "", NAN);
  if (!isnan(floor_rate))
    add_row(id, "  wire floor: its transfer, serially, sync hiredis",
            floor_rate, "acq/s", (double)acq / secs, "the herd's acq/s",
            (double)acq / secs / floor_rate);
  add_row(id, "  server-executed incl. in-script, per acq",
          (double)cc.all / (double)acq, "cmds", NAN, "", NAN);
  note("%s per acquisition: evalsha %.2f, eval %.3f, del (latch) %.2f, "
       "subscribe %.3f, unsubscribe %.3f, other %.3f", id,
       (double)cc.evalsha / acq, (double)cc.eval / acq,
       (double)cc.del_top / acq, (double)cc.subscribe / acq,
       (double)cc.unsubscribe / acq, (double)cc.other / acq);
  note("%s fairness: acquisitions per thread min %ld / max %ld", id,
       min_acq, max_acq);
  note_lock_node(id, id);
  if (!tls_mode && !cluster_mode && main_run)
    note("commands per acquisition count client-sent (top-level) commands from "
         "INFO commandstats deltas: evalsha + eval + (un)subscribe + ping + "
         "(del - publish) + any other non-script command; Redis 7 also counts "
         "commands run inside scripts, excluded here (in-script del = "
         "publish)");
  free(w);
  pthread_barrier_destroy(&sh.start);
  rlock_free(sh.lock);
}

/* ---- X: two processes on one lock (issue 39, item 3) ----
 *
 * --only X (never by default: it takes BENCH_X_SECONDS, 10 s by default):
 * this process and a second one, BENCH_X_THREADS threads each (32), take
 * one lock in turn for BENCH_X_SECONDS; each must get at least 30% of the
 * acquisitions - the local gate and the local handoff must not lock the
 * other process out. The second process is a child rlock-bench
 * (--herd-child), and then, with BENCH_JAVA_PEER set (bench/run --herd-java
 * sets it), the real Redisson peer (its line protocol: one tag per thread,
 * lock and unlock lines fed as the answers come). Both rlock processes
 * check exclusion on a counter in shared memory. */

typedef struct x_shm {
  atomic_int inside;
  atomic_long overlaps;
} x_shm;

typedef struct x_shared {
  rlock *lock;
  x_shm *shm;
  pthread_barrier_t start;
  atomic_bool stop;
} x_shared;

typedef struct x_worker {
  pthread_t tid;
  x_shared *sh;
  long acquisitions;
} x_worker;

static void *x_main(void *arg) {
  x_worker *w = arg;
  x_shared *sh = w->sh;
  pthread_barrier_wait(&sh->start);
  while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
    check_rc(rlock_lock(sh->lock, LEASE_MS), "rlock_lock (X)");
    if (sh->shm != NULL && atomic_fetch_add(&sh->shm->inside, 1) != 0)
      atomic_fetch_add(&sh->shm->overlaps, 1);
    for (volatile int spin = 0; spin < 200; spin++) {
    }
    if (sh->shm != NULL)
      atomic_fetch_sub(&sh->shm->inside, 1);
    w->acquisitions++;
    int rc = rlock_unlock(sh->lock);
    check_rc(rc, "rlock_unlock (X)");
  }
  return NULL;
}

/* The herd of one process: threads started, waiting on the barrier. */
typedef struct x_herd {
  x_shared sh;
  x_worker *w;
  int n;
} x_herd;

static void x_herd_start(x_herd *h, rlock *lock, x_shm *shm, int n) {
  memset(h, 0, sizeof(*h));
  h->sh.lock = lock;
  h->sh.shm = shm;
  h->n = n;
  pthread_barrier_init(&h->sh.start, NULL, (unsigned)n + 1);
  h->w = calloc((size_t)n, sizeof(*h->w));
  if (h->w == NULL)
    die("out of memory");
  for (int i = 0; i < n; i++) {
    h->w[i].sh = &h->sh;
    if (pthread_create(&h->w[i].tid, NULL, x_main, &h->w[i]) != 0)
      die("pthread_create failed");
  }
}

static long x_herd_stop(x_herd *h) {
  atomic_store(&h->sh.stop, true);
  long acq = 0;
  for (int i = 0; i < h->n; i++) {
    pthread_join(h->w[i].tid, NULL);
    acq += h->w[i].acquisitions;
  }
  free(h->w);
  pthread_barrier_destroy(&h->sh.start);
  return acq;
}

static x_shm *x_shm_map(const char *path, bool create) {
  int fd = create ? open(path, O_RDWR | O_CREAT | O_TRUNC, 0600)
                  : open(path, O_RDWR);
  if (fd < 0 || (create && ftruncate(fd, sizeof(x_shm)) != 0))
    die("X: shared counter %s: %s", path, strerror(errno));
  void *p = mmap(NULL, sizeof(x_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 0);
  close(fd);
  if (p == MAP_FAILED)
    die("X: mmap: %s", strerror(errno));
  return p;
}

/* rlock-bench --herd-child HOST PORT NAME THREADS SHM: the second rlock
 * process. Says "ready", starts at "go", stops at "stop" (or end of
 * input), says "count N". */
static int herd_child(char **argv) {
  cfg.host = argv[0];
  cfg.port = atoi(argv[1]);
  int n = atoi(argv[3]);
  x_shm *shm = x_shm_map(argv[4], false);
  rlock_client *c = open_client(0, false);
  rlock *l = NULL;
  check_rc(rlock_new(c, argv[2], &l), "rlock_new (X child)");
  x_herd h;
  x_herd_start(&h, l, shm, n);
  printf("ready\n");
  fflush(stdout);
  char line[64];
  if (fgets(line, sizeof(line), stdin) == NULL || strncmp(line, "go", 2))
    die("X child: no go");
  pthread_barrier_wait(&h.sh.start);
  while (fgets(line, sizeof(line), stdin) != NULL && strncmp(line, "stop", 4))
    ;
  long acq = x_herd_stop(&h);
  printf("count %ld\n", acq);
  fflush(stdout);
  rlock_free(l);
  rlock_client_free(c);
  return 0;
}

/* A second process with pipes to its stdin and from its stdout. */
typedef struct x_proc {
  pid_t pid;
  FILE *in;  /* its stdin */
  FILE *out; /* its stdout */
} x_proc;

static void x_spawn(x_proc *p, char *const argv[]) {
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0)
    die("pipe: %s", strerror(errno));
  fflush(stdout);
  p->pid = fork();
  if (p->pid < 0)
    die("fork: %s", strerror(errno));
  if (p->pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  p->in = fdopen(to[1], "w");
  p->out = fdopen(from[0], "r");
  if (p->in == NULL || p->out == NULL)
    die("fdopen failed");
}

/* Closes its stdin and waits for it, at most bound_ms; then kills it. */
static void x_reap(x_proc *p, int64_t bound_ms) {
  fclose(p->in);
  int64_t until = now_ns() + bound_ms * 1000000;
  int st;
  while (waitpid(p->pid, &st, WNOHANG) == 0) {
    if (now_ns() > until) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &st, 0);
      break;
    }
    sleep_ns(20000000);
  }
  fclose(p->out);
}

/* The Java peer's side: every tag (thread) has one lock+unlock pair
 * queued; each unlock's answer queues the next until stop. */
typedef struct x_java {
  x_proc p;
  const char *name;
  int n;
  atomic_bool counting, stop;
  long acquisitions, errors;
  int *phase; /* per tag: 0 waiting for the lock's answer, 1 the unlock's */
  int outstanding;
} x_java;

static void x_java_pair(x_java *j, int tag) {
  fprintf(j->p.in, "t%d: lock %s %d\nt%d: unlock %s\n", tag, j->name,
          LEASE_MS, tag, j->name);
  j->outstanding++;
}

static void *x_java_reader(void *arg) {
  x_java *j = arg;
  char line[512];
  while (j->outstanding > 0 && fgets(line, sizeof(line), j->p.out) != NULL) {
    int tag;
    char word[8];
    if (sscanf(line, "t%d: %7s", &tag, word) != 2 || tag < 0 || tag >= j->n)
      continue;
    bool ok = strcmp(word, "OK") == 0;
    if (!ok)
      j->errors++;
    if (j->phase[tag] == 0) {
      if (ok && atomic_load(&j->counting))
        j->acquisitions++;
      j->phase[tag] = 1;
      continue;
    }
    j->phase[tag] = 0;
    j->outstanding--;
    if (!atomic_load(&j->stop)) {
      x_java_pair(j, tag);
      fflush(j->p.in);
    }
  }
  return NULL;
}

static void x_run(const char *id, const char *java_cmd) {
  int n = atoi(env_or("BENCH_X_THREADS", "32"));
  double secs = atof(env_or("BENCH_X_SECONDS", "10"));
  if (n < 1 || n > MAX_THREADS || secs <= 0)
    die("X: bad BENCH_X_THREADS / BENCH_X_SECONDS");
  char name[256], shm_path[128], port[16], threads[16];
  snprintf(name, sizeof(name), "%s%s", cfg.prefix, id);
  snprintf(shm_path, sizeof(shm_path), "/tmp/rlock-bench-x.%ld",
           (long)getpid());
  snprintf(port, sizeof(port), "%d", cfg.port);
  snprintf(threads, sizeof(threads), "%d", n);
  x_shm *shm = x_shm_map(shm_path, true);
  rlock_client *c = open_client(0, false);
  rlock *l = NULL;
  check_rc(rlock_new(c, name, &l), "rlock_new (X)");
  /* warm up: scripts loaded before either side starts */
  lock_pair(l);
  x_java j;
  memset(&j, 0, sizeof(j));
  x_proc child;
  pthread_t reader;
  if (java_cmd == NULL) {
    char *argv[] = {"/proc/self/exe", "--herd-child", (char *)cfg.host, port,
                    name, threads, shm_path, NULL};
    x_spawn(&child, argv);
    char line[64];
    if (fgets(line, sizeof(line), child.out) == NULL ||
        strncmp(line, "ready", 5) != 0)
      die("X: the child rlock-bench did not start");
  } else {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "exec %s %d 2>/dev/null", java_cmd, cfg.port);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    x_spawn(&j.p, argv);
    char line[512];
    bool ready = false;
    while (!ready && fgets(line, sizeof(line), j.p.out) != NULL)
      ready = strncmp(line, "READY", 5) == 0;
    if (!ready)
      die("X: %s did not say READY", java_cmd);
    j.name = name;
    j.n = n;
    j.phase = calloc((size_t)n, sizeof(int));
    if (j.phase == NULL)
      die("out of memory");
  }
  x_herd h;
  x_herd_start(&h, l, shm, n);
  atomic_store(&shm->overlaps, 0);
  if (java_cmd == NULL) {
    fprintf(child.in, "go\n");
    fflush(child.in);
  } else {
    atomic_store(&j.counting, true);
    for (int i = 0; i < n; i++)
      x_java_pair(&j, i);
    fflush(j.p.in);
    if (pthread_create(&reader, NULL, x_java_reader, &j) != 0)
      die("pthread_create failed");
  }
  pthread_barrier_wait(&h.sh.start);
  int64_t t0 = now_ns();
  sleep_ns((int64_t)(secs * 1e9));
  long other = 0;
  if (java_cmd == NULL) {
    fprintf(child.in, "stop\n");
    fflush(child.in);
  } else {
    atomic_store(&j.counting, false);
    atomic_store(&j.stop, true);
  }
  long mine = x_herd_stop(&h);
  double wall = (double)(now_ns() - t0) / 1e9;
  if (java_cmd == NULL) {
    char line[64];
    if (fgets(line, sizeof(line), child.out) == NULL ||
        sscanf(line, "count %ld", &other) != 1)
      die("X: no count from the child");
    x_reap(&child, 10000);
  } else {
    pthread_join(reader, NULL);
    other = j.acquisitions;
    fprintf(j.p.in, "quit\n");
    x_reap(&j.p, 20000);
    free(j.phase);
    if (j.errors > 0)
      note("%s: the Java peer answered %ld error(s)", id, j.errors);
  }
  long overlaps = atomic_load(&shm->overlaps);
  munmap(shm, sizeof(x_shm));
  unlink(shm_path);
  if (overlaps != 0)
    correctness_failure(id, "%ld acquisitions while the other process was "
                        "inside", overlaps);
  long all = mine + other;
  if (all == 0)
    die("%s: no acquisitions", id);
  const char *who = java_cmd == NULL ? "rlock" : "Java";
  printf("%s: %ld acquisitions in %.1f s: this process %ld, the other (%s) "
         "%ld\n", id, all, wall, mine, who, other);
  char metric[72];
  snprintf(metric, sizeof(metric), "2 processes x %d threads, one lock "
           "(rlock + %s)", n, who);
  add_row(id, metric, (double)all / wall, "acq/s", NAN, "", NAN);
  row *r = add_row(id, "  share of this process (rlock)",
                   (double)mine / (double)all, "", NAN, "", NAN);
  set_target(r, T_GE, 0.3, false);
  snprintf(metric, sizeof(metric), "  share of the other process (%s)", who);
  r = add_row(id, metric, (double)other / (double)all, "", NAN, "", NAN);
  set_target(r, T_GE, 0.3, false);
  if (java_cmd == NULL)
    note("%s: exclusion checked across both processes (shared counter): %ld "
         "overlaps", id, overlaps);
  rlock_free(l);
  rlock_client_free(c);
}

static void phase_x(void) {
  x_run("X", NULL);
  const char *java = env_or("BENCH_JAVA_PEER", NULL);
  if (java != NULL && java[0] != '\0')
    x_run("XJ", java);
}

/* ---- M: semaphore acquire+release pairs (issue 15) ---- */

typedef struct m_worker {
  pthread_t tid;
  rlock_semaphore *sem;
  pthread_barrier_t *start;
  atomic_bool *stop;
  long pairs;
  samples lat;
} m_worker;

static void *m_main(void *arg) {
  m_worker *w = arg;
  pthread_barrier_wait(w->start);
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    int64_t t0 = now_ns();
    check_rc(rlock_semaphore_acquire(w->sem, 1), "rlock_semaphore_acquire");
    check_rc(rlock_semaphore_release(w->sem, 1), "rlock_semaphore_release");
    samples_push(&w->lat, now_ns() - t0);
    w->pairs++;
  }
  return NULL;
}

/* nthreads threads on one semaphore of nthreads permits: nobody waits, as
 * S1/S2 on free locks. Rows beside S1 (1 thread) and S2 (8 threads). */
static void phase_semaphore(void) {
  rlock_client *c = open_client(0, false);
  static const int counts[] = {1, 8};
  for (int k = 0; k < 2; k++) {
    int n = counts[k];
    char name[160];
    snprintf(name, sizeof(name), "%ssem:%d", cfg.prefix, n);
    rlock_semaphore *sem = NULL;
    check_rc(rlock_semaphore_new(c, name, &sem), "rlock_semaphore_new");
    check_rc(rlock_semaphore_try_set_permits(sem, n, 0), "try_set_permits");
    m_worker w[8];
    pthread_barrier_t start;
    atomic_bool stop = false;
    pthread_barrier_init(&start, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++) {
      w[i] = (m_worker){.sem = sem, .start = &start, .stop = &stop};
      if (pthread_create(&w[i].tid, NULL, m_main, &w[i]) != 0)
        die("pthread_create failed");
    }
    pthread_barrier_wait(&start);
    int64_t t0 = now_ns();
    sleep_ns((int64_t)(cfg.seconds * 1e9));
    atomic_store(&stop, true);
    long pairs = 0;
    samples lat = {0};
    for (int i = 0; i < n; i++) {
      pthread_join(w[i].tid, NULL);
      pairs += w[i].pairs;
      samples_append(&lat, &w[i].lat);
      free(w[i].lat.v);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    pthread_barrier_destroy(&start);
    if (rlock_semaphore_available_permits(sem) != n)
      correctness_failure("M", "permits not all back after the run");
    char metric[72];
    snprintf(metric, sizeof(metric), "semaphore acquire+release, %d thread%s",
             n, n == 1 ? "" : "s");
    double rate = (double)pairs / secs;
    if (n == 1)
      add_row("M1", metric, rate, "pairs/s", base.have ? base.serial_rps / 2
              : NAN, "serial ops/s / 2", base.have ? rate / (base.serial_rps /
              2) : NAN);
    else
      add_row("M8", metric, rate, "pairs/s", base.have ? base.pipe_rps / 2
              : NAN, "pipelined capacity / 2", base.have ? rate /
              (base.pipe_rps / 2) : NAN);
    add_row(n == 1 ? "M1" : "M8", "  pair time p50", samples_pct_us(&lat, 50),
            "us", NAN, "", NAN);
    printf("M: %d thread(s): %.0f pairs/s\n", n, rate);
    fflush(stdout);
    free(lat.v);
    freeReplyObject(mon_cmd("DEL %s", name));
    rlock_semaphore_free(sem);
  }
  rlock_client_free(c);
}

/* ---- K: S3 and S4 on the fair lock and the write lock ---- */

/* Issue 14: the handoff figures of the other kinds beside RLock's S3/S4,
 * same shapes, same client options, plain TCP. */
static void phase_kinds(void) {
  static const struct {
    int (*get)(rlock_client *, const char *, rlock **);
    const char *label, *s3, *s4;
  } kinds[] = {{rlock_new_fair, "fair lock", "F3", "F4"},
               {rlock_new_write, "write lock (read/write)", "W3", "W4"}};
  pid_t keep = loop_tid;
  rlock_client *c = open_client(0, true);
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    lock_getter = kinds[i].get;
    kind_label = kinds[i].label;
    phase_s3(c, kinds[i].s3, 0, cfg.seconds);
    phase_s4(c, kinds[i].s4);
  }
  lock_getter = rlock_new;
  kind_label = NULL;
  rlock_client_free(c);
  loop_tid = keep;
}

/* ---- S5: many locks held in watchdog mode ---- */

typedef struct s5_worker {
  pthread_t tid;
  rlock **locks;
  int from, to;
  pthread_barrier_t *acquired, *release;
} s5_worker;

static void *s5_main(void *arg) {
  s5_worker *w = arg;
  for (int i = w->from; i < w->to; i++)
    check_rc(rlock_lock(w->locks[i], -1), "rlock_lock (S5, watchdog)");
  pthread_barrier_wait(w->acquired);
  pthread_barrier_wait(w->release); /* owners are per thread: stay alive */
  for (int i = w->from; i < w->to; i++) {
    int rc = rlock_unlock(w->locks[i]);
    check_rc(rc, "rlock_unlock (S5)");
  }
  return NULL;
}

static long long renew_calls(void) {
  cmdstats cs;
  cmdstats_take(&cs);
  return cmdstats_get(&cs, "evalsha") + cmdstats_get(&cs, "eval");
}

static void phase_s5(void) {
  int n = cfg.wd_locks;
  int64_t period_ns = cfg.wd_ms / 3 * 1000000;
  rlock_client *c = open_client(cfg.wd_ms, false);
  rlock **locks = calloc((size_t)n, sizeof(*locks));
  if (locks == NULL)
    die("out of memory");
  size_t heap1 = heap_in_use();
  for (int i = 0; i < n; i++)
    locks[i] = get_lock(c, "wd:%d", i);
  size_t heap2 = heap_in_use();
  long rss2 = rss_kib();

  enum { WORKERS = 8 };
  s5_worker w[WORKERS];
  pthread_barrier_t acquired, release;
  pthread_barrier_init(&acquired, NULL, WORKERS + 1);
  pthread_barrier_init(&release, NULL, WORKERS + 1);
  int64_t t_acq0 = now_ns();
  for (int i = 0; i < WORKERS; i++) {
    w[i] = (s5_worker){.locks = locks,
                       .from = n * i / WORKERS,
                       .to = n * (i + 1) / WORKERS,
                       .acquired = &acquired,
                       .release = &release};
    if (pthread_create(&w[i].tid, NULL, s5_main, &w[i]) != 0)
      die("pthread_create failed");
  }
  pthread_barrier_wait(&acquired);
  double acq_secs = (double)(now_ns() - t_acq0) / 1e9;
  printf("S5: %d locks acquired in watchdog mode in %.2f s\n", n, acq_secs);
  fflush(stdout);

  /* Align to the watchdog's period: wait for a renewal round to show up,
   * then measure from mid-period over whole periods, so the window holds
   * exactly wd_periods rounds. */
  long long before = renew_calls();
  int64_t give_up = now_ns() + 3 * period_ns;
  while (renew_calls() == before) {
    if (now_ns() > give_up)
      die("S5: no renewal seen within 3 watchdog periods");
    sleep_ns(5 * 1000000);
  }
  sleep_ns(period_ns / 2);
  /* Memory at mid-period: no renewal batch is in flight. */
  size_t heap3 = heap_in_use();
  long rss3 = rss_kib();
  long long c0 = renew_calls();
  int64_t m0 = now_ns();
  sleep_ns(period_ns * cfg.wd_periods);
  long long c1 = renew_calls();
  double window = (double)(now_ns() - m0) / 1e9;

  /* Every lock must still be there: the window outlasted the lease. */
  redisReply *r = mon_cmd("KEYS %swd:*", cfg.prefix);
  size_t alive = r->elements;
  freeReplyObject(r);
  if ((int)alive != n)
    die("S5: %zu of %d watchdog locks alive after %.1f s (lease %lld ms)",
        alive, n, window, (long long)cfg.wd_ms);

  pthread_barrier_wait(&release);
  for (int i = 0; i < WORKERS; i++)
    pthread_join(w[i].tid, NULL);
  pthread_barrier_destroy(&acquired);
  pthread_barrier_destroy(&release);
  for (int i = 0; i < n; i++)
    rlock_free(locks[i]);
  free(locks);
  rlock_client_free(c);

  double per_period = (double)(c1 - c0) / cfg.wd_periods;
  double rate_short = per_period / ((double)period_ns / 1e9);
  double rate_default = per_period / (30000.0 / 3 / 1000);
  double hold_bytes = ((double)heap3 - (double)heap2) / n;
  double handle_bytes = ((double)heap2 - (double)heap1) / n;
  double rss_hold = ((double)rss3 - (double)rss2) * 1024 / n;

  char metric[72];
  snprintf(metric, sizeof(metric), "renewal cmds/s, %d locks, watchdog %lld "
           "ms", n, (long long)cfg.wd_ms);
  add_row("S5", metric, rate_short, "cmds/s", NAN, "", NAN);
  snprintf(metric, sizeof(metric), "renewal cmds/s, %d locks, watchdog 30 s",
           n);
  row *rr = add_row("S5", metric, rate_default, "cmds/s", (double)n / 10,
                    "1 cmd per lock per 10 s", rate_default / ((double)n / 10));
  set_target(rr, T_LE, 10, false);
  rr = add_row("S5", "client heap per held lock (mallinfo2)", hold_bytes,
               "bytes", NAN, "", NAN);
  set_target(rr, T_LE, 512, false);
  add_row("S5", "  + lock handle (rlock_new), per lock", handle_bytes,
          "bytes", NAN, "", NAN);
  add_row("S5", "  RSS delta per held lock", rss_hold, "bytes", NAN, "",
          NAN);
  note("S5: renewal calls = evalsha+eval during %d whole watchdog periods "
       "(%.2f s): %.1f per period; 30 s rate = per-period calls / (30 s / 3)",
       cfg.wd_periods, window, per_period);
  note("S5: heap per held lock = uordblks after acquiring - before, over %d "
       "locks, handles created before; all %d keys alive after the window",
       n, n);
}

/* ---- main ---- */

/* B and S1-S4 over the current transport (plain TCP, or TLS in
 * tls_mode), each as --only allows. */
static void run_transport(void) {
  if (phase_on("B"))
    phase_baseline();
  if (phase_on("S1") || phase_on("S2") || phase_on("S3") || phase_on("S4")) {
    long rss_before = rss_kib();
    rlock_client *c = open_client(0, true);
    long rss_idle = rss_kib();
    if (phase_on("S1"))
      phase_s1(c);
    if (phase_on("S2"))
      phase_s2(c);
    if (phase_on("S3")) {
      phase_s3(c, "S3", 0, cfg.seconds);
      if (cfg.s3_hold_us > 0)
        phase_s3(c, "S3b", cfg.s3_hold_us, cfg.seconds / 2);
    }
    if (phase_on("S4"))
      phase_s4(c, "S4");
    if (!tls_mode && !cluster_mode && (phase_on("S3") || phase_on("S4"))) {
      /* issue #13: the same on a client without local handoff */
      pid_t keep = loop_tid;
      rlock_client *h0 = open_client_v(0, true, V_HANDOFF_OFF);
      if (phase_on("S3"))
        phase_s3(h0, "S3h0", 0, cfg.seconds);
      if (phase_on("S4"))
        phase_s4(h0, "S4h0");
      rlock_client_free(h0);
      loop_tid = keep;
    }
    rlock_client_free(c);
    add_row("MEM", "client RSS, idle (process VmRSS)", (double)rss_idle,
            "KiB", NAN, "", NAN);
    snprintf(rows[nrows - 1].base_desc, sizeof(rows[0].base_desc),
             "%ld KiB before open", rss_before);
    if (phase_on("S2"))
      add_row("MEM", "client RSS, peak under S2 (up to 64 threads)",
              (double)s2_peak_rss, "KiB", NAN, "", NAN);
  }
}

/* The cluster run's monitoring side: the slot map (CLUSTER SLOTS) from the
 * first seed, and one connection to every master. */
static void cluster_connect(void) {
  char host[64];
  int port = 0;
  if (sscanf(cfg.cluster, "%63[^:,]:%d", host, &port) != 2 || port <= 0)
    die("--cluster: expected HOST:PORT[,HOST:PORT...], got '%s'",
        cfg.cluster);
  struct timeval tv = {5, 0};
  redisContext *seed = redisConnectWithTimeout(host, port, tv);
  if (seed == NULL || seed->err)
    die("cannot connect to cluster seed %s:%d: %s", host, port,
        seed ? seed->errstr : "out of memory");
  redisReply *r = ctx_cmd(seed, "CLUSTER SLOTS");
  memset(cl.slot_node, -1, sizeof(cl.slot_node));
  cl.n = 0;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2)
      die("CLUSTER SLOTS: unexpected reply shape");
    long long from = e->element[0]->integer, to = e->element[1]->integer;
    redisReply *m = e->element[2];
    const char *mh = m->element[0]->type == REDIS_REPLY_STRING &&
                             m->element[0]->str[0] != '\0'
                         ? m->element[0]->str
                         : host;
    int mp = (int)m->element[1]->integer;
    int k = 0;
    while (k < cl.n && !(cl.port[k] == mp && strcmp(cl.host[k], mh) == 0))
      k++;
    if (k == cl.n) {
      if (cl.n == MAX_MASTERS)
        die("more than %d masters", MAX_MASTERS);
      snprintf(cl.host[k], sizeof(cl.host[0]), "%s", mh);
      cl.port[k] = mp;
      cl.n++;
    }
    for (long long sl = from; sl <= to && sl < 16384; sl++)
      cl.slot_node[sl] = (signed char)k;
  }
  freeReplyObject(r);
  for (int sl = 0; sl < 16384; sl++)
    if (cl.slot_node[sl] < 0)
      die("cluster at %s:%d: slot %d is not served", host, port, sl);
  /* The slot function must agree with the server's. */
  static const char *const probe[] = {"rlock-bench:s1", "{user1000}.following",
                                      "foo", "a{}b", NULL};
  for (int i = 0; probe[i] != NULL; i++) {
    r = ctx_cmd(seed, "CLUSTER KEYSLOT %s", probe[i]);
    if (r->integer != (long long)key_slot(probe[i]))
      die("key_slot('%s') = %u, the server says %lld", probe[i],
          key_slot(probe[i]), r->integer);
    freeReplyObject(r);
  }
  redisFree(seed);
  for (int k = 0; k < cl.n; k++) {
    cl.ctx[k] = redisConnectWithTimeout(cl.host[k], cl.port[k], tv);
    if (cl.ctx[k] == NULL || cl.ctx[k]->err)
      die("cannot connect to master %s:%d: %s", cl.host[k], cl.port[k],
          cl.ctx[k] ? cl.ctx[k]->errstr : "out of memory");
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: rlock-bench [--host H] [--port P] [--seconds S] "
          "[--csv PATH] [--only B,S1,S2,S3,S4,K,M,S5] [--tls-port P "
          "[--tls-ca FILE]] [--cluster HOST:PORT[,HOST:PORT...]]\n"
          "Needs a Redis server (bench/run starts a private one) and "
          "redis-benchmark on PATH (or $REDIS_BENCHMARK).\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc == 7 && strcmp(argv[1], "--herd-child") == 0)
    return herd_child(argv + 2);
  cfg.host = env_or("BENCH_HOST", "127.0.0.1");
  cfg.port = atoi(env_or("BENCH_PORT", "6379"));
  cfg.seconds = atof(env_or("BENCH_SECONDS", "4"));
  cfg.base_seconds = atof(env_or("BENCH_BASE_SECONDS", "0"));
  cfg.csv = env_or("BENCH_CSV", NULL);
  cfg.only = env_or("BENCH_ONLY", NULL);
  cfg.redis_benchmark = env_or("REDIS_BENCHMARK", "redis-benchmark");
  cfg.herd_threads = atoi(env_or("BENCH_HERD_THREADS", "64"));
  cfg.wd_locks = atoi(env_or("BENCH_WD_LOCKS", "10000"));
  cfg.wd_ms = atoll(env_or("BENCH_WD_MS", "3000"));
  cfg.wd_periods = atoi(env_or("BENCH_WD_PERIODS", "3"));
  cfg.s3_hold_us = atoll(env_or("BENCH_S3_HOLD_US", "1000"));
  cfg.tls_port = atoi(env_or("BENCH_TLS_PORT", "0"));
  cfg.tls_ca = env_or("BENCH_TLS_CA", NULL);
  cfg.cluster = env_or("BENCH_CLUSTER_NODES", NULL);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--host") == 0 && v)
      cfg.host = v, i++;
    else if (strcmp(a, "--port") == 0 && v)
      cfg.port = atoi(v), i++;
    else if (strcmp(a, "--seconds") == 0 && v)
      cfg.seconds = atof(v), i++;
    else if (strcmp(a, "--csv") == 0 && v)
      cfg.csv = v, i++;
    else if (strcmp(a, "--only") == 0 && v)
      cfg.only = v, i++;
    else if (strcmp(a, "--tls-port") == 0 && v)
      cfg.tls_port = atoi(v), i++;
    else if (strcmp(a, "--tls-ca") == 0 && v)
      cfg.tls_ca = v, i++;
    else if (strcmp(a, "--cluster") == 0 && v)
      cfg.cluster = v, i++;
    else
      usage();
  }
  if (cfg.base_seconds <= 0)
    cfg.base_seconds = cfg.seconds < 3 ? cfg.seconds : 3;
  if (cfg.csv == NULL)
    cfg.csv = access("bench", F_OK) == 0 ? "bench/results.csv" : "results.csv";
  if (cfg.port <= 0 || cfg.seconds <= 0 || cfg.herd_threads < 2 ||
      cfg.herd_threads > MAX_THREADS || cfg.wd_locks < 1 || cfg.wd_ms < 300 ||
      cfg.wd_periods < 1 || cfg.tls_port < 0 || cfg.tls_port > 65535)
    usage();
  snprintf(cfg.prefix, sizeof(cfg.prefix), "rlock-bench:%ld:", (long)getpid());

  struct timeval tv = {5, 0};
  mon = redisConnectWithTimeout(cfg.host, cfg.port, tv);
  if (mon == NULL || mon->err)
    die("cannot connect to %s:%d: %s", cfg.host, cfg.port,
        mon ? mon->errstr : "out of memory");
  redisReply *r = mon_cmd("INFO server");
  char version[32] = "?";
  const char *v = strstr(r->str, "redis_version:");
  if (v != NULL)
    sscanf(v, "redis_version:%31s", version);
  freeReplyObject(r);
  printf("rlock-bench: redis %s at %s:%d, %.1f s per phase, lease %d ms\n",
         version, cfg.host, cfg.port, cfg.seconds, LEASE_MS);
  if (cfg.tls_port > 0)
    printf("rlock-bench: TLS port %d: B and S1-S4 run over TLS as well\n",
           cfg.tls_port);
  if (cfg.cluster != NULL && strlen(cfg.cluster) > 1000)
    die("--cluster: seed list too long");
  if (cfg.cluster != NULL)
    printf("rlock-bench: cluster %s: B and S1-S4 run on it as well, last\n",
           cfg.cluster);
  fflush(stdout);

  run_transport();
  if (cfg.tls_port > 0 && !RLOCK_BENCH_TLS) {
    note("TLS run skipped: this rlock is built without TLS (-Dtls)");
  } else if (cfg.tls_port > 0 &&
             (phase_on("B") || phase_on("S1") || phase_on("S2") ||
              phase_on("S3") || phase_on("S4"))) {
    printf("\nTLS run: rediss://%s:%d (CA %s): B and S1-S4 again\n",
           cfg.host, cfg.tls_port, cfg.tls_ca ? cfg.tls_ca : "system trust");
    fflush(stdout);
    tls_mode = true;
    memset(&base, 0, sizeof(base));
    s2_peak_rss = 0;
    size_t len = strlen(cfg.prefix);
    snprintf(cfg.prefix + len, sizeof(cfg.prefix) - len, "tls:");
    run_transport();
    note("TLS rows (T...): ratios against the TLS baseline (redis-benchmark "
         "--tls on the same server); no targets; the S1 sync-hiredis "
         "reference is plain TCP only");
    tls_mode = false;
  }
  if (phase_on("K"))
    phase_kinds();
  if (phase_on("M"))
    phase_semaphore();
  if (phase_on("S5"))
    phase_s5();
  if (cfg.only != NULL && phase_on("X")) /* only when asked: 10 s or more */
    phase_x();
  if (cfg.cluster != NULL &&
      (phase_on("B") || phase_on("S1") || phase_on("S2") || phase_on("S3") ||
       phase_on("S4"))) {
    cluster_connect();
    r = ctx_cmd(cl.ctx[0], "INFO server");
    snprintf(version, sizeof(version), "?");
    v = strstr(r->str, "redis_version:");
    if (v != NULL)
      sscanf(v, "redis_version:%31s", version);
    freeReplyObject(r);
    printf("\nCluster run: redis+cluster://%s (redis %s, %d masters:",
           cfg.cluster, version, cl.n);
    for (int k = 0; k < cl.n; k++)
      printf(" %s:%d", cl.host[k], cl.port[k]);
    printf("): B and S1-S4 again\n");
    fflush(stdout);
    cluster_mode = true;
    mons = cl.ctx;
    nmons = cl.n;
    memset(&base, 0, sizeof(base));
    s2_peak_rss = 0;
    snprintf(cfg.prefix, sizeof(cfg.prefix), "rlock-bench:%ld:cluster:",
             (long)getpid());
    run_transport();
    note("cluster rows (C-...): ratios against the cluster baseline (C-B1 "
         "on the master of C-S1's lock, C-B2/C-B3 over all masters); no "
         "targets; no spin-off/handoff-off variants, no sync hiredis "
         "reference");
    cluster_mode = false;
    mons = &mon;
    nmons = 1;
    for (int k = 0; k < cl.n; k++)
      redisFree(cl.ctx[k]);
  }

  print_table();
  print_beside(false);
  print_beside(true);
  write_csv(cfg.csv);
  int misses = 0;
  for (int i = 0; i < nrows; i++)
    misses += rows[i].status == 0;
  printf("%d target(s) missed\n", misses);
  redisFree(mon);
  return 0;
}
