/* `rlock status NAME...` and `rlock unlock --force NAME...`.
 *
 * status reads what is in Redis with a plain synchronous connection
 * (hiredis, with the library's TLS session for rediss://; no client
 * thread, no pub/sub connection of its own, so it does not count itself
 * as a waiter): one MULTI/EXEC per name, so the
 * owners, the TTL and the waiter count are one consistent snapshot. unlock
 * goes through the library (rlock_force_unlock), which publishes the
 * unlock message that wakes a waiter, Java or C; first, unless
 * --any-type, it asks TYPE on a plain connection and leaves a NAME that
 * holds something other than a hash alone (the library's DEL would delete
 * any type, as Redisson's forceUnlock does).
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli.h"
#include "topo.h"
#include "tls.h"
#include "util.h"

#define PLAIN_TIMEOUT_MS 5000

/* ---- a plain connection ---- */

/* A synchronous connection: hiredis's socket, timeouts and reply reader,
 * and for rediss:// the library's TLS session (net/tls.h: OpenSSL over
 * memory BIOs, the same verification as the library's connections)
 * between the reader and the socket, which hiredis 0.14 cannot do. */
typedef struct pconn {
  redisContext *c;
  rlock__tls_ctx *ctx;
  rlock__tls *tls; /* NULL: plain text, hiredis does the I/O */
  char peer[280];  /* "host:port", for messages */
  char errstr[1024];
  bool tls_failed; /* errstr is a TLS failure (RLOCK_ETLS) */
  char buf[16384];
} pconn;

static const char *pconn_errstr(const pconn *p) {
  return p->tls != NULL ? p->errstr : p->c->errstr;
}

static void pconn_free(pconn *p) {
  if (p == NULL)
    return;
  if (p->c != NULL)
    redisFree(p->c);
  rlock__tls_free(p->tls);
  rlock__tls_ctx_free(p->ctx);
  free(p);
}

/* Sends the ciphertext OpenSSL has for the peer. 0, or -1 with errstr. */
static int tls_flush(pconn *p) {
  size_t n;
  while ((n = rlock__tls_take(p->tls, p->buf, sizeof p->buf)) > 0) {
    const char *at = p->buf;
    while (n > 0) {
      ssize_t w = write(p->c->fd, at, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0) {
        snprintf(p->errstr, sizeof p->errstr, "%s: %s", p->peer,
                 errno == EAGAIN || errno == EWOULDBLOCK
                     ? "timed out writing"
                     : strerror(errno));
        return -1;
      }
      at += w;
      n -= (size_t)w;
    }
  }
  return 0;
}

/* Reads what the socket has into the session. 0, or -1 with errstr; with
 * *closed set when the peer closed the connection, *timed_out when nothing
 * came within the timeout. */
static int tls_fill(pconn *p, bool *closed, bool *timed_out) {
  *closed = *timed_out = false;
  ssize_t n;
  do {
    n = read(p->c->fd, p->buf, sizeof p->buf);
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    *closed = true;
    snprintf(p->errstr, sizeof p->errstr,
             "%s: connection closed by the server", p->peer);
    return -1;
  }
  if (n < 0) {
    *timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
    snprintf(p->errstr, sizeof p->errstr, "%s: %s", p->peer,
             *timed_out ? "timed out reading" : strerror(errno));
    return -1;
  }
  if (rlock__tls_put(p->tls, p->buf, (size_t)n) != 0) {
    snprintf(p->errstr, sizeof p->errstr, "out of memory");
    return -1;
  }
  return 0;
}

/* The TLS handshake over the connected socket. 0, or the exit code with
 * the message printed (unless quiet). */
static int tls_handshake(pconn *p, bool quiet) {
  char detail[300];
  for (;;) {
    int hs = rlock__tls_handshake(p->tls, detail, sizeof detail);
    if (hs < 0) {
      (void)tls_flush(p); /* the alert, if any */
      snprintf(p->errstr, sizeof p->errstr,
               "TLS handshake with %s failed: %s", p->peer, detail);
      break;
    }
    /* The last flight (Finished) goes out with the first command, in one
     * write (pconn_get_reply flushes), as the library's link does. */
    if (hs == 1)
      return 0;
    if (tls_flush(p) != 0)
      break;
    bool closed, timed_out;
    if (tls_fill(p, &closed, &timed_out) != 0) {
      if (closed)
        snprintf(p->errstr, sizeof p->errstr,
                 "%s closed the connection during the TLS handshake (is it "
                 "serving TLS on this port?)",
                 p->peer);
      else if (timed_out)
        snprintf(p->errstr, sizeof p->errstr,
                 "TLS handshake with %s not answered within %d ms: is the "
                 "server serving plain text on this port?",
                 p->peer, PLAIN_TIMEOUT_MS);
      break;
    }
  }
  if (!quiet)
    cli_err("cannot connect to Redis: %s (%s)", rlock_strerror(RLOCK_ETLS),
            p->errstr);
  return cli_exit_for(RLOCK_ETLS);
}

static int pconn_vappend(pconn *p, const char *fmt, va_list ap) {
  if (p->tls == NULL)
    return redisvAppendCommand(p->c, fmt, ap);
  char *cmd = NULL;
  int len = redisvFormatCommand(&cmd, fmt, ap);
  if (len < 0) {
    snprintf(p->errstr, sizeof p->errstr, "out of memory");
    return REDIS_ERR;
  }
  char detail[300];
  int rc = rlock__tls_write(p->tls, cmd, (size_t)len, detail, sizeof detail);
  rlock__wipe(cmd, (size_t)len); /* AUTH's password */
  redisFreeCommand(cmd);
  if (rc != 0) {
    snprintf(p->errstr, sizeof p->errstr, "%s: %s", p->peer,
             rc == RLOCK_ENOMEM ? "out of memory" : detail);
    p->tls_failed = rc == RLOCK_ETLS;
    return REDIS_ERR;
  }
  return REDIS_OK;
}

static int pconn_append(pconn *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = pconn_vappend(p, fmt, ap);
  va_end(ap);
  return rc;
}

