/* The Lua scripts: lib/prim/lock_*.lua, embedded with their SHA-1 at build
 * time by lib/embed_lua.py (lua_embed.h). Each is sent as EVALSHA, falling
 * back to EVAL on NOSCRIPT; what each one does is in its file and in
 * docs/wire-protocol.md. */
#include "client-private.h"
#include "lua_embed.h"

static const rlock__script scripts[RLOCK__SCRIPT_COUNT] = {
    {"acquire", RLOCK__LUA_LOCK_ACQUIRE_BODY, RLOCK__LUA_LOCK_ACQUIRE_SHA,
     false},
    {"release", RLOCK__LUA_LOCK_RELEASE_BODY, RLOCK__LUA_LOCK_RELEASE_SHA,
     false},
    {"force_unlock", RLOCK__LUA_LOCK_FORCE_UNLOCK_BODY,
     RLOCK__LUA_LOCK_FORCE_UNLOCK_SHA, false},
    {"renew", RLOCK__LUA_LOCK_RENEW_BODY, RLOCK__LUA_LOCK_RENEW_SHA, false},
    /* Always sent as EVAL: the trim's place in the order matters, and an
     * EVALSHA answered NOSCRIPT would be re-sent behind later commands. */
    {"trim", RLOCK__LUA_LOCK_TRIM_BODY, RLOCK__LUA_LOCK_TRIM_SHA, true},
};

const rlock__script *rlock__script_get(int id) { return &scripts[id]; }
