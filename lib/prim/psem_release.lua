-- Permit-expirable semaphore: return the permit with id ARGV[1].
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] id (16 raw
-- bytes), ARGV[2] the caller's wall clock in ms, ARGV[3] PUBLISH or
-- SPUBLISH.
-- A recorded id leaves the zset and its permit goes back to the count,
-- whose new value is published - also when its lease had run out (the
-- permit was due back anyway).
-- Reply: 1 released; 2 the id was recorded but its lease had run out (the
-- permit is back, but the caller no longer held it); 0 no such id.
--! include _acl_guard.lua
local score = redis.call('zscore', KEYS[3], ARGV[1]);
if score == false then return 0; end;
local d = denied({{'zrem', KEYS[3], ARGV[1]}, {'incrby', KEYS[1], '1'},
  {ARGV[3], KEYS[2], '1'}});
if d then return refuse(d); end;
redis.call('zrem', KEYS[3], ARGV[1]);
local total = redis.call('incrby', KEYS[1], 1);
if total > 0 then redis.call(ARGV[3], KEYS[2], total); end;
if tonumber(score) <= tonumber(ARGV[2]) then return 2; end;
return 1;
