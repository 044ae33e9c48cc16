-- Shared prelude of the fair lock's scripts (included with
-- "--! include _fair_prune.lua"): the queue prune that each of them runs
-- before it reads the queue's head, so the prune is written once.
--
-- prune(now): drops waiters at the head of the queue KEYS[2] whose deadline
-- in the zset KEYS[3] has passed at wall clock `now` ms (they gave up or
-- died), or that have no deadline left; returns the first waiter that
-- stays, or false when the queue is empty.
local function prune(now)
  while true do
    local first = redis.call('lindex', KEYS[2], 0);
    if first == false then return false; end;
    local s = redis.call('zscore', KEYS[3], first);
    if s == false or tonumber(s) > now then return first; end;
    redis.call('zrem', KEYS[3], first);
    redis.call('lpop', KEYS[2]);
  end;
end;
