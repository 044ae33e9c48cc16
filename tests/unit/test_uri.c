/* URI parsing and client option defaults/validation. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "rlock.h"
#include "util.h"

struct good_uri {
  const char *uri;
  int is_unix;
  const char *host;
  int port;
  const char *path;
  const char *user;
  const char *password;
  int db;
};

static const struct good_uri good_uris[] = {
    {"redis://localhost", 0, "localhost", 6379, NULL, NULL, NULL, 0},
    {"redis://127.0.0.1:6380", 0, "127.0.0.1", 6380, NULL, NULL, NULL, 0},
    {"redis://h:6379/0", 0, "h", 6379, NULL, NULL, NULL, 0},
    {"redis://h/5", 0, "h", 6379, NULL, NULL, NULL, 5},
    {"redis://h/", 0, "h", 6379, NULL, NULL, NULL, 0},
    {"redis://h:7000/", 0, "h", 7000, NULL, NULL, NULL, 0},
    {"redis://h:1/2147483647", 0, "h", 1, NULL, NULL, NULL, INT_MAX},
    {"redis://h:65535/007", 0, "h", 65535, NULL, NULL, NULL, 7},
    {"redis://h:06380", 0, "h", 6380, NULL, NULL, NULL, 0},
    {"redis://:secret@h", 0, "h", 6379, NULL, NULL, "secret", 0},
    {"redis://alice:secret@h:7000/3", 0, "h", 7000, NULL, "alice", "secret", 3},
    {"redis://al%69ce:p%40ss%3Aw%2Fd%20x@h", 0, "h", 6379, NULL, "alice",
     "p@ss:w/d x", 0},
    {"redis://u%3Ax:%c3%a9t%C3%A9@h", 0, "h", 6379, NULL, "u:x",
     "\xc3\xa9t\xc3\xa9", 0},
    {"redis://user:p@ss@h:6390", 0, "h", 6390, NULL, "user", "p@ss", 0},
    {"redis://user:a:b@h", 0, "h", 6379, NULL, "user", "a:b", 0},
    {"redis://[::1]:6380", 0, "::1", 6380, NULL, NULL, NULL, 0},
    {"redis://[::1]", 0, "::1", 6379, NULL, NULL, NULL, 0},
    {"redis://[2001:DB8::1]/4", 0, "2001:DB8::1", 6379, NULL, NULL, NULL, 4},
    {"redis://:pw@[::ffff:127.0.0.1]:6379/1", 0, "::ffff:127.0.0.1", 6379, NULL,
     NULL, "pw", 1},
    {"REDIS://Host.Example.COM:65535", 0, "Host.Example.COM", 65535, NULL, NULL,
     NULL, 0},
    {"Redis://my_host-1", 0, "my_host-1", 6379, NULL, NULL, NULL, 0},
    {"unix:///tmp/redis.sock", 1, NULL, 0, "/tmp/redis.sock", NULL, NULL, 0},
    {"unix:///var/run/redis/redis.sock?db=2", 1, NULL, 0,
     "/var/run/redis/redis.sock", NULL, NULL, 2},
    {"UNIX:///s?db=0", 1, NULL, 0, "/s", NULL, NULL, 0},
    {"unix:///s?db=2147483647", 1, NULL, 0, "/s", NULL, NULL, INT_MAX},
    {"unix://:pw@/tmp/r.sock?db=1", 1, NULL, 0, "/tmp/r.sock", NULL, "pw", 1},
    {"unix://u:p%26w@/tmp/r.sock", 1, NULL, 0, "/tmp/r.sock", "u", "p&w", 0},
};

static void assert_str_or_null(const char *got, const char *want,
                               const char *uri, const char *field) {
  if (want == NULL)
    cr_assert_null(got, "%s: %s should be NULL, got '%s'", uri, field, got);
  else {
    cr_assert_not_null(got, "%s: %s is NULL", uri, field);
    cr_assert_str_eq(got, want, "%s: %s", uri, field);
  }
}

Test(uri, good) {
  size_t i;

  for (i = 0; i < sizeof(good_uris) / sizeof(good_uris[0]); i++) {
    const struct good_uri *g = &good_uris[i];
    rlock__uri u;
    int rc = rlock__uri_parse(g->uri, &u);

    cr_assert_eq(rc, 0, "%s: rc %d (%s)", g->uri, rc, rlock_last_error());
    cr_assert_eq(u.is_unix, g->is_unix, "%s: is_unix", g->uri);
    assert_str_or_null(u.host, g->host, g->uri, "host");
    cr_assert_eq(u.port, g->port, "%s: port %d", g->uri, u.port);
    assert_str_or_null(u.path, g->path, g->uri, "path");
    assert_str_or_null(u.user, g->user, g->uri, "user");
    assert_str_or_null(u.password, g->password, g->uri, "password");
    cr_assert_eq(u.db, g->db, "%s: db %d", g->uri, u.db);
    cr_assert_eq(u.mode, RLOCK__URI_SINGLE, "%s: mode", g->uri);
    cr_assert_null(u.addrs, "%s: addrs", g->uri);
    cr_assert_eq(u.naddrs, 0, "%s: naddrs", g->uri);
    cr_assert_null(u.master, "%s: master", g->uri);

    rlock__uri_free(&u);
    cr_assert_null(u.host);
    cr_assert_null(u.path);
    cr_assert_null(u.user);
    cr_assert_null(u.password);
    cr_assert_eq(u.port, 0);
    cr_assert_eq(u.db, 0);
  }
}

static const char *const bad_uris[] = {
    "",
    "localhost",
    "localhost:6379",
    "http://h",
    "redis-sentinel://h",
    "://h",
    "redis:/h",
    "redis:h",
    "redis://",
    "redis:///0",
    "redis://:6379",
    "redis://user:pw@",
    "redis://user:pw@:6379",
    "redis://h:0",
    "redis://h:00000",
    "redis://h:65536",
    "redis://h:99999999999999999999999",
    "redis://h:abc",
    "redis://h:",
    "redis://h:-1",
    "redis://h:+1",
    "redis://h:6379x",
    "redis://h: 6379",
    "redis://h/x",
    "redis://h/-1",
    "redis://h/+1",
    "redis://h/ 1",
    "redis://h/1 ",
    "redis://h/0x1",
    "redis://h/2147483648",
    "redis://h/99999999999999999999",
    "redis://h/1/",
    "redis://h/1/2",
    "redis://h//",
    "redis://h?db=1",
    "redis://u:pa/ss@h",
    "redis://u:pa?ss@h",
    "redis://u:pa#ss@h",
    "redis:///db@h",
    "redis://h/1?x=y",
    "redis://h#frag",
    "redis://h/1#frag",
    "redis://h h",
    "redis://h\n",
    "redis://h%41",
    "redis://user@h",
    "redis://user:@h",
    "redis://:@h",
    "redis://u:%zz@h",
    "redis://u:%4@h",
    "redis://u:pw%@h",
    "redis://u:%00@h",
    "redis://%00:pw@h",
    "redis://::1:6379",
    "redis://[::1",
    "redis://[::1]x",
    "redis://[::1]:",
    "redis://[::1]:0",
    "redis://[]",
    "redis://[abc]",
    "redis://[127.0.0.1]",
    "redis://[::g]",
    "redis://[fe80::1%25eth0]",
    "unix://",
    "unix:///",
    "unix:///tmp/s/",
    "unix://relative/path",
    "unix://host/tmp/s",
    "unix://?db=1",
    "unix://u@/tmp/s",
    "unix://u:p/w@/tmp/s",
    "unix://u:@/tmp/s",
    "unix:///tmp/s?",
    "unix:///tmp/s?db",
    "unix:///tmp/s?db=",
    "unix:///tmp/s?db=x",
    "unix:///tmp/s?db=-1",
    "unix:///tmp/s?db=2147483648",
    "unix:///tmp/s?foo=1",
    "unix:///tmp/s?DB=1",
    "unix:///tmp/s?db=1&foo=2",
    "unix:///tmp/s?db=1&db=2",
    "unix:///tmp/s?db=1&",
    "unix:///tmp/s#x",
    "unix:relative",
    "1redis://h",
    "re dis://h",
};

Test(uri, bad) {
  size_t i;

  for (i = 0; i < sizeof(bad_uris) / sizeof(bad_uris[0]); i++) {
    rlock__uri u;
    int rc;

    rlock__clear_last_error();
    memset(&u, 0xa5, sizeof(u));
    rc = rlock__uri_parse(bad_uris[i], &u);
    cr_assert_eq(rc, RLOCK_EURI, "'%s' gave %s (%s)", bad_uris[i],
                 rlock_err_name(rc), rlock_last_error());
    cr_assert_str_neq(rlock_last_error(), "", "'%s': no last error",
                      bad_uris[i]);
    /* Left zeroed, so freeing it (or not) is safe. */
    cr_assert_eq(u.is_unix, 0);
    cr_assert_null(u.host);
    cr_assert_null(u.path);
    cr_assert_null(u.user);
    cr_assert_null(u.password);
    cr_assert_eq(u.port, 0);
    cr_assert_eq(u.db, 0);
    cr_assert_eq(u.mode, RLOCK__URI_SINGLE);
    cr_assert_null(u.addrs);
    cr_assert_eq(u.naddrs, 0);
    cr_assert_null(u.master);
    cr_assert_eq(u.tls, 0);
    rlock__uri_free(&u);
  }
}

