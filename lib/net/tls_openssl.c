/* TLS with OpenSSL over memory BIOs (see tls.h). The socket stays libuv's:
 * ciphertext from the stream goes into the session's read BIO, and what
 * OpenSSL writes to its write BIO is sent by link.c in the same write as
 * any other output. Nothing here blocks or touches a file descriptor after
 * the context is built. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tls.h"

const bool rlock__tls_available = true;

struct rlock__tls_ctx {
  SSL_CTX *ssl;
  char *name;   /* verified and (for a DNS name) sent as SNI */
  bool name_ip; /* name is an IP address: checked as one, no SNI */
  bool verify;
};

struct rlock__tls {
  SSL *ssl;
  BIO *in, *out; /* owned by ssl */
};

/* OpenSSL's most recent error as a short text ("wrong version number"),
 * emptying its per-thread queue. */
static void ssl_reason(char *buf, size_t n) {
  unsigned long last = 0, e;
  while ((e = ERR_get_error()) != 0)
    last = e;
  if (last == 0) {
    snprintf(buf, n, "%s", "unknown error");
    return;
  }
  const char *reason = ERR_reason_error_string(last);
  if (reason != NULL)
    snprintf(buf, n, "%s", reason);
  else
    ERR_error_string_n(last, buf, n);
}

static int ctx_fail(rlock__tls_ctx *c, const char *fmt, const char *what,
                    const char *why) {
  rlock__set_last_error(fmt, what, why);
  rlock__tls_ctx_free(c);
  return RLOCK_ETLS;
}

/* A readable file: a clearer reason (errno's) than OpenSSL gives for a
 * missing or unreadable one. */
static bool readable(const char *path, char *why, size_t n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    snprintf(why, n, "%s", strerror(errno));
    return false;
  }
  fclose(f);
  return true;
}

/* Encrypted private keys are not supported: without this, OpenSSL would
 * ask for the pass phrase on the process's terminal. */
static int no_password(char *buf, int size, int rwflag, void *data) {
  (void)buf;
  (void)size;
  (void)rwflag;
  (void)data;
  return 0;
}

static bool is_ip(const char *s) {
  unsigned char addr[16];
  return inet_pton(AF_INET, s, addr) == 1 || inet_pton(AF_INET6, s, addr) == 1;
}

int rlock__tls_ctx_new(rlock__tls_ctx **out, const rlock_options *o,
                       const char *host) {
  *out = NULL;
  char why[256];
  rlock__tls_ctx *c = calloc(1, sizeof(*c));
  const char *name = o->tls_server_name != NULL ? o->tls_server_name : host;
  if (c == NULL || (c->name = strdup(name)) == NULL) {
    free(c);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  c->name_ip = is_ip(name);
  c->verify = o->tls_insecure == 0;
  ERR_clear_error();
  c->ssl = SSL_CTX_new(TLS_client_method());
  if (c->ssl == NULL) {
    ssl_reason(why, sizeof(why));
    return ctx_fail(c, "%s: %s", "cannot create the TLS context", why);
  }
  SSL_CTX_set_min_proto_version(c->ssl, TLS1_2_VERSION);
  SSL_CTX_set_mode(c->ssl, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_default_passwd_cb(c->ssl, no_password);
  SSL_CTX_set_verify(c->ssl, c->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE,
                     NULL);

  if (o->tls_ca_file != NULL && !readable(o->tls_ca_file, why, sizeof(why)))
    return ctx_fail(c, "cannot read tls_ca_file '%s': %s", o->tls_ca_file,
                    why);
  if (o->tls_ca_dir != NULL) {
    DIR *d = opendir(o->tls_ca_dir);
    if (d == NULL) {
      snprintf(why, sizeof(why), "%s", strerror(errno));
      return ctx_fail(c, "cannot open tls_ca_dir '%s': %s", o->tls_ca_dir,
                      why);
    }
    closedir(d);
  }
  if (o->tls_ca_file != NULL || o->tls_ca_dir != NULL) {
    if (SSL_CTX_load_verify_locations(c->ssl, o->tls_ca_file,
                                      o->tls_ca_dir) != 1) {
      ssl_reason(why, sizeof(why));
      return ctx_fail(c, "cannot load the CA certificates of '%s': %s",
                      o->tls_ca_file != NULL ? o->tls_ca_file
                                             : o->tls_ca_dir,
                      why);
    }
  } else if (SSL_CTX_set_default_verify_paths(c->ssl) != 1) {
    ssl_reason(why, sizeof(why));
    return ctx_fail(c, "%s: %s", "cannot load the system's CA certificates",
                    why);
  }

  if (o->tls_cert_file != NULL) {
    if (!readable(o->tls_cert_file, why, sizeof(why)))
      return ctx_fail(c, "cannot read tls_cert_file '%s': %s",
                      o->tls_cert_file, why);
    if (!readable(o->tls_key_file, why, sizeof(why)))
      return ctx_fail(c, "cannot read tls_key_file '%s': %s",
                      o->tls_key_file, why);
    if (SSL_CTX_use_certificate_chain_file(c->ssl, o->tls_cert_file) != 1) {
      ssl_reason(why, sizeof(why));
      return ctx_fail(c, "cannot use tls_cert_file '%s': %s",
                      o->tls_cert_file, why);
    }
    if (SSL_CTX_use_PrivateKey_file(c->ssl, o->tls_key_file,
                                    SSL_FILETYPE_PEM) != 1) {
      ssl_reason(why, sizeof(why));
      if (strstr(why, "mismatch") != NULL)
        return ctx_fail(c, "tls_key_file '%s' does not match tls_cert_file: "
                           "%s",
                        o->tls_key_file, why);
      return ctx_fail(c,
                      "cannot use tls_key_file '%s': %s (an unencrypted PEM "
                      "private key is expected)",
                      o->tls_key_file, why);
    }
    if (SSL_CTX_check_private_key(c->ssl) != 1) {
      ssl_reason(why, sizeof(why));
      return ctx_fail(c, "tls_key_file '%s' does not match tls_cert_file: %s",
                      o->tls_key_file, why);
    }
  }
  *out = c;
  return 0;
}

void rlock__tls_ctx_free(rlock__tls_ctx *c) {
  if (c == NULL)
    return;
  SSL_CTX_free(c->ssl);
  free(c->name);
  free(c);
}

rlock__tls *rlock__tls_new(rlock__tls_ctx *c) {
  rlock__tls *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return NULL;
  t->ssl = SSL_new(c->ssl);
  t->in = BIO_new(BIO_s_mem());
  t->out = BIO_new(BIO_s_mem());
  if (t->ssl == NULL || t->in == NULL || t->out == NULL) {
    BIO_free(t->in);
    BIO_free(t->out);
    SSL_free(t->ssl);
    free(t);
    ERR_clear_error();
    return NULL;
  }
  /* An empty read BIO means "wait for more", not end of stream. */
  BIO_set_mem_eof_return(t->in, -1);
  SSL_set_bio(t->ssl, t->in, t->out);
  SSL_set_connect_state(t->ssl);
  bool ok = true;
  if (!c->name_ip) /* SNI carries DNS names only (RFC 6066) */
    ok = SSL_set_tlsext_host_name(t->ssl, c->name) == 1;
  if (ok && c->verify) {
    if (c->name_ip) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), c->name) ==
           1;
    } else {
      SSL_set_hostflags(t->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      ok = SSL_set1_host(t->ssl, c->name) == 1;
    }
  }
  if (!ok) {
    rlock__tls_free(t);
    ERR_clear_error();
    return NULL;
  }
  return t;
}

