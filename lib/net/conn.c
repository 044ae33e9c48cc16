/* The two connections (commands, subscriber): connect, handshake, reconnect
 * with back-off; and command records with reply deadlines, idempotent
 * re-sends and the EVALSHA -> EVAL fallback.
 *
 * Each connection is a link (link.c: rlock's own libuv stream, TLS, hiredis
 * as codec). rlock matches every reply to its request itself: each
 * connection keeps a FIFO of what the replies still to come answer
 * (handshake steps, command records). On the command connection a reply
 * that nothing waits for is a protocol violation and drops the connection
 * (any peer can send one: something that is not Redis, a broken proxy); on
 * the subscriber connection, once the handshake is answered, every reply
 * goes to pubsub.c. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "link.h"
#include "net.h"

/* What a reply still to come answers. */
enum {
  EXP_AUTH,
  EXP_SELECT,
  EXP_SETNAME,
  EXP_ROLE, /* Sentinel: the server must be the master */
  EXP_PING,
  EXP_CMD,
  EXP_ASKING, /* before a command sent on an ASK redirect */
  EXP_WAIT,   /* replica sync, after a command */
  EXP_PROBE,  /* a capability probe (seq: which one): never fatal */
};

static const char *const exp_names[] = {
    "AUTH", "SELECT", "CLIENT SETNAME", "ROLE", "PING", "a command",
    "ASKING", "WAIT", "a probe"};

static int conn_start(rlock__conn *conn);

struct rlock__expect {
  int kind;
  rlock__cmd *cmd; /* EXP_CMD, EXP_WAIT */
  uint32_t seq;    /* EXP_WAIT: the send it follows; EXP_PROBE: which */
};

/* ---- the FIFO of expected replies (a ring) ---- */

static bool exp_reserve(rlock__conn *conn) {
  if (conn->exp_len < conn->exp_cap)
    return true;
  size_t cap = conn->exp_cap > 0 ? conn->exp_cap * 2 : 16;
  struct rlock__expect *e = malloc(cap * sizeof(*e));
  if (e == NULL)
    return false;
  for (size_t i = 0; i < conn->exp_len; i++)
    e[i] = conn->exp[(conn->exp_head + i) % conn->exp_cap];
  free(conn->exp);
  conn->exp = e;
  conn->exp_cap = cap;
  conn->exp_head = 0;
  return true;
}

/* After exp_reserve. */
static void exp_push(rlock__conn *conn, int kind, rlock__cmd *cmd,
                     uint32_t seq) {
  struct rlock__expect *e =
      &conn->exp[(conn->exp_head + conn->exp_len) % conn->exp_cap];
  e->kind = kind;
  e->cmd = cmd;
  e->seq = seq;
  conn->exp_len++;
}

static bool exp_pop(rlock__conn *conn, struct rlock__expect *out) {
  if (conn->exp_len == 0)
    return false;
  *out = conn->exp[conn->exp_head];
  conn->exp_head = (conn->exp_head + 1) % conn->exp_cap;
  conn->exp_len--;
  return true;
}

/* ---- texts for details ---- */

static void peer_name(const rlock__conn *conn, char *buf, size_t n) {
  const rlock__uri *u = conn->net->uri;
  const rlock__node *node = conn->node;
  /* (shortened: it goes into details of a few hundred bytes) */
  if (u->is_unix)
    snprintf(buf, n, "%.80s", u->path);
  else if (strchr(node->host, ':') != NULL)
    snprintf(buf, n, "[%.80s]:%d", node->host, node->port);
  else
    snprintf(buf, n, "%.80s:%d", node->host, node->port);
}

/* A handshake's outcome: open hears of it (standalone and Sentinel), or
 * the cluster's discovery does (which tells open itself). */
static void progress(rlock__conn *conn, int err, const char *detail) {
  rlock__net *n = conn->net;
  if (n->mode == RLOCK__URI_CLUSTER)
    rlock__cluster_progress(conn->node, err, detail);
  else if (n->mode == RLOCK__URI_SENTINEL && !n->opened &&
           (err == RLOCK_ECONN || err == RLOCK_ETIMEDOUT))
    return; /* a master that just died: the sentinels are asked again, and
               open waits for the one they promote (within its bound) */
  else
    n->on_open_progress(n, err, detail);
  if (err == 0 && n->master != NULL &&
      n->master->cmd.state == RLOCK__CONN_UP &&
      n->master->sub.state == RLOCK__CONN_UP)
    n->opened = true;
}

/* A reply roughly as it looked on the wire: shortened, and with control
 * bytes shown as '?' (the peer may be anything). */
static void describe_reply(const redisReply *r, char *buf, size_t n) {
  char text[48] = "";
  if (r->str != NULL && (r->type == REDIS_REPLY_STATUS ||
                         r->type == REDIS_REPLY_ERROR ||
                         r->type == REDIS_REPLY_STRING)) {
    size_t len = (size_t)r->len, k = len > 40 ? 40 : len;
    for (size_t i = 0; i < k; i++) {
      unsigned char ch = (unsigned char)r->str[i];
      text[i] = ch < 0x20 || ch >= 0x7f ? '?' : (char)ch;
    }
    snprintf(text + k, sizeof(text) - k, "%s", len > k ? "..." : "");
  }
  switch (r->type) {
  case REDIS_REPLY_STATUS:
    snprintf(buf, n, "+%s", text);
    break;
  case REDIS_REPLY_ERROR:
    snprintf(buf, n, "-%s", text);
    break;
  case REDIS_REPLY_STRING:
    snprintf(buf, n, "\"%s\"", text);
    break;
  case REDIS_REPLY_INTEGER:
    snprintf(buf, n, ":%lld", (long long)r->integer);
    break;
  case REDIS_REPLY_NIL:
    snprintf(buf, n, "nil");
    break;
  case REDIS_REPLY_ARRAY:
    snprintf(buf, n, "an array of %zu", (size_t)r->elements);
    break;
  default:
    snprintf(buf, n, "a reply of type %d", r->type);
    break;
  }
}

/* ---- reconnect ---- */

static void reconnect_fire(rlock__timed *t) {
  conn_start(RLOCK__CONTAINER_OF(t, rlock__conn, reconnect));
}

/* Back-off: the first attempt at once (a killed connection usually comes back
 * straight away), then 50 ms doubling, capped at retry_interval_ms. */
static void schedule_reconnect(rlock__conn *conn) {
  rlock__net *n = conn->net;
  if (n->core->closing || rlock__timed_active(&conn->reconnect))
    return;
  int64_t delay = 0;
  if (conn->backoff_attempt > 0) {
    int shift = conn->backoff_attempt > 16 ? 16 : conn->backoff_attempt - 1;
    delay = (int64_t)50 << shift;
    if (delay > n->core->opts.retry_interval_ms)
      delay = n->core->opts.retry_interval_ms;
  }
  conn->backoff_attempt++;
  conn->reconnect.fire = reconnect_fire;
  rlock__timed_start(n->core, &conn->reconnect, rlock__now_ms() + delay);
}

/* ---- losing a connection ---- */

static void cmd_reply(rlock__cmd *cmd, redisReply *reply);