/* rediss:// is redis:// with TLS: the same syntax, tls set (and only
 * there). */
Test(uri, rediss_is_redis_with_tls) {
  rlock__uri u;
  cr_assert_eq(rlock__uri_parse("rediss://:pw@db.example.com:6380/2", &u), 0,
               "%s", rlock_last_error());
  cr_assert_eq(u.tls, 1);
  cr_assert_eq(u.is_unix, 0);
  cr_assert_str_eq(u.host, "db.example.com");
  cr_assert_eq(u.port, 6380);
  cr_assert_str_eq(u.password, "pw");
  cr_assert_eq(u.db, 2);
  rlock__uri_free(&u);
  cr_assert_eq(rlock__uri_parse("REDISS://[::1]", &u), 0);
  cr_assert_eq(u.tls, 1);
  cr_assert_str_eq(u.host, "::1");
  cr_assert_eq(u.port, 6379);
  rlock__uri_free(&u);
  cr_assert_eq(rlock__uri_parse("redis://h", &u), 0);
  cr_assert_eq(u.tls, 0);
  rlock__uri_free(&u);
  cr_assert_eq(rlock__uri_parse("unix:///s", &u), 0);
  cr_assert_eq(u.tls, 0);
  rlock__uri_free(&u);
}

Test(uri, null_uri) {
  rlock__uri u;

  rlock__clear_last_error();
  cr_assert_eq(rlock__uri_parse(NULL, &u), RLOCK_EURI);
  cr_assert_str_neq(rlock_last_error(), "");
  cr_assert_null(u.host);
}

