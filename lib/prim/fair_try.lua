-- Fair lock single attempt (Redisson's tryLock() without a wait): the same
-- prune, acquire and re-entry as fair_acquire.lua, but a caller that does
-- not get the lock is never queued. Note the argument order: now comes
-- before the wait, as in Java's tryLock().
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines;
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] wall clock ms, ARGV[4] wait ms.
-- Reply: nil = acquired (or re-entered); 1 = not acquired. A WRONGKIND
-- error when the key is a read/write lock's hash.
--! include _acl_guard.lua
--! include _fair_prune.lua
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
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return 1;
