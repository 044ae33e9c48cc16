/*
 * rlock — Redisson-compatible distributed locks for C.
 *
 * A C program using rlock and a Java program using Redisson can guard one
 * resource with the same lock name: both use the same Redis hash, hash field
 * (`<client-uuid>:<thread-id>`), pub/sub channel and Lua semantics.
 *
 * Layout: the declarations are grouped by object, each group under a
 * banner comment, in the order docs/api.md lists them ("The header, group
 * by group"): library, diagnostics and events, stats, client options,
 * client, locks, asynchronous requests, MultiLock, semaphores, latch,
 * fencing, election, introspection, listing names.
 *
 * Threading: every function in this header is thread-safe unless its comment
 * says otherwise. A client owns one libuv loop thread and two Redis
 * connections (commands and pub/sub); calls from any number of threads are
 * queued to that thread and pipelined on the command connection. Blocking
 * calls must not be made from the client's own loop thread (for example from
 * an `on_lock_lost` callback): they return RLOCK_EDEADLK instead.
 *
 * Errors: functions return 0 (or 1/0 for yes/no answers, or a count) on
 * success and a negative RLOCK_E* code on failure. rlock_strerror() and
 * rlock_err_name() describe a code; rlock_last_error() gives the detail of
 * the calling thread's last failure (e.g. the server's own error text).
 *
 * fork(): a client belongs to the process that opened it. In a forked child
 * every call on the parent's client returns RLOCK_EFORK at once, and
 * rlock_client_free() returns without touching what the child shares with
 * the parent; the child opens its own client.
 */
#ifndef RLOCK_H
#define RLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* memset in the inline initialisers */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define RLOCK_EXTERN __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define RLOCK_EXTERN __attribute__((visibility("default")))
#else
#define RLOCK_EXTERN
#endif

/* ========================================================================
 * Library: version, limits, errors, handles
 * (docs/errors.md; docs/api.md, "API overview")
 * ===================================================================== */

/* The version of this header (semantic versioning; meson.build's project
 * version, which the build checks them against). A program built against
 * it may run with a newer library of the same soname: rlock_version() says
 * which version is running. */
#define RLOCK_VERSION_MAJOR 1
#define RLOCK_VERSION_MINOR 0
#define RLOCK_VERSION_PATCH 0
#define RLOCK_VERSION_STRING "1.0.0"

/* Longest lock name accepted, in bytes. Longer names give
 * RLOCK_ENAMETOOLONG. */
#define RLOCK_NAME_MAX 65535

/* Length of rlock_client_id(), without the terminating NUL. */
#define RLOCK_ID_LEN 36

/*
 * The error table: X(name, value, message). Values are stable.
 */
#define RLOCK_ERRNO_MAP(X)                                                     \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(EURI, -3, "invalid Redis URI")                                             \
  X(ECONN, -4, "connection to Redis failed or was lost")                       \
  X(ETIMEDOUT, -5, "Redis command timed out")                                  \
  X(ECLOSED, -6, "client is closed")                                           \
  X(ECANCELED, -7, "operation canceled")                                       \
  X(EDEADLK, -8, "blocking call made on the client's own loop thread")         \
  X(ENOTOWNER, -9, "lock is not held by this owner")                           \
  X(ELOCKLOST, -10, "lock was lost (expired or deleted) while held")           \
  X(ESERVER, -11, "Redis replied with an error")                               \
  X(EWRONGTYPE, -12, "lock key holds a value that is not a lock (WRONGTYPE)")  \
  X(ENOPERM, -13, "Redis user lacks permission (NOPERM)")                      \
  X(EAUTH, -14, "Redis authentication failed")                                 \
  X(EOOM, -15, "Redis is out of memory (OOM)")                                 \
  X(EREADONLY, -16, "Redis server is a read-only replica")                     \
  X(EPROTO, -17, "unexpected reply from Redis")                                \
  X(ENAMETOOLONG, -18, "lock name longer than RLOCK_NAME_MAX")                 \
  X(ESYS, -19, "system resource error (thread, loop or socket setup)")         \
  X(EFORK, -20, "client used in a forked child process")                       \
  X(ETLS, -21, "TLS failed (handshake, certificate, or TLS not built in)")     \
  X(EBACKLOG, -22,                                                             \
    "too much waiting to be written to Redis (write queue full)")              \
  X(EKIND, -23, "the key holds another kind of lock (e.g. a read/write lock)") \
  X(ENOREPLICA, -24, "no replica confirmed the write (replica sync)")          \
  X(ECLUSTER, -25,                                                             \
    "Redis Cluster cannot serve the key now (CLUSTERDOWN, TRYAGAIN, "          \
    "redirects, slots)")                                                       \
  X(EREENTRY, -26, "non-reentrant lock already held by this owner")            \
  X(ESTALE, -27,                                                               \
    "fencing token is older than one the resource has seen (stale holder)")    \
  X(EFOREIGN, -28,                                                             \
    "fencing token is from another lock than the one the guard fences")

typedef enum rlock_errno {
#define RLOCK__ERR_ENUM(name, value, msg) RLOCK_##name = (value),
  RLOCK_ERRNO_MAP(RLOCK__ERR_ENUM)
#undef RLOCK__ERR_ENUM
} rlock_errno;

/* Message for an error code; never NULL ("unknown error" for unknown codes). */
RLOCK_EXTERN const char *rlock_strerror(int err);

/* Symbolic name of an error code, e.g. "RLOCK_ENOTOWNER"; never NULL. */
RLOCK_EXTERN const char *rlock_err_name(int err);

/* The running library's version, "MAJOR.MINOR.PATCH" (e.g. "1.0.0"): the
 * RLOCK_VERSION_STRING it was built with, which may be newer than the
 * header a program was compiled against. Static; never NULL. Thread-safe. */
RLOCK_EXTERN const char *rlock_version(void);

/*
 * Detail of the calling thread's most recent failed rlock call: the server's
 * error text (e.g. "WRONGTYPE Operation against a key holding the wrong kind
 * of value") or a sentence naming what was wrong. Empty string when the last
 * call on this thread succeeded. Valid until the next rlock call on this
 * thread. Thread-local; thread-safe.
 */
RLOCK_EXTERN const char *rlock_last_error(void);

/* Opaque handles. */
typedef struct rlock_client rlock_client;
typedef struct rlock rlock;

/* ========================================================================
 * Diagnostics and events: the callbacks a client makes
 * (docs/api.md, "Diagnostics" and "Events")
 * ===================================================================== */

/*
 * Called on the client's loop thread when the watchdog finds that a lock it
 * was renewing is no longer held by its owner (it expired or was deleted).
 * `name` is the lock name, `owner` the owner string
 * (`<client-uuid>:<thread-id>`). Must not block and must not make blocking
 * rlock calls (they return RLOCK_EDEADLK).
 */
typedef void (*rlock_lock_lost_cb)(const char *name, const char *owner,
                                   void *data);

/* How much a diagnostics message matters (rlock_options.on_diag). */
typedef enum rlock_diag_level {
  RLOCK_DIAG_ERROR = 0, /* safety or service at stake: a connection dropped
                           for bad bytes, a lock its renewal found gone */
  RLOCK_DIAG_WARN = 1,  /* a fault rlock works around: a lost connection, a
                           failed attempt, a failed renewal, replica sync
                           off on a server */
  RLOCK_DIAG_INFO = 2,  /* a change of state: connected, reconnected, a new
                           master or slot map, channels resubscribed */
  RLOCK_DIAG_DEBUG = 3, /* detail: what the capability probes found */
} rlock_diag_level;

/* "ERROR", "WARN", "INFO" or "DEBUG"; "?" for another value. Never NULL. */
RLOCK_EXTERN const char *rlock_diag_level_name(int level);

/*
 * Diagnostics: what the client does on the network, as one line of text
 * (no newline; stable wording, naming the server as host:port where one is
 * concerned - docs/api.md, Diagnostics, lists them). `client` is the client
 * the message is about: the messages of the connections made during
 * rlock_client_new() come before open returns it, so compare it, do not
 * use it. `message` is valid for the call only.
 * Runs on the client's loop thread, one call at a time, never after
 * rlock_client_free() has returned. It must not block (the client's
 * network and timers wait for it) and must not call into the library:
 * blocking rlock calls return RLOCK_EDEADLK there, and
 * rlock_client_free() of its own client is not allowed.
 */
typedef void (*rlock_diag_cb)(rlock_client *client, rlock_diag_level level,
                              const char *message, void *data);

/*
 * Events (docs/api.md, "Events"). The handler set in rlock_options.on_event
 * is called on the client's loop thread for each event below, in the order
 * they happen. It must not block: every lock of the client waits while it
 * runs. Blocking rlock calls made from it return RLOCK_EDEADLK; async calls,
 * rlock_client_stats() and rlock_client_id() are fine. An event carries
 * what a handler needs: its strings (kind, name, owner, detail, client_id,
 * client_name) are valid only during the call - copy what you keep.
 * Later versions may add types: a handler ignores those it does not know.
 */
typedef enum rlock_event_type {
  /* An acquire call (lock, try_lock, semaphore or latch wait, async or
   * blocking) got what it asked for: kind, name, owner, wait_ms (from the
   * call, in the calling thread, to the server's yes; a GAVE_UP's likewise,
   * so one that timed out is never below the wait it was given), attempts
   * (tries sent). */
  RLOCK_EVENT_ACQUIRED = 1,
  /* An unlock of a lock kind (not semaphores) succeeded: hold_ms (since
   * the owner's outermost hold was taken, as this client saw it),
   * hold_count left (0: the lock is free now). */
  RLOCK_EVENT_RELEASED = 2,
  /* An acquire call ended without the lock: cause RLOCK_EVENT_TIMEOUT
   * (wait_ms passed, a try_lock with wait 0 included), RLOCK_EVENT_CANCELED
   * (rlock_req_cancel, rlock_client_interrupt) or RLOCK_EVENT_ERROR (error: the
   * RLOCK_E* code it returned, RLOCK_ECLOSED at close included); wait_ms,
   * attempts. Every acquire call ends in exactly one ACQUIRED or GAVE_UP. */
  RLOCK_EVENT_GAVE_UP = 3,
  /* The watchdog's renewal of a hold got no answer, or an error answer
   * (error: RLOCK_ETIMEDOUT, RLOCK_ECONN, RLOCK_ESERVER ...): retried at
   * the next period; the lock may expire if it keeps failing. */
  RLOCK_EVENT_RENEWAL_FAILED = 4,
  /* What is left of a hold's guarantee (see rlock_is_lease_guaranteed())
   * fell below the lease_risk_ms option's threshold at a watchdog period:
   * kind, name, owner, remaining_ms (may be negative: the guarantee has
   * run out), lease_ms. Once per hold until the guarantee is back above
   * the threshold (a renewal confirmed). Stop work that needs the lock
   * before it may expire. */
  RLOCK_EVENT_LEASE_AT_RISK = 5,
  /* A hold was lost: the lock expired or was deleted while this owner held
   * it. cause RLOCK_EVENT_BY_WATCHDOG (a renewal found it gone; the
   * on_lock_lost callback runs right after) or RLOCK_EVENT_BY_UNLOCK (the
   * unlock found it gone); hold_ms. Once per hold. */
  RLOCK_EVENT_LOST = 6,
  /* A connection of the client is up again after it was lost: cause 0 for
   * the command connection, 1 for the subscriber connection; error and
   * detail say why it was lost (e.g. RLOCK_ECONN, "connection closed by
   * the server"); host and port name the server. */
  RLOCK_EVENT_RECONNECTED = 7,
  /* A connection of the client that was up is lost (not at close), and
   * its reconnect is scheduled: cause, error, detail, host and port as for
   * RECONNECTED, which follows once it is up again. Commands in flight are
   * re-sent or repaired, waiters re-subscribe. */
  RLOCK_EVENT_DISCONNECTED = 8,
  /* A guarded write (rlock_guard_write) was refused because its fencing
   * token is older than one the guard has seen (RLOCK_ESTALE): kind
   * "guard", name the guard, error RLOCK_ESTALE, detail names the lock,
   * the token refused and the highest seen. */
  RLOCK_EVENT_STALE = 9,
  /* Leader election (kind "election", the election's name, the
   * candidate's owner): a campaign won, with term. */
  RLOCK_EVENT_ELECTED = 10,
  /* A term ended: cause RLOCK_ELECTION_LOST or RLOCK_ELECTION_RESIGNED;
   * term. Once per term won. */
  RLOCK_EVENT_TERM_ENDED = 11
} rlock_event_type;

/* rlock_event.cause values. */
#define RLOCK_EVENT_TIMEOUT 1
#define RLOCK_EVENT_CANCELED 2
#define RLOCK_EVENT_ERROR 3
#define RLOCK_EVENT_BY_WATCHDOG 1
#define RLOCK_EVENT_BY_UNLOCK 2

typedef struct rlock_event {
  /* sizeof(rlock_event) of the library that sends it: a handler built
   * against a newer rlock.h checks it before reading fields the library
   * may not have (RLOCK_EVENT_HAS). Fields are only added at the end. */
  size_t struct_size;
  rlock_event_type type;
  /* The kind ("lock", "fair", "read", "write", "fenced", "spin",
   * "nonreentrant", "nonreentrant_fair", "semaphore", "permit_semaphore",
   * "latch"), the name and the owner
   * ("<client-id>:<thread-id>"); NULL for RECONNECTED and DISCONNECTED. */
  const char *kind;
  const char *name;
  const char *owner;
  int64_t wait_ms;         /* ACQUIRED, GAVE_UP */
  int attempts;            /* ACQUIRED, GAVE_UP: tries sent */
  int cause;               /* GAVE_UP, LOST, RECONNECTED,
                              DISCONNECTED (see above) */
  int error;               /* GAVE_UP (cause ERROR), RENEWAL_FAILED,
                              RECONNECTED, DISCONNECTED:
                              an RLOCK_E* code; else 0 */
  int64_t hold_ms;         /* RELEASED, LOST */
  int64_t hold_count;      /* RELEASED: holds the owner still has */
  int64_t remaining_ms;    /* LEASE_AT_RISK: the guarantee left */
  int64_t lease_ms;        /* LEASE_AT_RISK: the hold's lease */
  const char *detail;      /* a sentence, or "" */
  const char *client_id;   /* rlock_client_id() */
  const char *client_name; /* the client_name option, or NULL */
  const char *host;        /* RECONNECTED, DISCONNECTED: the server;
                              else NULL */
  int port;
  int64_t term; /* ELECTED, TERM_ENDED: the term */
} rlock_event;

