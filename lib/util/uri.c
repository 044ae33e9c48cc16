/* Redis URI parsing:
 *   redis://[[user]:password@]host[:port][/db]
 *   unix://[[user]:password@]/abs/path[?db=N]
 *   redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]
 *   redis+cluster://[[user]:password@]host[:port][,host[:port]...][/0]
 * and rediss:// / rediss+sentinel:// / rediss+cluster:// for TLS. Sentinel
 * hosts default to port 26379, all others to 6379; the user and password
 * are always those of the data nodes (the sentinels' are options). Hosts
 * are DNS names, IPv4 addresses or IPv6 addresses in brackets.
 * The parser is deliberately strict: a URI that is accepted means exactly
 * what it says, and anything else is RLOCK_EURI with a sentence naming the
 * offending part, because a silently misread URI (wrong db, dropped
 * password) is far harder to debug than a refusal. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define RLOCK__DEFAULT_PORT 6379
#define RLOCK__SENTINEL_PORT 26379

static int rlock__is_digit(char c) { return c >= '0' && c <= '9'; }

static int rlock__hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static int rlock__prefix_nocase(const char *s, size_t len, const char *lit) {
  size_t i;

  if (strlen(lit) != len)
    return 0;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z')
      c = (char)(c - 'A' + 'a');
    if (c != lit[i])
      return 0;
  }
  return 1;
}

/* RFC 3986, 3.1: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ). Checked so
 * that "user:secret@host://..." is never quoted back as a "scheme". */
static int rlock__is_scheme(const char *s, size_t len) {
  size_t i;

  if (len == 0)
    return 0;
  for (i = 0; i < len; i++) {
    char c = s[i];
    int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alpha &&
        (i == 0 || !(rlock__is_digit(c) || c == '+' || c == '-' || c == '.')))
      return 0;
  }
  return 1;
}

static int rlock__nomem(void) {
  rlock__set_last_error("out of memory while parsing the Redis URI");
  return RLOCK_ENOMEM;
}

static char *rlock__strndup(const char *s, size_t len) {
  char *copy = malloc(len + 1);

  if (copy == NULL)
    return NULL;
  memcpy(copy, s, len);
  copy[len] = '\0';
  return copy;
}

void rlock__wipe(void *buf, size_t len) {
  if (buf == NULL || len == 0)
    return;
#if defined(__GLIBC__) &&                                                      \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 25))
  /* Declared with _GNU_SOURCE (meson.build); guaranteed not to be removed
   * as a dead store before free(). */
  explicit_bzero(buf, len);
#else
  /* Stores through a volatile lvalue are side effects the compiler must
   * perform, even right before free(). */
  volatile unsigned char *p = buf;
  for (size_t i = 0; i < len; i++)
    p[i] = 0;
#endif
}

void rlock__free_secret(char *s) {
  if (s == NULL)
    return;
  rlock__wipe(s, strlen(s));
  free(s);
}

/* Zeroes and frees a buffer that may hold (part of) a password, so the
 * secret does not linger in freed heap memory. */
static void rlock__wipe_free(char *buf, size_t len) {
  if (buf == NULL)
    return;
  rlock__wipe(buf, len);
  free(buf);
}

/* Percent-decodes s[0..len) into a new string. `what` names the part for
 * the error sentence. %00 is refused: the result is a C string, and a NUL
 * in the middle would silently truncate a password. */
static int rlock__decode(const char *s, size_t len, const char *what,
                         char **out) {
  char *dst;
  size_t i, j;

  dst = malloc(len + 1);
  if (dst == NULL)
    return rlock__nomem();
  for (i = 0, j = 0; i < len; i++) {
    if (s[i] != '%') {
      dst[j++] = s[i];
      continue;
    }
    if (len - i < 3 || rlock__hex_value(s[i + 1]) < 0 ||
        rlock__hex_value(s[i + 2]) < 0) {
      rlock__set_last_error("invalid percent-encoding in the URI %s "
                            "('%%' must be followed by two hex digits)",
                            what);
      rlock__wipe_free(dst, len + 1);
      return RLOCK_EURI;
    }
    dst[j] =
        (char)(rlock__hex_value(s[i + 1]) * 16 + rlock__hex_value(s[i + 2]));
    if (dst[j] == '\0') {
      rlock__set_last_error("the URI %s contains %%00 (a NUL byte)", what);
      rlock__wipe_free(dst, len + 1);
      return RLOCK_EURI;
    }
    j++;
    i += 2;
  }
  dst[j] = '\0';
  *out = dst;
  return 0;
}

