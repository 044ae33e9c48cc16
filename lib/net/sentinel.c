/* Redis Sentinel: which server is the master, and following it.
 *
 * One link at a time to one sentinel of the URI, in turn: AUTH (with the
 * sentinel_* options), SENTINEL GET-MASTER-ADDR-BY-NAME, SENTINEL REPLICAS
 * (the replicas replica sync counts: conn.c, wait_count), then SUBSCRIBE
 * +switch-master, pipelined. The answer gives the master node its address
 * (its connections then start, or move there); every +switch-master about
 * our master moves them again, and a fresh link reads the new master's
 * replica list. The master's own handshake checks ROLE
 * (conn.c): a server that is no longer the master makes the sentinels be
 * asked again, as does any lost connection to the master - a subscribed
 * link cannot be asked, so asking again means a fresh link (at most one
 * per REQUERY_GAP_MS).
 *
 * Open fails when every sentinel has been tried once without an answer:
 * with the last error (RLOCK_ECONN, RLOCK_EAUTH, ...) and, when the
 * sentinels answered but know no such master, a sentence naming it.
 *
 * The master is a node as a single server's is (standalone.c); the rest
 * of the net layer reaches this file only through rlock__topology_sentinel
 * (net_int.h): a lost connection, a READONLY, a handshake's ROLE. */
#include <stdlib.h>
#include <string.h>

#include "link.h"
#include "net_int.h"

#define REQUERY_GAP_MS 250

enum { Q_AUTH, Q_MASTER, Q_REPLICAS, Q_SUBSCRIBE, Q_KINDS };

struct rlock__sentinel {
  rlock__net *net;
  char *user, *password; /* the sentinels' own credentials, or NULL */
  size_t at;             /* the sentinel asked (index in the URI) */
  rlock__link *link;
  int q[Q_KINDS];        /* replies still to come, in order */
  int q_head, q_len;
  bool subscribed;
  char found_host[RLOCK__HOST_MAX]; /* GET-MASTER-ADDR's answer, until */
  int found_port;                   /* SENTINEL REPLICAS's (0: none) */
  rlock__timed retry;    /* the next link */
  rlock__timed role;     /* the next ROLE to the master */
  rlock__cmd *role_cmd;  /* in flight */
  int64_t last_link;     /* when the current link was opened */
  int tried;             /* sentinels tried in this round without answer */
  int attempt;           /* back-off after full rounds */
  int last_err;
  char last_detail[300];
};

static void connect_next(rlock__sentinel *s);
static void requery(rlock__net *n);

static void peer(const rlock__sentinel *s, char *buf, size_t n) {
  const rlock__uri_addr *a = &s->net->uri->addrs[s->at];
  snprintf(buf, n, strchr(a->host, ':') != NULL ? "[%s]:%d" : "%s:%d",
           a->host, a->port);
}

static void drop_link(rlock__sentinel *s) {
  if (s->link != NULL) {
    rlock__link_close(s->link);
    s->link = NULL;
  }
  s->q_len = 0;
  s->subscribed = false;
  s->found_port = 0;
}

/* This sentinel gave no answer: the next one, or - after a whole round -
 * a pause (and open hears why). */
static void failed(rlock__sentinel *s, int err, const char *detail) {
  rlock__net *n = s->net;
  drop_link(s);
  s->last_err = err;
  /* Cut to fit, with a bound gcc can see (-Wformat-truncation at -O3). */
  snprintf(s->last_detail, sizeof(s->last_detail), "%.*s",
           (int)sizeof(s->last_detail) - 1, detail);
  s->at = (s->at + 1) % n->uri->naddrs;
  if (!n->core->closing)
    rlock__diag(n->core, RLOCK_DIAG_WARN, "%s; asking the next sentinel",
                detail);
  int64_t delay = 0;
  if (++s->tried >= (int)n->uri->naddrs) {
    s->tried = 0;
    if (!n->opened)
      n->on_open_progress(n, err, detail);
    int shift = s->attempt > 5 ? 5 : s->attempt;
    s->attempt++;
    delay = (int64_t)100 << shift;
    if (delay > n->core->opts.retry_interval_ms)
      delay = n->core->opts.retry_interval_ms;
  }
  if (!n->core->closing)
    rlock__timed_start(n->core, &s->retry, rlock__now_ms() + delay);
}

