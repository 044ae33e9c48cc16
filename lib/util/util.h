/* The util layer: small self-contained helpers with no state of their own
 * beyond the calling thread's error detail - the error table and
 * rlock_last_error(), URI parsing and option checks, random ids, names
 * derived from a lock name. Internal; never installed. (map.h is the hash
 * map.) */
#ifndef RLOCK_UTIL_H
#define RLOCK_UTIL_H

#include <assert.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rlock.h"

#if defined(__GNUC__) || defined(__clang__)
#define RLOCK__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RLOCK__PRINTF(a, b)
#endif

/* The struct that contains `member` at `ptr`. */
#define RLOCK__CONTAINER_OF(ptr, type, member)                                 \
  ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- errors.c ---- */

/* Sets the calling thread's rlock_last_error() text (truncated to 511
 * bytes). */
void rlock__set_last_error(const char *fmt, ...) RLOCK__PRINTF(1, 2);
/* Makes rlock_last_error() return "" on the calling thread. */
void rlock__clear_last_error(void);
/* Maps a Redis error reply text (e.g. "WRONGTYPE ...", "NOPERM ...",
 * "NOAUTH ...", "WRONGPASS ...", "OOM ...", "READONLY ...", and ACL
 * refusals inside scripts) to an RLOCK_E* code; anything unrecognised is
 * RLOCK_ESERVER. */
int rlock__err_from_server(const char *text, size_t len);

/* ---- uri.c ---- */

/* What a URI describes: one server, a sentinel set, or a cluster. */
enum { RLOCK__URI_SINGLE = 0, RLOCK__URI_SENTINEL = 1, RLOCK__URI_CLUSTER = 2 };

/* One host of a multi-host URI (sentinels, cluster seeds). */
typedef struct rlock__uri_addr {
  char *host; /* without IPv6 brackets */
  int port;
} rlock__uri_addr;

typedef struct rlock__uri {
  int mode;       /* RLOCK__URI_* */
  /* SENTINEL / CLUSTER: every host listed, in order (naddrs >= 1); host
   * and port below are a copy of the first. NULL / 0 for SINGLE. */
  rlock__uri_addr *addrs;
  size_t naddrs;
  char *master;   /* SENTINEL: the master's name; NULL otherwise */
  int is_unix;    /* 1 for unix:///path */
  int tls;        /* 1 for rediss:// */
  char *host;     /* TCP host, without IPv6 brackets; NULL for unix */
  int port;       /* 1..65535 (default 6379); 0 for unix */
  char *path;     /* unix socket path; NULL for TCP */
  char *user;     /* NULL when absent (percent-decoded) */
  char *password; /* NULL when absent (percent-decoded) */
  int db;         /* 0..INT_MAX, default 0 */
} rlock__uri;

/* Parses redis://[[user]:password@]host[:port][/db], the same with
 * rediss:// (tls = 1), and unix:///path[?db=N];
 * redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]
 * (default port 26379; user and password are the master's) and
 * redis+cluster://[[user]:password@]host[:port][,host[:port]...][/0]
 * (default port 6379), each also as rediss+sentinel:// / rediss+cluster://
 * (tls = 1). On success fills *out (strings malloc'd) and returns
 * 0. On failure returns RLOCK_EURI (or RLOCK_ENOMEM), sets the thread's last
 * error to a sentence naming the problem, and leaves *out zeroed. */
int rlock__uri_parse(const char *uri, rlock__uri *out);
void rlock__uri_free(rlock__uri *u); /* frees fields, zeroes; NULL ok */
/* Zeroes buf[0..len) in a way the compiler cannot drop as a dead store
 * (explicit_bzero, or volatile stores), for secrets about to be freed.
 * NULL or 0 is a no-op. */
void rlock__wipe(void *buf, size_t len);
/* Wipes the NUL-terminated string s (e.g. a URI with a password) and frees
 * it. NULL ok. */
void rlock__free_secret(char *s);

/* ---- slot.c ---- */

/* CRC16-CCITT (XMODEM) of buf, as Redis Cluster uses it. */
uint16_t rlock__crc16(const char *buf, size_t len);
/* The Redis Cluster hash slot (0..16383) of a key: CRC16 of its hash tag
 * (the bytes between the first '{' and the first '}' after it, when that
 * is not empty) or of the whole key, modulo 16384. */
int rlock__key_slot(const char *key, size_t len);

/* ---- options.c ---- */

/* A numeric option: its field, default and range (min..max; `must`, when
 * set, words an enumerated range in the error instead). */
typedef struct rlock__option_spec {
  const char *name;
  size_t offset; /* in rlock_options */
  bool is_int;   /* an int field; else int64_t */
  int64_t def, min, max;
  const char *must;
} rlock__option_spec;
/* The table of the numeric options, in the order they are checked. */
const rlock__option_spec *rlock__options_specs(size_t *n);

