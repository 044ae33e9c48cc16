-- FasterMultiLock renewal (Java's FastMultilockTask script).
-- KEYS[1] the group hash; ARGV[1] lease ms, ARGV[2] now (client wall
-- clock, ms), ARGV[3] owner, ARGV[4..] the fields.
-- Reply: 1 = every field held by the owner and renewed to now + lease;
-- 0 = the hash is gone or a field is not the owner's (nothing renewed
-- after it).
--! include _acl_guard.lua
if redis.call('exists', KEYS[1]) == 0 then return 0; end;
local d = denied({{'hset', KEYS[1], 'f', 'v'}, {'pexpire', KEYS[1], ARGV[1]}});
if d then return refuse(d); end;
local exp = tonumber(ARGV[2]) + tonumber(ARGV[1]);
for i = 4, #ARGV do
  if redis.call('hget', KEYS[1], ARGV[i]) ~= ARGV[3] then return 0; end;
  local ek = ARGV[i] .. ':' .. ARGV[3] .. ':expire_time';
  local e = tonumber(redis.call('hget', KEYS[1], ek));
  if e == nil or e < exp then redis.call('hset', KEYS[1], ek, exp); end;
end;
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[1], ARGV[1]); end;
return 1;
