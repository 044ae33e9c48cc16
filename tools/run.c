/* `rlock [options] NAME -- COMMAND`: run COMMAND while holding NAME.
 *
 * Threads. A lock belongs to the thread that took it (its owner is
 * <client-uuid>:<thread-id>), so one "holder" thread takes the lock, waits
 * until told to, and releases it; it blocks in rlock_try_lock() and
 * rlock_unlock() so the main thread never has to. The main thread owns the
 * child process and the signals. The client's loop thread calls
 * on_lock_lost. The holder, the loop thread and the signal handlers all
 * report to the main thread by writing fixed-size events to one self-pipe,
 * so the main thread only ever poll()s that pipe (with a timeout for its
 * two timers: lease expiry and the SIGTERM -> SIGKILL grace).
 *
 * Signals. The handled signals are blocked before the client (and so its
 * loop thread) and the holder thread are created, so they inherit the
 * mask and every handled signal is delivered to the main thread. SIGPIPE
 * stays blocked everywhere: a write to a Redis socket the server closed
 * then fails with EPIPE instead of killing rlock (and orphaning COMMAND
 * with the lock held). The child gets back rlock's original mask and
 * dispositions before exec.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* Signals passed on to COMMAND. */
static const int forward_signals[] = {SIGINT,  SIGTERM, SIGHUP,
                                      SIGQUIT, SIGUSR1, SIGUSR2};
#define N_FORWARD (sizeof(forward_signals) / sizeof(forward_signals[0]))

/* ---- events: the self-pipe ---- */

enum { EV_SIGNAL = 1, EV_ACQUIRED, EV_RELEASED, EV_LOST };

/* Small enough (<= PIPE_BUF) that each write is atomic, so events from
 * several threads and handlers never interleave. */
typedef struct event {
  int kind;
  int signo; /* EV_SIGNAL */
  int code;  /* EV_SIGNAL: si_code; EV_ACQUIRED/EV_RELEASED: result */
} event;

static int g_event_rd = -1, g_event_wr = -1;

/* Async-signal-safe; callable from any thread. The pipe is non-blocking:
 * if it were ever full the event is dropped, which for signals is what the
 * kernel does with a pending duplicate anyway (and the pipe holds thousands
 * of events, far more than the handful one run produces). */
static void post_event(int kind, int signo, int code) {
  event ev = {kind, signo, code};
  ssize_t n;
  do {
    n = write(g_event_wr, &ev, sizeof ev);
  } while (n < 0 && errno == EINTR);
}

static void on_signal(int signo, siginfo_t *info, void *ucontext) {
  (void)ucontext;
  int saved_errno = errno;
  post_event(EV_SIGNAL, signo, info != NULL ? info->si_code : 0);
  errno = saved_errno;
}

/* -v: the client's diagnostics, from INFO up (-vv: DEBUG too), as
 * "rlock: <UTC time, ms> <LEVEL> <message>". On the client's loop thread;
 * one fprintf per line, which stdio keeps whole. */
static void on_diag(rlock_client *client, rlock_diag_level level,
                    const char *message, void *data) {
  (void)client;
  if ((int)level > (int)(intptr_t)data)
    return;
  struct timespec ts;
  struct tm tm;
  char stamp[32] = "";
  if (clock_gettime(CLOCK_REALTIME, &ts) == 0 &&
      gmtime_r(&ts.tv_sec, &tm) != NULL) {
    size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof stamp - n, ".%03dZ",
             (int)(ts.tv_nsec / 1000000));
  }
  char *shown = cli_text_dup(message, strlen(message));
  fprintf(stderr, CLI_PROG ": %s %s %s\n", stamp,
          rlock_diag_level_name(level), shown != NULL ? shown : "?");
  free(shown);
}

/* On the client's loop thread: must not block. */
static void on_lock_lost(const char *name, const char *owner, void *data) {
  (void)name;
  (void)owner;
  (void)data;
  post_event(EV_LOST, 0, 0);
}

static bool read_event(event *ev) {
  ssize_t n;
  do {
    n = read(g_event_rd, ev, sizeof *ev);
  } while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof *ev;
}

/* ---- the holder thread ---- */

typedef struct holder {
  rlock_client *client;
  rlock *lock;
  rlock_permit_semaphore *sem; /* --permits: instead of lock */
  rlock *ml;                   /* -m: a MultiLock instead of lock */
  int64_t permits;             /* --permits N */
  int64_t take;                /* --take K (>= 1) */
  int64_t renew_ms;            /* --permits: update the lease this often
                                  (0: never, a fixed -l lease) */
  cli_kind kind;
  int64_t wait_ms, lease_ms;
  pthread_t thread;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  /* under mutex */
  bool release_requested;
  bool abort_wait;  /* the client is closed (a signal while waiting): no
                       call may start */
  /* the lock's owner; --permits: the permit ids, comma-separated */
  char owner[(RLOCK_PERMIT_ID_LEN + 1) * RLOCK_PERMIT_IDS_MAX];
  int64_t acquired_at_ms;
  int64_t token;    /* --fenced: the fencing token of the acquisition */
  char detail[512]; /* rlock_last_error() of the last failed call */
} holder;

