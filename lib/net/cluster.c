/* Redis Cluster: the slot map and how it is kept.
 *
 * The map is read with CLUSTER SHARDS (CLUSTER SLOTS on servers without
 * it) from a node whose command connection is up: the seeds of the URI at
 * first, then any node known. It is read again every cluster_refresh_ms,
 * soon after a MOVED, and soon after any connection is lost (a failover
 * shows as a lost master). A MOVED also updates the one slot it names at
 * once, so a command never waits for the whole map.
 *
 * Open succeeds once the map is known and the pub/sub mode decided: with
 * sharded_pubsub 0 (auto) PUBSUB SHARDNUMSUB 0 is sent once, and a server
 * that knows it (Redis 7+) makes the client use SSUBSCRIBE/SPUBLISH, as
 * Java Redisson's AUTO mode does. A seed that is no cluster node fails
 * open with RLOCK_ECLUSTER.
 *
 * The rest of the net layer reaches this file only through
 * rlock__topology_cluster (net_int.h): where a command goes, what a MOVED,
 * an ASK or a TRYAGAIN means, a lost connection. */
#include <stdlib.h>
#include <string.h>

#include "net_int.h"

/* The soonest a map is read again after the previous read. */
#define REFRESH_GAP_MS 100

struct rlock__cluster {
  rlock__net *net;
  rlock__node *slots[RLOCK__SLOTS];
  bool known;      /* a map was read */
  bool use_slots;  /* CLUSTER SHARDS is unknown here: CLUSTER SLOTS */
  rlock__timed timer; /* the next read */
  rlock__cmd *reading;  /* CLUSTER SHARDS / SLOTS in flight */
  rlock__cmd *probing;  /* PUBSUB SHARDNUMSUB in flight */
  bool probed;
  int64_t last_read;
  rlock__node *next_ask; /* round robin over the nodes */
};

static void read_map(rlock__net *n);

/* The node for host:port, found or made; a new one connects at once once
 * the layer has started. */
static rlock__node *node_at(rlock__net *n, const char *host, int port) {
  rlock__node *node = rlock__node_get(n, host, port);
  if (node != NULL && n->started && !n->core->closing)
    rlock__conn_start_cmd(node);
  return node;
}

/* ---- open ---- */

static void open_done(rlock__net *n) {
  if (n->opened)
    return;
  n->opened = true;
  /* Open counts two successes (a command and a subscriber connection in
   * standalone); a cluster is ready as a whole. */
  n->on_open_progress(n, 0, NULL);
  n->on_open_progress(n, 0, NULL);
}

static void open_fail(rlock__net *n, int err, const char *detail) {
  if (!n->opened)
    n->on_open_progress(n, err, detail);
}

static void probe_reply(rlock__net *n, redisReply *reply, int err,
                        void *data) {
  (void)data;
  rlock__cluster *c = n->cluster;
  c->probing = NULL;
  if (err != 0 && err != RLOCK_ETIMEDOUT) { /* the node went: ask another */
    read_map(n);
    return;
  }
  c->probed = true;
  /* Redis 7 answers [channel, count]; older servers refuse the
   * subcommand. No answer within command_timeout_ms, or anything but an
   * array (a proxy's own reply): plain pub/sub, which every server has. */
  n->sharded = err == 0 && reply->type == REDIS_REPLY_ARRAY;
  rlock__diag(n->core, RLOCK_DIAG_DEBUG,
              "cluster pub/sub probe (PUBSUB SHARDNUMSUB): %s",
              n->sharded ? "answered, sharded pub/sub (SSUBSCRIBE, SPUBLISH)"
                         : "not answered, plain pub/sub");
  open_done(n);
  rlock__chans_on_topology(n);
}

static void probe(rlock__net *n, rlock__node *node) {
  rlock__cluster *c = n->cluster;
  if (c->probed || c->probing != NULL)
    return;
  if (n->core->opts.sharded_pubsub != 0) {
    c->probed = true;
    open_done(n);
    return;
  }
  /* With one channel argument, as Java Redisson sends it: some services
   * (Azure Managed Redis) never answer the bare form. */
  const char *argv[3] = {"PUBSUB", "SHARDNUMSUB", "0"};
  size_t lens[3] = {6, 11, 1};
  c->probing = rlock__cmd_send_to(node, 3, argv, lens, probe_reply, NULL);
}

/* ---- reading the map ---- */

static bool node_up(const rlock__node *node) {
  return node->cmd.state == RLOCK__CONN_UP && !node->cmd.draining;
}

