-- Permit-expirable semaphore: addPermits (ARGV[1] may be negative).
-- KEYS[1] count, KEYS[2] channel; ARGV[1] permits, ARGV[2] PUBLISH or
-- SPUBLISH.
-- The new count is published when it is above 0 (a count of 0 or less
-- frees nothing, and Java's listener refuses a negative one).
-- Reply: the new count. INCRBY refuses a count that is not a number.
--! include _acl_guard.lua
local d = denied({{'incrby', KEYS[1], ARGV[1]}, {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
local total = redis.call('incrby', KEYS[1], ARGV[1]);
if total > 0 then redis.call(ARGV[2], KEYS[2], total); end;
return total;
