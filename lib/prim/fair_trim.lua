-- The fair lock's repair: lock_trim.lua (docs/wire-protocol.md, "Trim"),
-- except that the release message goes to the first waiter's own channel.
-- It only touches this client's own owner field, setting it back to the
-- hold count the client knows of (deleting it, and the key, at 0).
-- KEYS[1] lock hash, KEYS[2] channel base ("redisson_lock__channel:" + tag;
-- the queue "redisson_lock_queue:" + tag is derived from it, so the trim
-- keeps the engine's two-key shape); ARGV[1] owner, ARGV[2] the hold count
-- the client knows it has, ARGV[3] PUBLISH or SPUBLISH, ARGV[4] message "0".
-- Reply: the server's count before the repair.
--! include _acl_guard.lua
local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0');
local want = tonumber(ARGV[2]);
if n <= want then return n; end;
local queue = 'redisson_lock_queue:' .. string.sub(KEYS[2], 24);
local first = redis.call('lindex', queue, 0);
local d = denied({{'hset', KEYS[1], ARGV[1], ARGV[2]}, {'hdel', KEYS[1], ARGV[1]}, {'del', KEYS[1]}, {ARGV[3], KEYS[2] .. ':' .. (first or 'x'), ARGV[4]}});
if d then return refuse(d); end;
if want > 0 then
  redis.call('hset', KEYS[1], ARGV[1], want);
  return n;
end;
redis.call('hdel', KEYS[1], ARGV[1]);
if redis.call('hlen', KEYS[1]) == 0 then
  redis.call('del', KEYS[1]);
  if first ~= false then redis.call(ARGV[3], KEYS[2] .. ':' .. first, ARGV[4]); end;
end;
return n;
