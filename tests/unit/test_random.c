/* Random bytes, UUIDv4 and hex ids. */
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

Test(random, hex_length_and_alphabet) {
  static const size_t sizes[] = {0, 1, 8, 16, 63, 64, 65, 200};
  char out[2 * 200 + 2];
  size_t i, j;

  for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    memset(out, 'X', sizeof(out));
    cr_assert_eq(rlock__random_hex(out, sizes[i]), 0);
    cr_assert_eq(strlen(out), 2 * sizes[i], "nbytes %zu", sizes[i]);
    for (j = 0; j < 2 * sizes[i]; j++)
      cr_assert(is_lower_hex(out[j]), "nbytes %zu: [%zu] = '%c'", sizes[i], j,
                out[j]);
    cr_assert_eq(out[2 * sizes[i] + 1], 'X', "wrote past the NUL");
  }
}

Test(random, hex_differs) {
  char a[33], b[33];

  cr_assert_eq(rlock__random_hex(a, 16), 0);
  cr_assert_eq(rlock__random_hex(b, 16), 0);
  cr_assert_str_neq(a, b);
}

Test(random, bytes_fill_whole_buffer) {
  /* Large enough that getrandom() may return short; every 64-byte stripe
   * being non-zero shows the loop filled it all (chance of a zero stripe
   * is 2^-512). */
  static unsigned char buf[1 << 20];
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
