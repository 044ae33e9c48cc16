/* Fault injection helpers for the faults and badinput suites (faultkit.h). */
#include "faultkit.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define FK_START_BOUND_MS 8000
#define FK_STOP_BOUND_MS 5000
#define FK_MAX_SERVERS 4
#define FK_MAX_CONNS 64

/* Servers started here, so that fk_fini can stop them after a failed test. */
static struct {
  fk_server *extra[FK_MAX_SERVERS];
  fk_server restarted; /* pid != 0 after fk_server_restart_same_port */
  bool frozen;
} g_fk;

/* ---- CLIENT LIST ---- */

/* Value of " key=" in a CLIENT LIST line, copied into out (size n). */
static bool field(const char *line, const char *key, char *out, size_t n) {
  char needle[32];
  snprintf(needle, sizeof needle, " %s=", key);
  size_t skip = strlen(needle);
  const char *p = NULL;
  if (strncmp(line, needle + 1, skip - 1) == 0) {
    p = line + skip - 1; /* the first field has no leading space */
  } else if ((p = strstr(line, needle)) != NULL) {
    p += skip;
  } else {
    if (n > 0)
      out[0] = '\0';
    return false;
  }
  size_t len = strcspn(p, " \r\n");
  if (len >= n)
    len = n - 1;
  memcpy(out, p, len);
  out[len] = '\0';
  return true;
}

static int field_int(const char *line, const char *key) {
  char buf[32];
  return field(line, key, buf, sizeof buf) ? atoi(buf) : 0;
}

size_t fk_client_list(const char *name, fk_conn *out, size_t max) {
  char *list = rt_str("CLIENT LIST");
  cr_assert(list != NULL, "CLIENT LIST: nil");
  size_t count = 0;
  for (char *line = list; *line;) {
    char *end = strchr(line, '\n');
    if (end)
      *end = '\0';
    fk_conn c;
    memset(&c, 0, sizeof c);
    char id[32];
    if (*line && field(line, "id", id, sizeof id)) {
      c.id = atoll(id);
      field(line, "name", c.name, sizeof c.name);
      field(line, "flags", c.flags, sizeof c.flags);
      field(line, "cmd", c.cmd, sizeof c.cmd);
      c.db = field_int(line, "db");
      c.sub = field_int(line, "sub");
      c.psub = field_int(line, "psub");
      c.ssub = field_int(line, "ssub");
      if (name == NULL || strcmp(c.name, name) == 0) {
        if (count < max)
          out[count] = c;
        count++;
      }
    }
    if (!end)
      break;
    line = end + 1;
  }
  free(list);
  return count;
}

bool fk_conn_is_pubsub(const fk_conn *c) {
  if (strchr(c->flags, 'P') != NULL || c->sub > 0 || c->psub > 0 ||
      c->ssub > 0)
    return true;
  static const char *const subcmds[] = {"subscribe",  "unsubscribe",
                                        "ssubscribe", "sunsubscribe",
                                        "psubscribe", "punsubscribe"};
  for (size_t i = 0; i < sizeof subcmds / sizeof subcmds[0]; i++)
    if (strcmp(c->cmd, subcmds[i]) == 0)
      return true;
  return false;
}

/* What the kills hit: last command of each killed connection, counted. */
#define FK_KILL_KINDS 16
static struct {
  char cmd[FK_KILL_KINDS][48];
  int count[FK_KILL_KINDS];
} g_kills;

static void note_kill(const fk_conn *c) {
  for (int i = 0; i < FK_KILL_KINDS; i++) {
    if (g_kills.count[i] == 0 || strcmp(g_kills.cmd[i], c->cmd) == 0) {
      snprintf(g_kills.cmd[i], sizeof g_kills.cmd[i], "%s", c->cmd);
      g_kills.count[i]++;
      return;
    }
  }
}

void fk_kill_summary(char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < FK_KILL_KINDS && g_kills.count[i] > 0 && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s x%d",
                             used ? ", " : "", g_kills.cmd[i],
                             g_kills.count[i]);
}

