-- Permit-expirable semaphore: the free (ARGV[3] "free") or the taken
-- (ARGV[3] "taken") permits, after every permit whose lease ran out went
-- back to the count (its new value published).
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] the caller's
-- wall clock in ms, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] which count.
-- Reply: an integer (a missing count is 0).
--! include _acl_guard.lua
local d = denied({{'zrem', KEYS[3], 'x'}, {'incrby', KEYS[1], '1'},
  {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
local back = 0;
while true do
  local gone = redis.call('zrangebyscore', KEYS[3], '0', ARGV[1], 'limit', 0, 500);
  if #gone == 0 then break; end;
  redis.call('zrem', KEYS[3], unpack(gone));
  back = back + #gone;
end;
if back > 0 then
  local total = redis.call('incrby', KEYS[1], back);
  if total > 0 then redis.call(ARGV[2], KEYS[2], total); end;
end;
if ARGV[3] == 'taken' then return redis.call('zcard', KEYS[3]); end;
local raw = redis.call('get', KEYS[1]);
if raw == false then return 0; end;
local have = tonumber(raw);
if have == nil then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' does not hold a permit count');
end;
return have;
