/* The Lua scripts, written from ../shared/PROTOCOL.md (Redisson's wire
 * behaviour). Each is sent as EVALSHA, falling back to EVAL on NOSCRIPT. */
#include <string.h>

#include "client-private.h"

/* Scripts that change something first ask the server whether this ACL user
 * may run every write they are going to make (redis.acl_check_cmd, Redis
 * 7.0+), and change nothing when one is denied. Without the check a denied
 * command fails the script halfway and Redis keeps what ran before it: a
 * lock field with no TTL when PEXPIRE is denied, or a lock deleted without
 * its release message when PUBLISH is denied. Redis < 7 has no such check;
 * there the scripts run as before (README: Faults). `denied` takes a list of
 * commands ({name, args...}) and returns the first one refused, or nil. */
#define ACL_GUARD                                                              \
  "local function denied(cmds) "                                              \
  "if redis.acl_check_cmd == nil then return nil; end; "                      \
  "for _, c in ipairs(cmds) do "                                              \
  "if not redis.acl_check_cmd(unpack(c)) then return c[1]; end; "             \
  "end; "                                                                      \
  "return nil; "                                                               \
  "end; "                                                                      \
  "local function refuse(cmd) "                                               \
  "return redis.error_reply('NOPERM this user has no permission to run ' .. " \
  "cmd .. ' on the lock keys or channel (nothing was changed)'); "          \
  "end; "

/* KEYS[1] lock key; ARGV[1] lease ms, ARGV[2] owner.
 * nil = acquired (or re-entered); otherwise the holder's PTTL. */
static const char acquire_lua[] =
    ACL_GUARD
    "local d = denied({{'hincrby', KEYS[1], ARGV[2], '1'}, "
    "{'pexpire', KEYS[1], ARGV[1]}}); "
    "if d then return refuse(d); end; "
    "if (redis.call('exists', KEYS[1]) == 0) or "
    "(redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

/* KEYS[1] lock key, KEYS[2] lock channel, KEYS[3] unlock latch key;
 * ARGV[1] message "0", ARGV[2] lease ms to re-apply, ARGV[3] owner,
 * ARGV[4] PUBLISH or SPUBLISH, ARGV[5] latch ttl ms.
 * The latch makes a re-sent unlock (after a lost reply) answer what the
 * first one did instead of releasing a second hold.
 * nil = not held by owner; 0 = still held; 1 = released. */
static const char release_lua[] =
    ACL_GUARD
    "local latch = redis.call('get', KEYS[3]); "
    "if latch ~= false then return tonumber(latch); end; "
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local d = denied({{'hincrby', KEYS[1], ARGV[3], '-1'}, "
    "{'pexpire', KEYS[1], ARGV[2]}, {'del', KEYS[1]}, "
    "{ARGV[4], KEYS[2], ARGV[1]}, {'set', KEYS[3], '0', 'px', ARGV[5]}}); "
    "if d then return refuse(d); end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then "
    "redis.call('pexpire', KEYS[1], ARGV[2]); "
    "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); "
    "return 0; "
    "end; "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); "
    "return 1;";

/* KEYS[1] lock key, KEYS[2] channel; ARGV[1] message "0", ARGV[2] publish
 * command. 1 = deleted (and published), 0 = was not locked. */
static const char force_lua[] =
    ACL_GUARD
    "local d = denied({{'del', KEYS[1]}, {ARGV[2], KEYS[2], ARGV[1]}}); "
    "if d then return refuse(d); end; "
    "if (redis.call('del', KEYS[1]) == 1) then "
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); "
    "return 1; "
    "end; "
    "return 0;";

/* KEYS = lock keys; ARGV[1] watchdog timeout ms, ARGV[1+i] owner of KEYS[i].
 * Reply: array with 1 (renewed) or 0 (owner no longer holds it) per key. */
static const char renew_lua[] =
    "local result = {}; "
    "for i = 1, #KEYS do "
    "if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then "
    "redis.call('pexpire', KEYS[i], ARGV[1]); "
    "result[i] = 1; "
    "else "
    "result[i] = 0; "
    "end; "
    "end; "
    "return result;";

/* rlock's own repair script (not a Redisson one; it only ever touches this
 * client's own owner field). KEYS[1] lock key, KEYS[2] channel; ARGV[1]
 * owner, ARGV[2] the hold count this client knows it has, ARGV[3] PUBLISH
 * or SPUBLISH, ARGV[4] message "0". After a lost acquire or unlock reply the
 * server may count more holds than the client knows of; this sets the field
 * back to what the client knows (deleting it, and the key with a release
 * message, at 0). Reply: the server's count before the repair. */
static const char trim_lua[] =
    ACL_GUARD
    "local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0'); "
    "local want = tonumber(ARGV[2]); "
    "if n <= want then return n; end; "
    "local d = denied({{'hset', KEYS[1], ARGV[1], ARGV[2]}, "
    "{'hdel', KEYS[1], ARGV[1]}, {'del', KEYS[1]}, "
    "{ARGV[3], KEYS[2], ARGV[4]}}); "
    "if d then return refuse(d); end; "
    "if want > 0 then "
    "redis.call('hset', KEYS[1], ARGV[1], want); "
    "return n; "
    "end; "
    "redis.call('hdel', KEYS[1], ARGV[1]); "
    "if redis.call('hlen', KEYS[1]) == 0 then "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[3], KEYS[2], ARGV[4]); "
    "end; "
    "return n;";

static rlock__script scripts[RLOCK__SCRIPT_COUNT] = {
    {"acquire", acquire_lua, "", false},
    {"release", release_lua, "", false},
    {"force_unlock", force_lua, "", false},
    {"renew", renew_lua, "", false},
    {"trim", trim_lua, "", true},
};

static uv_once_t sha_once = UV_ONCE_INIT;

static void compute_shas(void) {
  for (int i = 0; i < RLOCK__SCRIPT_COUNT; i++)
    rlock__sha1_hex(scripts[i].body, strlen(scripts[i].body), scripts[i].sha);
}

const rlock__script *rlock__script_get(int id) {
  uv_once(&sha_once, compute_shas);
  return &scripts[id];
}
