-- Read lock acquire (docs/wire-protocol.md, "The read/write lock").
-- KEYS[1] the lock hash, KEYS[2] the owner's timeout key base
-- ({name}:<owner>:rwlock_timeout); ARGV[1] lease ms, ARGV[2] owner,
-- ARGV[3] owner .. ":write".
-- Every read hold i = 1..count has its own key <base>:i (value 1, PEXPIRE
-- its lease); the hash lives as long as the longest of them.
-- Reply: nil = acquired (or re-entered); otherwise the hash's PTTL (another
-- owner holds the write lock); a WRONGKIND error when the key is a lock
-- hash without a "mode" field (an RLock, fair, fenced or spin lock), which
-- is left as it is.
--! include _acl_guard.lua
local mode = redis.call('hget', KEYS[1], 'mode');
if mode == false then
  if redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a lock hash without a mode field (a lock, fair, fenced or spin lock), not a read/write lock');
  end;
  local first = KEYS[2] .. ':1';
  local d = denied({{'hset', KEYS[1], 'mode', 'read'}, {'set', first, '1', 'px', ARGV[1]}, {'pexpire', KEYS[1], ARGV[1]}});
  if d then return refuse(d); end;
  redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1);
  redis.call('set', first, 1, 'px', ARGV[1]);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
-- Readers are always let in while in read mode (no writer preference); in
-- write mode only the writer itself may add read holds.
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local d = denied({{'hincrby', KEYS[1], ARGV[2], '1'}, {'set', KEYS[2] .. ':1', '1', 'px', ARGV[1]}, {'pexpire', KEYS[1], ARGV[1]}});
  if d then return refuse(d); end;
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1]);
  local left = redis.call('pttl', KEYS[1]);
  redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])));
  return nil;
end;
return redis.call('pttl', KEYS[1]);