/* Every reply still expected on a connection that is gone fails: retried,
 * RLOCK_ECONN, or RLOCK_ECLOSED at close (cmd_reply). conn->link is NULL by
 * now, so whatever the callbacks send waits for the next connection. */
static void wait_reply(rlock__cmd *cmd, uint32_t seq, redisReply *reply);

static void fail_expected(rlock__conn *conn) {
  struct rlock__expect e;
  while (exp_pop(conn, &e))
    if (e.kind == EXP_CMD)
      cmd_reply(e.cmd, NULL);
    else if (e.kind == EXP_WAIT)
      wait_reply(e.cmd, e.seq, NULL);
}

/* The connection is gone: conn->link is NULL (the link closes itself, or
 * was closed). */
static void conn_lost(rlock__conn *conn, int err, const char *detail) {
  rlock__net *n = conn->net;
  rlock__timed_stop(n->core, &conn->hs_timer);
  if (err != RLOCK__NOT_MASTER)
    progress(conn, err, detail);
  if (err == RLOCK_EPROTO) {
    /* Every good handshake resets the back-off, so a peer that breaks the
     * protocol right after each one would be reconnected at once, for ever:
     * such drops back off on a count of their own. */
    if (conn->proto_drops < 16)
      conn->proto_drops++;
    conn->backoff_attempt = conn->proto_drops;
  }
  conn->state = RLOCK__CONN_DOWN;
  conn->draining = false;
  fail_expected(conn);
  if (n->core->closing) {
    /* Nothing sent at close can be answered any more. */
    if (!conn->is_sub)
      n->on_cmd_closed(n);
    return;
  }
  if (conn->is_sub)
    rlock__chans_on_disconnect(conn->node);
  /* Where is the server now? A cluster's slot map, or the sentinels,
   * may know of a failover. */
  if (n->mode == RLOCK__URI_CLUSTER)
    rlock__cluster_refresh_soon(n);
  else if (n->mode == RLOCK__URI_SENTINEL)
    rlock__sentinel_requery(n);
  schedule_reconnect(conn);
}

/* rlock lets go of the connection (protocol violation, failed handshake).
 * `detail` must outlive the call only. */
static void conn_drop(rlock__conn *conn, int err, const char *detail) {
  rlock__link *l = conn->link;
  if (l == NULL)
    return;
  conn->link = NULL;
  rlock__link_close(l);
  conn_lost(conn, err, detail);
}

/* The link failed: could not connect, TLS, the peer closed or broke it. */
static void link_down(rlock__link *l, int err, const char *detail) {
  rlock__conn *conn = rlock__link_data(l);
  conn->link = NULL;
  if (err == RLOCK_ECONN && conn->hs_err != 0) {
    /* A server that refuses at the door (maxclients) closes right after
     * saying why: its reason is the error, not the close. */
    err = conn->hs_err;
    detail = conn->hs_detail;
  }
  conn_lost(conn, err, detail);
}

/* The handshake was not answered within command_timeout_ms of connecting:
 * a server that accepts but never answers (stopped, a black hole behind a
 * proxy) must not hold open or a reconnect for ever. */
static void hs_timeout(rlock__timed *t) {
  rlock__conn *conn = RLOCK__CONTAINER_OF(t, rlock__conn, hs_timer);
  char detail[128];
  snprintf(detail, sizeof(detail),
           "Redis did not answer PING within command_timeout_ms (%lld ms)",
           (long long)conn->net->core->opts.command_timeout_ms);
  conn_drop(conn, RLOCK_ETIMEDOUT, detail);
}

/* Connected: the handshake, sent already, is on its way. */
static void link_up(rlock__link *l) {
  rlock__conn *conn = rlock__link_data(l);
  rlock__core *core = conn->net->core;
  conn->hs_timer.fire = hs_timeout;
  rlock__timed_start(core, &conn->hs_timer,
                     rlock__now_ms() + core->opts.command_timeout_ms);
}

/* ---- handshake: AUTH, SELECT, CLIENT SETNAME, then PING ---- */

static void conn_ready(rlock__conn *conn) {
  rlock__net *n = conn->net;
  if (n->core->closing)
    return;
  if (conn->hs_err != 0) {
    if (conn->hs_err != RLOCK__NOT_MASTER)
      progress(conn, conn->hs_err, conn->hs_detail);
    /* A connection that cannot authenticate is useless: it is dropped, and
     * tried again later (the password may be fixed on the server). Commands
     * pipelined behind the handshake get their answers first (e.g. NOAUTH):
     * see link_reply. */
    conn->draining = true;
    return;
  }
  rlock__timed_stop(n->core, &conn->hs_timer);
  conn->state = RLOCK__CONN_UP;
  conn->backoff_attempt = 0;
  progress(conn, 0, NULL);
  if (!conn->is_sub)
    n->on_cmd_ready(n);
}

/* Sentinel: ROLE must say master. A former master that a failover
 * demoted is refused: its writes would fail (READONLY) or, worse, land on
 * a server the others no longer follow. */
static void role_reply(rlock__conn *conn, const redisReply *reply) {
  int replicas = 0;
  int role = rlock__parse_role(reply, &replicas);
  if (role == 1) {
    if (!conn->is_sub)
      conn->node->replicas = replicas;
    return;
  }
  if (conn->hs_err != 0)
    return;
  char peer[100];
  peer_name(conn, peer, sizeof(peer));
  conn->hs_err = role == 0 ? RLOCK__NOT_MASTER : RLOCK_EPROTO;
  snprintf(conn->hs_detail, sizeof(conn->hs_detail),
           role == 0 ? "%s is not the master (ROLE): asking the sentinels"
                     : "unexpected reply to ROLE from %s",
           peer);
  if (role == 0)
    rlock__sentinel_requery(conn->net);
}

static void hs_error(rlock__conn *conn, int kind, const redisReply *reply) {
  if (conn->hs_err != 0)
    return;
  static const char maxclients[] = "ERR max number of clients";
  size_t len = (size_t)reply->len;
  int err = rlock__reply_error(reply);
  char peer[100];
  peer_name(conn, peer, sizeof(peer));
  if (len >= sizeof(maxclients) - 1 &&
      memcmp(reply->str, maxclients, sizeof(maxclients) - 1) == 0) {
    /* Sent at accept, before any request, so it answers whichever step is
     * first: a refused connection (transient), not a refused command. */
    err = RLOCK_ECONN;
    snprintf(conn->hs_detail, sizeof(conn->hs_detail),
             "%s refused the connection: %.*s", peer, (int)len, reply->str);
  } else if (kind == EXP_SELECT && err == RLOCK_ESERVER) {
    /* "ERR DB index is out of range" and the like: the URI names a
     * database this server does not have. */
    err = RLOCK_EURI;
    snprintf(conn->hs_detail, sizeof(conn->hs_detail),
             "database %d of the URI: %.*s", conn->net->uri->db, (int)len,
             reply->str);
  } else {
    snprintf(conn->hs_detail, sizeof(conn->hs_detail), "%.*s", (int)len,
             reply->str);
  }
  conn->hs_err = err;
}

/* seq 1 marks the first PING of the handshake (see conn_start): it checks
 * the peer; only the last one, behind the probes, makes the connection
 * ready. */
