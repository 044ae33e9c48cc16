/* Stats through Sentinel (1 master, 1 replica, 3 sentinels; tests/topo's
 * harness): the replica-sync outcomes counted as the server answered them,
 * and an acquire no replica confirmed counted as a failure by its code and
 * told as GAVE_UP. In the topo suite (about 7 s of setup). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>

#include "topo_client.h"

TestSuite(observe_topo, .init = rt_sentinel_start, .fini = rt_topo_stop_all,
          .timeout = 120);

typedef struct gave_up {
  pthread_mutex_t mu;
  int n, error, cause;
} gave_up;

static void on_event(const rlock_event *ev, void *data) {
  gave_up *g = data;
  if (ev->type != RLOCK_EVENT_GAVE_UP)
    return;
  pthread_mutex_lock(&g->mu);
  g->n++;
  g->error = ev->error;
  g->cause = ev->cause;
  pthread_mutex_unlock(&g->mu);
}

static rlock_stats stats_of(rlock_client *c) {
  rlock_stats s;
  rlock_stats_init(&s);
  cr_assert_eq(rlock_client_stats(c, &s), 0, "%s", rlock_last_error());
  return s;
}

Test(observe_topo, replica_sync_outcomes_are_counted) {
  gave_up g = {.mu = PTHREAD_MUTEX_INITIALIZER};
  rlock_options o;
  rlock_options_init(&o);
  o.replica_sync_timeout_ms = 500;
  o.on_event = on_event;
  o.on_event_data = &g;
  rlock_client *c = tc_open(rt_sentinel_uri(), &o);
  char k1[64], k2[64];
  rt_key(k1, sizeof k1, "obs-sync");
  rt_key(k2, sizeof k2, "obs-nosync");
  rlock *l1 = tc_lock(c, k1), *l2 = tc_lock(c, k2);

  /* the acquire and the release, each followed by a WAIT the replica
   * answers */
  TC_EQ(rlock_try_lock(l1, 0, 10000), 1, "lock with the replica linked");
  TC_EQ(rlock_unlock(l1), 0, "unlock");
  rlock_stats s = stats_of(c);
  cr_assert_eq(s.replica_sync_ok, 2, "%" PRIu64, s.replica_sync_ok);
  cr_assert_eq(s.replica_sync_unconfirmed, 0);

  rt_sentinel_pause_node(rt_sentinel_replica_port(), true);
  int rc = rlock_try_lock(l2, 0, 10000);
  rt_sentinel_pause_node(rt_sentinel_replica_port(), false);
  cr_assert_eq(rc, RLOCK_ENOREPLICA, "%s (%s)", rlock_err_name(rc),
               rlock_last_error());
  s = stats_of(c);
  cr_assert_eq(s.replica_sync_ok, 2);
  cr_assert_geq(s.replica_sync_unconfirmed, 1);
  cr_assert_eq(s.failures[-RLOCK_ENOREPLICA], 1);
  cr_assert_eq(s.acquisitions, 1);
  cr_assert_eq(s.releases, 1);
  pthread_mutex_lock(&g.mu);
  cr_assert_eq(g.n, 1);
  cr_assert_eq(g.cause, RLOCK_EVENT_ERROR);
  cr_assert_eq(g.error, RLOCK_ENOREPLICA);
  pthread_mutex_unlock(&g.mu);
  rlock_free(l1);
  rlock_free(l2);
  rlock_client_free(c);
}
