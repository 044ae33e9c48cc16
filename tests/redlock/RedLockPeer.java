import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;
import org.redisson.config.ReadMode;
import org.redisson.config.ShardedSubscriptionMode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Line-protocol driver around a real Redisson RedissonClient: a copy of the
 * shared Redisson peer's driver (same commands) with one addition for
 * rlock's RedLock tests: --redlock PORT,PORT,... opens one more
 * single-server client per port, and a lock spec L/name is a
 * RedissonRedLock over getLock(name) of each of them, in that order.
 * The command redlockIds answers their ids, comma-separated.
 */
public final class RedLockPeer {

    private static final Pattern TAGGED = Pattern.compile("^([A-Za-z0-9_.\\-]+):\\s(.*)$");
    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);

    private static RedissonClient redisson;
    private static final java.util.List<RedissonClient> RED = new java.util.ArrayList<>();
    private static String clientId;
    private static final Map<String, ExecutorService> TAGS = new LinkedHashMap<>();

    private static void emit(String tag, String line) {
        synchronized (OUT) {
            OUT.print(tag == null ? line : tag + ": " + line);
            OUT.print('\n');
            OUT.flush();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: RedLockPeer PORT|cluster:HOST:PORT[,HOST:PORT...]|sentinel:MASTER:HOST:PORT[,HOST:PORT...] [--watchdog MS] [--redlock PORT,PORT,...]");
            System.exit(2);
        }
        Long watchdog = null;
        for (int i = 1; i < args.length; i++) {
            if ("--watchdog".equals(args[i]) && i + 1 < args.length) {
                watchdog = Long.parseLong(args[++i]);
            } else if ("--redlock".equals(args[i]) && i + 1 < args.length) {
                for (String port : args[++i].split(",")) {
                    RED.add(Redisson.create(configFor(port)));
                }
            } else {
                System.err.println("unknown argument: " + args[i]);
                System.exit(2);
            }
        }

        Config config = configFor(args[0]);
        if (watchdog != null) {
            config.setLockWatchdogTimeout(watchdog);
        }
        redisson = Redisson.create(config);
        // the id RedissonBaseLock uses in lock owner fields ("<id>:<threadId>")
        clientId = ((Redisson) redisson).getServiceManager().getId();
        emit(null, "ID " + clientId);
        emit(null, "READY");

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            Matcher m = TAGGED.matcher(line);
            if (m.matches()) {
                String tag = m.group(1);
                String cmd = m.group(2).trim();
                ExecutorService ex = tagExecutor(tag);
                ex.execute(() -> run(tag, cmd));
            } else {
                run(null, line);
            }
        }
        // EOF behaves like quit
        run(null, "quit");
    }

    /**
     * PORT: single server redis://127.0.0.1:PORT.
     * cluster:HOST:PORT[,HOST:PORT...]: useClusterServers with these seed nodes (sharded pub/sub mode AUTO:
     * Redisson probes PUBSUB SHARDNUMSUB and uses SSUBSCRIBE/SPUBLISH where it works).
     * sentinel:MASTER:HOST:PORT[,HOST:PORT...]: useSentinelServers (checkSentinelsList false).
     * Reads go to masters (a lock-guarded GET from a lagging replica would make the counter check meaningless).
     * -Dpeer.sharded=AUTO|ON|OFF (e.g. via PEER_JAVA_OPTS) overrides the sharded mode, for negative controls.
     */
    static Config configFor(String target) {
        Config config = new Config();
        // StringCodec: the FasterMultiLock (G/) hashes its values with the default codec; Kryo is a stub here
        config.setCodec(org.redisson.client.codec.StringCodec.INSTANCE);
        if (target.startsWith("cluster:")) {
            config.useClusterServers()
                    .addNodeAddress(addresses(target.substring("cluster:".length())))
                    .setShardedSubscriptionMode(ShardedSubscriptionMode.valueOf(System.getProperty("peer.sharded", "AUTO")))
                    .setReadMode(ReadMode.MASTER);
        } else if (target.startsWith("sentinel:")) {
            String rest = target.substring("sentinel:".length());
            int colon = rest.indexOf(':');
            if (colon <= 0) {
                throw new IllegalArgumentException("expected sentinel:MASTER:HOST:PORT[,HOST:PORT...], got " + target);
            }
            config.useSentinelServers()
                    .setMasterName(rest.substring(0, colon))
                    .addSentinelAddress(addresses(rest.substring(colon + 1)))
                    .setCheckSentinelsList(false)
                    .setReadMode(ReadMode.MASTER);
        } else {
            config.useSingleServer().setAddress("redis://127.0.0.1:" + Integer.parseInt(target));
        }
        return config;
    }

    private static String[] addresses(String list) {
        String[] hp = list.split(",");
        for (int i = 0; i < hp.length; i++) {
            String a = hp[i].trim();
            if (a.isEmpty() || a.lastIndexOf(':') <= 0) {
                throw new IllegalArgumentException("expected HOST:PORT, got '" + a + "'");
            }
            hp[i] = a.contains("://") ? a : "redis://" + a;
        }
        return hp;
    }

    private static synchronized ExecutorService tagExecutor(String tag) {
        return TAGS.computeIfAbsent(tag, t -> Executors.newSingleThreadExecutor(r -> {
            Thread th = new Thread(r, t);
            th.setDaemon(true);
            return th;
        }));
    }

    private static void run(String tag, String cmdLine) {
        long start = System.nanoTime();
        String result;
        String[] a = cmdLine.split("\\s+");
        if ("quit".equals(a[0])) {
            try {
                for (RedissonClient c : RED) {
                    c.shutdown();
                }
                redisson.shutdown();
            } finally {
                emit(tag, "OK (" + (System.nanoTime() - start) / 1_000_000L + " ms)");
                System.exit(0);
            }
        }
        try {
            result = exec(a);
        } catch (Throwable e) {
            Throwable t = e;
            while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) {
                t = t.getCause();
            }
            String msg = String.valueOf(t.getMessage()).replace('\n', ' ').replace('\r', ' ');
            result = "ERR " + t.getClass().getSimpleName() + " " + msg;
        }
        long ms = (System.nanoTime() - start) / 1_000_000L;
        emit(tag, result + " (" + ms + " ms)");
    }

    private static long lease(String[] a, int idx) {
        return a.length > idx ? Long.parseLong(a[idx]) : -1L;
    }


    /** NAME prefixes pick the Redisson lock kind: F/ fair, R/ read, W/ write (of one RReadWriteLock), X/ fenced, S/ spin,
     *  N/ non-reentrant, Q/ non-reentrant fair, M/a+b multi-lock over member specs, G/group=v1,v2 faster multi-lock. */
    static RLock lockFor(String spec) {
        if (spec.length() > 2 && spec.charAt(1) == '/') {
            String n = spec.substring(2);
            switch (spec.charAt(0)) {
                case 'F': return redisson.getFairLock(n);
                case 'R': return redisson.getReadWriteLock(n).readLock();
                case 'W': return redisson.getReadWriteLock(n).writeLock();
                case 'X': return redisson.getFencedLock(n);
                case 'S': return redisson.getSpinLock(n);
                case 'N': return redisson.getNonReentrantLock(n);
                case 'Q': return redisson.getNonReentrantFairLock(n);
                case 'M': { // M/a+b+F/c: a MultiLock over the member specs, in this order
                    String[] m = n.split("\\+");
                    RLock[] locks = new RLock[m.length];
                    for (int i = 0; i < m.length; i++) locks[i] = lockFor(m[i]);
                    return redisson.getMultiLock(locks);
                }
                case 'L': { // L/name: a RedissonRedLock over getLock(name) of each --redlock client
                    RLock[] locks = new RLock[RED.size()];
                    for (int i = 0; i < locks.length; i++) locks[i] = RED.get(i).getLock(n);
                    return new org.redisson.RedissonRedLock(locks);
                }
                case 'G': { // G/group=v1,v2: a FasterMultiLock of the group over values (StringCodec)
                    int eq = n.indexOf('=');
                    java.util.List<Object> vals = new java.util.ArrayList<>(java.util.Arrays.asList((Object[]) n.substring(eq + 1).split(",")));
                    return redisson.getMultiLock(n.substring(0, eq), vals);
                }
                default: break;
            }
        }
        return redisson.getLock(spec);
    }

    private static String exec(String[] a) throws Exception {
        String c = a[0];
        switch (c) {
            case "lock": {
                RLock lock = lockFor(a[1]);
                long lease = lease(a, 2);
                if (lease == -1) {
                    lock.lock();
                } else {
                    lock.lock(lease, TimeUnit.MILLISECONDS);
                }
                return "OK";
            }
            case "tryLock": {
                RLock lock = lockFor(a[1]);
                long wait = Long.parseLong(a[2]);
                long lease = lease(a, 3);
                boolean r = lease == -1
                        ? lock.tryLock(wait, TimeUnit.MILLISECONDS)
                        : lock.tryLock(wait, lease, TimeUnit.MILLISECONDS);
                return "OK " + r;
            }
            case "unlock":
                lockFor(a[1]).unlock();
                return "OK";
            case "forceUnlock":
                return "OK " + lockFor(a[1]).forceUnlock();
            case "holdCount":
                return "OK " + lockFor(a[1]).getHoldCount();
            case "isLocked":
                return "OK " + lockFor(a[1]).isLocked();
            case "isHeld":
                return "OK " + lockFor(a[1]).isHeldByCurrentThread();
            case "ttl":
                return "OK " + lockFor(a[1]).remainTimeToLive();
            case "token": // fenced lock: token of the current hold
                return "OK " + redisson.getFencedLock(a[1].startsWith("X/") ? a[1].substring(2) : a[1]).getToken();
            case "semSet":      // semSet NAME PERMITS
                return "OK " + redisson.getSemaphore(a[1]).trySetPermits(Integer.parseInt(a[2]));
            case "semAcquire":  // semAcquire NAME PERMITS WAITMS -> tryAcquire
                return "OK " + redisson.getSemaphore(a[1]).tryAcquire(Integer.parseInt(a[2]), java.time.Duration.ofMillis(Long.parseLong(a[3])));
            case "semRelease":  // semRelease NAME PERMITS
                redisson.getSemaphore(a[1]).release(Integer.parseInt(a[2]));
                return "OK";
            case "semAvailable":
                return "OK " + redisson.getSemaphore(a[1]).availablePermits();
            case "psemSet":     // psemSet NAME PERMITS -> trySetPermits
                return "OK " + redisson.getPermitExpirableSemaphore(a[1]).trySetPermits(Integer.parseInt(a[2]));
            case "psemAcquire": // psemAcquire NAME PERMITS WAITMS LEASEMS -> ids joined by ',' (or none)
            {
                java.util.List<String> ids = redisson.getPermitExpirableSemaphore(a[1]).tryAcquire(Integer.parseInt(a[2]),
                        Long.parseLong(a[3]), Long.parseLong(a[4]), TimeUnit.MILLISECONDS);
                return "OK " + (ids == null || ids.isEmpty() ? "none" : String.join(",", ids));
            }
            case "psemRelease": // psemRelease NAME id1,id2 -> tryRelease(List): number released
                return "OK " + redisson.getPermitExpirableSemaphore(a[1]).tryRelease(java.util.Arrays.asList(a[2].split(",")));
            case "psemAvailable":
                return "OK " + redisson.getPermitExpirableSemaphore(a[1]).availablePermits();
            case "psemPermits":
                return "OK " + redisson.getPermitExpirableSemaphore(a[1]).getPermits();
            case "latchSet":    // latchSet NAME COUNT
                return "OK " + redisson.getCountDownLatch(a[1]).trySetCount(Long.parseLong(a[2]));
            case "latchDown":
                redisson.getCountDownLatch(a[1]).countDown();
                return "OK";
            case "latchAwait":  // latchAwait NAME WAITMS
                return "OK " + redisson.getCountDownLatch(a[1]).await(Long.parseLong(a[2]), TimeUnit.MILLISECONDS);
            case "latchCount":
                return "OK " + redisson.getCountDownLatch(a[1]).getCount();
            case "sleep":
                Thread.sleep(Long.parseLong(a[1]));
                return "OK";
            case "id":
                return "OK " + clientId;
            case "redlockIds": {
                StringBuilder b = new StringBuilder();
                for (RedissonClient r : RED) {
                    if (b.length() > 0) b.append(',');
                    b.append(((Redisson) r).getServiceManager().getId());
                }
                return "OK " + b;
            }
            case "owner":
                return "OK " + clientId + ":" + Thread.currentThread().getId();
            case "count": {
                RLock lock = lockFor(a[1]);
                RBucket<String> bucket = redisson.getBucket(a[2], StringCodec.INSTANCE);
                int n = Integer.parseInt(a[3]);
                int done = 0;
                for (int i = 0; i < n; i++) {
                    lock.lock();
                    try {
                        String v = bucket.get();
                        long cur = v == null ? 0L : Long.parseLong(v);
                        bucket.set(Long.toString(cur + 1));
                    } finally {
                        lock.unlock();
                    }
                    done++;
                }
                return "OK " + done;
            }
            case "join": {
                ExecutorService ex;
                synchronized (RedLockPeer.class) {
                    ex = TAGS.get(a[1]);
                }
                if (ex != null) {
                    ex.submit(() -> { }).get();
                }
                return "OK";
            }
            case "joinAll": {
                String self = Thread.currentThread().getName();
                Map<String, ExecutorService> copy;
                synchronized (RedLockPeer.class) {
                    copy = new LinkedHashMap<>(TAGS);
                }
                for (Map.Entry<String, ExecutorService> e : copy.entrySet()) {
                    if (e.getKey().equals(self)) {
                        continue; // joining our own queue would deadlock
                    }
                    Future<?> f = e.getValue().submit(() -> { });
                    f.get();
                }
                return "OK";
            }
            default:
                throw new IllegalArgumentException("unknown command: " + String.join(" ", a));
        }
    }
}
