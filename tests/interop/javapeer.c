/*
 * javapeer — Peer B of the interop suite: one process behaves like one Java
 * Redisson 4.x client at the wire level, written from the wire contract (docs/wire-protocol.md)
 * with plain synchronous hiredis (no rlock code):
 *
 *  - owner `<client-uuid>:<thread id>` (a decimal long: the command thread's
 *    kernel tid), one random UUID per process;
 *  - acquire script: create-or-re-enter with HINCRBY + PEXPIRE, else reply
 *    the PTTL;
 *  - 4.x unlock: 3 keys (key, channel, unlock latch
 *    `redisson_unlock_latch:<braced>:<32 hex>`), 5 args (message `0`,
 *    lease, owner, `PUBLISH`, latch TTL), then DEL of the latch; and the
 *    3.x unlock (`unlock3`): 2 keys, 4 args, no latch;
 *  - force unlock: DEL, then PUBLISH `0` when something was deleted;
 *  - waiting: try; subscribe to the lock channel (one subscription per
 *    channel per process, reference counted); loop { try again; wait on the
 *    channel's semaphore for min(ttl, remaining) }; unsubscribe. A message
 *    `0` releases one permit, `1` one per sleeper;
 *  - watchdog: locks taken without a lease use the watchdog timeout and are
 *    renewed every watchdog/3 by one script call per 100 locks, which
 *    replies 1/0 per key; a 0 drops that lock from renewal.
 *
 * Threads: the main thread reads stdin (and ends the process on `quit` or
 * EOF); a command thread runs the commands one at a time (it is the "Java
 * thread" that owns the locks); a subscriber thread owns the pub/sub
 * connection(s); a renewal thread runs the watchdog. The command
 * connection(s) are shared by the command and renewal threads under a
 * mutex, as a Java client shares its connection pool.
 *
 *   javapeer --port <port> [--host 127.0.0.1] [--watchdog-ms 30000]
 *            [--latch-ttl-ms 18000] [--subscribe-timeout-ms 7500]
 *            [--deadline-ms 120000] [--sharded 0|1]
 *   javapeer --cluster <host:port>[,<host:port>...] [--sharded 0|1] [...]
 *
 * --sharded 1 uses SPUBLISH/SSUBSCRIBE, as Java does against a Redis 7+
 * cluster (on a standalone server it exercises the same commands).
 *
 * Cluster mode (--cluster: seed nodes; --port and --host are not used;
 * --sharded defaults to 1) behaves like Java against a Redis 7 cluster.
 * The slot map (slot -> master) is read with CLUSTER SLOTS at start and
 * again after a MOVED (from the named node first, then the known nodes,
 * on a short-lived connection of its own). A command goes to the master of
 * its first key's slot (EVALSHA/EVAL: the first KEYS entry, else argv[1];
 * slot = CRC16-XModem of the hash tag, or of the whole key, mod 16384), on
 * one command connection per master, made on first use (it loads the
 * scripts), all under the one command mutex. -MOVED updates the slot,
 * re-reads the map and re-sends to the named node; -ASK sends ASKING and
 * the command to the named node, once, map unchanged (at most 16
 * redirections per command); -TRYAGAIN / -CLUSTERDOWN are retried every
 * 50 ms for up to 5 s, then the error is the answer as in standalone mode.
 * With --sharded 1, SSUBSCRIBE / SUNSUBSCRIBE of a channel go on a
 * subscriber connection to the master of the channel's slot (one per
 * master, made on first use; the subscriber thread polls them all): the
 * scripts SPUBLISH on the key's master, the same one as the channel shares
 * the key's hash tag. An unasked `sunsubscribe` of a live channel (its slot
 * moved) re-reads the map and subscribes again on the new owner; an error
 * reply to a (S)SUBSCRIBE (MOVED, TRYAGAIN, ...) subscribes again (MOVED:
 * after updating the map; others: after 50 ms). With --sharded 0 every
 * SUBSCRIBE goes on one subscriber connection to the first seed (a
 * cluster broadcasts PUBLISH). The watchdog sends one call per slot (at
 * most 100 keys, or 40 read-lock pairs), as Java's LockTask and
 * ReadLockTask do per slot, and prints `RENEWED <keys> slot <slot>`. The
 * keys of one command always share a hash tag (a count-down latch named
 * with braces is the exception: its channel, KEYS[2] of its scripts,
 * braces the whole name and may then hash elsewhere: CROSSSLOT).
 *
 * The line protocol on stdin/stdout is the one of peer.js (see there), plus
 * `unlock3 <name>` and the unprompted lines `RENEWED <keys>` (one renewal
 * call) and `LOST <name>` (renewal found the lock gone).
 *
 * The rest of Redisson 4.7's lock family (wire facts:
 * docs/wire-protocol.md, in our own Lua). A command is
 * <prefix><verb>: prefix f (getFairLock), rd / wr (getReadWriteLock's read
 * and write lock), fx (getFencedLock), sp (getSpinLock), nr
 * (getNonReentrantLock: RLock's keys, channel and unlock; its acquire adds
 * the marker NON_REENTRANT_REACQUIRE as ARGV[3] and a re-acquire prints
 * `ERROR acquire: ERR NON_REENTRANT_REACQUIRE` at once), nf
 * (getNonReentrantFairLock: the fair lock's keys, channels, unlock and
 * queue-leave; its two acquire forms take the marker as ARGV[5] and refuse
 * the owner's own field before any queue step, with no acquireFailed
 * after the refusal); lease <= 0 means
 * the watchdog timeout, renewed. Answers as for the plain lock.
 *   <p>lock <name> <lease_ms>              lock(lease)
 *   <p>trylock <name> <wait_ms> <lease_ms> tryLock(wait, lease)
 *   <p>unlock <name> | <p>forceunlock <name>
 *   <p>count <name> <key> <n> <lease_ms> [tag]   `count` on that kind
 *   ftry <name> <lease_ms>                 fair tryLock(): one attempt
 *   fxlocktoken <name>                     lockAndGetToken() (watchdog lease:
 *                                          Java's lease form ignores it) ->
 *                                          ACQUIRED <ms> <token>
 *   fxtrylocktoken <name> <wait> <lease>   tryLockAndGetToken -> ACQUIRED
 *                                          <ms> <token> | NOTACQUIRED <ms>
 *   fxtoken <name>                         getToken() -> TOKEN <n>
 * Per kind:
 *  - fair: keys <name>, redisson_lock_queue:{n}, redisson_lock_timeout:{n};
 *    the waiting acquire sends ARGV [lease, owner, waitMs, now], tryLock()
 *    [lease, owner, now, waitMs] (waitMs = the wait if > 0, else 300000;
 *    now = wall clock ms); a waiter listens on its own channel
 *    redisson_lock__channel:{n}:<owner> (WAITING shows it); giving up
 *    (timeout, subscribe timeout, error; also tryLock(0, ...)) runs
 *    acquireFailed (KEYS [queue, timeouts], ARGV [owner, waitMs]); unlock
 *    and forceUnlock publish 0 to the queue head's channel. Java retries at
 *    once, in a busy loop, while the reply is 0 (queued, lock free, not its
 *    turn); here each such retry is followed by a 1 ms sleep (capped at
 *    ~1,000 calls/s, Java's observed rate is ~1,100/s).
 *  - read/write: one hash (`mode`, <owner> read count, <owner>:write write
 *    count), read-hold keys {n}:<owner>:rwlock_timeout:<i>, channel
 *    redisson_rwlock:{n} for both (a read unlock that frees the lock
 *    publishes 0, a write unlock 1; a downgrade publishes nothing); read
 *    holds without a lease are renewed like Java's ReadLockTask (KEYS in
 *    pairs [lock, {n}], ARGV [timeout, 1, owner] per pair, every timeout
 *    keys c..1 and the hash), write holds by the LockTask with owner:write.
 *  - fenced: RLock's hash, channel and unlock, plus INCR of
 *    redisson_lock_token:{n} on every acquisition (re-entry included).
 *  - spin: RLock's hash, no pub/sub at all; a waiter polls after 1 ms, then
 *    twice the previous pause plus random [0, failures), at most 128 ms,
 *    and prints `WAITING poll:<name>` once; unlock has no message.
 *
 * The semaphore and the count-down latch (fact sheet sections 4 and 5, own
 * Lua; commands sem* and lt*, listed above sync_command):
 *  - semaphore: a string count under the name, channel redisson_sc:<tag>;
 *    every call that adds permits publishes the new total; a waiter tries,
 *    subscribes, then loops { try; wait for a local permit for the whole
 *    remaining time } (no TTL hint); a message v gives min(v, waiters on
 *    the entry) local permits, anything not a positive integer none;
 *  - latch: a string count under the name, channel
 *    redisson_countdownlatch__channel__{<name>} (braces always); countDown
 *    DECRs, deletes at <= 0, publishes 0 exactly at 0; trySetCount and
 *    delete publish 1. An awaiter GETs, subscribes, then loops { GET; wait
 *    on the entry's latch }; 0 opens it (every awaiter re-reads), 1 closes.
 *
 * The permit-expirable semaphore with several permits
 * (docs/wire-protocol.md, "The permit-expirable semaphore"; own Lua; commands pes*, listed above pes_command): the count
 * under the name, the zset {name}:timeout of raw 16-byte ids scored by
 * expiry (922337203685477: no lease), channel redisson_sc:<tag>. Ids are
 * made here (16 random bytes, shown as 32 hex) and sent raw. An acquire
 * sends ARGV [n, expiry, now, sentinel, publish, id1..idn] and replies OK,
 * ":<lowest score>" (a wait hint) or nil; a waiter tries, subscribes, then
 * loops { try; wait for a local permit until the hint or the deadline }.
 * tryRelease of a list: ARGV [count, now, publish, ids...], all or nothing,
 * publishing the number released.
 */
#include <hiredis/hiredis.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define RENEW_BATCH 100
#define LINE_MAX_LEN 4096
#define CLUSTER_SLOTS 16384
#define MAX_NODES 64
#define MAX_REDIRECTS 16
#define CLUSTER_BUSY_MS 5000 /* TRYAGAIN / CLUSTERDOWN retried this long */

/* ---- the scripts (own Lua, from docs/wire-protocol.md) ---- */

/* KEYS[1] lock; ARGV[1] lease ms, ARGV[2] owner. nil = acquired, else PTTL. */
static const char acquire_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 "
    "or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  return nil "
    "end "
    "return redis.call('pttl', KEYS[1])";

/* getNonReentrantLock (4.4.0+, docs/wire-protocol.md): RLock's acquire
 * whose owner-field branch replies the marker ARGV[3] as an error (Redis 7
 * sends it as "ERR NON_REENTRANT_REACQUIRE"). */
static const char nonre_acquire_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  return nil "
    "end "
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  return redis.error_reply(ARGV[3]) "
    "end "
    "return redis.call('pttl', KEYS[1])";

/* 4.x. KEYS[1] lock, KEYS[2] channel, KEYS[3] latch; ARGV[1] message,
 * ARGV[2] lease, ARGV[3] owner, ARGV[4] publish command, ARGV[5] latch TTL.
 * nil = not held by owner, 0 = still held, 1 = released. */
static const char release4_lua[] =
    "local done = redis.call('get', KEYS[3]) "
    "if done ~= false then return tonumber(done) end "
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  redis.call('set', KEYS[3], 0, 'px', ARGV[5]) "
    "  return 0 "
    "end "
    "redis.call('del', KEYS[1]) "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]) "
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]) "
    "return 1";

/* 3.x before 3.24: no latch. KEYS[1] lock, KEYS[2] channel; ARGV[1] message,
 * ARGV[2] lease, ARGV[3] owner, ARGV[4] publish command. */
static const char release3_lua[] =
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  return 0 "
    "end "
    "redis.call('del', KEYS[1]) "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]) "
    "return 1";

/* KEYS[1] lock, KEYS[2] channel; ARGV[1] message, ARGV[2] publish command. */
static const char force_lua[] = "if redis.call('del', KEYS[1]) == 1 then "
                                "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
                                "  return 1 "
                                "end "
                                "return 0";

/* KEYS = locks; ARGV[1] watchdog ms, ARGV[i + 1] owner of KEYS[i].
 * Reply: 1 (renewed) or 0 (gone) per key. */
static const char renew_lua[] =
    "local renewed = {} "
    "for i, key in ipairs(KEYS) do "
    "  if redis.call('hexists', key, ARGV[i + 1]) == 1 then "
    "    redis.call('pexpire', key, ARGV[1]) "
    "    renewed[i] = 1 "
    "  else "
    "    renewed[i] = 0 "
    "  end "
    "end "
    "return renewed";

/* ---- the other lock kinds (own Lua, from the fact sheet's account of
 * Redisson 4.7: fair, read/write, fenced, spin) ---- */

/* Fair lock, the head-of-queue prune shared by its scripts: drop the first
 * waiter while its deadline (zset score) is at or before `now`. */
#define FAIR_PRUNE(zkey, qkey)                                                 \
  "while true do "                                                             \
  "  local h = redis.call('lindex', " qkey ", 0) "                             \
  "  if not h then break end "                                                 \
  "  local s = redis.call('zscore', " zkey ", h) "                             \
  "  if not s or tonumber(s) > now then break end "                            \
  "  redis.call('zrem', " zkey ", h) "                                         \
  "  redis.call('lpop', " qkey ") "                                            \
  "end "

/* Steps shared by both fair acquires: take the free lock when first in
 * line (the others' deadlines move up by our wait), or re-enter. */
#define FAIR_TAKE                                                             \
  "if redis.call('exists', KEYS[1]) == 0 then "                                \
  "  local h = redis.call('lindex', KEYS[2], 0) "                              \
  "  if (not h) or h == ARGV[2] then "                                         \
  "    redis.call('lpop', KEYS[2]) "                                           \
  "    redis.call('zrem', KEYS[3], ARGV[2]) "                                  \
  "    for _, m in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do "           \
  "      redis.call('zincrby', KEYS[3], -wait, m) "                            \
  "    end "                                                                   \
  "    redis.call('hset', KEYS[1], ARGV[2], 1) "                               \
  "    redis.call('pexpire', KEYS[1], ARGV[1]) "                               \
  "    return nil "                                                            \
  "  end "                                                                     \
  "end "
#define FAIR_TAKE_OR_REENTER                                                   \
  FAIR_TAKE                                                                    \
  "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "                      \
  "  redis.call('hincrby', KEYS[1], ARGV[2], 1) "                              \
  "  redis.call('pexpire', KEYS[1], ARGV[1]) "                                 \
  "  return nil "                                                              \
  "end "

/* getNonReentrantFairLock: the owner's own field is an error reply with
 * the marker (ARGV[5]), before any queue step. */
#define FAIR_TAKE_OR_REFUSE                                                    \
  FAIR_TAKE                                                                    \
  "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "                      \
  "  return redis.error_reply(ARGV[5]) "                                       \
  "end "

/* tryLock(wait, lease) / lock(). KEYS[1] hash, KEYS[2] queue, KEYS[3]
 * deadlines; ARGV[1] lease, ARGV[2] owner, ARGV[3] waitMs, ARGV[4] now.
 * nil = acquired, else the wait hint (0: queued, lock free, not our turn). */
#define FAIR_ACQUIRE_LUA(TAKE) \
    "local now = tonumber(ARGV[4]) " \
    "local wait = tonumber(ARGV[3]) " FAIR_PRUNE( \
        "KEYS[3]", "KEYS[2]") TAKE \
    "if redis.call('zscore', KEYS[3], ARGV[2]) then " \
    "  local t = redis.call('pttl', KEYS[1]) " \
    "  if t < 0 then t = 0 end " \
    "  return t " \
    "end " \
    "local base = nil " \
    "local last = redis.call('lindex', KEYS[2], -1) " \
    "if last and last ~= ARGV[2] then " \
    "  local s = redis.call('zscore', KEYS[3], last) " \
    "  if s then base = tonumber(s) - now end " \
    "end " \
    "if base == nil then base = redis.call('pttl', KEYS[1]) end " \
    "if redis.call('zadd', KEYS[3], base + wait + now, ARGV[2]) == 1 then " \
    "  redis.call('rpush', KEYS[2], ARGV[2]) " \
    "end " \
    "return base"
static const char fair_acquire_lua[] = FAIR_ACQUIRE_LUA(FAIR_TAKE_OR_REENTER);

/* tryLock(): the same keys, ARGV[3] now and ARGV[4] waitMs (swapped).
 * nil = acquired, 1 = not (never queues). */
#define FAIR_TRY_LUA(TAKE) \
    "local now = tonumber(ARGV[3]) " \
    "local wait = tonumber(ARGV[4]) " FAIR_PRUNE( \
        "KEYS[3]", "KEYS[2]") TAKE "return 1"
static const char fair_try_lua[] = FAIR_TRY_LUA(FAIR_TAKE_OR_REENTER);

/* The non-reentrant fair lock's two acquire forms: ARGV[5] the marker. */
static const char nonre_fair_acquire_lua[] =
    FAIR_ACQUIRE_LUA(FAIR_TAKE_OR_REFUSE);
