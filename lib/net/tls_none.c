/* A build without TLS (meson -Dtls=disabled, or no OpenSSL found with the
 * default -Dtls=auto): a rediss:// client fails to open with RLOCK_ETLS,
 * naming the option to build with. Nothing else here is ever reached. */
#include <stdlib.h>

#include "tls.h"

const bool rlock__tls_available = false;

int rlock__tls_ctx_new(rlock__tls_ctx **out, const rlock_options *o,
                       const char *host) {
  (void)o;
  (void)host;
  *out = NULL;
  rlock__set_last_error("rediss:// needs TLS, and this rlock was built "
                        "without it: rebuild with `meson setup "
                        "-Dtls=enabled` (OpenSSL: libssl-dev)");
  return RLOCK_ETLS;
}

void rlock__tls_ctx_free(rlock__tls_ctx *ctx) { (void)ctx; }

rlock__tls *rlock__tls_new(rlock__tls_ctx *ctx) {
  (void)ctx;
  return NULL;
}

void rlock__tls_free(rlock__tls *t) { (void)t; }

int rlock__tls_put(rlock__tls *t, const char *buf, size_t len) {
  (void)t;
  (void)buf;
  (void)len;
  return RLOCK_ETLS;
}

int rlock__tls_handshake(rlock__tls *t, char *detail, size_t n) {
  (void)t;
  (void)detail;
  (void)n;
  return RLOCK_ETLS;
}

long rlock__tls_read(rlock__tls *t, char *buf, size_t cap, char *detail,
                     size_t n) {
  (void)t;
  (void)buf;
  (void)cap;
  (void)detail;
  (void)n;
  return RLOCK_ETLS;
}

int rlock__tls_write(rlock__tls *t, const char *buf, size_t len,
                     char *detail, size_t n) {
  (void)t;
  (void)buf;
  (void)len;
  (void)detail;
  (void)n;
  return RLOCK_ETLS;
}

size_t rlock__tls_pending(rlock__tls *t) {
  (void)t;
  return 0;
}

size_t rlock__tls_take(rlock__tls *t, char *buf, size_t cap) {
  (void)t;
  (void)buf;
  (void)cap;
  return 0;
}
