/*
 * rlock._rlock: the C extension module of the Python package rlock.
 *
 * Written against the public header rlock.h only. A thin layer: times are
 * integer milliseconds and owners integers here; rlock/__init__.py turns
 * them into float seconds, context managers, asyncio and exceptions.
 *
 * Threads: no Python code ever runs on the library's loop thread. Every
 * callback the library makes (events, diagnostics, lock lost, the
 * completion of an async call) copies what it carries into a queue_t and
 * wakes the queue's eventfd, without the GIL; Python reads the queue from
 * its own thread (a dispatcher thread for events, the asyncio loop's
 * add_reader for completions, the calling thread for interruptible waits).
 * Blocking calls release the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rlock.h"

/* ---- errors -------------------------------------------------------------- */

/* code -> exception class, and the base class (set by rlock/__init__.py). */
static PyObject *err_classes; /* dict int -> type */
static PyObject *err_base;
static unsigned long main_thread_ident;

/* The exception instance for `code` with `detail`: cls(code, name, detail). */
static PyObject *make_error(int code, const char *detail) {
  PyObject *cls = NULL;
  if (err_classes != NULL) {
    PyObject *key = PyLong_FromLong(code);
    if (key == NULL)
      return NULL;
    cls = PyDict_GetItemWithError(err_classes, key);
    Py_DECREF(key);
    if (cls == NULL && PyErr_Occurred())
      return NULL;
  }
  if (cls == NULL)
    cls = err_base != NULL ? err_base : PyExc_RuntimeError;
  return PyObject_CallFunction(cls, "iss", code, rlock_err_name(code),
                               detail != NULL ? detail : "");
}

static void set_error_detail(int code, const char *detail) {
  PyObject *e = make_error(code, detail);
  if (e != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(e), e);
    Py_DECREF(e);
  }
}

/* Raises the error of the rlock call that just returned `code` on this
 * thread (rlock_last_error() is per thread). Returns NULL. */
static PyObject *set_error(int code) {
  set_error_detail(code, rlock_last_error());
  return NULL;
}

/* ---- queue: what the loop thread hands over ------------------------------ */

enum { IT_DONE = 1, IT_EVENT, IT_DIAG, IT_LOST, IT_END, IT_TERM, IT_STATE };

typedef struct item {
  struct item *next;
  int type;
  uint64_t token;
  int status;
  int64_t value;
  char *detail;
  char *ids; /* IT_DONE of permit acquires: nids x 33 bytes */
  int nids;
  /* events */
  int etype, attempts, cause, error, port, level;
  int64_t wait_ms, hold_ms, hold_count, remaining_ms, lease_ms;
  char *kind, *name, *owner, *host, *client_id, *client_name;
  /* elections (issue 38): the event's term; IT_TERM / IT_STATE */
  int64_t term;
  char *data; /* IT_STATE: the value (len bytes) */
  size_t len;
} item;

typedef struct queue_t {
  pthread_mutex_t mu;
  item *head, *tail;
  int fd;
  atomic_int refs;
} queue_t;

static queue_t *queue_new(void) {
  queue_t *q = calloc(1, sizeof(*q));
  if (q == NULL)
    return NULL;
  q->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (q->fd < 0) {
    free(q);
    return NULL;
  }
  pthread_mutex_init(&q->mu, NULL);
  atomic_init(&q->refs, 1);
  return q;
}

static void item_free(item *it) {
  free(it->detail);
  free(it->ids);
  free(it->kind);
  free(it->name);
  free(it->owner);
  free(it->host);
  free(it->client_id);
  free(it->client_name);
  free(it->data);
  free(it);
}

static void queue_unref(queue_t *q) {
  if (q == NULL || atomic_fetch_sub(&q->refs, 1) != 1)
    return;
  item *it = q->head;
  while (it != NULL) {
    item *next = it->next;
    item_free(it);
    it = next;
  }
  close(q->fd);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

static void queue_push(queue_t *q, item *it) {
  pthread_mutex_lock(&q->mu);
  if (q->tail != NULL)
    q->tail->next = it;
  else
    q->head = it;
  q->tail = it;
  pthread_mutex_unlock(&q->mu);
  uint64_t one = 1;
  ssize_t n = write(q->fd, &one, sizeof(one));
  (void)n; /* EAGAIN: the counter is already non-zero, readers wake */
}

/* Takes every item (oldest first); resets the eventfd first so that a push
 * after the take wakes the reader again. */
static item *queue_take(queue_t *q) {
  uint64_t v;
  ssize_t n = read(q->fd, &v, sizeof(v));
  (void)n;
  pthread_mutex_lock(&q->mu);
  item *it = q->head;
  q->head = q->tail = NULL;
  pthread_mutex_unlock(&q->mu);
  return it;
}

static char *dup_or_null(const char *s) {
  return s != NULL ? strdup(s) : NULL;
}

/* Waits (GIL released) until the queue's fd is readable or timeout_ms
 * passes (-1: no limit). 1 readable, 0 timed out or interrupted (EINTR). */
static int queue_poll(queue_t *q, int timeout_ms) {
  struct pollfd p = {.fd = q->fd, .events = POLLIN};
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = poll(&p, 1, timeout_ms);
  Py_END_ALLOW_THREADS
  return rc > 0;
}

/* ---- completions of async calls ---------------------------------------- */

typedef struct pend {
  queue_t *q;
  uint64_t token;
  char (*ids)[RLOCK_PERMIT_ID_LEN + 1]; /* permit acquires */
  int nids;
} pend;

static void on_done(int status, int64_t value, void *data) {
  pend *p = data;
  item *it = calloc(1, sizeof(*it));
  if (it != NULL) {
    it->type = IT_DONE;
    it->token = p->token;
    it->status = status;
    it->value = value;
    if (status < 0)
      it->detail = strdup(rlock_last_error());
    if (status == 1 && p->ids != NULL) {
      it->ids = malloc((size_t)p->nids * (RLOCK_PERMIT_ID_LEN + 1));
      if (it->ids != NULL) {
        memcpy(it->ids, p->ids, (size_t)p->nids * (RLOCK_PERMIT_ID_LEN + 1));
        it->nids = p->nids;
      }
    }
    queue_push(p->q, it);
  }
  queue_unref(p->q);
  free(p->ids);
  free(p);
}

static pend *pend_new(queue_t *q, uint64_t token, int nids) {
  pend *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return NULL;
  if (nids > 0) {
    p->ids = calloc((size_t)nids, RLOCK_PERMIT_ID_LEN + 1);
    if (p->ids == NULL) {
      free(p);
      return NULL;
    }
    p->nids = nids;
  }
  p->q = q;
  p->token = token;
  atomic_fetch_add(&q->refs, 1);
  return p;
}

/* The async call was refused: its callback never fires. */
static void pend_drop(pend *p) {
  queue_unref(p->q);
  free(p->ids);
  free(p);
}

static PyObject *ids_list(const char *ids, int nids) {
  PyObject *l = PyList_New(nids);
  if (l == NULL)
    return NULL;
  for (int i = 0; i < nids; i++) {
    PyObject *s = PyUnicode_FromString(ids + (size_t)i * (RLOCK_PERMIT_ID_LEN + 1));
    if (s == NULL) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, i, s);
  }
  return l;
}

static const char *event_type_name(int t) {
  switch (t) {
  case RLOCK_EVENT_ACQUIRED: return "acquired";
  case RLOCK_EVENT_RELEASED: return "released";
  case RLOCK_EVENT_GAVE_UP: return "gave_up";
  case RLOCK_EVENT_RENEWAL_FAILED: return "renewal_failed";
  case RLOCK_EVENT_LEASE_AT_RISK: return "lease_at_risk";
  case RLOCK_EVENT_LOST: return "lost";
  case RLOCK_EVENT_RECONNECTED: return "reconnected";
  case RLOCK_EVENT_DISCONNECTED: return "disconnected";
  case RLOCK_EVENT_STALE: return "stale";
  case RLOCK_EVENT_ELECTED: return "elected";
  case RLOCK_EVENT_TERM_ENDED: return "term_ended";
  default: return "unknown";
  }
}

static int dict_set_str(PyObject *d, const char *k, const char *v) {
  PyObject *o;
  if (v == NULL) {
    o = Py_None;
    Py_INCREF(o);
  } else {
    o = PyUnicode_DecodeUTF8(v, (Py_ssize_t)strlen(v), "surrogateescape");
    if (o == NULL)
      return -1;
  }
  int rc = PyDict_SetItemString(d, k, o);
  Py_DECREF(o);
  return rc;
}

static int dict_set_i64(PyObject *d, const char *k, long long v) {
  PyObject *o = PyLong_FromLongLong(v);
  if (o == NULL)
    return -1;
  int rc = PyDict_SetItemString(d, k, o);
  Py_DECREF(o);
  return rc;
}

static int dict_set_u64(PyObject *d, const char *k, unsigned long long v) {
  PyObject *o = PyLong_FromUnsignedLongLong(v);
  if (o == NULL)
    return -1;
  int rc = PyDict_SetItemString(d, k, o);
  Py_DECREF(o);
  return rc;
}

static PyObject *election_item_to_py(const item *it); /* elections */

/* An item as a Python object:
 *   IT_DONE  -> ("done", token, status, value, detail, ids or None)
 *   IT_EVENT -> ("event", dict)
 *   IT_DIAG  -> ("diag", level, message)
 *   IT_LOST  -> ("lost", name, owner)
 *   IT_END   -> ("end",) */
static PyObject *item_to_py(const item *it) {
  switch (it->type) {
  case IT_DONE: {
    PyObject *ids = it->ids != NULL ? ids_list(it->ids, it->nids) : Py_None;
    if (ids == NULL)
      return NULL;
    if (ids == Py_None)
      Py_INCREF(ids);
    PyObject *t = Py_BuildValue("(sKiLsN)", "done",
                                (unsigned long long)it->token, it->status,
                                (long long)it->value,
                                it->detail != NULL ? it->detail : "", ids);
    return t;
  }
  case IT_DIAG:
    return Py_BuildValue("(sis)", "diag", it->level,
                         it->detail != NULL ? it->detail : "");
  case IT_LOST:
    return Py_BuildValue("(sss)", "lost", it->name ? it->name : "",
                         it->owner ? it->owner : "");
  case IT_END:
    return Py_BuildValue("(s)", "end");
  case IT_TERM:
  case IT_STATE:
    return election_item_to_py(it);
  case IT_EVENT: {
    PyObject *d = PyDict_New();
    if (d == NULL)
      return NULL;
    if (dict_set_str(d, "type", event_type_name(it->etype)) < 0 ||
        dict_set_str(d, "kind", it->kind) < 0 ||
        dict_set_str(d, "name", it->name) < 0 ||
        dict_set_str(d, "owner", it->owner) < 0 ||
        dict_set_i64(d, "wait_ms", it->wait_ms) < 0 ||
        dict_set_i64(d, "attempts", it->attempts) < 0 ||
        dict_set_i64(d, "cause", it->cause) < 0 ||
        dict_set_str(d, "error", it->error != 0 ? rlock_err_name(it->error) : NULL) < 0 ||
        dict_set_i64(d, "hold_ms", it->hold_ms) < 0 ||
        dict_set_i64(d, "hold_count", it->hold_count) < 0 ||
        dict_set_i64(d, "remaining_ms", it->remaining_ms) < 0 ||
        dict_set_i64(d, "lease_ms", it->lease_ms) < 0 ||
        dict_set_str(d, "detail", it->detail) < 0 ||
        dict_set_str(d, "client_id", it->client_id) < 0 ||
        dict_set_str(d, "client_name", it->client_name) < 0 ||
        dict_set_str(d, "host", it->host) < 0 ||
        dict_set_i64(d, "port", it->port) < 0 ||
        dict_set_i64(d, "term", it->term) < 0) {
      Py_DECREF(d);
      return NULL;
    }
    return Py_BuildValue("(sN)", "event", d);
  }
  }
  Py_RETURN_NONE;
}

static PyObject *items_to_list(item *it) {
  PyObject *l = PyList_New(0);
  while (it != NULL) {
    item *next = it->next;
    if (l != NULL) {
      PyObject *o = item_to_py(it);
      if (o == NULL || PyList_Append(l, o) < 0) {
        Py_CLEAR(l);
      }
      Py_XDECREF(o);
    }
    item_free(it);
    it = next;
  }
  return l;
}

/* ---- Queue: the Python object over a queue_t ---------------------------- */

typedef struct {
  PyObject_HEAD
  queue_t *q;
} QueueObject;

static PyTypeObject Queue_Type;

static PyObject *Queue_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  if (!PyArg_ParseTuple(args, ":Queue") || (kw && PyDict_Size(kw))) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "Queue() takes no arguments");
    return NULL;
  }
  QueueObject *self = (QueueObject *)type->tp_alloc(type, 0);
  if (self == NULL)
    return NULL;
  self->q = queue_new();
  if (self->q == NULL) {
    Py_DECREF(self);
    return PyErr_SetFromErrno(PyExc_OSError);
  }
  return (PyObject *)self;
}

