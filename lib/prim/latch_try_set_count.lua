-- Count-down latch trySetCount (docs/wire-protocol.md, "The count-down
-- latch"): sets the count only where there is no latch yet, and tells the
-- awaiters a (new) count is in place.
-- KEYS[1] latch key, KEYS[2] latch channel; ARGV[1] message "1",
-- ARGV[2] count (>= 1), ARGV[3] PUBLISH or SPUBLISH.
-- Reply: 1 = set (and published), 0 = the key existed (nothing changed).
--! include _acl_guard.lua
if redis.call('exists', KEYS[1]) == 1 then return 0; end;
local d = denied({{'set', KEYS[1], ARGV[2]}, {ARGV[3], KEYS[2], ARGV[1]}});
if d then return refuse(d); end;
redis.call('set', KEYS[1], ARGV[2]);
redis.call(ARGV[3], KEYS[2], ARGV[1]);
return 1;