bool fk_kill_id(long long id) {
  redisReply *r = rt_cmd("CLIENT KILL ID %lld", id);
  bool killed = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  return killed;
}

/* Commands of the connection handshake: a connection whose last command is
 * one of these has not been used for anything yet. */
static bool handshake_cmd(const char *cmd) {
  return cmd[0] == '\0' || strcmp(cmd, "ping") == 0 ||
         strcmp(cmd, "client|setname") == 0 || strcmp(cmd, "auth") == 0 ||
         strcmp(cmd, "select") == 0 || strcmp(cmd, "hello") == 0 ||
         strcmp(cmd, "NULL") == 0;
}

int fk_kill_cmd_conn(const char *name) {
  fk_conn conns[FK_MAX_CONNS];
  size_t n = fk_client_list(name, conns, FK_MAX_CONNS);
  if (n > FK_MAX_CONNS)
    n = FK_MAX_CONNS;
  const fk_conn *best = NULL;
  for (size_t i = 0; i < n; i++) {
    const fk_conn *c = &conns[i];
    if (fk_conn_is_pubsub(c))
      continue;
    if (best == NULL) {
      best = c;
      continue;
    }
    bool c_used = !handshake_cmd(c->cmd), b_used = !handshake_cmd(best->cmd);
    if ((c_used && !b_used) || (c_used == b_used && c->id < best->id))
      best = c;
  }
  if (best == NULL || !fk_kill_id(best->id))
    return 0;
  note_kill(best);
  return 1;
}

int fk_kill_sub_conn(const char *name) {
  fk_conn conns[FK_MAX_CONNS];
  size_t n = fk_client_list(name, conns, FK_MAX_CONNS);
  if (n > FK_MAX_CONNS)
    n = FK_MAX_CONNS;
  int killed = 0;
  for (size_t i = 0; i < n; i++)
    if (fk_conn_is_pubsub(&conns[i]) && fk_kill_id(conns[i].id)) {
      note_kill(&conns[i]);
      killed++;
    }
  return killed;
}

typedef struct conn_count {
  const char *name;
  size_t n;
} conn_count;

static bool conn_count_is(void *arg) {
  conn_count *w = arg;
  return rt_client_count_named(w->name) == w->n;
}

void fk_wait_conn_count(const char *name, size_t n, int64_t bound_ms) {
  conn_count w = {name, n};
  if (rt_poll_until(conn_count_is, &w, bound_ms))
    return;
  fk_conn conns[8];
  size_t have = fk_client_list(name, conns, 8);
  char list[512] = "";
  size_t used = 0;
  for (size_t i = 0; i < have && i < 8 && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used,
                             " [id %lld flags %s sub %d cmd %s]", conns[i].id,
                             conns[i].flags, conns[i].sub, conns[i].cmd);
  cr_assert_fail("client '%s' has %zu connection(s), expected %zu within "
                 "%" PRId64 " ms:%s",
                 name, have, n, bound_ms, list);
}

/* ---- servers ---- */

/* Answers PING and INFO says it is process `pid`. */
static bool answers_as(int port, pid_t pid) {
  struct timeval tv = {0, 250000};
  redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
  bool ok = false;
  if (ctx && !ctx->err) {
    redisSetTimeout(ctx, tv);
    redisReply *r = redisCommand(ctx, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING) {
      const char *p = strstr(r->str, "process_id:");
      ok = p && strtol(p + strlen("process_id:"), NULL, 10) == (long)pid;
    } else if (r && r->type == REDIS_REPLY_ERROR) {
      ok = true; /* NOAUTH etc.: it answers; the port is ours (bound) */
    }
    if (r)
      freeReplyObject(r);
  }
  if (ctx)
    redisFree(ctx);
  return ok;
}

/* Starts redis-server on `port`; false (with why) if it exited or did not
 * answer. The child gets SIGKILL when the test process dies. */
