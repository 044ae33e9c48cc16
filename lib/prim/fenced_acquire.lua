-- Fenced lock acquire (docs/wire-protocol.md, "The fenced lock"): RLock's
-- acquire, plus the token counter incremented on every acquisition,
-- re-entry included.
-- KEYS[1] lock key, KEYS[2] token counter (redisson_lock_token:{name});
-- ARGV[1] lease ms, ARGV[2] owner.
-- Reply: {-1, token} acquired; {pttl, -1} not acquired; a WRONGKIND error
-- when the key is a read/write lock's hash.
--! include _acl_guard.lua
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a read/write lock (it has a mode field), not a fenced lock');
end;
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  local d = denied({{'incr', KEYS[2]}, {'hincrby', KEYS[1], ARGV[2], '1'}, {'pexpire', KEYS[1], ARGV[1]}});
  if d then return refuse(d); end;
  local token = redis.call('incr', KEYS[2]);
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return {-1, token};
end;
return {redis.call('pttl', KEYS[1]), -1};
