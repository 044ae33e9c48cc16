/*
 * The `diag` suite (issue 28, item 1): the diagnostics callback
 * (rlock_options.on_diag) against a real redis-server and the faults of
 * faultkit - what a client says when it connects, when its connections are
 * killed, when a renewal fails or finds its lock gone, when a peer breaks
 * the protocol - counted exactly; and a callback that calls back into the
 * library gets RLOCK_EDEADLK instead of a deadlock.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "diag_rec.h"
#include "faultkit.h"

TestSuite(diag, .init = fk_init, .fini = fk_fini, .timeout = 60);

static rlock_client *open_rec(rlock_options *o) {
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, 0, "rlock_client_new: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  return c;
}

static void addr_of_server(char *buf, size_t n) {
  snprintf(buf, n, "127.0.0.1:%d", rt_port());
}

/* ---- the API's small parts ---- */

Test(diag, levels_have_names_and_default_is_silent) {
  cr_assert_str_eq(rlock_diag_level_name(RLOCK_DIAG_ERROR), "ERROR");
  cr_assert_str_eq(rlock_diag_level_name(RLOCK_DIAG_WARN), "WARN");
  cr_assert_str_eq(rlock_diag_level_name(RLOCK_DIAG_INFO), "INFO");
  cr_assert_str_eq(rlock_diag_level_name(RLOCK_DIAG_DEBUG), "DEBUG");
  cr_assert_str_eq(rlock_diag_level_name(4), "?");
  cr_assert_str_eq(rlock_diag_level_name(-1), "?");
  cr_assert(RLOCK_DIAG_ERROR < RLOCK_DIAG_WARN &&
            RLOCK_DIAG_WARN < RLOCK_DIAG_INFO &&
            RLOCK_DIAG_INFO < RLOCK_DIAG_DEBUG);
  rlock_options o;
  memset(&o, 0x5a, sizeof o);
  rlock_options_init(&o);
  cr_assert_null(o.on_diag);
  cr_assert_null(o.on_diag_data);
  /* A program built before on_diag existed: its struct ends before the
   * field, which the library then takes as NULL (silent). */
  rlock_options old;
  rlock_options_init_size(&old, offsetof(rlock_options, on_diag));
  old.uri = rt_uri();
  rlock_client *c = open_rec(&old);
  rlock_client_free(c);
}

/* ---- connects ---- */

/* Open says where it connected, once per connection, naming the port, and
 * what the probes found (DEBUG); nothing else - no warning on a healthy
 * server - and every call names the client open returned. */
Test(diag, open_reports_each_connection_with_its_address) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  diag_rec rec;
  rec_init(&rec, &o);
  /* What the probe should find: whether this server knows CLIENT SETINFO
   * (Redis 7.2+). */
  redisReply *si = rt_cmd("CLIENT SETINFO LIB-NAME probe");
  const char *setinfo = si->type == REDIS_REPLY_STATUS ? "CLIENT SETINFO yes"
                                                       : "CLIENT SETINFO no";
  freeReplyObject(si);
  rlock_client *c = open_rec(&o);
  char addr[64], dump[8192];
  addr_of_server(addr, sizeof addr);
  rec_dump(&rec, dump, sizeof dump);
  /* Said before open returned: no wait here. */
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "connected to", addr, "(commands)");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "connected to", addr, "(pub/sub)");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_DEBUG, "probes on", addr, setinfo,
             "WAIT not probed", "WAITAOF not probed",
             "cross-slot scripts accepted");
  REC_EXPECT(&rec, 0, RLOCK_DIAG_WARN);
  REC_EXPECT(&rec, 0, RLOCK_DIAG_ERROR);
  cr_assert_eq(rec.n, 3, "lines:\n%s", dump);
  cr_assert_eq(atomic_load(&rec.client), c);
  cr_assert_eq(atomic_load(&rec.other_client), 0);
  /* Some work: nothing to say. */
  char key[64];
  rt_key(key, sizeof key, "diag-quiet");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_try_lock(l, 0, 10000), 1);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
  cr_assert_eq(rec.n, 3, "a lock and an unlock, or close, said something");
  cr_assert_eq(atomic_load(&rec.newlines), 0);
}

/* ---- reconnects ---- */

typedef struct waiter_job {
  rlock *lock;
  atomic_int rc, unlock_rc;
  atomic_bool done;
} waiter_job;

