-- rlock's own repair script, not a Redisson one (docs/wire-protocol.md,
-- "Trim"); it only ever touches this client's own owner field. After a lost
-- acquire or unlock reply the server may count more holds than the client
-- knows of; this sets the field back to what the client knows (deleting it,
-- and the key with a release message, at 0).
-- KEYS[1] lock key, KEYS[2] channel; ARGV[1] owner, ARGV[2] the hold count
-- the client knows it has, ARGV[3] PUBLISH or SPUBLISH, ARGV[4] message "0".
-- Reply: the server's count before the repair.
--! include _acl_guard.lua
local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0');
local want = tonumber(ARGV[2]);
if n <= want then return n; end;
local d = denied({{'hset', KEYS[1], ARGV[1], ARGV[2]}, {'hdel', KEYS[1], ARGV[1]}, {'del', KEYS[1]}, {ARGV[3], KEYS[2], ARGV[4]}});
if d then return refuse(d); end;
if want > 0 then
  redis.call('hset', KEYS[1], ARGV[1], want);
  return n;
end;
redis.call('hdel', KEYS[1], ARGV[1]);
if redis.call('hlen', KEYS[1]) == 0 then
  redis.call('del', KEYS[1]);
  redis.call(ARGV[3], KEYS[2], ARGV[4]);
end;
return n;
