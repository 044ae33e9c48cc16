/* lib/util/util.h's command argument vector: rlock__argv_int writes a
 * number as "%lld" does (it does not call printf: it runs several times
 * per command on the loop thread). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static void check_int(int64_t v) {
  rlock__argv a = {0};
  rlock__argv_str(&a, "x");
  rlock__argv_int(&a, v);
  char want[32];
  snprintf(want, sizeof(want), "%lld", (long long)v);
  cr_assert_eq(a.argc, 2);
  cr_assert_eq(a.lens[1], strlen(want), "%" PRId64 ": length %zu, want %zu", v,
               a.lens[1], strlen(want));
  cr_assert_arr_eq(a.argv[1], want, a.lens[1], "%" PRId64 ": %.*s, want %s", v,
                   (int)a.lens[1], a.argv[1], want);
}

Test(argv, ints_read_as_printf_writes_them) {
  const int64_t edge[] = {0,
                          1,
                          -1,
                          9,
                          10,
                          -10,
                          99,
                          100,
                          30000,
                          -30000,
                          1099511627776,
                          INT64_MAX,
                          INT64_MIN,
                          INT64_MIN + 1};
  for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
    check_int(edge[i]);
  /* every digit count, both signs */
  int64_t v = 1;
  for (int d = 1; d <= 18; d++, v *= 10) {
    check_int(v);
    check_int(v - 1);
    check_int(-v);
    check_int(-(v - 1));
    check_int(v * 7 + 3);
  }
}
