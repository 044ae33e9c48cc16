/* Command records and their routing: rlock__cmd_send and its record
 * (reply deadline, idempotent re-sends, SCRIPT LOAD after NOSCRIPT and
 * the EVAL fallback where it is refused), the
 * node each send goes to (the cluster slot, MOVED / ASK, TRYAGAIN and the
 * like within the deadline), the lists of records waiting for a connection
 * or a slot map, and replica sync (WAIT / WAITAOF behind a script). The
 * connection a record is sent on matches its replies (conn.c); where a
 * send goes, and what a redirect or a "not now" means, the deployment
 * says (rlock__topology). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net_int.h"

int rlock__reply_error(const redisReply *r) {
  return rlock__err_from_server(r->str, r->len);
}

/* ---- command records ---- */

static void cmd_free_if_idle(rlock__cmd *cmd) {
  if (cmd->state != RLOCK__CMD_DONE || cmd->inflight > 0 ||
      cmd->wait_inflight > 0)
    return;
  rlock__net *n = cmd->net;
  if (cmd->all_prev != NULL)
    cmd->all_prev->all_next = cmd->all_next;
  else
    n->cmd_all = cmd->all_next;
  if (cmd->all_next != NULL)
    cmd->all_next->all_prev = cmd->all_prev;
  rlock__timed_stop(n->core, &cmd->redo);
  if (cmd->held != NULL)
    freeReplyObject(cmd->held);
  free(cmd);
}

/* The list a waiting record is on: its node's, or the client's unrouted
 * one (a cluster whose slot map is not known yet). */
static void pending_list(rlock__cmd *cmd, rlock__cmd ***head,
                         rlock__cmd ***tail) {
  rlock__net *n = cmd->net;
  if (cmd->pending_on != NULL) {
    *head = &cmd->pending_on->cmd.pending_head;
    *tail = &cmd->pending_on->cmd.pending_tail;
  } else {
    *head = &n->unrouted_head;
    *tail = &n->unrouted_tail;
  }
}

static void pending_push(rlock__cmd *cmd, rlock__node *on) {
  assert(!cmd->is_pending); /* on one list at a time */
  rlock__cmd **head, **tail;
  cmd->pending_on = on;
  cmd->is_pending = true;
  pending_list(cmd, &head, &tail);
  cmd->pending_next = NULL;
  if (*tail != NULL)
    (*tail)->pending_next = cmd;
  else
    *head = cmd;
  *tail = cmd;
}

static void pending_remove(rlock__cmd *cmd) {
  if (!cmd->is_pending)
    return;
  rlock__cmd **head, **tail;
  pending_list(cmd, &head, &tail);
  rlock__cmd **slot = head, *prev = NULL;
  while (*slot != NULL && *slot != cmd) {
    prev = *slot;
    slot = &(*slot)->pending_next;
  }
  if (*slot != NULL) {
    *slot = cmd->pending_next;
    if (*tail == cmd)
      *tail = prev;
  }
  cmd->pending_next = NULL;
  cmd->is_pending = false;
}

static void complete(rlock__cmd *cmd, redisReply *reply, int err) {
  rlock__net *n = cmd->net;
  /* A record completes once, and is on no waiting list when it does. */
  assert(cmd->state != RLOCK__CMD_DONE);
  assert(!cmd->is_pending);
  rlock__timed_stop(n->core, &cmd->timer);
  rlock__timed_stop(n->core, &cmd->redo);
  cmd->state = RLOCK__CMD_DONE;
  rlock__reply_cb cb = cmd->cb;
  cmd->cb = NULL;
  if (cb != NULL)
    cb(n, reply, err, cmd->data);
  n->reply_unsynced = false;
  n->reply_sync_refused = NULL;
  cmd_free_if_idle(cmd);
}

static void dispatch(rlock__cmd *cmd);

static void cmd_timer_fire(rlock__timed *t) {
  rlock__cmd *cmd = RLOCK__CONTAINER_OF(t, rlock__cmd, timer);
  rlock__net *n = cmd->net;
  if (cmd->fail_err != 0) { /* refused unsent (rlock__cmd_send_now) */
    pending_remove(cmd);
    complete(cmd, NULL, cmd->fail_err);
    return;
  }
  if (cmd->state == RLOCK__CMD_WAIT_RETRY) {
    dispatch(cmd);
    return;
  }
  /* Reply deadline passed. A reply that still comes is ignored (inflight
   * keeps the record alive until its FIFO entry is answered or failed). */
  pending_remove(cmd);
  rlock__timed_stop(n->core, &cmd->redo);
  if (cmd->held != NULL) {
    freeReplyObject(cmd->held);
    cmd->held = NULL;
  }
  if (cmd->retries_left > 0) {
    cmd->retries_left--;
    cmd->state = RLOCK__CMD_WAIT_RETRY;
    rlock__timed_start(n->core, &cmd->timer,
                       rlock__now_ms() + n->core->opts.retry_interval_ms);
    return;
  }
  complete(cmd, NULL, RLOCK_ETIMEDOUT);
}

