-- Read or write lock force unlock (docs/wire-protocol.md, "The read/write
-- lock"): deletes the hash when it is in the caller's mode, whoever holds
-- it, and publishes that mode's release message. The readers' timeout keys
-- are left to expire (as Redisson does).
-- KEYS[1] the lock hash, KEYS[2] channel; ARGV[1] message ("0" read, "1"
-- write), ARGV[2] PUBLISH or SPUBLISH, ARGV[3] mode ("read" or "write").
-- Reply: 1 = deleted (and published), 0 = not locked in that mode.
--! include _acl_guard.lua
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[3] then return 0; end;
local d = denied({{'del', KEYS[1]}, {ARGV[2], KEYS[2], ARGV[1]}});
if d then return refuse(d); end;
redis.call('del', KEYS[1]);
redis.call(ARGV[2], KEYS[2], ARGV[1]);
return 1;
