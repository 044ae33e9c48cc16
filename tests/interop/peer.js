#!/usr/bin/env node
/*
 * Peer A of the interop suite: a driver around node-redisson@1.0.4 (an
 * independent implementation of Redisson's lock protocol, on ioredis 5).
 * The C tests (tests/interop/peer.c) spawn it and speak a line protocol:
 *
 *   node peer.js --port <port> --modules <dir with node_modules>
 *                [--host 127.0.0.1] [--watchdog-ms 30000] [--deadline-ms 120000]
 *   node peer.js --cluster <host:port>[,<host:port>...] --modules <dir> ...
 *
 * --cluster runs node-redisson on an ioredis Cluster over those seeds (its
 * `redis.clusters` config): commands go to the slot's master; pub/sub stays
 * plain SUBSCRIBE/PUBLISH (node-redisson has no sharded mode), which a
 * cluster carries to every node.
 *
 * stdin, one command per line, run one after the other:
 *   lock <name> <lease_ms>               lease < 0: watchdog mode
 *   trylock <name> <wait_ms> <lease_ms>
 *   unlock <name>
 *   forceunlock <name>
 *   owner <name>                         the hash field this peer writes
 *   hget <key> <field> | exists <key> | pttl <key>
 *   count <name> <key> <n> <lease_ms> [tag]
 *                                        n x { lock; GET key; SET key v+1;
 *                                        RPUSH key:log tag; unlock }
 *   quit                                 (at once, even while a call waits)
 * stdout, one line per answer:
 *   READY <client-id> | ACQUIRED <ms> | NOTACQUIRED <ms> | UNLOCKED |
 *   FORCED <0|1> | OWNER <field> | HGET <value|(nil)> | EXISTS <n> |
 *   PTTL <ms> | COUNTED <n> <ms> | ERROR NOTOWNER <text> | ERROR <text>
 * and, unprompted, WAITING <channel> each time a waiting lock call has its
 * subscription in place and goes to sleep.
 *
 * Known limits of node-redisson 1.0.4 that the tests stay within:
 *  - its hash field is `<uuid>:<uuid>` (a random id per lock object), not
 *    Java's `<uuid>:<thread id>`; rlock only ever compares fields, so that
 *    is harmless, but tests must not parse it as a thread id;
 *  - it adds braces to every name that does not *start* with `{`, so for
 *    `order:{42}` its channel differs from Java's; tests with braces use a
 *    leading-brace name (`{order}:42`) with this peer;
 *  - it subscribes after its failed try (a release in between is heard only
 *    after the holder's TTL) and each wait UNSUBSCRIBEs the whole channel,
 *    also from a timer left running after a message woke it, so only one
 *    waiter per process per lock is safe and a wait may occasionally
 *    sleep until the holder's TTL. Tests release a lock only after the
 *    WAITING line, and keep leases short where a lost wake-up costs time.
 */
'use strict';

const path = require('node:path');
const readline = require('node:readline');

function parseArgs(argv) {
  const opts = { host: '127.0.0.1', port: 0, cluster: null, modules: '', watchdogMs: 30000, deadlineMs: 120000 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`missing value for ${key}`);
    switch (key) {
      case '--host': opts.host = value; break;
      case '--port': opts.port = Number(value); break;
      case '--cluster':
        opts.cluster = value.split(',').map((hp) => {
          const at = hp.lastIndexOf(':');
          return { host: hp.slice(0, at), port: Number(hp.slice(at + 1)) };
        });
        break;
      case '--modules': opts.modules = value; break;
      case '--watchdog-ms': opts.watchdogMs = Number(value); break;
      case '--deadline-ms': opts.deadlineMs = Number(value); break;
      default: throw new Error(`unknown option ${key}`);
    }
  }
  if ((!opts.port && !opts.cluster) || !opts.modules)
    throw new Error('--port (or --cluster) and --modules are required');
  return opts;
}

function out(line) {
  process.stdout.write(line + '\n');
}

