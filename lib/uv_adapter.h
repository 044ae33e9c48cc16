/* hiredis <-> libuv glue (see uv_adapter.c for why it is ours). */
#ifndef RLOCK_UV_ADAPTER_H
#define RLOCK_UV_ADAPTER_H

#include <async.h>
#include <hiredis.h>
#include <uv.h>

/* The hiredis compatibility shim of hiredict (Debian's libhiredict-shims-dev,
 * the hiredis 1.x API on Debian 12 backports) spells this flag
 * REDIS_DICONNECTING. */
#if !defined(REDIS_DISCONNECTING) && defined(REDIS_DICONNECTING)
#define REDIS_DISCONNECTING REDIS_DICONNECTING
#endif

/* Returns REDIS_OK, or REDIS_ERR (nothing attached, nothing leaked). */
int rlock__uv_attach(redisAsyncContext *ac, uv_loop_t *loop);

/* Readable events call `hook` instead of hiredis's own reply dispatch
 * (rlock matches replies itself, see conn.c); hiredis's callback queue is
 * never used on such a context. A connect still pending is completed first
 * (as on writability); the hook runs once connected. It may free the
 * context. */
void rlock__uv_set_read_hook(redisAsyncContext *ac,
                             void (*hook)(redisAsyncContext *ac));

#endif
