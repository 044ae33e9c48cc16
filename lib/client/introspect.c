/* Introspection and the kind-aware force unlock: the public facades over
 * prim/info.c. They sit beside client.c at the top and reach the client
 * only through the public API (a handle on the name), so the client's
 * own code knows nothing of them. */
#include <stdlib.h>
#include <string.h>

#include "prim.h"

/* The smallest struct_size accepted: up to and including `kind`. */
#define INFO_MIN_SIZE (offsetof(rlock_info, kind) + sizeof(rlock_info_kind))

void rlock_info_init_size(rlock_info *info, size_t size) {
  if (info == NULL)
    return;
  if (size > sizeof(rlock_info))
    size = sizeof(rlock_info);
  memset(info, 0, size);
  info->struct_size = size;
}

int rlock_client_info(rlock_client *client, const char *name, rlock_info *info) {
  if (info == NULL)
    return rlock__bad_arg("info is NULL");
  size_t size = info->struct_size;
  if (size < INFO_MIN_SIZE || size > sizeof(rlock_info))
    return rlock__bad_arg("info->struct_size is not set (rlock_info_init) "
                          "or larger than this library's rlock_info");
  memset(info, 0, size);
  info->struct_size = size;
  rlock *lock;
  int rc = rlock_new(client, name, &lock); /* checks and the last error */
  if (rc != 0)
    return rc;
  rlock_info full;
  memset(&full, 0, sizeof(full));
  rc = rlock__info_read(lock, &full);
  rlock_free(lock);
  if (rc < 0)
    return rc;
  /* Only as far as the caller's struct reaches; the block is freed
   * through mem_, which every version has. */
  full.struct_size = size;
  memcpy(info, &full, size);
  return 0;
}

void rlock_info_free(rlock_info *info) {
  if (info == NULL || info->struct_size < INFO_MIN_SIZE)
    return;
  free(info->mem_);
  size_t size = info->struct_size > sizeof(rlock_info) ? sizeof(rlock_info)
                                                       : info->struct_size;
  memset(info, 0, size);
  info->struct_size = size;
}

typedef int (*kind_get_fn)(rlock_client *, const char *, rlock **);

/* The handle getter of the kind rlock_kind() calls `kind`; NULL for a
 * name that is no lock kind. */
static kind_get_fn kind_getter(const char *kind) {
  static const struct {
    const char *kind;
    kind_get_fn get;
  } kinds[] = {
  /* the non-reentrant kinds have the same force unlocks as RLock's and the
   * fair lock's */
#define KIND_GETTER(id, name, constructor) {name, constructor},
      RLOCK_KIND_MAP(KIND_GETTER)
#undef KIND_GETTER
  };
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (strcmp(kind, kinds[i].kind) == 0)
      return kinds[i].get;
  return NULL;
}

/* The force unlock the keys call for: a read/write lock's in its mode, a
 * fair lock's (which tells the first waiter), else RLock's. */
static const char *kind_shown(const rlock_info *info) {
  if (info->kind == RLOCK_INFO_RWLOCK)
    return strcmp(info->mode, "read") == 0 ? "read" : "write";
  if (info->kind == RLOCK_INFO_FAIR)
    return "fair";
  return "lock";
}

int rlock_client_force_unlock(rlock_client *client, const char *name,
                              const char *kind, rlock_info *found) {
  bool any = kind == NULL || kind[0] == '\0';
  if (!any && kind_getter(kind) == NULL)
#define KIND_WORD(id, name, constructor) " " name
    return rlock__bad_arg("unknown lock kind (one of:" RLOCK_KIND_MAP(
        KIND_WORD) ")");
#undef KIND_WORD
  if (found != NULL && (found->struct_size < INFO_MIN_SIZE ||
                        found->struct_size > sizeof(rlock_info)))
    return rlock__bad_arg("found->struct_size is not set (rlock_info_init) "
                          "or larger than this library's rlock_info");
  rlock_info info;
  rlock_info_init(&info);
  int rc = rlock_client_info(client, name, &info);
  if (rc < 0)
    return rc;
  rlock *lock = NULL;
  if (strcmp(info.type, "none") == 0) {
    rc = 0;
  } else if (strcmp(info.type, "hash") != 0) {
    rlock__set_last_error("not a lock (Redis type %s)", info.type);
    rc = RLOCK_EWRONGTYPE;
  } else {
    rc = kind_getter(any ? kind_shown(&info) : kind)(client, name, &lock);
    if (rc == 0)
      rc = rlock_force_unlock(lock);
    rlock_free(lock);
  }
  if (found != NULL) { /* the block goes with it */
    size_t size = found->struct_size;
    info.struct_size = size;
    memcpy(found, &info, size);
  } else {
    rlock_info_free(&info);
  }
  if (rc == 0 && lock == NULL)
    rlock__clear_last_error();
  return rc;
}