static void holder_set_detail(holder *h, int rc) {
  pthread_mutex_lock(&h->mutex);
  snprintf(h->detail, sizeof h->detail, "%s",
           rc < 0 ? rlock_last_error() : "");
  pthread_mutex_unlock(&h->mutex);
}

/* --permits: sets NAME to N permits if absent, warns when it has another
 * size: available + taken (expired permits, not yet returned, count as
 * taken), both read in one atomic script (rlock_client_info). Two reads in
 * two round trips (available_permits, then acquired_permits) saw a permit
 * move between them and warned of a wrong size (issue 35). */
static int permits_prepare(holder *h, const char *name) {
  int rc = rlock_permit_semaphore_try_set_permits(h->sem, h->permits);
  if (rc < 0)
    return rc;
  if (rc == 1)
    return 0;
  rlock_info info;
  rlock_info_init(&info);
  rc = rlock_client_info(h->client, name, &info);
  if (rc < 0)
    return rc;
  if (info.kind == RLOCK_INFO_PERMIT_SEMAPHORE ||
      info.kind == RLOCK_INFO_COUNT) {
    int64_t avail = info.count, taken = (int64_t)info.permits_total;
    if (avail + taken != h->permits)
      cli_err("warning: the semaphore '%s' has %" PRId64 " permits (%" PRId64
              " available, %" PRId64 " taken), not the %" PRId64
              " of --permits; going on with its %" PRId64,
              name, avail + taken, avail, taken, h->permits, avail + taken);
  }
  rlock_info_free(&info);
  return 0;
}

/* --permits: gives the take permits back, all at once; when one of them
 * is gone (its lease ran out) the others one by one, and RLOCK_ENOTOWNER
 * tells that one was lost. */
static int permits_release(holder *h, char (*ids)[RLOCK_PERMIT_ID_LEN + 1],
                           const char **list) {
  for (int64_t i = 0; i < h->take; i++)
    list[i] = ids[i];
  int64_t n = rlock_permit_semaphore_try_release_n(h->sem, list,
                                                   (size_t)h->take);
  if (n != 0)
    return n < 0 ? (int)n : 0;
  for (int64_t i = 0; i < h->take; i++)
    rlock_permit_semaphore_try_release(h->sem, ids[i]);
  return RLOCK_ENOTOWNER;
}

/* --permits: holds the take permits until told to release them, renewing
 * their leases every renew_ms; a permit found gone is reported as a lost
 * lock. */
static void *holder_permit(holder *h, const char *name) {
  char(*ids)[RLOCK_PERMIT_ID_LEN + 1] = calloc((size_t)h->take, sizeof *ids);
  const char **list = calloc((size_t)h->take, sizeof *list);
  int rc = ids == NULL || list == NULL ? RLOCK_ENOMEM
                                       : permits_prepare(h, name);
  if (rc == 0)
    rc = rlock_permit_semaphore_try_acquire_n(h->sem, h->take, h->wait_ms,
                                              h->lease_ms, ids);
  int64_t now = cli_now_ms();
  holder_set_detail(h, rc);
  pthread_mutex_lock(&h->mutex);
  h->acquired_at_ms = now;
  h->owner[0] = '\0';
  for (int64_t i = 0; rc == 1 && i < h->take; i++)
    snprintf(h->owner + strlen(h->owner), sizeof h->owner - strlen(h->owner),
             "%s%s", i > 0 ? "," : "", ids[i]);
  pthread_mutex_unlock(&h->mutex);
  post_event(EV_ACQUIRED, 0, rc);
  if (rc != 1) {
    free(ids);
    free(list);
    return NULL;
  }

  bool lost = false;
  int64_t next = now + h->renew_ms;
  pthread_mutex_lock(&h->mutex);
  while (!h->release_requested) {
    if (h->renew_ms <= 0 || lost) {
      pthread_cond_wait(&h->cond, &h->mutex);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t wait = next - cli_now_ms();
    if (wait > 0) {
      ts.tv_sec += wait / 1000;
      ts.tv_nsec += (wait % 1000) * 1000000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&h->cond, &h->mutex, &ts);
      continue;
    }
    pthread_mutex_unlock(&h->mutex);
    for (int64_t i = 0; i < h->take && !lost; i++) {
      int urc =
          rlock_permit_semaphore_update_lease(h->sem, ids[i], h->lease_ms);
      if (urc == 0) {
        lost = true;
        post_event(EV_LOST, 0, 0);
      }
    }
    /* an error (Redis unreachable...): try again next period */
    next = cli_now_ms() + h->renew_ms;
    pthread_mutex_lock(&h->mutex);
  }
  pthread_mutex_unlock(&h->mutex);
  rc = permits_release(h, ids, list);
  free(ids);
  free(list);
  holder_set_detail(h, rc);
  post_event(EV_RELEASED, 0, rc == RLOCK_ENOTOWNER ? RLOCK_ELOCKLOST : rc);
  return NULL;
}

static const char *g_name; /* the lock NAME, for the holder's messages */

/* How often a waiter tries again while NAME holds another kind of lock:
 * that kind's unlock message goes to a channel this kind does not listen
 * on, so it is polled. */
#define KIND_POLL_MS 200

