/* rediss://: rlock over TLS against a real redis-server with --tls-port.
 *
 * Each test makes a throw-away CA and certificates with the openssl command
 * line in its own temporary directory (EC P-256 keys; nothing is kept) and
 * starts the harness's redis-server with a TLS port beside its plain one:
 * rlock connects to the TLS port, the test's own assertions (rt_*) use the
 * plain one. The suite never skips: a build without TLS fails it. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "faultkit.h"
#include "harness.h"
#include "tls.h"

static char g_dir[256];
static int g_tls_port;
static char g_uri[64]; /* rediss://127.0.0.1:<tls port> */

static void path_of(char *buf, size_t n, const char *file) {
  snprintf(buf, n, "%s/%s", g_dir, file);
}

static const char cnf[] =
    "[req]\n"
    "distinguished_name = dn\n"
    "prompt = no\n"
    "[dn]\n"
    "CN = rlock tls test\n"
    "[v3_ca]\n"
    "basicConstraints = critical,CA:TRUE\n"
    "keyUsage = critical,keyCertSign,cRLSign\n"
    "subjectKeyIdentifier = hash\n"
    "[v3_server]\n"
    "basicConstraints = critical,CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = serverAuth\n"
    "subjectAltName = IP:127.0.0.1,DNS:localhost\n"
    "[v3_wrongname]\n"
    "basicConstraints = critical,CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = serverAuth\n"
    "subjectAltName = DNS:wrong.example\n"
    "[v3_client]\n"
    "basicConstraints = critical,CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = clientAuth\n";

static void openssl(const char *fmt, ...) {
  char args[600], cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "cd '%s' && openssl %s >>openssl.log 2>&1", g_dir,
           args);
  int st = system(cmd);
  cr_assert_eq(st, 0, "openssl %s: status %d (see %s/openssl.log)", args, st,
               g_dir);
}

/* key + a certificate signed by `ca` (or self-signed when ca is NULL)
 * with extensions `ext` from the config, valid for `days` (-1: expired
 * yesterday). */
static void make_cert(const char *name, const char *ca, const char *ext,
                      int days, int serial) {
  openssl("ecparam -name prime256v1 -genkey -noout -out %s.key", name);
  openssl("req -new -key %s.key -config tls.cnf -subj /CN=%s -out %s.csr",
          name, name, name);
  if (ca == NULL)
    openssl("x509 -req -in %s.csr -signkey %s.key -days %d -sha256 "
            "-extfile tls.cnf -extensions %s -out %s.crt",
            name, name, days, ext, name);
  else
    openssl("x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -set_serial %d "
            "-days %d -sha256 -extfile tls.cnf -extensions %s -out %s.crt",
            name, ca, ca, serial, days, ext, name);
}

static void make_certs(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/rlock-tls.XXXXXX");
  cr_assert_not_null(mkdtemp(g_dir));
  char path[300];
  path_of(path, sizeof path, "tls.cnf");
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL && fputs(cnf, f) >= 0 && fclose(f) == 0);
  openssl("ecparam -name prime256v1 -genkey -noout -out ca.key");
  openssl("req -x509 -new -key ca.key -config tls.cnf -extensions v3_ca "
          "-days 2 -sha256 -out ca.crt");
  openssl("ecparam -name prime256v1 -genkey -noout -out otherca.key");
  openssl("req -x509 -new -key otherca.key -config tls.cnf -extensions v3_ca "
          "-subj /CN=other -days 2 -sha256 -out otherca.crt");
  make_cert("server", "ca", "v3_server", 2, 2);
  make_cert("client", "ca", "v3_client", 2, 3);
  make_cert("expired", "ca", "v3_server", -1, 4);
  make_cert("wrongname", "ca", "v3_wrongname", 2, 5);
  make_cert("selfsigned", NULL, "v3_server", 2, 6);
}

/* (Re)starts the harness's server with a TLS port serving `cert`: a fresh
 * one the first time (g_tls_port 0), then the same, which g_uri names. */
