-- FasterMultiLock force unlock: each field's holder and its two fields are
-- deleted, whoever holds it, and the message published.
-- KEYS[1] the group hash, KEYS[2] its lock channel; ARGV[1] message "0",
-- ARGV[2] PUBLISH or SPUBLISH, ARGV[3..] the fields.
-- Reply: the number of fields that had a holder. (Java fails with a Lua
-- error on a field without holder, after deleting the ones before it.)
--! include _acl_guard.lua
local d = denied({{'hdel', KEYS[1], 'f'}, {ARGV[2], KEYS[2], ARGV[1]}});
if d then return refuse(d); end;
local n = 0;
for i = 3, #ARGV do
  local holder = redis.call('hget', KEYS[1], ARGV[i]);
  if holder then
    redis.call('hdel', KEYS[1], ARGV[i], ARGV[i] .. ':' .. holder .. ':expire_time', ARGV[i] .. ':' .. holder .. ':lock_count');
    n = n + 1;
  end;
end;
redis.call(ARGV[2], KEYS[2], ARGV[1]);
return n;
