/* The connection every command opens (tools/cli.h): the URI (-u,
 * --uri-file, $REDIS_URL), the --tls-* and --sentinel-* options, their
 * checks, and the client opened with them (cli_connect); also run.c's
 * release of a lock whose client is already gone, on a client of its own.
 * Calls cli.c and the library. */
#include <errno.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char *g_uri_file; /* --uri-file */

bool cli_uri_file_option(int c, const char *arg) {
  if (c != CLI_OPT_URI_FILE)
    return false;
  g_uri_file = arg;
  return true;
}

const char *cli_take_uri(char *arg) {
  static char *copy; /* the last -u's, reachable until exit */
  free(copy);
  copy = strdup(arg);
  if (copy == NULL) {
    cli_err("out of memory");
    exit(CLI_EX_OSERR);
  }
  /* scheme://[user][:password]@host...: as the library splits it, the
   * authority ends at the first '/', '?' or '#' and the userinfo at its
   * last '@'; with no '@' there but one later (a raw '/' in the password,
   * which the library refuses), at that later '@'. Without a ':' the whole
   * userinfo is hidden: it may be a password. */
  char *start = strstr(arg, "://");
  if (start != NULL) {
    start += 3;
    size_t auth_len = strcspn(start, "/?#");
    char *at = NULL;
    for (char *p = start; *p != '\0'; p++)
      if (*p == '@' && (p < start + auth_len || at == NULL ||
                        at >= start + auth_len))
        at = p;
    if (at != NULL) {
      char *colon = memchr(start, ':', (size_t)(at - start));
      for (char *p = colon != NULL ? colon + 1 : start; p < at; p++)
        *p = '*';
    }
  }
  return copy;
}

/* The longest URI read from --uri-file. */
#define URI_FILE_MAX 4096

/* The first line of --uri-file's file, malloc'd; NULL with the reason
 * printed. */
static char *read_uri_file(const char *path) {
  if (path[0] == '\0') {
    cli_err("--uri-file: the path must not be empty");
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_err("cannot read --uri-file '%s': %s", path, strerror(errno));
    return NULL;
  }
  char *buf = calloc(1, URI_FILE_MAX + 2);
  size_t n = buf != NULL ? fread(buf, 1, URI_FILE_MAX + 1, f) : 0;
  int err = errno;
  bool failed = buf == NULL || ferror(f) != 0;
  fclose(f);
  const char *why = NULL;
  if (buf == NULL)
    why = "out of memory";
  else if (failed)
    why = strerror(err); /* a directory: EISDIR */
  else if (n > URI_FILE_MAX)
    why = "longer than 4096 bytes";
  else {
    size_t len = strcspn(buf, "\r\n");
    if (memchr(buf, '\0', n) != NULL)
      why = "it holds a NUL byte";
    else if (len == 0)
      why = "the file is empty (the URI is its first line)";
    buf[len] = '\0';
  }
  if (why != NULL) {
    cli_err("cannot use --uri-file '%s': %s", path, why);
    if (buf != NULL)
      explicit_bzero(buf, URI_FILE_MAX + 2);
    free(buf);
    return NULL;
  }
  return buf;
}

const char *cli_resolve_uri(const char *flag) {
  if (flag != NULL && g_uri_file != NULL) {
    cli_err("-u and --uri-file exclude each other (one URI)");
    return NULL;
  }
  if (flag != NULL)
    return flag;
  if (g_uri_file != NULL) {
    static char *from_file; /* reachable until exit */
    if (from_file == NULL)
      from_file = read_uri_file(g_uri_file);
    return from_file;
  }
  const char *env = getenv("REDIS_URL");
  if (env != NULL && env[0] == '\0') {
    cli_err("REDIS_URL is set but empty: set it to a URI, unset it (for "
            "redis://127.0.0.1:6379), or give -u or --uri-file");
    return NULL;
  }
  if (env != NULL)
    return env;
  return "redis://127.0.0.1:6379";
}

bool cli_tls_option(cli_tls_opts *t, int c, const char *arg) {
  const char *name;
  switch (c) {
  case CLI_OPT_TLS_CA_FILE:
    t->ca_file = arg;
    name = "--tls-ca-file";
    break;
  case CLI_OPT_TLS_CA_DIR:
    t->ca_dir = arg;
    name = "--tls-ca-dir";
    break;
  case CLI_OPT_TLS_CERT:
    t->cert_file = arg;
    name = "--tls-cert";
    break;
  case CLI_OPT_TLS_KEY:
    t->key_file = arg;
    name = "--tls-key";
    break;
  case CLI_OPT_TLS_SERVER_NAME:
    t->server_name = arg;
    name = "--tls-server-name";
    break;
  case CLI_OPT_TLS_INSECURE:
    t->insecure = true;
    name = "--tls-insecure";
    break;
  default:
    return false;
  }
  if (t->first == NULL)
    t->first = name;
  return true;
}

