-- Introspection (rlock_client_info; `rlock status`): one atomic read of every
-- key and channel the primitives keep for a name, so what it shows is one
-- consistent moment. Reads only; each auxiliary key is read only when it
-- holds the type its primitive writes (a foreign value there is ignored,
-- never an error). Lists are cut at ARGV[6] entries (their full length is
-- returned beside them).
-- KEYS[1] the name, KEYS[2] the fair queue (list), KEYS[3] the fair
-- deadlines (zset), KEYS[4] the fenced token (string), KEYS[5] the permit
-- leases (zset "{name}:timeout"). ARGV[1] NUMSUB or SHARDNUMSUB (the
-- client's pub/sub mode), ARGV[2] the lock channel, ARGV[3] the read/write
-- channel, ARGV[4] the semaphore channel, ARGV[5] the latch channel,
-- ARGV[6] the most entries of any list returned.
-- Reply: {type, pttl, field count, {field, value...}, string value or nil,
-- {lock, read/write, semaphore, latch subscribers}, queue length,
-- {queued owner...}, {their deadline or nil...}, token or nil, permit
-- count, {permit id, expiry...}, server seconds, microseconds}.
-- An ACL user who may not make one of the reads gets NOPERM naming it
-- (the guard of the scripts that write), not the server's generic error.
--! include _acl_guard.lua
local d = denied({{'type', KEYS[1]}, {'pttl', KEYS[1]}, {'hlen', KEYS[1]},
  {'hgetall', KEYS[1]}, {'hscan', KEYS[1], '0'}, {'get', KEYS[1]},
  {'pubsub', ARGV[1], ARGV[2]}, {'llen', KEYS[2]}, {'lrange', KEYS[2], '0', '0'},
  {'zscore', KEYS[3], 'x'}, {'get', KEYS[4]}, {'zcard', KEYS[5]},
  {'zrange', KEYS[5], '0', '0'}, {'time'}});
if d then return refuse(d); end;
local limit = tonumber(ARGV[6]);
local function kind_of(k) return redis.call('type', k)['ok']; end;
local t = kind_of(KEYS[1]);
local pttl = redis.call('pttl', KEYS[1]);
local nfields, fields, value = 0, {}, false;
if t == 'hash' then
  nfields = redis.call('hlen', KEYS[1]);
  if nfields <= limit then
    fields = redis.call('hgetall', KEYS[1]);
  else
    local page = redis.call('hscan', KEYS[1], 0, 'COUNT', limit)[2];
    for i = 1, math.min(#page, 2 * limit) do fields[i] = page[i]; end;
  end;
elseif t == 'string' then
  value = redis.call('get', KEYS[1]);
end;
local subs = redis.call('pubsub', ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]);
local qlen, queue, deadlines = 0, {}, {};
if kind_of(KEYS[2]) == 'list' then
  qlen = redis.call('llen', KEYS[2]);
  queue = redis.call('lrange', KEYS[2], 0, limit - 1);
  local zs = kind_of(KEYS[3]) == 'zset';
  for i, owner in ipairs(queue) do
    deadlines[i] = zs and redis.call('zscore', KEYS[3], owner) or false;
  end;
end;
local token = false;
if kind_of(KEYS[4]) == 'string' then token = redis.call('get', KEYS[4]); end;
local pcount, permits = 0, {};
if kind_of(KEYS[5]) == 'zset' then
  pcount = redis.call('zcard', KEYS[5]);
  permits = redis.call('zrange', KEYS[5], 0, limit - 1, 'WITHSCORES');
end;
local now = redis.call('time');
return {t, pttl, nfields, fields, value, {subs[2], subs[4], subs[6], subs[8]},
        qlen, queue, deadlines, token, pcount, permits, now[1], now[2]};
