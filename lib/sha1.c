/* SHA-1 (FIPS 180-4, section 6.1), one-shot. Used only to name Lua scripts
 * for EVALSHA, as Redis does (SCRIPT LOAD returns the script's SHA-1), so a
 * single-buffer interface is enough and speed does not matter. */
#include <string.h>

#include "util.h"

#define RLOCK__ROTL32(x, n) (((x) << (n)) | ((x) >> (32 - (n))))

/* Processes one 64-byte block (FIPS 180-4, 6.1.2 steps 1-4). */
static void rlock__sha1_block(uint32_t h[5], const unsigned char block[64]) {
  uint32_t w[80];
  uint32_t a, b, c, d, e, f, k, temp;
  int t;

  /* The message is big-endian words (FIPS 180-4, 3.1 and 5.2.1). */
  for (t = 0; t < 16; t++) {
    w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 |
           (uint32_t)block[4 * t + 2] << 8 | (uint32_t)block[4 * t + 3];
  }
  for (t = 16; t < 80; t++)
    w[t] = RLOCK__ROTL32(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);

  a = h[0];
  b = h[1];
  c = h[2];
  d = h[3];
  e = h[4];
  for (t = 0; t < 80; t++) {
    /* f_t and K_t from FIPS 180-4, 4.1.1 and 4.2.1. */
    if (t < 20) {
      f = (b & c) | (~b & d); /* Ch */
      k = 0x5a827999u;
    } else if (t < 40) {
      f = b ^ c ^ d; /* Parity */
      k = 0x6ed9eba1u;
    } else if (t < 60) {
      f = (b & c) | (b & d) | (c & d); /* Maj */
      k = 0x8f1bbcdcu;
    } else {
      f = b ^ c ^ d; /* Parity */
      k = 0xca62c1d6u;
    }
    temp = RLOCK__ROTL32(a, 5) + f + e + k + w[t];
    e = d;
    d = c;
    c = RLOCK__ROTL32(b, 30);
    b = a;
    a = temp;
  }

  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

void rlock__sha1_hex(const void *data, size_t len, char out[41]) {
  static const char hex[] = "0123456789abcdef";
  /* Initial hash value, FIPS 180-4, 5.3.1. */
  uint32_t h[5] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u,
                   0xc3d2e1f0u};
  const unsigned char *bytes = data;
  unsigned char tail[128];
  size_t rem, tail_len, i;
  uint64_t bit_len = (uint64_t)len * 8u;

  while (len >= 64) {
    rlock__sha1_block(h, bytes);
    bytes += 64;
    len -= 64;
  }

  /* Padding (FIPS 180-4, 5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, then
   * the message length in bits as a 64-bit big-endian integer. That takes
   * one more block, or two when fewer than 9 bytes are left in this one. */
  rem = len;
  if (rem > 0)
    memcpy(tail, bytes, rem);
  tail_len = rem < 56 ? 64 : 128;
  tail[rem] = 0x80;
  memset(tail + rem + 1, 0, tail_len - rem - 1 - 8);
  for (i = 0; i < 8; i++)
    tail[tail_len - 1 - i] = (unsigned char)(bit_len >> (8 * i));
  rlock__sha1_block(h, tail);
  if (tail_len == 128)
    rlock__sha1_block(h, tail + 64);

  for (i = 0; i < 5; i++) {
    int shift;
    for (shift = 28; shift >= 0; shift -= 4)
      *out++ = hex[(h[i] >> shift) & 0xfu];
  }
  *out = '\0';
}
