/* The net layer's life: init, setup, start, close and free, over the
 * nodes and their connections; the deployment (rlock__topology) is chosen
 * here, once, by the URI's form, and everything else asks it. */
#include <stdlib.h>
#include <string.h>

#include "net_int.h"

void rlock__net_init(rlock__net *n, rlock__core *core, const rlock__uri *uri,
                     const char *client_name) {
  memset(n, 0, sizeof(*n));
  n->core = core;
  n->uri = uri;
  n->client_name = client_name;
  switch (uri->mode) {
  case RLOCK__URI_SENTINEL:
    n->topo = &rlock__topology_sentinel;
    break;
  case RLOCK__URI_CLUSTER:
    n->topo = &rlock__topology_cluster;
    break;
  default:
    n->topo = &rlock__topology_standalone;
    break;
  }
  rlock__chans_init(n);
}

int rlock__net_setup(rlock__net *n, const rlock_options *o) {
  n->sharded = o->sharded_pubsub == 1;
  int rc = n->topo->setup(n, o);
  if (rc != 0)
    return rc;
  if (!n->uri->tls)
    return 0;
  return rlock__tls_ctx_new(&n->tls, o, n->uri->host);
}

void rlock__net_start(rlock__net *n) {
  n->started = true;
  n->topo->start(n);
}

bool rlock__net_cmd_connected(const rlock__net *n) {
  for (const rlock__node *node = n->nodes; node != NULL; node = node->next)
    if (node->cmd.link != NULL)
      return true;
  return false;
}

size_t rlock__net_masters(rlock__net *n, rlock__node **out, size_t max) {
  return n->topo->masters(n, out, max);
}

void rlock__net_close_sub(rlock__net *n) {
  for (rlock__node *node = n->nodes; node != NULL; node = node->next)
    rlock__conn_shutdown(&node->sub);
  if (n->topo->close != NULL)
    n->topo->close(n);
}

void rlock__net_free(rlock__net *n) {
  if (n->topo->free != NULL)
    n->topo->free(n);
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
