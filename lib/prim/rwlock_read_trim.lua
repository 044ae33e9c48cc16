-- rlock's own repair script for the read lock (docs/wire-protocol.md,
-- "Trim"): sets the owner's read count back to what the client knows it
-- holds, deleting the timeout keys of the holds above it; at 0 the field
-- goes, and the hash too (with a "0") when only "mode" is left.
-- KEYS[1] the lock hash, KEYS[2] channel; ARGV[1] owner, ARGV[2] the count
-- the client knows it has, ARGV[3] PUBLISH or SPUBLISH, ARGV[4] message
-- "0". The timeout keys are derived from KEYS[1] with the brace rule.
-- Reply: the server's count before the repair.
--! include _acl_guard.lua
local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0') or 0;
local want = tonumber(ARGV[2]);
if n <= want then return n; end;
local tag = KEYS[1];
if string.find(tag, '{', 1, true) == nil then tag = '{' .. tag .. '}'; end;
local base = tag .. ':' .. ARGV[1] .. ':rwlock_timeout:';
local d = denied({{'hset', KEYS[1], ARGV[1], ARGV[2]}, {'hdel', KEYS[1], ARGV[1]}, {'del', base .. n}, {'del', KEYS[1]}, {ARGV[3], KEYS[2], ARGV[4]}});
if d then return refuse(d); end;
for c = want + 1, n do
  redis.call('del', base .. c);
end;
if want > 0 then
  redis.call('hset', KEYS[1], ARGV[1], want);
  return n;
end;
redis.call('hdel', KEYS[1], ARGV[1]);
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1]);
  redis.call(ARGV[3], KEYS[2], ARGV[4]);
end;
return n;