static const char nonre_fair_try_lua[] = FAIR_TRY_LUA(FAIR_TAKE_OR_REFUSE);

/* acquireFailed. KEYS[1] queue, KEYS[2] deadlines; ARGV[1] owner,
 * ARGV[2] waitMs. Everyone behind the owner moves up by waitMs. */
static const char fair_failed_lua[] =
    "local behind = false "
    "for _, m in ipairs(redis.call('lrange', KEYS[1], 0, -1)) do "
    "  if behind then redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), m) "
    "  elseif m == ARGV[1] then behind = true end "
    "end "
    "redis.call('zrem', KEYS[2], ARGV[1]) "
    "redis.call('lrem', KEYS[1], 0, ARGV[1]) "
    "return nil";

/* unlock. KEYS[1] hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] channel
 * base, KEYS[5] latch; ARGV[1] message, ARGV[2] lease, ARGV[3] owner,
 * ARGV[4] now, ARGV[5] publish command, ARGV[6] latch TTL. */
static const char fair_unlock_lua[] =
    "local done = redis.call('get', KEYS[5]) "
    "if done then return tonumber(done) end "
    "local now = tonumber(ARGV[4]) " FAIR_PRUNE("KEYS[3]", "KEYS[2]")
    "local function tell_head() "
    "  local h = redis.call('lindex', KEYS[2], 0) "
    "  if h then redis.call(ARGV[5], KEYS[4] .. ':' .. h, ARGV[1]) end "
    "end "
    "if redis.call('exists', KEYS[1]) == 0 then "
    "  tell_head() "
    "  redis.call('set', KEYS[5], 1, 'px', ARGV[6]) "
    "  return 1 "
    "end "
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  redis.call('set', KEYS[5], 0, 'px', ARGV[6]) "
    "  return 0 "
    "end "
    "redis.call('del', KEYS[1]) "
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]) "
    "tell_head() "
    "return 1";

/* forceUnlock. KEYS[1] hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4]
 * channel base; ARGV[1] message, ARGV[2] now, ARGV[3] publish command. */
static const char fair_force_lua[] =
    "local now = tonumber(ARGV[2]) " FAIR_PRUNE("KEYS[3]", "KEYS[2]")
    "if redis.call('del', KEYS[1]) == 1 then "
    "  local h = redis.call('lindex', KEYS[2], 0) "
    "  if h then redis.call(ARGV[3], KEYS[4] .. ':' .. h, ARGV[1]) end "
    "  return 1 "
    "end "
    "return 0";

/* Read acquire. KEYS[1] hash, KEYS[2] timeout key base
 * ({name}:<owner>:rwlock_timeout); ARGV[1] lease, ARGV[2] owner,
 * ARGV[3] owner:write. nil = acquired, else PTTL. */
static const char read_acquire_lua[] =
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if not mode then "
    "  redis.call('hset', KEYS[1], 'mode', 'read') "
    "  redis.call('hset', KEYS[1], ARGV[2], 1) "
    "  redis.call('set', KEYS[2] .. ':1', 1) "
    "  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]) "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  return nil "
    "end "
    "if mode == 'read' or (mode == 'write' and "
    "    redis.call('hexists', KEYS[1], ARGV[3]) == 1) then "
    "  local i = redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "  local k = KEYS[2] .. ':' .. i "
    "  redis.call('set', k, 1) "
    "  redis.call('pexpire', k, ARGV[1]) "
    "  local left = redis.call('pttl', KEYS[1]) "
    "  redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1]))) "
    "  return nil "
    "end "
    "return redis.call('pttl', KEYS[1])";

/* Read unlock. KEYS[1] hash, KEYS[2] channel, KEYS[3] timeout key base,
 * KEYS[4] key prefix ({name}), KEYS[5] latch; ARGV[1] message, ARGV[2]
 * owner, ARGV[3] publish command, ARGV[4] latch TTL. The hash lives on as
 * long as the longest remaining read-hold key of any field. */
static const char read_unlock_lua[] =
    "local done = redis.call('get', KEYS[5]) "
    "if done then return tonumber(done) end "
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if not mode then "
    "  redis.call(ARGV[3], KEYS[2], ARGV[1]) "
    "  redis.call('set', KEYS[5], 1, 'px', ARGV[4]) "
    "  return nil "
    "end "
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end "
    "local c = redis.call('hincrby', KEYS[1], ARGV[2], -1) "
    "if c == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end "
    "redis.call('del', KEYS[3] .. ':' .. (c + 1)) "
    "if redis.call('hlen', KEYS[1]) > 1 then "
    "  local best = -3 "
    "  local all = redis.call('hgetall', KEYS[1]) "
    "  for j = 1, #all, 2 do "
    "    local n = tonumber(all[j + 1]) "
    "    if n then "
    "      for i = n, 1, -1 do "
    "        local t = redis.call('pttl', KEYS[4] .. ':' .. all[j] .. "
    "                             ':rwlock_timeout:' .. i) "
    "        if t > best then best = t end "
    "      end "
    "    end "
    "  end "
    "  if best > 0 then "
    "    redis.call('pexpire', KEYS[1], best) "
    "    redis.call('set', KEYS[5], 0, 'px', ARGV[4]) "
    "    return 0 "
    "  end "
    "  if mode == 'write' then "
    "    redis.call('set', KEYS[5], 0, 'px', ARGV[4]) "
    "    return 0 "
    "  end "
    "end "
    "redis.call('del', KEYS[1]) "
    "redis.call(ARGV[3], KEYS[2], ARGV[1]) "
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]) "
    "return 1";

/* Write acquire. KEYS[1] hash; ARGV[1] lease, ARGV[2] owner:write.
 * Re-entry adds the lease to the remaining TTL. */
static const char write_acquire_lua[] =
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if not mode then "
    "  redis.call('hset', KEYS[1], 'mode', 'write') "
    "  redis.call('hset', KEYS[1], ARGV[2], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  return nil "
    "end "
    "if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "  local left = redis.call('pttl', KEYS[1]) "
    "  redis.call('pexpire', KEYS[1], left + tonumber(ARGV[1])) "
    "  return nil "
    "end "
    "return redis.call('pttl', KEYS[1])";

/* Write unlock. KEYS[1] hash, KEYS[2] channel, KEYS[3] latch; ARGV[1]
 * message (1), ARGV[2] lease, ARGV[3] owner:write, ARGV[4] publish command,
 * ARGV[5] latch TTL. Its own remaining read holds downgrade the lock to
 * read mode, silently. */
static const char write_unlock_lua[] =
    "local done = redis.call('get', KEYS[3]) "
    "if done then return tonumber(done) end "
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if not mode then "
    "  redis.call(ARGV[4], KEYS[2], ARGV[1]) "
    "  redis.call('set', KEYS[3], 1, 'px', ARGV[5]) "
    "  return nil "
    "end "
    "if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then "
    "  return nil "
    "end "
    "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  redis.call('set', KEYS[3], 0, 'px', ARGV[5]) "
    "  return 0 "
    "end "
    "redis.call('hdel', KEYS[1], ARGV[3]) "
    "if redis.call('hlen', KEYS[1]) == 1 then "
    "  redis.call('del', KEYS[1]) "
    "  redis.call(ARGV[4], KEYS[2], ARGV[1]) "
    "else "
    "  redis.call('hset', KEYS[1], 'mode', 'read') "
    "end "
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]) "
    "return 1";

/* Read forceUnlock. KEYS[1] hash, KEYS[2] channel; ARGV[1] message (0),
 * ARGV[2] publish command. Only a read-mode lock is deleted. */
static const char read_force_lua[] =
    "if redis.call('hget', KEYS[1], 'mode') == 'read' then "
    "  redis.call('del', KEYS[1]) "
    "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
    "  return 1 "
    "end "
    "return 0";

/* Write forceUnlock: the same for a write-mode lock, message 1. */
static const char write_force_lua[] =
    "if redis.call('hget', KEYS[1], 'mode') == 'write' then "
    "  redis.call('del', KEYS[1]) "
    "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
    "  return 1 "
    "end "
    "return 0";

/* ReadLockTask. KEYS in pairs (hash, {name}); ARGV[1] timeout, then per
 * pair: n, owner_1..owner_n. Reply 1/0 per pair. */
static const char read_renew_lua[] =
    "local res = {} "
    "local a = 2 "
    "for p = 1, #KEYS / 2 do "
    "  local h, pre = KEYS[2 * p - 1], KEYS[2 * p] "
    "  local n = tonumber(ARGV[a]) "
    "  a = a + 1 "
    "  local alive = 0 "
    "  for j = 1, n do "
    "    local o = ARGV[a] "
    "    a = a + 1 "
    "    local c = redis.call('hget', h, o) "
    "    if c then "
    "      for i = tonumber(c), 1, -1 do "
    "        redis.call('pexpire', pre .. ':' .. o .. ':rwlock_timeout:' .. i, "
    "                   ARGV[1]) "
    "      end "
    "      alive = 1 "
    "    end "
    "  end "
    "  if alive == 1 then redis.call('pexpire', h, ARGV[1]) end "
    "  res[p] = alive "
    "end "
    "return res";

/* Fenced lock()/tryLock(). KEYS[1] hash, KEYS[2] token counter; ARGV[1]
 * lease, ARGV[2] owner. nil = acquired (token incremented), else PTTL. */
static const char fenced_acquire_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 "
    "or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  redis.call('incr', KEYS[2]) "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  return nil "
    "end "
    "return redis.call('pttl', KEYS[1])";

/* lockAndGetToken / tryLockAndGetToken: {-1, token} or {pttl, -1}. */
static const char fenced_token_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 "
    "or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  local token = redis.call('incr', KEYS[2]) "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  return {-1, token} "
    "end "
    "return {redis.call('pttl', KEYS[1]), -1}";

/* Spin unlock. KEYS[1] hash, KEYS[2] latch; ARGV[1] lease, ARGV[2] owner,
 * ARGV[3] latch TTL. No message. */
static const char spin_unlock_lua[] =
    "local done = redis.call('get', KEYS[2]) "
    "if done then return tonumber(done) end "
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then "
    "  redis.call('pexpire', KEYS[1], ARGV[1]) "
    "  redis.call('set', KEYS[2], 0, 'px', ARGV[3]) "
    "  return 0 "
    "end "
    "redis.call('del', KEYS[1]) "
    "redis.call('set', KEYS[2], 1, 'px', ARGV[3]) "
    "return 1";

/* Spin forceUnlock. KEYS[1] hash. */
static const char spin_force_lua[] = "return redis.call('del', KEYS[1])";

/* ---- the semaphore and the count-down latch (own Lua, from the fact
 * sheet's account of Redisson 4.7's RSemaphore and RCountDownLatch) ---- */

/* tryAcquire(n). KEYS[1] count; ARGV[1] n. 1 taken, 0 not (no message). */
static const char sem_try_lua[] =
    "local v = redis.call('get', KEYS[1]) "
    "if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then "
    "  redis.call('decrby', KEYS[1], ARGV[1]) "
    "  return 1 "
    "end "
    "return 0";

/* release(n). KEYS[1] count, KEYS[2] channel; ARGV[1] n, ARGV[2] publish
 * command. Publishes the new total; replies nil. */
static const char sem_release_lua[] =
    "local v = redis.call('incrby', KEYS[1], ARGV[1]) "
    "redis.call(ARGV[2], KEYS[2], v) "
    "return nil";

/* trySetPermits(n). KEYS[1] count, KEYS[2] channel; ARGV[1] n, ARGV[2]
 * publish command. 1 set (and n published), 0 it existed. */
static const char sem_set_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "  redis.call('set', KEYS[1], ARGV[1]) "
    "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
    "  return 1 "
    "end "
    "return 0";

/* addPermits(n), n may be negative. KEYS and ARGV as release: read, SET
 * the sum, publish it. */
static const char sem_add_lua[] =
    "local v = redis.call('get', KEYS[1]) "
    "if v == false then v = 0 end "
    "local t = tonumber(v) + tonumber(ARGV[1]) "
    "redis.call('set', KEYS[1], t) "
    "redis.call(ARGV[2], KEYS[2], t) "
    "return nil";

/* drainPermits. KEYS[1] count. The old count (0 when missing), set to 0. */
static const char sem_drain_lua[] =
    "local v = redis.call('get', KEYS[1]) "
    "if v == false then return 0 end "
    "redis.call('set', KEYS[1], 0) "
    "return tonumber(v)";

/* trySetCount(n). KEYS[1] count, KEYS[2] channel; ARGV[1] message (1),
 * ARGV[2] n, ARGV[3] publish command. 1 set, 0 it existed. */
static const char latch_set_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "  redis.call('set', KEYS[1], ARGV[2]) "
    "  redis.call(ARGV[3], KEYS[2], ARGV[1]) "
    "  return 1 "
    "end "
    "return 0";

/* countDown. KEYS[1] count, KEYS[2] channel; ARGV[1] message (0), ARGV[2]
 * publish command. At <= 0 the key goes; exactly 0 publishes. nil. */
static const char latch_down_lua[] =
    "local v = redis.call('decr', KEYS[1]) "
    "if v <= 0 then redis.call('del', KEYS[1]) end "
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end "
    "return nil";

/* delete. KEYS[1] count, KEYS[2] channel; ARGV[1] message (1), ARGV[2]
 * publish command. 1 deleted (and published), 0 there was none. */
static const char latch_delete_lua[] =
    "if redis.call('del', KEYS[1]) == 1 then "
    "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
    "  return 1 "
    "end "
    "return 0";

/* The permit-expirable semaphore's reclaim: every id whose expiry
 * (score) is at or before `now` goes back to the count (LIMIT: at most
 * `lim` ids; nil no limit), whose new value is published when > 0. A
 * prefix of the pes_* scripts (Z, V, channel, now, publish, lim set by
 * each). */
#define PES_RECLAIM                                                        \
  "local exp = lim and redis.call('zrangebyscore', Z, 0, now, 'limit', 0, " \
  "lim) or redis.call('zrangebyscore', Z, 0, now) "                        \
  "if #exp > 0 then "                                                      \
  "  redis.call('zrem', Z, unpack(exp)) "                                  \
  "  local v = redis.call('incrby', V, #exp) "                             \
  "  if v > 0 then redis.call(pub, C, v) end "                             \
  "end "

/* acquire / tryAcquire of n permits. KEYS[1] count, KEYS[2] zset, KEYS[3]
 * channel; ARGV[1] n, ARGV[2] expiry, ARGV[3] now, ARGV[4] the no-lease
 * sentinel, ARGV[5] publish command, ARGV[6..] the n ids. Reclaim at most
 * n; then with n free: DECRBY n, ZADD every id, the count's TTL onto the
 * zset, status OK. Else ":"..lowest score unless it is the sentinel; nil. */
static const char pes_acquire_lua[] =
    "local V, Z, C = KEYS[1], KEYS[2], KEYS[3] "
    "local now, pub, lim = ARGV[3], ARGV[5], tonumber(ARGV[1]) " PES_RECLAIM
    "local v = redis.call('get', V) "
    "if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then "
    "  redis.call('decrby', V, ARGV[1]) "
    "  for i = 6, #ARGV do redis.call('zadd', Z, ARGV[2], ARGV[i]) end "
    "  local ttl = redis.call('pttl', V) "
    "  if ttl > 0 then redis.call('pexpire', Z, ttl) end "
    "  return redis.status_reply('OK') "
    "end "
    "local low = redis.call('zrange', Z, 0, 0, 'withscores') "
    "if low[2] ~= nil and low[2] ~= ARGV[4] then return ':' .. low[2] end "
    "return nil";

/* tryRelease(List). KEYS[1] count, KEYS[2] channel, KEYS[3] zset; ARGV[1]
 * the number of ids, ARGV[2] now, ARGV[3] publish command, ARGV[4..] the
 * ids. Any id missing or expired: 0, nothing changed. Else reclaim (no
 * limit), ZREM the ids, INCRBY and publish the number removed, reply it. */
static const char pes_release_lua[] =
    "for i = 4, #ARGV do "
    "  local s = redis.call('zscore', KEYS[3], ARGV[i]) "
    "  if s == false or tonumber(s) <= tonumber(ARGV[2]) then return 0 end "
    "end "
    "local V, Z, C = KEYS[1], KEYS[3], KEYS[2] "
    "local now, pub, lim = ARGV[2], ARGV[3], nil " PES_RECLAIM
    "local r = 0 "
    "for i = 4, #ARGV do r = r + redis.call('zrem', Z, ARGV[i]) end "
    "redis.call('incrby', V, r) "
    "redis.call(pub, C, r) "
    "return r";

/* setPermits(n). KEYS[1] count, KEYS[2] channel, KEYS[3] zset; ARGV[1] n,
 * ARGV[2] publish command. Missing: SET n. Else the size is count + every
 * zset member (no reclaim); a different size moves the count by the
 * difference. Either change publishes n. nil. */