/* Checks every field's range (see rlock.h) and the URI's syntax. Returns 0 or
 * RLOCK_EINVAL / RLOCK_EURI with rlock_last_error() set. `o` must be a full
 * struct of this version (see rlock__options_copy). */
int rlock__options_validate(const rlock_options *o);
/* RLOCK_EINVAL (last error naming the field) when a tls_* option is set
 * but the URI is not rediss://, rediss+sentinel:// or rediss+cluster://
 * (uri->tls is 0), else 0. */
int rlock__options_check_tls(const rlock_options *o, const rlock__uri *uri);
/* RLOCK_EINVAL (last error naming the field) when sentinel_user or
 * sentinel_password is set but the URI is not a sentinel URI, or
 * sentinel_user is set without sentinel_password; else 0. */
int rlock__options_check_sentinel(const rlock_options *o,
                                  const rlock__uri *uri);
/* Fills *out with the defaults, then copies the first in->struct_size bytes
 * of *in over them (in == NULL: defaults only). Returns 0, or RLOCK_EINVAL
 * with rlock_last_error() set when struct_size is 0 (not initialised) or
 * larger than sizeof(rlock_options) (a newer header). */
int rlock__options_copy(rlock_options *out, const rlock_options *in);

/* ---- an argument vector (argv, lens) for a command ---- */

/* Built on the stack, one argument at a time: no hand-counted argc or
 * lens[], and numbers formatted into its own storage. Enough for every
 * script's arguments; overflowing it is a bug (asserted). */
#define RLOCK__ARGV_MAX 12
typedef struct rlock__argv {
  int argc;
  const char *argv[RLOCK__ARGV_MAX];
  size_t lens[RLOCK__ARGV_MAX];
  char num[RLOCK__ARGV_MAX][24];
} rlock__argv;

static inline void rlock__argv_mem(rlock__argv *a, const void *p, size_t n) {
  assert(a->argc < RLOCK__ARGV_MAX);
  a->argv[a->argc] = (const char *)p;
  a->lens[a->argc++] = n;
}
static inline void rlock__argv_str(rlock__argv *a, const char *s) {
  rlock__argv_mem(a, s, strlen(s));
}
static inline void rlock__argv_int(rlock__argv *a, int64_t v) {
  assert(a->argc < RLOCK__ARGV_MAX);
  /* As "%lld" writes it, without printf (several per command, on the loop
   * thread). */
  char tmp[20], *p = a->num[a->argc];
  uint64_t u = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u > 0);
  if (v < 0)
    *p++ = '-';
  while (n > 0)
    *p++ = tmp[--n];
  *p = '\0';
  rlock__argv_mem(a, a->num[a->argc], (size_t)(p - a->num[a->argc]));
}

/* ---- clock.c ---- */

/* The wall clock in ms (0 if it cannot be read). For the values that are
 * compared across clients - the fair lock's queue deadlines, the permit
 * semaphore's expiries - as Java's System.currentTimeMillis() is; every
 * other time in the client is rlock__now_ms(), the monotonic clock. */
int64_t rlock__wall_ms(void);

/* ---- random.c ---- */

/* Fills buf with n cryptographically random bytes (uv_random). Returns 0,
 * or RLOCK_ESYS with libuv's error text in rlock_last_error(). Thread-safe. */
int rlock__random_bytes(void *buf, size_t n);
/* Random version-4 UUID, 36 lowercase chars + NUL. Returns 0 or RLOCK_ESYS. */
int rlock__uuid4(char out[RLOCK_ID_LEN + 1]);

/* ---- names.c (docs/wire-protocol.md, Names) ---- */

/* The tag of a name: "{name}", or the name itself when it contains '{' (the
 * brace rule). malloc'd, NUL-terminated; NULL when out of memory. */
char *rlock__tag(const char *name, size_t len, size_t *tag_len);
/* prefix + tag, malloc'd; NULL when out of memory. */
char *rlock__prefixed(const char *prefix, const char *tag, size_t tag_len,
                      size_t *len);

/* ---- counters (stats: docs/api.md, "Stats") ---- */

/* A counter with one writer (the loop thread) and readers on any thread:
 * relaxed atomics, so a reader never sees a torn value, and the writer's
 * add is a plain load and store (no locked instruction). */
typedef _Atomic uint64_t rlock__counter;

static inline void rlock__count(rlock__counter *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                        memory_order_relaxed);
}
static inline uint64_t rlock__counter_get(const rlock__counter *c) {
  return atomic_load_explicit((rlock__counter *)c, memory_order_relaxed);
}

#endif
