/* Who an owner's client is (rlock_client_holder, lib/client/introspect.c):
 * CLIENT LIST on each master in turn (the one master, or a cluster's
 * masters from the slot map) until a connection named
 * "rlock/<client-id>/..." - the automatic name lib/client/client.c gives
 * its connections - is found. Read-only; no key is touched. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prim.h"

typedef struct whois_op {
  rlock__op op;
  char prefix[RLOCK_ID_LEN + 8]; /* "name=rlock/<id>/" */
  rlock__node **nodes;
  size_t nnodes, at;
  char *line;  /* out: the CLIENT LIST line found */
  size_t line_size;
} whois_op;

static void send_next(rlock__op *op);

/* The connection id of a CLIENT LIST line ("id=N ..." first), or
 * UINT64_MAX when it has none. */
static uint64_t line_id(const char *line, const char *eol) {
  if (eol - line < 4 || memcmp(line, "id=", 3) != 0)
    return UINT64_MAX;
  uint64_t id = 0;
  const char *p = line + 3;
  for (; p < eol && *p >= '0' && *p <= '9'; p++) {
    if (id > (UINT64_MAX - 9) / 10)
      return UINT64_MAX;
    id = id * 10 + (uint64_t)(*p - '0');
  }
  return p == line + 3 ? UINT64_MAX : id;
}

/* Of the lines of `text` (CLIENT LIST's reply) holding `prefix` as a
 * field, the one with the lowest connection id - the client's oldest
 * connection, so its age bounds the hold best - copied to out; false when
 * none does. An rlock client has several connections with one name
 * (commands, subscriptions), and the server's list is in no fixed order
 * (Redis rotates it as its cron visits clients): the first match would
 * name one connection now and another a moment later. */
static bool find_line(const char *text, size_t len, const char *prefix,
                      char *out, size_t out_size) {
  size_t plen = strlen(prefix);
  const char *end = text + len, *best = NULL, *best_eol = NULL;
  uint64_t best_id = UINT64_MAX;
  for (const char *line = text; line < end;) {
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    if (eol == NULL)
      eol = end;
    for (const char *p = line; p + plen <= eol; p++) {
      if ((p == line || p[-1] == ' ') && memcmp(p, prefix, plen) == 0) {
        uint64_t id = line_id(line, eol);
        if (best == NULL || id < best_id) {
          best = line;
          best_eol = eol;
          best_id = id;
        }
        break;
      }
    }
    line = eol + 1;
  }
  if (best == NULL)
    return false;
  size_t n = (size_t)(best_eol - best);
  if (n > 0 && best[n - 1] == '\r')
    n--;
  if (n >= out_size)
    n = out_size - 1;
  memcpy(out, best, n);
  out[n] = '\0';
  return true;
}

static void whois_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)n;
  rlock__op *op = data;
  op->cmd = NULL;
  whois_op *wo = RLOCK__CONTAINER_OF(op, whois_op, op);
  rlock__node *node = wo->nodes[wo->at];
  const char *host = rlock__node_host(node);
  int port = rlock__node_port(node);
  if (err != 0) {
    rlock__op_detail(op, "CLIENT LIST on %s:%d got no reply", host, port);
    rlock__op_finish(op, err);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    rlock__op_detail(op, "CLIENT LIST on %s:%d: %.*s", host, port,
                     (int)(reply->len > 200 ? 200 : reply->len), reply->str);
    rlock__op_finish(op, rlock__reply_error(reply));
    return;
  }
  if (reply->type != REDIS_REPLY_STRING) {
    rlock__op_detail(op, "CLIENT LIST on %s:%d replied an unexpected value "
                         "(type %d)", host, port, reply->type);
    rlock__op_finish(op, RLOCK_EPROTO);
    return;
  }
  if (find_line(reply->str, reply->len, wo->prefix, wo->line,
                wo->line_size)) {
    rlock__op_finish(op, 1);
    return;
  }
  if (++wo->at < wo->nnodes)
    send_next(op);
  else
    rlock__op_finish(op, 0);
}

static void send_next(rlock__op *op) {
  whois_op *wo = RLOCK__CONTAINER_OF(op, whois_op, op);
  static const char *argv[2] = {"CLIENT", "LIST"};
  static const size_t lens[2] = {6, 4};
  op->state = RLOCK__ST_CMD;
  op->cmd = rlock__cmd_send_to(wo->nodes[wo->at], 2, argv, lens, whois_reply,
                               op);
  if (op->cmd == NULL)
    rlock__op_finish(op, RLOCK_ENOMEM);
}

static void start_whois(rlock__op *op) {
  whois_op *wo = RLOCK__CONTAINER_OF(op, whois_op, op);
  int rc = rlock__masters_snapshot(op->engine->net, &wo->nodes, &wo->nnodes);
  if (rc != 0) {
    rlock__op_finish(op, rc);
    return;
  }
  if (wo->nnodes == 0) {
    rlock__op_detail(op, "the cluster's slot map is not known");
    rlock__op_finish(op, RLOCK_ECLUSTER);
    return;
  }
  send_next(op);
}

static const rlock__op_type whois_type = {.name = "whois",
                                          .start = start_whois};

int rlock__whois(rlock *lock, const char *client_id, char *line,
                 size_t line_size) {
  whois_op wo;
  memset(&wo, 0, sizeof(wo));
  rlock__op_init(&wo.op, lock, &whois_type, 0);
  snprintf(wo.prefix, sizeof(wo.prefix), "name=rlock/%s/", client_id);
  wo.line = line;
  wo.line_size = line_size;
  line[0] = '\0';
  int rc = rlock__op_run_sync(&wo.op);
  free(wo.nodes);
  return rc;
}
