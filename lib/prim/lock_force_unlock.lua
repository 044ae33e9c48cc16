-- RLock force unlock (docs/wire-protocol.md, "Force unlock"): deletes the
-- key whatever it holds and, if there was one, publishes the release.
-- KEYS[1] lock key, KEYS[2] channel; ARGV[1] message "0", ARGV[2] PUBLISH
-- or SPUBLISH. Reply: 1 = deleted (and published), 0 = was not locked.
--! include _acl_guard.lua
local d = denied({{'del', KEYS[1]}, {ARGV[2], KEYS[2], ARGV[1]}});
if d then return refuse(d); end;
if (redis.call('del', KEYS[1]) == 1) then
  redis.call(ARGV[2], KEYS[2], ARGV[1]);
  return 1;
end;
return 0;
