-- Spin lock force unlock: deletes the key, no message.
-- KEYS[1] lock key. Reply: 1 = deleted, 0 = was not locked.
--! include _acl_guard.lua
local d = denied({{'del', KEYS[1]}});
if d then return refuse(d); end;
return redis.call('del', KEYS[1]);