static bool spawn_on(fk_server *s, int port, const char *const *extra,
                     char *why, size_t why_n) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp)
    tmp = "/tmp";
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "%s/rlock-fk-XXXXXX", tmp);
  if (!mkdtemp(s->dir)) {
    snprintf(why, why_n, "mkdtemp: %s", strerror(errno));
    s->dir[0] = '\0';
    return false;
  }
  pid_t pid = rt_spawn_redis(port, s->dir, true, extra, why, why_n);
  cr_assert(pid > 0, "%s", why);

  int64_t deadline = rt_now_ms() + FK_START_BOUND_MS;
  while (rt_now_ms() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      char log[1024];
      rt_read_log(s->dir, log, sizeof log);
      snprintf(why, why_n, "redis-server on port %d exited: %s", port, log);
      rt_remove_dir(s->dir);
      s->dir[0] = '\0';
      return false;
    }
    if (answers_as(port, pid)) {
      s->pid = pid;
      s->port = port;
      snprintf(s->uri, sizeof s->uri, "redis://127.0.0.1:%d", port);
      return true;
    }
    rt_sleep_ms(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  snprintf(why, why_n, "redis-server on port %d did not answer within %d ms",
           port, FK_START_BOUND_MS);
  rt_remove_dir(s->dir);
  s->dir[0] = '\0';
  return false;
}

static void track(fk_server *s) {
  for (size_t i = 0; i < FK_MAX_SERVERS; i++)
    if (g_fk.extra[i] == NULL || g_fk.extra[i] == s) {
      g_fk.extra[i] = s;
      return;
    }
  cr_assert_fail("too many extra servers");
}

static void untrack(fk_server *s) {
  for (size_t i = 0; i < FK_MAX_SERVERS; i++)
    if (g_fk.extra[i] == s)
      g_fk.extra[i] = NULL;
}

void fk_server_spawn(fk_server *s, int port, const char *const *extra) {
  char why[1400] = "";
  for (int attempt = 0; attempt < 5; attempt++) {
    int p = port > 0 ? port : rt_free_port();
    if (spawn_on(s, p, extra, why, sizeof why)) {
      track(s);
      return;
    }
    if (port > 0 && !strstr(why, "in use"))
      break;
    rt_sleep_ms(50);
  }
  cr_assert_fail("cannot start an extra redis-server: %s", why);
}

static void halt(fk_server *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGCONT);
    kill(s->pid, SIGTERM);
    if (!rt_reap_bounded(s->pid, FK_STOP_BOUND_MS)) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
  }
  rt_remove_dir(s->dir);
  s->dir[0] = '\0';
}

void fk_server_halt(fk_server *s) {
  halt(s);
  untrack(s);
}

pid_t fk_server_pid(void) {
  return g_fk.restarted.pid > 0 ? g_fk.restarted.pid : rt_server_pid();
}

void fk_server_freeze(void) {
  cr_assert_eq(kill(fk_server_pid(), SIGSTOP), 0, "SIGSTOP: %s",
               strerror(errno));
  g_fk.frozen = true;
}

void fk_server_thaw(void) {
  cr_assert_eq(kill(fk_server_pid(), SIGCONT), 0, "SIGCONT: %s",
               strerror(errno));
  g_fk.frozen = false;
}

int64_t fk_server_restart_same_port(void) {
  int port = rt_port();
  if (g_fk.restarted.pid > 0) {
    kill(g_fk.restarted.pid, SIGKILL);
    waitpid(g_fk.restarted.pid, NULL, 0);
    g_fk.restarted.pid = 0;
    rt_remove_dir(g_fk.restarted.dir);
  } else {
    rt_server_kill(); /* SIGKILL works on a stopped server too */
  }
  g_fk.frozen = false;
  /* The harness drops its connection in rt_server_kill; after a restart of
   * our own server it must reconnect too. */
  rt_redis_set_auth(NULL, NULL);
  char why[1400] = "";
  int64_t deadline = rt_now_ms() + FK_START_BOUND_MS;
  while (rt_now_ms() < deadline) {
    if (spawn_on(&g_fk.restarted, port, NULL, why, sizeof why))
      return rt_now_ms();
    rt_sleep_ms(20);
  }
  cr_assert_fail("cannot restart redis-server on port %d: %s", port, why);
  return 0;
}

