"""Fencing (issue 37) from Python: the fenced check, the guard (sync and
asyncio), StaleTokenError / ForeignTokenError, the STALE event and stats,
bad input, and the zombie holder (a child process SIGSTOPped past its
lease, continued after the next holder wrote)."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import rlock


def fenced(client, name):
    """(lock, guard, data key): a fenced lock, its guard and one key,
    named to share a cluster slot."""
    return (client.fenced_lock(name), client.guard(f"{{{name}}}:guard"),
            f"{{{name}}}:data")


def test_check_says_current_stale_free(client, name, r):
    lk = client.fenced_lock(name)
    assert lk.check(5) is rlock.FenceState.FREE
    t1 = lk.acquire(lease=30)
    assert t1 > 0
    assert lk.check(t1) is rlock.FenceState.CURRENT
    assert lk.check(t1 - 1) is rlock.FenceState.STALE
    assert lk.check(t1 + 1000) is rlock.FenceState.CURRENT  # as Chubby's
    assert lk.release()
    assert lk.check(t1) is rlock.FenceState.FREE
    t2 = lk.acquire(lease=30)
    assert t2 > t1
    assert lk.check(t1) == rlock.FenceState.STALE == 2
    assert asyncio.run(lk.check_async(t1)) is rlock.FenceState.STALE
    assert asyncio.run(lk.check_async(t2)) is rlock.FenceState.CURRENT
    lk.release()
    assert asyncio.run(lk.check_async(t2)) is rlock.FenceState.FREE


def test_guarded_writes_rising_equal_and_older_tokens(client, name, r):
    lk, g, key = fenced(client, name)
    t1 = lk.acquire()
    lk.release()
    t2 = lk.acquire()
    lk.release()
    assert t2 > t1
    g.set(key, "two", lock=lk, token=t2)
    assert r.get(key) == b"two"
    g.set(key, "two again", lock=name, token=t2)  # equal: the same holder
    assert r.get(key) == b"two again"
    with pytest.raises(rlock.StaleTokenError) as ei:
        g.set(key, "one", lock=lk, token=t1)
    e = ei.value
    assert isinstance(e, rlock.RLockError)
    assert e.code == -27 and e.name == "RLOCK_ESTALE"
    # the C library's detail: the server's text, both tokens named
    assert e.detail.startswith(f"STALE token {t1} of lock {name} is below {t2}")
    assert "RLOCK_ESTALE" in str(e)
    assert r.get(key) == b"two again"
    guard = {k.decode(): v.decode() for k, v in r.hgetall(f"{{{name}}}:guard").items()}
    assert guard == {"lock": name, "token": str(t2)}

    h = f"{{{name}}}:hash"
    assert g.hset(h, "f", "v", lock=lk, token=t2) == 1
    assert g.hset(h, "f", "w", lock=lk, token=t2) == 0
    assert g.incrby(key + ":n", 5, lock=lk, token=t2) == 5
    assert g.incrby(key + ":n", -7, lock=lk, token=t2) == -2
    assert g.delete(h, lock=lk, token=t2) == 1
    assert g.delete(h, lock=lk, token=t2) == 0
    n = g.script("redis.call('SET', KEYS[1], ARGV[1]); return tonumber(ARGV[2])",
                 [key + ":s"], ["by script", "41"], lock=lk, token=t2)
    assert n == 41 and r.get(key + ":s") == b"by script"
    for call in (lambda: g.hset(h, "f", "x", lock=lk, token=t1),
                 lambda: g.incrby(key + ":n", 1, lock=lk, token=t1),
                 lambda: g.delete(key, lock=lk, token=t1),
                 lambda: g.script("redis.call('DEL', KEYS[1])", [key], lock=lk, token=t1)):
        with pytest.raises(rlock.StaleTokenError):
            call()
    assert not r.exists(h)
    assert r.get(key + ":n") == b"-2"
    assert r.get(key) == b"two again"
    # bytes for everything
    g.set(key.encode(), b"\xffbytes", lock=name.encode(), token=t2)
    assert r.get(key) == b"\xffbytes"


def test_a_failing_script_raises_and_does_not_record_the_token(client, name, r):
    lk, g, key = fenced(client, name)
    t1 = lk.acquire()
    lk.release()
    g.set(key, "a", lock=lk, token=t1)
    t2 = lk.acquire()
    lk.release()
    with pytest.raises(rlock.RLockError) as ei:
        g.script("return redis.error_reply('ERR mine')", lock=lk, token=t2)
    assert ei.value.name == "RLOCK_ESERVER" and "mine" in str(ei.value)
    assert r.hget(f"{{{name}}}:guard", "token") == str(t1).encode()


def test_foreign_lock_and_wrong_types_write_nothing(client, name, r):
    lk, g, key = fenced(client, name)
    t = lk.acquire()
    lk.release()
    g.set(key, "mine", lock=lk, token=t)
    other = client.fenced_lock(name + ":other")
    to = other.acquire()
    other.release()
    with pytest.raises(rlock.ForeignTokenError) as ei:
        g.set(key, "theirs", lock=other, token=to)
    assert ei.value.name == "RLOCK_EFOREIGN" and ei.value.code == -28
    assert r.get(key) == b"mine"
    # a guard key that is not a guard, a data key of the wrong type
    r.set(f"{{{name}}}:text", "x")
    bad = client.guard(f"{{{name}}}:text")
    with pytest.raises(rlock.RLockError) as ei:
        bad.set(key, "no", lock=lk, token=t)
    assert ei.value.name == "RLOCK_EWRONGTYPE"
    r.rpush(f"{{{name}}}:list", "x")
    with pytest.raises(rlock.RLockError) as ei:
        g.incrby(f"{{{name}}}:list", 1, lock=lk, token=t + 1)
    assert ei.value.name == "RLOCK_EWRONGTYPE"
    assert r.get(key) == b"mine"
    assert r.hget(f"{{{name}}}:guard", "token") == str(t).encode()


def test_async_guarded_writes(client, name, r):
    lk, g, key = fenced(client, name)

    async def main():
        t1 = await lk.acquire_async()
        await lk.release_async()
        t2 = await lk.acquire_async()
        await lk.release_async()
        await g.set_async(key, "v2", lock=lk, token=t2)
        assert await g.hset_async(key + ":h", "f", "v", lock=lk, token=t2) == 1
        assert await g.incrby_async(key + ":n", 3, lock=lk, token=t2) == 3
        assert await g.script_async("return #ARGV", [], ["a", "b"], lock=lk, token=t2) == 2
        assert await g.delete_async(key + ":h", lock=lk, token=t2) == 1
        with pytest.raises(rlock.StaleTokenError) as ei:
            await g.set_async(key, "v1", lock=lk, token=t1)
        assert ei.value.name == "RLOCK_ESTALE"
        assert ei.value.detail.startswith(f"STALE token {t1} of lock {name} is below {t2}")
        with pytest.raises(rlock.ForeignTokenError) as ei:
            await g.set_async(key, "v1", lock=name + ":other", token=t2)
        assert "FOREIGN" in ei.value.detail
        # many at once on one loop, no thread each
        n0 = threading.active_count()
        res = await asyncio.gather(*[g.incrby_async(key + ":n", 1, lock=lk, token=t2)
                                     for _ in range(50)])
        assert sorted(res) == list(range(4, 54))
        assert threading.active_count() == n0
        # an argument error raises at the call, not in the loop
        with pytest.raises(rlock.InvalidArgument):
            await g.set_async(key, "x", lock=lk, token=0)
    asyncio.run(main())
    assert r.get(key) == b"v2"
    assert r.get(key + ":n") == b"53"


def test_stale_event_and_stats(server, name, r):
    events = []
    c = rlock.Client(server.uri, on_event=events.append)
    try:
        lk, g, key = fenced(c, name)
        t1 = lk.acquire()
        lk.release()
        t2 = lk.acquire()
        lk.release()
        g.set(key, "new", lock=lk, token=t2)
        with pytest.raises(rlock.StaleTokenError):
            g.set(key, "old", lock=lk, token=t1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(e["type"] == "stale" for e in events):
            time.sleep(0.01)
        stale = [e for e in events if e["type"] == "stale"]
        assert len(stale) == 1, events
        ev = stale[0]
        assert ev["kind"] == "guard" and ev["error"] == "RLOCK_ESTALE"
        assert ev["name"] == f"{{{name}}}:guard"
        assert name in ev["detail"]
        assert c.stats()["failures"].get("RLOCK_ESTALE") == 1
        assert 'code="RLOCK_ESTALE"' in c.prometheus()
    finally:
        c.close()


def test_stale_event_to_logging_is_a_warning(server, name, caplog):
    import logging
    caplog.set_level(logging.DEBUG, logger="rlock")
    c = rlock.Client(server.uri, on_event=True)
    lk, g, key = fenced(c, name)
    t1 = lk.acquire()
    lk.release()
    g.set(key, "new", lock=lk, token=lk.acquire())
    lk.release()
    with pytest.raises(rlock.StaleTokenError):
        g.set(key, "old", lock=lk, token=t1)
    c.close()  # delivers what was queued, then the dispatcher ends
    recs = [rec for rec in caplog.records if rec.getMessage().startswith("stale")]
    assert len(recs) == 1 and recs[0].levelno == logging.WARNING


# ---- bad input ---------------------------------------------------------------

BAD_TOKENS = [
    (0, rlock.InvalidArgument, "token.* >= 1"),
    (-5, rlock.InvalidArgument, "token.* >= 1"),
    (2 ** 63, ValueError, "out of range"),
    (True, TypeError, "token must be an int"),
    ("7", TypeError, "token must be an int"),
    (7.0, TypeError, "token must be an int"),
    (None, TypeError, "token must be an int"),
]


@pytest.mark.parametrize("bad,exc,msg", BAD_TOKENS)
def test_bad_tokens(client, name, r, bad, exc, msg):
    lk, g, key = fenced(client, name)
    with pytest.raises(exc, match=msg):
        g.set(key, "x", lock=lk, token=bad)
    with pytest.raises(exc, match=msg):
        asyncio.run(g.set_async(key, "x", lock=lk, token=bad))
    with pytest.raises(exc, match=msg):
        lk.check(bad)
    with pytest.raises(exc, match=msg):
        asyncio.run(lk.check_async(bad))
    assert r.exists(key, f"{{{name}}}:guard", name) == 0


def test_token_zero_is_the_c_librarys_einval(client, name):
    lk, g, key = fenced(client, name)
    with pytest.raises(rlock.InvalidArgument) as ei:
        g.set(key, "x", lock=lk, token=0)
    assert ei.value.name == "RLOCK_EINVAL" and isinstance(ei.value, ValueError)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda g, lk: g.set(1, "v", lock=lk, token=1), TypeError, "key must be str or bytes"),
    (lambda g, lk: g.set("k", 3, lock=lk, token=1), TypeError, "value must be str or bytes"),
    (lambda g, lk: g.set("k", "a\0b", lock=lk, token=1), ValueError, "NUL"),
    (lambda g, lk: g.set("k", None, lock=lk, token=1), rlock.InvalidArgument, "value"),
    (lambda g, lk: g.hset("k", None, "v", lock=lk, token=1), rlock.InvalidArgument, "field"),
    (lambda g, lk: g.incrby("k", "1", lock=lk, token=1), TypeError, "delta must be an int"),
    (lambda g, lk: g.incrby("k", 2 ** 64, lock=lk, token=1), ValueError, "delta out of range"),
    (lambda g, lk: g.script("", lock=lk, token=1), rlock.InvalidArgument, "script"),
    (lambda g, lk: g.script("return 1", "k", lock=lk, token=1), TypeError, "sequence"),
    (lambda g, lk: g.script("return 1", [1], lock=lk, token=1), TypeError, "keys must be str"),
    (lambda g, lk: g.script("return 1", 5, lock=lk, token=1), TypeError, "sequence"),
    (lambda g, lk: g.script("return 1", ["k"] * 1001, lock=lk, token=1), rlock.InvalidArgument, "1000"),
    (lambda g, lk: g.set("k", "v", lock=lk.client.lock("plain"), token=1), TypeError, "fenced"),
    (lambda g, lk: g.set("k", "v", lock=42, token=1), TypeError, "FencedLock or a name"),
    (lambda g, lk: g.set("k", "v", lock="", token=1), ValueError, "empty"),
    (lambda g, lk: g.set("k", "v", token=1), TypeError, "lock"),
])
def test_bad_write_arguments(client, name, r, call, exc, msg):
    lk = client.fenced_lock(name)
    g = client.guard(name + ":guard")
    with pytest.raises(exc, match=msg):
        call(g, lk)
    assert r.exists("k", name + ":guard") == 0


@pytest.mark.parametrize("bad,exc", [(None, TypeError), (5, TypeError), ("", ValueError),
                                     ("a\0b", ValueError)])
def test_bad_guard_names(client, bad, exc):
    with pytest.raises(exc):
        client.guard(bad)


def test_guard_name_too_long(client):
    with pytest.raises(rlock.InvalidArgument) as ei:
        client.guard("x" * 65536)
    assert ei.value.name == "RLOCK_ENAMETOOLONG"


def test_closed_client_guard_and_check(server, name, r):
    c = rlock.Client(server.uri)
    lk, g, key = fenced(c, name)
    t = lk.acquire()
    c.close()
    for call in (lambda: g.set(key, "x", lock=lk, token=t),
                 lambda: lk.check(t),
                 lambda: c.guard(name),
                 lambda: asyncio.run(g.set_async(key, "x", lock=lk, token=t)),
                 lambda: asyncio.run(lk.check_async(t))):
        with pytest.raises(rlock.Closed) as ei:
            call()
        assert ei.value.name == "RLOCK_ECLOSED"
    assert not r.exists(key)


# ---- the zombie holder ---------------------------------------------------------

ZOMBIE = """
import asyncio, sys, rlock
uri, name, how = sys.argv[1:4]
c = rlock.Client(uri, watchdog_timeout=1.0)
lk = c.fenced_lock(name)
g = c.guard("{%s}:guard" % name)
token = lk.acquire()          # the watchdog keeps it while this process runs
g.set("{%s}:data" % name, "A1", lock=lk, token=token)
print(token, flush=True)
sys.stdin.readline()          # SIGSTOPped here, past its lease; then continued
try:
    if how == "set":
        g.set("{%s}:data" % name, "A2", lock=lk, token=token)
    else:
        asyncio.run(g.script_async(
            "redis.call('SET', KEYS[1], ARGV[1]); return 1",
            ["{%s}:data" % name], ["A2"], lock=lk, token=token))
