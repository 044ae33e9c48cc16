/* Fencing for data in SQL (docs/fencing.md, "Data in SQL"): a fenced lock's
 * token checked by PostgreSQL itself, through a guard row per resource.
 * The write runs in one transaction that first moves the guard row's token
 * up - `UPDATE fence_guard SET token = $t WHERE resource = $r AND
 * lock_name = $l AND token <= $t` - and writes only if that updated the
 * row. The row lock the UPDATE takes orders concurrent writers; a writer
 * whose token is below the row's (its lock expired while it was paused,
 * and a later holder wrote) updates nothing and writes nothing.
 *
 *   fenced_sql init  PGCONN RESOURCE LOCK      the tables and the guard row
 *   fenced_sql write REDIS_URI PGCONN LOCK RESOURCE VALUE [LEASE_MS] [--pause]
 *   fenced_sql read  PGCONN RESOURCE           prints the value
 *
 * write takes the fenced lock LOCK (a lease of LEASE_MS, default 30000),
 * prints "token N", with --pause waits for a line on stdin (a test stops
 * it there), then writes VALUE for RESOURCE under the guard. Exit status:
 * 0 written; 1 stale (refused, nothing written); 2 no guard row for
 * RESOURCE; 3 the guard row fences another lock; 4 an rlock or SQL error;
 * 64 usage. Built with libpq: cc fenced_sql.c $(pkg-config --cflags --libs
 * rlock libpq). */
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rlock.h"

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS fence_guard ("
    " resource text PRIMARY KEY, lock_name text NOT NULL,"
    " token bigint NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS fenced_data ("
    " resource text PRIMARY KEY, value text NOT NULL,"
    " token bigint NOT NULL)";

static PGconn *connect_pg(const char *conninfo) {
  PGconn *pg = PQconnectdb(conninfo);
  if (PQstatus(pg) != CONNECTION_OK) {
    fprintf(stderr, "fenced_sql: PostgreSQL: %s", PQerrorMessage(pg));
    PQfinish(pg);
    return NULL;
  }
  return pg;
}

/* Runs sql with params; true when it returned `want`. */
static bool run(PGconn *pg, const char *sql, int n, const char *const *params,
                ExecStatusType want, PGresult **out) {
  PGresult *r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
  if (PQresultStatus(r) != want) {
    fprintf(stderr, "fenced_sql: %s", PQerrorMessage(pg));
    PQclear(r);
    return false;
  }
  if (out != NULL)
    *out = r;
  else
    PQclear(r);
  return true;
}

static int cmd_init(const char *conninfo, const char *resource,
                    const char *lock) {
  PGconn *pg = connect_pg(conninfo);
  if (pg == NULL)
    return 4;
  PGresult *r = PQexec(pg, schema);
  bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  if (!ok)
    fprintf(stderr, "fenced_sql: %s", PQerrorMessage(pg));
  PQclear(r);
  const char *p[2] = {resource, lock};
  ok = ok && run(pg,
                 "INSERT INTO fence_guard (resource, lock_name) VALUES "
                 "($1, $2) ON CONFLICT (resource) DO NOTHING",
                 2, p, PGRES_COMMAND_OK, NULL);
  PQfinish(pg);
  return ok ? 0 : 4;
}

/* The guarded write: 0, or the exit status. */
static int guarded_write(PGconn *pg, const char *lock, const char *resource,
                         int64_t token, const char *value) {
  char tok[24];
  snprintf(tok, sizeof tok, "%lld", (long long)token);
  if (!run(pg, "BEGIN", 0, NULL, PGRES_COMMAND_OK, NULL))
    return 4;
  const char *g[3] = {resource, tok, lock};
  PGresult *r = NULL;
  if (!run(pg,
           "UPDATE fence_guard SET token = $2 WHERE resource = $1 AND "
           "lock_name = $3 AND token <= $2",
           3, g, PGRES_COMMAND_OK, &r))
    return 4;
  bool passed = strcmp(PQcmdTuples(r), "1") == 0;
  PQclear(r);
  if (passed) {
    const char *d[3] = {resource, value, tok};
    if (!run(pg,
             "INSERT INTO fenced_data (resource, value, token) VALUES ($1, "
             "$2, $3) ON CONFLICT (resource) DO UPDATE SET value = "
             "EXCLUDED.value, token = EXCLUDED.token",
             3, d, PGRES_COMMAND_OK, NULL) ||
        !run(pg, "COMMIT", 0, NULL, PGRES_COMMAND_OK, NULL))
      return 4;
    return 0;
  }
  /* Why not: no row, another lock's row, or a higher token. */
  const char *s[1] = {resource};
  int rc = 4;
  if (run(pg, "SELECT lock_name, token FROM fence_guard WHERE resource = $1",
          1, s, PGRES_TUPLES_OK, &r)) {
    if (PQntuples(r) == 0) {
      fprintf(stderr, "fenced_sql: no guard row for '%s' (run init)\n",
              resource);
      rc = 2;
    } else if (strcmp(PQgetvalue(r, 0, 0), lock) != 0) {
      fprintf(stderr, "fenced_sql: the guard row of '%s' fences lock '%s', "
                      "not '%s'\n", resource, PQgetvalue(r, 0, 0), lock);
      rc = 3;
    } else {
      fprintf(stderr, "fenced_sql: stale token %s: the guard of '%s' has "
                      "seen %s (nothing written)\n",
              tok, resource, PQgetvalue(r, 0, 1));
      rc = 1;
    }
    PQclear(r);
  }
  run(pg, "ROLLBACK", 0, NULL, PGRES_COMMAND_OK, NULL);
  return rc;
}

static int cmd_write(int argc, char **argv) {
  const char *uri = argv[2], *conninfo = argv[3], *lock_name = argv[4];
  const char *resource = argv[5], *value = argv[6];
  int64_t lease = argc > 7 && strcmp(argv[7], "--pause") != 0
                      ? atoll(argv[7])
                      : 30000;
  bool pause = strcmp(argv[argc - 1], "--pause") == 0;
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  rlock_client *client = NULL;
  rlock *lock = NULL;
  int64_t token = 0;
  int rc = rlock_client_new(&client, &o);
  if (rc == 0)
    rc = rlock_new_fenced(client, lock_name, &lock);
  if (rc == 0)
    rc = rlock_try_lock_fenced(lock, 30000, lease, &token);
  if (rc != 1) {
    fprintf(stderr, "fenced_sql: lock '%s': %s (%s)\n", lock_name,
            rc == 0 ? "not acquired in 30 s" : rlock_strerror(rc),
            rlock_last_error());
    rlock_free(lock);
    rlock_client_free(client);
    return 4;
  }
  printf("token %lld\n", (long long)token);
  fflush(stdout);
  if (pause) {
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL)
      line[0] = '\0';
  }
  PGconn *pg = connect_pg(conninfo);
  rc = pg != NULL ? guarded_write(pg, lock_name, resource, token, value) : 4;
  PQfinish(pg);
  /* A holder paused past its lease no longer holds it: that is fine. */
  rlock_unlock(lock);
  rlock_free(lock);
  rlock_client_free(client);
  return rc;
}

static int cmd_read(const char *conninfo, const char *resource) {
  PGconn *pg = connect_pg(conninfo);
  if (pg == NULL)
    return 4;
  const char *p[1] = {resource};
  PGresult *r = NULL;
  int rc = 4;
  if (run(pg, "SELECT value FROM fenced_data WHERE resource = $1", 1, p,
          PGRES_TUPLES_OK, &r)) {
    if (PQntuples(r) == 1)
      printf("%s\n", PQgetvalue(r, 0, 0));
    rc = 0;
    PQclear(r);
  }
  PQfinish(pg);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "init") == 0)
    return cmd_init(argv[2], argv[3], argv[4]);
  if (argc >= 7 && argc <= 9 && strcmp(argv[1], "write") == 0)
    return cmd_write(argc, argv);
  if (argc == 4 && strcmp(argv[1], "read") == 0)
    return cmd_read(argv[2], argv[3]);
  fprintf(stderr,
          "usage: fenced_sql init PGCONN RESOURCE LOCK\n"
          "       fenced_sql write REDIS_URI PGCONN LOCK RESOURCE VALUE "
          "[LEASE_MS] [--pause]\n"
          "       fenced_sql read PGCONN RESOURCE\n");
  return 64;
}
