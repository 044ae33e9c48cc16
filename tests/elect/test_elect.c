/*
 * The elect suite (issue 38): leader election against a real redis-server,
 * with three candidate processes (elect-candidate) and the real Redisson
 * peer ($RLOCK_REDISSON_PEER, else <repo>/../shared/redisson/peer).
 *
 * Times are CLOCK_MONOTONIC milliseconds (rlock_now_ms()), the same clock
 * in every process here, so a candidate's "guaranteed until" can be set
 * against another's win.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "elect-config.h"
#include "harness.h"
#include "rlock.h"
#include "topo_harness.h"

/* ---- the candidates' reports ---- */

enum {
  EV_WON,
  EV_ACT,
  EV_NOTLEADER,
  EV_END_LOST,
  EV_END_RESIGNED,
  EV_RESIGN,
  EV_RESIGNING,
  EV_GUARDED /* a guarded write's result: the term it used, rc */
};

typedef struct rec {
  int who, type;
  int64_t term, at, until;
  int rc; /* EV_GUARDED: 0 or the RLOCK_E* code */
} rec;

#define MAX_RECS 200000
#define NCAND 3

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static rec *g_recs;
static int g_n;

typedef struct proc {
  pid_t pid;
  int out, in;
  pthread_t reader;
  bool reading;
  int who;
  atomic_bool ready;
  char idline[512];
  /* the Java peer's answers */
  char last[512];
  atomic_int answers;
} proc;

static proc g_c[NCAND];
static proc g_java;

static void add_rc(int who, int type, int64_t term, int64_t at,
                   int64_t until, int rc) {
  pthread_mutex_lock(&g_mu);
  if (g_n < MAX_RECS)
    g_recs[g_n++] = (rec){who, type, term, at, until, rc};
  pthread_mutex_unlock(&g_mu);
}

static void add(int who, int type, int64_t term, int64_t at, int64_t until) {
  add_rc(who, type, term, at, until, 0);
}

static void parse_line(proc *p, char *line) {
  long long a = 0, b = 0, c = 0;
  char word[32];
  if (strcmp(line, "READY") == 0) {
    atomic_store(&p->ready, true);
  } else if (sscanf(line, "WON %lld %lld", &a, &b) == 2) {
    add(p->who, EV_WON, a, b, 0);
  } else if (sscanf(line, "ACT %lld %lld %lld", &a, &b, &c) == 3) {
    add(p->who, EV_ACT, a, b, c);
  } else if (sscanf(line, "NOTLEADER %lld %lld", &a, &b) == 2) {
    add(p->who, EV_NOTLEADER, a, b, 0);
  } else if (sscanf(line, "END %lld %31s %lld", &a, word, &b) == 3) {
    add(p->who, strcmp(word, "LOST") == 0 ? EV_END_LOST : EV_END_RESIGNED, a,
        b, 0);
  } else if (sscanf(line, "RESIGNING %lld %lld", &a, &b) == 2) {
    add(p->who, EV_RESIGNING, a, b, 0);
  } else if (sscanf(line, "RESIGN %lld %lld", &a, &b) == 2) {
    add(p->who, EV_RESIGN, a, b, 0);
  } else if (sscanf(line, "GUARDED %lld %lld %31s %lld", &a, &c, word,
                    &b) == 4) {
    add_rc(p->who, EV_GUARDED, a, b, 0, (int)c);
  }
}

static void *reader(void *arg) {
  proc *p = arg;
  FILE *f = fdopen(p->out, "r");
  char line[512];
  while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    if (p->who < 0) { /* the Java peer */
      if (strncmp(line, "ID ", 3) == 0)
        snprintf(p->idline, sizeof(p->idline), "%s", line + 3);
      else if (strcmp(line, "READY") == 0)
        atomic_store(&p->ready, true);
      else {
        pthread_mutex_lock(&g_mu);
        snprintf(p->last, sizeof(p->last), "%s", line);
        pthread_mutex_unlock(&g_mu);
        atomic_fetch_add(&p->answers, 1);
      }
      continue;
    }
    parse_line(p, line);
  }
  if (f != NULL)
    fclose(f);
  return NULL;
}