static void assert_bad_with(const char *uri, const char *fragment) {
  rlock__uri u;

  rlock__clear_last_error();
  cr_assert_eq(rlock__uri_parse(uri, &u), RLOCK_EURI, "%s", uri);
  cr_assert_not_null(strstr(rlock_last_error(), fragment),
                     "%s: '%s' does not mention '%s'", uri, rlock_last_error(),
                     fragment);
}

Test(uri, error_sentences_name_the_problem) {
  assert_bad_with("rediss://", "no host");
  assert_bad_with("http://h", "scheme 'http'");
  assert_bad_with("", "empty");
  assert_bad_with("redis://:6379", "no host");
  assert_bad_with("redis://h:0", "port");
  assert_bad_with("redis://h:65536", "1..65535");
  assert_bad_with("redis://h:x1", "not a decimal number");
  assert_bad_with("redis://h/-1", "non-negative decimal integer");
  assert_bad_with("redis://h/2147483648", "too large");
  assert_bad_with("redis://::1", "brackets");
  assert_bad_with("unix://", "empty");
  assert_bad_with("unix://relative/path", "absolute");
  assert_bad_with("unix:///s?foo=1", "unknown URI query parameter 'foo' ");
  assert_bad_with("redis://h?db=1", "query parameters are not supported");
  assert_bad_with("redis://u:%zz@h", "percent-encoding");
}

Test(uri, errors_do_not_quote_passwords) {
  static const char *const leaky[] = {
      "redis://u:se/cret99@h:6379",
      "redis://u:se?cret99@h",
      "unix://u:se/cret99@/tmp/s",
      "u:secret99@h:6379",
      "u:secret99@h:6379/0",
      "u:secret99@h://x",
      "unix:///tmp/s?password=secret99",
  };
  size_t i;

  for (i = 0; i < sizeof(leaky) / sizeof(leaky[0]); i++) {
    rlock__uri u;

    rlock__clear_last_error();
    cr_assert_eq(rlock__uri_parse(leaky[i], &u), RLOCK_EURI, "%s", leaky[i]);
    cr_assert_str_neq(rlock_last_error(), "");
    cr_assert_null(strstr(rlock_last_error(), "cret99"), "%s: '%s'", leaky[i],
                   rlock_last_error());
  }
  assert_bad_with("redis://u:pa/ss@h", "percent-encode");
  assert_bad_with("unix://u:p/w@/tmp/s", "absolute");
}

Test(uri, free_null_and_twice) {
  rlock__uri u;

  rlock__uri_free(NULL);
  cr_assert_eq(rlock__uri_parse("redis://:pw@h", &u), 0);
  rlock__uri_free(&u);
  rlock__uri_free(&u);
  cr_assert_null(u.password);
}

/* ---- wiping secrets ----
 * What free() does with the bytes afterwards cannot be observed without
 * undefined behaviour, and whether a dead-store eliminator would drop the
 * stores is a property of the build, not of a run: these check that the
 * helpers zero exactly what they are given. */

Test(wipe, zeroes_exactly_the_range) {
  unsigned char buf[64];

  memset(buf, 0xa5, sizeof(buf));
  rlock__wipe(buf + 8, 40);
  for (size_t i = 0; i < sizeof(buf); i++)
    cr_assert_eq(buf[i], (i >= 8 && i < 48) ? 0 : 0xa5, "byte %zu = 0x%02x",
                 i, buf[i]);
  rlock__wipe(buf, 0);   /* no-op */
  rlock__wipe(NULL, 16); /* no-op */
  cr_assert_eq(buf[0], 0xa5);
}

Test(wipe, wipes_a_password_string) {
  char secret[] = "redis://u:s3cret@h:6379/0";
  const size_t len = sizeof(secret) - 1;

  rlock__wipe(secret, strlen(secret));
  for (size_t i = 0; i <= len; i++)
    cr_assert_eq(secret[i], '\0', "byte %zu survived", i);
}

Test(wipe, free_secret_null_and_heap) {
  rlock__free_secret(NULL);
  char *s = strdup("redis://:pw@h");
  cr_assert_not_null(s);
  rlock__free_secret(s); /* under ASan: a wipe past the end would trip */
}

/* ---- options ---- */

/* rlock_options.struct_size: how much of the caller's struct exists. These
 * refusals happen before anything connects, so no server is needed. */
Test(options, struct_size_zero_is_einval) {
  rlock_options o;
  rlock_options_init(&o);
  o.struct_size = 0;
  rlock_client *c = (rlock_client *)&o;
  cr_assert_eq(rlock_client_new(&c, &o), RLOCK_EINVAL);
  cr_assert_null(c);
  cr_assert_not_null(strstr(rlock_last_error(), "rlock_options_init()"),
                     "'%s'", rlock_last_error());
}

