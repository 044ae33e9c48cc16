/* rlock_version() and RLOCK_VERSION_* against meson's project version
 * (RLOCK_TEST_PROJECT_VERSION, passed by tests/meson.build), so a release
 * that bumps one without the others fails here as well as at setup. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "rlock.h"

Test(version, library_header_and_meson_agree) {
  cr_assert_str_eq(rlock_version(), RLOCK_TEST_PROJECT_VERSION);
  cr_assert_str_eq(RLOCK_VERSION_STRING, RLOCK_TEST_PROJECT_VERSION);
  char parts[32];
  snprintf(parts, sizeof parts, "%d.%d.%d", RLOCK_VERSION_MAJOR,
           RLOCK_VERSION_MINOR, RLOCK_VERSION_PATCH);
  cr_assert_str_eq(parts, RLOCK_TEST_PROJECT_VERSION);
  /* Static: the same pointer every time. */
  cr_assert_eq(rlock_version(), rlock_version());
}
