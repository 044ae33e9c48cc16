-- Batched watchdog renewal of read holds (docs/wire-protocol.md, "The
-- read/write lock", Renewal): rlock's own script in the engine's batch
-- shape (Redisson's sends key pairs; the server effects are the same).
-- For each lock whose owner still has read holds, every timeout key of
-- that owner (count..1) and the hash get the watchdog timeout.
-- KEYS = lock hashes; ARGV[1] watchdog timeout ms, ARGV[1+i] owner of
-- KEYS[i]. The timeout keys are {name}:<owner>:rwlock_timeout:<c>, or
-- name:<owner>:... when the name has braces of its own.
-- Reply: an array with 1 (renewed) or 0 (no longer held by the owner).
local result = {};
for i = 1, #KEYS do
  local holds = tonumber(redis.call('hget', KEYS[i], ARGV[i + 1]) or '0') or 0;
  if holds > 0 then
    local tag = KEYS[i];
    if string.find(tag, '{', 1, true) == nil then tag = '{' .. tag .. '}'; end;
    local base = tag .. ':' .. ARGV[i + 1] .. ':rwlock_timeout:';
    for c = holds, 1, -1 do
      redis.call('pexpire', base .. c, ARGV[1]);
    end;
    redis.call('pexpire', KEYS[i], ARGV[1]);
    result[i] = 1;
  else
    result[i] = 0;
  end;
end;
return result;