/* ---- stall monitor ----
 * A thread that sleeps 20 ms at a time and records how late it wakes: when a
 * time bound fails, this tells whether the whole test process was starved
 * of CPU (a loaded machine) rather than rlock being slow. */

#define FK_TICK_MS 20

static struct {
  pthread_t tid;
  bool running;
  atomic_bool stop;
  _Atomic int64_t max_gap;
} g_stall;

static void *stall_main(void *arg) {
  (void)arg;
  int64_t last = rt_now_ms();
  while (!atomic_load(&g_stall.stop)) {
    rt_sleep_ms(FK_TICK_MS);
    int64_t now = rt_now_ms();
    int64_t late = now - last - FK_TICK_MS;
    if (late > atomic_load(&g_stall.max_gap))
      atomic_store(&g_stall.max_gap, late);
    last = now;
  }
  return NULL;
}

int64_t fk_max_stall_ms(void) { return atomic_load(&g_stall.max_gap); }

void fk_init(void) {
  atomic_store(&g_stall.stop, false);
  atomic_store(&g_stall.max_gap, 0);
  g_stall.running = pthread_create(&g_stall.tid, NULL, stall_main, NULL) == 0;
  rt_server_start();
}

void fk_fini(void) {
  if (g_stall.running) {
    atomic_store(&g_stall.stop, true);
    pthread_join(g_stall.tid, NULL);
    g_stall.running = false;
  }
  if (g_fk.frozen && fk_server_pid() > 0)
    kill(fk_server_pid(), SIGCONT);
  g_fk.frozen = false;
  for (size_t i = 0; i < FK_MAX_SERVERS; i++)
    if (g_fk.extra[i] != NULL) {
      halt(g_fk.extra[i]);
      g_fk.extra[i] = NULL;
    }
  if (g_fk.restarted.pid > 0)
    halt(&g_fk.restarted);
  rt_server_stop();
}

/* ---- leak checks ---- */

long long fk_dbsize(void) { return rt_int("DBSIZE"); }

static bool no_channels(void *unused) {
  (void)unused;
  return rt_pubsub_channels(NULL, 0) == 0;
}

static bool no_conns(void *name) { return rt_client_count_named(name) == 0; }

static bool only_harness_conn(void *unused) {
  (void)unused;
  return rt_client_count() == 1;
}

typedef struct keys_check {
  bool allow_latches;
  char report[1024];
} keys_check;

#define LATCH_PREFIX "redisson_unlock_latch:"

static bool keys_clean(void *arg) {
  keys_check *k = arg;
  k->report[0] = '\0';
  redisReply *r = rt_cmd("KEYS *");
  bool clean = r->type == REDIS_REPLY_ARRAY;
  size_t used = 0;
  for (size_t i = 0; clean && i < r->elements; i++) {
    const char *key = r->element[i]->str;
    bool tolerated = false;
    long long ttl = -2;
    if (k->allow_latches &&
        strncmp(key, LATCH_PREFIX, strlen(LATCH_PREFIX)) == 0) {
      ttl = rt_pttl(key);
      tolerated = ttl > 0;
    }
    if (!tolerated) {
      if (used < sizeof k->report - 1)
        used += (size_t)snprintf(k->report + used, sizeof k->report - used,
                                 "%s%.200s (pttl %lld)", used ? ", " : "",
                                 key, ttl == -2 ? rt_pttl(key) : ttl);
      if (used >= sizeof k->report)
        used = sizeof k->report - 1;
    }
  }
  freeReplyObject(r);
  return clean && k->report[0] == '\0';
}

