/* lib/net/topo_parse.c: the readers of CLUSTER SLOTS / SHARDS, MOVED / ASK,
 * SENTINEL GET-MASTER-ADDR-BY-NAME, +switch-master and ROLE. Replies are
 * built from RESP bytes with hiredis's own reader, so the trees are exactly
 * those the library sees. The REAL_* replies were captured from Redis 7.0.15
 * (3 masters + 3 replicas made by redis-cli --cluster create, slot 100
 * moved from the first master to the second, slot 200 migrating; one
 * sentinel monitoring the first master); the rest are the ways a peer can
 * get them wrong. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo.h"

static redisReply *parse_n(const char *resp, size_t len) {
  redisReader *rd = redisReaderCreate();
  cr_assert_not_null(rd);
  cr_assert_eq(redisReaderFeed(rd, resp, len), REDIS_OK);
  void *reply = NULL;
  cr_assert_eq(redisReaderGetReply(rd, &reply), REDIS_OK, "%s", rd->errstr);
  cr_assert_not_null(reply, "incomplete RESP in the test: %s", resp);
  void *more = NULL;
  cr_assert_eq(redisReaderGetReply(rd, &more), REDIS_OK);
  cr_assert_null(more, "trailing bytes after the reply in the test");
  redisReaderFree(rd);
  return reply;
}
#define P(lit) parse_n(lit, sizeof(lit) - 1)

/* ---- captured replies ---- */

static const char REAL_SHARDS[] =
    "*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\n"
    "nodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n"
    "57956cd1e65c76df623cc188971f28208e740151\r\n$4\r\nport\r\n"
    ":47467\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\n"
    "replication-offset\r\n:42\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n"
    "584049cdbbecb138eed523bcd786b26bace6b93a\r\n$4\r\nport\r\n"
    ":41829\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\n"
    "replication-offset\r\n:42\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*4\r\n$5\r\nslots\r\n*4\r\n:100\r\n:100\r\n:5461\r\n:10922\r\n"
    "$5\r\nnodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n"
    "bb547df5a10e827b604eaabfc3797f5978841038\r\n$4\r\nport\r\n"
    ":37295\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\n"
    "replication-offset\r\n:56\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n"
    "9e985c34c6fe3791117eed793cc07e7150e4b552\r\n$4\r\nport\r\n"
    ":36773\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\n"
    "replication-offset\r\n:42\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:99\r\n:101\r\n:5460\r\n$5\r\n"
    "nodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n"
    "a97a1ec628b9cda128ee7aa4ebe3d5f1d6da5313\r\n$4\r\nport\r\n"
    ":33305\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\n"
    "replication-offset\r\n:56\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n"
    "62c670d1a852b03000ad18a273f2114139907043\r\n$4\r\nport\r\n"
    ":40671\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\n"
    "replication-offset\r\n:56\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

static const char REAL_SLOTS[] =
    "*5\r\n*4\r\n:0\r\n:99\r\n*4\r\n$9\r\n127.0.0.1\r\n:33305\r\n"
    "$40\r\na97a1ec628b9cda128ee7aa4ebe3d5f1d6da5313\r\n*0\r\n*4\r\n"
    "$9\r\n127.0.0.1\r\n:40671\r\n$40\r\n"
    "62c670d1a852b03000ad18a273f2114139907043\r\n*0\r\n*4\r\n:100\r\n"
    ":100\r\n*4\r\n$9\r\n127.0.0.1\r\n:37295\r\n$40\r\n"
    "bb547df5a10e827b604eaabfc3797f5978841038\r\n*0\r\n*4\r\n$9\r\n"
    "127.0.0.1\r\n:36773\r\n$40\r\n"
    "9e985c34c6fe3791117eed793cc07e7150e4b552\r\n*0\r\n*4\r\n:101\r\n"
    ":5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:33305\r\n$40\r\n"
    "a97a1ec628b9cda128ee7aa4ebe3d5f1d6da5313\r\n*0\r\n*4\r\n$9\r\n"
    "127.0.0.1\r\n:40671\r\n$40\r\n"
    "62c670d1a852b03000ad18a273f2114139907043\r\n*0\r\n*4\r\n:5461\r\n"
    ":10922\r\n*4\r\n$9\r\n127.0.0.1\r\n:37295\r\n$40\r\n"
    "bb547df5a10e827b604eaabfc3797f5978841038\r\n*0\r\n*4\r\n$9\r\n"
    "127.0.0.1\r\n:36773\r\n$40\r\n"
    "9e985c34c6fe3791117eed793cc07e7150e4b552\r\n*0\r\n*4\r\n:10923\r\n"
    ":16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:47467\r\n$40\r\n"
    "57956cd1e65c76df623cc188971f28208e740151\r\n*0\r\n*4\r\n$9\r\n"
    "127.0.0.1\r\n:41829\r\n$40\r\n"
    "584049cdbbecb138eed523bcd786b26bace6b93a\r\n*0\r\n";

/* Right after --cluster create, before the replicas had synced: CLUSTER
 * SLOTS lists no replica (they were "loading"). */
static const char REAL_SLOTS_NO_REPLICAS[] =
    "*1\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:33305\r\n"
    "$40\r\na97a1ec628b9cda128ee7aa4ebe3d5f1d6da5313\r\n*0\r\n";

static const char REAL_ROLE_MASTER[] =
    "*3\r\n$6\r\nmaster\r\n:56\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$5\r\n"
    "40671\r\n$2\r\n56\r\n";
static const char REAL_ROLE_REPLICA[] =
    "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:47467\r\n$9\r\n"
    "connected\r\n:56\r\n";
