/* Events and stats: counting what the engine and net report, the user's
 * event handler, and the Prometheus / JSON formatters (see observe.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "observe.h"

void rlock__observer_init(rlock__observer *o, const rlock_options *opts,
                          const char *client_id, const char *client_name) {
  memset(o, 0, sizeof(*o));
  o->cb = opts->on_event;
  o->cb_data = opts->on_event_data;
  o->client_id = client_id;
  o->client_name = client_name;
  atomic_store_explicit(&o->headroom_min_ms, INT64_MAX, memory_order_relaxed);
}

/* ---- counting (loop thread) ---- */

/* buckets[0]: 0 and 1 ms; buckets[i]: (2^(i-1), 2^i] ms; the last: above. */
static int bucket_of(int64_t v) {
  if (v <= 1)
    return 0;
  int i = 64 - __builtin_clzll((unsigned long long)(v - 1));
  return i < RLOCK_STATS_BUCKETS - 1 ? i : RLOCK_STATS_BUCKETS - 1;
}

static void max_to(rlock__counter *c, uint64_t v) {
  if (v > rlock__counter_get(c))
    atomic_store_explicit(c, v, memory_order_relaxed);
}

static void hist_add(rlock__hist *h, int64_t v) {
  if (v < 0)
    v = 0;
  /* The bucket last: a reader's count is the sum of the buckets, so it
   * never counts a value whose bucket it does not see. */
  rlock__count(&h->sum_ms, (uint64_t)v);
  max_to(&h->max_ms, (uint64_t)v);
  rlock__count(&h->buckets[bucket_of(v)], 1);
}

static void count_event(rlock__observer *o, const rlock__event *ev) {
  const rlock_event *p = &ev->pub;
  switch ((int)p->type) {
  case RLOCK_EVENT_ACQUIRED:
    rlock__count(&o->acquisitions, 1);
    if (p->attempts > 1 || ev->n > 0) /* or waited at the local gate */
      rlock__count(&o->contended, 1);
    hist_add(&o->wait, p->wait_ms);
    break;
  case RLOCK_EVENT_GAVE_UP:
    if (p->cause == RLOCK_EVENT_TIMEOUT)
      rlock__count(&o->gave_up_timeout, 1);
    else if (p->cause == RLOCK_EVENT_CANCELED)
      rlock__count(&o->gave_up_canceled, 1);
    break;
  case RLOCK_EVENT_RELEASED:
    rlock__count(&o->releases, 1);
    if (p->hold_count == 0)
      hist_add(&o->hold, p->hold_ms);
    break;
  case RLOCK_EVENT_LOST:
    rlock__count(&o->lost, 1);
    break;
  case RLOCK_EVENT_LEASE_AT_RISK:
    rlock__count(&o->at_risk, 1);
    break;
  case RLOCK_EVENT_ELECTED:
    rlock__count(&o->terms_won, 1);
    break;
  case RLOCK_EVENT_TERM_ENDED:
    rlock__count(p->cause == RLOCK_ELECTION_RESIGNED ? &o->terms_resigned
                                                     : &o->terms_lost,
                 1);
    break;
  case RLOCK__EV_RENEW_SENT:
    rlock__count(&o->renewals_sent, (uint64_t)ev->n);
    break;
  case RLOCK__EV_RENEWED:
    rlock__count(&o->renewals_confirmed, (uint64_t)ev->n_ok);
    rlock__count(&o->renewals_failed, (uint64_t)ev->n_failed);
    if (ev->n_failed == 0) { /* a round trip that ended in an answer */
      rlock__count(&o->rtt_count, 1);
      rlock__count(&o->rtt_sum_us, (uint64_t)ev->rtt_us);
      max_to(&o->rtt_max_us, (uint64_t)ev->rtt_us);
    }
    if (ev->headroom_ms <
        atomic_load_explicit(&o->headroom_min_ms, memory_order_relaxed))
      atomic_store_explicit(&o->headroom_min_ms, ev->headroom_ms,
                            memory_order_relaxed);
    break;
  case RLOCK__EV_FAILED: {
    int i = -p->error;
    rlock__count(&o->failures[i > 0 && i < RLOCK_STATS_ERRORS ? i : 0], 1);
    break;
  }
  default:
    break;
  }
}

void rlock__observe_event(rlock__observer *o, const rlock__event *ev) {
  count_event(o, ev);
  if (o->cb == NULL || (int)ev->pub.type >= RLOCK__EV_RENEWED)
    return;
  rlock_event pub = ev->pub;
  pub.struct_size = sizeof(pub);
  pub.client_id = o->client_id;
  pub.client_name = o->client_name;
  if (pub.detail == NULL)
    pub.detail = "";
  o->cb(&pub, o->cb_data);
}

