-- Read lock isLocked (docs/wire-protocol.md, "The read/write lock"), as
-- Redisson answers it: in read mode, or in write mode with more than the
-- writer's own field (the writer also holds reads). A pure write hold is
-- not "read-locked". Read-only.
-- KEYS[1] the lock hash. Reply: 1 or 0.
local mode = redis.call('hget', KEYS[1], 'mode');
if mode == 'read' then return 1; end;
if mode == 'write' and redis.call('hlen', KEYS[1]) > 2 then return 1; end;
return 0;
