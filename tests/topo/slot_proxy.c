/* A minimal slot-routing forwarder for the topo suite (rt_slot_proxy_*):
 * one 127.0.0.1 endpoint in front of a real cluster, as Envoy's Redis
 * proxy or Redis Enterprise's present one - each request goes to the
 * master owning its keys' slot, and a request whose keys span slots is
 * refused with CROSSSLOT, as those proxies do. Requests are read with
 * hiredis's reader and forwarded one at a time with blocking hiredis
 * connections (one per client connection and master), replies written back
 * in order. No pub/sub, no redirects: the slot map is read once at start. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "topo_harness.h"

#define PROXY_CONNS 32

static struct {
  bool running;
  int listen_fd, port;
  int slot_port[RT_SLOTS];
  int masters[RT_MAX_NODES], n_masters;
  pthread_t acceptor;
  pthread_t conn_th[PROXY_CONNS];
  int n_conns;
  pthread_mutex_t mu;
  atomic_bool stop;
  /* rt_slot_proxy_answer: requests starting with `match` get `raw`. */
  char quirk_match[8][64], quirk_raw[8][128];
  int n_quirks;
  atomic_long refused, forwarded;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER};

typedef struct {
  int fd;
  redisContext *up[RT_MAX_NODES]; /* by index in P.masters */
  char *out;
  size_t out_len, out_cap;
} pconn;

static void out_add(pconn *c, const char *p, size_t n) {
  if (c->out_len + n > c->out_cap) {
    size_t cap = (c->out_len + n) * 2 + 256;
    c->out = realloc(c->out, cap);
    if (!c->out)
      abort();
    c->out_cap = cap;
  }
  memcpy(c->out + c->out_len, p, n);
  c->out_len += n;
}