/* One try of the lock, waiting up to wait_ms (< 0: forever); RLOCK_ECLOSED
 * without a call once the client is closed. The check and the call's
 * start are under the mutex that on_forward_signal closes the client
 * under, so no call starts on a closed client. */
static int holder_try(holder *h, int64_t wait_ms, int64_t *token) {
  pthread_mutex_lock(&h->mutex);
  bool closed = h->abort_wait;
  pthread_mutex_unlock(&h->mutex);
  if (closed)
    return RLOCK_ECLOSED;
  if (h->ml == NULL && h->kind == CLI_KIND_FENCED)
    return rlock_try_lock_fenced(h->lock, wait_ms, h->lease_ms, token);
  return rlock_try_lock(h->ml != NULL ? h->ml : h->lock, wait_ms, h->lease_ms);
}

/* The acquire, within -w. NAME holding another kind of lock (RLOCK_EKIND:
 * a read/write lock's hash for the plain lock, or the other way round) is
 * a busy lock, as Java's getLock() sees it: tried again every
 * KIND_POLL_MS until the wait ends (0: busy). So `rlock -x NAME` and
 * `rlock NAME` in two cron jobs exclude and wait for each other; neither
 * fails only on the night they overlap (issue 35, docs/cli.md). */
static int holder_acquire(holder *h, int64_t *token) {
  int64_t deadline = h->wait_ms < 0 ? -1 : cli_now_ms() + h->wait_ms;
  int rc = holder_try(h, h->wait_ms, token);
  while (rc == RLOCK_EKIND) {
    int64_t left = deadline < 0 ? KIND_POLL_MS : deadline - cli_now_ms();
    if (left <= 0)
      return 0;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    int64_t nap = left < KIND_POLL_MS ? left : KIND_POLL_MS;
    until.tv_sec += nap / 1000;
    until.tv_nsec += (long)(nap % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&h->mutex);
    while (!h->abort_wait &&
           pthread_cond_timedwait(&h->cond, &h->mutex, &until) == 0)
      ;
    pthread_mutex_unlock(&h->mutex);
    left = deadline < 0 ? -1 : deadline - cli_now_ms();
    rc = holder_try(h, left < 0 && deadline >= 0 ? 0 : left, token);
  }
  return rc;
}

static void *holder_main(void *arg) {
  holder *h = arg;
  if (h->sem != NULL)
    return holder_permit(h, g_name);
  pthread_mutex_lock(&h->mutex);
  snprintf(h->owner, sizeof h->owner, "%s:%" PRIu64,
           rlock_client_id(h->client), rlock_thread_id());
  pthread_mutex_unlock(&h->mutex);

  int64_t token = 0;
  int rc = holder_acquire(h, &token);
  int64_t now = cli_now_ms();
  holder_set_detail(h, rc);
  pthread_mutex_lock(&h->mutex);
  h->acquired_at_ms = now;
  h->token = token;
  pthread_mutex_unlock(&h->mutex);
  post_event(EV_ACQUIRED, 0, rc);
  if (rc != 1)
    return NULL;

  pthread_mutex_lock(&h->mutex);
  while (!h->release_requested)
    pthread_cond_wait(&h->cond, &h->mutex);
  pthread_mutex_unlock(&h->mutex);
  rc = rlock_unlock(h->ml != NULL ? h->ml : h->lock);
  if (h->ml != NULL && rc == RLOCK_ENOTOWNER)
    rc = RLOCK_ELOCKLOST; /* a member expired or was deleted meanwhile */
  holder_set_detail(h, rc);
  post_event(EV_RELEASED, 0, rc);
  return NULL;
}

static void holder_request_release(holder *h) {
  pthread_mutex_lock(&h->mutex);
  h->release_requested = true;
  pthread_cond_signal(&h->cond);
  pthread_mutex_unlock(&h->mutex);
}

/* ---- the run ---- */

typedef enum phase {
  PH_WAITING,   /* the holder is acquiring */
  PH_RUNNING,   /* COMMAND runs, the lock is held */
  PH_RELEASING, /* COMMAND ended, the holder is releasing */
  PH_DONE
} phase;

typedef struct run {
  const cli_run_opts *o;
  rlock_client *client;
  holder h;
  bool holder_started;
  phase phase;
  int exit_code;
  int64_t started_ms;

  /* signals */
  sigset_t orig_mask;
  struct sigaction saved_forward[N_FORWARD];
  bool handled_forward[N_FORWARD];
  struct sigaction saved_chld;
  int abort_signal; /* a signal that interrupted the wait */

  /* descriptors open at start (COMMAND inherits those, and no others) */
  int *start_fds;
  size_t n_start_fds;

  /* the child */
  pid_t child;
  bool lost;
  int64_t lease_deadline_ms; /* 0: none */
  int64_t kill_deadline_ms;  /* 0: none */
} run;

static int fd_compare(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The open descriptors above stderr, sorted, from /proc/self/fd. Returns
 * false where /proc is not available (then nothing is marked later). */
static bool list_fds(int **out, size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL)
    return false;
  size_t n = 0, cap = 0;
  int *fds = NULL;
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    char *end = NULL;
    long fd = strtol(de->d_name, &end, 10);
    if (end == de->d_name || *end != '\0' || fd <= 2 || fd == dirfd(dir))
      continue;
    if (n == cap) {
      size_t new_cap = cap ? 2 * cap : 32;
      int *grown = realloc(fds, new_cap * sizeof *fds);
      if (grown == NULL)
        break;
      fds = grown;
      cap = new_cap;
    }
    fds[n++] = (int)fd;
  }
  closedir(dir);
  if (n > 0)
    qsort(fds, n, sizeof *fds, fd_compare);
  *out = fds;
  *n_out = n;
  return true;
}