/* Parses s[0..len) as a database number: a non-negative decimal integer
 * that fits an int. No sign, no spaces, no empty string. */
static int rlock__parse_db(const char *s, size_t len, int *db) {
  /* long long: at least 64 bits, so value * 10 + 9 cannot overflow while
   * value <= INT_MAX, even where long is 32 bits. */
  long long value = 0;
  size_t i;

  if (len == 0) {
    rlock__set_last_error("the database number in the URI is empty");
    return RLOCK_EURI;
  }
  for (i = 0; i < len; i++) {
    if (!rlock__is_digit(s[i])) {
      rlock__set_last_error("the database in the URI ('%.*s') is not a "
                            "non-negative decimal integer",
                            (int)(len > 64 ? 64 : len), s);
      return RLOCK_EURI;
    }
    value = value * 10 + (s[i] - '0');
    if (value > INT_MAX) {
      rlock__set_last_error("the database number in the URI ('%.*s') is too "
                            "large (at most %d)",
                            (int)(len > 64 ? 64 : len), s, INT_MAX);
      return RLOCK_EURI;
    }
  }
  *db = (int)value;
  return 0;
}

/* Parses "[user]:password" (without the '@'). Both parts may be
 * percent-encoded. An empty user means "no user" (the default user), as
 * in redis://:secret@host. */
static int rlock__parse_userinfo(const char *s, size_t len, rlock__uri *out) {
  const char *colon = memchr(s, ':', len);
  size_t user_len, pass_len;
  int rc;

  if (colon == NULL) {
    /* AUTH always needs a password; a lone user name cannot be used, and
     * guessing whether it was meant as the password would be worse. */
    rlock__set_last_error("the URI has a user name but no password (use "
                          "user:password@ or :password@)");
    return RLOCK_EURI;
  }
  user_len = (size_t)(colon - s);
  pass_len = len - user_len - 1;
  if (pass_len == 0) {
    rlock__set_last_error("the password in the URI is empty (omit the "
                          "'user:password@' part to connect without AUTH)");
    return RLOCK_EURI;
  }
  if (user_len > 0) {
    rc = rlock__decode(s, user_len, "user name", &out->user);
    if (rc != 0)
      return rc;
  }
  return rlock__decode(colon + 1, pass_len, "password", &out->password);
}

/* Parses "host[:port]" or "[ipv6][:port]" into *host_out (malloc'd) and
 * *port_out (default_port when absent). `form` is the URI form quoted when
 * the host is missing, so the sentence shows the syntax the caller used. */
