/* The client: the top of the library. It assembles the layers - core (loop
 * thread, tasks, timers), net (connections, channels), engine (operations,
 * holds) - wires their hooks, and owns the order of open and close. It also
 * hands out lock handles. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "observe.h"
#include "prim.h"

struct rlock_client {
  rlock__core core; /* first: hooks find the client from it */
  rlock__net net;
  rlock__engine engine;
  char id[RLOCK_ID_LEN + 1];
  char *uri_text; /* the full URI, password included: wiped when freed */
  char *client_name;
  /* Without client_name: "rlock/<id>/<pid>/<program>/<host>", set on
   * every connection at connect (rlock_client_holder reads it back). */
  char auto_name[RLOCK_ID_LEN + 160];
  char *tls_files[5]; /* copies of the tls_* strings of the options */
  rlock__uri uri;
  /* open handshake */
  uv_sem_t open_sem;
  rlock__timed open_timer;
  int open_result;
  char open_detail[256];
  int open_pending; /* connections still to answer their PING */
  rlock__observer obs; /* events and stats (observe.c) */
};

#define CLIENT_OF(ptr, member) RLOCK__CONTAINER_OF(ptr, rlock_client, member)

/* ---- ids (the counter lives in core: ids.c) ---- */

uint64_t rlock_thread_id(void) { return rlock__thread_id(); }

uint64_t rlock_owner_new(void) { return rlock__id_next(); }

int64_t rlock_now_ms(void) { return rlock__now_ms(); }

/* ---- open ---- */

static void open_progress(rlock_client *c, int err, const char *detail) {
  if (c->open_pending <= 0)
    return;
  if (err != 0) {
    c->open_result = err;
    snprintf(c->open_detail, sizeof(c->open_detail), "%s",
             detail != NULL ? detail : rlock_strerror(err));
    c->open_pending = 0;
  } else if (--c->open_pending > 0) {
    return;
  }
  rlock__timed_stop(&c->core, &c->open_timer);
  uv_sem_post(&c->open_sem);
}

static void net_open_progress(rlock__net *n, int err, const char *detail) {
  open_progress(CLIENT_OF(n, net), err, detail);
}

/* A backstop: each connection attempt is bounded already (connect_timeout_ms
 * to connect, then command_timeout_ms for the handshake's answers). */
static int64_t open_bound_ms(const rlock__core *core) {
  return core->opts.connect_timeout_ms + core->opts.command_timeout_ms;
}

static void open_timeout(rlock__timed *t) {
  rlock_client *c = CLIENT_OF(t, open_timer);
  char detail[160];
  snprintf(detail, sizeof(detail),
           "Redis was not connected and answering PING within "
           "connect_timeout_ms + command_timeout_ms (%lld ms)",
           (long long)open_bound_ms(&c->core));
  open_progress(c, RLOCK_ETIMEDOUT, detail);
}

static void engine_event(rlock__engine *e, const rlock__event *ev) {
  rlock__observe_event(&CLIENT_OF(e, engine)->obs, ev);
}

static void net_reconnected(rlock__net *n, const rlock__conn_change *r) {
  rlock__observe_reconnected(&CLIENT_OF(n, net)->obs, r);
}

static void net_disconnected(rlock__net *n, const rlock__conn_change *r) {
  rlock__observe_disconnected(&CLIENT_OF(n, net)->obs, r);
}

static void net_cmd_ready(rlock__net *n) {
  rlock__engine_on_cmd_ready(&CLIENT_OF(n, net)->engine);
}

static void loop_start(rlock__core *core) {
  rlock_client *c = CLIENT_OF(core, core);
  c->open_timer.fire = open_timeout;
  rlock__timed_start(core, &c->open_timer,
                     rlock__now_ms() + open_bound_ms(core));
  rlock__net_start(&c->net);
  rlock__engine_start(&c->engine);
}

/* ---- close ---- */

