-- The spin lock's repair: lock_trim.lua (docs/wire-protocol.md, "Trim")
-- without the release message, as a spin lock has no channel. It only
-- touches this client's own owner field, setting it back to the hold count
-- the client knows of (deleting it, and the key, at 0).
-- KEYS[1] lock key, KEYS[2] unused; ARGV[1] owner, ARGV[2] the hold count
-- the client knows it has; ARGV[3], ARGV[4] unused.
-- Reply: the server's count before the repair.
--! include _acl_guard.lua
local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0');
local want = tonumber(ARGV[2]);
if n <= want then return n; end;
local d = denied({{'hset', KEYS[1], ARGV[1], ARGV[2]}, {'hdel', KEYS[1], ARGV[1]}, {'del', KEYS[1]}});
if d then return refuse(d); end;
if want > 0 then
  redis.call('hset', KEYS[1], ARGV[1], want);
  return n;
end;
redis.call('hdel', KEYS[1], ARGV[1]);
if redis.call('hlen', KEYS[1]) == 0 then
  redis.call('del', KEYS[1]);
end;
return n;
