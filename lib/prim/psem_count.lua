-- Permit-expirable semaphore: the free (ARGV[3] "free"), the taken
-- (ARGV[3] "taken") or all (ARGV[3] "total": free + taken, Java's
-- getPermits) permits, after every permit whose lease ran out went back to
-- the count (its new value published).
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] the caller's
-- wall clock in ms, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] which count.
-- Reply: an integer (a missing count is 0; for "total" too, as in Java,
-- whatever the zset holds).
--! include _acl_guard.lua
--! include _psem_reclaim.lua
local d = denied({{'zrem', KEYS[3], 'x'}, {'incrby', KEYS[1], '1'},
  {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
reclaim(KEYS[3], KEYS[1], KEYS[2], ARGV[1], ARGV[2]);
if ARGV[3] == 'taken' then return redis.call('zcard', KEYS[3]); end;
local raw = redis.call('get', KEYS[1]);
if raw == false then return 0; end;
local have = tonumber(raw);
if have == nil then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' does not hold a permit count');
end;
if ARGV[3] == 'total' then return have + redis.call('zcard', KEYS[3]); end;
return have;
