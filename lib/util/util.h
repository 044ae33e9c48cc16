/* The util layer: small self-contained helpers with no state of their own
 * beyond the calling thread's error detail - the error table and
 * rlock_last_error(), URI parsing and option checks, random ids, names
 * derived from a lock name. Internal; never installed. (map.h is the hash
 * map.) */
#ifndef RLOCK_UTIL_H
#define RLOCK_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

typedef struct rlock__uri {
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
 * rediss:// (tls = 1), and unix:///path[?db=N]. On success fills *out (strings malloc'd) and returns
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

/* ---- options.c ---- */

/* Checks every field's range (see rlock.h) and the URI's syntax. Returns 0 or
 * RLOCK_EINVAL / RLOCK_EURI with rlock_last_error() set. `o` must be a full
 * struct of this version (see rlock__options_copy). */
int rlock__options_validate(const rlock_options *o);
/* RLOCK_EINVAL (last error naming the field) when a tls_* option is set
 * but the URI is not rediss://, else 0. */
int rlock__options_check_tls(const rlock_options *o, const rlock__uri *uri);
/* Fills *out with the defaults, then copies the first in->struct_size bytes
 * of *in over them (in == NULL: defaults only). Returns 0, or RLOCK_EINVAL
 * with rlock_last_error() set when struct_size is 0 (not initialised) or
 * larger than sizeof(rlock_options) (a newer header). */
int rlock__options_copy(rlock_options *out, const rlock_options *in);

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

#endif
