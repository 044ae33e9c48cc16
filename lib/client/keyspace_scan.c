/* rlock_scan_*(): the names of the locks, semaphores and latches in the
 * keyspace, a public facade over prim/scan.c beside client.c. It reaches
 * the client through the public API (a handle, for its engine), as introspect.c
 * does.
 *
 * The pattern is matched against names, but SCAN's MATCH sees keys. A
 * key always contains its name (side keys are prefix/suffix + "{name}"),
 * so MATCH "*<pattern>*" lets through every key whose name can match, and
 * no more is sent than that; the name folded out of each key is then
 * matched exactly here. */
#include <stdlib.h>
#include <string.h>

#include "map.h"
#include "prim.h"

#define DEFAULT_COUNT 1000
#define MAX_COUNT 100000
/* Any name: rlock_new() needs one for the handle that carries the engine. */
#define HANDLE_NAME "rlock_scan"

struct rlock_scan {
  rlock *lock;
  char *pattern; /* NULL: every name */
  size_t pattern_len;
  char *match; /* SCAN's MATCH */
  size_t match_len;
  int count;
  rlock__scan_pos pos;
  rlock__scan_keys keys; /* the last reply's */
  size_t next_key;
  bool last; /* keys are the last SCAN's */
  rlock__map seen; /* names returned */
  char *name; /* the name returned last */
};

void rlock_scan_options_init_size(rlock_scan_options *o, size_t size) {
  if (o == NULL)
    return;
  if (size > sizeof(*o))
    size = sizeof(*o);
  memset(o, 0, size);
  o->struct_size = size;
}

/* ---- Redis's glob (stringmatchlen), over byte strings ---- */

/* Whether `c` is in the class at p (just after '['); *end gets the
 * pattern past its ']' (or its end: an unclosed class runs to the end). */
static bool class_has(const char *p, const char *pend, unsigned char c,
                      const char **end) {
  bool negate = p < pend && *p == '^', hit = false;
  if (negate)
    p++;
  while (p < pend && *p != ']') {
    if (*p == '\\' && p + 1 < pend) {
      p++;
      hit |= (unsigned char)*p == c;
    } else if (p + 2 < pend && p[1] == '-' && p[2] != ']') {
      unsigned char lo = (unsigned char)p[0], hi = (unsigned char)p[2];
      if (lo > hi) {
        unsigned char t = lo;
        lo = hi;
        hi = t;
      }
      hit |= c >= lo && c <= hi;
      p += 2;
    } else {
      hit |= (unsigned char)*p == c;
    }
    p++;
  }
  *end = p < pend ? p + 1 : p;
  return negate ? !hit : hit;
}

static bool glob(const char *p, const char *pend, const char *s,
                 const char *send) {
  while (p < pend) {
    switch (*p) {
    case '*':
      while (p + 1 < pend && p[1] == '*')
        p++;
      if (p + 1 == pend)
        return true;
      for (const char *t = s; t <= send; t++)
        if (glob(p + 1, pend, t, send))
          return true;
      return false;
    case '?':
      if (s == send)
        return false;
      s++;
      p++;
      break;
    case '[': {
      if (s == send)
        return false;
      const char *end;
      if (!class_has(p + 1, pend, (unsigned char)*s, &end))
        return false;
      s++;
      p = end;
      break;
    }
    default:
      if (*p == '\\' && p + 1 < pend) /* the next character as it is */
        p++;
      if (s == send || *p != *s)
        return false;
      s++;
      p++;
    }
  }
  return s == send;
}

/* MATCH for the keys that may hold a name matching `pattern`:
 * "*" pattern "*", a trailing lone backslash doubled so that it stays a
 * backslash and does not escape the '*' after it. */
static char *key_match(const char *pattern, size_t len, size_t *out_len) {
  bool escaped = false;
  for (size_t i = 0; i < len; i++)
    escaped = !escaped && pattern[i] == '\\';
  char *m = malloc(len + 4);
  if (m == NULL)
    return NULL;
  size_t n = 0;
  m[n++] = '*';
  memcpy(m + n, pattern, len);
  n += len;
  if (escaped)
    m[n++] = '\\';
  m[n++] = '*';
  m[n] = '\0';
  *out_len = n;
  return m;
}