/* ---- cluster redirects and transient refusals ---- */

/* Redirects and waits one command may follow before its error is the
 * answer: a cluster that keeps pointing elsewhere is broken, not busy. */
#define MAX_REDIRECTS 16

static bool err_is(const redisReply *r, const char *word) {
  size_t k = strlen(word);
  return (size_t)r->len >= k && memcmp(r->str, word, k) == 0 &&
         ((size_t)r->len == k || r->str[k] == ' ');
}

static void redo_fire(rlock__timed *t) {
  rlock__cmd *cmd = RLOCK__CONTAINER_OF(t, rlock__cmd, redo);
  if (cmd->state == RLOCK__CMD_WAIT_REPLY && cmd->inflight == 0)
    rlock__cmd_send_now(cmd);
}

/* An error reply that means "not here" or "not now": the command did not
 * run, so it is sent again - to the node named (MOVED, ASK), or after a
 * pause (TRYAGAIN during a migration, CLUSTERDOWN, a demoted master's
 * READONLY while the map or the sentinels catch up) - within the
 * command's deadline. true when handled. */
static bool redirect(rlock__cmd *cmd, const redisReply *r) {
  rlock__net *n = cmd->net;
  const rlock__topology *t = n->topo;
  if (t->not_now == NULL || cmd->fixed != NULL ||
      cmd->redirects >= MAX_REDIRECTS)
    return false;
  rlock__node *to = NULL;
  int kind = t->redirect != NULL ? t->redirect(n, r, cmd->sent_to, &to) : 0;
  if (kind < 0)
    return false;
  if (kind > 0) {
    cmd->redirects++;
    if (kind == 2)
      cmd->ask = to;
    rlock__cmd_send_now(cmd);
    return true;
  }
  bool busy = err_is(r, "TRYAGAIN") || err_is(r, "CLUSTERDOWN") ||
              err_is(r, "READONLY") || err_is(r, "MASTERDOWN") ||
              err_is(r, "LOADING");
  if (!busy)
    return false;
  int64_t delay = (int64_t)25 << (cmd->redirects > 5 ? 5 : cmd->redirects);
  if (rlock__now_ms() + delay >= cmd->timer.at)
    return false; /* no time left: the error is the answer */
  cmd->redirects++;
  t->not_now(n, r);
  cmd->redo.fire = redo_fire;
  rlock__timed_start(n->core, &cmd->redo, rlock__now_ms() + delay);
  return true;
}

/* ---- replies ---- */