/* A node to ask: the next one, in turn, whose connection is up. */
static rlock__node *pick(rlock__net *n) {
  rlock__cluster *c = n->cluster;
  rlock__node *start = c->next_ask != NULL ? c->next_ask : n->nodes;
  rlock__node *node = start;
  do {
    rlock__node *next = node->next != NULL ? node->next : n->nodes;
    if (node_up(node)) {
      c->next_ask = next;
      return node;
    }
    node = next;
  } while (node != start);
  return NULL;
}

static void schedule(rlock__net *n, int64_t at) {
  rlock__cluster *c = n->cluster;
  if (n->core->closing)
    return;
  if (rlock__timed_active(&c->timer) && c->timer.at <= at)
    return;
  rlock__timed_stop(n->core, &c->timer);
  rlock__timed_start(n->core, &c->timer, at);
}

/* Diagnostics: how many slots a map read moves to another master (or
 * serves anew), before it replaces the current one; and the line said
 * after, for the first map and for every map that changed something. */
static int slots_moved(rlock__net *n, const rlock__slot_range *r, int nr) {
  rlock__cluster *c = n->cluster;
  int moved = 0, served = 0, was = 0;
  for (int s = 0; s < RLOCK__SLOTS; s++)
    was += c->slots[s] != NULL;
  for (int i = 0; i < nr; i++) {
    const rlock__node *node = n->nodes;
    while (node != NULL && !(node->has_addr && node->port == r[i].port &&
                             strcmp(node->host, r[i].host) == 0))
      node = node->next;
    for (int s = r[i].start; s <= r[i].end; s++) {
      served++;
      moved += node == NULL || c->slots[s] != node;
    }
  }
  return moved + (was > served ? was - served : 0); /* + no longer served */
}

static void diag_map(rlock__net *n, const rlock__node *asked, bool first,
                     int moved) {
  rlock__cluster *c = n->cluster;
  if (!first && moved == 0)
    return;
  int served = 0, masters = 0;
  for (int s = 0; s < RLOCK__SLOTS; s++)
    served += c->slots[s] != NULL;
  for (const rlock__node *node = n->nodes; node != NULL; node = node->next)
    for (int s = 0; s < RLOCK__SLOTS; s++)
      if (c->slots[s] == node) {
        masters++;
        break;
      }
  char from[100];
  rlock__node_addr(asked, from, sizeof(from));
  if (first)
    rlock__diag(n->core, RLOCK_DIAG_INFO,
                "cluster slot map from %s: %d masters serve %d slots", from,
                masters, served);
  else
    rlock__diag(n->core, RLOCK_DIAG_INFO,
                "cluster slot map from %s changed: %d slots moved, %d "
                "masters serve %d slots",
                from, moved, masters, served);
}

/* A master's own count of its connected replicas, asked again at each read
 * of the map while the map lists none for it (node.h, replicas_role). */
static void role_reply(rlock__net *n, redisReply *reply, int err,
                       void *data) {
  (void)n;
  rlock__node *node = data;
  node->role_cmd = NULL;
  int replicas = 0;
  if (err == 0)
    node->replicas_role =
        rlock__parse_role(reply, &replicas) == 1 ? replicas : 0;
}

static void ask_role(rlock__node *node) {
  if (node->role_cmd != NULL || node->cmd.state != RLOCK__CONN_UP ||
      !node->net->core->opts.replica_sync)
    return;
  const char *argv[1] = {"ROLE"};
  size_t lens[1] = {4};
  node->role_cmd = rlock__cmd_send_to(node, 1, argv, lens, role_reply, node);
}