static const char pes_set_lua[] =
    "local v = redis.call('get', KEYS[1]) "
    "if v == false then "
    "  redis.call('set', KEYS[1], ARGV[1]) "
    "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
    "  return nil "
    "end "
    "local size = tonumber(v) + redis.call('zcount', KEYS[3], '-inf', '+inf') "
    "if size ~= tonumber(ARGV[1]) then "
    "  redis.call('incrby', KEYS[1], tonumber(ARGV[1]) - size) "
    "  redis.call(ARGV[2], KEYS[2], ARGV[1]) "
    "end "
    "return nil";

/* getPermits. KEYS[1] count, KEYS[2] zset, KEYS[3] channel; ARGV[1] now,
 * ARGV[2] publish command. Reclaim; 0 when the count is missing, else
 * count + zset size. */
static const char pes_permits_lua[] =
    "local V, Z, C = KEYS[1], KEYS[2], KEYS[3] "
    "local now, pub, lim = ARGV[1], ARGV[2], nil " PES_RECLAIM
    "local v = redis.call('get', V) "
    "if v == false then return 0 end "
    "return tonumber(v) + redis.call('zcount', Z, '-inf', '+inf')";

/* getLeaseTime(id). KEYS[1] count, KEYS[2] zset, KEYS[3] channel; ARGV[1]
 * id, ARGV[2] sentinel, ARGV[3] now, ARGV[4] publish command. Reclaim;
 * -1 no lease, else the ms left; 0 not taken (Java then throws). */
static const char pes_lease_lua[] =
    "local V, Z, C = KEYS[1], KEYS[2], KEYS[3] "
    "local now, pub, lim = ARGV[3], ARGV[4], nil " PES_RECLAIM
    "local s = redis.call('zscore', Z, ARGV[1]) "
    "if s == false then return 0 end "
    "if s == ARGV[2] then return -1 end "
    "return tonumber(s) - tonumber(now)";

enum {
  S_ACQUIRE,
  S_RELEASE4,
  S_RELEASE3,
  S_FORCE,
  S_RENEW,
  S_FAIR_ACQUIRE,
  S_FAIR_TRY,
  S_FAIR_FAILED,
  S_FAIR_UNLOCK,
  S_FAIR_FORCE,
  S_READ_ACQUIRE,
  S_READ_UNLOCK,
  S_WRITE_ACQUIRE,
  S_WRITE_UNLOCK,
  S_READ_FORCE,
  S_WRITE_FORCE,
  S_READ_RENEW,
  S_FENCED_ACQUIRE,
  S_FENCED_TOKEN,
  S_SPIN_UNLOCK,
  S_SPIN_FORCE,
  S_SEM_TRY,
  S_SEM_RELEASE,
  S_SEM_SET,
  S_SEM_ADD,
  S_SEM_DRAIN,
  S_LATCH_SET,
  S_LATCH_DOWN,
  S_LATCH_DELETE,
  S_NONRE_ACQUIRE,
  S_PES_ACQUIRE,
  S_PES_RELEASE,
  S_PES_SET,
  S_PES_PERMITS,
  S_PES_LEASE,
  S_NONRE_FAIR_ACQUIRE,
  S_NONRE_FAIR_TRY,
  S_COUNT
};
static struct {
  const char *body;
  char sha[41];
} scripts[S_COUNT] = {
    {acquire_lua, ""},        {release4_lua, ""},     {release3_lua, ""},
    {force_lua, ""},          {renew_lua, ""},        {fair_acquire_lua, ""},
    {fair_try_lua, ""},       {fair_failed_lua, ""},  {fair_unlock_lua, ""},
    {fair_force_lua, ""},     {read_acquire_lua, ""}, {read_unlock_lua, ""},
    {write_acquire_lua, ""},  {write_unlock_lua, ""},
    {read_force_lua, ""},     {write_force_lua, ""},  {read_renew_lua, ""},     {fenced_acquire_lua, ""},
    {fenced_token_lua, ""},   {spin_unlock_lua, ""},  {spin_force_lua, ""},
    {sem_try_lua, ""},        {sem_release_lua, ""},  {sem_set_lua, ""},
    {sem_add_lua, ""},        {sem_drain_lua, ""},    {latch_set_lua, ""},
    {latch_down_lua, ""},     {latch_delete_lua, ""},
    {nonre_acquire_lua, ""},
    {pes_acquire_lua, ""},    {pes_release_lua, ""},  {pes_set_lua, ""},
    {pes_permits_lua, ""},    {pes_lease_lua, ""},
    {nonre_fair_acquire_lua, ""}, {nonre_fair_try_lua, ""},
};

/* ---- process state ---- */

/* One pub/sub subscription per channel, shared by this process's waiters. */
enum { SUB_NONE, SUB_PENDING, SUB_SENT, SUB_LIVE, UNSUB_PENDING, UNSUB_SENT };

typedef struct entry {
  struct entry *next;
  char *channel;
  int state;
  int refs;     /* waiters using the subscription */
  long permits; /* Java's semaphore */
  int sleepers;
  int kind;  /* E_LOCK, E_SEM (redisson_sc) or E_LATCH (count-down latch) */
  bool open; /* E_LATCH: Java's reclosable latch, closed at creation */
  /* The node whose subscriber connection has it (sent or live); the order
   * of its command awaiting a reply (*_SENT); SUB_PENDING: no resend
   * before this time (a cluster retry). */
  int node;
  uint64_t seq;
  int64_t not_before;
} entry;

enum { E_LOCK, E_SEM, E_LATCH };

/* A lock this process renews (taken without a lease). */
typedef struct renewal {
  struct renewal *next;
  char *name;
  char *owner; /* the hash field: owner, or owner:write for a write lock */
  long holds;
  bool read; /* a read lock: ReadLockTask, not LockTask */
} renewal;

/* A Redis server: in cluster mode a master (or a seed). */
typedef struct cnode {
  char *host;
  int port;
  redisContext *cmd; /* command connection, lazily made; under cmd_mu */
  redisContext *sub; /* subscriber connection, lazily made; under sub_mu */
} cnode;

/* Lease to re-apply on unlock, per lock name (Java's internalLockLeaseTime). */
typedef struct lease_rec {
  struct lease_rec *next;
  char *name;
  int64_t lease_ms;
} lease_rec;

static struct {
  const char *host;
  int port;
  bool cluster; /* --cluster: route by slot, follow redirections */
  int64_t watchdog_ms;
  int64_t latch_ttl_ms;
  int64_t subscribe_timeout_ms;
  int64_t deadline_ms;
  bool sharded;        /* SPUBLISH/SSUBSCRIBE, as Java against a cluster */
  const char *publish; /* "PUBLISH" or "SPUBLISH" */
  char id[37];
  char owner[64];

  pthread_mutex_t out_mu;

  pthread_mutex_t cmd_mu; /* every command connection */

  pthread_mutex_t map_mu; /* the node table and the slot map */
  cnode nodes[MAX_NODES];
  int n_nodes;
  int16_t slots[CLUSTER_SLOTS]; /* slot -> master node, -1 unknown */

  pthread_mutex_t sub_mu;
  pthread_cond_t sub_cond; /* CLOCK_MONOTONIC */
  uint64_t sub_seq;        /* last *_SENT order given */
  int wake[2];
  entry *entries;
  bool quiet_waits;

  pthread_mutex_t renew_mu;
  renewal *renewals;

  lease_rec *leases; /* main thread only */
} g;

/* ---- small helpers ---- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                        .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void deadline_ts(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += (time_t)(ms / 1000);
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&g.out_mu);
  vprintf(fmt, ap);
  putchar('\n');
  fflush(stdout);
  pthread_mutex_unlock(&g.out_mu);
  va_end(ap);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  out("ERROR %s", msg);
  fprintf(stderr, "javapeer: %s\n", msg);
  _exit(1);
}

static int64_t num(const char *s);

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL)
    die("out of memory");
  return p;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

static void random_bytes(unsigned char *buf, size_t n) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    die("open /dev/urandom: %s", strerror(errno));
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0 && errno != EINTR)
      die("read /dev/urandom: %s", strerror(errno));
    if (r > 0)
      got += (size_t)r;
  }
  close(fd);
}

static void random_hex(char *out_hex, size_t bytes) {
  unsigned char raw[64];
  random_bytes(raw, bytes);
  for (size_t i = 0; i < bytes; i++)
    snprintf(out_hex + 2 * i, 3, "%02x", raw[i]);
}

/* A version 4 UUID, lowercase, 36 characters, like java.util.UUID. */
static void random_uuid(char out_id[37]) {
  unsigned char b[16];
  random_bytes(b, sizeof b);
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out_id, 37,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
}

/* "{name}", or the bare name when it already contains '{' (docs/wire-protocol.md). */
static char *braced(const char *name) {
  size_t n = strlen(name);
  char *s = xmalloc(n + 3);
  if (strchr(name, '{'))
    memcpy(s, name, n + 1);
  else
    snprintf(s, n + 3, "{%s}", name);
  return s;
}

static char *channel_of(const char *name) {
  char *b = braced(name);
  size_t n = strlen(b) + sizeof "redisson_lock__channel:";
  char *s = xmalloc(n);
  snprintf(s, n, "redisson_lock__channel:%s", b);
  free(b);
  return s;
}

static redisContext *connect_to(const char *host, int port) {
  struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout(host, port, tv);
  if (c == NULL || c->err)
    die("connect %s:%d: %s", host, port, c ? c->errstr : "out of memory");
  redisSetTimeout(c, tv);
  return c;
}

/* ---- cluster mode: nodes, key slots, the slot map ----
 * A node is added once (seeds first, then what CLUSTER SLOTS, MOVED and
 * ASK name) and never removed, so an index stays valid. Its command
 * connection is used under cmd_mu, its subscriber connection under
 * sub_mu; the table and the slot map are under map_mu, which is taken
 * last (cmd_mu -> map_mu, sub_mu -> map_mu). In standalone mode node 0 is
 * the server and every slot is it. */

/* CRC16-CCITT (XModem): polynomial 0x1021, initial value 0, bitwise. */
static uint16_t crc16_xmodem(const char *s, size_t n) {
  uint16_t crc = 0;
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint16_t)((uint16_t)(unsigned char)s[i] << 8);
    for (int bit = 0; bit < 8; bit++)
      crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                           : (uint16_t)(crc << 1);
  }
  return crc;
}

/* The key's cluster slot: of its hash tag (between the first '{' and the
 * next '}', when not empty), else of the whole key. */
static int key_slot(const char *key) {
  size_t n = strlen(key);
  const char *open = memchr(key, '{', n);
  if (open != NULL) {
    const char *tag = open + 1;
    const char *close = memchr(tag, '}', n - (size_t)(tag - key));
    if (close != NULL && close > tag)
      return crc16_xmodem(tag, (size_t)(close - tag)) % CLUSTER_SLOTS;
  }
  return crc16_xmodem(key, n) % CLUSTER_SLOTS;
}

static int node_count(void) {
  pthread_mutex_lock(&g.map_mu);
  int n = g.n_nodes;
  pthread_mutex_unlock(&g.map_mu);
  return n;
}

/* The node's index, added if new. */
static int node_add(const char *host, int port) {
  pthread_mutex_lock(&g.map_mu);
  int i = 0;
  while (i < g.n_nodes &&
         !(g.nodes[i].port == port && strcmp(g.nodes[i].host, host) == 0))
    i++;
  if (i == g.n_nodes) {
    if (g.n_nodes == MAX_NODES)
      die("more than %d cluster nodes", MAX_NODES);
    g.nodes[i].host = xstrdup(host);
    g.nodes[i].port = port;
    g.nodes[i].cmd = NULL;
    g.nodes[i].sub = NULL;
    g.n_nodes++;
  }
  pthread_mutex_unlock(&g.map_mu);
  return i;
}

/* "host:port" (the last ':' splits, for IPv6) -> node index, -1 if bad. */
static int node_of_addr(const char *addr) {
  const char *colon = strrchr(addr, ':');
  if (colon == NULL || colon == addr)
    return -1;
  int64_t port = num(colon + 1);
  if (port <= 0 || port > 65535)
    return -1;
  char host[256];
  size_t n = (size_t)(colon - addr);
  if (n >= sizeof host)
    return -1;
  memcpy(host, addr, n);
  host[n] = '\0';
  return node_add(host, (int)port);
}

/* The master owning a slot (node 0 while unknown). */
static int slot_owner(int slot) {
  pthread_mutex_lock(&g.map_mu);
  int i = g.slots[slot];
  pthread_mutex_unlock(&g.map_mu);
  return i >= 0 ? i : 0;
}

static void slot_set(int slot, int node) {
  pthread_mutex_lock(&g.map_mu);
  g.slots[slot] = (int16_t)node;
  pthread_mutex_unlock(&g.map_mu);
}

/* Reads CLUSTER SLOTS from node i, on a connection of its own (so any
 * thread may call it, whatever it holds). True if the map was read. */
static bool slots_from(int i) {
  pthread_mutex_lock(&g.map_mu);
  char *host = xstrdup(g.nodes[i].host);
  int port = g.nodes[i].port;
  pthread_mutex_unlock(&g.map_mu);
  struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout(host, port, tv);
  bool ok = false;
  if (c != NULL && !c->err) {
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
      ok = true;
      for (size_t k = 0; k < r->elements; k++) {
        redisReply *e = r->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 ||
            e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
          continue;
        const char *mhost = e->element[2]->element[0]->str;
        if (mhost[0] == '\0' || strcmp(mhost, "?") == 0)
          mhost = host; /* unknown endpoint: the node we asked */
        int m = node_add(mhost, (int)e->element[2]->element[1]->integer);
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        pthread_mutex_lock(&g.map_mu);
        for (long long s = lo; s <= hi && s < CLUSTER_SLOTS; s++)
          if (s >= 0)
            g.slots[s] = (int16_t)m;
        pthread_mutex_unlock(&g.map_mu);
      }
    }
    if (r != NULL)
      freeReplyObject(r);
  }
  if (c != NULL)
    redisFree(c);
  free(host);
  return ok;
}

/* Re-reads the slot map: from node `prefer` first (if >= 0), else from
 * the known nodes in order (seeds first). Keeps the old map if none
 * answers. */
static bool refresh_slots(int prefer) {
  if (prefer >= 0 && slots_from(prefer))
    return true;
  for (int i = 0; i < node_count(); i++)
    if (i != prefer && slots_from(i))
      return true;
  return false;
}

/* ---- the command connections ---- */

static void load_scripts_on(redisContext *c) {
  for (int i = 0; i < S_COUNT; i++) {
    const char *argv[3] = {"SCRIPT", "LOAD", scripts[i].body};
    redisReply *r = redisCommandArgv(c, 3, argv, NULL);
    if (r == NULL)
      die("redis: %s", c->errstr);
    if (r->type != REDIS_REPLY_STRING || r->len != 40)
      die("SCRIPT LOAD failed: %s",
          r->type == REDIS_REPLY_ERROR ? r->str : "?");
    memcpy(scripts[i].sha, r->str, 41);
    freeReplyObject(r);
  }
}

/* Node i's command connection, made (and its scripts loaded) on first
 * use; cmd_mu held. */
static redisContext *node_cmd(int i) {
  if (g.nodes[i].cmd == NULL) {
    pthread_mutex_lock(&g.map_mu);
    char *host = xstrdup(g.nodes[i].host);
    int port = g.nodes[i].port;
    pthread_mutex_unlock(&g.map_mu);
    redisContext *c = connect_to(host, port);
    free(host);
    if (g.cluster)
      load_scripts_on(c);
    g.nodes[i].cmd = c;
  }
  return g.nodes[i].cmd;
}

/* The key a command is routed by: an EVALSHA/EVAL's first KEYS entry,
 * else argv[1]; NULL when there is none. */
static const char *routing_key(int argc, const char **argv) {
  if (strcasecmp(argv[0], "EVALSHA") == 0 || strcasecmp(argv[0], "EVAL") == 0)
    return argc > 3 && num(argv[2]) > 0 ? argv[3] : NULL;
  return argc > 1 ? argv[1] : NULL;
}

static bool error_is(const redisReply *r, const char *code) {
  size_t n = strlen(code);
  return r->type == REDIS_REPLY_ERROR && strncmp(r->str, code, n) == 0 &&
         (r->str[n] == ' ' || r->str[n] == '\0');
}

/* Parses "MOVED|ASK <slot> <host>:<port>": the slot and the node. */
static bool parse_redirect(const char *msg, int *slot, int *node) {
  char word[16], addr[300];
  if (sscanf(msg, "%15s %d %299s", word, slot, addr) != 3 || *slot < 0 ||
      *slot >= CLUSTER_SLOTS)
    return false;
  *node = node_of_addr(addr);
  return *node >= 0;
}

/* Cluster mode: runs argv on the master of its key's slot, following
 * MOVED (the map is updated and re-read) and ASK (ASKING first, the map
 * kept), at most MAX_REDIRECTS times, and retrying TRYAGAIN/CLUSTERDOWN
 * every 50 ms for up to ~5 s. cmd_mu held. */
