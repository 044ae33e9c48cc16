/* Nodes: the client's servers, each with its connection pair (one for a
 * single server or Sentinel's master, one per master of a cluster), found
 * or made by address; and the layer's life over them (init, setup, start,
 * close). */
#include <stdlib.h>
#include <string.h>

#include "net_int.h"

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
  node->replicas_role = -1;
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

void rlock__node_addr(const rlock__node *node, char *buf, size_t n) {
  const rlock__uri *u = node->net->uri;
  /* (shortened: it goes into details of a few hundred bytes) */
  if (u->is_unix)
    snprintf(buf, n, "%.80s", u->path);
  else if (strchr(node->host, ':') != NULL)
    snprintf(buf, n, "[%.80s]:%d", node->host, node->port);
  else
    snprintf(buf, n, "%.80s:%d", node->host, node->port);
}

void rlock__node_start(rlock__node *node) {
  if (node->cmd.state == RLOCK__CONN_DOWN && node->cmd.link == NULL &&
      !rlock__timed_active(&node->cmd.reconnect) && node->has_addr)
    rlock__conn_start(&node->cmd);
}

void rlock__node_want_sub(rlock__node *node) {
  if (node->sub_started || !node->has_addr || node->net->core->closing)
    return;
  node->sub_started = true;
  rlock__conn_start(&node->sub);
}

void rlock__node_set_addr(rlock__node *node, const char *host, int port) {
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
  if (rlock__conn_start(&n->master->cmd) != 0 ||
      rlock__conn_start(&n->master->sub) != 0)
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
    rlock__conn_shutdown(&node->sub);
  if (n->mode == RLOCK__URI_SENTINEL)
    rlock__sentinel_free(n);
}

void rlock__net_free(rlock__net *n) {
  if (n->mode == RLOCK__URI_SENTINEL)
    rlock__sentinel_free(n);
  if (n->mode == RLOCK__URI_CLUSTER)
    rlock__cluster_free(n);
  for (rlock__node *node = n->nodes; node != NULL; node = node->next) {
    rlock__conn_shutdown(&node->sub);
    rlock__conn_shutdown(&node->cmd);
  }
  rlock__cmds_fail_all(n);
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

const char *rlock__node_host(const rlock__node *node) { return node->host; }

int rlock__node_port(const rlock__node *node) { return node->port; }
