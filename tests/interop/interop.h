/*
 * The interop suite's own harness, on top of tests/redis/harness.h: peer
 * processes that speak Redisson's lock protocol from outside rlock, a
 * MONITOR reader for asserting exact key names, and a scripted rlock
 * thread.
 *
 * Peers (see peer.js for the line protocol):
 *   PEER_NODE  node-redisson@1.0.4 on ioredis 5 (independent implementation),
 *              installed into the build dir on first use (setup-node.sh);
 *   PEER_JAVA  javapeer, a C program behaving like a Java Redisson 4.x
 *              client on the wire (javapeer.c).
 * Every peer gets PR_SET_PDEATHSIG(SIGKILL), a --deadline-ms of its own, and
 * is killed by interop_fini() whatever happened in the test.
 *
 * Like the harness, everything that can fail asserts, so call it from the
 * test's main thread only.
 */
#ifndef RLOCK_INTEROP_H
#define RLOCK_INTEROP_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "rlock.h"

/* Bounds used throughout the suite. The machine may be shared and busy, so
 * they are generous; WAKE_BOUND_MS is the one that proves wake-by-message:
 * every lock whose release is timed has a TTL of >= 30 s (or is renewed),
 * so only the published message can wake a waiter that fast. */
#define PEER_START_BOUND_MS 30000
#define REPLY_BOUND_MS 10000
#define WAKE_BOUND_MS 1500
#define JOIN_BOUND_MS 20000
#define NAME_MAX_LEN 160
#define CHANNEL_MAX_LEN 256
#define OWNER_MAX_LEN 128

/* Suite init/fini: start/stop the private redis-server and the stall
 * watcher; fini also kills every peer still running. */
void interop_init(void);
void interop_fini(void);
/* Instead of interop_init: no private server; every peer started from now
 * on is a cluster client over `seeds` ("host:port,host:port"; javapeer and
 * peer.js --cluster), with its log in log_dir. The caller starts and stops
 * the cluster (tests/topo/topo_harness.h); interop_fini stops the rest. */
void interop_init_cluster(const char *seeds, const char *log_dir);
/* SIGKILLs every peer still running (e.g. to abandon a void attempt). */
void interop_kill_peers(void);

/* ---- machine stalls ----
 * The machine the suite runs on may be shared and oversubscribed, and then
 * stands still for up to seconds at a time. A watcher thread (started by
 * interop_init) records every gap longer than 50 ms in which this process
 * could not run. Waits in this harness are extended by the stalled time, and
 * the tests judge timings with it (see test_interop.c). Any thread. */
int64_t interop_stalled_ms(int64_t from, int64_t to); /* total, in [from, to] */
int64_t interop_longest_stall(int64_t from, int64_t to);
/* rt_poll_until / rt_wait_until_what with the bound extended by stalls.
 * interop_poll_until: any thread; interop_wait_until: main thread. */
bool interop_poll_until(bool (*cond)(void *), void *arg, int64_t bound_ms);
void interop_wait_until(bool (*cond)(void *), void *arg, int64_t bound_ms,
                        const char *what);

/* ---- peers ---- */

typedef enum peer_kind { PEER_NODE, PEER_JAVA } peer_kind;

typedef struct peer peer;

/* Starts a peer against rt_uri() (or the cluster of interop_init_cluster)
 * and waits for its READY line.
 * watchdog_ms: its lock watchdog timeout (0 = the default 30000). */
peer *peer_start(peer_kind kind, int64_t watchdog_ms);
/* As peer_start; sharded: SPUBLISH/SSUBSCRIBE (PEER_JAVA only:
 * node-redisson 1.0.4 has no sharded mode; against a cluster, Java's
 * sharded AUTO mode). */
peer *peer_start_ex(peer_kind kind, int64_t watchdog_ms, bool sharded);
/* "node-redisson" or "java-like". */
const char *peer_label(const peer *p);
/* The peer's client id (from READY). */
const char *peer_id(const peer *p);

