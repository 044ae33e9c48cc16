-- Semaphore release (and addPermits): adds ARGV[1] permits (may be
-- negative for addPermits) and publishes the new total - every path that
-- adds permits must, or Java's waiters never wake.
-- KEYS[1] counter, KEYS[2] channel; ARGV[1] permits, ARGV[2] PUBLISH or
-- SPUBLISH, ARGV[3] "1": drop the counter's TTL as a plain SET would
-- (addPermits), else keep it (release: INCRBY).
-- Reply: the new total. INCRBY itself refuses a counter that is not a
-- number or would overflow, before anything is written.
--! include _acl_guard.lua
local writes = {{'incrby', KEYS[1], ARGV[1]}, {ARGV[2], KEYS[2], '1'}};
if ARGV[3] == '1' then table.insert(writes, {'persist', KEYS[1]}); end;
local d = denied(writes);
if d then return refuse(d); end;
local total = redis.call('incrby', KEYS[1], ARGV[1]);
if ARGV[3] == '1' then redis.call('persist', KEYS[1]); end;
redis.call(ARGV[2], KEYS[2], total);
return total;
