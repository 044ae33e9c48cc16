/* Connection life: the two connections of a node (commands, subscriber):
 * connect, handshake and capability probes, reconnect with back-off, drop.
 * Command records and their routing are cmd.c's; the nodes, node.c's;
 * what the deployment adds (Sentinel's ROLE check, the cluster's slots),
 * the rlock__topology's, asked through its hooks.
 *
 * Each connection is a link (link.c: rlock's own libuv stream, TLS, hiredis
 * as codec). rlock matches every reply to its request itself: each
 * connection keeps a FIFO of what the replies still to come answer
 * (handshake steps, command records). On the command connection a reply
 * that nothing waits for is a protocol violation and drops the connection
 * (any peer can send one: something that is not Redis, a broken proxy); on
 * the subscriber connection, once the handshake is answered, every reply
 * goes to pubsub.c. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net_int.h"

static const char *const exp_names[] = {
    "AUTH", "SELECT", "CLIENT SETNAME", "ROLE", "PING", "a command",
    "ASKING", "WAIT", "a probe", "SCRIPT LOAD"};

struct rlock__expect {
  int kind;
  rlock__cmd *cmd; /* EXP_CMD, EXP_WAIT */
  uint32_t seq;    /* EXP_WAIT: the send it follows; EXP_PROBE: which */
};

/* ---- the FIFO of expected replies (a ring) ---- */

/* The handshake's order (rlock__conn_start): AUTH, SELECT, CLIENT SETNAME,
 * ROLE, the first PING (seq 1), the probes, the last PING; then whatever
 * follows it (commands, ASKING, WAIT: HS_AFTER). The FIFO's asserts check
 * that its entries are pushed, and answered, in that order. */
enum { HS_AFTER = 7 };

static int hs_rank(int kind, uint32_t seq) {
  switch (kind) {
  case EXP_AUTH:
    return 0;
  case EXP_SELECT:
    return 1;
  case EXP_SETNAME:
    return 2;
  case EXP_ROLE:
    return 3;
  case EXP_PING:
    return seq == 1 ? 4 : 6;
  case EXP_PROBE:
    return 5;
  default:
    return HS_AFTER;
  }
}

static bool exp_reserve(rlock__conn *conn) {
  assert(conn->exp_len <= conn->exp_cap);
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
  assert(conn->exp_len < conn->exp_cap); /* exp_reserve made room */
  /* A command's reply and WAIT's name their record; nothing else does. */
  assert((kind == EXP_CMD || kind == EXP_WAIT) == (cmd != NULL));
  /* The handshake goes first, in its order, while connecting. */
  int rank = hs_rank(kind, seq);
  assert(rank >= conn->hs_pushed);
  assert(rank == HS_AFTER || conn->state == RLOCK__CONN_CONNECTING);
  conn->hs_pushed = rank;
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
  assert(conn->exp != NULL && conn->exp_head < conn->exp_cap);
  *out = conn->exp[conn->exp_head];
  conn->exp_head = (conn->exp_head + 1) % conn->exp_cap;
  conn->exp_len--;
  return true;
}

/* ---- texts for details ---- */

static void peer_name(const rlock__conn *conn, char *buf, size_t n) {
  rlock__node_addr(conn->node, buf, n);
}

/* A handshake's outcome: the deployment tells open (a single server's
 * two connections, Sentinel's master, or the cluster's discovery). */
