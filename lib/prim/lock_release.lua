-- RLock release with an unlock request latch (docs/wire-protocol.md,
-- "Release"). The latch makes a re-sent unlock (after a lost reply) answer
-- what the first one did instead of releasing a second hold.
-- KEYS[1] lock key, KEYS[2] lock channel, KEYS[3] unlock latch key;
-- ARGV[1] message "0", ARGV[2] lease ms to re-apply, ARGV[3] owner,
-- ARGV[4] PUBLISH or SPUBLISH, ARGV[5] latch TTL ms.
-- Reply: nil = not held by owner; 0 = still held; 1 = released.
--! include _acl_guard.lua
local latch = redis.call('get', KEYS[3]);
if latch ~= false then return tonumber(latch); end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local d = denied({{'hincrby', KEYS[1], ARGV[3], '-1'}, {'pexpire', KEYS[1], ARGV[2]}, {'del', KEYS[1]}, {ARGV[4], KEYS[2], ARGV[1]}, {'set', KEYS[3], '0', 'px', ARGV[5]}});
if d then return refuse(d); end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
  return 0;
end;
redis.call('del', KEYS[1]);
redis.call(ARGV[4], KEYS[2], ARGV[1]);
redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
return 1;