/* Whether an event from a possibly older library has `field`. */
#define RLOCK_EVENT_HAS(ev, field)                                             \
  ((ev)->struct_size >=                                                        \
   offsetof(rlock_event, field) + sizeof(((rlock_event *)0)->field))

typedef void (*rlock_event_cb)(const rlock_event *ev, void *data);

/* ========================================================================
 * Stats
 * (docs/api.md, "Stats")
 * ===================================================================== */

/*
 * Stats (docs/api.md, "Stats"): counters and histograms of what a client
 * did since it was opened.
 *
 * A histogram's buckets are log2 milliseconds: buckets[0] counts values
 * of 0 and 1 ms, buckets[i] (1 <= i < RLOCK_STATS_BUCKETS - 1) values v
 * with 2^(i-1) < v <= 2^i ms, and the last bucket everything above
 * 2^(RLOCK_STATS_BUCKETS - 2) ms (about 70 minutes). count is the sum of
 * the buckets; sum_ms the sum of the values; max_ms the largest.
 */
#define RLOCK_STATS_BUCKETS 24
/* failures[] has this many entries, indexed by -code (RLOCK_EINVAL is
 * failures[1]); failures[0] counts codes beyond the table. */
#define RLOCK_STATS_ERRORS 32

typedef struct rlock_histogram {
  uint64_t count;
  uint64_t sum_ms;
  uint64_t max_ms;
  uint64_t buckets[RLOCK_STATS_BUCKETS];
} rlock_histogram;

typedef struct rlock_stats {
  /* Set by rlock_stats_init(). A struct from an older rlock.h (smaller)
   * is filled only as far as it reaches. */
  size_t struct_size;
  /* Acquire calls that got the lock (or permit, or latch), and those of
   * them that had to wait (more than one try). */
  uint64_t acquisitions;
  uint64_t acquisitions_contended;
  /* Acquire calls that ended without it: wait_ms passed (try_lock with
   * wait 0 included), canceled or interrupted. */
  uint64_t gave_up_timeout;
  uint64_t gave_up_canceled;
  /* Calls of any kind that failed on the loop thread, by code:
   * failures[-code] (what a call refuses before it is queued - a bad
   * argument, RLOCK_EDEADLK, RLOCK_ECLOSED - is not counted). */
  uint64_t failures[RLOCK_STATS_ERRORS];
  /* Successful unlocks of lock kinds, and those that freed the lock. */
  uint64_t releases;
  /* Time acquisitions waited (call start to the server's yes), and how
   * long locks were held (outermost acquire to the unlock that freed it). */
  rlock_histogram wait;
  rlock_histogram hold;
  /* Watchdog renewals, one per hold per period: sent, confirmed by the
   * server, failed (no answer or an error answer: RENEWAL_FAILED). */
  uint64_t renewals_sent;
  uint64_t renewals_confirmed;
  uint64_t renewals_failed;
  /* Round-trip time of renewal commands (one per batch of holds), in
   * microseconds, re-sends included. */
  uint64_t renewal_rtt_count;
  uint64_t renewal_rtt_sum_us;
  uint64_t renewal_rtt_max_us;
  /* The least lease head-room seen at a confirmed renewal: what was left
   * of the hold's guarantee (rlock_is_lease_guaranteed() minus now) when the
   * renewal's confirmation came, before it moved the guarantee on.
   * Negative: the guarantee had run out before the renewal was confirmed
   * (the lock may have been free meanwhile). INT64_MAX: no renewal
   * confirmed yet. */
  int64_t lease_headroom_min_ms;
  /* Holds lost (RLOCK_EVENT_LOST). */
  uint64_t locks_lost;
  /* Connections up again after a loss (command and subscriber), channels
   * subscribed again after one, commands written (re-sends included). */
  uint64_t reconnects;
  uint64_t resubscribes;
  uint64_t commands_sent;
  /* Replica sync: writes a replica confirmed, and writes none confirmed
   * in time (the acquire is undone: RLOCK_ENOREPLICA). */
  uint64_t replica_sync_ok;
  uint64_t replica_sync_unconfirmed;
  /* RLOCK_EVENT_LEASE_AT_RISK, however many. */
  uint64_t lease_at_risk;
  /* Leader election (rlock_election_*): terms won (RLOCK_EVENT_ELECTED),
   * and terms ended by a loss or a resign (RLOCK_EVENT_TERM_ENDED). */
  uint64_t terms_won;
  uint64_t terms_lost;
  uint64_t terms_resigned;
} rlock_stats;

/* Zeroes `s` and sets struct_size to `size`; use rlock_stats_init(). */
static inline void rlock_stats_init_size(rlock_stats *s, size_t size) {
  memset(s, 0, sizeof(*s));
  s->struct_size = size;
}
static inline void rlock_stats_init(rlock_stats *s) {
  rlock_stats_init_size(s, sizeof(*s));
}

/* Fills `out` with the client's stats: only its first struct_size bytes are
 * written (bytes beyond are left as they are). The counters are written by
 * the loop thread and read here without a lock, each one whole (relaxed
 * atomics): a reading taken while locks are busy may be a few events
 * behind in one counter and not yet in another, but a histogram's count
 * always equals the sum of its buckets. Never blocks; any thread,
 * including an event handler. 0, or RLOCK_EINVAL (NULL client or out,
 * struct_size smaller than the struct_size field's end or larger than this
 * library's struct). */
RLOCK_EXTERN int rlock_client_stats(const rlock_client *client,
                                    rlock_stats *out);

/* Writes `s` in the Prometheus text exposition format 0.0.4 (# HELP and
 * # TYPE lines; counters end in _total; histograms as _bucket{le="..."}
 * in seconds, cumulative, with le="+Inf", _sum and _count) to buf, at
 * most len bytes including the NUL, as snprintf does. Every sample has
 * the label client="<client>" (escaped) when client is not NULL. Metric
 * names start with "rlock_". Fields beyond s->struct_size are left out.
 * Returns the length the whole text needs (without the NUL): call again
 * with a larger buffer when it is >= len. RLOCK_EINVAL for a NULL s, a
 * NULL buf with len > 0, or a bad struct_size. Any thread. */
RLOCK_EXTERN int rlock_stats_format_prometheus(const rlock_stats *s, char *buf,
                                               size_t len, const char *client);

/* The same as one JSON object: {"client": ..., "acquisitions": N, ...,
 * "failures": {"RLOCK_ECONN": N, ...} (non-zero codes only),
 * "wait": {"count", "sum_ms", "max_ms", "buckets": [{"le_ms": 1, "count":
 * n}, ..., {"le_ms": null, ...}]} (buckets not cumulative)}. Returns as
 * rlock_stats_format_prometheus(). */
RLOCK_EXTERN int rlock_stats_format_json(const rlock_stats *s, char *buf,
                                         size_t len, const char *client);

/* ========================================================================
 * Client options
 * (docs/api.md, "Client options")
 * ===================================================================== */

/* Client options. Always fill with rlock_options_init() first, then set the
 * fields you need: the struct may grow in later versions, and fields are
 * only ever added at the end (each marked with the version that added it;
 * every field below is in 1.0.0, the first release). */
typedef struct rlock_options {
  /* Set to sizeof(rlock_options) by rlock_options_init(); do not change it.
   * rlock_client_new() reads only this many bytes, so a program built
   * against an older rlock.h (smaller struct) gets the defaults for the
   * fields it does not know. 0 (not initialised) or more than this
   * library's sizeof(rlock_options) (a newer rlock.h) is RLOCK_EINVAL. */
  size_t struct_size;
  /* redis://[[user]:password@]host[:port][/db],
   * rediss://[[user]:password@]host[:port][/db] (TLS, see tls_* below) or
   * unix:///path[?db=N];
   * redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]
   * (sentinels, default port 26379; user and password are the master's,
   * see sentinel_user/sentinel_password for the sentinels' own) or
   * redis+cluster://[[user]:password@]host[:port][,host[:port]...] (seed
   * nodes of a Redis Cluster), each also as rediss+sentinel:// and
   * rediss+cluster:// (TLS). The host may be a DNS name (resolved without
   * blocking; every address it has is tried in turn), an IPv4 address or
   * an IPv6 address in brackets. NULL: $REDIS_URL, else
   * redis://127.0.0.1:6379. Copied at open. */
  const char *uri;
  /* CLIENT SETNAME for both connections; NULL: none. Copied at open.
   * Must be 1..64 characters without spaces. */
  const char *client_name;
  /* Lease used, and renewed every third of it, for locks taken without a
   * lease. Default 30000. Range 300..2^31-1. */
  int64_t watchdog_timeout_ms;
  /* Time a command may wait for its reply. Default 3000. Range 10..2^31-1. */
  int64_t command_timeout_ms;
  /* Time a waiter may wait for its SUBSCRIBE confirmation. Default 7500.
   * Range 10..2^31-1. */
  int64_t subscribe_timeout_ms;
  /* Times an idempotent command (unlock, renewal, queries) is re-sent after
   * a timeout or connection loss. Default 3. Range 0..100. */
  int retry_attempts;
  /* Delay before such a retry, and the reconnect back-off base.
   * Default 1500. Range 0..2^31-1. */
  int64_t retry_interval_ms;
  /* 1: SPUBLISH/SSUBSCRIBE (sharded pub/sub) always; -1: PUBLISH/
   * SUBSCRIBE always. Default 0 (auto, as Java Redisson's AUTO): sharded
   * against a cluster whose servers support it (probed once with PUBSUB
   * SHARDNUMSUB at open), plain otherwise - standalone and Sentinel
   * included. */
  int sharded_pubsub;
  /* See rlock_lock_lost_cb. Default NULL. */
  rlock_lock_lost_cb on_lock_lost;
  void *on_lock_lost_data;

  /* Time one connection attempt may take: resolving the host, connecting
   * to each of its addresses in turn, and the TLS handshake. A connection
   * not made by then counts as failed (RLOCK_ETIMEDOUT at open; retried
   * with back-off later). Default 10000. Range 10..2^31-1. */
  int64_t connect_timeout_ms;
  /* Most bytes of commands that may wait to be written on one connection
   * (a server that stops reading, a full socket buffer). A command that
   * would go past it fails with RLOCK_EBACKLOG instead of growing memory
   * without limit; one command is always accepted into an empty queue.
   * Default 67108864 (64 MiB). Range 65536..2^40. */
  int64_t max_write_queue_bytes;
  /* TLS, for rediss:// URIs only (set with another scheme: RLOCK_EINVAL).
   * Verification of the server's certificate chain and of its name is on
   * unless tls_insecure is 1; TLS 1.2 is the lowest version accepted. The
   * files are read at open: an unreadable file, a key that does not match
   * the certificate, or a certificate without its key fail open with
   * RLOCK_ETLS. Strings are copied at open. */
  /* PEM file of the CA certificates to trust. NULL (and tls_ca_dir NULL):
   * the system's trust store (ca-certificates). */
  const char *tls_ca_file;
  /* Directory of CA certificates in OpenSSL's hashed form (c_rehash). */
  const char *tls_ca_dir;
  /* Client certificate (PEM; may hold the chain) for mutual TLS, and its
   * private key (PEM, unencrypted). Both or neither. */
  const char *tls_cert_file;
  const char *tls_key_file;
  /* The name sent as SNI and checked against the server's certificate.
   * NULL: the URI's host (a DNS name or an IP address). */
  const char *tls_server_name;
  /* 1: accept any certificate and name (encryption without
   * authentication: for tests only). Default 0. */
  int tls_insecure;
  /* Longest time a blocking call polls for its answer before it sleeps, in
   * microseconds: an answer that comes within it costs no thread wake-up
   * (on VMs, often as much as the round trip). The actual spin adapts
   * below this - to about twice the answer latency seen, and to nothing
   * where spins rarely pay off - and at most CPUs - 1 threads spin at
   * once. 0: never spin (no CPU spent waiting). Default 250.
   * Range 0..100000. */
  int64_t spin_us;
  /* Local handoff: when an owner of this client releases its last hold of
   * a lock that another owner of this client is waiting for, that
   * waiter's acquire goes out in the same write, right behind the release,
   * instead of after the release message has come back (the message is
   * still published, as always). At most this many handoffs in a row per
   * lock; the next release then goes the pub/sub way only, so waiters in
   * other processes (Java included) get their turn. A transfer (the lock
   * kind's one-command handoff, which releases instead whenever another
   * client's waiter is subscribed) may run 16 times this many in a row.
   * 0 turns local handoff off. Default 3. Range 0..1000. */
  int handoff_max;

  /* redis+sentinel:// URIs: the user and password the sentinels ask for
   * (the URI's own are the master's). NULL: no AUTH to the sentinels.
   * Copied at open. With another scheme: RLOCK_EINVAL. */
  const char *sentinel_user;
  const char *sentinel_password;
  /* Replica sync, as Java Redisson's checkLockSyncedSlaves: when the
   * master has replicas, each acquire, release and renewal is followed,
   * in the same write, by WAIT <replicas> replica_sync_timeout_ms, and an
   * acquire no replica confirmed is undone and fails with
   * RLOCK_ENOREPLICA. 1 (default): on whenever the master has replicas
   * (connected, or - see replica_sync_connected_only - listed by the
   * sentinels or the cluster); 0: off (no WAIT is sent). Standalone URIs
   * (redis://, rediss://) never send WAIT. An acquire undone this way
   * and out of time answers RLOCK_ENOREPLICA, never 0 (the lock was
   * free); a WAIT the server refuses (an ACL without +wait) fails the
   * acquire once, undone, with RLOCK_ENOREPLICA naming the ACL. Renewals
   * no replica confirmed do not move rlock_is_lease_guaranteed(). */
  int replica_sync;
  /* WAIT's timeout. Default 1000. Range 1..2^31-1. */
  int64_t replica_sync_timeout_ms;
  /* Cluster: how often the slot map is read again (besides after every
   * MOVED and every lost connection). Sentinel: how often the master's
   * connected replicas are counted again (ROLE), for replica sync (the
   * sentinels' replica list is read at each connection to a sentinel and
   * after every failover). Default 5000.
   * Range 100..2^31-1. */
  int64_t cluster_refresh_ms;

  /* Replica sync when the master has no replica connected. 0 (default,
   * safety first): the replicas the topology lists count too - Sentinel's
   * replica list (SENTINEL REPLICAS, whatever their flags: a replica that
   * is down now may be back and promoted later; forget a removed replica
   * with SENTINEL RESET; a failed master that the sentinels list as a
   * replica of its successor counts once they have reached it again) and
   * a cluster shard's replicas (failed or not).
   * A master that lists replicas but has none connected (its links to them
   * broken) then gets WAIT 1, which no replica acknowledges: every acquire
   * fails with RLOCK_ENOREPLICA (undone, after replica_sync_timeout_ms)
   * until a replica is linked again, as Redis's min-replicas-to-write 1
   * would refuse it - so that a failover to a stale replica cannot hand
   * the lock to a second owner. 1 (availability first): only connected
   * replicas count (the master's ROLE; a cluster shard's replicas not
   * failed): without one, no WAIT is sent and acquires succeed
   * unreplicated - a failover may then lose them. Applies only with
   * replica_sync = 1. Range 0..1. */
  int replica_sync_connected_only;
  /* What replica sync waits for (with replica_sync = 1; 0 turns it off),
   * as Java Redisson's SyncMode. The command sent behind each acquire,
   * release and renewal is either WAIT <n> replica_sync_timeout_ms (the
   * write reached n replicas' memory) or WAITAOF <local> <n>
   * replica_sync_timeout_ms (Redis 7.2+, Valkey: the write was fsynced to
   * the append-only file of n replicas and, with local 1, of the master),
   * confirmed when at least one replica acknowledges.
   * RLOCK_REPLICA_SYNC_AUTO (default): WAITAOF 1 <n> where the master has
   * appendonly on and knows WAITAOF (both read at connect: INFO
   * persistence, WAITAOF 0 0 0), WAIT elsewhere - it assumes replicas
   * share their master's appendonly setting (replicas without AOF never
   * acknowledge a WAITAOF: every acquire would fail RLOCK_ENOREPLICA).
   * RLOCK_REPLICA_SYNC_WAIT: WAIT only. RLOCK_REPLICA_SYNC_WAITAOF:
   * WAITAOF wherever the server knows it (local 1 when the master's AOF is
   * on, else 0), WAIT where it does not. A server without WAIT (a managed
   * service, rename-command) gets neither: replica sync is off there.
   * Range 0..2. */
  int replica_sync_mode;

  /* Diagnostics (see rlock_diag_cb): connects, reconnects and their cause,
   * failovers and slot map changes, resubscribes, dropped protocol
   * violations, capability probes, replica sync turned off, failed
   * renewals. NULL (default): silent, and no message is formatted. */
  rlock_diag_cb on_diag;
  void *on_diag_data;
  /* Events (issue 28): see rlock_event_cb. Default NULL (none). */
  rlock_event_cb on_event;
  void *on_event_data;
  /* RLOCK_EVENT_LEASE_AT_RISK fires when what is left of a hold's
   * guarantee (rlock_is_lease_guaranteed() minus now), checked at each
   * watchdog period (watchdog_timeout_ms / 3), is below this many ms.
   * 0 (default): a third of the hold's lease (watchdog_timeout_ms for
   * holds taken without a lease: about one renewal missed). -1: never.
   * Range -1..2^31-1. */
  int64_t lease_risk_ms;
  /* Fenced locks (docs/fencing.md): the TTL in ms an acquisition sets on
   * the lock's token key (redisson_lock_token:{name}), so the key of an
   * idle lock goes away. Tokens stay increasing without it (they are
   * floored with the server's clock). 0 (default): no TTL, as Redisson.
   * Keep it 0 while Java clients use the name: Java's plain INCR on a lost
   * key starts again at 1, below every token handed out before. Range
   * 0..2^31-1. */
  int64_t fenced_token_ttl_ms;
} rlock_options;

