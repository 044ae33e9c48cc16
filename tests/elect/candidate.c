/*
 * elect-candidate: one candidate process of the elect suite, on the public
 * API only. It campaigns for NAME with VALUE, and while it leads it "acts"
 * every 20 ms - only after rlock_election_leading() said yes - and prints
 * what it did, with times on the CLOCK_MONOTONIC millisecond clock
 * (rlock_now_ms(), the same in every process of the machine):
 *
 *   READY
 *   WON <term> <now>             the campaign was won
 *   ACT <term> <now> <until>     acting as leader, guaranteed until <until>
 *   NOTLEADER <term> <now>       rlock_election_leading() said no
 *   END <term> <LOST|RESIGNED> <now>   the term's end (callback, loop thread)
 *   RESIGNING <term> <now>       SIGUSR1 asked for a resign: it stops acting
 *   RESIGN <rc> <now>            the resign's result
 *   GUARDED <term> <rc> <ERR> <now>   the result of a GUARD command
 *
 * Then it campaigns again. Exits on SIGTERM or stdin EOF.
 *
 * On stdin, the line "GUARD <guard> <key>" makes it write VALUE to <key>
 * through the guard <guard> (rlock_guard_write, RLOCK_GUARD_SET) with the
 * term it won last - whether or not it still leads - as the token of the
 * election name's fenced lock: what a leader that paused between its check
 * and its write would do. <ERR> is OK or the error's name.
 *
 *   elect-candidate URI NAME VALUE WATCHDOG_MS
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rlock.h"

static volatile sig_atomic_t want_resign, want_quit;
static rlock_client *g_client;
static const char *g_name, *g_value;
static _Atomic int64_t g_last_term; /* the term won last; 0 before */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&out_mu);
  vprintf(fmt, ap);
  fflush(stdout);
  pthread_mutex_unlock(&out_mu);
  va_end(ap);
}

static void on_usr1(int sig) {
  (void)sig;
  want_resign = 1;
}
static void on_term(int sig) {
  (void)sig;
  want_quit = 1;
}

static void on_end(rlock_election *e, int status, int64_t term, void *data) {
  (void)e;
  (void)data;
  say("END %" PRId64 " %s %" PRId64 "\n", term,
      status == RLOCK_ELECTION_RESIGNED ? "RESIGNED" : "LOST", rlock_now_ms());
}

static void guarded_write(const char *guard_name, const char *key) {
  int64_t term = atomic_load(&g_last_term);
  rlock_guard *g = NULL;
  int rc = rlock_guard_new(g_client, guard_name, &g);
  if (rc == 0) {
    rlock_guarded_write w;
    rlock_guarded_write_init(&w);
    w.lock_name = g_name; /* the term is this fenced lock's token */
    w.token = term;
    w.op = RLOCK_GUARD_SET;
    w.key = key;
    w.value = g_value;
    rc = rlock_guard_write(g, &w, NULL);
    rlock_guard_free(g);
  }
  say("GUARDED %" PRId64 " %d %s %" PRId64 "\n", term, rc,
      rc == 0 ? "OK" : rlock_err_name(rc), rlock_now_ms());
}

static void *stdin_watch(void *arg) {
  (void)arg;
  char buf[512], guard_name[200], key[200];
  while (fgets(buf, sizeof(buf), stdin) != NULL) {
    if (sscanf(buf, "GUARD %199s %199s", guard_name, key) == 2)
      guarded_write(guard_name, key);
  }
  want_quit = 1;
  return NULL;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: elect-candidate URI NAME VALUE WATCHDOG_MS\n");
    return 2;
  }
  signal(SIGUSR1, on_usr1);
  signal(SIGTERM, on_term);
  rlock_options o;
  rlock_options_init(&o);
  o.uri = argv[1];
  o.watchdog_timeout_ms = atoll(argv[4]);
  o.command_timeout_ms = 1000;
  o.retry_interval_ms = 200;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc != 0) {
    fprintf(stderr, "open: %s (%s)\n", rlock_strerror(rc), rlock_last_error());
    return 1;
  }
  g_client = c;
  g_name = argv[2];
  g_value = argv[3];
  rlock_election *e = NULL;
  rc = rlock_election_new(c, argv[2], &e);
  if (rc != 0) {
    fprintf(stderr, "new: %s\n", rlock_strerror(rc));
    return 1;
  }
  pthread_t t;
  pthread_create(&t, NULL, stdin_watch, NULL);
  pthread_detach(t);
  say("READY\n");
  while (!want_quit) {
    int64_t term = 0;
    rc = rlock_election_campaign(e, argv[3], strlen(argv[3]), 200, on_end,
                                 NULL, &term);
    if (rc == 0)
      continue;
    if (rc < 0) {
      say("ERROR campaign %s %s\n", rlock_err_name(rc), rlock_last_error());
      sleep_ms(100);
      continue;
    }
    atomic_store(&g_last_term, term);
    say("WON %" PRId64 " %" PRId64 "\n", term, rlock_now_ms());
    while (!want_quit) {
      int64_t t2 = 0, until = 0;
      if (rlock_election_leading(e, &t2, &until) != 1) {
        say("NOTLEADER %" PRId64 " %" PRId64 "\n", term, rlock_now_ms());
        break;
      }
      say("ACT %" PRId64 " %" PRId64 " %" PRId64 "\n", t2, rlock_now_ms(),
          until);
      if (want_resign) {
        want_resign = 0;
        say("RESIGNING %" PRId64 " %" PRId64 "\n", t2, rlock_now_ms());
        int r = rlock_election_resign(e);
        say("RESIGN %d %" PRId64 "\n", r, rlock_now_ms());
        sleep_ms(300); /* let the others take it before campaigning again */
        break;
      }
      sleep_ms(20);
    }
  }
  rlock_election_free(e);
  rlock_client_free(c);
  return 0;
}
