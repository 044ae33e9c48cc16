#include "map.h"

#include <stdlib.h>
#include <string.h>

#include "rlock.h"

/* Eight bytes at a time (the keys - lock names with owners, channels - are
 * tens of bytes, looked up several times per lock call on the loop
 * thread): each word multiplied in, its high bits folded down, and a final
 * mix so that the bucket index (the low bits) depends on every byte. No
 * adversarial input concerns beyond what the application itself chooses
 * as names. */
static uint64_t hash_bytes(const char *key, size_t len) {
  const uint64_t k = 0x9e3779b97f4a7c15ULL;
  uint64_t h = 1469598103934665603ULL ^ ((uint64_t)len * k);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, key + i, 8);
    h = (h ^ w) * k;
    h ^= h >> 29;
  }
  uint64_t w = 0;
  for (size_t j = 0; i + j < len; j++)
    w |= (uint64_t)(unsigned char)key[i + j] << (8 * j);
  h = (h ^ w) * k;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return h;
}

void rlock__map_init(rlock__map *m) {
  m->buckets = NULL;
  m->nbuckets = 0;
  m->count = 0;
}

void rlock__map_destroy(rlock__map *m) {
  for (size_t i = 0; i < m->nbuckets; i++) {
    rlock__map_node *n = m->buckets[i];
    while (n != NULL) {
      rlock__map_node *next = n->next;
      free(n);
      n = next;
    }
  }
  free(m->buckets);
  rlock__map_init(m);
}

static rlock__map_node **find(const rlock__map *m, const char *key,
                              size_t len, uint64_t h) {
  if (m->nbuckets == 0)
    return NULL;
  rlock__map_node **slot = &m->buckets[h & (m->nbuckets - 1)];
  while (*slot != NULL) {
    rlock__map_node *n = *slot;
    if (n->hash == h && n->key_len == len && memcmp(n->key, key, len) == 0)
      return slot;
    slot = &n->next;
  }
  return slot;
}

void *rlock__map_get(const rlock__map *m, const char *key, size_t len) {
  rlock__map_node **slot = find(m, key, len, hash_bytes(key, len));
  return (slot != NULL && *slot != NULL) ? (*slot)->value : NULL;
}

static int grow(rlock__map *m) {
  size_t n = m->nbuckets ? m->nbuckets * 2 : 16;
  rlock__map_node **b = calloc(n, sizeof(*b));
  if (b == NULL)
    return RLOCK_ENOMEM;
  for (size_t i = 0; i < m->nbuckets; i++) {
    rlock__map_node *node = m->buckets[i];
    while (node != NULL) {
      rlock__map_node *next = node->next;
      size_t j = node->hash & (n - 1);
      node->next = b[j];
      b[j] = node;
      node = next;
    }
  }
  free(m->buckets);
  m->buckets = b;
  m->nbuckets = n;
  return 0;
}

int rlock__map_put(rlock__map *m, const char *key, size_t len, void *value) {
  uint64_t h = hash_bytes(key, len);
  if (m->count + 1 > m->nbuckets * 3 / 4) {
    int err = grow(m);
    if (err)
      return err;
  }
  rlock__map_node **slot = find(m, key, len, h);
  if (*slot != NULL) {
    (*slot)->value = value;
    return 0;
  }
  rlock__map_node *n = malloc(sizeof(*n) + len + 1);
  if (n == NULL)
    return RLOCK_ENOMEM;
  n->next = NULL;
  n->hash = h;
  n->value = value;
  n->key_len = len;
  memcpy(n->key, key, len);
  n->key[len] = '\0';
  *slot = n;
  m->count++;
  return 0;
}

void *rlock__map_remove(rlock__map *m, const char *key, size_t len) {
  rlock__map_node **slot = find(m, key, len, hash_bytes(key, len));
  if (slot == NULL || *slot == NULL)
    return NULL;
  rlock__map_node *n = *slot;
  void *value = n->value;
  *slot = n->next;
  free(n);
  m->count--;
  return value;
}

void rlock__map_iter_init(rlock__map_iter *it, const rlock__map *m) {
  it->m = m;
  it->bucket = 0;
  it->next = NULL;
  while (it->bucket < m->nbuckets && it->next == NULL)
    it->next = m->buckets[it->bucket++];
}

rlock__map_node *rlock__map_next(rlock__map_iter *it) {
  rlock__map_node *cur = it->next;
  if (cur == NULL)
    return NULL;
  it->next = cur->next;
  while (it->next == NULL && it->bucket < it->m->nbuckets)
    it->next = it->m->buckets[it->bucket++];
  return cur;
}