/* The reply to one send of cmd, or NULL when its connection was lost. */
void rlock__cmd_reply(rlock__cmd *cmd, redisReply *reply) {
  rlock__net *n = cmd->net;
  /* Its FIFO entry was pushed with a send that counted (send_now). */
  assert(cmd->inflight > 0);
  cmd->inflight--;
  /* Replies on one connection come in order, so only the reply to the latest
   * send (inflight back to 0) answers a record that is still waiting. A
   * record queued for its next send (is_pending: re-sent after a timeout
   * to a node whose connection is not ready - a cluster slot that moved,
   * a failover) is answered by that send, not by a late reply to an
   * earlier one from another connection, as after a timeout. */
  if (cmd->state != RLOCK__CMD_WAIT_REPLY || cmd->inflight > 0 ||
      cmd->is_pending || rlock__timed_active(&cmd->redo)) {
    cmd_free_if_idle(cmd);
    return;
  }
  if (reply == NULL) {
    if (n->core->closing) {
      complete(cmd, NULL, RLOCK_ECLOSED);
    } else if (cmd->retries_left > 0) {
      cmd->retries_left--;
      cmd->state = RLOCK__CMD_WAIT_RETRY;
      rlock__timed_start(n->core, &cmd->timer,
                         rlock__now_ms() + n->core->opts.retry_interval_ms);
    } else {
      complete(cmd, NULL, RLOCK_ECONN);
    }
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR && redirect(cmd, reply))
    return;
  if (reply->type == REDIS_REPLY_ERROR && !n->topo->slot_routed &&
      !n->per_slot && err_is(reply, "CROSSSLOT")) {
    /* A proxy that let the probe pass refused a batch: it is a cluster
     * after all. This command fails (a renewal is tried again at the next
     * tick), the next batches keep to one slot. */
    rlock__net_crossslot_refused(n, cmd->sent_to);
  }
  if (reply->type == REDIS_REPLY_ERROR && cmd->script != NULL &&
      !cmd->use_eval && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
    /* Not cached (flushed, a new server, or evicted): SCRIPT LOAD, which
     * no later EVAL can evict, then EVALSHA again, in one write; the
     * loaded script serves every later EVALSHA. Where SCRIPT LOAD is
     * refused (an ACL without +script), EVAL (which caches it too) - issue
     * 33. */
    if (cmd->sent_to != NULL && cmd->loaded_on == cmd->sent_to)
      rlock__conn_script_load_lost(&cmd->sent_to->cmd);
    if (cmd->sent_to != NULL && cmd->loaded_on != cmd->sent_to &&
        cmd->sent_to->cap_script_load >= 0) {
      cmd->loaded_on = cmd->sent_to;
      cmd->load_first = true;
    } else {
      cmd->use_eval = true;
    }
    rlock__cmd_send_now(cmd);
    return;
  }
  if (cmd->wait_seq == cmd->send_seq && cmd->wait_inflight > 0 &&
      reply->type != REDIS_REPLY_ERROR && n->reply_link != NULL) {
    /* Replica sync: the answer is complete with WAIT's, which follows. */
    rlock__link_keep_reply(n->reply_link);
    cmd->held = reply;
    return;
  }
  complete(cmd, reply, 0);
}

/* WAIT's reply (NULL: the connection was lost). */
void rlock__cmd_wait_reply(rlock__cmd *cmd, uint32_t seq, redisReply *reply) {
  rlock__net *n = cmd->net;
  assert(cmd->wait_inflight > 0); /* as cmd_reply's inflight */
  cmd->wait_inflight--;
  redisReply *held = cmd->held;
  if (seq != cmd->send_seq || held == NULL ||
      cmd->state != RLOCK__CMD_WAIT_REPLY || cmd->is_pending) {
    cmd_free_if_idle(cmd);
    return;
  }
  cmd->held = NULL;
  if (reply == NULL) {
    /* The command ran; whether a replica has it is unknown. As a lost
     * reply: re-sent when idempotent, else the caller repairs. */
    freeReplyObject(held);
    cmd->inflight++; /* rlock__cmd_reply counts this answer */
    rlock__cmd_reply(cmd, NULL);
    return;
  }
  /* Not confirmed, whatever the reason - WAIT unknown to a server that
   * lost it (a failover to one without it) included: that command counts
   * as unconfirmed, and the ones after it go without WAIT. */
  if (rlock__reply_unknown_command(reply) && cmd->sent_to != NULL) {
    if (strcasestr(reply->str, "WAITAOF") != NULL)
      rlock__conn_waitaof_missing(&cmd->sent_to->cmd, reply);
    else
      rlock__conn_wait_missing(&cmd->sent_to->cmd, reply);
  }
  /* WAIT answers the replicas that acknowledged; WAITAOF [local,
   * replicas]: replicas count, as Java Redisson counts them. */
  bool synced = reply->type == REDIS_REPLY_INTEGER && reply->integer >= 1;
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[1]->type == REDIS_REPLY_INTEGER)
    synced = reply->element[1]->integer >= 1;
  n->reply_unsynced = !synced;
  /* Refused (not unknown): an ACL without +wait. Each command would be
   * refused alike; the caller must not retry in a loop. */
  if (reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
      !rlock__reply_unknown_command(reply))
    n->reply_sync_refused = reply->str;
  rlock__count(synced ? &n->stats.sync_ok : &n->stats.sync_unconfirmed, 1);
  complete(cmd, held, 0);
  freeReplyObject(held);
}

/* ---- sending ---- */

/* Where a command goes now, or NULL (a cluster whose map is unknown). */
static rlock__node *route(rlock__cmd *cmd) {
  rlock__net *n = cmd->net;
  if (cmd->fixed != NULL)
    return cmd->fixed;
  if (cmd->ask != NULL)
    return cmd->ask;
  return n->topo->route(n, cmd->slot);
}

