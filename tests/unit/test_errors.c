/* Error table, rlock_last_error() and server error mapping. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "rlock.h"
#include "util.h"

struct err_row {
  int code;
  const char *name;
  const char *msg;
};

static const struct err_row err_rows[] = {
#define ROW(name, value, msg) {RLOCK_##name, "RLOCK_" #name, msg},
    RLOCK_ERRNO_MAP(ROW)
#undef ROW
};
#define N_ERR_ROWS (sizeof(err_rows) / sizeof(err_rows[0]))

Test(errors, table_names_and_messages_match_enum) {
  size_t i;

  cr_assert_eq(N_ERR_ROWS, 28);
  for (i = 0; i < N_ERR_ROWS; i++) {
    cr_assert_lt(err_rows[i].code, 0, "%s must be negative", err_rows[i].name);
    cr_assert_str_eq(rlock_err_name(err_rows[i].code), err_rows[i].name);
    cr_assert_str_eq(rlock_strerror(err_rows[i].code), err_rows[i].msg);
  }
}

Test(errors, names_and_messages_are_distinct) {
  size_t i, j;

  for (i = 0; i < N_ERR_ROWS; i++) {
    for (j = i + 1; j < N_ERR_ROWS; j++) {
      cr_assert_neq(err_rows[i].code, err_rows[j].code);
      cr_assert_str_neq(rlock_err_name(err_rows[i].code),
                        rlock_err_name(err_rows[j].code));
      cr_assert_str_neq(rlock_strerror(err_rows[i].code),
                        rlock_strerror(err_rows[j].code));
    }
  }
}

Test(errors, stable_values) {
  cr_assert_eq(RLOCK_EINVAL, -1);
  cr_assert_eq(RLOCK_EURI, -3);
  cr_assert_eq(RLOCK_ENOTOWNER, -9);
  cr_assert_eq(RLOCK_ESERVER, -11);
  cr_assert_eq(RLOCK_ESYS, -19);
  cr_assert_eq(RLOCK_EFORK, -20);
  cr_assert_eq(RLOCK_ETLS, -21);
  cr_assert_eq(RLOCK_EBACKLOG, -22);
  cr_assert_eq(RLOCK_EKIND, -23);
  cr_assert_eq(RLOCK_ENOREPLICA, -24);
  cr_assert_eq(RLOCK_ECLUSTER, -25);
  cr_assert_eq(RLOCK_EREENTRY, -26);
  cr_assert_eq(RLOCK_ESTALE, -27);
  cr_assert_eq(RLOCK_EFOREIGN, -28);
  cr_assert_str_eq(rlock_err_name(-9), "RLOCK_ENOTOWNER");
  cr_assert_str_eq(rlock_strerror(-14), "Redis authentication failed");
}

Test(errors, success_and_unknown_codes) {
  static const int unknown[] = {1, 2, -29, -100, 1000, INT32_MIN, INT32_MAX};
  size_t i;

  cr_assert_str_eq(rlock_err_name(0), "RLOCK_OK");
  cr_assert_str_eq(rlock_strerror(0), "success");
  for (i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
    cr_assert_str_eq(rlock_err_name(unknown[i]), "RLOCK_EUNKNOWN");
    cr_assert_str_eq(rlock_strerror(unknown[i]), "unknown error");
  }
}

Test(errors, last_error_set_and_clear) {
  rlock__set_last_error("bad %s: %d", "port", 70000);
  cr_assert_str_eq(rlock_last_error(), "bad port: 70000");
  rlock__set_last_error("second");
  cr_assert_str_eq(rlock_last_error(), "second");
  rlock__clear_last_error();
  cr_assert_str_eq(rlock_last_error(), "");
  cr_assert_not_null(rlock_last_error());
}

Test(errors, last_error_truncated_to_511_bytes) {
  char big[2000];

  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  rlock__set_last_error("%s", big);
  cr_assert_eq(strlen(rlock_last_error()), 511);
  cr_assert_eq(rlock_last_error()[0], 'x');
  cr_assert_eq(rlock_last_error()[510], 'x');
}

Test(errors, last_error_may_quote_itself) {
  rlock__set_last_error("inner");
  rlock__set_last_error("outer: %s", rlock_last_error());
  cr_assert_str_eq(rlock_last_error(), "outer: inner");
}

static void *other_thread(void *arg) {
  char *seen = arg;

  /* A fresh thread starts with no error, whatever the main thread holds. */
  strcpy(seen, rlock_last_error());
  rlock__set_last_error("from the other thread");
  return NULL;
}

Test(errors, last_error_is_thread_local) {
  pthread_t thread;
  char seen[512] = "not run";

  rlock__set_last_error("from the main thread");
  cr_assert_eq(pthread_create(&thread, NULL, other_thread, seen), 0);
  cr_assert_eq(pthread_join(thread, NULL), 0);
  cr_assert_str_eq(seen, "");
  cr_assert_str_eq(rlock_last_error(), "from the main thread");
}

