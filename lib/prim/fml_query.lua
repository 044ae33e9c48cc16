-- FasterMultiLock queries. KEYS[1] the group hash; ARGV[1] "locked" or
-- "held", ARGV[2] now (client wall clock, ms), ARGV[3] owner ("" for
-- "locked"), ARGV[4..] the fields.
-- "locked": 1 if any field has a holder whose hold has not ended.
-- "held": 1 if every field is held by the owner, not ended (Java's
-- isHeldByThread skips the first field).
local now = tonumber(ARGV[2]);
for i = 4, #ARGV do
  local holder = redis.call('hget', KEYS[1], ARGV[i]);
  if ARGV[1] == 'held' then holder = ARGV[3]; end;
  local e = holder and tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. holder .. ':expire_time'));
  local live = e ~= nil and e ~= false and e >= now;
  if ARGV[1] == 'locked' and live then return 1; end;
  if ARGV[1] == 'held' and not live then return 0; end;
end;
if ARGV[1] == 'held' then return 1; end;
return 0;
