-- Fair lock force unlock (docs/wire-protocol.md, "The fair lock"): deletes
-- the lock hash whoever holds it and tells the first waiter. The queue is
-- kept (its waiters still wait their turn).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] channel base;
-- ARGV[1] message "0", ARGV[2] wall clock ms, ARGV[3] PUBLISH or SPUBLISH.
-- Reply: 1 = deleted (and the first waiter told), 0 = was not locked.
--! include _acl_guard.lua
--! include _fair_prune.lua
local first = redis.call('lindex', KEYS[2], 0);
local d = denied({{'zrem', KEYS[3], first or 'x'}, {'lpop', KEYS[2]}, {'del', KEYS[1]}, {ARGV[3], KEYS[4] .. ':' .. (first or 'x'), ARGV[1]}});
if d then return refuse(d); end;
local now = tonumber(ARGV[2]);
first = prune(now);
if redis.call('del', KEYS[1]) == 1 then
  if first ~= false then redis.call(ARGV[3], KEYS[4] .. ':' .. first, ARGV[1]); end;
  return 1;
end;
return 0;
