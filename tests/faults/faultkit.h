/*
 * Fault injection for the `faults` and `badinput` suites, on top of the
 * redis test harness (tests/redis/harness.h):
 *
 *  - finding an rlock client's connections in CLIENT LIST (by the
 *    client_name option) and killing the command or the subscriber one;
 *  - freezing the server (SIGSTOP/SIGCONT of its pid);
 *  - restarting redis on the same port (a crash: the data is gone);
 *  - extra servers (e.g. a replica) started and stopped by the test;
 *  - "nothing leaked" checks: PUBSUB CHANNELS empty, the client's
 *    connections gone from CLIENT LIST, no stray keys.
 *
 * Use fk_init / fk_fini as the suite's .init / .fini: fk_fini resumes a
 * stopped server and stops every server this kit or the harness started,
 * even when a test failed half-way.
 *
 * Like the harness, every fk_* function that can fail asserts, so it must be
 * called from the test's main thread only.
 */
#ifndef RLOCK_TEST_FAULTKIT_H
#define RLOCK_TEST_FAULTKIT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

/* ---- connections as the server sees them ---- */

typedef struct fk_conn {
  long long id;
  char name[72];
  char flags[24];
  char cmd[48];
  int db;
  int sub, psub, ssub; /* subscription counts */
} fk_conn;

/* Parses CLIENT LIST into out (at most max entries); only connections named
 * `name` when name != NULL. Returns how many matched (may exceed max). */
size_t fk_client_list(const char *name, fk_conn *out, size_t max);

/* True for a connection in pub/sub mode, or whose last command was a
 * (un)subscribe: rlock's subscriber connection. */
bool fk_conn_is_pubsub(const fk_conn *c);

/* CLIENT KILL ID id; true if a connection was killed. */
bool fk_kill_id(long long id);

/* Kills the command connection of the rlock client named `name`: the named
 * connection that is not in pub/sub mode. When two named connections look
 * alike (both fresh after a reconnect), the one that has run a real command
 * wins, else the older one (lower id: rlock connects the command connection
 * first). Returns 1 if one was killed, 0 if none was found. */
int fk_kill_cmd_conn(const char *name);

/* Kills the subscriber connection(s) of the client named `name` (those in
 * pub/sub mode). Returns how many were killed. */
int fk_kill_sub_conn(const char *name);

/* "evalsha x12, ping x1": the last command of every connection the kills
 * above hit (to tell in logs what the faults interrupted). */
void fk_kill_summary(char *buf, size_t n);

/* Waits (bounded) until the client named `name` has exactly `n` connections. */
void fk_wait_conn_count(const char *name, size_t n, int64_t bound_ms);

/* ---- the server process ---- */

/* The pid of the server now answering on rt_port() (after
 * fk_server_restart_same_port(), the new one). */
pid_t fk_server_pid(void);

/* SIGSTOP / SIGCONT of fk_server_pid(). While stopped, do not use rt_redis()
 * (it would block for its 5 s timeout). fk_fini resumes a stopped server. */
void fk_server_freeze(void);
void fk_server_thaw(void);

/* Crash-restarts redis on the same port: SIGKILLs the current server (the
 * data is gone, as after a crash with persistence off) and starts a fresh
 * one on rt_port() with the harness's arguments, waiting until it answers.
 * rt_redis() reconnects to it on next use. Returns the time (rt_now_ms())
 * at which the new server answered PING. */
int64_t fk_server_restart_same_port(void);

/* An extra server started by a test (e.g. a replica). */
typedef struct fk_server {
  pid_t pid;
  int port;
  char dir[PATH_MAX];
  char uri[64];
} fk_server;

/* Starts redis-server on 127.0.0.1:port (0: a free port) with the harness's
 * defaults plus `extra` (NULL-terminated, may be NULL); waits until it
 * answers. Fails the test if it cannot. fk_fini stops it if the test does
 * not. */
void fk_server_spawn(fk_server *s, int port, const char *const *extra);
/* SIGTERM (bounded), SIGKILL, reap, remove its directory. */
void fk_server_halt(fk_server *s);

/* Suite .init: rt_server_start() plus a stall monitor (below). */
void fk_init(void);
/* Suite .fini: stops the monitor, resumes a frozen server, stops
 * extra/restarted servers and the harness's server. */
void fk_fini(void);
/* Longest time, since fk_init, that the test process was not scheduled
 * (measured by a thread that sleeps 20 ms at a time): printed with time
 * bound failures, so that a starved machine is not taken for a slow rlock.
 * Any thread. */
int64_t fk_max_stall_ms(void);

/* ---- leak checks ---- */

/* Asserts, each within bound_ms: PUBSUB CHANNELS is empty; no connection
 * named client_name is left (skipped when NULL); the database holds no key
 * at all (when allow_latches, keys named redisson_unlock_latch:* that have a
 * TTL are tolerated: an unlock whose latch DEL was lost with a killed
 * connection leaves one, and it expires on its own, as with Java). */
void fk_assert_clean(const char *client_name, bool allow_latches,
                     int64_t bound_ms);

/* DBSIZE. */
long long fk_dbsize(void);

/* ---- keyspace events (what really ran on the server) ---- */

/* Enables keyspace notifications for hashes and generic commands and
 * subscribes a new connection to the key's events. */
redisContext *fk_keyspace_watch(const char *key);
/* Reads the events that arrived (until 200 ms of quiet) into buf, space
 * separated ("hincrby expire del"), and frees the connection. */
void fk_keyspace_collect(redisContext *ctx, char *buf, size_t n);