/* How many replicas replica sync's WAIT asks for on this master: every
 * replica it has connected (as Java Redisson's WAIT <connected_slaves>);
 * and when it has none connected but the topology lists some (Sentinel's
 * replica list, the cluster shard's replicas), one: a master whose links to
 * its replicas are down must not take locks that a failover to one of
 * those replicas would lose - WAIT 1 then times out, 0 acknowledged, and
 * the acquire is undone (RLOCK_ENOREPLICA), as Redis's min-replicas-to-
 * write 1 would refuse the write. replica_sync_connected_only = 1 keeps
 * the connected count alone: no WAIT without a connected replica
 * (availability over safety). */
static int wait_count(const rlock__node *node) {
  if (node->cap_wait < 0)
    return 0; /* no WAIT on this server (probe, or a refused WAIT) */
  if (node->replicas > 0)
    return node->replicas;
  /* Cluster: the map lists none, the master's own ROLE may (node.h). */
  if (node->replicas_listed == 0 && node->replicas_role > 0)
    return node->replicas_role;
  if (node->replicas_listed > 0 &&
      !node->net->core->opts.replica_sync_connected_only)
    return 1;
  return 0;
}

/* WAITAOF instead of WAIT (replica_sync_mode, read at connect). */
static bool use_waitaof(const rlock__node *node) {
  switch (node->net->core->opts.replica_sync_mode) {
  case RLOCK_REPLICA_SYNC_AUTO:
    return node->cap_waitaof > 0 && node->aof_on > 0;
  case RLOCK_REPLICA_SYNC_WAITAOF:
    return node->cap_waitaof > 0;
  default:
    return false;
  }
}

/* Sends on the command connection of the node it belongs to, or queues
 * the record for that node's next connection (rlock__conn_start flushes it) or
 * for the slot map. */
void rlock__cmd_send_now(rlock__cmd *cmd) {
  rlock__net *n = cmd->net;
  rlock__node *node = route(cmd);
  if (node == NULL) {
    pending_push(cmd, NULL);
    return;
  }
  rlock__conn *conn = &node->cmd;
  if (node->role_asked && cmd->sync && n->core->opts.replica_sync &&
      node->replicas == 0 && node->replicas_listed == 0) {
    /* How many replicas to wait for is in the answer to the handshake's
     * ROLE, which sends it on (conn.c, PROBE_ROLE). */
    pending_push(cmd, node);
    return;
  }
  int off = 2;
  if (cmd->script != NULL) {
    off = 0;
    cmd->argv[0] = cmd->use_eval ? "EVAL" : "EVALSHA";
    cmd->argvlen[0] = strlen(cmd->argv[0]);
    cmd->argv[1] = cmd->use_eval ? cmd->script->body : cmd->script->sha;
    cmd->argvlen[1] = strlen(cmd->argv[1]);
  }
  int rc = 0;
  if (cmd->script != NULL && !cmd->use_eval && cmd->load_first) {
    if (node->cap_script_load < 0) {
      cmd->use_eval = true; /* refused on this node: EVAL */
    } else {
      const char *load[3] = {"SCRIPT", "LOAD", cmd->script->body};
      size_t load_len[3] = {6, 4, strlen(cmd->script->body)};
      rc = rlock__conn_expect(conn, EXP_LOAD, NULL, 3, load, load_len);
      if (rc == 0) /* the EVALSHA is not refused after its SCRIPT LOAD */
        rlock__link_join_next(conn->link);
    }
    cmd->argv[0] = cmd->use_eval ? "EVAL" : "EVALSHA";
    cmd->argvlen[0] = strlen(cmd->argv[0]);
    cmd->argv[1] = cmd->use_eval ? cmd->script->body : cmd->script->sha;
    cmd->argvlen[1] = strlen(cmd->argv[1]);
  }
  if (rc == 0 && cmd->ask != NULL) {
    /* ASK: this one command may run on the importing node, once. */
    const char *asking = "ASKING";
    size_t alen = 6;
    rc = rlock__conn_expect(conn, EXP_ASKING, NULL, 1, &asking, &alen);
    if (rc == 0) /* nor the command after its ASKING */
      rlock__link_join_next(conn->link);
  }
  if (rc == 0)
    rc = rlock__conn_expect(conn, EXP_CMD, cmd, cmd->argc + 2 - off,
                       cmd->argv + off, cmd->argvlen + off);
  if (rc == RLOCK_EBACKLOG) {
    /* The write queue is full (the server is not reading): the command
     * fails - never sent - on the next loop turn, not from inside whatever
     * call is sending it. */
    cmd->fail_err = rc;
    cmd->timer.fire = cmd_timer_fire;
    rlock__timed_start(n->core, &cmd->timer, rlock__now_ms());
    return;
  }
  if (rc != 0) {
    pending_push(cmd, node);
    return;
  }
  cmd->ask = NULL;
  cmd->sent_to = node;
  cmd->load_first = false; /* loaded once */
  rlock__count(&n->stats.commands_sent, 1);
  cmd->inflight++;
  cmd->send_seq++;
  /* Replica sync: WAIT right behind it, in the same write. */
  int wait_n = cmd->sync && n->core->opts.replica_sync ? wait_count(node) : 0;
  if (wait_n > 0) {
    char num[16], ms[24];
    snprintf(num, sizeof(num), "%d", wait_n);
    snprintf(ms, sizeof(ms), "%lld",
             (long long)n->core->opts.replica_sync_timeout_ms);
    const char *argv[4] = {"WAIT", num, ms};
    int argc = 3;
    if (use_waitaof(node)) {
      argv[0] = "WAITAOF";
      argv[1] = node->aof_on > 0 ? "1" : "0";
      argv[2] = num;
      argv[3] = ms;
      argc = 4;
    }
    size_t lens[4];
    for (int i = 0; i < argc; i++)
      lens[i] = strlen(argv[i]);
    if (rlock__conn_expect_seq(conn, EXP_WAIT, cmd, cmd->send_seq, argc, argv,
                          lens) == 0) {
      cmd->wait_inflight++;
      cmd->wait_seq = cmd->send_seq;
    }
  }
}

