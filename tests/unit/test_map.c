/* lib/map.c: the byte-string -> pointer hash map behind the client's
 * subscriptions, holds and suspects. Keys there are "name\0owner", so binary
 * keys with NUL bytes are the normal case, not an edge case. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "map.h"

/* Values are the addresses of slots in this array, so a wrong value is
 * recognisable and never NULL. */
#define N_KEYS 1000
static int slots[N_KEYS];

static size_t key_of(char *buf, size_t cap, int i) {
  int n = snprintf(buf, cap, "lock:%d", i);
  cr_assert(n > 0 && (size_t)n < cap);
  return (size_t)n;
}

Test(map, empty_map_answers_absent) {
  rlock__map m;
  rlock__map_init(&m);
  cr_assert_null(rlock__map_get(&m, "x", 1));
  cr_assert_null(rlock__map_remove(&m, "x", 1));
  rlock__map_iter it;
  rlock__map_iter_init(&it, &m);
  cr_assert_null(rlock__map_next(&it));
  cr_assert_eq(m.count, 0);
  rlock__map_destroy(&m);
  rlock__map_destroy(&m); /* destroy leaves an empty, reusable map */
}

Test(map, put_get_replace_remove) {
  rlock__map m;
  rlock__map_init(&m);
  cr_assert_eq(rlock__map_put(&m, "a", 1, &slots[0]), 0);
  cr_assert_eq(rlock__map_put(&m, "b", 1, &slots[1]), 0);
  cr_assert_eq(m.count, 2);
  cr_assert_eq(rlock__map_get(&m, "a", 1), &slots[0]);
  cr_assert_eq(rlock__map_get(&m, "b", 1), &slots[1]);
  cr_assert_null(rlock__map_get(&m, "c", 1));
  /* A prefix or an extension of a key is another key. */
  cr_assert_null(rlock__map_get(&m, "ab", 2));
  cr_assert_null(rlock__map_get(&m, "", 0));

  /* Replace keeps one entry. */
  cr_assert_eq(rlock__map_put(&m, "a", 1, &slots[2]), 0);
  cr_assert_eq(m.count, 2);
  cr_assert_eq(rlock__map_get(&m, "a", 1), &slots[2]);

  cr_assert_eq(rlock__map_remove(&m, "a", 1), &slots[2]);
  cr_assert_eq(m.count, 1);
  cr_assert_null(rlock__map_get(&m, "a", 1));
  cr_assert_null(rlock__map_remove(&m, "a", 1), "removed twice");
  cr_assert_eq(rlock__map_get(&m, "b", 1), &slots[1]);
  /* The empty key is a key like any other. */
  cr_assert_eq(rlock__map_put(&m, "", 0, &slots[3]), 0);
  cr_assert_eq(rlock__map_get(&m, "", 0), &slots[3]);
  cr_assert_eq(m.count, 2);
  rlock__map_destroy(&m);
  cr_assert_eq(m.count, 0);
}

Test(map, grows_far_past_initial_capacity) {
  rlock__map m;
  rlock__map_init(&m);
  char key[32];
  for (int i = 0; i < N_KEYS; i++) {
    size_t len = key_of(key, sizeof key, i);
    cr_assert_eq(rlock__map_put(&m, key, len, &slots[i]), 0);
    cr_assert_eq(m.count, (size_t)i + 1);
  }
  /* Initial capacity is 16 buckets; 1000 entries need several doublings. */
  cr_assert_gt(m.nbuckets, 16);
  cr_assert_geq(m.nbuckets * 3 / 4, m.count, "load factor above 3/4");
  for (int i = 0; i < N_KEYS; i++) {
    size_t len = key_of(key, sizeof key, i);
    cr_assert_eq(rlock__map_get(&m, key, len), &slots[i], "key %s", key);
  }
  /* Remove the even keys; the odd ones stay reachable after the rehashes. */
  for (int i = 0; i < N_KEYS; i += 2) {
    size_t len = key_of(key, sizeof key, i);
    cr_assert_eq(rlock__map_remove(&m, key, len), &slots[i]);
  }
  cr_assert_eq(m.count, N_KEYS / 2);
  for (int i = 0; i < N_KEYS; i++) {
    size_t len = key_of(key, sizeof key, i);
    if (i % 2 == 0)
      cr_assert_null(rlock__map_get(&m, key, len), "key %s", key);
    else
      cr_assert_eq(rlock__map_get(&m, key, len), &slots[i], "key %s", key);
  }
  rlock__map_destroy(&m);
}

