/* One connection's byte stream: connect (DNS, each address in turn, TLS),
 * encode, write once per loop turn, read and parse. See link.h.
 *
 * Life: a link is made by rlock__link_open and ends in exactly one of two
 * ways - it fails (ops->down) or its owner closes it. Either way it stops
 * calling its owner at once, closes its libuv handles, cancels a DNS lookup
 * in flight, and frees itself when libuv has let go of all of them (close
 * callbacks come on a later loop turn, so the link's memory outlives any
 * callback of its own that is still on the stack). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link.h"

typedef struct buf {
  char *p;
  size_t len, cap;
} buf;

struct rlock__link {
  uv_loop_t *loop;
  const rlock__link_ops *ops;
  void *data;
  char peer[300]; /* for details */
  char *host;     /* TCP */
  int port;
  char *path;     /* unix socket */
  int64_t connect_timeout_ms;
  size_t max_queue;
  bool keep; /* the owner keeps the reply being handed over */
  bool join_next; /* the next send goes with the last: no bound */

  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } io;
  bool io_open; /* io initialised and not yet closed */
  uv_connect_t connect_req;
  uv_getaddrinfo_t gai;
  bool gai_pending;
  struct sockaddr_storage *addrs; /* to try, in the resolver's order */
  int n_addrs, next_addr;
  char last_failure[160]; /* why the latest address failed */
  uv_timer_t timer;   /* connect deadline; also delivers an early failure */
  uv_prepare_t flush; /* writes the output once per loop turn */
  int handles;        /* libuv handles not yet closed */

  rlock__tls_ctx *tls_ctx;
  rlock__tls *tls;
  bool tls_done;

  bool up;     /* connected (TLS: handshake done) */
  bool closed; /* down or closed: nothing more is done or told */
  int early_err;
  char early_detail[400];

  buf out;  /* encoded commands not yet handed to libuv */
  buf wire; /* the bytes of the write in flight */
  bool writing;
  uv_write_t write_req;

  redisReader *reader;
  char plain[16384]; /* decrypted bytes (TLS) */
  char in[65536];    /* what a read brings */
};

static void link_fail(rlock__link *l, int err, const char *fmt, ...)
    RLOCK__PRINTF(3, 4);
static void try_next(rlock__link *l);
static void flush_output(rlock__link *l);
static void flush_cb(uv_prepare_t *p);

/* ---- buffers ---- */

static bool buf_reserve(buf *b, size_t more) {
  if (b->cap - b->len >= more)
    return true;
  size_t cap = b->cap > 0 ? b->cap : 4096;
  while (cap - b->len < more)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (p == NULL)
    return false;
  b->p = p;
  b->cap = cap;
  return true;
}