static redisReply *cluster_run(int argc, const char **argv,
                               const size_t *lens) {
  const char *key = routing_key(argc, argv);
  int node = key != NULL ? slot_owner(key_slot(key)) : slot_owner(0);
  bool asking = false;
  int redirects = 0;
  int64_t busy_since = -1;
  for (;;) {
    redisContext *c = node_cmd(node);
    if (asking) {
      redisReply *a = redisCommand(c, "ASKING");
      if (a == NULL)
        die("redis: %s", c->errstr);
      freeReplyObject(a);
      asking = false;
    }
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    if (r == NULL)
      die("redis: %s", c->errstr);
    if (r->type != REDIS_REPLY_ERROR)
      return r;
    int slot, target;
    if ((error_is(r, "MOVED") || error_is(r, "ASK")) &&
        redirects < MAX_REDIRECTS && parse_redirect(r->str, &slot, &target)) {
      redirects++;
      if (error_is(r, "MOVED")) {
        refresh_slots(target);
        slot_set(slot, target); /* the redirect is the newest word */
      } else {
        asking = true;
      }
      node = target;
      freeReplyObject(r);
      continue;
    }
    if (error_is(r, "TRYAGAIN") || error_is(r, "CLUSTERDOWN")) {
      if (busy_since < 0)
        busy_since = now_ms();
      if (now_ms() - busy_since < CLUSTER_BUSY_MS) {
        freeReplyObject(r);
        sleep_ms(50);
        if (key != NULL)
          node = slot_owner(key_slot(key));
        continue;
      }
    }
    return r;
  }
}

/* Runs a command (argv) on the command connection (in cluster mode: the
 * one to its key's master); caller frees the reply. A transport failure
 * ends the process: a test then sees the ERROR line. */
static redisReply *run_argv_lens(int argc, const char **argv,
                                 const size_t *lens) {
  pthread_mutex_lock(&g.cmd_mu);
  redisReply *r;
  if (g.cluster) {
    r = cluster_run(argc, argv, lens);
  } else {
    r = redisCommandArgv(g.nodes[0].cmd, argc, argv, lens);
    if (r == NULL)
      die("redis: %s", g.nodes[0].cmd->errstr);
  }
  pthread_mutex_unlock(&g.cmd_mu);
  return r;
}

static redisReply *run_argv(int argc, const char **argv) {
  return run_argv_lens(argc, argv, NULL);
}

/* Standalone: SCRIPT LOAD on the one command connection, at start. */
static void load_scripts(void) {
  pthread_mutex_lock(&g.cmd_mu);
  load_scripts_on(node_cmd(0));
  pthread_mutex_unlock(&g.cmd_mu);
}

/* EVALSHA, falling back to EVAL when the server lost the script cache.
 * args = numkeys, keys..., argv...; lens: their lengths (binary
 * arguments), or NULL (strings). */
static redisReply *run_script_lens(int id, int argc, const char **args,
                                   const size_t *lens) {
  const char *argv[2 + 2 * RENEW_BATCH + 2];
  size_t argl[2 + 2 * RENEW_BATCH + 2];
  argv[0] = "EVALSHA";
  argv[1] = scripts[id].sha;
  memcpy(argv + 2, args, (size_t)argc * sizeof *args);
  for (int i = 0; i < argc + 2; i++)
    argl[i] = i >= 2 && lens != NULL ? lens[i - 2] : strlen(argv[i]);
  redisReply *r = run_argv_lens(argc + 2, argv, argl);
  if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
    freeReplyObject(r);
    argv[0] = "EVAL";
    argv[1] = scripts[id].body;
    argl[0] = 4;
    argl[1] = strlen(argv[1]);
    r = run_argv_lens(argc + 2, argv, argl);
  }
  return r;
}

static redisReply *run_script(int id, int argc, const char **args) {
  return run_script_lens(id, argc, args, NULL);
}

/* ---- leases and renewals ---- */

static int64_t lease_get(const char *name) {
  for (lease_rec *l = g.leases; l; l = l->next)
    if (strcmp(l->name, name) == 0)
      return l->lease_ms;
  return g.watchdog_ms;
}

static void lease_set(const char *name, int64_t lease_ms) {
  for (lease_rec *l = g.leases; l; l = l->next)
    if (strcmp(l->name, name) == 0) {
      l->lease_ms = lease_ms;
      return;
    }
  lease_rec *l = xmalloc(sizeof *l);
  l->name = xstrdup(name);
  l->lease_ms = lease_ms;
  l->next = g.leases;
  g.leases = l;
}

static void renewal_add_kind(const char *name, const char *owner, bool read) {
  pthread_mutex_lock(&g.renew_mu);
  renewal *r = g.renewals;
  while (r && !(strcmp(r->name, name) == 0 && strcmp(r->owner, owner) == 0 &&
                r->read == read))
    r = r->next;
  if (r == NULL) {
    r = xmalloc(sizeof *r);
    r->name = xstrdup(name);
    r->owner = xstrdup(owner);
    r->holds = 0;
    r->read = read;
    r->next = g.renewals;
    g.renewals = r;
  }
  r->holds++;
  pthread_mutex_unlock(&g.renew_mu);
}

static void renewal_add(const char *name, const char *owner) {
  renewal_add_kind(name, owner, false);
}

/* Removes the renewal of (name, owner) — every one of name's when owner is
 * NULL (force unlock) — or, with all == false, one hold of it. read: the
 * read lock's renewals instead of the others'. */
static void renewal_cancel_kind(const char *name, const char *owner, bool all,
                                bool read) {
  pthread_mutex_lock(&g.renew_mu);
  for (renewal **p = &g.renewals; *p;) {
    renewal *r = *p;
    if (strcmp(r->name, name) == 0 && r->read == read &&
        (owner == NULL || strcmp(r->owner, owner) == 0) &&
        (all || --r->holds <= 0)) {
      *p = r->next;
      free(r->name);
      free(r->owner);
      free(r);
      continue;
    }
    p = &r->next;
  }
  pthread_mutex_unlock(&g.renew_mu);
}

static void renewal_cancel(const char *name, const char *owner, bool all) {
  renewal_cancel_kind(name, owner, all, false);
}

/* One renewal to send: a copy, so the calls run without renew_mu held. */
typedef struct renew_item {
  char *name;
  char *owner;
  int slot; /* cluster mode: the name's slot; standalone: 0 */
  bool sent;
} renew_item;

/* Copies the read (or the other) renewals, in list order. */
static renew_item *renew_snapshot(bool read, size_t *count) {
  pthread_mutex_lock(&g.renew_mu);
  size_t n = 0;
  for (renewal *r = g.renewals; r; r = r->next)
    n += r->read == read;
  renew_item *items = xmalloc((n ? n : 1) * sizeof *items);
  size_t i = 0;
  for (renewal *r = g.renewals; r; r = r->next) {
    if (r->read != read)
      continue;
    items[i].name = xstrdup(r->name);
    items[i].owner = xstrdup(r->owner);
    items[i].slot = g.cluster ? key_slot(r->name) : 0;
    items[i].sent = false;
    i++;
  }
  pthread_mutex_unlock(&g.renew_mu);
  *count = n;
  return items;
}

/* One watchdog round of the locks (read == false: Java's LockTask, at most
 * RENEW_BATCH keys per call, the reply 1/0 per key) or of the read locks
 * (Java's ReadLockTask: KEYS in pairs (lock, {name}), ARGV = timeout, then
 * per pair the number of owners and the owners, one here as this process
 * has one command thread; at most READ_RENEW_BATCH pairs per call). A 0
 * drops that renewal. In cluster mode a call carries the keys of one slot
 * only (Java's per-slot chunks); standalone, every key is "slot 0". */
#define READ_RENEW_BATCH 40
static void renew_pass(bool read) {
  char timeout[24];
  snprintf(timeout, sizeof timeout, "%" PRId64, g.watchdog_ms);
  size_t count = 0;
  renew_item *items = renew_snapshot(read, &count);
  int batch = read ? READ_RENEW_BATCH : RENEW_BATCH;
  size_t first = 0;
  for (;;) {
    while (first < count && items[first].sent)
      first++;
    if (first == count)
      break;
    int slot = items[first].slot;
    renew_item *pick[RENEW_BATCH];
    char *prefixes[READ_RENEW_BATCH];
    int n = 0;
    for (size_t i = first; i < count && n < batch; i++)
      if (!items[i].sent && items[i].slot == slot) {
        items[i].sent = true;
        pick[n++] = &items[i];
      }
    const char *args[1 + 4 * READ_RENEW_BATCH + 2 * RENEW_BATCH + 1];
    char numkeys[16];
    snprintf(numkeys, sizeof numkeys, "%d", read ? 2 * n : n);
    int argc = 0;
    args[argc++] = numkeys;
    for (int i = 0; i < n; i++) {
      args[argc++] = pick[i]->name;
      if (read) {
        prefixes[i] = braced(pick[i]->name);
        args[argc++] = prefixes[i];
      }
    }
    args[argc++] = timeout;
    for (int i = 0; i < n; i++) {
      if (read)
        args[argc++] = "1";
      args[argc++] = pick[i]->owner;
    }
    redisReply *r = run_script(read ? S_READ_RENEW : S_RENEW, argc, args);
    if (r->type == REDIS_REPLY_ARRAY) {
      if (g.cluster)
        out("RENEWED %d slot %d", n, slot);
      else
        out("RENEWED %d", n);
      for (size_t i = 0; i < r->elements && i < (size_t)n; i++) {
        if (r->element[i]->type == REDIS_REPLY_INTEGER &&
            r->element[i]->integer == 0) {
          out("LOST %s", pick[i]->name);
          renewal_cancel_kind(pick[i]->name, pick[i]->owner, true, read);
        }
      }
    } else {
      out("ERROR %s: %s", read ? "read renewal" : "renewal",
          r->type == REDIS_REPLY_ERROR ? r->str : "?");
    }
    freeReplyObject(r);
    if (read)
      for (int i = 0; i < n; i++)
        free(prefixes[i]);
  }
  for (size_t i = 0; i < count; i++) {
    free(items[i].name);
    free(items[i].owner);
  }
  free(items);
}

static void renew_round(void) { renew_pass(false); }

static void renew_read_round(void) { renew_pass(true); }

static void *renew_thread(void *arg) {
  (void)arg;
  int64_t period = g.watchdog_ms / 3;
  int64_t next = now_ms() + period;
  for (;;) {
    int64_t left = next - now_ms();
    if (left > 0)
      sleep_ms(left);
    renew_round();
    renew_read_round();
    next += period;
  }
  return NULL;
}

/* ---- the subscriber connection ---- */

static entry *entry_find(const char *channel) {
  for (entry *e = g.entries; e; e = e->next)
    if (strcmp(e->channel, channel) == 0)
      return e;
  return NULL;
}

static void wake_subscriber(void) {
  char b = 1;
  while (write(g.wake[1], &b, 1) < 0 && errno == EINTR) {
  }
}

/* Node i's subscriber connection, made on first use; sub_mu held. */
static redisContext *node_sub(int i) {
  if (g.nodes[i].sub == NULL) {
    pthread_mutex_lock(&g.map_mu);
    char *host = xstrdup(g.nodes[i].host);
    int port = g.nodes[i].port;
    pthread_mutex_unlock(&g.map_mu);
    g.nodes[i].sub = connect_to(host, port);
    free(host);
  }
  return g.nodes[i].sub;
}

/* Where a channel's subscription goes: sharded in cluster mode, the master
 * of the channel's slot; otherwise node 0 (the server, or the first seed,
 * which a cluster broadcasts PUBLISH to). */
static int sub_node_of(const char *channel) {
  return g.cluster && g.sharded ? slot_owner(key_slot(channel)) : 0;
}

/* Sends what the entries ask for; sub_mu held. */
static void send_pending(void) {
  int64_t now = g.cluster ? now_ms() : 0;
  for (entry **p = &g.entries; *p;) {
    entry *e = *p;
    if (e->state == SUB_NONE && e->refs == 0) {
      *p = e->next;
      free(e->channel);
      free(e);
      continue;
    }
    if (e->state == SUB_PENDING && e->not_before <= now) {
      e->node = sub_node_of(e->channel);
      redisAppendCommand(node_sub(e->node),
                         g.sharded ? "SSUBSCRIBE %s" : "SUBSCRIBE %s",
                         e->channel);
      e->state = SUB_SENT;
      e->seq = ++g.sub_seq;
    } else if (e->state == UNSUB_PENDING) {
      redisAppendCommand(node_sub(e->node),
                         g.sharded ? "SUNSUBSCRIBE %s" : "UNSUBSCRIBE %s",
                         e->channel);
      e->state = UNSUB_SENT;
      e->seq = ++g.sub_seq;
    }
    p = &e->next;
  }
  int nodes = node_count();
  for (int i = 0; i < nodes; i++) {
    redisContext *c = g.nodes[i].sub;
    int done = 0;
    while (c != NULL && !done)
      if (redisBufferWrite(c, &done) != REDIS_OK)
        die("pub/sub connection: %s", c->errstr);
  }
}

/* After a failed (un)subscribe: subscribe again (after `delay_ms`) if
 * waiters still want it, else drop it. sub_mu held. */
static void sub_retry(entry *e, int64_t delay_ms) {
  e->state = e->refs > 0 ? SUB_PENDING : SUB_NONE;
  e->not_before = now_ms() + delay_ms;
}

/* Cluster mode: an error reply on node's subscriber connection. It answers
 * the oldest command still awaiting a reply there (replies come in order;
 * each *_SENT entry has exactly one command out). MOVED updates the map;
 * then the entry is subscribed again (TRYAGAIN, CLUSTERDOWN, ASK: after
 * 50 ms). sub_mu held. */
static void on_sub_error(int node, const char *msg) {
  entry *oldest = NULL;
  for (entry *e = g.entries; e; e = e->next)
    if ((e->state == SUB_SENT || e->state == UNSUB_SENT) && e->node == node &&
        (oldest == NULL || e->seq < oldest->seq))
      oldest = e;
  fprintf(stderr, "javapeer: pub/sub error on %s:%d: %s\n", g.nodes[node].host,
          g.nodes[node].port, msg);
  if (oldest == NULL)
    return;
  int slot, target;
  if (strncmp(msg, "MOVED ", 6) == 0 && parse_redirect(msg, &slot, &target)) {
    refresh_slots(target);
    slot_set(slot, target);
    sub_retry(oldest, 0);
  } else if (oldest->state == UNSUB_SENT) {
    sub_retry(oldest, 0); /* not subscribed there any more */
  } else {
    sub_retry(oldest, 50);
  }
}

/* Handles one push (or reply) on node's subscriber connection; sub_mu
 * held. */
static void on_push(int node, redisReply *r) {
  if (g.cluster && r->type == REDIS_REPLY_ERROR) {
    on_sub_error(node, r->str);
    pthread_cond_broadcast(&g.sub_cond);
    return;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return;
  const char *kind = r->element[0]->str;
  entry *e = entry_find(r->element[1]->str);
  if (e == NULL)
    return;
  if (g.sharded && kind[0] == 's')
    kind++; /* ssubscribe, sunsubscribe, smessage */
  if (strcmp(kind, "subscribe") == 0 && e->state == SUB_SENT &&
      e->node == node) {
    e->state = e->refs > 0 ? SUB_LIVE : UNSUB_PENDING;
  } else if (strcmp(kind, "unsubscribe") == 0 && e->state == UNSUB_SENT &&
             e->node == node) {
    e->state = e->refs > 0 ? SUB_PENDING : SUB_NONE;
  } else if (g.cluster && g.sharded && strcmp(kind, "unsubscribe") == 0 &&
             e->state == SUB_LIVE && e->node == node) {
    /* Unasked: the channel's slot left this master. Subscribe again on
     * the new owner. */
    refresh_slots(-1);
    sub_retry(e, 0);
  } else if (strcmp(kind, "message") == 0 && e->state == SUB_LIVE &&
             r->element[2]->type == REDIS_REPLY_STRING) {
    const char *msg = r->element[2]->str;
    if (e->kind == E_SEM) {
      /* The new total v: min(v, the entry's waiters) local permits; a
       * payload that is not a positive integer releases none. */
      char *end = NULL;
      errno = 0;
      long long v = strtoll(msg, &end, 10);
      if (errno == 0 && end != msg && *end == '\0' && v > 0)
        e->permits += v < e->refs ? (long)v : e->refs;
    } else if (e->kind == E_LATCH) {
      if (strcmp(msg, "0") == 0)
        e->open = true; /* opens: every awaiter re-reads the count */
      else if (strcmp(msg, "1") == 0)
        e->open = false; /* a new count (or a delete): closes again */
    } else if (strcmp(msg, "0") == 0)
      e->permits++; /* UNLOCK: one waiter */
    else if (strcmp(msg, "1") == 0)
      e->permits += e->sleepers; /* READ_UNLOCK: every waiter */
  }
  pthread_cond_broadcast(&g.sub_cond);
}

static void *sub_thread(void *arg) {
  (void)arg;
  struct pollfd fds[MAX_NODES + 1];
  int fd_node[MAX_NODES];
  for (;;) {
    pthread_mutex_lock(&g.sub_mu);
    send_pending();
    int nodes = node_count();
    for (int i = 0; i < nodes; i++) {
      void *reply = NULL;
      while (g.nodes[i].sub != NULL &&
             redisReaderGetReply(g.nodes[i].sub->reader, &reply) == REDIS_OK &&
             reply) {
        on_push(i, reply);
        freeReplyObject(reply);
        reply = NULL;
      }
    }
    send_pending();
    /* Every subscriber connection, then the wake pipe; a resend waiting
     * out its delay shortens the poll. */
    int nfds = 0, timeout = 1000;
    nodes = node_count();
    for (int i = 0; i < nodes; i++)
      if (g.nodes[i].sub != NULL) {
        fd_node[nfds] = i;
        fds[nfds++] =
            (struct pollfd){.fd = g.nodes[i].sub->fd, .events = POLLIN};
      }
    for (entry *e = g.entries; e && g.cluster; e = e->next)
      if (e->state == SUB_PENDING)
        timeout = 50;
    pthread_mutex_unlock(&g.sub_mu);

    fds[nfds] = (struct pollfd){.fd = g.wake[0], .events = POLLIN};
    if (poll(fds, (nfds_t)nfds + 1, timeout) < 0 && errno != EINTR)
      die("poll: %s", strerror(errno));
    if (fds[nfds].revents & POLLIN) {
      char buf[64];
      while (read(g.wake[0], buf, sizeof buf) < 0 && errno == EINTR) {
      }
    }
    for (int k = 0; k < nfds; k++) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      pthread_mutex_lock(&g.sub_mu);
      redisContext *c = g.nodes[fd_node[k]].sub;
      int rc = redisBufferRead(c);
      pthread_mutex_unlock(&g.sub_mu);
      if (rc != REDIS_OK)
        die("pub/sub connection: %s", c->errstr);
    }
  }
  return NULL;
}

