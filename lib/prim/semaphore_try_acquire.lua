-- Semaphore acquire try (docs/wire-protocol.md, "The semaphore").
-- KEYS[1] the permit counter (the name), KEYS[2] this acquire's take
-- record; ARGV[1] permits wanted, ARGV[2] take record TTL ms.
-- Reply: nil = taken; -1 = not enough permits (no wait hint: permits
-- come back only with a message); a WRONGKIND error when the counter is
-- not a number. A missing counter is 0 permits.
-- The take record (KEYS[2] = permits taken, with a TTL) lets the acquire
-- undo this take when its reply never reaches the caller (cancel, close,
-- deadline, lost connection): semaphore_abandon.lua gives them back.
--! include _acl_guard.lua
local raw = redis.call('get', KEYS[1]);
if raw == false then return -1; end;
local have = tonumber(raw);
if have == nil then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' does not hold a permit count');
end;
if have < tonumber(ARGV[1]) then return -1; end;
local d = denied({{'decrby', KEYS[1], ARGV[1]}, {'set', KEYS[2], ARGV[1], 'px', ARGV[2]}});
if d then return refuse(d); end;
redis.call('decrby', KEYS[1], ARGV[1]);
redis.call('set', KEYS[2], ARGV[1], 'px', ARGV[2]);
return nil;
