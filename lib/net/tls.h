/* TLS for rediss:// connections: a session that never touches a socket.
 * OpenSSL reads and writes two memory BIOs; link.c moves the bytes between
 * them and the libuv stream. Built from tls_openssl.c with -Dtls (OpenSSL),
 * else from tls_none.c, whose context constructor fails with RLOCK_ETLS.
 * Internal to the net layer; loop thread only, except rlock__tls_ctx_new
 * and rlock__tls_ctx_free (the opening thread). */
#ifndef RLOCK_TLS_H
#define RLOCK_TLS_H

#include <stddef.h>

#include "util.h"

typedef struct rlock__tls_ctx rlock__tls_ctx;
typedef struct rlock__tls rlock__tls;

/* Whether this build has TLS. */
extern const bool rlock__tls_available;

/* The client's TLS settings from its options: trusted CAs, the client
 * certificate and key (checked against each other), verification, TLS 1.2
 * at least. `host` is the URI's host: the name verified (and sent as SNI)
 * unless o->tls_server_name is set. Reads the files now, so an unusable
 * one fails the open. 0, or RLOCK_ETLS / RLOCK_ENOMEM with the thread's
 * last error naming the file and OpenSSL's reason. */
int rlock__tls_ctx_new(rlock__tls_ctx **out, const rlock_options *o,
                       const char *host);
void rlock__tls_ctx_free(rlock__tls_ctx *ctx); /* NULL ok */

/* A client session for one connection. NULL when out of memory. */
rlock__tls *rlock__tls_new(rlock__tls_ctx *ctx);
void rlock__tls_free(rlock__tls *t); /* NULL ok */

/* Bytes received from the peer. 0 or RLOCK_ENOMEM. */
int rlock__tls_put(rlock__tls *t, const char *buf, size_t len);
/* Advances the handshake: 1 when it is complete, 0 when it waits for the
 * peer, or RLOCK_ETLS with the reason in detail (verification result,
 * OpenSSL's error, or the peer's alert). */
int rlock__tls_handshake(rlock__tls *t, char *detail, size_t n);
/* Decrypts into buf: the number of bytes (> 0), 0 when nothing more can be
 * read for now, RLOCK_ECONN when the peer closed the session
 * (close_notify), RLOCK_ETLS on a protocol error (detail says why). */
long rlock__tls_read(rlock__tls *t, char *buf, size_t cap, char *detail,
                     size_t n);
/* Encrypts len bytes (after the handshake). 0, RLOCK_ENOMEM or RLOCK_ETLS. */
int rlock__tls_write(rlock__tls *t, const char *buf, size_t len,
                     char *detail, size_t n);
/* Encrypted bytes waiting to be sent to the peer, and taking them. */
size_t rlock__tls_pending(rlock__tls *t);
size_t rlock__tls_take(rlock__tls *t, char *buf, size_t cap);

#endif
