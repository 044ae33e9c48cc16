-- RLock acquire (docs/wire-protocol.md, "Acquire").
-- KEYS[1] lock key; ARGV[1] lease ms, ARGV[2] owner.
-- Reply: nil = acquired (or re-entered); otherwise the holder's PTTL; a
-- WRONGKIND error when the key is a read/write lock's hash (its "mode"
-- field), which an RLock field would corrupt.
--! include _acl_guard.lua
local reacquire = false;
--! include _lock_acquire.lua