/* Index of a value in slots[], checked. */
static int slot_index(const void *value) {
  const int *p = value;
  cr_assert(p >= slots && p < slots + N_KEYS, "value not from slots[]");
  return (int)(p - slots);
}

Test(map, iteration_visits_every_entry_once) {
  rlock__map m;
  rlock__map_init(&m);
  char key[32];
  for (int i = 0; i < N_KEYS; i++) {
    size_t len = key_of(key, sizeof key, i);
    cr_assert_eq(rlock__map_put(&m, key, len, &slots[i]), 0);
  }
  static int seen[N_KEYS];
  memset(seen, 0, sizeof seen);
  rlock__map_iter it;
  rlock__map_node *n;
  size_t visits = 0;
  rlock__map_iter_init(&it, &m);
  while ((n = rlock__map_next(&it)) != NULL) {
    int i = slot_index(n->value);
    seen[i]++;
    visits++;
    /* The node's key is the one stored for that value, NUL-terminated. */
    size_t len = key_of(key, sizeof key, i);
    cr_assert_eq(n->key_len, len);
    cr_assert_str_eq(n->key, key);
  }
  cr_assert_eq(visits, N_KEYS);
  for (int i = 0; i < N_KEYS; i++)
    cr_assert_eq(seen[i], 1, "entry %d visited %d times", i, seen[i]);
  rlock__map_destroy(&m);
}

/* map.h: iteration tolerates removal of the current node (the client drops
 * holds and subscriptions while walking its maps). */
Test(map, removing_the_current_node_during_iteration) {
  rlock__map m;
  rlock__map_init(&m);
  char key[32];
  for (int i = 0; i < N_KEYS; i++) {
    size_t len = key_of(key, sizeof key, i);
    cr_assert_eq(rlock__map_put(&m, key, len, &slots[i]), 0);
  }
  static int seen[N_KEYS];
  memset(seen, 0, sizeof seen);
  rlock__map_iter it;
  rlock__map_node *n;
  rlock__map_iter_init(&it, &m);
  while ((n = rlock__map_next(&it)) != NULL) {
    int i = slot_index(n->value);
    seen[i]++;
    if (i % 3 != 0) /* n is freed here: copy nothing out of it after */
      cr_assert_eq(rlock__map_remove(&m, n->key, n->key_len), &slots[i]);
  }
  for (int i = 0; i < N_KEYS; i++)
    cr_assert_eq(seen[i], 1, "entry %d visited %d times", i, seen[i]);
  cr_assert_eq(m.count, (N_KEYS + 2) / 3);
  for (int i = 0; i < N_KEYS; i++) {
    size_t len = key_of(key, sizeof key, i);
    if (i % 3 == 0)
      cr_assert_eq(rlock__map_get(&m, key, len), &slots[i], "key %s", key);
    else
      cr_assert_null(rlock__map_get(&m, key, len), "key %s", key);
  }
  /* Removing every node while iterating empties the map. */
  rlock__map_iter_init(&it, &m);
  while ((n = rlock__map_next(&it)) != NULL)
    cr_assert_not_null(rlock__map_remove(&m, n->key, n->key_len));
  cr_assert_eq(m.count, 0);
  rlock__map_destroy(&m);
}

