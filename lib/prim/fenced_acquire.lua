-- Fenced lock acquire (docs/wire-protocol.md, "The fenced lock"): RLock's
-- acquire, plus the token counter incremented on every acquisition,
-- re-entry included, and floored with the server's clock (docs/fencing.md):
-- the token is max(INCR, TIME in microseconds), and the counter is set to
-- it, so tokens keep growing after the counter was lost (a restart without
-- persistence, FLUSHALL, a failover to a replica that had not caught up),
-- and Java's plain INCR carries on above them.
-- KEYS[1] lock key, KEYS[2] token counter (redisson_lock_token:{name});
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] the token key's TTL in ms
-- (0: none, Redisson's way).
-- Reply: {-1, token} acquired; {pttl, -1} not acquired; a WRONGKIND error
-- when the key is a read/write lock's hash.
--! include _acl_guard.lua
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a read/write lock (it has a mode field), not a fenced lock');
end;
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  local d = denied({{'time'}, {'incr', KEYS[2]}, {'set', KEYS[2], '1'}, {'pexpire', KEYS[2], '1'}, {'hincrby', KEYS[1], ARGV[2], '1'}, {'pexpire', KEYS[1], ARGV[1]}});
  if d then return refuse(d); end;
  -- Redis < 5 replicates scripts verbatim unless told to replicate their
  -- effects, and refuses a write after TIME then.
  if redis.replicate_commands then redis.replicate_commands(); end;
  local now = redis.call('time');
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2]);
  local token = redis.call('incr', KEYS[2]);
  if token < floor then
    token = floor;
    redis.call('set', KEYS[2], string.format('%.0f', floor));
  end;
  if tonumber(ARGV[3]) > 0 then
    redis.call('pexpire', KEYS[2], ARGV[3]);
  end;
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return {-1, token};
end;
return {redis.call('pttl', KEYS[1]), -1};
