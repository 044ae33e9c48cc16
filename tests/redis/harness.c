/* Test harness: one private redis-server per test process (see harness.h). */
#include "harness.h"
#include "free_port.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RT_START_BOUND_MS 5000
#define RT_STOP_BOUND_MS 5000
#define RT_START_ATTEMPTS 10
#define RT_MAX_EXTRA 96

/* RT_RENAMED=1: the harness's server runs as a managed service would (issue
 * 27): the administrative commands such services disable are renamed away
 * (ElastiCache, Azure and Memorystore refuse or rename them), so every test
 * of the suite shows that rlock's own paths never need them. The tests
 * themselves still use them to set up faults: the harness knows the secret
 * names and rewrites a command's first word (rt_cmd and friends, and
 * rt_admin() for the few connections a test drives by hand). */
static const char *const managed_off[] = {
    "CONFIG",  "DEBUG",   "KEYS",  "MONITOR", "SCRIPT",   "FLUSHALL",
    "FLUSHDB", "BGSAVE",  "SAVE",  "BGREWRITEAOF", "REPLICAOF", "SLAVEOF",
    "SHUTDOWN", "MIGRATE", "SWAPDB", NULL};
#define RT_SECRET_PREFIX "rt-secret-"

bool rt_renamed(void) {
  const char *v = getenv("RT_RENAMED");
  return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

const char *rt_admin(const char *cmd, char *buf, size_t n) {
  if (!rt_renamed())
    return cmd;
  for (size_t i = 0; managed_off[i] != NULL; i++) {
    size_t len = strlen(managed_off[i]);
    if (strncasecmp(cmd, managed_off[i], len) == 0 &&
        (cmd[len] == '\0' || cmd[len] == ' ')) {
      int w = snprintf(buf, n, RT_SECRET_PREFIX "%s", cmd);
      cr_assert(w > 0 && (size_t)w < n, "rt_admin: buffer too small");
      return buf;
    }
  }
  return cmd;
}


static struct {
  pid_t pid;     /* server pid, 0 when none was started */
  bool running;  /* started and not yet reaped */
  int port;
  int extra_port; /* RT_EXTRA_PORT's, 0: none */
  char dir[PATH_MAX];
  char uri[64];
  char *auth_user;
  char *auth_pass;
  redisContext *ctx; /* rt_redis() */
} g_srv;

/* ---- time ---- */

int64_t rt_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rt_sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                        .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- ports and processes ---- */

int rt_free_port(void) { return rt_pick_free_port(); }

bool rt_reap_bounded(pid_t pid, int64_t bound_ms) {
  int64_t deadline = rt_now_ms() + bound_ms;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return true;
    if (rt_now_ms() >= deadline)
      return false;
    rt_sleep_ms(5);
  }
}

static void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

void rt_remove_dir(const char *dir) {
  if (dir[0] == '\0')
    return;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char path[PATH_MAX + 256];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

void rt_read_log(const char *dir, char *buf, size_t n) {
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/redis.log", dir);
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  size_t got = fread(buf, 1, n - 1, f);
  buf[got] = '\0';
  fclose(f);
}

/* fork/exec of the server. Everything the child needs is prepared before
 * fork, so the child only makes async-signal-safe calls. */
static pid_t spawn_server(const char *bin, const char *const *argv,
                          int log_fd, int null_fd) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  /* Child. The server must not outlive the test process, even when the
   * test crashes or Criterion kills it on timeout. */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(126);
  dup2(null_fd, STDIN_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  if (strchr(bin, '/'))
    execv(bin, (char *const *)argv);
  else
    execvp(bin, (char *const *)argv);
  _exit(127);
}

pid_t rt_spawn_redis(int port, const char *dir, bool debug_cmd,
                     const char *const *extra, char *why, size_t why_n) {
  const char *bin = getenv("REDIS_SERVER");
  if (!bin || !*bin)
    bin = "redis-server";
  char port_s[16], log_path[PATH_MAX + 16];
  snprintf(port_s, sizeof port_s, "%d", port);
  snprintf(log_path, sizeof log_path, "%s/redis.log", dir);
  const char *argv[24 + RT_MAX_EXTRA];
  size_t a = 0;
  argv[a++] = bin;
  argv[a++] = "--save";
  argv[a++] = "";
  argv[a++] = "--appendonly";
  argv[a++] = "no";
  argv[a++] = "--bind";
  argv[a++] = "127.0.0.1";
  argv[a++] = "--port";
  argv[a++] = port_s;
  argv[a++] = "--daemonize";
  argv[a++] = "no";
  argv[a++] = "--dir";
  argv[a++] = dir;
  if (debug_cmd) {
    argv[a++] = "--enable-debug-command";
    argv[a++] = "yes";
  }
  for (size_t i = 0; extra && extra[i]; i++) {
    cr_assert_lt(i, RT_MAX_EXTRA, "too many extra server arguments");
    argv[a++] = extra[i];
  }
  argv[a] = NULL;

  int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0) {
    snprintf(why, why_n, "open log or /dev/null: %s", strerror(errno));
    if (log_fd >= 0)
      close(log_fd);
    if (null_fd >= 0)
      close(null_fd);
    return -1;
  }
  pid_t pid = spawn_server(bin, argv, log_fd, null_fd);
  int fork_errno = errno;
  close(log_fd);
  close(null_fd);
  if (pid < 0)
    snprintf(why, why_n, "fork: %s", strerror(fork_errno));
  return pid;
}