Test(map, binary_keys_with_nul_bytes) {
  rlock__map m;
  rlock__map_init(&m);
  /* "name\0owner" keys, as the holds map uses: same name, other owner, and
   * keys that are equal up to the first NUL must all be distinct. */
  static const char k1[] = "lock\0uuid:1";
  static const char k2[] = "lock\0uuid:2";
  static const char k3[] = "lock\0uuid:1\0";
  static const char k4[] = "\0\0\0";
  const size_t l1 = sizeof k1 - 1, l2 = sizeof k2 - 1, l3 = sizeof k3 - 1;
  cr_assert_eq(rlock__map_put(&m, k1, l1, &slots[1]), 0);
  cr_assert_eq(rlock__map_put(&m, k2, l2, &slots[2]), 0);
  cr_assert_eq(rlock__map_put(&m, k3, l3, &slots[3]), 0);
  cr_assert_eq(rlock__map_put(&m, "lock", 4, &slots[4]), 0);
  cr_assert_eq(rlock__map_put(&m, k4, 1, &slots[5]), 0);
  cr_assert_eq(rlock__map_put(&m, k4, 3, &slots[6]), 0);
  cr_assert_eq(m.count, 6);
  cr_assert_eq(rlock__map_get(&m, k1, l1), &slots[1]);
  cr_assert_eq(rlock__map_get(&m, k2, l2), &slots[2]);
  cr_assert_eq(rlock__map_get(&m, k3, l3), &slots[3]);
  cr_assert_eq(rlock__map_get(&m, "lock", 4), &slots[4]);
  cr_assert_eq(rlock__map_get(&m, k4, 1), &slots[5]);
  cr_assert_eq(rlock__map_get(&m, k4, 3), &slots[6]);
  cr_assert_null(rlock__map_get(&m, k4, 2));
  cr_assert_null(rlock__map_get(&m, "lock\0", 5));

  /* The stored key is a full copy (bytes after the NUL included). */
  rlock__map_iter it;
  rlock__map_node *n;
  int found = 0;
  rlock__map_iter_init(&it, &m);
  while ((n = rlock__map_next(&it)) != NULL) {
    if (n->value == &slots[2]) {
      cr_assert_eq(n->key_len, l2);
      cr_assert_eq(memcmp(n->key, k2, l2), 0);
      cr_assert_eq(n->key[l2], '\0');
      found++;
    }
  }
  cr_assert_eq(found, 1);

  cr_assert_eq(rlock__map_remove(&m, k1, l1), &slots[1]);
  cr_assert_null(rlock__map_get(&m, k1, l1));
  cr_assert_eq(rlock__map_get(&m, k2, l2), &slots[2], "sibling removed");
  cr_assert_eq(rlock__map_get(&m, k3, l3), &slots[3], "extension removed");
  cr_assert_eq(rlock__map_get(&m, "lock", 4), &slots[4], "prefix removed");
  rlock__map_destroy(&m);
}

/* The hash reads eight bytes at a time: keys that differ in one byte at
 * any position of a word (the high ones included), or only in length,
 * must still spread over the buckets - the index is the hash's low bits. */
Test(map, keys_differing_in_one_byte_spread_over_buckets) {
  for (size_t pos = 0; pos < 24; pos++) {
    rlock__map m;
    rlock__map_init(&m);
    char key[32];
    for (int i = 0; i < 256; i++) {
      memset(key, 'k', sizeof(key));
      key[pos] = (char)i;
      cr_assert_eq(rlock__map_put(&m, key, 24, &slots[i]), 0);
    }
    size_t longest = 0, used = 0;
    for (size_t b = 0; b < m.nbuckets; b++) {
      size_t len = 0;
      for (rlock__map_node *n = m.buckets[b]; n != NULL; n = n->next)
        len++;
      used += len > 0;
      if (len > longest)
        longest = len;
    }
    /* 256 keys in 512 buckets: a fair hash fills about 200 of them, with
     * chains of 4 or 5 at most. */
    cr_assert_geq(used, 150, "byte %zu: only %zu of %zu buckets used", pos,
                  used, m.nbuckets);
    cr_assert_leq(longest, 8, "byte %zu: a chain of %zu", pos, longest);
    rlock__map_destroy(&m);
  }
  rlock__map m;
  rlock__map_init(&m);
  char key[300];
  memset(key, 'k', sizeof(key));
  for (int len = 1; len <= 256; len++)
    cr_assert_eq(rlock__map_put(&m, key, (size_t)len, &slots[len]), 0);
  for (int len = 1; len <= 256; len++)
    cr_assert_eq(rlock__map_get(&m, key, (size_t)len), &slots[len]);
  size_t longest = 0;
  for (size_t b = 0; b < m.nbuckets; b++) {
    size_t len = 0;
    for (rlock__map_node *n = m.buckets[b]; n != NULL; n = n->next)
      len++;
    if (len > longest)
      longest = len;
  }
  cr_assert_leq(longest, 8, "keys differing in length: a chain of %zu",
                longest);
  rlock__map_destroy(&m);
}