static void conn_event(rlock__observer *o, rlock_event_type type,
                       const rlock__conn_change *r) {
  if (o->cb == NULL)
    return;
  rlock_event ev = {.struct_size = sizeof(ev),
                    .type = type,
                    .cause = r->is_sub ? 1 : 0,
                    .error = r->err,
                    .detail = r->detail,
                    .client_id = o->client_id,
                    .client_name = o->client_name,
                    .host = r->host,
                    .port = r->port};
  o->cb(&ev, o->cb_data);
}

void rlock__observe_reconnected(rlock__observer *o,
                                const rlock__conn_change *r) {
  rlock__count(&o->reconnects, 1);
  conn_event(o, RLOCK_EVENT_RECONNECTED, r);
}

void rlock__observe_disconnected(rlock__observer *o,
                                 const rlock__conn_change *r) {
  conn_event(o, RLOCK_EVENT_DISCONNECTED, r);
}

/* ---- reading (any thread) ---- */

static void hist_get(const rlock__hist *h, rlock_histogram *out) {
  out->count = 0;
  for (int i = 0; i < RLOCK_STATS_BUCKETS; i++) {
    out->buckets[i] = rlock__counter_get(&h->buckets[i]);
    out->count += out->buckets[i];
  }
  out->sum_ms = rlock__counter_get(&h->sum_ms);
  out->max_ms = rlock__counter_get(&h->max_ms);
}

/* Checks a caller's struct_size: 0, or RLOCK_EINVAL with the last error. */
static int check_size(size_t size) {
  if (size < sizeof(size_t) || size > sizeof(rlock_stats)) {
    rlock__set_last_error("rlock_stats.struct_size is %zu; set it with "
                          "rlock_stats_init()",
                          size);
    return RLOCK_EINVAL;
  }
  return 0;
}

int rlock__observer_stats(const rlock__observer *o, const rlock__net *n,
                          rlock_stats *out) {
  size_t size = out->struct_size;
  int rc = check_size(size);
  if (rc != 0)
    return rc;
  rlock_stats got;
  memset(&got, 0, sizeof(got));
  got.struct_size = size;
  got.acquisitions = rlock__counter_get(&o->acquisitions);
  got.acquisitions_contended = rlock__counter_get(&o->contended);
  got.gave_up_timeout = rlock__counter_get(&o->gave_up_timeout);
  got.gave_up_canceled = rlock__counter_get(&o->gave_up_canceled);
  for (int i = 0; i < RLOCK_STATS_ERRORS; i++)
    got.failures[i] = rlock__counter_get(&o->failures[i]);
  got.releases = rlock__counter_get(&o->releases);
  hist_get(&o->wait, &got.wait);
  hist_get(&o->hold, &got.hold);
  got.renewals_sent = rlock__counter_get(&o->renewals_sent);
  got.renewals_confirmed = rlock__counter_get(&o->renewals_confirmed);
  got.renewals_failed = rlock__counter_get(&o->renewals_failed);
  got.renewal_rtt_count = rlock__counter_get(&o->rtt_count);
  got.renewal_rtt_sum_us = rlock__counter_get(&o->rtt_sum_us);
  got.renewal_rtt_max_us = rlock__counter_get(&o->rtt_max_us);
  got.lease_headroom_min_ms = atomic_load_explicit(
      (_Atomic int64_t *)&o->headroom_min_ms, memory_order_relaxed);
  got.locks_lost = rlock__counter_get(&o->lost);
  got.reconnects = rlock__counter_get(&o->reconnects);
  got.resubscribes = rlock__counter_get(&n->stats.resubscribes);
  got.commands_sent = rlock__counter_get(&n->stats.commands_sent);
  got.replica_sync_ok = rlock__counter_get(&n->stats.sync_ok);
  got.replica_sync_unconfirmed = rlock__counter_get(&n->stats.sync_unconfirmed);
  got.lease_at_risk = rlock__counter_get(&o->at_risk);
  got.terms_won = rlock__counter_get(&o->terms_won);
  got.terms_lost = rlock__counter_get(&o->terms_lost);
  got.terms_resigned = rlock__counter_get(&o->terms_resigned);
  memcpy(out, &got, size); /* bytes beyond the caller's struct untouched */
  rlock__clear_last_error();
  return 0;
}

/* ---- formatting ---- */

/* Appends like snprintf into buf[len], counting what the whole needs. */
typedef struct out {
  char *buf;
  size_t len, pos;
} out;