static void dispatch(rlock__cmd *cmd) {
  rlock__net *n = cmd->net;
  cmd->state = RLOCK__CMD_WAIT_REPLY;
  cmd->timer.fire = cmd_timer_fire;
  cmd->redirects = 0;
  rlock__timed_start(n->core, &cmd->timer,
                     rlock__now_ms() + n->core->opts.command_timeout_ms);
  rlock__cmd_send_now(cmd);
}

/* Commands that name no key: they may go to any node. */
static bool keyless(const char *name) {
  static const char *const names[] = {"PING",   "WAIT",   "PUBSUB", "CLUSTER",
                                      "SENTINEL", "ROLE", "INFO",   "SCRIPT",
                                      "CLIENT", "ASKING", NULL};
  for (int i = 0; names[i] != NULL; i++)
    if (strcasecmp(name, names[i]) == 0)
      return true;
  return false;
}

static rlock__cmd *cmd_new(rlock__net *n, const rlock__script *script,
                           int argc, const char **argv, const size_t *argvlen,
                           int retries, rlock__reply_cb cb, void *data) {
  size_t bytes = 0;
  for (int i = 0; i < argc; i++)
    bytes += argvlen[i] + 1;
  size_t slots = (size_t)argc + 2;
  size_t head = sizeof(rlock__cmd) + slots * sizeof(char *) +
                slots * sizeof(size_t);
  rlock__cmd *cmd = malloc(head + bytes);
  if (cmd == NULL)
    return NULL;
  memset(cmd, 0, sizeof(*cmd));
  cmd->net = n;
  cmd->cb = cb;
  cmd->data = data;
  cmd->retries_left = retries;
  cmd->script = script;
  cmd->use_eval = script != NULL && script->eval_only;
  cmd->slot = -1;
  cmd->argc = argc;
  cmd->argv = (const char **)(void *)(cmd + 1);
  cmd->argvlen = (size_t *)(void *)(cmd->argv + slots);
  char *p = (char *)(cmd->argvlen + slots);
  for (int i = 0; i < argc; i++) {
    memcpy(p, argv[i], argvlen[i]);
    p[argvlen[i]] = '\0';
    cmd->argv[i + 2] = p;
    cmd->argvlen[i + 2] = argvlen[i];
    p += argvlen[i] + 1;
  }
  cmd->all_next = n->cmd_all;
  if (n->cmd_all != NULL)
    n->cmd_all->all_prev = cmd;
  n->cmd_all = cmd;
  return cmd;
}

