/* Fencing for data in SQL (issue 37; docs/fencing.md, "Data in SQL"): the
 * example examples/sql/fenced_sql.c against a real PostgreSQL that each
 * test starts (initdb in a temporary folder, the server on a unix socket
 * only; as root, both run as the `postgres` user, else `nobody`): the
 * zombie test - holder A SIGSTOPped past its lease, B writes, A resumes and
 * is refused as stale, B's row intact - and the guard row's bad input.
 * PostgreSQL's binaries: $RLOCK_PG_BINDIR, else /usr/lib/postgresql/15/bin
 * (Debian's postgresql-15). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static char pg_dir[64];
static char pg_conninfo[256];
static pid_t pg_pid = -1;

static const char *pg_bin(const char *tool, char *buf, size_t n) {
  const char *dir = getenv("RLOCK_PG_BINDIR");
  snprintf(buf, n, "%s/%s",
           dir != NULL && dir[0] ? dir : "/usr/lib/postgresql/15/bin", tool);
  return buf;
}

/* As root, PostgreSQL's tools refuse to run: they run as this user. */
static bool pg_user(uid_t *uid, gid_t *gid) {
  if (geteuid() != 0)
    return false;
  struct passwd *pw = getpwnam("postgres");
  if (pw == NULL)
    pw = getpwnam("nobody");
  cr_assert_not_null(pw, "no postgres or nobody user to run PostgreSQL as");
  *uid = pw->pw_uid;
  *gid = pw->pw_gid;
  return true;
}

/* fork + exec argv, its output to log (appended); in: stdin fd or -1,
 * out: stdout fd or -1 (then the log). As pg_user when `as_pg`. */
static pid_t spawn(const char *const *argv, bool as_pg, int in, int out,
                   const char *log) {
  uid_t uid = 0;
  gid_t gid = 0;
  bool drop = as_pg && pg_user(&uid, &gid);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      dup2(out >= 0 ? out : fd, 1);
    }
    if (in >= 0)
      dup2(in, 0);
    if (drop && (setgroups(0, NULL) != 0 || setgid(gid) != 0 ||
                 setuid(uid) != 0))
      _exit(126);
    /* after the setuid, which clears it */
    prctl(PR_SET_PDEATHSIG, SIGQUIT);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

