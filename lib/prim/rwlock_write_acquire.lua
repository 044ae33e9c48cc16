-- Write lock acquire (docs/wire-protocol.md, "The read/write lock").
-- KEYS[1] the lock hash; ARGV[1] lease ms, ARGV[2] owner .. ":write".
-- The hash: "mode" = read|write, each reader's owner -> its read count,
-- the writer's owner:write -> its write count.
-- Reply: nil = acquired (or re-entered); otherwise the hash's PTTL (held
-- by readers, the caller's own read holds included, or another writer); a
-- WRONGKIND error when the key is a lock hash without a "mode" field (an
-- RLock, fair, fenced or spin lock), which is left as it is.
--! include _acl_guard.lua
local mode = redis.call('hget', KEYS[1], 'mode');
if mode == false then
  if redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a lock hash without a mode field (a lock, fair, fenced or spin lock), not a read/write lock');
  end;
  local d = denied({{'hset', KEYS[1], 'mode', 'write'}, {'pexpire', KEYS[1], ARGV[1]}});
  if d then return refuse(d); end;
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local d = denied({{'hincrby', KEYS[1], ARGV[2], '1'}, {'pexpire', KEYS[1], ARGV[1]}});
  if d then return refuse(d); end;
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  -- Re-entry adds the lease to what is left (Redisson does so).
  local left = redis.call('pttl', KEYS[1]);
  if left < 0 then left = 0; end;
  redis.call('pexpire', KEYS[1], left + tonumber(ARGV[1]));
  return nil;
end;
return redis.call('pttl', KEYS[1]);