static const char REAL_ROLE_SENTINEL[] =
    "*2\r\n$8\r\nsentinel\r\n*1\r\n$8\r\nmymaster\r\n";
static const char REAL_MASTER_ADDR[] =
    "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n33305\r\n";
static const char REAL_MASTER_ADDR_UNKNOWN[] = "*-1\r\n";
static const char REAL_MOVED[] = "-MOVED 12182 127.0.0.1:47467\r\n";
static const char REAL_ASK[] = "-ASK 200 127.0.0.1:37295\r\n";

/* ---- helpers for CLUSTER SLOTS / SHARDS ---- */

static int slots_of(const char *resp, size_t len, const char *fallback,
                    rlock__slot_range **out, char *err) {
  redisReply *r = parse_n(resp, len);
  err[0] = '\0';
  int n = rlock__parse_cluster_slots(r, fallback, out, err, 256);
  freeReplyObject(r);
  if (n < 0) {
    cr_assert_null(*out);
    cr_assert_neq(err[0], '\0', "a refusal without a sentence");
  }
  return n;
}
#define SLOTS(lit, fb, out, err) slots_of(lit, sizeof(lit) - 1, fb, out, err)

static int shards_of(const char *resp, size_t len, int tls,
                     const char *fallback, rlock__slot_range **out,
                     char *err) {
  redisReply *r = parse_n(resp, len);
  err[0] = '\0';
  int n = rlock__parse_cluster_shards(r, tls, fallback, out, err, 256);
  freeReplyObject(r);
  if (n < 0) {
    cr_assert_null(*out);
    cr_assert_neq(err[0], '\0', "a refusal without a sentence");
  }
  return n;
}
#define SHARDS(lit, tls, fb, out, err)                                       \
  shards_of(lit, sizeof(lit) - 1, tls, fb, out, err)

static void expect_range(const rlock__slot_range *g, int start, int end,
                         const char *host, int port, int replicas) {
  cr_assert_eq(g->start, start);
  cr_assert_eq(g->end, end);
  cr_assert_str_eq(g->host, host);
  cr_assert_eq(g->port, port);
  cr_assert_eq(g->replicas, replicas);
}

/* ---- CLUSTER SLOTS ---- */

Test(topo_slots, real_reply) {
  rlock__slot_range *v = NULL;
  char err[256];
  int n = SLOTS(REAL_SLOTS, "seed", &v, err);
  cr_assert_eq(n, 5, "%s", err);
  expect_range(&v[0], 0, 99, "127.0.0.1", 33305, 1);
  expect_range(&v[1], 100, 100, "127.0.0.1", 37295, 1);
  expect_range(&v[2], 101, 5460, "127.0.0.1", 33305, 1);
  expect_range(&v[3], 5461, 10922, "127.0.0.1", 37295, 1);
  expect_range(&v[4], 10923, 16383, "127.0.0.1", 47467, 1);
  free(v);
}

Test(topo_slots, real_reply_without_replicas) {
  rlock__slot_range *v = NULL;
  char err[256];
  cr_assert_eq(SLOTS(REAL_SLOTS_NO_REPLICAS, NULL, &v, err), 1, "%s", err);
  expect_range(&v[0], 0, 5460, "127.0.0.1", 33305, 0);
  free(v);
}

Test(topo_slots, older_shape_and_empty) {
  rlock__slot_range *v = NULL;
  char err[256];
  /* Redis 3: [host, port] only, no id, no metadata. */
  cr_assert_eq(SLOTS("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$4\r\nhost\r\n"
                     ":6379\r\n", NULL, &v, err), 1, "%s", err);
  expect_range(&v[0], 0, 16383, "host", 6379, 0);
  free(v);
  v = (void *)1;
  cr_assert_eq(SLOTS("*0\r\n", NULL, &v, err), 0);
  cr_assert_null(v);
}

Test(topo_slots, unknown_address_falls_back) {
  rlock__slot_range *v = NULL;
  char err[256];
  /* "" (old versions), "?" (unknown endpoint), nil (7.x unknown-endpoint) */
  cr_assert_eq(SLOTS("*3\r\n"
                     "*3\r\n:0\r\n:1\r\n*2\r\n$0\r\n\r\n:7001\r\n"
                     "*3\r\n:2\r\n:3\r\n*2\r\n$1\r\n?\r\n:7002\r\n"
                     "*3\r\n:4\r\n:5\r\n*2\r\n$-1\r\n:7003\r\n",
                     "10.0.0.9", &v, err), 3, "%s", err);
  expect_range(&v[0], 0, 1, "10.0.0.9", 7001, 0);
  expect_range(&v[1], 2, 3, "10.0.0.9", 7002, 0);
  expect_range(&v[2], 4, 5, "10.0.0.9", 7003, 0);
  free(v);
  /* No fallback: refused rather than an empty address. */
  cr_assert_eq(SLOTS("*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$0\r\n\r\n:7001\r\n",
                     NULL, &v, err), -1);
  /* A fallback that is not a host. */
  cr_assert_eq(SLOTS("*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$0\r\n\r\n:7001\r\n",
                     "a b", &v, err), -1);
}