/* `how`: what told us (for diagnostics). */
static void on_master(rlock__sentinel *s, const char *host, int port,
                      const char *how) {
  rlock__net *n = s->net;
  s->tried = 0;
  s->attempt = 0;
  rlock__node *m = n->master;
  if (rlock__diag_on(n->core) &&
      (!m->has_addr || m->port != port || strcmp(m->host, host) != 0)) {
    char who[300], was[100] = "", to[100];
    peer(s, who, sizeof(who));
    if (m->has_addr)
      rlock__node_addr(m, was, sizeof(was));
    snprintf(to, sizeof(to), strchr(host, ':') != NULL ? "[%.80s]:%d"
                                                        : "%.80s:%d",
             host, port);
    rlock__diag(n->core, RLOCK_DIAG_INFO,
                "sentinel %s: master '%s' %s%s%s%s (%s)", who, n->uri->master,
                m->has_addr ? "moved from " : "is at ", was,
                m->has_addr ? " to " : "", to, how);
  }
  rlock__conn_move(m, host, port);
}

static void handle(rlock__sentinel *s, int kind, const redisReply *r) {
  char who[300], detail[700];
  peer(s, who, sizeof(who));
  if (kind == Q_AUTH) {
    if (r->type == REDIS_REPLY_ERROR) {
      snprintf(detail, sizeof(detail), "sentinel %s refused AUTH: %.*s", who,
               (int)(r->len > 200 ? 200 : r->len), r->str);
      failed(s, RLOCK_EAUTH, detail);
    }
    return;
  }
  if (kind == Q_MASTER) {
    char host[RLOCK__HOST_MAX], why[200];
    int port = 0;
    if (r->type == REDIS_REPLY_ERROR) {
      int err = rlock__reply_error(r);
      snprintf(detail, sizeof(detail), "sentinel %s: %.*s", who,
               (int)(r->len > 200 ? 200 : r->len), r->str);
      failed(s, err == RLOCK_ESERVER ? RLOCK_EPROTO : err, detail);
      return;
    }
    int rc = rlock__parse_master_addr(r, host, sizeof(host), &port, why,
                                      sizeof(why));
    if (rc == 1) {
      /* Applied when SENTINEL REPLICAS, pipelined behind, has answered:
       * the master's first commands then know its listed replicas. */
      snprintf(s->found_host, sizeof(s->found_host), "%s", host);
      s->found_port = port;
    } else if (rc == 0) {
      snprintf(detail, sizeof(detail),
               "sentinel %s knows no master named '%s'", who,
               s->net->uri->master);
      failed(s, RLOCK_ECONN, detail);
    } else {
      snprintf(detail, sizeof(detail), "sentinel %s: %s", who, why);
      failed(s, RLOCK_EPROTO, detail);
    }
    return;
  }
  if (kind == Q_REPLICAS) {
    /* Replica sync counts these replicas even while the master has none
     * connected (cmd.c, wait_count). A sentinel that cannot say (an
     * error, a garbled reply) leaves the count as it was: the master's
     * ROLE still counts its connected ones. */
    int listed = r->type == REDIS_REPLY_ERROR
                     ? -1
                     : rlock__parse_sentinel_replicas(r, NULL, 0);
    if (listed >= 0)
      s->net->master->replicas_listed = listed;
    if (s->found_port != 0) {
      on_master(s, s->found_host, s->found_port, "GET-MASTER-ADDR-BY-NAME");
      s->found_port = 0;
    }
    return;
  }
  /* Q_SUBSCRIBE's confirmation */
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(detail, sizeof(detail), "sentinel %s refused SUBSCRIBE: %.*s",
             who, (int)(r->len > 200 ? 200 : r->len), r->str);
    failed(s, rlock__reply_error(r), detail);
    return;
  }
  s->subscribed = true;
}