static int rlock__parse_hostport(const char *s, size_t len, int default_port,
                                 const char *form, char **host_out,
                                 int *port_out) {
  const char *host;
  const char *port_str = NULL;
  size_t host_len, port_len = 0, i;
  long port;

  if (len > 0 && s[0] == '[') {
    const char *close = memchr(s, ']', len);
    int colons = 0;

    if (close == NULL) {
      rlock__set_last_error("the IPv6 address in the URI has no closing ']'");
      return RLOCK_EURI;
    }
    host = s + 1;
    host_len = (size_t)(close - host);
    for (i = 0; i < host_len; i++) {
      if (host[i] == ':')
        colons++;
      else if (host[i] != '.' && rlock__hex_value(host[i]) < 0) {
        rlock__set_last_error("the IPv6 address in the URI ('%.*s') contains "
                              "'%c', which is not a hex digit, ':' or '.'",
                              (int)(host_len > 64 ? 64 : host_len), host,
                              host[i]);
        return RLOCK_EURI;
      }
    }
    if (host_len == 0 || colons < 2) {
      rlock__set_last_error("the bracketed host in the URI ('%.*s') is not an "
                            "IPv6 address",
                            (int)(host_len > 64 ? 64 : host_len), host);
      return RLOCK_EURI;
    }
    i = (size_t)(close - s) + 1;
    if (i < len) {
      if (s[i] != ':') {
        rlock__set_last_error("unexpected '%c' after the IPv6 address in the "
                              "URI (expected ':port' or '/db')",
                              s[i]);
        return RLOCK_EURI;
      }
      port_str = s + i + 1;
      port_len = len - i - 1;
    }
  } else {
    const char *colon = memchr(s, ':', len);

    host = s;
    host_len = colon != NULL ? (size_t)(colon - s) : len;
    if (colon != NULL) {
      port_str = colon + 1;
      port_len = len - host_len - 1;
      if (memchr(port_str, ':', port_len) != NULL) {
        rlock__set_last_error("the URI host has more than one ':' (write an "
                              "IPv6 address in brackets: redis://[::1]:6379)");
        return RLOCK_EURI;
      }
    }
    if (host_len == 0) {
      rlock__set_last_error("the URI has no host (expected %s)", form);
      return RLOCK_EURI;
    }
    for (i = 0; i < host_len; i++) {
      char c = host[i];
      if (!(rlock__is_digit(c) || (c >= 'a' && c <= 'z') ||
            (c >= 'A' && c <= 'Z') || c == '-' || c == '.' || c == '_')) {
        rlock__set_last_error("the URI host ('%.*s') contains '%c', which is "
                              "not allowed in a host name",
                              (int)(host_len > 64 ? 64 : host_len), host, c);
        return RLOCK_EURI;
      }
    }
  }

  *port_out = default_port;
  if (port_str != NULL) {
    if (port_len == 0) {
      rlock__set_last_error("the URI has ':' after the host but no port");
      return RLOCK_EURI;
    }
    port = 0;
    for (i = 0; i < port_len; i++) {
      if (!rlock__is_digit(port_str[i])) {
        rlock__set_last_error("the URI port ('%.*s') is not a decimal number",
                              (int)(port_len > 64 ? 64 : port_len), port_str);
        return RLOCK_EURI;
      }
      /* Stop accumulating once out of range so long digit strings cannot
       * overflow; the range check below still rejects them. */
      if (port <= 65535)
        port = port * 10 + (port_str[i] - '0');
    }
    if (port == 0 || port > 65535) {
      rlock__set_last_error("the URI port (%.*s) is out of range (1..65535)",
                            (int)(port_len > 64 ? 64 : port_len), port_str);
      return RLOCK_EURI;
    }
    *port_out = (int)port;
  }

  *host_out = rlock__strndup(host, host_len);
  if (*host_out == NULL)
    return rlock__nomem();
  return 0;
}

/* Splits the authority "[userinfo@]rest" at its last '@': a raw '@' in a
 * password is a common mistake, and the host can never contain one, so
 * the last '@' is the only unambiguous separator. */
static const char *rlock__split_userinfo(const char *s, size_t len) {
  const char *at = NULL;
  size_t i;

  for (i = 0; i < len; i++) {
    if (s[i] == '@')
      at = s + i;
  }
  return at;
}

static int rlock__parse_redis(const char *rest, rlock__uri *out) {
  size_t auth_len = strcspn(rest, "/?#");
  const char *at = rlock__split_userinfo(rest, auth_len);
  const char *hostport = rest;
  const char *tail = rest + auth_len;
  int rc;

  if (at == NULL && strchr(tail, '@') != NULL) {
    /* "redis://user:pa/ss@host": the '/' ended the authority early. Say
     * so rather than report (and quote) part of the password as a bad
     * port or database. */
    rlock__set_last_error("the URI has an '@' after the host; percent-encode "
                          "'/', '?' and '#' in the user name or password "
                          "(%%2F, %%3F, %%23)");
    return RLOCK_EURI;
  }
  if (at != NULL) {
    rc = rlock__parse_userinfo(rest, (size_t)(at - rest), out);
    if (rc != 0)
      return rc;
    hostport = at + 1;
  }
  rc = rlock__parse_hostport(hostport, (size_t)(tail - hostport),
                             RLOCK__DEFAULT_PORT, "redis://host[:port][/db]",
                             &out->host, &out->port);
  if (rc != 0)
    return rc;

  if (*tail == '/') {
    size_t db_len = strcspn(tail + 1, "?#");
    /* "redis://host/" is the same as "redis://host": database 0. */
    if (db_len > 0) {
      rc = rlock__parse_db(tail + 1, db_len, &out->db);
      if (rc != 0)
        return rc;
    }
    tail += 1 + db_len;
  }
  if (*tail == '?') {
    rlock__set_last_error("query parameters are not supported in redis:// "
                          "URIs (put the database in the path: /db)");
    return RLOCK_EURI;
  }
  if (*tail == '#') {
    rlock__set_last_error("fragments ('#') are not supported in Redis URIs");
    return RLOCK_EURI;
  }
  return 0;
}

/* The syntax a multi-host URI of `mode` should have, for error sentences. */
static const char *rlock__multi_form(int mode) {
  return mode == RLOCK__URI_SENTINEL
             ? "redis+sentinel://host[:port][,host[:port]...]/master[/db]"
             : "redis+cluster://host[:port][,host[:port]...][/0]";
}

