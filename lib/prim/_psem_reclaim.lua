-- Shared prelude of the permit-expirable semaphore's scripts (included
-- with "--! include _psem_reclaim.lua", after _acl_guard.lua): the reclaim.
-- reclaim(zset, count, channel, now, pub): every taken permit whose lease
-- ran out (score <= now) leaves the zset and goes back to the count, whose
-- new value is then published when it is above 0 (every path that adds
-- permits must publish, or a Java waiter never wakes). Returns how many
-- came back. The caller checked these writes with denied() first.
local function reclaim(zset, count, channel, now, pub)
  local back = 0;
  while true do
    local gone = redis.call('zrangebyscore', zset, '0', now, 'limit', 0, 500);
    if #gone == 0 then break; end;
    redis.call('zrem', zset, unpack(gone));
    back = back + #gone;
  end;
  if back > 0 then
    local total = redis.call('incrby', count, back);
    if total > 0 then redis.call(pub, channel, total); end;
  end;
  return back;
end;
