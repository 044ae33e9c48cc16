/* Diagnostics: the one place every layer's messages go through to the
 * user's rlock_options.on_diag (see rlock.h). Formatting happens only when
 * a callback is set. */
#include <stdarg.h>
#include <stdio.h>

#include "core.h"

const char *rlock_diag_level_name(int level) {
  switch (level) {
  case RLOCK_DIAG_ERROR:
    return "ERROR";
  case RLOCK_DIAG_WARN:
    return "WARN";
  case RLOCK_DIAG_INFO:
    return "INFO";
  case RLOCK_DIAG_DEBUG:
    return "DEBUG";
  default:
    return "?";
  }
}

void rlock__diag(rlock__core *core, int level, const char *fmt, ...) {
  rlock_diag_cb fn = core->opts.on_diag;
  if (fn == NULL)
    return;
  char line[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  /* One line, whatever a server's text put into it. */
  for (char *p = line; *p != '\0'; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = '?';
  fn(core->diag_client, (rlock_diag_level)level, line,
     core->opts.on_diag_data);
}
