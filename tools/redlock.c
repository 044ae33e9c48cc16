/* `rlock --redlock URI,URI,... NAME -- COMMAND`: the lock NAME taken as a
 * RedLock (rlock_new_redlock, Redisson's getRedLock) over one client per
 * URI, held while COMMAND runs. run.c drives it as it drives a MultiLock
 * (the handle is an rlock * of kind "redlock"); this file parses the list,
 * checks it, and opens and closes the clients. Public API only. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The URIs, split (static: reachable until exit), and the clients after
 * the first, which run.c owns as its own client. */
static char **g_uris;
static size_t g_n;
static rlock_client **g_clients;

int cli_redlock_check(cli_run_opts *o, const char *uri_flag) {
  if (uri_flag != NULL) {
    cli_err("--redlock and -u exclude each other (--redlock names every "
            "server)");
    return CLI_EX_USAGE;
  }
  if (o->n_names > 0 || o->permits > 0 || o->kind == CLI_KIND_FENCED) {
    cli_err("--redlock and %s exclude each other (a RedLock holds one lock "
            "name on each server, without a token or permits)",
            o->n_names > 0 ? "-m" : o->permits > 0 ? "--permits" : "--fenced");
    return CLI_EX_USAGE;
  }
  size_t n = 1;
  for (const char *p = o->redlock; *p != '\0'; p++)
    n += *p == ',';
  char *copy = strdup(o->redlock);
  g_uris = calloc(n, sizeof(char *));
  if (copy == NULL || g_uris == NULL) {
    free(copy);
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  g_n = 0;
  for (char *s = copy, *e; s != NULL; s = e) {
    e = strchr(s, ',');
    if (e != NULL)
      *e++ = '\0';
    if (*s == '\0') {
      cli_err("--redlock '%s': empty URI in the list (URI,URI,...)",
              o->redlock);
      return CLI_EX_USAGE;
    }
    g_uris[g_n++] = s;
  }
  /* The --tls-* and --sentinel-* options go to every server: each URI
   * must take them (run.c's caller checks the first). */
  for (size_t i = 1; i < g_n; i++) {
    int rc = cli_tls_check(&o->tls, g_uris[i]);
    if (rc != 0)
      return rc;
  }
  o->uri = g_uris[0];
  return 0;
}

/* A server that cannot be reached at start is a member missed in every
 * round: the lock is made over the members reached (m of n) so that it
 * still needs n/2+1 of all n: a RedLock of m when its own quorum is that
 * (m/2+1 == n/2+1: one server down of 3 or of 5), a MultiLock of m when m
 * is exactly n/2+1 (all of them: one down of 2, two down of 5), else none
 * (fewer than n/2+1 reached, or seven servers or more with two or more
 * down but more than n/2+1 reached, a quorum no RedLock of m has). */
static int make_lock(rlock **m, size_t reached, rlock **rl) {
  size_t quorum = g_n / 2 + 1;
  if (reached < quorum) {
    cli_err("--redlock: %zu of %zu servers reached; a RedLock needs %zu",
            reached, g_n, quorum);
    return CLI_EX_TEMPFAIL;
  }
  int err;
  if (reached / 2 + 1 == quorum) {
    err = rlock_new_redlock(m, reached, rl);
  } else if (reached == quorum) {
    err = rlock_new_multilock(m, reached, rl);
  } else {
    cli_err("--redlock: %zu of %zu servers reached: no RedLock of %zu "
            "needs %zu of them; try again when more are up",
            reached, g_n, reached, quorum);
    return CLI_EX_TEMPFAIL;
  }
  if (err != 0) {
    cli_err_rlock(err, "--redlock");
    return cli_exit_for(err);
  }
  return 0;
}

int cli_redlock_open(const cli_run_opts *o, const rlock_options *base,
                     rlock_client **first, rlock **rl) {
  *first = NULL;
  *rl = NULL;
  g_clients = calloc(g_n, sizeof(rlock_client *));
  rlock **m = calloc(g_n, sizeof(rlock *));
  if (g_clients == NULL || m == NULL) {
    free(m);
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  int rc = 0;
  size_t reached = 0;
  for (size_t i = 0; i < g_n && rc == 0; i++) {
    rlock_options opts = *base;
    opts.uri = g_uris[i];
    rlock_client *c = NULL;
    int err = rlock_client_new(&c, &opts);
    if (err == RLOCK_ECONN || err == RLOCK_ETIMEDOUT) {
      /* down now: a missed member */
      cli_err("warning: --redlock: server %zu (%s) not reached (%s): "
              "counted as a member not taken",
              i + 1, g_uris[i], rlock_last_error());
      continue;
    }
    if (err != 0) {
      cli_err("--redlock: server %zu (%s):", i + 1, g_uris[i]);
      rc = cli_open_failed(err);
      break;
    }
    g_clients[reached] = c;
    err = cli_kind_get(c, o->kind, o->name, &m[reached]);
    reached++;
    if (err != 0) {
      cli_err_rlock(err, "invalid lock name");
      rc = cli_exit_for(err);
    }
  }
  if (rc == 0)
    rc = make_lock(m, reached, rl);
  for (size_t i = 0; i < reached; i++)
    rlock_free(m[i]); /* the lock keeps its own references */
  free(m);
  /* The first client is run.c's own (closed to interrupt a wait). */
  *first = g_clients[0];
  g_clients[0] = NULL;
  return rc;
}

void cli_redlock_close(void) {
  for (size_t i = 0; g_clients != NULL && i < g_n; i++)
    rlock_client_free(g_clients[i]);
  free(g_clients);
  g_clients = NULL;
}
