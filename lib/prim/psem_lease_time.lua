-- Permit-expirable semaphore: the lease time left of the permit with id
-- ARGV[1] (Java's getLeaseTime), after every permit whose lease ran out
-- went back to the count (its new value published).
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] id (16 raw
-- bytes), ARGV[2] the caller's wall clock in ms, ARGV[3] PUBLISH or
-- SPUBLISH.
-- Reply: the ms left (>= 1), -1 the permit has no lease, -2 no such permit
-- is taken (Java replies 0 there and throws).
--! include _acl_guard.lua
--! include _psem_reclaim.lua
local d = denied({{'zrem', KEYS[3], 'x'}, {'incrby', KEYS[1], '1'},
  {ARGV[3], KEYS[2], '1'}});
if d then return refuse(d); end;
reclaim(KEYS[3], KEYS[1], KEYS[2], ARGV[2], ARGV[3]);
local score = redis.call('zscore', KEYS[3], ARGV[1]);
if score == false then return -2; end;
if score == '922337203685477' then return -1; end;
return tonumber(score) - tonumber(ARGV[2]);
