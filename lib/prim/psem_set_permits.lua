-- Permit-expirable semaphore: setPermits(n): make the pool n permits in
-- all (free + taken).
-- KEYS[1] count, KEYS[2] channel, KEYS[3] lease zset; ARGV[1] n, ARGV[2]
-- PUBLISH or SPUBLISH.
-- A missing count is set to n. Otherwise the pool's size is the count plus
-- every member of the zset (as in Java, expired ones are not reclaimed
-- first); when it differs from n the count moves by the difference, and
-- may go below 0 when more than n permits are taken. Both paths publish n,
-- as Java does (any value >= 1 wakes waiters, who then try).
-- Reply: 1 changed, 0 the pool already had n permits. A count that is not
-- a number is a WRONGKIND error.
--! include _acl_guard.lua
local raw = redis.call('get', KEYS[1]);
local d = denied({{'set', KEYS[1], ARGV[1]}, {'incrby', KEYS[1], '1'},
  {ARGV[2], KEYS[2], '1'}});
if d then return refuse(d); end;
if raw == false then
  redis.call('set', KEYS[1], ARGV[1]);
  redis.call(ARGV[2], KEYS[2], ARGV[1]);
  return 1;
end;
local have = tonumber(raw);
if have == nil then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' does not hold a permit count');
end;
local size = have + redis.call('zcard', KEYS[3]);
local want = tonumber(ARGV[1]);
if size == want then return 0; end;
redis.call('incrby', KEYS[1], want - size);
redis.call(ARGV[2], KEYS[2], ARGV[1]);
return 1;
