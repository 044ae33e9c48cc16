/* The guard and the check call through a real 3-master Redis Cluster
 * (issue 37; tests/topo's harness): a guarded write whose keys share the
 * guard's hash tag runs on the guard's node; one whose key is in another
 * slot is refused before anything is sent (RLOCK_ECLUSTER), nothing
 * written; stale tokens are refused there as anywhere. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fence_test.h"
#include "topo_client.h"

static void cluster3(void) { rt_cluster_start(3, 0); }

TestSuite(fence_cluster, .init = cluster3, .fini = rt_topo_stop_all,
          .timeout = 180);

Test(fence_cluster, guarded_writes_on_the_guards_slot_only) {
  rlock_client *c = tc_open(rt_cluster_uri(), NULL);
  const char *name = "acct:7";
  rlock *l = NULL;
  cr_assert_eq(rlock_new_fenced(c, name, &l), 0);
  int64_t t = 0;
  cr_assert_eq(rlock_try_lock_fenced(l, 10000, 30000, &t), 1);
  cr_assert_eq(rlock_check_token(l, t), RLOCK_FENCE_CURRENT);
  cr_assert_eq(rlock_check_token(l, t - 1), RLOCK_FENCE_STALE);
  rlock_guard *g = NULL;
  cr_assert_eq(rlock_guard_new(c, "{acct:7}:guard", &g), 0);
  const char *data = "{acct:7}:data";
  cr_assert_eq(fence_set(g, name, t, data, "mine"), 0, "%s",
               rlock_last_error());
  int port = rt_cluster_key_owner(data);
  char *v = rt_node_str(port, "GET %s", data);
  cr_assert_str_eq(v, "mine");
  free(v);
  cr_assert_eq(fence_set(g, name, t - 1, data, "old"), RLOCK_ESTALE);
  /* a script over two keys of the tag */
  rlock_guarded_write w;
  rlock_guarded_write_init(&w);
  w.lock_name = name;
  w.token = t;
  w.op = RLOCK_GUARD_EVAL;
  const char *keys[] = {data, "{acct:7}:n"};
  w.script = "redis.call('incr', KEYS[2]); return redis.call('strlen', "
             "KEYS[1])";
  w.keys = keys;
  w.nkeys = 2;
  int64_t res = 0;
  cr_assert_eq(rlock_guard_write(g, &w, &res), 0, "%s", rlock_last_error());
  cr_assert_eq(res, 4);
  /* a key in another slot: refused before sending */
  const char *other = "elsewhere:data";
  cr_assert_neq(rt_key_slot(other), rt_key_slot("{acct:7}:guard"));
  cr_assert_eq(fence_set(g, name, t + 1, other, "x"), RLOCK_ECLUSTER);
  cr_assert(strstr(rlock_last_error(), "slot") != NULL, "%s",
            rlock_last_error());
  cr_assert_eq(tc_exists_asking(rt_cluster_key_owner(other), other), 0);
  keys[1] = other;
  cr_assert_eq(rlock_guard_write(g, &w, &res), RLOCK_ECLUSTER);
  v = rt_node_str(rt_cluster_key_owner("{acct:7}:guard"),
                  "HGET {acct:7}:guard token");
  char want[24];
  snprintf(want, sizeof want, "%lld", (long long)t);
  cr_assert_str_eq(v, want, "the refused writes recorded no token");
  free(v);
  cr_assert_eq(rlock_unlock(l), 0);
  rlock_guard_free(g);
  rlock_free(l);
  rlock_client_free(c);
}
