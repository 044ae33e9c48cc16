/* The options for Sentinel and Cluster (sentinel credentials, replica sync,
 * cluster refresh, sharded_pubsub auto) and how option checks read the new URI
 * schemes. The older fields are covered in test_uri.c. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rlock.h"
#include "util.h"

#define MS_MAX INT64_C(2147483647)

Test(options03, defaults) {
  rlock_options o;

  memset(&o, 0x5a, sizeof(o));
  rlock_options_init(&o);
  cr_assert_eq(o.sharded_pubsub, 0);
  cr_assert_null(o.sentinel_user);
  cr_assert_null(o.sentinel_password);
  cr_assert_eq(o.replica_sync, 1);
  cr_assert_eq(o.replica_sync_timeout_ms, 1000);
  cr_assert_eq(o.cluster_refresh_ms, 5000);
  cr_assert_eq(rlock__options_validate(&o), 0);

  /* A caller's struct that ends before sentinel_user (built against a
   * header without them) gets these defaults too. */
  rlock_options full;
  o.struct_size = offsetof(rlock_options, sentinel_user);
  memset((char *)&o + o.struct_size, 0x5a, sizeof o - o.struct_size);
  memset(&full, 0xa5, sizeof full);
  cr_assert_eq(rlock__options_copy(&full, &o), 0);
  cr_assert_null(full.sentinel_user);
  cr_assert_null(full.sentinel_password);
  cr_assert_eq(full.replica_sync, 1);
  cr_assert_eq(full.replica_sync_timeout_ms, 1000);
  cr_assert_eq(full.cluster_refresh_ms, 5000);
  cr_assert_eq(rlock__options_validate(&full), 0);
}

struct case03 {
  const char *label;
  void (*apply)(rlock_options *o);
  int want;
  const char *fragment; /* in the last error when want != 0 */
};

#define CASE03_FN(label, stmt, want, fragment)                                 \
  static void apply03_##label(rlock_options *o) { stmt; }
