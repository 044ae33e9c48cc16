-- Guarded write of the caller's own script, head (guard.c; docs/fencing.md).
-- guard.c sends this head, the caller's script as the body of the function
-- opened on the last line, and guard_eval_tail.lua, as one EVAL. The
-- caller's script sees its own keys and arguments as KEYS and ARGV.
-- KEYS[1] the guard, KEYS[2..] the caller's keys (same slot in a cluster);
-- ARGV[1] lock name, ARGV[2] token, ARGV[3..] the caller's arguments.
--! include _acl_guard.lua
--! include _guard_check.lua
local e = guard_check();
if e then return e; end;
local d = denied({{'hset', KEYS[1], 'lock', ARGV[1], 'token', ARGV[2]}});
if d then return refuse(d); end;
local RLOCK_GUARD_KEYS, RLOCK_GUARD_ARGV = KEYS, ARGV;
local KEYS, ARGV = {}, {};
for i = 2, #RLOCK_GUARD_KEYS do KEYS[i - 1] = RLOCK_GUARD_KEYS[i]; end;
for i = 3, #RLOCK_GUARD_ARGV do ARGV[i - 2] = RLOCK_GUARD_ARGV[i]; end;
local function rlock_guarded_write()
