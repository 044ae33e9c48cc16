/* The primitives layer: one file per Redisson primitive, nine in all
 * (lock.c the reentrant lock, fair.c, rwlock.c (read and write), fenced.c,
 * spin.c, semaphore.c, psem.c the permit-expirable semaphore, latch.c the
 * count-down latch, nonreentrant.c the non-reentrant lock and fair lock),
 * plus guard.c, the fencing guard (rlock's own: no Redisson counterpart),
 * each filling an rlock__prim descriptor that the engine drives, plus its
 * Lua scripts (<kind>_*.lua beside it, embedded at build time) and its
 * public API; and multilock.c, the MultiLock and the RedLock, which
 * compose member locks through their public calls: their descriptors
 * fill only `calls`, which the public lock calls dispatch to.
 * Internal. */
#ifndef RLOCK_PRIM_H
#define RLOCK_PRIM_H

#include "engine.h"

/* The lock calls of a kind that runs them itself (rlock__prim.calls: the
 * MultiLock and the RedLock, multilock.c, over their members' handles; the
 * FasterMultiLock, fastmultilock.c, whose values live in its handle).
 * The public lock calls (lock.c) dispatch here, so a group is taken,
 * tried, released, queried and cancelled through the same calls as any
 * lock. Each sets the last error as the public call does. */
typedef struct rlock__prim_calls {
  /* A call left NULL is the engine's, as for a lock (the kind's holds are
   * the engine's: rlock__prim.hold). */
  /* rlock_lock_async: the request is an rlock_req (rlock__req_custom_new)
   * that rlock_req_cancel() ends. */
  int (*acquire_async)(rlock *lock, uint64_t owner, int64_t wait_ms,
                       int64_t lease_ms, rlock_cb cb, void *data,
                       rlock_req **req);
  /* rlock_try_lock_owner: 1, 0 or an error. */
  int (*acquire)(rlock *lock, uint64_t owner, int64_t wait_ms,
                 int64_t lease_ms);
  int (*release_async)(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                       rlock_req **req);
  int (*release)(rlock *lock, uint64_t owner);
  /* NULL: the kind's ops (rlock__prim.ops) answer is_held */
  int (*is_held_async)(rlock *lock, uint64_t owner, rlock_cb cb, void *data,
                       rlock_req **req);
  int (*is_held)(rlock *lock, uint64_t owner);
  int (*lease_guaranteed)(rlock *lock, uint64_t owner, int64_t *until_ms);
  /* The members, and how many must be held (*quorum). */
  size_t (*members)(const rlock *lock, size_t *quorum);
  /* The detail of every other lock call (RLOCK_EINVAL). */
  const char *unsupported;
} rlock__prim_calls;
/* getMultiLock(RLock...) and getRedLock(RLock...) (multilock.c). */
extern const rlock__prim rlock__prim_multilock;
extern const rlock__prim rlock__prim_redlock;

/* Redisson's RLock (getLock): channel "redisson_lock__channel:" + tag. */
extern const rlock__prim rlock__prim_lock;
#define RLOCK__LOCK_CHANNEL_PREFIX "redisson_lock__channel:"
/* getFairLock: the handle's channel is the base of each waiter's own
 * ("redisson_lock__channel:" + tag + ":" + owner). */
extern const rlock__prim rlock__prim_fair;
/* getReadWriteLock: read and write share "redisson_rwlock:" + tag. */
extern const rlock__prim rlock__prim_read;
extern const rlock__prim rlock__prim_write;
/* getFencedLock: RLock's channel. */
extern const rlock__prim rlock__prim_fenced;
/* The fencing guard (guard.c): no Redisson counterpart, no channel. */
extern const rlock__prim rlock__prim_guard;
/* getSpinLock: no channel. */
extern const rlock__prim rlock__prim_spin;
/* getNonReentrantLock / getNonReentrantFairLock (nonreentrant.c): RLock's
 * and the fair lock's keys, channels and releases; only the acquire
 * differs (its last ARGV is the marker below, and a re-acquire by the
 * holder is an error reply starting with it: RLOCK_EREENTRY). */
extern const rlock__prim rlock__prim_nonreentrant;
extern const rlock__prim rlock__prim_nonreentrant_fair;
#define RLOCK__NONREENTRANT_MARKER "NON_REENTRANT_REACQUIRE"
/* The fair lock's pieces the non-reentrant fair lock reuses: its try
 * (ARGV lease, owner, wait, now for `acquire`; lease, owner, now, wait for
 * `single_try`; `marker` appended when not NULL), waiter channel, message
 * handler, queue-leave, queries and hold part. */
rlock__cmd *rlock__fair_send_try_scripts(rlock__op *op, int64_t lease_ms,
                                         rlock__reply_cb cb,
                                         const rlock__script *acquire,
                                         const rlock__script *single_try,
                                         const char *marker);
char *rlock__fair_wait_channel(const rlock__op *op, size_t *len);
void rlock__fair_on_message(rlock__chan *ch, const char *payload,
                            size_t len);
