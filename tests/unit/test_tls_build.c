/* What a rediss:// open does in this build, before any connection: with
 * TLS (tls_openssl.c), an unreadable CA file fails it with RLOCK_ETLS
 * naming the file; without (-Dtls=disabled: tls_none.c), any rediss://
 * open fails with RLOCK_ETLS naming the meson option. .ci/run builds and
 * runs this suite both ways. No server is needed: both fail before
 * connecting. */
#include <criterion/criterion.h>
#include <string.h>

#include "rlock.h"
#include "tls.h"

static int open_rediss(const char *ca_file) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = "rediss://127.0.0.1:1";
  o.tls_ca_file = ca_file;
  rlock_client *c = (rlock_client *)&o; /* must be set to NULL */
  int rc = rlock_client_new(&c, &o);
  cr_assert_null(c, "a failed open leaves *client NULL");
  return rc;
}

Test(tls_build, rediss_open_fails_clearly_before_connecting) {
  if (!rlock__tls_available) {
    int rc = open_rediss(NULL);
    cr_assert_eq(rc, RLOCK_ETLS, "%s", rlock_err_name(rc));
    cr_assert_not_null(strstr(rlock_last_error(), "-Dtls=enabled"), "%s",
                       rlock_last_error());
    return;
  }
  int rc = open_rediss("/nonexistent/rlock-ca.pem");
  cr_assert_eq(rc, RLOCK_ETLS, "%s", rlock_err_name(rc));
  cr_assert_not_null(strstr(rlock_last_error(), "/nonexistent/rlock-ca.pem"),
                     "%s", rlock_last_error());
  cr_assert_not_null(strstr(rlock_last_error(), "No such file"), "%s",
                     rlock_last_error());
}

/* A TLS option on a plain URI is refused, whatever the build: the program
 * would otherwise believe it talks TLS. */
Test(tls_build, tls_option_on_plain_uri_is_einval) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = "redis://127.0.0.1:1";
  o.tls_insecure = 1;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, RLOCK_EINVAL, "%s", rlock_err_name(rc));
  cr_assert_not_null(strstr(rlock_last_error(), "tls_insecure"), "%s",
                     rlock_last_error());
}
