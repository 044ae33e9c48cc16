/* The keyspace scan behind rlock_scan_*(): one SCAN round trip per step on
 * each master in turn (a cluster's masters are taken from the slot map at
 * the first step), and the folding of a key the primitives keep beside a
 * name back into that name. The side keys' spellings are the primitives'
 * (prim.h, engine.h); this file only reads them backwards. */
#include <stdlib.h>
#include <string.h>

#include "prim.h"

typedef struct scan_op {
  rlock__op op;
  rlock__scan_pos *pos;
  const char *argv[6];
  size_t lens[6];
  char count[16];
  rlock__scan_keys *out;
} scan_op;

/* ---- one SCAN ---- */

static bool is_str(const redisReply *r) {
  return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

static void scan_reply(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  scan_op *so = RLOCK__CONTAINER_OF(op, scan_op, op);
  rlock__node *node = so->pos->nodes[so->pos->at];
  const char *host = rlock__node_host(node);
  int port = rlock__node_port(node);
  if (err != 0) {
    rlock__op_detail(op, "SCAN on %s:%d got no reply", host, port);
    rlock__op_finish(op, err);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    rlock__op_detail(op, "SCAN on %s:%d: %.*s", host, port,
                     (int)(reply->len > 200 ? 200 : reply->len), reply->str);
    rlock__op_finish(op, rlock__reply_error(reply));
    return;
  }
  /* [cursor, [key...]]: anything else is reported, never trusted. */
  bool ok = reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
            is_str(reply->element[0]) && reply->element[0]->len > 0 &&
            reply->element[0]->len < sizeof(so->pos->cursor) &&
            reply->element[1]->type == REDIS_REPLY_ARRAY;
  for (size_t i = 0; ok && i < reply->element[1]->elements; i++)
    ok = is_str(reply->element[1]->element[i]);
  if (!ok) {
    rlock__op_detail(op, "SCAN on %s:%d replied an unexpected value",
                     host, port);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  const redisReply *keys = reply->element[1];
  size_t text = 0;
  for (size_t i = 0; i < keys->elements; i++)
    text += keys->element[i]->len + 1;
  rlock__scan_keys *out = so->out;
  out->n = keys->elements;
  out->lens = calloc(keys->elements + 1, sizeof(size_t));
  out->keys = calloc(keys->elements + 1, sizeof(char *));
  out->text = malloc(text + 1);
  if (out->lens == NULL || out->keys == NULL || out->text == NULL) {
    rlock__op_finish(op, RLOCK_ENOMEM);
    return;
  }
  char *at = out->text;
  for (size_t i = 0; i < keys->elements; i++) {
    const redisReply *k = keys->element[i];
    memcpy(at, k->str, k->len);
    at[k->len] = '\0';
    out->keys[i] = at;
    out->lens[i] = k->len;
    at += k->len + 1;
  }
  rlock__scan_pos *pos = so->pos;
  const redisReply *cur = reply->element[0];
  memcpy(pos->cursor, cur->str, cur->len);
  pos->cursor[cur->len] = '\0';
  if (strcmp(pos->cursor, "0") == 0) /* this master is done */
    pos->at++;
  rlock__op_finish(op, pos->at < pos->nnodes ? 1 : 0);
}

int rlock__masters_snapshot(rlock__net *n, rlock__node ***out,
                            size_t *nout) {
  size_t max = 16;
  for (;;) {
    rlock__node **nodes = malloc(max * sizeof(*nodes));
    if (nodes == NULL)
      return RLOCK_ENOMEM;
    size_t found = rlock__net_masters(n, nodes, max);
    if (found <= max) {
      *out = nodes;
      *nout = found;
      return 0;
    }
    free(nodes);
    max = found;
  }
}

/* The masters, once: a cluster's are those of the slot map now. */
static int snapshot(rlock__op *op, rlock__scan_pos *pos) {
  int rc = rlock__masters_snapshot(op->engine->net, &pos->nodes,
                                   &pos->nnodes);
  if (rc != 0)
    return rc;
  if (pos->nnodes == 0) {
    rlock__op_detail(op, "the cluster's slot map is not known");
    return RLOCK_ECLUSTER;
  }
  pos->started = true;
  strcpy(pos->cursor, "0");
  return 0;
}

static void start_scan(rlock__op *op) {
  scan_op *so = RLOCK__CONTAINER_OF(op, scan_op, op);
  rlock__scan_pos *pos = so->pos;
  if (!pos->started) {
    int rc = snapshot(op, pos);
    if (rc < 0) {
      rlock__op_finish(op, rc);
      return;
    }
  }
  so->argv[1] = pos->cursor;
  so->lens[1] = strlen(pos->cursor);
  op->state = RLOCK__ST_CMD;
  op->cmd = rlock__cmd_send_to(pos->nodes[pos->at], 6, so->argv, so->lens,
                               scan_reply, op);
  if (op->cmd == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
}

static const rlock__op_type scan_type = {.name = "scan", .start = start_scan};

int rlock__scan_step(rlock *lock, rlock__scan_pos *pos, const char *match,
                     size_t match_len, int count, rlock__scan_keys *out) {
  memset(out, 0, sizeof(*out));
  if (pos->started && pos->at >= pos->nnodes)
    return 0;
  scan_op so;
  memset(&so, 0, sizeof(so));
  rlock__op_init(&so.op, lock, &scan_type, 0);
  so.pos = pos;
  so.out = out;
  snprintf(so.count, sizeof(so.count), "%d", count);
  const char *argv[6] = {"SCAN", NULL, "MATCH", match, "COUNT", so.count};
  size_t lens[6] = {4, 0, 5, match_len, 5, strlen(so.count)};
  memcpy(so.argv, argv, sizeof(argv));
  memcpy(so.lens, lens, sizeof(lens));
  int rc = rlock__op_run_sync(&so.op);
  if (rc < 0)
    rlock__scan_keys_free(out);
  return rc;
}

void rlock__scan_keys_free(rlock__scan_keys *k) {
  free(k->keys);
  free(k->lens);
  free(k->text);
  memset(k, 0, sizeof(*k));
}

void rlock__scan_pos_free(rlock__scan_pos *pos) {
  free(pos->nodes);
  memset(pos, 0, sizeof(*pos));
}

/* ---- side keys back to their name ---- */

static bool starts(const char *s, size_t len, const char *prefix) {
  size_t pl = strlen(prefix);
  return len > pl && memcmp(s, prefix, pl) == 0;
}

static bool ends(const char *s, size_t len, const char *suffix) {
  size_t sl = strlen(suffix);
  return len > sl && memcmp(s + len - sl, suffix, sl) == 0;
}

/* Drops a last ":<segment>" that `ok` accepts; false when there is none. */
static bool drop_segment(const char *s, size_t *len,
                         bool (*ok)(const char *, size_t)) {
  const char *colon = NULL;
  for (size_t i = *len; i-- > 0;)
    if (s[i] == ':') {
      colon = s + i;
      break;
    }
  if (colon == NULL || colon == s)
    return false;
  size_t seg = (size_t)(s + *len - colon - 1);
  if (!ok(colon + 1, seg))
    return false;
  *len = (size_t)(colon - s);
  return true;
}

static bool all_of(const char *s, size_t len, const char *set) {
  if (len == 0)
    return false;
  for (size_t i = 0; i < len; i++)
    if (strchr(set, s[i]) == NULL || s[i] == '\0')
      return false;
  return true;
}

static bool is_digits(const char *s, size_t len) {
  return all_of(s, len, "0123456789");
}

static bool is_hex32(const char *s, size_t len) {
  return len == 32 && all_of(s, len, "0123456789abcdef");
}

static bool is_any(const char *s, size_t len) {
  (void)s;
  return len > 0;
}

/* The name of a tag (rlock__tag backwards): "{name}" when the name has no
 * '{', else the name itself. A tag without any brace is none: false. */
static bool untag(const char *tag, size_t len, size_t *off, size_t *nlen) {
  if (len > 2 && tag[0] == '{' && tag[len - 1] == '}' &&
      memchr(tag + 1, '{', len - 2) == NULL) {
    *off = 1;
    *nlen = len - 2;
    return true;
  }
  if (memchr(tag, '{', len) == NULL)
    return false;
  *off = 0;
  *nlen = len;
  return true;
}

void rlock__scan_name_of(const char *key, size_t len, size_t *off,
                         size_t *nlen) {
  static const char *const tag_prefixes[] = {
      RLOCK__FAIR_QUEUE_PREFIX, RLOCK__FAIR_TIMEOUT_PREFIX,
      RLOCK__FENCED_TOKEN_PREFIX, RLOCK__ELECTION_VALUE_PREFIX};
  size_t tag_at = 0, tag_len = 0;
  bool side = false;
  for (size_t i = 0; i < sizeof(tag_prefixes) / sizeof(*tag_prefixes); i++)
    if (starts(key, len, tag_prefixes[i])) {
      tag_at = strlen(tag_prefixes[i]);
      tag_len = len - tag_at;
      side = true;
    }
  if (!side && starts(key, len, RLOCK__UNLOCK_LATCH_PREFIX)) {
    /* prefix tag ":" request id */
    tag_at = strlen(RLOCK__UNLOCK_LATCH_PREFIX);
    tag_len = len - tag_at;
    side = drop_segment(key + tag_at, &tag_len, is_hex32);
  }
  if (!side) {
    /* tag ":" client id ":" thread RLOCK__RWLOCK_TIMEOUT_SUFFIX ":" i */
    tag_len = len;
    size_t sl = strlen(RLOCK__RWLOCK_TIMEOUT_SUFFIX);
    side = drop_segment(key, &tag_len, is_digits) &&
           ends(key, tag_len, RLOCK__RWLOCK_TIMEOUT_SUFFIX) &&
           (tag_len -= sl, drop_segment(key, &tag_len, is_digits)) &&
           drop_segment(key, &tag_len, is_any);
  }
  if (!side && ends(key, len, RLOCK__PSEM_TIMEOUT_SUFFIX)) {
    tag_at = 0;
    tag_len = len - strlen(RLOCK__PSEM_TIMEOUT_SUFFIX);
    side = true;
  }
  size_t o, l;
  if (side && untag(key + tag_at, tag_len, &o, &l)) {
    *off = tag_at + o;
    *nlen = l;
    return;
  }
  *off = 0; /* the key is a name */
  *nlen = len;
}