/* The next reply, as redisGetReply(). */
static int pconn_get_reply(pconn *p, void **reply) {
  if (p->tls == NULL)
    return redisGetReply(p->c, reply);
  *reply = NULL;
  char detail[300];
  for (;;) {
    if (redisReaderGetReply(p->c->reader, reply) != REDIS_OK) {
      snprintf(p->errstr, sizeof p->errstr, "protocol error from %s: %s",
               p->peer, p->c->reader->errstr);
      return REDIS_ERR;
    }
    if (*reply != NULL)
      return REDIS_OK;
    long got = rlock__tls_read(p->tls, p->buf, sizeof p->buf, detail,
                               sizeof detail);
    if (got > 0) {
      if (redisReaderFeed(p->c->reader, p->buf, (size_t)got) != REDIS_OK) {
        snprintf(p->errstr, sizeof p->errstr, "out of memory");
        return REDIS_ERR;
      }
      continue;
    }
    if (got < 0) {
      snprintf(p->errstr, sizeof p->errstr, "%s: %s", p->peer, detail);
      p->tls_failed = got == RLOCK_ETLS;
      return REDIS_ERR;
    }
    bool closed, timed_out;
    if (tls_flush(p) != 0 || tls_fill(p, &closed, &timed_out) != 0)
      return REDIS_ERR;
  }
}

/* A command and its reply, as redisCommand(): NULL on a connection
 * error (pconn_errstr says which). */
static redisReply *pconn_command(pconn *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = pconn_vappend(p, fmt, ap);
  va_end(ap);
  void *reply = NULL;
  if (rc != REDIS_OK || pconn_get_reply(p, &reply) != REDIS_OK)
    return NULL;
  return reply;
}

/* Checks (and frees) the reply to a connection set-up command. Returns 0
 * or the exit code. */
static int setup_reply(pconn *p, bool quiet, const char *step,
                       redisReply *reply) {
  int exit_code = 0;
  if (reply == NULL) {
    if (!quiet)
      cli_err("%s: %s", step, pconn_errstr(p));
    exit_code = CLI_EX_TEMPFAIL;
  } else if (reply->type == REDIS_REPLY_ERROR) {
    if (!quiet)
      cli_err("%s failed: %s", step, reply->str);
    exit_code = cli_exit_for(rlock__err_from_server(reply->str, reply->len));
  }
  freeReplyObject(reply);
  return exit_code;
}

/* One server to connect to: uri's TCP host and port or unix path, or
 * another address (the master a sentinel names, a cluster node) with
 * uri's TLS setting; and the credentials to send. */
typedef struct target {
  const char *host; /* NULL: unix socket at path */
  int port;
  const char *path;
  bool tls;
  const char *user, *password; /* password NULL: no AUTH */
  int db;
} target;

/* Connects to t (TLS with the --tls-* options), authenticates and selects
 * the database, as the library's own connections do. On failure returns
 * the exit code; unless `quiet` it also prints why (never a password). */
static int connect_one(const target *t, const cli_tls_opts *tls, bool quiet,
                       pconn **out) {
  *out = NULL;
  int rc;
  struct {
    bool is_unix, tls;
    const char *host, *path, *user, *password;
    int port, db;
  } uri = {t->host == NULL, t->tls,    t->host,    t->path,
           t->user,         t->password, t->port, t->db};
  pconn *p = calloc(1, sizeof *p);
  if (p == NULL) {
    if (!quiet)
      cli_err("cannot connect to Redis: out of memory");
    return CLI_EX_OSERR;
  }
  int exit_code = 0;
  if (uri.tls) {
    /* The TLS context first: a file it cannot use is said before any
     * connection is tried, as the library does at open. */
    rlock_options o;
    rlock_options_init(&o);
    cli_tls_apply(tls, &o);
    rc = rlock__tls_ctx_new(&p->ctx, &o, uri.host);
    if (rc != 0) {
      if (!quiet)
        cli_err_rlock(rc, "cannot connect to Redis");
      exit_code = cli_exit_for(rc);
    }
  }
  struct timeval tv = {.tv_sec = PLAIN_TIMEOUT_MS / 1000,
                       .tv_usec = (PLAIN_TIMEOUT_MS % 1000) * 1000};
  if (exit_code == 0) {
    p->c = uri.is_unix ? redisConnectUnixWithTimeout(uri.path, tv)
                       : redisConnectWithTimeout(uri.host, uri.port, tv);
    if (p->c == NULL) {
      if (!quiet)
        cli_err("cannot connect to Redis: out of memory");
      exit_code = CLI_EX_OSERR;
    } else if (p->c->err) {
      if (!quiet) {
        if (uri.is_unix)
          cli_err("cannot connect to Redis at %s: %s", uri.path,
                  p->c->errstr);
        else
          cli_err("cannot connect to Redis at %s:%d: %s", uri.host, uri.port,
                  p->c->errstr);
      }
      exit_code = CLI_EX_TEMPFAIL;
    } else {
      redisSetTimeout(p->c, tv);
    }
  }
  if (exit_code == 0 && p->ctx != NULL) {
    snprintf(p->peer, sizeof p->peer,
             strchr(uri.host, ':') != NULL ? "[%s]:%d" : "%s:%d", uri.host,
             uri.port);
    p->tls = rlock__tls_new(p->ctx);
    if (p->tls == NULL) {
      if (!quiet)
        cli_err("cannot connect to Redis: out of memory (TLS session)");
      exit_code = CLI_EX_OSERR;
    } else {
      exit_code = tls_handshake(p, quiet);
    }
    /* With TLS 1.3 the server judges the client (its certificate) after
     * the client has finished the handshake: only an answer shows the
     * session stands. Any answer will do (NOAUTH before AUTH too). */
    redisReply *pong = exit_code == 0 ? pconn_command(p, "PING") : NULL;
    if (exit_code == 0 && pong == NULL) {
      if (!quiet) {
        if (p->tls_failed)
          cli_err("cannot connect to Redis: %s (%s)",
                  rlock_strerror(RLOCK_ETLS), p->errstr);
        else /* the alert may be lost to the reset our PING causes */
          cli_err("cannot connect to Redis: %s (%s, right after the TLS "
                  "handshake: does the server require a client "
                  "certificate, --tls-cert and --tls-key?)",
                  rlock_strerror(RLOCK_ETLS), p->errstr);
      }
      exit_code = cli_exit_for(RLOCK_ETLS);
    }
    freeReplyObject(pong);
  }
  if (exit_code == 0 && uri.password != NULL) {
    redisReply *reply =
        uri.user != NULL && uri.user[0] != '\0'
            ? pconn_command(p, "AUTH %s %s", uri.user, uri.password)
            : pconn_command(p, "AUTH %s", uri.password);
    exit_code = setup_reply(p, quiet, "authentication", reply);
  }
  if (exit_code == 0 && uri.db != 0)
    exit_code = setup_reply(p, quiet, "SELECT",
                            pconn_command(p, "SELECT %d", uri.db));
  if (exit_code != 0) {
    pconn_free(p);
    return exit_code;
  }
  *out = p;
  return 0;
}