/* Joins the channel's subscription and waits until it is live; a new
 * entry gets `kind` (how its messages are read). */
static entry *subscribe_kind(const char *channel, int64_t bound_ms, int kind) {
  pthread_mutex_lock(&g.sub_mu);
  entry *e = entry_find(channel);
  if (e == NULL) {
    e = xmalloc(sizeof *e);
    memset(e, 0, sizeof *e);
    e->channel = xstrdup(channel);
    e->state = SUB_NONE;
    e->kind = kind;
    e->next = g.entries;
    g.entries = e;
  }
  e->refs++;
  if (e->state == SUB_NONE)
    e->state = SUB_PENDING;
  else if (e->state == UNSUB_PENDING)
    e->state = SUB_LIVE; /* never sent: keep the live subscription */
  wake_subscriber();
  struct timespec until;
  deadline_ts(&until, bound_ms);
  while (e->state != SUB_LIVE) {
    if (pthread_cond_timedwait(&g.sub_cond, &g.sub_mu, &until) == ETIMEDOUT &&
        e->state != SUB_LIVE) {
      e->refs--;
      pthread_mutex_unlock(&g.sub_mu);
      return NULL;
    }
  }
  pthread_mutex_unlock(&g.sub_mu);
  return e;
}

static entry *subscribe(const char *channel, int64_t bound_ms) {
  return subscribe_kind(channel, bound_ms, E_LOCK);
}

static void unsubscribe(entry *e) {
  pthread_mutex_lock(&g.sub_mu);
  if (--e->refs == 0) {
    e->permits = 0; /* Java drops the entry, and its semaphore, here */
    e->open = false;
    if (e->state == SUB_LIVE)
      e->state = UNSUB_PENDING;
    else if (e->state == SUB_PENDING)
      e->state = SUB_NONE;
    wake_subscriber();
  }
  pthread_mutex_unlock(&g.sub_mu);
}

/* Java's latch.tryAcquire(ms) (ms < 0: acquire()). True if a permit came. */
static bool permit_wait(entry *e, int64_t ms) {
  pthread_mutex_lock(&g.sub_mu);
  if (!g.quiet_waits)
    out("WAITING %s", e->channel);
  e->sleepers++;
  struct timespec until;
  deadline_ts(&until, ms < 0 ? INT64_C(1) << 40 : ms);
  while (e->permits == 0)
    if (pthread_cond_timedwait(&g.sub_cond, &g.sub_mu, &until) == ETIMEDOUT)
      break;
  bool got = e->permits > 0;
  if (got)
    e->permits--;
  e->sleepers--;
  pthread_mutex_unlock(&g.sub_mu);
  return got;
}

/* ---- lock operations (main thread) ---- */

