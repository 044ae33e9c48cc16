-- Permit-expirable semaphore: undo an acquire try whose reply the caller
-- never read (cancel, close, deadline, lost connection).
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] the try's
-- permit id (16 raw bytes), ARGV[2] PUBLISH or SPUBLISH.
-- The id was made by this client for this try alone: if it is recorded,
-- the try took a permit, which goes back (and the new count is published).
-- Reply: 1 given back, 0 the try took nothing (or this ran already).
--! include _acl_guard.lua
if redis.call('zscore', KEYS[3], ARGV[1]) == false then return 0; end;
local d = denied({{'zrem', KEYS[3], ARGV[1]}, {'incrby', KEYS[1], '1'},
  {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
redis.call('zrem', KEYS[3], ARGV[1]);
local total = redis.call('incrby', KEYS[1], 1);
if total > 0 then redis.call(ARGV[2], KEYS[2], total); end;
return 1;
