/*
 * The redisson suite's harness: a real Java Redisson client (the project's
 * driver tests/redisson/Peer.java, run by tests/redisson/peer) against the
 * same server as rlock.
 *
 * The suite has its own main() (rs.c): before Criterion forks its test
 * processes it starts ONE redis-server and ONE JVM (the driver in --listen
 * mode) and shares them with every test through the environment; each test
 * opens its own TCP session to the JVM (its own Java threads, one per tag).
 * At the end both are killed by PID. When no peer is configured the suite
 * prints one line saying why and exits 77 (meson: SKIP), unless
 * RLOCK_REDISSON_REQUIRED=1 (CI), where that is a failure.
 *
 * Environment:
 *   RLOCK_REDISSON_PEER      the shared Redisson peer command (default
 *                            <repo>/../shared/redisson/peer)
 *   RLOCK_REDISSON_VARIANT   shared (default) or a Maven Central version
 *                            (e.g. 3.52.0), see tests/redisson/peer
 *   RLOCK_REDISSON_REQUIRED  1: a missing peer fails the suite
 *   RLOCK_REDISSON_DRIVER    the driver command instead of
 *                            tests/redisson/peer (check-bad-peer's fakes)
 *   RS_START_BOUND_MS        how long the driver may take to listen
 *                            (default 120000: the first run compiles)
 *
 * Every peer answer is awaited with a bound; a peer that stays silent, or
 * an answer the test did not expect, fails the test showing the line.
 * Like tests/redis/harness.h, everything that can fail asserts: call it
 * from the test's main thread, except where marked "any thread".
 */
#ifndef RLOCK_RS_H
#define RLOCK_RS_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "rlock.h"

/* Every timed wake-up in the suite is of a hold with a TTL of 30 s (or one
 * renewed by its watchdog), so a waiter that gets in within this bound was
 * woken by the release message, not by a TTL running out. Measured
 * wake-ups are a few ms (the tests print them); the bound is for a 2-core
 * machine running other suites at once (a load of 20 was seen to stretch
 * a wake-up past 1.5 s once). */
#define RS_WAKE_BOUND_MS 5000
#define RS_LEASE_MS 30000
/* Every answer of the peer must come within this (a hung peer fails):
 * 15 s, or $RS_REPLY_BOUND_MS (the harness's own bad-peer checks). */
int64_t rs_reply_bound_ms(void);
#define RS_REPLY_BOUND_MS rs_reply_bound_ms()
/* The shared JVM's watchdog timeout (--watchdog), and rlock's in tests
 * that use the watchdog. */
#define RS_WATCHDOG_MS 2000

/* ---- the shared server and JVM ---- */

int rs_port(void);             /* the standalone redis-server */
const char *rs_uri(void);      /* redis://127.0.0.1:PORT */
const char *rs_variant(void);  /* "shared", "3.52.0", ... */
const char *rs_version(void);  /* Redisson's version as the JVM reports it */

/* Prints a measurement line to stderr ("[redisson VARIANT] ..."), visible
 * in `meson test -v` and the test log. Any thread. */
void rs_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- a JVM of a test's own (cluster, sentinel) ---- */

typedef struct rs_jvm rs_jvm;
/* Starts the driver against TARGET (a port, "cluster:h:p,..." or
 * "sentinel:master:h:p,...") with --watchdog watchdog_ms, in --listen mode;
 * waits (bounded) for LISTEN. The JVM dies with the test process. */
rs_jvm *rs_jvm_start(const char *target, int64_t watchdog_ms);
void rs_jvm_stop(rs_jvm *j);

/* ---- sessions ---- */

typedef struct rs_peer rs_peer;

/* A session on the shared JVM (rs_jvm_connect: on a test's own). */
rs_peer *rs_connect(void);
rs_peer *rs_jvm_connect(rs_jvm *j);
/* The shared peer command itself (RLOCK_REDISSON_PEER PORT, unmodified,
 * on stdin/stdout) against the standalone server, in a JVM of its own;
 * rs_close stops it (quit, then SIGKILL after a bound). */
rs_peer *rs_shared_peer_start(void);
void rs_close(rs_peer *p);

