/* Readers of the replies that describe a deployment: CLUSTER SHARDS,
 * CLUSTER SLOTS, MOVED/ASK, SENTINEL GET-MASTER-ADDR-BY-NAME,
 * +switch-master and ROLE. See topo.h.
 *
 * Every reply comes from a peer and is checked before it is read: the type
 * of each element, each index against `elements`, each string for length
 * and control bytes, each number for its range. Nothing here reads a
 * string as NUL-terminated: lengths come from the reply. A refusal leaves
 * the outputs untouched (or *out NULL) and, where there is an err, a
 * sentence in it. Shapes as Redis 7.0 sends them (RESP2):
 *
 *   CLUSTER SLOTS   [[0, 99, ["127.0.0.1", 33305, "a97a...", []],
 *                            ["127.0.0.1", 40671, "62c6...", []]], ...]
 *   CLUSTER SHARDS  [["slots", [0, 99, 101, 5460], "nodes",
 *                     [["id", "a97a...", "port", 33305, "ip", "127.0.0.1",
 *                       "endpoint", "127.0.0.1", "role", "master",
 *                       "replication-offset", 28, "health", "online"],
 *                      [... "role", "replica" ...]]], ...]
 *   MOVED / ASK     "MOVED 12182 127.0.0.1:47467", "ASK 200 127.0.0.1:37295"
 *   GET-MASTER-ADDR ["127.0.0.1", "33305"] or a nil (*-1)
 *   SENTINEL REPLICAS [["name", "127.0.0.1:40671", "ip", "127.0.0.1",
 *                      "port", "40671", ..., "flags", "s_down,slave", ...]]
 *   ROLE            ["master", 42, [["127.0.0.1", "40671", "42"]]]
 *                   ["slave", "127.0.0.1", 47467, "connected", 42]
 *                   ["sentinel", ["mymaster"]] */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo.h"

#define RLOCK__MAX_RANGES RLOCK__SLOTS

static void rlock__topo_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void rlock__topo_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* A string element (bulk or status) with its bytes. */
static int rlock__is_text(const redisReply *r) {
  return r && (r->type == REDIS_REPLY_STRING ||
               r->type == REDIS_REPLY_STATUS) &&
         (r->str != NULL || r->len == 0);
}

static int rlock__text_is(const redisReply *r, const char *lit) {
  size_t n = strlen(lit);
  return rlock__is_text(r) && r->len == n && (n == 0 ||
                                              memcmp(r->str, lit, n) == 0);
}

static int rlock__is_array(const redisReply *r) {
  return r && r->type == REDIS_REPLY_ARRAY &&
         (r->elements == 0 || r->element != NULL);
}

/* Element i of array a, NULL when out of bounds. */
static const redisReply *rlock__at(const redisReply *a, size_t i) {
  if (!rlock__is_array(a) || i >= a->elements)
    return NULL;
  return a->element[i];
}

/* A decimal number in bytes: optional '-', 1..18 digits, nothing else. */
static int rlock__dec(const char *s, size_t len, long long *v) {
  size_t i = 0;
  int neg = 0;
  if (len > 0 && s[0] == '-') {
    neg = 1;
    i = 1;
  }
  if (i == len || len - i > 18)
    return -1;
  long long x = 0;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    x = x * 10 + (s[i] - '0');
  }
  *v = neg ? -x : x;
  return 0;
}

/* An integer element, or a string holding a decimal number (ROLE's replica
 * list and sentinels send ports as strings). */
static int rlock__int_of(const redisReply *r, long long *v) {
  if (!r)
    return -1;
  if (r->type == REDIS_REPLY_INTEGER) {
    *v = r->integer;
    return 0;
  }
  if (rlock__is_text(r))
    return rlock__dec(r->str, r->len, v);
  return -1;
}

static int rlock__port_of(const redisReply *r, int *port) {
  long long v;
  if (rlock__int_of(r, &v) != 0 || v < 1 || v > 65535)
    return -1;
  *port = (int)v;
  return 0;
}