/* Asks the sentinels of `uri`, in turn, where its master is: fills
 * host[host_n] and *port, or returns the exit code (75 when no sentinel
 * answered or none knows the master), with why printed unless quiet. */
static int sentinel_master(const rlock__uri *uri, const cli_tls_opts *tls,
                           const cli_sentinel_opts *sentinel, bool quiet,
                           char *host, size_t host_n, int *port) {
  char why[512] = "";
  int exit_code = CLI_EX_TEMPFAIL;
  for (size_t i = 0; i < uri->naddrs; i++) {
    target t = {.host = uri->addrs[i].host,
                .port = uri->addrs[i].port,
                .tls = uri->tls != 0,
                .user = sentinel != NULL ? sentinel->user : NULL,
                .password = sentinel != NULL ? sentinel->password : NULL};
    pconn *p;
    /* Quiet: only the last sentinel's failure is said, below. */
    int rc = connect_one(&t, tls, true, &p);
    if (rc != 0) {
      snprintf(why, sizeof why, "sentinel %s:%d: cannot connect or log in",
               t.host, t.port);
      exit_code = rc;
      continue;
    }
    redisReply *r = pconn_command(p, "SENTINEL get-master-addr-by-name %s",
                                  uri->master);
    if (r == NULL) {
      snprintf(why, sizeof why, "sentinel %s:%d: %.300s", t.host, t.port,
               pconn_errstr(p));
      exit_code = CLI_EX_TEMPFAIL;
    } else if (r->type == REDIS_REPLY_ERROR) {
      snprintf(why, sizeof why, "sentinel %s:%d: %.300s", t.host, t.port,
               r->str);
      exit_code = cli_exit_for(rlock__err_from_server(r->str, r->len));
    } else {
      /* the library's own reader: the port range-checked, the host sane */
      char bad[200];
      int got = rlock__parse_master_addr(r, host, host_n, port, bad,
                                         sizeof bad);
      if (got == 1) {
        freeReplyObject(r);
        pconn_free(p);
        return 0;
      }
      if (got == 0)
        snprintf(why, sizeof why, "sentinel %s:%d knows no master named '%s'",
                 t.host, t.port, uri->master);
      else
        snprintf(why, sizeof why, "sentinel %s:%d: %s", t.host, t.port, bad);
      exit_code = CLI_EX_TEMPFAIL;
    }
    freeReplyObject(r);
    pconn_free(p);
  }
  if (!quiet)
    cli_err("cannot connect to Redis: no sentinel gave the address of the "
            "master '%s' (%s)",
            uri->master, why);
  return exit_code;
}


/* Cluster: the master serving `key`'s slot, from p's CLUSTER SLOTS (read
 * with the library's own reader; an address the node does not know is
 * that of the node asked). */
static bool cluster_owner(pconn *p, const char *asked, const char *key,
                          char *host, size_t host_n, int *port) {
  int slot = rlock__key_slot(key, strlen(key));
  redisReply *r = pconn_command(p, "CLUSTER SLOTS");
  bool found = false;
  rlock__slot_range *ranges = NULL;
  char why[200];
  int n = r != NULL ? rlock__parse_cluster_slots(r, asked, &ranges, why,
                                                 sizeof why)
                    : -1;
  for (int i = 0; i < n && !found; i++) {
    if (slot < ranges[i].start || slot > ranges[i].end)
      continue;
    snprintf(host, host_n, "%s", ranges[i].host);
    *port = ranges[i].port;
    found = true;
  }
  free(ranges);
  freeReplyObject(r);
  return found;
}

/* Connects to uri_text's server as connect_one() does: for a sentinel
 * URI, to the master its sentinels name (--sentinel-* credentials for
 * them); for a cluster URI, to its first node that answers, or, with a
 * `key`, to the master serving key's slot (CLUSTER SLOTS). */
static int plain_connect_key(const char *uri_text, const cli_tls_opts *tls,
                             const cli_sentinel_opts *sentinel,
                             const char *key, bool quiet, pconn **out) {
  *out = NULL;
  rlock__uri uri;
  int rc = rlock__uri_parse(uri_text, &uri);
  if (rc != 0) {
    if (!quiet)
      cli_err("invalid Redis URI: %s", rlock_last_error());
    return cli_exit_for(rc);
  }
  target t = {.host = uri.is_unix ? NULL : uri.host,
              .port = uri.port,
              .path = uri.path,
              .tls = uri.tls != 0,
              .user = uri.user,
              .password = uri.password,
              .db = uri.db};
  char host[256];
  int exit_code = 0;
  if (uri.mode == RLOCK__URI_SENTINEL) {
    exit_code = sentinel_master(&uri, tls, sentinel, quiet, host,
                                sizeof host, &t.port);
    t.host = host;
  }
  if (exit_code == 0 && uri.mode == RLOCK__URI_CLUSTER) {
    /* The first node that answers; then, for a key, its slot's master. */
    for (size_t i = 0; i < uri.naddrs; i++) {
      t.host = uri.addrs[i].host;
      t.port = uri.addrs[i].port;
      exit_code = connect_one(&t, tls, quiet || i + 1 < uri.naddrs, out);
      if (exit_code == 0)
        break;
    }
    if (exit_code == 0 && key != NULL &&
        cluster_owner(*out, t.host, key, host, sizeof host, &t.port)) {
      pconn_free(*out);
      *out = NULL;
      t.host = host;
      exit_code = connect_one(&t, tls, quiet, out);
    }
  } else if (exit_code == 0) {
    exit_code = connect_one(&t, tls, quiet, out);
  }
  rlock__uri_free(&uri);
  return exit_code;
}

/* `prefix` + the name's tag, with the brace rule (docs/wire-protocol.md,
 * "Names"): the name is wrapped in braces unless it already contains '{'
 * (Redisson's prefixName). "redisson_lock__channel:" gives the lock
 * channel.
 * malloc'd; NULL when out of memory. */
static char *tagged(const char *prefix, const char *name, size_t *len_out) {
  size_t len = strlen(name);
  bool braced = memchr(name, '{', len) != NULL;
  size_t cap = strlen(prefix) + len + 3;
  char *key = malloc(cap);
  if (key == NULL)
    return NULL;
  int n = snprintf(key, cap, braced ? "%s%s" : "%s{%s}", prefix, name);
  *len_out = (size_t)n;
  return key;
}