/* Parses the comma-separated host list s[0..len) of a sentinel or cluster
 * URI into out->addrs, in the order written (the order the sentinels or
 * seeds are tried in), and copies the first into out->host / out->port. */
static int rlock__parse_hostlist(const char *s, size_t len, int mode,
                                 rlock__uri *out) {
  const int default_port =
      mode == RLOCK__URI_SENTINEL ? RLOCK__SENTINEL_PORT : RLOCK__DEFAULT_PORT;
  size_t count = 1, i;
  int rc;

  if (len == 0) {
    rlock__set_last_error("the URI has no host (expected %s)",
                          rlock__multi_form(mode));
    return RLOCK_EURI;
  }
  for (i = 0; i < len; i++) {
    if (s[i] == ',')
      count++;
  }
  out->addrs = calloc(count, sizeof(*out->addrs));
  if (out->addrs == NULL)
    return rlock__nomem();
  /* Counted as filled from the start: the entries are zeroed, so freeing
   * a list that failed half-way is safe. */
  out->naddrs = count;

  for (i = 0; i < count; i++) {
    const char *comma = memchr(s, ',', len);
    size_t item_len = comma != NULL ? (size_t)(comma - s) : len;

    if (item_len == 0) {
      /* "a,,b", ",a" or "a,": most likely a typo or an empty variable in
       * a generated list; skipping it would hide that. */
      rlock__set_last_error("host %zu of the %zu in the URI's host list is "
                            "empty (hosts are separated by single commas, "
                            "with nothing before the first or after the "
                            "last)",
                            i + 1, count);
      return RLOCK_EURI;
    }
    rc = rlock__parse_hostport(s, item_len, default_port,
                               rlock__multi_form(mode), &out->addrs[i].host,
                               &out->addrs[i].port);
    if (rc != 0)
      return rc;
    if (comma != NULL) {
      s = comma + 1;
      len -= item_len + 1;
    }
  }

  out->host = rlock__strndup(out->addrs[0].host, strlen(out->addrs[0].host));
  if (out->host == NULL)
    return rlock__nomem();
  out->port = out->addrs[0].port;
  return 0;
}

/* Parses the path of a sentinel URI: "/master[/db]", the master name
 * percent-decoded. Returns with *tail past what was taken. */
static int rlock__parse_sentinel_path(const char **tail, rlock__uri *out) {
  const char *p = *tail;
  size_t name_len, i;
  int rc;

  name_len = *p == '/' ? strcspn(p + 1, "/?#") : 0;
  if (name_len == 0) {
    rlock__set_last_error("the redis+sentinel:// URI has no master name "
                          "(expected %s)",
                          rlock__multi_form(RLOCK__URI_SENTINEL));
    return RLOCK_EURI;
  }
  p++;
  for (i = 0; i < name_len; i++) {
    unsigned char c = (unsigned char)p[i];
    /* A raw space or control byte is not part of a URI; percent-encoded
     * it is taken as written (the sentinels compare the name byte for
     * byte). */
    if (c <= ' ' || c == 0x7f) {
      rlock__set_last_error("the master name in the URI contains byte 0x%02x "
                            "at offset %zu; percent-encode it",
                            c, i);
      return RLOCK_EURI;
    }
  }
  rc = rlock__decode(p, name_len, "master name", &out->master);
  if (rc != 0)
    return rc;
  p += name_len;

  if (*p == '/') {
    size_t db_len = strcspn(p + 1, "?#");
    /* ".../master/" is database 0, as "redis://host/" is. */
    if (db_len > 0) {
      rc = rlock__parse_db(p + 1, db_len, &out->db);
      if (rc != 0)
        return rc;
    }
    p += 1 + db_len;
  }
  *tail = p;
  return 0;
}

/* Parses the part after "redis+sentinel://" or "redis+cluster://". The
 * user name and password are those of the data nodes (the master and its
 * replicas, or the cluster's nodes); the sentinels' own come from
 * rlock_options, since Redis does not share ACLs between the two. */
