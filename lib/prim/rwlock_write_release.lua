-- Write lock release with an unlock request latch (docs/wire-protocol.md,
-- "The read/write lock").
-- KEYS[1] the lock hash, KEYS[2] channel, KEYS[3] unlock latch key;
-- ARGV[1] message "1", ARGV[2] lease ms to re-apply while still held,
-- ARGV[3] owner .. ":write", ARGV[4] PUBLISH or SPUBLISH, ARGV[5] latch TTL.
-- Reply: nil = not write-held by owner (nothing changes, nothing is
-- published); 0 = still held; 1 = released, the hash deleted and "1"
-- published (every waiter may try: readers can all get in); 2 = released
-- and downgraded: the owner's read holds remain, mode becomes "read" and,
-- as in Redisson, nothing is published (the client wakes its own waiters).
--! include _acl_guard.lua
local latch = redis.call('get', KEYS[3]);
if latch ~= false then return tonumber(latch); end;
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then return nil; end;
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil; end;
local d = denied({{'hincrby', KEYS[1], ARGV[3], '-1'}, {'pexpire', KEYS[1], ARGV[2]}, {'del', KEYS[1]}, {'hset', KEYS[1], 'mode', 'read'}, {ARGV[4], KEYS[2], ARGV[1]}, {'set', KEYS[3], '0', 'px', ARGV[5]}});
if d then return refuse(d); end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
  return 0;
end;
redis.call('hdel', KEYS[1], ARGV[3]);
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1]);
  redis.call(ARGV[4], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;
redis.call('hset', KEYS[1], 'mode', 'read');
redis.call('set', KEYS[3], 2, 'px', ARGV[5]);
return 2;
