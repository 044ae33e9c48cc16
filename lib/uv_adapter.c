/* Attaches a hiredis async context to a libuv loop.
 *
 * Written here rather than taken from <adapters/libuv.h> because hiredis
 * 0.14's adapter (Debian 12) drops poll events that carry an error status:
 * a refused connect then never reaches hiredis and the connection hangs
 * instead of failing. Here an error status is handed to hiredis as the
 * events it waited for, so it reads/writes, sees the socket error and fails
 * the connection at once (hiredis 1.x's adapter does the same). */
#include <stdlib.h>

#include "uv_adapter.h"

typedef struct uv_io {
  redisAsyncContext *ac; /* NULL once hiredis let go of the context */
  uv_poll_t poll;
  int events;
  void (*read_hook)(redisAsyncContext *ac);
} uv_io;

static void poll_cb(uv_poll_t *handle, int status, int events) {
  uv_io *io = handle->data;
  int ready = status < 0 ? io->events : events;
  if (io->ac != NULL && (ready & UV_READABLE)) {
    /* Until connected, hiredis completes the connect itself. */
    if (io->read_hook != NULL && (io->ac->c.flags & REDIS_CONNECTED))
      io->read_hook(io->ac);
    else
      redisAsyncHandleRead(io->ac);
  }
  /* reading may have freed the context (cleanup cleared io->ac) */
  if (io->ac != NULL && (ready & UV_WRITABLE))
    redisAsyncHandleWrite(io->ac);
}

static void update(uv_io *io, int add, int del) {
  io->events = (io->events | add) & ~del;
  if (io->events != 0)
    uv_poll_start(&io->poll, io->events, poll_cb);
  else
    uv_poll_stop(&io->poll);
}

static void add_read(void *p) { update(p, UV_READABLE, 0); }
static void del_read(void *p) { update(p, 0, UV_READABLE); }
static void add_write(void *p) { update(p, UV_WRITABLE, 0); }
static void del_write(void *p) { update(p, 0, UV_WRITABLE); }

static void io_free(uv_handle_t *handle) { free(handle->data); }

static void cleanup(void *p) {
  uv_io *io = p;
  io->ac = NULL;
  uv_close((uv_handle_t *)&io->poll, io_free);
}

int rlock__uv_attach(redisAsyncContext *ac, uv_loop_t *loop) {
  if (ac->ev.data != NULL)
    return REDIS_ERR;
  uv_io *io = calloc(1, sizeof(*io));
  if (io == NULL)
    return REDIS_ERR;
  if (uv_poll_init(loop, &io->poll, ac->c.fd) != 0) {
    free(io);
    return REDIS_ERR;
  }
  io->ac = ac;
  io->poll.data = io;
  ac->ev.data = io;
  ac->ev.addRead = add_read;
  ac->ev.delRead = del_read;
  ac->ev.addWrite = add_write;
  ac->ev.delWrite = del_write;
  ac->ev.cleanup = cleanup;
  return REDIS_OK;
}

void rlock__uv_set_read_hook(redisAsyncContext *ac,
                             void (*hook)(redisAsyncContext *ac)) {
  uv_io *io = ac->ev.data;
  io->read_hook = hook;
}
