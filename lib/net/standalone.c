/* The default deployment: one server, the master, at the URI's address
 * (or unix socket). Commands and channels all go to it; its errors are
 * answers (no redirect, nothing to wait for); open succeeds when both of
 * its connections are up. Sentinel's master is one such node too (its
 * address from the sentinels): sentinel.c shares the functions below. */
#include "net_int.h"

int rlock__standalone_setup_master(rlock__net *n, const char *host, int port) {
  n->master = rlock__node_new(n, host, port);
  if (n->master == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  return 0;
}

static int setup(rlock__net *n, const rlock_options *o) {
  (void)o;
  return rlock__standalone_setup_master(n, n->uri->is_unix ? "" : n->uri->host,
                                        n->uri->port);
}

static void start(rlock__net *n) {
  n->master->sub_started = true;
  if (rlock__conn_start(&n->master->cmd) != 0 ||
      rlock__conn_start(&n->master->sub) != 0)
    n->on_open_progress(n, RLOCK_ECONN, "could not create a connection");
}

rlock__node *rlock__standalone_route(rlock__net *n, int slot) {
  (void)slot;
  return n->master;
}

size_t rlock__standalone_masters(rlock__net *n, rlock__node **out, size_t max) {
  if (max > 0)
    out[0] = n->master;
  return 1;
}

/* Open hears of every handshake; it succeeds after two successes (the
 * command and the subscriber connection). */
void rlock__standalone_progress(rlock__conn *conn, int err,
                                const char *detail) {
  rlock__net *n = conn->net;
  n->on_open_progress(n, err, detail);
  if (err == 0 && n->master->cmd.state == RLOCK__CONN_UP &&
      n->master->sub.state == RLOCK__CONN_UP)
    n->opened = true;
}

const rlock__topology rlock__topology_standalone = {
    .name = "standalone",
    .setup = setup,
    .start = start,
    .route = rlock__standalone_route,
    .masters = rlock__standalone_masters,
    .progress = rlock__standalone_progress,
};