/* hiredis opens its sockets without FD_CLOEXEC, so COMMAND would inherit
 * rlock's Redis connections (and keep them open if it outlives rlock).
 * Mark every descriptor opened since rlock started close-on-exec; those
 * the user handed to rlock (e.g. `3>file`) are still passed on, as flock
 * does. */
static void mark_new_fds_cloexec(const run *r) {
  int *now;
  size_t n_now;
  if (!list_fds(&now, &n_now))
    return;
  for (size_t i = 0; i < n_now; i++) {
    int fd = now[i];
    if (r->n_start_fds > 0 &&
        bsearch(&fd, r->start_fds, r->n_start_fds, sizeof fd, fd_compare))
      continue;
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC))
      fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  free(now);
}

static void handled_set(sigset_t *set, bool with_pipe) {
  sigemptyset(set);
  for (size_t i = 0; i < N_FORWARD; i++)
    sigaddset(set, forward_signals[i]);
  sigaddset(set, SIGCHLD);
  if (with_pipe)
    sigaddset(set, SIGPIPE);
}

/* Blocks the handled signals (and SIGPIPE) in the calling thread, which
 * every thread created afterwards inherits, and installs the handlers.
 * A signal rlock was started with ignored (nohup, `trap '' INT`) stays
 * ignored and is not forwarded: COMMAND inherits the ignoring. */
static int signals_install(run *r) {
  sigset_t set;
  handled_set(&set, true);
  int rc = pthread_sigmask(SIG_BLOCK, &set, &r->orig_mask);
  if (rc != 0) {
    cli_err("pthread_sigmask: %s", strerror(rc));
    return CLI_EX_OSERR;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < N_FORWARD; i++) {
    int sig = forward_signals[i];
    sigaction(sig, NULL, &r->saved_forward[i]);
    r->handled_forward[i] = r->saved_forward[i].sa_handler != SIG_IGN;
    if (r->handled_forward[i] && sigaction(sig, &sa, NULL) != 0) {
      cli_err("sigaction: %s", strerror(errno));
      return CLI_EX_OSERR;
    }
  }
  sa.sa_flags |= SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &sa, &r->saved_chld) != 0) {
    cli_err("sigaction: %s", strerror(errno));
    return CLI_EX_OSERR;
  }
  return 0;
}