Test(topo_slots, malformed) {
  rlock__slot_range *v = NULL;
  char err[256];
  static const char *const bad[] = {
      "$-1\r\n",                                   /* nil */
      "-ERR This instance has cluster support disabled\r\n",
      ":1\r\n",                                    /* integer */
      "$3\r\nabc\r\n",                             /* string */
      "*1\r\n:5\r\n",                              /* entry not array */
      "*1\r\n*2\r\n:0\r\n:1\r\n",                  /* no master */
      "*1\r\n*3\r\n:0\r\n:1\r\n$1\r\nx\r\n",       /* master not array */
      "*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n$1\r\nh\r\n", /* master [host] only */
      "*1\r\n*3\r\n:0\r\n:1\r\n*0\r\n",            /* master [] */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n",     /* port 0 */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:70000\r\n", /* port big */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:-1\r\n",    /* port < 0 */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n$4\r\n6379\r\n", /* text */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n$-1\r\n",    /* port nil */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:6379\r\n",       /* host int */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n*0\r\n:6379\r\n",       /* host [] */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$3\r\na\tb\r\n:6379\r\n", /* ctrl */
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$3\r\na b\r\n:6379\r\n",  /* space */
      "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",   /* 16384 */
      "*1\r\n*3\r\n:-1\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",      /* < 0 */
      "*1\r\n*3\r\n:9\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",       /* start>end */
      "*1\r\n*3\r\n$1\r\nx\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",  /* start str */
      "*1\r\n*3\r\n$-1\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",      /* start nil */
      "*1\r\n*3\r\n$1\r\n0\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",  /* "0" */
      "*1\r\n*3\r\n:0\r\n$1\r\n5\r\n*2\r\n$1\r\nh\r\n:1\r\n",  /* "5" */
      "*1\r\n*4\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n:7\r\n", /* replica */
      "*2\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n$-1\r\n", /* 2nd nil */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(slots_of(bad[i], strlen(bad[i]), "seed", &v, err), -1,
                 "accepted bad[%zu]", i);
  }
}

Test(topo_slots, host_length_limit) {
  rlock__slot_range *v = NULL;
  char err[256];
  char host[RLOCK__HOST_MAX + 1];
  char resp[600];
  for (int len = RLOCK__HOST_MAX - 1; len <= RLOCK__HOST_MAX; len++) {
    memset(host, 'h', (size_t)len);
    host[len] = '\0';
    int n = snprintf(resp, sizeof resp,
                     "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$%d\r\n%s\r\n:6379\r\n",
                     len, host);
    cr_assert(n > 0 && (size_t)n < sizeof resp);
    int got = slots_of(resp, (size_t)n, NULL, &v, err);
    if (len == RLOCK__HOST_MAX - 1) { /* fits with its NUL */
      cr_assert_eq(got, 1, "%s", err);
      cr_assert_eq(strlen(v[0].host), (size_t)len);
      free(v);
    } else {
      cr_assert_eq(got, -1);
    }
  }
}

Test(topo_slots, embedded_nul_in_host) {
  rlock__slot_range *v = NULL;
  char err[256];
  static const char resp[] =
      "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$3\r\na\0b\r\n:6379\r\n";
  cr_assert_eq(slots_of(resp, sizeof resp - 1, NULL, &v, err), -1);
}

Test(topo_slots, too_many_ranges) {
  rlock__slot_range *v = NULL;
  char err[256];
  const char *entry = "*3\r\n:0\r\n:0\r\n*2\r\n$1\r\nh\r\n:1\r\n";
  for (int count = RLOCK__SLOTS; count <= RLOCK__SLOTS + 1; count++) {
    size_t el = strlen(entry);
    char *resp = malloc(32 + el * (size_t)count);
    cr_assert_not_null(resp);
    int off = sprintf(resp, "*%d\r\n", count);
    for (int i = 0; i < count; i++)
      memcpy(resp + off + (size_t)i * el, entry, el);
    int got = slots_of(resp, (size_t)off + el * (size_t)count, NULL, &v, err);
    free(resp);
    if (count == RLOCK__SLOTS) {
      cr_assert_eq(got, RLOCK__SLOTS, "%s", err);
      free(v);
    } else {
      cr_assert_eq(got, -1);
    }
  }
}

/* Trees hiredis never builds but a bug upstream might: NULL elements. */
Test(topo_slots, null_elements) {
  rlock__slot_range *v = NULL;
  char err[256] = "";
  redisReply *slots[1] = {NULL};
  redisReply top = {.type = REDIS_REPLY_ARRAY, .elements = 1,
                    .element = slots};
  cr_assert_eq(rlock__parse_cluster_slots(&top, NULL, &v, err, sizeof err),
               -1);
  cr_assert_null(v);
  redisReply none = {.type = REDIS_REPLY_ARRAY, .elements = 3,
                     .element = NULL};
  cr_assert_eq(rlock__parse_cluster_slots(&none, NULL, &v, err, sizeof err),
               -1);
  cr_assert_eq(rlock__parse_cluster_slots(NULL, NULL, &v, err, sizeof err),
               -1);
  cr_assert_eq(rlock__parse_cluster_shards(&top, 0, NULL, &v, err,
                                           sizeof err), -1);
  cr_assert_eq(rlock__parse_cluster_shards(&none, 0, NULL, &v, err,
                                           sizeof err), -1);
  cr_assert_eq(rlock__parse_cluster_shards(NULL, 0, NULL, &v, err,
                                           sizeof err), -1);
  /* err may be NULL. */
  cr_assert_eq(rlock__parse_cluster_slots(NULL, NULL, &v, NULL, 0), -1);
}

/* ---- CLUSTER SHARDS ---- */

