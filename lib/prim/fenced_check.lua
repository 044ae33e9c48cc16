-- Fenced lock check (docs/fencing.md, "The check call"), in the manner of
-- Chubby's CheckSequencer: one read of the lock hash and the token counter.
-- KEYS[1] lock key, KEYS[2] token counter (redisson_lock_token:{name}).
-- Reply: {held, token}: held 1 when the lock key exists, else 0; token the
-- counter as a string (the latest token handed out: the holder's while the
-- lock is held), or false when there is no counter.
local held = redis.call('exists', KEYS[1]);
local token = redis.call('get', KEYS[2]);
return {held, token};