static char *lock_channel(const char *name, size_t *len_out) {
  return tagged("redisson_lock__channel:", name, len_out);
}

/* The name's tag + ":" + `suffix` (Redisson's suffixName): a read hold's
 * timeout key, "{NAME}:<owner>:rwlock_timeout:1". malloc'd or NULL. */
static char *suffixed(const char *name, const char *suffix, size_t *len_out) {
  size_t len = strlen(name);
  bool braced = memchr(name, '{', len) != NULL;
  size_t cap = len + strlen(suffix) + 4;
  char *key = malloc(cap);
  if (key == NULL)
    return NULL;
  int n = snprintf(key, cap, braced ? "%s:%s" : "{%s}:%s", name, suffix);
  *len_out = (size_t)n;
  return key;
}

/* The orphan release of each kind, for an owner holding the lock once (the
 * CLI never re-enters), with that kind's unlock message.
 * RLock and fenced: KEYS[1] the hash, KEYS[2] the lock channel; ARGV[1]
 * the owner. */
static const char orphan_lock_script[] =
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then "
    "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], '0'); "
    "return 1 end; return 0";
/* Fair: KEYS[1] the hash, KEYS[2] the queue; ARGV[1] the owner, ARGV[2]
 * the lock channel, the base of each fair waiter's own channel: the first
 * in the queue is woken, as Redisson's fair unlock does. */
static const char orphan_fair_script[] =
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then "
    "redis.call('del', KEYS[1]); "
    "local nxt = redis.call('lindex', KEYS[2], 0); "
    "if nxt then redis.call('publish', ARGV[2] .. ':' .. nxt, '0'); end; "
    "return 1 end; return 0";
/* Read: KEYS[1] the hash, KEYS[2] the read/write channel, KEYS[3] the
 * hold's timeout key; ARGV[1] the owner. Other readers keep the lock. */
static const char orphan_read_script[] =
    "if redis.call('hget', KEYS[1], 'mode') == 'read' and "
    "redis.call('hexists', KEYS[1], ARGV[1]) == 1 then "
    "if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then "
    "redis.call('hdel', KEYS[1], ARGV[1]); end; "
    "redis.call('del', KEYS[3]); "
    "if redis.call('hlen', KEYS[1]) == 1 then redis.call('del', KEYS[1]); "
    "redis.call('publish', KEYS[2], '0'); end; "
    "return 1 end; return 0";
/* Write: KEYS[1] the hash, KEYS[2] the read/write channel; ARGV[1] the
 * owner's write field (<owner>:write). Message "1" wakes every waiter. */
static const char orphan_write_script[] =
    "if redis.call('hget', KEYS[1], 'mode') == 'write' and "
    "redis.call('hexists', KEYS[1], ARGV[1]) == 1 then "
    "redis.call('hdel', KEYS[1], ARGV[1]); "
    "if redis.call('hlen', KEYS[1]) == 1 then redis.call('del', KEYS[1]); "
    "redis.call('publish', KEYS[2], '1'); "
    "else redis.call('hset', KEYS[1], 'mode', 'read'); end; "
    "return 1 end; return 0";

int cli_release_orphan(const char *uri, const cli_tls_opts *tls,
                       const cli_sentinel_opts *sentinel, cli_kind kind,
                       const char *name, const char *owner) {
  pconn *c;
  if (plain_connect_key(uri, tls, sentinel, name, true, &c) != 0)
    return RLOCK_ECONN;
  size_t len2 = 0, len3 = 0;
  char *key2 = NULL, *key3 = NULL, *field = NULL;
  redisReply *reply = NULL;
  switch (kind) {
  case CLI_KIND_FAIR:
    key2 = tagged("redisson_lock_queue:", name, &len2);
    key3 = lock_channel(name, &len3);
    if (key2 != NULL && key3 != NULL)
      reply = pconn_command(c, "EVAL %s 2 %s %b %s %b", orphan_fair_script,
                            name, key2, len2, owner, key3, len3);
    break;
  case CLI_KIND_READ: {
    char suffix[RLOCK_ID_LEN + 64];
    snprintf(suffix, sizeof suffix, "%s:rwlock_timeout:1", owner);
    key2 = tagged("redisson_rwlock:", name, &len2);
    key3 = suffixed(name, suffix, &len3);
    if (key2 != NULL && key3 != NULL)
      reply = pconn_command(c, "EVAL %s 3 %s %b %b %s", orphan_read_script,
                            name, key2, len2, key3, len3, owner);
    break;
  }
  case CLI_KIND_WRITE:
    key2 = tagged("redisson_rwlock:", name, &len2);
    field = malloc(strlen(owner) + sizeof ":write");
    if (key2 != NULL && field != NULL) {
      sprintf(field, "%s:write", owner);
      reply = pconn_command(c, "EVAL %s 2 %s %b %s", orphan_write_script,
                            name, key2, len2, field);
    }
    break;
  case CLI_KIND_LOCK:
  case CLI_KIND_FENCED:
  default:
    key2 = lock_channel(name, &len2);
    if (key2 != NULL)
      reply = pconn_command(c, "EVAL %s 2 %s %b %s", orphan_lock_script,
                            name, key2, len2, owner);
    break;
  }
  int rc = RLOCK_ECONN;
  if (key2 == NULL || (kind == CLI_KIND_FAIR && key3 == NULL) ||
      (kind == CLI_KIND_READ && key3 == NULL) ||
      (kind == CLI_KIND_WRITE && field == NULL))
    rc = RLOCK_ENOMEM;
  else if (reply != NULL)
    rc = reply->type == REDIS_REPLY_INTEGER ? (int)reply->integer
                                            : RLOCK_ESERVER;
  freeReplyObject(reply);
  free(key2);
  free(key3);
  free(field);
  pconn_free(c);
  return rc;
}

/* ---- status ---- */

static void json_string(FILE *out, const char *s, size_t len) {
  fputc('"', out);
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    switch (ch) {
    case '"':
      fputs("\\\"", out);
      break;
    case '\\':
      fputs("\\\\", out);
      break;
    case '\n':
      fputs("\\n", out);
      break;
    case '\r':
      fputs("\\r", out);
      break;
    case '\t':
      fputs("\\t", out);
      break;
    default:
      if (ch < 0x20 || ch == 0x7f)
        fprintf(out, "\\u%04x", ch);
      else
        fputc(ch, out);
    }
  }
  fputc('"', out);
}