/* ---- a fake peer: something on a TCP port that is not (quite) Redis ----
 * A thread that listens on 127.0.0.1:port (a free port) and serves every
 * connection it accepts: writes `greeting` at once; with `hangup`, then
 * shuts down its write side (FIN) and closes once the client has closed
 * (reading what the client sends, so that the close is no RST). With
 * `answer`, it answers the commands it reads (RESP arrays) as Redis does for
 * rlock's handshake: PING -> +PONG, AUTH/SELECT/CLIENT/HELLO -> +OK, and
 * any other command with `other_reply` (NULL: no answer, a server that
 * swallows commands). A connection closed by the client is closed here too,
 * so the peer holds no descriptor for a client that is gone. */

typedef struct fk_peer {
  /* set before fk_peer_start */
  const char *greeting; /* NULL: none */
  bool hangup;
  bool answer;
  _Atomic(const char *) other_reply; /* may be changed while running */
  atomic_bool extra_after_pong; /* write "+OK\r\n" right after every +PONG */
  /* read-only for the test */
  int port;
  atomic_int accepted;    /* connections accepted */
  atomic_int client_eofs; /* connections the client closed */
  atomic_int pongs;       /* PINGs answered */
  atomic_int others;      /* non-handshake commands read */
  atomic_bool inject_target_closed; /* the client closed fk_peer_inject's
                                       connection */
  /* private */
  int listen_fd;
  atomic_int inject_seq;
  int inject_done;
  char inject[128];
  atomic_bool stop;
  pthread_t th;
  bool running;
} fk_peer;

/* Zeroes *p; the caller then sets the configuration fields. */
void fk_peer_init(fk_peer *p);
/* Binds a free 127.0.0.1 port and starts the thread. Main thread. */
void fk_peer_start(fk_peer *p);
/* Writes `bytes` once on the connection that last sent a non-handshake
 * command (rlock's command connection). Main thread; returns at once. */
void fk_peer_inject(fk_peer *p, const char *bytes);
/* Stops the thread and closes every descriptor. Main thread. */
void fk_peer_stop(fk_peer *p);
/* redis://127.0.0.1:<port> of the peer, into buf. */
void fk_peer_uri(const fk_peer *p, char *buf, size_t n);

/* ---- process resources ---- */

/* Entries of /proc/self/fd and /proc/self/task: open descriptors and
 * threads of the test process. */
int fk_count_fds(void);
int fk_count_threads(void);
/* Asserts, within bound_ms (a peer closes its side of a connection only once
 * it sees the client's close), that the process is back to `fds` descriptors
 * and `threads` threads. */
void fk_assert_resources(int fds, int threads, int64_t bound_ms,
                         const char *what);

/* ---- misc ---- */

/* Copies rlock_last_error() of the calling thread into buf. Any thread. */
void fk_copy_last_error(char *buf, size_t n);

/* Options with uri = rt_uri() and the given client name. */
void fk_options(rlock_options *o, const char *client_name);

/* ---- one rlock call on its own thread ----
 * Criterion assertions are main-thread only: a job makes one call on a new
 * thread and records its result, detail and timing; the main thread asserts
 * on them. With unlock_after_go, a job that acquired then waits (up to 20 s)
 * for fk_job_go() and unlocks, recording that result too. */

typedef enum fk_call {
  FK_TRY_LOCK,   /* rlock_try_lock(lock, wait_ms, lease_ms) */
  FK_LOCK,       /* rlock_lock(lock, lease_ms) */
  FK_UNLOCK,     /* rlock_unlock(lock) */
  FK_IS_LOCKED,  /* rlock_is_locked(lock) */
  FK_HOLD_COUNT, /* rlock_hold_count(lock) */
  FK_REMAIN_TTL, /* rlock_remain_ttl(lock, &value) */
} fk_call;

typedef struct fk_job {
  rlock *lock;
  fk_call call;
  int64_t wait_ms, lease_ms;
  bool unlock_after_go;
  /* results, valid once done */
  int64_t rc;
  int64_t value; /* FK_REMAIN_TTL: the ttl */
  char err[256]; /* rlock_last_error() after the call */
  int64_t t_start, t_end;
  int64_t unlock_rc;
  char unlock_err[256];
  _Atomic uint64_t tid; /* rlock_thread_id() of the job's thread */
  atomic_bool started, done, go, finished;
  rt_thread th;
} fk_job;

void fk_job_start(fk_job *j, rlock *lock, fk_call call, int64_t wait_ms,
                  int64_t lease_ms, bool unlock_after_go);
/* Asserts the call returns within bound_ms from now / by `deadline`
 * (rt_now_ms() time). */
void fk_job_wait_done(fk_job *j, int64_t bound_ms, const char *what);
void fk_job_wait_until(fk_job *j, int64_t deadline, const char *what);
/* When the call was made (waits until the thread got that far). */
int64_t fk_job_t_start(fk_job *j);
bool fk_job_done(fk_job *j); /* any thread */
/* Lets an unlock_after_go job unlock, joins it (bounded) and asserts the
 * unlock returned 0. */
void fk_job_release(fk_job *j);
/* Joins the thread (bounded), no checks. */
void fk_job_join(fk_job *j, int64_t bound_ms);
/* The owner string of the job's thread ("<client-id>:<thread-id>"). */
void fk_job_owner(fk_job *j, rlock_client *c, char *buf, size_t n);

/* "<client-id>:<thread-id>" of the calling thread. */
void fk_my_owner(rlock_client *c, char *buf, size_t n);

/* Calls the rlock function of `call` on the calling thread (any thread). */
int64_t fk_call_once(rlock *lock, fk_call call, int64_t wait_ms,
                     int64_t lease_ms, int64_t *value);
const char *fk_call_name(fk_call call);

#endif