static void link_reply(rlock__link *l, redisReply *r) {
  rlock__sentinel *s = rlock__link_data(l);
  if (s->q_len > 0) {
    int kind = s->q[s->q_head];
    s->q_head = (s->q_head + 1) % Q_KINDS;
    s->q_len--;
    handle(s, kind, r);
    return;
  }
  /* A message: ["message", "+switch-master", "<name> <old> <port> <new>
   * <port>"]. */
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[2]->type != REDIS_REPLY_STRING ||
      strcmp(r->element[0]->str, "message") != 0)
    return;
  char host[RLOCK__HOST_MAX];
  int port = 0;
  if (rlock__parse_switch_master(r->element[2]->str,
                                 (size_t)r->element[2]->len,
                                 s->net->uri->master, host, sizeof(host),
                                 &port) == 1) {
    on_master(s, host, port, "+switch-master");
    /* The new master's replicas are another list: read it on a fresh
     * link (a subscribed one cannot ask). */
    requery(s->net);
  }
}

static void link_up(rlock__link *l) { (void)l; }

static void link_down(rlock__link *l, int err, const char *detail) {
  rlock__sentinel *s = rlock__link_data(l);
  s->link = NULL;
  char buf[400];
  snprintf(buf, sizeof(buf), "sentinel: %s", detail);
  failed(s, err, buf);
}

static const rlock__link_ops sentinel_link_ops = {link_up, link_reply,
                                                  link_down};

static void send_q(rlock__sentinel *s, int kind, int argc, const char **argv) {
  size_t lens[4];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  if (s->link == NULL || rlock__link_send(s->link, argc, argv, lens) != 0)
    return;
  s->q[(s->q_head + s->q_len) % Q_KINDS] = kind;
  s->q_len++;
}

static void connect_next(rlock__sentinel *s) {
  rlock__net *n = s->net;
  if (n->core->closing)
    return;
  drop_link(s);
  const rlock__uri_addr *a = &n->uri->addrs[s->at];
  rlock__uri addr = {0};
  addr.host = a->host;
  addr.port = a->port;
  addr.tls = n->uri->tls;
  rlock__link_cfg cfg = {&addr, n->tls, n->core->opts.connect_timeout_ms,
                         n->core->opts.max_write_queue_bytes};
  s->last_link = rlock__now_ms();
  s->link = rlock__link_open(&n->core->loop, &cfg, &sentinel_link_ops, s);
  if (s->link == NULL) {
    failed(s, RLOCK_ENOMEM, "out of memory");
    return;
  }
  s->q_head = s->q_len = 0;
  if (s->password != NULL) {
    const char *argv[3] = {"AUTH", s->user != NULL ? s->user : s->password,
                           s->password};
    send_q(s, Q_AUTH, s->user != NULL ? 3 : 2, argv);
  }
  const char *get[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                        n->uri->master};
  send_q(s, Q_MASTER, 3, get);
  const char *reps[3] = {"SENTINEL", "REPLICAS", n->uri->master};
  send_q(s, Q_REPLICAS, 3, reps);
  const char *sub[2] = {"SUBSCRIBE", "+switch-master"};
  send_q(s, Q_SUBSCRIBE, 2, sub);
}

static void retry_fire(rlock__timed *t) {
  connect_next(RLOCK__CONTAINER_OF(t, rlock__sentinel, retry));
}

/* ---- the master's replicas ---- */

/* How many replicas the master has decides replica sync's WAIT: read at
 * every handshake (ROLE), and again every cluster_refresh_ms, so a
 * replica that attaches later is waited for too. */
static void role_reply(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)data;
  rlock__sentinel *s = n->sentinel;
  s->role_cmd = NULL;
  int replicas = 0;
  if (err == 0 && rlock__parse_role(reply, &replicas) == 1)
    n->master->replicas = replicas;
  else if (err == 0)
    requery(n); /* no longer the master */
}