/* rlock_options.replica_sync_mode values. */
#define RLOCK_REPLICA_SYNC_AUTO 0
#define RLOCK_REPLICA_SYNC_WAIT 1
#define RLOCK_REPLICA_SYNC_WAITAOF 2

/* Fills the first `size` bytes of `o` with the defaults above and sets
 * struct_size to `size` (at most this library's sizeof(rlock_options)).
 * Call it through rlock_options_init(), which passes the sizeof of the
 * header the program was built with: a library newer than that header
 * then never writes past the program's struct, and a field it added in
 * what was the old struct's padding still gets its default. Thread-safe. */
RLOCK_EXTERN void rlock_options_init_size(rlock_options *o, size_t size);

/* Fills `o` with the defaults above, struct_size included. Thread-safe. */
static inline void rlock_options_init(rlock_options *o) {
  rlock_options_init_size(o, sizeof(*o));
}

/* ========================================================================
 * Client
 * (docs/api.md, "API overview" and "Semantics")
 * ===================================================================== */

/*
 * Opens a client: validates `o` (NULL = defaults; otherwise filled by
 * rlock_options_init(), see struct_size), starts the loop thread and
 * connects both connections, authenticating and selecting the database.
 * On success *client is set and 0 returned. On failure nothing is left
 * running and *client is NULL: RLOCK_EINVAL (bad option), RLOCK_EURI (also
 * a database the server does not have), RLOCK_ECONN (server unreachable,
 * or refusing connections: maxclients), RLOCK_EAUTH, RLOCK_ENOPERM (the
 * ACL user may not run PING, SELECT or CLIENT SETNAME), RLOCK_EPROTO (the
 * peer is not a Redis server: no RESP, replies nobody asked for, or PING
 * not answered +PONG), RLOCK_ETIMEDOUT (no connection within
 * connect_timeout_ms, or no answer to PING within command_timeout_ms),
 * RLOCK_ETLS (rediss://: the handshake failed, the certificate or its name
 * did not verify, a TLS file could not be used, the server speaks plain
 * text, or this build has no TLS), RLOCK_ENOMEM, RLOCK_ESYS (no thread,
 * or too few free file descriptors: the first client in a process also
 * sets up libuv's process-wide signal pipe, and with too few it returns
 * RLOCK_ESYS rather than let libuv abort the process).
 * rlock_last_error() gives the detail (the server's text, or what the peer
 * sent).
 */
RLOCK_EXTERN int rlock_client_new(rlock_client **client,
                                  const rlock_options *o);

/*
 * Closes the client: blocked and pending calls on it return RLOCK_ECLOSED
 * promptly, the watchdog stops (locks it renewed expire within the watchdog
 * timeout; they are not deleted, as in Redisson), both connections and the
 * loop thread end. Lock handles stay valid to free; any other call on them
 * returns RLOCK_ECLOSED. NULL is accepted. May be called from any thread,
 * including the loop thread (a callback), but only once per client.
 */
RLOCK_EXTERN void rlock_client_free(rlock_client *client);

/* The client's random UUID (36 lowercase chars), made once at open. Valid
 * until the client and all its lock handles are freed. */
RLOCK_EXTERN const char *rlock_client_id(const rlock_client *client);

/* What the client's connections found out about the servers with the
 * capability probes sent inside each connection's handshake (see
 * docs/deployments.md, "Managed services").
 * Set struct_size (rlock_client_caps_init()) before the call: the struct
 * may grow at its end, and only struct_size bytes are written. */
typedef struct rlock_client_caps {
  size_t struct_size;
  /* 1 once a node answered the WAIT probe (or a WAIT behind a lock
   * script) with "unknown command" - a managed service without WAIT, or
   * rename-command: replica sync is off on that node, and locks taken
   * there are not confirmed by replicas. replica_sync_note then names the
   * node and what it answered (said once per client: the first node).
   * 0: no node reached so far lacks WAIT (or replica sync does not apply:
   * a standalone URI, replica_sync = 0). */
  int replica_sync_off;
  char replica_sync_note[300];
} rlock_client_caps;

/* Sets struct_size to sizeof(*caps) and clears the rest. Thread-safe. */
static inline void rlock_client_caps_init(rlock_client_caps *caps) {
  memset(caps, 0, sizeof(*caps));
  caps->struct_size = sizeof(*caps);
}

/* Fills `caps` (see rlock_client_caps) from what the probes found so far:
 * the connections made at rlock_client_new() have been probed by the
 * time it returns; later connections (a reconnect, a failover, another
 * cluster node) add theirs as they are made. 0, or RLOCK_EINVAL (NULL
 * client or caps, struct_size smaller than the struct_size field's end or
 * larger than this library's struct). Never blocks; any thread. */
RLOCK_EXTERN int rlock_client_capabilities(const rlock_client *client,
                                           rlock_client_caps *caps);

/*
 * Interrupts every acquire (blocking or async) that `owner` (a thread id or
 * an explicit owner id) is running on `client`, like Java's
 * Thread.interrupt() on lockInterruptibly(): the blocked call returns, or
 * the callback fires with, RLOCK_ECANCELED. The interrupted acquire leaves
 * no hold and no renewal behind. Returns how many acquires were interrupted
 * (0 if none was running), or RLOCK_ECLOSED / RLOCK_EINVAL. Any thread,
 * including the loop thread.
 */
RLOCK_EXTERN int rlock_client_interrupt(rlock_client *client, uint64_t owner);

/* ========================================================================
 * Locks: the rlock * handle and its kinds
 * (docs/api.md, "Semantics", "Lease safety", "Lock kinds")
 * ===================================================================== */

/*
 * Creates a handle for the lock `name` (like Redisson's getLock(name)). The
 * name is the Redis key, used exactly as given. Cheap; sends nothing.
 * Errors: RLOCK_EINVAL (NULL client/lock or NULL/empty name),
 * RLOCK_ENAMETOOLONG, RLOCK_ECLOSED, RLOCK_ENOMEM.
 * A handle may be shared by any number of threads.
 */
RLOCK_EXTERN int rlock_new(rlock_client *client, const char *name,
                           rlock **lock);

/*
 * The rest of Redisson's lock family. Each returns an `rlock *` that every
 * call below accepts (lock, try_lock, unlock, force_unlock, is_locked,
 * is_held, hold_count, remain_ttl, their _owner and _async forms), on the
 * same keys, channels and messages as Java Redisson (docs/wire-protocol.md;
 * docs/api.md, "Lock kinds", says which kinds exclude which on one name).
 * Errors as for rlock_new().
 *
 *  rlock_new_fair    Redisson getFairLock(name): first come, first served
 *                    across all clients (a queue list and a deadline zset
 *                    beside the lock hash; each waiter on its own channel).
 *                    A waiter that gives up (timeout, cancel, interrupt,
 *                    close) leaves the queue at once.
 *  rlock_new_read    getReadWriteLock(name).readLock(): shared with other
 *                    readers, excluded by a writer.
 *  rlock_new_write   getReadWriteLock(name).writeLock(): exclusive. Its
 *                    owner may also take the read lock (downgrade); a
 *                    reader asking for the write lock waits (no upgrade -
 *                    as in Java, waiting on it alone never succeeds).
 *  rlock_new_fenced  getFencedLock(name): an RLock whose every acquisition
 *                    (re-entry included) increments a token; see
 *                    rlock_lock_fenced().
 *  rlock_new_spin    getSpinLock(name): no pub/sub; waiters poll with a
 *                    back-off of 1 ms doubling up to 128 ms.
 *  rlock_new_nonreentrant       getNonReentrantLock(name) (Redisson
 *                    4.4.0+): an RLock that its holder cannot take again:
 *                    a lock or try_lock by the owner that holds it fails
 *                    at once with RLOCK_EREENTRY (first try: no wait, no
 *                    subscribe, nothing changed), so its hold count is 1.
 *                    RLock's keys and channel: an RLock handle of the same
 *                    owner may re-enter its hold (count 2, as in Java),
 *                    while a non-reentrant acquire over an RLock hold of
 *                    the same owner gets RLOCK_EREENTRY.
 *  rlock_new_nonreentrant_fair  getNonReentrantFairLock(name): the same
 *                    over the fair lock (its queue, deadlines and
 *                    per-waiter channels); a refused re-acquire is never
 *                    queued.
 */
RLOCK_EXTERN int rlock_new_fair(rlock_client *client, const char *name,
                                rlock **lock);
RLOCK_EXTERN int rlock_new_read(rlock_client *client, const char *name,
                                rlock **lock);
RLOCK_EXTERN int rlock_new_nonreentrant(rlock_client *client, const char *name,
                                        rlock **lock);
RLOCK_EXTERN int rlock_new_nonreentrant_fair(rlock_client *client,
                                             const char *name, rlock **lock);
RLOCK_EXTERN int rlock_new_write(rlock_client *client, const char *name,
                                 rlock **lock);
RLOCK_EXTERN int rlock_new_fenced(rlock_client *client, const char *name,
                                  rlock **lock);
RLOCK_EXTERN int rlock_new_spin(rlock_client *client, const char *name,
                                rlock **lock);

/* The registry of lock kinds, the one place a kind is named (in the style
 * of libuv's UV_HANDLE_TYPE_MAP): X(ID, name, constructor) for each kind an
 * rlock handle can be made of - ID for names made with ## (the CLI's
 * CLI_KIND_<ID>), name as rlock_kind() returns it and
 * rlock_client_force_unlock() takes it, constructor the rlock_new* call
 * that makes the handle. */
#define RLOCK_KIND_MAP(X)                                                      \
  X(LOCK, "lock", rlock_new)                                                   \
  X(FAIR, "fair", rlock_new_fair)                                              \
  X(READ, "read", rlock_new_read)                                              \
  X(WRITE, "write", rlock_new_write)                                           \
  X(FENCED, "fenced", rlock_new_fenced)                                        \
  X(SPIN, "spin", rlock_new_spin)                                              \
  X(NONREENTRANT, "nonreentrant", rlock_new_nonreentrant)                      \
  X(NONREENTRANT_FAIR, "nonreentrant_fair", rlock_new_nonreentrant_fair)

/* The handle's kind: one of RLOCK_KIND_MAP's names, or "multilock" /
 * "redlock" / "fast_multilock" for a group (rlock_new_multilock,
 * rlock_new_redlock, rlock_new_fast_multilock); "" for NULL. */
RLOCK_EXTERN const char *rlock_kind(const rlock *lock);

/* Releases a handle (does not unlock). NULL is accepted. Async operations
 * still pending on it keep it alive until their callbacks have run, and a
 * blocking call in progress until it returns; no new call may use the
 * handle once it is freed. */
RLOCK_EXTERN void rlock_free(rlock *lock);

/* The lock's name, as given to rlock_new() (a MultiLock's: its members'
 * names joined by ','). */
RLOCK_EXTERN const char *rlock_name(const rlock *lock);