enum ready_state { READY, EXITED, FOREIGN, TIMEOUT };

static redisContext *connect_ctx(int port, int64_t timeout_ms) {
  struct timeval tv = {.tv_sec = (time_t)(timeout_ms / 1000),
                       .tv_usec = (suseconds_t)((timeout_ms % 1000) * 1000)};
  redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (ctx && !ctx->err)
    redisSetTimeout(ctx, tv);
  return ctx;
}

/* Sends AUTH when credentials are configured; true if OK (or none). */
static bool auth_ctx(redisContext *ctx) {
  if (!g_srv.auth_pass)
    return true;
  redisReply *r =
      g_srv.auth_user
          ? redisCommand(ctx, "AUTH %s %s", g_srv.auth_user, g_srv.auth_pass)
          : redisCommand(ctx, "AUTH %s", g_srv.auth_pass);
  bool ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
  if (r)
    freeReplyObject(r);
  return ok;
}

/* Polls until the server on `port` answers and is our child `pid`. */
static enum ready_state wait_ready(pid_t pid, int port, int *exit_status) {
  int64_t deadline = rt_now_ms() + RT_START_BOUND_MS;
  while (rt_now_ms() < deadline) {
    if (waitpid(pid, exit_status, WNOHANG) == pid)
      return EXITED;
    redisContext *ctx = connect_ctx(port, 250);
    if (ctx && !ctx->err) {
      auth_ctx(ctx);
      redisReply *r = redisCommand(ctx, "INFO server");
      enum ready_state st = TIMEOUT;
      if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "process_id:");
        long other = p ? strtol(p + strlen("process_id:"), NULL, 10) : -1;
        /* Another test's server may have won the race for the port: our
         * own child then fails to bind and exits. */
        st = (other == (long)pid) ? READY : FOREIGN;
      } else if (r) {
        /* Answered, but INFO is not allowed (ACL setups): accept it. */
        st = READY;
      }
      if (r)
        freeReplyObject(r);
      redisFree(ctx);
      if (st != TIMEOUT)
        return st;
    } else if (ctx) {
      redisFree(ctx);
    }
    rt_sleep_ms(10);
  }
  return TIMEOUT;
}

static void set_auth(const char *user, const char *password) {
  free(g_srv.auth_user);
  free(g_srv.auth_pass);
  g_srv.auth_user = user ? strdup(user) : NULL;
  g_srv.auth_pass = password ? strdup(password) : NULL;
}

static const char *const *renamed_extra(const char *const *extra) {
  static const char *all[RT_MAX_EXTRA + 1];
  static char names[sizeof managed_off / sizeof managed_off[0]][64];
  if (!rt_renamed())
    return extra;
  size_t a = 0;
  for (size_t i = 0; extra && extra[i]; i++)
    all[a++] = extra[i];
  for (size_t i = 0; managed_off[i] != NULL; i++) {
    cr_assert_leq(a + 3, RT_MAX_EXTRA, "too many extra server arguments");
    snprintf(names[i], sizeof names[i], RT_SECRET_PREFIX "%s", managed_off[i]);
    all[a++] = "--rename-command";
    all[a++] = managed_off[i];
    all[a++] = names[i];
  }
  all[a] = NULL;
  return all;
}

void rt_server_start(void) { rt_server_start_args(NULL); }