static int wait_exit(pid_t pid) {
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void pg_log_path(char *buf, size_t n) {
  snprintf(buf, n, "%s/test.log", pg_dir);
}

/* The example, run to the end: its exit status. */
static int example(const char *const *args) {
  const char *argv[12];
  int n = 0;
  argv[n++] = FENCED_SQL;
  for (int i = 0; args[i] != NULL; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  char log[128];
  pg_log_path(log, sizeof log);
  return wait_exit(spawn(argv, false, -1, -1, log));
}

static void pg_stop(void);

static void pg_start(void) {
  rt_server_start();
  snprintf(pg_dir, sizeof pg_dir, "/tmp/rlock-pg.XXXXXX");
  cr_assert_not_null(mkdtemp(pg_dir));
  uid_t uid;
  gid_t gid;
  if (pg_user(&uid, &gid))
    cr_assert_eq(chown(pg_dir, uid, gid), 0, "chown: %s", strerror(errno));
  char data[128], log[128], initdb[256], postgres[256], port[16];
  snprintf(data, sizeof data, "%s/data", pg_dir);
  pg_log_path(log, sizeof log);
  snprintf(port, sizeof port, "%d", rt_free_port());
  const char *init[] = {pg_bin("initdb", initdb, sizeof initdb),
                        "-D", data, "-U", "postgres", "-A", "trust",
                        "--no-sync", "-E", "UTF8", NULL};
  cr_assert_eq(wait_exit(spawn(init, true, -1, -1, log)), 0,
               "initdb failed (see %s)", log);
  char sock[96];
  snprintf(sock, sizeof sock, "unix_socket_directories=%s", pg_dir);
  const char *run[] = {pg_bin("postgres", postgres, sizeof postgres),
                       "-D", data, "-p", port, "-c", "listen_addresses=",
                       "-c", sock, "-c", "fsync=off", NULL};
  pg_pid = spawn(run, true, -1, -1, log);
  snprintf(pg_conninfo, sizeof pg_conninfo,
           "host=%s port=%s user=postgres dbname=postgres "
           "connect_timeout=5", pg_dir, port);
  /* up when pg_isready says so */
  char isready[256];
  const char *ready[] = {pg_bin("pg_isready", isready, sizeof isready), "-q",
                         "-h", pg_dir, "-p", port, "-U", "postgres", NULL};
  int64_t until = rt_now_ms() + 30000;
  while (wait_exit(spawn(ready, false, -1, -1, log)) != 0) {
    if (rt_now_ms() >= until) {
      FILE *f = fopen(log, "r"); /* what initdb and postgres said */
      char l[256];
      while (f != NULL && fgets(l, sizeof l, f) != NULL)
        fputs(l, stderr);
      if (f != NULL)
        fclose(f);
      pg_stop();
      cr_assert_fail("PostgreSQL did not start in 30 s");
    }
    rt_sleep_ms(100);
  }
}

static void pg_stop(void) {
  if (pg_pid > 0) {
    kill(pg_pid, SIGQUIT); /* immediate shutdown: nothing to keep */
    if (!rt_reap_bounded(pg_pid, 10000)) {
      kill(pg_pid, SIGKILL);
      waitpid(pg_pid, NULL, 0);
    }
    pg_pid = -1;
  }
  if (pg_dir[0] != '\0') {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", pg_dir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", pg_dir);
    pg_dir[0] = '\0';
  }
  rt_server_stop();
}

TestSuite(fence_sql, .init = pg_start, .fini = pg_stop, .timeout = 120);

Test(fence_sql, zombie_holder_is_refused_by_the_guard_row) {
  char lock[64];
  rt_key(lock, sizeof lock, "sqlz");
  cr_assert_eq(example((const char *[]){"init", pg_conninfo, "acct", lock,
                                        NULL}),
               0);
  /* A: the lock with a 1 s lease, its token, then paused before writing */
  int in[2], out[2];
  cr_assert_eq(pipe(in), 0);
  cr_assert_eq(pipe(out), 0);
  char log[128];
  pg_log_path(log, sizeof log);
  const char *a_argv[] = {FENCED_SQL, "write", rt_uri(), pg_conninfo, lock,
                          "acct", "A's write", "1000", "--pause", NULL};
  pid_t a = spawn(a_argv, false, in[0], out[1], log);
  close(in[0]);
  close(out[1]);
  FILE *a_out = fdopen(out[0], "r");
  char line[64] = "";
  cr_assert_not_null(fgets(line, sizeof line, a_out), "A took no token");
  long long ta = 0;
  cr_assert_eq(sscanf(line, "token %lld", &ta), 1, "A: %s", line);
  cr_assert_eq(kill(a, SIGSTOP), 0);
  /* B waits out A's lease, writes */
  cr_assert_eq(example((const char *[]){"write", rt_uri(), pg_conninfo, lock,
                                        "acct", "B's write", NULL}),
               0, "B's write (see %s)", log);
  /* A resumes and writes with its old token: refused */
  cr_assert_eq(kill(a, SIGCONT), 0);
  cr_assert_eq(write(in[1], "\n", 1), 1);
  cr_assert_eq(wait_exit(a), 1, "A's write with token %lld was not refused "
               "as stale (see %s)", ta, log);
  fclose(a_out);
  close(in[1]);
  /* B's row is intact */
  int rd[2];
  cr_assert_eq(pipe(rd), 0);
  const char *r_argv[] = {FENCED_SQL, "read", pg_conninfo, "acct", NULL};
  pid_t r = spawn(r_argv, false, -1, rd[1], log);
  close(rd[1]);
  FILE *r_out = fdopen(rd[0], "r");
  cr_assert_not_null(fgets(line, sizeof line, r_out));
  cr_assert_str_eq(line, "B's write\n");
  fclose(r_out);
  cr_assert_eq(wait_exit(r), 0);
}

Test(fence_sql, missing_guard_row_other_lock_and_unreachable_database) {
  char lock[64], other[64];
  rt_key(lock, sizeof lock, "sqlb");
  rt_key(other, sizeof other, "sqlo");
  cr_assert_eq(example((const char *[]){"init", pg_conninfo, "acct", lock,
                                        NULL}),
               0);
  cr_assert_eq(example((const char *[]){"write", rt_uri(), pg_conninfo, lock,
                                        "nothere", "x", NULL}),
               2, "no guard row");
  cr_assert_eq(example((const char *[]){"write", rt_uri(), pg_conninfo,
                                        other, "acct", "x", NULL}),
               3, "the row fences another lock");
  cr_assert_eq(example((const char *[]){"write", rt_uri(),
                                        "host=/nonexistent port=1 "
                                        "dbname=x connect_timeout=2",
                                        lock, "acct", "x", NULL}),
               4, "an unreachable database");
  cr_assert_eq(example((const char *[]){"write", rt_uri(), pg_conninfo, lock,
                                        "acct", "ok", NULL}),
               0);
}