static int rlock__slot_of(const redisReply *r, int *slot) {
  long long v;
  if (rlock__int_of(r, &v) != 0 || v < 0 || v >= RLOCK__SLOTS)
    return -1;
  *slot = (int)v;
  return 0;
}

/* Copies a host of `len` bytes into dst (cap bytes): it must fit with its
 * NUL in both cap and RLOCK__HOST_MAX and hold no NUL, control byte, space
 * or DEL. An empty host is accepted here; callers decide what it means. */
static int rlock__host_copy(const char *s, size_t len, char *dst,
                            size_t cap) {
  if (!dst || cap == 0 || len >= cap || len >= RLOCK__HOST_MAX)
    return -1;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c <= 0x20 || c == 0x7f)
      return -1;
  }
  if (len)
    memcpy(dst, s, len);
  dst[len] = '\0';
  return 0;
}

/* A port in bytes: 1..5 digits, 1..65535. */
static int rlock__port_text(const char *s, size_t len, int *port) {
  long long v;
  if (len == 0 || len > 5 || s[0] == '-' || rlock__dec(s, len, &v) != 0 ||
      v < 1 || v > 65535)
    return -1;
  *port = (int)v;
  return 0;
}

/* The master's address of a range: a host element (string or nil) where
 * nil, "" and "?" mean "the node that was asked". */
static int rlock__master_host(const redisReply *h, const char *fallback,
                              char *dst, char *err, size_t errlen,
                              int start, int end) {
  const char *s;
  size_t len;
  if (h && h->type == REDIS_REPLY_NIL) {
    s = "";
    len = 0;
  } else if (rlock__is_text(h)) {
    s = h->str;
    len = h->len;
  } else {
    rlock__topo_err(err, errlen,
                    "the master of slots %d-%d has an address that is not a "
                    "string", start, end);
    return -1;
  }
  if (len == 0 || (len == 1 && s[0] == '?')) {
    if (!fallback) {
      rlock__topo_err(err, errlen,
                      "the master of slots %d-%d does not know its address "
                      "and there is no node to fall back on", start, end);
      return -1;
    }
    s = fallback;
    len = strlen(fallback);
    if (len == 0 || rlock__host_copy(s, len, dst, RLOCK__HOST_MAX) != 0) {
      rlock__topo_err(err, errlen,
                      "the fallback address for slots %d-%d is not a valid "
                      "host", start, end);
      return -1;
    }
    return 0;
  }
  if (rlock__host_copy(s, len, dst, RLOCK__HOST_MAX) != 0) {
    rlock__topo_err(err, errlen,
                    "the master of slots %d-%d has an address that is too "
                    "long or holds control bytes", start, end);
    return -1;
  }
  return 0;
}

/* ---- CLUSTER SLOTS ---- */

