-- Guarded write (guard.c; docs/fencing.md): one write on one key, run only
-- when the token is at least the highest the guard has seen; the guard
-- then records it. Nothing is written when it is refused, or when the
-- write itself fails (a data key of the wrong type).
-- KEYS[1] the guard, KEYS[2] the data key (same slot in a cluster);
-- ARGV[1] lock name, ARGV[2] token, ARGV[3] the write: "set" (ARGV[4]
-- value), "hset" (ARGV[4] field, ARGV[5] value), "incrby" (ARGV[4] delta),
-- "del".
-- Reply: set 0; hset the fields added; incrby the new value; del the keys
-- removed. Errors: see _guard_check.lua.
--! include _acl_guard.lua
--! include _guard_check.lua
local e = guard_check();
if e then return e; end;
local op, cmd = ARGV[3], nil;
if op == 'set' then cmd = {'set', KEYS[2], ARGV[4]};
elseif op == 'hset' then cmd = {'hset', KEYS[2], ARGV[4], ARGV[5]};
elseif op == 'incrby' then cmd = {'incrby', KEYS[2], ARGV[4]};
elseif op == 'del' then cmd = {'del', KEYS[2]};
else return redis.error_reply('ERR unknown guarded write ' .. tostring(op)); end;
local d = denied({cmd, {'hset', KEYS[1], 'lock', ARGV[1], 'token', ARGV[2]}});
if d then return refuse(d); end;
local r = redis.call(unpack(cmd));
guard_commit();
if op == 'set' then return 0; end;
return r;