/* 1 acquired, 0 held by someone else (*ttl set), -1 error (printed). */
static int try_acquire(const char *name, int64_t lease_ms, int64_t *ttl) {
  char lease[24];
  int64_t effective = lease_ms > 0 ? lease_ms : g.watchdog_ms;
  snprintf(lease, sizeof lease, "%" PRId64, effective);
  const char *args[4] = {"1", name, lease, g.owner};
  redisReply *r = run_script(S_ACQUIRE, 4, args);
  int rc;
  if (r->type == REDIS_REPLY_NIL) {
    rc = 1;
    lease_set(name, effective);
    if (lease_ms <= 0)
      renewal_add(name, g.owner);
  } else if (r->type == REDIS_REPLY_INTEGER) {
    rc = 0;
    *ttl = r->integer;
  } else {
    out("ERROR acquire: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    rc = -1;
  }
  freeReplyObject(r);
  return rc;
}

/* tryLock(wait, lease); wait < 0 is lock(lease). 1/0, or -1 (printed). */
static int lock_wait(const char *name, int64_t wait_ms, int64_t lease_ms) {
  int64_t ttl = 0;
  int rc = try_acquire(name, lease_ms, &ttl);
  if (rc != 0 || wait_ms == 0)
    return rc;
  int64_t deadline = now_ms() + wait_ms;
  char *channel = channel_of(name);
  int64_t sub_bound = g.subscribe_timeout_ms;
  if (wait_ms > 0 && wait_ms < sub_bound)
    sub_bound = wait_ms;
  /* Subscribe first, then try again: a release between the failed try and
   * the subscription cannot be missed. */
  entry *e = subscribe(channel, sub_bound);
  if (e == NULL) {
    free(channel);
    if (wait_ms > 0 && now_ms() >= deadline)
      return 0;
    out("ERROR subscribe to %s timed out", name);
    return -1;
  }
  for (;;) {
    rc = try_acquire(name, lease_ms, &ttl);
    if (rc != 0)
      break;
    int64_t remaining = wait_ms > 0 ? deadline - now_ms() : -1;
    if (wait_ms > 0 && remaining <= 0)
      break;
    int64_t sleep_for;
    if (ttl >= 0 && (wait_ms < 0 || ttl < remaining))
      sleep_for = ttl;
    else
      sleep_for = remaining; /* -1: until a message */
    permit_wait(e, sleep_for);
  }
  unsubscribe(e);
  free(channel);
  return rc;
}

/* One unlock call: 4.x (latch, then DEL of the latch) or 3.x (no latch).
 * Returns 1 released, 0 still held, -1 not held by this owner (nil), -2 an
 * error reply (printed). */
static int release(const char *name, bool v4) {
  char *channel = channel_of(name);
  char lease[24], latch_ttl[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_get(name));
  snprintf(latch_ttl, sizeof latch_ttl, "%" PRId64, g.latch_ttl_ms);
  char *latch = NULL;
  redisReply *r;
  if (v4) {
    /* A fresh request id per unlock call (Java retries reuse it). */
    char *b = braced(name);
    char hex[33];
    random_hex(hex, 16);
    size_t n = strlen(b) + 64;
    latch = xmalloc(n);
    snprintf(latch, n, "redisson_unlock_latch:%s:%s", b, hex);
    free(b);
    const char *args[9] = {"3",   name,    channel,   latch,    "0",
                           lease, g.owner, g.publish, latch_ttl};
    r = run_script(S_RELEASE4, 9, args);
  } else {
    const char *args[7] = {"2", name, channel, "0", lease, g.owner, g.publish};
    r = run_script(S_RELEASE3, 7, args);
  }
  if (latch != NULL) {
    const char *argv[2] = {"DEL", latch};
    freeReplyObject(run_argv(2, argv));
  }
  int rc;
  if (r->type == REDIS_REPLY_NIL) {
    rc = -1;
  } else if (r->type == REDIS_REPLY_INTEGER) {
    rc = r->integer == 1 ? 1 : 0;
  } else {
    out("ERROR unlock: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    rc = -2;
  }
  /* Java: cancelExpirationRenewal(threadId) after every unlock call. */
  if (rc != -2)
    renewal_cancel(name, g.owner, rc != 0);
  freeReplyObject(r);
  free(latch);
  free(channel);
  return rc;
}

static void unlock_cmd(const char *name, bool v4) {
  int rc = release(name, v4);
  if (rc == -1)
    out("ERROR NOTOWNER attempt to unlock lock, not locked by current thread "
        "by node id: %s thread-id: %s",
        g.id, strchr(g.owner, ':') + 1);
  else if (rc >= 0)
    out("UNLOCKED");
}

static void force_cmd(const char *name) {
  char *channel = channel_of(name);
  const char *args[5] = {"2", name, channel, "0", g.publish};
  redisReply *r = run_script(S_FORCE, 5, args);
  renewal_cancel(name, NULL, true);
  if (r->type == REDIS_REPLY_INTEGER)
    out("FORCED %lld", r->integer);
  else
    out("ERROR forceunlock: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
  freeReplyObject(r);
  free(channel);
}

static void set_quiet(bool quiet) {
  pthread_mutex_lock(&g.sub_mu);
  g.quiet_waits = quiet;
  pthread_mutex_unlock(&g.sub_mu);
}

static void count_cmd(const char *name, const char *key, long n,
                      int64_t lease_ms, const char *tag) {
  int64_t t0 = now_ms();
  set_quiet(true);
  for (long i = 0; i < n; i++) {
    if (lock_wait(name, -1, lease_ms) != 1) {
      set_quiet(false);
      return; /* the ERROR line is out */
    }
    /* Deliberately not atomic: only the lock keeps this exact. */
    const char *get[2] = {"GET", key};
    redisReply *r = run_argv(2, get);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    char next[24];
    snprintf(next, sizeof next, "%lld", v + 1);
    const char *set[3] = {"SET", key, next};
    freeReplyObject(run_argv(3, set));
    if (tag != NULL) {
      char log_key[512];
      snprintf(log_key, sizeof log_key, "%s:log", key);
      const char *push[3] = {"RPUSH", log_key, tag};
      freeReplyObject(run_argv(3, push));
    }
    int rc = release(name, true);
    if (rc != 1) {
      set_quiet(false);
      out("ERROR count: unlock in round %ld answered %d", i, rc);
      return;
    }
  }
  set_quiet(false);
  out("COUNTED %ld %" PRId64, n, now_ms() - t0);
}

static void simple_cmd(const char *what, int argc, const char **argv) {
  redisReply *r = run_argv(argc, argv);
  if (r->type == REDIS_REPLY_INTEGER)
    out("%s %lld", what, r->integer);
  else if (r->type == REDIS_REPLY_STRING)
    out("%s %s", what, r->str);
  else if (r->type == REDIS_REPLY_NIL)
    out("%s (nil)", what);
  else
    out("ERROR %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
  freeReplyObject(r);
}

static int64_t num(const char *s) {
  char *end = NULL;
  long long v = s ? strtoll(s, &end, 10) : 0;
  return (s && end != s && *end == '\0') ? (int64_t)v : INT64_MIN;
}

/* ---- the other lock kinds: fair, read, write, fenced, spin ----
 * Each follows Java 4.7's wire behaviour (see the header comment): the same
 * keys, script arguments in Java's order, channels and messages; waiting is
 * Java's generic loop (try; subscribe; loop { try; wait for a permit up to
 * min(ttl, remaining) }; unsubscribe) on the kind's channel, except the spin
 * lock, which polls with a back-off and never subscribes. */

enum kind { K_FAIR, K_READ, K_WRITE, K_FENCED, K_SPIN, K_NONRE };

static const char *const kind_names[] = {"fair",  "read", "write",
                                         "fenced", "spin", "nonreentrant"};

/* One acquire call of a kind. */
typedef struct kcall {
  enum kind kind;
  const char *name;
  int64_t wait_ms;  /* < 0: lock() (no limit); 0: one try */
  int64_t lease_ms; /* <= 0: the watchdog timeout, renewed */
  bool single;      /* fair tryLock(): the non-queueing script */
  bool want_token;  /* fenced: the *AndGetToken script (reply pair) */
  bool marker;      /* fair: getNonReentrantFairLock (ARGV[5] the marker) */
  bool refused;     /* its re-acquire error: no acquireFailed follows */
  int64_t token;    /* fenced + want_token: the token, on success */
} kcall;

/* Java's System.currentTimeMillis(): the fair lock's deadlines are wall
 * clock, compared across clients. */
static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *str_printf(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = xmalloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* P(prefix, name): prefix ":" tag. */
static char *prefixed(const char *prefix, const char *name) {
  char *b = braced(name);
  char *s = str_printf("%s:%s", prefix, b);
  free(b);
  return s;
}

/* The lease record of a kind's Java object (internalLockLeaseTime is per
 * object: the read and write lock of one name are two objects). RLock,
 * fenced and spin keep the plain name, so `unlock` and `fxunlock` agree. */
static char *lease_key(enum kind k, const char *name) {
  if (k == K_FENCED || k == K_NONRE)
    return xstrdup(name);
  return str_printf("%s\t%s", kind_names[k], name);
}

/* The hash field of this process's thread for a kind. */
static char *field_of(enum kind k) {
  return k == K_WRITE ? str_printf("%s:write", g.owner) : xstrdup(g.owner);
}

/* The channel a waiter of this kind listens on; NULL for the spin lock. */
static char *wait_channel_of(enum kind k, const char *name) {
  switch (k) {
  case K_FAIR: {
    char *base = channel_of(name);
    char *s = str_printf("%s:%s", base, g.owner);
    free(base);
    return s;
  }
  case K_READ:
  case K_WRITE:
    return prefixed("redisson_rwlock", name);
  case K_FENCED:
  case K_NONRE:
    return channel_of(name);
  case K_SPIN:
    break;
  }
  return NULL;
}

/* The wait a fair waiter announces: the caller's if > 0, else Java's
 * fairLockWaitTimeout (5 min). */
static int64_t fair_wait_ms(const kcall *c) {
  return c->wait_ms > 0 ? c->wait_ms : 300000;
}

static void print_error_reply(const char *what, const redisReply *r) {
  out("ERROR %s: %s", what, r->type == REDIS_REPLY_ERROR ? r->str : "?");
}

/* One attempt. 1 acquired, 0 not (*ttl = the reply's hint), -1 error
 * (printed). */
static int kind_try(kcall *c, int64_t *ttl) {
  char lease[24], now[24], wait[24];
  int64_t effective = c->lease_ms > 0 ? c->lease_ms : g.watchdog_ms;
  snprintf(lease, sizeof lease, "%" PRId64, effective);
  snprintf(now, sizeof now, "%" PRId64, wall_ms());
  snprintf(wait, sizeof wait, "%" PRId64, fair_wait_ms(c));
  char *field = field_of(c->kind);
  redisReply *r = NULL;
  char *k1 = NULL, *k2 = NULL;
  switch (c->kind) {
  case K_FAIR: {
    k1 = prefixed("redisson_lock_queue", c->name);
    k2 = prefixed("redisson_lock_timeout", c->name);
    /* The two argument orders: tryLock() sends now before the wait. */
    const char *args[9] = {"3",   c->name, k1,
                           k2,    lease,   g.owner,
                           c->single ? now : wait, c->single ? wait : now,
                           "NON_REENTRANT_REACQUIRE"};
    int id = c->marker ? (c->single ? S_NONRE_FAIR_TRY : S_NONRE_FAIR_ACQUIRE)
                       : (c->single ? S_FAIR_TRY : S_FAIR_ACQUIRE);
    r = run_script(id, c->marker ? 9 : 8, args);
    break;
  }
  case K_READ: {
    char *b = braced(c->name);
    k1 = str_printf("%s:%s:rwlock_timeout", b, g.owner);
    free(b);
    char *writer = str_printf("%s:write", g.owner);
    const char *args[6] = {"2", c->name, k1, lease, g.owner, writer};
    r = run_script(S_READ_ACQUIRE, 6, args);
    free(writer);
    break;
  }
  case K_WRITE: {
    const char *args[4] = {"1", c->name, lease, field};
    r = run_script(S_WRITE_ACQUIRE, 4, args);
    break;
  }
  case K_FENCED: {
    k1 = prefixed("redisson_lock_token", c->name);
    const char *args[5] = {"2", c->name, k1, lease, g.owner};
    r = run_script(c->want_token ? S_FENCED_TOKEN : S_FENCED_ACQUIRE, 5,
                   args);
    break;
  }
  case K_SPIN: {
    const char *args[4] = {"1", c->name, lease, g.owner};
    r = run_script(S_ACQUIRE, 4, args); /* RLock's acquire */
    break;
  }
  case K_NONRE: {
    const char *args[5] = {"1", c->name, lease, g.owner,
                           "NON_REENTRANT_REACQUIRE"};
    r = run_script(S_NONRE_ACQUIRE, 5, args);
    break;
  }
  }
  int rc;
  if (c->kind == K_FENCED && c->want_token) {
    /* Java reads element 0: -1 = acquired, element 1 the token. */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->type == REDIS_REPLY_INTEGER) {
      if (r->element[0]->integer == -1) {
        rc = 1;
        c->token = r->element[1]->integer;
      } else {
        rc = 0;
        *ttl = r->element[0]->integer;
      }
    } else {
      print_error_reply("acquire", r);
      rc = -1;
    }
  } else if (r->type == REDIS_REPLY_NIL) {
    rc = 1;
  } else if (r->type == REDIS_REPLY_INTEGER) {
    rc = 0;
    *ttl = r->integer;
  } else {
    print_error_reply("acquire", r);
    c->refused = c->marker && r->type == REDIS_REPLY_ERROR &&
                 strstr(r->str, "NON_REENTRANT_REACQUIRE") != NULL;
    rc = -1;
  }
  if (rc == 1) {
    char *lk = lease_key(c->kind, c->name);
    lease_set(lk, effective);
    free(lk);
    if (c->lease_ms <= 0)
      renewal_add_kind(c->name, field, c->kind == K_READ);
  } else if (rc == 0 && c->kind == K_SPIN) {
    /* Java's spin lock sets internalLockLeaseTime on every attempt. */
    char *lk = lease_key(c->kind, c->name);
    lease_set(lk, effective);
    free(lk);
  }
  freeReplyObject(r);
  free(k1);
  free(k2);
  free(field);
  return rc;
}

/* Fair acquireFailed: leave the queue; everyone behind moves up by our
 * announced wait. */
static void fair_failed(const kcall *c) {
  char *q = prefixed("redisson_lock_queue", c->name);
  char *z = prefixed("redisson_lock_timeout", c->name);
  char wait[24];
  snprintf(wait, sizeof wait, "%" PRId64, fair_wait_ms(c));
  const char *args[5] = {"2", q, z, g.owner, wait};
  redisReply *r = run_script(S_FAIR_FAILED, 5, args);
  if (r->type == REDIS_REPLY_ERROR)
    print_error_reply("acquireFailed", r);
  freeReplyObject(r);
  free(q);
  free(z);
}

static void kind_failed(const kcall *c) {
  if (c->kind == K_FAIR && !c->single && !c->refused)
    fair_failed(c);
}

/* Takes a permit if one is there, without waiting. */
static void permit_take_nowait(entry *e) {
  pthread_mutex_lock(&g.sub_mu);
  if (e->permits > 0)
    e->permits--;
  pthread_mutex_unlock(&g.sub_mu);
}

/* Most retries per second of a fair waiter answered 0 (queued, lock free,
 * not its turn yet). Java retries at once, in a busy loop (~1,100 calls/s
 * observed); we sleep FAIR_BUSY_SLEEP_MS between such retries, which keeps
 * the same order of magnitude without burning a CPU. */
#define FAIR_BUSY_SLEEP_MS 1

/* The spin lock's polling (Java's RedissonSpinLock back-off): 1 ms first,
 * then twice the previous plus random [0, failures), at most 128 ms. */
#define SPIN_MAX_BACKOFF_MS 128

static int spin_wait(kcall *c) {
  int64_t t0 = now_ms();
  int64_t backoff = 1;
  long failures = 0;
  bool told = false;
  for (;;) {
    int64_t ttl = 0;
    int rc = kind_try(c, &ttl);
    if (rc != 0)
      return rc;
    int64_t elapsed = now_ms() - t0;
    if (c->wait_ms >= 0 && elapsed >= c->wait_ms)
      return 0;
    if (!told && !g.quiet_waits) {
      out("WAITING poll:%s", c->name);
      told = true;
    }
    int64_t sleep_for = backoff;
    if (c->wait_ms >= 0 && sleep_for > c->wait_ms - elapsed)
      sleep_for = c->wait_ms - elapsed;
    sleep_ms(sleep_for);
    failures++;
    unsigned char rnd[4];
    random_bytes(rnd, sizeof rnd);
    uint32_t x = (uint32_t)rnd[0] | (uint32_t)rnd[1] << 8 |
                 (uint32_t)rnd[2] << 16 | (uint32_t)rnd[3] << 24;
    backoff = backoff * 2 + (int64_t)(x % (uint32_t)failures);
    if (backoff > SPIN_MAX_BACKOFF_MS)
      backoff = SPIN_MAX_BACKOFF_MS;
  }
}

/* Java's tryLock(wait, lease) / lock(lease) for a kind: 1/0, or -1 (the
 * ERROR line is out). */
static int kind_wait(kcall *c) {
  if (c->kind == K_SPIN)
    return spin_wait(c);
  int64_t t0 = now_ms();
  int64_t ttl = 0;
  int rc = kind_try(c, &ttl);
  if (rc != 0 || c->single) {
    if (rc < 0)
      kind_failed(c);
    return rc;
  }
  int64_t deadline = t0 + c->wait_ms;
  if (c->wait_ms >= 0 && now_ms() >= deadline) {
    kind_failed(c); /* tryLock(0, ...): queued, then leaves at once */
    return 0;
  }
  char *channel = wait_channel_of(c->kind, c->name);
  int64_t sub_bound = g.subscribe_timeout_ms;
  if (c->wait_ms >= 0 && deadline - now_ms() < sub_bound)
    sub_bound = deadline - now_ms();
  entry *e = subscribe(channel, sub_bound);
  if (e == NULL) {
    free(channel);
    kind_failed(c);
    if (c->wait_ms >= 0 && now_ms() >= deadline)
      return 0;
    out("ERROR subscribe to %s timed out", c->name);
    return -1;
  }
  for (;;) {
    rc = kind_try(c, &ttl);
    if (rc != 0)
      break;
    int64_t remaining = c->wait_ms >= 0 ? deadline - now_ms() : -1;
    if (c->wait_ms >= 0 && remaining <= 0)
      break;
    int64_t sleep_for;
    if (ttl >= 0 && (c->wait_ms < 0 || ttl < remaining))
      sleep_for = ttl;
    else
      sleep_for = remaining; /* -1: until a message */
    if (sleep_for == 0) {
      /* Java: an immediate retry (tryAcquire(0) on the semaphore). */
      permit_take_nowait(e);
      sleep_ms(FAIR_BUSY_SLEEP_MS);
      continue;
    }
    permit_wait(e, sleep_for);
  }
  if (rc != 1)
    kind_failed(c);
  unsubscribe(e);
  free(channel);
  return rc;
}

/* One unlock call of a kind (the 4.x form, with the latch and its DEL).
 * 1 released, 0 still held, -1 not held by this owner (nil), -2 an error
 * reply (printed). */
static int kind_release(enum kind k, const char *name) {
  char *lk = lease_key(k, name);
  char lease[24], latch_ttl[24], now[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_get(lk));
  free(lk);
  snprintf(latch_ttl, sizeof latch_ttl, "%" PRId64, g.latch_ttl_ms);
  snprintf(now, sizeof now, "%" PRId64, wall_ms());
  char hex[33];
  random_hex(hex, 16);
  char *b = braced(name);
  char *latch = str_printf("redisson_unlock_latch:%s:%s", b, hex);
  char *field = field_of(k);
  redisReply *r = NULL;
  switch (k) {
  case K_FAIR: {
    char *q = prefixed("redisson_lock_queue", name);
    char *z = prefixed("redisson_lock_timeout", name);
    char *chan = channel_of(name);
    const char *args[12] = {"5", name,    q,   z,         chan,     latch,
                            "0", lease,   g.owner, now,   g.publish, latch_ttl};
    r = run_script(S_FAIR_UNLOCK, 12, args);
    free(q);
    free(z);
    free(chan);
    break;
  }
  case K_READ: {
    char *chan = prefixed("redisson_rwlock", name);
    char *tbase = str_printf("%s:%s:rwlock_timeout", b, g.owner);
    const char *args[10] = {"5",  name, chan,    tbase,     b,
                            latch, "0", g.owner, g.publish, latch_ttl};
    r = run_script(S_READ_UNLOCK, 10, args);
    free(chan);
    free(tbase);
    break;
  }
  case K_WRITE: {
    char *chan = prefixed("redisson_rwlock", name);
    const char *args[9] = {"3",   name,  chan,      latch,    "1",
                           lease, field, g.publish, latch_ttl};
    r = run_script(S_WRITE_UNLOCK, 9, args);
    free(chan);
    break;
  }
  case K_FENCED:
  case K_NONRE:
    break; /* RLock's unlock: release() */
  case K_SPIN: {
    const char *args[6] = {"2", name, latch, lease, g.owner, latch_ttl};
    r = run_script(S_SPIN_UNLOCK, 6, args);
    break;
  }
  }
  if (k == K_FENCED || k == K_NONRE) {
    free(b);
    free(latch);
    free(field);
    return release(name, true);
  }
  const char *del[2] = {"DEL", latch};
  freeReplyObject(run_argv(2, del));
  int rc;
  if (r->type == REDIS_REPLY_NIL) {
    rc = -1;
  } else if (r->type == REDIS_REPLY_INTEGER) {
    rc = r->integer == 1 ? 1 : 0;
  } else {
    print_error_reply("unlock", r);
    rc = -2;
  }
  if (rc != -2)
    renewal_cancel_kind(name, field, rc != 0, k == K_READ);
  freeReplyObject(r);
  free(b);
  free(latch);
  free(field);
  return rc;
}

static void kind_unlock_cmd(enum kind k, const char *name) {
  int rc = kind_release(k, name);
  if (rc == -1)
    out("ERROR NOTOWNER attempt to unlock lock, not locked by current thread "
        "by node id: %s thread-id: %s",
        g.id, strchr(g.owner, ':') + 1);
  else if (rc >= 0)
    out("UNLOCKED");
}

static void kind_force_cmd(enum kind k, const char *name) {
  redisReply *r = NULL;
  char now[24];
  snprintf(now, sizeof now, "%" PRId64, wall_ms());
  switch (k) {
  case K_FAIR: {
    char *q = prefixed("redisson_lock_queue", name);
    char *z = prefixed("redisson_lock_timeout", name);
    char *chan = channel_of(name);
    const char *args[8] = {"4", name, q, z, chan, "0", now, g.publish};
    r = run_script(S_FAIR_FORCE, 8, args);
    free(q);
    free(z);
    free(chan);
    break;
  }
  case K_READ:
  case K_WRITE: {
    char *chan = prefixed("redisson_rwlock", name);
    const char *args[5] = {"2", name, chan, k == K_READ ? "0" : "1",
                           g.publish};
    r = run_script(k == K_READ ? S_READ_FORCE : S_WRITE_FORCE, 5, args);
    free(chan);
    break;
  }
  case K_FENCED:
  case K_NONRE:
    force_cmd(name); /* RLock's */
    return;
  case K_SPIN: {
    const char *args[2] = {"1", name};
    r = run_script(S_SPIN_FORCE, 2, args);
    break;
  }
  }
  renewal_cancel_kind(name, NULL, true, k == K_READ);
  if (r->type == REDIS_REPLY_INTEGER)
    out("FORCED %lld", r->integer);
  else
    print_error_reply("forceunlock", r);
  freeReplyObject(r);
}

/* lock / trylock / try of a kind; prints the answer. */
static void kind_lock_cmd(enum kind k, const char *name, int64_t wait_ms,
                          int64_t lease_ms, bool single, bool want_token,
                          bool marker) {
  int64_t t0 = now_ms();
  kcall c = {.kind = k,
             .marker = marker,
             .name = name,
             .wait_ms = wait_ms,
             .lease_ms = lease_ms,
             .single = single,
             .want_token = want_token};
  int rc = kind_wait(&c);
  if (rc < 0)
    return;
  if (rc == 1 && want_token)
    out("ACQUIRED %" PRId64 " %" PRId64, now_ms() - t0, c.token);
  else
    out("%s %" PRId64, rc == 1 ? "ACQUIRED" : "NOTACQUIRED", now_ms() - t0);
}

static void fenced_token_cmd(const char *name) {
  char *key = prefixed("redisson_lock_token", name);
  const char *argv[2] = {"GET", key};
  redisReply *r = run_argv(2, argv);
  if (r->type == REDIS_REPLY_STRING)
    out("TOKEN %s", r->str);
  else if (r->type == REDIS_REPLY_NIL)
    out("TOKEN 0");
  else
    print_error_reply("getToken", r);
  freeReplyObject(r);
  free(key);
}

/* count for a kind: n x { lock; GET key; SET key v+1; [RPUSH key:log tag];
 * unlock }. */
static void kind_count_cmd(enum kind k, const char *name, const char *key,
                           long n, int64_t lease_ms, const char *tag) {
  int64_t t0 = now_ms();
  set_quiet(true);
  for (long i = 0; i < n; i++) {
    kcall c = {.kind = k, .name = name, .wait_ms = -1, .lease_ms = lease_ms};
    if (kind_wait(&c) != 1) {
      set_quiet(false);
      return; /* the ERROR line is out */
    }
    const char *get[2] = {"GET", key};
    redisReply *r = run_argv(2, get);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    char next[24];
    snprintf(next, sizeof next, "%lld", v + 1);
    const char *set[3] = {"SET", key, next};
    freeReplyObject(run_argv(3, set));
    if (tag != NULL) {
      char log_key[512];
      snprintf(log_key, sizeof log_key, "%s:log", key);
      const char *push[3] = {"RPUSH", log_key, tag};
      freeReplyObject(run_argv(3, push));
    }
    int rc = kind_release(k, name);
    if (rc != 1) {
      set_quiet(false);
      out("ERROR count: unlock in round %ld answered %d", i, rc);
      return;
    }
  }
  set_quiet(false);
  out("COUNTED %ld %" PRId64, n, now_ms() - t0);
}

/* The kind commands: <prefix><verb>, prefix f (fair), rd (read), wr
 * (write), fx (fenced), sp (spin). True if `cmd` was one of them. */
static bool kind_command(const char *cmd, int n, char **words) {
  static const struct {
    const char *prefix;
    enum kind kind;
  } prefixes[] = {{"rd", K_READ}, {"wr", K_WRITE}, {"fx", K_FENCED},
                  {"sp", K_SPIN}, {"nr", K_NONRE}, {"nf", K_FAIR},
                  {"f", K_FAIR}};
  const char *verb = NULL;
  enum kind k = K_FAIR;
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes && !verb; i++) {
    size_t len = strlen(prefixes[i].prefix);
    if (strncmp(cmd, prefixes[i].prefix, len) == 0) {
      verb = cmd + len;
      k = prefixes[i].kind;
    }
  }
  if (verb == NULL)
    return false;
  bool nf = strncmp(cmd, "nf", 2) == 0; /* the fair kind with the marker */
  if (strcmp(verb, "lock") == 0 && n == 3 && num(words[2]) != INT64_MIN) {
    kind_lock_cmd(k, words[1], -1, num(words[2]), false, false, nf);
  } else if (strcmp(verb, "trylock") == 0 && n == 4 &&
             num(words[2]) != INT64_MIN && num(words[3]) != INT64_MIN) {
    kind_lock_cmd(k, words[1], num(words[2]), num(words[3]), false, false, nf);
  } else if (k == K_FAIR && strcmp(verb, "try") == 0 && n == 3 &&
             num(words[2]) != INT64_MIN) {
    kind_lock_cmd(k, words[1], 0, num(words[2]), true, false, nf);
  } else if (k == K_FENCED && strcmp(verb, "locktoken") == 0 && n == 2) {
    /* lockAndGetToken(): watchdog lease (Java's lease form ignores it). */
    kind_lock_cmd(k, words[1], -1, -1, false, true, nf);
  } else if (k == K_FENCED && strcmp(verb, "trylocktoken") == 0 && n == 4 &&
             num(words[2]) != INT64_MIN && num(words[3]) != INT64_MIN) {
    kind_lock_cmd(k, words[1], num(words[2]), num(words[3]), false, true, nf);
  } else if (k == K_FENCED && strcmp(verb, "token") == 0 && n == 2) {
    fenced_token_cmd(words[1]);
  } else if (strcmp(verb, "unlock") == 0 && n == 2) {
    kind_unlock_cmd(k, words[1]);
  } else if (strcmp(verb, "forceunlock") == 0 && n == 2) {
    kind_force_cmd(k, words[1]);
  } else if (strcmp(verb, "count") == 0 && (n == 5 || n == 6) &&
             num(words[3]) > 0 && num(words[4]) != INT64_MIN) {
    kind_count_cmd(k, words[1], words[2], (long)num(words[3]), num(words[4]),
                   n == 6 ? words[5] : NULL);
  } else {
    return false;
  }
  return true;
}

/* ---- the semaphore and the count-down latch ----
 *   semtryset <name> <n>          trySetPermits(n) -> RESULT 1|0
 *   semacquire <name> <n>         acquire(n) -> ACQUIRED <ms>
 *   semtryacquire <name> <n> <wait_ms>  tryAcquire(n, wait) -> ACQUIRED
 *                                 <ms> | NOTACQUIRED <ms>
 *   semrelease <name> <n>         release(n) -> RELEASED
 *   semadd <name> <n>             addPermits(n) -> ADDED
 *   semdrain <name>               drainPermits() -> DRAINED <n>
 *   semavailable <name>           availablePermits() -> AVAILABLE <n>
 *   lttryset <name> <n>           trySetCount(n) -> RESULT 1|0
 *   ltcountdown <name>            countDown() -> COUNTEDDOWN
 *   ltcount <name>                getCount() -> COUNT <n>
 *   ltawait <name> <wait_ms>      await(wait) (< 0: await()) -> OPENED
 *                                 <ms> | CLOSED <ms>
 *   ltdelete <name>               delete() -> DELETED 1|0
 * A waiter prints `WAITING <channel>` before each sleep. */

static char *sem_channel_of(const char *name) {
  char *b = braced(name);
  char *s = str_printf("redisson_sc:%s", b);
  free(b);
  return s;
}

/* The latch channel wraps the name in braces whatever it holds. */
static char *latch_channel_of(const char *name) {
  return str_printf("redisson_countdownlatch__channel__{%s}", name);
}

/* A script with KEYS [name, channel] and ARGV [a1, (a2,) publish command]
 * (a2 NULL: none); returns the reply (caller frees). */
static redisReply *two_key_script(int id, const char *name,
                                  const char *channel, const char *a1,
                                  const char *a2) {
  const char *args[6];
  int argc = 0;
  args[argc++] = "2";
  args[argc++] = name;
  args[argc++] = channel;
  args[argc++] = a1;
  if (a2 != NULL)
    args[argc++] = a2;
  args[argc++] = g.publish;
  return run_script(id, argc, args);
}

/* One tryAcquire(n): 1 taken, 0 not, -1 error (printed). */
static int sem_try(const char *name, const char *n) {
  const char *args[3] = {"1", name, n};
  redisReply *r = run_script(S_SEM_TRY, 3, args);
  int rc = -1;
  if (r->type == REDIS_REPLY_INTEGER)
    rc = r->integer == 1;
  else
    print_error_reply("semaphore acquire", r);
  freeReplyObject(r);
  return rc;
}

/* One acquire try of a semaphore kind: 1 taken, 0 not (*hint: the wall
 * clock time worth a new try without a message, or -1), -1 an error
 * (printed). */
typedef int (*sem_try_fn)(void *arg, int64_t *hint);

/* Java's wait for semaphore permits from t0 (wait_ms < 0: no limit; 0:
 * the one try): try; subscribe; loop { try; wait for a local permit until
 * the deadline or the try's hint }. 1 taken, 0 not, -1 error (printed). */
static int sem_wait_loop(const char *name, int64_t t0, int64_t wait_ms,
                         sem_try_fn try_fn, void *arg) {
  int64_t hint = -1;
  int rc = try_fn(arg, &hint);
  if (rc == 0 && wait_ms != 0) {
    int64_t deadline = t0 + wait_ms;
    char *channel = sem_channel_of(name);
    int64_t bound = g.subscribe_timeout_ms;
    if (wait_ms > 0 && deadline - now_ms() < bound)
      bound = deadline - now_ms() > 0 ? deadline - now_ms() : 1;
    entry *e = subscribe_kind(channel, bound, E_SEM);
    if (e == NULL) {
      free(channel);
      if (wait_ms < 0) {
        out("ERROR subscribe to %s timed out", name);
        return -1;
      }
    } else {
      for (;;) {
        rc = try_fn(arg, &hint);
        if (rc != 0)
          break;
        int64_t remaining = wait_ms > 0 ? deadline - now_ms() : -1;
        if (wait_ms > 0 && remaining <= 0)
          break;
        if (hint > 0) {
          int64_t until_hint = hint - wall_ms() > 0 ? hint - wall_ms() : 1;
          if (remaining < 0 || until_hint < remaining)
            remaining = until_hint;
        }
        permit_wait(e, remaining);
      }
      unsubscribe(e);
      free(channel);
    }
  }
  return rc;
}

typedef struct sem_try_arg {
  const char *name, *n;
} sem_try_arg;

static int sem_try_cb(void *arg, int64_t *hint) {
  sem_try_arg *a = arg;
  *hint = -1; /* no TTL hint: only a message wakes */
  return sem_try(a->name, a->n);
}

/* Java's acquire(n) (wait_ms < 0) / tryAcquire(n, wait). */
static void sem_acquire_cmd(const char *name, const char *n, int64_t wait_ms) {
  int64_t t0 = now_ms();
  sem_try_arg a = {name, n};
  int rc = sem_wait_loop(name, t0, wait_ms, sem_try_cb, &a);
  if (rc >= 0)
    out("%s %" PRId64, rc == 1 ? "ACQUIRED" : "NOTACQUIRED", now_ms() - t0);
}

static int64_t get_count(const char *name, bool *ok) {
  const char *argv[2] = {"GET", name};
  redisReply *r = run_argv(2, argv);
  int64_t v = 0;
  *ok = true;
  if (r->type == REDIS_REPLY_STRING)
    v = strtoll(r->str, NULL, 10);
  else if (r->type != REDIS_REPLY_NIL) {
    print_error_reply("GET", r);
    *ok = false;
  }
  freeReplyObject(r);
  return v;
}

/* Java's await: wait on the entry's latch until it opens (ms < 0: no
 * limit). */
static void latch_wait(entry *e, int64_t ms) {
  pthread_mutex_lock(&g.sub_mu);
  out("WAITING %s", e->channel);
  struct timespec until;
  deadline_ts(&until, ms < 0 ? INT64_C(1) << 40 : ms);
  while (!e->open)
    if (pthread_cond_timedwait(&g.sub_cond, &g.sub_mu, &until) == ETIMEDOUT)
      break;
  pthread_mutex_unlock(&g.sub_mu);
}

static void latch_await_cmd(const char *name, int64_t wait_ms) {
  int64_t t0 = now_ms();
  bool ok;
  int64_t c = get_count(name, &ok);
  if (!ok)
    return;
  int rc = c <= 0;
  if (!rc && wait_ms != 0) {
    int64_t deadline = t0 + wait_ms;
    char *channel = latch_channel_of(name);
    int64_t bound = g.subscribe_timeout_ms;
    if (wait_ms > 0 && deadline - now_ms() < bound)
      bound = deadline - now_ms() > 0 ? deadline - now_ms() : 1;
    entry *e = subscribe_kind(channel, bound, E_LATCH);
    if (e == NULL) {
      free(channel);
      if (wait_ms < 0) {
        out("ERROR subscribe to %s timed out", name);
        return;
      }
    } else {
      for (;;) {
        c = get_count(name, &ok);
        if (!ok) {
          rc = -1;
          break;
        }
        if (c <= 0) {
          rc = 1;
          break;
        }
        int64_t remaining = wait_ms > 0 ? deadline - now_ms() : -1;
        if (wait_ms > 0 && remaining <= 0)
          break;
        latch_wait(e, remaining);
      }
      unsubscribe(e);
      free(channel);
    }
  }
  if (rc >= 0)
    out("%s %" PRId64, rc == 1 ? "OPENED" : "CLOSED", now_ms() - t0);
}

/* Prints `word` and an integer reply (nil: just `word`), or the error. */
static void reply_out(const char *word, redisReply *r) {
  if (r->type == REDIS_REPLY_INTEGER)
    out("%s %lld", word, r->integer);
  else if (r->type == REDIS_REPLY_NIL)
    out("%s", word);
  else
    print_error_reply(word, r);
  freeReplyObject(r);
}

static bool sync_command(const char *cmd, int n, char **words) {
  bool count1 = n == 3 && num(words[2]) != INT64_MIN;
  if (strcmp(cmd, "semtryset") == 0 && count1) {
    char *ch = sem_channel_of(words[1]);
    reply_out("RESULT", two_key_script(S_SEM_SET, words[1], ch, words[2],
                                       NULL));
    free(ch);
  } else if (strcmp(cmd, "semacquire") == 0 && count1) {
    sem_acquire_cmd(words[1], words[2], -1);
  } else if (strcmp(cmd, "semtryacquire") == 0 && n == 4 &&
             num(words[2]) != INT64_MIN && num(words[3]) != INT64_MIN) {
    sem_acquire_cmd(words[1], words[2], num(words[3]));
  } else if ((strcmp(cmd, "semrelease") == 0 ||
              strcmp(cmd, "semadd") == 0) &&
             count1) {
    bool add = strcmp(cmd, "semadd") == 0;
    char *ch = sem_channel_of(words[1]);
    reply_out(add ? "ADDED" : "RELEASED",
              two_key_script(add ? S_SEM_ADD : S_SEM_RELEASE, words[1], ch,
                             words[2], NULL));
    free(ch);
  } else if (strcmp(cmd, "semdrain") == 0 && n == 2) {
    const char *args[2] = {"1", words[1]};
    reply_out("DRAINED", run_script(S_SEM_DRAIN, 2, args));
  } else if ((strcmp(cmd, "semavailable") == 0 ||
              strcmp(cmd, "ltcount") == 0) &&
             n == 2) {
    bool ok;
    int64_t v = get_count(words[1], &ok);
    if (ok)
      out("%s %" PRId64, cmd[0] == 's' ? "AVAILABLE" : "COUNT", v);
  } else if (strcmp(cmd, "lttryset") == 0 && count1) {
    char *ch = latch_channel_of(words[1]);
    reply_out("RESULT",
              two_key_script(S_LATCH_SET, words[1], ch, "1", words[2]));
    free(ch);
  } else if (strcmp(cmd, "ltcountdown") == 0 && n == 2) {
    char *ch = latch_channel_of(words[1]);
    reply_out("COUNTEDDOWN",
              two_key_script(S_LATCH_DOWN, words[1], ch, "0", NULL));
    free(ch);
  } else if (strcmp(cmd, "ltawait") == 0 && count1) {
    latch_await_cmd(words[1], num(words[2]));
  } else if (strcmp(cmd, "ltdelete") == 0 && n == 2) {
    char *ch = latch_channel_of(words[1]);
    reply_out("DELETED",
              two_key_script(S_LATCH_DELETE, words[1], ch, "1", NULL));
    free(ch);
  } else {
    return false;
  }
  return true;
}

/* ---- the permit-expirable semaphore, several permits ----
 *   pesacquire <name> <n> <wait_ms> <lease_ms>
 *                         acquire(n, lease) (wait_ms < 0) / tryAcquire(n,
 *                         wait, lease) (lease < 0: none) -> ACQUIRED <ms>
 *                         <id>,<id>,... | NOTACQUIRED <ms>
 *   pesrelease <name> <id>,<id>,...   tryRelease(ids) -> RELEASED <n>
 *   pessetpermits <name> <n>          setPermits(n) -> SET
 *   pespermits <name>                 getPermits() -> PERMITS <n>
 *   pesleasetime <name> <id>          getLeaseTime(id) -> LEASETIME <ms>
 *                                     (-1 no lease, 0 not taken)
 * trySetPermits is semtryset (the same script and channel). */

#define PES_SENTINEL "922337203685477"
#define PES_MAX_IDS 64

static char *pes_zset_of(const char *name) {
  char *b = braced(name);
  char *z = str_printf("%s:timeout", b);
  free(b);
  return z;
}

/* 32 hex characters -> 16 bytes; false if malformed. */
static bool pes_unhex(const char *hex, size_t len, unsigned char raw[16]) {
  if (len != 32)
    return false;
  for (int i = 0; i < 16; i++) {
    unsigned v = 0;
    if (!isxdigit((unsigned char)hex[2 * i]) ||
        !isxdigit((unsigned char)hex[2 * i + 1]) ||
        sscanf(hex + 2 * i, "%2x", &v) != 1)
      return false;
    raw[i] = (unsigned char)v;
  }
  return true;
}

/* One acquire try: 1 taken, 0 not (*hint the lowest expiry, or -1), -1 an
 * error (printed). */
static int pes_try(const char *name, int n, const unsigned char (*ids)[16],
                   int64_t lease_ms, int64_t *hint) {
  char *zset = pes_zset_of(name), *chan = sem_channel_of(name);
  char nbuf[24], expiry[24], nowbuf[24];
  snprintf(nbuf, sizeof nbuf, "%d", n);
  if (lease_ms < 0)
    snprintf(expiry, sizeof expiry, "%s", PES_SENTINEL);
  else
    snprintf(expiry, sizeof expiry, "%" PRId64, wall_ms() + lease_ms);
  snprintf(nowbuf, sizeof nowbuf, "%" PRId64, wall_ms());
  const char *args[9 + PES_MAX_IDS];
  size_t lens[9 + PES_MAX_IDS];
  const char *head[9] = {"3", name, zset, chan, nbuf, expiry, nowbuf,
                         PES_SENTINEL, g.publish};
  for (int i = 0; i < 9; i++) {
    args[i] = head[i];
    lens[i] = strlen(head[i]);
  }
  for (int i = 0; i < n; i++) {
    args[9 + i] = (const char *)ids[i];
    lens[9 + i] = 16;
  }
  redisReply *r = run_script_lens(S_PES_ACQUIRE, 9 + n, args, lens);
  int rc = -1;
  *hint = -1;
  if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0) {
    rc = 1;
  } else if (r->type == REDIS_REPLY_NIL) {
    rc = 0;
  } else if (r->type == REDIS_REPLY_STRING && r->str[0] == ':') {
    rc = 0;
    *hint = strtoll(r->str + 1, NULL, 10);
  } else {
    print_error_reply("permit semaphore acquire", r);
  }
  freeReplyObject(r);
  free(zset);
  free(chan);
  return rc;
}

typedef struct pes_try_arg {
  const char *name;
  int n;
  const unsigned char (*ids)[16];
  int64_t lease_ms;
} pes_try_arg;

static int pes_try_cb(void *arg, int64_t *hint) {
  pes_try_arg *a = arg;
  return pes_try(a->name, a->n, a->ids, a->lease_ms, hint);
}

/* Java's acquire(n, lease) / tryAcquire(n, wait, lease): the semaphore's
 * wait, sleeping at most until the try's hint (the lowest expiry). */
static void pes_acquire_cmd(const char *name, int n, int64_t wait_ms,
                            int64_t lease_ms) {
  int64_t t0 = now_ms();
  unsigned char ids[PES_MAX_IDS][16];
  random_bytes(&ids[0][0], (size_t)n * 16);
  pes_try_arg a = {name, n, (const unsigned char(*)[16])ids, lease_ms};
  int rc = sem_wait_loop(name, t0, wait_ms, pes_try_cb, &a);
  if (rc < 0)
    return;
  if (rc == 0) {
    out("NOTACQUIRED %" PRId64, now_ms() - t0);
    return;
  }
  char list[PES_MAX_IDS * 33 + 1] = "";
  for (int i = 0; i < n; i++) {
    char hex[33];
    for (int b = 0; b < 16; b++)
      snprintf(hex + 2 * b, 3, "%02x", ids[i][b]);
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
             i > 0 ? "," : "", hex);
  }
  out("ACQUIRED %" PRId64 " %s", now_ms() - t0, list);
}

/* tryRelease(ids): `csv` the hex ids, comma-separated. */
static void pes_release_cmd(const char *name, const char *csv) {
  unsigned char ids[PES_MAX_IDS][16];
  int n = 0;
  for (const char *p = csv; *p != '\0' && n < PES_MAX_IDS;) {
    size_t len = strcspn(p, ",");
    if (!pes_unhex(p, len, ids[n])) {
      out("ERROR bad permit id in %s", csv);
      return;
    }
    n++;
    p += len;
    if (*p == ',')
      p++;
  }
  char *zset = pes_zset_of(name), *chan = sem_channel_of(name);
  char nbuf[24], nowbuf[24];
  snprintf(nbuf, sizeof nbuf, "%d", n);
  snprintf(nowbuf, sizeof nowbuf, "%" PRId64, wall_ms());
  const char *args[7 + PES_MAX_IDS] = {"3", name, chan, zset, nbuf, nowbuf,
                                       g.publish};
  size_t lens[7 + PES_MAX_IDS];
  for (int i = 0; i < 7; i++)
    lens[i] = strlen(args[i]);
  for (int i = 0; i < n; i++) {
    args[7 + i] = (const char *)ids[i];
    lens[7 + i] = 16;
  }
  reply_out("RELEASED", run_script_lens(S_PES_RELEASE, 7 + n, args, lens));
  free(zset);
  free(chan);
}

static bool pes_command(const char *cmd, int n, char **words) {
  if (strcmp(cmd, "pesacquire") == 0 && n == 5 && num(words[2]) > 0 &&
      num(words[2]) <= PES_MAX_IDS && num(words[3]) != INT64_MIN &&
      num(words[4]) != INT64_MIN) {
    pes_acquire_cmd(words[1], (int)num(words[2]), num(words[3]),
                    num(words[4]));
    return true;
  }
  if (strcmp(cmd, "pesrelease") == 0 && n == 3) {
    pes_release_cmd(words[1], words[2]);
    return true;
  }
  if (n < 2 || strncmp(cmd, "pes", 3) != 0)
    return false;
  char *zset = pes_zset_of(words[1]), *chan = sem_channel_of(words[1]);
  char nowbuf[24];
  snprintf(nowbuf, sizeof nowbuf, "%" PRId64, wall_ms());
  bool known = true;
  if (strcmp(cmd, "pessetpermits") == 0 && n == 3 &&
      num(words[2]) != INT64_MIN) {
    const char *args[6] = {"3", words[1], chan, zset, words[2], g.publish};
    reply_out("SET", run_script(S_PES_SET, 6, args));
  } else if (strcmp(cmd, "pespermits") == 0 && n == 2) {
    const char *args[6] = {"3", words[1], zset, chan, nowbuf, g.publish};
    reply_out("PERMITS", run_script(S_PES_PERMITS, 6, args));
  } else if (strcmp(cmd, "pesleasetime") == 0 && n == 3) {
    unsigned char raw[16];
    if (!pes_unhex(words[2], strlen(words[2]), raw)) {
      out("ERROR bad permit id %s", words[2]);
    } else {
      const char *args[8] = {"3", words[1], zset, chan,
                             (const char *)raw, PES_SENTINEL, nowbuf,
                             g.publish};
      size_t lens[8];
      for (int i = 0; i < 8; i++)
        lens[i] = i == 4 ? 16 : strlen(args[i]);
      reply_out("LEASETIME", run_script_lens(S_PES_LEASE, 8, args, lens));
    }
  } else {
    known = false;
  }
  free(zset);
  free(chan);
  return known;
}

/* ---- MultiLock (getMultiLock(RLock...); docs/wire-protocol.md) ----
 * Java's RedissonMultiLock over RLocks of the names given (comma-separated
 * in one word): members in the order given; each member's tryLock may use
 * the whole time left (a member wait of -1 in Java, one attempt here when
 * no time is left or none was given); lease L = -1 (watchdog) without a
 * lease, 2 x wait with a wait, else the lease; a member not taken releases
 * every member taken (unlock, errors ignored) and, with a wait, starts
 * again from the first; the time left is checked after every member (the
 * last too: then all are released and it is false); with a lease, each
 * member gets it at the end by Java's generic expire (EVAL, KEYS [name],
 * ARGV [lease, ""]). lock(): rounds of tryLock(w, lease), w = n x 1500
 * without a lease, else random in [lease/2, lease) or [base, lease).
 *   mlock <names> <lease_ms>               -> ACQUIRED <ms>
 *   mtrylock <names> <wait_ms> <lease_ms>  -> ACQUIRED <ms> | NOTACQUIRED <ms>
 *   munlock <names>                        unlock(), in order -> UNLOCKED
 *   mcount <names> <key> <n> <lease_ms>    n x { mlock; GET key; SET key
 *                                          v+1; munlock } -> COUNTED <n> <ms>
 */
#define MULTI_MAX 16

static const char multi_expire_lua[] =
    "local r = 0; for j = 1, #KEYS do "
    "if redis.call('pexpire', KEYS[j], ARGV[1]) == 1 then r = 1; end; end; "
    "return r;";

static int multi_split(char *list, char **names) {
  int n = 0;
  for (char *save = NULL, *w = strtok_r(list, ",", &save);
       w != NULL && n < MULTI_MAX; w = strtok_r(NULL, ",", &save))
    names[n++] = w;
  return n;
}

static void multi_release(char **names, int acquired) {
  for (int i = 0; i < acquired; i++)
    (void)release(names[i], true);
}

/* tryLock(wait, lease): 1 all held, 0 not (none held). */
static int multi_try(char **names, int n, int64_t wait_ms, int64_t lease_ms) {
  int64_t member_lease = lease_ms <= 0 ? -1
                         : wait_ms > 0 ? 2 * wait_ms
                                       : lease_ms;
  int64_t remain = wait_ms > 0 ? wait_ms : -1;
  int acquired = 0;
  for (int i = 0; i < n;) {
    int64_t t = now_ms();
    int rc = lock_wait(names[i], remain > 0 ? remain : 0, member_lease);
    if (rc == 1) {
      acquired++;
      i++;
    } else {
      multi_release(names, acquired);
      acquired = 0;
      if (wait_ms <= 0)
        return 0;
      i = 0; /* start again from the first member */
    }
    if (remain > 0) {
      remain -= now_ms() - t;
      if (remain <= 0) {
        multi_release(names, acquired);
        return 0;
      }
    }
  }
  if (lease_ms > 0) {
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
    for (int i = 0; i < n; i++) {
      const char *argv[6] = {"EVAL", multi_expire_lua, "1", names[i], lease,
                             ""};
      freeReplyObject(run_argv(6, argv));
      lease_set(names[i], lease_ms);
    }
  }
  return 1;
}

static int multi_lock(char **names, int n, int64_t lease_ms) {
  int64_t base = (int64_t)n * 1500;
  for (;;) {
    int64_t w = base;
    if (lease_ms > 0) {
      int64_t lo = lease_ms <= base ? lease_ms / 2 : base;
      uint64_t x = 0;
      random_bytes((unsigned char *)&x, sizeof x);
      w = lo + (lease_ms > lo ? (int64_t)(x % (uint64_t)(lease_ms - lo)) : 0);
      if (w < 1)
        w = 1;
    }
    if (multi_try(names, n, w, lease_ms) == 1)
      return 1;
  }
}

static bool multi_command(const char *cmd, int n, char **words) {
  if (cmd[0] != 'm' || n < 2)
    return false;
  char *names[MULTI_MAX];
  int64_t t0 = now_ms();
  if (strcmp(cmd, "mlock") == 0 && n == 3 && num(words[2]) != INT64_MIN) {
    multi_lock(names, multi_split(words[1], names), num(words[2]));
    out("ACQUIRED %" PRId64, now_ms() - t0);
  } else if (strcmp(cmd, "mtrylock") == 0 && n == 4 &&
             num(words[2]) != INT64_MIN && num(words[3]) != INT64_MIN) {
    int rc = multi_try(names, multi_split(words[1], names), num(words[2]),
                       num(words[3]));
    out("%s %" PRId64, rc == 1 ? "ACQUIRED" : "NOTACQUIRED", now_ms() - t0);
  } else if (strcmp(cmd, "munlock") == 0 && n == 2) {
    int m = multi_split(words[1], names);
    for (int i = 0; i < m; i++)
      if (release(names[i], true) == -1) {
        out("ERROR NOTOWNER %s", names[i]);
        return true;
      }
    out("UNLOCKED");
  } else if (strcmp(cmd, "mcount") == 0 && n == 5 && num(words[3]) > 0 &&
             num(words[4]) != INT64_MIN) {
    int m = multi_split(words[1], names);
    long rounds = (long)num(words[3]);
    set_quiet(true);
    for (long i = 0; i < rounds; i++) {
      multi_lock(names, m, num(words[4]));
      const char *get[2] = {"GET", words[2]};
      redisReply *r = run_argv(2, get);
      long long v =
          r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
      freeReplyObject(r);
      char next[24];
      snprintf(next, sizeof next, "%lld", v + 1);
      const char *set[3] = {"SET", words[2], next};
      freeReplyObject(run_argv(3, set));
      for (int j = 0; j < m; j++)
        if (release(names[j], true) != 1) {
          set_quiet(false);
          out("ERROR mcount: unlock of %s in round %ld", names[j], i);
          return true;
        }
    }
    set_quiet(false);
    out("COUNTED %ld %" PRId64, rounds, now_ms() - t0);
  } else {
    return false;
  }
  return true;
}

static void run_command(char *line) {
  char *words[8] = {0};
  int n = 0;
  for (char *save = NULL, *w = strtok_r(line, " \t\r\n", &save);
       w != NULL && n < 8; w = strtok_r(NULL, " \t\r\n", &save))
    words[n++] = w;
  if (n == 0)
    return;
  const char *cmd = words[0];
  int64_t t0 = now_ms();
  if (strcmp(cmd, "lock") == 0 && n == 3 && num(words[2]) != INT64_MIN) {
    if (lock_wait(words[1], -1, num(words[2])) == 1)
      out("ACQUIRED %" PRId64, now_ms() - t0);
  } else if (strcmp(cmd, "trylock") == 0 && n == 4 &&
             num(words[2]) != INT64_MIN && num(words[3]) != INT64_MIN) {
    int rc = lock_wait(words[1], num(words[2]), num(words[3]));
    if (rc >= 0)
      out("%s %" PRId64, rc == 1 ? "ACQUIRED" : "NOTACQUIRED", now_ms() - t0);
  } else if (strcmp(cmd, "unlock") == 0 && n == 2) {
    unlock_cmd(words[1], true);
  } else if (strcmp(cmd, "unlock3") == 0 && n == 2) {
    unlock_cmd(words[1], false);
  } else if (strcmp(cmd, "forceunlock") == 0 && n == 2) {
    force_cmd(words[1]);
  } else if (strcmp(cmd, "owner") == 0 && n == 2) {
    out("OWNER %s", g.owner);
  } else if (strcmp(cmd, "hget") == 0 && n == 3) {
    const char *argv[3] = {"HGET", words[1], words[2]};
    simple_cmd("HGET", 3, argv);
  } else if (strcmp(cmd, "exists") == 0 && n == 2) {
    const char *argv[2] = {"EXISTS", words[1]};
    simple_cmd("EXISTS", 2, argv);
  } else if (strcmp(cmd, "pttl") == 0 && n == 2) {
    const char *argv[2] = {"PTTL", words[1]};
    simple_cmd("PTTL", 2, argv);
  } else if (strcmp(cmd, "count") == 0 && (n == 5 || n == 6) &&
             num(words[3]) > 0 && num(words[4]) != INT64_MIN) {
    count_cmd(words[1], words[2], (long)num(words[3]), num(words[4]),
              n == 6 ? words[5] : NULL);
  } else if (!kind_command(cmd, n, words) && !sync_command(cmd, n, words) &&
             !pes_command(cmd, n, words) && !multi_command(cmd, n, words)) {
    out("ERROR unknown command or bad arguments: %s", cmd);
  }
}

/* ---- the command thread (the "Java thread" owning the locks) ---- */

typedef struct queued {
  struct queued *next;
  char line[];
} queued;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  queued *head, *tail;
  bool owner_ready;
} q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, false};

