/* Client option defaults and validation. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

#define RLOCK__MS_MAX INT64_C(2147483647) /* 2^31-1, as documented in rlock.h  \
                                           */
#define RLOCK__CLIENT_NAME_MAX 64
#define RLOCK__QUEUE_MIN INT64_C(65536)
#define RLOCK__QUEUE_MAX (INT64_C(1) << 40)

/* The numeric options: default and range, in the order they are checked.
 * rlock_options_init fills the defaults from here and
 * rlock__options_validate checks the ranges; tests/unit/test_options.c
 * holds it against the options table of docs/api.md. */
#define INT_OPT(f) offsetof(rlock_options, f), true
#define I64_OPT(f) offsetof(rlock_options, f), false
static const rlock__option_spec specs[] = {
    {"watchdog_timeout_ms", I64_OPT(watchdog_timeout_ms), 30000, 300,
     RLOCK__MS_MAX, NULL},
    {"command_timeout_ms", I64_OPT(command_timeout_ms), 3000, 10,
     RLOCK__MS_MAX, NULL},
    {"subscribe_timeout_ms", I64_OPT(subscribe_timeout_ms), 7500, 10,
     RLOCK__MS_MAX, NULL},
    {"retry_attempts", INT_OPT(retry_attempts), 3, 0, 100, NULL},
    {"retry_interval_ms", I64_OPT(retry_interval_ms), 1500, 0, RLOCK__MS_MAX,
     NULL},
    /* auto: sharded against a cluster that has it */
    {"sharded_pubsub", INT_OPT(sharded_pubsub), 0, -1, 1,
     "0 (auto), 1 (sharded) or -1 (plain)"},
    {"connect_timeout_ms", I64_OPT(connect_timeout_ms), 10000, 10,
     RLOCK__MS_MAX, NULL},
    {"max_write_queue_bytes", I64_OPT(max_write_queue_bytes),
     INT64_C(64) << 20, RLOCK__QUEUE_MIN, RLOCK__QUEUE_MAX, NULL},
    {"spin_us", I64_OPT(spin_us), 250, 0, 100000, NULL},
    {"handoff_max", INT_OPT(handoff_max), 3, 0, 1000, NULL},
    {"replica_sync", INT_OPT(replica_sync), 1, 0, 1, "0 or 1"},
    {"replica_sync_timeout_ms", I64_OPT(replica_sync_timeout_ms), 1000, 1,
     RLOCK__MS_MAX, NULL},
    /* Below 100 ms the refreshes would be a load of their own on the
     * cluster (CLUSTER SHARDS from every client), for no gain: a MOVED
     * triggers a refresh anyway. */
    {"cluster_refresh_ms", I64_OPT(cluster_refresh_ms), 5000, 100,
     RLOCK__MS_MAX, NULL},
    {"tls_insecure", INT_OPT(tls_insecure), 0, 0, 1, "0 or 1"},
    /* 0: replicas the topology lists count too (safety); 1: connected only */
    {"replica_sync_connected_only", INT_OPT(replica_sync_connected_only), 0, 0,
     1, "0 (listed replicas count) or 1 (connected replicas only)"},
    {"replica_sync_mode", INT_OPT(replica_sync_mode), RLOCK_REPLICA_SYNC_AUTO,
     RLOCK_REPLICA_SYNC_AUTO, RLOCK_REPLICA_SYNC_WAITAOF,
     "0 (auto), 1 (WAIT) or 2 (WAITAOF)"},
    /* 0: a third of the hold's lease; -1: off */
    {"lease_risk_ms", I64_OPT(lease_risk_ms), 0, -1, RLOCK__MS_MAX, NULL},
    /* 0: the token key keeps no TTL (Redisson's way) */
    {"fenced_token_ttl_ms", I64_OPT(fenced_token_ttl_ms), 0, 0,
     RLOCK__MS_MAX, NULL},
};

const rlock__option_spec *rlock__options_specs(size_t *n) {
  *n = sizeof(specs) / sizeof(specs[0]);
  return specs;
}