rlock__cmd *rlock__fair_abandon(rlock__op *op, rlock__reply_cb cb,
                                void *data);
extern const rlock__prim_ops rlock__fair_ops;
extern const rlock__prim_hold rlock__fair_hold;
/* getMultiLock(group, values) (fastmultilock.c): the group's hash, RLock's
 * channel; the values' field names live in its handle (made with
 * rlock__handle_new_size of rlock__fast_multilock_size(n) bytes, 0 when n
 * is too large, then filled: 0, or RLOCK_EINVAL for a NULL value). Its
 * lock calls (rlock__prim.calls) run the engine's acquire and release; its
 * holds are renewed from their handle (rlock__prim_hold.send_renew). */
extern const rlock__prim rlock__prim_fast_multilock;
size_t rlock__fast_multilock_size(size_t n);
int rlock__fast_multilock_fill(rlock *h, const char *const *values,
                               const size_t *lens, size_t n);
/* getSemaphore: channel "redisson_sc:" + tag. */
extern const rlock__prim rlock__prim_semaphore;
#define RLOCK__SEMAPHORE_CHANNEL_PREFIX "redisson_sc:"
/* A message on a semaphore's channel (the new count v) wakes min(v, local
 * waiters); both semaphores' handler. */
void rlock__semaphore_on_message(rlock__chan *ch, const char *payload,
                                 size_t len);
/* Both semaphores' argument checks (0 or RLOCK_EINVAL with the detail
 * set): a count taken, released or set is 1..2^40; one added by
 * add_permits is -2^40..2^40 and not 0 (beyond 2^40 a count or a TTL is
 * almost surely garbage from the caller). */
#define RLOCK__PERMITS_MAX (INT64_C(1) << 40)
int rlock__semaphore_check_permits(int64_t permits);
int rlock__semaphore_check_add(int64_t permits);
/* h as a handle of kind `prim`, or NULL with RLOCK_EINVAL's detail set
 * ("<what> is NULL", "not a <what> (use <getter>)"). */
rlock *rlock__semaphore_handle(void *h, const rlock__prim *prim,
                               const char *what, const char *getter);
/* getPermitExpirableSemaphore: the semaphore's channel. */
extern const rlock__prim rlock__prim_permit_semaphore;
/* getCountDownLatch: channel "redisson_countdownlatch__channel__{name}". */
extern const rlock__prim rlock__prim_latch;

/* The keys kinds keep beside the name (tag: "{name}", or the name when it
 * has a brace): the fair lock's queue and deadlines (prefix + tag), the
 * fenced lock's token (prefix + tag), the permit-expirable semaphore's
 * lease zset (tag + suffix) and the read lock's per-hold lease keys (tag
 * ":" owner suffix ":" i). Spelled once here for the kinds that write them
 * and for the scan (scan.c) that folds them back into their name. */
#define RLOCK__FAIR_QUEUE_PREFIX "redisson_lock_queue:"
#define RLOCK__FAIR_TIMEOUT_PREFIX "redisson_lock_timeout:"
#define RLOCK__FENCED_TOKEN_PREFIX "redisson_lock_token:"
#define RLOCK__PSEM_TIMEOUT_SUFFIX ":timeout"
#define RLOCK__RWLOCK_TIMEOUT_SUFFIX ":rwlock_timeout"
/* Leader election (election.c): the leader's value key (prefix + tag; a
 * hash of value, term, holder) and the channel its changes are announced
 * on. The descriptor only names that channel (observers wait on it). */
extern const rlock__prim rlock__prim_election;
#define RLOCK__ELECTION_VALUE_PREFIX "rlock_election:"
#define RLOCK__ELECTION_CHANNEL_PREFIX "rlock_election__channel:"
char *rlock__election_value_key(const rlock *lock, size_t *len);

/* RLock's pieces that kinds with the same lock hash reuse: the release
 * (KEYS lock, channel, latch; message "0"), its reply reader, the message
 * handler ("0" wakes one local waiter, "1" all), the force unlock (DEL and
 * "0"), and the ops table (force unlock and the queries). */
/* Sends `script` with the acquire's arguments of the lock, spin and write
 * lock: KEYS[1] the name; ARGV lease_ms, the owner. Never re-sent (a second
 * HINCRBY after a lost reply would count one acquisition twice). */
rlock__cmd *rlock__lock_send_try_script(rlock__op *op,
                                        const rlock__script *script,
                                        int64_t lease_ms, rlock__reply_cb cb);
/* Sends `script` with the release's arguments of the lock and the write
 * lock: KEYS name, channel, latch; ARGV message, lease_ms, owner, PUBLISH
 * or SPUBLISH, latch TTL. Re-sent after a timeout (the latch makes it
 * safe). */
rlock__cmd *rlock__lock_send_release_script(
    rlock__op *op, const rlock__script *script, const char *message,
    const char *latch, int64_t lease_ms, int64_t latch_ttl_ms,
    rlock__reply_cb cb);
