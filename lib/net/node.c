/* Nodes: the client's servers, found or made by address - one for a single
 * server or Sentinel's master, one per master of a cluster - each with its
 * connection pair (conn.c starts them). */
#include <stdlib.h>
#include <string.h>

#include "net_int.h"

rlock__node *rlock__node_new(rlock__net *n, const char *host, int port) {
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
  node->cmd.net = n;
  node->cmd.node = node;
  node->sub.net = n;
  node->sub.node = node;
  node->sub.is_sub = true;
  node->next = n->nodes;
  n->nodes = node;
  return node;
}

rlock__node *rlock__node_get(rlock__net *n, const char *host, int port) {
  for (rlock__node *node = n->nodes; node != NULL; node = node->next)
    if (node->has_addr && node->port == port && strcmp(node->host, host) == 0)
      return node;
  return rlock__node_new(n, host, port);
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

const char *rlock__node_host(const rlock__node *node) { return node->host; }

int rlock__node_port(const rlock__node *node) { return node->port; }
