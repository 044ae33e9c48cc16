-- Semaphore trySetPermits: sets the counter only if it does not exist.
-- KEYS[1] counter, KEYS[2] channel; ARGV[1] permits, ARGV[2] PUBLISH or
-- SPUBLISH, ARGV[3] TTL ms (0: none).
-- Reply: 1 set (and the count published), 0 the key existed.
--! include _acl_guard.lua
if redis.call('exists', KEYS[1]) == 1 then return 0; end;
local d = denied({{'set', KEYS[1], ARGV[1], 'px', '1'}, {ARGV[2], KEYS[2], ARGV[1]}});
if d then return refuse(d); end;
if tonumber(ARGV[3]) > 0 then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3]);
else
  redis.call('set', KEYS[1], ARGV[1]);
end;
redis.call(ARGV[2], KEYS[2], ARGV[1]);
return 1;