/* Close, first half (on the loop thread). Every call still running ends
 * with RLOCK_ECLOSED. An acquire whose command is already on its way may
 * still take the lock on the server, so its (name, owner) is trimmed back
 * first, and the command connection stays up until those trims have
 * answered (at most command_timeout_ms): close never leaves a hold nobody
 * knows of while the server answers. */
static void on_close(rlock__core *core) {
  rlock_client *c = CLIENT_OF(core, core);
  int draining = rlock__engine_close(&c->engine);
  rlock__net_close_sub(&c->net);
  /* Nothing to wait for: finish at once, before any late callback of a
   * connection that is going anyway. */
  rlock__core_final_in(core, draining > 0 ? core->opts.command_timeout_ms
                                          : -1);
}

/* The last trim answered, or the command connection went: finish now (on
 * the next loop turn, outside the callback that tells). */
static void engine_drained(rlock__engine *e) {
  rlock__core_final_in(&CLIENT_OF(e, engine)->core, 0);
}

static void net_cmd_closed(rlock__net *n) {
  rlock__core_final_in(&CLIENT_OF(n, net)->core, 0);
}

/* Close, second half: the connections go (failing what is still in
 * flight, so the engine hears of it while it still exists), then the
 * engine's memory. */
static void on_final(rlock__core *core) {
  rlock_client *c = CLIENT_OF(core, core);
  rlock__net_free(&c->net);
  rlock__engine_free(&c->engine);
}

static void free_strings(rlock_client *c) {
  rlock__free_secret(c->uri_text); /* the full URI, password included */
  free(c->client_name);
  for (size_t i = 0; i < sizeof(c->tls_files) / sizeof(c->tls_files[0]); i++)
    free(c->tls_files[i]);
}

static void client_free(rlock_client *c) {
  rlock__uri_free(&c->uri);
  free_strings(c);
  uv_sem_destroy(&c->open_sem);
  rlock__core_destroy(&c->core);
  free(c);
}

static void on_destroy(rlock__core *core) { client_free(CLIENT_OF(core, core)); }

/* Appends `s` to buf (at *at, of size n) as a client name may hold it:
 * bytes '!'..'~' but '/', others as '_', at most `max`. */
static void name_part(char *buf, size_t n, size_t *at, const char *s,
                      size_t max) {
  for (size_t i = 0; s[i] != '\0' && i < max && *at + 1 < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    buf[(*at)++] = ch > ' ' && ch <= '~' && ch != '/' ? (char)ch : '_';
  }
  buf[*at] = '\0';
}

/* The automatic client name: "rlock/<id>/<pid>/<program>/<host>" (program
 * at most 32 bytes, host 64; '/' and bytes outside '!'..'~' as '_'). */
static void make_auto_name(rlock_client *c) {
  char host[256] = "";
  if (gethostname(host, sizeof(host) - 1) != 0)
    host[0] = '\0';
  const char *prog = program_invocation_short_name;
  size_t at = (size_t)snprintf(c->auto_name, sizeof(c->auto_name),
                               "rlock/%s/%ld/", c->id, (long)getpid());
  name_part(c->auto_name, sizeof(c->auto_name), &at,
            prog != NULL && prog[0] != '\0' ? prog : "?", 32);
  if (at + 1 < sizeof(c->auto_name)) {
    c->auto_name[at++] = '/';
    c->auto_name[at] = '\0';
  }
  name_part(c->auto_name, sizeof(c->auto_name), &at,
            host[0] != '\0' ? host : "?", 64);
}

static char *dup_or_null(const char *s) {
  return s != NULL ? strdup(s) : NULL;
}

/* Frees a client that failed before its core was set up. */
static void discard(rlock_client *c) {
  free_strings(c);
  free(c);
}

