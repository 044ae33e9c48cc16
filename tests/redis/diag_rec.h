/* A recorder for the diagnostics callback (rlock_options.on_diag), shared
 * by the tests that count what a client said (tests/faults/test_diag.c,
 * tests/topo/test_diag_topo.c): every line with its level, thread-safe,
 * and waits and counts over them. Header only. The rec_* functions that
 * assert run on the test's main thread. */
#ifndef RLOCK_TEST_DIAG_REC_H
#define RLOCK_TEST_DIAG_REC_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "rlock.h"

#define DIAG_MAX 256

typedef struct diag_line {
  int level;
  char text[640];
} diag_line;

typedef struct diag_rec {
  pthread_mutex_t mu;
  diag_line lines[DIAG_MAX];
  int n;
  int dropped;                    /* past DIAG_MAX */
  _Atomic(rlock_client *) client; /* every call's client */
  atomic_int other_client;        /* calls with a client other than that */
  atomic_int newlines;            /* lines with a control byte in them */
} diag_rec;

static inline void rec_cb(rlock_client *client, rlock_diag_level level,
                          const char *message, void *data) {
  diag_rec *r = data;
  rlock_client *expected = NULL;
  if (!atomic_compare_exchange_strong(&r->client, &expected, client) &&
      expected != client)
    atomic_fetch_add(&r->other_client, 1);
  for (const char *p = message; *p != '\0'; p++)
    if ((unsigned char)*p < 0x20)
      atomic_fetch_add(&r->newlines, 1);
  pthread_mutex_lock(&r->mu);
  if (r->n < DIAG_MAX) {
    r->lines[r->n].level = (int)level;
    snprintf(r->lines[r->n].text, sizeof r->lines[r->n].text, "%s", message);
    r->n++;
  } else {
    r->dropped++;
  }
  pthread_mutex_unlock(&r->mu);
}

static inline void rec_init(diag_rec *r, rlock_options *o) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  o->on_diag = rec_cb;
  o->on_diag_data = r;
}

static inline void rec_clear(diag_rec *r) {
  pthread_mutex_lock(&r->mu);
  r->n = 0;
  pthread_mutex_unlock(&r->mu);
}

/* Lines at `level` (-1: any) that contain every one of the NULL-ended
 * strings. */
static inline int rec_vcount(diag_rec *r, int level, va_list ap) {
  const char *want[8];
  int nw = 0;
  const char *s;
  while ((s = va_arg(ap, const char *)) != NULL && nw < 8)
    want[nw++] = s;
  int count = 0;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n; i++) {
    if (level >= 0 && r->lines[i].level != level)
      continue;
    bool all = true;
    for (int k = 0; k < nw && all; k++)
      all = strstr(r->lines[i].text, want[k]) != NULL;
    count += all;
  }
  pthread_mutex_unlock(&r->mu);
  return count;
}

static inline int rec_count(diag_rec *r, int level, ...) {
  va_list ap;
  va_start(ap, level);
  int count = rec_vcount(r, level, ap);
  va_end(ap);
  return count;
}

/* Every line, one per row, for failure messages. */
static inline void rec_dump(diag_rec *r, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n && used + 1 < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "  %s %s\n",
                             rlock_diag_level_name(r->lines[i].level),
                             r->lines[i].text);
  pthread_mutex_unlock(&r->mu);
}

typedef struct rec_wait {
  diag_rec *r;
  int level;
  const char *a, *b;
} rec_wait;

static inline bool rec_has(void *arg) {
  rec_wait *w = arg;
  return rec_count(w->r, w->level, w->a, w->b, (const char *)NULL) > 0;
}

/* Waits (bounded) for a line at `level` containing a and b (b may be
 * NULL). */
static inline void rec_wait_for(diag_rec *r, int level, const char *a,
                                const char *b, int64_t bound_ms) {
  rec_wait w = {r, level, a, b};
  if (!rt_poll_until(rec_has, &w, bound_ms)) {
    char dump[8192];
    rec_dump(r, dump, sizeof dump);
    cr_assert_fail("no %s line with '%s'%s%s within %lld ms; the lines:\n%s",
                   level >= 0 ? rlock_diag_level_name(level) : "", a,
                   b ? " and " : "", b ? b : "", (long long)bound_ms, dump);
  }
}

static inline void rec_expect(diag_rec *r, int want, const char *file, int line,
                              int level, ...) {
  va_list ap;
  va_start(ap, level);
  int got = rec_vcount(r, level, ap);
  va_end(ap);
  if (got == want)
    return;
  char needles[512] = "", dump[8192];
  size_t used = 0;
  va_start(ap, level);
  const char *s;
  while ((s = va_arg(ap, const char *)) != NULL && used < sizeof needles)
    used += (size_t)snprintf(needles + used, sizeof needles - used, " '%s'", s);
  va_end(ap);
  rec_dump(r, dump, sizeof dump);
  cr_assert_fail("%s:%d: %d %s line(s) with%s, not %d; the lines:\n%s", file,
                 line, got, level >= 0 ? rlock_diag_level_name(level) : "",
                 needles, want, dump);
}

/* Asserts that exactly `want` lines at a level (-1: any) contain every one
 * of the strings that follow it: REC_EXPECT(&rec, 1, RLOCK_DIAG_WARN,
 * "lost connection to", addr). The failure lists every line. */
#define REC_EXPECT(r, want, ...)                                               \
  rec_expect((r), (want), __FILE__, __LINE__, __VA_ARGS__, (const char *)NULL)

#endif