void rt_server_start_args(const char *const *extra) {
  /* A test-level .init may restart the suite's server with other args. */
  rt_server_stop();
  const char *bin = getenv("REDIS_SERVER");
  if (!bin || !*bin)
    bin = "redis-server";
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp)
    tmp = "/tmp";

  size_t n_extra = 0;
  while (extra && extra[n_extra])
    n_extra++;
  cr_assert_leq(n_extra, RT_MAX_EXTRA, "too many extra server arguments");
  set_auth(NULL, NULL);
  for (size_t i = 0; i + 1 < n_extra; i++)
    if (strcmp(extra[i], "--requirepass") == 0)
      set_auth(NULL, extra[i + 1]);

  memset(g_srv.dir, 0, sizeof g_srv.dir);
  snprintf(g_srv.dir, sizeof g_srv.dir, "%s/rlock-test-XXXXXX", tmp);
  if (!mkdtemp(g_srv.dir)) {
    int e = errno;
    g_srv.dir[0] = '\0';
    cr_assert_fail("mkdtemp in %s: %s", tmp, strerror(e));
  }
  bool debug_opt = true;
  char why[4096] = "no attempt made";
  const char *args[RT_MAX_EXTRA + 1];
  char extra_port_s[16] = "";
  bool wants_extra = false;
  for (size_t i = 0; i < n_extra; i++) {
    bool token = strcmp(extra[i], RT_EXTRA_PORT) == 0;
    wants_extra = wants_extra || token;
    args[i] = token ? extra_port_s : extra[i];
  }
  args[n_extra] = NULL;
  for (int attempt = 0; attempt < RT_START_ATTEMPTS; attempt++) {
    int port = rt_free_port(), extra_port = 0;
    while (wants_extra && port > 0 && (extra_port == 0 || extra_port == port))
      extra_port = rt_free_port(); /* never the same as port */
    if (port <= 0 || extra_port < 0) {
      snprintf(why, sizeof why, "no free port: %s", strerror(errno));
      break;
    }
    snprintf(extra_port_s, sizeof extra_port_s, "%d", extra_port);
    pid_t pid = rt_spawn_redis(port, g_srv.dir, debug_opt,
                               renamed_extra(args), why, sizeof why);
    if (pid < 0)
      break;

    int status = 0;
    enum ready_state st = wait_ready(pid, port, &status);
    if (st == READY) {
      g_srv.pid = pid;
      g_srv.running = true;
      g_srv.port = port;
      g_srv.extra_port = extra_port;
      snprintf(g_srv.uri, sizeof g_srv.uri, "redis://127.0.0.1:%d", port);
      if (rt_renamed()) {
        /* The server really is one without the admin commands. */
        redisContext *ctx = rt_redis_new(5000);
        redisReply *r = redisCommand(ctx, "CONFIG GET port");
        cr_assert(r != NULL && r->type == REDIS_REPLY_ERROR,
                  "RT_RENAMED: CONFIG still answers on port %d", port);
        freeReplyObject(r);
        redisFree(ctx);
      }
      return;
    }
    if (st != EXITED)
      kill_and_reap(pid);

    char log[2048];
    rt_read_log(g_srv.dir, log, sizeof log);
    if (st == TIMEOUT) {
      snprintf(why, sizeof why,
               "%.256s did not answer PING on port %d within %d ms; log:\n%s", bin,
               port, RT_START_BOUND_MS, log);
      break;
    }
    if (st == FOREIGN) { /* port taken by another test's server: new port */
      snprintf(why, sizeof why, "port %d answered by another server", port);
      continue;
    }
    if (debug_opt && strstr(log, "enable-debug-command")) {
      debug_opt = false; /* redis < 7: option unknown */
      attempt--;
      continue;
    }
    if (strstr(log, "already in use") || strstr(log, "Could not create")) {
      /* lost the port race: new ports */
      snprintf(why, sizeof why, "port %d (extra port %d): %.1024s", port,
               extra_port, log);
      continue;
    }
    snprintf(why, sizeof why,
             "%.256s exited at startup (%s %d; 127 = exec failed); log:\n%s",
             bin, WIFEXITED(status) ? "status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log);
    break;
  }
  rt_remove_dir(g_srv.dir);
  g_srv.dir[0] = '\0';
  cr_assert_fail("cannot start redis-server: %s", why);
}

static void drop_ctx(void) {
  if (g_srv.ctx) {
    redisFree(g_srv.ctx);
    g_srv.ctx = NULL;
  }
}

void rt_server_kill(void) {
  drop_ctx();
  if (g_srv.running) {
    kill_and_reap(g_srv.pid);
    g_srv.running = false;
  }
}

void rt_server_stop(void) {
  drop_ctx();
  if (g_srv.running) {
    kill(g_srv.pid, SIGTERM);
    if (!rt_reap_bounded(g_srv.pid, RT_STOP_BOUND_MS))
      kill_and_reap(g_srv.pid);
    g_srv.running = false;
  }
  rt_remove_dir(g_srv.dir);
  g_srv.dir[0] = '\0';
  set_auth(NULL, NULL);
}