static void hs_reply(rlock__conn *conn, int kind, uint32_t seq,
                     const redisReply *reply) {
  if (kind == EXP_ASKING)
    return; /* the command behind it answers for both */
  if (reply->type == REDIS_REPLY_ERROR) {
    hs_error(conn, kind, reply);
  } else if (kind == EXP_ROLE) {
    role_reply(conn, reply);
  } else if (reply->type != REDIS_REPLY_STATUS ||
             (kind == EXP_PING &&
              !(reply->len == 4 && memcmp(reply->str, "PONG", 4) == 0))) {
    char peer[100], what[96], detail[256];
    peer_name(conn, peer, sizeof(peer));
    describe_reply(reply, what, sizeof(what));
    snprintf(detail, sizeof(detail),
             "unexpected reply to %s from %s: %s (not a Redis server?)",
             exp_names[kind], peer, what);
    conn_drop(conn, RLOCK_EPROTO, detail);
    return;
  }
  if (kind == EXP_PING && seq == 0)
    conn_ready(conn);
}

/* ---- sending ---- */

static int raw_append(rlock__conn *conn, int argc, const char **argv,
                      const size_t *lens) {
  if (conn->link == NULL || conn->draining)
    return RLOCK_ECONN;
  return rlock__link_send(conn->link, argc, argv, lens);
}

/* Sends a request whose reply is matched to `kind` (and cmd). */
static int expect_append_seq(rlock__conn *conn, int kind, rlock__cmd *cmd,
                             uint32_t seq, int argc, const char **argv,
                             const size_t *lens) {
  if (conn->link == NULL || conn->draining)
    return RLOCK_ECONN;
  /* Room first: a request on the wire without its entry would make its
   * reply look unsolicited. */
  if (!exp_reserve(conn))
    return RLOCK_ENOMEM;
  int rc = raw_append(conn, argc, argv, lens);
  if (rc == 0)
    exp_push(conn, kind, cmd, seq);
  return rc;
}

static int expect_append(rlock__conn *conn, int kind, rlock__cmd *cmd,
                         int argc, const char **argv, const size_t *lens) {
  return expect_append_seq(conn, kind, cmd, 0, argc, argv, lens);
}

static int handshake(rlock__conn *conn, int kind, int argc,
                     const char **argv) {
  size_t lens[3];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return expect_append(conn, kind, NULL, argc, argv, lens);
}

/* The subscriber connection: pubsub.c routes confirmations and messages
 * (SUBSCRIBE and SSUBSCRIBE, "message" and "smessage") itself. They are
 * unasked for by nature: after the handshake every reply on this
 * connection goes to pubsub.c. */
int rlock__sub_append(rlock__node *node, int argc, const char **argv,
                      const size_t *lens) {
  return raw_append(&node->sub, argc, argv, lens);
}

/* ---- capability probes ---- */

/* Sent on every new connection inside the handshake, in the same write,
 * just before its PING (which stays the last step, so the connection's
 * last command is PING until it is used): a server processes a pipeline in
 * order and answers these at once, so they cost open no round trip, and
 * their answers come before any command's. Whatever they are answered -
 * an error, something unexpected - only sets what the node is taken to
 * support, never fails the handshake; a probe never answered holds up the
 * PING behind it, which then fails the handshake at command_timeout_ms as
 * any silent server does. Per connection: a node whose server changes (a
 * Sentinel failover) is probed again.
 *
 *   CLIENT SETINFO LIB-NAME rlock, CLIENT SETINFO LIB-VER <version>:
 *     operators see rlock in CLIENT LIST (Redis 7.2+, Valkey); refused by
 *     older servers, which is fine.
 *   WAIT 0 0 (command connection, replica sync on, Sentinel or Cluster):
 *     returns at once; "unknown command" (a managed service without it,
 *     rename-command) turns replica sync off for the node, reported once
 *     (rlock__net_sync_report).
 *   WAITAOF 0 0 0 and INFO persistence (the same, unless replica_sync_mode
 *     is WAIT): whether WAITAOF can stand in for WAIT (replica_sync_mode).
 *   EVAL <two GETs> 2 test1 test2 (command connection, standalone and
 *     Sentinel URIs): a CROSSSLOT refusal means a cluster behind one
 *     endpoint (a proxy: Envoy, Redis Enterprise); from then on commands
 *     that name several keys keep to one slot each, as in cluster mode
 *     (rlock__net_key_slot); so do they after any command is refused with
 *     CROSSSLOT (cmd_reply), whatever the probe was answered. */
enum { PROBE_LIB_NAME, PROBE_LIB_VER, PROBE_WAIT, PROBE_WAITAOF,
       PROBE_AOF, PROBE_CROSSSLOT };

/* The cross-slot probe, as Java Redisson's: two keys in different slots
 * (4768, 8899), read only. */
static const char crossslot_script[] =
    "redis.call('get', KEYS[1]); redis.call('get', KEYS[2]); return nil";

static bool unknown_command(const redisReply *r) {
  static const char text[] = "ERR unknown command";
  return r->type == REDIS_REPLY_ERROR && (size_t)r->len >= sizeof(text) - 1 &&
         strncasecmp(r->str, text, sizeof(text) - 1) == 0;
}

/* WAIT is not there: replica sync is off for this node (reported once per
 * client, the first time; the node's flag says it for each). */
static void wait_missing(rlock__conn *conn, const redisReply *r) {
  rlock__net *n = conn->net;
  rlock__node *node = conn->node;
  node->cap_wait = -1;
  if (atomic_load_explicit(&n->sync_report_set, memory_order_acquire))
    return;
  char peer[100], what[96];
  peer_name(conn, peer, sizeof(peer));
  describe_reply(r, what, sizeof(what));
  snprintf(n->sync_report, sizeof(n->sync_report),
           "replica sync is off on %s: WAIT was answered %s (no WAIT there: "
           "locks are not confirmed by replicas)",
           peer, what);
  atomic_store_explicit(&n->sync_report_set, true, memory_order_release);
}

static void probe_reply(rlock__conn *conn, int which, const redisReply *r) {
  rlock__node *node = conn->node;
  if (which == PROBE_WAIT) {
    if (unknown_command(r))
      wait_missing(conn, r);
    else if (r->type == REDIS_REPLY_INTEGER)
      node->cap_wait = 1;
    /* anything else (a proxy's own error, garbage): left unknown, so WAIT
     * is still sent and what it answers decides each command */
  } else if (which == PROBE_WAITAOF) {
    if (unknown_command(r))
      node->cap_waitaof = -1;
    else if (r->type == REDIS_REPLY_ARRAY)
      node->cap_waitaof = 1;
  } else if (which == PROBE_AOF) {
    if (r->type == REDIS_REPLY_STRING && r->str != NULL) {
      /* "...\r\naof_enabled:1\r\n..." (only the bytes of the reply) */
      static const char f[] = "aof_enabled:";
      const char *p = r->str, *end = r->str + r->len;
      while (p != NULL && (size_t)(end - p) > sizeof(f) - 1) {
        if (memcmp(p, f, sizeof(f) - 1) == 0) {
          node->aof_on = p[sizeof(f) - 1] == '1' ? 1 : -1;
          break;
        }
        p = memchr(p, '\n', (size_t)(end - p));
        if (p != NULL)
          p++;
      }
    }
  } else if (which == PROBE_CROSSSLOT) {
    if (r->type == REDIS_REPLY_ERROR && r->len >= 9 &&
        strncmp(r->str, "CROSSSLOT", 9) == 0)
      conn->net->per_slot = true;
  } else if (which == PROBE_LIB_NAME && !conn->is_sub) {
    node->cap_setinfo = r->type == REDIS_REPLY_STATUS ? 1 : -1;
  }
}