#define CASES03(X)                                                             \
  X(sharded_auto, o->sharded_pubsub = -1, 0, NULL)                             \
  X(sharded_off, o->sharded_pubsub = 0, 0, NULL)                               \
  X(sharded_on, o->sharded_pubsub = 1, 0, NULL)                                \
  X(sharded_low, o->sharded_pubsub = -2, RLOCK_EINVAL,                         \
    "sharded_pubsub is -2; it must be 0 (auto), 1 (sharded) or -1 (plain)")                      \
  X(sharded_high, o->sharded_pubsub = 2, RLOCK_EINVAL, "sharded_pubsub")       \
  X(replica_sync_off, o->replica_sync = 0, 0, NULL)                            \
  X(replica_sync_neg, o->replica_sync = -1, RLOCK_EINVAL,                      \
    "replica_sync is -1; it must be 0 or 1")                                   \
  X(replica_sync_two, o->replica_sync = 2, RLOCK_EINVAL, "replica_sync")       \
  X(wait_min, o->replica_sync_timeout_ms = 1, 0, NULL)                         \
  X(wait_max, o->replica_sync_timeout_ms = MS_MAX, 0, NULL)                    \
  X(wait_zero, o->replica_sync_timeout_ms = 0, RLOCK_EINVAL,                   \
    "replica_sync_timeout_ms is 0; it must be in 1..2147483647")               \
  X(wait_neg, o->replica_sync_timeout_ms = -5, RLOCK_EINVAL,                   \
    "replica_sync_timeout_ms")                                                 \
  X(wait_high, o->replica_sync_timeout_ms = MS_MAX + 1, RLOCK_EINVAL,          \
    "replica_sync_timeout_ms")                                                 \
  X(refresh_min, o->cluster_refresh_ms = 100, 0, NULL)                         \
  X(refresh_max, o->cluster_refresh_ms = MS_MAX, 0, NULL)                      \
  X(refresh_low, o->cluster_refresh_ms = 99, RLOCK_EINVAL,                     \
    "cluster_refresh_ms is 99; it must be in 100..2147483647")                 \
  X(refresh_zero, o->cluster_refresh_ms = 0, RLOCK_EINVAL,                     \
    "cluster_refresh_ms")                                                      \
  X(refresh_high, o->cluster_refresh_ms = INT64_MAX, RLOCK_EINVAL,             \
    "cluster_refresh_ms")                                                      \
  /* Sentinel credentials: only with a sentinel URI, password required. */     \
  X(sentinel_pw,                                                               \
    (o->uri = "redis+sentinel://h/m", o->sentinel_password = "spw"), 0, NULL)  \
  X(sentinel_user_pw,                                                          \
    (o->uri = "rediss+sentinel://h/m", o->sentinel_user = "su",                \
     o->sentinel_password = "spw"),                                            \
    0, NULL)                                                                   \
  X(sentinel_user_alone,                                                       \
    (o->uri = "redis+sentinel://h/m", o->sentinel_user = "su"), RLOCK_EINVAL,  \
    "sentinel_user is set without sentinel_password")                          \
  X(sentinel_user_alone_no_uri, o->sentinel_user = "su", RLOCK_EINVAL,         \
    "sentinel_user is set without sentinel_password")                          \
  X(sentinel_pw_empty,                                                         \
    (o->uri = "redis+sentinel://h/m", o->sentinel_password = ""),              \
    RLOCK_EINVAL, "sentinel_password is empty")                                \
  X(sentinel_user_empty,                                                       \
    (o->uri = "redis+sentinel://h/m", o->sentinel_user = "",                   \
     o->sentinel_password = "p"),                                              \
    RLOCK_EINVAL, "sentinel_user is empty")                                    \
  X(sentinel_pw_on_redis, (o->uri = "redis://h", o->sentinel_password = "p"),  \
    RLOCK_EINVAL,                                                              \
    "sentinel_password is set but the URI is not "                             \
    "redis+sentinel://")                                                       \
  X(sentinel_user_on_cluster,                                                  \
    (o->uri = "redis+cluster://h", o->sentinel_user = "u",                     \
     o->sentinel_password = "p"),                                              \
    RLOCK_EINVAL, "sentinel_user is set but the URI is not")                   \
  X(sentinel_pw_on_unix, (o->uri = "unix:///s", o->sentinel_password = "p"),   \
    RLOCK_EINVAL, "sentinel_password")                                         \
  /* The URI itself: new schemes pass validation, bad ones name the part. */   \
  X(uri_sentinel, o->uri = "redis+sentinel://a,b:26380/m/1", 0, NULL)          \
  X(uri_cluster, o->uri = "redis+cluster://a:7000,b:7001", 0, NULL)            \
  X(uri_cluster_db, o->uri = "redis+cluster://a/3", RLOCK_EURI,                \
    "only database 0")                                                         \
  X(uri_sentinel_no_master, o->uri = "redis+sentinel://a", RLOCK_EURI,         \
    "no master name")                                                          \
  /* TLS options follow uri->tls, whatever the topology. */                    \
  X(tls_sentinel,                                                              \
    (o->uri = "rediss+sentinel://h/m", o->tls_ca_file = "/ca.pem",             \
     o->tls_insecure = 1),                                                     \
    0, NULL)                                                                   \
  X(tls_cluster,                                                               \
    (o->uri = "rediss+cluster://h", o->tls_cert_file = "/c",                   \
     o->tls_key_file = "/k", o->tls_server_name = "n"),                        \
    0, NULL)                                                                   \
  X(tls_on_plain_sentinel,                                                     \
    (o->uri = "redis+sentinel://h/m", o->tls_ca_dir = "/d"), RLOCK_EINVAL,     \
    "tls_ca_dir is set but the URI is not rediss://")                          \
  X(tls_on_plain_cluster, (o->uri = "redis+cluster://h", o->tls_insecure = 1), \
    RLOCK_EINVAL, "tls_insecure")