Test(topo_shards, real_reply) {
  rlock__slot_range *v = NULL;
  char err[256];
  int n = SHARDS(REAL_SHARDS, 0, "seed", &v, err);
  cr_assert_eq(n, 5, "%s", err);
  /* One entry per range, in the order of the shards and their ranges. */
  expect_range(&v[0], 10923, 16383, "127.0.0.1", 47467, 1);
  expect_range(&v[1], 100, 100, "127.0.0.1", 37295, 1);
  expect_range(&v[2], 5461, 10922, "127.0.0.1", 37295, 1);
  expect_range(&v[3], 0, 99, "127.0.0.1", 33305, 1);
  expect_range(&v[4], 101, 5460, "127.0.0.1", 33305, 1);
  free(v);
  /* No TLS port in the reply: tls falls back to "port". */
  n = SHARDS(REAL_SHARDS, 1, "seed", &v, err);
  cr_assert_eq(n, 5, "%s", err);
  cr_assert_eq(v[0].port, 47467);
  free(v);
}

Test(topo_shards, skips_shards_without_slots) {
  rlock__slot_range *v = (void *)1;
  char err[256];
  /* A master without slots ("slots" []), and a shard with no "slots". */
  cr_assert_eq(SHARDS("*2\r\n"
                      "*4\r\n$5\r\nslots\r\n*0\r\n$5\r\nnodes\r\n*1\r\n"
                      "*6\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n"
                      "*2\r\n$5\r\nnodes\r\n*0\r\n",
                      0, NULL, &v, err), 0, "%s", err);
  cr_assert_null(v);
  cr_assert_eq(SHARDS("*0\r\n", 0, NULL, &v, err), 0);
  cr_assert_null(v);
}

static const char TLS_SHARD[] =
    "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
    "*12\r\n$2\r\nid\r\n$1\r\nx\r\n$4\r\nport\r\n:6379\r\n"
    "$8\r\ntls-port\r\n:6380\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n"
    "$8\r\nhostname\r\n$6\r\nnode-a\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";

static const char TLS_ONLY_SHARD[] =
    "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
    "*6\r\n$8\r\ntls-port\r\n:6380\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n"
    "$4\r\nrole\r\n$6\r\nmaster\r\n";

Test(topo_shards, ports_and_addresses) {
  rlock__slot_range *v = NULL;
  char err[256];
  /* No "endpoint": "ip" ("hostname" is not the address). */
  cr_assert_eq(SHARDS(TLS_SHARD, 0, NULL, &v, err), 1, "%s", err);
  expect_range(&v[0], 0, 16383, "10.0.0.1", 6379, 0);
  free(v);
  cr_assert_eq(SHARDS(TLS_SHARD, 1, NULL, &v, err), 1, "%s", err);
  expect_range(&v[0], 0, 16383, "10.0.0.1", 6380, 0);
  free(v);
  /* Only "tls-port": taken even without tls. */
  cr_assert_eq(SHARDS(TLS_ONLY_SHARD, 0, NULL, &v, err), 1, "%s", err);
  cr_assert_eq(v[0].port, 6380);
  free(v);
  /* "endpoint" wins over "ip"; "?" and nil mean the node asked. */
  cr_assert_eq(SHARDS("*3\r\n"
                      "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:1\r\n$5\r\nnodes\r\n"
                      "*1\r\n*8\r\n$2\r\nip\r\n$2\r\nip\r\n$8\r\nendpoint\r\n"
                      "$2\r\nep\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$4\r\nport\r\n:1\r\n"
                      "*4\r\n$5\r\nslots\r\n*2\r\n:2\r\n:3\r\n$5\r\nnodes\r\n"
                      "*1\r\n*8\r\n$2\r\nip\r\n$2\r\nip\r\n$8\r\nendpoint\r\n"
                      "$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$4\r\nport\r\n:2\r\n"
                      "*4\r\n$5\r\nslots\r\n*2\r\n:4\r\n:5\r\n$5\r\nnodes\r\n"
                      "*1\r\n*8\r\n$2\r\nip\r\n$2\r\nip\r\n$8\r\nendpoint\r\n"
                      "$-1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$4\r\nport\r\n:3\r\n",
                      0, "seed", &v, err), 3, "%s", err);
  expect_range(&v[0], 0, 1, "ep", 1, 0);
  expect_range(&v[1], 2, 3, "seed", 2, 0);
  expect_range(&v[2], 4, 5, "seed", 3, 0);
  free(v);
}

Test(topo_shards, failed_master_passed_over) {
  rlock__slot_range *v = NULL;
  char err[256];
  cr_assert_eq(SHARDS("*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:9\r\n"
                      "$5\r\nnodes\r\n*3\r\n"
                      "*8\r\n$2\r\nip\r\n$3\r\nold\r\n$4\r\nport\r\n:1\r\n"
                      "$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$6\r\nhealth\r\n$6\r\nfailed\r\n"
                      "*8\r\n$2\r\nip\r\n$3\r\nnew\r\n$4\r\nport\r\n:2\r\n"
                      "$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$6\r\nhealth\r\n$6\r\nonline\r\n"
                      "*8\r\n$2\r\nip\r\n$3\r\nrep\r\n$4\r\nport\r\n:3\r\n"
                      "$4\r\nrole\r\n$7\r\nreplica\r\n"
                      "$6\r\nhealth\r\n$7\r\nloading\r\n",
                      0, NULL, &v, err), 1, "%s", err);
  expect_range(&v[0], 0, 9, "new", 2, 1);
  free(v);
}

/* Valkey 8 says "fail" where Redis says "failed" (issue 27): the failed
 * master, listed first, is passed over all the same, and a failed replica
 * is not counted online. */