static void *command_thread(void *arg) {
  (void)arg;
  /* Java's owner: <client uuid>:<Thread.getId()>; ours is the kernel tid of
   * this thread, a decimal long like Java's. */
  snprintf(g.owner, sizeof g.owner, "%s:%ld", g.id, (long)gettid());
  pthread_mutex_lock(&q.mu);
  q.owner_ready = true;
  pthread_cond_broadcast(&q.cond);
  for (;;) {
    while (q.head == NULL)
      pthread_cond_wait(&q.cond, &q.mu);
    queued *item = q.head;
    q.head = item->next;
    if (q.head == NULL)
      q.tail = NULL;
    pthread_mutex_unlock(&q.mu);
    run_command(item->line);
    free(item);
    pthread_mutex_lock(&q.mu);
  }
  return NULL;
}

static void enqueue(const char *line) {
  size_t n = strlen(line) + 1;
  queued *item = xmalloc(sizeof *item + n);
  memcpy(item->line, line, n);
  item->next = NULL;
  pthread_mutex_lock(&q.mu);
  if (q.tail != NULL)
    q.tail->next = item;
  else
    q.head = item;
  q.tail = item;
  pthread_cond_broadcast(&q.cond);
  pthread_mutex_unlock(&q.mu);
}

/* ---- main ---- */

