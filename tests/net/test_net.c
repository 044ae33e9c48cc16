/* The transport (lib/net/link.c) against a real redis-server: DNS names
 * resolved off the loop thread and every address tried in turn, the
 * connect timeout, the bounded write queue, unix sockets.
 *
 * The resolver is the one fault injected in-process: this executable
 * defines getaddrinfo(), which libuv's thread pool calls, for names under
 * ".rlock.test" (two addresses of which the first refuses; no address; a
 * slow answer), and hands every other name to the C library's. A real slow
 * or multi-address DNS server cannot be set up without root changes to the
 * machine's resolver configuration. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* ---- the resolver ---- */

static atomic_int slow_dns_ms;      /* delay for slow.rlock.test */
static atomic_int slow_dns_started; /* lookups of slow.rlock.test begun */
static atomic_int two_dns_calls;    /* lookups of two.rlock.test */

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *,
                      struct addrinfo **);

static gai_fn real_gai(void) {
  static gai_fn fn;
  if (fn == NULL) {
    void *sym = dlsym(RTLD_NEXT, "getaddrinfo");
    memcpy(&fn, &sym, sizeof fn); /* object to function pointer (POSIX) */
  }
  return fn;
}

int getaddrinfo(const char *node, const char *service,
                const struct addrinfo *hints, struct addrinfo **res) {
  if (node != NULL && strcmp(node, "two.rlock.test") == 0) {
    /* 127.0.0.2 first: the test server listens on 127.0.0.1 only, so the
     * first address refuses and the second must be tried. Both lists come
     * from the C library, so its freeaddrinfo frees the chain. */
    atomic_fetch_add(&two_dns_calls, 1);
    struct addrinfo *first = NULL, *second = NULL;
    int rc = real_gai()("127.0.0.2", service, hints, &first);
    if (rc != 0)
      return rc;
    rc = real_gai()("127.0.0.1", service, hints, &second);
    if (rc != 0) {
      freeaddrinfo(first);
      return rc;
    }
    struct addrinfo *tail = first;
    while (tail->ai_next != NULL)
      tail = tail->ai_next;
    tail->ai_next = second;
    *res = first;
    return 0;
  }
  if (node != NULL && strcmp(node, "none.rlock.test") == 0)
    return EAI_NONAME;
  if (node != NULL && strcmp(node, "slow.rlock.test") == 0) {
    atomic_fetch_add(&slow_dns_started, 1);
    int ms = atomic_load(&slow_dns_ms);
    if (ms > 0)
      usleep((useconds_t)ms * 1000);
    return real_gai()("127.0.0.1", service, hints, res);
  }
  return real_gai()(node, service, hints, res);
}

TestSuite(net, .init = rt_server_start, .fini = rt_server_stop,
          .timeout = 90);

static rlock_client *open_uri(const char *uri, rlock_options *o) {
  o->uri = uri;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, o);
  cr_assert_eq(rc, 0, "open %s: %s (%s)", uri, rlock_err_name(rc),
               rlock_last_error());
  return c;
}

static void lock_unlock(rlock_client *c, const char *base) {
  char key[96];
  rt_key(key, sizeof key, base);
  rlock *l = rt_lock(c, key);
  int rc = rlock_lock(l, 5000);
  cr_assert_eq(rc, 0, "lock: %s (%s)", rlock_err_name(rc), rlock_last_error());
  cr_assert_eq(rt_exists(key), 1, "the lock key is in Redis");
  cr_assert_eq(rlock_unlock(l), 0);
  cr_assert_eq(rt_exists(key), 0, "the unlock deleted the key");
  rlock_free(l);
}

/* ---- DNS ---- */

Test(net, dns_name_each_address_in_turn) {
  char uri[96];
  snprintf(uri, sizeof uri, "redis://two.rlock.test:%d", rt_port());
  rlock_options o;
  rlock_options_init(&o);
  rlock_client *c = open_uri(uri, &o);
  cr_assert_geq(atomic_load(&two_dns_calls), 1,
                "the name went through the resolver");
  lock_unlock(c, "net-dns");
  rlock_client_free(c);
}