/* Is the reply a decimal integer string (a hold count)? */
static bool is_count(const redisReply *r) {
  if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 19)
    return false;
  for (size_t i = 0; i < r->len; i++) {
    if ((r->str[i] < '0' || r->str[i] > '9') && !(i == 0 && r->str[i] == '-'))
      return false;
  }
  return true;
}

typedef struct lock_state {
  const char *type; /* "none", "hash", "string", ... */
  const redisReply *fields; /* HGETALL array, or NULL */
  long long ttl_ms;         /* PTTL: -2 no key, -1 no TTL */
  long long waiters;        /* PUBSUB NUMSUB of the lock and read/write
                               channels */
  /* Where the kind shows (a plain RLock, and a spin lock, show nothing
   * more): */
  const redisReply *mode;   /* the hash's "mode" field: a read/write lock
                               ("read" or "write"); else NULL */
  long long queue;          /* LLEN redisson_lock_queue:{NAME}: a fair
                               lock's waiters (0: no queue) */
  const redisReply *token;  /* GET redisson_lock_token:{NAME}: a fenced
                               lock's latest token; else NULL */
} lock_state;

static bool is_field(const redisReply *r, const char *name) {
  return r->type == REDIS_REPLY_STRING && r->len == strlen(name) &&
         memcmp(r->str, name, r->len) == 0;
}

/* A read/write lock's writer field: "<owner>:write". */
static bool is_write_field(const redisReply *r) {
  return r->len > 6 && memcmp(r->str + r->len - 6, ":write", 6) == 0;
}

static void print_kind_lines(const lock_state *s) {
  if (s->queue > 0)
    printf("  fair lock: %lld waiting in its queue\n", s->queue);
  if (s->token != NULL)
    printf("  fenced lock: token %.*s (the latest handed out)\n",
           (int)s->token->len, s->token->str);
}

static void print_human(const char *name, const lock_state *s) {
  char waiting[48] = "";
  if (s->waiters > 0)
    snprintf(waiting, sizeof waiting, ", %lld client%s waiting", s->waiters,
             s->waiters == 1 ? "" : "s");
  if (strcmp(s->type, "none") == 0) {
    printf("%s: unlocked%s\n", name, waiting);
    print_kind_lines(s);
    return;
  }
  if (strcmp(s->type, "hash") != 0) {
    printf("%s: not a lock (Redis type %s)\n", name, s->type);
    return;
  }
  char kind[96] = "";
  if (s->mode != NULL)
    snprintf(kind, sizeof kind, " (read/write lock, %.*s mode)",
             (int)(s->mode->len > 40 ? 40 : s->mode->len), s->mode->str);
  if (s->ttl_ms >= 0)
    printf("%s: locked%s, expires in %lld ms%s\n", name, kind, s->ttl_ms,
           waiting);
  else
    printf("%s: locked%s, never expires (no TTL)%s\n", name, kind, waiting);
  for (size_t i = 0; s->fields != NULL && i + 1 < s->fields->elements;
       i += 2) {
    const redisReply *field = s->fields->element[i];
    const redisReply *value = s->fields->element[i + 1];
    if (field->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING)
      continue;
    if (s->mode != NULL && is_field(field, "mode"))
      continue;
    if (s->mode != NULL && is_count(value) && is_write_field(field))
      printf("  writer %.*s  holds %.*s\n", (int)field->len - 6, field->str,
             (int)value->len, value->str);
    else if (s->mode != NULL && is_count(value))
      printf("  reader %.*s  holds %.*s\n", (int)field->len, field->str,
             (int)value->len, value->str);
    else if (is_count(value))
      printf("  owner %.*s  holds %.*s\n", (int)field->len, field->str,
             (int)value->len, value->str);
    else
      printf("  field %.*s = %.*s\n", (int)field->len, field->str,
             (int)value->len, value->str);
  }
  print_kind_lines(s);
}

/* A string NAME: a semaphore's available permits or a latch's count; with
 * a "{NAME}:timeout" zset, a permit-expirable semaphore's taken permits
 * (id -> wall-clock expiry in ms). */
typedef struct string_state {
  redisReply *count;   /* GET NAME */
  redisReply *permits; /* ZRANGE {NAME}:timeout 0 -1 WITHSCORES, or NULL */
  long long now_ms;    /* the server's TIME */
} string_state;

static void string_state_free(string_state *t) {
  if (t->count != NULL)
    freeReplyObject(t->count);
  if (t->permits != NULL)
    freeReplyObject(t->permits);
  memset(t, 0, sizeof *t);
}