static int rlock__parse_multi(const char *rest, int mode, rlock__uri *out) {
  size_t auth_len = strcspn(rest, "/?#");
  const char *at = rlock__split_userinfo(rest, auth_len);
  const char *hosts = rest;
  const char *tail = rest + auth_len;
  int rc;

  out->mode = mode;
  if (at == NULL && strchr(tail, '@') != NULL) {
    /* As in rlock__parse_redis: a '/' ended the authority early, or (here)
     * the master name has a raw '@'. Neither part is quoted back. */
    rlock__set_last_error(
        "the URI has an '@' after the host; percent-encode "
        "'/', '?' and '#' in the user name or password "
        "(%%2F, %%3F, %%23)%s",
        mode == RLOCK__URI_SENTINEL ? " and '@' in the master name (%40)" : "");
    return RLOCK_EURI;
  }
  if (at != NULL) {
    rc = rlock__parse_userinfo(rest, (size_t)(at - rest), out);
    if (rc != 0)
      return rc;
    hosts = at + 1;
  }
  rc = rlock__parse_hostlist(hosts, (size_t)(tail - hosts), mode, out);
  if (rc != 0)
    return rc;

  if (mode == RLOCK__URI_SENTINEL) {
    if (strchr(tail, '@') != NULL) {
      rlock__set_last_error("the master name or database in the URI contains "
                            "'@'; percent-encode it in the master name (%%40)");
      return RLOCK_EURI;
    }
    rc = rlock__parse_sentinel_path(&tail, out);
    if (rc != 0)
      return rc;
  } else if (*tail == '/') {
    size_t db_len = strcspn(tail + 1, "?#");
    if (db_len > 0) {
      rc = rlock__parse_db(tail + 1, db_len, &out->db);
      if (rc != 0)
        return rc;
      if (out->db != 0) {
        /* SELECT is refused by cluster nodes: a db here could only be a
         * mistake, and dropping it silently would put the locks in a
         * database the program did not ask for. */
        rlock__set_last_error("the URI selects database %d, but Redis "
                              "Cluster has only database 0",
                              out->db);
        out->db = 0;
        return RLOCK_EURI;
      }
    }
    tail += 1 + db_len;
  }
  if (*tail == '?') {
    rlock__set_last_error("query parameters are not supported in %s URIs",
                          mode == RLOCK__URI_SENTINEL ? "redis+sentinel://"
                                                      : "redis+cluster://");
    return RLOCK_EURI;
  }
  if (*tail == '#') {
    rlock__set_last_error("fragments ('#') are not supported in Redis URIs");
    return RLOCK_EURI;
  }
  return 0;
}

/* Parses the query of a unix:// URI: "db=N", nothing else. */
static int rlock__parse_unix_query(const char *query, rlock__uri *out) {
  int seen_db = 0;
  int rc;

  for (;;) {
    size_t param_len = strcspn(query, "&");

    if (param_len == 0) {
      rlock__set_last_error("the URI query has an empty parameter (expected "
                            "?db=N)");
      return RLOCK_EURI;
    }

    if (param_len >= 3 && memcmp(query, "db=", 3) == 0) {
      if (seen_db) {
        rlock__set_last_error("the URI query sets db more than once");
        return RLOCK_EURI;
      }
      seen_db = 1;
      rc = rlock__parse_db(query + 3, param_len - 3, &out->db);
      if (rc != 0)
        return rc;
    } else {
      /* Only the name is quoted: the value could be a secret (redis-py
       * accepts ?password=). */
      size_t name_len = strcspn(query, "=&");
      rlock__set_last_error("unknown URI query parameter '%.*s' (only db=N "
                            "is supported)",
                            (int)(name_len > 64 ? 64 : name_len), query);
      return RLOCK_EURI;
    }
    if (query[param_len] == '\0')
      return 0;
    query += param_len + 1;
  }
}

static int rlock__parse_unix(const char *rest, rlock__uri *out) {
  /* The authority is everything before the path's leading '/': empty, or
   * "[user]:password@" so that a password-protected server can be reached
   * over its socket too. */
  size_t auth_len = strcspn(rest, "/?#");
  const char *path = rest + auth_len;
  size_t path_len;
  int rc;

  if (auth_len > 0) {
    if (rest[auth_len - 1] != '@') {
      /* Not quoted back: it may be a password with a raw '/' in it. */
      rlock__set_last_error("the unix socket path in the URI must be "
                            "absolute: write unix:///path/to/socket (three "
                            "slashes), or [user]:password@ before the path");
      return RLOCK_EURI;
    }
    rc = rlock__parse_userinfo(rest, auth_len - 1, out);
    if (rc != 0)
      return rc;
  }
  if (*path != '/') {
    rlock__set_last_error(
        "the unix socket path in the URI is %s; it must be "
        "absolute (unix:///path/to/socket)",
        (*path == '\0' || *path == '?' || *path == '#') ? "empty" : "relative");
    return RLOCK_EURI;
  }
  path_len = strcspn(path, "?#");
  if (path[path_len - 1] == '/') {
    rlock__set_last_error("the unix socket path in the URI ('%.*s') ends "
                          "with '/'; it must name the socket file",
                          (int)(path_len > 128 ? 128 : path_len), path);
    return RLOCK_EURI;
  }
  if (path[path_len] == '#') {
    rlock__set_last_error("fragments ('#') are not supported in Redis URIs");
    return RLOCK_EURI;
  }
  if (path[path_len] == '?') {
    rc = rlock__parse_unix_query(path + path_len + 1, out);
    if (rc != 0)
      return rc;
  }
  out->path = rlock__strndup(path, path_len);
  if (out->path == NULL)
    return rlock__nomem();
  out->is_unix = 1;
  return 0;
}