/* After a burst, large buffers are given back rather than kept for ever. */
static void buf_trim(buf *b) {
  if (b->len == 0 && b->cap > (1u << 20)) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

/* ---- the end of a link ---- */

static void maybe_free(rlock__link *l) {
  if (!l->closed || l->handles > 0 || l->gai_pending)
    return;
  if (l->reader != NULL)
    redisReaderFree(l->reader);
  rlock__tls_free(l->tls);
  /* The handshake's AUTH passed through these buffers. */
  rlock__wipe(l->out.p, l->out.cap);
  rlock__wipe(l->wire.p, l->wire.cap);
  free(l->out.p);
  free(l->wire.p);
  free(l->addrs);
  free(l->host);
  free(l->path);
  free(l);
}

static void handle_closed(uv_handle_t *h) {
  rlock__link *l = h->data;
  l->handles--;
  maybe_free(l);
}

static void teardown(rlock__link *l) {
  l->closed = true;
  uv_close((uv_handle_t *)&l->timer, handle_closed);
  uv_close((uv_handle_t *)&l->flush, handle_closed);
  if (l->io_open) {
    l->io_open = false;
    /* Cancels the connect or write in flight (their callbacks see
     * l->closed) and closes the socket. */
    uv_close(&l->io.handle, handle_closed);
  }
  if (l->gai_pending)
    uv_cancel((uv_req_t *)&l->gai); /* its callback still comes */
}

static void link_fail(rlock__link *l, int err, const char *fmt, ...) {
  if (l->closed)
    return;
  char detail[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  l->closed = true; /* before the owner hears of it: no sends from there */
  l->ops->down(l, err, detail);
  teardown(l);
}

void rlock__link_close(rlock__link *l) {
  if (l == NULL || l->closed)
    return;
  teardown(l);
}

/* ---- connecting ---- */

static void timer_fire(uv_timer_t *t) {
  rlock__link *l = t->data;
  if (l->early_err != 0) {
    link_fail(l, l->early_err, "%s", l->early_detail);
    return;
  }
  if (l->tls != NULL) {
    /* Connected, but the handshake never finished: typically a plain-text
     * server, which takes the ClientHello for the start of a command and
     * waits for the rest of it. */
    link_fail(l, RLOCK_ETLS,
              "TLS handshake with %s not answered within connect_timeout_ms "
              "(%lld ms): is the server serving plain text on this port?",
              l->peer, (long long)l->connect_timeout_ms);
    return;
  }
  link_fail(l, RLOCK_ETIMEDOUT,
            "could not connect to %s within connect_timeout_ms (%lld ms)%s%s",
            l->peer, (long long)l->connect_timeout_ms,
            l->last_failure[0] ? ": " : "", l->last_failure);
}

/* A failure found while opening is told on the next loop turn, never from
 * rlock__link_open itself. */
static void fail_soon(rlock__link *l, int err, const char *detail) {
  l->early_err = err;
  snprintf(l->early_detail, sizeof(l->early_detail), "%s", detail);
  uv_timer_start(&l->timer, timer_fire, 0, 0);
}

static int sys_or_conn(int uv_err) {
  return uv_err == UV_EMFILE || uv_err == UV_ENFILE || uv_err == UV_ENOBUFS ||
                 uv_err == UV_ENOMEM
             ? RLOCK_ESYS
             : RLOCK_ECONN;
}

static void set_up(rlock__link *l) {
  l->up = true;
  uv_timer_stop(&l->timer);
  l->ops->up(l);
  if (!l->closed && l->out.len > 0)
    uv_prepare_start(&l->flush, flush_cb);
}

static void process_replies(rlock__link *l) {
  while (!l->closed) {
    void *r = NULL;
    if (redisReaderGetReply(l->reader, &r) != REDIS_OK) {
      if (l->reader->err == REDIS_ERR_OOM)
        link_fail(l, RLOCK_ENOMEM, "out of memory");
      else
        link_fail(l, RLOCK_EPROTO,
                  "protocol error from %s: %s (not a Redis server?)", l->peer,
                  l->reader->errstr);
      return;
    }
    if (r == NULL)
      return;
    l->keep = false;
    l->ops->reply(l, r);
    if (!l->keep)
      freeReplyObject(r);
  }
}

static void feed(rlock__link *l, const char *p, size_t n) {
  if (redisReaderFeed(l->reader, p, n) != REDIS_OK)
    link_fail(l, RLOCK_ENOMEM, "out of memory");
}

/* Ciphertext came: drive the handshake, then decrypt what there is. */
static void tls_input(rlock__link *l, const char *p, size_t n) {
  char detail[256];
  if (rlock__tls_put(l->tls, p, n) != 0) {
    link_fail(l, RLOCK_ENOMEM, "out of memory");
    return;
  }
  if (!l->tls_done) {
    int hs = rlock__tls_handshake(l->tls, detail, sizeof(detail));
    if (hs < 0) {
      link_fail(l, RLOCK_ETLS, "TLS handshake with %s failed: %s", l->peer,
                detail);
      return;
    }
    flush_output(l); /* the handshake's next flight */
    if (hs == 0 || l->closed)
      return;
    l->tls_done = true;
    set_up(l);
    if (l->closed)
      return;
  }
  long got;
  int err = 0;
  while ((got = rlock__tls_read(l->tls, l->plain, sizeof(l->plain), detail,
                                sizeof(detail))) > 0) {
    feed(l, l->plain, (size_t)got);
    if (l->closed)
      return;
  }
  if (got < 0)
    err = (int)got;
  process_replies(l); /* what came before a close or an alert counts */
  if (l->closed)
    return;
  if (err != 0) {
    link_fail(l, err, "%s: %s", l->peer, detail);
    return;
  }
  if (rlock__tls_pending(l->tls) > 0) /* e.g. a key update's answer */
    uv_prepare_start(&l->flush, flush_cb);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  rlock__link *l = h->data;
  *b = uv_buf_init(l->in, sizeof(l->in));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  rlock__link *l = s->data;
  if (l->closed)
    return;
  if (nread < 0) {
    if (l->tls != NULL && !l->tls_done)
      link_fail(l, RLOCK_ETLS,
                "%s closed the connection during the TLS handshake (%s; is "
                "it serving TLS on this port?)",
                l->peer, nread == UV_EOF ? "end of stream" : uv_strerror((int)nread));
    else if (nread == UV_EOF)
      link_fail(l, RLOCK_ECONN, "%s: connection closed by the server",
                l->peer);
    else
      link_fail(l, RLOCK_ECONN, "%s: %s", l->peer, uv_strerror((int)nread));
    return;
  }
  if (nread == 0)
    return;
  if (l->tls != NULL) {
    tls_input(l, b->base, (size_t)nread);
    return;
  }
  feed(l, b->base, (size_t)nread);
  process_replies(l);
}

static void connected(rlock__link *l) {
  int rc = uv_read_start(&l->io.stream, alloc_cb, read_cb);
  if (rc != 0) {
    link_fail(l, RLOCK_ECONN, "%s: %s", l->peer, uv_strerror(rc));
    return;
  }
  if (l->tls_ctx == NULL) {
    set_up(l);
    return;
  }
  l->tls = rlock__tls_new(l->tls_ctx);
  if (l->tls == NULL) {
    link_fail(l, RLOCK_ENOMEM, "out of memory (TLS session)");
    return;
  }
  char detail[256];
  if (rlock__tls_handshake(l->tls, detail, sizeof(detail)) < 0) {
    link_fail(l, RLOCK_ETLS, "TLS handshake with %s failed: %s", l->peer,
              detail);
    return;
  }
  flush_output(l); /* the ClientHello */
}

static void io_closed_then_next(uv_handle_t *h) {
  rlock__link *l = h->data;
  l->handles--;
  if (l->closed)
    maybe_free(l);
  else
    try_next(l);
}

/* This address failed: close its socket, then try the next one. */
static void address_failed(rlock__link *l, int uv_err, const char *addr) {
  snprintf(l->last_failure, sizeof(l->last_failure), "%s%s%s", addr,
           addr[0] ? ": " : "", uv_strerror(uv_err));
  if (sys_or_conn(uv_err) == RLOCK_ESYS) {
    link_fail(l, RLOCK_ESYS, "cannot connect to %s: %s", l->peer,
              l->last_failure);
    return;
  }
  l->io_open = false;
  uv_close(&l->io.handle, io_closed_then_next);
}

static void addr_text(const struct sockaddr_storage *sa, char *buf,
                      size_t n) {
  char ip[64] = "?";
  if (sa->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const void *)sa;
    uv_ip6_name(a, ip, sizeof(ip));
    snprintf(buf, n, "[%s]:%d", ip, ntohs(a->sin6_port));
  } else {
    const struct sockaddr_in *a = (const void *)sa;
    uv_ip4_name(a, ip, sizeof(ip));
    snprintf(buf, n, "%s:%d", ip, ntohs(a->sin_port));
  }
}

static void connect_cb(uv_connect_t *req, int status) {
  rlock__link *l = req->data;
  if (l->closed)
    return;
  if (status < 0) {
    char addr[80] = "";
    if (l->path == NULL && l->next_addr > 0 && l->n_addrs > 1)
      addr_text(&l->addrs[l->next_addr - 1], addr, sizeof(addr));
    address_failed(l, status, addr);
    return;
  }
  connected(l);
}

static void try_next(rlock__link *l) {
  if (l->path != NULL || l->next_addr >= l->n_addrs) {
    /* Every address was tried (a unix socket has one). */
    link_fail(l, RLOCK_ECONN, "%s: %s", l->peer,
              l->last_failure[0] ? l->last_failure : "no address");
    return;
  }
  const struct sockaddr_storage *sa = &l->addrs[l->next_addr++];
  int rc = uv_tcp_init(l->loop, &l->io.tcp);
  if (rc != 0) {
    link_fail(l, RLOCK_ESYS, "cannot create a socket: %s", uv_strerror(rc));
    return;
  }
  l->io.handle.data = l;
  l->io_open = true;
  l->handles++;
  uv_tcp_nodelay(&l->io.tcp, 1);
  l->connect_req.data = l;
  rc = uv_tcp_connect(&l->connect_req, &l->io.tcp,
                      (const struct sockaddr *)sa, connect_cb);
  if (rc != 0) {
    char addr[80];
    addr_text(sa, addr, sizeof(addr));
    address_failed(l, rc, l->n_addrs > 1 ? addr : "");
  }
}

static void resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  rlock__link *l = req->data;
  l->gai_pending = false;
  if (l->closed) {
    uv_freeaddrinfo(res);
    maybe_free(l);
    return;
  }
  if (status < 0) {
    uv_freeaddrinfo(res);
    link_fail(l, RLOCK_ECONN, "cannot resolve '%s': %s", l->host,
              uv_strerror(status));
    return;
  }
  int n = 0;
  for (struct addrinfo *a = res; a != NULL; a = a->ai_next)
    n++;
  l->addrs = calloc(n > 0 ? (size_t)n : 1, sizeof(*l->addrs));
  if (l->addrs == NULL) {
    uv_freeaddrinfo(res);
    link_fail(l, RLOCK_ENOMEM, "out of memory");
    return;
  }
  for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
        a->ai_addrlen <= sizeof(*l->addrs))
      memcpy(&l->addrs[l->n_addrs++], a->ai_addr, a->ai_addrlen);
  }
  uv_freeaddrinfo(res);
  snprintf(l->last_failure, sizeof(l->last_failure),
           "'%s' has no IPv4 or IPv6 address", l->host);
  try_next(l);
}