/*
 * Acquires the lock for the calling thread, waiting as long as it takes.
 * Re-entrant. lease_ms > 0: the lock expires after lease_ms unless unlocked
 * (no renewal). lease_ms < 0: watchdog mode (held until unlocked, renewed).
 * lease_ms == 0 is RLOCK_EINVAL, and so is lease_ms above 2^40 (about 34
 * years: a garbage value, whose expiry arithmetic would overflow on the
 * server). Returns 0 or a negative error.
 * During an outage (no reply, or no connection) it rides out errors for
 * (retry_attempts + 1) x (command_timeout_ms + retry_interval_ms) from its
 * first unanswered try, then returns RLOCK_ETIMEDOUT or RLOCK_ECONN; a
 * try that lands late is trimmed in the background (no hold is left).
 * A semaphore, permit semaphore or latch handle cast to rlock * is
 * RLOCK_EINVAL (nothing sent) here and in every lock/unlock call below,
 * their _owner and _async forms included.
 */
RLOCK_EXTERN int rlock_lock(rlock *lock, int64_t lease_ms);

/*
 * Fenced lock (rlock_new_fenced) only: acquire as rlock_lock() /
 * rlock_try_lock() / their _owner forms, and on success store in *token
 * the fencing token of this acquisition (Redisson's lockAndGetToken): a
 * number that grows with every acquisition of the lock by anyone, so a
 * storage system can reject writes carrying an older token. It grows only
 * while its key survives: a Redis restart without persistence, FLUSHALL or
 * FLUSHDB, eviction of the key, or a failover to a replica that had not
 * received the last increments starts it again from 1 (Java's too). Run
 * Redis with AOF (appendonly yes, appendfsync always for no loss at all)
 * and noeviction where tokens must never go back. Not written
 * when the lock was not acquired. RLOCK_EINVAL on a handle of another kind
 * or a NULL token. The asynchronous rlock_lock_async() on a fenced handle
 * gives the token as the callback's value.
 */
RLOCK_EXTERN int rlock_lock_fenced(rlock *lock, int64_t lease_ms,
                                   int64_t *token);
RLOCK_EXTERN int rlock_try_lock_fenced(rlock *lock, int64_t wait_ms,
                                       int64_t lease_ms, int64_t *token);
RLOCK_EXTERN int rlock_lock_fenced_owner(rlock *lock, uint64_t owner,
                                         int64_t lease_ms, int64_t *token);
RLOCK_EXTERN int rlock_try_lock_fenced_owner(rlock *lock, uint64_t owner,
                                             int64_t wait_ms, int64_t lease_ms,
                                             int64_t *token);
/* Fenced lock: the token counter's current value (Redisson's getToken: the
 * latest token handed out, not necessarily the caller's; 0 before the first
 * acquisition). 0 or a negative error. */
RLOCK_EXTERN int rlock_fenced_token(rlock *lock, int64_t *token);

/*
 * Tries to acquire the lock within wait_ms (0: one attempt, bounded by
 * command_timeout_ms; < 0: wait as long as it takes). Lease as for
 * rlock_lock(). Returns 1 acquired, 0 not acquired within wait_ms, or a
 * negative error. wait_ms > 0 bounds the call (within a few ms), also when
 * the server stalls: a try still unanswered at the deadline is abandoned
 * (and trimmed in the background if it lands late, so it leaves no hold);
 * the call then returns 0 if the server answered it before, else
 * RLOCK_ETIMEDOUT.
 */
RLOCK_EXTERN int rlock_try_lock(rlock *lock, int64_t wait_ms, int64_t lease_ms);

/*
 * Releases one hold of the calling thread; the last one deletes the key and
 * publishes "0" on the lock channel, waking one waiter (Java or C).
 * Returns 0, whether that was the last hold or a re-entered one (ask
 * rlock_hold_count() or rlock_is_held() which it was).
 * Other kinds: a fair lock's release message goes to the first waiter's own
 * channel; a spin lock publishes nothing; a read lock publishes "0" only
 * when the lock is freed (other readers may remain); a write lock
 * publishes "1" (wakes every waiter), or nothing when the writer still
 * reads (a downgrade: the lock stays in read mode).
 * RLOCK_ENOTOWNER: the calling thread does not hold the lock.
 * RLOCK_ELOCKLOST: this thread held it, but it expired or was deleted before
 * this unlock (the hold is forgotten; nothing is changed in Redis); or this
 * was a re-entered hold taken after the outer hold was lost: the unlock
 * released the lock (which was not held throughout), and the outer unlocks
 * that remain return RLOCK_ELOCKLOST as well.
 * RLOCK_ENOPERM: the ACL user may not make one of the unlock's writes (e.g.
 * PUBLISH the release message); nothing was changed (Redis 7+).
 * RLOCK_ECONN / RLOCK_ETIMEDOUT: no reply came, after every re-send. The
 * hold is given up locally all the same: the client counts one hold fewer
 * (renewal of a last hold stops) and sets the server's count to match in
 * the background once Redis answers. Do not call rlock_unlock() again for
 * it: a retry releases another hold, or returns RLOCK_ENOTOWNER when that
 * was the last one.
 */
RLOCK_EXTERN int rlock_unlock(rlock *lock);

/* Deletes the lock whoever holds it and wakes a waiter. Returns 1 if it was
 * locked, 0 if not, or a negative error. The DEL is type-blind, as in
 * Redisson's forceUnlock: if the name holds a value that is not a lock (a
 * string, a list, ...), that value is deleted, the unlock message is
 * published and the call returns 1. Check the type first (TYPE) if that
 * matters, or use rlock_client_force_unlock(), which leaves non-lock
 * values alone (`rlock unlock --force` does, unless given --any-type).
 * Other kinds: a fair lock's message goes to the first waiter (its queue is
 * kept); a spin lock publishes nothing; a read (write) handle deletes only
 * a read/write lock in read (write) mode, and otherwise returns 0. */
RLOCK_EXTERN int rlock_force_unlock(rlock *lock);

/*
 * Releases every hold `owner` has on `lock`, as the lock's kind releases
 * its last hold (message included): for a holder whose client is gone
 * (closed, crashed) and whose owner string ("<client-uuid>:<thread-id>",
 * as RLOCK_OWNER and rlock_info show it; for a write lock without
 * ":write") is known. Other holders keep theirs. Runs rlock's trim script
 * (docs/wire-protocol.md, "Trim") with a count of 0. Returns 1 released,
 * 0 `owner` held nothing, or a negative error: RLOCK_EINVAL for a NULL or
 * over-long owner, or a handle that is no lock (semaphore, latch).
 */
RLOCK_EXTERN int rlock_force_unlock_holder(rlock *lock, const char *owner);

/* 1 if anyone holds the lock, 0 if not, or a negative error. */
RLOCK_EXTERN int rlock_is_locked(rlock *lock);

/* 1 if the calling thread holds the lock, 0 if not, or a negative error. */
RLOCK_EXTERN int rlock_is_held(rlock *lock);

/* The calling thread's re-entry count (0 if it does not hold the lock), or a
 * negative error. */
RLOCK_EXTERN int64_t rlock_hold_count(rlock *lock);

/*
 * Stores the lock key's remaining time to live in *ttl_ms: milliseconds,
 * -2 if the lock is not held (no key), -1 if the key has no TTL.
 * Returns 0 or a negative error.
 */
RLOCK_EXTERN int rlock_remain_ttl(rlock *lock, int64_t *ttl_ms);

/*
 * Lease safety (docs/api.md, "Lease safety"): stores in *until_ms the
 * time, on the rlock_now_ms() clock, until which the calling thread's
 * hold cannot have expired: the send time of the last command the server
 * confirmed that set the lock's expiry (the acquire, a watchdog renewal,
 * an unlock that left it held) plus its lease, minus a margin for clock
 * drift of lease/100 + 2 ms (Redlock's). Exact for a lease taken once
 * without the watchdog (send time + lease - margin); with the watchdog it
 * moves forward with each confirmed renewal, and stops when renewals stop
 * being confirmed (server paused, connection gone), though the watchdog
 * reports a loss only when the server says so. A re-entry never raises
 * it (its lease may be shorter); an unlock that leaves the lock held sets
 * it from its own send time and the lease it re-applies (a read unlock
 * leaves it). Sends nothing.
 * Returns 1 while the time is ahead, 0 when it has passed (*until_ms is
 * still set: the hold may have expired; act as if it had), or a negative
 * error: RLOCK_ENOTOWNER (this client knows of no hold by the thread),
 * RLOCK_ELOCKLOST (a renewal found it gone; unlock to forget the hold),
 * RLOCK_EINVAL (NULL argument, or a semaphore or latch handle: a plain
 * semaphore's permits have no lease, a permit-expirable semaphore's permit
 * leases are not tracked), RLOCK_ECLOSED. May be called on the loop thread
 * (in a callback). Not covered: a key deleted by someone else, lost with
 * its server (restart without persistence, failover before a replica had
 * it, eviction), or a client host suspended (CLOCK_MONOTONIC stops).
 */
RLOCK_EXTERN int rlock_is_lease_guaranteed(rlock *lock, int64_t *until_ms);
RLOCK_EXTERN int rlock_is_lease_guaranteed_owner(rlock *lock, uint64_t owner,
                                                 int64_t *until_ms);

/* The library's monotonic clock in milliseconds: CLOCK_MONOTONIC (libuv's
 * uv_hrtime()) divided down, the clock of rlock_is_lease_guaranteed().
 * Any thread. */
RLOCK_EXTERN int64_t rlock_now_ms(void);

/* Explicit owners.
 *
 * A lock is held by an owner: by default the calling thread
 * (rlock_thread_id()). Programs whose logical owners are not OS threads
 * (event loops, coroutines, thread pools) pass an owner id instead: any
 * thread may then lock, unlock and query on behalf of that owner, e.g. lock
 * on one thread and unlock on another. Owner ids live in the same space as
 * thread ids; rlock_owner_new() hands out ids that no thread and no other
 * rlock_owner_new() call will ever use. One owner should not run two
 * operations on the same lock at the same time (as one Java thread can't).
 */

/*
 * The calling thread's id as used in lock owners: a decimal 64-bit integer,
 * unique within the process for its whole life (never reused). Thread-safe.
 */
RLOCK_EXTERN uint64_t rlock_thread_id(void);

/* A fresh owner id, never equal to any thread id or earlier result.
 * Thread-safe. */
RLOCK_EXTERN uint64_t rlock_owner_new(void);

/* rlock_lock() / rlock_try_lock() / rlock_unlock() /
 * rlock_is_held() / rlock_hold_count() for `owner`
 * instead of the calling thread. Same returns and errors. */
RLOCK_EXTERN int rlock_lock_owner(rlock *lock, uint64_t owner,
                                  int64_t lease_ms);
RLOCK_EXTERN int rlock_try_lock_owner(rlock *lock, uint64_t owner,
                                      int64_t wait_ms, int64_t lease_ms);
RLOCK_EXTERN int rlock_unlock_owner(rlock *lock, uint64_t owner);
RLOCK_EXTERN int rlock_is_held_owner(rlock *lock, uint64_t owner);
RLOCK_EXTERN int64_t rlock_hold_count_owner(rlock *lock, uint64_t owner);

/* ========================================================================
 * Asynchronous requests
 * (docs/api.md, "Explicit owners and the asynchronous API")
 *
 * Each call queues the operation and returns at once. Contract (as libuv):
 * if the call returns an error, the callback never fires; otherwise it fires
 * exactly once, on the client's loop thread - with RLOCK_ECANCELED after
 * rlock_req_cancel()/rlock_client_interrupt(), with RLOCK_ECLOSED when the
 * client is closed first. Callbacks must not block and must not make
 * blocking rlock calls (RLOCK_EDEADLK); they may start other async calls,
 * cancel, and close the client.
 *
 * `status` is what the blocking call would return (acquire: 1 acquired,
 * 0 not within wait_ms; unlock: 0; queries: 1/0), or
 * a negative RLOCK_E* code; inside the callback rlock_last_error() gives
 * the failure's detail. `value` carries the hold count
 * (rlock_hold_count_async) or the TTL (rlock_remain_ttl_async), else 0.
 *
 * When `req` is not NULL it receives a handle to the operation, for
 * rlock_req_cancel(); the caller then owns it and must release it with
 * rlock_req_free() (before or after the callback). A MultiLock's or
 * RedLock's calls are rlock_reqs too; their callback fires on a member's
 * client loop thread.
 * ===================================================================== */

typedef struct rlock_req rlock_req;
typedef void (*rlock_cb)(int status, int64_t value, void *data);

/* Acquire for `owner`: wait_ms and lease_ms as for rlock_try_lock()
 * (wait_ms < 0: until acquired). */
RLOCK_EXTERN int rlock_lock_async(rlock *lock, uint64_t owner, int64_t wait_ms,
                                  int64_t lease_ms, rlock_cb cb, void *data,
                                  rlock_req **req);
RLOCK_EXTERN int rlock_unlock_async(rlock *lock, uint64_t owner, rlock_cb cb,
                                    void *data, rlock_req **req);
RLOCK_EXTERN int rlock_force_unlock_async(rlock *lock, rlock_cb cb, void *data,
                                          rlock_req **req);
RLOCK_EXTERN int rlock_is_locked_async(rlock *lock, rlock_cb cb, void *data,
                                       rlock_req **req);
RLOCK_EXTERN int rlock_is_held_async(rlock *lock, uint64_t owner, rlock_cb cb,
                                     void *data, rlock_req **req);
RLOCK_EXTERN int rlock_hold_count_async(rlock *lock, uint64_t owner,
                                        rlock_cb cb, void *data,
                                        rlock_req **req);
RLOCK_EXTERN int rlock_remain_ttl_async(rlock *lock, rlock_cb cb, void *data,
                                        rlock_req **req);

/*
 * Cancels a pending acquire from any thread: its callback fires with
 * RLOCK_ECANCELED (unless it already fired or fires first with its own
 * result - exactly once either way), and it leaves no hold or renewal behind
 * (a MultiLock's: the member waited for is cancelled and every member taken
 * is released before the callback).
 * Returns 0, or RLOCK_EINVAL when req is NULL or not an acquire,
 * RLOCK_ECLOSED when the client is closed.
 */
RLOCK_EXTERN int rlock_req_cancel(rlock_req *req);

/* Releases the caller's handle to an operation (it does not cancel it).
 * NULL is accepted. */
RLOCK_EXTERN void rlock_req_free(rlock_req *req);

/* ========================================================================
 * MultiLock, RedLock and FasterMultiLock
 * (docs/multilock.md; docs/api.md, "MultiLock")
 * ===================================================================== */