int rlock__parse_cluster_slots(const redisReply *r, const char *fallback_host,
                               rlock__slot_range **out, char *err,
                               size_t errlen) {
  if (!out)
    return -1;
  *out = NULL;
  if (!rlock__is_array(r)) {
    rlock__topo_err(err, errlen, "CLUSTER SLOTS did not answer an array");
    return -1;
  }
  if (r->elements > RLOCK__MAX_RANGES) {
    rlock__topo_err(err, errlen, "CLUSTER SLOTS listed %zu ranges (at most "
                    "%d)", r->elements, RLOCK__MAX_RANGES);
    return -1;
  }
  if (r->elements == 0)
    return 0;
  rlock__slot_range *v = calloc(r->elements, sizeof *v);
  if (!v) {
    rlock__topo_err(err, errlen, "out of memory reading CLUSTER SLOTS");
    return -1;
  }
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i];
    rlock__slot_range *g = &v[i];
    if (!rlock__is_array(e) || e->elements < 3) {
      rlock__topo_err(err, errlen, "CLUSTER SLOTS entry %zu is not an array "
                      "of start, end and master", i);
      goto fail;
    }
    if (e->element[0] == NULL || e->element[1] == NULL ||
        e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER ||
        rlock__slot_of(e->element[0], &g->start) != 0 ||
        rlock__slot_of(e->element[1], &g->end) != 0 || g->start > g->end) {
      rlock__topo_err(err, errlen, "CLUSTER SLOTS entry %zu has no valid "
                      "slot range (0..16383, start <= end)", i);
      goto fail;
    }
    const redisReply *m = e->element[2];
    if (!rlock__is_array(m) || m->elements < 2) {
      rlock__topo_err(err, errlen, "slots %d-%d have no master [host, port]",
                      g->start, g->end);
      goto fail;
    }
    if (rlock__master_host(m->element[0], fallback_host, g->host, err,
                           errlen, g->start, g->end) != 0)
      goto fail;
    if (m->element[1] == NULL || m->element[1]->type != REDIS_REPLY_INTEGER ||
        rlock__port_of(m->element[1], &g->port) != 0) {
      rlock__topo_err(err, errlen, "the master of slots %d-%d has no valid "
                      "port (1..65535)", g->start, g->end);
      goto fail;
    }
    for (size_t k = 3; k < e->elements; k++) {
      if (!rlock__is_array(e->element[k])) {
        rlock__topo_err(err, errlen, "a replica of slots %d-%d is not an "
                        "array", g->start, g->end);
        goto fail;
      }
    }
    /* Redis leaves failed replicas out of CLUSTER SLOTS. */
    g->replicas = g->replicas_online = (int)(e->elements - 3);
  }
  *out = v;
  return (int)r->elements;
fail:
  free(v);
  return -1;
}

/* ---- CLUSTER SHARDS ---- */

/* The value of `key` in a map sent as a flat array [k, v, k, v ...]: 1 and
 * *val when present, 0 when absent, -1 when the map is malformed (odd
 * length, a key that is not a string). The first occurrence wins. */
static int rlock__map_get(const redisReply *map, const char *key,
                          const redisReply **val) {
  if (!rlock__is_array(map) || map->elements % 2 != 0)
    return -1;
  for (size_t i = 0; i < map->elements; i += 2) {
    const redisReply *k = map->element[i];
    if (!rlock__is_text(k))
      return -1;
    if (rlock__text_is(k, key)) {
      *val = map->element[i + 1];
      return 1;
    }
  }
  return 0;
}

static int rlock__push_range(rlock__slot_range **v, size_t *n, size_t *cap,
                             const rlock__slot_range *g) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    if (nc > RLOCK__MAX_RANGES)
      nc = RLOCK__MAX_RANGES;
    rlock__slot_range *p = realloc(*v, nc * sizeof *p);
    if (!p)
      return -1;
    *v = p;
    *cap = nc;
  }
  (*v)[(*n)++] = *g;
  return 0;
}

/* A node's "health": Redis says "failed", Valkey 8 "fail". */
static int rlock__health_failed(const redisReply *health) {
  return health && (rlock__text_is(health, "failed") ||
                    rlock__text_is(health, "fail"));
}

/* The master of one shard's node list, its address and port, and the
 * number of replicas. A failed master is passed over for one that is not
 * (a shard may list a stale master beside the new one during a failover). */