int rlock_scan_new(rlock_client *client, const rlock_scan_options *opts,
                    rlock_scan **out) {
  if (out == NULL)
    return rlock__bad_arg("out is NULL");
  *out = NULL;
  rlock_scan_options o;
  rlock_scan_options_init(&o);
  if (opts != NULL) {
    if (opts->struct_size < offsetof(rlock_scan_options, pattern) +
                                sizeof(opts->pattern) ||
        opts->struct_size > sizeof(o))
      return rlock__bad_arg("opts->struct_size is not set "
                            "(rlock_scan_options_init) or larger than this "
                            "library's rlock_scan_options");
    memcpy(&o, opts, opts->struct_size);
  }
  if (o.count < 0 || o.count > MAX_COUNT)
    return rlock__bad_arg("count is out of range (1..100000, 0: 1000)");
  rlock_scan *sc = calloc(1, sizeof(*sc));
  if (sc == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  rlock__map_init(&sc->seen);
  sc->count = o.count > 0 ? o.count : DEFAULT_COUNT;
  int rc = rlock_new(client, HANDLE_NAME, &sc->lock); /* checks the client */
  if (rc != 0) {
    free(sc);
    return rc;
  }
  bool all = o.pattern == NULL || o.pattern[0] == '\0';
  if (!all) {
    sc->pattern_len = strlen(o.pattern);
    sc->pattern = strdup(o.pattern);
    sc->match = key_match(o.pattern, sc->pattern_len, &sc->match_len);
  } else {
    sc->match = strdup("*");
    sc->match_len = 1;
  }
  if (sc->match == NULL || (!all && sc->pattern == NULL)) {
    rlock_scan_free(sc);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  *out = sc;
  rlock__clear_last_error();
  return 0;
}

/* The next key's name not returned before and matching, or NULL when the
 * keys in hand are used up. May fail with RLOCK_ENOMEM (*rc). */
static const char *next_in_hand(rlock_scan *sc, size_t *len, int *rc) {
  while (sc->next_key < sc->keys.n) {
    size_t i = sc->next_key++;
    const char *key = sc->keys.keys[i];
    size_t off, nlen;
    rlock__scan_name_of(key, sc->keys.lens[i], &off, &nlen);
    const char *name = key + off;
    if (sc->pattern != NULL &&
        !glob(sc->pattern, sc->pattern + sc->pattern_len, name, name + nlen))
      continue;
    if (rlock__map_get(&sc->seen, name, nlen) != NULL)
      continue;
    if (rlock__map_put(&sc->seen, name, nlen, sc) != 0) {
      *rc = RLOCK_ENOMEM;
      rlock__set_last_error("out of memory");
      return NULL;
    }
    free(sc->name);
    sc->name = malloc(nlen + 1);
    if (sc->name == NULL) {
      *rc = RLOCK_ENOMEM;
      rlock__set_last_error("out of memory");
      return NULL;
    }
    memcpy(sc->name, name, nlen);
    sc->name[nlen] = '\0';
    *len = nlen;
    return sc->name;
  }
  return NULL;
}

int rlock_scan_next(rlock_scan *scan, const char **name, size_t *len) {
  if (scan == NULL || name == NULL)
    return rlock__bad_arg("scan and name must be given");
  *name = NULL;
  size_t nlen = 0;
  for (;;) {
    int rc = 0;
    const char *found = next_in_hand(scan, &nlen, &rc);
    if (rc < 0)
      return rc;
    if (found != NULL) {
      *name = found;
      if (len != NULL)
        *len = nlen;
      rlock__clear_last_error();
      return 1;
    }
    if (scan->last) {
      rlock__clear_last_error();
      return 0;
    }
    rlock__scan_keys_free(&scan->keys);
    scan->next_key = 0;
    rc = rlock__scan_step(scan->lock, &scan->pos, scan->match,
                          scan->match_len, scan->count, &scan->keys);
    if (rc < 0)
      return rc;
    scan->last = rc == 0;
  }
}

void rlock_scan_free(rlock_scan *scan) {
  if (scan == NULL)
    return;
  rlock__scan_keys_free(&scan->keys);
  rlock__scan_pos_free(&scan->pos);
  rlock__map_destroy(&scan->seen);
  if (scan->lock != NULL)
    rlock_free(scan->lock);
  free(scan->pattern);
  free(scan->match);
  free(scan->name);
  free(scan);
}