/* Sends "TAG: command" (the command runs on the Java thread TAG). */
void rs_send(rs_peer *p, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Waits up to bound_ms for TAG's next answer; returns it without the tag
 * and the " (N ms)" timing ("OK true", "ERR Class msg"); fails the test on
 * timeout or a line that is not an answer, showing it. Valid until the
 * next call on p. */
const char *rs_answer(rs_peer *p, const char *tag, int64_t bound_ms);
/* Whether TAG's next answer has arrived (waits up to bound_ms). */
bool rs_has_answer(rs_peer *p, const char *tag, int64_t bound_ms);
/* rs_answer that must be "OK[ rest]": returns rest ("" if none). */
const char *rs_ok(rs_peer *p, const char *tag, int64_t bound_ms);
/* send + rs_ok. */
const char *rs_call(rs_peer *p, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* send + an answer that must be "OK true"/"OK false". */
bool rs_call_bool(rs_peer *p, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
long long rs_call_num(rs_peer *p, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* send + an answer that must be "ERR <Class> ...": returns it after ERR. */
const char *rs_call_err(rs_peer *p, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The Java thread TAG's owner string "<uuid>:<threadId>". */
void rs_owner(rs_peer *p, const char *tag, char *buf, size_t n);

/* ---- Redis and rlock ---- */

/* A command on the standalone server (rt_node_cmd semantics). */
redisReply *rs_cmd(const char *fmt, ...);
long long rs_int(const char *fmt, ...);
/* String reply as malloc'd copy or NULL. */
char *rs_str(const char *fmt, ...);
/* Waits until PUBSUB NUMSUB channel >= want on port. */
void rs_wait_numsub(int port, const char *channel, long long want,
                    int64_t bound_ms);
/* A waiter subscribes and then tries once more before it sleeps until a
 * message (both clients): a release in between is found by that retry, not
 * by the message. So a test that times a wake-up waits for the
 * subscription (rs_wait_numsub) and then RS_SETTLE_MS for that retry to be
 * over (seen in MONITOR: 5-100 ms on a loaded machine). */
#define RS_SETTLE_MS 300
/* Waits for the waiter as above; returns the time to release at. */
int64_t rs_wait_waiting(const char *channel);
/* The waiter woken by a release at t0: Java's TAG must answer OK (its text
 * in *answer when not NULL), C's task must end with `want`, both within
 * RS_WAKE_BOUND_MS of t0; returns how long it took. */
int64_t rs_java_woke(rs_peer *p, const char *tag, int64_t t0, const char **answer);
/* (rs_c_woke: below rs_task) */

/* Waits until `LLEN key` (or ZCARD / EXISTS... : the integer reply of the
 * command) >= want on port. */
void rs_wait_int(int port, long long want, int64_t bound_ms,
                 const char *fmt, ...);

/* An rlock client on uri (NULL: rs_uri()), watchdog_ms (0: default). */
rlock_client *rs_client(const char *uri, int64_t watchdog_ms);

/* A handle of the kind rlock_kind() names ("lock", "fair", "read",
 * "write", "fenced", "spin", "nonreentrant", "nonreentrant_fair"). */
rlock *rs_lock_kind(rlock_client *c, const char *kind, const char *name);

/* A unique name "<base>-<pid>-<n>". Any thread. */
void rs_name(char *buf, size_t n, const char *base);

int64_t rs_now_ms(void); /* any thread */
void rs_sleep_ms(int64_t ms);

/* ---- C work on a thread of its own ----
 * fn(arg) runs on a new thread; its result and the monotonic time it
 * returned are recorded. fn must not assert. */
typedef struct rs_task {
  int (*fn)(void *);
  void *arg;
  atomic_int done;
  int rc;
  int64_t t_done;
  pthread_t th;
} rs_task;
void rs_task_start(rs_task *t, int (*fn)(void *), void *arg);
/* Joins within bound_ms (fails the test if still running); returns rc. */
int rs_task_join(rs_task *t, int64_t bound_ms);
bool rs_task_done(rs_task *t);
int64_t rs_c_woke(rs_task *t, int64_t t0, int want);

#endif

/* ---- MONITOR ---- */

/* A MONITOR connection to the standalone server: every command the server
 * runs from now on is recorded. */
typedef struct rs_monitor rs_monitor;
rs_monitor *rs_monitor_start(void);
/* Reads until a marker sent now shows up, so that everything the server
 * ran before this call is recorded; then hands over the lines recorded
 * since the last rs_monitor_take (malloc'd array of malloc'd strings, free
 * with rs_lines_free) and forgets them. */
char **rs_monitor_take(rs_monitor *m, size_t *n);
void rs_lines_free(char **lines, size_t n);
void rs_monitor_stop(rs_monitor *m);
