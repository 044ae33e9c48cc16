/* Redis Cluster key slots: CRC16 (XMODEM) and the hash-tag rule. The
 * expected values are those Redis itself gives (the cluster specification's
 * check value and CLUSTER KEYSLOT examples from its documentation), so a
 * slip in the polynomial, the bit order or the tag rule shows here rather
 * than as MOVED storms against a real cluster. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static int slot_of(const char *key) {
  return rlock__key_slot(key, strlen(key));
}

Test(slot, crc16_check_values) {
  /* The CRC16/XMODEM check value, quoted by the cluster specification. */
  cr_assert_eq(rlock__crc16("123456789", 9), 0x31C3);
  cr_assert_eq(rlock__crc16("A", 1), 0x58E5);
  cr_assert_eq(rlock__crc16("", 0), 0);
  /* Initial value 0 and no final XOR: leading zero bytes change nothing. */
  cr_assert_eq(rlock__crc16("\0\0", 2), 0);
  /* Bytes are unsigned: a high byte must not sign-extend into the CRC. */
  cr_assert_eq(rlock__crc16("\xff\x00\x80", 3) % 16384, 7915);
}

Test(slot, known_keys) {
  cr_assert_eq(slot_of("foo"), 12182);
  cr_assert_eq(slot_of("bar"), 5061);
  cr_assert_eq(slot_of("somekey"), 11058);
  cr_assert_eq(slot_of("foo{hash_tag}"), 2515);
  cr_assert_eq(slot_of(""), 0);
}

Test(slot, hash_tags) {
  /* Keys sharing a tag share a slot: what multi-key scripts rely on. */
  cr_assert_eq(slot_of("{user1000}.following"), slot_of("user1000"));
  cr_assert_eq(slot_of("{user1000}.followers"), slot_of("user1000"));
  cr_assert_eq(slot_of("{user1000}.following"), 3443);
  /* Empty tag: the whole key. */
  cr_assert_eq(slot_of("foo{}{bar}"),
               (int)(rlock__crc16("foo{}{bar}", 10) % 16384));
  cr_assert_eq(slot_of("foo{}{bar}"), 8363);
  cr_assert_eq(slot_of("{}"), (int)(rlock__crc16("{}", 2) % 16384));
  /* The first '}' after the first '{' ends the tag: "{bar". */
  cr_assert_eq(slot_of("foo{{bar}}zap"), slot_of("{bar"));
  cr_assert_eq(slot_of("foo{{bar}}zap"), 4015);
  /* Only the first tag counts. */
  cr_assert_eq(slot_of("foo{bar}{zap}"), slot_of("bar"));
  /* No closing brace, or only one before the '{': the whole key. */
  cr_assert_eq(slot_of("{"), (int)(rlock__crc16("{", 1) % 16384));
  cr_assert_eq(slot_of("foo{bar"), (int)(rlock__crc16("foo{bar", 7) % 16384));
  cr_assert_eq(slot_of("a}{b}"), slot_of("b"));
  cr_assert_eq(slot_of("}"), 12090);
}

/* The length is the key's: bytes past it (a NUL included) are not read,
 * and a NUL inside the key is hashed like any other byte. */
Test(slot, explicit_length) {
  cr_assert_eq(rlock__key_slot("foo{bar}", 3), slot_of("foo"));
  cr_assert_eq(rlock__key_slot("a{b", 3),
               (int)(rlock__crc16("a{b", 3) % 16384));
  cr_assert_eq(rlock__key_slot("{ab}", 3),
               (int)(rlock__crc16("{ab", 3) % 16384));
  cr_assert_neq(rlock__key_slot("a\0b", 3), rlock__key_slot("a", 1));
  cr_assert_eq(rlock__key_slot("{a\0b}x", 6),
               (int)(rlock__crc16("a\0b", 3) % 16384));
  cr_assert_eq(rlock__key_slot(NULL, 0), 0);
}

/* Every result is a slot: 0..16383. */
Test(slot, range) {
  char key[8];
  for (int i = 0; i < 100000; i++) {
    int n = snprintf(key, sizeof key, "k%d", i);
    int s = rlock__key_slot(key, (size_t)n);
    cr_assert(s >= 0 && s < 16384, "%s -> %d", key, s);
  }
}
