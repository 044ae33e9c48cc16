-- Read lock release with an unlock request latch (docs/wire-protocol.md,
-- "The read/write lock").
-- KEYS[1] the lock hash, KEYS[2] channel, KEYS[3] the owner's timeout key
-- base ({name}:<owner>:rwlock_timeout), KEYS[4] the tag ({name}, or name
-- when it has braces), KEYS[5] unlock latch key; ARGV[1] message "0",
-- ARGV[2] owner, ARGV[3] PUBLISH or SPUBLISH, ARGV[4] latch TTL ms.
-- One read hold ends: its newest timeout key goes, and the hash lives on
-- for the longest read hold still timed (any reader's), or - in write mode
-- - as it is. When no timed hold is left (live or not) the hash is deleted
-- and "0" published.
-- Reply: nil = not read-held by owner (nothing changes, nothing is
-- published); 0 = the owner still has read holds; 1 = its last read hold
-- ended (other readers may still hold the lock).
--! include _acl_guard.lua
local latch = redis.call('get', KEYS[5]);
if latch ~= false then return tonumber(latch); end;
local mode = redis.call('hget', KEYS[1], 'mode');
if mode == false then return nil; end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil; end;
local d = denied({{'hincrby', KEYS[1], ARGV[2], '-1'}, {'hdel', KEYS[1], ARGV[2]}, {'del', KEYS[3] .. ':1'}, {'pexpire', KEYS[1], '1'}, {'del', KEYS[1]}, {ARGV[3], KEYS[2], ARGV[1]}, {'set', KEYS[5], '0', 'px', ARGV[4]}});
if d then return refuse(d); end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if counter <= 0 then
  redis.call('hdel', KEYS[1], ARGV[2]);
end;
redis.call('del', KEYS[3] .. ':' .. (counter + 1));
local mine = 0;
if counter <= 0 then mine = 1; end;
if redis.call('hlen', KEYS[1]) > 1 then
  local max_left = -3;
  local all = redis.call('hgetall', KEYS[1]);
  for i = 1, #all, 2 do
    local holds = tonumber(all[i + 1]);
    if holds ~= nil then
      for c = holds, 1, -1 do
        local left = redis.call('pttl', KEYS[4] .. ':' .. all[i] .. ':rwlock_timeout:' .. c);
        if left > max_left then max_left = left; end;
      end;
    end;
  end;
  if max_left > 0 then
    redis.call('pexpire', KEYS[1], max_left);
    redis.call('set', KEYS[5], mine, 'px', ARGV[4]);
    return mine;
  end;
  if mode == 'write' then
    redis.call('set', KEYS[5], mine, 'px', ARGV[4]);
    return mine;
  end;
end;
-- No timed read hold left: any reader still counted has timed out.
redis.call('del', KEYS[1]);
redis.call(ARGV[3], KEYS[2], ARGV[1]);
redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
return 1;
