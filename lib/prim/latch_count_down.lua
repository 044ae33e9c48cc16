-- Count-down latch countDown (docs/wire-protocol.md, "The count-down
-- latch"): one step down; at or below 0 the key goes (a count-down on a
-- missing key must not leave "-1" behind), and exactly at 0 the awaiters are
-- told the latch opened.
-- KEYS[1] latch key, KEYS[2] latch channel; ARGV[1] message "0",
-- ARGV[2] PUBLISH or SPUBLISH.
-- Reply: the count left (0 when the latch is open; Java's script replies
-- nil, and no caller of either reads more than success).
--! include _acl_guard.lua
local d = denied({{'decr', KEYS[1]}, {'del', KEYS[1]}, {ARGV[2], KEYS[2], ARGV[1]}});
if d then return refuse(d); end;
local v = redis.call('decr', KEYS[1]);
if v <= 0 then
  redis.call('del', KEYS[1]);
  if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]); end;
  return 0;
end;
return v;
