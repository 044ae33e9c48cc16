-- Leader election: who leads now (docs/wire-protocol.md, "Leader
-- election"). Read-only.
-- KEYS[1] the fenced lock (name), KEYS[2] its token counter
-- (redisson_lock_token:{name}), KEYS[3] the value key.
-- Reply: {holder field or '', the lock's PTTL, the token counter or '',
-- value key's holder or '', its term or '', its value or ''}; a WRONGKIND
-- error when the name is a read/write lock, WRONGTYPE when not a hash.
local t = redis.call('type', KEYS[1]);
local kind = t['ok'] or t;
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a lock');
end;
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGKIND ' .. KEYS[1] .. ' is a read/write lock (it has a mode field), not a fenced lock');
end;
local holder = '';
local fields = redis.call('hkeys', KEYS[1]);
if #fields > 0 then holder = fields[1]; end;
local token = redis.call('get', KEYS[2]) or '';
local v = redis.call('hmget', KEYS[3], 'holder', 'term', 'value');
return {holder, redis.call('pttl', KEYS[1]), token, v[1] or '', v[2] or '', v[3] or ''};