Test(topo_shards, valkey_fail_health) {
  rlock__slot_range *v = NULL;
  char err[256];
  cr_assert_eq(SHARDS("*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:9\r\n"
                      "$5\r\nnodes\r\n*3\r\n"
                      "*8\r\n$2\r\nip\r\n$3\r\nold\r\n$4\r\nport\r\n:1\r\n"
                      "$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$6\r\nhealth\r\n$4\r\nfail\r\n"
                      "*8\r\n$2\r\nip\r\n$3\r\nnew\r\n$4\r\nport\r\n:2\r\n"
                      "$4\r\nrole\r\n$6\r\nmaster\r\n"
                      "$6\r\nhealth\r\n$6\r\nonline\r\n"
                      "*8\r\n$2\r\nip\r\n$3\r\nrep\r\n$4\r\nport\r\n:3\r\n"
                      "$4\r\nrole\r\n$7\r\nreplica\r\n"
                      "$6\r\nhealth\r\n$4\r\nfail\r\n",
                      0, NULL, &v, err), 1, "%s", err);
  expect_range(&v[0], 0, 9, "new", 2, 1);
  cr_assert_eq(v[0].replicas_online, 0);
  free(v);
}

#define SHARD1(slots, nodes)                                                 \
  "*1\r\n*4\r\n$5\r\nslots\r\n" slots "$5\r\nnodes\r\n" nodes
#define MASTER_OK                                                            \
  "*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n"                   \
  "$4\r\nrole\r\n$6\r\nmaster\r\n"

Test(topo_shards, malformed) {
  rlock__slot_range *v = NULL;
  char err[256];
  static const char *const bad[] = {
      "$-1\r\n",
      "-ERR unknown subcommand 'SHARDS'\r\n",
      ":3\r\n",
      "*1\r\n:3\r\n",                                    /* shard not map */
      "*1\r\n*3\r\n$5\r\nslots\r\n*0\r\n$5\r\nnodes\r\n", /* odd map */
      "*1\r\n*2\r\n:1\r\n*0\r\n",                        /* key not text */
      SHARD1("*1\r\n:0\r\n", MASTER_OK),                 /* odd slots */
      SHARD1("*2\r\n:0\r\n:16384\r\n", MASTER_OK),       /* 16384 */
      SHARD1("*2\r\n:5\r\n:4\r\n", MASTER_OK),           /* start > end */
      SHARD1("*2\r\n:-1\r\n:4\r\n", MASTER_OK),          /* negative */
      SHARD1("*2\r\n$1\r\n0\r\n:4\r\n", MASTER_OK),      /* slot as text */
      SHARD1("*4\r\n:0\r\n:4\r\n:9\r\n:16384\r\n", MASTER_OK), /* 2nd bad */
      SHARD1("$1\r\nx\r\n", MASTER_OK),                  /* slots not array */
      SHARD1("*2\r\n:0\r\n:4\r\n", "$1\r\nx\r\n"),       /* nodes not array */
      SHARD1("*2\r\n:0\r\n:4\r\n", "*0\r\n"),            /* no nodes */
      "*1\r\n*2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:4\r\n",   /* "nodes" absent */
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* no master */
             "*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n"
             "$4\r\nrole\r\n$7\r\nreplica\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* no role */
             "*1\r\n*4\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* role int */
             "*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n"
             "$4\r\nrole\r\n:1\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* node not map */
             "*1\r\n:1\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* odd node */
             "*5\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:1\r\n"
             "$4\r\nrole\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* port 0 */
             "*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:0\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* port 70000 */
             "*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n:70000\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* port text */
             "*1\r\n*6\r\n$2\r\nip\r\n$1\r\nh\r\n$4\r\nport\r\n$1\r\n1\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* no port */
             "*1\r\n*4\r\n$2\r\nip\r\n$1\r\nh\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* no address */
             "*1\r\n*4\r\n$4\r\nport\r\n:1\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* ip integer */
             "*1\r\n*6\r\n$2\r\nip\r\n:1\r\n$4\r\nport\r\n:1\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* ip with \n */
             "*1\r\n*6\r\n$2\r\nip\r\n$3\r\na\nb\r\n$4\r\nport\r\n:1\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
      SHARD1("*2\r\n:0\r\n:4\r\n",                       /* "" , no seed */
             "*1\r\n*6\r\n$2\r\nip\r\n$0\r\n\r\n$4\r\nport\r\n:1\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n"),
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(shards_of(bad[i], strlen(bad[i]), 0, NULL, &v, err), -1,
                 "accepted bad[%zu]", i);
  }
}

Test(topo_shards, host_too_long) {
  rlock__slot_range *v = NULL;
  char err[256];
  char host[RLOCK__HOST_MAX + 1];
  memset(host, 'h', RLOCK__HOST_MAX);
  host[RLOCK__HOST_MAX] = '\0';
  char resp[800];
  int n = snprintf(resp, sizeof resp,
                   SHARD1("*2\r\n:0\r\n:4\r\n",
                          "*1\r\n*6\r\n$2\r\nip\r\n$%d\r\n%s\r\n"
                          "$4\r\nport\r\n:1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"),
                   RLOCK__HOST_MAX, host);
  cr_assert(n > 0 && (size_t)n < sizeof resp);
  cr_assert_eq(shards_of(resp, (size_t)n, 0, NULL, &v, err), -1);
}

