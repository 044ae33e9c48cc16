-- Shared body of RLock's acquire (lock_acquire.lua) and the non-reentrant
-- lock's (nonreentrant_acquire.lua), included after a line that sets
-- `reacquire`: false for RLock (the owner's own field is re-entered), or the
-- marker string of the non-reentrant lock (the owner's own field is refused
-- with an error reply starting with the marker, changing nothing).
-- KEYS[1] lock key; ARGV[1] lease ms, ARGV[2] owner.
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a read/write lock (it has a mode field), not this kind of lock');
end;
local d = denied({{'hincrby', KEYS[1], ARGV[2], '1'}, {'pexpire', KEYS[1], ARGV[1]}});
if d then return refuse(d); end;
local mine = redis.call('hexists', KEYS[1], ARGV[2]) == 1;
if mine and reacquire then
  return redis.error_reply(reacquire .. ' ' .. KEYS[1] .. ' is non-reentrant and already held by ' .. ARGV[2]);
end;
if (redis.call('exists', KEYS[1]) == 0) or mine then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);