Test(net, dns_name_without_address_is_econn) {
  char uri[96];
  snprintf(uri, sizeof uri, "redis://none.rlock.test:%d", rt_port());
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, RLOCK_ECONN, "%s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_null(c);
  cr_assert_not_null(strstr(rlock_last_error(), "none.rlock.test"), "%s",
                     rlock_last_error());
  cr_assert_not_null(strstr(rlock_last_error(), "resolve"), "%s",
                     rlock_last_error());
}

/* The subscriber connection is killed and reconnects through a resolver
 * that takes 2.5 s. Meanwhile the command connection, on the same loop
 * thread, answers at once: the lookup runs on libuv's thread pool. (With
 * a getaddrinfo on the loop thread, each call would wait out the lookup.) */
Test(net, slow_dns_does_not_stall_the_loop) {
  char uri[96];
  snprintf(uri, sizeof uri, "redis://slow.rlock.test:%d", rt_port());
  rlock_options o;
  rlock_options_init(&o);
  o.client_name = "net-slow-dns";
  rlock_client *c = open_uri(uri, &o);
  char key[96];
  rt_key(key, sizeof key, "net-slow");
  rlock *l = rt_lock(c, key);
  cr_assert_eq(rlock_lock(l, -1), 0);

  int started = atomic_load(&slow_dns_started);
  atomic_store(&slow_dns_ms, 2500);
  /* The subscriber connection: this client's connection whose last
   * command is the handshake's PING (the other one ran the lock script). */
  char *list = rt_str("CLIENT LIST");
  long long sub_id = -1;
  for (char *line = strtok(list, "\n"); line != NULL;
       line = strtok(NULL, "\n"))
    if (strstr(line, " name=net-slow-dns ") != NULL &&
        strstr(line, " cmd=ping") != NULL)
      sub_id = atoll(strstr(line, "id=") + 3);
  free(list);
  cr_assert_gt(sub_id, 0, "found the subscriber connection");
  long long killed = rt_int("CLIENT KILL ID %lld", sub_id);
  cr_assert_eq(killed, 1, "the subscriber connection was killed");
  int64_t t0 = rt_now_ms();
  while (atomic_load(&slow_dns_started) == started &&
         rt_now_ms() - t0 < 3000)
    rt_sleep_ms(2);
  cr_assert_gt(atomic_load(&slow_dns_started), started,
               "the subscriber connection began to resolve again");

  int64_t worst = 0;
  for (int i = 0; i < 10; i++) {
    int64_t t = rt_now_ms();
    int rc = rlock_is_locked(l);
    int64_t took = rt_now_ms() - t;
    cr_assert_eq(rc, 1, "is_locked during the lookup: %s (%s)",
                 rlock_err_name(rc), rlock_last_error());
    if (took > worst)
      worst = took;
    rt_sleep_ms(100);
  }
  cr_assert_lt(worst, 500,
               "a call took %lld ms while the resolver was slow",
               (long long)worst);
  atomic_store(&slow_dns_ms, 0);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_free(l);
  rlock_client_free(c);
}

/* An unlock while the waiter's subscriber connection is down (its
 * reconnect held up 1.5 s by the slow resolver) is not heard: the
 * waiter must try again once its channel is subscribed again and take
 * the lock then, not sleep on until its wait ends (12 s here). */
typedef struct resub_job {
  rlock *lock;
  int rc;
  int64_t t_end;
  atomic_bool done;
} resub_job;

static void resub_try(void *arg) {
  resub_job *j = arg;
  j->rc = rlock_try_lock(j->lock, 12000, 30000);
  j->t_end = rt_now_ms();
  if (j->rc == 1)
    rlock_unlock(j->lock);
  atomic_store(&j->done, true);
}

static long long evalsha_calls(void) {
  char *info = rt_str("INFO commandstats");
  const char *p = strstr(info, "cmdstat_evalsha:calls=");
  long long calls = p ? strtoll(p + strlen("cmdstat_evalsha:calls="), NULL,
                                10)
                      : 0;
  free(info);
  return calls;
}