/* ---- who holds it (rlock_client_holder) ---- */

void rlock_holder_init_size(rlock_holder *h, size_t size) {
  if (h == NULL)
    return;
  if (size > sizeof(rlock_holder))
    size = sizeof(rlock_holder);
  memset(h, 0, size);
  h->struct_size = size;
}

/* The value of field `key` ("age=") in a CLIENT LIST line, up to the next
 * blank, into out; false when absent. */
static bool list_field(const char *line, const char *key, char *out,
                       size_t n) {
  size_t klen = strlen(key);
  for (const char *p = line; (p = strstr(p, key)) != NULL; p += klen) {
    if (p != line && p[-1] != ' ')
      continue;
    p += klen;
    size_t len = strcspn(p, " ");
    if (len >= n)
      len = n - 1;
    memcpy(out, p, len);
    out[len] = '\0';
    return true;
  }
  return false;
}

/* "rlock/<id>/<pid>/<program>/<host>" into h. */
static bool parse_auto_name(const char *name, rlock_holder *h) {
  const char *p = strchr(name, '/');
  p = p != NULL ? strchr(p + 1, '/') : NULL; /* after the id */
  if (p == NULL)
    return false;
  char *end = NULL;
  long long pid = strtoll(p + 1, &end, 10);
  if (end == p + 1 || *end != '/')
    return false;
  const char *prog = end + 1, *slash = strchr(prog, '/');
  if (slash == NULL)
    return false;
  h->pid = pid;
  snprintf(h->program, sizeof(h->program), "%.*s", (int)(slash - prog),
           prog);
  snprintf(h->host, sizeof(h->host), "%s", slash + 1);
  return true;
}

int rlock_client_holder(rlock_client *client, const char *name,
                     const char *owner, rlock_holder *h) {
  if (h == NULL || owner == NULL)
    return rlock__bad_arg("owner and h must be given");
  size_t size = h->struct_size;
  if (size < offsetof(rlock_holder, pid) || size > sizeof(rlock_holder))
    return rlock__bad_arg("h->struct_size is not set (rlock_holder_init) "
                          "or larger than this library's rlock_holder");
  /* the client id: a uuid, before the first ':' */
  size_t id_len = strcspn(owner, ":");
  if (id_len != RLOCK_ID_LEN || owner[id_len] != ':')
    return rlock__bad_arg("owner is not '<client-id>:<thread-id>' with a "
                          "36-character client id");
  char id[RLOCK_ID_LEN + 1];
  memcpy(id, owner, RLOCK_ID_LEN);
  id[RLOCK_ID_LEN] = '\0';
  for (size_t i = 0; i < RLOCK_ID_LEN; i++)
    if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f') ||
          id[i] == '-'))
      return rlock__bad_arg("owner's client id is not a uuid");
  rlock *lock;
  int rc = rlock_new(client, name, &lock); /* checks and the last error */
  if (rc != 0)
    return rc;
  char line[1024];
  rc = rlock__whois(lock, id, line, sizeof(line));
  rlock_free(lock);
  if (rc <= 0) {
    if (rc == 0)
      rlock__set_last_error("no connection named by an rlock client with id "
                            "%s (a Java client, a client with its own "
                            "client_name, a name changed since, or gone)",
                            id);
    return rc;
  }
  rlock_holder full;
  memset(&full, 0, sizeof(full));
  char value[256], age[32];
  if (!list_field(line, "name=", value, sizeof(value)) ||
      !parse_auto_name(value, &full)) {
    rlock__set_last_error("the connection of client %s has a name rlock "
                          "does not read: %.80s", id, value);
    return 0;
  }
  if (list_field(line, "age=", age, sizeof(age)))
    full.connected_ms = strtoll(age, NULL, 10) * 1000;
  list_field(line, "addr=", full.addr, sizeof(full.addr));
  full.struct_size = size;
  memcpy(h, &full, size);
  rlock__clear_last_error();
  return 1;
}
