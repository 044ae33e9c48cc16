/* Attaches a hiredis async context to a libuv loop.
 *
 * Written here rather than taken from <adapters/libuv.h> for two reasons:
 * - hiredis 0.14's adapter (Debian 12) drops poll events that carry an error
 *   status: a refused connect never reaches hiredis and the connection hangs
 *   instead of failing. Here an error status is handed to hiredis as the
 *   events it waited for, so it sees the socket error at once (hiredis 1.x's
 *   adapter does the same).
 * - Speed. hiredis calls the add/del hooks several times per command; the
 *   stock adapter restarts the poll watcher each time (in libuv that is an
 *   epoll_ctl pair), and it waits for a writable event before every write.
 *   Here unchanged masks cost nothing, and once connected, output is flushed
 *   once per loop turn from a uv_prepare handle - every command queued during
 *   that turn, from every thread, leaves in one write(). Only a full socket
 *   buffer makes it wait for writability. */
#include <stdbool.h>
#include <stdlib.h>

#include "uv_adapter.h"

typedef struct uv_io {
  redisAsyncContext *ac; /* NULL once hiredis let go of the context */
  uv_poll_t poll;
  uv_prepare_t flush;
  int events;           /* what the poll watcher is started with */
  bool want_write;      /* hiredis has output waiting */
  bool flushing;        /* inside flush_cb's write */
  int open_handles;
  void (*read_hook)(redisAsyncContext *ac);
} uv_io;

static void set_events(uv_io *io, int events);

static void poll_cb(uv_poll_t *handle, int status, int events) {
  uv_io *io = handle->data;
  int ready = status < 0 ? io->events : events;
  if (status < 0) {
    /* On an error event libuv has already stopped this watcher itself. If
     * hiredis now reads data that was still buffered rather than the error,
     * the watcher must be started again, or nothing would ever read this
     * socket (and see the error) again: a dead connection taken for live. */
    io->events = 0;
  }
  if (io->ac != NULL && (ready & UV_READABLE)) {
    if (io->read_hook == NULL) {
      redisAsyncHandleRead(io->ac);
    } else {
      /* hiredis's read handler would complete a pending connect and then
       * dispatch the replies already there through its callback queue,
       * which rlock leaves empty: its assert on a reply without a callback
       * would abort the process. Its write handler completes the connect
       * (and sends what is buffered) without reading. */
      if (!(io->ac->c.flags & REDIS_CONNECTED))
        redisAsyncHandleWrite(io->ac);
      if (io->ac != NULL && (io->ac->c.flags & REDIS_CONNECTED))
        io->read_hook(io->ac);
    }
  }
  /* reading may have freed the context (cleanup cleared io->ac) */
  if (io->ac != NULL && (ready & UV_WRITABLE))
    redisAsyncHandleWrite(io->ac);
  if (status < 0 && io->ac != NULL && io->events == 0)
    set_events(io, ready | UV_READABLE);
}

static void set_events(uv_io *io, int events) {
  if (events == io->events)
    return;
  io->events = events;
  if (events != 0)
    uv_poll_start(&io->poll, events, poll_cb);
  else
    uv_poll_stop(&io->poll);
}

static void flush_cb(uv_prepare_t *prep) {
  uv_io *io = prep->data;
  uv_prepare_stop(prep);
  if (io->ac == NULL || !io->want_write)
    return;
  io->flushing = true;
  redisAsyncHandleWrite(io->ac); /* may free the context */
  io->flushing = false;
}

static void add_read(void *p) {
  uv_io *io = p;
  set_events(io, io->events | UV_READABLE);
}

static void del_read(void *p) {
  uv_io *io = p;
  set_events(io, io->events & ~UV_READABLE);
}

static void add_write(void *p) {
  uv_io *io = p;
  io->want_write = true;
  bool connected = io->ac != NULL && (io->ac->c.flags & REDIS_CONNECTED);
  if (connected && !io->flushing && !(io->events & UV_WRITABLE)) {
    uv_prepare_start(&io->flush, flush_cb); /* write at the end of the turn */
    return;
  }
  /* Connecting (hiredis learns the outcome from writability), or the
   * socket buffer was full during a flush: wait for writability. */
  set_events(io, io->events | UV_WRITABLE);
}

static void del_write(void *p) {
  uv_io *io = p;
  io->want_write = false;
  set_events(io, io->events & ~UV_WRITABLE);
}

static void io_closed(uv_handle_t *handle) {
  uv_io *io = handle->data;
  if (--io->open_handles == 0)
    free(io);
}

static void cleanup(void *p) {
  uv_io *io = p;
  io->ac = NULL;
  uv_close((uv_handle_t *)&io->poll, io_closed);
  uv_close((uv_handle_t *)&io->flush, io_closed);
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
  uv_prepare_init(loop, &io->flush);
  io->open_handles = 2;
  io->ac = ac;
  io->poll.data = io;
  io->flush.data = io;
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