/* A --tls-* file must be a readable file (or, for --tls-ca-dir, a
 * directory we may list): said here, naming the option, rather than later
 * as a TLS failure. */
static bool tls_file_ok(const char *opt, const char *path, bool dir) {
  if (path[0] == '\0') {
    cli_err("%s: the path must not be empty", opt);
    return false;
  }
  if (dir) {
    DIR *d = opendir(path);
    if (d == NULL) {
      cli_err("cannot open %s '%s': %s", opt, path, strerror(errno));
      return false;
    }
    closedir(d);
    return true;
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_err("cannot read %s '%s': %s", opt, path, strerror(errno));
    return false;
  }
  /* fopen succeeds on a directory; reading it fails with EISDIR. */
  char byte;
  bool ok = fread(&byte, 1, 1, f) == 1;
  int err = errno;
  if (!ok && ferror(f))
    cli_err("cannot read %s '%s': %s", opt, path, strerror(err));
  else if (!ok)
    cli_err("cannot read %s '%s': the file is empty", opt, path);
  fclose(f);
  return ok;
}

int cli_tls_check(const cli_tls_opts *t, const char *uri) {
  if (t->first == NULL)
    return 0;
  if (strncasecmp(uri, "rediss://", 9) != 0 &&
      strncasecmp(uri, "rediss+sentinel://", 18) != 0 &&
      strncasecmp(uri, "rediss+cluster://", 17) != 0) {
    cli_err("%s needs a rediss:// URI (TLS options apply to rediss://, "
            "rediss+sentinel:// and rediss+cluster:// only; -u or "
            "$REDIS_URL)",
            t->first);
    return CLI_EX_USAGE;
  }
  if ((t->cert_file == NULL) != (t->key_file == NULL)) {
    cli_err("%s needs %s: a client certificate goes with its key",
            t->cert_file != NULL ? "--tls-cert" : "--tls-key",
            t->cert_file != NULL ? "--tls-key" : "--tls-cert");
    return CLI_EX_USAGE;
  }
  if (t->server_name != NULL &&
      (t->server_name[0] == '\0' || strlen(t->server_name) > 253)) {
    cli_err("invalid --tls-server-name '%s' (1..253 characters)",
            t->server_name);
    return CLI_EX_USAGE;
  }
  if ((t->ca_file != NULL && !tls_file_ok("--tls-ca-file", t->ca_file, false)) ||
      (t->ca_dir != NULL && !tls_file_ok("--tls-ca-dir", t->ca_dir, true)) ||
      (t->cert_file != NULL && !tls_file_ok("--tls-cert", t->cert_file, false)) ||
      (t->key_file != NULL && !tls_file_ok("--tls-key", t->key_file, false)))
    return CLI_EX_USAGE;
  return 0;
}

void cli_tls_apply(const cli_tls_opts *t, rlock_options *o) {
  o->tls_ca_file = t->ca_file;
  o->tls_ca_dir = t->ca_dir;
  o->tls_cert_file = t->cert_file;
  o->tls_key_file = t->key_file;
  o->tls_server_name = t->server_name;
  o->tls_insecure = t->insecure ? 1 : 0;
}

bool cli_sentinel_option(cli_sentinel_opts *s, int c, const char *arg) {
  const char *name;
  switch (c) {
  case CLI_OPT_SENTINEL_USER:
    s->user = arg;
    name = "--sentinel-user";
    break;
  case CLI_OPT_SENTINEL_PASSWORD_FILE:
    s->password_file = arg;
    name = "--sentinel-password-file";
    break;
  default:
    return false;
  }
  if (s->first == NULL)
    s->first = name;
  return true;
}

/* The longest sentinel password read from a file. */
#define SENTINEL_PASSWORD_MAX 4096