const char *rt_uri(void) { return g_srv.uri; }
int rt_port(void) { return g_srv.port; }
int rt_extra_port(void) { return g_srv.running ? g_srv.extra_port : 0; }
pid_t rt_server_pid(void) { return g_srv.pid; }
const char *rt_server_dir(void) { return g_srv.dir; }

/* ---- plain Redis ---- */

redisContext *rt_redis_new(int64_t timeout_ms) {
  cr_assert(g_srv.port > 0, "rt_redis_new: no server started");
  redisContext *ctx = connect_ctx(g_srv.port, timeout_ms);
  cr_assert(ctx && !ctx->err, "connect to 127.0.0.1:%d: %s", g_srv.port,
            ctx ? ctx->errstr : "out of memory");
  cr_assert(auth_ctx(ctx), "AUTH failed on the harness connection");
  return ctx;
}

redisContext *rt_redis(void) {
  if (!g_srv.ctx)
    g_srv.ctx = rt_redis_new(5000);
  return g_srv.ctx;
}

void rt_redis_set_auth(const char *user, const char *password) {
  drop_ctx();
  set_auth(user, password);
}

static redisReply *vcmd(const char *fmt, va_list ap) {
  redisContext *ctx = rt_redis();
  char admin[1024];
  fmt = rt_admin(fmt, admin, sizeof admin);
  redisReply *r = redisvCommand(ctx, fmt, ap);
  cr_assert(r != NULL, "redis command \"%s\" failed: %s", fmt, ctx->errstr);
  return r;
}

redisReply *rt_cmd(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(fmt, ap);
  va_end(ap);
  return r;
}

long long rt_int(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(fmt, ap);
  va_end(ap);
  int type = r->type;
  long long v = r->integer;
  char err[256] = "";
  if (type == REDIS_REPLY_ERROR)
    snprintf(err, sizeof err, "%s", r->str);
  freeReplyObject(r);
  cr_assert_eq(type, REDIS_REPLY_INTEGER,
               "\"%s\": expected an integer reply, got type %d %s", fmt, type,
               err);
  return v;
}

char *rt_str(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(fmt, ap);
  va_end(ap);
  int type = r->type;
  char *s = NULL;
  if (type == REDIS_REPLY_STRING || type == REDIS_REPLY_STATUS) {
    s = malloc(r->len + 1);
    cr_assert(s != NULL);
    memcpy(s, r->str, r->len);
    s[r->len] = '\0';
  }
  char err[256] = "";
  if (type == REDIS_REPLY_ERROR)
    snprintf(err, sizeof err, "%s", r->str);
  freeReplyObject(r);
  cr_assert(type == REDIS_REPLY_STRING || type == REDIS_REPLY_STATUS ||
                type == REDIS_REPLY_NIL,
            "\"%s\": expected a string or nil reply, got type %d %s", fmt,
            type, err);
  return s;
}

void rt_ok(const char *expect, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(fmt, ap);
  va_end(ap);
  bool ok = (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) &&
            strcmp(r->str, expect) == 0;
  char got[256];
  snprintf(got, sizeof got, "type %d %s", r->type,
           r->str ? r->str : "(no text)");
  freeReplyObject(r);
  cr_assert(ok, "\"%s\": expected %s, got %s", fmt, expect, got);
}

int rt_exists(const char *key) { return (int)rt_int("EXISTS %s", key); }
long long rt_pttl(const char *key) { return rt_int("PTTL %s", key); }
char *rt_type(const char *key) { return rt_str("TYPE %s", key); }
char *rt_hget(const char *key, const char *field) {
  return rt_str("HGET %s %s", key, field);
}
long long rt_hlen(const char *key) { return rt_int("HLEN %s", key); }

static long long numsub(const char *cmd, const char *channel) {
  redisReply *r = rt_cmd("PUBSUB %s %s", cmd, channel);
  bool ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->type == REDIS_REPLY_INTEGER;
  long long v = ok ? r->element[1]->integer : -1;
  freeReplyObject(r);
  cr_assert(ok, "PUBSUB %s: unexpected reply", cmd);
  return v;
}

long long rt_numsub(const char *channel) { return numsub("NUMSUB", channel); }
long long rt_shardnumsub(const char *channel) {
  return numsub("SHARDNUMSUB", channel);
}

