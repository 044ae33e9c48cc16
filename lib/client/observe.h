/* Events and stats (issue 28): the client-level observer. Internal.
 *
 * The engine says what happened to locks through its on_event hook (one
 * call site per event, lib/engine), the net layer says when a connection
 * is back (on_reconnected) and keeps its own counts (commands, resubscribes,
 * replica sync); the client wires both hooks to this observer, which counts
 * and passes the public events on to the user's handler. It lives at the
 * client level because it needs all of them (events from the engine,
 * counts from net) and the client's identity, and the formatters are plain
 * functions of the public struct.
 *
 * Counters have one writer, the loop thread, and are read from any thread
 * with relaxed atomics (util.h, rlock__counter): no snapshot task, so a
 * read never waits for the loop and works from an event handler too.
 */
#ifndef RLOCK_OBSERVE_H
#define RLOCK_OBSERVE_H

#include "engine.h"

typedef struct rlock__hist {
  rlock__counter sum_ms, max_ms;
  rlock__counter buckets[RLOCK_STATS_BUCKETS];
} rlock__hist;

typedef struct rlock__observer {
  /* the user's handler and what every event carries */
  rlock_event_cb cb;
  void *cb_data;
  const char *client_id;
  const char *client_name;
  /* counts (loop thread writes, any thread reads) */
  rlock__counter acquisitions, contended, gave_up_timeout, gave_up_canceled;
  rlock__counter failures[RLOCK_STATS_ERRORS];
  rlock__counter releases;
  rlock__hist wait, hold;
  rlock__counter renewals_sent, renewals_confirmed, renewals_failed;
  rlock__counter rtt_count, rtt_sum_us, rtt_max_us;
  _Atomic int64_t headroom_min_ms; /* INT64_MAX: none yet */
  rlock__counter lost, reconnects, at_risk;
  rlock__counter terms_won, terms_lost, terms_resigned; /* elections */
} rlock__observer;

void rlock__observer_init(rlock__observer *o, const rlock_options *opts,
                          const char *client_id, const char *client_name);
/* The engine's on_event, and net's on_reconnected and on_disconnected,
 * land here. */
void rlock__observe_event(rlock__observer *o, const rlock__event *ev);
void rlock__observe_reconnected(rlock__observer *o,
                                const rlock__conn_change *r);
void rlock__observe_disconnected(rlock__observer *o,
                                 const rlock__conn_change *r);
/* rlock_client_stats(): the observer's and net's counts. */
int rlock__observer_stats(const rlock__observer *o, const rlock__net *n,
                          rlock_stats *out);

#endif
