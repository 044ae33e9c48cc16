-- rlock's local transfer (docs/wire-protocol.md, "Transfer"), not a
-- Redisson script: the release of an owner's last hold that moves the lock
-- to another owner of the same client in one command, for a waiter of
-- that client - unless another client waits too (a subscriber on the
-- channel beyond this client's own): then it releases as the release
-- script does, with its message, so that the other client's waiter can
-- take the lock. A re-sent transfer answers what the first send did: the
-- unlock request latch records the branches that leave the releasing owner
-- a field or delete the key, as in the release script; a move records
-- nothing (a new key per handoff was a third of the script's cost), and
-- a re-send that finds the releasing owner gone and the new owner holding
-- once answers 1. On the client's one ordered command connection nothing
-- else can have given the new owner that field: it waited for this very
-- transfer and held nothing here.
-- It reads before it writes, and asks the ACL guard only about the writes
-- of the branch it takes (a move is the hot path of a local herd). The
-- values it writes are strings: a Lua number is formatted with printf on
-- every call.
-- KEYS[1] lock key, KEYS[2] unlock latch key, KEYS[3] lock channel;
-- ARGV[1] lease ms to re-apply while still held, ARGV[2] releasing owner,
-- ARGV[3] latch TTL ms, ARGV[4] the new owner, ARGV[5] the new owner's
-- lease ms, ARGV[6] PUBLISH or SPUBLISH, ARGV[7] message "0".
-- Reply: nil = not held by the releasing owner (nothing moved); 0 = still
-- held by it (a re-entered hold: nothing moved); 1 = moved to the new
-- owner; 2 = released and published (another client waits).
--! include _acl_guard.lua
local latch = redis.call('get', KEYS[2]);
if latch ~= false then return tonumber(latch); end;
local count = redis.call('hget', KEYS[1], ARGV[2]);
if count == false then
  if redis.call('hget', KEYS[1], ARGV[4]) == '1' then return 1; end;
  return nil;
end;
local d;
if tonumber(count) > 1 then
  d = denied({{'hincrby', KEYS[1], ARGV[2], '-1'}, {'pexpire', KEYS[1], ARGV[1]}, {'set', KEYS[2], '0', 'px', ARGV[3]}});
  if d then return refuse(d); end;
  redis.call('hincrby', KEYS[1], ARGV[2], '-1');
  redis.call('pexpire', KEYS[1], ARGV[1]);
  redis.call('set', KEYS[2], '0', 'px', ARGV[3]);
  return 0;
end;
local numsub = ARGV[6] == 'SPUBLISH' and 'shardnumsub' or 'numsub';
d = denied({{'pubsub', numsub, KEYS[3]}});
if d then return refuse(d); end;
if tonumber(redis.call('pubsub', numsub, KEYS[3])[2]) > 1 then
  d = denied({{'del', KEYS[1]}, {ARGV[6], KEYS[3], ARGV[7]}, {'set', KEYS[2], '2', 'px', ARGV[3]}});
  if d then return refuse(d); end;
  redis.call('del', KEYS[1]);
  redis.call(ARGV[6], KEYS[3], ARGV[7]);
  redis.call('set', KEYS[2], '2', 'px', ARGV[3]);
  return 2;
end;
d = denied({{'hdel', KEYS[1], ARGV[2]}, {'hset', KEYS[1], ARGV[4], '1'}, {'pexpire', KEYS[1], ARGV[5]}});
if d then return refuse(d); end;
redis.call('hdel', KEYS[1], ARGV[2]);
redis.call('hset', KEYS[1], ARGV[4], '1');
redis.call('pexpire', KEYS[1], ARGV[5]);
return 1;
