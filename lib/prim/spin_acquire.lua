-- Spin lock acquire (docs/wire-protocol.md, "The spin lock"): the same
-- effects as RLock's; waiters poll (no channel).
-- KEYS[1] lock key; ARGV[1] lease ms, ARGV[2] owner.
-- Reply: nil = acquired (or re-entered); otherwise the holder's PTTL; a
-- WRONGKIND error when the key is a read/write lock's hash.
--! include _acl_guard.lua
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a read/write lock (it has a mode field), not a spin lock');
end;
local d = denied({{'hincrby', KEYS[1], ARGV[2], '1'}, {'pexpire', KEYS[1], ARGV[1]}});
if d then return refuse(d); end;
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);