/* In the main thread only, once the other threads exist. */
static void signals_unblock_main(void) {
  sigset_t set;
  handled_set(&set, false);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* Environment of COMMAND: ours plus RLOCK_NAME and RLOCK_OWNER, and with
 * --fenced RLOCK_TOKEN (`token` not NULL; an RLOCK_TOKEN rlock inherited
 * is passed on unchanged otherwise). Built before fork, because the child
 * of a multi-threaded process may only call async-signal-safe functions
 * (no malloc, no setenv). Ours are the last entries. */
static const char *const our_vars[] = {"RLOCK_NAME=", "RLOCK_OWNER=",
                                       "RLOCK_TOKEN="};

static char **child_environment(const char *name, const char *owner,
                                const char *token) {
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  const char *values[3] = {name, owner, token};
  size_t n_ours = token != NULL ? 3 : 2;
  char **envp = calloc(n + n_ours + 1, sizeof *envp);
  char *vars[3] = {NULL, NULL, NULL};
  bool ok = envp != NULL;
  for (size_t v = 0; ok && v < n_ours; v++) {
    size_t len = strlen(our_vars[v]) + strlen(values[v]) + 1;
    vars[v] = malloc(len);
    if (vars[v] == NULL)
      ok = false;
    else
      snprintf(vars[v], len, "%s%s", our_vars[v], values[v]);
  }
  if (!ok) {
    free(envp);
    for (size_t v = 0; v < 3; v++)
      free(vars[v]);
    return NULL;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    bool replaced = false;
    for (size_t v = 0; v < n_ours; v++)
      replaced = replaced || strncmp(environ[i], our_vars[v],
                                     strlen(our_vars[v])) == 0;
    if (!replaced)
      envp[k++] = environ[i];
  }
  for (size_t v = 0; v < n_ours; v++)
    envp[k++] = vars[v];
  envp[k] = NULL;
  return envp;
}

static void child_environment_free(char **envp, size_t n_ours) {
  if (envp == NULL)
    return;
  size_t n = 0;
  while (envp[n] != NULL)
    n++;
  /* the last n_ours are ours */
  for (size_t v = 0; v < n_ours; v++)
    free(envp[n - 1 - v]);
  free(envp);
}

/* The child, between fork and exec: async-signal-safe calls only. */
_Noreturn static void child_exec(const run *r, char **envp, int err_fd,
                       pid_t parent) {
  for (size_t i = 0; i < N_FORWARD; i++) {
    if (r->handled_forward[i])
      sigaction(forward_signals[i], &r->saved_forward[i], NULL);
  }
  sigaction(SIGCHLD, &r->saved_chld, NULL);
  if (!r->o->orphan_ok) {
    /* If rlock dies (SIGKILL, the OOM killer, a crash), nothing renews or
     * releases the lock any more and another machine may take it once it
     * expires: COMMAND must not go on in its name (issue 24). The kernel
     * sends the signal when the thread that forked exits, and that is the
     * main thread, which lives as long as rlock. SIGTERM, as for a lost
     * lock with --on-lost=kill: COMMAND may clean up within what is left
     * of the lease. If rlock died before the prctl, getppid() already
     * names another process and COMMAND is not started. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
      _exit(CLI_EX_LOCKLOST);
  }
  sigprocmask(SIG_SETMASK, &r->orig_mask, NULL);
  environ = envp;
  execvp(r->o->command[0], r->o->command);
  int err = errno;
  ssize_t n;
  do {
    n = write(err_fd, &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  _exit(err == ENOENT ? CLI_EX_NOTFOUND : CLI_EX_NOEXEC);
}

/* Starts COMMAND. Returns 0, or the exit code when it could not be run
 * (its message printed). */
static int spawn_child(run *r, const char *owner, const char *token) {
  char **envp = child_environment(r->o->name, owner, token);
  size_t n_ours = token != NULL ? 3 : 2;
  if (envp == NULL) {
    cli_err("out of memory");
    return CLI_EX_OSERR;
  }
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    cli_err("pipe: %s", strerror(errno));
    child_environment_free(envp, n_ours);
    return CLI_EX_OSERR;
  }
  mark_new_fds_cloexec(r);
  /* No handler may run in the child before it has restored the
   * dispositions: block the handled signals across fork. */
  sigset_t set, prev;
  handled_set(&set, false);
  pthread_sigmask(SIG_BLOCK, &set, &prev);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0)
    child_exec(r, envp, err_pipe[1], parent);
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
  close(err_pipe[1]);
  if (pid < 0) {
    close(err_pipe[0]);
    child_environment_free(envp, n_ours);
    cli_err("fork: %s", strerror(fork_errno));
    return CLI_EX_OSERR;
  }
  /* exec closes err_pipe (EOF: it ran) or the child reports its errno. */
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(err_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  child_environment_free(envp, n_ours);
  if (n == (ssize_t)sizeof exec_errno) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    cli_err("cannot run '%s': %s", r->o->command[0], strerror(exec_errno));
    return exec_errno == ENOENT ? CLI_EX_NOTFOUND : CLI_EX_NOEXEC;
  }
  r->child = pid;
  return 0;
}

static void request_release(run *r) {
  r->phase = PH_RELEASING;
  holder_request_release(&r->h);
}

static void lock_lost(run *r, const char *why) {
  if (r->phase != PH_RUNNING || r->lost)
    return;
  r->lost = true;
  r->lease_deadline_ms = 0;
  if (r->o->on_lost == CLI_ON_LOST_WARN) {
    cli_err("warning: lost the lock '%s' (%s); COMMAND goes on without it",
            r->o->name, why);
    return;
  }
  cli_err("lost the lock '%s' (%s); stopping COMMAND", r->o->name, why);
  kill(r->child, SIGTERM);
  r->kill_deadline_ms = cli_now_ms() + r->o->kill_after_ms;
}

/* -v on a busy lock: who holds it, as `rlock status` reads it (one read,
 * only when giving up). -m and --permits: not said (several names, or
 * permit ids rather than owners). */
static void say_holders(run *r) {
  if (r->client == NULL || r->o->n_names > 0 || r->h.sem != NULL)
    return;
  rlock_info info;
  rlock_info_init(&info);
  if (rlock_client_info(r->client, r->o->name, &info) != 0)
    return;
  for (size_t i = 0; i < info.holders_n; i++) {
    const rlock_info_entry *e = &info.holders[i];
    if (e->count == RLOCK_INFO_NOT_A_COUNT)
      continue;
    char *owner = cli_text_dup(e->key, e->key_len - (e->writer ? 6 : 0));
    char ttl[48] = "";
    if (info.ttl_ms >= 0)
      snprintf(ttl, sizeof ttl, ", expires in %" PRId64 " ms", info.ttl_ms);
    /* already escaped: printed as is, not through cli_err */
    fprintf(stderr, CLI_PROG ": held by %s (%s, hold count %" PRId64 ")%s\n",
            owner != NULL ? owner : "?",
            info.mode == NULL ? "lock"
            : e->writer       ? "writer of a read/write lock"
                              : "reader of a read/write lock",
            e->count, ttl);
    static cli_whois w;
    w.client = r->client;
    const cli_whois_entry *who = cli_whois_get(&w, r->o->name, e->key,
                                               e->key_len);
    if (who != NULL) {
      fputs(CLI_PROG ":   ", stderr);
      cli_whois_text(stderr, who);
      fputc('\n', stderr);
    }
    free(owner);
  }
  rlock_info_free(&info);
}

static void on_acquired(run *r, int rc) {
  if (r->abort_signal != 0) {
    /* The client was closed to interrupt the wait. If the lock was taken
     * just before, nobody can release it through the closed client: delete
     * it directly (only if still ours), so it does not sit there for a
     * whole watchdog lease. RLOCK_ECLOSED does not prove it was not taken:
     * the acquire script may have run in Redis with its reply cut off by
     * the close. */
    if (rc != 0 && r->h.sem == NULL) {
      pthread_mutex_lock(&r->h.mutex);
      char owner[sizeof r->h.owner];
      memcpy(owner, r->h.owner, sizeof owner);
      pthread_mutex_unlock(&r->h.mutex);
      for (size_t i = 0; i < (r->o->n_names > 0 ? r->o->n_names : 1); i++)
        cli_release_orphan(r->o->uri, &r->o->tls, &r->o->sentinel,
                           r->o->kind,
                           r->o->n_names > 0 ? r->o->names[i] : r->o->name,
                           owner);
    }
    r->exit_code = 128 + r->abort_signal;
    r->phase = PH_DONE;
    return;
  }
  if (rc == 0) {
    if (r->o->verbose) {
      if (r->o->wait_ms == 0)
        cli_err("'%s' is busy", r->o->name);
      else
        cli_err("timed out after %" PRId64 " ms waiting for '%s'",
                cli_now_ms() - r->started_ms, r->o->name);
      say_holders(r);
    }
    r->exit_code = r->o->conflict_exit_code;
    r->phase = PH_DONE;
    return;
  }
  if (rc < 0) {
    pthread_mutex_lock(&r->h.mutex);
    char detail[sizeof r->h.detail];
    memcpy(detail, r->h.detail, sizeof detail);
    pthread_mutex_unlock(&r->h.mutex);
    if (rc == RLOCK_EKIND) {
      cli_err_kind(r->o->kind, r->o->name);
      if (r->o->verbose && detail[0] != '\0')
        cli_err("the server said: %s", detail);
    } else if (detail[0] != '\0' && strcmp(detail, rlock_strerror(rc)) != 0)
      cli_err("cannot lock '%s': %s (%s)", r->o->name, rlock_strerror(rc),
              detail);
    else
      cli_err("cannot lock '%s': %s", r->o->name, rlock_strerror(rc));
    r->exit_code = cli_exit_for(rc);
    r->phase = PH_DONE;
    return;
  }
  pthread_mutex_lock(&r->h.mutex);
  char owner[sizeof r->h.owner];
  memcpy(owner, r->h.owner, sizeof owner);
  int64_t acquired_at = r->h.acquired_at_ms;
  int64_t token = r->h.token;
  pthread_mutex_unlock(&r->h.mutex);
  char token_text[24];
  snprintf(token_text, sizeof token_text, "%" PRId64, token);
  if (r->o->verbose) {
    if (r->h.sem != NULL && r->h.take > 1)
      cli_err("acquired %" PRId64 " permits of '%s' (ids %s) after %" PRId64
              " ms",
              r->h.take, r->o->name, owner, acquired_at - r->started_ms);
    else if (r->h.sem != NULL)
      cli_err("acquired a permit of '%s' (id %s) after %" PRId64 " ms",
              r->o->name, owner, acquired_at - r->started_ms);
    else if (r->o->kind == CLI_KIND_FENCED)
      cli_err("acquired '%s' (fenced lock, token %s) as %s after %" PRId64
              " ms",
              r->o->name, token_text, owner, acquired_at - r->started_ms);
    else if (r->o->kind != CLI_KIND_LOCK)
      cli_err("acquired '%s' (%s%s) as %s after %" PRId64 " ms",
              r->o->name,
              r->h.ml != NULL ? cli_kind_option(r->o->kind)
                              : rlock_kind(r->h.lock),
              r->h.ml != NULL ? "" : " lock", owner,
              acquired_at - r->started_ms);
    else
      cli_err("acquired '%s' as %s after %" PRId64 " ms", r->o->name, owner,
              acquired_at - r->started_ms);
  }
  /* With a lease nothing renews the key: once the lease has passed (timed
   * from the reply, so the server's clock started earlier), it is gone. */
  if (r->o->lease_ms > 0)
    r->lease_deadline_ms = acquired_at + r->o->lease_ms;
  int spawn_rc = spawn_child(
      r, owner, r->o->kind == CLI_KIND_FENCED ? token_text : NULL);
  if (spawn_rc != 0) {
    r->exit_code = spawn_rc;
    request_release(r);
    return;
  }
  r->phase = PH_RUNNING;
}

static void reap_child(run *r) {
  if (r->phase != PH_RUNNING)
    return;
  int status;
  pid_t pid;
  do {
    pid = waitpid(r->child, &status, WNOHANG);
  } while (pid < 0 && errno == EINTR);
  if (pid != r->child)
    return;
  if (WIFEXITED(status))
    r->exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r->exit_code = 128 + WTERMSIG(status);
  else
    r->exit_code = CLI_EX_SOFTWARE;
  /* A lost lock is never a success, whatever --on-lost says: cron and
   * CI must not see COMMAND's 0 for a run that was not alone. */
  if (r->lost) {
    if (r->o->on_lost == CLI_ON_LOST_WARN)
      cli_err("COMMAND ended (%s %d) after the lock '%s' was lost; exit %d",
              WIFSIGNALED(status) ? "signal" : "status",
              WIFSIGNALED(status) ? WTERMSIG(status) : r->exit_code,
              r->o->name, CLI_EX_LOCKLOST);
    r->exit_code = CLI_EX_LOCKLOST;
  }
  r->lease_deadline_ms = 0;
  r->kill_deadline_ms = 0;
  request_release(r);
}

static void on_forward_signal(run *r, int signo, int code) {
  switch (r->phase) {
  case PH_WAITING:
    if (r->abort_signal == 0) {
      r->abort_signal = signo;
      if (r->o->verbose)
        cli_err("interrupted by signal %d while waiting for '%s'", signo,
                r->o->name);
      /* Makes the holder's rlock_try_lock() return RLOCK_ECLOSED now; its
       * EV_ACQUIRED ends the run. Under the holder's mutex with abort_wait
       * set: a holder polling another kind's lock starts no call on the
       * closed client (holder_try). */
      pthread_mutex_lock(&r->h.mutex);
      r->h.abort_wait = true;
      pthread_cond_signal(&r->h.cond);
      rlock_client_free(r->client);
      r->client = NULL;
      pthread_mutex_unlock(&r->h.mutex);
    }
    break;
  case PH_RUNNING:
    /* A terminal sends ^C, ^\ and hang-ups to its whole foreground process
     * group, which COMMAND is in too: passing it on would deliver it
     * twice. */
    if (code != SI_KERNEL)
      kill(r->child, signo);
    break;
  case PH_RELEASING:
  case PH_DONE:
    break;
  }
}

static void on_released(run *r, int rc) {
  if (r->phase != PH_RELEASING)
    return;
  r->phase = PH_DONE;
  if (rc >= 0) {
    if (r->o->verbose)
      cli_err("released '%s'", r->o->name);
    return;
  }
  if (rc == RLOCK_ELOCKLOST) {
    if (!r->lost && r->child > 0) {
      /* gone before COMMAND ended, found only at the release */
      cli_err("the lock '%s' expired or was deleted before COMMAND "
              "finished (COMMAND's status %d); exit %d",
              r->o->name, r->exit_code, CLI_EX_LOCKLOST);
      r->exit_code = CLI_EX_LOCKLOST;
    }
    return;
  }
  pthread_mutex_lock(&r->h.mutex);
  char detail[sizeof r->h.detail];
  memcpy(detail, r->h.detail, sizeof detail);
  pthread_mutex_unlock(&r->h.mutex);
  bool has_detail = detail[0] != '\0' && strcmp(detail, rlock_strerror(rc));
  int64_t expires = r->o->lease_ms > 0 ? r->o->lease_ms
                    : r->o->watchdog_ms > 0 ? r->o->watchdog_ms
                                            : 30000;
  cli_err("warning: cannot release the lock '%s': %s%s%s%s; it expires "
          "within %" PRId64 " ms",
          r->o->name, rlock_strerror(rc), has_detail ? " (" : "",
          has_detail ? detail : "", has_detail ? ")" : "", expires);
}

static void handle_event(run *r, const event *ev) {
  switch (ev->kind) {
  case EV_SIGNAL:
    if (ev->signo == SIGCHLD)
      reap_child(r);
    else
      on_forward_signal(r, ev->signo, ev->code);
    break;
  case EV_ACQUIRED:
    if (r->phase == PH_WAITING)
      on_acquired(r, ev->code);
    break;
  case EV_LOST:
    lock_lost(r, "it was deleted or expired in Redis");
    break;
  case EV_RELEASED:
    on_released(r, ev->code);
    break;
  default:
    break;
  }
}

static void check_timers(run *r) {
  if (r->phase != PH_RUNNING)
    return;
  int64_t now = cli_now_ms();
  if (r->lease_deadline_ms != 0 && now >= r->lease_deadline_ms) {
    char why[64];
    snprintf(why, sizeof why, "its lease of %" PRId64 " ms ran out",
             r->o->lease_ms);
    lock_lost(r, why);
  }
  if (r->kill_deadline_ms != 0 && now >= r->kill_deadline_ms) {
    cli_err("COMMAND still runs %" PRId64 " ms after SIGTERM; sending SIGKILL",
            r->o->kill_after_ms);
    kill(r->child, SIGKILL);
    r->kill_deadline_ms = 0;
  }
}

static int poll_timeout(const run *r) {
  if (r->phase != PH_RUNNING)
    return -1;
  int64_t next = 0;
  if (r->lease_deadline_ms != 0)
    next = r->lease_deadline_ms;
  if (r->kill_deadline_ms != 0 && (next == 0 || r->kill_deadline_ms < next))
    next = r->kill_deadline_ms;
  if (next == 0)
    return -1;
  int64_t wait = next - cli_now_ms();
  if (wait < 0)
    return 0;
  return wait > 60000 ? 60000 : (int)wait;
}

static int open_event_pipe(void) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    cli_err("pipe: %s", strerror(errno));
    return CLI_EX_OSERR;
  }
  g_event_rd = fds[0];
  g_event_wr = fds[1];
  return 0;
}