void fk_assert_clean(const char *client_name, bool allow_latches,
                     int64_t bound_ms) {
  if (!rt_poll_until(no_channels, NULL, bound_ms)) {
    char first[256];
    size_t n = rt_pubsub_channels(first, sizeof first);
    cr_assert_fail("leak: PUBSUB CHANNELS still lists %zu channel(s), first "
                   "'%s', %" PRId64 " ms after the last rlock call",
                   n, first, bound_ms);
  }
  if (client_name != NULL &&
      !rt_poll_until(no_conns, (void *)client_name, bound_ms))
    cr_assert_fail("leak: %zu connection(s) named '%s' still in CLIENT LIST "
                   "%" PRId64 " ms after rlock_client_free",
                   rt_client_count_named(client_name), client_name, bound_ms);
  if (!rt_poll_until(only_harness_conn, NULL, bound_ms))
    cr_assert_fail("leak: %zu connection(s) besides the test's own still in "
                   "CLIENT LIST %" PRId64 " ms after the clients were closed",
                   rt_client_count() - 1, bound_ms);
  keys_check k;
  k.allow_latches = allow_latches;
  if (!rt_poll_until(keys_clean, &k, bound_ms))
    cr_assert_fail("leak: keys left in Redis %" PRId64 " ms after the test's "
                   "last unlock: %s",
                   bound_ms, k.report);
}

/* ---- misc ---- */

void fk_copy_last_error(char *buf, size_t n) {
  snprintf(buf, n, "%s", rlock_last_error());
}

void fk_options(rlock_options *o, const char *client_name) {
  rlock_options_init(o);
  o->uri = rt_uri();
  o->client_name = client_name;
}

/* ---- jobs ---- */

#define FK_GO_BOUND_MS 20000

const char *fk_call_name(fk_call call) {
  switch (call) {
  case FK_TRY_LOCK:
    return "rlock_try_lock";
  case FK_LOCK:
    return "rlock_lock";
  case FK_UNLOCK:
    return "rlock_unlock";
  case FK_IS_LOCKED:
    return "rlock_is_locked";
  case FK_HOLD_COUNT:
    return "rlock_hold_count";
  case FK_REMAIN_TTL:
    return "rlock_remain_ttl";
  }
  return "?";
}

int64_t fk_call_once(rlock *lock, fk_call call, int64_t wait_ms,
                     int64_t lease_ms, int64_t *value) {
  switch (call) {
  case FK_TRY_LOCK:
    return rlock_try_lock(lock, wait_ms, lease_ms);
  case FK_LOCK:
    return rlock_lock(lock, lease_ms);
  case FK_UNLOCK:
    return rlock_unlock(lock);
  case FK_IS_LOCKED:
    return rlock_is_locked(lock);
  case FK_HOLD_COUNT:
    return rlock_hold_count(lock);
  case FK_REMAIN_TTL:
    return rlock_remain_ttl(lock, value);
  }
  return INT64_MIN;
}

static void job_main(void *arg) {
  fk_job *j = arg;
  atomic_store(&j->tid, rlock_thread_id());
  j->t_start = rt_now_ms();
  atomic_store(&j->started, true);
  j->rc = fk_call_once(j->lock, j->call, j->wait_ms, j->lease_ms, &j->value);
  j->t_end = rt_now_ms();
  fk_copy_last_error(j->err, sizeof j->err);
  bool acquired = (j->call == FK_TRY_LOCK && j->rc == 1) ||
                  (j->call == FK_LOCK && j->rc == 0);
  atomic_store(&j->done, true);
  if (j->unlock_after_go && acquired) {
    int64_t deadline = rt_now_ms() + FK_GO_BOUND_MS;
    while (!atomic_load(&j->go) && rt_now_ms() < deadline)
      rt_sleep_ms(1);
    j->unlock_rc = rlock_unlock(j->lock);
    fk_copy_last_error(j->unlock_err, sizeof j->unlock_err);
  }
  atomic_store(&j->finished, true);
}

