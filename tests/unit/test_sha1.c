/* SHA-1 against the FIPS 180 / NIST test vectors. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void assert_sha1(const void *data, size_t len, const char *want) {
  char out[41];

  memset(out, 'Z', sizeof(out));
  rlock__sha1_hex(data, len, out);
  cr_assert_eq(out[40], '\0');
  cr_assert_str_eq(out, want, "length %zu", len);
}

Test(sha1, empty) {
  assert_sha1("", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  assert_sha1(NULL, 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

Test(sha1, abc) {
  assert_sha1("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
}

Test(sha1, nist_448_bit) {
  const char *msg = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

  cr_assert_eq(strlen(msg), 56); /* forces a second padding block */
  assert_sha1(msg, strlen(msg), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

Test(sha1, nist_896_bit) {
  const char *msg = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                    "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";

  cr_assert_eq(strlen(msg), 112);
  assert_sha1(msg, strlen(msg), "a49b2446a02c645bf419f995b67091253a04a259");
}

Test(sha1, million_a) {
  size_t len = 1000000;
  char *msg = malloc(len);

  cr_assert_not_null(msg);
  memset(msg, 'a', len);
  assert_sha1(msg, len, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  free(msg);
}

Test(sha1, padding_boundaries) {
  /* Lengths around the 55/56/64-byte padding edges, checked against
   * `printf 'a%.0s' $(seq N) | sha1sum`. */
  static const struct {
    size_t len;
    const char *want;
  } rows[] = {
      {55, "c1c8bbdc22796e28c0e15163d20899b65621d65a"},
      {56, "c2db330f6083854c99d4b5bfb6e8f29f201be699"},
      {63, "03f09f5b158a7a8cdad920bddc29b81c18a551f5"},
      {64, "0098ba824b5c16427bd7a1122a5a442a25ec644d"},
      {65, "11655326c708d70319be2610e8a57d9a5b959d3b"},
  };
  char msg[65];
  size_t i;

  memset(msg, 'a', sizeof(msg));
  for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    assert_sha1(msg, rows[i].len, rows[i].want);
}

Test(sha1, binary_input) {
  const unsigned char bytes[] = {0x00, 0xff, 0x80, 0x7f};

  assert_sha1(bytes, sizeof(bytes), "20e828176973e578f91799f8cf0f41514b3355e9");
}