/* -m: a MultiLock over a handle of the kind for each name. */
static int multi_get(rlock_client *client, const cli_run_opts *o, rlock **ml) {
  rlock **m = calloc(o->n_names, sizeof(rlock *));
  int rc = m == NULL ? RLOCK_ENOMEM : 0;
  size_t got = 0;
  while (rc == 0 && got < o->n_names) {
    rc = cli_kind_get(client, o->kind, o->names[got], &m[got]);
    got += rc == 0;
  }
  if (rc == 0)
    rc = rlock_new_multilock(m, o->n_names, ml);
  for (size_t i = 0; i < got; i++)
    rlock_free(m[i]); /* the MultiLock keeps its own references */
  free(m);
  return rc;
}

static int start(run *r) {
  const cli_run_opts *o = r->o;
  rlock_options opts;
  rlock_options_init(&opts);
  opts.uri = o->uri;
  cli_tls_apply(&o->tls, &opts);
  cli_sentinel_apply(&o->sentinel, &opts);
  if (o->no_replica_sync)
    opts.replica_sync = 0;
  if (o->replica_sync_timeout_ms > 0)
    opts.replica_sync_timeout_ms = o->replica_sync_timeout_ms;
  if (o->watchdog_ms > 0)
    opts.watchdog_timeout_ms = o->watchdog_ms;
  opts.on_lock_lost = on_lock_lost;
  if (o->verbose > 0) {
    opts.on_diag = on_diag;
    opts.on_diag_data = (void *)(intptr_t)(o->verbose > 1 ? RLOCK_DIAG_DEBUG
                                                          : RLOCK_DIAG_INFO);
  }
  int rc = o->redlock != NULL
               ? cli_redlock_open(o, &opts, &r->client, &r->h.ml)
               : rlock_client_new(&r->client, &opts);
  if (rc != 0)
    return o->redlock != NULL ? rc : cli_open_failed(rc);
  if (o->permits > 0) {
    rc = rlock_permit_semaphore_new(r->client, o->name, &r->h.sem);
    r->h.permits = o->permits;
    r->h.take = o->take > 0 ? o->take : 1;
    if (o->lease_ms > 0) {
      r->h.lease_ms = o->lease_ms;
    } else {
      r->h.lease_ms = o->watchdog_ms > 0 ? o->watchdog_ms : 30000;
      r->h.renew_ms = r->h.lease_ms / 3;
    }
  } else if (o->n_names > 0) {
    rc = multi_get(r->client, o, &r->h.ml);
    r->h.lease_ms = o->lease_ms;
  } else if (o->redlock != NULL) {
    r->h.lease_ms = o->lease_ms; /* made with its clients above */
  } else {
    rc = cli_kind_get(r->client, o->kind, o->name, &r->h.lock);
    r->h.lease_ms = o->lease_ms;
  }
  if (rc != 0) {
    cli_err_rlock(rc, "invalid lock name");
    return cli_exit_for(rc);
  }
  r->h.client = r->client;
  r->h.kind = o->kind;
  r->h.wait_ms = o->wait_ms;
  g_name = o->name;
  rc = pthread_create(&r->h.thread, NULL, holder_main, &r->h);
  if (rc != 0) {
    cli_err("cannot start a thread: %s", strerror(rc));
    return CLI_EX_OSERR;
  }
  r->holder_started = true;
  return 0;
}