static int probe(rlock__conn *conn, int which, int argc, const char **argv) {
  size_t lens[5];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return expect_append_seq(conn, EXP_PROBE, NULL, (uint32_t)which, argc,
                           argv, lens);
}

static int probes_send(rlock__conn *conn) {
  rlock__net *n = conn->net;
  const char *lib[3] = {"CLIENT", "SETINFO", "LIB-NAME"};
  const char *argv[4] = {lib[0], lib[1], lib[2], "rlock"};
  int rc = probe(conn, PROBE_LIB_NAME, 4, argv);
  argv[2] = "LIB-VER";
  argv[3] = RLOCK_VERSION_STRING;
  if (rc == 0)
    rc = probe(conn, PROBE_LIB_VER, 4, argv);
  if (rc == 0 && !conn->is_sub && n->mode != RLOCK__URI_SINGLE &&
      n->core->opts.replica_sync) {
    const char *w[4] = {"WAIT", "0", "0"};
    rc = probe(conn, PROBE_WAIT, 3, w);
    if (rc == 0 &&
        n->core->opts.replica_sync_mode != RLOCK_REPLICA_SYNC_WAIT) {
      w[0] = "WAITAOF";
      w[3] = "0";
      rc = probe(conn, PROBE_WAITAOF, 4, w);
      const char *info[2] = {"INFO", "persistence"};
      if (rc == 0)
        rc = probe(conn, PROBE_AOF, 2, info);
    }
  }
  if (rc == 0 && !conn->is_sub && n->mode != RLOCK__URI_CLUSTER &&
      !n->per_slot) {
    const char *e[5] = {"EVAL", crossslot_script, "2", "test1", "test2"};
    rc = probe(conn, PROBE_CROSSSLOT, 5, e);
  }
  return rc;
}

const char *rlock__net_sync_report(const rlock__net *n) {
  return atomic_load_explicit(&n->sync_report_set, memory_order_acquire)
             ? n->sync_report
             : NULL;
}

/* ---- receiving ---- */

static void on_reply(rlock__conn *conn, redisReply *reply) {
  rlock__net *n = conn->net;
  struct rlock__expect e;
  if (!exp_pop(conn, &e)) {
    if (conn->is_sub) {
      if (!n->core->closing)
        rlock__chans_reply(conn->node, reply);
      return;
    }
    char peer[100], what[96], detail[256];
    peer_name(conn, peer, sizeof(peer));
    describe_reply(reply, what, sizeof(what));
    snprintf(detail, sizeof(detail),
             "unsolicited reply from %s: %s (not a Redis server?)", peer,
             what);
    conn_drop(conn, RLOCK_EPROTO, detail);
    return;
  }
  if (e.kind == EXP_CMD) {
    conn->net->reply_link = conn->link;
    cmd_reply(e.cmd, reply);
    conn->net->reply_link = NULL;
  } else if (e.kind == EXP_WAIT) {
    wait_reply(e.cmd, e.seq, reply);
  } else if (e.kind == EXP_PROBE) {
    probe_reply(conn, (int)e.seq, reply);
  } else {
    hs_reply(conn, e.kind, e.seq, reply);
  }
}

/* A reply on the link; any handler may drop the connection. */
static void link_reply(rlock__link *l, redisReply *r) {
  rlock__conn *conn = rlock__link_data(l);
  on_reply(conn, r);
  if (conn->link == l && conn->draining && conn->exp_len == 0)
    conn_drop(conn, conn->hs_err, conn->hs_detail);
}

static const rlock__link_ops link_ops = {link_up, link_reply, link_down};

static void send_now(rlock__cmd *cmd);

static int conn_start(rlock__conn *conn) {
  rlock__net *n = conn->net;
  const rlock__uri *u = n->uri;
  /* The node's address, with the URI's scheme, credentials and db. */
  rlock__uri addr = *u;
  addr.host = conn->node->host;
  addr.port = conn->node->port;
  rlock__link_cfg cfg = {&addr, n->tls, n->core->opts.connect_timeout_ms,
                         n->core->opts.max_write_queue_bytes};
  conn->link = rlock__link_open(&n->core->loop, &cfg, &link_ops, conn);
  if (conn->link == NULL) {
    progress(conn, RLOCK_ENOMEM, "out of memory");
    schedule_reconnect(conn);
    return RLOCK_ENOMEM;
  }
  conn->state = RLOCK__CONN_CONNECTING;
  conn->draining = false;
  conn->hs_err = 0;
  conn->hs_detail[0] = '\0';

  /* The link keeps commands until it is connected, so the handshake and
   * whatever waited for this connection are pipelined at once. */
  const char *argv[3];
  int rc = 0;
  if (u->password != NULL) {
    int n = 0;
    argv[n++] = "AUTH";
    if (u->user != NULL && u->user[0] != '\0')
      argv[n++] = u->user;
    argv[n++] = u->password;
    rc = handshake(conn, EXP_AUTH, n, argv);
  }
  if (rc == 0 && !conn->is_sub && u->db != 0) {
    char db[16];
    snprintf(db, sizeof(db), "%d", u->db);
    argv[0] = "SELECT";
    argv[1] = db;
    rc = handshake(conn, EXP_SELECT, 2, argv);
  }
  if (rc == 0 && n->client_name != NULL) {
    argv[0] = "CLIENT";
    argv[1] = "SETNAME";
    argv[2] = n->client_name;
    rc = handshake(conn, EXP_SETNAME, 3, argv);
  }
  if (rc == 0 && n->mode == RLOCK__URI_SENTINEL) {
    argv[0] = "ROLE";
    rc = handshake(conn, EXP_ROLE, 1, argv);
  }
  if (!conn->is_sub) {
    conn->node->cap_wait = 0;
    conn->node->cap_setinfo = 0;
    conn->node->cap_waitaof = 0;
    conn->node->aof_on = 0;
  }
  /* A PING before the probes too: whatever the probes are answered never
   * fails the handshake, so a peer that is not Redis (one that greets with
   * replies nobody asked for, say) must meet a step that checks its answer
   * before them - that PING's reply must be +PONG. */
  static const size_t ping_len[1] = {4};
  argv[0] = "PING";
  if (rc == 0)
    rc = expect_append_seq(conn, EXP_PING, NULL, 1, 1, argv, ping_len);
  if (rc == 0)
    rc = probes_send(conn);
  if (rc == 0) {
    argv[0] = "PING";
    rc = handshake(conn, EXP_PING, 1, argv);
  }
  if (rc != 0) {
    /* Out of memory: a handshake with a step missing is no use. */
    conn_drop(conn, rc, "out of memory");
    return rc;
  }

  if (conn->is_sub) {
    rlock__chans_on_connect(conn->node);
  } else {
    rlock__cmd *pending = conn->pending_head;
    conn->pending_head = conn->pending_tail = NULL;
    while (pending != NULL) {
      rlock__cmd *next = pending->pending_next;
      pending->pending_next = NULL;
      pending->is_pending = false;
      send_now(pending);
      pending = next;
    }
  }
  return 0;
}

