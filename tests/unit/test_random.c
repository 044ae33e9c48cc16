/* Random bytes and UUIDv4. */
#include <criterion/criterion.h>
#include <string.h>

#include "util.h"

static int is_lower_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static void assert_uuid4(const char *id) {
  size_t i;

  cr_assert_eq(strlen(id), RLOCK_ID_LEN, "'%s'", id);
  cr_assert_eq(RLOCK_ID_LEN, 36);
  for (i = 0; i < RLOCK_ID_LEN; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23)
      cr_assert_eq(id[i], '-', "'%s': [%zu]", id, i);
    else
      cr_assert(is_lower_hex(id[i]), "'%s': [%zu] = '%c'", id, i, id[i]);
  }
  cr_assert_eq(id[14], '4', "'%s': version", id);
  cr_assert_not_null(strchr("89ab", id[19]), "'%s': variant", id);
}

Test(random, uuid4_format) {
  char id[RLOCK_ID_LEN + 1];
  int i;

  /* Many draws, so a fixed nibble that only looks right by chance (1/16
   * for the version, 1/4 for the variant) would be caught. */
  for (i = 0; i < 256; i++) {
    memset(id, 'X', sizeof(id));
    cr_assert_eq(rlock__uuid4(id), 0);
    assert_uuid4(id);
  }
}

Test(random, uuid4_differ) {
  char a[RLOCK_ID_LEN + 1], b[RLOCK_ID_LEN + 1];

  cr_assert_eq(rlock__uuid4(a), 0);
  cr_assert_eq(rlock__uuid4(b), 0);
  cr_assert_str_neq(a, b);
}

Test(random, uuid4_variant_covers_all_values) {
  char id[RLOCK_ID_LEN + 1];
  int seen[4] = {0, 0, 0, 0};
  int i;

  /* Only two bits are fixed: the other two of that nibble stay random.
   * Missing one of 4 values in 400 draws has probability ~1e-50. */
  for (i = 0; i < 400; i++) {
    cr_assert_eq(rlock__uuid4(id), 0);
    seen[strchr("89ab", id[19]) - "89ab"] = 1;
  }
  cr_assert(seen[0] && seen[1] && seen[2] && seen[3]);
}

Test(random, bytes_fill_whole_buffer) {
  /* Larger than the 1 MiB that random.c asks uv_random() for at a time, so
   * the chunk loop runs twice; every 64-byte stripe being non-zero shows
   * all of it was filled (chance of a zero stripe is 2^-512). */
  static unsigned char buf[(1 << 20) + 4096];
  size_t i, j;

  cr_assert_eq(rlock__random_bytes(buf, 0), 0);
  cr_assert_eq(rlock__random_bytes(buf, sizeof(buf)), 0);
  for (i = 0; i < sizeof(buf); i += 64) {
    int nonzero = 0;
    for (j = 0; j < 64; j++)
      nonzero |= buf[i + j];
    cr_assert(nonzero, "stripe at %zu is all zero", i);
  }
}