Test(errors, server_error_mapping) {
  static const struct {
    const char *text;
    int code;
  } rows[] = {
      {"WRONGTYPE Operation against a key holding the wrong kind of value",
       RLOCK_EWRONGTYPE},
      {"WRONGTYPE", RLOCK_EWRONGTYPE},
      {"WRONGKIND rw is a read/write lock (it has a mode field), not this "
       "kind of lock", RLOCK_EKIND},
      /* the non-reentrant locks' refusal: rlock's scripts put the marker
       * first; Redis 7 puts "ERR " before a bare one (Java's script) */
      {"NON_REENTRANT_REACQUIRE nr is non-reentrant and already held by "
       "u:1", RLOCK_EREENTRY},
      {"ERR NON_REENTRANT_REACQUIRE", RLOCK_EREENTRY},
      {"NON_REENTRANT_REACQUIREX", RLOCK_ESERVER},
      /* the guard's refusals (lib/prim/_guard_check.lua) */
      {"STALE token 4 of lock L is below 9, the highest guard g has seen "
       "(nothing was written)", RLOCK_ESTALE},
      {"FOREIGN guard g fences lock L, not M (nothing was written)",
       RLOCK_EFOREIGN},
      {"STALENESS", RLOCK_ESERVER},
      {"NOPERM this user has no permissions to run the 'evalsha' command",
       RLOCK_ENOPERM},
      {"NOPERM No permissions to access a key", RLOCK_ENOPERM},
      {"NOAUTH Authentication required.", RLOCK_EAUTH},
      {"WRONGPASS invalid username-password pair or user is disabled.",
       RLOCK_EAUTH},
      {"ERR invalid password", RLOCK_EAUTH},
      {"ERR AUTH <password> called without any password configured for the "
       "default user. Are you sure your configuration is correct?",
       RLOCK_EAUTH},
      {"ERR Client sent AUTH, but no password is set", RLOCK_EAUTH},
      {"OOM command not allowed when used memory > 'maxmemory'.", RLOCK_EOOM},
      {"READONLY You can't write against a read only replica.",
       RLOCK_EREADONLY},
      {"ERR unknown command 'FOO'", RLOCK_ESERVER},
      {"ERR invalid passwordless mode", RLOCK_ESERVER},
      {"ERR wrong number of arguments for 'hincrby' command", RLOCK_ESERVER},
      {"NOSCRIPT No matching script. Please use EVAL.", RLOCK_ESERVER},
      {"BUSY Redis is busy running a script.", RLOCK_ESERVER},
      {"LOADING Redis is loading the dataset in memory", RLOCK_ESERVER},
      {"OOMX not an oom error", RLOCK_ESERVER},
      {"WRONGTYPEX", RLOCK_ESERVER},
      {"READONLYISH text", RLOCK_ESERVER},
      {"NOAUTH_ something", RLOCK_ESERVER},
      {"oom lowercase is not the code", RLOCK_ESERVER},
      {" OOM leading space", RLOCK_ESERVER},
      {"OO", RLOCK_ESERVER},
      {"", RLOCK_ESERVER},
      /* ACL refusals inside a Lua script (Redis 7.0's own texts). */
      {"ERR The user executing the script can't publish to the channel "
       "mentioned in the command script: bf6c, on @user_script:1.",
       RLOCK_ENOPERM},
      {"ERR The user executing the script can't run this command or "
       "subcommand script: c25e, on @user_script:1.",
       RLOCK_ENOPERM},
      /* Older servers wrap the inner error's code. */
      {"ERR Error running script (call to f_1): @user_script:1: "
       "@user_script: 1: NOPERM this user has no permissions",
       RLOCK_ENOPERM},
      {"ERR Error running script (call to f_1): @user_script:1: WRONGTYPE "
       "Operation against a key holding the wrong kind of value",
       RLOCK_EWRONGTYPE},
      {"ERR Error running script (call to f_1): @user_script:1: user_script:1:"
       " Script attempted to access nonexistent global variable 'x'",
       RLOCK_ESERVER},
      {"ERR Error running script (call to f_1): @user_script:1: ERR invalid "
       "password", RLOCK_ESERVER},
  };
  size_t i;

  for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    int got = rlock__err_from_server(rows[i].text, strlen(rows[i].text));
    cr_assert_eq(got, rows[i].code, "'%s' -> %s, expected %s", rows[i].text,
                 rlock_err_name(got), rlock_err_name(rows[i].code));
  }
}

Test(errors, server_error_uses_length_not_nul) {
  /* hiredis gives a length; the text need not end where the reply does. */
  const char text[] = "OOMPH";

  cr_assert_eq(rlock__err_from_server(text, 3), RLOCK_EOOM);
  cr_assert_eq(rlock__err_from_server(text, 5), RLOCK_ESERVER);
  cr_assert_eq(rlock__err_from_server("WRONGTYPE", 5), RLOCK_ESERVER);
  cr_assert_eq(rlock__err_from_server(NULL, 0), RLOCK_ESERVER);
}