static void conn_shutdown(rlock__conn *conn) {
  rlock__net *n = conn->net;
  rlock__timed_stop(n->core, &conn->reconnect);
  rlock__timed_stop(n->core, &conn->hs_timer);
  rlock__link *l = conn->link;
  conn->link = NULL;
  conn->state = RLOCK__CONN_DOWN;
  conn->draining = false;
  rlock__link_close(l); /* NULL ok; its socket closes on the next turn */
  /* n->core->closing: records still waiting complete with RLOCK_ECLOSED. */
  fail_expected(conn);
  free(conn->exp);
  conn->exp = NULL;
  conn->exp_cap = conn->exp_len = conn->exp_head = 0;
}

int rlock__reply_error(const redisReply *r) {
  return rlock__err_from_server(r->str, r->len);
}

/* ---- command records ---- */

static void cmd_free_if_idle(rlock__cmd *cmd) {
  if (cmd->state != RLOCK__CMD_DONE || cmd->inflight > 0 ||
      cmd->wait_inflight > 0)
    return;
  rlock__net *n = cmd->net;
  if (cmd->all_prev != NULL)
    cmd->all_prev->all_next = cmd->all_next;
  else
    n->cmd_all = cmd->all_next;
  if (cmd->all_next != NULL)
    cmd->all_next->all_prev = cmd->all_prev;
  rlock__timed_stop(n->core, &cmd->redo);
  if (cmd->held != NULL)
    freeReplyObject(cmd->held);
  free(cmd);
}

/* The list a waiting record is on: its node's, or the client's unrouted
 * one (a cluster whose slot map is not known yet). */
static void pending_list(rlock__cmd *cmd, rlock__cmd ***head,
                         rlock__cmd ***tail) {
  rlock__net *n = cmd->net;
  if (cmd->pending_on != NULL) {
    *head = &cmd->pending_on->cmd.pending_head;
    *tail = &cmd->pending_on->cmd.pending_tail;
  } else {
    *head = &n->unrouted_head;
    *tail = &n->unrouted_tail;
  }
}

static void pending_push(rlock__cmd *cmd, rlock__node *on) {
  rlock__cmd **head, **tail;
  cmd->pending_on = on;
  cmd->is_pending = true;
  pending_list(cmd, &head, &tail);
  cmd->pending_next = NULL;
  if (*tail != NULL)
    (*tail)->pending_next = cmd;
  else
    *head = cmd;
  *tail = cmd;
}

static void pending_remove(rlock__cmd *cmd) {
  if (!cmd->is_pending)
    return;
  rlock__cmd **head, **tail;
  pending_list(cmd, &head, &tail);
  rlock__cmd **slot = head, *prev = NULL;
  while (*slot != NULL && *slot != cmd) {
    prev = *slot;
    slot = &(*slot)->pending_next;
  }
  if (*slot != NULL) {
    *slot = cmd->pending_next;
    if (*tail == cmd)
      *tail = prev;
  }
  cmd->pending_next = NULL;
  cmd->is_pending = false;
}

static void complete(rlock__cmd *cmd, redisReply *reply, int err) {
  rlock__net *n = cmd->net;
  rlock__timed_stop(n->core, &cmd->timer);
  rlock__timed_stop(n->core, &cmd->redo);
  cmd->state = RLOCK__CMD_DONE;
  rlock__reply_cb cb = cmd->cb;
  cmd->cb = NULL;
  if (cb != NULL)
    cb(n, reply, err, cmd->data);
  n->reply_unsynced = false;
  cmd_free_if_idle(cmd);
}

static void dispatch(rlock__cmd *cmd);

static void cmd_timer_fire(rlock__timed *t) {
  rlock__cmd *cmd = RLOCK__CONTAINER_OF(t, rlock__cmd, timer);
  rlock__net *n = cmd->net;
  if (cmd->fail_err != 0) { /* refused before it was sent (send_now) */
    pending_remove(cmd);
    complete(cmd, NULL, cmd->fail_err);
    return;
  }
  if (cmd->state == RLOCK__CMD_WAIT_RETRY) {
    dispatch(cmd);
    return;
  }
  /* Reply deadline passed. A reply that still comes is ignored (inflight
   * keeps the record alive until its FIFO entry is answered or failed). */
  pending_remove(cmd);
  rlock__timed_stop(n->core, &cmd->redo);
  if (cmd->held != NULL) {
    freeReplyObject(cmd->held);
    cmd->held = NULL;
  }
  if (cmd->retries_left > 0) {
    cmd->retries_left--;
    cmd->state = RLOCK__CMD_WAIT_RETRY;
    rlock__timed_start(n->core, &cmd->timer,
                       rlock__now_ms() + n->core->opts.retry_interval_ms);
    return;
  }
  complete(cmd, NULL, RLOCK_ETIMEDOUT);
}

static void send_now(rlock__cmd *cmd);

/* ---- cluster redirects and transient refusals ---- */

/* Redirects and waits one command may follow before its error is the
 * answer: a cluster that keeps pointing elsewhere is broken, not busy. */
#define MAX_REDIRECTS 16

static bool err_is(const redisReply *r, const char *word) {
  size_t k = strlen(word);
  return (size_t)r->len >= k && memcmp(r->str, word, k) == 0 &&
         ((size_t)r->len == k || r->str[k] == ' ');
}

static void redo_fire(rlock__timed *t) {
  rlock__cmd *cmd = RLOCK__CONTAINER_OF(t, rlock__cmd, redo);
  if (cmd->state == RLOCK__CMD_WAIT_REPLY && cmd->inflight == 0)
    send_now(cmd);
}

/* An error reply that means "not here" or "not now": the command did not
 * run, so it is sent again - to the node named (MOVED, ASK), or after a
 * pause (TRYAGAIN during a migration, CLUSTERDOWN, a demoted master's
 * READONLY while the map or the sentinels catch up) - within the
 * command's deadline. true when handled. */
static bool redirect(rlock__cmd *cmd, const redisReply *r) {
  rlock__net *n = cmd->net;
  if (n->mode == RLOCK__URI_SINGLE || cmd->fixed != NULL ||
      cmd->redirects >= MAX_REDIRECTS)
    return false;
  char host[RLOCK__HOST_MAX];
  int slot = -1, port = 0;
  int kind = rlock__parse_redirect(r->str, (size_t)r->len, &slot, host,
                                   sizeof(host), &port);
  if (kind != 0 && n->mode == RLOCK__URI_CLUSTER) {
    if (host[0] == '\0') /* "the node you asked", by its address */
      snprintf(host, sizeof(host), "%s",
               cmd->sent_to != NULL ? cmd->sent_to->host : "");
    rlock__node *node = rlock__node_get(n, host, port);
    if (node == NULL)
      return false;
    cmd->redirects++;
    if (kind == 1) {
      rlock__cluster_moved(n, slot, node);
    } else {
      cmd->ask = node;
    }
    send_now(cmd);
    return true;
  }
  bool busy = err_is(r, "TRYAGAIN") || err_is(r, "CLUSTERDOWN") ||
              err_is(r, "READONLY") || err_is(r, "MASTERDOWN") ||
              err_is(r, "LOADING");
  if (!busy)
    return false;
  int64_t delay = (int64_t)25 << (cmd->redirects > 5 ? 5 : cmd->redirects);
  if (rlock__now_ms() + delay >= cmd->timer.at)
    return false; /* no time left: the error is the answer */
  cmd->redirects++;
  if (n->mode == RLOCK__URI_CLUSTER)
    rlock__cluster_refresh_soon(n);
  else if (err_is(r, "READONLY"))
    rlock__sentinel_requery(n);
  cmd->redo.fire = redo_fire;
  rlock__timed_start(n->core, &cmd->redo, rlock__now_ms() + delay);
  return true;
}

