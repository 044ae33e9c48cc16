-- rlock's own repair script for the write lock (docs/wire-protocol.md,
-- "Trim"): sets the owner's write count back to what the client knows it
-- holds. Reaching 0 applies the write release's rules: the hash is deleted
-- with a "1" (wake all) when no read hold is left, else it goes to mode
-- "read" (a downgrade, no message).
-- KEYS[1] the lock hash, KEYS[2] channel; ARGV[1] owner .. ":write",
-- ARGV[2] the count the client knows it has, ARGV[3] PUBLISH or SPUBLISH,
-- ARGV[4] (the engine's "0": unused, a write release always sends "1").
-- Reply: the server's count before the repair.
--! include _acl_guard.lua
local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0') or 0;
local want = tonumber(ARGV[2]);
if n <= want then return n; end;
local d = denied({{'hset', KEYS[1], ARGV[1], ARGV[2]}, {'hdel', KEYS[1], ARGV[1]}, {'del', KEYS[1]}, {ARGV[3], KEYS[2], '1'}});
if d then return refuse(d); end;
if want > 0 then
  redis.call('hset', KEYS[1], ARGV[1], want);
  return n;
end;
redis.call('hdel', KEYS[1], ARGV[1]);
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1]);
  redis.call(ARGV[3], KEYS[2], '1');
else
  redis.call('hset', KEYS[1], 'mode', 'read');
end;
return n;