except rlock.StaleTokenError as e:
    print("stale", e.code, e.name, e.detail, flush=True)
    sys.exit(27)
print("written", flush=True)
"""


@pytest.mark.parametrize("how", ["set", "script_async"])
def test_zombie_holder_is_refused_and_the_next_holders_data_stays(server, client, name, r, how):
    pkg_root = os.path.dirname(os.path.dirname(rlock.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [pkg_root, os.environ.get("PYTHONPATH", "")]))
    a = subprocess.Popen([sys.executable, "-c", textwrap.dedent(ZOMBIE), server.uri, name, how],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = a.stdout.readline()
        assert line.strip().isdigit(), (line, a.stderr.read() if a.poll() is not None else "")
        token_a = int(line)
        lk, g, key = fenced(client, name)
        assert r.get(key) == b"A1"
        # A is paused (as by GC or swap): its watchdog stops renewing
        os.kill(a.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        token_b = lk.acquire(wait=15)
        waited = time.monotonic() - t0
        assert token_b > token_a, (token_a, token_b)
        assert 0.3 < waited < 10, waited  # A's lease (1 s watchdog) ran out
        g.set(key, "B", lock=lk, token=token_b)
        # A goes on and writes with its old token
        os.kill(a.pid, signal.SIGCONT)
        out, err = a.communicate("go\n", timeout=30)
        assert a.returncode == 27, (a.returncode, out, err)
        assert f"stale -27 RLOCK_ESTALE" in out
        assert r.get(key) == b"B"
        assert r.hget(f"{{{name}}}:guard", "token") == str(token_b).encode()
        assert lk.check(token_a) is rlock.FenceState.STALE
        assert lk.check(token_b) is rlock.FenceState.CURRENT
        lk.release()
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait()


def test_token_key_ttl_option_and_the_unknown_state(server, name, r):
    c = rlock.Client(server.uri, fenced_token_ttl=30.0)
    try:
        assert rlock.DEFAULTS["fenced_token_ttl"] == 0
        lk = c.fenced_lock(name)
        t = lk.acquire(lease=30)
        tkey = f"redisson_lock_token:{{{name}}}"
        assert 20000 < r.pttl(tkey) <= 30000
        assert lk.check(t) is rlock.FenceState.CURRENT
        r.delete(tkey)  # as if its TTL had run out during the hold
        assert lk.check(t) is rlock.FenceState.UNKNOWN
        lk.release()
    finally:
        c.close()


def test_cancelled_task_waits_for_its_guarded_write(client, name, r):
    """A guarded write cannot be taken back: a task cancelled while one is
    in flight gets CancelledError only once the write has ended."""
    lk, g, key = fenced(client, name)
    t = lk.acquire()
    lk.release()

    async def main():
        r.execute_command("CLIENT", "PAUSE", 1200, "WRITE")  # holds the script
        t0 = time.monotonic()
        task = asyncio.create_task(g.set_async(key, "v", lock=lk, token=t))
        await asyncio.sleep(0.05)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t0
    took = asyncio.run(main())
    assert took >= 0.8, took  # not before the pause ended (1.2 s)
    assert r.get(key) == b"v"
    assert r.hget(f"{{{name}}}:guard", "token") == str(t).encode()


def test_threads_share_one_guard(client, name, r):
    """Guarded writes release the GIL and may come from many threads at
    once through one Guard: each runs exactly once."""
    lk, g, key = fenced(client, name)
    t = lk.acquire()
    lk.release()
    errors = []

    def worker():
        try:
            for _ in range(50):
                g.incrby(key, 1, lock=lk, token=t)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert r.get(key) == b"400"