/* ---- replies ---- */

/* The reply to one send of cmd, or NULL when its connection was lost. */
static void cmd_reply(rlock__cmd *cmd, redisReply *reply) {
  rlock__net *n = cmd->net;
  cmd->inflight--;
  /* Replies on one connection come in order, so only the reply to the latest
   * send (inflight back to 0) answers a record that is still waiting. */
  if (cmd->state != RLOCK__CMD_WAIT_REPLY || cmd->inflight > 0 ||
      rlock__timed_active(&cmd->redo)) {
    cmd_free_if_idle(cmd);
    return;
  }
  if (reply == NULL) {
    if (n->core->closing) {
      complete(cmd, NULL, RLOCK_ECLOSED);
    } else if (cmd->retries_left > 0) {
      cmd->retries_left--;
      cmd->state = RLOCK__CMD_WAIT_RETRY;
      rlock__timed_start(n->core, &cmd->timer,
                         rlock__now_ms() + n->core->opts.retry_interval_ms);
    } else {
      complete(cmd, NULL, RLOCK_ECONN);
    }
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR && redirect(cmd, reply))
    return;
  if (reply->type == REDIS_REPLY_ERROR && n->mode != RLOCK__URI_CLUSTER &&
      !n->per_slot && err_is(reply, "CROSSSLOT")) {
    /* A proxy that let the probe pass refused a batch: it is a cluster
     * after all. This command fails (a renewal is tried again at the next
     * tick), the next batches keep to one slot. */
    n->per_slot = true;
  }
  if (reply->type == REDIS_REPLY_ERROR && cmd->script != NULL &&
      !cmd->use_eval && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
    cmd->use_eval = true; /* EVAL also caches it for the next EVALSHA */
    send_now(cmd);
    return;
  }
  if (cmd->wait_seq == cmd->send_seq && cmd->wait_inflight > 0 &&
      reply->type != REDIS_REPLY_ERROR && n->reply_link != NULL) {
    /* Replica sync: the answer is complete with WAIT's, which follows. */
    rlock__link_keep_reply(n->reply_link);
    cmd->held = reply;
    return;
  }
  complete(cmd, reply, 0);
}

/* WAIT's reply (NULL: the connection was lost). */
static void wait_reply(rlock__cmd *cmd, uint32_t seq, redisReply *reply) {
  rlock__net *n = cmd->net;
  cmd->wait_inflight--;
  redisReply *held = cmd->held;
  if (seq != cmd->send_seq || held == NULL ||
      cmd->state != RLOCK__CMD_WAIT_REPLY) {
    cmd_free_if_idle(cmd);
    return;
  }
  cmd->held = NULL;
  if (reply == NULL) {
    /* The command ran; whether a replica has it is unknown. As a lost
     * reply: re-sent when idempotent, else the caller repairs. */
    freeReplyObject(held);
    cmd->inflight++; /* cmd_reply counts this answer */
    cmd_reply(cmd, NULL);
    return;
  }
  /* Not confirmed, whatever the reason - WAIT unknown to a server that
   * lost it (a failover to one without it) included: that command counts
   * as unconfirmed, and the ones after it go without WAIT. */
  if (unknown_command(reply) && cmd->sent_to != NULL) {
    if (strcasestr(reply->str, "WAITAOF") != NULL)
      cmd->sent_to->cap_waitaof = -1; /* WAIT from now on */
    else
      wait_missing(&cmd->sent_to->cmd, reply);
  }
  /* WAIT answers the replicas that acknowledged; WAITAOF [local,
   * replicas]: replicas count, as Java Redisson counts them. */
  bool synced = reply->type == REDIS_REPLY_INTEGER && reply->integer >= 1;
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[1]->type == REDIS_REPLY_INTEGER)
    synced = reply->element[1]->integer >= 1;
  n->reply_unsynced = !synced;
  complete(cmd, held, 0);
  freeReplyObject(held);
}

/* ---- sending ---- */

/* Where a command goes now, or NULL (a cluster whose map is unknown). */
static rlock__node *route(rlock__cmd *cmd) {
  rlock__net *n = cmd->net;
  if (cmd->fixed != NULL)
    return cmd->fixed;
  if (cmd->ask != NULL)
    return cmd->ask;
  if (n->mode != RLOCK__URI_CLUSTER)
    return n->master;
  return rlock__cluster_node_of(n, cmd->slot);
}

/* How many replicas replica sync's WAIT asks for on this master: every
 * replica it has connected (as Java Redisson's WAIT <connected_slaves>);
 * and when it has none connected but the topology lists some (Sentinel's
 * replica list, the cluster shard's replicas), one: a master whose links to
 * its replicas are down must not take locks that a failover to one of
 * those replicas would lose - WAIT 1 then times out, 0 acknowledged, and
 * the acquire is undone (RLOCK_ENOREPLICA), as Redis's min-replicas-to-
 * write 1 would refuse the write. replica_sync_connected_only = 1 keeps
 * the connected count alone: no WAIT without a connected replica
 * (availability over safety). */
static int wait_count(const rlock__node *node) {
  if (node->cap_wait < 0)
    return 0; /* no WAIT on this server (probe, or a refused WAIT) */
  if (node->replicas > 0)
    return node->replicas;
  if (node->replicas_listed > 0 &&
      !node->net->core->opts.replica_sync_connected_only)
    return 1;
  return 0;
}

/* WAITAOF instead of WAIT (replica_sync_mode, read at connect). */
static bool use_waitaof(const rlock__node *node) {
  switch (node->net->core->opts.replica_sync_mode) {
  case RLOCK_REPLICA_SYNC_AUTO:
    return node->cap_waitaof > 0 && node->aof_on > 0;
  case RLOCK_REPLICA_SYNC_WAITAOF:
    return node->cap_waitaof > 0;
  default:
    return false;
  }
}

/* Sends on the command connection of the node it belongs to, or queues
 * the record for that node's next connection (conn_start flushes it) or
 * for the slot map. */
