-- Shared prelude of the scripts that change something (included with
-- "--! include _acl_guard.lua"). Before its first write a script asks the
-- server whether this ACL user may run every write it is going to make
-- (redis.acl_check_cmd, Redis 7.0+) and changes nothing when one is denied:
-- a command refused halfway would leave what ran before it (a lock field
-- without TTL when PEXPIRE is denied, a lock deleted without its release
-- message when PUBLISH is denied). Redis < 7 has no such check; there the
-- scripts run unchecked.
--
-- denied(cmds): cmds is a list of {name, args...}; returns the name of the
-- first command the user may not run, or nil.
local function denied(cmds)
  if redis.acl_check_cmd == nil then return nil; end;
  for _, c in ipairs(cmds) do
    if not redis.acl_check_cmd(unpack(c)) then return c[1]; end;
  end;
  return nil;
end;
local function refuse(cmd)
  return redis.error_reply('NOPERM this user has no permission to run ' .. cmd .. ' on the lock keys or channel (nothing was changed)');
end;