/* Starts the first attempt: a unix socket, a literal address, or a DNS
 * lookup on libuv's thread pool. 0, or a libuv error to report. */
static int start(rlock__link *l) {
  if (l->path != NULL) {
    int rc = uv_pipe_init(l->loop, &l->io.pipe, 0);
    if (rc != 0)
      return rc;
    l->io.handle.data = l;
    l->io_open = true;
    l->handles++;
    l->connect_req.data = l;
    uv_pipe_connect(&l->connect_req, &l->io.pipe, l->path, connect_cb);
    return 0;
  }
  l->addrs = calloc(1, sizeof(*l->addrs));
  if (l->addrs == NULL)
    return UV_ENOMEM;
  if (uv_ip4_addr(l->host, l->port, (struct sockaddr_in *)&l->addrs[0]) ==
          0 ||
      uv_ip6_addr(l->host, l->port, (struct sockaddr_in6 *)&l->addrs[0]) ==
          0) {
    l->n_addrs = 1;
    try_next(l);
    return 0;
  }
  free(l->addrs);
  l->addrs = NULL;
  char port[16];
  snprintf(port, sizeof(port), "%d", l->port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  l->gai.data = l;
  int rc = uv_getaddrinfo(l->loop, &l->gai, resolved, l->host, port, &hints);
  if (rc == 0)
    l->gai_pending = true;
  return rc;
}

rlock__link *rlock__link_open(uv_loop_t *loop, const rlock__link_cfg *cfg,
                              const rlock__link_ops *ops, void *data) {
  const rlock__uri *u = cfg->uri;
  rlock__link *l = calloc(1, sizeof(*l));
  if (l == NULL)
    return NULL;
  l->loop = loop;
  l->ops = ops;
  l->data = data;
  l->tls_ctx = cfg->tls;
  l->connect_timeout_ms = cfg->connect_timeout_ms;
  l->max_queue = (size_t)cfg->max_queue;
  if (u->is_unix) {
    l->path = strdup(u->path);
    snprintf(l->peer, sizeof(l->peer), "%s", u->path);
  } else {
    l->host = strdup(u->host);
    l->port = u->port;
    snprintf(l->peer, sizeof(l->peer),
             strchr(u->host, ':') != NULL ? "[%s]:%d" : "%s:%d", u->host,
             u->port);
  }
  l->reader = redisReaderCreate();
  if ((l->path == NULL && l->host == NULL) || l->reader == NULL) {
    if (l->reader != NULL)
      redisReaderFree(l->reader);
    free(l->path);
    free(l->host);
    free(l);
    return NULL;
  }
  uv_timer_init(loop, &l->timer);
  uv_prepare_init(loop, &l->flush);
  l->timer.data = l;
  l->flush.data = l;
  l->handles = 2;
  uv_timer_start(&l->timer, timer_fire, (uint64_t)cfg->connect_timeout_ms, 0);
  int rc = start(l);
  if (rc != 0) {
    char detail[sizeof(l->early_detail)];
    snprintf(detail, sizeof(detail), "cannot connect to %s: %s", l->peer,
             uv_strerror(rc));
    fail_soon(l, rc == UV_ENOMEM ? RLOCK_ENOMEM : sys_or_conn(rc), detail);
  }
  return l;
}

void *rlock__link_data(const rlock__link *l) { return l->data; }

const char *rlock__link_peer(const rlock__link *l) { return l->peer; }

/* ---- output ---- */

void rlock__link_keep_reply(rlock__link *l) { l->keep = true; }

void rlock__link_join_next(rlock__link *l) { l->join_next = true; }

size_t rlock__link_queued(const rlock__link *l) {
  /* Of the write in flight, only what the kernel has not taken yet (the
   * write's callback may come a loop turn after the last byte left). */
  return l->out.len +
         (l->writing ? uv_stream_get_write_queue_size(&l->io.stream) : 0);
}

/* The decimal digits of n; 20 at most. */
static size_t dec_len(size_t n) {
  size_t d = 1;
  while (n >= 10) {
    n /= 10;
    d++;
  }
  return d;
}

/* Writes c, the decimal n, CR LF at p; returns the end. */
static char *put_header(char *p, char c, size_t n) {
  size_t d = dec_len(n);
  *p++ = c;
  for (size_t i = d; i > 0; i--) {
    p[i - 1] = (char)('0' + n % 10);
    n /= 10;
  }
  p += d;
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

int rlock__link_send(rlock__link *l, int argc, const char **argv,
                     const size_t *lens) {
  assert(argc > 0);
  if (l->closed)
    return RLOCK_ECONN;
  /* The command in RESP, as hiredis's redisFormatCommandArgv writes it, but
   * straight into the output (no copy, no printf on the loop thread). */
  size_t len = 1 + dec_len((size_t)argc) + 2;
  for (int i = 0; i < argc; i++)
    len += 1 + dec_len(lens[i]) + 2 + lens[i] + 2;
  size_t queued = rlock__link_queued(l);
  bool joined = l->join_next;
  l->join_next = false;
  if (!joined && queued > 0 && queued + len > l->max_queue)
    return RLOCK_EBACKLOG;
  if (!buf_reserve(&l->out, len))
    return RLOCK_ENOMEM;
  char *p = put_header(l->out.p + l->out.len, '*', (size_t)argc);
  for (int i = 0; i < argc; i++) {
    p = put_header(p, '$', lens[i]);
    if (lens[i] > 0)
      memcpy(p, argv[i], lens[i]);
    p += lens[i];
    *p++ = '\r';
    *p++ = '\n';
  }
  assert((size_t)(p - (l->out.p + l->out.len)) == len);
  l->out.len += len;
  if (l->up)
    uv_prepare_start(&l->flush, flush_cb);
  return 0;
}

static void flush_cb(uv_prepare_t *p) { flush_output(p->data); }

static void write_cb(uv_write_t *req, int status) {
  rlock__link *l = req->data;
  l->writing = false;
  l->wire.len = 0;
  if (l->closed)
    return;
  if (status < 0) {
    link_fail(l, sys_or_conn(status), "%s: %s", l->peer, uv_strerror(status));
    return;
  }
  buf_trim(&l->wire);
  if (l->out.len > 0 || (l->tls != NULL && rlock__tls_pending(l->tls) > 0))
    uv_prepare_start(&l->flush, flush_cb);
}

/* Hands what is queued to the socket in one write (what the socket does
 * not take at once goes to libuv). One write at a time: what comes
 * meanwhile goes with the next. Called from the uv_prepare handle (once per
 * loop turn, with everything queued during the turn) and during the TLS
 * handshake. */
static void flush_output(rlock__link *l) {
  uv_prepare_stop(&l->flush);
  if (l->closed || l->writing)
    return;
  if (l->tls != NULL) {
    if (l->tls_done && l->out.len > 0) {
      char detail[256];
      int rc = rlock__tls_write(l->tls, l->out.p, l->out.len, detail,
                                sizeof(detail));
      if (rc != 0) {
        link_fail(l, rc, "%s: %s", l->peer, detail);
        return;
      }
      l->out.len = 0;
      buf_trim(&l->out);
    }
    size_t n = rlock__tls_pending(l->tls);
    if (n == 0)
      return;
    if (!buf_reserve(&l->wire, n)) {
      link_fail(l, RLOCK_ENOMEM, "out of memory");
      return;
    }
    l->wire.len = rlock__tls_take(l->tls, l->wire.p, n);
  } else {
    if (!l->up || l->out.len == 0)
      return;
    buf t = l->wire; /* empty: no write is in flight */
    l->wire = l->out;
    l->out = t;
  }
  if (l->wire.len == 0)
    return;
  uv_buf_t b;
  b.base = l->wire.p;
  b.len = l->wire.len;
  /* Most writes fit the socket at once: written here, they need no
   * request, no completion callback on a later loop turn and no change of
   * the socket's poll interest (two system calls fewer per write). Only
   * what the socket does not take waits for libuv. */
  int n = uv_try_write(&l->io.stream, &b, 1);
  if (n == (int)l->wire.len) {
    l->wire.len = 0;
    buf_trim(&l->wire);
    return;
  }
  /* A failed write goes to libuv too, which tells it a loop turn later,
   * as before: a TLS peer's alert that explains it (a client certificate
   * required) is read first. */
  if (n > 0) {
    memmove(l->wire.p, l->wire.p + n, l->wire.len - (size_t)n);
    l->wire.len -= (size_t)n;
    b.len = l->wire.len;
  }
  l->write_req.data = l;
  l->writing = true;
  int rc = uv_write(&l->write_req, &l->io.stream, &b, 1, write_cb);
  if (rc != 0) {
    l->writing = false;
    l->wire.len = 0;
    link_fail(l, sys_or_conn(rc), "%s: %s", l->peer, uv_strerror(rc));
  }
}
