/* Connections and command records: the net layer's own structs (included
 * by net.h; only net/ looks inside them). */
#ifndef RLOCK_CONN_H
#define RLOCK_CONN_H

#include "link.h"

enum { RLOCK__CONN_DOWN, RLOCK__CONN_CONNECTING, RLOCK__CONN_UP };

typedef struct rlock__conn {
  rlock__net *net;
  bool is_sub;
  int state;
  rlock__link *link; /* NULL while down */
  rlock__timed reconnect;
  rlock__timed hs_timer; /* the handshake's deadline, once connected */
  int backoff_attempt;
  int proto_drops; /* connections dropped for a protocol violation */
  /* commands created while link == NULL, sent at the next connect */
  rlock__cmd *pending_head, *pending_tail;
  /* What each reply still to come on the link answers, oldest first: a
   * ring of exp_cap entries (conn.c). */
  struct rlock__expect *exp;
  size_t exp_head, exp_len, exp_cap;
  bool draining; /* handshake failed: nothing more is sent, dropped once
                    the replies still expected are in */
  int hs_err;    /* first error of the current handshake */
  char hs_detail[200];
} rlock__conn;

enum { RLOCK__CMD_WAIT_REPLY, RLOCK__CMD_WAIT_RETRY, RLOCK__CMD_DONE };

struct rlock__cmd {
  rlock__net *net;
  rlock__reply_cb cb;
  void *data;
  rlock__timed timer; /* reply deadline, or retry delay */
  int state;
  int inflight;     /* replies still to come for this record (sends) */
  int retries_left; /* idempotent commands only */
  int fail_err;     /* refused before sending (RLOCK_EBACKLOG) */
  const rlock__script *script; /* EVALSHA, falling back to EVAL */
  bool use_eval;
  rlock__cmd *pending_next;
  rlock__cmd *all_prev, *all_next; /* every live record of the client */
  int argc;
  const char **argv;
  size_t *argvlen;
  /* argv strings follow in the same allocation */
};

#endif