static void waiter_main(void *arg) {
  waiter_job *j = arg;
  int rc = rlock_try_lock(j->lock, 20000, 10000);
  atomic_store(&j->rc, rc);
  if (rc == 1)
    atomic_store(&j->unlock_rc, rlock_unlock(j->lock));
  atomic_store(&j->done, true);
}

static bool job_done(void *arg) {
  return atomic_load(&((waiter_job *)arg)->done);
}

static bool subscribed(void *channel) { return rt_numsub(channel) >= 1; }

/* Both connections killed (CLIENT KILL), one after the other, while a
 * waiter is subscribed: exactly one "lost" line per connection, each with
 * its cause, one "reconnected" line each, and one resubscribe line - and
 * nothing else above DEBUG. */
Test(diag, killed_connections_give_one_line_each_with_the_cause) {
  char key[64], chan[128], name[48], addr[64];
  rt_key(key, sizeof key, "diag-kill");
  rt_lock_channel(chan, sizeof chan, key);
  snprintf(name, sizeof name, "diagkill%d", (int)getpid());
  addr_of_server(addr, sizeof addr);
  rlock_client *holder = rt_client();
  rlock *hl = rt_lock(holder, key);
  cr_assert_eq(rlock_try_lock(hl, 0, 30000), 1);

  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.client_name = name;
  diag_rec rec;
  rec_init(&rec, &o);
  rlock_client *c = open_rec(&o);
  waiter_job job = {.lock = rt_lock(c, key)};
  rt_thread th;
  rt_thread_start(&th, waiter_main, &job);
  rt_wait_until_what(subscribed, chan, 5000, "the waiter subscribed");
  rec_clear(&rec);

  cr_assert_eq(fk_kill_cmd_conn(name), 1, "the command connection");
  rec_wait_for(&rec, RLOCK_DIAG_INFO, "reconnected to", "(commands)", 5000);
  cr_assert_eq(fk_kill_sub_conn(name), 1, "the subscriber connection");
  rec_wait_for(&rec, RLOCK_DIAG_INFO, "reconnected to", "(pub/sub)", 5000);
  rec_wait_for(&rec, RLOCK_DIAG_INFO, "resubscribing 1 channel", addr, 5000);
  rt_wait_until_what(subscribed, chan, 5000, "the waiter subscribed again");

  /* The waiter still works: the release wakes it. */
  cr_assert_eq(rlock_unlock(hl), 0);
  rt_wait_until_what(job_done, &job, 5000, "the waiter acquired");
  rt_thread_join(&th, 1000);
  cr_assert_eq(atomic_load(&job.rc), 1);
  cr_assert_eq(atomic_load(&job.unlock_rc), 0);
  rt_sleep_ms(300); /* anything late would show now */

  REC_EXPECT(&rec, 1, RLOCK_DIAG_WARN, "lost connection to", addr,
             "(commands): RLOCK_ECONN: ", "; reconnecting in");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_WARN, "lost connection to", addr,
             "(pub/sub): RLOCK_ECONN: ", "; reconnecting in");
  /* The cause is the link's own sentence, not empty. */
  REC_EXPECT(&rec, 0, RLOCK_DIAG_WARN, "RLOCK_ECONN: ; ");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "reconnected to", addr,
             "(commands), attempt 1");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "reconnected to", addr,
             "(pub/sub), attempt 1");
  REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "resubscribing");
  REC_EXPECT(&rec, 2, RLOCK_DIAG_WARN);
  REC_EXPECT(&rec, 0, RLOCK_DIAG_ERROR);
  REC_EXPECT(&rec, 3, RLOCK_DIAG_INFO);
  cr_assert_eq(atomic_load(&rec.other_client), 0);
  rlock_free(job.lock);
  rlock_client_free(c);
  rlock_free(hl);
  rlock_client_free(holder);
}

/* The server down for a while, then back on its port: the lost line, one
 * WARN for the first failed reconnect (its cause: the refused connection),
 * the further attempts at DEBUG only, and one reconnected line per
 * connection whose attempt count matches the attempts said. */