static int64_t spec_get(const rlock__option_spec *s, const rlock_options *o) {
  const char *p = (const char *)o + s->offset;
  if (s->is_int) {
    int v;
    memcpy(&v, p, sizeof(v));
    return v;
  }
  int64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static void spec_set(const rlock__option_spec *s, rlock_options *o,
                     int64_t value) {
  char *p = (char *)o + s->offset;
  if (s->is_int) {
    int v = (int)value;
    memcpy(p, &v, sizeof(v));
  } else {
    memcpy(p, &value, sizeof(value));
  }
}

void rlock_options_init_size(rlock_options *o, size_t size) {
  if (o == NULL)
    return;
  /* Pointers (uri, client_name, the callback, tls_* and sentinel_*) are
   * NULL; numbers take their defaults from the table. */
  rlock_options d;
  memset(&d, 0, sizeof(d));
  d.struct_size = size < sizeof(d) ? size : sizeof(d);
  for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
    spec_set(&specs[i], &d, specs[i].def);
  /* Only what the caller's struct has: it may come from an older header. */
  memcpy(o, &d, d.struct_size);
}

int rlock__options_copy(rlock_options *out, const rlock_options *in) {
  rlock_options_init(out);
  if (in == NULL)
    return 0;
  /* Read before anything else: it says how much of *in exists. */
  size_t size = in->struct_size;
  if (size < sizeof(in->struct_size)) {
    rlock__set_last_error("rlock_options not initialised with "
                          "rlock_options_init() (struct_size is %zu)",
                          size);
    return RLOCK_EINVAL;
  }
  if (size > sizeof(*out)) {
    rlock__set_last_error("rlock_options.struct_size is %zu but this rlock's "
                          "rlock_options is %zu bytes: the options come from "
                          "a newer rlock.h than the library in use",
                          size, sizeof(*out));
    return RLOCK_EINVAL;
  }
  /* An older header's struct is a prefix of ours (fields are only added at
   * the end): take what it has, keep the defaults for the rest. */
  memcpy(out, in, size);
  out->struct_size = sizeof(*out);
  return 0;
}

static int check_spec(const rlock__option_spec *s, const rlock_options *o) {
  int64_t v = spec_get(s, o);
  if (v >= s->min && v <= s->max)
    return 0;
  if (s->must != NULL)
    rlock__set_last_error("rlock_options.%s is %lld; it must be %s", s->name,
                          (long long)v, s->must);
  else
    rlock__set_last_error("rlock_options.%s is %lld; it must be in "
                          "%lld..%lld",
                          s->name, (long long)v, (long long)s->min,
                          (long long)s->max);
  return RLOCK_EINVAL;
}

/* Redis refuses CLIENT SETNAME with any byte outside '!'..'~' ("Client names
 * cannot contain spaces, newlines or special characters"). Checking the same
 * set here turns what would be a connect-time server error into an option
 * error that names the field. */
static int rlock__check_client_name(const char *name) {
  size_t len = strlen(name);
  size_t i;

  if (len == 0 || len > RLOCK__CLIENT_NAME_MAX) {
    rlock__set_last_error("rlock_options.client_name is %zu characters long; "
                          "it must be 1..%d",
                          len, RLOCK__CLIENT_NAME_MAX);
    return RLOCK_EINVAL;
  }
  for (i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c < '!' || c > '~') {
      rlock__set_last_error("rlock_options.client_name contains byte 0x%02x at "
                            "offset %zu; only printable ASCII without spaces "
                            "or newlines is allowed",
                            c, i);
      return RLOCK_EINVAL;
    }
  }
  return 0;
}

