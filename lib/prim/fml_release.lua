-- FasterMultiLock release (docs/wire-protocol.md, "The FasterMultiLock").
-- KEYS[1] the group hash, KEYS[2] the group's lock channel, KEYS[3] the
-- unlock latch; ARGV[1] owner, ARGV[2] message "0", ARGV[3] lease ms to
-- re-apply while still held, ARGV[4] PUBLISH or SPUBLISH, ARGV[5] latch TTL
-- ms, ARGV[6] now (client wall clock, ms), ARGV[7..] the fields.
-- Reply: nil = a field was not held by the owner (nothing changed; Java
-- changes the fields before the failing one), 1 = every field's last hold
-- released, 0 = some still held (re-entered). The message is published when
-- a field was freed (Java publishes after any release, freed or not).
--! include _acl_guard.lua
local latch = redis.call('get', KEYS[3]);
if latch ~= false then return tonumber(latch); end;
if redis.call('exists', KEYS[1]) == 0 then
  redis.call(ARGV[4], KEYS[2], ARGV[2]);
  return nil;
end;
local owner = ARGV[1];
local now = tonumber(ARGV[6]);
for i = 7, #ARGV do
  local e = tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. owner .. ':expire_time'));
  if e == nil or e < now then return nil; end;
end;
local d = denied({{'hincrby', KEYS[1], 'f', '-1'}, {'hdel', KEYS[1], 'f'}, {'hset', KEYS[1], 'f', 'v'}, {'pexpire', KEYS[1], ARGV[3]}, {ARGV[4], KEYS[2], ARGV[2]}, {'set', KEYS[3], '0', 'px', ARGV[5]}});
if d then return refuse(d); end;
local newExp = tonumber(ARGV[3]) + now;
local all = true;
local freed = false;
for i = 7, #ARGV do
  local f = ARGV[i];
  local ek = f .. ':' .. owner .. ':expire_time';
  local ck = f .. ':' .. owner .. ':lock_count';
  if redis.call('hincrby', KEYS[1], ck, -1) <= 0 then
    redis.call('hdel', KEYS[1], f, ek, ck);
    freed = true;
  else
    all = false;
    if tonumber(redis.call('hget', KEYS[1], ek)) < newExp then redis.call('hset', KEYS[1], ek, newExp); end;
  end;
end;
if freed then redis.call(ARGV[4], KEYS[2], ARGV[2]); end;
if all then
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;
redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
if tonumber(ARGV[3]) > redis.call('pttl', KEYS[1]) then redis.call('pexpire', KEYS[1], ARGV[3]); end;
return 0;