/* The option strings the client keeps, copied (and pointed at) in o. */
static int copy_strings(rlock_client *c, rlock_options *o, const char *uri) {
  const char **fields[] = {&o->tls_ca_file, &o->tls_ca_dir,
                           &o->tls_cert_file, &o->tls_key_file,
                           &o->tls_server_name};
  c->uri_text = strdup(uri);
  c->client_name = dup_or_null(o->client_name);
  bool ok = c->uri_text != NULL && (o->client_name == NULL || c->client_name);
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    c->tls_files[i] = dup_or_null(*fields[i]);
    ok = ok && (*fields[i] == NULL || c->tls_files[i] != NULL);
    *fields[i] = c->tls_files[i];
  }
  o->uri = c->uri_text;
  o->client_name = c->client_name;
  if (!ok) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  return 0;
}

int rlock_client_new(rlock_client **client, const rlock_options *o) {
  if (client == NULL) {
    rlock__set_last_error("client is NULL");
    return RLOCK_EINVAL;
  }
  *client = NULL;
  /* From here on `o` is a full struct of this version, whatever version of
   * rlock.h the caller was built with. */
  rlock_options full;
  int rc = rlock__options_copy(&full, o);
  if (rc != 0)
    return rc;
  rc = rlock__options_validate(&full);
  if (rc != 0)
    return rc;
  const char *uri = full.uri;
  if (uri == NULL) {
    uri = getenv("REDIS_URL");
    if (uri == NULL || uri[0] == '\0')
      uri = "redis://127.0.0.1:6379";
  }

  rlock_client *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  rc = copy_strings(c, &full, uri);
  if (rc != 0) {
    discard(c);
    return rc;
  }
  rc = rlock__core_init(&c->core, &full); /* sets the last error */
  if (rc != 0) {
    discard(c);
    return rc;
  }
  int sys = uv_sem_init(&c->open_sem, 0);
  if (sys != 0) {
    rlock__core_destroy(&c->core);
    discard(c);
    rlock__set_last_error("uv_sem_init failed: %s", uv_strerror(sys));
    return RLOCK_ESYS;
  }
  c->core.diag_client = c;
  c->core.on_loop_start = loop_start;
  c->core.on_close = on_close;
  c->core.on_final = on_final;
  c->core.on_destroy = on_destroy;
  rc = rlock__uri_parse(c->uri_text, &c->uri); /* sets the last error */
  if (rc == 0) /* $REDIS_URL was not checked against the tls_* fields */
    rc = rlock__options_check_tls(&c->core.opts, &c->uri);
  if (rc == 0)
    rc = rlock__options_check_sentinel(&c->core.opts, &c->uri);
  if (rc == 0 && (rlock__uuid4(c->id) != 0 ||
                  rlock__engine_init(&c->engine, &c->core, &c->net, c->id) !=
                      0)) {
    /* Keeps random.c's detail (libuv's error text). */
    rlock__set_last_error("no random source for the client id: %s",
                          rlock_last_error());
    rc = RLOCK_ESYS;
  }
  if (rc != 0) {
    rlock__engine_free(&c->engine);
    client_free(c);
    return rc;
  }
  rlock__net_init(&c->net, &c->core, &c->uri, c->client_name);
  if (c->client_name == NULL) {
    make_auto_name(c);
    c->net.auto_name = c->auto_name;
  }
  rc = rlock__net_setup(&c->net, &c->core.opts); /* sets the last error */
  /* The sentinel's credentials were copied by the net layer: the caller's
   * strings are not kept. */
  c->core.opts.sentinel_user = NULL;
  c->core.opts.sentinel_password = NULL;
  if (rc != 0) {
    rlock__net_free(&c->net); /* the nodes made before the failure */
    rlock__engine_free(&c->engine);
    client_free(c);
    return rc;
  }
  c->net.on_open_progress = net_open_progress;
  c->net.on_cmd_ready = net_cmd_ready;
  c->net.on_cmd_closed = net_cmd_closed;
  c->net.on_reconnected = net_reconnected;
  c->net.on_disconnected = net_disconnected;
  c->engine.on_drained = engine_drained;
  c->engine.on_event = engine_event;
  rlock__observer_init(&c->obs, &c->core.opts, c->id, c->client_name);
  c->open_pending = 2;

  rc = rlock__core_start(&c->core); /* sets the last error */
  if (rc != 0) {
    rlock__net_free(&c->net);
    rlock__engine_free(&c->engine);
    client_free(c);
    return rc;
  }
  uv_sem_wait(&c->open_sem);
  if (c->open_result != 0) {
    rc = c->open_result;
    char detail[sizeof(c->open_detail)];
    memcpy(detail, c->open_detail, sizeof(detail));
    rlock_client_free(c);
    rlock__set_last_error("%s", detail);
    return rc;
  }
  rlock__clear_last_error();
  *client = c;
  return 0;
}