static int64_t opt_num(const char *name, const char *value) {
  int64_t v = num(value);
  if (v == INT64_MIN || v < 0)
    die("bad value for %s: %s", name, value ? value : "(none)");
  return v;
}

int main(int argc, char **argv) {
  g.host = "127.0.0.1";
  g.watchdog_ms = 30000;
  g.latch_ttl_ms = 18000; /* Java 4.x: 16-20 s by default */
  g.subscribe_timeout_ms = 7500;
  g.deadline_ms = 120000;
  pthread_mutex_init(&g.out_mu, NULL);
  pthread_mutex_init(&g.map_mu, NULL);
  const char *seeds = NULL;
  int sharded = -1; /* --sharded not given */
  for (int i = 1; i < argc; i += 2) {
    const char *opt = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(opt, "--host") == 0 && value)
      g.host = value;
    else if (strcmp(opt, "--port") == 0)
      g.port = (int)opt_num(opt, value);
    else if (strcmp(opt, "--watchdog-ms") == 0)
      g.watchdog_ms = opt_num(opt, value);
    else if (strcmp(opt, "--latch-ttl-ms") == 0)
      g.latch_ttl_ms = opt_num(opt, value);
    else if (strcmp(opt, "--subscribe-timeout-ms") == 0)
      g.subscribe_timeout_ms = opt_num(opt, value);
    else if (strcmp(opt, "--deadline-ms") == 0)
      g.deadline_ms = opt_num(opt, value);
    else if (strcmp(opt, "--sharded") == 0)
      sharded = opt_num(opt, value) != 0;
    else if (strcmp(opt, "--cluster") == 0 && value)
      seeds = value;
    else
      die("unknown option %s", opt);
  }
  g.cluster = seeds != NULL;
  g.sharded = sharded < 0 ? g.cluster : sharded != 0;
  if ((!g.cluster && g.port <= 0) || g.watchdog_ms < 3)
    die("usage: javapeer --port <port> | --cluster <host:port>[,...] "
        "[--host h] [--watchdog-ms n] [--latch-ttl-ms n] "
        "[--subscribe-timeout-ms n] [--deadline-ms n] [--sharded 0|1]");
  for (int i = 0; i < CLUSTER_SLOTS; i++)
    g.slots[i] = -1;
  if (g.cluster) {
    char *list = xstrdup(seeds);
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a != NULL;
         a = strtok_r(NULL, ",", &save))
      if (node_of_addr(a) < 0)
        die("bad --cluster seed: %s", a);
    free(list);
  } else {
    node_add(g.host, g.port);
  }
  g.publish = g.sharded ? "SPUBLISH" : "PUBLISH";

  /* Bounded life whatever the test does: SIGALRM's default action ends us. */
  alarm((unsigned)((g.deadline_ms + 999) / 1000));

  pthread_mutex_init(&g.cmd_mu, NULL);
  pthread_mutex_init(&g.sub_mu, NULL);
  pthread_mutex_init(&g.renew_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g.sub_cond, &ca);
  pthread_condattr_destroy(&ca);
  if (pipe2(g.wake, O_CLOEXEC | O_NONBLOCK) != 0)
    die("pipe: %s", strerror(errno));

  random_uuid(g.id);
  if (g.cluster) {
    if (node_count() == 0 || !refresh_slots(-1))
      die("no --cluster seed answered CLUSTER SLOTS");
    /* The scripts' SHA1s, from the master of slot 0 (every connection
     * loads them again when made). */
    pthread_mutex_lock(&g.cmd_mu);
    node_cmd(slot_owner(0));
    pthread_mutex_unlock(&g.cmd_mu);
  } else {
    pthread_mutex_lock(&g.cmd_mu);
    node_cmd(0);
    pthread_mutex_unlock(&g.cmd_mu);
    pthread_mutex_lock(&g.sub_mu);
    node_sub(0);
    pthread_mutex_unlock(&g.sub_mu);
    load_scripts();
  }

  pthread_t sub_tid, renew_tid, command_tid;
  if (pthread_create(&sub_tid, NULL, sub_thread, NULL) != 0 ||
      pthread_create(&renew_tid, NULL, renew_thread, NULL) != 0 ||
      pthread_create(&command_tid, NULL, command_thread, NULL) != 0)
    die("pthread_create failed");
  pthread_mutex_lock(&q.mu);
  while (!q.owner_ready)
    pthread_cond_wait(&q.cond, &q.mu);
  pthread_mutex_unlock(&q.mu);

  /* This thread only reads stdin, so `quit` (or EOF) ends the process at
   * once, even while the command thread waits for a lock. */
  out("READY %s", g.id);
  char line[LINE_MAX_LEN];
  while (fgets(line, sizeof line, stdin) != NULL) {
    if (strncmp(line, "quit", 4) == 0 &&
        (line[4] == '\n' || line[4] == '\0' || line[4] == ' '))
      break;
    enqueue(line);
  }
  /* Like a crashed client: locks are left to expire by their TTL. */
  fflush(stdout);
  _exit(0);
}