static void send_now(rlock__cmd *cmd) {
  rlock__net *n = cmd->net;
  rlock__node *node = route(cmd);
  if (node == NULL) {
    pending_push(cmd, NULL);
    return;
  }
  rlock__conn *conn = &node->cmd;
  int off = 2;
  if (cmd->script != NULL) {
    off = 0;
    cmd->argv[0] = cmd->use_eval ? "EVAL" : "EVALSHA";
    cmd->argvlen[0] = strlen(cmd->argv[0]);
    cmd->argv[1] = cmd->use_eval ? cmd->script->body : cmd->script->sha;
    cmd->argvlen[1] = strlen(cmd->argv[1]);
  }
  int rc = 0;
  if (cmd->ask != NULL) {
    /* ASK: this one command may run on the importing node, once. */
    const char *asking = "ASKING";
    size_t alen = 6;
    rc = expect_append(conn, EXP_ASKING, NULL, 1, &asking, &alen);
  }
  if (rc == 0)
    rc = expect_append(conn, EXP_CMD, cmd, cmd->argc + 2 - off,
                       cmd->argv + off, cmd->argvlen + off);
  if (rc == RLOCK_EBACKLOG) {
    /* The write queue is full (the server is not reading): the command
     * fails - never sent - on the next loop turn, not from inside whatever
     * call is sending it. */
    cmd->fail_err = rc;
    cmd->timer.fire = cmd_timer_fire;
    rlock__timed_start(n->core, &cmd->timer, rlock__now_ms());
    return;
  }
  if (rc != 0) {
    pending_push(cmd, node);
    return;
  }
  cmd->ask = NULL;
  cmd->sent_to = node;
  cmd->inflight++;
  cmd->send_seq++;
  /* Replica sync: WAIT right behind it, in the same write. */
  int wait_n = cmd->sync && n->core->opts.replica_sync ? wait_count(node) : 0;
  if (wait_n > 0) {
    char num[16], ms[24];
    snprintf(num, sizeof(num), "%d", wait_n);
    snprintf(ms, sizeof(ms), "%lld",
             (long long)n->core->opts.replica_sync_timeout_ms);
    const char *argv[4] = {"WAIT", num, ms};
    int argc = 3;
    if (use_waitaof(node)) {
      argv[0] = "WAITAOF";
      argv[1] = node->aof_on > 0 ? "1" : "0";
      argv[2] = num;
      argv[3] = ms;
      argc = 4;
    }
    size_t lens[4];
    for (int i = 0; i < argc; i++)
      lens[i] = strlen(argv[i]);
    if (expect_append_seq(conn, EXP_WAIT, cmd, cmd->send_seq, argc, argv,
                          lens) == 0) {
      cmd->wait_inflight++;
      cmd->wait_seq = cmd->send_seq;
    }
  }
}

static void dispatch(rlock__cmd *cmd) {
  rlock__net *n = cmd->net;
  cmd->state = RLOCK__CMD_WAIT_REPLY;
  cmd->timer.fire = cmd_timer_fire;
  cmd->redirects = 0;
  rlock__timed_start(n->core, &cmd->timer,
                     rlock__now_ms() + n->core->opts.command_timeout_ms);
  send_now(cmd);
}

/* Commands that name no key: they may go to any node. */
static bool keyless(const char *name) {
  static const char *const names[] = {"PING",   "WAIT",   "PUBSUB", "CLUSTER",
                                      "SENTINEL", "ROLE", "INFO",   "SCRIPT",
                                      "CLIENT", "ASKING", NULL};
  for (int i = 0; names[i] != NULL; i++)
    if (strcasecmp(name, names[i]) == 0)
      return true;
  return false;
}

static rlock__cmd *cmd_new(rlock__net *n, const rlock__script *script,
                           int argc, const char **argv, const size_t *argvlen,
                           int retries, rlock__reply_cb cb, void *data) {
  size_t bytes = 0;
  for (int i = 0; i < argc; i++)
    bytes += argvlen[i] + 1;
  size_t slots = (size_t)argc + 2;
  size_t head = sizeof(rlock__cmd) + slots * sizeof(char *) +
                slots * sizeof(size_t);
  rlock__cmd *cmd = malloc(head + bytes);
  if (cmd == NULL)
    return NULL;
  memset(cmd, 0, sizeof(*cmd));
  cmd->net = n;
  cmd->cb = cb;
  cmd->data = data;
  cmd->retries_left = retries;
  cmd->script = script;
  cmd->use_eval = script != NULL && script->eval_only;
  cmd->slot = -1;
  cmd->argc = argc;
  cmd->argv = (const char **)(void *)(cmd + 1);
  cmd->argvlen = (size_t *)(void *)(cmd->argv + slots);
  char *p = (char *)(cmd->argvlen + slots);
  for (int i = 0; i < argc; i++) {
    memcpy(p, argv[i], argvlen[i]);
    p[argvlen[i]] = '\0';
    cmd->argv[i + 2] = p;
    cmd->argvlen[i + 2] = argvlen[i];
    p += argvlen[i] + 1;
  }
  cmd->all_next = n->cmd_all;
  if (n->cmd_all != NULL)
    n->cmd_all->all_prev = cmd;
  n->cmd_all = cmd;
  return cmd;
}

rlock__cmd *rlock__cmd_send(rlock__net *n, const rlock__script *script,
                            int argc, const char **argv, const size_t *argvlen,
                            int retries, rlock__reply_cb cb, void *data) {
  rlock__cmd *cmd = cmd_new(n, script, argc, argv, argvlen, retries, cb, data);
  if (cmd == NULL)
    return NULL;
  if (n->mode == RLOCK__URI_CLUSTER) {
    /* The slot of the first key: a script's KEYS[1] (every key of one
     * lock shares its tag), or a command's first argument. */
    if (script != NULL) {
      if (argc >= 2 && atoi(argv[0]) > 0)
        cmd->slot = rlock__key_slot(argv[1], argvlen[1]);
    } else if (argc >= 2 && !keyless(cmd->argv[2])) {
      cmd->slot = rlock__key_slot(argv[1], argvlen[1]);
    }
  }
  /* Replica sync: scripts write (Java syncs its lock scripts the same
   * way); plain commands here are reads or latch clean-up. */
  cmd->sync = script != NULL && n->mode != RLOCK__URI_SINGLE;
  dispatch(cmd);
  return cmd;
}

rlock__cmd *rlock__cmd_send_to(rlock__node *node, int argc, const char **argv,
                               const size_t *argvlen, rlock__reply_cb cb,
                               void *data) {
  rlock__cmd *cmd =
      cmd_new(node->net, NULL, argc, argv, argvlen, 0, cb, data);
  if (cmd == NULL)
    return NULL;
  cmd->fixed = node;
  dispatch(cmd);
  return cmd;
}

int rlock__net_key_slot(const rlock__net *n, const char *key, size_t len) {
  return n->mode == RLOCK__URI_CLUSTER || n->per_slot
             ? rlock__key_slot(key, len)
             : -1;
}

void rlock__cmds_reroute(rlock__net *n) {
  rlock__cmd *list = n->unrouted_head;
  n->unrouted_head = n->unrouted_tail = NULL;
  while (list != NULL) {
    rlock__cmd *next = list->pending_next;
    list->pending_next = NULL;
    list->is_pending = false;
    send_now(list);
    list = next;
  }
  /* Commands queued for a node that no longer serves their slot (a
   * failover: the old master is down) go where the map says now. */
  for (rlock__node *node = n->nodes; node != NULL; node = node->next) {
    rlock__cmd **slot = &node->cmd.pending_head, *prev = NULL;
    while (*slot != NULL) {
      rlock__cmd *cmd = *slot;
      rlock__node *to = route(cmd);
      if (to == node || cmd->fixed != NULL) {
        prev = cmd;
        slot = &cmd->pending_next;
        continue;
      }
      *slot = cmd->pending_next;
      if (node->cmd.pending_tail == cmd)
        node->cmd.pending_tail = prev;
      cmd->pending_next = NULL;
      cmd->is_pending = false;
      send_now(cmd);
    }
  }
}