size_t rt_pubsub_channels(char *first, size_t n) {
  redisReply *r = rt_cmd("PUBSUB CHANNELS");
  bool ok = r->type == REDIS_REPLY_ARRAY;
  size_t count = ok ? r->elements : 0;
  if (first && n > 0) {
    first[0] = '\0';
    if (count > 0 && r->element[0]->type == REDIS_REPLY_STRING)
      snprintf(first, n, "%s", r->element[0]->str);
  }
  freeReplyObject(r);
  cr_assert(ok, "PUBSUB CHANNELS: not an array");
  return count;
}

static size_t client_list_count(const char *needle) {
  char *list = rt_str("CLIENT LIST");
  cr_assert(list != NULL, "CLIENT LIST: nil");
  size_t count = 0;
  for (char *line = list; *line;) {
    char *end = strchr(line, '\n');
    if (end)
      *end = '\0';
    if (*line && (!needle || strstr(line, needle)))
      count++;
    if (!end)
      break;
    line = end + 1;
  }
  free(list);
  return count;
}

size_t rt_client_count(void) { return client_list_count(NULL); }

size_t rt_client_count_named(const char *name) {
  char needle[256];
  snprintf(needle, sizeof needle, " name=%s ", name);
  return client_list_count(needle);
}

/* ---- rlock ---- */

rlock_client *rt_client_opts(rlock_options *o) {
  o->uri = rt_uri();
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, 0, "rlock_client_new(%s): %s (%s)", rt_uri(),
               rlock_err_name(rc), rlock_last_error());
  cr_assert(c != NULL, "rlock_client_new returned 0 but no client");
  return c;
}

rlock_client *rt_client(void) {
  rlock_options o;
  rlock_options_init(&o);
  return rt_client_opts(&o);
}

rlock *rt_lock(rlock_client *c, const char *name) {
  rlock *lock = NULL;
  int rc = rlock_new(c, name, &lock);
  cr_assert_eq(rc, 0, "rlock_new(%s): %s (%s)", name, rlock_err_name(rc),
               rlock_last_error());
  cr_assert(lock != NULL);
  return lock;
}

void rt_lock_channel(char *buf, size_t n, const char *name) {
  if (strchr(name, '{'))
    snprintf(buf, n, "redisson_lock__channel:%s", name);
  else
    snprintf(buf, n, "redisson_lock__channel:{%s}", name);
}

void rt_owner(char *buf, size_t n, rlock_client *c, uint64_t thread_id) {
  snprintf(buf, n, "%s:%" PRIu64, rlock_client_id(c), thread_id);
}

/* ---- names, waiting ---- */

void rt_key(char *buf, size_t n, const char *base) {
  static atomic_uint counter;
  unsigned k = atomic_fetch_add(&counter, 1) + 1;
  snprintf(buf, n, "%s:%ld:%u", base, (long)getpid(), k);
}

bool rt_poll_until(bool (*cond)(void *), void *arg, int64_t bound_ms) {
  int64_t deadline = rt_now_ms() + bound_ms;
  for (;;) {
    if (cond(arg))
      return true;
    if (rt_now_ms() >= deadline)
      return cond(arg);
    rt_sleep_ms(2);
  }
}

void rt_wait_until_what(bool (*cond)(void *), void *arg, int64_t bound_ms,
                        const char *what) {
  bool ok = rt_poll_until(cond, arg, bound_ms);
  cr_assert(ok, "condition \"%s\" not met within %" PRId64 " ms",
            what ? what : "(unnamed)", bound_ms);
}

void rt_wait_until(bool (*cond)(void *), void *arg, int64_t bound_ms) {
  rt_wait_until_what(cond, arg, bound_ms, NULL);
}

/* ---- threads ---- */

static void *thread_trampoline(void *p) {
  rt_thread *t = p;
  t->fn(t->arg);
  return NULL;
}

void rt_thread_start(rt_thread *t, void (*fn)(void *), void *arg) {
  t->fn = fn;
  t->arg = arg;
  int rc = pthread_create(&t->tid, NULL, thread_trampoline, t);
  cr_assert_eq(rc, 0, "pthread_create: %s", strerror(rc));
  t->started = true;
}

void rt_thread_join(rt_thread *t, int64_t bound_ms) {
  if (!t->started)
    return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(bound_ms / 1000);
  ts.tv_nsec += (long)(bound_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  int rc = pthread_timedjoin_np(t->tid, NULL, &ts);
  cr_assert_eq(rc, 0, "thread did not end within %" PRId64 " ms (%s)",
               bound_ms, strerror(rc));
  t->started = false;
}
