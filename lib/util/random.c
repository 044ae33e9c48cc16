/* Random bytes and UUIDs. The client UUID is half of every lock owner
 * string, so two processes (or a C and a Java client) must never pick the
 * same one: the bytes come from the OS CSPRNG, never from rand(). */
#include <uv.h>

#include "util.h"

static const char rlock__hex_digits[] = "0123456789abcdef";

/* uv_random() (libuv >= 1.33) picks the platform's CSPRNG (getrandom with a
 * /dev/urandom fallback on Linux, getentropy, arc4random_buf, RtlGenRandom)
 * and fills the whole buffer or fails. It refuses more than INT32_MAX bytes
 * at once (UV_E2BIG), so large requests go in chunks. */
#define RLOCK__RANDOM_CHUNK ((size_t)1 << 20)

int rlock__random_bytes(void *buf, size_t n) {
  unsigned char *dst = buf;

  if (n == 0)
    return 0;
  if (buf == NULL) {
    rlock__set_last_error("rlock__random_bytes: buf is NULL");
    return RLOCK_EINVAL;
  }
  while (n > 0) {
    size_t chunk = n < RLOCK__RANDOM_CHUNK ? n : RLOCK__RANDOM_CHUNK;
    /* No callback: synchronous, and loop and req are not used. */
    int rc = uv_random(NULL, NULL, dst, chunk, 0, NULL);
    if (rc != 0) {
      rlock__set_last_error("uv_random failed: %s", uv_strerror(rc));
      return RLOCK_ESYS;
    }
    dst += chunk;
    n -= chunk;
  }
  return 0;
}

int rlock__uuid4(char out[RLOCK_ID_LEN + 1]) {
  unsigned char bytes[16];
  size_t i;
  char *p = out;
  int rc;

  rc = rlock__random_bytes(bytes, sizeof(bytes));
  if (rc != 0)
    return rc;
  /* RFC 4122, 4.4: version 4 in the high nibble of byte 6, variant 10xx in
   * the high bits of byte 8. */
  bytes[6] = (unsigned char)((bytes[6] & 0x0f) | 0x40);
  bytes[8] = (unsigned char)((bytes[8] & 0x3f) | 0x80);
  for (i = 0; i < sizeof(bytes); i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      *p++ = '-';
    *p++ = rlock__hex_digits[bytes[i] >> 4];
    *p++ = rlock__hex_digits[bytes[i] & 0x0f];
  }
  *p = '\0';
  return 0;
}