function oneLine(err) {
  return String(err && err.message ? err.message : err).replace(/\s+/g, ' ').trim();
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  // Every peer is bounded in time, whatever the test does.
  setTimeout(() => {
    out('ERROR deadline reached, exiting');
    process.exit(98);
  }, opts.deadlineMs).unref();

  const { Redisson } = require(path.join(opts.modules, 'node_modules', 'node-redisson'));
  const redis_config = opts.cluster
    ? { clusters: opts.cluster, options: { redisOptions: { maxRetriesPerRequest: 2 } } }
    : { options: { host: opts.host, port: opts.port, maxRetriesPerRequest: 2 } };
  const redisson = new Redisson({
    redis: redis_config,
    lockWatchdogTimeout: BigInt(opts.watchdogMs),
  });
  const redis = redisson.redis;

  // Instrumentation only: report when a waiting lock call is subscribed and
  // about to sleep, so tests release at a moment this peer can hear it.
  const executor = redisson.commandExecutor;
  const subscribeOnce = executor.subscribeOnce.bind(executor);
  let quietWaits = false;
  executor.subscribeOnce = async (channel, listener) => {
    await subscribeOnce(channel, listener);
    if (!quietWaits) out(`WAITING ${channel}`);
  };

  // One lock object per name, so one owner per name for the peer's life.
  const locks = new Map();
  const getLock = (name) => {
    if (!locks.has(name)) locks.set(name, redisson.getLock(name));
    return locks.get(name);
  };
  const leaseArg = (ms) => (Number(ms) < 0 ? true : Number(ms));

  await redis.ping();
  await redisson.commandExecutor.subscribeRedis.ping();
  out(`READY ${executor.id}`);

  const commands = {
    async lock(name, lease) {
      const t0 = Date.now();
      await getLock(name).lock(leaseArg(lease));
      out(`ACQUIRED ${Date.now() - t0}`);
    },
    async trylock(name, wait, lease) {
      const t0 = Date.now();
      const ok = await getLock(name).tryLock(Number(wait), leaseArg(lease));
      out(`${ok ? 'ACQUIRED' : 'NOTACQUIRED'} ${Date.now() - t0}`);
    },
    async unlock(name) {
      try {
        await getLock(name).unlock();
        out('UNLOCKED');
      } catch (err) {
        if (err && err.constructor && err.constructor.name === 'RedissonLockError')
          out(`ERROR NOTOWNER ${oneLine(err)}`);
        else throw err;
      }
    },
    async forceunlock(name) {
      out(`FORCED ${(await getLock(name).forceUnlock()) ? 1 : 0}`);
    },
    async owner(name) {
      const lock = getLock(name);
      out(`OWNER ${lock.getClientName(lock.clientId)}`);
    },
    async hget(key, field) {
      const v = await redis.hget(key, field);
      out(`HGET ${v === null ? '(nil)' : v}`);
    },
    async exists(key) {
      out(`EXISTS ${await redis.exists(key)}`);
    },
    async pttl(key) {
      out(`PTTL ${await redis.pttl(key)}`);
    },
    async count(name, key, n, lease, tag) {
      const lock = getLock(name);
      const t0 = Date.now();
      quietWaits = true;
      try {
        for (let i = 0; i < Number(n); i++) {
          await lock.lock(leaseArg(lease));
          // Deliberately not atomic: only the lock keeps this exact.
          const v = Number((await redis.get(key)) || '0');
          await redis.set(key, String(v + 1));
          if (tag) await redis.rpush(`${key}:log`, tag);
          await lock.unlock();
        }
      } finally {
        quietWaits = false;
      }
      out(`COUNTED ${n} ${Date.now() - t0}`);
    },
  };

  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  let chain = Promise.resolve();
  rl.on('line', (line) => {
    const words = line.trim().split(/\s+/).filter(Boolean);
    if (words.length === 0) return;
    if (words[0] === 'quit') process.exit(0); // at once, even mid-wait
    chain = chain.then(async () => {
      const fn = commands[words[0]];
      if (!fn) {
        out(`ERROR unknown command ${words[0]}`);
        return;
      }
      try {
        await fn(...words.slice(1));
      } catch (err) {
        out(`ERROR ${oneLine(err)}`);
      }
    });
  });
  // The test closed our stdin (or died): leave like a crashed client would.
  rl.on('close', () => chain.then(() => process.exit(0)));
}

process.on('unhandledRejection', (err) => {
  // node-redisson's stale wait timers may reject after connections close.
  process.stderr.write(`peer.js: unhandled rejection: ${oneLine(err)}\n`);
});

main().catch((err) => {
  out(`ERROR ${oneLine(err)}`);
  process.exit(1);
});
