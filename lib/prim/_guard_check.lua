-- Shared prelude of the guard's scripts (guard.c; docs/fencing.md), after
-- _acl_guard.lua. The guard is a hash beside the data it fences: field
-- "lock" the fenced lock's name, field "token" the highest token that
-- passed (decimal).
-- KEYS[1] the guard; ARGV[1] the lock name, ARGV[2] the token (decimal,
-- >= 1, no leading zeros).
-- guard_check(): nil when the write may run, else the error reply: a
-- WRONGTYPE error (the key is not a guard), FOREIGN (the guard fences
-- another lock), STALE (the token is below the highest seen).
-- guard_commit(): records the token as the highest seen.
local function token_lt(a, b)
  if #a ~= #b then return #a < #b; end;
  return a < b;
end;
local function guard_check()
  local t = redis.call('type', KEYS[1])['ok'];
  if t ~= 'none' and t ~= 'hash' then
    return redis.error_reply('WRONGTYPE guard key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a guard');
  end;
  local g = redis.call('hmget', KEYS[1], 'lock', 'token');
  if t == 'hash' and (not g[1] or not g[2]) then
    return redis.error_reply('WRONGTYPE guard key ' .. KEYS[1] .. ' is a hash without the fields lock and token, not a guard');
  end;
  if g[1] and g[1] ~= ARGV[1] then
    return redis.error_reply('FOREIGN guard ' .. KEYS[1] .. ' fences lock ' .. g[1] .. ', not ' .. ARGV[1] .. ' (nothing was written)');
  end;
  if g[2] and token_lt(ARGV[2], g[2]) then
    return redis.error_reply('STALE token ' .. ARGV[2] .. ' of lock ' .. ARGV[1] .. ' is below ' .. g[2] .. ', the highest guard ' .. KEYS[1] .. ' has seen (nothing was written)');
  end;
  return nil;
end;
local function guard_commit()
  redis.call('hset', KEYS[1], 'lock', ARGV[1], 'token', ARGV[2]);
end;