/* ---- MultiLock (Redisson getMultiLock(RLock...)) ------------------------ *
 * Several locks of any kinds taken all-or-nothing by one owner, with
 * Java's RedissonMultiLock algorithm, so a MultiLock in C and one in Java
 * over the same names exclude each other (docs/multilock.md). It is an
 * `rlock *`, as Java's is an RLock: taken, tried, released and queried
 * with the lock calls (rlock_lock, rlock_try_lock, rlock_unlock,
 * rlock_is_held, rlock_is_lease_guaranteed, their _owner forms,
 * rlock_lock_async / rlock_unlock_async / rlock_is_held_async with one
 * rlock_req, cancelled with rlock_req_cancel and freed with
 * rlock_req_free), and freed with rlock_free(). It has no keys of its own:
 * each member takes, waits for and releases its lock as that lock's own
 * calls do (its wire protocol, channel, fair queue, watchdog, events and
 * stats). Members are taken one after the other in the order given (not
 * sorted: as in Java, two MultiLocks over the same names in another order
 * avoid a deadlock only by their waits); each member may wait the whole
 * time that remains. When a member is not taken, every member taken so far
 * is released and the round starts again from the first member while time
 * remains. Members may be on different cluster slots, nodes and clients.
 * The same lock twice is taken twice, as in Java (an RLock re-enters; a
 * non-reentrant lock fails the call with RLOCK_EREENTRY).
 * What the lock calls do on it:
 *  - rlock_try_lock (and _owner, rlock_lock_async): 1 all held, 0 not all
 *    within wait_ms (none held), or a negative error (none held). wait_ms
 *    0: one try of each member (the first one not taken ends the call with
 *    0); wait_ms < 0: as rlock_lock(). lease_ms < 0: each member is held
 *    until unlocked (its watchdog renews it); lease_ms > 0: members are
 *    taken with a lease of 2 x wait_ms (wait_ms 0: lease_ms), and once all
 *    are held each member's keys get lease_ms (Java's way); 0:
 *    RLOCK_EINVAL. A member's own error ends the call with that error
 *    after the members taken are released (RLOCK_EREENTRY, RLOCK_EKIND,
 *    RLOCK_ENOPERM, RLOCK_ECLOSED, ...), except the transient ones
 *    (RLOCK_ETIMEDOUT, RLOCK_ECONN, RLOCK_ENOREPLICA, RLOCK_ECLUSTER),
 *    which count as a member not taken, as Java counts any exception: the
 *    round starts again, and at the deadline the call returns that error
 *    instead of 0. Java quirk kept: the time left is checked after each
 *    member, the last one included, so members all taken just after the
 *    deadline are released and the call returns 0. rlock_req_cancel() of
 *    the request, or rlock_client_interrupt() of the owner on a member's
 *    client, ends the member's wait; the callback then fires with
 *    RLOCK_ECANCELED after every member taken is released (a fair member
 *    leaves its queue). The async callback fires on a member's client
 *    loop thread. RLOCK_EDEADLK for a blocking call on a member's client
 *    loop thread.
 *  - rlock_lock (and _owner): rounds of try_lock(w, lease_ms) until one
 *    succeeds (Java's lock()), w = n x 1500 ms without a lease, else
 *    random in [lease/2, lease) when lease_ms <= n x 1500, else in
 *    [n x 1500, lease). 0 or a negative error.
 *  - rlock_unlock (and _owner, rlock_unlock_async): one hold of every
 *    member released, in order: all are tried whatever one answers
 *    (Java's sync unlock stops at the first failure). 0, or the first
 *    member's error (RLOCK_ENOTOWNER: not held).
 *  - rlock_is_held (and _owner, rlock_is_held_async): 1 if the owner
 *    holds every member (Java's isHeldByThread), 0 if not, or the first
 *    member's error.
 *  - rlock_is_lease_guaranteed (and _owner): the earliest of the members'
 *    guarantees (1 while it is ahead, 0 once passed), or the first
 *    member's error (RLOCK_ENOTOWNER, RLOCK_ELOCKLOST, ...).
 *  - rlock_is_locked, rlock_force_unlock, rlock_hold_count,
 *    rlock_remain_ttl, rlock_force_unlock_holder, their _async forms and
 *    the fenced calls: RLOCK_EINVAL with a detail, nothing sent (Java's
 *    RedissonMultiLock throws UnsupportedOperationException for them; ask
 *    the members).
 *  - rlock_name: the members' names joined by ','; rlock_kind: "multilock"
 *    ("redlock" for a RedLock).
 */

/* A MultiLock over members[0..n-1] (lock handles: rlock_new and the other
 * constructors; the handles may be freed afterwards - the MultiLock keeps
 * them alive until it is freed). Sends nothing. Errors, with nothing made:
 * RLOCK_EINVAL (NULL members or out, n == 0, a NULL member, a handle that
 * is not a lock: semaphore, latch; or a member that is itself a MultiLock
 * or RedLock - Java takes one as a member, rlock refuses it: put the
 * inner group's members in), RLOCK_ECLOSED (a member's client is closed),
 * RLOCK_ENOMEM. */
RLOCK_EXTERN int rlock_new_multilock(rlock *const *members, size_t n,
                                     rlock **lock);

/* ---- RedLock (Redisson getRedLock(RLock...)) ---------------------------- *
 * A MultiLock over locks on independent servers - one member per server,
 * each through its own client - that is held once a majority of its
 * members (n/2+1, its quorum) is, with Java's RedissonRedLock algorithm
 * (docs/multilock.md, "RedLock"): members are tried in the order given,
 * each waiting at most max(wait_ms / n, 1) ms of the time left; up to
 * n - quorum members may be missed in a round (a stalled or dead server is
 * a miss, as a member held by another owner is); once a quorum is held a
 * miss ends the round a success (the members after it are not tried);
 * one miss more releases the members taken and starts the round again
 * from the first member while time remains. It is an `rlock *` as the
 * MultiLock is, and the lock calls behave for it as for a MultiLock but:
 *  - try_lock / lock / lock_async: 1 (or 0 for lock) with at least a
 *    quorum of members held; the members missed are not held. The
 *    member lease and the lease trick are the MultiLock's, applied to the
 *    members held.
 *  - unlock: every member's release is sent at once (Java releases all
 *    members, whether taken or not); 0 when at least a quorum was
 *    released or every release succeeded, else the most telling member
 *    error (a server's error before RLOCK_ENOTOWNER), with how many were
 *    released in the detail. A stalled server makes it wait that
 *    client's command timeout (and retries) once.
 *  - is_held: 1 when at least a quorum of members is held by the owner
 *    (Java's RedLock asks all members, so a RedLock held by a quorum
 *    answers false there), 0 if not, or a member's error when fewer than
 *    a quorum answered 1.
 *  - is_lease_guaranteed: the quorum-th latest of the members'
 *    guarantees (the RedLock is held while a quorum is), or a member's
 *    error when fewer than a quorum have one.
 * Members on a stopped server cost their client's command_timeout_ms when
 * tried without a wait (wait_ms 0); give the members' clients a command
 * timeout that suits the wait.
 */
/* A RedLock over members[0..n-1] (n >= 1; quorum n/2+1). Sends nothing;
 * the handles may be freed afterwards. Errors, with nothing made:
 * RLOCK_EINVAL (NULL members or out, n == 0, a NULL member, a handle that
 * is not a lock, a MultiLock or RedLock as a member, two members on the
 * same client, or on clients whose URIs name the same server: a host:port
 * written alike, case aside - any of a sentinel or cluster URI's - or the
 * same unix socket; two names for one host, such as localhost and
 * 127.0.0.1, are not recognised, and Java checks none of this),
 * RLOCK_ECLOSED (a member's client is closed), RLOCK_ENOMEM. */
RLOCK_EXTERN int rlock_new_redlock(rlock *const *members, size_t n,
                                   rlock **lock);
/* How many members a MultiLock or RedLock has (a FasterMultiLock: its
 * distinct values); 1 for any other lock; 0 for NULL or a handle that is
 * not a lock. */
RLOCK_EXTERN size_t rlock_member_count(const rlock *lock);
/* How many members must be held: n for a MultiLock, n/2+1 for a RedLock;
 * 1 for any other lock; 0 for NULL or a handle that is not a lock. */
RLOCK_EXTERN size_t rlock_quorum(const rlock *lock);

/* ---- FasterMultiLock (Redisson getMultiLock(group, values)) ------------ *
 * Values of one group locked all or none by one script call on one hash,
 * the group's name: per value a field named after a hash of the value
 * (rlock_fast_multilock_field_name), holding its owner, plus the owner's
 * expiry (client wall-clock ms) and count fields; waiters wait on the
 * group's RLock channel "redisson_lock__channel:{group}" (docs/
 * wire-protocol.md, "The FasterMultiLock"). Shared with Java only when
 * Java encodes the values as UTF-8 strings (StringCodec): the field names
 * are hashes of the encoded bytes, and Java's default codec is Kryo.
 * It is an `rlock *` (kind "fast_multilock", freed with rlock_free()),
 * taken and released with the lock calls, sync and async:
 *  - rlock_try_lock (and _owner, rlock_lock_async): every value within
 *    wait_ms (0: one try; < 0: no limit) for lease_ms (> 0; < 0: watchdog
 *    mode, see below; 0: RLOCK_EINVAL): 1 all taken (re-entered where the
 *    owner held them), 0 not within wait_ms (none taken), or an error.
 *    rlock_req_cancel() ends an async wait (RLOCK_ECANCELED, none taken).
 *  - rlock_lock (and _owner): waits as long as it takes: 0 or an error.
 *  - rlock_unlock (and _owner, rlock_unlock_async): one hold of every
 *    value: 0 (every value freed, or some still held by a re-entry),
 *    RLOCK_ENOTOWNER when a value is not held by the owner (nothing is
 *    changed then), RLOCK_ELOCKLOST when the hold was lost (a renewal or
 *    this unlock found it gone; any values still held are released all
 *    the same). Publishes "0" on the group's channel when a value was
 *    freed. Renewal stops with the handle's last hold of the owner.
 *  - rlock_force_unlock (and _async): frees every value whoever holds it
 *    (publishing "0"): the number of values that had a holder.
 *  - rlock_is_locked (and _async): 1 if any value is held (a hold not
 *    ended), else 0. rlock_is_held (and _owner, _async): 1 if the owner
 *    holds every value, else 0.
 *  - rlock_is_lease_guaranteed (and _owner): as for a lock (the hold is
 *    the library's, below).
 *  - rlock_hold_count, rlock_remain_ttl, rlock_force_unlock_holder and
 *    the fenced calls: RLOCK_EINVAL with a detail, nothing sent.
 *  - rlock_member_count / rlock_quorum: how many distinct values.
 * lease_ms < 0 is watchdog mode, as for rlock_try_lock(): the values are
 * taken for the client's watchdog_timeout_ms and renewed every third of it
 * (Java's FastMultilockTask script) until the owner's last unlock, the
 * handle's free or the client's close. The holds are the library's, as a
 * lock's: one per (group, owner, handle) - two handles of one owner over
 * overlapping values hold apart - renewed by the client's watchdog, with
 * the same events (ACQUIRED, RELEASED, LOST, LEASE_AT_RISK, kind
 * "fast_multilock", the group as the name), renewal stats and lease
 * guarantee. A renewal that finds the values no longer the owner's
 * (expired, deleted, force-unlocked) marks the hold lost (LOST,
 * on_lock_lost with the group and the owner string), and the owner's next
 * unlock through that handle returns RLOCK_ELOCKLOST. */
#define RLOCK_FAST_MULTILOCK_FIELD_LEN 22

/* The field name of a value: base64 (standard alphabet, no "==") of
 * HighwayHash-128 with Redisson's key over its bytes, 22 characters and a
 * NUL into out ("Jack_001" -> "7pNoDdizVy2xY792MaFv+w"). 0, or
 * RLOCK_EINVAL (NULL out, or NULL value with len > 0). */
RLOCK_EXTERN int rlock_fast_multilock_field_name(
    const void *value, size_t len,
    char out[RLOCK_FAST_MULTILOCK_FIELD_LEN + 1]);
/* A handle for `values` (n >= 1; lens NULL: NUL-terminated strings, else
 * their byte lengths) of `group`; equal values count once. Sends nothing.
 * Errors as for rlock_new(), and RLOCK_EINVAL for n == 0 or a NULL value.
 * A FasterMultiLock cannot be a member of a MultiLock (RLOCK_EINVAL). */
RLOCK_EXTERN int rlock_new_fast_multilock(rlock_client *client,
                                          const char *group,
                                          const char *const *values,
                                          const size_t *lens, size_t n,
                                          rlock **lock);
/* Java's renewal, on request: every value's hold by `owner` ends lease_ms
 * (> 0) from now. 1 renewed, 0 a value is not the owner's (or the group is
 * gone); RLOCK_EINVAL for a handle of another kind. */
RLOCK_EXTERN int rlock_fast_multilock_renew_owner(rlock *lock, uint64_t owner,
                                                  int64_t lease_ms);

/* ========================================================================
 * Semaphore
 * (docs/semaphores-latches.md)
 * ===================================================================== */

/* ---- semaphores (Redisson getSemaphore) ------------------------------- *
 * N permits shared by every client, Java's included: a string counter under
 * the name and the channel "redisson_sc:{name}", on which every call that
 * adds permits publishes the new total (docs/wire-protocol.md, "The
 * semaphore"). Permits belong to nobody: any caller may release them, and
 * nothing renews or returns them by itself. A missing key counts as 0
 * permits. Counts: 1..2^40; 0 or negative is RLOCK_EINVAL (nothing sent),
 * except that rlock_semaphore_add_permits() also takes -2^40..-1. A count
 * driven below 0 that way reads as 0 permits.
 * WRONGTYPE (the name holds another type): RLOCK_EWRONGTYPE. */
typedef struct rlock_semaphore rlock_semaphore;

/* A handle (cheap, sends nothing). Errors as for rlock_new(). */
RLOCK_EXTERN int rlock_semaphore_new(rlock_client *client, const char *name,
                                     rlock_semaphore **sem);
/* Releases a handle (permits are not released). NULL is accepted. */
RLOCK_EXTERN void rlock_semaphore_free(rlock_semaphore *sem);
/* Sets the number of permits if the semaphore does not exist yet (Java
 * trySetPermits), with a TTL when ttl_ms > 0 (at most 2^40). 1 set, 0 it
 * existed, or an error. */