static void progress(rlock__conn *conn, int err, const char *detail) {
  conn->net->topo->progress(conn, err, detail);
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

/* ---- diagnostics (rlock_options.on_diag) ---- */

static const char *conn_role(const rlock__conn *conn) {
  return conn->is_sub ? "pub/sub" : "commands";
}

/* A connection went (was_up) or an attempt failed, and the next attempt
 * is scheduled. The first failed attempt of a series (at open, or the
 * immediate one after a loss: it gives the outage's cause) is a warning;
 * the attempts that follow it while the server stays away are DEBUG (a
 * dead cluster node is retried until close). */
static void diag_lost(const rlock__conn *conn, bool was_up, int err,
                      const char *detail) {
  rlock__core *core = conn->net->core;
  char peer[100];
  peer_name(conn, peer, sizeof(peer));
  int64_t in = conn->reconnect.at - rlock__now_ms();
  const char *code =
      err == RLOCK__NOT_MASTER ? "not the master" : rlock_err_name(err);
  if (was_up) {
    rlock__diag(core, err == RLOCK_EPROTO ? RLOCK_DIAG_ERROR : RLOCK_DIAG_WARN,
                "lost connection to %s (%s): %s: %s; reconnecting in %lld ms",
                peer, conn_role(conn), code, detail != NULL ? detail : "",
                (long long)(in > 0 ? in : 0));
    return;
  }
  /* The attempt that failed: the count was raised for the next one, and
   * after a loss the attempts count from the first reconnect. */
  int failed = conn->backoff_attempt - (conn->ever_up ? 1 : 0);
  rlock__diag(core,
              err == RLOCK_EPROTO ? RLOCK_DIAG_ERROR
              : failed <= 1       ? RLOCK_DIAG_WARN
                                  : RLOCK_DIAG_DEBUG,
              "cannot connect to %s (%s): %s: %s; attempt %d, next in %lld "
              "ms",
              peer, conn_role(conn), code, detail != NULL ? detail : "",
              failed, (long long)(in > 0 ? in : 0));
}

static const char *cap_text(int cap) {
  return cap > 0 ? "yes" : cap < 0 ? "no" : "not probed";
}

/* The connection is up: connected or reconnected, and (command connection)
 * what its capability probes found. */
static void diag_up(const rlock__conn *conn) {
  rlock__net *n = conn->net;
  const rlock__node *node = conn->node;
  char peer[100];
  peer_name(conn, peer, sizeof(peer));
  if (conn->ever_up)
    rlock__diag(n->core, RLOCK_DIAG_INFO, "reconnected to %s (%s), attempt %d",
                peer, conn_role(conn), conn->backoff_attempt);
  else
    rlock__diag(n->core, RLOCK_DIAG_INFO, "connected to %s (%s)", peer,
                conn_role(conn));
  if (conn->is_sub)
    return;
  rlock__diag(n->core, RLOCK_DIAG_DEBUG,
              "probes on %s: CLIENT SETINFO %s, WAIT %s, WAITAOF %s, "
              "appendonly %s, cross-slot scripts %s",
              peer, cap_text(node->cap_setinfo), cap_text(node->cap_wait),
              cap_text(node->cap_waitaof), cap_text(node->aof_on),
              n->topo->slot_routed ? "not probed (a cluster)"
              : n->per_slot        ? "refused (one slot per command)"
                                   : "accepted");
}

/* ---- reconnect ---- */

static void reconnect_fire(rlock__timed *t) {
  rlock__conn_start(RLOCK__CONTAINER_OF(t, rlock__conn, reconnect));
}

/* Back-off: the first attempt at once (a killed connection usually comes back
 * straight away), then 50 ms doubling, capped at retry_interval_ms. */
void rlock__conn_schedule_reconnect(rlock__conn *conn) {
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

/* Every reply still expected on a connection that is gone fails: retried,
 * RLOCK_ECONN, or RLOCK_ECLOSED at close (rlock__cmd_reply, cmd.c).
 * conn->link is NULL by now, so whatever the callbacks send waits for the
 * next connection. */
static void fail_expected(rlock__conn *conn) {
  struct rlock__expect e;
  while (exp_pop(conn, &e))
    if (e.kind == EXP_CMD)
      rlock__cmd_reply(e.cmd, NULL);
    else if (e.kind == EXP_WAIT)
      rlock__cmd_wait_reply(e.cmd, e.seq, NULL);
  /* What the callbacks sent meanwhile waits for the next link: nothing
   * was pushed on this one. */
  assert(conn->exp_len == 0);
}

/* What the owner's on_disconnected / on_reconnected hear of a connection:
 * the cause of its last loss and the server it is (or was) connected to. */
static rlock__conn_change change_of(const rlock__conn *conn) {
  return (rlock__conn_change){.is_sub = conn->is_sub,
                              .err = conn->down_err,
                              .detail = conn->down_detail,
                              .host = conn->node->host,
                              .port = conn->node->port};
}

/* The connection is gone: conn->link is NULL (the link closes itself, or
 * was closed). */
static void conn_lost(rlock__conn *conn, int err, const char *detail) {
  rlock__net *n = conn->net;
  rlock__timed_stop(n->core, &conn->hs_timer);
  if (conn->state == RLOCK__CONN_UP) { /* told at its reconnect */
    conn->down_err = err;
    snprintf(conn->down_detail, sizeof(conn->down_detail), "%s",
             detail != NULL ? detail : rlock_strerror(err));
  }
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
  bool was_up = conn->state == RLOCK__CONN_UP;
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
    n->sub_events->disconnect(conn->node);
  /* Where is the server now? A cluster's slot map, or the sentinels,
   * may know of a failover. */
  if (n->topo->lost != NULL)
    n->topo->lost(n);
  rlock__conn_schedule_reconnect(conn);
  if (rlock__diag_on(n->core))
    diag_lost(conn, was_up, err, detail);
  if (was_up && n->on_disconnected != NULL) {
    rlock__conn_change r = change_of(conn);
    n->on_disconnected(n, &r);
  }
}

/* rlock lets go of the connection (protocol violation, failed handshake).
 * `detail` must outlive the call only. */
void rlock__conn_drop(rlock__conn *conn, int err, const char *detail) {
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
  rlock__conn_drop(conn, RLOCK_ETIMEDOUT, detail);
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
  /* Said before open hears of it, so open returns after the lines. */
  if (rlock__diag_on(n->core))
    diag_up(conn);
  conn->ever_up = true;
  conn->backoff_attempt = 0;
  progress(conn, 0, NULL);
  if (conn->was_up && n->on_reconnected != NULL) {
    rlock__conn_change r = change_of(conn);
    n->on_reconnected(n, &r);
  }
  conn->was_up = true;
  if (!conn->is_sub)
    n->on_cmd_ready(n);
}

/* Sentinel (master_by_role): ROLE must say master. A former master that a
 * failover demoted is refused: its writes would fail (READONLY) or, worse,
 * land on a server the others no longer follow. */
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
    conn->net->topo->lost(conn->net);
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

/* seq 1 marks the first PING of the handshake (see rlock__conn_start): it
 * checks the peer; only the last one, behind the probes, makes the connection
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
    rlock__conn_drop(conn, RLOCK_EPROTO, detail);
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
int rlock__conn_expect_seq(rlock__conn *conn, int kind, rlock__cmd *cmd,
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

int rlock__conn_expect(rlock__conn *conn, int kind, rlock__cmd *cmd,
                         int argc, const char **argv, const size_t *lens) {
  return rlock__conn_expect_seq(conn, kind, cmd, 0, argc, argv, lens);
}

static int handshake(rlock__conn *conn, int kind, int argc,
                     const char **argv) {
  size_t lens[3];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return rlock__conn_expect(conn, kind, NULL, argc, argv, lens);
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
 *     CROSSSLOT (rlock__cmd_reply), whatever the probe was answered. */
enum { PROBE_LIB_NAME, PROBE_LIB_VER, PROBE_WAIT, PROBE_WAITAOF,
       PROBE_AOF, PROBE_CROSSSLOT, PROBE_SCRIPT, PROBE_NAME, PROBE_ROLE };

/* The cross-slot probe, as Java Redisson's: two keys in different slots
 * (4768, 8899), read only. */
static const char crossslot_script[] =
    "redis.call('get', KEYS[1]); redis.call('get', KEYS[2]); return nil";

bool rlock__reply_unknown_command(const redisReply *r) {
  static const char text[] = "ERR unknown command";
  return r->type == REDIS_REPLY_ERROR && (size_t)r->len >= sizeof(text) - 1 &&
         strncasecmp(r->str, text, sizeof(text) - 1) == 0;
}

/* WAIT is not there: replica sync is off for this node (reported once per
 * client, the first time; the node's flag says it for each). */
void rlock__conn_wait_missing(rlock__conn *conn, const redisReply *r) {
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
  rlock__diag(n->core, RLOCK_DIAG_WARN, "%s", n->sync_report);
}

/* Turns a capability of the node off (*cap = -1) after the reply r; true
 * the first time when diagnostics are on, with the peer and the reply
 * described for the warning. */
static bool cap_off(rlock__conn *conn, int *cap, const redisReply *r,
                    char peer[100], char what[96]) {
  if (*cap < 0)
    return false;
  *cap = -1;
  if (!rlock__diag_on(conn->net->core))
    return false;
  peer_name(conn, peer, 100);
  describe_reply(r, what, 96);
  return true;
}

void rlock__conn_script_load_reply(rlock__conn *conn, const redisReply *r) {
  rlock__node *node = conn->node;
  char peer[100], what[96];
  if (r->type != REDIS_REPLY_ERROR)
    node->cap_script_load = 1;
  else if (cap_off(conn, &node->cap_script_load, r, peer, what))
    rlock__diag(conn->net->core, RLOCK_DIAG_WARN,
                "%s answered SCRIPT LOAD %s: scripts it does not have "
                "cached are sent with EVAL (grant +script to the ACL user)",
                peer, what);
}

void rlock__conn_script_load_lost(rlock__conn *conn) {
  rlock__node *node = conn->node;
  if (node->cap_script_load < 0)
    return;
  node->cap_script_load = -1;
  if (!rlock__diag_on(conn->net->core))
    return;
  char peer[100];
  peer_name(conn, peer, sizeof(peer));
  rlock__diag(conn->net->core, RLOCK_DIAG_WARN,
              "%s answered NOSCRIPT right after a SCRIPT LOAD of the same "
              "script (a proxy in front of several servers?): scripts it "
              "does not have cached are sent with EVAL",
              peer);
}

void rlock__conn_waitaof_missing(rlock__conn *conn, const redisReply *r) {
  char peer[100], what[96];
  if (cap_off(conn, &conn->node->cap_waitaof, r, peer, what))
    rlock__diag(conn->net->core, RLOCK_DIAG_WARN,
                "replica sync on %s: WAITAOF was answered %s: WAIT from now "
                "on",
                peer, what);
}

void rlock__net_crossslot_refused(rlock__net *n, const rlock__node *node) {
  if (n->per_slot)
    return;
  n->per_slot = true;
  if (!rlock__diag_on(n->core))
    return;
  char peer[100] = "the server";
  if (node != NULL)
    rlock__node_addr(node, peer, sizeof(peer));
  rlock__diag(n->core, RLOCK_DIAG_INFO,
              "%s refused a script over two slots (CROSSSLOT: a cluster "
              "behind one endpoint): multi-key commands keep to one slot "
              "each",
              peer);
}

static void probe_reply(rlock__conn *conn, int which, const redisReply *r) {
  rlock__node *node = conn->node;
  if (which == PROBE_WAIT) {
    if (rlock__reply_unknown_command(r))
      rlock__conn_wait_missing(conn, r);
    else if (r->type == REDIS_REPLY_INTEGER)
      node->cap_wait = 1;
    /* anything else (a proxy's own error, garbage): left unknown, so WAIT
     * is still sent and what it answers decides each command */
  } else if (which == PROBE_WAITAOF) {
    if (rlock__reply_unknown_command(r) &&
        conn->net->core->opts.replica_sync_mode == RLOCK_REPLICA_SYNC_WAITAOF)
      rlock__conn_waitaof_missing(conn, r); /* asked for: worth a word */
    else if (rlock__reply_unknown_command(r))
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
  } else if (which == PROBE_SCRIPT) {
    rlock__conn_script_load_reply(conn, r);
  } else if (which == PROBE_CROSSSLOT) {
    if (r->type == REDIS_REPLY_ERROR && r->len >= 9 &&
        strncmp(r->str, "CROSSSLOT", 9) == 0)
      rlock__net_crossslot_refused(conn->net, conn->node);
  } else if (which == PROBE_LIB_NAME && !conn->is_sub) {
    node->cap_setinfo = r->type == REDIS_REPLY_STATUS ? 1 : -1;
  } else if (which == PROBE_ROLE) {
    /* A replica, a refusal (an ACL without +role), garbage: none known
     * beyond the map's. The commands it held back go now. */
    int replicas = 0;
    node->replicas_role = rlock__parse_role(r, &replicas) == 1 ? replicas : 0;
    node->role_asked = false;
    rlock__cmds_send_pending(&conn->pending_head, &conn->pending_tail);
  }
}

static int probe(rlock__conn *conn, int which, int argc, const char **argv) {
  size_t lens[5];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return rlock__conn_expect_seq(conn, EXP_PROBE, NULL, (uint32_t)which, argc,
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
  if (rc == 0 && n->client_name == NULL && n->auto_name != NULL) {
    /* the automatic name: its answer (even a refusal) is not checked */
    const char *name[3] = {"CLIENT", "SETNAME", n->auto_name};
    rc = probe(conn, PROBE_NAME, 3, name);
  }
  if (rc == 0 && !conn->is_sub && n->topo->replicated &&
      n->core->opts.replica_sync) {
    const char *w[4] = {"WAIT", "0", "0"};
    rc = probe(conn, PROBE_WAIT, 3, w);
    if (rc == 0 && n->topo->replicas_by_role) {
      /* how many replicas this master has connected (node.h) */
      const char *role[1] = {"ROLE"};
      rc = probe(conn, PROBE_ROLE, 1, role);
      conn->node->role_asked = rc == 0;
    }
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
  if (rc == 0 && !conn->is_sub) {
    /* Whether SCRIPT LOAD is allowed (an ACL may refuse +script): scripts
     * are loaded with it after a NOSCRIPT, and run with EVALSHA (cmd.c). */
    const char *l[3] = {"SCRIPT", "LOAD", "return 1"};
    rc = probe(conn, PROBE_SCRIPT, 3, l);
  }
  if (rc == 0 && !conn->is_sub && !n->topo->slot_routed && !n->per_slot) {
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
        n->sub_events->reply(conn->node, reply);
      return;
    }
    char peer[100], what[96], detail[256];
    peer_name(conn, peer, sizeof(peer));
    describe_reply(reply, what, sizeof(what));
    snprintf(detail, sizeof(detail),
             "unsolicited reply from %s: %s (not a Redis server?)", peer,
             what);
    rlock__conn_drop(conn, RLOCK_EPROTO, detail);
    return;
  }
  /* Replies come in the order of the requests: the handshake's first, in
   * its order, while connecting (the last PING makes the connection up). */
  int rank = hs_rank(e.kind, e.seq);
  assert(rank >= conn->hs_answered);
  assert(rank == HS_AFTER || conn->state == RLOCK__CONN_CONNECTING);
  conn->hs_answered = rank;
  if (e.kind == EXP_CMD) {
    conn->net->reply_link = conn->link;
    rlock__cmd_reply(e.cmd, reply);
    conn->net->reply_link = NULL;
  } else if (e.kind == EXP_WAIT) {
    rlock__cmd_wait_reply(e.cmd, e.seq, reply);
  } else if (e.kind == EXP_PROBE) {
    probe_reply(conn, (int)e.seq, reply);
  } else if (e.kind == EXP_LOAD) {
    rlock__conn_script_load_reply(conn, reply);
  } else {
    hs_reply(conn, e.kind, e.seq, reply);
  }
}

/* A reply on the link; any handler may drop the connection. */
static void link_reply(rlock__link *l, redisReply *r) {
  rlock__conn *conn = rlock__link_data(l);
  on_reply(conn, r);
  if (conn->link == l && conn->draining && conn->exp_len == 0)
    rlock__conn_drop(conn, conn->hs_err, conn->hs_detail);
}

static const rlock__link_ops link_ops = {link_up, link_reply, link_down};

int rlock__conn_start(rlock__conn *conn) {
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
    rlock__conn_schedule_reconnect(conn);
    return RLOCK_ENOMEM;
  }
  conn->state = RLOCK__CONN_CONNECTING;
  conn->draining = false;
  /* A new link starts with nothing expected (the last one's entries were
   * failed when it went). */
  assert(conn->exp_len == 0);
  conn->hs_pushed = conn->hs_answered = 0;
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
  if (rc == 0 && n->topo->master_by_role) {
    argv[0] = "ROLE";
    rc = handshake(conn, EXP_ROLE, 1, argv);
  }
  if (!conn->is_sub) {
    conn->node->role_asked = false; /* probes_send asks again */
    conn->node->cap_wait = 0;
    conn->node->cap_setinfo = 0;
    conn->node->cap_waitaof = 0;
    conn->node->cap_script_load = 0;
    conn->node->aof_on = 0;
  }
  /* A PING before the probes too: whatever the probes are answered never
   * fails the handshake, so a peer that is not Redis (one that greets with
   * replies nobody asked for, say) must meet a step that checks its answer
   * before them - that PING's reply must be +PONG. */
  static const size_t ping_len[1] = {4};
  argv[0] = "PING";
  if (rc == 0)
    rc = rlock__conn_expect_seq(conn, EXP_PING, NULL, 1, 1, argv, ping_len);
  if (rc == 0)
    rc = probes_send(conn);
  if (rc == 0) {
    argv[0] = "PING";
    rc = handshake(conn, EXP_PING, 1, argv);
  }
  if (rc != 0) {
    /* Out of memory: a handshake with a step missing is no use. */
    rlock__conn_drop(conn, rc, "out of memory");
    return rc;
  }

  if (conn->is_sub) {
    n->sub_events->connect(conn->node);
  } else {
    rlock__cmds_send_pending(&conn->pending_head, &conn->pending_tail);
  }
  return 0;
}

void rlock__conn_start_cmd(rlock__node *node) {
  if (node->cmd.state == RLOCK__CONN_DOWN && node->cmd.link == NULL &&
      !rlock__timed_active(&node->cmd.reconnect) && node->has_addr)
    rlock__conn_start(&node->cmd);
}

void rlock__conn_want_sub(rlock__node *node) {
  if (node->sub_started || !node->has_addr || node->net->core->closing)
    return;
  node->sub_started = true;
  rlock__conn_start(&node->sub);
}

void rlock__conn_move(rlock__node *node, const char *host, int port) {
  rlock__net *n = node->net;
  bool had = node->has_addr;
  if (had && node->port == port && strcmp(node->host, host) == 0)
    return;
  if (!had) {
    snprintf(node->host, sizeof(node->host), "%s", host);
    node->port = port;
    node->has_addr = true;
    rlock__conn_start(&node->cmd);
    node->sub_started = true;
    rlock__conn_start(&node->sub);
    return;
  }
  /* Both connections go; each comes back at once (a timer: after this
   * returns), on the new address - set after the drops, so that what they
   * report (diagnostics) names the server that was left. */
  rlock__conn *conns[2] = {&node->cmd, &node->sub};
  for (int i = 0; i < 2; i++) {
    rlock__conn *c = conns[i];
    c->backoff_attempt = 0;
    rlock__timed_stop(n->core, &c->reconnect);
    if (c->link != NULL)
      rlock__conn_drop(c, RLOCK_ECONN, "the master moved (sentinel)");
    else if (i == 0 || node->sub_started)
      rlock__conn_schedule_reconnect(c);
  }
  snprintf(node->host, sizeof(node->host), "%s", host);
  node->port = port;
}

void rlock__conn_shutdown(rlock__conn *conn) {
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