void rlock__cmd_abandon(rlock__cmd *cmd) {
  if (cmd == NULL)
    return;
  cmd->cb = NULL;
  if (cmd->state != RLOCK__CMD_DONE) {
    rlock__timed_stop(cmd->net->core, &cmd->timer);
    rlock__timed_stop(cmd->net->core, &cmd->redo);
    pending_remove(cmd);
    cmd->state = RLOCK__CMD_DONE;
  }
  cmd_free_if_idle(cmd);
}

/* Called at shutdown after every connection is freed: nothing is in flight
 * any more, so every record left (waiting for a retry or a connection) is
 * failed and freed. */
static void cmds_fail_all(rlock__net *n) {
  while (n->cmd_all != NULL) {
    rlock__cmd *cmd = n->cmd_all;
    cmd->inflight = 0;
    cmd->wait_inflight = 0;
    if (cmd->state != RLOCK__CMD_DONE) {
      pending_remove(cmd);
      complete(cmd, NULL, RLOCK_ECLOSED);
    } else {
      cmd_free_if_idle(cmd);
    }
  }
}

/* ---- nodes ---- */

static void node_init_conns(rlock__node *node) {
  node->cmd.net = node->net;
  node->cmd.node = node;
  node->sub.net = node->net;
  node->sub.node = node;
  node->sub.is_sub = true;
}

static rlock__node *node_new(rlock__net *n, const char *host, int port) {
  rlock__node *node = calloc(1, sizeof(*node));
  if (node == NULL)
    return NULL;
  node->net = n;
  if (host != NULL) {
    snprintf(node->host, sizeof(node->host), "%s", host);
    node->port = port;
    node->has_addr = true;
  }
  node_init_conns(node);
  node->next = n->nodes;
  n->nodes = node;
  return node;
}

rlock__node *rlock__node_get(rlock__net *n, const char *host, int port) {
  for (rlock__node *node = n->nodes; node != NULL; node = node->next)
    if (node->has_addr && node->port == port && strcmp(node->host, host) == 0)
      return node;
  rlock__node *node = node_new(n, host, port);
  if (node != NULL && n->started && !n->core->closing)
    rlock__node_start(node);
  return node;
}

void rlock__node_start(rlock__node *node) {
  if (node->cmd.state == RLOCK__CONN_DOWN && node->cmd.link == NULL &&
      !rlock__timed_active(&node->cmd.reconnect) && node->has_addr)
    conn_start(&node->cmd);
}

void rlock__node_want_sub(rlock__node *node) {
  if (node->sub_started || !node->has_addr || node->net->core->closing)
    return;
  node->sub_started = true;
  conn_start(&node->sub);
}

void rlock__node_set_addr(rlock__node *node, const char *host, int port) {
  rlock__net *n = node->net;
  bool had = node->has_addr;
  if (had && node->port == port && strcmp(node->host, host) == 0)
    return;
  snprintf(node->host, sizeof(node->host), "%s", host);
  node->port = port;
  node->has_addr = true;
  if (!had) {
    conn_start(&node->cmd);
    node->sub_started = true;
    conn_start(&node->sub);
    return;
  }
  /* Both connections go; each comes back at once, on the new address. */
  rlock__conn *conns[2] = {&node->cmd, &node->sub};
  for (int i = 0; i < 2; i++) {
    rlock__conn *c = conns[i];
    c->backoff_attempt = 0;
    rlock__timed_stop(n->core, &c->reconnect);
    if (c->link != NULL)
      conn_drop(c, RLOCK_ECONN, "the master moved (sentinel)");
    else if (i == 0 || node->sub_started)
      schedule_reconnect(c);
  }
}

static void conn_shutdown(rlock__conn *conn);

/* ---- the layer's life ---- */

void rlock__net_init(rlock__net *n, rlock__core *core, const rlock__uri *uri,
                     const char *client_name) {
  memset(n, 0, sizeof(*n));
  n->core = core;
  n->uri = uri;
  n->client_name = client_name;
  n->mode = uri->mode;
  rlock__map_init(&n->chans);
}

int rlock__net_setup(rlock__net *n, const rlock_options *o) {
  n->sharded = o->sharded_pubsub == 1;
  if (n->mode == RLOCK__URI_SINGLE) {
    n->master = node_new(n, n->uri->is_unix ? "" : n->uri->host,
                         n->uri->port);
    if (n->master == NULL) {
      rlock__set_last_error("out of memory");
      return RLOCK_ENOMEM;
    }
  } else if (n->mode == RLOCK__URI_SENTINEL) {
    n->master = node_new(n, NULL, 0); /* address from the sentinels */
    if (n->master == NULL) {
      rlock__set_last_error("out of memory");
      return RLOCK_ENOMEM;
    }
    int rc = rlock__sentinel_init(n, o);
    if (rc != 0)
      return rc;
  } else {
    int rc = rlock__cluster_init(n);
    if (rc != 0)
      return rc;
  }
  if (!n->uri->tls)
    return 0;
  return rlock__tls_ctx_new(&n->tls, o, n->uri->host);
}

void rlock__net_start(rlock__net *n) {
  n->started = true;
  if (n->mode == RLOCK__URI_CLUSTER) {
    rlock__cluster_start(n);
    return;
  }
  if (n->mode == RLOCK__URI_SENTINEL) {
    rlock__sentinel_start(n);
    return;
  }
  n->master->sub_started = true;
  if (conn_start(&n->master->cmd) != 0 || conn_start(&n->master->sub) != 0)
    n->on_open_progress(n, RLOCK_ECONN, "could not create a connection");
}

bool rlock__net_cmd_connected(const rlock__net *n) {
  for (const rlock__node *node = n->nodes; node != NULL; node = node->next)
    if (node->cmd.link != NULL)
      return true;
  return false;
}

void rlock__net_close_sub(rlock__net *n) {
  for (rlock__node *node = n->nodes; node != NULL; node = node->next)
    conn_shutdown(&node->sub);
  if (n->mode == RLOCK__URI_SENTINEL)
    rlock__sentinel_free(n);
}

void rlock__net_free(rlock__net *n) {
  if (n->mode == RLOCK__URI_SENTINEL)
    rlock__sentinel_free(n);
  if (n->mode == RLOCK__URI_CLUSTER)
    rlock__cluster_free(n);
  for (rlock__node *node = n->nodes; node != NULL; node = node->next) {
    conn_shutdown(&node->sub);
    conn_shutdown(&node->cmd);
  }
  cmds_fail_all(n);
  rlock__chans_free(n);
  while (n->nodes != NULL) {
    rlock__node *node = n->nodes;
    n->nodes = node->next;
    free(node);
  }
  n->master = NULL;
  /* Sessions still closing keep OpenSSL's context alive by its own count. */
  rlock__tls_ctx_free(n->tls);
  n->tls = NULL;
}