CASES03(CASE03_FN)
#undef CASE03_FN

static const struct case03 cases03[] = {
#define CASE03_ROW(label, stmt, want, fragment)                                \
  {#label, apply03_##label, want, fragment},
    CASES03(CASE03_ROW)
#undef CASE03_ROW
};

Test(options03, each_field_range) {
  for (size_t i = 0; i < sizeof(cases03) / sizeof(cases03[0]); i++) {
    const struct case03 *c = &cases03[i];
    rlock_options o;
    int rc;

    rlock_options_init(&o);
    c->apply(&o);
    rlock__clear_last_error();
    rc = rlock__options_validate(&o);
    cr_assert_eq(rc, c->want, "%s: got %s, want %s (%s)", c->label,
                 rlock_err_name(rc), rlock_err_name(c->want),
                 rlock_last_error());
    if (c->want != 0)
      cr_assert_not_null(strstr(rlock_last_error(), c->fragment),
                         "%s: '%s' does not mention '%s'", c->label,
                         rlock_last_error(), c->fragment);
  }
}

/* The two checks the client runs on the URI it resolved ($REDIS_URL
 * included), called directly. */
static void check_with(const char *uri, const char *user, const char *pw,
                       int want_sentinel, const char *fragment) {
  rlock_options o;
  rlock__uri u;

  rlock_options_init(&o);
  o.sentinel_user = user;
  o.sentinel_password = pw;
  cr_assert_eq(rlock__uri_parse(uri, &u), 0, "%s: %s", uri, rlock_last_error());
  rlock__clear_last_error();
  int rc = rlock__options_check_sentinel(&o, &u);
  cr_assert_eq(rc, want_sentinel, "%s (%s, %s): got %s (%s)", uri,
               user ? user : "NULL", pw ? pw : "NULL", rlock_err_name(rc),
               rlock_last_error());
  if (fragment != NULL)
    cr_assert_not_null(strstr(rlock_last_error(), fragment), "%s: '%s'", uri,
                       rlock_last_error());
  else
    cr_assert_str_eq(rlock_last_error(), "");
  rlock__uri_free(&u);
}

Test(options03, check_sentinel) {
  check_with("redis://h", NULL, NULL, 0, NULL);
  check_with("redis+cluster://h", NULL, NULL, 0, NULL);
  check_with("redis+sentinel://h/m", NULL, NULL, 0, NULL);
  check_with("redis+sentinel://h/m", NULL, "p", 0, NULL);
  check_with("rediss+sentinel://h/m", "u", "p", 0, NULL);
  check_with("redis+sentinel://h/m", "u", NULL, RLOCK_EINVAL,
             "sentinel_user is set without sentinel_password");
  check_with("redis://h", "u", NULL, RLOCK_EINVAL, "sentinel_user");
  check_with("redis://h", NULL, "p", RLOCK_EINVAL,
             "sentinel_password is set but the URI is not redis+sentinel://");
  check_with("rediss://h", "u", "p", RLOCK_EINVAL,
             "sentinel_user is set but the URI is not");
  check_with("unix:///s", NULL, "p", RLOCK_EINVAL, "sentinel_password");
  check_with("rediss+cluster://h", NULL, "p", RLOCK_EINVAL,
             "sentinel_password");
}

Test(options03, check_tls_by_scheme) {
  static const struct {
    const char *uri;
    int want;
  } rows[] = {
      {"rediss://h", 0},
      {"rediss+sentinel://h/m", 0},
      {"rediss+cluster://h", 0},
      {"redis://h", RLOCK_EINVAL},
      {"redis+sentinel://h/m", RLOCK_EINVAL},
      {"redis+cluster://h", RLOCK_EINVAL},
      {"unix:///s", RLOCK_EINVAL},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    rlock_options o;
    rlock__uri u;

    rlock_options_init(&o);
    o.tls_server_name = "redis.example.com";
    cr_assert_eq(rlock__uri_parse(rows[i].uri, &u), 0, "%s", rows[i].uri);
    int rc = rlock__options_check_tls(&o, &u);
    cr_assert_eq(rc, rows[i].want, "%s: %s (%s)", rows[i].uri,
                 rlock_err_name(rc), rlock_last_error());
    if (rc != 0)
      cr_assert_not_null(strstr(rlock_last_error(), "tls_server_name"));
    /* Without any tls_* option, every scheme passes. */
    rlock_options_init(&o);
    cr_assert_eq(rlock__options_check_tls(&o, &u), 0, "%s", rows[i].uri);
    rlock__uri_free(&u);
  }
}

/* ---- the options table against its documentation ---- */

/* docs/api.md, found from this file's path: meson compiles it from the
 * build root with a path relative to it, and this binary is
 * <build root>/tests/test-unit. */
static char *read_api_doc(void) {
  char exe[4096], path[8192];
  const char *here = __FILE__;
  size_t dir = (size_t)(strrchr(here, '/') - here);
  if (here[0] == '/') {
    snprintf(path, sizeof path, "%.*s/../../docs/api.md", (int)dir, here);
  } else {
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert_gt(len, 0, "readlink /proc/self/exe");
    exe[len] = '\0';
    *strrchr(exe, '/') = '\0'; /* <build root>/tests */
    *strrchr(exe, '/') = '\0'; /* <build root> */
    snprintf(path, sizeof path, "%s/%.*s/../../docs/api.md", exe, (int)dir,
             here);
  }
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  static char buf[1 << 17];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* A documented number: decimal, "2^N", "2^N-1", or "N MiB". */
static bool doc_number(const char *s, int64_t *out, const char **end) {
  char *e = NULL;
  long long v = strtoll(s, &e, 10);
  if (e == s)
    return false;
  if (v == 2 && *e == '^') {
    long long p = strtoll(e + 1, &e, 10);
    v = 1LL << p;
    if (strncmp(e, "-1", 2) == 0) {
      v -= 1;
      e += 2;
    }
  } else if (strncmp(e, " MiB", 4) == 0) {
    v <<= 20;
    e += 4;
  }
  *out = v;
  if (end != NULL)
    *end = e;
  return true;
}

/* Every numeric option has a row in docs/api.md's options table whose
 * default is the library's, and whose range "(min..max)", where the row
 * gives one, is the library's; a plain range must be documented. */
Test(options_doc, table_matches_docs_api) {
  char *doc = read_api_doc();
  size_t n = 0;
  const rlock__option_spec *specs = rlock__options_specs(&n);
  cr_assert_gt(n, 10);
  rlock_options o;
  rlock_options_init(&o);
  for (size_t i = 0; i < n; i++) {
    const rlock__option_spec *s = &specs[i];
    char head[96];
    snprintf(head, sizeof head, "\n| `%s` | ", s->name);
    const char *row = strstr(doc, head);
    cr_assert_not_null(row, "%s: no row in docs/api.md's options table",
                       s->name);
    const char *line_end = strchr(row + 1, '\n');
    cr_assert_not_null(line_end);
    int64_t def = 0;
    cr_assert(doc_number(row + strlen(head), &def, NULL),
              "%s: the documented default is not a number", s->name);
    cr_assert_eq(def, s->def, "%s: documented default %lld, library %lld",
                 s->name, (long long)def, (long long)s->def);
    /* rlock_options_init gives the same. */
    int64_t got = s->is_int ? *(const int *)((const char *)&o + s->offset)
                            : *(const int64_t *)((const char *)&o +
                                                 s->offset);
    cr_assert_eq(got, s->def, "%s: rlock_options_init gives %lld", s->name,
                 (long long)got);
    if (s->must != NULL)
      continue; /* an enumerated range, worded in the row's text */
    /* The last "(... min..max" of the row (e.g. "(10..2^31-1)",
     * "(µs, 0..100000)", "(0..1000; 0: off)"). */
    const char *range = NULL;
    for (const char *p = row; p < line_end; p++) {
      int64_t a = 0;
      const char *e = NULL;
      if ((p[-1] == '(' || p[-1] == ' ') && doc_number(p, &a, &e) &&
          strncmp(e, "..", 2) == 0)
        range = p;
    }
    cr_assert_not_null(range, "%s: docs/api.md gives no range (%lld..%lld)",
                       s->name, (long long)s->min, (long long)s->max);
    int64_t min = 0, max = 0;
    const char *e = NULL;
    cr_assert(doc_number(range, &min, &e));
    cr_assert(doc_number(e + 2, &max, NULL));
    cr_assert_eq(min, s->min, "%s: documented min %lld, library %lld",
                 s->name, (long long)min, (long long)s->min);
    cr_assert_eq(max, s->max, "%s: documented max %lld, library %lld",
                 s->name, (long long)max, (long long)s->max);
  }
}

/* replica_sync_connected_only (issue 24): default 0 (listed replicas
 * count for replica sync), also for a caller built with an older header;
 * 0 and 1 valid, anything else refused with a sentence naming the field. */
Test(options04, replica_sync_connected_only) {
  rlock_options o, full;
  rlock_options_init(&o);
  cr_assert_eq(o.replica_sync_connected_only, 0);

  o.struct_size = offsetof(rlock_options, replica_sync_connected_only);
  memset((char *)&o + o.struct_size, 0x5a, sizeof o - o.struct_size);
  memset(&full, 0xa5, sizeof full);
  cr_assert_eq(rlock__options_copy(&full, &o), 0);
  cr_assert_eq(full.replica_sync_connected_only, 0);
  cr_assert_eq(full.cluster_refresh_ms, 5000);
  cr_assert_eq(rlock__options_validate(&full), 0);

  static const int values[] = {0, 1, -1, 2, 100};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    rlock_options_init(&o);
    o.replica_sync_connected_only = values[i];
    rlock__clear_last_error();
    int rc = rlock__options_validate(&o);
    if (values[i] == 0 || values[i] == 1) {
      cr_assert_eq(rc, 0, "%d: %s", values[i], rlock_last_error());
    } else {
      cr_assert_eq(rc, RLOCK_EINVAL, "%d accepted", values[i]);
      cr_assert_not_null(strstr(rlock_last_error(),
                                "replica_sync_connected_only is"),
                         "%s", rlock_last_error());
    }
  }
}

/* replica_sync_mode (issue 27): AUTO by default, also for a caller
 * built with an older header; 0..2 valid, anything else refused. */
Test(options04, replica_sync_mode) {
  rlock_options o, full;
  rlock_options_init(&o);
  cr_assert_eq(o.replica_sync_mode, RLOCK_REPLICA_SYNC_AUTO);

  o.struct_size = offsetof(rlock_options, replica_sync_mode);
  memset((char *)&o + o.struct_size, 0x5a, sizeof o - o.struct_size);
  memset(&full, 0xa5, sizeof full);
  cr_assert_eq(rlock__options_copy(&full, &o), 0);
  cr_assert_eq(full.replica_sync_mode, RLOCK_REPLICA_SYNC_AUTO);
  cr_assert_eq(rlock__options_validate(&full), 0);

  static const int values[] = {RLOCK_REPLICA_SYNC_AUTO,
                               RLOCK_REPLICA_SYNC_WAIT,
                               RLOCK_REPLICA_SYNC_WAITAOF, -1, 3};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    rlock_options_init(&o);
    o.replica_sync_mode = values[i];
    rlock__clear_last_error();
    int rc = rlock__options_validate(&o);
    if (values[i] >= 0 && values[i] <= 2) {
      cr_assert_eq(rc, 0, "%d: %s", values[i], rlock_last_error());
    } else {
      cr_assert_eq(rc, RLOCK_EINVAL, "%d accepted", values[i]);
      cr_assert_not_null(strstr(rlock_last_error(),
                                "replica_sync_mode is"),
                         "%s", rlock_last_error());
    }
  }
}