static void role_fire(rlock__timed *t) {
  rlock__sentinel *s = RLOCK__CONTAINER_OF(t, rlock__sentinel, role);
  rlock__net *n = s->net;
  if (n->core->closing)
    return;
  rlock__timed_start(n->core, &s->role,
                     rlock__now_ms() + n->core->opts.cluster_refresh_ms);
  if (s->role_cmd != NULL || n->master->cmd.state != RLOCK__CONN_UP)
    return;
  const char *argv[1] = {"ROLE"};
  size_t lens[1] = {4};
  s->role_cmd = rlock__cmd_send_to(n->master, 1, argv, lens, role_reply, NULL);
}

/* ---- what the rest of the net layer asks (rlock__topology) ---- */

/* The master's connection was lost or is no master: ask again. */
static void requery(rlock__net *n) {
  rlock__sentinel *s = n->sentinel;
  if (s == NULL || n->core->closing || rlock__timed_active(&s->retry))
    return;
  int64_t at = s->last_link + REQUERY_GAP_MS;
  int64_t now = rlock__now_ms();
  rlock__timed_start(n->core, &s->retry, at > now ? at : now);
}

/* A demoted master's READONLY: the sentinels may know the new one. The
 * other refusals (LOADING, MASTERDOWN...) only wait. */
static void not_now(rlock__net *n, const redisReply *r) {
  static const char readonly[] = "READONLY";
  size_t k = sizeof(readonly) - 1;
  if ((size_t)r->len >= k && memcmp(r->str, readonly, k) == 0 &&
      ((size_t)r->len == k || r->str[k] == ' '))
    requery(n);
}

/* Open waits for a master that just died: the sentinels are asked again,
 * and open waits for the one they promote (within its bound). */
static void progress(rlock__conn *conn, int err, const char *detail) {
  if (!conn->net->opened && (err == RLOCK_ECONN || err == RLOCK_ETIMEDOUT))
    return;
  rlock__standalone_progress(conn, err, detail);
}

static char *dup_or_null(const char *v) {
  return v != NULL ? strdup(v) : NULL;
}

static int setup(rlock__net *n, const rlock_options *o) {
  /* The master: its address from the sentinels. */
  int rc = rlock__standalone_setup_master(n, NULL, 0);
  if (rc != 0)
    return rc;
  rlock__sentinel *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  s->net = n;
  s->retry.fire = retry_fire;
  s->role.fire = role_fire;
  s->user = dup_or_null(o->sentinel_user);
  s->password = dup_or_null(o->sentinel_password);
  n->sentinel = s;
  if ((o->sentinel_user != NULL && s->user == NULL) ||
      (o->sentinel_password != NULL && s->password == NULL)) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  return 0;
}

static void start(rlock__net *n) {
  rlock__sentinel *s = n->sentinel;
  connect_next(s);
  rlock__timed_start(n->core, &s->role,
                     rlock__now_ms() + n->core->opts.cluster_refresh_ms);
}

/* At close (with the subscriber connections) and again at free. */
static void sentinel_free(rlock__net *n) {
  rlock__sentinel *s = n->sentinel;
  if (s == NULL)
    return;
  rlock__timed_stop(n->core, &s->retry);
  rlock__timed_stop(n->core, &s->role);
  rlock__cmd_abandon(s->role_cmd);
  drop_link(s);
  free(s->user);
  rlock__free_secret(s->password);
  free(s);
  n->sentinel = NULL;
}

const rlock__topology rlock__topology_sentinel = {
    .name = "sentinel",
    .replicated = true,
    .master_by_role = true,
    .setup = setup,
    .start = start,
    .close = sentinel_free,
    .free = sentinel_free,
    .route = rlock__standalone_route,
    .masters = rlock__standalone_masters,
    .progress = progress,
    .lost = requery,
    .not_now = not_now,
};