static void Queue_dealloc(QueueObject *self) {
  queue_unref(self->q);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Queue_fileno(QueueObject *self, PyObject *noargs) {
  return PyLong_FromLong(self->q->fd);
}

/* drain(): every item now (never blocks). */
static PyObject *Queue_drain(QueueObject *self, PyObject *noargs) {
  return items_to_list(queue_take(self->q));
}

/* wait(timeout_s=None): blocks (GIL released) until an item comes, then
 * returns them all; [] after the timeout. */
static PyObject *Queue_wait(QueueObject *self, PyObject *args) {
  double timeout = -1;
  if (!PyArg_ParseTuple(args, "|d:wait", &timeout))
    return NULL;
  int ms = timeout < 0 ? -1 : (int)(timeout * 1000);
  for (;;) {
    item *it = queue_take(self->q);
    if (it != NULL)
      return items_to_list(it);
    if (!queue_poll(self->q, ms)) {
      if (ms >= 0)
        return PyList_New(0);
      if (PyErr_CheckSignals() < 0)
        return NULL;
    }
  }
}

static PyMethodDef Queue_methods[] = {
    {"fileno", (PyCFunction)Queue_fileno, METH_NOARGS, "the eventfd"},
    {"drain", (PyCFunction)Queue_drain, METH_NOARGS, "take every item"},
    {"wait", (PyCFunction)Queue_wait, METH_VARARGS, "wait for items"},
    {NULL}};

static PyTypeObject Queue_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlock._rlock.Queue",
    .tp_basicsize = sizeof(QueueObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Queue_new,
    .tp_dealloc = (destructor)Queue_dealloc,
    .tp_methods = Queue_methods,
};

/* ---- loop-thread callbacks of a client (no GIL) -------------------------- */

static void cb_event(const rlock_event *ev, void *data) {
  item *it = calloc(1, sizeof(*it));
  if (it == NULL)
    return;
  it->type = IT_EVENT;
  it->etype = ev->type;
  it->kind = dup_or_null(ev->kind);
  it->name = dup_or_null(ev->name);
  it->owner = dup_or_null(ev->owner);
  it->wait_ms = ev->wait_ms;
  it->attempts = ev->attempts;
  it->cause = ev->cause;
  it->error = ev->error;
  it->hold_ms = ev->hold_ms;
  it->hold_count = ev->hold_count;
  if (RLOCK_EVENT_HAS(ev, lease_ms)) {
    it->remaining_ms = ev->remaining_ms;
    it->lease_ms = ev->lease_ms;
  }
  it->detail = dup_or_null(ev->detail);
  it->client_id = dup_or_null(ev->client_id);
  it->client_name = dup_or_null(ev->client_name);
  if (RLOCK_EVENT_HAS(ev, port)) {
    it->host = dup_or_null(ev->host);
    it->port = ev->port;
  }
  if (RLOCK_EVENT_HAS(ev, term))
    it->term = ev->term;
  queue_push(data, it);
}

static void cb_diag(rlock_client *c, rlock_diag_level level,
                    const char *message, void *data) {
  (void)c;
  item *it = calloc(1, sizeof(*it));
  if (it == NULL)
    return;
  it->type = IT_DIAG;
  it->level = (int)level;
  it->detail = dup_or_null(message);
  queue_push(data, it);
}

static void cb_lost(const char *name, const char *owner, void *data) {
  item *it = calloc(1, sizeof(*it));
  if (it == NULL)
    return;
  it->type = IT_LOST;
  it->name = dup_or_null(name);
  it->owner = dup_or_null(owner);
  queue_push(data, it);
}

/* ---- names -------------------------------------------------------------- */

/* A name argument: str (UTF-8) or bytes, not empty, no NUL. Returns a
 * new reference to a bytes object, or NULL with an exception. */
static PyObject *name_bytes(PyObject *name, const char *what) {
  PyObject *b;
  if (PyUnicode_Check(name)) {
    b = PyUnicode_AsEncodedString(name, "utf-8", "strict");
    if (b == NULL)
      return NULL;
  } else if (PyBytes_Check(name)) {
    b = name;
    Py_INCREF(b);
  } else {
    PyErr_Format(PyExc_TypeError, "%s must be str or bytes, not %.100s", what,
                 Py_TYPE(name)->tp_name);
    return NULL;
  }
  Py_ssize_t n = PyBytes_GET_SIZE(b);
  if (n == 0) {
    Py_DECREF(b);
    PyErr_Format(PyExc_ValueError, "%s must not be empty", what);
    return NULL;
  }
  if ((Py_ssize_t)strlen(PyBytes_AS_STRING(b)) != n) {
    Py_DECREF(b);
    PyErr_Format(PyExc_ValueError, "%s must not contain NUL bytes", what);
    return NULL;
  }
  return b;
}

/* An optional str option (None or str without NUL): *out points into the
 * returned bytes object (kept by the caller), or NULL for None. */
static int opt_str(PyObject *v, const char *key, const char **out,
                   PyObject *keep) {
  if (v == Py_None) {
    *out = NULL;
    return 0;
  }
  if (!PyUnicode_Check(v)) {
    PyErr_Format(PyExc_TypeError, "option %s must be str or None, not %.100s",
                 key, Py_TYPE(v)->tp_name);
    return -1;
  }
  Py_ssize_t n;
  const char *s = PyUnicode_AsUTF8AndSize(v, &n);
  if (s == NULL)
    return -1;
  if ((Py_ssize_t)strlen(s) != n) {
    PyErr_Format(PyExc_ValueError, "option %s must not contain NUL", key);
    return -1;
  }
  if (PyList_Append(keep, v) < 0)
    return -1;
  *out = s;
  return 0;
}

static int opt_int(PyObject *v, const char *key, long long *out) {
  if (!PyLong_Check(v) || PyBool_Check(v)) {
    if (PyBool_Check(v)) {
      *out = v == Py_True;
      return 0;
    }
    PyErr_Format(PyExc_TypeError, "option %s must be an int, not %.100s", key,
                 Py_TYPE(v)->tp_name);
    return -1;
  }
  int overflow = 0;
  *out = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow || (*out == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "option %s is out of range", key);
    return -1;
  }
  return 0;
}

/* ---- Client ------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  rlock_client *c;
  queue_t *events; /* on_event / on_diag / on_lock_lost go here */
  int closed;
} ClientObject;

static PyTypeObject Client_Type;

#define INT_OPTS(X)                                                           \
  X(watchdog_timeout_ms) X(command_timeout_ms) X(subscribe_timeout_ms)        \
  X(retry_attempts) X(retry_interval_ms) X(sharded_pubsub)                    \
  X(connect_timeout_ms) X(max_write_queue_bytes) X(tls_insecure) X(spin_us)   \
  X(handoff_max) X(replica_sync) X(replica_sync_timeout_ms)                   \
  X(cluster_refresh_ms) X(replica_sync_connected_only) X(replica_sync_mode)   \
  X(lease_risk_ms) X(fenced_token_ttl_ms)
#define STR_OPTS(X)                                                           \
  X(uri) X(client_name) X(tls_ca_file) X(tls_ca_dir) X(tls_cert_file)         \
  X(tls_key_file) X(tls_server_name) X(sentinel_user) X(sentinel_password)

