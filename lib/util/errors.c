/* Error codes, their names and messages, and the per-thread last-error text. */
#include <stdio.h>
#include <string.h>

#include "rlock.h"
#include "util.h"

/* The only mutable global in the library. It is thread-local so that a
 * failure on one thread can never overwrite the detail another thread is
 * about to read, and no lock is needed. Zero-initialised, i.e. "". */
static _Thread_local char rlock__last_error[512];

const char *rlock_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define RLOCK__ERR_MSG(name, value, msg)                                       \
  case RLOCK_##name:                                                           \
    return msg;
    RLOCK_ERRNO_MAP(RLOCK__ERR_MSG)
#undef RLOCK__ERR_MSG
  default:
    return "unknown error";
  }
}

const char *rlock_err_name(int err) {
  switch (err) {
  case 0:
    return "RLOCK_OK";
#define RLOCK__ERR_NAME(name, value, msg)                                      \
  case RLOCK_##name:                                                           \
    return "RLOCK_" #name;
    RLOCK_ERRNO_MAP(RLOCK__ERR_NAME)
#undef RLOCK__ERR_NAME
  default:
    return "RLOCK_EUNKNOWN";
  }
}

const char *rlock_last_error(void) { return rlock__last_error; }

void rlock__set_last_error(const char *fmt, ...) {
  /* Format into a scratch buffer first: callers may pass rlock_last_error()
   * itself as an argument (to add context to an earlier failure), and
   * vsnprintf into a buffer it is also reading from is undefined. */
  char scratch[sizeof(rlock__last_error)];
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(scratch, sizeof(scratch), fmt, ap);
  va_end(ap);
  if (n < 0)
    scratch[0] = '\0';
  memcpy(rlock__last_error, scratch, sizeof(scratch));
}

void rlock__clear_last_error(void) { rlock__last_error[0] = '\0'; }

/* 1 if `text` starts with `prefix` and the prefix ends at a word boundary,
 * so that e.g. "OOMX ..." is not taken for "OOM ...". `text` is a Redis
 * error reply, which hiredis gives us with a length and which is not
 * guaranteed to be NUL-terminated. */
static int rlock__has_prefix_word(const char *text, size_t len,
                                  const char *prefix) {
  size_t plen = strlen(prefix);
  unsigned char next;

  if (len < plen || memcmp(text, prefix, plen) != 0)
    return 0;
  if (len == plen)
    return 1;
  next = (unsigned char)text[plen];
  return !((next >= 'A' && next <= 'Z') || (next >= 'a' && next <= 'z') ||
           (next >= '0' && next <= '9') || next == '_');
}

int rlock__err_from_server(const char *text, size_t len) {
  /* The first word of a Redis error reply is its error code (RESP "simple
   * error" convention). Only the generic "ERR" code is ambiguous; the
   * authentication failures below are the exact texts Redis 5..7 send when
   * AUTH is rejected or sent to a server without a password. */
  static const struct {
    const char *prefix;
    int code;
  } table[] = {
      {"WRONGTYPE", RLOCK_EWRONGTYPE},
      {"NOPERM", RLOCK_ENOPERM},
      {"NOAUTH", RLOCK_EAUTH},
      {"WRONGPASS", RLOCK_EAUTH},
      {"ERR invalid password", RLOCK_EAUTH},
      {"ERR AUTH <password> called without any password configured",
       RLOCK_EAUTH},
      {"ERR Client sent AUTH, but no password is set", RLOCK_EAUTH},
      {"OOM", RLOCK_EOOM},
      {"READONLY", RLOCK_EREADONLY},
      /* rlock's own scripts: the key holds another kind of lock */
      {"WRONGKIND", RLOCK_EKIND},
      /* the non-reentrant locks' acquire: this owner holds it already.
       * rlock's scripts put the marker first; a script that replies the
       * bare marker (Java's) gets "ERR " in front from Redis 7. */
      {"NON_REENTRANT_REACQUIRE", RLOCK_EREENTRY},
      {"ERR NON_REENTRANT_REACQUIRE", RLOCK_EREENTRY},
      /* the guard's scripts (lib/prim/guard.c): an older token than the
       * guard has seen; a token of another lock than the guard's */
      {"STALE", RLOCK_ESTALE},
      {"FOREIGN", RLOCK_EFOREIGN},
      /* Redis Cluster: the slot is not served, is moving, or the keys of
       * one command are in different slots */
      {"CLUSTERDOWN", RLOCK_ECLUSTER},
      {"TRYAGAIN", RLOCK_ECLUSTER},
      {"CROSSSLOT", RLOCK_ECLUSTER},
      {"MOVED", RLOCK_ECLUSTER},
      {"ASK", RLOCK_ECLUSTER},
      {"MASTERDOWN", RLOCK_ECONN},
  };
  size_t i, at;

  if (text == NULL)
    return RLOCK_ESERVER;
  for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
    if (rlock__has_prefix_word(text, len, table[i].prefix))
      return table[i].code;
  }
  /* A command refused by the ACL inside a Lua script: Redis 7.0 reports it
   * as a plain "ERR The user executing the script can't run this command
   * ..." (or "... can't publish to the channel ...", "... can't access at
   * least one of the keys ..."). */
  if (rlock__has_prefix_word(text, len, "ERR The user executing the script"))
    return RLOCK_ENOPERM;
  /* Older servers wrap a script's error: "ERR Error running script (call
   * to f_...): @user_script:1: WRONGTYPE ...". The code after a ": " is the
   * one that matters. */
  if (rlock__has_prefix_word(text, len, "ERR Error running script")) {
    for (at = 0; at + 2 < len; at++) {
      if (text[at] != ':' || text[at + 1] != ' ')
        continue;
      for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (table[i].prefix[0] != 'E' && /* not the ERR-based AUTH texts */
            rlock__has_prefix_word(text + at + 2, len - at - 2,
                                   table[i].prefix))
          return table[i].code;
      }
    }
  }
  return RLOCK_ESERVER;
}