void fk_job_start(fk_job *j, rlock *lock, fk_call call, int64_t wait_ms,
                  int64_t lease_ms, bool unlock_after_go) {
  memset(j, 0, sizeof *j);
  j->lock = lock;
  j->call = call;
  j->wait_ms = wait_ms;
  j->lease_ms = lease_ms;
  j->unlock_after_go = unlock_after_go;
  j->unlock_rc = INT64_MIN;
  rt_thread_start(&j->th, job_main, j);
}

bool fk_job_done(fk_job *j) { return atomic_load(&j->done); }

static bool job_done_cond(void *arg) { return fk_job_done(arg); }

static bool job_started_cond(void *arg) {
  return atomic_load(&((fk_job *)arg)->started);
}

int64_t fk_job_t_start(fk_job *j) {
  rt_wait_until_what(job_started_cond, j, 5000, "job thread started");
  return j->t_start;
}

void fk_job_wait_until(fk_job *j, int64_t deadline, const char *what) {
  int64_t t_start = fk_job_t_start(j);
  if (!rt_poll_until(job_done_cond, j, deadline - rt_now_ms()))
    cr_assert_fail("%s: %s(wait %" PRId64 ", lease %" PRId64
                   ") still blocked %" PRId64 " ms after it was called, "
                   "past its bound (longest CPU starvation of this test "
                   "process: %" PRId64 " ms)",
                   what ? what : "job", fk_call_name(j->call), j->wait_ms,
                   j->lease_ms, rt_now_ms() - t_start, fk_max_stall_ms());
}

void fk_job_wait_done(fk_job *j, int64_t bound_ms, const char *what) {
  fk_job_wait_until(j, rt_now_ms() + bound_ms, what);
}

void fk_job_join(fk_job *j, int64_t bound_ms) {
  atomic_store(&j->go, true);
  rt_thread_join(&j->th, bound_ms);
}

void fk_job_release(fk_job *j) {
  fk_job_join(j, FK_GO_BOUND_MS + 5000);
  cr_assert_eq(j->unlock_rc, 1, "the job's unlock returned %" PRId64
               " %s (%s), expected 1 (released)", j->unlock_rc,
               rlock_err_name((int)j->unlock_rc), j->unlock_err);
}

void fk_job_owner(fk_job *j, rlock_client *c, char *buf, size_t n) {
  snprintf(buf, n, "%s:%" PRIu64, rlock_client_id(c), atomic_load(&j->tid));
}

void fk_my_owner(rlock_client *c, char *buf, size_t n) {
  snprintf(buf, n, "%s:%" PRIu64, rlock_client_id(c), rlock_thread_id());
}

/* ---- keyspace events ---- */

redisContext *fk_keyspace_watch(const char *key) {
  rt_ok("OK", "CONFIG SET notify-keyspace-events Kgh");
  redisContext *ctx = rt_redis_new(5000);
  redisReply *r = redisCommand(ctx, "SUBSCRIBE __keyspace@0__:%s", key);
  cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY,
            "SUBSCRIBE to keyspace events failed");
  freeReplyObject(r);
  return ctx;
}

void fk_keyspace_collect(redisContext *ctx, char *buf, size_t n) {
  struct timeval tv = {0, 200000};
  redisSetTimeout(ctx, tv);
  size_t used = 0;
  buf[0] = '\0';
  for (;;) {
    void *reply = NULL;
    if (redisGetReply(ctx, &reply) != REDIS_OK || reply == NULL)
      break;
    redisReply *r = reply;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_STRING && used < n)
      used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? " " : "",
                               r->element[2]->str);
    freeReplyObject(r);
  }
  redisFree(ctx);
}

/* ---- a fake peer ---- */

#define FK_PEER_CONNS 32
#define FK_PEER_BUF 16384

typedef struct peer_conn {
  int fd;
  bool shut; /* write side shut down (hangup) */
  size_t len;
  char buf[FK_PEER_BUF];
} peer_conn;

static void peer_write(int fd, const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
    if (w <= 0)
      return; /* the client is gone: its close is seen on the next read */
    s += w;
    n -= (size_t)w;
  }
}