int rlock__options_validate(const rlock_options *o) {
  rlock__uri uri;
  int rc;

  /* NULL means "all defaults" everywhere options are taken, and the
   * defaults are valid. */
  if (o == NULL)
    return 0;

  if (o->client_name != NULL) {
    rc = rlock__check_client_name(o->client_name);
    if (rc != 0)
      return rc;
  }
  for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
    rc = check_spec(&specs[i], o);
    if (rc != 0)
      return rc;
  }
  if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL)) {
    rlock__set_last_error("rlock_options.%s is set without %s: mutual TLS "
                          "needs both the certificate and its key",
                          o->tls_cert_file != NULL ? "tls_cert_file"
                                                   : "tls_key_file",
                          o->tls_cert_file != NULL ? "tls_key_file"
                                                   : "tls_cert_file");
    return RLOCK_EINVAL;
  }
  if (o->tls_server_name != NULL &&
      (o->tls_server_name[0] == '\0' || strlen(o->tls_server_name) > 253)) {
    rlock__set_last_error("rlock_options.tls_server_name must be 1..253 "
                          "characters long");
    return RLOCK_EINVAL;
  }

  if (o->sentinel_user != NULL && o->sentinel_password == NULL) {
    /* As in the URI: AUTH always needs a password, and a lone user name
     * would otherwise be dropped without a word. */
    rlock__set_last_error("rlock_options.sentinel_user is set without "
                          "sentinel_password (AUTH needs a password)");
    return RLOCK_EINVAL;
  }
  if (o->sentinel_password != NULL && o->sentinel_password[0] == '\0') {
    rlock__set_last_error("rlock_options.sentinel_password is empty (leave "
                          "it NULL to connect to the sentinels without "
                          "AUTH)");
    return RLOCK_EINVAL;
  }
  if (o->sentinel_user != NULL && o->sentinel_user[0] == '\0') {
    rlock__set_last_error("rlock_options.sentinel_user is empty (leave it "
                          "NULL for the default user)");
    return RLOCK_EINVAL;
  }

  /* Only the syntax is checked here; the client resolves $REDIS_URL and the
   * default itself when uri is NULL (and checks the TLS and sentinel
   * fields against the scheme then: rlock__options_check_tls,
   * rlock__options_check_sentinel). */
  if (o->uri != NULL) {
    rc = rlock__uri_parse(o->uri, &uri);
    if (rc != 0)
      return rc;
    rc = rlock__options_check_tls(o, &uri);
    if (rc == 0)
      rc = rlock__options_check_sentinel(o, &uri);
    rlock__uri_free(&uri);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int rlock__options_check_tls(const rlock_options *o, const rlock__uri *uri) {
  /* uri->tls is set for every TLS scheme: rediss://, rediss+sentinel://
   * and rediss+cluster://. */
  if (uri->tls)
    return 0;
  const char *field = o->tls_ca_file != NULL     ? "tls_ca_file"
                      : o->tls_ca_dir != NULL    ? "tls_ca_dir"
                      : o->tls_cert_file != NULL ? "tls_cert_file"
                      : o->tls_key_file != NULL  ? "tls_key_file"
                      : o->tls_server_name != NULL ? "tls_server_name"
                      : o->tls_insecure != 0       ? "tls_insecure"
                                                   : NULL;
  if (field == NULL)
    return 0;
  /* A TLS setting on a plain-text URI would be silently ignored: the
   * program would believe it talks TLS. */
  rlock__set_last_error("rlock_options.%s is set but the URI is not "
                        "rediss:// (TLS settings apply to rediss://, "
                        "rediss+sentinel:// and rediss+cluster:// only)",
                        field);
  return RLOCK_EINVAL;
}

int rlock__options_check_sentinel(const rlock_options *o,
                                  const rlock__uri *uri) {
  const char *field = o->sentinel_user != NULL       ? "sentinel_user"
                      : o->sentinel_password != NULL ? "sentinel_password"
                                                     : NULL;

  /* Checked here too, not only in rlock__options_validate: the client
   * calls this after resolving $REDIS_URL, with options that may not have
   * gone through validate with a URI. */
  if (o->sentinel_user != NULL && o->sentinel_password == NULL) {
    rlock__set_last_error("rlock_options.sentinel_user is set without "
                          "sentinel_password (AUTH needs a password)");
    return RLOCK_EINVAL;
  }
  if (field == NULL || uri->mode == RLOCK__URI_SENTINEL)
    return 0;
  /* Credentials for sentinels on a URI without sentinels would be silently
   * unused - and most likely mean the URI is not the one intended. */
  rlock__set_last_error("rlock_options.%s is set but the URI is not "
                        "redis+sentinel:// (or rediss+sentinel://)",
                        field);
  return RLOCK_EINVAL;
}
