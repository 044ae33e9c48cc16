-- MultiLock's lease (docs/wire-protocol.md, "MultiLock"): a MultiLock
-- taken with a wait and a lease takes each member with twice the wait as
-- its lease (so a member taken early cannot run out while later ones are
-- waited for), then, once all are held, gives each member's keys the
-- lease the caller asked for - as Java's RedissonMultiLock does with its
-- generic expire. One call per member, on the member's node.
-- KEYS: the member's keys (the lock hash; a fair lock's queue and
-- deadline zset too). ARGV[1] the lease in ms, ARGV[2] "" (Java's slot for
-- a PEXPIRE option; none is used).
-- Reply: 1 if any key got the TTL (exists), else 0.
--! include _acl_guard.lua
local cmds = {};
for i = 1, #KEYS do cmds[i] = {'pexpire', KEYS[i], ARGV[1]}; end;
local d = denied(cmds);
if d then return refuse(d); end;
local r = 0;
for i = 1, #KEYS do
  if redis.call('pexpire', KEYS[i], ARGV[1]) == 1 then r = 1; end;
end;
return r;
