-- FasterMultiLock acquire (docs/wire-protocol.md, "The FasterMultiLock"):
-- one hash per group; for each value's field f: f -> holder, and per holder
-- f:<owner>:expire_time (absolute client wall-clock ms) and
-- f:<owner>:lock_count. Java's wait-loop form.
-- KEYS[1] the group hash; ARGV[1] lease ms, ARGV[2] now (client wall
-- clock, ms), ARGV[3] owner, ARGV[4..] the fields.
-- Reply: nil = every field taken (or re-entered); an integer = ms until the
-- latest other holder's hold of one of the fields ends (the wait hint).
-- Unlike Java, taking a field whose other holder's hold has ended also
-- deletes that holder's expire_time and lock_count fields (Java leaves them
-- until the hash expires); Java reads them as ended all the same.
--! include _acl_guard.lua
local lease = tonumber(ARGV[1]);
local now = tonumber(ARGV[2]);
local owner = ARGV[3];
local existed = redis.call('exists', KEYS[1]) == 1;
if existed then
  local latest = nil;
  for i = 4, #ARGV do
    local holder = redis.call('hget', KEYS[1], ARGV[i]);
    if holder and holder ~= owner then
      local e = tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. holder .. ':expire_time'));
      if e and e > now and (latest == nil or e > latest) then latest = e; end;
    end;
  end;
  if latest then return latest - now; end;
end;
local d = denied({{'hset', KEYS[1], 'f', 'v'}, {'hdel', KEYS[1], 'f'}, {'hincrby', KEYS[1], 'f', '1'}, {'pexpire', KEYS[1], ARGV[1]}});
if d then return refuse(d); end;
for i = 4, #ARGV do
  local f = ARGV[i];
  local holder = redis.call('hget', KEYS[1], f);
  if holder and holder ~= owner then
    redis.call('hdel', KEYS[1], f .. ':' .. holder .. ':expire_time', f .. ':' .. holder .. ':lock_count');
  end;
  redis.call('hset', KEYS[1], f, owner);
  local ek = f .. ':' .. owner .. ':expire_time';
  local e = tonumber(redis.call('hget', KEYS[1], ek));
  if e == nil or e < lease + now then redis.call('hset', KEYS[1], ek, lease + now); end;
  redis.call('hincrby', KEYS[1], f .. ':' .. owner .. ':lock_count', 1);
end;
if existed then
  local t = redis.call('pttl', KEYS[1]);
  if t > 0 and t < lease then redis.call('pexpire', KEYS[1], lease); end;
else
  redis.call('pexpire', KEYS[1], lease);
end;
return nil;