void rlock_client_free(rlock_client *c) {
  if (c == NULL)
    return;
  if (rlock__core_fork_check(&c->core) != 0) {
    /* A forked child's copy: its loop thread is the parent's, and the
     * sockets and the loop's descriptors are shared with the parent, so
     * nothing is touched (the copy's memory is left to the child's exit or
     * exec). */
    return;
  }
  rlock__core_request_close(&c->core);
  rlock__core_join(&c->core);
  rlock__core_unref(&c->core);
}

const char *rlock_client_id(const rlock_client *c) {
  return c != NULL ? c->id : "";
}

const rlock__net *rlock__client_net(const rlock_client *c) {
  return &c->net;
}

int rlock_client_capabilities(const rlock_client *c, rlock_client_caps *caps) {
  if (c == NULL || caps == NULL)
    return rlock__bad_arg("client or caps is NULL");
  size_t size = caps->struct_size;
  if (size < sizeof(caps->struct_size) || size > sizeof(*caps)) {
    rlock__set_last_error("rlock_client_caps.struct_size is %zu; set it with "
                          "rlock_client_caps_init()",
                          size);
    return RLOCK_EINVAL;
  }
  rlock_client_caps got;
  memset(&got, 0, sizeof(got));
  got.struct_size = size;
  /* Written once, before the flag that publishes it (net): safe to copy
   * from any thread. */
  const char *note = rlock__net_sync_report(&c->net);
  if (note != NULL) {
    got.replica_sync_off = 1;
    snprintf(got.replica_sync_note, sizeof(got.replica_sync_note), "%s",
             note);
  }
  memcpy(caps, &got, size);
  return 0;
}

int rlock_client_stats(const rlock_client *c, rlock_stats *out) {
  if (c == NULL || out == NULL)
    return rlock__bad_arg("client or out is NULL");
  return rlock__observer_stats(&c->obs, &c->net, out);
}

int rlock_client_interrupt(rlock_client *c, uint64_t owner) {
  if (c == NULL)
    return rlock__bad_arg("client is NULL");
  return rlock__engine_interrupt(&c->engine, owner);
}

/* ---- lock handles ---- */

static int get_handle_size(rlock_client *c, const char *name, rlock **out,
                           const rlock__prim *prim, size_t size) {
  if (out == NULL || c == NULL || name == NULL || name[0] == '\0') {
    if (out != NULL)
      *out = NULL;
    rlock__set_last_error("client, name and lock must be given and the "
                          "name must not be empty");
    return RLOCK_EINVAL;
  }
  *out = NULL;
  size_t len = strnlen(name, (size_t)RLOCK_NAME_MAX + 1);
  if (len > RLOCK_NAME_MAX) {
    rlock__set_last_error("lock name longer than %d bytes", RLOCK_NAME_MAX);
    return RLOCK_ENAMETOOLONG;
  }
  int forked = rlock__core_fork_check(&c->core);
  if (forked != 0) {
    rlock__set_last_error("%s", rlock__core_submit_error(forked));
    return forked;
  }
  uv_mutex_lock(&c->core.queue_mutex);
  bool closed = c->core.closed;
  uv_mutex_unlock(&c->core.queue_mutex);
  if (closed) {
    rlock__set_last_error("client is closed");
    return RLOCK_ECLOSED;
  }
  int rc = rlock__handle_new_size(&c->engine, prim, name, len, size, out);
  if (rc != 0) {
    rlock__set_last_error("out of memory");
    return rc;
  }
  rlock *h = *out;
  if (!rlock__net_slots_agree(&c->net, h->name, h->name_len, h->channel,
                              h->channel_len)) {
    rlock__set_last_error(
        "'%s' hashes to slot %d but its channel '%s' to slot %d: Redis "
        "Cluster refuses a script over both (CROSSSLOT; Java's too), and a "
        "sharded message never crosses slots; use a name without braces",
        h->name, rlock__key_slot(h->name, h->name_len), h->channel,
        rlock__key_slot(h->channel, h->channel_len));
    rlock__handle_release(h);
    *out = NULL;
    return RLOCK_ECLUSTER;
  }
  rlock__clear_last_error();
  return 0;
}