Test(diag, server_down_warns_once_then_reconnects) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.retry_interval_ms = 100; /* back-off capped: many attempts below */
  diag_rec rec;
  rec_init(&rec, &o);
  rlock_client *c = open_rec(&o);
  char addr[64];
  addr_of_server(addr, sizeof addr);
  rec_clear(&rec);
  rt_server_kill();
  rec_wait_for(&rec, RLOCK_DIAG_DEBUG, "cannot connect to", "(commands)",
               3000);
  rt_sleep_ms(500); /* more attempts */
  fk_server_restart_same_port();
  rec_wait_for(&rec, RLOCK_DIAG_INFO, "reconnected to", "(commands)", 5000);
  rec_wait_for(&rec, RLOCK_DIAG_INFO, "reconnected to", "(pub/sub)", 5000);
  for (int i = 0; i < 2; i++) {
    const char *role = i == 0 ? "(commands)" : "(pub/sub)";
    REC_EXPECT(&rec, 1, RLOCK_DIAG_WARN, "lost connection to", addr, role,
               "RLOCK_ECONN: ");
    REC_EXPECT(&rec, 1, RLOCK_DIAG_WARN, "cannot connect to", addr, role,
               "RLOCK_ECONN: ", "; attempt 1, next in ");
    int later = rec_count(&rec, RLOCK_DIAG_DEBUG, "cannot connect to", addr,
                          role, (const char *)NULL);
    cr_assert_geq(later, 2, "%s: %d DEBUG attempts", role, later);
    /* Attempt 1 (the warning), `later` more, then the one that worked. */
    char back[96];
    snprintf(back, sizeof back, "%s, attempt %d", role, later + 2);
    REC_EXPECT(&rec, 1, RLOCK_DIAG_INFO, "reconnected to", addr, back);
  }
  REC_EXPECT(&rec, 4, RLOCK_DIAG_WARN);
  REC_EXPECT(&rec, 0, RLOCK_DIAG_ERROR);
  rlock_client_free(c);
}

/* ---- renewals ---- */

static atomic_int g_lost_calls;

static void on_lost(const char *name, const char *owner, void *data) {
  (void)name;
  (void)owner;
  (void)data;
  atomic_fetch_add(&g_lost_calls, 1);
}

static bool lost_called(void *arg) {
  (void)arg;
  return atomic_load(&g_lost_calls) > 0;
}

/* The watchdog's renewal finds the key deleted: one ERROR line naming the
 * lock and its owner, once (later rounds do not renew a lost hold). */
Test(diag, renewal_that_finds_the_lock_gone_says_so_once) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.watchdog_timeout_ms = 300; /* a renewal every 100 ms */
  o.on_lock_lost = on_lost;
  diag_rec rec;
  rec_init(&rec, &o);
  rlock_client *c = open_rec(&o);
  char key[64], owner[96];
  rt_key(key, sizeof key, "diag-lost");
  rt_owner(owner, sizeof owner, c, rlock_thread_id());
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  rt_sleep_ms(250); /* renewed twice: nothing said */
  cr_assert_eq(rec_count(&rec, -1, "renewal", (const char *)NULL), 0);
  rt_int("DEL %s", key);
  rt_wait_until_what(lost_called, NULL, 3000, "on_lock_lost");
  rec_wait_for(&rec, RLOCK_DIAG_ERROR, "renewal found", key, 1000);
  rt_sleep_ms(400); /* four more rounds */
  char want[256];
  snprintf(want, sizeof want,
           "renewal found '%s' no longer held by %s: lock "
           "lost",
           key, owner);
  REC_EXPECT(&rec, 1, RLOCK_DIAG_ERROR, want);
  REC_EXPECT(&rec, 1, RLOCK_DIAG_ERROR);
  cr_assert_eq(rlock_unlock(l), RLOCK_ELOCKLOST);
  rlock_free(l);
  rlock_client_free(c);
}

/* A renewal that gets no answer in time (the server paused past
 * command_timeout_ms, no re-send): a WARN line naming the lock and the
 * error; the hold survives (the next round renews it). */
