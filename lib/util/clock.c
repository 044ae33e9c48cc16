/* The wall clock (util.h). */
#include <time.h>

#include "util.h"

int64_t rlock__wall_ms(void) {
  struct timespec ts;
  if (timespec_get(&ts, TIME_UTC) != TIME_UTC)
    return 0;
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
