-- Permit-expirable semaphore: one acquire try of one or more permits
-- (docs/wire-protocol.md, "The permit-expirable semaphore").
-- KEYS[1] count (the name), KEYS[2] the lease zset "{name}:timeout",
-- KEYS[3] channel; ARGV[1] the first new permit's id (16 raw bytes),
-- ARGV[2] the expiry of every new permit (absolute wall-clock ms, or the
-- no-lease sentinel), ARGV[3] the caller's wall clock in ms, ARGV[4]
-- PUBLISH or SPUBLISH, ARGV[5..] the ids of the further permits of an
-- acquire of several (n ids in all: n permits).
-- First up to n permits whose lease ran out go back to the count (and the
-- new count is published, as every path that adds permits must). Then,
-- with n permits free, they are taken: the count goes down by n and every
-- id is recorded with the expiry. All or nothing.
-- Reply: status OK = taken; otherwise an integer: the ms until the
-- earliest lease runs out (>= 1), or -1 when no taken permit has a lease
-- (only a message can bring one back). A count that is not a number is a
-- WRONGKIND error.
--! include _acl_guard.lua
local raw = redis.call('get', KEYS[1]);
local have = 0;
if raw ~= false then
  have = tonumber(raw);
  if have == nil then
    return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' does not hold a permit count');
  end;
end;
local ids = {ARGV[1]};
for i = 5, #ARGV do ids[#ids + 1] = ARGV[i]; end;
local n = #ids;
local now = tonumber(ARGV[3]);
local gone = redis.call('zrangebyscore', KEYS[2], '0', ARGV[3], 'limit', 0, n);
local writes = {{'decrby', KEYS[1], '1'}, {'zadd', KEYS[2], ARGV[2], ARGV[1]},
  {'pexpire', KEYS[2], '1'}};
if #gone > 0 then
  table.insert(writes, {'zrem', KEYS[2], ARGV[1]});
  table.insert(writes, {'incrby', KEYS[1], '1'});
  table.insert(writes, {ARGV[4], KEYS[3], '1'});
end;
local d = denied(writes);
if d then return refuse(d); end;
if #gone > 0 then
  redis.call('zrem', KEYS[2], unpack(gone));
  have = redis.call('incrby', KEYS[1], #gone);
  if have > 0 then redis.call(ARGV[4], KEYS[3], have); end;
end;
if have >= n then
  redis.call('decrby', KEYS[1], n);
  for _, id in ipairs(ids) do redis.call('zadd', KEYS[2], ARGV[2], id); end;
  local ttl = redis.call('pttl', KEYS[1]);
  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end;
  return redis.status_reply('OK');
end;
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores');
if first[2] == nil or first[2] == '922337203685477' then return -1; end;
local wait = tonumber(first[2]) - now;
if wait < 1 then wait = 1; end;
return wait;