Test(options, struct_size_larger_than_ours_is_einval) {
  /* A struct from a newer header: one byte more than this library knows. */
  static unsigned char newer[sizeof(rlock_options) + 1];
  rlock_options o;
  rlock_options_init(&o);
  o.uri = "redis://127.0.0.1:1";
  o.struct_size = sizeof(rlock_options) + 1;
  memcpy(newer, &o, sizeof o);
  rlock_client *c = (rlock_client *)&o;
  cr_assert_eq(rlock_client_new(&c, (const rlock_options *)(void *)newer),
               RLOCK_EINVAL);
  cr_assert_null(c);
  cr_assert_not_null(strstr(rlock_last_error(), "newer"), "'%s'",
                     rlock_last_error());
}

Test(options, struct_size_prefix_takes_defaults_for_the_rest) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = "redis://h:1";
  o.client_name = "prefix";
  o.watchdog_timeout_ms = 4500;
  o.command_timeout_ms = 250;
  o.subscribe_timeout_ms = 999;
  /* What an older header's struct ends before: the bytes from here on are
   * not the caller's and must not be read. Garbage that would fail
   * validation proves they are not. */
  o.struct_size = offsetof(rlock_options, retry_attempts);
  memset((char *)&o + o.struct_size, 0x5a, sizeof o - o.struct_size);
  cr_assert_neq(o.retry_attempts, 3);

  rlock_options full;
  memset(&full, 0xa5, sizeof full);
  cr_assert_eq(rlock__options_copy(&full, &o), 0);
  cr_assert_eq(full.struct_size, sizeof(rlock_options));
  cr_assert_str_eq(full.uri, "redis://h:1");
  cr_assert_str_eq(full.client_name, "prefix");
  cr_assert_eq(full.watchdog_timeout_ms, 4500);
  cr_assert_eq(full.command_timeout_ms, 250);
  cr_assert_eq(full.subscribe_timeout_ms, 999);
  cr_assert_eq(full.retry_attempts, 3);
  cr_assert_eq(full.retry_interval_ms, 1500);
  cr_assert_eq(full.sharded_pubsub, 0);
  cr_assert_null(full.on_lock_lost);
  cr_assert_null(full.on_lock_lost_data);
  cr_assert_eq(rlock__options_validate(&full), 0);

  /* NULL: all defaults. */
  cr_assert_eq(rlock__options_copy(&full, NULL), 0);
  cr_assert_eq(full.struct_size, sizeof(rlock_options));
  cr_assert_eq(full.watchdog_timeout_ms, 30000);
}

Test(options, defaults) {
  rlock_options o;

  memset(&o, 0x5a, sizeof(o));
  rlock_options_init(&o);
  cr_assert_eq(o.struct_size, sizeof(rlock_options));
  cr_assert_null(o.uri);
  cr_assert_null(o.client_name);
  cr_assert_eq(o.watchdog_timeout_ms, 30000);
  cr_assert_eq(o.command_timeout_ms, 3000);
  cr_assert_eq(o.subscribe_timeout_ms, 7500);
  cr_assert_eq(o.retry_attempts, 3);
  cr_assert_eq(o.retry_interval_ms, 1500);
  cr_assert_eq(o.sharded_pubsub, 0);
  cr_assert_null(o.on_lock_lost);
  cr_assert_null(o.on_lock_lost_data);
  cr_assert_eq(rlock__options_validate(&o), 0);
  cr_assert_eq(rlock__options_validate(NULL), 0);
}

#define MS_MAX INT64_C(2147483647)

/* Each row changes one field of the defaults. */
struct option_case {
  const char *label;
  void (*apply)(rlock_options *o);
  int want;
  const char *field; /* must appear in the last error when want != 0 */
};

#define OPTION_CASE(label, stmt, want, field)                                  \
  static void apply_##label(rlock_options *o) { stmt; }