static int read_string_state(pconn *c, const char *name, string_state *t) {
  memset(t, 0, sizeof *t);
  size_t zlen;
  char *zkey = suffixed(name, "timeout", &zlen);
  if (zkey == NULL) {
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  redisReply *type = pconn_command(c, "TYPE %b", zkey, zlen);
  redisReply *time = pconn_command(c, "TIME");
  t->count = pconn_command(c, "GET %b", name, strlen(name));
  if (type != NULL && type->type == REDIS_REPLY_STATUS &&
      strcmp(type->str, "zset") == 0)
    t->permits = pconn_command(c, "ZRANGE %b 0 -1 WITHSCORES", zkey, zlen);
  free(zkey);
  int rc = 0;
  if (type == NULL || time == NULL || t->count == NULL) {
    cli_err("reading '%s': %s", name, pconn_errstr(c));
    rc = CLI_EX_TEMPFAIL;
  } else if (time->type == REDIS_REPLY_ARRAY && time->elements == 2 &&
             time->element[0]->type == REDIS_REPLY_STRING &&
             time->element[1]->type == REDIS_REPLY_STRING) {
    t->now_ms = strtoll(time->element[0]->str, NULL, 10) * 1000 +
                strtoll(time->element[1]->str, NULL, 10) / 1000;
  }
  if (type != NULL)
    freeReplyObject(type);
  if (time != NULL)
    freeReplyObject(time);
  if (t->permits != NULL && t->permits->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(t->permits);
    t->permits = NULL;
  }
  if (rc == 0 && t->count->type != REDIS_REPLY_STRING) {
    freeReplyObject(t->count);
    t->count = NULL;
  }
  if (rc != 0)
    string_state_free(t);
  return rc;
}

/* A permit id as Java shows it: its 16 raw bytes in lowercase hex (or the
 * member as it is when it is not 16 bytes). */
static void permit_id(const redisReply *r, char *out, size_t n) {
  if (r->len == 16) {
    for (size_t i = 0; i < 16 && 2 * i + 2 < n; i++)
      snprintf(out + 2 * i, 3, "%02x", (unsigned char)r->str[i]);
  } else {
    snprintf(out, n, "%.*s", (int)(r->len > 64 ? 64 : r->len), r->str);
  }
}

static void print_string_human(const char *name, const string_state *t) {
  const char *count = t->count != NULL && is_count(t->count) ? t->count->str
                                                              : "?";
  if (t->permits == NULL && strcmp(count, "?") == 0) {
    printf("%s: not a lock (Redis type string)\n", name);
    return;
  }
  if (t->permits == NULL) {
    printf("%s: count %s (a count-down latch's count, or a semaphore's "
           "available permits: Redis cannot tell them apart)\n",
           name, count);
    return;
  }
  size_t taken = t->permits->elements / 2;
  printf("%s: semaphore (permit-expirable), %s permit%s available, %zu "
         "taken\n",
         name, count, strcmp(count, "1") == 0 ? "" : "s", taken);
  for (size_t i = 0; i + 1 < t->permits->elements; i += 2) {
    const redisReply *id = t->permits->element[i];
    const redisReply *score = t->permits->element[i + 1];
    char hex[72];
    permit_id(id, hex, sizeof hex);
    long long expiry = score->type == REDIS_REPLY_STRING
                           ? (long long)strtod(score->str, NULL)
                           : -1;
    long long left = expiry - t->now_ms;
    if (score->type != REDIS_REPLY_STRING)
      printf("  permit %s\n", hex);
    else if (left >= 0)
      printf("  permit %s  lease expires in %lld ms\n", hex, left);
    else
      printf("  permit %s  lease expired %lld ms ago (returned at the next "
             "acquire)\n",
             hex, -left);
  }
}

static void print_string_json(const string_state *t) {
  if (t->count != NULL && is_count(t->count)) {
    fputs(t->permits != NULL ? ",\"permits_available\":" : ",\"count\":",
          stdout);
    fwrite(t->count->str, 1, t->count->len, stdout);
  }
  if (t->permits == NULL)
    return;
  printf(",\"kind\":\"permit-expirable semaphore\",\"permits_taken\":%zu,"
         "\"permits\":{",
         t->permits->elements / 2);
  for (size_t i = 0; i + 1 < t->permits->elements; i += 2) {
    char hex[72];
    permit_id(t->permits->element[i], hex, sizeof hex);
    const redisReply *score = t->permits->element[i + 1];
    long long expiry = score->type == REDIS_REPLY_STRING
                           ? (long long)strtod(score->str, NULL)
                           : t->now_ms;
    printf("%s", i > 0 ? "," : "");
    json_string(stdout, hex, strlen(hex));
    printf(":%lld", expiry - t->now_ms);
  }
  fputc('}', stdout);
}

static void print_json(const char *name, const lock_state *s, bool first,
                       const string_state *t) {
  fputs(first ? "  {" : ",\n  {", stdout);
  fputs("\"name\":", stdout);
  json_string(stdout, name, strlen(name));
  printf(",\"locked\":%s,\"type\":", strcmp(s->type, "none") ? "true"
                                                             : "false");
  json_string(stdout, s->type, strlen(s->type));
  if (s->ttl_ms == -2)
    fputs(",\"ttl_ms\":null", stdout);
  else
    printf(",\"ttl_ms\":%lld", s->ttl_ms);
  fputs(",\"owners\":{", stdout);
  bool any = false;
  for (size_t i = 0; s->fields != NULL && i + 1 < s->fields->elements;
       i += 2) {
    const redisReply *field = s->fields->element[i];
    const redisReply *value = s->fields->element[i + 1];
    if (field->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING)
      continue;
    if (s->mode != NULL && is_field(field, "mode"))
      continue; /* said as "mode" below */
    if (any)
      fputc(',', stdout);
    any = true;
    json_string(stdout, field->str, field->len);
    fputc(':', stdout);
    if (is_count(value))
      fwrite(value->str, 1, value->len, stdout);
    else
      json_string(stdout, value->str, value->len);
  }
  printf("},\"waiters\":%lld", s->waiters);
  if (s->mode != NULL) {
    fputs(",\"kind\":\"read/write\",\"mode\":", stdout);
    json_string(stdout, s->mode->str, s->mode->len);
  }
  if (s->queue > 0)
    printf(",\"queue\":%lld", s->queue);
  if (s->token != NULL && is_count(s->token)) {
    fputs(",\"token\":", stdout);
    fwrite(s->token->str, 1, s->token->len, stdout);
  }
  if (t != NULL)
    print_string_json(t);
  fputc('}', stdout);
}

/* The commands read_state sends inside MULTI/EXEC, and so the elements of
 * EXEC's reply: TYPE, HGETALL, PTTL, PUBSUB NUMSUB (two channels), LLEN
 * (the fair queue), GET (the fenced token). */
#define N_STATE_CMDS 6

/* Reads one lock's state. Returns 0 or an exit code (message printed).
 * *exec_out must be freed with freeReplyObject(). */
static int read_state(pconn *c, const char *name, lock_state *s,
                      redisReply **exec_out) {
  *exec_out = NULL;
  /* Zeroed: gcc -O3 cannot see that a NULL from tagged() ends the
   * function before they are read (-Wmaybe-uninitialized). */
  size_t channel_len = 0, rw_len = 0, queue_len = 0, token_len = 0;
  char *channel = lock_channel(name, &channel_len);
  char *rw_channel = tagged("redisson_rwlock:", name, &rw_len);
  char *queue = tagged("redisson_lock_queue:", name, &queue_len);
  char *token = tagged("redisson_lock_token:", name, &token_len);
  if (channel == NULL || rw_channel == NULL || queue == NULL ||
      token == NULL) {
    free(channel);
    free(rw_channel);
    free(queue);
    free(token);
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  size_t name_len = strlen(name);
  bool sent = pconn_append(c, "MULTI") == REDIS_OK &&
              pconn_append(c, "TYPE %b", name, name_len) == REDIS_OK &&
              pconn_append(c, "HGETALL %b", name, name_len) == REDIS_OK &&
              pconn_append(c, "PTTL %b", name, name_len) == REDIS_OK &&
              pconn_append(c, "PUBSUB NUMSUB %b %b", channel, channel_len,
                           rw_channel, rw_len) == REDIS_OK &&
              pconn_append(c, "LLEN %b", queue, queue_len) == REDIS_OK &&
              pconn_append(c, "GET %b", token, token_len) == REDIS_OK &&
              pconn_append(c, "EXEC") == REDIS_OK;
  free(channel);
  free(rw_channel);
  free(queue);
  free(token);
  if (!sent) {
    cli_err("reading '%s': %s", name, pconn_errstr(c));
    return CLI_EX_TEMPFAIL;
  }
  enum { N_REPLIES = N_STATE_CMDS + 2 };
  int exit_code = 0;
  redisReply *replies[N_REPLIES] = {NULL};
  for (int i = 0; i < N_REPLIES; i++) {
    void *reply = NULL;
    if (pconn_get_reply(c, &reply) != REDIS_OK) {
      cli_err("reading '%s': %s", name, pconn_errstr(c));
      exit_code = CLI_EX_TEMPFAIL;
      break;
    }
    replies[i] = reply;
  }
  redisReply *exec = replies[N_REPLIES - 1];
  for (int i = 0; exit_code == 0 && i < N_REPLIES; i++) {
    if (replies[i]->type == REDIS_REPLY_ERROR) {
      cli_err("reading '%s': %s", name, replies[i]->str);
      exit_code = cli_exit_for(
          rlock__err_from_server(replies[i]->str, replies[i]->len));
    }
  }
  if (exit_code == 0 &&
      (exec->type != REDIS_REPLY_ARRAY || exec->elements != N_STATE_CMDS ||
       exec->element[0]->type != REDIS_REPLY_STATUS ||
       exec->element[2]->type != REDIS_REPLY_INTEGER ||
       exec->element[3]->type != REDIS_REPLY_ARRAY ||
       exec->element[3]->elements != 4 ||
       exec->element[3]->element[1]->type != REDIS_REPLY_INTEGER ||
       exec->element[3]->element[3]->type != REDIS_REPLY_INTEGER)) {
    cli_err("reading '%s': unexpected reply from Redis", name);
    exit_code = cli_exit_for(RLOCK_EPROTO);
  }
  for (int i = 0; i < N_REPLIES - 1; i++)
    freeReplyObject(replies[i]);
  if (exit_code != 0) {
    freeReplyObject(exec);
    return exit_code;
  }
  s->type = exec->element[0]->str;
  /* HGETALL on another type is an error inside EXEC, not a failure; so are
   * LLEN and GET on keys of another type (then: no queue, no token). */
  s->fields = exec->element[1]->type == REDIS_REPLY_ARRAY ? exec->element[1]
                                                          : NULL;
  s->ttl_ms = exec->element[2]->integer;
  s->waiters = exec->element[3]->element[1]->integer +
               exec->element[3]->element[3]->integer;
  s->mode = NULL;
  for (size_t i = 0; s->fields != NULL && i + 1 < s->fields->elements;
       i += 2) {
    if (is_field(s->fields->element[i], "mode") &&
        s->fields->element[i + 1]->type == REDIS_REPLY_STRING)
      s->mode = s->fields->element[i + 1];
  }
  s->queue = exec->element[4]->type == REDIS_REPLY_INTEGER
                 ? exec->element[4]->integer
                 : 0;
  s->token = exec->element[5]->type == REDIS_REPLY_STRING ? exec->element[5]
                                                          : NULL;
  *exec_out = exec;
  return 0;
}

static const struct option status_longopts[] = {
    {"json", no_argument, NULL, 'j'},
    {"uri", required_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    {NULL, 0, NULL, 0},
};

/* A redis+cluster:// or rediss+cluster:// URI: each NAME is read on the
 * master serving its slot. */
static bool is_cluster_uri(const char *uri) {
  return strncasecmp(uri, "redis+cluster://", 16) == 0 ||
         strncasecmp(uri, "rediss+cluster://", 17) == 0;
}

int cli_status_main(int argc, char **argv) {
  const char *uri_flag = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  bool json = false;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":u:jh", status_longopts, NULL)) !=
         -1) {
    switch (c) {
    case 'u':
      uri_flag = optarg;
      break;
    case 'j':
      json = true;
      break;
    case 'h':
      cli_help(stdout);
      return 0;
    default:
      if (cli_tls_option(&tls, c, optarg) ||
          cli_sentinel_option(&sentinel, c, optarg))
        break;
      return cli_getopt_error(c, argv);
    }
  }
  if (optind >= argc) {
    cli_err("status: missing lock NAME");
    return CLI_EX_USAGE;
  }
  for (int i = optind; i < argc; i++) {
    if (argv[i][0] == '\0') {
      cli_err("status: a lock NAME must not be empty");
      return CLI_EX_USAGE;
    }
  }
  const char *uri = cli_resolve_uri(uri_flag);
  int rc = cli_tls_check(&tls, uri);
  if (rc == 0)
    rc = cli_sentinel_check(&sentinel, uri);
  if (rc != 0)
    return rc;
  bool cluster = is_cluster_uri(uri);
  pconn *ctx;
  rc = plain_connect_key(uri, &tls, &sentinel, cluster ? argv[optind] : NULL,
                         false, &ctx);
  if (rc != 0) {
    cli_sentinel_free(&sentinel);
    return rc;
  }
  if (json)
    fputs("[\n", stdout);
  for (int i = optind; i < argc && rc == 0; i++) {
    if (cluster && i > optind) {
      pconn_free(ctx);
      rc = plain_connect_key(uri, &tls, &sentinel, argv[i], false, &ctx);
      if (rc != 0) {
        ctx = NULL;
        break;
      }
    }
    lock_state s;
    redisReply *exec;
    rc = read_state(ctx, argv[i], &s, &exec);
    if (rc != 0)
      break;
    string_state t = {0};
    bool is_string = strcmp(s.type, "string") == 0;
    if (is_string) {
      rc = read_string_state(ctx, argv[i], &t);
      if (rc != 0) {
        freeReplyObject(exec);
        break;
      }
    }
    if (json)
      print_json(argv[i], &s, i == optind, is_string ? &t : NULL);
    else if (is_string)
      print_string_human(argv[i], &t);
    else
      print_human(argv[i], &s);
    string_state_free(&t);
    freeReplyObject(exec);
  }
  if (json && rc == 0)
    fputs("\n]\n", stdout);
  pconn_free(ctx);
  cli_sentinel_free(&sentinel);
  if (fflush(stdout) != 0 && rc == 0) {
    cli_err("writing the status: %s", strerror(errno));
    rc = CLI_EX_OSERR;
  }
  return rc;
}

