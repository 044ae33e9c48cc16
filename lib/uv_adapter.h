/* hiredis <-> libuv glue (see uv_adapter.c for why it is ours). */
#ifndef RLOCK_UV_ADAPTER_H
#define RLOCK_UV_ADAPTER_H

#include <async.h>
#include <hiredis.h>
#include <uv.h>

/* Returns REDIS_OK, or REDIS_ERR (nothing attached, nothing leaked). */
int rlock__uv_attach(redisAsyncContext *ac, uv_loop_t *loop);

#endif