/* default_options(): the C library's defaults, as a dict. */
static PyObject *mod_default_options(PyObject *m, PyObject *noargs) {
  rlock_options o;
  rlock_options_init(&o);
  PyObject *d = PyDict_New();
  if (d == NULL)
    return NULL;
#define X(f)                                                                  \
  if (dict_set_i64(d, #f, (long long)o.f) < 0)                                \
    goto fail;
  INT_OPTS(X)
#undef X
#define X(f)                                                                  \
  if (dict_set_str(d, #f, o.f) < 0)                                           \
    goto fail;
  STR_OPTS(X)
#undef X
  return d;
fail:
  Py_DECREF(d);
  return NULL;
}

/* Client(options: dict, events: bool). options keys as rlock_options'
 * fields (times in ms); unknown keys are a TypeError. events: route
 * events, diagnostics and lock-lost calls to the client's queue. */
static int Client_init(ClientObject *self, PyObject *args, PyObject *kw) {
  PyObject *opts;
  int diag = 0, events = 0, lost = 0;
  static char *kwlist[] = {"options", "diag", "events", "lost", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|ppp:Client", kwlist,
                                   &PyDict_Type, &opts, &diag, &events, &lost))
    return -1;
  if (self->c != NULL || self->closed) {
    PyErr_SetString(PyExc_RuntimeError, "Client already initialised");
    return -1;
  }
  rlock_options o;
  rlock_options_init(&o);
  PyObject *keep = PyList_New(0);
  if (keep == NULL)
    return -1;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(opts, &pos, &k, &v)) {
    const char *key = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    if (key == NULL) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "option names must be str");
      goto fail;
    }
    long long n;
#define X(f)                                                                  \
  if (strcmp(key, #f) == 0) {                                                 \
    if (opt_int(v, key, &n) < 0)                                              \
      goto fail;                                                              \
    if ((sizeof(o.f) == sizeof(int)) && (n < INT32_MIN || n > INT32_MAX)) {   \
      PyErr_Format(PyExc_ValueError, "option %s is out of range", key);       \
      goto fail;                                                              \
    }                                                                         \
    o.f = n;                                                                  \
    continue;                                                                 \
  }
    INT_OPTS(X)
#undef X
#define X(f)                                                                  \
  if (strcmp(key, #f) == 0) {                                                 \
    if (opt_str(v, key, &o.f, keep) < 0)                                      \
      goto fail;                                                              \
    continue;                                                                 \
  }
    STR_OPTS(X)
#undef X
    PyErr_Format(PyExc_TypeError, "unknown option %R", k);
    goto fail;
  }
  if (diag || events || lost) {
    self->events = queue_new();
    if (self->events == NULL) {
      PyErr_SetFromErrno(PyExc_OSError);
      goto fail;
    }
    if (diag) {
      o.on_diag = cb_diag;
      o.on_diag_data = self->events;
    }
    if (events) {
      o.on_event = cb_event;
      o.on_event_data = self->events;
    }
    if (lost) {
      o.on_lock_lost = cb_lost;
      o.on_lock_lost_data = self->events;
    }
  }
  int rc;
  rlock_client *c = NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_client_new(&c, &o);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    set_error(rc);
    goto fail;
  }
  self->c = c;
  Py_DECREF(keep);
  return 0;
fail:
  Py_DECREF(keep);
  return -1;
}

static void client_close(ClientObject *self) {
  if (self->c != NULL) {
    rlock_client *c = self->c;
    self->c = NULL;
    self->closed = 1;
    Py_BEGIN_ALLOW_THREADS
    rlock_client_free(c);
    Py_END_ALLOW_THREADS
    if (self->events != NULL) {
      item *it = calloc(1, sizeof(*it));
      if (it != NULL) {
        it->type = IT_END;
        queue_push(self->events, it);
      }
    }
  }
}

static void Client_dealloc(ClientObject *self) {
  /* the client's memory lives on until its lock handles are freed */
  client_close(self);
  queue_unref(self->events);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Client_new(PyTypeObject *type, PyObject *a, PyObject *k) {
  return type->tp_alloc(type, 0);
}

static int client_ok(ClientObject *self) {
  if (self->c == NULL) {
    set_error_detail(RLOCK_ECLOSED, "the client is closed");
    return 0;
  }
  return 1;
}

static PyObject *Client_close(ClientObject *self, PyObject *noargs) {
  client_close(self);
  Py_RETURN_NONE;
}

static PyObject *Client_events_wait(ClientObject *self, PyObject *args) {
  double timeout = -1;
  if (!PyArg_ParseTuple(args, "|d:events_wait", &timeout))
    return NULL;
  if (self->events == NULL)
    return PyList_New(0);
  int ms = timeout < 0 ? -1 : (int)(timeout * 1000);
  item *it = queue_take(self->events);
  if (it == NULL) {
    queue_poll(self->events, ms);
    it = queue_take(self->events);
  }
  return items_to_list(it);
}

static PyObject *Client_get_id(ClientObject *self, void *closure) {
  if (!client_ok(self))
    return NULL;
  return PyUnicode_FromString(rlock_client_id(self->c));
}

static PyObject *Client_get_closed(ClientObject *self, void *closure) {
  return PyBool_FromLong(self->c == NULL);
}

static int put_hist(PyObject *d, const char *key, const rlock_histogram *h) {
  PyObject *hd = PyDict_New();
  if (hd == NULL)
    return -1;
  PyObject *b = PyList_New(RLOCK_STATS_BUCKETS);
  if (b == NULL) {
    Py_DECREF(hd);
    return -1;
  }
  for (int i = 0; i < RLOCK_STATS_BUCKETS; i++)
    PyList_SET_ITEM(b, i, PyLong_FromUnsignedLongLong(h->buckets[i]));
  int rc = dict_set_u64(hd, "count", h->count) < 0 ||
                   dict_set_u64(hd, "sum_ms", h->sum_ms) < 0 ||
                   dict_set_u64(hd, "max_ms", h->max_ms) < 0 ||
                   PyDict_SetItemString(hd, "buckets", b) < 0 ||
                   PyDict_SetItemString(d, key, hd) < 0
               ? -1
               : 0;
  Py_DECREF(b);
  Py_DECREF(hd);
  return rc;
}

static PyObject *Client_stats(ClientObject *self, PyObject *noargs) {
  if (!client_ok(self))
    return NULL;
  rlock_stats s;
  rlock_stats_init(&s);
  int rc = rlock_client_stats(self->c, &s);
  if (rc < 0)
    return set_error(rc);
  PyObject *d = PyDict_New();
  if (d == NULL)
    return NULL;
#define U(f)                                                                  \
  if (dict_set_u64(d, #f, s.f) < 0)                                           \
    goto fail;
  U(acquisitions) U(acquisitions_contended) U(gave_up_timeout)
  U(gave_up_canceled) U(releases) U(renewals_sent) U(renewals_confirmed)
  U(renewals_failed) U(renewal_rtt_count) U(renewal_rtt_sum_us)
  U(renewal_rtt_max_us) U(locks_lost) U(reconnects) U(resubscribes)
  U(commands_sent) U(replica_sync_ok) U(replica_sync_unconfirmed)
  U(lease_at_risk) U(terms_won) U(terms_lost) U(terms_resigned)
#undef U
  if (s.lease_headroom_min_ms == INT64_MAX) {
    if (PyDict_SetItemString(d, "lease_headroom_min_ms", Py_None) < 0)
      goto fail;
  } else if (dict_set_i64(d, "lease_headroom_min_ms",
                          s.lease_headroom_min_ms) < 0)
    goto fail;
  {
    PyObject *f = PyDict_New();
    if (f == NULL)
      goto fail;
    for (int i = 0; i < RLOCK_STATS_ERRORS; i++) {
      if (s.failures[i] == 0)
        continue;
      const char *name = i == 0 ? "other" : rlock_err_name(-i);
      if (dict_set_u64(f, name, s.failures[i]) < 0) {
        Py_DECREF(f);
        goto fail;
      }
    }
    int rc2 = PyDict_SetItemString(d, "failures", f);
    Py_DECREF(f);
    if (rc2 < 0)
      goto fail;
  }
  if (put_hist(d, "wait", &s.wait) < 0 || put_hist(d, "hold", &s.hold) < 0)
    goto fail;
  return d;
fail:
  Py_DECREF(d);
  return NULL;
}

static PyObject *Client_stats_text(ClientObject *self, PyObject *args) {
  const char *label = NULL;
  int json = 0;
  if (!PyArg_ParseTuple(args, "zp:stats_text", &label, &json))
    return NULL;
  if (!client_ok(self))
    return NULL;
  rlock_stats s;
  rlock_stats_init(&s);
  int rc = rlock_client_stats(self->c, &s);
  if (rc < 0)
    return set_error(rc);
  size_t len = 16384;
  for (;;) {
    char *buf = malloc(len);
    if (buf == NULL)
      return PyErr_NoMemory();
    rc = json ? rlock_stats_format_json(&s, buf, len, label)
              : rlock_stats_format_prometheus(&s, buf, len, label);
    if (rc < 0) {
      free(buf);
      return set_error(rc);
    }
    if ((size_t)rc < len) {
      PyObject *r = PyUnicode_DecodeUTF8(buf, rc, "replace");
      free(buf);
      return r;
    }
    free(buf);
    len = (size_t)rc + 1;
  }
}

static PyObject *entries(const rlock_info_entry *e, size_t n, int holders) {
  PyObject *l = PyList_New((Py_ssize_t)n);
  if (l == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    PyObject *d = PyDict_New();
    if (d == NULL) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, (Py_ssize_t)i, d);
    PyObject *key = PyUnicode_DecodeUTF8(e[i].key, (Py_ssize_t)e[i].key_len,
                                         "surrogateescape");
    if (key == NULL || PyDict_SetItemString(d, "key", key) < 0) {
      Py_XDECREF(key);
      Py_DECREF(l);
      return NULL;
    }
    Py_DECREF(key);
    int bad = 0;
    if (holders) {
      bad |= dict_set_i64(d, "count", e[i].count == RLOCK_INFO_NOT_A_COUNT
                                          ? -1
                                          : e[i].count) < 0;
      bad |= PyDict_SetItemString(d, "writer", e[i].writer ? Py_True : Py_False) < 0;
    } else if (e[i].ttl_ms == RLOCK_INFO_NO_EXPIRY) {
      bad |= PyDict_SetItemString(d, "ttl_ms", Py_None) < 0;
    } else {
      bad |= dict_set_i64(d, "ttl_ms", e[i].ttl_ms) < 0;
    }
    if (bad) {
      Py_DECREF(l);
      return NULL;
    }
  }
  return l;
}

static const char *info_kind_name(int k) {
  static const char *names[] = {"none", "lock", "fair", "rwlock", "fenced",
                                "count", "permit_semaphore", "foreign",
                                "fast_multilock"};
  return k >= 0 && k <= 8 ? names[k] : "unknown";
}

static PyObject *Client_info(ClientObject *self, PyObject *arg) {
  if (!client_ok(self))
    return NULL;
  PyObject *nb = name_bytes(arg, "name");
  if (nb == NULL)
    return NULL;
  rlock_info info;
  rlock_info_init(&info);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_client_info(self->c, PyBytes_AS_STRING(nb), &info);
  Py_END_ALLOW_THREADS
  Py_DECREF(nb);
  if (rc < 0)
    return set_error(rc);
  PyObject *d = PyDict_New();
  PyObject *h = NULL, *q = NULL, *p = NULL;
  if (d == NULL)
    goto fail;
  h = entries(info.holders, info.holders_n, 1);
  q = entries(info.queue, info.queue_n, 0);
  p = entries(info.permits, info.permits_n, 0);
  if (h == NULL || q == NULL || p == NULL ||
      dict_set_str(d, "kind", info_kind_name(info.kind)) < 0 ||
      dict_set_str(d, "type", info.type) < 0 ||
      PyDict_SetItemString(d, "locked", info.locked ? Py_True : Py_False) < 0 ||
      dict_set_i64(d, "ttl_ms", info.ttl_ms) < 0 ||
      dict_set_i64(d, "waiters", info.waiters) < 0 ||
      dict_set_str(d, "mode", info.mode) < 0 ||
      PyDict_SetItemString(d, "holders", h) < 0 ||
      dict_set_i64(d, "holders_total", (long long)info.holders_total) < 0 ||
      PyDict_SetItemString(d, "queue", q) < 0 ||
      dict_set_i64(d, "queue_total", (long long)info.queue_total) < 0 ||
      PyDict_SetItemString(d, "permits", p) < 0 ||
      dict_set_i64(d, "permits_total", (long long)info.permits_total) < 0 ||
      dict_set_i64(d, "token", info.token) < 0 ||
      dict_set_i64(d, "count", info.count) < 0 ||
      dict_set_i64(d, "server_ms", info.server_ms) < 0)
    goto fail;
  Py_DECREF(h);
  Py_DECREF(q);
  Py_DECREF(p);
  rlock_info_free(&info);
  return d;
fail:
  Py_XDECREF(h);
  Py_XDECREF(q);
  Py_XDECREF(p);
  Py_XDECREF(d);
  rlock_info_free(&info);
  return NULL;
}

/* scan(pattern or None, count) -> list of names */
static PyObject *Client_scan(ClientObject *self, PyObject *args) {
  PyObject *pat = Py_None;
  int count = 0;
  if (!PyArg_ParseTuple(args, "|Oi:scan", &pat, &count))
    return NULL;
  if (!client_ok(self))
    return NULL;
  PyObject *pb = NULL;
  rlock_scan_options so;
  rlock_scan_options_init(&so);
  so.count = count;
  if (pat != Py_None) {
    pb = name_bytes(pat, "pattern");
    if (pb == NULL)
      return NULL;
    so.pattern = PyBytes_AS_STRING(pb);
  }
  rlock_scan *sc = NULL;
  int rc = rlock_scan_new(self->c, &so, &sc);
  if (rc < 0) {
    Py_XDECREF(pb);
    return set_error(rc);
  }
  PyObject *l = PyList_New(0);
  while (l != NULL) {
    const char *name;
    size_t len;
    Py_BEGIN_ALLOW_THREADS
    rc = rlock_scan_next(sc, &name, &len);
    Py_END_ALLOW_THREADS
    if (rc <= 0)
      break;
    PyObject *s = PyUnicode_DecodeUTF8(name, (Py_ssize_t)len, "surrogateescape");
    if (s == NULL || PyList_Append(l, s) < 0)
      Py_CLEAR(l);
    Py_XDECREF(s);
  }
  if (l != NULL && rc < 0) {
    Py_CLEAR(l);
    set_error(rc);
  }
  rlock_scan_free(sc);
  Py_XDECREF(pb);
  return l;
}

static PyObject *Client_interrupt(ClientObject *self, PyObject *arg) {
  if (!client_ok(self))
    return NULL;
  unsigned long long owner = PyLong_AsUnsignedLongLong(arg);
  if (owner == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  int rc = rlock_client_interrupt(self->c, owner);
  if (rc < 0)
    return set_error(rc);
  return PyLong_FromLong(rc);
}

static PyObject *Client_force_unlock(ClientObject *self, PyObject *args) {
  PyObject *name;
  const char *kind = NULL;
  if (!PyArg_ParseTuple(args, "O|z:force_unlock", &name, &kind))
    return NULL;
  if (!client_ok(self))
    return NULL;
  PyObject *nb = name_bytes(name, "name");
  if (nb == NULL)
    return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_client_force_unlock(self->c, PyBytes_AS_STRING(nb), kind, NULL);
  Py_END_ALLOW_THREADS
  Py_DECREF(nb);
  if (rc < 0)
    return set_error(rc);
  return PyBool_FromLong(rc);
}

static PyObject *Client_caps(ClientObject *self, PyObject *noargs) {
  if (!client_ok(self))
    return NULL;
  rlock_client_caps caps;
  rlock_client_caps_init(&caps);
  int rc = rlock_client_capabilities(self->c, &caps);
  if (rc < 0)
    return set_error(rc);
  return Py_BuildValue("{s:O,s:s}", "replica_sync_off",
                       caps.replica_sync_off ? Py_True : Py_False,
                       "replica_sync_note", caps.replica_sync_note);
}

/* ---- handles ------------------------------------------------------------ */

enum { H_LOCK = 1, H_SEM, H_PSEM, H_LATCH, H_MULTI, H_FAST };

typedef struct {
  PyObject_HEAD
  int htype;
  void *h;
  PyObject *client; /* ClientObject, kept alive */
  PyObject *members; /* MultiLock: the member Handles */
  int fenced;
} HandleObject;

static PyTypeObject Handle_Type;

static void Handle_dealloc(HandleObject *self) {
  if (self->h != NULL) {
    switch (self->htype) {
    case H_LOCK: rlock_free(self->h); break;
    case H_SEM: rlock_semaphore_free(self->h); break;
    case H_PSEM: rlock_permit_semaphore_free(self->h); break;
    case H_LATCH:
      rlock_latch_free(self->h);
      break;
    case H_FAST:
      rlock_free(self->h);
      break;
    case H_MULTI: /* an rlock * too */
      rlock_free(self->h);
      break;
    }
  }
  Py_XDECREF(self->client);
  Py_XDECREF(self->members);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* client.handle(kind, name) */
static PyObject *Client_handle(ClientObject *self, PyObject *args) {
  const char *kind;
  PyObject *name;
  if (!PyArg_ParseTuple(args, "sO:handle", &kind, &name))
    return NULL;
  PyObject *nb = name_bytes(name, "name");
  if (nb == NULL)
    return NULL;
  if (!client_ok(self)) {
    Py_DECREF(nb);
    return NULL;
  }
  const char *n = PyBytes_AS_STRING(nb);
  void *h = NULL;
  int ht = H_LOCK, rc, fenced = 0;
  if (strcmp(kind, "lock") == 0)
    rc = rlock_new(self->c, n, (rlock **)&h);
  else if (strcmp(kind, "fair") == 0)
    rc = rlock_new_fair(self->c, n, (rlock **)&h);
  else if (strcmp(kind, "read") == 0)
    rc = rlock_new_read(self->c, n, (rlock **)&h);
  else if (strcmp(kind, "write") == 0)
    rc = rlock_new_write(self->c, n, (rlock **)&h);
  else if (strcmp(kind, "fenced") == 0)
    rc = rlock_new_fenced(self->c, n, (rlock **)&h), fenced = 1;
  else if (strcmp(kind, "spin") == 0)
    rc = rlock_new_spin(self->c, n, (rlock **)&h);
  else if (strcmp(kind, "nonreentrant") == 0)
    rc = rlock_new_nonreentrant(self->c, n, (rlock **)&h);
  else if (strcmp(kind, "nonreentrant_fair") == 0)
    rc = rlock_new_nonreentrant_fair(self->c, n, (rlock **)&h);
  else if (strcmp(kind, "semaphore") == 0)
    rc = rlock_semaphore_new(self->c, n, (rlock_semaphore **)&h), ht = H_SEM;
  else if (strcmp(kind, "permit_semaphore") == 0)
    rc = rlock_permit_semaphore_new(self->c, n, (rlock_permit_semaphore **)&h),
    ht = H_PSEM;
  else if (strcmp(kind, "latch") == 0)
    rc = rlock_latch_new(self->c, n, (rlock_latch **)&h), ht = H_LATCH;
  else {
    Py_DECREF(nb);
    PyErr_Format(PyExc_ValueError, "unknown kind %R", PyTuple_GET_ITEM(args, 0));
    return NULL;
  }
  Py_DECREF(nb);
  if (rc < 0)
    return set_error(rc);
  HandleObject *o = PyObject_New(HandleObject, &Handle_Type);
  if (o == NULL) {
    switch (ht) {
    case H_LOCK: rlock_free(h); break;
    case H_SEM: rlock_semaphore_free(h); break;
    case H_PSEM: rlock_permit_semaphore_free(h); break;
    case H_LATCH: rlock_latch_free(h); break;
    }
    return NULL;
  }
  o->htype = ht;
  o->h = h;
  o->fenced = fenced;
  o->members = NULL;
  Py_INCREF(self);
  o->client = (PyObject *)self;
  return (PyObject *)o;
}

/* multilock(handles); redlock(handles): a majority of independent
 * servers (rlock_new_redlock) */
static PyObject *make_multilock(PyObject *arg, int red) {
  PyObject *seq = PySequence_Tuple(arg);
  if (seq == NULL)
    return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  if (n == 0) {
    Py_DECREF(seq);
    PyErr_SetString(PyExc_ValueError, "a MultiLock needs at least one lock");
    return NULL;
  }
  rlock **mem = calloc((size_t)n, sizeof(*mem));
  if (mem == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PyTuple_GET_ITEM(seq, i);
    if (!PyObject_TypeCheck(o, &Handle_Type) ||
        ((HandleObject *)o)->htype != H_LOCK) {
      free(mem);
      Py_DECREF(seq);
      PyErr_Format(PyExc_TypeError,
                   "MultiLock members must be locks, not %.100s",
                   Py_TYPE(o)->tp_name);
      return NULL;
    }
    mem[i] = ((HandleObject *)o)->h;
  }
  rlock *ml = NULL;
  int rc = red ? rlock_new_redlock(mem, (size_t)n, &ml)
               : rlock_new_multilock(mem, (size_t)n, &ml);
  free(mem);
  if (rc < 0) {
    Py_DECREF(seq);
    return set_error(rc);
  }
  HandleObject *o = PyObject_New(HandleObject, &Handle_Type);
  if (o == NULL) {
    rlock_free(ml);
    Py_DECREF(seq);
    return NULL;
  }
  o->htype = H_MULTI;
  o->h = ml;
  o->fenced = 0;
  o->client = ((HandleObject *)PyTuple_GET_ITEM(seq, 0))->client;
  Py_INCREF(o->client);
  o->members = seq;
  return (PyObject *)o;
}

static PyObject *mod_multilock(PyObject *m, PyObject *arg) {
  return make_multilock(arg, 0);
}

static PyObject *mod_redlock(PyObject *m, PyObject *arg) {
  return make_multilock(arg, 1);
}

/* client.fast_multilock(group, values): Redisson's getMultiLock(group,
 * values); values are str (UTF-8) or bytes (any bytes). */
static PyObject *Client_fast_multilock(ClientObject *self, PyObject *args) {
  PyObject *group, *values;
  if (!PyArg_ParseTuple(args, "OO:fast_multilock", &group, &values))
    return NULL;
  PyObject *gb = name_bytes(group, "group");
  if (gb == NULL)
    return NULL;
  PyObject *seq = PySequence_Tuple(values);
  if (seq == NULL) {
    Py_DECREF(gb);
    return NULL;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  PyObject *enc = PyList_New(0);
  const char **vals = calloc(n > 0 ? (size_t)n : 1, sizeof(*vals));
  size_t *lens = calloc(n > 0 ? (size_t)n : 1, sizeof(*lens));
  PyObject *result = NULL;
  if (enc == NULL || vals == NULL || lens == NULL) {
    PyErr_NoMemory();
    goto done;
  }
  if (n == 0) {
    PyErr_SetString(PyExc_ValueError, "a FasterMultiLock needs at least one value");
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *v = PyTuple_GET_ITEM(seq, i), *b;
    if (PyUnicode_Check(v))
      b = PyUnicode_AsEncodedString(v, "utf-8", "strict");
    else if (PyBytes_Check(v))
      b = Py_NewRef(v);
    else {
      PyErr_Format(PyExc_TypeError, "values must be str or bytes, not %.100s",
                   Py_TYPE(v)->tp_name);
      goto done;
    }
    if (b == NULL || PyList_Append(enc, b) < 0) {
      Py_XDECREF(b);
      goto done;
    }
    Py_DECREF(b);
    vals[i] = PyBytes_AS_STRING(b);
    lens[i] = (size_t)PyBytes_GET_SIZE(b);
  }
  if (!client_ok(self))
    goto done;
  rlock *fml = NULL;
  int rc = rlock_new_fast_multilock(self->c, PyBytes_AS_STRING(gb), vals, lens,
                                    (size_t)n, &fml);
  if (rc < 0) {
    set_error(rc);
    goto done;
  }
  HandleObject *o = PyObject_New(HandleObject, &Handle_Type);
  if (o == NULL) {
    rlock_free(fml);
    goto done;
  }
  o->htype = H_FAST;
  o->h = fml;
  o->fenced = 0;
  o->members = NULL;
  o->client = Py_NewRef((PyObject *)self);
  result = (PyObject *)o;
done:
  free(vals);
  free(lens);
  Py_XDECREF(enc);
  Py_DECREF(seq);
  Py_DECREF(gb);
  return result;
}

static int handle_is(HandleObject *self, int ht, const char *what) {
  if (self->htype != ht) {
    PyErr_Format(PyExc_TypeError, "%s is not available on this handle", what);
    return 0;
  }
  return 1;
}

static int parse_owner(PyObject *o, uint64_t *owner) {
  if (o == Py_None) {
    *owner = 0;
    return 0;
  }
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "owner must be an int, not %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "owner out of range");
    return -1;
  }
  *owner = v;
  return 0;
}

static int is_main_thread(void) {
  return PyThread_get_thread_ident() == main_thread_ident;
}

/* ---- Request: a pending async call ------------------------------------- */

typedef struct {
  PyObject_HEAD
  rlock_req *req;
} RequestObject;

static PyTypeObject Request_Type;

static void Request_dealloc(RequestObject *self) {
  rlock_req_free(self->req);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Request_cancel(RequestObject *self, PyObject *noargs) {
  int rc = rlock_req_cancel(self->req);
  if (rc < 0 && rc != RLOCK_ECLOSED)
    return set_error(rc);
  Py_RETURN_NONE;
}

static PyMethodDef Request_methods[] = {
    {"cancel", (PyCFunction)Request_cancel, METH_NOARGS, "cancel the wait"},
    {NULL}};

static PyTypeObject Request_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlock._rlock.Request",
    .tp_basicsize = sizeof(RequestObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Request_dealloc,
    .tp_methods = Request_methods,
};

/* Starts the async acquire of `self`: kind-specific. n = permits (SEM,
 * PSEM), wait/lease ms, owner (locks, multilock). */
static int start_acquire(HandleObject *self, pend *p, uint64_t owner,
                         int64_t n, int64_t wait_ms, int64_t lease_ms,
                         RequestObject *r) {
  switch (self->htype) {
  case H_LOCK:
  case H_MULTI: /* a MultiLock is an rlock * */
    return rlock_lock_async(self->h, owner, wait_ms, lease_ms, on_done, p,
                            &r->req);
  case H_SEM:
    return rlock_semaphore_acquire_async(self->h, n, wait_ms, on_done, p,
                                         &r->req);
  case H_PSEM:
    return rlock_permit_semaphore_acquire_n_async(self->h, n, wait_ms,
                                                  lease_ms, p->ids, on_done,
                                                  p, &r->req);
  case H_LATCH:
    return rlock_latch_await_async(self->h, wait_ms, on_done, p, &r->req);
  }
  return RLOCK_EINVAL;
}

/* acquire_async(queue, token, owner, n, wait_ms, lease_ms) -> Request.
 * The completion ("done", token, status, value, detail, ids) comes through
 * the queue. owner must be given for locks (no thread owns an async
 * call). */
static PyObject *Handle_acquire_async(HandleObject *self, PyObject *args) {
  QueueObject *q;
  unsigned long long token, owner;
  long long n, wait_ms, lease_ms;
  if (!PyArg_ParseTuple(args, "O!KKLLL:acquire_async", &Queue_Type, &q, &token,
                        &owner, &n, &wait_ms, &lease_ms))
    return NULL;
  RequestObject *r = PyObject_New(RequestObject, &Request_Type);
  if (r == NULL)
    return NULL;
  r->req = NULL;
  if (self->htype == H_PSEM && (n < 1 || n > RLOCK_PERMIT_IDS_MAX)) {
    Py_DECREF(r);
    set_error_detail(RLOCK_EINVAL, "permits must be 1..1024");
    return NULL;
  }
  pend *p = pend_new(q->q, token, self->htype == H_PSEM ? (int)n : 0);
  if (p == NULL) {
    Py_DECREF(r);
    return PyErr_NoMemory();
  }
  int rc = start_acquire(self, p, owner, n, wait_ms, lease_ms, r);
  if (rc < 0) {
    pend_drop(p);
    Py_DECREF(r);
    return set_error(rc);
  }
  return (PyObject *)r;
}

/* unlock_async(queue, token, owner) for locks: the completion comes
 * through the queue (status 0 released one hold, or an error). */
static PyObject *Handle_unlock_async(HandleObject *self, PyObject *args) {
  QueueObject *q;
  unsigned long long token, owner;
  if (!PyArg_ParseTuple(args, "O!KK:unlock_async", &Queue_Type, &q, &token,
                        &owner))
    return NULL;
  if (!handle_is(self, H_LOCK, "unlock_async"))
    return NULL;
  pend *p = pend_new(q->q, token, 0);
  if (p == NULL)
    return PyErr_NoMemory();
  int rc = rlock_unlock_async(self->h, owner, on_done, p, NULL);
  if (rc < 0) {
    pend_drop(p);
    return set_error(rc);
  }
  Py_RETURN_NONE;
}

/* Undoes an acquire that succeeded although the caller gave up on it (a
 * signal came at the same time as the lock). */
static void undo_acquire(HandleObject *self, uint64_t owner, int64_t n,
                         const item *it) {
  switch (self->htype) {
  case H_LOCK:
  case H_MULTI:
    rlock_unlock_owner(self->h, owner);
    break;
  case H_SEM:
    rlock_semaphore_release(self->h, n);
    break;
  case H_PSEM:
    for (int i = 0; i < it->nids; i++)
      rlock_permit_semaphore_release(
          self->h, it->ids + (size_t)i * (RLOCK_PERMIT_ID_LEN + 1));
    break;
  }
}

/* The blocking acquire in an interruptible form, for the main thread: the
 * async call, waited for on an eventfd with the GIL released; a signal
 * (Ctrl-C) runs its Python handler, and if that raises, the wait is
 * cancelled (nothing left queued on the server) and the exception goes
 * on. Returns the completion item (caller frees), or NULL with an
 * exception set. */
static item *interruptible_acquire(HandleObject *self, uint64_t owner,
                                   int64_t n, int64_t wait_ms,
                                   int64_t lease_ms) {
  queue_t *q = queue_new();
  if (q == NULL) {
    PyErr_SetFromErrno(PyExc_OSError);
    return NULL;
  }
  RequestObject r = {0};
  pend *p = pend_new(q, 1, self->htype == H_PSEM ? (int)n : 0);
  if (p == NULL) {
    queue_unref(q);
    PyErr_NoMemory();
    return NULL;
  }
  int rc = start_acquire(self, p, owner, n, wait_ms, lease_ms, &r);
  if (rc < 0) {
    pend_drop(p);
    queue_unref(q);
    set_error(rc);
    return NULL;
  }
  item *it = NULL;
  int canceled = 0;
  for (;;) {
    it = queue_take(q);
    if (it != NULL)
      break;
    if (queue_poll(q, canceled ? -1 : 200))
      continue;
    if (!canceled && PyErr_CheckSignals() < 0) {
      canceled = 1;
      rlock_req_cancel(r.req);
    }
  }
  rlock_req_free(r.req);
  queue_unref(q);
  if (canceled) {
    if (it->status == 1) {
      PyObject *et, *ev, *tb;
      PyErr_Fetch(&et, &ev, &tb);
      Py_BEGIN_ALLOW_THREADS
      undo_acquire(self, owner, n, it);
      Py_END_ALLOW_THREADS
      PyErr_Restore(et, ev, tb);
    }
    item_free(it);
    return NULL;
  }
  return it;
}

/* The FasterMultiLock has no async call to cancel: on the main thread a
 * wait is made of tries of at most 200 ms, with signals checked between
 * them (a try that ends without the values leaves nothing taken); other
 * threads wait in one call. */
static PyObject *fast_acquire(HandleObject *self, uint64_t owner,
                              int64_t wait_ms, int64_t lease_ms) {
  void *h = self->h;
  int main = is_main_thread();
  int64_t deadline = wait_ms > 0 ? rlock_now_ms() + wait_ms : 0;
  for (;;) {
    int64_t slice = wait_ms;
    if (main && wait_ms != 0) {
      int64_t left = wait_ms < 0 ? 200 : deadline - rlock_now_ms();
      slice = left < 0 ? 0 : (left > 200 ? 200 : left);
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = owner ? rlock_try_lock_owner(h, owner, slice, lease_ms)
               : rlock_try_lock(h, slice, lease_ms);
    Py_END_ALLOW_THREADS
    if (rc < 0)
      return set_error(rc);
    if (rc == 1 || !main || wait_ms == 0 ||
        (wait_ms > 0 && rlock_now_ms() >= deadline))
      return PyLong_FromLong(rc);
    if (PyErr_CheckSignals() < 0)
      return NULL;
  }
}

/* acquire(n, wait_ms, lease_ms, owner=None) -> status (1/0), or for fenced
 * locks (status, token), for permit semaphores (status, [ids]).
 * n: permits (semaphores); wait_ms < 0: no limit. Blocking, GIL released;
 * on the main thread interruptible by signals. */
static PyObject *Handle_acquire(HandleObject *self, PyObject *args) {
  long long n, wait_ms, lease_ms;
  PyObject *owner_o = Py_None;
  if (!PyArg_ParseTuple(args, "LLL|O:acquire", &n, &wait_ms, &lease_ms,
                        &owner_o))
    return NULL;
  uint64_t owner;
  if (parse_owner(owner_o, &owner) < 0)
    return NULL;
  int rc = 0;
  int64_t token = 0;
  char (*ids)[RLOCK_PERMIT_ID_LEN + 1] = NULL;
  if (self->htype == H_PSEM) {
    if (n < 1 || n > RLOCK_PERMIT_IDS_MAX) {
      set_error_detail(RLOCK_EINVAL, "permits must be 1..1024");
      return NULL;
    }
    ids = calloc((size_t)n, sizeof(*ids));
    if (ids == NULL)
      return PyErr_NoMemory();
  }
  /* the first try without waiting, then (main thread) the interruptible
   * wait, or (other threads: signals go to the main thread) the blocking
   * call itself, which spins for fast answers */
  if (self->htype == H_FAST)
    return fast_acquire(self, owner, wait_ms, lease_ms);
  int main_wait = wait_ms != 0 && is_main_thread();
  int64_t first_wait = main_wait ? 0 : wait_ms;
  void *h = self->h;
  Py_BEGIN_ALLOW_THREADS
  switch (self->htype) {
  case H_LOCK:
  case H_MULTI:
    if (self->fenced)
      rc = owner ? rlock_try_lock_fenced_owner(h, owner, first_wait, lease_ms,
                                               &token)
                 : rlock_try_lock_fenced(h, first_wait, lease_ms, &token);
    else
      rc = owner ? rlock_try_lock_owner(h, owner, first_wait, lease_ms)
                 : rlock_try_lock(h, first_wait, lease_ms);
    break;
  case H_SEM:
    rc = rlock_semaphore_try_acquire(h, n, first_wait);
    break;
  case H_PSEM:
    rc = rlock_permit_semaphore_try_acquire_n(h, n, first_wait, lease_ms, ids);
    break;
  case H_LATCH:
    rc = rlock_latch_await(h, first_wait);
    break;
  }
  Py_END_ALLOW_THREADS
  if (rc == 0 && main_wait) {
    item *it = interruptible_acquire(self, owner ? owner : rlock_thread_id(),
                                     n, wait_ms, lease_ms);
    if (it == NULL) {
      free(ids);
      return NULL;
    }
    rc = it->status;
    if (rc < 0) {
      set_error_detail(rc, it->detail);
      item_free(it);
      free(ids);
      return NULL;
    }
    if (rc == 1 && self->fenced)
      token = it->value;
    if (rc == 1 && ids != NULL && it->ids != NULL)
      memcpy(ids, it->ids, (size_t)it->nids * sizeof(*ids));
    item_free(it);
  } else if (rc < 0) {
    free(ids);
    return set_error(rc);
  }
  if (self->fenced)
    return Py_BuildValue("(iL)", rc, (long long)(rc == 1 ? token : 0));
  if (ids != NULL) {
    PyObject *l = rc == 1 ? ids_list((const char *)ids, (int)n) : PyList_New(0);
    free(ids);
    if (l == NULL)
      return NULL;
    return Py_BuildValue("(iN)", rc, l);
  }
  return PyLong_FromLong(rc);
}

/* release(owner=None) for locks and multilocks: 1 when one hold was
 * released (the C calls' 0; whether the lock is still held after a
 * re-entered release is hold_count()'s to say). */
static PyObject *Handle_release(HandleObject *self, PyObject *args) {
  PyObject *owner_o = Py_None;
  if (!PyArg_ParseTuple(args, "|O:release", &owner_o))
    return NULL;
  uint64_t owner;
  if (parse_owner(owner_o, &owner) < 0)
    return NULL;
  int rc;
  void *h = self->h;
  if (self->htype == H_LOCK || self->htype == H_MULTI) {
    Py_BEGIN_ALLOW_THREADS
    rc = owner ? rlock_unlock_owner(h, owner) : rlock_unlock(h);
    Py_END_ALLOW_THREADS
    if (rc == 0)
      rc = 1;
  } else if (self->htype == H_FAST) {
    Py_BEGIN_ALLOW_THREADS
    rc = owner ? rlock_unlock_owner(h, owner) : rlock_unlock(h);
    Py_END_ALLOW_THREADS
    if (rc == 0)
      rc = 1;
  } else {
    PyErr_SetString(PyExc_TypeError, "release(owner) is for locks");
    return NULL;
  }
  if (rc < 0)
    return set_error(rc);
  return PyLong_FromLong(rc);
}

/* query(what, owner=None) for locks: what in "is_locked", "is_held",
 * "hold_count", "ttl", "force_unlock", "token", "lease_guaranteed". */
static PyObject *Handle_query(HandleObject *self, PyObject *args) {
  const char *what;
  PyObject *owner_o = Py_None;
  if (!PyArg_ParseTuple(args, "s|O:query", &what, &owner_o))
    return NULL;
  uint64_t owner;
  if (parse_owner(owner_o, &owner) < 0)
    return NULL;
  void *h = self->h;
  long long rc = RLOCK_EINVAL;
  int64_t v = 0;
  int known = 1;
  if (self->htype == H_MULTI && strcmp(what, "is_held") == 0) {
    uint64_t ow = owner ? owner : rlock_thread_id();
    Py_BEGIN_ALLOW_THREADS
    rc = rlock_is_held_owner(h, ow);
    Py_END_ALLOW_THREADS
    if (rc < 0)
      return set_error((int)rc);
    return PyBool_FromLong((long)rc);
  }
  if (self->htype == H_FAST) {
    uint64_t ow = owner ? owner : rlock_thread_id();
    Py_BEGIN_ALLOW_THREADS
    if (strcmp(what, "is_locked") == 0)
      rc = rlock_is_locked(h);
    else if (strcmp(what, "is_held") == 0)
      rc = rlock_is_held_owner(h, ow);
    else if (strcmp(what, "force_unlock") == 0)
      rc = rlock_force_unlock(h);
    else
      known = 0;
    Py_END_ALLOW_THREADS
    if (!known) {
      PyErr_Format(PyExc_TypeError, "%s is not available on this handle", what);
      return NULL;
    }
    if (rc < 0)
      return set_error((int)rc);
    if (strcmp(what, "force_unlock") == 0)
      return PyLong_FromLongLong(rc);
    return PyBool_FromLong((long)rc);
  }
  if (!handle_is(self, H_LOCK, what))
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  if (strcmp(what, "is_locked") == 0)
    rc = rlock_is_locked(h);
  else if (strcmp(what, "is_held") == 0)
    rc = owner ? rlock_is_held_owner(h, owner)
               : rlock_is_held(h);
  else if (strcmp(what, "hold_count") == 0)
    rc = owner ? rlock_hold_count_owner(h, owner) : rlock_hold_count(h);
  else if (strcmp(what, "ttl") == 0)
    rc = rlock_remain_ttl(h, &v);
  else if (strcmp(what, "force_unlock") == 0)
    rc = rlock_force_unlock(h);
  else if (strcmp(what, "token") == 0)
    rc = rlock_fenced_token(h, &v);
  else if (strcmp(what, "lease_guaranteed") == 0)
    rc = owner ? rlock_is_lease_guaranteed_owner(h, owner, &v)
               : rlock_is_lease_guaranteed(h, &v);
  else
    known = 0;
  Py_END_ALLOW_THREADS
  if (!known) {
    PyErr_Format(PyExc_ValueError, "unknown query %s", what);
    return NULL;
  }
  if (rc < 0)
    return set_error((int)rc);
  if (strcmp(what, "ttl") == 0 || strcmp(what, "token") == 0)
    return PyLong_FromLongLong(v);
  if (strcmp(what, "lease_guaranteed") == 0)
    return Py_BuildValue("(iL)", (int)rc, (long long)v);
  if (strcmp(what, "hold_count") == 0)
    return PyLong_FromLongLong(rc);
  return PyBool_FromLong((long)rc);
}

/* renew(owner, lease_ms) for a FasterMultiLock: 1 renewed, 0 not held. */
static PyObject *Handle_renew(HandleObject *self, PyObject *args) {
  PyObject *owner_o;
  long long lease_ms;
  if (!PyArg_ParseTuple(args, "OL:renew", &owner_o, &lease_ms))
    return NULL;
  if (!handle_is(self, H_FAST, "renew"))
    return NULL;
  uint64_t owner;
  if (parse_owner(owner_o, &owner) < 0)
    return NULL;
  if (owner == 0)
    owner = rlock_thread_id();
  int rc;
  void *h = self->h;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_fast_multilock_renew_owner(h, owner, lease_ms);
  Py_END_ALLOW_THREADS
  if (rc < 0)
    return set_error(rc);
  return PyBool_FromLong(rc);
}

/* force_unlock_owner(owner_string) */
static PyObject *Handle_force_unlock_owner(HandleObject *self, PyObject *arg) {
  if (!handle_is(self, H_LOCK, "force_unlock_owner"))
    return NULL;
  PyObject *ob = name_bytes(arg, "owner");
  if (ob == NULL)
    return NULL;
  int rc;
  void *h = self->h;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_force_unlock_holder(h, PyBytes_AS_STRING(ob));
  Py_END_ALLOW_THREADS
  Py_DECREF(ob);
  if (rc < 0)
    return set_error(rc);
  return PyBool_FromLong(rc);
}

/* op(what, a=0, b=0) for semaphores and latches:
 *   sem:   try_set(permits, ttl_ms), release(n), add(n), drain, available,
 *          release_if_exists(n)
 *   psem:  try_set(n), add(n), set(n), available, acquired, permits
 *   latch: try_set(count), count_down, count, delete */
static PyObject *Handle_op(HandleObject *self, PyObject *args) {
  const char *what;
  long long a = 0, b = 0;
  if (!PyArg_ParseTuple(args, "s|LL:op", &what, &a, &b))
    return NULL;
  void *h = self->h;
  long long rc = RLOCK_EINVAL;
  int known = 1, ht = self->htype;
  Py_BEGIN_ALLOW_THREADS
  if (ht == H_SEM) {
    if (strcmp(what, "try_set") == 0)
      rc = rlock_semaphore_try_set_permits(h, a, b);
    else if (strcmp(what, "release") == 0)
      rc = rlock_semaphore_release(h, a);
    else if (strcmp(what, "add") == 0)
      rc = rlock_semaphore_add_permits(h, a);
    else if (strcmp(what, "drain") == 0)
      rc = rlock_semaphore_drain_permits(h);
    else if (strcmp(what, "available") == 0)
      rc = rlock_semaphore_available_permits(h);
    else if (strcmp(what, "release_if_exists") == 0)
      rc = rlock_semaphore_release_if_exists(h, a);
    else
      known = 0;
  } else if (ht == H_PSEM) {
    if (strcmp(what, "try_set") == 0)
      rc = rlock_permit_semaphore_try_set_permits(h, a);
    else if (strcmp(what, "add") == 0)
      rc = rlock_permit_semaphore_add_permits(h, a);
    else if (strcmp(what, "set") == 0)
      rc = rlock_permit_semaphore_set_permits(h, a);
    else if (strcmp(what, "available") == 0)
      rc = rlock_permit_semaphore_available_permits(h);
    else if (strcmp(what, "acquired") == 0)
      rc = rlock_permit_semaphore_acquired_permits(h);
    else if (strcmp(what, "permits") == 0)
      rc = rlock_permit_semaphore_permits(h);
    else
      known = 0;
  } else if (ht == H_LATCH) {
    if (strcmp(what, "try_set") == 0)
      rc = rlock_latch_try_set_count(h, a);
    else if (strcmp(what, "count_down") == 0)
      rc = rlock_latch_count_down(h);
    else if (strcmp(what, "count") == 0)
      rc = rlock_latch_count(h);
    else if (strcmp(what, "delete") == 0)
      rc = rlock_latch_delete(h);
    else
      known = 0;
  } else {
    known = 0;
  }
  Py_END_ALLOW_THREADS
  if (!known) {
    PyErr_Format(PyExc_ValueError, "unknown operation %s", what);
    return NULL;
  }
  if (rc < 0)
    return set_error((int)rc);
  return PyLong_FromLongLong(rc);
}

/* permit_op(what, ids, lease_ms=0) for permit semaphores:
 *   release(ids) -> count released (RLOCK_ENOTOWNER if any is not taken),
 *   try_release(ids) -> count or 0, update_lease(id, lease_ms) -> 1/0,
 *   lease_time(id) -> ms left (-1: no lease) */
static PyObject *Handle_permit_op(HandleObject *self, PyObject *args) {
  const char *what;
  PyObject *ids_o;
  long long lease_ms = 0;
  if (!PyArg_ParseTuple(args, "sO|L:permit_op", &what, &ids_o, &lease_ms))
    return NULL;
  if (!handle_is(self, H_PSEM, what))
    return NULL;
  PyObject *seq = PyUnicode_Check(ids_o) ? PyTuple_Pack(1, ids_o)
                                         : PySequence_Tuple(ids_o);
  if (seq == NULL)
    return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  if (n == 0) {
    Py_DECREF(seq);
    set_error_detail(RLOCK_EINVAL, "no permit ids given");
    return NULL;
  }
  const char **ids = calloc((size_t)n, sizeof(*ids));
  if (ids == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *s = PyTuple_GET_ITEM(seq, i);
    if (!PyUnicode_Check(s)) {
      free(ids);
      Py_DECREF(seq);
      PyErr_Format(PyExc_TypeError, "permit ids must be str, not %.100s",
                   Py_TYPE(s)->tp_name);
      return NULL;
    }
    Py_ssize_t len;
    ids[i] = PyUnicode_AsUTF8AndSize(s, &len);
    if (ids[i] == NULL || (Py_ssize_t)strlen(ids[i]) != len) {
      free(ids);
      Py_DECREF(seq);
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "permit ids must not contain NUL");
      return NULL;
    }
  }
  void *h = self->h;
  long long rc = 0;
  int64_t v = 0;
  int known = 1;
  Py_BEGIN_ALLOW_THREADS
  if (strcmp(what, "release") == 0)
    rc = rlock_permit_semaphore_release_n(h, ids, (size_t)n);
  else if (strcmp(what, "try_release") == 0)
    rc = rlock_permit_semaphore_try_release_n(h, ids, (size_t)n);
  else if (strcmp(what, "update_lease") == 0)
    rc = rlock_permit_semaphore_update_lease(h, ids[0], lease_ms);
  else if (strcmp(what, "lease_time") == 0)
    rc = rlock_permit_semaphore_lease_time(h, ids[0], &v);
  else
    known = 0;
  Py_END_ALLOW_THREADS
  free(ids);
  Py_DECREF(seq);
  if (!known) {
    PyErr_Format(PyExc_ValueError, "unknown operation %s", what);
    return NULL;
  }
  if (rc < 0)
    return set_error((int)rc);
  if (strcmp(what, "release") == 0)
    return PyLong_FromSsize_t(n);
  if (strcmp(what, "lease_time") == 0)
    return PyLong_FromLongLong(v);
  return PyLong_FromLongLong(rc);
}

static PyObject *Handle_get_name(HandleObject *self, void *closure) {
  if (self->htype == H_LOCK)
    return PyUnicode_DecodeUTF8(rlock_name(self->h),
                                (Py_ssize_t)strlen(rlock_name(self->h)),
                                "surrogateescape");
  Py_RETURN_NONE;
}

static PyObject *Handle_get_kind(HandleObject *self, void *closure) {
  switch (self->htype) {
  case H_LOCK: return PyUnicode_FromString(rlock_kind(self->h));
  case H_SEM: return PyUnicode_FromString("semaphore");
  case H_PSEM: return PyUnicode_FromString("permit_semaphore");
  case H_LATCH: return PyUnicode_FromString("latch");
  case H_MULTI: return PyUnicode_FromString("multilock");
  case H_FAST: return PyUnicode_FromString("fast_multilock");
  }
  Py_RETURN_NONE;
}

static PyMethodDef Handle_methods[] = {
    {"acquire", (PyCFunction)Handle_acquire, METH_VARARGS, NULL},
    {"acquire_async", (PyCFunction)Handle_acquire_async, METH_VARARGS, NULL},
    {"unlock_async", (PyCFunction)Handle_unlock_async, METH_VARARGS, NULL},
    {"release", (PyCFunction)Handle_release, METH_VARARGS, NULL},
    {"query", (PyCFunction)Handle_query, METH_VARARGS, NULL},
    {"op", (PyCFunction)Handle_op, METH_VARARGS, NULL},
    {"permit_op", (PyCFunction)Handle_permit_op, METH_VARARGS, NULL},
    {"force_unlock_owner", (PyCFunction)Handle_force_unlock_owner, METH_O, NULL},
    {"renew", (PyCFunction)Handle_renew, METH_VARARGS, NULL},
    {NULL}};

static PyGetSetDef Handle_getset[] = {
    {"name", (getter)Handle_get_name, NULL, NULL, NULL},
    {"kind", (getter)Handle_get_kind, NULL, NULL, NULL},
    {NULL}};

static PyTypeObject Handle_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlock._rlock.Handle",
    .tp_basicsize = sizeof(HandleObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_methods = Handle_methods,
    .tp_getset = Handle_getset,
};

static PyMethodDef Client_methods[] = {
    {"close", (PyCFunction)Client_close, METH_NOARGS, NULL},
    {"events_wait", (PyCFunction)Client_events_wait, METH_VARARGS, NULL},
    {"stats", (PyCFunction)Client_stats, METH_NOARGS, NULL},
    {"stats_text", (PyCFunction)Client_stats_text, METH_VARARGS, NULL},
    {"info", (PyCFunction)Client_info, METH_O, NULL},
    {"scan", (PyCFunction)Client_scan, METH_VARARGS, NULL},
    {"interrupt", (PyCFunction)Client_interrupt, METH_O, NULL},
    {"force_unlock", (PyCFunction)Client_force_unlock, METH_VARARGS, NULL},
    {"caps", (PyCFunction)Client_caps, METH_NOARGS, NULL},
    {"handle", (PyCFunction)Client_handle, METH_VARARGS, NULL},
    {"fast_multilock", (PyCFunction)Client_fast_multilock, METH_VARARGS, NULL},
    {NULL}};

static PyGetSetDef Client_getset[] = {
    {"id", (getter)Client_get_id, NULL, NULL, NULL},
    {"closed", (getter)Client_get_closed, NULL, NULL, NULL},
    {NULL}};

static PyTypeObject Client_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlock._rlock.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = Client_new,
    .tp_init = (initproc)Client_init,
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_methods = Client_methods,
    .tp_getset = Client_getset,
};

/* ---- fencing (issue 37): the check call and the guard ------------------ */

/* fenced_check(handle, token) -> state (0 free, 1 current, 2 stale, 3
 * unknown), blocking with the GIL released; fenced_check_async(handle,
 * queue, qtoken, token): the state comes through the queue as the value. */
/* An int argument (not a bool) that fits int64_t: TypeError / ValueError
 * ("<what> out of range <range>") otherwise. */
static int parse_i64(PyObject *o, const char *what, const char *range,
                     int64_t *out) {
  if (!PyLong_Check(o) || PyBool_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (v == -1 && PyErr_Occurred())
    return -1;
  if (overflow) {
    PyErr_Format(PyExc_ValueError, "%s out of range %s", what, range);
    return -1;
  }
  *out = v;
  return 0;
}

/* A token < 1 is left to the C library: RLOCK_EINVAL with its detail. */
static int parse_token(PyObject *o, int64_t *out) {
  return parse_i64(o, "token", "(a fenced lock's token is a positive 64-bit int)",
                   out);
}

static int check_handle(PyObject *o) {
  if (!PyObject_TypeCheck(o, &Handle_Type) ||
      ((HandleObject *)o)->htype != H_LOCK) {
    PyErr_Format(PyExc_TypeError, "a fenced lock handle is needed, not %.100s",
                 Py_TYPE(o)->tp_name);
    return 0;
  }
  return 1;
}

static PyObject *mod_fenced_check(PyObject *m, PyObject *args) {
  PyObject *h, *tok;
  if (!PyArg_ParseTuple(args, "OO:fenced_check", &h, &tok))
    return NULL;
  int64_t token;
  if (!check_handle(h) || parse_token(tok, &token) < 0)
    return NULL;
  rlock *lk = ((HandleObject *)h)->h;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_check_token(lk, token);
  Py_END_ALLOW_THREADS
  if (rc < 0)
    return set_error(rc);
  return PyLong_FromLong(rc);
}

static PyObject *mod_fenced_check_async(PyObject *m, PyObject *args) {
  PyObject *h, *tok;
  QueueObject *q;
  unsigned long long qtoken;
  if (!PyArg_ParseTuple(args, "OO!KO:fenced_check_async", &h, &Queue_Type, &q,
                        &qtoken, &tok))
    return NULL;
  int64_t token;
  if (!check_handle(h) || parse_token(tok, &token) < 0)
    return NULL;
  pend *p = pend_new(q->q, qtoken, 0);
  if (p == NULL)
    return PyErr_NoMemory();
  int rc = rlock_check_token_async(((HandleObject *)h)->h, token, on_done, p,
                                    NULL);
  if (rc < 0) {
    pend_drop(p);
    return set_error(rc);
  }
  Py_RETURN_NONE;
}

typedef struct {
  PyObject_HEAD
  rlock_guard *g;
  PyObject *client; /* ClientObject, kept alive */
} GuardObject;

static void Guard_dealloc(GuardObject *self) {
  if (self->g != NULL)
    rlock_guard_free(self->g);
  Py_XDECREF(self->client);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An optional string argument: None -> NULL; str (UTF-8) or bytes without
 * NUL (empty allowed) -> a pointer into a bytes object appended to keep. */
static int opt_text(PyObject *v, const char *what, const char **out,
                    PyObject *keep) {
  *out = NULL;
  if (v == Py_None)
    return 0;
  PyObject *b;
  if (PyUnicode_Check(v)) {
    b = PyUnicode_AsEncodedString(v, "utf-8", "strict");
    if (b == NULL)
      return -1;
  } else if (PyBytes_Check(v)) {
    b = Py_NewRef(v);
  } else {
    PyErr_Format(PyExc_TypeError, "%s must be str or bytes, not %.100s", what,
                 Py_TYPE(v)->tp_name);
    return -1;
  }
  if ((Py_ssize_t)strlen(PyBytes_AS_STRING(b)) != PyBytes_GET_SIZE(b)) {
    Py_DECREF(b);
    PyErr_Format(PyExc_ValueError, "%s must not contain NUL bytes", what);
    return -1;
  }
  int rc = PyList_Append(keep, b);
  *out = PyBytes_AS_STRING(b);
  Py_DECREF(b);
  return rc;
}

/* A sequence of str/bytes -> an array of pointers (freed by the caller). */
static int text_list(PyObject *v, const char *what, const char ***out,
                     size_t *n, PyObject *keep) {
  *out = NULL;
  *n = 0;
  if (v == Py_None)
    return 0;
  if (PyUnicode_Check(v) || PyBytes_Check(v)) {
    PyErr_Format(PyExc_TypeError, "%s must be a sequence of str or bytes, "
                 "not a single %.100s", what, Py_TYPE(v)->tp_name);
    return -1;
  }
  PyObject *seq = PySequence_Tuple(v);
  if (seq == NULL) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a sequence of str or bytes, "
                 "not %.100s", what, Py_TYPE(v)->tp_name);
    return -1;
  }
  Py_ssize_t len = PyTuple_GET_SIZE(seq);
  const char **arr = calloc(len > 0 ? (size_t)len : 1, sizeof(*arr));
  if (arr == NULL) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; i++) {
    PyObject *it = PyTuple_GET_ITEM(seq, i);
    if (it == Py_None) {
      PyErr_Format(PyExc_TypeError, "%s must be str or bytes, not None", what);
      goto fail;
    }
    if (opt_text(it, what, &arr[i], keep) < 0)
      goto fail;
  }
  Py_DECREF(seq);
  *out = arr;
  *n = (size_t)len;
  return 0;
fail:
  free(arr);
  Py_DECREF(seq);
  return -1;
}

/* Fills w from (op, lock, token, key, field, value, delta, script, keys,
 * args); the strings live in keep, *keys_arr / *args_arr are the caller's
 * to free. */
static int parse_write(PyObject *a, rlock_guarded_write *w, PyObject *keep,
                       const char ***keys_arr, const char ***args_arr) {
  int op;
  PyObject *lock, *tok, *key, *field, *value, *delta, *script, *keys, *args;
  *keys_arr = *args_arr = NULL;
  if (!PyArg_ParseTuple(a, "iOOOOOOOOO:write", &op, &lock, &tok, &key, &field,
                        &value, &delta, &script, &keys, &args))
    return -1;
  rlock_guarded_write_init(w);
  w->op = (rlock_guard_op)op;
  PyObject *lb = name_bytes(lock, "lock");
  if (lb == NULL)
    return -1;
  int rc = PyList_Append(keep, lb);
  w->lock_name = PyBytes_AS_STRING(lb);
  Py_DECREF(lb);
  if (rc < 0 || parse_token(tok, &w->token) < 0 ||
      opt_text(key, "key", &w->key, keep) < 0 ||
      opt_text(field, "field", &w->field, keep) < 0 ||
      opt_text(value, "value", &w->value, keep) < 0 ||
      opt_text(script, "script", &w->script, keep) < 0 ||
      parse_i64(delta, "delta", "(64-bit)", &w->delta) < 0)
    return -1;
  if (text_list(keys, "keys", keys_arr, &w->nkeys, keep) < 0 ||
      text_list(args, "args", args_arr, &w->nargs, keep) < 0)
    return -1;
  w->keys = *keys_arr;
  w->args = *args_arr;
  return 0;
}

static int guard_ok(GuardObject *self) {
  ClientObject *c = (ClientObject *)self->client;
  if (c->c == NULL) {
    set_error_detail(RLOCK_ECLOSED, "the client is closed");
    return 0;
  }
  return 1;
}

/* write(op, lock, token, key, field, value, delta, script, keys, args) ->
 * the result (rlock_guard_op's), blocking with the GIL released. */
static PyObject *Guard_write(GuardObject *self, PyObject *a) {
  PyObject *keep = PyList_New(0);
  if (keep == NULL)
    return NULL;
  rlock_guarded_write w;
  const char **ka, **aa;
  PyObject *res = NULL;
  if (parse_write(a, &w, keep, &ka, &aa) == 0 && guard_ok(self)) {
    int64_t result = 0;
    int rc;
    rlock_guard *g = self->g;
    Py_BEGIN_ALLOW_THREADS
    rc = rlock_guard_write(g, &w, &result);
    Py_END_ALLOW_THREADS
    res = rc < 0 ? set_error(rc) : PyLong_FromLongLong(result);
  }
  free(ka);
  free(aa);
  Py_DECREF(keep);
  return res;
}

/* write_async(queue, qtoken, op, lock, token, ...): the completion (status
 * 0 and the result, or the error) comes through the queue. The library
 * copies the strings, so they may go when this returns. */
static PyObject *Guard_write_async(GuardObject *self, PyObject *a) {
  Py_ssize_t n = PyTuple_GET_SIZE(a);
  QueueObject *q;
  unsigned long long qtoken;
  if (n < 2 || !PyObject_TypeCheck(PyTuple_GET_ITEM(a, 0), &Queue_Type)) {
    PyErr_SetString(PyExc_TypeError, "write_async(queue, qtoken, ...)");
    return NULL;
  }
  q = (QueueObject *)PyTuple_GET_ITEM(a, 0);
  qtoken = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(a, 1));
  if (qtoken == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  PyObject *rest = PyTuple_GetSlice(a, 2, n);
  PyObject *keep = PyList_New(0);
  if (rest == NULL || keep == NULL) {
    Py_XDECREF(rest);
    Py_XDECREF(keep);
    return NULL;
  }
  rlock_guarded_write w;
  const char **ka, **aa;
  PyObject *res = NULL;
  if (parse_write(rest, &w, keep, &ka, &aa) == 0 && guard_ok(self)) {
    pend *p = pend_new(q->q, qtoken, 0);
    if (p == NULL) {
      PyErr_NoMemory();
    } else {
      int rc = rlock_guard_write_async(self->g, &w, on_done, p, NULL);
      if (rc < 0) {
        pend_drop(p);
        set_error(rc);
      } else {
        res = Py_NewRef(Py_None);
      }
    }
  }
  free(ka);
  free(aa);
  Py_DECREF(keep);
  Py_DECREF(rest);
  return res;
}

static PyMethodDef Guard_methods[] = {
    {"write", (PyCFunction)Guard_write, METH_VARARGS, NULL},
    {"write_async", (PyCFunction)Guard_write_async, METH_VARARGS, NULL},
    {NULL}};

static PyTypeObject Guard_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlock._rlock.Guard",
    .tp_basicsize = sizeof(GuardObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Guard_dealloc,
    .tp_methods = Guard_methods,
};

/* guard(client, name) -> Guard (rlock_guard_new: no command is sent). */
static PyObject *mod_guard(PyObject *m, PyObject *args) {
  PyObject *client, *name;
  if (!PyArg_ParseTuple(args, "O!O:guard", &Client_Type, &client, &name))
    return NULL;
  PyObject *nb = name_bytes(name, "name");
  if (nb == NULL)
    return NULL;
  ClientObject *c = (ClientObject *)client;
  if (!client_ok(c)) {
    Py_DECREF(nb);
    return NULL;
  }
  rlock_guard *g = NULL;
  int rc = rlock_guard_new(c->c, PyBytes_AS_STRING(nb), &g);
  Py_DECREF(nb);
  if (rc < 0)
    return set_error(rc);
  GuardObject *o = PyObject_New(GuardObject, &Guard_Type);
  if (o == NULL) {
    rlock_guard_free(g);
    return NULL;
  }
  o->g = g;
  o->client = Py_NewRef(client);
  return (PyObject *)o;
}

/* ---- leader election (issue 38) ---------------------------------------- */

/* The campaign's callback data: the result goes to q (an IT_DONE with the
 * term as value), the end of a term won to the client's event queue (an
 * IT_TERM with end_token), which the client's dispatcher thread reads. */
typedef struct camp {
  queue_t *q;
  uint64_t token;
  queue_t *endq; /* NULL: nobody listens for the end */
  uint64_t end_token;
  int phase; /* 0 result not given yet, 1 won: the end comes */
} camp;

static void camp_free(camp *c) {
  queue_unref(c->q);
  queue_unref(c->endq);
  free(c);
}

/* On the loop thread, or on the thread of rlock_election_cancel/_resign/
 * _free: no GIL, copies only. */
static void on_campaign(rlock_election *e, int status, int64_t term,
                        void *data) {
  (void)e;
  camp *c = data;
  item *it = calloc(1, sizeof(*it));
  if (c->phase == 0) {
    c->phase = 1;
    if (it != NULL) {
      it->type = IT_DONE;
      it->token = c->token;
      it->status = status;
      it->value = term;
      if (status < 0)
        it->detail = strdup(rlock_last_error());
      queue_push(c->q, it);
    }
    if (status == RLOCK_ELECTION_WON)
      return;
  } else if (it != NULL) {
    if (c->endq != NULL) {
      it->type = IT_TERM;
      it->token = c->end_token;
      it->status = status;
      it->term = term;
      queue_push(c->endq, it);
    } else {
      free(it);
    }
  }
  camp_free(c);
}

static void on_state(const rlock_election_state *st, void *data) {
  camp *c = data; /* an observer's: q and token only */
  item *it = calloc(1, sizeof(*it));
  if (it == NULL)
    return;
  it->type = IT_STATE;
  it->token = c->token;
  it->status = st->has_leader;
  it->level = st->has_value;
  it->term = st->term;
  it->lease_ms = st->ttl_ms;
  it->owner = strdup(st->holder);
  if (st->has_value) {
    it->data = malloc(st->value_len + 1);
    if (it->data != NULL) {
      memcpy(it->data, st->value, st->value_len);
      it->len = st->value_len;
    }
  }
  queue_push(c->q, it);
}

static PyObject *state_tuple(int has_leader, int has_value, int64_t term,
                             int64_t ttl_ms, const char *holder,
                             const char *value, size_t len) {
  PyObject *v = has_value && value != NULL
                    ? PyBytes_FromStringAndSize(value, (Py_ssize_t)len)
                    : Py_NewRef(Py_None);
  if (v == NULL)
    return NULL;
  return Py_BuildValue("(iiLLNN)", has_leader, has_value, (long long)term,
                       (long long)ttl_ms,
                       PyUnicode_DecodeUTF8(holder ? holder : "",
                                            (Py_ssize_t)strlen(holder ? holder : ""),
                                            "surrogateescape"),
                       v);
}

/*   IT_TERM  -> ("term", end_token, status, term)
 *   IT_STATE -> ("state", token, (has_leader, has_value, term, ttl_ms,
 *                holder, value bytes or None)) */
static PyObject *election_item_to_py(const item *it) {
  if (it->type == IT_TERM)
    return Py_BuildValue("(sKiL)", "term", (unsigned long long)it->token,
                         it->status, (long long)it->term);
  PyObject *st = state_tuple(it->status, it->level, it->term, it->lease_ms,
                             it->owner, it->data, it->len);
  if (st == NULL)
    return NULL;
  return Py_BuildValue("(sKN)", "state", (unsigned long long)it->token, st);
}

/* The client's event queue, made when the client was opened without
 * event handlers (the library never writes to it then: only the
 * election's callbacks do). */
static queue_t *client_events(ClientObject *c) {
  if (c->events == NULL)
    c->events = queue_new();
  if (c->events == NULL)
    PyErr_SetFromErrno(PyExc_OSError);
  return c->events;
}

typedef struct {
  PyObject_HEAD
  rlock_election *e;
  PyObject *client; /* ClientObject, kept alive */
} ElectionObject;

static PyTypeObject Election_Type;

static void election_close(ElectionObject *self) {
  rlock_election *e = self->e;
  self->e = NULL;
  if (e != NULL) {
    /* resigns a term still held: its end is queued, then no callback */
    Py_BEGIN_ALLOW_THREADS
    rlock_election_free(e);
    Py_END_ALLOW_THREADS
  }
}

static void Election_dealloc(ElectionObject *self) {
  election_close(self);
  Py_XDECREF(self->client);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int election_ok(ElectionObject *self) {
  if (self->e == NULL) {
    set_error_detail(RLOCK_ECLOSED, "the election handle is closed");
    return 0;
  }
  return 1;
}

/* A value: bytes (str is encoded by rlock/__init__.py). */
static int value_arg(PyObject *v, const char **p, size_t *len) {
  if (!PyBytes_Check(v)) {
    PyErr_Format(PyExc_TypeError, "value must be str or bytes, not %.100s",
                 Py_TYPE(v)->tp_name);
    return -1;
  }
  *p = PyBytes_AS_STRING(v);
  *len = (size_t)PyBytes_GET_SIZE(v);
  return 0;
}

/* campaign_start(queue, token, value, wait_ms, end_token): the result
 * ("done", token, status, term, detail, None) through queue; when won, the
 * term's end ("term", end_token, status, term) through the client's event
 * queue (end_token 0: not delivered). */
static PyObject *Election_campaign_start(ElectionObject *self, PyObject *args) {
  QueueObject *q;
  unsigned long long token, end_token;
  PyObject *value;
  long long wait_ms;
  if (!PyArg_ParseTuple(args, "O!KOLK:campaign_start", &Queue_Type, &q, &token,
                        &value, &wait_ms, &end_token))
    return NULL;
  const char *v;
  size_t len;
  if (value_arg(value, &v, &len) < 0 || !election_ok(self))
    return NULL;
  queue_t *endq = NULL;
  if (end_token != 0) {
    ClientObject *c = (ClientObject *)self->client;
    if (!client_ok(c) || (endq = client_events(c)) == NULL)
      return NULL;
  }
  camp *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return PyErr_NoMemory();
  c->q = q->q;
  atomic_fetch_add(&c->q->refs, 1);
  c->token = token;
  if (endq != NULL) {
    c->endq = endq;
    atomic_fetch_add(&endq->refs, 1);
    c->end_token = end_token;
  }
  int rc;
  rlock_election *e = self->e;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_election_campaign_start(e, v, len, wait_ms, on_campaign, c);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    camp_free(c);
    return set_error(rc);
  }
  Py_RETURN_NONE;
}

static PyObject *Election_cancel(ElectionObject *self, PyObject *noargs) {
  if (self->e == NULL)
    return PyLong_FromLong(0);
  int rc = rlock_election_cancel(self->e);
  if (rc < 0 && rc != RLOCK_ECLOSED)
    return set_error(rc);
  return PyLong_FromLong(rc < 0 ? 0 : rc);
}

static PyObject *Election_proclaim(ElectionObject *self, PyObject *value) {
  const char *v;
  size_t len;
  if (value_arg(value, &v, &len) < 0 || !election_ok(self))
    return NULL;
  int rc;
  rlock_election *e = self->e;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_election_proclaim(e, v, len);
  Py_END_ALLOW_THREADS
  if (rc < 0)
    return set_error(rc);
  Py_RETURN_NONE;
}

static PyObject *Election_resign(ElectionObject *self, PyObject *noargs) {
  if (!election_ok(self))
    return NULL;
  int rc;
  rlock_election *e = self->e;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_election_resign(e);
  Py_END_ALLOW_THREADS
  if (rc < 0)
    return set_error(rc);
  Py_RETURN_NONE;
}

/* leading() -> (term, until_ms on rlock_now_ms's clock) or None */
static PyObject *Election_leading(ElectionObject *self, PyObject *noargs) {
  if (self->e == NULL)
    Py_RETURN_NONE;
  int64_t term = 0, until = 0;
  int rc = rlock_election_leading(self->e, &term, &until);
  if (rc < 0)
    return set_error(rc);
  if (rc == 0)
    Py_RETURN_NONE;
  return Py_BuildValue("(LL)", (long long)term, (long long)until);
}

static PyObject *Election_close(ElectionObject *self, PyObject *noargs) {
  election_close(self);
  Py_RETURN_NONE;
}

static PyMethodDef Election_methods[] = {
    {"campaign_start", (PyCFunction)Election_campaign_start, METH_VARARGS, NULL},
    {"cancel", (PyCFunction)Election_cancel, METH_NOARGS, NULL},
    {"proclaim", (PyCFunction)Election_proclaim, METH_O, NULL},
    {"resign", (PyCFunction)Election_resign, METH_NOARGS, NULL},
    {"leading", (PyCFunction)Election_leading, METH_NOARGS, NULL},
    {"close", (PyCFunction)Election_close, METH_NOARGS, NULL},
    {NULL}};

static PyTypeObject Election_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlock._rlock.Election",
    .tp_basicsize = sizeof(ElectionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Election_dealloc,
    .tp_methods = Election_methods,
};

/* election(client, name) -> Election (rlock_election_new: sends nothing) */
static PyObject *mod_election(PyObject *m, PyObject *args) {
  PyObject *client, *name;
  if (!PyArg_ParseTuple(args, "O!O:election", &Client_Type, &client, &name))
    return NULL;
  PyObject *nb = name_bytes(name, "name");
  if (nb == NULL)
    return NULL;
  ClientObject *c = (ClientObject *)client;
  if (!client_ok(c)) {
    Py_DECREF(nb);
    return NULL;
  }
  rlock_election *e = NULL;
  int rc = rlock_election_new(c->c, PyBytes_AS_STRING(nb), &e);
  Py_DECREF(nb);
  if (rc < 0)
    return set_error(rc);
  ElectionObject *o = PyObject_New(ElectionObject, &Election_Type);
  if (o == NULL) {
    rlock_election_free(e);
    return NULL;
  }
  o->e = e;
  o->client = Py_NewRef(client);
  return (PyObject *)o;
}

/* election_leader(client, name) -> state tuple (one read, blocking) */
static PyObject *mod_election_leader(PyObject *m, PyObject *args) {
  PyObject *client, *name;
  if (!PyArg_ParseTuple(args, "O!O:election_leader", &Client_Type, &client,
                        &name))
    return NULL;
  PyObject *nb = name_bytes(name, "name");
  if (nb == NULL)
    return NULL;
  ClientObject *c = (ClientObject *)client;
  if (!client_ok(c)) {
    Py_DECREF(nb);
    return NULL;
  }
  rlock_election_state *st = malloc(sizeof(*st));
  if (st == NULL) {
    Py_DECREF(nb);
    return PyErr_NoMemory();
  }
  rlock_election_state_init(st);
  int rc;
  rlock_client *cl = c->c;
  const char *n = PyBytes_AS_STRING(nb);
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_client_election_leader(cl, n, st);
  Py_END_ALLOW_THREADS
  Py_DECREF(nb);
  PyObject *r = rc < 0 ? set_error(rc)
                       : state_tuple(st->has_leader, st->has_value, st->term,
                                     st->ttl_ms, st->holder, st->value,
                                     st->value_len);
  free(st);
  return r;
}

typedef struct {
  PyObject_HEAD
  rlock_election_observer *o;
  camp *ctx; /* q, token */
  PyObject *client;
} ObserverObject;

static PyTypeObject Observer_Type;

static void observer_close(ObserverObject *self) {
  rlock_election_observer *o = self->o;
  self->o = NULL;
  if (o != NULL) {
    Py_BEGIN_ALLOW_THREADS
    rlock_election_observer_free(o); /* no callback after this */
    Py_END_ALLOW_THREADS
  }
  if (self->ctx != NULL) {
    camp_free(self->ctx);
    self->ctx = NULL;
  }
}

static void Observer_dealloc(ObserverObject *self) {
  observer_close(self);
  Py_XDECREF(self->client);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Observer_close(ObserverObject *self, PyObject *noargs) {
  observer_close(self);
  Py_RETURN_NONE;
}

static PyMethodDef Observer_methods[] = {
    {"close", (PyCFunction)Observer_close, METH_NOARGS, NULL},
    {NULL}};

static PyTypeObject Observer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlock._rlock.Observer",
    .tp_basicsize = sizeof(ObserverObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Observer_dealloc,
    .tp_methods = Observer_methods,
};

/* observe(client, name, poll_ms, queue or None, token) -> Observer: each
 * state ("state", token, tuple) goes to queue (None: the client's event
 * queue, read by its dispatcher thread). */
static PyObject *mod_election_observe(PyObject *m, PyObject *args) {
  PyObject *client, *name, *qo;
  long long poll_ms;
  unsigned long long token;
  if (!PyArg_ParseTuple(args, "O!OLOK:election_observe", &Client_Type, &client,
                        &name, &poll_ms, &qo, &token))
    return NULL;
  if (qo != Py_None && !PyObject_TypeCheck(qo, &Queue_Type)) {
    PyErr_SetString(PyExc_TypeError, "queue must be a Queue or None");
    return NULL;
  }
  PyObject *nb = name_bytes(name, "name");
  if (nb == NULL)
    return NULL;
  ClientObject *c = (ClientObject *)client;
  queue_t *q = NULL;
  if (!client_ok(c) ||
      (q = qo == Py_None ? client_events(c) : ((QueueObject *)qo)->q) == NULL) {
    Py_DECREF(nb);
    return NULL;
  }
  ObserverObject *o = PyObject_New(ObserverObject, &Observer_Type);
  camp *ctx = calloc(1, sizeof(*ctx));
  if (o == NULL || ctx == NULL) {
    Py_DECREF(nb);
    free(ctx);
    if (o != NULL) {
      o->o = NULL;
      o->ctx = NULL;
      o->client = NULL;
      Py_DECREF(o);
    }
    return PyErr_NoMemory();
  }
  ctx->q = q;
  atomic_fetch_add(&q->refs, 1);
  ctx->token = token;
  o->ctx = ctx;
  o->o = NULL;
  o->client = Py_NewRef(client);
  int rc;
  rlock_client *cl = c->c;
  const char *n = PyBytes_AS_STRING(nb);
  rlock_election_observer *ob = NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = rlock_election_observer_new(cl, n, poll_ms, on_state, ctx, &ob);
  Py_END_ALLOW_THREADS
  Py_DECREF(nb);
  if (rc < 0) {
    Py_DECREF(o);
    return set_error(rc);
  }
  o->o = ob;
  return (PyObject *)o;
}

/* election_queue(client): makes the client's event queue (so the Python
 * layer can start its dispatcher before the first campaign or observer). */
static PyObject *mod_election_queue(PyObject *m, PyObject *client) {
  if (!PyObject_TypeCheck(client, &Client_Type)) {
    PyErr_SetString(PyExc_TypeError, "a Client is needed");
    return NULL;
  }
  ClientObject *c = (ClientObject *)client;
  if (!client_ok(c) || client_events(c) == NULL)
    return NULL;
  Py_RETURN_NONE;
}

#define ELECTION_METHODS                                                      \
  {"election", mod_election, METH_VARARGS, NULL},                             \
      {"election_leader", mod_election_leader, METH_VARARGS, NULL},           \
      {"election_observe", mod_election_observe, METH_VARARGS, NULL},         \
      {"election_queue", mod_election_queue, METH_O, NULL},

/* ---- module functions --------------------------------------------------- */

static PyObject *mod_register(PyObject *m, PyObject *args) {
  PyObject *classes, *base;
  unsigned long main_ident;
  if (!PyArg_ParseTuple(args, "O!Ok:_register", &PyDict_Type, &classes, &base,
                        &main_ident))
    return NULL;
  Py_XSETREF(err_classes, Py_NewRef(classes));
  Py_XSETREF(err_base, Py_NewRef(base));
  main_thread_ident = main_ident;
  Py_RETURN_NONE;
}

static PyObject *mod_error_table(PyObject *m, PyObject *noargs) {
  PyObject *l = PyList_New(0);
  if (l == NULL)
    return NULL;
#define E(name, value, msg)                                                   \
  {                                                                           \
    PyObject *t = Py_BuildValue("(iss)", value, "RLOCK_" #name, msg);         \
    if (t == NULL || PyList_Append(l, t) < 0) {                               \
      Py_XDECREF(t);                                                          \
      Py_DECREF(l);                                                           \
      return NULL;                                                            \
    }                                                                         \
    Py_DECREF(t);                                                             \
  }
  RLOCK_ERRNO_MAP(E)
#undef E
  return l;
}

static PyObject *mod_make_error(PyObject *m, PyObject *args) {
  int code;
  const char *detail = "";
  if (!PyArg_ParseTuple(args, "i|s:make_error", &code, &detail))
    return NULL;
  return make_error(code, detail);
}

static PyObject *mod_owner_new(PyObject *m, PyObject *noargs) {
  return PyLong_FromUnsignedLongLong(rlock_owner_new());
}

static PyObject *mod_thread_id(PyObject *m, PyObject *noargs) {
  return PyLong_FromUnsignedLongLong(rlock_thread_id());
}

static PyObject *mod_now_ms(PyObject *m, PyObject *noargs) {
  return PyLong_FromLongLong(rlock_now_ms());
}

static PyObject *mod_version(PyObject *m, PyObject *noargs) {
  return PyUnicode_FromString(rlock_version());
}

static PyObject *mod_diag_level_name(PyObject *m, PyObject *arg) {
  long v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred())
    return NULL;
  return PyUnicode_FromString(rlock_diag_level_name((int)v));
}

static PyMethodDef mod_methods[] = {
    {"_register", mod_register, METH_VARARGS, NULL},
    {"error_table", mod_error_table, METH_NOARGS, NULL},
    {"make_error", mod_make_error, METH_VARARGS, NULL},
    {"default_options", mod_default_options, METH_NOARGS, NULL},
    {"owner_new", mod_owner_new, METH_NOARGS, NULL},
    {"thread_id", mod_thread_id, METH_NOARGS, NULL},
    {"now_ms", mod_now_ms, METH_NOARGS, NULL},
    {"version", mod_version, METH_NOARGS, NULL},
    {"diag_level_name", mod_diag_level_name, METH_O, NULL},
    {"multilock", mod_multilock, METH_O, NULL},
    {"redlock", mod_redlock, METH_O, NULL},
    {"fenced_check", mod_fenced_check, METH_VARARGS, NULL},
    {"fenced_check_async", mod_fenced_check_async, METH_VARARGS, NULL},
    {"guard", mod_guard, METH_VARARGS, NULL},
    ELECTION_METHODS
    {NULL}};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rlock._rlock",
    .m_doc = "rlock's C extension (see rlock)",
    .m_size = -1,
    .m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__rlock(void) {
  if (PyType_Ready(&Queue_Type) < 0 || PyType_Ready(&Client_Type) < 0 ||
      PyType_Ready(&Handle_Type) < 0 || PyType_Ready(&Request_Type) < 0 ||
      PyType_Ready(&Guard_Type) < 0 || PyType_Ready(&Election_Type) < 0 ||
      PyType_Ready(&Observer_Type) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&moddef);
  if (m == NULL)
    return NULL;
  main_thread_ident = PyThread_get_thread_ident();
  if (PyModule_AddObjectRef(m, "Queue", (PyObject *)&Queue_Type) < 0 ||
      PyModule_AddObjectRef(m, "Client", (PyObject *)&Client_Type) < 0 ||
      PyModule_AddObjectRef(m, "Handle", (PyObject *)&Handle_Type) < 0 ||
      PyModule_AddObjectRef(m, "Request", (PyObject *)&Request_Type) < 0 ||
      PyModule_AddStringConstant(m, "HEADER_VERSION", RLOCK_VERSION_STRING) < 0 ||
      PyModule_AddIntConstant(m, "NAME_MAX", RLOCK_NAME_MAX) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