RLOCK_EXTERN int rlock_semaphore_try_set_permits(rlock_semaphore *sem,
                                                 int64_t permits,
                                                 int64_t ttl_ms);
/* Takes `permits` permits, waiting as long as it takes (0 or an error). */
RLOCK_EXTERN int rlock_semaphore_acquire(rlock_semaphore *sem, int64_t permits);
/* Takes `permits` permits within wait_ms (0: one attempt; < 0: no limit).
 * 1 taken, 0 not within wait_ms, or an error. */
RLOCK_EXTERN int rlock_semaphore_try_acquire(rlock_semaphore *sem,
                                             int64_t permits, int64_t wait_ms);
/* Adds `permits` permits (creating the counter) and publishes the total.
 * 0 or an error. Not re-sent after a lost reply (it would add twice). */
RLOCK_EXTERN int rlock_semaphore_release(rlock_semaphore *sem, int64_t permits);
/* Adds `permits` (may be negative, not 0) to the count and publishes the
 * new total (Java addPermits). 0 or an error. */
RLOCK_EXTERN int rlock_semaphore_add_permits(rlock_semaphore *sem,
                                             int64_t permits);
/* Takes every available permit: the number taken (>= 0), or an error. */
RLOCK_EXTERN int64_t rlock_semaphore_drain_permits(rlock_semaphore *sem);
/* The available permits (>= 0; a missing key is 0), or an error. */
RLOCK_EXTERN int64_t rlock_semaphore_available_permits(rlock_semaphore *sem);
/* rlock_semaphore_try_acquire with a callback (status 1/0/error), exactly
 * once; cancellable with rlock_req_cancel(). */
RLOCK_EXTERN int rlock_semaphore_acquire_async(rlock_semaphore *sem,
                                               int64_t permits, int64_t wait_ms,
                                               rlock_cb cb, void *data,
                                               rlock_req **req);
/* Adds `permits` permits and publishes the new total only if the semaphore
 * exists (Java releaseIfExists): 1 released, 0 there is none (nothing is
 * created or published). permits 0 answers 0 without sending anything, as
 * Java does; negative or above 2^40 is RLOCK_EINVAL. Not re-sent after a
 * lost reply. */
RLOCK_EXTERN int rlock_semaphore_release_if_exists(rlock_semaphore *sem,
                                                   int64_t permits);

/* ========================================================================
 * Permit-expirable semaphore
 * (docs/semaphores-latches.md)
 * ===================================================================== */

/* ---- permit-expirable semaphores (Redisson getPermitExpirableSemaphore)
 * N permits; each taken permit has an id (32 lowercase hex characters, as
 * Java shows it; stored as 16 raw bytes) and, optionally, a lease after
 * which it returns by itself - a crashed holder's permit comes back. Keys:
 * the count under the name and the zset "{name}:timeout" (id -> absolute
 * wall-clock expiry in ms); channel "redisson_sc:{name}", shared with the
 * plain semaphore (docs/wire-protocol.md). lease_ms < 0: no lease (the
 * permit is held until released); 0 is RLOCK_EINVAL. */
typedef struct rlock_permit_semaphore rlock_permit_semaphore;
#define RLOCK_PERMIT_ID_LEN 32
/* The most permits one acquire takes, and the most ids one release gives
 * back (they travel in one script call). */
#define RLOCK_PERMIT_IDS_MAX 1024

RLOCK_EXTERN int rlock_permit_semaphore_new(rlock_client *client,
                                            const char *name,
                                            rlock_permit_semaphore **sem);
RLOCK_EXTERN void rlock_permit_semaphore_free(rlock_permit_semaphore *sem);
/* Sets the number of permits if absent: 1 set, 0 it existed. */
RLOCK_EXTERN int rlock_permit_semaphore_try_set_permits(
    rlock_permit_semaphore *sem, int64_t permits);
/* Adds permits (negative: removes) and publishes the new count. */
RLOCK_EXTERN int rlock_permit_semaphore_add_permits(rlock_permit_semaphore *sem,
                                                    int64_t permits);
/* Takes one permit, waiting as long as it takes; its id goes to `id`
 * (RLOCK_PERMIT_ID_LEN + 1 bytes, NUL-terminated). 0 or an error. */
RLOCK_EXTERN int rlock_permit_semaphore_acquire(rlock_permit_semaphore *sem,
                                                int64_t lease_ms, char *id);
/* Takes one permit within wait_ms (0: one attempt, < 0: no limit): 1 with
 * its id in `id`, 0 not within wait_ms, or an error. */
RLOCK_EXTERN int rlock_permit_semaphore_try_acquire(rlock_permit_semaphore *sem,
                                                    int64_t wait_ms,
                                                    int64_t lease_ms, char *id);
/* As try_acquire, with a callback (status 1/0/error) exactly once; `id`
 * must stay valid until then. Cancellable with rlock_req_cancel(). */
RLOCK_EXTERN int rlock_permit_semaphore_acquire_async(
    rlock_permit_semaphore *sem, int64_t wait_ms, int64_t lease_ms, char *id,
    rlock_cb cb, void *data, rlock_req **req);
/* Returns the permit `id`: 0, or RLOCK_ENOTOWNER when no such permit is
 * taken (never issued, already released, or expired), RLOCK_EINVAL when id
 * is not 32 hex characters. */
RLOCK_EXTERN int rlock_permit_semaphore_release(rlock_permit_semaphore *sem,
                                                const char *id);
/* As release, but 1 released / 0 not taken instead of RLOCK_ENOTOWNER. */
RLOCK_EXTERN int rlock_permit_semaphore_try_release(rlock_permit_semaphore *sem,
                                                    const char *id);
/* Sets a new lease on a taken permit (< 0: none): 1 done, 0 not taken. */
RLOCK_EXTERN int rlock_permit_semaphore_update_lease(
    rlock_permit_semaphore *sem, const char *id, int64_t lease_ms);
/* Permits free / taken (expired ones are returned first), or an error. */
RLOCK_EXTERN int64_t
rlock_permit_semaphore_available_permits(rlock_permit_semaphore *sem);
RLOCK_EXTERN int64_t
rlock_permit_semaphore_acquired_permits(rlock_permit_semaphore *sem);

/* Several permits at once (Java's acquire(n) / tryAcquire(n, ...)): all
 * `permits` or none, each with its own id and the same lease. `ids` has
 * room for `permits` ids (char ids[permits][RLOCK_PERMIT_ID_LEN + 1]);
 * each gets a NUL-terminated id when taken. permits: 1..
 * RLOCK_PERMIT_IDS_MAX, else RLOCK_EINVAL. More permits than the pool has
 * is not an error (as in Java): the call waits until set_permits or
 * add_permits make room, or wait_ms runs out. 1 taken, 0 not within
 * wait_ms (0: one attempt, < 0: no limit), or an error. */
RLOCK_EXTERN int rlock_permit_semaphore_try_acquire_n(
    rlock_permit_semaphore *sem, int64_t permits, int64_t wait_ms,
    int64_t lease_ms, char (*ids)[RLOCK_PERMIT_ID_LEN + 1]);
/* As try_acquire_n, waiting as long as it takes: 0 or an error. */
RLOCK_EXTERN int rlock_permit_semaphore_acquire_n(
    rlock_permit_semaphore *sem, int64_t permits, int64_t lease_ms,
    char (*ids)[RLOCK_PERMIT_ID_LEN + 1]);
/* As try_acquire_n, with a callback (status 1/0/error) exactly once; `ids`
 * must stay valid until then. Cancellable with rlock_req_cancel(): a cancelled
 * acquire leaves none of its permits taken. */
RLOCK_EXTERN int rlock_permit_semaphore_acquire_n_async(
    rlock_permit_semaphore *sem, int64_t permits, int64_t wait_ms,
    int64_t lease_ms, char (*ids)[RLOCK_PERMIT_ID_LEN + 1], rlock_cb cb,
    void *data, rlock_req **req);
/* Returns the `count` permits `ids`, all or none (Java tryRelease(List)):
 * `count` released, or 0 when any id is not taken (never issued, already
 * released, or its lease ran out) and nothing changed. The number
 * released is published on the channel (not the new count). An empty
 * list, more than RLOCK_PERMIT_IDS_MAX ids, an id that is not 32 hex
 * characters or the same id twice: RLOCK_EINVAL, nothing sent. */
RLOCK_EXTERN int64_t rlock_permit_semaphore_try_release_n(
    rlock_permit_semaphore *sem, const char *const *ids, size_t count);
/* As try_release_n: 0, or RLOCK_ENOTOWNER where it answers 0. */
RLOCK_EXTERN int rlock_permit_semaphore_release_n(rlock_permit_semaphore *sem,
                                                  const char *const *ids,
                                                  size_t count);
/* Makes the pool `permits` in all, free + taken (Java setPermits): a
 * missing semaphore is created with that many; otherwise the free count
 * moves by the difference, and goes below 0 when more permits are taken
 * than the new size (they are not taken back; the pool refills as they are
 * released). Publishes `permits`. permits 0..2^40, else RLOCK_EINVAL. 0 or
 * an error. */
RLOCK_EXTERN int rlock_permit_semaphore_set_permits(rlock_permit_semaphore *sem,
                                                    int64_t permits);
/* The pool's size: free + taken (Java getPermits; expired ones are
 * returned first), 0 when the semaphore does not exist, or an error. */
RLOCK_EXTERN int64_t
rlock_permit_semaphore_permits(rlock_permit_semaphore *sem);
/* The lease time left of the permit `id` (Java getLeaseTime), in
 * *ms_left: >= 1, or -1 when it has no lease. 0, RLOCK_ENOTOWNER when no
 * such permit is taken (Java throws), RLOCK_EINVAL for a malformed id. */
RLOCK_EXTERN int rlock_permit_semaphore_lease_time(rlock_permit_semaphore *sem,
                                                   const char *id,
                                                   int64_t *ms_left);

/* ========================================================================
 * Count-down latch
 * (docs/semaphores-latches.md)
 * ===================================================================== */

/* ---- count-down latches (Redisson getCountDownLatch) ------------------ *
 * A count under the name; when count_down takes it to 0 the key is deleted
 * and "0" published on "redisson_countdownlatch__channel__{name}" (braces
 * always added), which opens every awaiter, Java's included. */
typedef struct rlock_latch rlock_latch;

/* A handle for the latch `name`: 0, RLOCK_EINVAL, RLOCK_ENAMETOOLONG, or
 * RLOCK_ECLUSTER in a cluster when the name has braces that put its channel
 * in another slot than its key (the server would refuse every count change
 * with CROSSSLOT, Java's too). */
RLOCK_EXTERN int rlock_latch_new(rlock_client *client, const char *name,
                                 rlock_latch **latch);
RLOCK_EXTERN void rlock_latch_free(rlock_latch *latch);
/* Sets the count (>= 1) if the latch does not exist: 1 set, 0 it existed.
 * Never re-sent (see rlock_latch_count_down). */
RLOCK_EXTERN int rlock_latch_try_set_count(rlock_latch *latch, int64_t count);
/* Counts down by one (at 0 the latch opens). 0 or an error. Never re-sent:
 * after RLOCK_ETIMEDOUT/RLOCK_ECONN it may or may not have run. */
RLOCK_EXTERN int rlock_latch_count_down(rlock_latch *latch);
/* The current count (0: open or absent), or an error. */
RLOCK_EXTERN int64_t rlock_latch_count(rlock_latch *latch);
/* Waits until the count is 0, at most wait_ms (< 0: no limit): 1 open,
 * 0 still closed at the deadline, or an error. */
RLOCK_EXTERN int rlock_latch_await(rlock_latch *latch, int64_t wait_ms);
/* rlock_latch_await with a callback (status 1/0/error), exactly once;
 * cancellable with rlock_req_cancel(). */
RLOCK_EXTERN int rlock_latch_await_async(rlock_latch *latch, int64_t wait_ms,
                                         rlock_cb cb, void *data,
                                         rlock_req **req);
/* Deletes the latch (publishing "1"): 1 deleted, 0 there was none. */
RLOCK_EXTERN int rlock_latch_delete(rlock_latch *latch);

/* ========================================================================
 * Fencing: the token check and the guard
 * (docs/fencing.md; docs/api.md, "Fencing")
 *
 * The check call on a fenced lock, and the
 * guard, the resource-side half of fencing for data kept in Redis. A
 * fenced lock's tokens (rlock_lock_fenced) grow with every acquisition and
 * never go backwards, even after the server lost the token key (they are
 * floored with the server's clock); a resource that refuses writes with a
 * token older than one it has seen stops a paused holder whose lease ran
 * out from overwriting the next holder's work.
 * ===================================================================== */

/* What rlock_check_token() answers. */
typedef enum rlock_fence_state {
  RLOCK_FENCE_FREE = 0,    /* the lock is not held */
  RLOCK_FENCE_CURRENT = 1, /* held, and the token is the latest handed out
                              (or higher: a forged token or one from a
                              clock jump passes, as with Chubby) */
  RLOCK_FENCE_STALE = 2,   /* held, with a later token than this one: the
                              token's holder lost the lock (or re-entered:
                              each acquisition has its own token) */
  RLOCK_FENCE_UNKNOWN = 3  /* held, but the token key is gone (its TTL,
                              fenced_token_ttl_ms, was shorter than the
                              hold): no token can be judged */
} rlock_fence_state;

/*
 * Fenced lock: is `token` the current holder's? In the manner of Chubby's
 * CheckSequencer, for a service that is handed a token and can call back:
 * one read (a script over the lock hash and the token key, re-sent after a
 * timeout). Returns an rlock_fence_state (>= 0), or RLOCK_EINVAL (NULL
 * lock, not a fenced lock, token < 1), the transport errors, RLOCK_EPROTO
 * (the token key does not hold a number). The async form's callback gets
 * status 0 and the state as value, or the error.
 */
RLOCK_EXTERN int rlock_check_token(rlock *lock, int64_t token);
RLOCK_EXTERN int rlock_check_token_async(rlock *lock, int64_t token,
                                         rlock_cb cb, void *data,
                                         rlock_req **req);

/* A guard: a hash under its own name (fields "lock" and "token": the lock
 * it fences and the highest token that passed), kept beside the data it
 * fences, on the lock's server or any other the client talks to. */
typedef struct rlock_guard rlock_guard;

/*
 * A handle on the guard `name` (no command is sent). In a cluster the
 * guarded keys must share the guard's slot: name the guard "{res}" or
 * "x:{res}" and its keys "{res}:..." - a name without braces hashes as
 * "{name}". 0, RLOCK_EINVAL (NULL or empty name), RLOCK_ENAMETOOLONG,
 * RLOCK_ECLOSED, RLOCK_ENOMEM. Free with rlock_guard_free().
 */
