-- Semaphore releaseIfExists: adds ARGV[1] permits only when the counter
-- exists, and then publishes the new total.
-- KEYS[1] counter, KEYS[2] channel; ARGV[1] permits (>= 1), ARGV[2]
-- PUBLISH or SPUBLISH.
-- Reply: 1 released, 0 there is no semaphore (nothing created, nothing
-- published). INCRBY refuses a counter that is not a number.
--! include _acl_guard.lua
if redis.call('exists', KEYS[1]) == 0 then return 0; end;
local d = denied({{'incrby', KEYS[1], ARGV[1]}, {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
local total = redis.call('incrby', KEYS[1], ARGV[1]);
redis.call(ARGV[2], KEYS[2], total);
return 1;