Test(topo_shards, too_many_ranges) {
  rlock__slot_range *v = NULL;
  char err[256];
  /* One shard listing 16385 single-slot ranges (slots repeat: the count
   * is what is refused). */
  int count = RLOCK__SLOTS + 1;
  size_t cap = 64 + (size_t)count * 16 + 256;
  char *resp = malloc(cap);
  cr_assert_not_null(resp);
  size_t off = (size_t)sprintf(resp, "*1\r\n*4\r\n$5\r\nslots\r\n*%d\r\n",
                               count * 2);
  for (int i = 0; i < count; i++)
    off += (size_t)sprintf(resp + off, ":%d\r\n:%d\r\n", i % RLOCK__SLOTS,
                           i % RLOCK__SLOTS);
  off += (size_t)sprintf(resp + off, "$5\r\nnodes\r\n%s", MASTER_OK);
  cr_assert_eq(shards_of(resp, off, 0, NULL, &v, err), -1);
  free(resp);
}

/* ---- MOVED / ASK ---- */

static int redirect(const char *text, int *slot, char *host, size_t hostlen,
                    int *port) {
  return rlock__parse_redirect(text, strlen(text), slot, host, hostlen, port);
}

Test(topo_redirect, real_errors) {
  redisReply *r = P(REAL_MOVED);
  cr_assert_eq(r->type, REDIS_REPLY_ERROR);
  int slot = -1, port = -1;
  char host[RLOCK__HOST_MAX];
  cr_assert_eq(rlock__parse_redirect(r->str, r->len, &slot, host, sizeof host,
                                     &port), 1);
  cr_assert_eq(slot, 12182);
  cr_assert_str_eq(host, "127.0.0.1");
  cr_assert_eq(port, 47467);
  freeReplyObject(r);
  r = P(REAL_ASK);
  cr_assert_eq(rlock__parse_redirect(r->str, r->len, &slot, host, sizeof host,
                                     &port), 2);
  cr_assert_eq(slot, 200);
  cr_assert_str_eq(host, "127.0.0.1");
  cr_assert_eq(port, 37295);
  freeReplyObject(r);
}

Test(topo_redirect, ipv6_and_empty_host) {
  int slot, port;
  char host[RLOCK__HOST_MAX];
  cr_assert_eq(redirect("MOVED 0 ::1:6380", &slot, host, sizeof host, &port),
               1);
  cr_assert_str_eq(host, "::1");
  cr_assert_eq(port, 6380);
  cr_assert_eq(slot, 0);
  cr_assert_eq(redirect("ASK 16383 [fe80::1]:7000", &slot, host, sizeof host,
                        &port), 2);
  cr_assert_str_eq(host, "fe80::1");
  cr_assert_eq(slot, 16383);
  cr_assert_eq(redirect("MOVED 5 :6379", &slot, host, sizeof host, &port), 1);
  cr_assert_str_eq(host, "");
  cr_assert_eq(port, 6379);
  cr_assert_eq(redirect("MOVED 5 redis-1.example:6379", &slot, host,
                        sizeof host, &port), 1);
  cr_assert_str_eq(host, "redis-1.example");
}

Test(topo_redirect, other_or_malformed) {
  static const char *const bad[] = {
      "",
      "ERR unknown command",
      "MOVED",
      "MOVED ",
      "MOVED 1",
      "MOVED 1 ",
      "MOVED 1 h",
      "MOVED 1 h:",
      "MOVED 1 h:0",
      "MOVED 1 h:70000",
      "MOVED 1 h:123456",
      "MOVED 1 h:-1",
      "MOVED 1 h:6379x",
      "MOVED 1 h:6379 ",
      "MOVED 1 h:6379 extra",
      "MOVED 16384 h:1",
      "MOVED -1 h:1",
      "MOVED 000001 h:1",
      "MOVED x h:1",
      "MOVED  1 h:1",
      "MOVED 1  h:1",
      "MOVED 1 a\tb:1",
      "MOVED 1 a\x7f:1",
      "moved 1 h:1",
      "ASKING 1 h:1",
      "TRYAGAIN Multiple keys request during rehashing of slot",
      "CLUSTERDOWN The cluster is down",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int slot = -7, port = -7;
    char host[RLOCK__HOST_MAX] = "untouched";
    cr_assert_eq(redirect(bad[i], &slot, host, sizeof host, &port), 0,
                 "accepted \"%s\"", bad[i]);
    cr_assert_eq(slot, -7);
    cr_assert_eq(port, -7);
    cr_assert_str_eq(host, "untouched");
  }
}

Test(topo_redirect, lengths_not_nul) {
  int slot, port;
  char host[RLOCK__HOST_MAX];
  /* Only `len` bytes count: the rest of the buffer is not the port. */
  cr_assert_eq(rlock__parse_redirect("MOVED 1 h:63799", 14, &slot, host,
                                     sizeof host, &port), 1);
  cr_assert_eq(port, 6379);
  /* An embedded NUL is refused. */
  cr_assert_eq(rlock__parse_redirect("MOVED 1 a\0b:1", 13, &slot, host,
                                     sizeof host, &port), 0);
  /* The host must fit hostlen with its NUL. */
  cr_assert_eq(redirect("MOVED 1 abcd:1", &slot, host, 4, &port), 0);
  cr_assert_eq(redirect("MOVED 1 abc:1", &slot, host, 4, &port), 1);
  cr_assert_str_eq(host, "abc");
  /* Longer than RLOCK__HOST_MAX. */
  char text[RLOCK__HOST_MAX + 32];
  char big[RLOCK__HOST_MAX * 2];
  int n = snprintf(text, sizeof text, "MOVED 1 %0*d:1", RLOCK__HOST_MAX, 0);
  cr_assert(n > 0 && (size_t)n < sizeof text);
  cr_assert_eq(redirect(text, &slot, big, sizeof big, &port), 0);
}