static void spawn(proc *p, int who, char *const argv[]) {
  int o[2], i[2];
  cr_assert(pipe(o) == 0 && pipe(i) == 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(o[1], 1);
    dup2(i[0], 0);
    close(o[0]);
    close(i[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(o[1]);
  close(i[0]);
  memset(p, 0, sizeof(*p));
  p->pid = pid;
  p->out = o[0];
  p->in = i[1];
  p->who = who;
  cr_assert(pthread_create(&p->reader, NULL, reader, p) == 0);
  p->reading = true;
}

static bool is_ready(void *arg) { return atomic_load(&((proc *)arg)->ready); }

static const char *g_cand_uri; /* NULL: the harness's server */

static void start_candidates(const char *name, int64_t watchdog_ms) {
  char wd[32];
  snprintf(wd, sizeof(wd), "%" PRId64, watchdog_ms);
  for (int k = 0; k < NCAND; k++) {
    char value[32];
    snprintf(value, sizeof(value), "cand-%d", k);
    const char *uri = g_cand_uri != NULL ? g_cand_uri : rt_uri();
    char *argv[] = {(char *)ELECT_CANDIDATE, (char *)uri, (char *)name, value,
                    wd, NULL};
    spawn(&g_c[k], k, argv);
  }
  for (int k = 0; k < NCAND; k++)
    rt_wait_until_what(is_ready, &g_c[k], 20000, "candidate READY");
}

static void stop_proc(proc *p) {
  if (p->pid > 0) {
    kill(p->pid, SIGCONT);
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
  }
  if (p->in > 0) {
    close(p->in);
    p->in = 0;
  }
  if (p->reading) {
    pthread_join(p->reader, NULL);
    p->reading = false;
  }
}

static void suite_init(void) {
  g_recs = calloc(MAX_RECS, sizeof(rec));
  g_n = 0;
  rt_server_start();
}

static void suite_fini(void) {
  for (int k = 0; k < NCAND; k++)
    stop_proc(&g_c[k]);
  stop_proc(&g_java);
  rt_server_stop();
  free(g_recs);
}

/* ---- reading the records ---- */

/* The index of the n-th (0-based) record of type among records from
 * `from`, or -1. */
static int find(int type, int from, int n) {
  pthread_mutex_lock(&g_mu);
  int found = -1;
  for (int i = from; i < g_n; i++)
    if (g_recs[i].type == type && n-- == 0) {
      found = i;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  return found;
}

static rec rec_at(int i) {
  pthread_mutex_lock(&g_mu);
  rec r = g_recs[i];
  pthread_mutex_unlock(&g_mu);
  return r;
}

static int nrecs(void) {
  pthread_mutex_lock(&g_mu);
  int n = g_n;
  pthread_mutex_unlock(&g_mu);
  return n;
}

typedef struct want {
  int type, from, n;
} want;

static bool has_rec(void *arg) {
  want *w = arg;
  return find(w->type, w->from, w->n) >= 0;
}

/* Waits for the n-th record of type from `from`; its index. */
static int wait_rec(int type, int from, int n, int64_t bound_ms,
                    const char *what) {
  want w = {type, from, n};
  rt_wait_until_what(has_rec, &w, bound_ms, what);
  return find(type, from, n);
}

/* No two terms' guarantees overlap, and terms grow with time: for every
 * ACT of term t (guaranteed until u, or until its leader began to resign
 * if that came first: it acts no more from then), every WON of a term
 * t' > t comes at or after it, and every WON of a later term has a larger
 * term. */
static void assert_no_overlap(void) {
  pthread_mutex_lock(&g_mu);
  int n = g_n;
  rec *r = malloc(sizeof(rec) * (size_t)(n > 0 ? n : 1));
  memcpy(r, g_recs, sizeof(rec) * (size_t)n);
  pthread_mutex_unlock(&g_mu);
  int64_t last_won_term = 0, last_won_at = 0;
  for (int i = 0; i < n; i++) {
    if (r[i].type != EV_WON)
      continue;
    cr_expect(r[i].term > last_won_term,
              "term %" PRId64 " won at %" PRId64 " after term %" PRId64
              " won at %" PRId64,
              r[i].term, r[i].at, last_won_term, last_won_at);
    last_won_term = r[i].term;
    last_won_at = r[i].at;
    for (int j = 0; j < n; j++) {
      if (r[j].type != EV_ACT || r[j].term >= r[i].term)
        continue;
      int64_t until = r[j].until;
      for (int k = j; k < n; k++)
        if (r[k].type == EV_RESIGNING && r[k].term == r[j].term &&
            r[k].at < until)
          until = r[k].at;
      if (until != r[j].until)
        cr_expect(until <= r[i].at,
                  "term %" PRId64 " (candidate %d) began to resign at %" PRId64
                  " but term %" PRId64 " (candidate %d) won at %" PRId64,
                  r[j].term, r[j].who, until, r[i].term, r[i].who, r[i].at);
      else
        cr_expect(r[j].until <= r[i].at,
                  "term %" PRId64 " (candidate %d) was guaranteed until %" PRId64
                  " but term %" PRId64 " (candidate %d) won at %" PRId64,
                  r[j].term, r[j].who, r[j].until, r[i].term, r[i].who,
                  r[i].at);
    }
  }
  free(r);
}

/* ---- an observer in this process ---- */

#define MAX_SEEN 256
typedef struct seen {
  pthread_mutex_t mu;
  int n;
  rlock_election_state st[MAX_SEEN];
} seen;

static void on_state(const rlock_election_state *st, void *data) {
  seen *s = data;
  pthread_mutex_lock(&s->mu);
  if (s->n < MAX_SEEN)
    s->st[s->n++] = *st;
  pthread_mutex_unlock(&s->mu);
}

static seen *seen_new(void) {
  seen *s = calloc(1, sizeof(*s));
  pthread_mutex_init(&s->mu, NULL);
  return s;
}

/* The leader terms the observer delivered, in order. Two deliveries in a
 * row of one term are one transition only when the first is the moment
 * between the win and the value's write (no value yet, then the value):
 * anything else delivered twice is a change counted twice. */
static int seen_terms(seen *s, int64_t *out, int max) {
  pthread_mutex_lock(&s->mu);
  int k = 0;
  const rlock_election_state *prev = NULL;
  for (int i = 0; i < s->n && k < max; i++) {
    const rlock_election_state *st = &s->st[i];
    if (st->has_leader && prev != NULL && prev->has_leader &&
        prev->term == st->term && !prev->has_value && st->has_value) {
      prev = st;
      continue;
    }
    if (st->has_leader)
      out[k++] = st->term;
    prev = st;
  }
  pthread_mutex_unlock(&s->mu);
  return k;
}

/* The won terms, in order. */
static int won_terms(int64_t *out, int max) {
  int k = 0;
  for (int i = 0; k < max; i++) {
    int at = find(EV_WON, 0, i);
    if (at < 0)
      break;
    out[k++] = rec_at(at).term;
  }
  return k;
}

static void assert_observer_counts(seen *s) {
  int64_t won[MAX_SEEN], obs[MAX_SEEN];
  int nw = won_terms(won, MAX_SEEN);
  int no = seen_terms(s, obs, MAX_SEEN);
  cr_assert_eq(no, nw, "the observer delivered %d leader states, %d terms "
                       "were won", no, nw);
  for (int i = 0; i < nw; i++)
    cr_assert_eq(obs[i], won[i], "delivery %d: term %" PRId64 ", won %" PRId64,
                 i, obs[i], won[i]);
}

/* Reads the leader (into *st) until the observer's last delivery agrees
 * with it, within ~10 s; whether it did. */
/* The observer agrees with the leader read from the server, at a term of
 * at least min_term: after a failover, a client still talking to the old
 * master (demoted, catching up as a replica) until its sentinel's
 * +switch-master reaches it reads that server's older state, and its
 * observer agrees with it; min_term (the term a leader acted on after the
 * failover) tells the new master's state from it. */
static bool converged(rlock_client *c, const char *name, seen *s,
                      int64_t min_term, rlock_election_state *st) {
  rlock_election_state_init(st);
  for (int i = 0; i < 100; i++) {
    if (rlock_client_election_leader(c, name, st) == 0 &&
        st->term >= min_term) {
      pthread_mutex_lock(&s->mu);
      bool agree = st->has_leader && s->n > 0 &&
                   s->st[s->n - 1].has_leader &&
                   s->st[s->n - 1].term == st->term &&
                   strcmp(s->st[s->n - 1].value, st->value) == 0;
      pthread_mutex_unlock(&s->mu);
      if (agree)
        return true;
    }
    rt_sleep_ms(100);
  }
  return false;
}

typedef struct term_is {
  seen *s;
  int64_t term;
} term_is;

static bool observer_at(void *arg) {
  term_is *t = arg;
  pthread_mutex_lock(&t->s->mu);
  bool ok = t->s->n > 0 && t->s->st[t->s->n - 1].has_leader &&
            t->s->st[t->s->n - 1].term == t->term;
  pthread_mutex_unlock(&t->s->mu);
  return ok;
}

static rlock_client *client_fast(void) {
  rlock_options o;
  rlock_options_init(&o);
  o.command_timeout_ms = 1000;
  o.retry_interval_ms = 200;
  return rt_client_opts(&o);
}

/* A name from base, a client, and an observer of the name recording into
 * a new `seen`. */
typedef struct watch {
  char name[64];
  rlock_client *c;
  seen *s;
  rlock_election_observer *obs;
} watch;

static void watch_start(watch *w, const char *base, int64_t poll_ms) {
  rt_key(w->name, sizeof(w->name), base);
  w->c = client_fast();
  w->s = seen_new();
  w->obs = NULL;
  cr_assert_eq(rlock_election_observer_new(w->c, w->name, poll_ms, on_state, w->s,
                                      &w->obs),
               0);
}

static void watch_stop(watch *w) {
  rlock_election_observer_free(w->obs);
  rlock_client_free(w->c);
  free(w->s);
}

TestSuite(elect, .init = suite_init, .fini = suite_fini, .timeout = 120);

#define WATCHDOG_MS 1500
/* A new leader after the old one died: its lock's TTL (at most the
 * watchdog timeout) plus this. The waiters sleep at most the TTL they were
 * told and try again; the bound absorbs a loaded machine. */
#define TAKEOVER_SLACK_MS 1500

Test(elect, leader_killed_new_leader_within_lease_and_observers_count) {
  watch wt;
  watch_start(&wt, "elect-kill", 200);
  char *name = wt.name;
  seen *s = wt.s;
  start_candidates(name, WATCHDOG_MS);
  int64_t delays[3];
  for (int round = 0; round < 3; round++) {
    int w = wait_rec(EV_WON, 0, round, 20000, "a leader");
    rec won = rec_at(w);
    term_is ti = {s, won.term};
    rt_wait_until_what(observer_at, &ti, 5000, "the observer sees the leader");
    /* let it lead a little, then kill it */
    wait_rec(EV_ACT, w, 3, 5000, "the leader acts");
    int mark = nrecs();
    int64_t killed = rlock_now_ms();
    kill(g_c[won.who].pid, SIGKILL);
    int w2 = wait_rec(EV_WON, mark, 0, WATCHDOG_MS + TAKEOVER_SLACK_MS + 5000,
                      "a new leader");
    rec next = rec_at(w2);
    delays[round] = next.at - killed;
    cr_expect(next.who != won.who);
    cr_expect(delays[round] <= WATCHDOG_MS + TAKEOVER_SLACK_MS,
              "new leader %" PRId64 " ms after the kill (lease %d ms)",
              delays[round], WATCHDOG_MS);
    term_is ti2 = {s, next.term};
    rt_wait_until_what(observer_at, &ti2, 5000, "the observer sees the new one");
    /* a fresh candidate in place of the dead one */
    stop_proc(&g_c[won.who]);
    char value[32], wd[32];
    snprintf(value, sizeof(value), "cand-%d", won.who);
    snprintf(wd, sizeof(wd), "%d", WATCHDOG_MS);
    char *argv[] = {(char *)ELECT_CANDIDATE, (char *)rt_uri(), name, value, wd,
                    NULL};
    spawn(&g_c[won.who], won.who, argv);
    rt_wait_until_what(is_ready, &g_c[won.who], 20000, "candidate READY");
  }
  fprintf(stderr, "elect: new leader after SIGKILL: %" PRId64 ", %" PRId64
                  ", %" PRId64 " ms (lease %d ms)\n",
          delays[0], delays[1], delays[2], WATCHDOG_MS);
  assert_no_overlap();
  assert_observer_counts(s);
  watch_stop(&wt);
}

/* Three candidates for a name from `base` (into name[64]); the first
 * leader is SIGSTOPped once it acts, until another wins. Returns the
 * record index at the stop. */
static int stop_leader_past_lease(const char *base, char *name, rec *won,
                                  rec *next) {
  rt_key(name, 64, base);
  start_candidates(name, WATCHDOG_MS);
  int w = wait_rec(EV_WON, 0, 0, 20000, "a leader");
  *won = rec_at(w);
  wait_rec(EV_ACT, w, 3, 5000, "the leader acts");
  kill(g_c[won->who].pid, SIGSTOP);
  int64_t stopped = rlock_now_ms();
  int mark = nrecs();
  int w2 = wait_rec(EV_WON, mark, 0, WATCHDOG_MS + TAKEOVER_SLACK_MS + 5000,
                    "a new leader while the old one is stopped");
  *next = rec_at(w2);
  cr_expect(next->who != won->who);
  fprintf(stderr, "elect: new leader %" PRId64 " ms after SIGSTOP\n",
          next->at - stopped);
  return mark;
}

/* Waits for the old term's END LOST from its leader. */
static void wait_end_lost(rec won, int from) {
  for (int i = 0;; i++) {
    int at = wait_rec(EV_END_LOST, from, i, 10000, "the loss of the old term");
    if (rec_at(at).who == won.who && rec_at(at).term == won.term)
      return;
  }
}

Test(elect, stopped_leader_learns_it_lost_before_acting) {
  char name[64];
  rec won, next;
  int mark = stop_leader_past_lease("elect-stop", name, &won, &next);
  rt_sleep_ms(300);
  int64_t resumed = rlock_now_ms();
  kill(g_c[won.who].pid, SIGCONT);
  /* It says it lost, and acts no more in its old term. */
  wait_end_lost(won, mark);
  rt_sleep_ms(300);
  pthread_mutex_lock(&g_mu);
  int acts_after = 0;
  for (int i = mark; i < g_n; i++)
    if (g_recs[i].who == won.who && g_recs[i].type == EV_ACT &&
        g_recs[i].term == won.term && g_recs[i].at >= resumed)
      acts_after++;
  pthread_mutex_unlock(&g_mu);
  cr_expect_eq(acts_after, 0, "the resumed leader acted %d times in its old "
                              "term", acts_after);
  assert_no_overlap();
}

/* Candidate `who`'s first GUARDED record from `from`. */
static rec wait_guarded(int who, int from, const char *what) {
  for (int i = 0;; i++) {
    int at = wait_rec(EV_GUARDED, from, i, 10000, what);
    if (rec_at(at).who == who)
      return rec_at(at);
  }
}

static void send_line(proc *p, const char *line) {
  size_t n = strlen(line);
  cr_assert_eq(write(p->in, line, n), (ssize_t)n);
}

/* The same SIGSTOP past the lease, with the resource's side of fencing:
 * the term is the token of the election name's fenced lock, so a guard
 * on that lock name refuses the old leader's write. The old leader is
 * told to write while it is stopped, so it writes the moment it resumes -
 * a leader paused between its check and its write - and the guard, not
 * its own loss detection, must stop it. */
Test(elect, stopped_leaders_guarded_write_with_its_old_term_is_refused) {
  char name[64], guard[96], data[96], line[256];
  rec won, next;
  int mark = stop_leader_past_lease("elect-guard", name, &won, &next);
  snprintf(guard, sizeof(guard), "{%s}:guard", name);
  snprintf(data, sizeof(data), "{%s}:data", name);
  cr_assert_neq(next.who, won.who);
  cr_assert_gt(next.term, won.term);
  /* The new leader writes with its term: accepted. */
  snprintf(line, sizeof(line), "GUARD %s %s\n", guard, data);
  send_line(&g_c[next.who], line);
  rec ok = wait_guarded(next.who, mark, "the new leader's guarded write");
  cr_assert_eq(ok.term, next.term);
  cr_assert_eq(ok.rc, 0, "the new leader's write: %s", rlock_err_name(ok.rc));
  char want[32];
  snprintf(want, sizeof(want), "cand-%d", next.who);
  char *v = rt_str("GET %s", data);
  cr_assert_not_null(v);
  cr_assert_str_eq(v, want);
  free(v);
  /* The old leader, still stopped, is asked to write; then resumed. */
  int mark2 = nrecs();
  send_line(&g_c[won.who], line);
  kill(g_c[won.who].pid, SIGCONT);
  rec refused = wait_guarded(won.who, mark2, "the old leader's guarded write");
  cr_expect_eq(refused.term, won.term, "the old leader wrote with term %"
               PRId64 ", not its old %" PRId64, refused.term, won.term);
  cr_expect_eq(refused.rc, RLOCK_ESTALE, "the old leader's write: %s",
               refused.rc == 0 ? "accepted" : rlock_err_name(refused.rc));
  /* The new leader's data and the guard's token are intact. */
  v = rt_str("GET %s", data);
  cr_assert_not_null(v);
  cr_expect_str_eq(v, want, "the old leader overwrote the new one's data");
  free(v);
  char term_s[32];
  snprintf(term_s, sizeof(term_s), "%" PRId64, next.term);
  v = rt_hget(guard, "token");
  cr_assert_not_null(v);
  cr_expect_str_eq(v, term_s);
  free(v);
  /* and it still learns it lost */
  wait_end_lost(won, mark);
  assert_no_overlap();
}

Test(elect, resign_hands_over_at_once) {
  watch wt;
  watch_start(&wt, "elect-resign", 5000);
  seen *s = wt.s;
  /* A long lease: a handover within it proves the unlock message did it. */
  start_candidates(wt.name, 20000);
  int64_t worst = 0;
  for (int round = 0; round < 3; round++) {
    int w = wait_rec(EV_WON, 0, round, 20000, "a leader");
    rec won = rec_at(w);
    wait_rec(EV_ACT, w, 2, 5000, "the leader acts");
    rt_sleep_ms(600); /* the last one to resign campaigns again by now */
    int mark = nrecs();
    int64_t asked = rlock_now_ms();
    kill(g_c[won.who].pid, SIGUSR1);
    int w2 = wait_rec(EV_WON, mark, 0, 5000, "the next leader");
    rec next = rec_at(w2);
    cr_expect(next.who != won.who);
    int64_t d = next.at - asked;
    int rs = wait_rec(EV_RESIGNING, mark, 0, 5000, "RESIGNING");
    fprintf(stderr, "elect: resign round %d: signal->resigning %" PRId64
                    " ms, resigning->won %" PRId64 " ms\n",
            round, rec_at(rs).at - asked, next.at - rec_at(rs).at);
    if (d > worst)
      worst = d;
    cr_expect(d < 1000, "handover took %" PRId64 " ms (lease 20000)", d);
    int r = wait_rec(EV_END_RESIGNED, mark, 0, 5000, "RESIGNED");
    cr_expect_eq(rec_at(r).term, won.term);
    term_is ti = {s, next.term};
    /* the observer polls every 5 s: only the channel makes this fast */
    rt_wait_until_what(observer_at, &ti, 2000, "the observer hears it");
  }
  fprintf(stderr, "elect: handover after a resign: at most %" PRId64 " ms\n",
          worst);
  /* no term of this test ended as lost */
  cr_expect_eq(find(EV_END_LOST, 0, 0), -1);
  assert_no_overlap();
  assert_observer_counts(s);
  watch_stop(&wt);
}

static bool is_up(void *arg) {
  int port = *(int *)arg;
  struct timeval tv = {0, 500000};
  redisContext *r = redisConnectWithTimeout("127.0.0.1", port, tv);
  bool ok = r != NULL && r->err == 0;
  if (ok) {
    redisReply *rep = redisCommand(r, "PING");
    ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
    if (rep)
      freeReplyObject(rep);
  }
  if (r)
    redisFree(r);
  return ok;
}

Test(elect, server_restart_one_leader_at_a_time_and_observers_converge) {
  /* A server with the append-only file, so the restart keeps the token
   * counter (without it tokens start again from 1: docs/election.md). */
  const char *args[] = {"--appendonly", "yes", "--appendfsync", "always",
                        NULL};
  rt_server_start_args(args);
  watch wt;
  watch_start(&wt, "elect-restart", 300);
  char *name = wt.name;
  rlock_client *c = wt.c;
  seen *s = wt.s;
  start_candidates(name, WATCHDOG_MS);
  for (int round = 0; round < 2; round++) {
    int w = wait_rec(EV_WON, 0, round, 20000, "a leader");
    wait_rec(EV_ACT, w, 3, 5000, "the leader acts");
    int port = rt_port();
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", rt_server_dir());
    pid_t old = rt_server_pid();
    kill(old, SIGKILL);
    rt_sleep_ms(WATCHDOG_MS); /* down for a lease */
    char why[256];
    pid_t pid = rt_spawn_redis(port, dir, true, args, why, sizeof(why));
    cr_assert(pid > 0, "restart: %s", why);
    rt_wait_until_what(is_up, &port, 10000, "server back");
    /* someone leads again */
    int n0 = nrecs();
    (void)n0;
    rt_sleep_ms(WATCHDOG_MS * 2);
    waitpid(old, NULL, WNOHANG);
    /* let the harness stop the new one at fini */
    (void)pid;
  }
  /* the latest leader, as read now, and the observer agree */
  rlock_election_state st;
  cr_expect(converged(c, name, s, 0, &st), "the observer did not converge on term %" PRId64,
            st.term);
  assert_no_overlap();
  watch_stop(&wt);
}

/* ---- a Sentinel failover ---- */

static void sentinel_init(void) {
  g_recs = calloc(MAX_RECS, sizeof(rec));
  g_n = 0;
  rt_sentinel_start();
  g_cand_uri = rt_sentinel_uri();
}

static void sentinel_fini(void) {
  for (int k = 0; k < NCAND; k++)
    stop_proc(&g_c[k]);
  rt_topo_stop_all();
  free(g_recs);
}

TestSuite(elect_sentinel, .init = sentinel_init, .fini = sentinel_fini,
          .timeout = 120);

/* A planned failover (SENTINEL FAILOVER: the old master becomes a replica,
 * so replica sync keeps working): at most one leader at a time by the
 * terms' order, someone leads afterwards, and the observer converges on
 * the leader read on the new master. */
Test(elect_sentinel, failover_one_leader_at_a_time_observers_converge) {
  char name[64];
  rt_key(name, sizeof(name), "elect-sentinel");
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_sentinel_uri();
  o.command_timeout_ms = 1000;
  o.retry_interval_ms = 200;
  rlock_client *c = NULL;
  cr_assert_eq(rlock_client_new(&c, &o), 0, "%s", rlock_last_error());
  seen *s = seen_new();
  rlock_election_observer *obs = NULL;
  cr_assert_eq(rlock_election_observer_new(c, name, 300, on_state, s, &obs), 0);
  start_candidates(name, WATCHDOG_MS);
  int w = wait_rec(EV_WON, 0, 0, 20000, "a leader");
  wait_rec(EV_ACT, w, 3, 5000, "the leader acts");
  int64_t t0 = rlock_now_ms();
  int promoted = rt_sentinel_failover(30000);
  fprintf(stderr, "elect: sentinel failover to %d in %" PRId64 " ms\n",
          promoted, rlock_now_ms() - t0);
  /* a leader acts after the failover (the old one, renewed on the new
   * master, or a new one) */
  int mark = nrecs();
  int a = wait_rec(EV_ACT, mark, 3, 20000, "a leader after the failover");
  rec after = rec_at(a);
  rlock_election_state st;
  cr_expect(converged(c, name, s, after.term, &st),
            "the observer did not converge on term %" PRId64 " or later "
            "(read: term %" PRId64 ")", after.term, st.term);
  cr_expect_geq(st.term, after.term);
  fprintf(stderr, "elect: term %" PRId64 " before the failover, %" PRId64
                  " after\n", rec_at(w).term, st.term);
  assert_no_overlap();
  rlock_election_observer_free(obs);
  rlock_client_free(c);
  free(s);
}

/* ---- Java takes part: the real Redisson peer ---- */

/* $RLOCK_REDISSON_PEER, else <repo>/../shared/redisson/peer (a clone with
 * shared/ beside it), else <repo>/../../shared/redisson/peer (a git
 * worktree one folder further down). Missing: the test fails. */
static const char *peer_path(void) {
  const char *p = getenv("RLOCK_REDISSON_PEER");
  if (p != NULL && p[0] != '\0')
    return p;
  if (access(ELECT_REDISSON_PEER, X_OK) == 0)
    return ELECT_REDISSON_PEER;
  return ELECT_REDISSON_PEER_WT;
}

static void java_say(const char *line) {
  size_t n = strlen(line);
  cr_assert_eq(write(g_java.in, line, n), (ssize_t)n);
  cr_assert_eq(write(g_java.in, "\n", 1), 1);
}

static bool answered(void *arg) {
  return atomic_load(&g_java.answers) >= *(int *)arg;
}

/* Sends a line and returns the peer's answer (a copy in buf). */
static const char *java_ask(const char *line, char *buf, size_t n) {
  int want = atomic_load(&g_java.answers) + 1;
  java_say(line);
  rt_wait_until_what(answered, &want, 30000, line);
  pthread_mutex_lock(&g_mu);
  snprintf(buf, n, "%s", g_java.last);
  pthread_mutex_unlock(&g_mu);
  return buf;
}

typedef struct async_won {
  atomic_int status;
  atomic_llong term;
  atomic_int calls;
} async_won;

static void on_async(rlock_election *e, int status, int64_t term, void *d) {
  (void)e;
  async_won *a = d;
  if (atomic_fetch_add(&a->calls, 1) == 0) {
    atomic_store(&a->term, term);
    atomic_store(&a->status, status);
  } else {
    atomic_store(&a->status, 100 + status); /* the term's end */
  }
}

static bool async_has(void *arg) {
  return atomic_load(&((async_won *)arg)->calls) > 0;
}

Test(elect, java_fenced_lock_holder_is_the_leader) {
  char port[16];
  snprintf(port, sizeof(port), "%d", rt_port());
  const char *peer = peer_path();
  cr_assert(access(peer, X_OK) == 0,
            "no Redisson peer at %s (set RLOCK_REDISSON_PEER)", peer);
  char *argv[] = {(char *)peer, port, NULL};
  spawn(&g_java, -1, argv);
  /* the first run compiles the driver (README there: about 15 s) */
  rt_wait_until_what(is_ready, &g_java, 120000, "Redisson peer READY");
  char name[64], jname[80], line[200], ans[512];
  rt_key(name, sizeof(name), "elect-java");
  snprintf(jname, sizeof(jname), "X/%s", name);

  /* Java leads: observers see a leader without a value, C candidates wait */
  snprintf(line, sizeof(line), "A: lock %s", jname);
  cr_assert(strncmp(java_ask(line, ans, sizeof(ans)), "A: OK", 5) == 0, "%s",
            ans);
  snprintf(line, sizeof(line), "A: token %s", jname);
  java_ask(line, ans, sizeof(ans));
  long long jtoken = 0;
  cr_assert_eq(sscanf(ans, "A: OK %lld", &jtoken), 1, "%s", ans);
  rlock_client *c = client_fast();
  rlock_election_state st;
  rlock_election_state_init(&st);
  cr_assert_eq(rlock_client_election_leader(c, name, &st), 0);
  cr_expect_eq(st.has_leader, 1);
  cr_expect_eq(st.has_value, 0);
  cr_expect_eq(st.term, jtoken);
  cr_expect(strncmp(st.holder, g_java.idline, strlen(g_java.idline)) == 0,
            "holder %s, Java's id %s", st.holder, g_java.idline);

  rlock_election *e = NULL;
  cr_assert_eq(rlock_election_new(c, name, &e), 0);
  async_won a = {0};
  cr_assert_eq(rlock_election_campaign_start(e, "c-side", 6, -1, on_async, &a),
               0);
  rt_sleep_ms(700);
  cr_expect_eq(atomic_load(&a.calls), 0, "won while Java held the lock");
  int64_t t0 = rlock_now_ms();
  snprintf(line, sizeof(line), "A: unlock %s", jname);
  java_ask(line, ans, sizeof(ans));
  rt_wait_until_what(async_has, &a, 5000, "the C candidate wins");
  int64_t took = rlock_now_ms() - t0;
  cr_expect(took < 2000, "won %" PRId64 " ms after Java's unlock", took);
  cr_assert_eq(atomic_load(&a.status), RLOCK_ELECTION_WON);
  cr_expect_gt(atomic_load(&a.term), jtoken);

  /* C leads: Java cannot take it, and sees C's value-less hash as locked */
  snprintf(line, sizeof(line), "B: tryLock %s 0", jname);
  cr_expect(strncmp(java_ask(line, ans, sizeof(ans)), "B: OK false", 11) == 0,
            "%s", ans);
  cr_assert_eq(rlock_client_election_leader(c, name, &st), 0);
  cr_expect_eq(st.has_value, 1);
  cr_expect_str_eq(st.value, "c-side");
  cr_expect_eq(st.term, atomic_load(&a.term));

  /* C resigns: Java's waiting tryLock gets it at once */
  snprintf(line, sizeof(line), "C: tryLock %s 10000", jname);
  int want = atomic_load(&g_java.answers) + 1;
  java_say(line);
  rt_sleep_ms(500);
  int64_t t1 = rlock_now_ms();
  cr_assert_eq(rlock_election_resign(e), 0);
  rt_wait_until_what(answered, &want, 10000, "Java's tryLock");
  int64_t took2 = rlock_now_ms() - t1;
  pthread_mutex_lock(&g_mu);
  snprintf(ans, sizeof(ans), "%s", g_java.last);
  pthread_mutex_unlock(&g_mu);
  cr_expect(strncmp(ans, "C: OK true", 10) == 0, "%s", ans);
  cr_expect(took2 < 2000, "Java got it %" PRId64 " ms after the resign",
            took2);
  cr_expect_eq(atomic_load(&a.status), 100 + RLOCK_ELECTION_RESIGNED);
  char vkey[128];
  snprintf(vkey, sizeof(vkey), "rlock_election:{%s}", name);
  cr_expect_eq(rt_exists(vkey), 0);
  fprintf(stderr, "elect: Java unlock -> C leader %" PRId64
                  " ms; C resign -> Java holder %" PRId64 " ms\n",
          took, took2);
  rlock_election_free(e);
  rlock_client_free(c);
  java_say("quit");
}

/* ---- bad input ---- */

static bool dbsize_is_one(void *arg) {
  (void)arg;
  return rt_int("DBSIZE") == 1;
}

static bool unsubscribed(void *arg) { return rt_numsub(arg) == 0; }

Test(elect, bad_input_is_refused_and_leaves_nothing) {
  rlock_client *c = client_fast();
  char name[64];
  rt_key(name, sizeof(name), "elect-bad");
  rlock_election *e = NULL;
  cr_expect_eq(rlock_election_new(c, "", &e), RLOCK_EINVAL);
  cr_expect_null(e);
  cr_assert_eq(rlock_election_new(c, name, &e), 0);
  int64_t term = 0;
  cr_expect_eq(rlock_election_campaign(e, "", 0, 0, NULL, NULL, &term),
               RLOCK_EINVAL);
  cr_expect_eq(rlock_election_campaign(e, NULL, 3, 0, NULL, NULL, &term),
               RLOCK_EINVAL);
  char *big = malloc(RLOCK_ELECTION_VALUE_MAX + 1);
  memset(big, 'v', RLOCK_ELECTION_VALUE_MAX + 1);
  cr_expect_eq(rlock_election_campaign(e, big, RLOCK_ELECTION_VALUE_MAX + 1, 0,
                                       NULL, NULL, &term),
               RLOCK_EINVAL);
  cr_expect_eq(rlock_election_resign(e), RLOCK_ENOTOWNER);
  cr_expect_eq(rlock_election_proclaim(e, "x", 1), RLOCK_ENOTOWNER);
  cr_expect_eq(rlock_election_leading(e, NULL, NULL), 0);
  /* nobody campaigns: an empty state, no error */
  rlock_election_state st;
  rlock_election_state_init(&st);
  cr_expect_eq(rlock_client_election_leader(c, name, &st), 0);
  cr_expect_eq(st.has_leader, 0);
  cr_expect_eq(st.term, 0);
  cr_expect_eq(rt_int("DBSIZE"), 0, "keys were left by the refusals");
  /* the largest value is fine; a second campaign is refused */
  cr_assert_eq(rlock_election_campaign(e, big, RLOCK_ELECTION_VALUE_MAX, 0,
                                       NULL, NULL, &term),
               1);
  cr_expect_eq(rlock_election_campaign(e, "again", 5, 0, NULL, NULL, &term),
               RLOCK_EREENTRY);
  cr_expect_eq(rlock_client_election_leader(c, name, &st), 0);
  cr_expect_eq(st.value_len, RLOCK_ELECTION_VALUE_MAX);
  cr_expect_eq(rlock_election_resign(e), 0);
  cr_expect_eq(rlock_election_resign(e), RLOCK_ENOTOWNER);
  rlock_election_free(e);
  free(big);
  /* only the fenced lock's token counter is left (Redisson's, as Java's),
   * once the unlock latch is deleted in the background */
  rt_wait_until_what(dbsize_is_one, NULL, 5000, "only the token key left");
  char tkey[128];
  snprintf(tkey, sizeof(tkey), "redisson_lock_token:{%s}", name);
  cr_expect_eq(rt_exists(tkey), 1);

  /* a name that is another kind of lock */
  char rw[80];
  snprintf(rw, sizeof(rw), "%s-rw", name);
  rt_int("HSET %s mode read", rw);
  rlock_election *e2 = NULL;
  cr_assert_eq(rlock_election_new(c, rw, &e2), 0);
  cr_expect_eq(rlock_election_campaign(e2, "v", 1, 0, NULL, NULL, &term),
               RLOCK_EKIND);
  cr_expect_eq(rlock_client_election_leader(c, rw, &st), RLOCK_EKIND);
  char str[80];
  snprintf(str, sizeof(str), "%s-str", name);
  rt_ok("OK", "SET %s plain", str);
  rlock_election *e3 = NULL;
  cr_assert_eq(rlock_election_new(c, str, &e3), 0);
  cr_expect_eq(rlock_election_campaign(e3, "v", 1, 0, NULL, NULL, &term),
               RLOCK_EWRONGTYPE);
  cr_expect_eq(rlock_client_election_leader(c, str, &st), RLOCK_EWRONGTYPE);
  rlock_election_free(e2);
  rlock_election_free(e3);
  /* an observer that stops leaves no subscription */
  seen *s = seen_new();
  rlock_election_observer *obs = NULL;
  cr_assert_eq(rlock_election_observer_new(c, name, 100, on_state, s, &obs), 0);
  rt_sleep_ms(300);
  char chan[128];
  snprintf(chan, sizeof(chan), "rlock_election__channel:{%s}", name);
  cr_expect_eq(rt_numsub(chan), 1);
  pthread_mutex_lock(&s->mu);
  cr_expect_eq(s->n, 1, "an unchanged empty state delivered %d times", s->n);
  cr_expect_eq(s->st[0].has_leader, 0);
  pthread_mutex_unlock(&s->mu);
  rlock_election_observer_free(obs);
  rt_wait_until_what(unsubscribed, chan, 5000, "the observer unsubscribed");
  rlock_client_free(c);
  free(s);
}

/* ---- events and stats ---- */

typedef struct evrec {
  pthread_mutex_t mu;
  int n;
  int type[32], cause[32];
  int64_t term[32];
  char kind[32][16], name[32][64];
} evrec;

static void on_event(const rlock_event *ev, void *data) {
  if (ev->type != RLOCK_EVENT_ELECTED && ev->type != RLOCK_EVENT_TERM_ENDED)
    return;
  evrec *r = data;
  pthread_mutex_lock(&r->mu);
  if (r->n < 32) {
    r->type[r->n] = ev->type;
    r->cause[r->n] = ev->cause;
    r->term[r->n] = RLOCK_EVENT_HAS(ev, term) ? ev->term : -1;
    snprintf(r->kind[r->n], 16, "%s", ev->kind);
    snprintf(r->name[r->n], 64, "%s", ev->name);
    r->n++;
  }
  pthread_mutex_unlock(&r->mu);
}

typedef struct ended {
  atomic_int calls, status;
} ended;

static void on_end_count(rlock_election *e, int status, int64_t term,
                         void *data) {
  (void)e;
  (void)term;
  ended *x = data;
  atomic_store(&x->status, status);
  atomic_fetch_add(&x->calls, 1);
}

static bool ended_once(void *arg) {
  return atomic_load(&((ended *)arg)->calls) >= 1;
}

Test(elect, events_and_stats_name_the_election) {
  static evrec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  o.on_event = on_event;
  o.on_event_data = &r;
  rlock_client *c = rt_client_opts(&o);
  char name[64];
  rt_key(name, sizeof(name), "elect-ev");
  rlock_election *e = NULL;
  cr_assert_eq(rlock_election_new(c, name, &e), 0);
  int64_t t1 = 0, t2 = 0;
  ended x1 = {0}, x2 = {0};
  cr_assert_eq(rlock_election_campaign(e, "v1", 2, 0, on_end_count, &x1, &t1),
               1);
  int64_t t = 0, until = 0;
  cr_expect_eq(rlock_election_leading(e, &t, &until), 1);
  cr_expect_eq(t, t1);
  cr_expect_gt(until, rlock_now_ms());
  cr_expect_eq(rlock_election_proclaim(e, "v1b", 3), 0);
  rlock_election_state st;
  rlock_election_state_init(&st);
  cr_assert_eq(rlock_client_election_leader(c, name, &st), 0);
  cr_expect_str_eq(st.value, "v1b");
  cr_expect_eq(st.term, t1);
  cr_assert_eq(rlock_election_resign(e), 0);
  cr_expect_eq(atomic_load(&x1.calls), 1);
  cr_expect_eq(atomic_load(&x1.status), RLOCK_ELECTION_RESIGNED);
  cr_assert_eq(rlock_election_campaign(e, "v2", 2, 0, on_end_count, &x2, &t2),
               1);
  cr_expect_gt(t2, t1);
  /* the lock deleted under the leader: lost, once */
  rt_int("DEL %s", name);
  rt_wait_until_what(ended_once, &x2, 5000, "the loss");
  rt_sleep_ms(700);
  cr_expect_eq(atomic_load(&x2.calls), 1);
  cr_expect_eq(atomic_load(&x2.status), RLOCK_ELECTION_LOST);
  cr_expect_eq(rlock_election_leading(e, NULL, NULL), 0);
  rlock_stats s;
  rlock_stats_init(&s);
  cr_assert_eq(rlock_client_stats(c, &s), 0);
  cr_expect_eq(s.terms_won, 2);
  cr_expect_eq(s.terms_resigned, 1);
  cr_expect_eq(s.terms_lost, 1);
  pthread_mutex_lock(&r.mu);
  cr_assert_eq(r.n, 4);
  int want_type[4] = {RLOCK_EVENT_ELECTED, RLOCK_EVENT_TERM_ENDED,
                      RLOCK_EVENT_ELECTED, RLOCK_EVENT_TERM_ENDED};
  int64_t want_term[4] = {t1, t1, t2, t2};
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(r.type[i], want_type[i]);
    cr_expect_eq(r.term[i], want_term[i]);
    cr_expect_str_eq(r.kind[i], "election");
    cr_expect_str_eq(r.name[i], name);
  }
  cr_expect_eq(r.cause[1], RLOCK_ELECTION_RESIGNED);
  cr_expect_eq(r.cause[3], RLOCK_ELECTION_LOST);
  pthread_mutex_unlock(&r.mu);
  rlock_election_free(e);
  rlock_client_free(c);
}

static void *blocking_campaign(void *arg) {
  rlock_election *e = arg;
  int64_t term = 0;
  int rc = rlock_election_campaign(e, "b", 1, -1, NULL, NULL, &term);
  return (void *)(intptr_t)rc;
}

Test(elect, cancel_ends_a_waiting_campaign_and_free_after_close) {
  rlock_client *c = client_fast();
  char name[64];
  rt_key(name, sizeof(name), "elect-cancel");
  rlock_election *leader = NULL, *a = NULL, *b = NULL;
  cr_assert_eq(rlock_election_new(c, name, &leader), 0);
  cr_assert_eq(rlock_election_new(c, name, &a), 0);
  cr_assert_eq(rlock_election_new(c, name, &b), 0);
  int64_t term = 0;
  cr_assert_eq(rlock_election_campaign(leader, "L", 1, 0, NULL, NULL, &term),
               1);
  cr_expect_eq(rlock_election_cancel(a), 0, "nothing to cancel yet");
  async_won w = {0};
  cr_assert_eq(rlock_election_campaign_start(a, "a", 1, -1, on_async, &w), 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, blocking_campaign, b), 0);
  rt_sleep_ms(300);
  cr_expect_eq(atomic_load(&w.calls), 0);
  cr_expect_eq(rlock_election_cancel(a), 1);
  cr_expect_eq(rlock_election_cancel(b), 1);
  rt_wait_until_what(async_has, &w, 5000, "the async campaign's callback");
  void *ret = NULL;
  pthread_join(t, &ret);
  cr_expect_eq((int)(intptr_t)ret, RLOCK_ECANCELED);
  rt_sleep_ms(200);
  cr_expect_eq(atomic_load(&w.calls), 1, "callback fired more than once");
  cr_expect_eq(atomic_load(&w.status), RLOCK_ECANCELED);
  /* the canceled ones can campaign again: a try while L leads */
  cr_expect_eq(rlock_election_campaign(a, "a", 1, 0, NULL, NULL, &term), 0);
  rlock_election_free(a);
  rlock_election_free(b);
  /* a leader whose client closes first is still freed */
  rlock_client_free(c);
  rlock_election_free(leader);
}

/* The end of a term goes to the campaign that won it, even when a new
 * campaign starts the moment the phase is back to idle (here: while the
 * loss's event handler still runs, before the callback). */
typedef struct calls {
  atomic_int n;
  int status[8];
} calls;

static void record_cb(rlock_election *e, int status, int64_t term, void *d) {
  (void)e;
  (void)term;
  calls *c = d;
  int i = atomic_load(&c->n);
  if (i < 8)
    c->status[i] = status;
  atomic_store(&c->n, i + 1);
}

static atomic_int g_in_handler;

static void slow_handler(const rlock_event *ev, void *data) {
  (void)data;
  if (ev->type == RLOCK_EVENT_TERM_ENDED) {
    atomic_store(&g_in_handler, 1);
    rt_sleep_ms(500); /* a test only: handlers must not block */
  }
}

static bool in_handler(void *arg) {
  (void)arg;
  return atomic_load(&g_in_handler) == 1;
}

static bool has_calls(void *arg) {
  calls *c = arg;
  return atomic_load(&c->n) >= 1;
}

Test(elect, a_terms_end_never_reaches_the_next_campaign) {
  rlock_options o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 900;
  o.on_event = slow_handler;
  rlock_client *c = rt_client_opts(&o);
  char name[64];
  rt_key(name, sizeof(name), "elect-next");
  rlock_election *e = NULL;
  cr_assert_eq(rlock_election_new(c, name, &e), 0);
  static calls first, second;
  cr_assert_eq(rlock_election_campaign_start(e, "v", 1, 0, record_cb, &first),
               0);
  rt_wait_until_what(has_calls, &first, 5000, "won");
  cr_assert_eq(first.status[0], RLOCK_ELECTION_WON);
  rt_int("DEL %s", name); /* lost at the next renewal */
  rt_wait_until_what(in_handler, NULL, 5000, "the loss's event");
  cr_assert_eq(rlock_election_leading(e, NULL, NULL), 0);
  cr_assert_eq(rlock_election_campaign_start(e, "v", 1, 0, record_cb, &second),
               0);
  rt_wait_until_what(has_calls, &second, 5000, "the new campaign's result");
  rt_sleep_ms(300);
  cr_expect_eq(atomic_load(&first.n), 2);
  cr_expect_eq(first.status[1], RLOCK_ELECTION_LOST);
  /* nobody else campaigns and the lock is free: it wins, after the lost
   * term's clean-up unlock (an acquire passing it would be undone by it) */
  cr_expect_eq(second.status[0], RLOCK_ELECTION_WON,
               "the new campaign heard %d first", second.status[0]);
  rlock_election_free(e);
  rlock_client_free(c);
}

/* ---- the CLI: rlock elect / rlock leader ---- */
#ifdef ELECT_CLI

static pid_t cli_spawn(char *const argv[], const char *out_path) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (out_path != NULL) {
      int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

/* Waits up to bound_ms for pid; its exit status, or -1 (still runs). */
static int cli_wait(pid_t pid, int64_t bound_ms) {
  int64_t end = rt_now_ms() + bound_ms;
  do {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    rt_sleep_ms(10);
  } while (rt_now_ms() < end);
  return -1;
}

static bool file_has(void *arg) {
  FILE *f = fopen(arg, "r");
  if (f == NULL)
    return false;
  int ch = fgetc(f);
  fclose(f);
  return ch != EOF;
}

static void read_file(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = '\0';
  fclose(f);
}

Test(elect, cli_runs_command_only_while_leader) {
  char name[64], dir[] = "/tmp/rlock-elect-XXXXXX";
  rt_key(name, sizeof(name), "elect-cli");
  cr_assert_not_null(mkdtemp(dir));
  char fa[128], fb[128], fj[128], scripta[256], scriptb[256];
  snprintf(fa, sizeof(fa), "%s/a", dir);
  snprintf(fb, sizeof(fb), "%s/b", dir);
  snprintf(fj, sizeof(fj), "%s/json", dir);
  snprintf(scripta, sizeof(scripta),
           "echo $RLOCK_ELECTION_TERM $$ > %s; exec sleep 60", fa);
  snprintf(scriptb, sizeof(scriptb), "echo $RLOCK_ELECTION_TERM > %s", fb);
  char *a_argv[] = {(char *)ELECT_CLI, "elect", "-u", (char *)rt_uri(),
                    "--watchdog", "900ms", "--value", "A", name, "--",
                    "/bin/sh", "-c", scripta, NULL};
  pid_t a = cli_spawn(a_argv, NULL);
  rt_wait_until_what(file_has, fa, 10000, "A runs its command");
  char *b_argv[] = {(char *)ELECT_CLI, "elect", "-u", (char *)rt_uri(),
                    "--watchdog", "900ms", "--value", "B", name, "--",
                    "/bin/sh", "-c", scriptb, NULL};
  pid_t b = cli_spawn(b_argv, NULL);
  rt_sleep_ms(1500);
  cr_expect(!file_has(fb), "B ran its command while A led");
  /* rlock leader --json sees A */
  char *l_argv[] = {(char *)ELECT_CLI, "leader", "--json", "-u",
                    (char *)rt_uri(), name, NULL};
  cr_assert_eq(cli_wait(cli_spawn(l_argv, fj), 10000), 0);
  char buf[512];
  read_file(fj, buf, sizeof(buf));
  cr_expect(strstr(buf, "\"leader\":true") != NULL, "%s", buf);
  cr_expect(strstr(buf, "\"value\":\"A\"") != NULL, "%s", buf);
  long long term_a = 0, child_a = 0;
  read_file(fa, buf, sizeof(buf));
  cr_assert_eq(sscanf(buf, "%lld %lld", &term_a, &child_a), 2, "%s", buf);
  /* rlock ls lists the name once, with its leader's value and term */
  char *ls_argv[] = {(char *)ELECT_CLI, "ls", "--json", "-u", (char *)rt_uri(),
                     name, NULL};
  cr_assert_eq(cli_wait(cli_spawn(ls_argv, fj), 10000), 0);
  char lsbuf[4096], want[128];
  read_file(fj, lsbuf, sizeof(lsbuf));
  snprintf(want, sizeof(want), "\"election\":{\"term\":%lld,\"value\":\"A\"}",
           term_a);
  cr_expect(strstr(lsbuf, want) != NULL, "%s", lsbuf);
  cr_expect(strstr(lsbuf, "rlock_election") == NULL, "%s", lsbuf);
  /* someone deletes the lock: A's watchdog finds it gone within a period
   * (300 ms); A stops its command and says so; B takes over */
  rt_int("DEL %s", name);
  cr_expect_eq(cli_wait(a, 10000), 79, "A's exit: leadership lost");
  cr_expect(kill((pid_t)child_a, 0) != 0, "A's command still runs");
  rt_wait_until_what(file_has, fb, 10000, "B runs its command");
  read_file(fb, buf, sizeof(buf));
  cr_expect_gt(atoll(buf), term_a);
  /* B's command ended: B resigned and exits with its status */
  cr_expect_eq(cli_wait(b, 10000), 0);
  char *l2_argv[] = {(char *)ELECT_CLI, "leader", "-u", (char *)rt_uri(), name,
                     NULL};
  cr_expect_eq(cli_wait(cli_spawn(l2_argv, fj), 10000), 1, "no leader: 1");
  read_file(fj, buf, sizeof(buf));
  cr_expect(strstr(buf, "no leader") != NULL, "%s", buf);
  unlink(fa);
  unlink(fb);
  unlink(fj);
  rmdir(dir);
}
#endif
