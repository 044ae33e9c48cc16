-- Shared body of fair_try.lua and nonreentrant_fair_try.lua, included
-- after _acl_guard.lua, _fair_prune.lua and a line that sets `reacquire`:
-- false for the fair lock (the owner's own field is re-entered), or the
-- marker of the non-reentrant fair lock (ARGV[5]; the owner's own field is
-- refused with an error reply starting with it, changing nothing).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines;
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] wall clock ms, ARGV[4] wait ms.
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a read/write lock (it has a mode field), not a fair lock');
end;
local d = denied({{'lpop', KEYS[2]}, {'zrem', KEYS[3], ARGV[2]}, {'zincrby', KEYS[3], '0', ARGV[2]}, {'hset', KEYS[1], ARGV[2], '1'}, {'hincrby', KEYS[1], ARGV[2], '1'}, {'pexpire', KEYS[1], ARGV[1]}});
if d then return refuse(d); end;
local now = tonumber(ARGV[3]);
local wait = tonumber(ARGV[4]);
prune(now);
local held = redis.call('exists', KEYS[1]) == 1;
local head = redis.call('lindex', KEYS[2], 0);
if (not held) and (head == false or head == ARGV[2]) then
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
return 1;
