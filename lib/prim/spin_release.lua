-- Spin lock release with an unlock request latch (docs/wire-protocol.md,
-- "The spin lock"): RLock's release without a message (nobody listens).
-- KEYS[1] lock key, KEYS[2] unlock latch key; ARGV[1] lease ms to
-- re-apply, ARGV[2] owner, ARGV[3] latch TTL ms.
-- Reply: nil = not held by owner; 0 = still held; 1 = released.
--! include _acl_guard.lua
local latch = redis.call('get', KEYS[2]);
if latch ~= false then return tonumber(latch); end;
if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then return nil; end;
local d = denied({{'hincrby', KEYS[1], ARGV[2], '-1'}, {'pexpire', KEYS[1], ARGV[1]}, {'del', KEYS[1]}, {'set', KEYS[2], '0', 'px', ARGV[3]}});
if d then return refuse(d); end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[1]);
  redis.call('set', KEYS[2], 0, 'px', ARGV[3]);
  return 0;
end;
redis.call('del', KEYS[1]);
redis.call('set', KEYS[2], 1, 'px', ARGV[3]);
return 1;