/* RLock's try reply, and that of every kind whose acquire script answers
 * as RLock's: nil = acquired, an integer = the holder's TTL (ms; -1 none). */
int rlock__lock_read_try(rlock__op *op, const redisReply *reply,
                         int64_t *ttl_ms);
rlock__cmd *rlock__lock_send_release(rlock__op *op, const char *latch,
                                     int64_t lease_ms, int64_t latch_ttl_ms,
                                     rlock__reply_cb cb);
int rlock__lock_read_release(rlock__op *op, const redisReply *reply);
void rlock__lock_on_message(rlock__chan *ch, const char *payload,
                            size_t len);
extern const rlock__op_type rlock__q_force_unlock;
/* RLock's hold part (release, renewal, trim, local handoff), the fenced
 * lock's too. */
extern const rlock__prim_hold rlock__lock_hold;
/* RLock's renewal (owner field -> PEXPIRE) and trim (with message "0"). */
extern const rlock__script rlock__lock_renew_script;
extern const rlock__script rlock__lock_trim_script;
extern const rlock__prim_ops rlock__lock_ops;

/* Shared by the kinds whose lock key is laid out as RLock's (owner field
 * -> count): the queries EXISTS, HEXISTS, HGET and PTTL on the lock key,
 * and the reply reader every query and force unlock uses (nil -> 0, a
 * number string -> its value for hold_count, an integer -> the TTL for
 * remain_ttl, else 1 when non-zero). */
extern const rlock__op_type rlock__q_is_locked;
extern const rlock__op_type rlock__q_is_held;
extern const rlock__op_type rlock__q_hold_count;
extern const rlock__op_type rlock__q_remain_ttl;
void rlock__query(rlock__op *op, const char *cmd, bool with_owner);
void rlock__query_reply(rlock__net *n, redisReply *reply, int err, void *data);
/* A blocking acquire; *value (when acquired and value != NULL) gets the
 * op's value (the fenced lock's token). */
int rlock__acquire(rlock *lock, uint64_t owner, int64_t wait_ms,
                   int64_t lease_ms, int64_t *value);

/* The lock's scripts, NULL-terminated, in this order: acquire, release,
 * force unlock, renew, trim (for tests and the benchmark). */
const rlock__script *const *rlock__lock_scripts(void);

/* Introspection (info.c): the keys a kind keeps beside the name, malloc'd
 * (NULL: out of memory), for any handle on the name: the fair lock's queue
 * and deadlines, the fenced lock's token, the permit-expirable semaphore's
 * lease zset. */
char *rlock__fair_queue_key(const rlock *lock, size_t *len);
char *rlock__fair_timeout_key(const rlock *lock, size_t *len);
char *rlock__fenced_token_key(const rlock *lock, size_t *len);
char *rlock__psem_timeout_key(const rlock *lock, size_t *len);
/* Reads what is stored under the handle's name into *out, a full-size
 * struct zeroed by the caller (blocking; info.c). 0 or an error. */
int rlock__info_read(rlock *lock, rlock_info *out);
/* The CLIENT LIST line of a connection named by the rlock client
 * `client_id` (whois.c), on the masters in turn, into line (blocking): 1
 * found, 0 none, or an error (the last error says which server). */
int rlock__whois(rlock *lock, const char *client_id, char *line,
                 size_t line_size);
/* The masters to ask, each once (rlock__net_masters into a malloc'd array
 * the caller frees; scan.c): 0, or RLOCK_ENOMEM. Loop thread. */
int rlock__masters_snapshot(rlock__net *n, rlock__node ***out,
                            size_t *nout);

/* The keyspace scan (scan.c). Where it is: the masters (taken at the first
 * step), the one being scanned and its cursor. Zeroed to start. */
typedef struct rlock__scan_pos {
  rlock__node **nodes;
  size_t nnodes, at;
  bool started;
  char cursor[24];
} rlock__scan_pos;
/* The keys of one SCAN reply (keys[i] NUL-terminated, lens[i] long). */
typedef struct rlock__scan_keys {
  char **keys;
  size_t *lens;
  size_t n;
  char *text;
} rlock__scan_keys;
/* One round trip (blocking; the handle gives the engine): SCAN cursor
 * MATCH match COUNT count on the current master. Returns 1 (more to
 * scan), 0 (every master scanned: the keys are the last), or an error
 * (the last error names the master). *out to free either way. */
int rlock__scan_step(rlock *lock, rlock__scan_pos *pos, const char *match,
                     size_t match_len, int count, rlock__scan_keys *out);
void rlock__scan_keys_free(rlock__scan_keys *k);
void rlock__scan_pos_free(rlock__scan_pos *pos);
/* The name a key belongs to, as key[*off..*off+*len): the name of a side
 * key (fair queue and deadlines, fenced token, permit leases, read-hold
 * leases, unlock latches), else the key itself. A tag "{x}" is read as the
 * name x (a name "{x}" spells its side keys the same way). */
void rlock__scan_name_of(const char *key, size_t len, size_t *off,
                         size_t *nlen);

#endif
