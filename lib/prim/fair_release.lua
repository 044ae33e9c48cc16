-- Fair lock release with an unlock request latch (docs/wire-protocol.md,
-- "The fair lock"). The latch makes a re-sent unlock answer what the first
-- one did. The release message goes to the first waiter's own channel only.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] channel base
-- (a waiter's channel is KEYS[4] .. ':' .. its owner), KEYS[5] latch;
-- ARGV[1] message "0", ARGV[2] lease ms to re-apply, ARGV[3] owner,
-- ARGV[4] wall clock ms, ARGV[5] PUBLISH or SPUBLISH, ARGV[6] latch TTL ms.
-- Reply: nil = not held by owner (also when the lock is not held at all:
-- the first waiter is then still told, to keep the queue moving); 0 = still
-- held; 1 = released.
--! include _acl_guard.lua
--! include _fair_prune.lua
local latch = redis.call('get', KEYS[5]);
if latch ~= false then return tonumber(latch); end;
local first = redis.call('lindex', KEYS[2], 0);
local d = denied({{'zrem', KEYS[3], ARGV[3]}, {'lpop', KEYS[2]}, {'hincrby', KEYS[1], ARGV[3], '-1'}, {'pexpire', KEYS[1], ARGV[2]}, {'del', KEYS[1]}, {ARGV[5], KEYS[4] .. ':' .. (first or ARGV[3]), ARGV[1]}, {'set', KEYS[5], '0', 'px', ARGV[6]}});
if d then return refuse(d); end;
local now = tonumber(ARGV[4]);
first = prune(now);
if redis.call('exists', KEYS[1]) == 0 then
  if first ~= false then redis.call(ARGV[5], KEYS[4] .. ':' .. first, ARGV[1]); end;
  return nil;
end;
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[5], 0, 'px', ARGV[6]);
  return 0;
end;
redis.call('del', KEYS[1]);
if first ~= false then redis.call(ARGV[5], KEYS[4] .. ':' .. first, ARGV[1]); end;
redis.call('set', KEYS[5], 1, 'px', ARGV[6]);
return 1;
