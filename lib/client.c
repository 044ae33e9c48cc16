/* The client: open/close, reference counting, lock handles, thread ids. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client-private.h"

/* Thread ids start at 1 and are never reused, so an owner string can never
 * name two threads of one process over its life. */
static atomic_uint_fast64_t next_thread_id = 1;
static _Thread_local uint64_t this_thread_id;

uint64_t rlock__id_next(void) {
  return (uint64_t)atomic_fetch_add(&next_thread_id, 1);
}

uint64_t rlock_thread_id(void) {
  if (this_thread_id == 0)
    this_thread_id = rlock__id_next();
  return this_thread_id;
}

void rlock__open_progress(rlock_client *c, int err, const char *detail) {
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
  rlock__timed_stop(c, &c->open_timer);
  uv_sem_post(&c->open_sem);
}

static void client_destroy(rlock_client *c) {
  rlock__uri_free(&c->uri);
  rlock__free_secret(c->uri_text); /* the full URI, password included */
  free(c->client_name);
  uv_mutex_destroy(&c->queue_mutex);
  uv_sem_destroy(&c->open_sem);
  free(c);
}

void rlock__client_release(rlock_client *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1)
    client_destroy(c);
}

static char *dup_or_null(const char *s) {
  return s != NULL ? strdup(s) : NULL;
}

int rlock_client_open(rlock_client **client, const rlock_options *o) {
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
  o = &full;
  rc = rlock__options_validate(o);
  if (rc != 0)
    return rc;
  const char *uri = o->uri;
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
  atomic_init(&c->refs, 1);
  c->pid = (int)getpid();
  c->opts = *o;
  c->uri_text = strdup(uri);
  c->client_name = dup_or_null(o->client_name);
  c->opts.uri = c->uri_text;
  c->opts.client_name = c->client_name;
  if (c->uri_text == NULL || (o->client_name != NULL && !c->client_name)) {
    client_destroy(c);
    rlock__set_last_error("out of memory");
    return RLOCK_ENOMEM;
  }
  int sys = uv_mutex_init(&c->queue_mutex);
  if (sys != 0) {
    rlock__free_secret(c->uri_text);
    free(c->client_name);
    free(c);
    rlock__set_last_error("uv_mutex_init failed: %s", uv_strerror(sys));
    return RLOCK_ESYS;
  }
  sys = uv_sem_init(&c->open_sem, 0);
  if (sys != 0) {
    uv_mutex_destroy(&c->queue_mutex);
    rlock__free_secret(c->uri_text);
    free(c->client_name);
    free(c);
    rlock__set_last_error("uv_sem_init failed: %s", uv_strerror(sys));
    return RLOCK_ESYS;
  }
  rc = rlock__uri_parse(c->uri_text, &c->uri); /* sets the last error */
  if (rc == 0 && (rlock__uuid4(c->id) != 0 ||
                  rlock__random_bytes(c->latch_seed,
                                      sizeof(c->latch_seed)) != 0)) {
    /* Keeps random.c's detail (libuv's error text). */
    rlock__set_last_error("no random source for the client id: %s",
                          rlock_last_error());
    rc = RLOCK_ESYS;
  }
  if (rc != 0) {
    client_destroy(c);
    return rc;
  }
  rlock__map_init(&c->subs);
  rlock__map_init(&c->holds);
  rlock__map_init(&c->suspects);
  c->cmd.client = c;
  c->sub.client = c;
  c->sub.is_sub = true;
  c->open_pending = 2;

  rc = rlock__loop_start(c);
  if (rc != 0) {
    client_destroy(c);
    rlock__set_last_error("cannot start the loop thread");
    return rc;
  }
  uv_sem_wait(&c->open_sem);
  if (c->open_result != 0) {
    rc = c->open_result;
    char detail[sizeof(c->open_detail)];
    memcpy(detail, c->open_detail, sizeof(detail));
    rlock_client_close(c);
    rlock__set_last_error("%s", detail);
    return rc;
  }
  rlock__clear_last_error();
  *client = c;
  return 0;
}

void rlock_client_close(rlock_client *c) {
  if (c == NULL)
    return;
  if (rlock__fork_check(c) != 0) {
    /* A forked child's copy: its loop thread is the parent's, and the
     * sockets and the loop's descriptors are shared with the parent, so
     * nothing is touched (the copy's memory is left to the child's exit or
     * exec). */
    return;
  }
  uv_mutex_lock(&c->queue_mutex);
  c->closed = true;
  uv_async_send(&c->wakeup);
  uv_mutex_unlock(&c->queue_mutex);
  if (rlock__on_loop_thread(c)) {
    /* Closed from a callback: the loop winds down after this callback
     * returns; the thread cleans up after itself. */
    pthread_detach(c->thread);
  } else {
    uv_thread_join(&c->thread);
  }
  rlock__client_release(c);
}

const char *rlock_client_id(const rlock_client *c) {
  return c != NULL ? c->id : "";
}

int rlock_get(rlock_client *c, const char *name, rlock **out) {
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
  int forked = rlock__fork_check(c);
  if (forked != 0) {
    rlock__set_last_error("%s", rlock__submit_error(forked));
    return forked;
  }
  uv_mutex_lock(&c->queue_mutex);
  bool closed = c->closed;
  uv_mutex_unlock(&c->queue_mutex);
  if (closed) {
    rlock__set_last_error("client is closed");
    return RLOCK_ECLOSED;
  }
  rlock *lock = calloc(1, sizeof(*lock));
  if (lock == NULL)
    goto nomem;
  lock->name = strdup(name);
  lock->name_len = len;
  /* PROTOCOL.md brace rule: derived names use {name}, unless the name
   * already contains '{' (then the bare name), so they share its slot. */
  bool has_brace = memchr(name, '{', len) != NULL;
  lock->braced_len = has_brace ? len : len + 2;
  lock->braced = malloc(lock->braced_len + 1);
  lock->channel_len = 23 + lock->braced_len;
  lock->channel = malloc(lock->channel_len + 1);
  if (lock->name == NULL || lock->braced == NULL || lock->channel == NULL)
    goto nomem;
  if (has_brace)
    memcpy(lock->braced, name, len + 1);
  else
    snprintf(lock->braced, lock->braced_len + 1, "{%s}", name);
  snprintf(lock->channel, lock->channel_len + 1, "redisson_lock__channel:%s",
           lock->braced);
  lock->client = c;
  atomic_init(&lock->refs, 1);
  atomic_fetch_add(&c->refs, 1);
  rlock__clear_last_error();
  *out = lock;
  return 0;
nomem:
  if (lock != NULL) {
    free(lock->name);
    free(lock->braced);
    free(lock->channel);
    free(lock);
  }
  rlock__set_last_error("out of memory");
  return RLOCK_ENOMEM;
}

const char *rlock_name(const rlock *lock) {
  return lock != NULL ? lock->name : NULL;
}