static void put(out *o, const char *fmt, ...) RLOCK__PRINTF(2, 3);
static void put(out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->pos < o->len ? o->len - o->pos : 0;
  int n = vsnprintf(room > 0 ? o->buf + o->pos : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->pos += (size_t)n;
}

/* s with the fields a smaller struct_size leaves out zeroed, and which
 * fields it has. */
#define FITS(size, field)                                                    \
  ((size) >= offsetof(rlock_stats, field) + sizeof(((rlock_stats *)0)->field))

/* The plain counters: JSON gives each under its field name; those with a
 * metric name are Prometheus counters as they are (the others are shown
 * there with labels or as parts of a summary). */
typedef struct plain_field {
  const char *field;
  const char *metric; /* NULL: not a plain Prometheus counter */
  const char *help;
  size_t off;
} plain_field;

#define PLAIN(f, metric, help) {#f, metric, help, offsetof(rlock_stats, f)}
static const plain_field plain[] = {
    PLAIN(acquisitions, "rlock_acquisitions_total",
          "Acquire calls that got the lock, permit or latch."),
    PLAIN(acquisitions_contended, "rlock_acquisitions_contended_total",
          "Acquisitions that had to wait (more than one try)."),
    PLAIN(gave_up_timeout, NULL, NULL),
    PLAIN(gave_up_canceled, NULL, NULL),
    PLAIN(releases, "rlock_releases_total",
          "Successful unlocks of lock kinds."),
    PLAIN(renewals_sent, "rlock_renewals_sent_total",
          "Watchdog renewals sent (one per hold per period)."),
    PLAIN(renewals_confirmed, "rlock_renewals_confirmed_total",
          "Watchdog renewals the server confirmed."),
    PLAIN(renewals_failed, "rlock_renewals_failed_total",
          "Watchdog renewals without an answer or with an error."),
    PLAIN(renewal_rtt_count, NULL, NULL),
    PLAIN(renewal_rtt_sum_us, NULL, NULL),
    PLAIN(renewal_rtt_max_us, NULL, NULL),
    PLAIN(locks_lost, "rlock_locks_lost_total",
          "Holds lost: the lock expired or was deleted while held."),
    PLAIN(lease_at_risk, "rlock_lease_at_risk_total",
          "Holds whose guarantee fell below lease_risk_ms."),
    PLAIN(reconnects, "rlock_reconnects_total",
          "Connections up again after a loss."),
    PLAIN(resubscribes, "rlock_resubscribes_total",
          "Channels subscribed again after a reconnect."),
    PLAIN(commands_sent, "rlock_commands_sent_total",
          "Commands written to Redis, re-sends included."),
    PLAIN(replica_sync_ok, NULL, NULL),
    PLAIN(replica_sync_unconfirmed, NULL, NULL),
    PLAIN(terms_won, "rlock_election_terms_won_total",
          "Leader election campaigns won."),
    PLAIN(terms_lost, "rlock_election_terms_lost_total",
          "Leader election terms ended by a loss."),
    PLAIN(terms_resigned, "rlock_election_terms_resigned_total",
          "Leader election terms ended by a resign."),
};
#undef PLAIN

static bool plain_fits(const plain_field *p, size_t size) {
  return size >= p->off + sizeof(uint64_t);
}

static uint64_t plain_get(const plain_field *p, const rlock_stats *s) {
  uint64_t v;
  memcpy(&v, (const char *)s + p->off, sizeof(v));
  return v;
}

static int format_start(const rlock_stats *s, char *buf, size_t len,
                        rlock_stats *full, out *o) {
  if (s == NULL || (buf == NULL && len > 0)) {
    rlock__set_last_error("stats is NULL, or buf is NULL with len > 0");
    return RLOCK_EINVAL;
  }
  int rc = check_size(s->struct_size);
  if (rc != 0)
    return rc;
  memset(full, 0, sizeof(*full));
  memcpy(full, s, s->struct_size);
  o->buf = buf;
  o->len = len;
  o->pos = 0;
  if (len > 0)
    buf[0] = '\0';
  return 0;
}

static int format_end(out *o) {
  if (o->pos > (size_t)INT32_MAX) {
    rlock__set_last_error("stats text too long");
    return RLOCK_EINVAL;
  }
  rlock__clear_last_error();
  return (int)o->pos;
}

/* The label set's start: {client="..." (escaped), or { alone. */
typedef struct labels {
  char text[3 * 64 + 16]; /* client="<escaped name>" */
} labels;

static void labels_make(labels *l, const char *client) {
  size_t p = 0;
  l->text[0] = '\0';
  if (client == NULL)
    return;
  p += (size_t)snprintf(l->text, sizeof(l->text), "client=\"");
  for (const char *c = client; *c != '\0' && p + 4 < sizeof(l->text); c++) {
    if (*c == '\\' || *c == '"') {
      l->text[p++] = '\\';
      l->text[p++] = *c;
    } else if (*c == '\n') {
      l->text[p++] = '\\';
      l->text[p++] = 'n';
    } else {
      l->text[p++] = *c;
    }
  }
  l->text[p++] = '"';
  l->text[p] = '\0';
}

/* name{client="..."[,extra]} value */
static void prom_sample(out *o, const labels *l, const char *name,
                        const char *extra, uint64_t value) {
  bool any = l->text[0] != '\0' || extra != NULL;
  put(o, "%s%s%s%s%s%s %" PRIu64 "\n", name, any ? "{" : "", l->text,
      l->text[0] != '\0' && extra != NULL ? "," : "",
      extra != NULL ? extra : "", any ? "}" : "", value);
}

/* name{client="..."} v/10^digits, exact ("0.001", "-1.500"): seconds from
 * ms (3 digits) or us (6). */
static void prom_fixed(out *o, const labels *l, const char *name, int64_t v,
                       int digits) {
  uint64_t scale = digits == 6 ? 1000000 : 1000;
  uint64_t a = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
  bool any = l->text[0] != '\0';
  put(o, "%s%s%s%s %s%" PRIu64 ".%0*" PRIu64 "\n", name, any ? "{" : "",
      l->text, any ? "}" : "", v < 0 ? "-" : "", a / scale, digits,
      a % scale);
}

static void prom_head(out *o, const char *name, const char *type,
                      const char *help) {
  put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_counter(out *o, const labels *l, const char *name,
                         const char *help, uint64_t value) {
  prom_head(o, name, "counter", help);
  prom_sample(o, l, name, NULL, value);
}

static void prom_hist(out *o, const labels *l, const char *name,
                      const char *help, const rlock_histogram *h) {
  char series[96], extra[48];
  prom_head(o, name, "histogram", help);
  snprintf(series, sizeof(series), "%s_bucket", name);
  uint64_t cum = 0;
  for (int i = 0; i < RLOCK_STATS_BUCKETS; i++) {
    cum += h->buckets[i];
    if (i == RLOCK_STATS_BUCKETS - 1) {
      snprintf(extra, sizeof(extra), "le=\"+Inf\"");
    } else {
      uint64_t ms = UINT64_C(1) << i;
      snprintf(extra, sizeof(extra), "le=\"%" PRIu64 ".%03" PRIu64 "\"",
               ms / 1000, ms % 1000);
    }
    prom_sample(o, l, series, extra, cum);
  }
  snprintf(series, sizeof(series), "%s_sum", name);
  prom_fixed(o, l, series, (int64_t)h->sum_ms, 3);
  snprintf(series, sizeof(series), "%s_count", name);
  prom_sample(o, l, series, NULL, cum); /* == the +Inf bucket */
}

int rlock_stats_format_prometheus(const rlock_stats *s, char *buf,
                                  size_t len, const char *client) {
  rlock_stats f;
  out o;
  int rc = format_start(s, buf, len, &f, &o);
  if (rc != 0)
    return rc;
  size_t size = s->struct_size;
  labels l;
  labels_make(&l, client);
  for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
    if (plain[i].metric != NULL && plain_fits(&plain[i], size))
      prom_counter(&o, &l, plain[i].metric, plain[i].help,
                   plain_get(&plain[i], &f));
  if (FITS(size, gave_up_canceled)) {
    prom_head(&o, "rlock_gave_up_total", "counter",
              "Acquire calls that ended without it, by reason.");
    prom_sample(&o, &l, "rlock_gave_up_total", "reason=\"timeout\"",
                f.gave_up_timeout);
    prom_sample(&o, &l, "rlock_gave_up_total", "reason=\"canceled\"",
                f.gave_up_canceled);
  }
  if (FITS(size, failures)) {
    prom_head(&o, "rlock_failures_total", "counter",
              "Calls that failed, by error code.");
    for (int i = 0; i < RLOCK_STATS_ERRORS; i++) {
      if (f.failures[i] == 0)
        continue;
      char extra[64];
      snprintf(extra, sizeof(extra), "code=\"%s\"",
               i == 0 ? "other" : rlock_err_name(-i));
      prom_sample(&o, &l, "rlock_failures_total", extra, f.failures[i]);
    }
  }
  if (FITS(size, wait))
    prom_hist(&o, &l, "rlock_acquire_wait_seconds",
              "Time acquisitions waited, from the call to the server's yes.",
              &f.wait);
  if (FITS(size, hold))
    prom_hist(&o, &l, "rlock_hold_seconds",
              "Time locks were held, outermost acquire to the freeing unlock.",
              &f.hold);
  if (FITS(size, renewal_rtt_max_us)) {
    prom_head(&o, "rlock_renewal_rtt_seconds", "summary",
              "Round-trip time of renewal commands.");
    prom_fixed(&o, &l, "rlock_renewal_rtt_seconds_sum",
               (int64_t)f.renewal_rtt_sum_us, 6);
    prom_sample(&o, &l, "rlock_renewal_rtt_seconds_count", NULL,
                f.renewal_rtt_count);
    prom_head(&o, "rlock_renewal_rtt_max_seconds", "gauge",
              "Longest round trip of a renewal command.");
    prom_fixed(&o, &l, "rlock_renewal_rtt_max_seconds",
               (int64_t)f.renewal_rtt_max_us, 6);
  }
  if (FITS(size, lease_headroom_min_ms) &&
      f.lease_headroom_min_ms != INT64_MAX) {
    prom_head(&o, "rlock_lease_headroom_min_seconds", "gauge",
              "Least guarantee left when a renewal was confirmed.");
    prom_fixed(&o, &l, "rlock_lease_headroom_min_seconds",
               f.lease_headroom_min_ms, 3);
  }
  if (FITS(size, replica_sync_unconfirmed)) {
    prom_head(&o, "rlock_replica_sync_total", "counter",
              "Replica sync outcomes of writes.");
    prom_sample(&o, &l, "rlock_replica_sync_total", "outcome=\"ok\"",
                f.replica_sync_ok);
    prom_sample(&o, &l, "rlock_replica_sync_total",
                "outcome=\"unconfirmed\"", f.replica_sync_unconfirmed);
  }
  return format_end(&o);
}

static void json_string(out *o, const char *s) {
  put(o, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
    if (*c == '"' || *c == '\\')
      put(o, "\\%c", *c);
    else if (*c < 0x20)
      put(o, "\\u%04x", *c);
    else
      put(o, "%c", *c);
  }
  put(o, "\"");
}

static void json_hist(out *o, const char *name, const rlock_histogram *h) {
  put(o, ",\"%s\":{\"count\":%" PRIu64 ",\"sum_ms\":%" PRIu64
         ",\"max_ms\":%" PRIu64 ",\"buckets\":[",
      name, h->count, h->sum_ms, h->max_ms);
  for (int i = 0; i < RLOCK_STATS_BUCKETS; i++) {
    if (i == RLOCK_STATS_BUCKETS - 1)
      put(o, "{\"le_ms\":null,\"count\":%" PRIu64 "}]}", h->buckets[i]);
    else
      put(o, "{\"le_ms\":%" PRIu64 ",\"count\":%" PRIu64 "},",
          UINT64_C(1) << i, h->buckets[i]);
  }
}

int rlock_stats_format_json(const rlock_stats *s, char *buf, size_t len,
                            const char *client) {
  rlock_stats f;
  out o;
  int rc = format_start(s, buf, len, &f, &o);
  if (rc != 0)
    return rc;
  size_t size = s->struct_size;
  put(&o, "{\"client\":");
  if (client != NULL)
    json_string(&o, client);
  else
    put(&o, "null");
  for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
    if (plain_fits(&plain[i], size))
      put(&o, ",\"%s\":%" PRIu64, plain[i].field, plain_get(&plain[i], &f));
  if (FITS(size, failures)) {
    put(&o, ",\"failures\":{");
    const char *sep = "";
    for (int i = 0; i < RLOCK_STATS_ERRORS; i++) {
      if (f.failures[i] == 0)
        continue;
      put(&o, "%s\"%s\":%" PRIu64, sep, i == 0 ? "other" : rlock_err_name(-i),
          f.failures[i]);
      sep = ",";
    }
    put(&o, "}");
  }
  if (FITS(size, wait))
    json_hist(&o, "wait", &f.wait);
  if (FITS(size, hold))
    json_hist(&o, "hold", &f.hold);
  if (FITS(size, lease_headroom_min_ms)) {
    if (f.lease_headroom_min_ms == INT64_MAX)
      put(&o, ",\"lease_headroom_min_ms\":null");
    else
      put(&o, ",\"lease_headroom_min_ms\":%" PRId64, f.lease_headroom_min_ms);
  }
  put(&o, "}");
  return format_end(&o);
}