int cli_run(const cli_run_opts *o) {
  run r;
  memset(&r, 0, sizeof r);
  r.o = o;
  r.phase = PH_WAITING;
  r.started_ms = cli_now_ms();
  pthread_mutex_init(&r.h.mutex, NULL);
  pthread_condattr_t cattr;
  pthread_condattr_init(&cattr);
  pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
  pthread_cond_init(&r.h.cond, &cattr);
  pthread_condattr_destroy(&cattr);
  list_fds(&r.start_fds, &r.n_start_fds);

  int rc = open_event_pipe();
  if (rc == 0)
    rc = signals_install(&r);
  if (rc == 0)
    rc = start(&r);
  if (rc != 0) {
    r.exit_code = rc;
    r.phase = PH_DONE;
  } else {
    signals_unblock_main();
  }

  while (r.phase != PH_DONE) {
    struct pollfd pfd = {.fd = g_event_rd, .events = POLLIN, .revents = 0};
    if (poll(&pfd, 1, poll_timeout(&r)) < 0 && errno != EINTR) {
      cli_err("poll: %s", strerror(errno));
      r.exit_code = CLI_EX_OSERR;
      break;
    }
    event ev;
    while (r.phase != PH_DONE && read_event(&ev))
      handle_event(&r, &ev);
    check_timers(&r);
  }

  /* Closing first ends a wait still in progress (only after a failure of
   * poll itself); otherwise the holder has finished its work. */
  if (r.holder_started) {
    if (r.phase != PH_DONE && r.client != NULL) {
      rlock_client_free(r.client);
      r.client = NULL;
    }
    holder_request_release(&r.h);
    pthread_join(r.h.thread, NULL);
  }
  rlock_free(r.h.lock);
  rlock_free(r.h.ml);
  rlock_permit_semaphore_free(r.h.sem);
  rlock_client_free(r.client);
  cli_redlock_close();
  pthread_cond_destroy(&r.h.cond);
  pthread_mutex_destroy(&r.h.mutex);
  free(r.start_fds);
  return r.exit_code;
}