Test(diag, renewal_without_an_answer_is_a_warning) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.watchdog_timeout_ms = 3000; /* a renewal every 1000 ms */
  o.command_timeout_ms = 500;
  o.retry_attempts = 0;
  diag_rec rec;
  rec_init(&rec, &o);
  rlock_client *c = open_rec(&o);
  char key[64];
  rt_key(key, sizeof key, "diag-slow");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);
  rt_ok("OK", "CLIENT PAUSE 2000 ALL"); /* the next renewal times out */
  rec_wait_for(&rec, RLOCK_DIAG_WARN, "renewal of 1 lock", key, 4000);
  char want[256];
  snprintf(want, sizeof want,
           "renewal of 1 lock ('%s') failed: "
           "RLOCK_ETIMEDOUT; the watchdog tries again every 1000 ms",
           key);
  cr_assert_geq(rec_count(&rec, RLOCK_DIAG_WARN, want, (const char *)NULL), 1,
                "no line '%s'", want);
  rt_sleep_ms(2200); /* paused no more; the next rounds renew it */
  REC_EXPECT(&rec, 0, RLOCK_DIAG_ERROR);
  cr_assert_eq(rlock_unlock(l), 0, "%s", rlock_last_error());
  rlock_free(l);
  rlock_client_free(c);
}

/* ---- protocol violations ---- */

/* A reply nobody asked for on the idle command connection: an ERROR line
 * that names the peer and what it sent, then a reconnect. */
Test(diag, protocol_drop_is_an_error_line) {
  fk_peer p;
  fk_peer_init(&p);
  p.answer = true;
  atomic_store(&p.other_reply, ":0\r\n");
  fk_peer_start(&p);
  char uri[64], addr[64];
  fk_peer_uri(&p, uri, sizeof uri);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  o.retry_attempts = 0;
  diag_rec rec;
  rec_init(&rec, &o);
  rlock_client *c = open_rec(&o);
  rlock *l = rt_lock(c, "diag-peer");
  cr_assert_eq(rlock_is_locked(l), 0); /* shows the peer the connection */
  rec_clear(&rec);
  fk_peer_inject(&p, "+OK\r\n");
  rec_wait_for(&rec, RLOCK_DIAG_INFO, "reconnected to", "(commands)", 3000);
  char want[256];
  snprintf(want, sizeof want,
           "lost connection to %s (commands): "
           "RLOCK_EPROTO: unsolicited reply from %s: +OK (not a Redis "
           "server?); reconnecting in",
           addr, addr);
  REC_EXPECT(&rec, 1, RLOCK_DIAG_ERROR, want);
  REC_EXPECT(&rec, 1, RLOCK_DIAG_ERROR);
  rlock_free(l);
  rlock_client_free(c);
  fk_peer_stop(&p);
}

/* ---- a callback that calls back into the library ---- */

typedef struct reentry {
  atomic_int calls;
  int rc;
  char err[256];
  int free_rc;
} reentry;

static void reentering_cb(rlock_client *client, rlock_diag_level level,
                          const char *message, void *data) {
  (void)level;
  reentry *r = data;
  if (strstr(message, "connected to") == NULL ||
      atomic_fetch_add(&r->calls, 1) != 0)
    return;
  rlock *l = NULL;
  r->free_rc = rlock_new(client, "diag-reentry", &l);
  if (r->free_rc != 0)
    return;
  r->rc = rlock_lock(l, 1000); /* blocking, on the loop thread */
  snprintf(r->err, sizeof r->err, "%s", rlock_last_error());
  rlock_free(l);
}

/* Not allowed, and documented so - but it must not hang the client: the
 * blocking call returns RLOCK_EDEADLK with a detail, open completes and
 * the client works. */
Test(diag, callback_calling_a_blocking_function_gets_edeadlk) {
  reentry r;
  memset(&r, 0, sizeof r);
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.on_diag = reentering_cb;
  o.on_diag_data = &r;
  int64_t t0 = rt_now_ms();
  rlock_client *c = open_rec(&o);
  cr_assert_lt(rt_now_ms() - t0, 3000, "open took %lld ms",
               (long long)(rt_now_ms() - t0));
  cr_assert_eq(r.free_rc, 0, "rlock_new in the callback: %s",
               rlock_err_name(r.free_rc));
  cr_assert_eq(r.rc, RLOCK_EDEADLK, "rlock_lock in the callback: %s",
               rlock_err_name(r.rc));
  cr_assert(strstr(r.err, "loop thread") != NULL, "detail: %s", r.err);
  cr_assert_eq(rt_exists("diag-reentry"), 0);
  rlock *l = rt_lock(c, "diag-reentry");
  cr_assert_eq(rlock_try_lock(l, 0, 10000), 1);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}
