-- Semaphore drainPermits: takes every available permit.
-- KEYS[1] counter. Reply: the count taken as a string (exact), "0" when
-- the counter is missing or not above 0 (then nothing is written: a drain
-- never adds permits, and a counter set to 0 from below would be permits
-- added without the message waiters need).
--! include _acl_guard.lua
local raw = redis.call('get', KEYS[1]);
if raw == false then return '0'; end;
local have = tonumber(raw);
if have == nil then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' does not hold a permit count');
end;
if have <= 0 then return '0'; end;
local d = denied({{'set', KEYS[1], '0'}});
if d then return refuse(d); end;
redis.call('set', KEYS[1], '0');
return raw;