void rlock__tls_free(rlock__tls *t) {
  if (t == NULL)
    return;
  SSL_free(t->ssl); /* frees both BIOs */
  free(t);
}

int rlock__tls_put(rlock__tls *t, const char *buf, size_t len) {
  while (len > 0) {
    int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
    int w = BIO_write(t->in, buf, chunk);
    if (w <= 0) {
      ERR_clear_error();
      return RLOCK_ENOMEM;
    }
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Why a session failed: the certificate check's verdict when there is
 * one, else OpenSSL's reason, with a hint for the usual cause. */
static void session_error(rlock__tls *t, char *detail, size_t n) {
  long v = SSL_get_verify_result(t->ssl);
  if (v != X509_V_OK) {
    ERR_clear_error();
    snprintf(detail, n, "certificate verify failed: %s",
             X509_verify_cert_error_string(v));
    return;
  }
  char why[200];
  ssl_reason(why, sizeof(why));
  const char *hint = "";
  if (strstr(why, "wrong version number") != NULL ||
      strstr(why, "packet length too long") != NULL ||
      strstr(why, "record layer failure") != NULL)
    hint = " (is the server serving plain text on this port?)";
  else if (strstr(why, "certificate required") != NULL ||
           strstr(why, "handshake failure") != NULL)
    hint = " (does the server require a client certificate: "
           "tls_cert_file and tls_key_file?)";
  else if (strstr(why, "alert unknown ca") != NULL ||
           strstr(why, "alert bad certificate") != NULL)
    /* alerts a server sends only about the client's certificate */
    hint = " (the server refused tls_cert_file: is it signed by a CA the "
           "server trusts?)";
  snprintf(detail, n, "%s%s", why, hint);
}

int rlock__tls_handshake(rlock__tls *t, char *detail, size_t n) {
  ERR_clear_error();
  int r = SSL_do_handshake(t->ssl);
  if (r == 1)
    return 1;
  int e = SSL_get_error(t->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    return 0;
  session_error(t, detail, n);
  return RLOCK_ETLS;
}

long rlock__tls_read(rlock__tls *t, char *buf, size_t cap, char *detail,
                     size_t n) {
  ERR_clear_error();
  int r = SSL_read(t->ssl, buf, cap > INT32_MAX ? INT32_MAX : (int)cap);
  if (r > 0)
    return r;
  int e = SSL_get_error(t->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    return 0;
  if (e == SSL_ERROR_ZERO_RETURN) {
    snprintf(detail, n, "the server closed the TLS session");
    return RLOCK_ECONN;
  }
  session_error(t, detail, n);
  return RLOCK_ETLS;
}

int rlock__tls_write(rlock__tls *t, const char *buf, size_t len,
                     char *detail, size_t n) {
  while (len > 0) {
    ERR_clear_error();
    int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
    int w = SSL_write(t->ssl, buf, chunk);
    if (w <= 0) {
      session_error(t, detail, n);
      return RLOCK_ETLS;
    }
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

size_t rlock__tls_pending(rlock__tls *t) { return BIO_ctrl_pending(t->out); }

size_t rlock__tls_take(rlock__tls *t, char *buf, size_t cap) {
  int r = BIO_read(t->out, buf, cap > INT32_MAX ? INT32_MAX : (int)cap);
  return r > 0 ? (size_t)r : 0;
}
