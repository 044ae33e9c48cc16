/* The two hiredis connections (commands, subscriber): connect, handshake,
 * reconnect with back-off; and command records with reply deadlines (heap
 * timers, since hiredis 0.14 has no async timeout). What happens to the
 * connections is told to the owner through the hooks in rlock__net. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "uv_adapter.h"

#include "net.h"

static int conn_start(rlock__conn *conn);

/* ---- reconnect ---- */

static void reconnect_fire(rlock__timed *t) {
  conn_start(RLOCK__CONTAINER_OF(t, rlock__conn, reconnect));
}

/* Back-off: the first attempt at once (a killed connection usually comes back
 * straight away), then 50 ms doubling, capped at retry_interval_ms. */
static void schedule_reconnect(rlock__conn *conn) {
  rlock__net *n = conn->net;
  if (n->core->closing || rlock__timed_active(&conn->reconnect))
    return;
  int64_t delay = 0;
  if (conn->backoff_attempt > 0) {
    int shift = conn->backoff_attempt > 16 ? 16 : conn->backoff_attempt - 1;
    delay = (int64_t)50 << shift;
    if (delay > n->core->opts.retry_interval_ms)
      delay = n->core->opts.retry_interval_ms;
  }
  conn->backoff_attempt++;
  conn->reconnect.fire = reconnect_fire;
  rlock__timed_start(n->core, &conn->reconnect, rlock__now_ms() + delay);
}

static void conn_down(rlock__conn *conn) {
  conn->ac = NULL;
  conn->state = RLOCK__CONN_DOWN;
  if (conn->is_sub)
    rlock__chans_on_disconnect(conn->net);
  schedule_reconnect(conn);
}

static void connect_cb(const redisAsyncContext *ac, int status) {
  rlock__conn *conn = ac->data;
  if (status == REDIS_OK)
    return;
  /* hiredis frees the context after this callback and then fails the
   * pending commands with NULL replies. */
  rlock__net *n = conn->net;
  n->on_open_progress(n, RLOCK_ECONN, ac->errstr);
  if (conn->ac != ac)
    return;
  if (n->core->closing) { /* hiredis frees it: forget it now */
    conn->ac = NULL;
    if (!conn->is_sub)
      n->on_cmd_closed(n);
    return;
  }
  conn_down(conn);
}

static void disconnect_cb(const redisAsyncContext *ac, int status) {
  (void)status;
  rlock__conn *conn = ac->data;
  rlock__net *n = conn->net;
  if (conn->ac != ac)
    return;
  conn->ac = NULL;
  if (n->core->closing) {
    if (!conn->is_sub)
      n->on_cmd_closed(n);
    return;
  }
  n->on_open_progress(n, RLOCK_ECONN, ac->errstr[0] ? ac->errstr
                                                      : "connection closed");
  conn_down(conn);
}

/* ---- handshake: AUTH, SELECT, CLIENT SETNAME, then PING ---- */

static void hs_record(rlock__conn *conn, const redisReply *reply) {
  if (reply->type == REDIS_REPLY_ERROR && conn->hs_err == 0) {
    conn->hs_err = rlock__reply_error(reply);
    snprintf(conn->hs_detail, sizeof(conn->hs_detail), "%.*s",
             (int)reply->len, reply->str);
  }
}

static void handshake_cb(redisAsyncContext *ac, void *r, void *privdata) {
  rlock__conn *conn = privdata;
  if (conn->ac == ac && r != NULL)
    hs_record(conn, r);
}

static void conn_ready(rlock__conn *conn) {
  rlock__net *n = conn->net;
  if (n->core->closing)
    return;
  if (conn->hs_err != 0) {
    n->on_open_progress(n, conn->hs_err, conn->hs_detail);
    /* A connection that cannot authenticate is useless: drop it and try
     * again later (the password may be fixed on the server). */
    redisAsyncDisconnect(conn->ac);
    return;
  }
  conn->state = RLOCK__CONN_UP;
  conn->backoff_attempt = 0;
  n->on_open_progress(n, 0, NULL);
  if (!conn->is_sub)
    n->on_cmd_ready(n);
}

static void ready_cb(redisAsyncContext *ac, void *r, void *privdata) {
  rlock__conn *conn = privdata;
  redisReply *reply = r;
  if (conn->ac != ac || reply == NULL)
    return; /* connection failed; connect_cb / disconnect_cb handle it */
  handshake_cb(ac, r, privdata);
  conn_ready(conn);
}