static void out_fmt(pconn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void out_fmt(pconn *c, const char *fmt, ...) {
  char buf[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  out_add(c, buf, (size_t)n);
}

/* A hiredis reply back into RESP2. */
static void encode(pconn *c, const redisReply *r) {
  switch (r->type) {
  case REDIS_REPLY_STATUS:
  case REDIS_REPLY_ERROR:
    out_add(c, r->type == REDIS_REPLY_STATUS ? "+" : "-", 1);
    out_add(c, r->str, (size_t)r->len);
    out_add(c, "\r\n", 2);
    break;
  case REDIS_REPLY_INTEGER:
    out_fmt(c, ":%lld\r\n", (long long)r->integer);
    break;
  case REDIS_REPLY_NIL:
    out_add(c, "$-1\r\n", 5);
    break;
  case REDIS_REPLY_STRING:
    out_fmt(c, "$%zu\r\n", (size_t)r->len);
    out_add(c, r->str, (size_t)r->len);
    out_add(c, "\r\n", 2);
    break;
  case REDIS_REPLY_ARRAY:
    out_fmt(c, "*%zu\r\n", (size_t)r->elements);
    for (size_t i = 0; i < r->elements; i++)
      encode(c, r->element[i]);
    break;
  default:
    out_add(c, "-ERR proxy: reply type\r\n", 24);
  }
}

static bool is_cmd(const redisReply *a, const char *name) {
  return strlen(name) == (size_t)a->len &&
         strncasecmp(a->str, name, (size_t)a->len) == 0;
}

/* One request: refused, or forwarded to the slot's master. */
static void handle(pconn *c, const redisReply *req) {
  if (req->type != REDIS_REPLY_ARRAY || req->elements == 0) {
    out_add(c, "-ERR proxy: not a request\r\n", 27);
    return;
  }
  size_t argc = req->elements;
  for (size_t i = 0; i < argc; i++)
    if (req->element[i]->type != REDIS_REPLY_STRING) {
      out_add(c, "-ERR proxy: not a request\r\n", 27);
      return;
    }
  const redisReply *cmd = req->element[0];
  for (int q = 0; q < P.n_quirks; q++) {
    char line[64];
    snprintf(line, sizeof line, "%.*s %.*s", (int)cmd->len, cmd->str,
             argc > 1 ? (int)req->element[1]->len : 0,
             argc > 1 ? req->element[1]->str : "");
    if (strncasecmp(line, P.quirk_match[q], strlen(P.quirk_match[q])) == 0) {
      out_add(c, P.quirk_raw[q], strlen(P.quirk_raw[q]));
      return;
    }
  }
  static const char *const keyless[] = {
      "PING", "CLIENT", "SELECT", "AUTH",  "INFO",   "WAIT",  "WAITAOF",
      "SCRIPT", "PUBSUB", "HELLO", "COMMAND", "ROLE", "ECHO", NULL};
  static const char *const all_keys[] = {"DEL", "UNLINK", "EXISTS", "MGET",
                                         "TOUCH", NULL};
  size_t k0 = 0, k1 = 0; /* keys are argv[k0..k1) */
  bool no_keys = false;
  for (int i = 0; keyless[i]; i++)
    if (is_cmd(cmd, keyless[i]))
      no_keys = true;
  if (is_cmd(cmd, "SUBSCRIBE") || is_cmd(cmd, "SSUBSCRIBE") ||
      is_cmd(cmd, "PSUBSCRIBE")) {
    out_add(c, "-ERR proxy: no pub/sub\r\n", 24);
    return;
  }
  if (!no_keys) {
    if (is_cmd(cmd, "EVAL") || is_cmd(cmd, "EVALSHA")) {
      long nk = argc > 2 ? strtol(req->element[2]->str, NULL, 10) : -1;
      if (nk < 0 || (size_t)nk > argc - 3) {
        out_add(c, "-ERR proxy: numkeys\r\n", 21);
        return;
      }
      k0 = 3;
      k1 = 3 + (size_t)nk;
    } else {
      k0 = 1;
      k1 = argc > 1 ? 2 : 1;
      for (int i = 0; all_keys[i]; i++)
        if (is_cmd(cmd, all_keys[i]))
          k1 = argc;
    }
  }
  int slot = -1;
  for (size_t i = k0; i < k1; i++) {
    int s = rt_key_slot_n(req->element[i]->str, (size_t)req->element[i]->len);
    if (slot >= 0 && s != slot) {
      atomic_fetch_add(&P.refused, 1);
      out_add(c, "-CROSSSLOT Keys in request don't hash to the same slot\r\n",
              56);
      return;
    }
    slot = s;
  }
  int port = slot >= 0 ? P.slot_port[slot] : P.masters[0];
  int at = 0;
  while (at < P.n_masters && P.masters[at] != port)
    at++;
  if (at == P.n_masters) {
    out_add(c, "-CLUSTERDOWN proxy: slot not served\r\n", 37);
    return;
  }
  if (c->up[at] == NULL || c->up[at]->err) {
    if (c->up[at])
      redisFree(c->up[at]);
    struct timeval tv = {.tv_sec = 5};
    c->up[at] = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c->up[at] == NULL || c->up[at]->err) {
      out_add(c, "-ERR proxy: backend down\r\n", 26);
      return;
    }
    redisSetTimeout(c->up[at], tv);
  }
  const char *argv[256];
  size_t lens[256];
  if (argc > 256) {
    out_add(c, "-ERR proxy: too many arguments\r\n", 32);
    return;
  }
  for (size_t i = 0; i < argc; i++) {
    argv[i] = req->element[i]->str;
    lens[i] = (size_t)req->element[i]->len;
  }
  redisReply *r = redisCommandArgv(c->up[at], (int)argc, argv, lens);
  if (r == NULL) {
    out_add(c, "-ERR proxy: backend lost\r\n", 26);
    return;
  }
  atomic_fetch_add(&P.forwarded, 1);
  encode(c, r);
  freeReplyObject(r);
}

static void *conn_main(void *arg) {
  pconn c = {.fd = (int)(intptr_t)arg};
  redisReader *rd = redisReaderCreate();
  char buf[16384];
  while (!atomic_load(&P.stop)) {
    struct pollfd pfd = {.fd = c.fd, .events = POLLIN};
    int pr = poll(&pfd, 1, 100);
    if (pr <= 0)
      continue;
    ssize_t n = read(c.fd, buf, sizeof buf);
    if (n <= 0)
      break;
    redisReaderFeed(rd, buf, (size_t)n);
    void *req = NULL;
    int rc;
    while ((rc = redisReaderGetReply(rd, &req)) == REDIS_OK && req) {
      handle(&c, req);
      freeReplyObject(req);
      req = NULL;
    }
    size_t off = 0;
    while (off < c.out_len) {
      ssize_t w = send(c.fd, c.out + off, c.out_len - off, MSG_NOSIGNAL);
      if (w <= 0)
        goto done;
      off += (size_t)w;
    }
    c.out_len = 0;
    if (rc != REDIS_OK)
      break;
  }
done:
  redisReaderFree(rd);
  for (int i = 0; i < RT_MAX_NODES; i++)
    if (c.up[i])
      redisFree(c.up[i]);
  free(c.out);
  close(c.fd);
  return NULL;
}

static void *accept_main(void *arg) {
  (void)arg;
  while (!atomic_load(&P.stop)) {
    struct pollfd pfd = {.fd = P.listen_fd, .events = POLLIN};
    if (poll(&pfd, 1, 100) <= 0)
      continue;
    int fd = accept(P.listen_fd, NULL, NULL);
    if (fd < 0)
      continue;
    pthread_mutex_lock(&P.mu);
    if (P.n_conns < PROXY_CONNS &&
        pthread_create(&P.conn_th[P.n_conns], NULL, conn_main,
                       (void *)(intptr_t)fd) == 0)
      P.n_conns++;
    else
      close(fd);
    pthread_mutex_unlock(&P.mu);
  }
  return NULL;
}

int rt_slot_proxy_start(void) {
  cr_assert(!P.running, "a slot proxy runs already");
  P.n_masters = rt_cluster_masters(P.masters, RT_MAX_NODES);
  cr_assert(P.n_masters > 0, "no cluster masters");
  memset(P.slot_port, 0, sizeof P.slot_port);
  redisReply *r = rt_node_cmd(P.masters[0], "CLUSTER SLOTS");
  cr_assert(r->type == REDIS_REPLY_ARRAY, "CLUSTER SLOTS");
  for (size_t i = 0; i < r->elements; i++) {
    redisReply *e = r->element[i];
    int port = (int)e->element[2]->element[1]->integer;
    for (long long s = e->element[0]->integer; s <= e->element[1]->integer;
         s++)
      P.slot_port[s] = port;
  }
  freeReplyObject(r);
  P.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(P.listen_fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  cr_assert(bind(P.listen_fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                listen(P.listen_fd, 16) == 0 &&
                getsockname(P.listen_fd, (struct sockaddr *)&a, &al) == 0,
            "proxy listen: %s", strerror(errno));
  P.port = ntohs(a.sin_port);
  atomic_store(&P.stop, false);
  atomic_store(&P.refused, 0);
  atomic_store(&P.forwarded, 0);
  P.n_conns = 0;
  cr_assert(pthread_create(&P.acceptor, NULL, accept_main, NULL) == 0);
  P.running = true;
  return P.port;
}

void rt_slot_proxy_answer(const char *match, const char *raw) {
  cr_assert(!P.running && P.n_quirks < 8 && strlen(match) < 64 &&
            strlen(raw) < 128);
  snprintf(P.quirk_match[P.n_quirks], 64, "%s", match);
  snprintf(P.quirk_raw[P.n_quirks], 128, "%s", raw);
  P.n_quirks++;
}

long rt_slot_proxy_refused(void) { return atomic_load(&P.refused); }
long rt_slot_proxy_forwarded(void) { return atomic_load(&P.forwarded); }

void rt_slot_proxy_stop(void) {
  if (!P.running)
    return;
  atomic_store(&P.stop, true);
  pthread_join(P.acceptor, NULL);
  for (int i = 0; i < P.n_conns; i++)
    pthread_join(P.conn_th[i], NULL);
  close(P.listen_fd);
  P.running = false;
  P.n_quirks = 0;
}
