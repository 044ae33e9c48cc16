-- Fair lock queue-leave (Redisson's acquireFailed; docs/wire-protocol.md,
-- "The fair lock"): a waiter that gives up (timeout, cancel, interrupt,
-- close, error) leaves the queue and the deadline set, and every waiter
-- behind it moves up by its wait. A no-op when the owner is not queued, so
-- a re-send is harmless. rlock's addition: when the leaver was first in
-- line and the lock is free, the new first waiter is told (it may have been
-- sleeping on its deadline hint, with nobody left to wake it).
-- KEYS[1] queue, KEYS[2] deadlines, KEYS[3] lock hash, KEYS[4] channel base;
-- ARGV[1] owner, ARGV[2] its wait ms, ARGV[3] PUBLISH or SPUBLISH.
-- Reply: nil.
--! include _acl_guard.lua
local queue = redis.call('lrange', KEYS[1], 0, -1);
local at = nil;
for i = 1, #queue do
  if queue[i] == ARGV[1] then at = i; break; end;
end;
local nextw = queue[(at or 0) + 1] or 'x';
local d = denied({{'zincrby', KEYS[2], '0', ARGV[1]}, {'zrem', KEYS[2], ARGV[1]}, {'lrem', KEYS[1], '0', ARGV[1]}, {ARGV[3], KEYS[4] .. ':' .. nextw, '0'}});
if d then return refuse(d); end;
if at == nil then
  redis.call('zrem', KEYS[2], ARGV[1]);
  return nil;
end;
local wait = tonumber(ARGV[2]);
for i = at + 1, #queue do
  if redis.call('zscore', KEYS[2], queue[i]) ~= false then
    redis.call('zincrby', KEYS[2], -wait, queue[i]);
  end;
end;
redis.call('zrem', KEYS[2], ARGV[1]);
redis.call('lrem', KEYS[1], 0, ARGV[1]);
if at == 1 and #queue > 1 and redis.call('exists', KEYS[3]) == 0 then
  redis.call(ARGV[3], KEYS[4] .. ':' .. queue[2], '0');
end;
return nil;