/* Sends one handshake command (AUTH, SELECT, CLIENT SETNAME). */
static void handshake(rlock__conn *conn, int argc, const char **argv) {
  size_t lens[3];
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  if (conn->is_sub) {
    if (rlock__sub_append(conn->net, argc, argv, lens) == 0)
      conn->hs_expect++;
  } else {
    redisAsyncCommandArgv(conn->ac, handshake_cb, conn, argc, argv, lens);
  }
}

static void send_now(rlock__cmd *cmd);

/* ---- the subscriber connection ----
 *
 * rlock routes every reply on this connection itself: hiredis connects,
 * writes and parses, but its pub/sub bookkeeping is bypassed. hiredis 0.14
 * knows neither SSUBSCRIBE nor "smessage" (Java's sharded pub/sub), and it
 * drops a channel's callback when an "unsubscribe" reply crosses a new
 * SUBSCRIBE. Commands are appended straight to the output buffer; replies
 * are taken off the reader in order: first the handshake's, then
 * subscription confirmations and messages. */

int rlock__sub_append(rlock__net *n, int argc, const char **argv,
                      const size_t *lens) {
  redisAsyncContext *ac = n->sub.ac;
  if (ac == NULL || (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
    return RLOCK_ECONN;
  if (redisAppendCommandArgv(&ac->c, argc, argv, lens) != REDIS_OK)
    return RLOCK_ENOMEM;
  if (ac->ev.addWrite != NULL)
    ac->ev.addWrite(ac->ev.data);
  return 0;
}

static void sub_read(redisAsyncContext *ac) {
  rlock__conn *conn = ac->data;
  rlock__net *n = conn->net;
  if (redisBufferRead(&ac->c) != REDIS_OK) {
    redisAsyncDisconnect(ac); /* no callbacks pending: frees it now */
    return;
  }
  void *r = NULL;
  while (conn->ac == ac) {
    if (redisGetReplyFromReader(&ac->c, &r) != REDIS_OK) {
      redisAsyncDisconnect(ac);
      return;
    }
    if (r == NULL)
      break;
    redisReply *reply = r;
    if (conn->hs_expect > 0) {
      hs_record(conn, reply);
      if (--conn->hs_expect == 0)
        conn_ready(conn);
    } else if (!n->core->closing) {
      rlock__chans_reply(n, reply);
    }
    freeReplyObject(reply);
  }
}

static int conn_start(rlock__conn *conn) {
  rlock__net *n = conn->net;
  const rlock__uri *u = n->uri;
  redisAsyncContext *ac = u->is_unix ? redisAsyncConnectUnix(u->path)
                                     : redisAsyncConnect(u->host, u->port);
  if (ac == NULL) {
    n->on_open_progress(n, RLOCK_ENOMEM, "out of memory");
    schedule_reconnect(conn);
    return RLOCK_ENOMEM;
  }
  if (ac->err) {
    n->on_open_progress(n, RLOCK_ECONN, ac->errstr);
    redisAsyncFree(ac);
    schedule_reconnect(conn);
    return RLOCK_ECONN;
  }
  ac->data = conn;
  /* Children a program forks and execs must not inherit Redis sockets
   * (they would keep the connection and its subscriptions open). */
  int fd_flags = fcntl(ac->c.fd, F_GETFD);
  if (fd_flags >= 0)
    fcntl(ac->c.fd, F_SETFD, fd_flags | FD_CLOEXEC);
  if (rlock__uv_attach(ac, &n->core->loop) != REDIS_OK) {
    n->on_open_progress(n, RLOCK_ESYS, "cannot attach to the event loop");
    redisAsyncFree(ac);
    schedule_reconnect(conn);
    return RLOCK_ESYS;
  }
  redisAsyncSetConnectCallback(ac, connect_cb);
  redisAsyncSetDisconnectCallback(ac, disconnect_cb);
  conn->ac = ac;
  conn->state = RLOCK__CONN_CONNECTING;
  conn->hs_err = 0;
  conn->hs_expect = 0;
  conn->hs_detail[0] = '\0';
  if (conn->is_sub)
    rlock__uv_set_read_hook(ac, sub_read);

  /* hiredis buffers commands until the socket connects, so the handshake
   * and whatever waited for this connection are pipelined at once. */
  const char *argv[3];
  size_t lens[3];
  if (u->password != NULL) {
    int n = 0;
    argv[n++] = "AUTH";
    if (u->user != NULL && u->user[0] != '\0')
      argv[n++] = u->user;
    argv[n++] = u->password;
    handshake(conn, n, argv);
  }
  if (!conn->is_sub && u->db != 0) {
    char db[16];
    snprintf(db, sizeof(db), "%d", u->db);
    argv[0] = "SELECT";
    argv[1] = db;
    handshake(conn, 2, argv);
  }
  if (n->client_name != NULL) {
    argv[0] = "CLIENT";
    argv[1] = "SETNAME";
    argv[2] = n->client_name;
    handshake(conn, 3, argv);
  }
  argv[0] = "PING";
  (void)lens;
  if (conn->is_sub) {
    lens[0] = 4;
    rlock__sub_append(conn->net, 1, argv, lens);
    conn->hs_expect++;
  } else {
    redisAsyncCommand(ac, ready_cb, conn, "PING");
  }

  if (conn->is_sub) {
    rlock__chans_on_connect(n);
  } else {
    rlock__cmd *pending = conn->pending_head;
    conn->pending_head = conn->pending_tail = NULL;
    while (pending != NULL) {
      rlock__cmd *next = pending->pending_next;
      pending->pending_next = NULL;
      send_now(pending);
      pending = next;
    }
  }
  return 0;
}

static void conn_shutdown(rlock__conn *conn) {
  rlock__net *n = conn->net;
  rlock__timed_stop(n->core, &conn->reconnect);
  if (conn->ac != NULL) {
    redisAsyncContext *ac = conn->ac;
    conn->ac = NULL;
    /* Fails every pending callback with a NULL reply, synchronously. */
    redisAsyncFree(ac);
  }
  conn->state = RLOCK__CONN_DOWN;
}

int rlock__reply_error(const redisReply *r) {
  return rlock__err_from_server(r->str, r->len);
}

/* ---- command records ---- */

static void cmd_free_if_idle(rlock__cmd *cmd) {
  if (cmd->state != RLOCK__CMD_DONE || cmd->inflight > 0)
    return;
  rlock__net *n = cmd->net;
  if (cmd->all_prev != NULL)
    cmd->all_prev->all_next = cmd->all_next;
  else
    n->cmd_all = cmd->all_next;
  if (cmd->all_next != NULL)
    cmd->all_next->all_prev = cmd->all_prev;
  free(cmd);
}

static void pending_remove(rlock__cmd *cmd) {
  rlock__conn *conn = &cmd->net->cmd;
  rlock__cmd **slot = &conn->pending_head, *prev = NULL;
  while (*slot != NULL && *slot != cmd) {
    prev = *slot;
    slot = &(*slot)->pending_next;
  }
  if (*slot == NULL)
    return;
  *slot = cmd->pending_next;
  if (conn->pending_tail == cmd)
    conn->pending_tail = prev;
  cmd->pending_next = NULL;
}

static void complete(rlock__cmd *cmd, redisReply *reply, int err) {
  rlock__net *n = cmd->net;
  rlock__timed_stop(n->core, &cmd->timer);
  cmd->state = RLOCK__CMD_DONE;
  rlock__reply_cb cb = cmd->cb;
  cmd->cb = NULL;
  if (cb != NULL)
    cb(n, reply, err, cmd->data);
  cmd_free_if_idle(cmd);
}

static void dispatch(rlock__cmd *cmd);

static void cmd_timer_fire(rlock__timed *t) {
  rlock__cmd *cmd = RLOCK__CONTAINER_OF(t, rlock__cmd, timer);
  rlock__net *n = cmd->net;
  if (cmd->state == RLOCK__CMD_WAIT_RETRY) {
    dispatch(cmd);
    return;
  }
  /* Reply deadline passed. A reply that still comes is ignored (inflight
   * keeps the record alive until hiredis hands it back). */
  if (cmd->inflight == 0)
    pending_remove(cmd);
  if (cmd->retries_left > 0) {
    cmd->retries_left--;
    cmd->state = RLOCK__CMD_WAIT_RETRY;
    rlock__timed_start(n->core, &cmd->timer,
                       rlock__now_ms() + n->core->opts.retry_interval_ms);
    return;
  }
  complete(cmd, NULL, RLOCK_ETIMEDOUT);
}

static void cmd_reply_cb(redisAsyncContext *ac, void *r, void *privdata) {
  (void)ac;
  rlock__cmd *cmd = privdata;
  rlock__net *n = cmd->net;
  redisReply *reply = r;
  cmd->inflight--;
  /* Replies on one connection come in order, so only the reply to the latest
   * send (inflight back to 0) answers a record that is still waiting. */
  if (cmd->state != RLOCK__CMD_WAIT_REPLY || cmd->inflight > 0) {
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
  if (reply->type == REDIS_REPLY_ERROR && cmd->script != NULL &&
      !cmd->use_eval && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
    cmd->use_eval = true; /* EVAL also caches it for the next EVALSHA */
    send_now(cmd);
    return;
  }
  complete(cmd, reply, 0);
}

/* Sends on the command connection, or queues the record for the next one
 * when there is none or it is going away (conn_start flushes it). */
static void send_now(rlock__cmd *cmd) {
  rlock__conn *conn = &cmd->net->cmd;
  int off = 2;
  if (cmd->script != NULL) {
    off = 0;
    cmd->argv[0] = cmd->use_eval ? "EVAL" : "EVALSHA";
    cmd->argvlen[0] = strlen(cmd->argv[0]);
    cmd->argv[1] = cmd->use_eval ? cmd->script->body : cmd->script->sha;
    cmd->argvlen[1] = strlen(cmd->argv[1]);
  }
  if (conn->ac == NULL ||
      redisAsyncCommandArgv(conn->ac, cmd_reply_cb, cmd, cmd->argc + 2 - off,
                            cmd->argv + off, cmd->argvlen + off) != REDIS_OK) {
    cmd->pending_next = NULL;
    if (conn->pending_tail != NULL)
      conn->pending_tail->pending_next = cmd;
    else
      conn->pending_head = cmd;
    conn->pending_tail = cmd;
    return;
  }
  cmd->inflight++;
}

static void dispatch(rlock__cmd *cmd) {
  rlock__net *n = cmd->net;
  cmd->state = RLOCK__CMD_WAIT_REPLY;
  cmd->timer.fire = cmd_timer_fire;
  rlock__timed_start(n->core, &cmd->timer,
                     rlock__now_ms() + n->core->opts.command_timeout_ms);
  send_now(cmd);
}

rlock__cmd *rlock__cmd_send(rlock__net *n, const rlock__script *script,
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
  dispatch(cmd);
  return cmd;
}

void rlock__cmd_abandon(rlock__cmd *cmd) {
  if (cmd == NULL)
    return;
  cmd->cb = NULL;
  if (cmd->state != RLOCK__CMD_DONE) {
    rlock__timed_stop(cmd->net->core, &cmd->timer);
    if (cmd->inflight == 0)
      pending_remove(cmd);
    cmd->state = RLOCK__CMD_DONE;
  }
  cmd_free_if_idle(cmd);
}

/* Called at shutdown after both connections are freed: nothing is in flight
 * any more, so every record left (waiting for a retry or a connection) is
 * failed and freed. */
static void cmds_fail_all(rlock__net *n) {
  while (n->cmd_all != NULL) {
    rlock__cmd *cmd = n->cmd_all;
    cmd->inflight = 0;
    if (cmd->state != RLOCK__CMD_DONE) {
      pending_remove(cmd);
      complete(cmd, NULL, RLOCK_ECLOSED);
    } else {
      cmd_free_if_idle(cmd);
    }
  }
}

/* ---- the layer's life ---- */

void rlock__net_init(rlock__net *n, rlock__core *core, const rlock__uri *uri,
                     const char *client_name) {
  memset(n, 0, sizeof(*n));
  n->core = core;
  n->uri = uri;
  n->client_name = client_name;
  n->cmd.net = n;
  n->sub.net = n;
  n->sub.is_sub = true;
  rlock__map_init(&n->chans);
}

void rlock__net_start(rlock__net *n) {
  if (conn_start(&n->cmd) != 0 || conn_start(&n->sub) != 0)
    n->on_open_progress(n, RLOCK_ECONN, "could not create a connection");
}

bool rlock__net_cmd_connected(const rlock__net *n) { return n->cmd.ac != NULL; }

void rlock__net_close_sub(rlock__net *n) { conn_shutdown(&n->sub); }

void rlock__net_free(rlock__net *n) {
  conn_shutdown(&n->sub);
  conn_shutdown(&n->cmd);
  cmds_fail_all(n);
  rlock__chans_free(n);
}