RLOCK_EXTERN int rlock_guard_new(rlock_client *client, const char *name,
                                 rlock_guard **out);
RLOCK_EXTERN void rlock_guard_free(rlock_guard *guard);

/* The write a guarded write makes. */
typedef enum rlock_guard_op {
  RLOCK_GUARD_SET = 1,    /* SET key value; result 0 */
  RLOCK_GUARD_HSET = 2,   /* HSET key field value; result the fields added */
  RLOCK_GUARD_INCRBY = 3, /* INCRBY key delta; result the new value */
  RLOCK_GUARD_DEL = 4,    /* DEL key; result the keys removed */
  /* The caller's own Lua script, run inside the guard's: it sees its keys
   * as KEYS and its args as ARGV, as with EVAL; result its integer reply
   * (nil, a status or a non-number: 0). An error reply it returns (or
   * raises) is the call's error, and the guard does not record the token
   * (what the script wrote before the error stays, as with EVAL). */
  RLOCK_GUARD_EVAL = 5
} rlock_guard_op;

typedef struct rlock_guarded_write {
  size_t struct_size;    /* rlock_guarded_write_init() */
  const char *lock_name; /* the fenced lock the token is from */
  int64_t token;         /* >= 1 */
  rlock_guard_op op;
  const char *key;         /* SET, HSET, INCRBY, DEL */
  const char *field;       /* HSET */
  const char *value;       /* SET, HSET */
  int64_t delta;           /* INCRBY */
  const char *script;      /* EVAL: the Lua body */
  const char *const *keys; /* EVAL: nkeys keys */
  size_t nkeys;
  const char *const *args; /* EVAL: nargs arguments */
  size_t nargs;
} rlock_guarded_write;

static inline void rlock_guarded_write_init(rlock_guarded_write *w) {
  memset(w, 0, sizeof(*w));
  w->struct_size = sizeof(*w);
}

/*
 * A guarded write: the write runs only if w->token is at least the highest
 * token the guard has seen for w->lock_name, and the guard then records
 * it - atomically, one script on the server; else nothing is written.
 * Strings are copied; the call may return before the write runs (async).
 * Never re-sent: a lost reply is RLOCK_ETIMEDOUT / RLOCK_ECONN (the write
 * may have run; the same write with the same token again is accepted).
 * Returns 0 with *result (may be NULL) as rlock_guard_op says, or:
 *   RLOCK_ESTALE   the token is below the highest the guard has seen (a
 *                  holder whose lock expired while it was paused); counted
 *                  in stats as failures[-RLOCK_ESTALE] and said as
 *                  RLOCK_EVENT_STALE;
 *   RLOCK_EFOREIGN the guard fences another lock than w->lock_name;
 *   RLOCK_EWRONGTYPE the guard key is not a guard, or the data key holds
 *                  the wrong type for the write (nothing written);
 *   RLOCK_ECLUSTER a key is not in the guard's cluster slot (nothing sent);
 *   RLOCK_EINVAL   NULL guard or w, struct_size not set, empty lock_name,
 *                  token < 1, an unknown op, a NULL key/field/value the op
 *                  needs, an EVAL without a script, over 1000 keys or args;
 *   RLOCK_ENOPERM  the ACL denies a command of the write (nothing written);
 *   the transport errors, RLOCK_ESERVER (e.g. the caller's script failed).
 * A token higher than any handed out (forged, or from a clock jump) is
 * accepted and raises the guard's floor, as a Chubby sequencer would.
 */
RLOCK_EXTERN int rlock_guard_write(rlock_guard *guard,
                                   const rlock_guarded_write *w,
                                   int64_t *result);
/* The same, asynchronously: the callback gets status (0 or the error) and
 * the result as value. 0 or the argument errors above, RLOCK_ECLOSED,
 * RLOCK_ENOMEM. */
RLOCK_EXTERN int rlock_guard_write_async(rlock_guard *guard,
                                         const rlock_guarded_write *w,
                                         rlock_cb cb, void *data,
                                         rlock_req **req);

/* ========================================================================
 * Leader election
 * (docs/election.md; docs/api.md, "Leader election")
 *
 * Candidates of one election name contend on the fenced lock of that name
 * (rlock_new_fenced: Redisson's getFencedLock), so a Java service that
 * holds getFencedLock(name) is the leader too - with no value. The leader
 * holds the lock with the watchdog (watchdog_timeout_ms, renewed every
 * third of it); its term is the fencing token of its acquisition. Beside
 * the lock, the leader writes its value, term and holder field to the
 * value key rlock_election:{name} and announces changes on the channel
 * rlock_election__channel:{name} (docs/wire-protocol.md, "Leader
 * election").
 *
 * A term ends exactly once: resigned (rlock_election_resign), or lost -
 * the watchdog found the lock gone, or its lease guarantee
 * (rlock_is_lease_guaranteed) ran out without a confirmed renewal (a server
 * that stopped answering, a process that was stopped): the candidate then
 * gives the lock up and stops reporting leadership before it learns more.
 * ===================================================================== */

typedef struct rlock_election rlock_election;
typedef struct rlock_election_observer rlock_election_observer;

/* Longest value, in bytes. A value is 1..RLOCK_ELECTION_VALUE_MAX bytes
 * (any bytes). */
#define RLOCK_ELECTION_VALUE_MAX 4096
/* Longest holder field kept in rlock_election_state (a lock's hash field:
 * "<client-id>:<thread-id>" for rlock and Redisson). */
#define RLOCK_ELECTION_HOLDER_MAX 127

/* What an election callback says (status). */
#define RLOCK_ELECTION_NOT_WON 0  /* not leader within wait_ms */
#define RLOCK_ELECTION_WON 1      /* leader: term given */
#define RLOCK_ELECTION_LOST 2     /* the term ended without a resign */
#define RLOCK_ELECTION_RESIGNED 3 /* the term ended by a resign */

/* The campaign's callback, on the client's loop thread (not blocking, no
 * blocking rlock calls: RLOCK_EDEADLK). An async campaign's callback
 * fires first with its result: RLOCK_ELECTION_WON (term > 0),
 * RLOCK_ELECTION_NOT_WON, or a negative RLOCK_E* code (RLOCK_ECANCELED
 * after rlock_election_cancel; rlock_last_error() has the detail). After
 * WON it fires exactly once more when that term ends:
 * RLOCK_ELECTION_LOST or RLOCK_ELECTION_RESIGNED, with the term. */
typedef void (*rlock_election_cb)(rlock_election *e, int status, int64_t term,
                                  void *data);

/* A candidate for leadership of `name` on `client`, with an owner id of
 * its own (rlock_owner_new): one campaign at a time per handle. Sends
 * nothing. Errors: RLOCK_EINVAL (NULL or empty name, NULL out),
 * RLOCK_ENAMETOOLONG, RLOCK_ECLOSED, RLOCK_ENOMEM. */
RLOCK_EXTERN int rlock_election_new(rlock_client *client, const char *name,
                                    rlock_election **out);
/* Resigns first when leading, cancels a campaign in flight (its callback
 * fires), then frees the handle: no callback of it runs after this
 * returns, unless called on the loop thread itself. NULL is accepted. Free
 * handles before their client. */
RLOCK_EXTERN void rlock_election_free(rlock_election *e);

/*
 * Campaigns with `value` (1..RLOCK_ELECTION_VALUE_MAX bytes) within
 * wait_ms (< 0: until won; 0: one try): returns 1 leader (*term, NULL ok,
 * gets the term), 0 not within wait_ms, or a negative error: RLOCK_EINVAL
 * (NULL handle, NULL or empty or oversized value), RLOCK_EREENTRY (this
 * handle already campaigns or leads), RLOCK_EKIND / RLOCK_EWRONGTYPE (the
 * name holds a read/write lock / not a lock), RLOCK_ECANCELED
 * (rlock_election_cancel), RLOCK_EDEADLK (on the loop thread), the
 * transport errors. on_end (NULL ok) fires, on the loop thread, exactly
 * once when a term won here ends (RLOCK_ELECTION_LOST or _RESIGNED).
 * Leaves nothing behind when not won.
 */
RLOCK_EXTERN int rlock_election_campaign(rlock_election *e, const char *value,
                                         size_t len, int64_t wait_ms,
                                         rlock_election_cb on_end, void *data,
                                         int64_t *term);
/* The same without blocking: cb fires as rlock_election_cb says. Returns 0,
 * or an error (then cb never fires). The handle is the request: one
 * campaign at a time per handle, ended with rlock_election_cancel() (not
 * an rlock_req, so it is not called _async). */
RLOCK_EXTERN int rlock_election_campaign_start(rlock_election *e,
                                               const char *value, size_t len,
                                               int64_t wait_ms,
                                               rlock_election_cb cb,
                                               void *data);
/* Ends a campaign that waits (blocking or async): it returns, or its
 * callback fires with, RLOCK_ECANCELED. Returns how many waits it ended
 * (0: none was waiting; a term already won is not touched), or
 * RLOCK_EINVAL / RLOCK_ECLOSED. Any thread. */
RLOCK_EXTERN int rlock_election_cancel(rlock_election *e);

/* The leader writes a new value (no re-election; observers hear of it).
 * 0, or RLOCK_EINVAL (bad value), RLOCK_ENOTOWNER (not the leader),
 * RLOCK_ELOCKLOST (the lock is no longer held by this candidate: the loss
 * is being delivered), the transport errors. Blocking. */
RLOCK_EXTERN int rlock_election_proclaim(rlock_election *e, const char *value,
                                         size_t len);

/* Ends this candidate's term now: releases the lock with its unlock
 * message (the next candidate, C or Java, wins at once), deletes the
 * value key if it is still this term's. The campaign's callback gets
 * RLOCK_ELECTION_RESIGNED. 0, or RLOCK_ENOTOWNER (not the leader: nothing
 * sent), RLOCK_ECLOSED, RLOCK_EDEADLK. Blocking. */
RLOCK_EXTERN int rlock_election_resign(rlock_election *e);

/* Is this candidate the leader, and until when is it guaranteed? 1: yes,
 * with *term and *until_ms (rlock_now_ms() clock: the lock cannot have
 * expired before; each NULL ok); 0: no - not won, ended, or the guarantee
 * has run out (act as lost: the loss is being delivered); RLOCK_EINVAL
 * (NULL handle). Sends nothing; any thread, the loop thread included. */
RLOCK_EXTERN int rlock_election_leading(rlock_election *e, int64_t *term,
                                        int64_t *until_ms);

/* Who leads a name, as an observer sees it. */
typedef struct rlock_election_state {
  size_t struct_size; /* rlock_election_state_init() */
  int has_leader;     /* 1: the lock is held */
  /* 1: the value is the holder's (an rlock candidate wrote it this term);
   * 0: none (a Java getFencedLock holder, or a candidate that has not
   * written it yet) */
  int has_value;
  /* The leader's term: the value key's when it has the value, else the
   * fenced lock's latest token (a Java holder's, unless it re-entered:
   * each re-entry takes a token). 0 without a leader. */
  int64_t term;
  int64_t ttl_ms; /* the lock's remaining time to live (-1: none) */
  char holder[RLOCK_ELECTION_HOLDER_MAX + 1]; /* the lock's hash field; "" */
  size_t value_len;
  char value[RLOCK_ELECTION_VALUE_MAX + 1]; /* NUL-terminated too */
} rlock_election_state;

static inline void rlock_election_state_init(rlock_election_state *s) {
  s->struct_size = sizeof(*s);
  s->has_leader = s->has_value = 0;
  s->term = 0;
  s->ttl_ms = -2;
  s->holder[0] = '\0';
  s->value_len = 0;
  s->value[0] = '\0';
}

/* Reads the leader of `name` once (blocking): 0 with *out filled
 * (has_leader 0 when nobody leads - a name nobody campaigns for is no
 * error), or RLOCK_EINVAL (NULL argument, struct_size not set),
 * RLOCK_EKIND / RLOCK_EWRONGTYPE (the name is another kind of lock / not
 * a lock), the transport errors. */
RLOCK_EXTERN int rlock_client_election_leader(rlock_client *client,
                                              const char *name,
                                              rlock_election_state *out);

/* Called on the loop thread with each new state, in order: at the start
 * (the state then, leader or not), then at every change of leader, term,
 * holder or value. `st` is valid for the call only. After a reconnect the
 * state then is read and delivered if it changed; a change made and undone
 * while nobody could hear (disconnected) is not seen. */
typedef void (*rlock_election_observe_cb)(const rlock_election_state *st,
                                          void *data);

/* Observes `name` without campaigning: subscribes to the election
 * channel, reads the state at once, again at each message, when the
 * leader's lock TTL runs out, after a reconnect, and at least every
 * poll_ms (0: 1000; changes announced by nobody - a Java holder's
 * acquire - are seen within it). Returns 0 with *out, or RLOCK_EINVAL,
 * RLOCK_ENAMETOOLONG, RLOCK_ECLOSED, RLOCK_ENOMEM, RLOCK_EDEADLK. */
RLOCK_EXTERN int rlock_election_observer_new(rlock_client *client,
                                             const char *name, int64_t poll_ms,
                                             rlock_election_observe_cb cb,
                                             void *data,
                                             rlock_election_observer **out);
/* Stops and frees an observer: no callback runs after this returns
 * (unless called on the loop thread, from its own callback: then none
 * after that callback). NULL is accepted. */
RLOCK_EXTERN void rlock_election_observer_free(rlock_election_observer *o);

/* ========================================================================
 * Introspection and administration
 * (docs/api.md, "Introspection" and "Who holds it")
 * ===================================================================== */

/* ---- introspection and administration (`rlock status`, `rlock unlock
 * --force`) ------------------------------------------------------------- *
 * What is stored under a name, whichever primitive (or program) put it
 * there: read from the keys and channels Java Redisson and rlock use (docs/
 * wire-protocol.md), in one atomic script on the node serving the name
 * (Cluster: by its slot; Sentinel: the current master), so every number is
 * of one moment. Reads only. */

/* The kind the keys show. Redis stores some kinds alike, so some cannot be
 * told apart: RLock and the spin lock have the same hash (LOCK); a fair
 * lock nobody waits for has no queue keys (LOCK); a fenced lock is told by
 * its token key, which outlives the lock (FENCED, locked or not); a
 * semaphore's permits and a latch's count are the same string (COUNT); a
 * permit-expirable semaphore with no permit taken has no lease zset
 * (COUNT). */
