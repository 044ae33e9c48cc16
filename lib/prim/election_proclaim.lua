-- Leader election: the leader writes its value (docs/wire-protocol.md,
-- "Leader election"). Only while it still holds the fenced lock.
-- KEYS[1] the fenced lock (name), KEYS[2] the value key
-- (rlock_election:{name}), KEYS[3] the election channel
-- (rlock_election__channel:{name});
-- ARGV[1] the holder's field (<client-id>:<owner>), ARGV[2] its term,
-- ARGV[3] the value, ARGV[4] PUBLISH or SPUBLISH, ARGV[5] 1 to publish the
-- term on the channel (a new leader or value), 0 not (the leader's periodic
-- refresh), ARGV[6] ms the value key may outlive the lock's current TTL.
-- Reply: 1 written, 0 the lock is not held by ARGV[1] (nothing written).
--! include _acl_guard.lua
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0;
end;
local d = denied({{'hset', KEYS[2], 'value', ARGV[3]}, {'pexpire', KEYS[2], '1'}, {ARGV[4], KEYS[3], ARGV[2]}});
if d then return refuse(d); end;
local pttl = redis.call('pttl', KEYS[1]);
if pttl < 1 then pttl = 1; end;
redis.call('hset', KEYS[2], 'value', ARGV[3], 'term', ARGV[2], 'holder', ARGV[1]);
redis.call('pexpire', KEYS[2], pttl + tonumber(ARGV[6]));
if ARGV[5] == '1' then
  redis.call(ARGV[4], KEYS[3], ARGV[2]);
end;
return 1;
