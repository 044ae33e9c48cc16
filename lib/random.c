/* Random bytes, UUIDs and hex strings. The client UUID is half of every lock
 * owner string, so two processes (or a C and a Java client) must never pick
 * the same one: the bytes come from the kernel CSPRNG, never from rand(). */
#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include "util.h"

static const char rlock__hex_digits[] = "0123456789abcdef";

/* Fallback for kernels without getrandom() (before Linux 3.17) or sandboxes
 * whose seccomp filter rejects it. Opened per call rather than kept open:
 * ids are made rarely, and a cached descriptor would be global state that
 * fork() and close-all-fds loops in callers can break. */
static int rlock__urandom_read(unsigned char *buf, size_t n) {
  int fd;
  ssize_t got;

  do
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    rlock__set_last_error("cannot open /dev/urandom (errno %d)", errno);
    return RLOCK_ESYS;
  }
  while (n > 0) {
    got = read(fd, buf, n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      rlock__set_last_error("reading /dev/urandom failed (%s %d)",
                            got == 0 ? "end of file," : "errno",
                            got == 0 ? 0 : errno);
      close(fd);
      return RLOCK_ESYS;
    }
    buf += got;
    n -= (size_t)got;
  }
  close(fd);
  return 0;
}

int rlock__random_bytes(void *buf, size_t n) {
  unsigned char *dst = buf;
  ssize_t got;

  if (n == 0)
    return 0;
  if (buf == NULL) {
    rlock__set_last_error("rlock__random_bytes: buf is NULL");
    return RLOCK_EINVAL;
  }
  /* getrandom() may return fewer bytes than asked (large requests, or a
   * signal after the first 256 bytes), so loop until all are filled. */
  while (n > 0) {
    got = getrandom(dst, n, 0);
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return rlock__urandom_read(dst, n);
    }
    dst += got;
    n -= (size_t)got;
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

int rlock__random_hex(char *out, size_t nbytes) {
  /* Converted a chunk at a time so any length works without allocating. */
  unsigned char chunk[64];
  char *start = out;
  size_t done = 0, n, i;
  int rc;

  while (done < nbytes) {
    n = nbytes - done < sizeof(chunk) ? nbytes - done : sizeof(chunk);
    rc = rlock__random_bytes(chunk, n);
    if (rc != 0) {
      start[0] = '\0';
      return rc;
    }
    for (i = 0; i < n; i++) {
      *out++ = rlock__hex_digits[chunk[i] >> 4];
      *out++ = rlock__hex_digits[chunk[i] & 0x0f];
    }
    done += n;
  }
  *out = '\0';
  return 0;
}