static void map_reply(rlock__net *n, redisReply *reply, int err, void *data) {
  rlock__node *asked = data;
  rlock__cluster *c = n->cluster;
  c->reading = NULL;
  if (err != 0) {
    /* That node went away: another is asked (when one is up). */
    schedule(n, rlock__now_ms() + REFRESH_GAP_MS);
    return;
  }
  char detail[600];
  if (reply->type == REDIS_REPLY_ERROR) {
    /* Redis before 7.0 has no CLUSTER SHARDS; an ACL user may be denied
     * it (NOPERM) and still be allowed CLUSTER SLOTS, which tells the
     * same for a client that reads only masters. */
    if (!c->use_slots && (strstr(reply->str, "unknown subcommand") != NULL ||
                          strstr(reply->str, "Unknown subcommand") != NULL ||
                          strncmp(reply->str, "NOPERM", 6) == 0)) {
      c->use_slots = true;
      read_map(n);
      return;
    }
    snprintf(detail, sizeof(detail),
             "%s:%d is not a usable cluster node (%s): %.*s", asked->host,
             asked->port, c->use_slots ? "CLUSTER SLOTS" : "CLUSTER SHARDS",
             (int)(reply->len > 200 ? 200 : reply->len), reply->str);
    open_fail(n, RLOCK_ECLUSTER, detail);
    rlock__diag(n->core, RLOCK_DIAG_WARN, "cluster: %s", detail);
    schedule(n, rlock__now_ms() + n->core->opts.retry_interval_ms);
    return;
  }
  rlock__slot_range *r = NULL;
  char why[200];
  int nr = c->use_slots
               ? rlock__parse_cluster_slots(reply, asked->host, &r, why,
                                            sizeof(why))
               : rlock__parse_cluster_shards(reply, n->uri->tls, asked->host,
                                             &r, why, sizeof(why));
  if (nr <= 0) {
    if (nr == 0)
      snprintf(why, sizeof(why), "no slot is served (CLUSTERDOWN)");
    snprintf(detail, sizeof(detail), "the slot map from %s:%d: %s",
             asked->host, asked->port, why);
    free(r);
    open_fail(n, nr == 0 ? RLOCK_ECLUSTER : RLOCK_EPROTO, detail);
    rlock__diag(n->core, RLOCK_DIAG_WARN, "cluster: %s", detail);
    schedule(n, rlock__now_ms() + n->core->opts.retry_interval_ms);
    return;
  }
  bool first = !c->known;
  int moved = rlock__diag_on(n->core) ? slots_moved(n, r, nr) : 0;
  /* The new map replaces the old one whole: a slot it does not list is
   * not served (commands for it meet CLUSTERDOWN somewhere and wait). */
  memset(c->slots, 0, sizeof(c->slots));
  for (int i = 0; i < nr; i++) {
    rlock__node *node = node_at(n, r[i].host, r[i].port);
    if (node == NULL)
      continue; /* out of memory: those slots stay unknown */
    node->replicas = r[i].replicas_online;
    node->replicas_listed = r[i].replicas;
    if (r[i].replicas == 0)
      ask_role(node);
    for (int s = r[i].start; s <= r[i].end; s++)
      c->slots[s] = node;
  }
  free(r);
  if (rlock__diag_on(n->core))
    diag_map(n, asked, first, moved);
  c->known = true;
  rlock__cmds_reroute(n);
  rlock__chans_on_topology(n);
  probe(n, asked);
  schedule(n, rlock__now_ms() + n->core->opts.cluster_refresh_ms);
}

static void read_map(rlock__net *n) {
  rlock__cluster *c = n->cluster;
  if (c->reading != NULL || n->core->closing)
    return;
  rlock__node *node = pick(n);
  if (node == NULL)
    return; /* the next connection up asks (progress) */
  c->last_read = rlock__now_ms();
  const char *argv[2] = {"CLUSTER", c->use_slots ? "SLOTS" : "SHARDS"};
  size_t lens[2] = {7, strlen(argv[1])};
  c->reading = rlock__cmd_send_to(node, 2, argv, lens, map_reply, node);
  if (c->reading == NULL)
    schedule(n, rlock__now_ms() + REFRESH_GAP_MS);
}

static void timer_fire(rlock__timed *t) {
  read_map(RLOCK__CONTAINER_OF(t, rlock__cluster, timer)->net);
}

/* ---- what the rest of the net layer asks (rlock__topology) ---- */

/* The node that serves `slot`, or NULL while the map is unknown. */
static rlock__node *route(rlock__net *n, int slot) {
  rlock__cluster *c = n->cluster;
  if (c == NULL || !c->known)
    return NULL;
  if (slot >= 0 && slot < RLOCK__SLOTS && c->slots[slot] != NULL)
    return c->slots[slot];
  /* No key, or a slot nobody serves: any node (it answers CLUSTERDOWN for
   * the latter, which is retried within the command's deadline). */
  for (rlock__node *node = n->nodes; node != NULL; node = node->next)
    if (node_up(node))
      return node;
  return n->nodes;
}

static size_t masters(rlock__net *n, rlock__node **out, size_t max) {
  rlock__cluster *c = n->cluster;
  if (c == NULL || !c->known)
    return 0;
  /* A master's slots are mostly one range: compare with the ones seen. */
  size_t found = 0;
  rlock__node *last = NULL;
  for (int s = 0; s < RLOCK__SLOTS; s++) {
    rlock__node *node = c->slots[s];
    if (node == NULL || node == last)
      continue;
    last = node;
    bool seen = false;
    for (size_t i = 0; i < found && i < max && !seen; i++)
      seen = out[i] == node;
    if (seen)
      continue;
    if (found < max)
      out[found] = node;
    found++;
  }
  return found;
}

