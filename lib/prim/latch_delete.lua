-- Count-down latch delete (docs/wire-protocol.md, "The count-down latch"):
-- removes the latch and, if there was one, publishes "1" (rlock's awaiters
-- re-read and find it open; Java's keep waiting for a "0" or their timeout).
-- KEYS[1] latch key, KEYS[2] latch channel; ARGV[1] message "1",
-- ARGV[2] PUBLISH or SPUBLISH.
-- Reply: 1 = deleted (and published), 0 = there was no latch.
--! include _acl_guard.lua
local d = denied({{'del', KEYS[1]}, {ARGV[2], KEYS[2], ARGV[1]}});
if d then return refuse(d); end;
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[2], KEYS[2], ARGV[1]);
  return 1;
end;
return 0;