#define OPTION_CASES(X)                                                        \
  X(watchdog_min, o->watchdog_timeout_ms = 300, 0, NULL)                       \
  X(watchdog_max, o->watchdog_timeout_ms = MS_MAX, 0, NULL)                    \
  X(watchdog_low, o->watchdog_timeout_ms = 299, RLOCK_EINVAL,                  \
    "watchdog_timeout_ms")                                                     \
  X(watchdog_zero, o->watchdog_timeout_ms = 0, RLOCK_EINVAL,                   \
    "watchdog_timeout_ms")                                                     \
  X(watchdog_neg, o->watchdog_timeout_ms = -1, RLOCK_EINVAL,                   \
    "watchdog_timeout_ms")                                                     \
  X(watchdog_high, o->watchdog_timeout_ms = MS_MAX + 1, RLOCK_EINVAL,          \
    "watchdog_timeout_ms")                                                     \
  X(command_min, o->command_timeout_ms = 10, 0, NULL)                          \
  X(command_max, o->command_timeout_ms = MS_MAX, 0, NULL)                      \
  X(command_low, o->command_timeout_ms = 9, RLOCK_EINVAL,                      \
    "command_timeout_ms")                                                      \
  X(command_high, o->command_timeout_ms = INT64_MAX, RLOCK_EINVAL,             \
    "command_timeout_ms")                                                      \
  X(subscribe_min, o->subscribe_timeout_ms = 10, 0, NULL)                      \
  X(subscribe_max, o->subscribe_timeout_ms = MS_MAX, 0, NULL)                  \
  X(subscribe_low, o->subscribe_timeout_ms = 9, RLOCK_EINVAL,                  \
    "subscribe_timeout_ms")                                                    \
  X(subscribe_high, o->subscribe_timeout_ms = MS_MAX + 1, RLOCK_EINVAL,        \
    "subscribe_timeout_ms")                                                    \
  X(retry_attempts_min, o->retry_attempts = 0, 0, NULL)                        \
  X(retry_attempts_max, o->retry_attempts = 100, 0, NULL)                      \
  X(retry_attempts_neg, o->retry_attempts = -1, RLOCK_EINVAL,                  \
    "retry_attempts")                                                          \
  X(retry_attempts_high, o->retry_attempts = 101, RLOCK_EINVAL,                \
    "retry_attempts")                                                          \
  X(retry_interval_min, o->retry_interval_ms = 0, 0, NULL)                     \
  X(retry_interval_max, o->retry_interval_ms = MS_MAX, 0, NULL)                \
  X(retry_interval_neg, o->retry_interval_ms = -1, RLOCK_EINVAL,               \
    "retry_interval_ms")                                                       \
  X(retry_interval_high, o->retry_interval_ms = MS_MAX + 1, RLOCK_EINVAL,      \
    "retry_interval_ms")                                                       \
  X(sharded_on, o->sharded_pubsub = 1, 0, NULL)                                \
  X(sharded_two, o->sharded_pubsub = 2, RLOCK_EINVAL, "sharded_pubsub")        \
  X(sharded_off, o->sharded_pubsub = 0, 0, NULL)                               \
  X(sharded_auto, o->sharded_pubsub = -1, 0, NULL)                             \
  X(sharded_neg, o->sharded_pubsub = -2, RLOCK_EINVAL, "sharded_pubsub")       \
  X(name_one, o->client_name = "a", 0, NULL)                                   \
  X(name_64, o->client_name = NAME_64, 0, NULL)                                \
  X(name_punct, o->client_name = "my-app:worker_1/2", 0, NULL)                 \
  X(name_empty, o->client_name = "", RLOCK_EINVAL, "client_name")              \
  X(name_65, o->client_name = NAME_64 "x", RLOCK_EINVAL, "client_name")        \
  X(name_space, o->client_name = "my app", RLOCK_EINVAL, "client_name")        \
  X(name_newline, o->client_name = "app\n", RLOCK_EINVAL, "client_name")       \
  X(name_cr, o->client_name = "app\r", RLOCK_EINVAL, "client_name")            \
  X(name_tab, o->client_name = "a\tb", RLOCK_EINVAL, "client_name")            \
  X(name_del, o->client_name = "a\x7f", RLOCK_EINVAL, "client_name")           \
  X(name_utf8, o->client_name = "caf\xc3\xa9", RLOCK_EINVAL, "client_name")    \
  X(uri_good, o->uri = "redis://:pw@localhost:6380/2", 0, NULL)                \
  X(uri_unix, o->uri = "unix:///tmp/redis.sock?db=1", 0, NULL)                 \
  X(uri_bad_port, o->uri = "redis://h:0", RLOCK_EURI, "port")                  \
  X(uri_tls, o->uri = "rediss://h", 0, NULL)                                  \
  X(tls_on_plain, (o->uri = "redis://h", o->tls_ca_file = "/ca.pem"),          \
    RLOCK_EINVAL, "tls_ca_file")                                               \
  X(tls_insecure_plain, (o->uri = "redis://h", o->tls_insecure = 1),           \
    RLOCK_EINVAL, "tls_insecure")                                              \
  X(tls_insecure_two, (o->uri = "rediss://h", o->tls_insecure = 2),            \
    RLOCK_EINVAL, "tls_insecure")                                              \
  X(tls_cert_no_key, (o->uri = "rediss://h", o->tls_cert_file = "/c.pem"),     \
    RLOCK_EINVAL, "tls_key_file")                                              \
  X(tls_key_no_cert, (o->uri = "rediss://h", o->tls_key_file = "/k.pem"),      \
    RLOCK_EINVAL, "tls_cert_file")                                             \
  X(tls_sni_empty, (o->uri = "rediss://h", o->tls_server_name = ""),           \
    RLOCK_EINVAL, "tls_server_name")                                           \
  X(connect_timeout_min, o->connect_timeout_ms = 10, 0, NULL)                  \
  X(connect_timeout_low, o->connect_timeout_ms = 9, RLOCK_EINVAL,              \
    "connect_timeout_ms")                                                      \
  X(handoff_off, o->handoff_max = 0, 0, NULL)                                  \
  X(handoff_max, o->handoff_max = 1000, 0, NULL)                               \
  X(handoff_neg, o->handoff_max = -1, RLOCK_EINVAL, "handoff_max")             \
  X(handoff_high, o->handoff_max = 1001, RLOCK_EINVAL, "handoff_max")          \
  X(spin_off, o->spin_us = 0, 0, NULL)                                         \
  X(spin_max, o->spin_us = 100000, 0, NULL)                                    \
  X(spin_neg, o->spin_us = -1, RLOCK_EINVAL, "spin_us")                        \
  X(spin_high, o->spin_us = 100001, RLOCK_EINVAL, "spin_us")                   \
  X(queue_min, o->max_write_queue_bytes = 65536, 0, NULL)                      \
  X(queue_low, o->max_write_queue_bytes = 65535, RLOCK_EINVAL,                 \
    "max_write_queue_bytes")                                                   \
  X(queue_high, o->max_write_queue_bytes = (INT64_C(1) << 40) + 1,             \
    RLOCK_EINVAL, "max_write_queue_bytes")                                     \
  X(uri_empty, o->uri = "", RLOCK_EURI, "empty")

