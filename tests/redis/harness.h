/*
 * Test harness for the `redis` suite: a private redis-server per test, plain
 * hiredis helpers for asserting on what is really in Redis, rlock client
 * helpers, unique key names, bounded waits and threads.
 *
 * Criterion forks every test into its own process, so each test gets its own
 * server:
 *
 *   TestSuite(lock, .init = rt_server_start, .fini = rt_server_stop,
 *             .timeout = 60);
 *
 * All rt_* functions that can fail assert (cr_assert) on failure, so they
 * must be called from the test's main thread only — Criterion's assertions
 * longjmp and are undefined on other threads. The exceptions, safe from any
 * thread, are marked "any thread".
 */
#ifndef RLOCK_TEST_HARNESS_H
#define RLOCK_TEST_HARNESS_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rlock.h"

/* ---- server ---- */

/* Starts redis-server ($REDIS_SERVER, else `redis-server` on PATH) on a free
 * 127.0.0.1 port in a fresh temporary directory, with `--save ''
 * --appendonly no --enable-debug-command yes` (the last one dropped if the
 * server rejects it), and waits up to ~5 s until it answers PING. Fails the
 * test if it cannot. The server gets SIGKILL if the test process dies. */
void rt_server_start(void);

/* As rt_server_start() with extra command-line arguments appended (a
 * NULL-terminated array, e.g. {"--requirepass", "s3cret", NULL}). When the
 * extra arguments contain `--requirepass P`, rt_redis() authenticates with
 * P. A server already running in this process is stopped first, so a test's
 * own `.init` can replace the suite's server (Criterion runs the suite's
 * .init, then the test's). */
void rt_server_start_args(const char *const *extra);

/* An extra argument that stands for a second port of the server's own (a
 * TLS port): each start attempt replaces it with a fresh free port, so a
 * port another server took meanwhile is not tried again and again. The
 * port of the running server's: rt_extra_port() (0: none). */
#define RT_EXTRA_PORT "@rt-extra-port@"
int rt_extra_port(void);

/* SIGTERM, bounded wait, SIGKILL; removes the directory. Safe to call when
 * the server was never started or was already killed. */
void rt_server_stop(void);

/* SIGKILLs the server now and reaps it (for "server died" tests). Closes the
 * rt_redis() connection. rt_server_stop() still cleans up afterwards. */
void rt_server_kill(void);

/* redis://127.0.0.1:PORT of the running server (static storage). */
const char *rt_uri(void);
int rt_port(void);
pid_t rt_server_pid(void);
/* The server's temporary directory (holds redis.log). */
const char *rt_server_dir(void);

/* A TCP port on 127.0.0.1 that nothing listens on right now. Any thread. */
int rt_free_port(void);

/* Building blocks for suites that run servers of their own (tests/faults):
 * starts a private redis-server on 127.0.0.1:port with its data and
 * redis.log in dir (no persistence; --enable-debug-command when debug_cmd;
 * then `extra`), killed if the test process dies. Does not wait for it to
 * answer. Returns its pid, or -1 with why set. */
pid_t rt_spawn_redis(int port, const char *dir, bool debug_cmd,
                     const char *const *extra, char *why, size_t why_n);
/* Waits up to bound_ms for pid to exit; true if it was reaped. */
bool rt_reap_bounded(pid_t pid, int64_t bound_ms);
/* Removes dir and the files in it. "" is ignored. */
void rt_remove_dir(const char *dir);
/* Reads up to n-1 bytes of dir/redis.log into buf (NUL-terminated). */
void rt_read_log(const char *dir, char *buf, size_t n);

/* ---- plain Redis for assertions ---- */

/* A synchronous hiredis connection to the server (made on first use, 5 s
 * command timeout; authenticates when the server was started with
 * --requirepass or after rt_redis_set_auth()). Main thread only. */
redisContext *rt_redis(void);

/* Credentials for rt_redis() (user may be NULL for AUTH <password>). Drops
 * the current connection; the next rt_redis() reconnects with them. */
void rt_redis_set_auth(const char *user, const char *password);

/* A new, separate synchronous connection (e.g. for SUBSCRIBE), with the
 * given read timeout. Free with redisFree(). */
redisContext *rt_redis_new(int64_t timeout_ms);

