-- Semaphore: undo an acquire try whose reply the caller never read.
-- KEYS[1] counter, KEYS[2] channel, KEYS[3] the try's take record;
-- ARGV[1] PUBLISH or SPUBLISH.
-- If the try took permits (its record exists), they are added back and
-- the new total published, as a release would. Reply: the permits given
-- back (0: the try took nothing, or this ran already).
--! include _acl_guard.lua
local taken = redis.call('get', KEYS[3]);
if taken == false then return 0; end;
local d = denied({{'incrby', KEYS[1], taken}, {'del', KEYS[3]}, {ARGV[1], KEYS[2], '1'}});
if d then return refuse(d); end;
local total = redis.call('incrby', KEYS[1], taken);
redis.call('del', KEYS[3]);
redis.call(ARGV[1], KEYS[2], total);
return tonumber(taken);
