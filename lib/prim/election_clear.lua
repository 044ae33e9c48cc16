-- Leader election: a term ended (resign, or the leader found it lost):
-- the value key goes if it is still this term's, and the channel hears of
-- it (docs/wire-protocol.md, "Leader election").
-- KEYS[1] the value key, KEYS[2] the election channel;
-- ARGV[1] the holder's field, ARGV[2] its term, ARGV[3] PUBLISH or SPUBLISH.
-- Reply: 1 deleted, 0 the key was not this term's (left alone).
--! include _acl_guard.lua
local d = denied({{'del', KEYS[1]}, {ARGV[3], KEYS[2], ARGV[2]}});
if d then return refuse(d); end;
local mine = 0;
if redis.call('hget', KEYS[1], 'holder') == ARGV[1] and redis.call('hget', KEYS[1], 'term') == ARGV[2] then
  redis.call('del', KEYS[1]);
  mine = 1;
end;
redis.call(ARGV[3], KEYS[2], '0');
return mine;