/* Read the slot map again soon (a MOVED, a lost node, TRYAGAIN...). */
static void refresh_soon(rlock__net *n) {
  rlock__cluster *c = n->cluster;
  if (c == NULL)
    return;
  int64_t at = c->last_read + REFRESH_GAP_MS;
  int64_t now = rlock__now_ms();
  schedule(n, at > now ? at : now);
}

static void not_now(rlock__net *n, const redisReply *r) {
  (void)r;
  refresh_soon(n);
}

/* A MOVED said slot is served by node. */
static void moved(rlock__net *n, int slot, rlock__node *node) {
  rlock__cluster *c = n->cluster;
  if (c == NULL || slot < 0 || slot >= RLOCK__SLOTS)
    return;
  c->slots[slot] = node;
  refresh_soon(n);
}

/* MOVED: the slot is the named node's from now on (the map is read again
 * soon for the rest); ASK: this one command goes there. */
static int redirect(rlock__net *n, const redisReply *r,
                    const rlock__node *answered, rlock__node **to) {
  char host[RLOCK__HOST_MAX];
  int slot = -1, port = 0;
  int kind = rlock__parse_redirect(r->str, (size_t)r->len, &slot, host,
                                   sizeof(host), &port);
  if (kind == 0)
    return 0;
  if (host[0] == '\0') /* "the node you asked", by its address */
    snprintf(host, sizeof(host), "%s", answered != NULL ? answered->host : "");
  rlock__node *node = node_at(n, host, port);
  if (node == NULL)
    return -1;
  if (kind == 1)
    moved(n, slot, node);
  *to = node;
  return kind;
}

/* A channel's slot is served elsewhere (MOVED: there now), or is moving
 * (TRYAGAIN...: once the map says where). */
static int sub_refused(rlock__net *n, const redisReply *r) {
  char host[RLOCK__HOST_MAX];
  int slot, port;
  if (rlock__parse_redirect(r->str, (size_t)r->len, &slot, host, sizeof(host),
                            &port) == 1) {
    rlock__node *to = node_at(n, host, port);
    if (to != NULL) {
      moved(n, slot, to);
      return 1;
    }
  }
  if (strncmp(r->str, "TRYAGAIN", 8) == 0 ||
      strncmp(r->str, "CLUSTERDOWN", 11) == 0 ||
      strncmp(r->str, "ASK", 3) == 0) {
    refresh_soon(n);
    return 2;
  }
  return 0;
}

/* A connection of node answered its handshake (err 0) or failed. */
static void progress(rlock__conn *conn, int err, const char *detail) {
  rlock__node *node = conn->node;
  rlock__net *n = node->net;
  rlock__cluster *c = n->cluster;
  if (err == 0) {
    if (!node->cmd.draining && node->cmd.state == RLOCK__CONN_UP &&
        (!c->known || !c->probed))
      read_map(n);
    return;
  }
  if (n->opened || c->known || !node->seed)
    return;
  /* Open fails when every seed has failed once without a map. */
  node->seed_failures++;
  for (rlock__node *s = n->nodes; s != NULL; s = s->next)
    if (s->seed && s->seed_failures == 0)
      return;
  open_fail(n, err, detail);
}

static int setup(rlock__net *n, const rlock_options *o) {
  (void)o;
  n->cluster = calloc(1, sizeof(*n->cluster));
  if (n->cluster == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  n->cluster->net = n;
  n->cluster->timer.fire = timer_fire;
  /* Seeds in the URI's order (the list is built by prepending). */
  for (size_t i = n->uri->naddrs; i-- > 0;) {
    rlock__node *node =
        rlock__node_get(n, n->uri->addrs[i].host, n->uri->addrs[i].port);
    if (node == NULL) {
      rlock__set_last_error("out of memory");
      return RLOCK_ENOMEM;
    }
    node->seed = true;
  }
  n->cluster->next_ask = n->nodes;
  return 0;
}

static void start(rlock__net *n) {
  for (rlock__node *node = n->nodes; node != NULL; node = node->next)
    rlock__conn_start_cmd(node);
}

static void cluster_free(rlock__net *n) {
  rlock__cluster *c = n->cluster;
  if (c == NULL)
    return;
  rlock__timed_stop(n->core, &c->timer);
  rlock__cmd_abandon(c->reading);
  rlock__cmd_abandon(c->probing);
  free(c);
  n->cluster = NULL;
}

const rlock__topology rlock__topology_cluster = {
    .name = "cluster",
    .slot_routed = true,
    .replicated = true,
    .replicas_by_role = true,
    .setup = setup,
    .start = start,
    .free = cluster_free,
    .route = route,
    .masters = masters,
    .progress = progress,
    .lost = refresh_soon,
    .redirect = redirect,
    .not_now = not_now,
    .sub_refused = sub_refused,
    .sub_dropped = refresh_soon,
};
