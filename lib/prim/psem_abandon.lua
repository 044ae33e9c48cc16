-- Permit-expirable semaphore: undo an acquire try whose reply the caller
-- never read (cancel, close, deadline, lost connection).
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] the try's
-- first permit id (16 raw bytes), ARGV[2] PUBLISH or SPUBLISH, ARGV[3..]
-- the try's further ids (an acquire of several permits).
-- The ids were made by this client for this try alone: those recorded were
-- taken by the try and go back (and the new count is published). One whose
-- lease ran out and was reclaimed meanwhile is back already.
-- Reply: the permits given back, 0 the try took nothing (or this ran
-- already).
--! include _acl_guard.lua
local ids = {ARGV[1]};
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i]; end;
local taken = {};
for _, id in ipairs(ids) do
  if redis.call('zscore', KEYS[3], id) ~= false then taken[#taken + 1] = id; end;
end;
if #taken == 0 then return 0; end;
local d = denied({{'zrem', KEYS[3], ARGV[1]}, {'incrby', KEYS[1], '1'},
  {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
redis.call('zrem', KEYS[3], unpack(taken));
local total = redis.call('incrby', KEYS[1], #taken);
if total > 0 then redis.call(ARGV[2], KEYS[2], total); end;
return #taken;