#define NAME_64                                                                \
  "0123456789012345678901234567890123456789012345678901234567890123"

OPTION_CASES(OPTION_CASE)
#undef OPTION_CASE

static const struct option_case option_cases[] = {
#define OPTION_ROW(label, stmt, want, field)                                   \
  {#label, apply_##label, want, field},
    OPTION_CASES(OPTION_ROW)
#undef OPTION_ROW
};

Test(options, each_field_range) {
  size_t i;

  cr_assert_eq(strlen(NAME_64), 64);
  for (i = 0; i < sizeof(option_cases) / sizeof(option_cases[0]); i++) {
    const struct option_case *c = &option_cases[i];
    rlock_options o;
    int rc;

    rlock_options_init(&o);
    c->apply(&o);
    rlock__clear_last_error();
    rc = rlock__options_validate(&o);
    cr_assert_eq(rc, c->want, "%s: got %s, want %s (%s)", c->label,
                 rlock_err_name(rc), rlock_err_name(c->want),
                 rlock_last_error());
    if (c->want != 0) {
      cr_assert_not_null(strstr(rlock_last_error(), c->field),
                         "%s: '%s' does not name '%s'", c->label,
                         rlock_last_error(), c->field);
    }
  }
}

/* The sized init writes only the bytes the caller's header knows of: a
 * program built against an older, smaller rlock_options must not have a
 * newer library write past its struct. */
Test(options, init_size_writes_only_the_callers_prefix) {
  size_t prefix = offsetof(rlock_options, retry_attempts);
  unsigned char buf[sizeof(rlock_options) + 16];
  memset(buf, 0xAB, sizeof(buf));
  rlock_options_init_size((rlock_options *)(void *)buf, prefix);
  rlock_options got;
  memcpy(&got, buf, sizeof(got));
  cr_assert_eq(got.struct_size, prefix);
  cr_assert_eq(got.watchdog_timeout_ms, 30000);
  cr_assert_eq(got.subscribe_timeout_ms, 7500);
  for (size_t i = prefix; i < sizeof(buf); i++)
    cr_assert_eq(buf[i], 0xAB, "byte %zu past the caller's %zu was written",
                 i, prefix);
  /* A size beyond the library's struct is capped to it. */
  memset(buf, 0xAB, sizeof(buf));
  rlock_options_init_size((rlock_options *)(void *)buf, sizeof(buf));
  memcpy(&got, buf, sizeof(got));
  cr_assert_eq(got.struct_size, sizeof(rlock_options));
  cr_assert_eq(buf[sizeof(rlock_options)], 0xAB);
}

/* ---- sentinel and cluster URIs ---- */

#define MAX_HOSTS 4

struct good_multi {
  const char *uri;
  int mode;
  int tls;
  size_t naddrs;
  const char *hosts[MAX_HOSTS];
  int ports[MAX_HOSTS];
  const char *master;
  const char *user;
  const char *password;
  int db;
};

static const struct good_multi good_multis[] = {
    {"redis+sentinel://s1/mymaster", RLOCK__URI_SENTINEL, 0, 1, {"s1"},
     {26379}, "mymaster", NULL, NULL, 0},
    {"redis+sentinel://s1:26380,s2,[::1]:26381/mymaster/3",
     RLOCK__URI_SENTINEL, 0, 3, {"s1", "s2", "::1"}, {26380, 26379, 26381},
     "mymaster", NULL, NULL, 3},
    {"redis+sentinel://:pw@10.0.0.1,10.0.0.2:5000/m/", RLOCK__URI_SENTINEL, 0,
     2, {"10.0.0.1", "10.0.0.2"}, {26379, 5000}, "m", NULL, "pw", 0},
    {"redis+sentinel://alice:p%40ss@h/my%20master%2Fx", RLOCK__URI_SENTINEL, 0,
     1, {"h"}, {26379}, "my master/x", "alice", "p@ss", 0},
    {"redis+sentinel://u:p@ss@h/m/2147483647", RLOCK__URI_SENTINEL, 0, 1,
     {"h"}, {26379}, "m", "u", "p@ss", INT_MAX},
    {"rediss+sentinel://[2001:db8::1]:1,b:65535,c,d/M-1.x_y",
     RLOCK__URI_SENTINEL, 1, 4, {"2001:db8::1", "b", "c", "d"},
     {1, 65535, 26379, 26379}, "M-1.x_y", NULL, NULL, 0},
    {"REDIS+SENTINEL://H/m", RLOCK__URI_SENTINEL, 0, 1, {"H"}, {26379}, "m",
     NULL, NULL, 0},
    {"RediSS+Sentinel://h/m", RLOCK__URI_SENTINEL, 1, 1, {"h"}, {26379}, "m",
     NULL, NULL, 0},
    {"redis+cluster://n1", RLOCK__URI_CLUSTER, 0, 1, {"n1"}, {6379}, NULL,
     NULL, NULL, 0},
    {"redis+cluster://n1:7000,n2:7001,n3/", RLOCK__URI_CLUSTER, 0, 3,
     {"n1", "n2", "n3"}, {7000, 7001, 6379}, NULL, NULL, NULL, 0},
    {"redis+cluster://u:pw@[::1]:7000,127.0.0.1/0", RLOCK__URI_CLUSTER, 0, 2,
     {"::1", "127.0.0.1"}, {7000, 6379}, NULL, "u", "pw", 0},
    {"redis+cluster://n/000", RLOCK__URI_CLUSTER, 0, 1, {"n"}, {6379}, NULL,
     NULL, NULL, 0},
    {"rediss+cluster://:s%2Fecret@n1:7000", RLOCK__URI_CLUSTER, 1, 1, {"n1"},
     {7000}, NULL, NULL, "s/ecret", 0},
    {"REDISS+CLUSTER://N", RLOCK__URI_CLUSTER, 1, 1, {"N"}, {6379}, NULL, NULL,
     NULL, 0},
};

Test(uri_multi, good) {
  for (size_t i = 0; i < sizeof(good_multis) / sizeof(good_multis[0]); i++) {
    const struct good_multi *g = &good_multis[i];
    rlock__uri u;
    int rc = rlock__uri_parse(g->uri, &u);

    cr_assert_eq(rc, 0, "%s: rc %d (%s)", g->uri, rc, rlock_last_error());
    cr_assert_eq(u.mode, g->mode, "%s: mode %d", g->uri, u.mode);
    cr_assert_eq(u.tls, g->tls, "%s: tls %d", g->uri, u.tls);
    cr_assert_eq(u.is_unix, 0, "%s: is_unix", g->uri);
    cr_assert_null(u.path, "%s: path", g->uri);
    cr_assert_eq(u.naddrs, g->naddrs, "%s: naddrs %zu", g->uri, u.naddrs);
    cr_assert_not_null(u.addrs, "%s: addrs", g->uri);
    for (size_t j = 0; j < g->naddrs; j++) {
      cr_assert_not_null(u.addrs[j].host, "%s: host %zu", g->uri, j);
      cr_assert_str_eq(u.addrs[j].host, g->hosts[j], "%s: host %zu", g->uri,
                       j);
      cr_assert_eq(u.addrs[j].port, g->ports[j], "%s: port %zu = %d", g->uri,
                   j, u.addrs[j].port);
    }
    /* host / port: a copy of the first, not the same pointer (each is
     * freed on its own). */
    cr_assert_str_eq(u.host, g->hosts[0], "%s: host", g->uri);
    cr_assert_neq(u.host, u.addrs[0].host, "%s: host aliases addrs", g->uri);
    cr_assert_eq(u.port, g->ports[0], "%s: port", g->uri);
    assert_str_or_null(u.master, g->master, g->uri, "master");
    assert_str_or_null(u.user, g->user, g->uri, "user");
    assert_str_or_null(u.password, g->password, g->uri, "password");
    cr_assert_eq(u.db, g->db, "%s: db %d", g->uri, u.db);

    rlock__uri_free(&u);
    cr_assert_null(u.addrs);
    cr_assert_eq(u.naddrs, 0);
    cr_assert_null(u.master);
    cr_assert_null(u.host);
    cr_assert_eq(u.mode, RLOCK__URI_SINGLE);
    rlock__uri_free(&u); /* twice: safe */
  }
}

/* Each refusal, with a fragment of its sentence. */
struct bad_multi {
  const char *uri;
  const char *fragment;
};

static const struct bad_multi bad_multis[] = {
    /* host list */
    {"redis+sentinel://a,,b/m", "host 2 of the 3"},
    {"redis+sentinel://,a/m", "host 1 of the 2"},
    {"redis+sentinel://a,/m", "host 2 of the 2"},
    {"redis+cluster://a,,b", "is empty"},
    {"redis+cluster://,", "host 1 of the 2"},
    {"redis+sentinel:///m", "no host"},
    {"redis+cluster://", "no host"},
    {"redis+cluster:///0", "no host"},
    {"redis+cluster://:pw@", "no host"},
    {"redis+cluster://a,:7000", "no host"},
    {"redis+sentinel://a b/m", "not allowed in a host name"},
    {"redis+cluster://a,b c", "not allowed in a host name"},
    {"redis+cluster://a,::1", "brackets"},
    {"redis+cluster://[::1,[::2]", "no closing ']'"},
    {"redis+cluster://[::1]x", "after the IPv6 address"},
    {"redis+cluster://[abc]", "not an IPv6 address"},
    /* ports */
    {"redis+sentinel://a:0/m", "out of range (1..65535)"},
    {"redis+sentinel://a,b:65536/m", "out of range (1..65535)"},
    {"redis+cluster://a:x", "not a decimal number"},
    {"redis+cluster://a:7000,b:", "no port"},
    {"redis+cluster://a:-1", "not a decimal number"},
    /* master name */
    {"redis+sentinel://h", "no master name"},
    {"redis+sentinel://h/", "no master name"},
    {"redis+sentinel://h//0", "no master name"},
    {"redis+sentinel://h?x", "no master name"},
    {"redis+sentinel://h/m%zz", "percent-encoding in the URI master name"},
    {"redis+sentinel://h/m%00", "%00"},
    {"redis+sentinel://h/m x", "master name in the URI contains byte 0x20"},
    {"redis+sentinel://h/m\t", "byte 0x09"},
    {"redis+sentinel://h/m@x", "'@' in the master name (%40)"},
    {"redis+sentinel://u:p@h/m@x", "percent-encode it in the master name"},
    /* database */
    {"redis+sentinel://h/m/x", "non-negative decimal integer"},
    {"redis+sentinel://h/m/1/", "non-negative decimal integer"},
    {"redis+sentinel://h/m/2147483648", "too large"},
    {"redis+cluster://h/1", "Redis Cluster has only database 0"},
    {"redis+cluster://h/15", "database 15"},
    {"rediss+cluster://a,b/2", "Redis Cluster has only database 0"},
    {"redis+cluster://h/x", "non-negative decimal integer"},
    {"redis+cluster://h/0/", "non-negative decimal integer"},
    /* query, fragment, user info */
    {"redis+sentinel://h/m?db=1", "not supported in redis+sentinel://"},
    {"redis+cluster://h?x=1", "not supported in redis+cluster://"},
    {"redis+cluster://h/0?x=1", "not supported in redis+cluster://"},
    {"redis+sentinel://h/m#f", "fragments"},
    {"redis+cluster://h#f", "fragments"},
    {"redis+cluster://user@h", "user name but no password"},
    {"redis+cluster://u:@h", "password in the URI is empty"},
    {"redis+sentinel://u:pa/ss@h/m", "percent-encode"},
    {"redis+cluster://u:%4@h", "percent-encoding"},
    /* schemes */
    {"unix+sentinel:///tmp/s/m", "unix sockets"},
    {"unix+cluster:///tmp/s", "unix sockets"},
    {"redis-sentinel://h/m", "unsupported URI scheme 'redis-sentinel'"},
    {"redis+sentinels://h/m", "unsupported URI scheme"},
    {"redis+replica://h", "redis+sentinel://"},
};

Test(uri_multi, bad) {
  for (size_t i = 0; i < sizeof(bad_multis) / sizeof(bad_multis[0]); i++) {
    const struct bad_multi *b = &bad_multis[i];
    rlock__uri u;
    int rc;

    rlock__clear_last_error();
    memset(&u, 0xa5, sizeof(u));
    rc = rlock__uri_parse(b->uri, &u);
    cr_assert_eq(rc, RLOCK_EURI, "'%s' gave %s (%s)", b->uri,
                 rlock_err_name(rc), rlock_last_error());
    cr_assert_not_null(strstr(rlock_last_error(), b->fragment),
                       "'%s': '%s' does not mention '%s'", b->uri,
                       rlock_last_error(), b->fragment);
    /* Left zeroed, whatever was filled before the refusal. */
    cr_assert_eq(u.mode, RLOCK__URI_SINGLE, "%s", b->uri);
    cr_assert_null(u.addrs, "%s", b->uri);
    cr_assert_eq(u.naddrs, 0, "%s", b->uri);
    cr_assert_null(u.master, "%s", b->uri);
    cr_assert_null(u.host, "%s", b->uri);
    cr_assert_null(u.user, "%s", b->uri);
    cr_assert_null(u.password, "%s", b->uri);
    cr_assert_eq(u.tls, 0, "%s", b->uri);
    cr_assert_eq(u.db, 0, "%s", b->uri);
    rlock__uri_free(&u);
  }
}

Test(uri_multi, errors_do_not_quote_passwords) {
  static const char *const leaky[] = {
      "redis+sentinel://u:se/cret99@h/m",
      "redis+cluster://u:se?cret99@h",
      "redis+cluster://u:se#cret99@h",
      "redis+sentinel://u:secret99@h",
      "redis+cluster://u:secret99@h/1",
      "redis+cluster://u:secret99@a,,b",
  };

  for (size_t i = 0; i < sizeof(leaky) / sizeof(leaky[0]); i++) {
    rlock__uri u;

    rlock__clear_last_error();
    cr_assert_eq(rlock__uri_parse(leaky[i], &u), RLOCK_EURI, "%s", leaky[i]);
    cr_assert_str_neq(rlock_last_error(), "");
    cr_assert_null(strstr(rlock_last_error(), "cret99"), "%s: '%s'", leaky[i],
                   rlock_last_error());
  }
}

/* A long seed list: every host kept, in order. */
Test(uri_multi, many_hosts_in_order) {
  char uri[1024] = "redis+cluster://";
  size_t n = 40;

  for (size_t i = 0; i < n; i++) {
    char item[32];
    snprintf(item, sizeof item, "%sn%zu:%zu", i > 0 ? "," : "", i, 7000 + i);
    strcat(uri, item);
  }
  rlock__uri u;
  cr_assert_eq(rlock__uri_parse(uri, &u), 0, "%s", rlock_last_error());
  cr_assert_eq(u.naddrs, n);
  for (size_t i = 0; i < n; i++) {
    char want[16];
    snprintf(want, sizeof want, "n%zu", i);
    cr_assert_str_eq(u.addrs[i].host, want);
    cr_assert_eq(u.addrs[i].port, (int)(7000 + i));
  }
  rlock__uri_free(&u);
}