static int rlock__shard_master(const redisReply *nodes, size_t shard, int tls,
                               const char *fallback, rlock__slot_range *g,
                               char *err, size_t errlen) {
  const redisReply *master = NULL;
  int master_failed = 0, replicas = 0, online = 0;
  if (!rlock__is_array(nodes)) {
    rlock__topo_err(err, errlen, "shard %zu has \"nodes\" that are not an "
                    "array", shard);
    return -1;
  }
  for (size_t i = 0; i < nodes->elements; i++) {
    const redisReply *n = nodes->element[i], *role = NULL, *health = NULL;
    if (rlock__map_get(n, "role", &role) != 1 || !rlock__is_text(role) ||
        rlock__map_get(n, "health", &health) < 0) {
      rlock__topo_err(err, errlen, "node %zu of shard %zu is not a map with "
                      "a \"role\"", i, shard);
      return -1;
    }
    if (!rlock__text_is(role, "master")) {
      replicas++;
      if (!rlock__health_failed(health))
        online++;
      continue;
    }
    int failed = rlock__health_failed(health);
    if (!master || (master_failed && !failed)) {
      master = n;
      master_failed = failed;
    }
  }
  if (!master) {
    rlock__topo_err(err, errlen, "shard %zu serves slots %d-%d but lists no "
                    "master", shard, g->start, g->end);
    return -1;
  }
  /* Address: "endpoint" when present (nil, "" or "?": the node asked),
   * else "ip". */
  const redisReply *addr = NULL;
  if (rlock__map_get(master, "endpoint", &addr) != 1 &&
      rlock__map_get(master, "ip", &addr) != 1)
    addr = NULL;
  if (!addr) {
    rlock__topo_err(err, errlen, "the master of shard %zu has neither "
                    "\"endpoint\" nor \"ip\"", shard);
    return -1;
  }
  if (rlock__master_host(addr, fallback, g->host, err, errlen, g->start,
                         g->end) != 0)
    return -1;
  /* Port: "port", else "tls-port"; with tls, "tls-port" first. */
  const char *first = tls ? "tls-port" : "port";
  const char *second = tls ? "port" : "tls-port";
  const redisReply *p = NULL;
  if (rlock__map_get(master, first, &p) != 1 &&
      rlock__map_get(master, second, &p) != 1)
    p = NULL;
  if (!p || p->type != REDIS_REPLY_INTEGER ||
      rlock__port_of(p, &g->port) != 0) {
    rlock__topo_err(err, errlen, "the master of shard %zu has no valid port "
                    "(1..65535)", shard);
    return -1;
  }
  g->replicas = replicas;
  g->replicas_online = online;
  return 0;
}

int rlock__parse_cluster_shards(const redisReply *r, int tls,
                                const char *fallback_host,
                                rlock__slot_range **out, char *err,
                                size_t errlen) {
  if (!out)
    return -1;
  *out = NULL;
  if (!rlock__is_array(r)) {
    rlock__topo_err(err, errlen, "CLUSTER SHARDS did not answer an array");
    return -1;
  }
  rlock__slot_range *v = NULL;
  size_t n = 0, cap = 0;
  for (size_t s = 0; s < r->elements; s++) {
    const redisReply *shard = r->element[s], *slots = NULL, *nodes = NULL;
    int hs = rlock__map_get(shard, "slots", &slots);
    int hn = rlock__map_get(shard, "nodes", &nodes);
    if (hs < 0 || hn < 0) {
      rlock__topo_err(err, errlen, "shard %zu is not a map", s);
      goto fail;
    }
    if (hs == 0)
      continue; /* no slots: nothing to route to it */
    if (!rlock__is_array(slots) || slots->elements % 2 != 0) {
      rlock__topo_err(err, errlen, "shard %zu has \"slots\" that are not "
                      "an array of start, end pairs", s);
      goto fail;
    }
    if (slots->elements == 0)
      continue;
    if (hn == 0) {
      rlock__topo_err(err, errlen, "shard %zu serves slots but has no "
                      "\"nodes\"", s);
      goto fail;
    }
    rlock__slot_range g;
    memset(&g, 0, sizeof g);
    /* Check every range, then find the master once for all of them. */
    for (size_t i = 0; i < slots->elements; i += 2) {
      int a, b;
      if (slots->element[i] == NULL || slots->element[i + 1] == NULL ||
          slots->element[i]->type != REDIS_REPLY_INTEGER ||
          slots->element[i + 1]->type != REDIS_REPLY_INTEGER ||
          rlock__slot_of(slots->element[i], &a) != 0 ||
          rlock__slot_of(slots->element[i + 1], &b) != 0 || a > b) {
        rlock__topo_err(err, errlen, "shard %zu has an invalid slot range "
                        "(0..16383, start <= end)", s);
        goto fail;
      }
      if (i == 0) {
        g.start = a;
        g.end = b;
      }
    }
    if (rlock__shard_master(nodes, s, tls, fallback_host, &g, err, errlen) !=
        0)
      goto fail;
    for (size_t i = 0; i < slots->elements; i += 2) {
      if (n == RLOCK__MAX_RANGES) {
        rlock__topo_err(err, errlen, "CLUSTER SHARDS listed more than %d "
                        "ranges", RLOCK__MAX_RANGES);
        goto fail;
      }
      g.start = (int)slots->element[i]->integer;
      g.end = (int)slots->element[i + 1]->integer;
      if (rlock__push_range(&v, &n, &cap, &g) != 0) {
        rlock__topo_err(err, errlen, "out of memory reading CLUSTER SHARDS");
        goto fail;
      }
    }
  }
  if (n == 0) {
    free(v);
    return 0;
  }
  *out = v;
  return (int)n;
fail:
  free(v);
  return -1;
}

