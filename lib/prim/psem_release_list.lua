-- Permit-expirable semaphore: return the permits with ids ARGV[3..], all
-- or none (Java's tryRelease / release of a list).
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] the caller's
-- wall clock in ms, ARGV[2] PUBLISH or SPUBLISH, ARGV[3..] the ids (16 raw
-- bytes each, distinct: the client refuses a list with a repeat).
-- When any id is not taken, or its lease has run out, nothing changes and
-- the reply is 0. Otherwise every permit whose lease ran out goes back
-- first (the reclaim, published as usual), then the ids leave the zset,
-- their permits go back to the count, and the number released - not the
-- new count - is published, as Java does.
-- Reply: the number released (the number of ids), or 0.
--! include _acl_guard.lua
--! include _psem_reclaim.lua
local now = tonumber(ARGV[1]);
local ids = {};
for i = 3, #ARGV do
  local score = redis.call('zscore', KEYS[3], ARGV[i]);
  if score == false or tonumber(score) <= now then return 0; end;
  ids[#ids + 1] = ARGV[i];
end;
if #ids == 0 then return 0; end;
local d = denied({{'zrem', KEYS[3], 'x'}, {'incrby', KEYS[1], '1'},
  {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
reclaim(KEYS[3], KEYS[1], KEYS[2], ARGV[1], ARGV[2]);
local released = redis.call('zrem', KEYS[3], unpack(ids));
redis.call('incrby', KEYS[1], released);
redis.call(ARGV[2], KEYS[2], released);
return released;