/* ---- SENTINEL GET-MASTER-ADDR-BY-NAME ---- */

static int master_addr(const char *resp, size_t len, char *host, int *port,
                       char *err) {
  redisReply *r = parse_n(resp, len);
  err[0] = '\0';
  int rc = rlock__parse_master_addr(r, host, RLOCK__HOST_MAX, port, err, 256);
  freeReplyObject(r);
  if (rc < 0)
    cr_assert_neq(err[0], '\0', "a refusal without a sentence");
  return rc;
}
#define MADDR(lit, h, p, e) master_addr(lit, sizeof(lit) - 1, h, p, e)

Test(topo_sentinel, real_replies) {
  char host[RLOCK__HOST_MAX], err[256];
  int port = 0;
  cr_assert_eq(MADDR(REAL_MASTER_ADDR, host, &port, err), 1, "%s", err);
  cr_assert_str_eq(host, "127.0.0.1");
  cr_assert_eq(port, 33305);
  cr_assert_eq(MADDR(REAL_MASTER_ADDR_UNKNOWN, host, &port, err), 0);
  cr_assert_eq(MADDR("$-1\r\n", host, &port, err), 0);
  cr_assert_eq(MADDR("*0\r\n", host, &port, err), 0);
  /* An integer port is taken too. */
  cr_assert_eq(MADDR("*2\r\n$4\r\nhost\r\n:6379\r\n", host, &port, err), 1);
  cr_assert_str_eq(host, "host");
  cr_assert_eq(port, 6379);
}

Test(topo_sentinel, malformed_master_addr) {
  static const char *const bad[] = {
      "-ERR unknown command\r\n",
      ":1\r\n",
      "$9\r\n127.0.0.1\r\n",
      "*1\r\n$9\r\n127.0.0.1\r\n",
      "*3\r\n$1\r\nh\r\n$4\r\n6379\r\n$1\r\nx\r\n",
      "*2\r\n$1\r\nh\r\n$1\r\n0\r\n",
      "*2\r\n$1\r\nh\r\n$5\r\n70000\r\n",
      "*2\r\n$1\r\nh\r\n$5\r\n-6379\r\n",
      "*2\r\n$1\r\nh\r\n$4\r\n63a9\r\n",
      "*2\r\n$1\r\nh\r\n$0\r\n\r\n",
      "*2\r\n$1\r\nh\r\n$-1\r\n",
      "*2\r\n$1\r\nh\r\n*0\r\n",
      "*2\r\n$0\r\n\r\n$4\r\n6379\r\n",
      "*2\r\n$-1\r\n$4\r\n6379\r\n",
      "*2\r\n:1\r\n$4\r\n6379\r\n",
      "*2\r\n$3\r\na\rb\r\n$4\r\n6379\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char host[RLOCK__HOST_MAX], err[256];
    int port = 0;
    cr_assert_eq(master_addr(bad[i], strlen(bad[i]), host, &port, err), -1,
                 "accepted bad[%zu]", i);
  }
  char err[256], host[8];
  int port;
  cr_assert_eq(rlock__parse_master_addr(NULL, host, sizeof host, &port, err,
                                        sizeof err), -1);
  /* A host that does not fit the caller's buffer. */
  redisReply *r = P("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n");
  cr_assert_eq(rlock__parse_master_addr(r, host, sizeof host, &port, err,
                                        sizeof err), -1);
  freeReplyObject(r);
}

/* ---- +switch-master ---- */

static int switch_master(const char *payload, const char *name, char *host,
                         int *port) {
  return rlock__parse_switch_master(payload, strlen(payload), name, host,
                                    RLOCK__HOST_MAX, port);
}

Test(topo_sentinel, switch_master) {
  char host[RLOCK__HOST_MAX] = "";
  int port = 0;
  cr_assert_eq(switch_master("mymaster 127.0.0.1 6379 127.0.0.1 6380",
                             "mymaster", host, &port), 1);
  cr_assert_str_eq(host, "127.0.0.1");
  cr_assert_eq(port, 6380);
  cr_assert_eq(switch_master("other 10.0.0.1 6379 ::1 7000", "mymaster", host,
                             &port), 0);
  cr_assert_eq(switch_master("mymaster2 h 1 h 2", "mymaster", host, &port),
               0);
  cr_assert_eq(switch_master("my h 1 h 2", "mymaster", host, &port), 0);
  cr_assert_eq(switch_master("mymaster ::1 6379 fe80::2 7000", "mymaster",
                             host, &port), 1);
  cr_assert_str_eq(host, "fe80::2");
  cr_assert_eq(port, 7000);
  static const char *const bad[] = {
      "",
      "mymaster",
      "mymaster h 1 h",
      "mymaster h 1 h 2 extra",
      "mymaster h 1 h 2 ",
      " mymaster h 1 h 2",
      "mymaster  h 1 h 2",
      "mymaster h 1 h 0",
      "mymaster h 1 h 70000",
      "mymaster h 1 h x",
      "mymaster h x h 2",
      "mymaster h 1 h\t 2",
      "mymaster h 1 h -2",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int p = -7;
    char h[RLOCK__HOST_MAX] = "untouched";
    cr_assert_eq(switch_master(bad[i], "mymaster", h, &p), -1,
                 "accepted \"%s\"", bad[i]);
    cr_assert_eq(p, -7);
    cr_assert_str_eq(h, "untouched");
  }
  /* Only `len` bytes count, and an embedded NUL is refused. */
  cr_assert_eq(rlock__parse_switch_master("m h 1 h 2 junk", 9, "m", host,
                                          sizeof host, &port), 1);
  cr_assert_eq(port, 2);
  cr_assert_eq(rlock__parse_switch_master("m h 1 h\0x 2", 11, "m", host,
                                          sizeof host, &port), -1);
  /* The new host must fit hostlen. */
  cr_assert_eq(rlock__parse_switch_master("m h 1 abcd 2", 12, "m", host, 4,
                                          &port), -1);
}

