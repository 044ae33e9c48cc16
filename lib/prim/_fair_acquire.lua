-- Shared body of fair_acquire.lua and nonreentrant_fair_acquire.lua, included
-- after _acl_guard.lua, _fair_prune.lua and a line that sets `reacquire`:
-- false for the fair lock (the owner's own field is re-entered), or the
-- marker of the non-reentrant fair lock (ARGV[5]; the owner's own field is
-- refused with an error reply starting with it, changing nothing).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines;
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] wait ms, ARGV[4] wall clock ms.
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a read/write lock (it has a mode field), not a fair lock');
end;
local d = denied({{'lpop', KEYS[2]}, {'rpush', KEYS[2], ARGV[2]}, {'zrem', KEYS[3], ARGV[2]}, {'zadd', KEYS[3], '0', ARGV[2]}, {'zincrby', KEYS[3], '0', ARGV[2]}, {'hset', KEYS[1], ARGV[2], '1'}, {'hincrby', KEYS[1], ARGV[2], '1'}, {'pexpire', KEYS[1], ARGV[1]}});
if d then return refuse(d); end;
local now = tonumber(ARGV[4]);
local wait = tonumber(ARGV[3]);
-- Drop waiters at the head whose deadline has passed (they gave up or died).
prune(now);
local held = redis.call('exists', KEYS[1]) == 1;
local head = redis.call('lindex', KEYS[2], 0);
if (not held) and (head == false or head == ARGV[2]) then
  -- Free and our turn: leave the queue; everyone behind moves up by our wait.
  redis.call('lpop', KEYS[2]);
  redis.call('zrem', KEYS[3], ARGV[2]);
  local rest = redis.call('zrange', KEYS[3], 0, -1);
  for i = 1, #rest do
    redis.call('zincrby', KEYS[3], -wait, rest[i]);
  end;
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if held and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  -- The non-reentrant fair lock: refused before any queue step, so the
  -- owner is never queued.
  if reacquire then
    return redis.error_reply(reacquire .. ' ' .. KEYS[1] .. ' is non-reentrant and already held by ' .. ARGV[2]);
  end;
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  -- Already queued: the holder's TTL, or 0 while the lock is free but the
  -- head has yet to take it.
  if not held then return 0; end;
  return redis.call('pttl', KEYS[1]);
end;
-- Join the tail: deadline = the deadline of the waiter ahead (else now plus
-- the holder's PTTL) plus our own wait.
local base = nil;
local last = redis.call('lindex', KEYS[2], -1);
if last ~= false and last ~= ARGV[2] then
  local s = redis.call('zscore', KEYS[3], last);
  if s ~= false then base = tonumber(s) - now; end;
end;
if base == nil then base = redis.call('pttl', KEYS[1]); end;
if redis.call('zadd', KEYS[3], base + wait + now, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2]);
end;
-- The wait hint: the time until the waiter ahead's deadline; when that is
-- already past (or nobody is ahead), the holder's PTTL, or 0 when the lock
-- is free (another waiter is first in line).
if base >= 0 then return base; end;
if not held then return 0; end;
return redis.call('pttl', KEYS[1]);