rlock__cmd *rlock__cmd_send(rlock__net *n, const rlock__script *script,
                            int argc, const char **argv, const size_t *argvlen,
                            int retries, rlock__reply_cb cb, void *data) {
  rlock__cmd *cmd = cmd_new(n, script, argc, argv, argvlen, retries, cb, data);
  if (cmd == NULL)
    return NULL;
  if (n->topo->slot_routed) {
    /* The slot of the first key: a script's KEYS[1] (every key of one
     * lock shares its tag), or a command's first argument. */
    if (script != NULL) {
      if (argc >= 2 && atoi(argv[0]) > 0)
        cmd->slot = rlock__key_slot(argv[1], argvlen[1]);
    } else if (argc >= 2 && !keyless(cmd->argv[2])) {
      cmd->slot = rlock__key_slot(argv[1], argvlen[1]);
    }
  }
  /* Replica sync: scripts write (Java syncs its lock scripts the same
   * way); plain commands here are reads or latch clean-up. */
  cmd->sync = script != NULL && n->topo->replicated;
  dispatch(cmd);
  return cmd;
}

rlock__cmd *rlock__cmd_send_to(rlock__node *node, int argc, const char **argv,
                               const size_t *argvlen, rlock__reply_cb cb,
                               void *data) {
  rlock__cmd *cmd =
      cmd_new(node->net, NULL, argc, argv, argvlen, 0, cb, data);
  if (cmd == NULL)
    return NULL;
  cmd->fixed = node;
  dispatch(cmd);
  return cmd;
}

int rlock__net_key_slot(const rlock__net *n, const char *key, size_t len) {
  return n->topo->slot_routed || n->per_slot ? rlock__key_slot(key, len) : -1;
}

bool rlock__net_slots_agree(const rlock__net *n, const char *key, size_t klen,
                            const char *channel, size_t clen) {
  return !n->topo->slot_routed ||
         rlock__key_slot(key, klen) == rlock__key_slot(channel, clen);
}

void rlock__cmds_send_pending(rlock__cmd **head, rlock__cmd **tail) {
  rlock__cmd *list = *head;
  *head = *tail = NULL;
  while (list != NULL) {
    rlock__cmd *next = list->pending_next;
    list->pending_next = NULL;
    list->is_pending = false;
    rlock__cmd_send_now(list);
    list = next;
  }
}

void rlock__cmds_reroute(rlock__net *n) {
  rlock__cmds_send_pending(&n->unrouted_head, &n->unrouted_tail);
  /* Commands queued for a node that no longer serves their slot (a
   * failover: the old master is down) go where the map says now. */
  for (rlock__node *node = n->nodes; node != NULL; node = node->next) {
    rlock__cmd **slot = &node->cmd.pending_head, *prev = NULL;
    while (*slot != NULL) {
      rlock__cmd *cmd = *slot;
      rlock__node *to = route(cmd);
      if (to == node || cmd->fixed != NULL) {
        prev = cmd;
        slot = &cmd->pending_next;
        continue;
      }
      *slot = cmd->pending_next;
      if (node->cmd.pending_tail == cmd)
        node->cmd.pending_tail = prev;
      cmd->pending_next = NULL;
      cmd->is_pending = false;
      rlock__cmd_send_now(cmd);
    }
  }
}

void rlock__cmd_abandon(rlock__cmd *cmd) {
  if (cmd == NULL)
    return;
  cmd->cb = NULL;
  if (cmd->state != RLOCK__CMD_DONE) {
    rlock__timed_stop(cmd->net->core, &cmd->timer);
    rlock__timed_stop(cmd->net->core, &cmd->redo);
    pending_remove(cmd);
    cmd->state = RLOCK__CMD_DONE;
  }
  cmd_free_if_idle(cmd);
}

/* Called at shutdown after every connection is freed: nothing is in flight
 * any more, so every record left (waiting for a retry or a connection) is
 * failed and freed. */
void rlock__cmds_fail_all(rlock__net *n) {
  while (n->cmd_all != NULL) {
    rlock__cmd *cmd = n->cmd_all;
    /* Every FIFO was emptied (rlock__conn_shutdown): each send and each
     * WAIT has been answered or failed. */
    assert(cmd->inflight == 0 && cmd->wait_inflight == 0);
    cmd->inflight = 0;
    cmd->wait_inflight = 0;
    if (cmd->state != RLOCK__CMD_DONE) {
      pending_remove(cmd);
      complete(cmd, NULL, RLOCK_ECLOSED);
    } else {
      cmd_free_if_idle(cmd);
    }
  }
}

