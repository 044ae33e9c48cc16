-- Guarded write of the caller's own script, tail (after guard_eval.lua and
-- the caller's script): the guard records the token unless the script
-- answered an error reply; the script's reply is the reply.
end;
local r = rlock_guarded_write();
if type(r) == 'table' and r.err then return r; end;
guard_commit();
return r;
