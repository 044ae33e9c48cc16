/* Redis Cluster key slots: CRC16-CCITT in its XMODEM variant (polynomial
 * 0x1021, initial value 0, no reflection, no final XOR) of the key's hash
 * tag, modulo 16384 - the mapping every cluster node and client shares, so
 * it must match bit for bit or commands land on the wrong node (MOVED). */
#include <string.h>

#include "util.h"

#define RLOCK__CRC16_POLY 0x1021u
#define RLOCK__SLOTS 16384u

/* One byte into the CRC, bit by bit (most significant bit first). Bitwise
 * rather than a 256-entry table: keys are short and each slot lookup
 * precedes a network round trip, so eight shifts a byte cost nothing
 * measurable, and there is no table to build (and race on) or to get
 * wrong by hand. */
static uint16_t rlock__crc16_byte(uint16_t crc, unsigned char byte) {
  int bit;

  crc ^= (uint16_t)(byte << 8);
  for (bit = 0; bit < 8; bit++) {
    if (crc & 0x8000u)
      crc = (uint16_t)((crc << 1) ^ RLOCK__CRC16_POLY);
    else
      crc = (uint16_t)(crc << 1);
  }
  return crc;
}

uint16_t rlock__crc16(const char *buf, size_t len) {
  uint16_t crc = 0;
  size_t i;

  for (i = 0; i < len; i++)
    crc = rlock__crc16_byte(crc, (unsigned char)buf[i]);
  return crc;
}

int rlock__key_slot(const char *key, size_t len) {
  const char *open = len > 0 ? memchr(key, '{', len) : NULL;

  /* The hash tag is what lies between the first '{' and the first '}'
   * after it. No '{', no '}' after it, or nothing between them ("{}"):
   * the whole key is hashed. Later braces never matter, so "a{{b}}" hashes
   * "{b" and "a{b}{c}" hashes "b". */
  if (open != NULL) {
    size_t start = (size_t)(open - key) + 1;
    const char *close = memchr(key + start, '}', len - start);

    if (close != NULL && close > key + start) {
      key += start;
      len = (size_t)(close - key);
    }
  }
  return (int)(rlock__crc16(key, len) % RLOCK__SLOTS);
}