int cli_sentinel_check(cli_sentinel_opts *s, const char *uri) {
  if (s->first == NULL)
    return 0;
  if (strncasecmp(uri, "redis+sentinel://", 17) != 0 &&
      strncasecmp(uri, "rediss+sentinel://", 18) != 0) {
    cli_err("%s needs a redis+sentinel:// or rediss+sentinel:// URI "
            "(sentinel options apply to sentinel URIs only; -u or "
            "$REDIS_URL)",
            s->first);
    return CLI_EX_USAGE;
  }
  if (s->user != NULL && s->user[0] == '\0') {
    cli_err("--sentinel-user: the user must not be empty");
    return CLI_EX_USAGE;
  }
  if (s->user != NULL && s->password_file == NULL) {
    cli_err("--sentinel-user needs --sentinel-password-file: the sentinels "
            "authenticate a user with its password");
    return CLI_EX_USAGE;
  }
  if (s->password_file == NULL)
    return 0;
  const char *path = s->password_file;
  if (path[0] == '\0') {
    cli_err("--sentinel-password-file: the path must not be empty");
    return CLI_EX_USAGE;
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_err("cannot read --sentinel-password-file '%s': %s", path,
            strerror(errno));
    return CLI_EX_USAGE;
  }
  char *buf = calloc(1, SENTINEL_PASSWORD_MAX + 2);
  if (buf == NULL) {
    fclose(f);
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  size_t n = fread(buf, 1, SENTINEL_PASSWORD_MAX + 1, f);
  int err = errno;
  bool failed = ferror(f) != 0;
  fclose(f);
  const char *why = NULL;
  if (failed)
    why = strerror(err); /* a directory: EISDIR */
  else if (n > SENTINEL_PASSWORD_MAX)
    why = "longer than 4096 bytes";
  else {
    buf[n] = '\0';
    size_t len = strcspn(buf, "\r\n");
    /* Only one line, optionally ended by a newline. */
    size_t rest = len;
    if (rest < n && buf[rest] == '\r')
      rest++;
    if (rest < n && buf[rest] == '\n')
      rest++;
    if (rest != n)
      why = "more than one line (the password is the whole first line)";
    else if (len == 0)
      why = "the file is empty";
    else if (memchr(buf, '\0', len) != NULL)
      why = "it holds a NUL byte";
    buf[len] = '\0';
  }
  if (why != NULL) {
    cli_err("cannot use --sentinel-password-file '%s': %s", path, why);
    memset(buf, 0, SENTINEL_PASSWORD_MAX + 2);
    free(buf);
    return CLI_EX_USAGE;
  }
  s->password = buf;
  return 0;
}

void cli_sentinel_apply(const cli_sentinel_opts *s, rlock_options *o) {
  o->sentinel_user = s->user;
  o->sentinel_password = s->password;
}

void cli_sentinel_free(cli_sentinel_opts *s) {
  if (s->password != NULL) {
    volatile char *p = s->password;
    while (*p != '\0')
      *p++ = '\0';
    free(s->password);
    s->password = NULL;
  }
}

/* Opens a client on `uri` with the --tls-* and --sentinel-* options, the
 * other options from `base` (NULL: the defaults). 0, or the exit code with
 * the failure printed as the lock command prints it. */
static int open_client(const rlock_options *base, const char *uri,
                       const cli_tls_opts *tls,
                       const cli_sentinel_opts *sentinel,
                       rlock_client **client) {
  rlock_options opts;
  if (base != NULL)
    opts = *base;
  else
    rlock_options_init(&opts);
  opts.uri = uri;
  cli_tls_apply(tls, &opts);
  cli_sentinel_apply(sentinel, &opts);
  int rc = rlock_client_new(client, &opts);
  return rc == 0 ? 0 : cli_open_failed(rc);
}

int cli_connect(const char *uri_flag, const cli_tls_opts *tls,
                cli_sentinel_opts *sentinel, const rlock_options *base,
                rlock_client **client) {
  const char *uri = cli_resolve_uri(uri_flag);
  if (uri == NULL) {
    cli_sentinel_free(sentinel);
    return CLI_EX_USAGE;
  }
  int rc = cli_tls_check(tls, uri);
  if (rc == 0)
    rc = cli_sentinel_check(sentinel, uri);
  if (rc == 0)
    rc = open_client(base, uri, tls, sentinel, client);
  cli_sentinel_free(sentinel);
  return rc;
}

int cli_release_orphan(const char *uri, const cli_tls_opts *tls,
                       const cli_sentinel_opts *sentinel, cli_kind kind,
                       const char *name, const char *owner) {
  rlock_options opts;
  rlock_options_init(&opts);
  opts.uri = uri;
  cli_tls_apply(tls, &opts);
  cli_sentinel_apply(sentinel, &opts);
  rlock_client *client;
  int rc = rlock_client_new(&client, &opts);
  if (rc != 0)
    return rc;
  rlock *lock;
  rc = cli_kind_get(client, kind, name, &lock);
  if (rc == 0) {
    rc = rlock_force_unlock_holder(lock, owner);
    rlock_free(lock);
  }
  rlock_client_free(client);
  return rc;
}