/* ---- MOVED / ASK ---- */

int rlock__parse_redirect(const char *text, size_t len, int *slot,
                          char *host, size_t hostlen, int *port) {
  if (!text || !slot || !host || !port)
    return 0;
  int kind;
  size_t i;
  if (len >= 6 && memcmp(text, "MOVED ", 6) == 0) {
    kind = 1;
    i = 6;
  } else if (len >= 4 && memcmp(text, "ASK ", 4) == 0) {
    kind = 2;
    i = 4;
  } else {
    return 0;
  }
  size_t sp = i;
  while (sp < len && text[sp] != ' ')
    sp++;
  if (sp == len || sp == i || sp - i > 5)
    return 0;
  long long sv;
  if (text[i] == '-' || rlock__dec(text + i, sp - i, &sv) != 0 || sv < 0 ||
      sv >= RLOCK__SLOTS)
    return 0;
  const char *a = text + sp + 1;
  size_t alen = len - sp - 1;
  size_t colon = alen;
  for (size_t k = 0; k < alen; k++)
    if (a[k] == ':')
      colon = k;
  if (colon == alen)
    return 0;
  int p;
  if (rlock__port_text(a + colon + 1, alen - colon - 1, &p) != 0)
    return 0;
  const char *h = a;
  size_t hl = colon;
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [::1]:6379 */
    h++;
    hl -= 2;
  }
  char tmp[RLOCK__HOST_MAX];
  if (rlock__host_copy(h, hl, tmp, sizeof tmp) != 0 || hl >= hostlen)
    return 0;
  memcpy(host, tmp, hl + 1);
  *slot = (int)sv;
  *port = p;
  return kind;
}

/* ---- SENTINEL GET-MASTER-ADDR-BY-NAME ---- */

int rlock__parse_master_addr(const redisReply *r, char *host, size_t hostlen,
                             int *port, char *err, size_t errlen) {
  if (!r) {
    rlock__topo_err(err, errlen, "the sentinel sent no reply");
    return -1;
  }
  if (r->type == REDIS_REPLY_NIL)
    return 0;
  if (r->type == REDIS_REPLY_ERROR) {
    int n = r->str ? (int)(r->len > 200 ? 200 : r->len) : 0;
    rlock__topo_err(err, errlen, "the sentinel answered an error: %.*s", n,
                    r->str ? r->str : "");
    return -1;
  }
  if (!rlock__is_array(r)) {
    rlock__topo_err(err, errlen, "the sentinel's master address is not an "
                    "array");
    return -1;
  }
  if (r->elements == 0)
    return 0;
  if (r->elements != 2 || !rlock__is_text(r->element[0])) {
    rlock__topo_err(err, errlen, "the sentinel's master address is not "
                    "[host, port]");
    return -1;
  }
  int p;
  if (rlock__port_of(r->element[1], &p) != 0) {
    rlock__topo_err(err, errlen, "the sentinel's master port is not "
                    "1..65535");
    return -1;
  }
  char tmp[RLOCK__HOST_MAX];
  size_t hl = r->element[0]->len;
  if (hl == 0 || rlock__host_copy(r->element[0]->str, hl, tmp, sizeof tmp) !=
                     0 || !host || hl >= hostlen) {
    rlock__topo_err(err, errlen, "the sentinel's master host is empty, too "
                    "long or holds control bytes");
    return -1;
  }
  memcpy(host, tmp, hl + 1);
  if (port)
    *port = p;
  return 1;
}