/* ---- unlock --force ---- */

enum { OPT_ANY_TYPE = 256 };

static const struct option unlock_longopts[] = {
    {"force", no_argument, NULL, 'f'},
    {"any-type", no_argument, NULL, OPT_ANY_TYPE},
    {"uri", required_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    CLI_KIND_LONGOPTS,
    {NULL, 0, NULL, 0},
};

/* The exit status of several NAMEs: the highest (0 all released < 1 one
 * was not locked < 69 one holds another type < the errors). */
static int worst(int a, int b) { return a > b ? a : b; }

/* Redis's TYPE of `name` ("hash", "none", "string", ...) into type[n].
 * Returns 0, or the exit code after printing why. */
static int key_type(pconn *c, const char *name, char *type, size_t n) {
  redisReply *reply = pconn_command(c, "TYPE %b", name, strlen(name));
  if (reply == NULL) {
    cli_err("unlock '%s': checking its type: %s", name, pconn_errstr(c));
    return CLI_EX_TEMPFAIL;
  }
  int exit_code = 0;
  if (reply->type == REDIS_REPLY_ERROR) {
    cli_err("unlock '%s': checking its type: %s", name, reply->str);
    exit_code =
        cli_exit_for(rlock__err_from_server(reply->str, reply->len));
  } else if (reply->type != REDIS_REPLY_STATUS) {
    cli_err("unlock '%s': checking its type: unexpected reply from Redis",
            name);
    exit_code = cli_exit_for(RLOCK_EPROTO);
  } else {
    snprintf(type, n, "%.*s", (int)reply->len, reply->str);
  }
  freeReplyObject(reply);
  return exit_code;
}

int cli_unlock_main(int argc, char **argv) {
  const char *uri_flag = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  bool force = false, any_type = false;
  cli_kind kind = CLI_KIND_LOCK;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":u:fhsx", unlock_longopts, NULL)) !=
         -1) {
    switch (c) {
    case 'u':
      uri_flag = optarg;
      break;
    case 'f':
      force = true;
      break;
    case OPT_ANY_TYPE:
      any_type = true;
      break;
    case 'h':
      cli_help(stdout);
      return 0;
    default: {
      int kind_rc = cli_kind_parse(&kind, c);
      if (kind_rc > 0)
        return kind_rc;
      if (kind_rc == 0 || cli_tls_option(&tls, c, optarg) ||
          cli_sentinel_option(&sentinel, c, optarg))
        break;
      return cli_getopt_error(c, argv);
    }
    }
  }
  if (!force) {
    cli_err("unlock: only the holder releases a lock (when its COMMAND "
            "exits); use --force to delete it whoever holds it");
    return CLI_EX_USAGE;
  }
  if (optind >= argc) {
    cli_err("unlock: missing lock NAME");
    return CLI_EX_USAGE;
  }
  const char *uri = cli_resolve_uri(uri_flag);
  int rc = cli_tls_check(&tls, uri);
  if (rc == 0)
    rc = cli_sentinel_check(&sentinel, uri);
  if (rc != 0)
    return rc;
  /* The type check's connection (not needed with --any-type); with a
   * cluster URI, made again for each NAME, on its slot's master. */
  bool cluster = is_cluster_uri(uri);
  pconn *check = NULL;
  if (!any_type) {
    rc = plain_connect_key(uri, &tls, &sentinel,
                           cluster ? argv[optind] : NULL, false, &check);
    if (rc != 0) {
      cli_sentinel_free(&sentinel);
      return rc;
    }
  }
  rlock_options opts;
  rlock_options_init(&opts);
  opts.uri = uri;
  cli_tls_apply(&tls, &opts);
  cli_sentinel_apply(&sentinel, &opts);
  rlock_client *client;
  rc = rlock_client_open(&client, &opts);
  if (rc != 0) {
    pconn_free(check);
    cli_sentinel_free(&sentinel);
    return cli_open_failed(rc);
  }
  /* A NAME that is not a lock is reported and skipped; the other NAMEs are
   * still processed. An error (connection, permission, ...) stops at its
   * NAME. */
  int exit_code = 0;
  for (int i = optind; i < argc; i++) {
    rlock *lock;
    if (cluster && check != NULL && i > optind) {
      pconn_free(check);
      check = NULL;
      int code = plain_connect_key(uri, &tls, &sentinel, argv[i], false,
                                   &check);
      if (code != 0) {
        exit_code = worst(exit_code, code);
        break;
      }
    }
    rc = cli_kind_get(client, kind, argv[i], &lock);
    if (rc == 0 && check != NULL) {
      /* Only a hash is a lock. TYPE and the DEL in rlock_force_unlock()
       * are two commands (on two connections), so a value stored under
       * NAME in between would still be deleted: a race a command-line
       * tool can live with. */
      char type[64];
      int code = key_type(check, argv[i], type, sizeof type);
      if (code != 0) {
        rlock_free(lock);
        exit_code = worst(exit_code, code);
        break;
      }
      if (strcmp(type, "none") == 0) {
        rlock_free(lock);
        printf("%s: was not locked\n", argv[i]);
        exit_code = worst(exit_code, CLI_EXIT_CONFLICT);
        continue;
      }
      if (strcmp(type, "hash") != 0) {
        rlock_free(lock);
        fflush(stdout); /* in order, when both go to one file */
        cli_err("unlock '%s': not a lock (Redis type %s); left as it is "
                "(--any-type deletes it)",
                argv[i], type);
        exit_code = worst(exit_code, CLI_EX_UNAVAILABLE);
        continue;
      }
    }
    if (rc == 0) {
      rc = rlock_force_unlock(lock);
      rlock_free(lock);
    }
    if (rc < 0) {
      char what[96];
      snprintf(what, sizeof what, "unlock '%.80s'", argv[i]);
      cli_err_rlock(rc, what);
      exit_code = worst(exit_code, cli_exit_for(rc));
      break;
    }
    /* -s/-x: Redisson's read (write) force unlock deletes the read/write
     * lock only in read (write) mode. */
    printf("%s: %s\n", argv[i],
           rc == 1                    ? "unlocked"
           : kind == CLI_KIND_READ    ? "was not locked in read mode"
           : kind == CLI_KIND_WRITE   ? "was not locked in write mode"
                                      : "was not locked");
    if (rc == 0)
      exit_code = worst(exit_code, CLI_EXIT_CONFLICT);
  }
  rlock_client_close(client);
  pconn_free(check);
  cli_sentinel_free(&sentinel);
  if (fflush(stdout) != 0 && exit_code == 0)
    exit_code = CLI_EX_OSERR;
  return exit_code;
}