Test(net, unlock_during_the_subscriber_reconnect_wakes_the_waiter) {
  char uri[96];
  snprintf(uri, sizeof uri, "redis://slow.rlock.test:%d", rt_port());
  rlock_options ho, wo;
  rlock_options_init(&ho);
  rlock_options_init(&wo);
  rlock_client *holder = open_uri(rt_uri(), &ho);
  rlock_client *waiter = open_uri(uri, &wo);
  char key[96], chan[160];
  rt_key(key, sizeof key, "net-resub");
  rt_lock_channel(chan, sizeof chan, key);
  rlock *lh = rt_lock(holder, key);
  cr_assert_eq(rlock_lock(lh, 30000), 0);
  resub_job job = {.lock = rt_lock(waiter, key)};
  rt_thread t;
  rt_thread_start(&t, resub_try, &job);
  /* asleep on the channel: subscribed, and its two tries made */
  int64_t t0 = rt_now_ms();
  while ((rt_numsub(chan) != 1 || evalsha_calls() < 3) &&
         rt_now_ms() - t0 < 10000)
    rt_sleep_ms(5);
  cr_assert_eq(rt_numsub(chan), 1, "the waiter subscribed");
  rt_sleep_ms(100);
  long long tries = evalsha_calls();

  int started = atomic_load(&slow_dns_started);
  atomic_store(&slow_dns_ms, 1500);
  long long killed = rt_int("CLIENT KILL TYPE pubsub");
  cr_assert_eq(killed, 1, "the waiter's subscriber connection was killed");
  /* The reconnect is resolving, and the sleeper's try at the disconnect
   * (the lock still held) has been answered. */
  t0 = rt_now_ms();
  while ((atomic_load(&slow_dns_started) == started ||
          evalsha_calls() < tries + 1) &&
         rt_now_ms() - t0 < 3000)
    rt_sleep_ms(2);
  cr_assert_gt(atomic_load(&slow_dns_started), started, "no reconnect began");
  cr_assert_geq(evalsha_calls(), tries + 1, "no try at the disconnect");
  rt_sleep_ms(50);
  cr_assert_eq(rt_numsub(chan), 0, "still subscribed during the lookup");
  cr_assert(!atomic_load(&job.done), "the waiter ended early: %d", job.rc);

  int64_t unlocked = rt_now_ms();
  cr_assert_eq(rlock_unlock(lh), 0);
  rt_thread_join(&t, 20000);
  atomic_store(&slow_dns_ms, 0);
  cr_assert_eq(job.rc, 1, "the waiter did not get the lock: %d", job.rc);
  int64_t after = job.t_end - unlocked;
  cr_assert_lt(after, 1500 + 2500,
               "the waiter took the lock %lld ms after the unlock (the "
               "resolver held the reconnect 1.5 s)", (long long)after);
  rlock_free(job.lock);
  rlock_free(lh);
  rlock_client_free(waiter);
  rlock_client_free(holder);
}

/* ---- connecting ---- */

/* A listener whose accept queue is full drops new SYNs: the connect hangs,
 * and connect_timeout_ms ends it. */
Test(net, connect_timeout_ends_a_hanging_connect) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(lfd, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(lfd, 0), 0);
  socklen_t alen = sizeof a;
  cr_assert_eq(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
  int fillers[4];
  for (int i = 0; i < 4; i++) {
    fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(fillers[i], (struct sockaddr *)&a, sizeof a);
  }
  rt_sleep_ms(200);

  char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", ntohs(a.sin_port));
  rlock_options o;
  rlock_options_init(&o);
  o.uri = uri;
  o.connect_timeout_ms = 500;
  rlock_client *c = NULL;
  int64_t t0 = rt_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = rt_now_ms() - t0;
  cr_assert_eq(rc, RLOCK_ETIMEDOUT, "%s (%s)", rlock_err_name(rc),
               rlock_last_error());
  cr_assert_not_null(strstr(rlock_last_error(), "connect_timeout_ms"), "%s",
                     rlock_last_error());
  cr_assert_geq(took, 450, "gave up after %lld ms", (long long)took);
  cr_assert_lt(took, 3000, "gave up after %lld ms", (long long)took);
  for (int i = 0; i < 4; i++)
    close(fillers[i]);
  close(lfd);
}

Test(net, unix_socket) {
  char path[300], uri[320];
  snprintf(path, sizeof path, "/tmp/rlock-net-%d.sock", (int)getpid());
  const char *extra[] = {"--unixsocket", path, "--unixsocketperm", "700",
                         NULL};
  rt_server_start_args(extra);
  snprintf(uri, sizeof uri, "unix://%s", path);
  rlock_options o;
  rlock_options_init(&o);
  rlock_client *c = open_uri(uri, &o);
  lock_unlock(c, "net-unix");
  rlock_client_free(c);
  unlink(path);
}

