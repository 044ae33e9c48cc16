-- Permit-expirable semaphore: a new expiry for a taken permit.
-- KEYS[1] lease zset; ARGV[1] id (16 raw bytes), ARGV[2] the new expiry
-- (absolute wall-clock ms, or the no-lease sentinel), ARGV[3] the caller's
-- wall clock in ms.
-- A permit whose lease already ran out is no longer taken: it is left for
-- the next reclaim (which returns it and publishes), not renewed.
-- Reply: 1 renewed, 0 not taken.
--! include _acl_guard.lua
local score = redis.call('zscore', KEYS[1], ARGV[1]);
if score == false or tonumber(score) <= tonumber(ARGV[3]) then return 0; end;
local d = denied({{'zadd', KEYS[1], 'xx', ARGV[2], ARGV[1]}});
if d then return refuse(d); end;
redis.call('zadd', KEYS[1], 'xx', ARGV[2], ARGV[1]);
return 1;