/* ---- ROLE ---- */

static int role(const char *resp, size_t len, int *replicas) {
  redisReply *r = parse_n(resp, len);
  int rc = rlock__parse_role(r, replicas);
  freeReplyObject(r);
  return rc;
}
#define ROLE(lit, rep) role(lit, sizeof(lit) - 1, rep)

Test(topo_role, real_replies) {
  int replicas = -1;
  cr_assert_eq(ROLE(REAL_ROLE_MASTER, &replicas), 1);
  cr_assert_eq(replicas, 1);
  cr_assert_eq(ROLE(REAL_ROLE_MASTER, NULL), 1);
  cr_assert_eq(ROLE(REAL_ROLE_REPLICA, &replicas), 0);
  cr_assert_eq(ROLE(REAL_ROLE_SENTINEL, &replicas), 0);
  cr_assert_eq(ROLE("*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n", &replicas), 1);
  cr_assert_eq(replicas, 0);
}

Test(topo_role, malformed) {
  static const char *const bad[] = {
      "$-1\r\n",
      "*-1\r\n",
      "-ERR unknown command 'ROLE'\r\n",
      ":1\r\n",
      "+master\r\n",
      "*0\r\n",
      "*1\r\n:1\r\n",
      "*1\r\n$6\r\nmaster\r\n",
      "*2\r\n$6\r\nmaster\r\n:0\r\n",
      "*3\r\n$6\r\nmaster\r\n$1\r\n0\r\n*0\r\n",
      "*3\r\n$6\r\nmaster\r\n:0\r\n:0\r\n",
      "*3\r\n$6\r\nmaster\r\n:0\r\n*1\r\n$1\r\nx\r\n",
      "*1\r\n$5\r\nslave\r\n",
      "*3\r\n$5\r\nslave\r\n:1\r\n:6379\r\n",
      "*3\r\n$5\r\nslave\r\n$1\r\nh\r\n$-1\r\n",
      "*1\r\n$8\r\nsentinel\r\n",
      "*2\r\n$8\r\nsentinel\r\n$1\r\nx\r\n",
      "*3\r\n$7\r\nprimary\r\n:0\r\n*0\r\n",
      "*3\r\n$6\r\nMASTER\r\n:0\r\n*0\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int replicas = -7;
    cr_assert_eq(role(bad[i], strlen(bad[i]), &replicas), -1,
                 "accepted bad[%zu]", i);
    cr_assert_eq(replicas, -7);
  }
  cr_assert_eq(rlock__parse_role(NULL, NULL), -1);
}

/* ---- SENTINEL REPLICAS ---- */

static int sreplicas(const char *resp, size_t len) {
  redisReply *r = parse_n(resp, len);
  char err[200] = "";
  int rc = rlock__parse_sentinel_replicas(r, err, sizeof err);
  if (rc < 0)
    cr_assert_neq(err[0], '\0', "no sentence for a refusal");
  freeReplyObject(r);
  return rc;
}
#define SREPLICAS(lit) sreplicas(lit, sizeof(lit) - 1)

/* Abridged from Redis 7.0 sentinels (issue 24): a stopped replica (s_down,
 * its run id known) counts; the failed old master that a failover listed as
 * a replica of its successor (empty run id, never reached since) does not;
 * an entry without a "runid" field counts (nothing says it never served). */
Test(topo_sentinel_replicas, real_replies) {
  cr_assert_eq(SREPLICAS("*0\r\n"), 0);
  cr_assert_eq(SREPLICAS("*1\r\n*6\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
                         "$5\r\nrunid\r\n$4\r\n5329\r\n"
                         "$5\r\nflags\r\n$12\r\ns_down,slave\r\n"),
               1);
  cr_assert_eq(SREPLICAS("*1\r\n*6\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
                         "$5\r\nrunid\r\n$0\r\n\r\n"
                         "$5\r\nflags\r\n$18\r\nslave,disconnected\r\n"),
               0);
  cr_assert_eq(SREPLICAS("*2\r\n*2\r\n$2\r\nip\r\n$1\r\na\r\n"
                         "*4\r\n$2\r\nip\r\n$1\r\nb\r\n$5\r\nrunid\r\n$1\r\nx\r\n"),
               2);
}

Test(topo_sentinel_replicas, malformed) {
  static const char *const bad[] = {
      "$-1\r\n",
      "-ERR unknown subcommand\r\n",
      ":1\r\n",
      "*1\r\n:1\r\n",
      "*1\r\n*1\r\n$2\r\nip\r\n",              /* odd map */
      "*1\r\n*2\r\n$4\r\nport\r\n$1\r\n1\r\n", /* no ip */
      "*1\r\n*2\r\n$2\r\nip\r\n:1\r\n",        /* ip not text */
      "*1\r\n*2\r\n:1\r\n$1\r\na\r\n",         /* key not text */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert_eq(sreplicas(bad[i], strlen(bad[i])), -1, "accepted: %s",
                 bad[i]);
  cr_assert_eq(rlock__parse_sentinel_replicas(NULL, NULL, 0), -1);
}