static void tls_server(const char *cert, bool auth_clients) {
  static char port_s[16], crt[300], key[300], ca[300];
  snprintf(port_s, sizeof port_s, "%d", g_tls_port);
  snprintf(crt, sizeof crt, "%s/%s.crt", g_dir, cert);
  snprintf(key, sizeof key, "%s/%s.key", g_dir, cert);
  path_of(ca, sizeof ca, "ca.crt");
  const char *args[] = {"--tls-port",
                        g_tls_port == 0 ? RT_EXTRA_PORT : port_s,
                        "--tls-cert-file",    crt,
                        "--tls-key-file",     key,
                        "--tls-ca-cert-file", ca,
                        "--tls-auth-clients", auth_clients ? "yes" : "no",
                        NULL};
  rt_server_start_args(args);
  if (g_tls_port == 0)
    g_tls_port = rt_extra_port();
}

static void suite_init(void) {
  cr_assert(rlock__tls_available,
            "this rlock is built without TLS: the tls suite needs -Dtls");
  make_certs();
  g_tls_port = 0;
  tls_server("server", false);
  snprintf(g_uri, sizeof g_uri, "rediss://127.0.0.1:%d", g_tls_port);
  /* A first client warms up what libuv and OpenSSL keep for the process
   * (libuv's signal pipe, OpenSSL's tables), so that counting descriptors
   * and threads later counts rlock's own. */
  rlock_options o;
  rlock_options_init(&o);
  o.uri = g_uri;
  static char ca[300];
  path_of(ca, sizeof ca, "ca.crt");
  o.tls_ca_file = ca;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "warm-up open: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  rlock_client_free(c);
}

static void suite_fini(void) {
  rt_server_stop();
  if (g_dir[0] != '\0')
    rt_remove_dir(g_dir);
}

TestSuite(tls, .init = suite_init, .fini = suite_fini, .timeout = 90);

static char g_ca[300];

static void tls_options(rlock_options *o) {
  rlock_options_init(o);
  o->uri = g_uri;
  path_of(g_ca, sizeof g_ca, "ca.crt");
  o->tls_ca_file = g_ca;
}

static rlock_client *tls_client(rlock_options *o) {
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, 0, "open %s: %s (%s)", o->uri, rlock_err_name(rc),
               rlock_last_error());
  return c;
}

static rlock_client *tls_default_client(void) {
  rlock_options o;
  tls_options(&o);
  return tls_client(&o);
}

static void lock_unlock_checked(rlock_client *c, const char *base) {
  char key[96], owner[128];
  rt_key(key, sizeof key, base);
  rlock *l = rt_lock(c, key);
  int rc = rlock_lock(l, 10000);
  cr_assert_eq(rc, 0, "lock: %s (%s)", rlock_err_name(rc), rlock_last_error());
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  char *count = rt_hget(key, owner);
  cr_assert_not_null(count, "the hash has the owner's field");
  cr_assert_str_eq(count, "1");
  free(count);
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(key), 0, "the unlock deleted the key");
  rlock_free(l);
}

/* ---- the lock over TLS ---- */

Test(tls, lock_unlock) {
  rlock_client *c = tls_default_client();
  lock_unlock_checked(c, "tls-lock");
  rlock_client_free(c);
}

typedef struct waiter_arg {
  rlock *lock;
  atomic_int result;
  atomic_llong took;
} waiter_arg;

static void waiter_run(void *arg) {
  waiter_arg *w = arg;
  int64_t t0 = rt_now_ms();
  atomic_store(&w->result, rlock_try_lock(w->lock, 5000, 10000));
  atomic_store(&w->took, rt_now_ms() - t0);
  if (atomic_load(&w->result) == 1)
    rlock_unlock(w->lock);
}

/* A waiter on another client is woken by the release message (sent and
 * heard over TLS), long before its 5 s wait ends. */
Test(tls, wake_by_message) {
  rlock_client *a = tls_default_client(), *b = tls_default_client();
  char key[96];
  rt_key(key, sizeof key, "tls-wake");
  rlock *la = rt_lock(a, key);
  cr_assert_eq(rlock_lock(la, 10000), 0);
  static waiter_arg w;
  w.lock = rt_lock(b, key);
  atomic_store(&w.result, -100);
  rt_thread t;
  rt_thread_start(&t, waiter_run, &w);
  rt_sleep_ms(300); /* b is asleep on the channel */
  int64_t released_at = rt_now_ms();
  cr_assert_eq(rlock_unlock(la), 0);
  rt_thread_join(&t, 6000);
  cr_assert_eq(atomic_load(&w.result), 1);
  int64_t after_release = rt_now_ms() - released_at;
  cr_assert_lt(atomic_load(&w.took), 1300, "the waiter took %lld ms",
               (long long)atomic_load(&w.took));
  (void)after_release;
  rlock_free(w.lock);
  rlock_free(la);
  rlock_client_free(b);
  rlock_client_free(a);
}