static int get_handle(rlock_client *c, const char *name, rlock **out,
                      const rlock__prim *prim) {
  return get_handle_size(c, name, out, prim, sizeof(rlock));
}

int rlock_new(rlock_client *c, const char *name, rlock **out) {
  return get_handle(c, name, out, &rlock__prim_lock);
}

int rlock_new_fair(rlock_client *c, const char *name, rlock **out) {
  return get_handle(c, name, out, &rlock__prim_fair);
}

int rlock_new_nonreentrant(rlock_client *c, const char *name, rlock **out) {
  return get_handle(c, name, out, &rlock__prim_nonreentrant);
}

int rlock_new_nonreentrant_fair(rlock_client *c, const char *name,
                                rlock **out) {
  return get_handle(c, name, out, &rlock__prim_nonreentrant_fair);
}

int rlock_new_read(rlock_client *c, const char *name, rlock **out) {
  return get_handle(c, name, out, &rlock__prim_read);
}

int rlock_new_write(rlock_client *c, const char *name, rlock **out) {
  return get_handle(c, name, out, &rlock__prim_write);
}

int rlock_new_fenced(rlock_client *c, const char *name, rlock **out) {
  return get_handle(c, name, out, &rlock__prim_fenced);
}

int rlock_guard_new(rlock_client *c, const char *name, rlock_guard **out) {
  return get_handle(c, name, (rlock **)out, &rlock__prim_guard);
}

int rlock_new_fast_multilock(rlock_client *c, const char *group,
                             const char *const *values, const size_t *lens,
                             size_t n, rlock **out) {
  if (out == NULL)
    return rlock__bad_arg("out is NULL");
  *out = NULL;
  size_t size = rlock__fast_multilock_size(n);
  if (values == NULL || n == 0 || size == 0)
    return rlock__bad_arg("a FasterMultiLock needs at least one value");
  rlock *h = NULL;
  int rc = get_handle_size(c, group, &h, &rlock__prim_fast_multilock, size);
  if (rc == 0)
    rc = rlock__fast_multilock_fill(h, values, lens, n);
  if (rc != 0 && h != NULL) {
    rlock__handle_release(h); /* no watchdog yet: the memory goes */
    *out = NULL;
  } else {
    *out = h;
  }
  return rc;
}

int rlock_semaphore_new(rlock_client *c, const char *name,
                        rlock_semaphore **out) {
  return get_handle(c, name, (rlock **)out, &rlock__prim_semaphore);
}

int rlock_permit_semaphore_new(rlock_client *c, const char *name,
                               rlock_permit_semaphore **out) {
  return get_handle(c, name, (rlock **)out, &rlock__prim_permit_semaphore);
}

int rlock_latch_new(rlock_client *c, const char *name, rlock_latch **out) {
  return get_handle(c, name, (rlock **)out, &rlock__prim_latch);
}

int rlock_new_spin(rlock_client *c, const char *name, rlock **out) {
  /* no channel: the handle's "channel" is never subscribed or published */
  return get_handle(c, name, out, &rlock__prim_spin);
}
