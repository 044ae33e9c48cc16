/* One connection's byte stream (link.c): a libuv stream - TCP to each
 * address the host resolves to (uv_getaddrinfo: the loop never blocks on
 * DNS), or a unix socket - with TLS over it for rediss://, its own RESP
 * encoder and hiredis's redisReader to parse. Output is coalesced into
 * one write per loop turn (uv_try_write; libuv takes what the socket does
 * not), into a queue bounded by max_write_queue_bytes. Knows nothing of what the replies answer: conn.c
 * matches them. Internal to the net layer; loop thread only. */
#ifndef RLOCK_LINK_H
#define RLOCK_LINK_H

#include <hiredis.h>
#include <uv.h>

#include "tls.h"

typedef struct rlock__link rlock__link;

/* What a link tells its owner. No call comes after `down`, nor after the
 * owner's rlock__link_close(). */
typedef struct rlock__link_ops {
  /* Connected (and, for TLS, the handshake done): what was sent before
   * goes out now. */
  void (*up)(rlock__link *l);
  /* A reply, borrowed for the call (the link frees it). The owner may
   * send, or close the link, from here. */
  void (*reply)(rlock__link *l, redisReply *r);
  /* The link failed - could not connect within the connect timeout, the
   * TLS handshake failed, the peer closed or broke the stream, or it sent
   * bytes that are no RESP - with RLOCK_ECONN, RLOCK_ETIMEDOUT,
   * RLOCK_ETLS, RLOCK_EPROTO, RLOCK_ESYS or RLOCK_ENOMEM and a sentence
   * naming the peer. The link then closes itself. */
  void (*down)(rlock__link *l, int err, const char *detail);
} rlock__link_ops;

typedef struct rlock__link_cfg {
  const rlock__uri *uri;   /* host and port, or the socket path (copied) */
  rlock__tls_ctx *tls;     /* NULL: plain text. Must outlive the link. */
  int64_t connect_timeout_ms;
  int64_t max_queue;       /* bytes; see rlock__link_send */
} rlock__link_cfg;

/* Starts connecting. Returns the link (ops are called from later loop
 * turns, never from here), or NULL when out of memory. */
rlock__link *rlock__link_open(uv_loop_t *loop, const rlock__link_cfg *cfg,
                              const rlock__link_ops *ops, void *data);
void *rlock__link_data(const rlock__link *l);
/* "host:port", "[v6]:port" or the socket path, for details. */
const char *rlock__link_peer(const rlock__link *l);
/* Encodes a command into the output queue; it is written on this loop
 * turn once the link is up. 0; RLOCK_EBACKLOG when the queue is not empty
 * and would grow past max_queue bytes; RLOCK_ENOMEM; RLOCK_ECONN after
 * down or close. */
int rlock__link_send(rlock__link *l, int argc, const char **argv,
                     const size_t *lens);
/* The next rlock__link_send goes with the one just made (a SCRIPT LOAD and
 * its EVALSHA): never refused for the bound, so the pair is accepted or
 * refused as one, by its first part. */
void rlock__link_join_next(rlock__link *l);
/* From inside the reply op: the owner keeps the reply (and frees it with
 * freeReplyObject) instead of the link freeing it after the call. */
void rlock__link_keep_reply(rlock__link *l);
/* Bytes accepted by rlock__link_send and not yet taken by the kernel. */
size_t rlock__link_queued(const rlock__link *l);
/* The owner lets go: no more calls; what was queued is dropped; the
 * stream closes and the link frees itself once libuv is done with it.
 * Not after down (the link is gone then). */
void rlock__link_close(rlock__link *l);

#endif
