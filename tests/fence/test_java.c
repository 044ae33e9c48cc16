/* Fencing with the real Java Redisson 4.7 client (issue 37): Java's
 * getFencedLock and rlock's fenced lock take turns on one name; every token
 * is above the one before (Java's plain INCR continues right above rlock's
 * clock-floored tokens), and one guard accepts each in turn, then refuses
 * the first. The peer is $RLOCK_REDISSON_PEER, else
 * <repo root>/../shared/redisson/peer (../../shared from a git worktree
 * under wt/) (its README lists the line protocol:
 * "X/name" is a fenced lock, "token NAME" reads Java's getToken()). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faultkit.h"
#include "fence_test.h"
#include "harness.h"

TestSuite(fence_java, .init = fk_init, .fini = fk_fini, .timeout = 120);

typedef struct peer {
  pid_t pid;
  FILE *in, *out;
} peer;

static void peer_start(peer *p) {
  char path[4096];
  const char *env = getenv("RLOCK_REDISSON_PEER");
  if (env != NULL && env[0] != '\0')
    snprintf(path, sizeof path, "%s", env);
  else {
    snprintf(path, sizeof path, "%s/../shared/redisson/peer",
             FENCE_SOURCE_ROOT);
    /* a git worktree one folder further down (wt/<name>) */
    if (access(path, X_OK) != 0)
      snprintf(path, sizeof path, "%s/../../shared/redisson/peer",
               FENCE_SOURCE_ROOT);
  }
  cr_assert_eq(access(path, X_OK), 0,
               "the Java peer %s is not there (RLOCK_REDISSON_PEER)", path);
  int to[2], from[2];
  cr_assert_eq(pipe(to), 0);
  cr_assert_eq(pipe(from), 0);
  char port[16];
  snprintf(port, sizeof port, "%d", rt_port());
  p->pid = fork();
  cr_assert_geq(p->pid, 0);
  if (p->pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[1]);
    close(from[0]);
    execl(path, path, port, (char *)NULL);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  p->in = fdopen(to[1], "w");
  p->out = fdopen(from[0], "r");
  char line[512];
  while (fgets(line, sizeof line, p->out) != NULL)
    if (strncmp(line, "READY", 5) == 0)
      return;
  cr_assert_fail("the Java peer ended before READY");
}

/* Sends a line, returns its answer (static), asserting "OK". */
static const char *peer_call(peer *p, const char *fmt, ...) {
  static char line[512];
  va_list ap;
  va_start(ap, fmt);
  vfprintf(p->in, fmt, ap);
  va_end(ap);
  fputc('\n', p->in);
  fflush(p->in);
  cr_assert(fgets(line, sizeof line, p->out) != NULL, "no answer");
  cr_assert(strncmp(line, "OK", 2) == 0, "the peer answered: %s", line);
  return line;
}

static void peer_stop(peer *p) {
  fputs("quit\n", p->in);
  fclose(p->in);
  fclose(p->out);
  int st = 0;
  if (!rt_reap_bounded(p->pid, 10000)) {
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
  }
}

Test(fence_java, java_and_c_holders_interleave_with_rising_tokens) {
  peer p;
  peer_start(&p);
  rlock_client *c = rt_client();
  char name[64], g[96], data[96];
  rt_key(name, sizeof name, "fj");
  snprintf(g, sizeof g, "{%s}:guard", name);
  snprintf(data, sizeof data, "{%s}:data", name);
  rlock *l = NULL;
  cr_assert_eq(rlock_new_fenced(c, name, &l), 0);
  rlock_guard *gu = NULL;
  cr_assert_eq(rlock_guard_new(c, g, &gu), 0);
  int64_t tokens[8];
  size_t n = 0;
  for (int round = 0; round < 3; round++) {
    /* Java: lock, its token, a guarded write with it, unlock */
    peer_call(&p, "lock X/%s 30000", name);
    long long jt = 0;
    cr_assert_eq(sscanf(peer_call(&p, "token X/%s", name), "OK %lld", &jt),
                 1);
    tokens[n++] = jt;
    cr_assert_eq(fence_set(gu, name, jt, data, "java"), 0,
                 "Java's token %lld refused: %s", jt, rlock_last_error());
    peer_call(&p, "unlock X/%s", name);
    /* C: the same */
    int64_t ct = 0;
    cr_assert_eq(rlock_try_lock_fenced(l, 10000, 30000, &ct), 1);
    tokens[n++] = ct;
    cr_assert_eq(fence_set(gu, name, ct, data, "c"), 0, "%s",
                 rlock_last_error());
    cr_assert_eq(rlock_unlock(l), 0);
  }
  char list[256] = "";
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, " %" PRId64, tokens[i]);
  }
  cr_assert_eq(tokens[0], 1, "Java's first INCR: %s", list);
  for (size_t i = 1; i < n; i++)
    cr_assert_gt(tokens[i], tokens[i - 1], "tokens:%s", list);
  for (size_t i = 2; i < n; i += 2)
    cr_assert_eq(tokens[i], tokens[i - 1] + 1,
                 "Java's INCR continues right above rlock's:%s", list);
  cr_assert_eq(fence_set(gu, name, tokens[n - 2], data, "old"),
               RLOCK_ESTALE);
  char *v = rt_str("GET %s", data);
  cr_assert_str_eq(v, "c");
  free(v);
  peer_stop(&p);
  rlock_guard_free(gu);
  rlock_free(l);
  rlock_client_free(c);
}