/* Sends one command line (printf format, no newline). */
void peer_send(peer *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Waits up to bound_ms for the peer's next answer line, which must start
 * with `word` (an ERROR or another answer fails the test, showing it);
 * returns the rest of the line (valid until peer_stop). */
const char *peer_expect(peer *p, const char *word, int64_t bound_ms);
/* The peer's next answer line, whatever it is (word included). */
const char *peer_next_answer(peer *p, int64_t bound_ms);
/* peer_send + peer_expect. */
const char *peer_call(peer *p, const char *word, int64_t bound_ms,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* True if an answer line is already there (reads what is available,
 * waits up to bound_ms). Does not consume it. */
bool peer_has_answer(peer *p, int64_t bound_ms);

/* Unprompted lines (WAITING <channel>, RENEWED <n>, LOST <name>): waits up
 * to bound_ms for the next unread one starting with `word` and returns its
 * rest, failing the test on timeout. peer_event_count counts those seen so
 * far (read or not), after reading what is available. */
const char *peer_expect_event(peer *p, const char *word, int64_t bound_ms);
size_t peer_event_count(peer *p, const char *word);
/* Marks every event line received so far as read. */
void peer_skip_events(peer *p);

/* The hash field this peer writes for `name`. */
void peer_owner(peer *p, const char *name, char *buf, size_t n);

/* Sends quit, waits (bounded) for the exit, else SIGKILL. */
void peer_stop(peer *p);
/* SIGKILL now, like a crashed client: its locks stay until their TTL. */
void peer_kill(peer *p);

/* ---- MONITOR ---- */

typedef struct monitor monitor;

/* A separate connection in MONITOR mode; everything the server runs from
 * now on is recorded. */
monitor *monitor_start(void);
/* The same on the server at 127.0.0.1:port (a cluster node). */
monitor *monitor_start_port(int port);
/* Reads the monitor until a marker command sent after this call shows up,
 * so every command that ran before the call has been recorded. */
void monitor_sync(monitor *m);
/* Recorded lines so far (after monitor_sync) and the i-th one. */
size_t monitor_count(const monitor *m);
const char *monitor_line(const monitor *m, size_t i);
/* Index of the first recorded line at or after `from` containing `needle`
 * (case-insensitive), or (size_t)-1. */
size_t monitor_find(const monitor *m, size_t from, const char *needle);
/* The first argument quoted after `needle` on line i: for
 * needle = "\"set\" \"" gives the key name. Copies into buf. */
bool monitor_arg_after(const monitor *m, size_t i, const char *needle,
                       char *buf, size_t n);
void monitor_stop(monitor *m);

/* ---- a scripted rlock thread ----
 * try_lock(wait_ms, lease_ms); if acquired, holds until release_now is set,
 * then unlocks `unlocks` times. Records results and timings; never asserts. */
typedef struct rl_worker {
  rlock_client *client;
  rlock *lock;
  int64_t wait_ms, lease_ms;
  int unlocks; /* 0 means 1 */
  /* results */
  atomic_int stage; /* 0 start, 1 calling try_lock, 2 returned, 3 unlocked */
  int acquire_rc;
  int64_t t_call, t_returned, t_unlocked;
  int unlock_rc[4];
  char owner[OWNER_MAX_LEN];
  atomic_bool release_now;
  rt_thread th;
} rl_worker;

void rl_worker_start(rl_worker *w, rlock_client *c, rlock *lock,
                     int64_t wait_ms, int64_t lease_ms);
/* Waits (asserting) until the worker reached `stage`. */
void rl_worker_wait_stage(rl_worker *w, int stage, int64_t bound_ms);
/* Lets the worker unlock, joins it. */
void rl_worker_finish(rl_worker *w);

/* ---- names and Redis ---- */

/* docs/wire-protocol.md's tag (brace rule): "{name}", or name when it contains '{'. */
void interop_braced(char *buf, size_t n, const char *name);
/* Waits until PUBSUB NUMSUB channel == want. */
void interop_wait_numsub(const char *channel, long long want, int64_t bound_ms);
/* The same with PUBSUB SHARDNUMSUB. */
void interop_wait_shardnumsub(const char *channel, long long want,
                              int64_t bound_ms);
/* The owner string of the calling thread on client c. */
void interop_my_owner(char *buf, size_t n, rlock_client *c);
/* Asserts HGET key field == expect (NULL: nil). */
void interop_assert_hget(const char *key, const char *field,
                         const char *expect);
/* EVAL + EVALSHA calls run to the end in `info` (INFO commandstats text):
 * calls less failed_calls. An EVALSHA answered NOSCRIPT counts as a call,
 * and failed, so a try re-sent after NOSCRIPT counts once, not twice. */
long long interop_script_runs(const char *info);

/* Prints a timing line to stderr, visible in `meson test -v`. */
void interop_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Acquisitions of client c that had to wait for another holder
 * (rlock_stats.acquisitions_contended). */
uint64_t interop_contended(rlock_client *c);

#endif