/* ---- the write queue ---- */

typedef struct backlog_state {
  atomic_int done, backlog, acquired, not_acquired, other;
  atomic_int other_code;
  char detail[256];
  atomic_bool have_detail;
} backlog_state;

static void backlog_cb(int status, int64_t value, void *data) {
  (void)value;
  backlog_state *s = data;
  if (status == RLOCK_EBACKLOG) {
    if (!atomic_exchange(&s->have_detail, true))
      snprintf(s->detail, sizeof s->detail, "%s", rlock_last_error());
    atomic_fetch_add(&s->backlog, 1);
  } else if (status == 1) {
    atomic_fetch_add(&s->acquired, 1);
  } else if (status == 0) {
    atomic_fetch_add(&s->not_acquired, 1);
  } else {
    atomic_store(&s->other_code, status);
    atomic_fetch_add(&s->other, 1);
  }
  atomic_fetch_add(&s->done, 1);
}

/* The server stops reading (SIGSTOP): the socket buffers fill, then the
 * client's queue, to max_write_queue_bytes. The next command fails with
 * RLOCK_EBACKLOG (never sent) instead of growing memory; when the server
 * goes on, everything that was accepted is answered. */
Test(net, write_queue_is_bounded) {
  rlock_options o;
  rlock_options_init(&o);
  o.uri = rt_uri();
  o.max_write_queue_bytes = 65536;
  o.command_timeout_ms = 60000;
  o.retry_attempts = 0;
  rlock_client *c = NULL;
  int rc = rlock_client_new(&c, &o);
  cr_assert_eq(rc, 0, "%s (%s)", rlock_err_name(rc), rlock_last_error());
  static char name[40001];
  memset(name, 'q', sizeof name - 1);
  snprintf(name, 32, "net-backlog:%d:", (int)getpid());
  name[strlen(name)] = 'q';
  rlock *l = rt_lock(c, name);

  static backlog_state s;
  cr_assert_eq(kill(rt_server_pid(), SIGSTOP), 0);
  int sent = 0;
  while (sent < 5000 && atomic_load(&s.backlog) == 0) {
    rc = rlock_lock_async(l, rlock_owner_new(), 0, 60000, backlog_cb, &s,
                          NULL);
    if (rc != 0) {
      kill(rt_server_pid(), SIGCONT);
      cr_assert_fail("lock_async: %s (%s)", rlock_err_name(rc),
                     rlock_last_error());
    }
    sent++;
    if (sent % 8 == 0)
      rt_sleep_ms(2); /* let the loop write what it can */
  }
  rt_sleep_ms(100);
  int refused = atomic_load(&s.backlog);
  kill(rt_server_pid(), SIGCONT);
  cr_assert_gt(refused, 0, "no RLOCK_EBACKLOG after %d commands of ~%zu "
               "bytes", sent, 2 * sizeof name);
  cr_assert_not_null(strstr(s.detail, "write queue"), "detail: %s", s.detail);

  int64_t t0 = rt_now_ms();
  while (atomic_load(&s.done) < sent && rt_now_ms() - t0 < 30000)
    rt_sleep_ms(5);
  cr_assert_eq(atomic_load(&s.done), sent, "callbacks: %d of %d",
               atomic_load(&s.done), sent);
  cr_assert_eq(atomic_load(&s.other), 0, "an accepted command failed: %s",
               rlock_err_name(atomic_load(&s.other_code)));
  cr_assert_eq(atomic_load(&s.acquired), 1,
               "exactly one of the accepted tries got the lock");
  cr_assert_eq(atomic_load(&s.acquired) + atomic_load(&s.not_acquired) +
                   atomic_load(&s.backlog),
               sent);
  /* Nothing is stuck: the client works on. */
  rc = rlock_force_unlock(l);
  cr_assert_eq(rc, 1, "force_unlock: %s (%s)", rlock_err_name(rc),
               rlock_last_error());
  rlock_free(l);
  lock_unlock(c, "net-after-backlog");
  rlock_client_free(c);
}
