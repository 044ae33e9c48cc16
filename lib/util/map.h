/* A small chained hash map from byte strings to pointers. Not thread-safe:
 * every map in rlock is owned by the client's loop thread. */
#ifndef RLOCK_MAP_H
#define RLOCK_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct rlock__map_node {
  struct rlock__map_node *next;
  uint64_t hash;
  void *value;
  size_t key_len;
  char key[]; /* NUL-terminated copy */
} rlock__map_node;

typedef struct rlock__map {
  rlock__map_node **buckets;
  size_t nbuckets; /* power of two, or 0 before the first insert */
  size_t count;
} rlock__map;

void rlock__map_init(rlock__map *m);
/* Frees the nodes (not the values). */
void rlock__map_destroy(rlock__map *m);
void *rlock__map_get(const rlock__map *m, const char *key, size_t len);
/* Inserts or replaces. Returns 0 or RLOCK_ENOMEM. */
int rlock__map_put(rlock__map *m, const char *key, size_t len, void *value);
/* Removes and returns the value, or NULL when absent. */
void *rlock__map_remove(rlock__map *m, const char *key, size_t len);

/* Iteration that tolerates removal of the current node:
 *   rlock__map_iter it; rlock__map_iter_init(&it, m);
 *   while ((n = rlock__map_next(&it)) != NULL) ... */
typedef struct rlock__map_iter {
  const rlock__map *m;
  size_t bucket;
  rlock__map_node *next;
} rlock__map_iter;
void rlock__map_iter_init(rlock__map_iter *it, const rlock__map *m);
rlock__map_node *rlock__map_next(rlock__map_iter *it);

#endif
