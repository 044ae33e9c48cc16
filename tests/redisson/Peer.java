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
 * Line-protocol driver around a real Redisson RedissonClient: the project's
 * copy of the shared peer's driver, extended for tests/redisson (see
 * docs/java.md). Additions:
 *  - --listen: after READY the driver prints "LISTEN <port>" and serves any
 *    number of TCP sessions on 127.0.0.1 (one per test process), each with
 *    its own tags and answers, while the one RedissonClient is shared; end
 *    of stdin ends the JVM;
 *  - getNonReentrantLock / getNonReentrantFairLock through reflection, so
 *    the same source compiles against Redisson 3.x, which lacks them
 *    (their commands then answer ERR UnsupportedOperationException);
 *  - the commands "version" (Redisson's version) and "tid" (the tag's
 *    thread id);
 *  - --redlock PORT,PORT,...: one more single-server client per port; the
 *    lock spec L/name is a RedissonRedLock over getLock(name) of each of
 *    them, in that order, and the command "redlockIds" answers their ids,
 *    comma-separated (tests/redlock).
 */
public final class Peer {

    private static final Pattern TAGGED = Pattern.compile("^([A-Za-z0-9_.\\-]+):\\s(.*)$");
    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);

    private static RedissonClient redisson;
    private static final java.util.List<RedissonClient> RED = new java.util.ArrayList<>();
    private static String clientId;
    /** One line-protocol session: stdin/stdout, or one TCP connection in --listen mode. */
    static final class Session {
        final String sid;
        final PrintStream out;
        final Map<String, ExecutorService> tags = new LinkedHashMap<>();

        Session(String sid, PrintStream out) {
            this.sid = sid;
            this.out = out;
        }

        void emit(String tag, String line) {
            synchronized (out) {
                out.print(tag == null ? line : tag + ": " + line);
                out.print('\n');
                out.flush();
            }
        }

        synchronized ExecutorService tagExecutor(String tag) {
            return tags.computeIfAbsent(tag, t -> Executors.newSingleThreadExecutor(r -> {
                Thread th = new Thread(r, sid + "/" + t);
                th.setDaemon(true);
                return th;
            }));
        }

        synchronized Map<String, ExecutorService> tagsCopy() {
            return new LinkedHashMap<>(tags);
        }

        synchronized void close() {
            for (ExecutorService ex : tags.values()) {
                ex.shutdownNow();
            }
            tags.clear();
        }
    }

    private static final Session STDIO = new Session("main", OUT);
    private static final ThreadLocal<Session> SESSION = ThreadLocal.withInitial(() -> STDIO);

    private static void emit(String tag, String line) {
        STDIO.emit(tag, line);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: Peer PORT|cluster:HOST:PORT[,HOST:PORT...]|sentinel:MASTER:HOST:PORT[,HOST:PORT...] [--watchdog MS] [--listen] [--redlock PORT,PORT,...]");
            System.exit(2);
        }
        Long watchdog = null;
        boolean listen = false;
        for (int i = 1; i < args.length; i++) {
            if ("--watchdog".equals(args[i]) && i + 1 < args.length) {
                watchdog = Long.parseLong(args[++i]);
            } else if ("--listen".equals(args[i])) {
                listen = true;
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
        if (listen) {
            listen();
        }

        serve(STDIO, new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)));
        // EOF behaves like quit
        run(STDIO, null, "quit");
    }

    /** Reads one session's lines until its end: tagged ones run on the session's tag threads. */
    private static void serve(Session s, BufferedReader in) throws java.io.IOException {
        SESSION.set(s);
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
                ExecutorService ex = s.tagExecutor(tag);
                ex.execute(() -> {
                    SESSION.set(s);
                    run(s, tag, cmd);
                });
            } else if (s != STDIO && "quit".equals(line)) {
                break;
            } else {
                run(s, null, line);
            }
        }
    }

    /** --listen: TCP sessions on 127.0.0.1 (an ephemeral port, printed), served until the JVM ends. */
    private static void listen() throws java.io.IOException {
        java.net.ServerSocket server = new java.net.ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress());
        emit(null, "LISTEN " + server.getLocalPort());
        Thread acceptor = new Thread(() -> {
            int n = 0;
            while (true) {
                java.net.Socket sock;
                try {
                    sock = server.accept();
                } catch (java.io.IOException e) {
                    return;
                }
                String sid = "s" + (++n);
                Thread t = new Thread(() -> {
                    Session s = null;
                    try {
                        sock.setTcpNoDelay(true);
                        s = new Session(sid, new PrintStream(sock.getOutputStream(), false, StandardCharsets.UTF_8));
                        serve(s, new BufferedReader(new InputStreamReader(sock.getInputStream(), StandardCharsets.UTF_8)));
                    } catch (java.io.IOException e) {
                        // the test process went away: its session ends
                    } finally {
                        if (s != null) {
                            s.close();
                        }
                        try {
                            sock.close();
                        } catch (java.io.IOException e) {
                            // nothing more to do
                        }
                    }
                }, sid);
                t.setDaemon(true);
                t.start();
            }
        }, "acceptor");
        acceptor.setDaemon(true);
        acceptor.start();
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

    private static void run(Session s, String tag, String cmdLine) {
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
                s.emit(tag, "OK (" + (System.nanoTime() - start) / 1_000_000L + " ms)");
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
        s.emit(tag, result + " (" + ms + " ms)");
    }

    private static long lease(String[] a, int idx) {
        return a.length > idx ? Long.parseLong(a[idx]) : -1L;
    }


    /** NAME prefixes pick the Redisson lock kind: F/ fair, R/ read, W/ write (of one RReadWriteLock), X/ fenced, S/ spin,
     *  N/ non-reentrant, Q/ non-reentrant fair, M/a+b multi-lock over member specs, G/group=v1,v2 faster multi-lock,
     *  L/name a RedLock over the --redlock clients. */
    static RLock lockFor(String spec) {
        if (spec.length() > 2 && spec.charAt(1) == '/') {
            String n = spec.substring(2);
            switch (spec.charAt(0)) {
                case 'F': return redisson.getFairLock(n);
                case 'R': return redisson.getReadWriteLock(n).readLock();
                case 'W': return redisson.getReadWriteLock(n).writeLock();
                case 'X': return redisson.getFencedLock(n);
                case 'S': return redisson.getSpinLock(n);
                case 'N': return optionalLock("getNonReentrantLock", n);
                case 'Q': return optionalLock("getNonReentrantFairLock", n);
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

    /** A getter Redisson 3.x lacks (4.4+), called by name so that this source compiles against both. */
    private static RLock optionalLock(String getter, String name) {
        java.lang.reflect.Method m;
        try {
            m = RedissonClient.class.getMethod(getter, String.class);
        } catch (NoSuchMethodException e) {
            throw new UnsupportedOperationException(getter + " is not in this Redisson version");
        }
        try {
            return (RLock) m.invoke(redisson, name);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String version() {
        String v = System.getProperty("peer.redisson.version");
        if (v == null) {
            v = Redisson.class.getPackage().getImplementationVersion();
        }
        if (v == null) {
            try (java.io.InputStream in = Redisson.class.getResourceAsStream("/META-INF/maven/org.redisson/redisson/pom.properties")) {
                if (in != null) {
                    java.util.Properties p = new java.util.Properties();
                    p.load(in);
                    v = p.getProperty("version");
                }
            } catch (java.io.IOException e) {
                v = null;
            }
        }
        return v == null ? "unknown" : v;
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
            case "version":
                return "OK " + version();
            case "tid":
                return "OK " + Thread.currentThread().getId();
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
                ExecutorService ex = SESSION.get().tagsCopy().get(a[1]);
                if (ex != null) {
                    ex.submit(() -> { }).get();
                }
                return "OK";
            }
            case "joinAll": {
                Session s = SESSION.get();
                String self = Thread.currentThread().getName();
                for (Map.Entry<String, ExecutorService> e : s.tagsCopy().entrySet()) {
                    if ((s.sid + "/" + e.getKey()).equals(self)) {
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