/* ---- +switch-master ---- */

int rlock__parse_switch_master(const char *payload, size_t len,
                               const char *name, char *host, size_t hostlen,
                               int *port) {
  if (!payload || !name)
    return -1;
  const char *f[5];
  size_t fl[5];
  size_t nf = 0, i = 0;
  while (i <= len) {
    size_t j = i;
    while (j < len && payload[j] != ' ')
      j++;
    if (nf == 5 || j == i)
      return -1; /* too many fields, or an empty one */
    f[nf] = payload + i;
    fl[nf] = j - i;
    nf++;
    i = j + 1;
  }
  if (nf != 5)
    return -1;
  size_t nl = strlen(name);
  if (fl[0] != nl || memcmp(f[0], name, nl) != 0)
    return 0;
  int op, np;
  char tmp[RLOCK__HOST_MAX];
  if (rlock__port_text(f[2], fl[2], &op) != 0 ||
      rlock__port_text(f[4], fl[4], &np) != 0 ||
      rlock__host_copy(f[1], fl[1], tmp, sizeof tmp) != 0 ||
      rlock__host_copy(f[3], fl[3], tmp, sizeof tmp) != 0 || !host ||
      fl[3] >= hostlen)
    return -1;
  memcpy(host, tmp, fl[3] + 1);
  if (port)
    *port = np;
  return 1;
}

/* ---- SENTINEL REPLICAS ---- */

int rlock__parse_sentinel_replicas(const redisReply *r, char *err,
                                   size_t errlen) {
  if (!rlock__is_array(r)) {
    rlock__topo_err(err, errlen, "SENTINEL REPLICAS did not answer an array");
    return -1;
  }
  if (r->elements > INT_MAX) {
    rlock__topo_err(err, errlen, "SENTINEL REPLICAS listed too many");
    return -1;
  }
  int n = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *ip = NULL, *runid = NULL;
    if (rlock__map_get(r->element[i], "ip", &ip) != 1 ||
        !rlock__is_text(ip) ||
        rlock__map_get(r->element[i], "runid", &runid) < 0) {
      rlock__topo_err(err, errlen, "SENTINEL REPLICAS entry %zu is not a "
                      "map with an \"ip\"", i);
      return -1;
    }
    if (!(runid && rlock__text_is(runid, "")))
      n++;
  }
  return n;
}

/* ---- ROLE ---- */

int rlock__parse_role(const redisReply *r, int *replicas) {
  const redisReply *role = rlock__at(r, 0);
  if (!rlock__is_text(role))
    return -1;
  if (rlock__text_is(role, "master")) {
    /* ["master", offset, [[ip, port, offset], ...]] */
    const redisReply *off = rlock__at(r, 1), *list = rlock__at(r, 2);
    if (!off || off->type != REDIS_REPLY_INTEGER || !rlock__is_array(list))
      return -1;
    for (size_t i = 0; i < list->elements; i++)
      if (!rlock__is_array(list->element[i]))
        return -1;
    if (list->elements > INT_MAX)
      return -1;
    if (replicas)
      *replicas = (int)list->elements;
    return 1;
  }
  if (rlock__text_is(role, "slave") || rlock__text_is(role, "replica")) {
    /* ["slave", master-ip, master-port, state, offset] */
    const redisReply *ip = rlock__at(r, 1), *p = rlock__at(r, 2);
    if (!rlock__is_text(ip) || !p || p->type != REDIS_REPLY_INTEGER)
      return -1;
    return 0;
  }
  if (rlock__text_is(role, "sentinel")) {
    /* ["sentinel", [master-name, ...]] */
    if (!rlock__is_array(rlock__at(r, 1)))
      return -1;
    return 0;
  }
  return -1;
}
