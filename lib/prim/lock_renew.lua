-- Batched watchdog renewal (docs/wire-protocol.md, "Renewal"), up to 100
-- locks per call. A denied PEXPIRE fails the call; renewal is idempotent
-- and retried next period, so there is nothing to guard.
-- KEYS = lock keys; ARGV[1] watchdog timeout ms, ARGV[1+i] owner of KEYS[i].
-- Reply: an array with 1 (renewed) or 0 (no longer held by the owner) per key.
local result = {};
for i = 1, #KEYS do
  if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then
    redis.call('pexpire', KEYS[i], ARGV[1]);
    result[i] = 1;
  else
    result[i] = 0;
  end;
end;
return result;
