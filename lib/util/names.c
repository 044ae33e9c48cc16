/* Names derived from a lock name (docs/wire-protocol.md, Names). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

char *rlock__tag(const char *name, size_t len, size_t *tag_len) {
  /* The brace rule: "{name}", or the bare name when it already contains
   * '{', so every derived key and channel shares the lock's cluster slot. */
  bool has_brace = memchr(name, '{', len) != NULL;
  size_t n = has_brace ? len : len + 2;
  char *tag = malloc(n + 1);
  if (tag == NULL)
    return NULL;
  if (has_brace) {
    memcpy(tag, name, len);
  } else {
    tag[0] = '{';
    memcpy(tag + 1, name, len);
    tag[len + 1] = '}';
  }
  tag[n] = '\0';
  *tag_len = n;
  return tag;
}

char *rlock__prefixed(const char *prefix, const char *tag, size_t tag_len,
                      size_t *len) {
  size_t pl = strlen(prefix);
  char *out = malloc(pl + tag_len + 1);
  if (out == NULL)
    return NULL;
  memcpy(out, prefix, pl);
  memcpy(out + pl, tag, tag_len);
  out[pl + tag_len] = '\0';
  *len = pl + tag_len;
  return out;
}