/* The registry of what the keys show: X(ID, value, name, words) for each
 * rlock_info_kind - RLOCK_INFO_<ID> = value; name as `rlock status --json`
 * and `rlock ls --json` write it ("kind"), words as they print it. */
#define RLOCK_INFO_KIND_MAP(X)                                                 \
  /* nothing under the name */                                                 \
  X(NONE, 0, "none", "nothing")                                                \
  /* a lock hash (RLock, spin lock, non-reentrant lock, idle fair lock) */     \
  X(LOCK, 1, "lock", "lock")                                                   \
  /* a lock hash and/or a fair lock's queue */                                 \
  X(FAIR, 2, "fair", "fair lock")                                              \
  /* a read/write lock's hash (see mode) */                                    \
  X(RWLOCK, 3, "rwlock", "read/write lock")                                    \
  /* a fenced lock's token (and its hash if held); an election's lock */       \
  X(FENCED, 4, "fenced", "fenced lock")                                        \
  /* an integer string: semaphore permits or a latch's count (see count) */    \
  X(COUNT, 5, "count", "semaphore or latch")                                   \
  /* the count and its lease zset */                                           \
  X(PERMIT_SEMAPHORE, 6, "permit-semaphore", "permit-expirable semaphore")     \
  /* not a primitive's: another Redis type (see type), a string that is not    \
   * an integer, or a hash with a field no lock writes (a value that is not    \
   * an integer, a mode that is neither "read" nor "write") */                 \
  X(FOREIGN, 7, "foreign", "not a lock")                                       \
  /* a FasterMultiLock group's hash: each value's field -> its holder (see     \
   * holders: every field with its value, none a count); locked while a        \
   * holder's expire_time has not passed (added in issue 34) */                \
  X(FAST_MULTILOCK, 8, "fast-multilock", "FasterMultiLock group")

typedef enum rlock_info_kind {
#define RLOCK_INFO_KIND_ENUM_(id, value, name, words) RLOCK_INFO_##id = value,
  RLOCK_INFO_KIND_MAP(RLOCK_INFO_KIND_ENUM_)
#undef RLOCK_INFO_KIND_ENUM_
} rlock_info_kind;

/* rlock_info_entry.count of a hash field whose value is not an integer. */
#define RLOCK_INFO_NOT_A_COUNT INT64_MIN
/* rlock_info_entry.ttl_ms of a permit without lease, or of a queued waiter
 * without deadline. */
#define RLOCK_INFO_NO_EXPIRY INT64_MAX
/* At most this many holders, queued waiters and permits are returned
 * (each list's full length is in its *_total). */
#define RLOCK_INFO_MAX_ENTRIES 1000

/* One holder, queued waiter or taken permit. Strings are NUL-terminated
 * (and may hold NUL bytes within their _len). */
typedef struct rlock_info_entry {
  /* holders: the hash field as stored, an owner string
   * ("<client-uuid>:<thread-id>"; the writer's ends in ":write"); a
   * FasterMultiLock group's held value: its holder's owner string;
   * queue: the waiting owner; permits: the id as 32 lowercase hex
   * characters (the member as stored when it is not 16 bytes). */
  const char *key;
  size_t key_len;
  /* holders: the field's value as stored; a group's held value: the
   * value's field name (rlock_fast_multilock_field_name()); NULL
   * otherwise. */
  const char *value;
  size_t value_len;
  /* holders: the hold count (a group's held value: its lock_count);
   * RLOCK_INFO_NOT_A_COUNT for a foreign field, and for a group's field
   * that is no part of a hold (then key and value are as stored); 0
   * otherwise. */
  int64_t count;
  /* queue: ms until the waiter's deadline; permits: ms until its lease
   * runs out; a group's held value: ms until its holder's expire_time
   * (against rlock_info.server_ms); negative: passed (cleared at the
   * next acquire by anyone); RLOCK_INFO_NO_EXPIRY: none. 0 for other
   * holders (see rlock_info.ttl_ms). */
  int64_t ttl_ms;
  /* holders of a read/write lock: 1 for the writer's field. */
  int writer;
} rlock_info_entry;

/* What rlock_client_info() found. Set struct_size (rlock_info_init()) before
 * the call: the struct may grow at its end in later versions, and only
 * struct_size bytes are written, so a program built against an older
 * rlock.h gets the fields it knows. The entries and strings live in one
 * block the library allocates: valid until rlock_info_free(). */
typedef struct rlock_info {
  size_t struct_size;
  void *mem_; /* the library's block; rlock_info_free() */
  rlock_info_kind kind;
  char type[16];  /* Redis's TYPE of the name: "none", "hash",
                     "string", "list", ... */
  int locked;     /* 1: a lock hash with at least one holder (a
                     FasterMultiLock group: a hold not ended) */
  int64_t ttl_ms; /* PTTL of the name: -2 no key, -1 no TTL */
  /* Clients subscribed to the kind's channels: for hashes and missing
   * names the lock and the read/write lock channel, for strings the
   * semaphore's and the latch's (a fair lock's waiters have channels of
   * their own: see queue). */
  int64_t waiters;
  /* A lock hash's "mode" field ("read" or "write" for a read/write lock);
   * NULL when it has none. Not among the holders. */
  const char *mode;
  /* the hash's fields (a FasterMultiLock group: one per held value, each
   * folding in its two integer fields, then fields outside a hold) */
  const rlock_info_entry *holders;
  size_t holders_n, holders_total;
  const rlock_info_entry *queue; /* a fair lock's waiters, first first */
  size_t queue_n, queue_total;
  int64_t token; /* a fenced lock's latest token; -1: no token key */
  int64_t count; /* COUNT / PERMIT_SEMAPHORE: the string's integer
                    (available permits, or a latch's count); -1 else */
  const rlock_info_entry *permits; /* taken permits, soonest expiry first */
  size_t permits_n, permits_total;
  int64_t server_ms; /* the server's clock (TIME) when it was read */
} rlock_info;

/* Zeroes `info` and sets struct_size to `size`; use rlock_info_init(). */
RLOCK_EXTERN void rlock_info_init_size(rlock_info *info, size_t size);
static inline void rlock_info_init(rlock_info *info) {
  rlock_info_init_size(info, sizeof(*info));
}

/*
 * Reads what is stored under `name` into *info (blocking; one round trip,
 * re-sent after a timeout or lost connection as other queries are). 0 on
 * success - also for a missing name (kind NONE, type "none") and for
 * values that are no primitive's (kind FOREIGN: never RLOCK_EWRONGTYPE,
 * nothing is changed); then release the result with rlock_info_free().
 * Errors: RLOCK_EINVAL (NULL client or info, empty name, struct_size not
 * set - too small to reach `kind` - or larger than this library's
 * sizeof(rlock_info)), RLOCK_ENAMETOOLONG,
 * RLOCK_ECLOSED, RLOCK_EDEADLK (on the loop thread), RLOCK_ENOPERM (the
 * ACL user may not run the script - EVALSHA/EVAL - or one of its reads:
 * TYPE, PTTL, HLEN, HGETALL, HSCAN, GET, LLEN, LRANGE, ZSCORE, ZCARD,
 * ZRANGE, PUBSUB, TIME), the transport errors; on failure *info holds no
 * block (rlock_info_free() is still safe). A struct still holding an
 * unfreed result is overwritten (its block leaks).
 */
RLOCK_EXTERN int rlock_client_info(rlock_client *client, const char *name,
                                   rlock_info *info);

/* Frees the block of a result and clears its pointers (within
 * struct_size). NULL, and a result already freed, are accepted. */
RLOCK_EXTERN void rlock_info_free(rlock_info *info);

/*
 * Who holds it: the rlock client behind an owner string.
 *
 * A client opened without the client_name option names each of its
 * connections "rlock/<client-id>/<pid>/<program>/<host>" at connect (CLIENT
 * SETNAME, pipelined with the handshake: nothing per acquire; a refusal -
 * an ACL without +client|setname, a service without CLIENT - is ignored).
 * rlock_client_holder() finds that name with CLIENT LIST on the master (each
 * master of a cluster in turn) and returns what it carries. Set
 * struct_size with rlock_holder_init().
 */
typedef struct rlock_holder {
  size_t struct_size;
  char host[72];        /* the holder's host name (gethostname), cut */
  char program[40];     /* its program's short name, cut */
  int64_t pid;          /* its process id */
  int64_t connected_ms; /* how long its connection has been up (CLIENT
                           LIST's age, whole seconds): an upper bound of
                           how long it has held the lock - Redis keeps no
                           acquire time (Redisson's layout) */
  char addr[64];        /* its address as the server sees it, ip:port
                           (this and connected_ms: of its oldest connection
                           there, the lowest CLIENT LIST id) */
} rlock_holder;

#define rlock_holder_init(h) rlock_holder_init_size((h), sizeof(rlock_holder))
RLOCK_EXTERN void rlock_holder_init_size(rlock_holder *h, size_t size);

/*
 * What the server knows of the client behind `owner` ("<client-id>:<thread>",
 * as rlock_client_info() lists holders; a writer's ":write" may stay), asked
 * on the server(s) serving `name`. 1: found, *h filled. 0: no connection
 * there carries the name of an rlock client with that id - a Java client,
 * a client opened with its own client_name, one whose name was changed
 * since (CLIENT SETNAME on its connection), or one gone; rlock_last_error()
 * says so. An owner that is not of that form is RLOCK_EINVAL. CLIENT LIST
 * refused (an ACL without +client|list): RLOCK_ENOPERM with the server's
 * text. Blocking; one CLIENT LIST per master asked.
 */
RLOCK_EXTERN int rlock_client_holder(rlock_client *client, const char *name,
                                     const char *owner, rlock_holder *h);

/*
 * Kind-aware force unlock of `name`: deletes the lock whoever holds it
 * with the release its own kind makes, so its waiters wake. `kind` NULL
 * or "": the kind the keys show (rlock_client_info): a read/write lock is
 * force-unlocked as one in its mode (message on its own channel), a fair
 * lock tells the first waiter in its queue, anything else (RLock, fenced,
 * spin, a hash with foreign fields) as rlock_force_unlock() on an RLock.
 * Otherwise one of rlock_kind()'s names ("lock", "fair", "read", "write",
 * "fenced", "spin", "nonreentrant", "nonreentrant_fair"): that kind's
 * force unlock, as rlock_force_unlock() on a handle of it ("read"/"write"
 * delete only a lock in that mode).
 * Unlike rlock_force_unlock() it leaves any value that is not a hash
 * alone: RLOCK_EWRONGTYPE, with rlock_last_error() "not a lock (Redis type
 * <type>)" - semaphores and latches (strings) included. `found` (NULL, or
 * with struct_size set): what was read before the release, whenever the
 * read succeeded (type "none": there was nothing), to be freed with
 * rlock_info_free(). Returns 1 released, 0 nothing was locked (no key;
 * "read"/"write": not in that mode), or a negative error (RLOCK_EINVAL
 * also for an unknown kind). The read and the delete are two commands: a
 * value stored under the name in between is deleted all the same.
 */
RLOCK_EXTERN int rlock_client_force_unlock(rlock_client *client,
                                           const char *name, const char *kind,
                                           rlock_info *found);

/* ========================================================================
 * Listing names
 * (docs/api.md, "Listing names")
 * ===================================================================== */

/* ---- listing names (`rlock ls`) ---------------------------------------- *
 * Every name under which a lock, semaphore or latch (rlock's or Java
 * Redisson's) keeps a key, found with SCAN (never KEYS): on each master of
 * a cluster in turn, on the master through Sentinel. A key a kind keeps
 * beside its name (a fair lock's queue and deadlines, a fenced lock's
 * token, a permit-expirable semaphore's leases, a read lock's hold leases,
 * an unlock's request latch) counts as its name, so each name comes once
 * however many keys it has. Other keys come as their own names: read each
 * name with rlock_client_info() to tell a lock from a foreign value
 * (RLOCK_INFO_FOREIGN) or a name gone since (RLOCK_INFO_NONE). SCAN's own
 * guarantees hold: a name present for the whole scan is returned; one
 * created or deleted meanwhile may or may not be. */

typedef struct rlock_scan rlock_scan;

typedef struct rlock_scan_options {
  size_t struct_size; /* rlock_scan_options_init() sets it */
  /* The names to return, as a Redis glob (MATCH's syntax: * ? [abc] [^a]
   * [a-z], a backslash escapes). NULL or "": every name. Matched against
   * the name, not the key: "job*" finds the fenced lock job1 by its token
   * key redisson_lock_token:{job1}. */
  const char *pattern;
  /* SCAN's COUNT, the keys the server looks at per round trip: each is
   * that much work for the server, so a scan never blocks it. 1..100000;
   * 0: 1000. */
  int count;
} rlock_scan_options;

/* Zeroes `o` and sets struct_size to `size`; use rlock_scan_options_init(). */
RLOCK_EXTERN void rlock_scan_options_init_size(rlock_scan_options *o,
                                               size_t size);
static inline void rlock_scan_options_init(rlock_scan_options *o) {
  rlock_scan_options_init_size(o, sizeof(*o));
}

/*
 * Starts a scan of the names matching opts->pattern (opts NULL: every
 * name, COUNT 1000). Nothing is sent until rlock_scan_next(). Errors:
 * RLOCK_EINVAL (NULL client or out, a struct_size not set or larger than
 * this library's, count out of range), RLOCK_ECLOSED, RLOCK_ENOMEM.
 * Close the scan (rlock_scan_free()) before its client.
 */
RLOCK_EXTERN int rlock_scan_new(rlock_client *client,
                                const rlock_scan_options *opts,
                                rlock_scan **out);

/*
 * The next name (blocking; a SCAN round trip when the names of the last
 * one are used up): returns 1 with *name (NUL-terminated, valid until the
 * next call or the close) and *len (NULL ok), 0 when every master has
 * been scanned, or a negative error: the transport errors, RLOCK_ENOPERM
 * (the ACL denies SCAN), RLOCK_EPROTO, RLOCK_ECLUSTER (no slot map); the
 * last error names the master. Memory grows with the names returned (each
 * is remembered to return it once).
 */
RLOCK_EXTERN int rlock_scan_next(rlock_scan *scan, const char **name,
                                 size_t *len);

/* Ends a scan and frees it. NULL is accepted. */
RLOCK_EXTERN void rlock_scan_free(rlock_scan *scan);

#ifdef __cplusplus
}
#endif
#endif /* RLOCK_H */