int rlock__uri_parse(const char *uri, rlock__uri *out) {
  const char *sep;
  size_t scheme_len;
  int rc;

  if (out == NULL) {
    rlock__set_last_error("rlock__uri_parse: out is NULL");
    return RLOCK_EINVAL;
  }
  memset(out, 0, sizeof(*out));
  if (uri == NULL || uri[0] == '\0') {
    rlock__set_last_error("the Redis URI is %s",
                          uri == NULL ? "NULL" : "empty");
    return RLOCK_EURI;
  }

  sep = strstr(uri, "://");
  scheme_len = sep != NULL ? (size_t)(sep - uri) : 0;
  if (sep == NULL || !rlock__is_scheme(uri, scheme_len)) {
    /* The URI is not quoted back here or below: it may hold a password,
     * and last-error text ends up in logs. */
    rlock__set_last_error("the Redis URI has no scheme (expected "
                          "redis://host[:port][/db] or unix:///path)");
    return RLOCK_EURI;
  }
  if (rlock__prefix_nocase(uri, scheme_len, "redis")) {
    rc = rlock__parse_redis(sep + 3, out);
  } else if (rlock__prefix_nocase(uri, scheme_len, "unix")) {
    rc = rlock__parse_unix(sep + 3, out);
  } else if (rlock__prefix_nocase(uri, scheme_len, "rediss")) {
    /* TLS: the same syntax as redis:// (whether this build has TLS is the
     * client's question, not the syntax's). */
    rc = rlock__parse_redis(sep + 3, out);
    out->tls = 1;
  } else if (rlock__prefix_nocase(uri, scheme_len, "redis+sentinel") ||
             rlock__prefix_nocase(uri, scheme_len, "rediss+sentinel")) {
    rc = rlock__parse_multi(sep + 3, RLOCK__URI_SENTINEL, out);
    /* With TLS, to the sentinels and to the master and replicas alike. */
    out->tls = uri[5] == 's' || uri[5] == 'S';
  } else if (rlock__prefix_nocase(uri, scheme_len, "redis+cluster") ||
             rlock__prefix_nocase(uri, scheme_len, "rediss+cluster")) {
    rc = rlock__parse_multi(sep + 3, RLOCK__URI_CLUSTER, out);
    out->tls = uri[5] == 's' || uri[5] == 'S';
  } else if (rlock__prefix_nocase(uri, scheme_len, "unix+sentinel") ||
             rlock__prefix_nocase(uri, scheme_len, "unix+cluster")) {
    /* Sentinels hand out the master's host and port, and cluster nodes
     * each other's: neither can name a unix socket. */
    rlock__set_last_error("Sentinel and Cluster cannot be reached over unix "
                          "sockets (use redis+sentinel://host[:port]... or "
                          "redis+cluster://host[:port]...)");
    rc = RLOCK_EURI;
  } else {
    rlock__set_last_error("unsupported URI scheme '%.*s' (expected redis://, "
                          "rediss://, unix://, redis+sentinel://, "
                          "redis+cluster:// or their rediss+ forms)",
                          (int)(scheme_len > 32 ? 32 : scheme_len), uri);
    rc = RLOCK_EURI;
  }

  if (rc != 0)
    rlock__uri_free(out);
  return rc;
}

void rlock__uri_free(rlock__uri *u) {
  if (u == NULL)
    return;
  if (u->addrs != NULL) {
    for (size_t i = 0; i < u->naddrs; i++)
      free(u->addrs[i].host);
    free(u->addrs);
  }
  free(u->master);
  free(u->host);
  free(u->path);
  free(u->user);
  if (u->password != NULL)
    rlock__wipe_free(u->password, strlen(u->password));
  memset(u, 0, sizeof(*u));
}