/* The watchdog renews over TLS: a 1 s watchdog lease held for 3 s. */
Test(tls, watchdog_renews) {
  rlock_options o;
  tls_options(&o);
  o.watchdog_timeout_ms = 1000;
  rlock_client *c = tls_client(&o);
  char key[96];
  rt_key(key, sizeof key, "tls-watchdog");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  for (int i = 0; i < 6; i++) {
    rt_sleep_ms(500);
    long long ttl = rt_pttl(key);
    cr_assert_gt(ttl, 0, "after %d ms the key's PTTL is %lld", (i + 1) * 500,
                 ttl);
  }
  cr_assert_eq(rlock_is_held(l), 1);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}

static atomic_int async_status = -100;

static void async_cb(int status, int64_t value, void *data) {
  (void)value;
  (void)data;
  atomic_store(&async_status, status);
}

Test(tls, async_lock) {
  rlock_client *c = tls_default_client();
  char key[96];
  rt_key(key, sizeof key, "tls-async");
  rlock *l = rt_lock(c, key);
  uint64_t owner = rlock_owner_new();
  cr_assert_eq(rlock_lock_async(l, owner, 5000, 10000, async_cb, NULL, NULL),
               0);
  int64_t t0 = rt_now_ms();
  while (atomic_load(&async_status) == -100 && rt_now_ms() - t0 < 5000)
    rt_sleep_ms(2);
  cr_assert_eq(atomic_load(&async_status), 1);
  cr_assert_eq(rt_exists(key), 1);
  cr_assert_eq(rlock_unlock_owner(l, owner), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* CLIENT KILL of both TLS connections (by name, over the plain port): the
 * client reconnects, handshakes TLS again, and works on. */
Test(tls, reconnect_after_client_kill) {
  rlock_options o;
  tls_options(&o);
  o.client_name = "tls-kill";
  rlock_client *c = tls_client(&o);
  lock_unlock_checked(c, "tls-kill-before");
  cr_assert_eq(rt_client_count_named("tls-kill"), 2);
  char *list = rt_str("CLIENT LIST");
  int killed = 0;
  for (char *line = strtok(list, "\n"); line != NULL;
       line = strtok(NULL, "\n")) {
    if (strstr(line, " name=tls-kill ") == NULL)
      continue;
    long long id = atoll(strstr(line, "id=") + 3);
    killed += (int)rt_int("CLIENT KILL ID %lld", id);
  }
  free(list);
  cr_assert_eq(killed, 2);
  lock_unlock_checked(c, "tls-kill-after");
  rlock_client_free(c);
}

/* The server restarts (same TLS port, same certificate): the client
 * reconnects over TLS. */
Test(tls, reconnect_after_server_restart) {
  rlock_client *c = tls_default_client();
  lock_unlock_checked(c, "tls-restart-before");
  tls_server("server", false); /* stops the server, starts a new one */
  char key[96];
  rt_key(key, sizeof key, "tls-restart-after");
  rlock *l = rt_lock(c, key);
  int rc = RLOCK_ECONN;
  int64_t t0 = rt_now_ms();
  while (rt_now_ms() - t0 < 10000) {
    rc = rlock_try_lock(l, 1000, 10000);
    if (rc == 1)
      break;
    rt_sleep_ms(100);
  }
  cr_assert_eq(rc, 1, "after the restart: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_eq(rt_exists(key), 1);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* The URI names the host: localhost is resolved (uv_getaddrinfo) and
 * verified against the certificate's DNS name. */
Test(tls, dns_name) {
  rlock_options o;
  tls_options(&o);
  char uri[64];
  snprintf(uri, sizeof uri, "rediss://localhost:%d", g_tls_port);
  o.uri = uri;
  rlock_client *c = tls_client(&o);
  lock_unlock_checked(c, "tls-dns");
  rlock_client_free(c);
}

/* ---- what must fail, and how ---- */

/* Opens with o, expecting RLOCK_ETLS with each fragment in the detail,
 * and that the failed open leaves no descriptor or thread behind. */
static void open_fails(rlock_options *o, const char *const *fragments,
                       const char *what) {
  int fds0 = fk_count_fds(), threads0 = fk_count_threads();
  rlock_client *c = (rlock_client *)o; /* must come back NULL */
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, RLOCK_ETLS, "%s: %s (%s)", what, rlock_err_name(rc),
               rlock_last_error());
  cr_assert_null(c, "%s: *client is NULL after a failed open", what);
  for (int i = 0; fragments[i] != NULL; i++)
    cr_assert_not_null(strstr(rlock_last_error(), fragments[i]),
                       "%s: \"%s\" not in: %s", what, fragments[i],
                       rlock_last_error());
  fk_assert_resources(fds0, threads0, 3000, what);
}

Test(tls, wrong_ca) {
  rlock_options o;
  tls_options(&o);
  char other[300];
  path_of(other, sizeof other, "otherca.crt");
  o.tls_ca_file = other;
  const char *f[] = {"certificate verify failed", NULL};
  open_fails(&o, f, "a CA that did not sign the server's certificate");
}

Test(tls, expired_certificate) {
  tls_server("expired", false);
  rlock_options o;
  tls_options(&o);
  const char *f[] = {"certificate verify failed", "expired", NULL};
  open_fails(&o, f, "an expired certificate");
}

Test(tls, self_signed_certificate) {
  tls_server("selfsigned", false);
  rlock_options o;
  tls_options(&o);
  const char *f[] = {"certificate verify failed", "self", NULL};
  open_fails(&o, f, "a self-signed certificate");
}

/* ... which tls_insecure accepts (encryption without authentication). */
Test(tls, insecure_accepts_self_signed) {
  tls_server("selfsigned", false);
  rlock_options o;
  tls_options(&o);
  o.tls_insecure = 1;
  rlock_client *c = tls_client(&o);
  lock_unlock_checked(c, "tls-insecure");
  rlock_client_free(c);
}

Test(tls, hostname_mismatch) {
  tls_server("wrongname", false);
  rlock_options o;
  tls_options(&o);
  const char *f[] = {"certificate verify failed", "mismatch", NULL};
  open_fails(&o, f, "a certificate for another name");
}

/* tls_server_name: the name checked (and sent as SNI) instead of the URI's
 * host: the certificate names localhost and wrong.example, not ... */
Test(tls, server_name_override) {
  tls_server("wrongname", false);
  rlock_options o;
  tls_options(&o);
  o.tls_server_name = "wrong.example";
  rlock_client *c = tls_client(&o);
  lock_unlock_checked(c, "tls-sni");
  rlock_client_free(c);
  tls_server("server", false);
  tls_options(&o);
  o.tls_server_name = "wrong.example";
  const char *f[] = {"mismatch", NULL};
  open_fails(&o, f, "tls_server_name the certificate does not name");
}

/* A plain-text server on a rediss:// URI takes the ClientHello for the
 * start of a command and waits: the handshake is not answered within the
 * connect timeout, and the error says what is likely. */
Test(tls, plain_text_server) {
  rlock_options o;
  tls_options(&o);
  char uri[64];
  snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d", rt_port());
  o.uri = uri;
  o.connect_timeout_ms = 1000;
  const char *f[] = {"TLS", "plain text", NULL};
  int64_t t0 = rt_now_ms();
  open_fails(&o, f, "a plain-text server");
  cr_assert_lt(rt_now_ms() - t0, 5000);
}

/* A peer that accepts, reads the ClientHello and closes. */
typedef struct closer {
  int lfd;
  pthread_t thread;
} closer;

static void *closer_run(void *arg) {
  closer *c = arg;
  for (int i = 0; i < 2; i++) { /* both connections of the client */
    int fd = accept(c->lfd, NULL, NULL);
    if (fd < 0)
      return NULL;
    char buf[512];
    (void)read(fd, buf, sizeof buf);
    close(fd);
  }
  return NULL;
}

Test(tls, server_closes_mid_handshake) {
  closer cl;
  cl.lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(bind(cl.lfd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(cl.lfd, 4), 0);
  socklen_t alen = sizeof a;
  cr_assert_eq(getsockname(cl.lfd, (struct sockaddr *)&a, &alen), 0);
  cr_assert_eq(pthread_create(&cl.thread, NULL, closer_run, &cl), 0);
  rlock_options o;
  tls_options(&o);
  char uri[64];
  snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d", ntohs(a.sin_port));
  o.uri = uri;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, RLOCK_ETLS, "%s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_not_null(strstr(rlock_last_error(), "during the TLS handshake"),
                     "%s", rlock_last_error());
  shutdown(cl.lfd, SHUT_RDWR);
  close(cl.lfd);
  pthread_join(cl.thread, NULL);
}

Test(tls, unreadable_files) {
  rlock_options o;
  tls_options(&o);
  o.tls_ca_file = "/nonexistent/ca.pem";
  const char *f1[] = {"tls_ca_file", "/nonexistent/ca.pem", NULL};
  open_fails(&o, f1, "a CA file that does not exist");

  tls_options(&o);
  o.tls_ca_file = NULL;
  o.tls_ca_dir = "/nonexistent/certs";
  const char *f2[] = {"tls_ca_dir", NULL};
  open_fails(&o, f2, "a CA directory that does not exist");

  char key[300];
  path_of(key, sizeof key, "client.key");
  tls_options(&o);
  o.tls_cert_file = "/nonexistent/client.crt";
  o.tls_key_file = key;
  const char *f3[] = {"tls_cert_file", NULL};
  open_fails(&o, f3, "a certificate file that does not exist");

  char crt[300];
  path_of(crt, sizeof crt, "client.crt");
  tls_options(&o);
  o.tls_cert_file = crt;
  o.tls_key_file = "/nonexistent/client.key";
  const char *f4[] = {"tls_key_file", NULL};
  open_fails(&o, f4, "a key file that does not exist");

  /* A file that is there but is no certificate. */
  char cnf_path[300];
  path_of(cnf_path, sizeof cnf_path, "tls.cnf");
  tls_options(&o);
  o.tls_ca_file = cnf_path;
  const char *f5[] = {"tls.cnf", NULL};
  open_fails(&o, f5, "a CA file that holds no certificate");
}

Test(tls, key_does_not_match_certificate) {
  char crt[300], key[300];
  path_of(crt, sizeof crt, "client.crt");
  path_of(key, sizeof key, "server.key");
  rlock_options o;
  tls_options(&o);
  o.tls_cert_file = crt;
  o.tls_key_file = key;
  const char *f[] = {"does not match", NULL};
  open_fails(&o, f, "a key that is not the certificate's");
}

/* ---- mutual TLS ---- */

Test(tls, mutual_tls) {
  tls_server("server", true);
  char crt[300], key[300];
  path_of(crt, sizeof crt, "client.crt");
  path_of(key, sizeof key, "client.key");
  rlock_options o;
  tls_options(&o);
  o.tls_cert_file = crt;
  o.tls_key_file = key;
  rlock_client *c = tls_client(&o);
  lock_unlock_checked(c, "tls-mtls");
  rlock_client_free(c);

  /* Without a client certificate the server refuses (TLS 1.3: its alert
   * comes after the client's side of the handshake is done). */
  tls_options(&o);
  const char *f[] = {"certificate", NULL};
  open_fails(&o, f, "no client certificate for a server that wants one");
}

/* ---- close leaves nothing ---- */

Test(tls, close_leaves_nothing) {
  int fds0 = fk_count_fds(), threads0 = fk_count_threads();
  char key[96];
  rt_key(key, sizeof key, "tls-close");
  for (int round = 0; round < 5; round++) {
    rlock_client *c = tls_default_client();
    rlock *l = rt_lock(c, key);
    cr_assert_eq(rlock_lock(l, 10000), 0);
    cr_assert_eq(rlock_unlock(l), 0);
    rlock_free(l);
    rlock_client_free(c);
  }
  fk_assert_resources(fds0, threads0, 3000, "after 5 TLS clients closed");
  redisReply *r = rt_cmd("PUBSUB CHANNELS *");
  cr_assert_eq(r->elements, 0, "channels left subscribed");
  freeReplyObject(r);
  cr_assert_eq(rt_exists(key), 0);
}