/* RT_RENAMED=1 in the environment: the harness's server (rt_server_start*)
 * has the commands managed services disable (CONFIG, DEBUG, KEYS, MONITOR,
 * SCRIPT, FLUSHALL, FLUSHDB, SAVE, BGSAVE, BGREWRITEAOF, REPLICAOF, SLAVEOF,
 * SHUTDOWN, MIGRATE, SWAPDB) renamed to names only the harness knows.
 * rt_cmd() and friends translate a command's first word themselves; a test
 * that sends one on a connection of its own passes the command through
 * rt_admin(cmd, buf, n), which returns cmd or its secret form (in buf). */
bool rt_renamed(void);
const char *rt_admin(const char *cmd, char *buf, size_t n);

/* Runs a command (hiredis format: %s, %b, %d ...) on rt_redis(); asserts a
 * reply came back (error replies are returned as such). freeReplyObject()
 * the result. */
redisReply *rt_cmd(const char *fmt, ...);
/* Runs a command and asserts an integer reply; returns it. */
long long rt_int(const char *fmt, ...);
/* Runs a command and asserts a string/status or nil reply: a malloc'd copy
 * (free() it), or NULL for nil. */
char *rt_str(const char *fmt, ...);
/* Runs a command and asserts a status/string reply equal to `expect`. */
void rt_ok(const char *expect, const char *fmt, ...);

int rt_exists(const char *key);     /* EXISTS key (0/1) */
long long rt_pttl(const char *key); /* PTTL key (-2 no key, -1 no TTL) */
/* TYPE key as a malloc'd string ("hash", "none", ...). */
char *rt_type(const char *key);
/* HGET key field as a malloc'd string or NULL. */
char *rt_hget(const char *key, const char *field);
long long rt_hlen(const char *key);
/* PUBSUB NUMSUB channel / PUBSUB SHARDNUMSUB channel. */
long long rt_numsub(const char *channel);
long long rt_shardnumsub(const char *channel);
/* Number of entries of PUBSUB CHANNELS * ; if first != NULL and there is at
 * least one, copies the first channel name into first (size n). */
size_t rt_pubsub_channels(char *first, size_t n);
/* CLIENT LIST line count, and how many lines contain " name=<name> ". */
size_t rt_client_count(void);
size_t rt_client_count_named(const char *name);

/* ---- rlock ---- */

/* Opens a client on rt_uri() with default options; asserts success. */
rlock_client *rt_client(void);
/* Sets o->uri = rt_uri() and opens; asserts success. */
rlock_client *rt_client_opts(rlock_options *o);
/* rlock_new() asserting success. */
rlock *rt_lock(rlock_client *c, const char *name);

/* The lock channel for a lock name, with the brace rule of docs/wire-protocol.md:
 * "redisson_lock__channel:{name}", or "redisson_lock__channel:name" when the
 * name already contains '{'. Any thread. */
void rt_lock_channel(char *buf, size_t n, const char *name);

/* The owner string / hash field "<client-id>:<thread-id>". Any thread. */
void rt_owner(char *buf, size_t n, rlock_client *c, uint64_t thread_id);

/* ---- names, time, waiting ---- */

/* A key unique per test: "<base>:<pid>:<counter>". Any thread. */
void rt_key(char *buf, size_t n, const char *base);

/* Monotonic milliseconds. Any thread. */
int64_t rt_now_ms(void);
void rt_sleep_ms(int64_t ms); /* any thread */

/* Polls cond(arg) every 2 ms until it returns true or bound_ms passes.
 * rt_poll_until returns whether it became true (any thread); rt_wait_until
 * fails the test on timeout, naming `what` if given. */
bool rt_poll_until(bool (*cond)(void *), void *arg, int64_t bound_ms);
void rt_wait_until(bool (*cond)(void *), void *arg, int64_t bound_ms);
void rt_wait_until_what(bool (*cond)(void *), void *arg, int64_t bound_ms,
                        const char *what);

/* ---- threads ---- */

typedef struct rt_thread {
  pthread_t tid;
  void (*fn)(void *);
  void *arg;
  bool started;
} rt_thread;

/* Starts fn(arg) on a new thread; asserts it started. fn must not assert. */
void rt_thread_start(rt_thread *t, void (*fn)(void *), void *arg);
/* Joins, failing the test if the thread has not ended within bound_ms. */
void rt_thread_join(rt_thread *t, int64_t bound_ms);

#endif