/* Reads a RESP line "<c><digits>\r\n" at *at; -1 incomplete, -2 malformed. */
static long long resp_number(const char *buf, size_t len, size_t *at, char c) {
  if (*at >= len)
    return -1;
  if (buf[*at] != c)
    return -2;
  const char *end = memchr(buf + *at, '\n', len - *at);
  if (end == NULL)
    return -1;
  long long v = strtoll(buf + *at + 1, NULL, 10);
  *at = (size_t)(end - buf) + 1;
  return v;
}

/* One command "*N\r\n$len\r\narg\r\n..." at the start of buf: its length,
 * 0 when incomplete, -1 when malformed; the first argument into name. */
static long resp_command(const char *buf, size_t len, char *name, size_t n) {
  size_t at = 0;
  long long argc = resp_number(buf, len, &at, '*');
  if (argc < -1 || argc == 0)
    return -1;
  if (argc == -1)
    return 0;
  name[0] = '\0';
  for (long long i = 0; i < argc; i++) {
    long long alen = resp_number(buf, len, &at, '$');
    if (alen < -1)
      return -1;
    if (alen == -1 || at + (size_t)alen + 2 > len)
      return 0;
    if (i == 0) {
      size_t k = (size_t)alen < n - 1 ? (size_t)alen : n - 1;
      for (size_t j = 0; j < k; j++) {
        char ch = buf[at + j];
        name[j] = (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
      }
      name[k] = '\0';
    }
    at += (size_t)alen + 2;
  }
  return (long)at;
}

static void peer_answer(fk_peer *p, peer_conn *pc, int *last_cmd_fd) {
  for (;;) {
    char name[16];
    long used = resp_command(pc->buf, pc->len, name, sizeof name);
    if (used == 0)
      return;
    if (used < 0) { /* not RESP: forget it */
      pc->len = 0;
      return;
    }
    memmove(pc->buf, pc->buf + used, pc->len - (size_t)used);
    pc->len -= (size_t)used;
    if (strcmp(name, "PING") == 0) {
      peer_write(pc->fd, "+PONG\r\n");
      if (atomic_load(&p->extra_after_pong))
        peer_write(pc->fd, "+OK\r\n");
      atomic_fetch_add(&p->pongs, 1);
    } else if (strcmp(name, "AUTH") == 0 || strcmp(name, "SELECT") == 0 ||
               strcmp(name, "CLIENT") == 0 || strcmp(name, "HELLO") == 0) {
      peer_write(pc->fd, "+OK\r\n");
    } else {
      *last_cmd_fd = pc->fd;
      atomic_fetch_add(&p->others, 1);
      const char *reply = atomic_load(&p->other_reply);
      if (reply != NULL)
        peer_write(pc->fd, reply);
    }
  }
}

static void *peer_main(void *arg) {
  fk_peer *p = arg;
  peer_conn *conns = calloc(FK_PEER_CONNS, sizeof *conns);
  if (conns == NULL)
    return NULL; /* the test sees no connection accepted */
  size_t nconns = 0;
  int last_cmd_fd = -1, inject_fd = -1;
  while (!atomic_load(&p->stop)) {
    struct pollfd pfd[FK_PEER_CONNS + 1];
    pfd[0].fd = p->listen_fd;
    pfd[0].events = nconns < FK_PEER_CONNS ? POLLIN : 0;
    for (size_t i = 0; i < nconns; i++) {
      pfd[i + 1].fd = conns[i].fd;
      pfd[i + 1].events = POLLIN;
    }
    int seq = atomic_load(&p->inject_seq);
    if (seq != p->inject_done) {
      p->inject_done = seq;
      if (last_cmd_fd >= 0) {
        inject_fd = last_cmd_fd;
        atomic_store(&p->inject_target_closed, false);
        peer_write(inject_fd, p->inject);
      }
    }
    if (poll(pfd, nconns + 1, 10) <= 0)
      continue;
    if (pfd[0].revents & POLLIN) {
      int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) {
        atomic_fetch_add(&p->accepted, 1);
        peer_conn *pc = &conns[nconns++];
        pc->fd = fd;
        pc->len = 0;
        pc->shut = false;
        if (p->greeting != NULL)
          peer_write(fd, p->greeting);
        if (p->hangup) {
          shutdown(fd, SHUT_WR);
          pc->shut = true;
        }
      }
    }
    for (size_t i = nconns; i-- > 0;) {
      if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      peer_conn *pc = &conns[i];
      size_t room = sizeof pc->buf - pc->len;
      if (room == 0) /* a command longer than the buffer: not ours */
        pc->len = 0, room = sizeof pc->buf;
      ssize_t n = read(pc->fd, pc->buf + pc->len, room);
      if (n < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (n <= 0) {
        if (pc->fd == inject_fd) {
          atomic_store(&p->inject_target_closed, true);
          inject_fd = -1;
        }
        if (pc->fd == last_cmd_fd)
          last_cmd_fd = -1;
        close(pc->fd);
        atomic_fetch_add(&p->client_eofs, 1);
        conns[i] = conns[--nconns]; /* pfd is rebuilt next turn */
        continue;
      }
      pc->len += (size_t)n;
      if (p->answer && !pc->shut)
        peer_answer(p, pc, &last_cmd_fd);
      else
        pc->len = 0;
    }
  }
  for (size_t i = 0; i < nconns; i++)
    close(conns[i].fd);
  free(conns);
  return NULL;
}

void fk_peer_init(fk_peer *p) {
  memset(p, 0, sizeof *p);
  p->listen_fd = -1;
  atomic_init(&p->other_reply, NULL);
}

void fk_peer_start(fk_peer *p) {
  for (int attempt = 0; attempt < 10 && p->listen_fd < 0; attempt++) {
    int port = rt_free_port();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (port > 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        listen(fd, 16) == 0) {
      p->listen_fd = fd;
      p->port = port;
    } else {
      close(fd); /* taken meanwhile by someone else: another free port */
    }
  }
  cr_assert(p->listen_fd >= 0, "no free port for the fake peer");
  atomic_store(&p->stop, false);
  cr_assert_eq(pthread_create(&p->th, NULL, peer_main, p), 0);
  p->running = true;
}

void fk_peer_inject(fk_peer *p, const char *bytes) {
  snprintf(p->inject, sizeof p->inject, "%s", bytes);
  atomic_fetch_add(&p->inject_seq, 1); /* publishes p->inject */
}

void fk_peer_stop(fk_peer *p) {
  if (p->running) {
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    p->running = false;
  }
  if (p->listen_fd >= 0) {
    close(p->listen_fd);
    p->listen_fd = -1;
  }
}

void fk_peer_uri(const fk_peer *p, char *buf, size_t n) {
  snprintf(buf, n, "redis://127.0.0.1:%d", p->port);
}

/* ---- process resources ---- */

/* Entries of a /proc directory, less the descriptor opendir itself holds
 * when counting /proc/self/fd. */
static int count_entries(const char *path, int own) {
  DIR *d = opendir(path);
  cr_assert_not_null(d, "opendir %s: %s", path, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - own;
}

int fk_count_fds(void) { return count_entries("/proc/self/fd", 1); }

int fk_count_threads(void) { return count_entries("/proc/self/task", 0); }

typedef struct resources {
  int fds, threads;
} resources;

static bool resources_back(void *arg) {
  resources *r = arg;
  return fk_count_fds() == r->fds && fk_count_threads() == r->threads;
}

void fk_assert_resources(int fds, int threads, int64_t bound_ms,
                         const char *what) {
  resources r = {fds, threads};
  if (rt_poll_until(resources_back, &r, bound_ms))
    return;
  cr_assert_fail("%s: %d descriptor(s) and %d thread(s) open, %" PRId64
                 " ms later; %d and %d before",
                 what, fk_count_fds(), fk_count_threads(), bound_ms, fds,
                 threads);
}
