import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import rlock


def child(server, body, timeout=30):
    """Runs `body` in a fresh interpreter with the built package."""
    code = "import rlock, sys, time, os, signal, threading\n" + textwrap.dedent(body)
    pkg_root = os.path.dirname(os.path.dirname(rlock.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [pkg_root, os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", code, server.uri],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_ctrl_c_during_a_fast_multilock_wait(server, client, name):
    fm = client.fast_multi_lock(name, "v")
    holder = rlock.Owner()
    fm.acquire(owner=holder)
    p = child(server, f"""
        c = rlock.Client(sys.argv[1])
        print("waiting", flush=True)
        try:
            c.fast_multi_lock({name!r}, "v").acquire()
            print("acquired?!", flush=True)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
        c.close()
    """)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.5)
    t_sig = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    word, t_done = out.split()
    assert word == "interrupted"
    assert float(t_done) - t_sig < 1.0
    assert fm.is_held(owner=holder)
    fm.release(owner=holder)


def test_ctrl_c_during_blocking_acquire(server, client, name):
    fl = client.fair_lock(name)
    holder = rlock.Owner()
    fl.acquire(owner=holder)
    p = child(server, f"""
        c = rlock.Client(sys.argv[1])
        print("waiting", flush=True)
        try:
            c.fair_lock({name!r}).acquire()
            print("acquired?!", flush=True)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
        c.close()
    """)
    assert p.stdout.readline().strip() == "waiting"
    deadline = time.monotonic() + 10
    while client.info(name)["queue_total"] != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.info(name)["queue_total"] == 1
    t_sig = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    word, t_done = out.split()
    assert word == "interrupted"
    # promptly: the wait polls for signals every 200 ms at most
    assert float(t_done) - t_sig < 1.0
    assert client.info(name)["queue_total"] == 0
    assert fl.is_held(owner=holder)
    fl.release(owner=holder)


def test_forked_child_gets_a_clear_error(client, name):
    lk = client.lock(name)
    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            lk.acquire(wait=0)
            msg = b"acquired"
        except rlock.ForkError as e:
            msg = f"{e.name}|{e}".encode()
        except BaseException as e:  # pragma: no cover
            msg = repr(e).encode()
        os.write(w_fd, msg)
        os._exit(0)
    os.close(w_fd)
    _, status = os.waitpid(pid, 0)
    msg = os.read(r_fd, 1000).decode()
    os.close(r_fd)
    assert msg.startswith("RLOCK_EFORK|"), msg
    assert "fork" in msg
    # the parent's client is untouched
    with lk:
        assert lk.is_held()


def test_renewals_on_time_while_a_thread_spins_with_the_gil(server, name, r):
    events = []
    c = rlock.Client(server.uri, watchdog_timeout=0.6,
                     on_event=events.append)
    lk = c.lock(name)
    lk.acquire()  # watchdog: 600 ms lease, renewed every 200 ms
    # events fire during the spin too: a second lock, leased 200 ms to one
    # owner, is waited for by another (async, completed through a queue),
    # so the loop thread hands over ACQUIRED and RELEASED while the main
    # thread spins (a handler run on the loop thread would need the GIL)
    lk2 = c.lock(name + "2")
    lk2.acquire(lease=0.2, owner=rlock.Owner())
    q = rlock._rlock.Queue()
    req = lk2._h.acquire_async(q, 1, rlock.Owner().id, 1, -1, 100)
    before = c.stats()["renewals_confirmed"]
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)  # this thread keeps the GIL while it spins
    try:
        end = time.monotonic() + 1.5
        min_pttl = 10 ** 9
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(old)
    st = c.stats()
    renewed = st["renewals_confirmed"] - before
    # 1.5 s of 200 ms periods: ~7 renewals (a loop thread stalled by the
    # GIL from the first event on, ~200 ms in, would make 1 and lose the
    # lock); the lock never expired
    assert renewed >= 4, (renewed, st)
    assert st["locks_lost"] == 0, st
    done = q.drain() or q.wait(5.0)
    assert [it[2] for it in done] == [1], done  # the waiter got lk2
    del req
    assert lk.is_held()
    assert lk.release()
    c.close()
    assert not [e for e in events if e["type"] == "lost"]


def test_close_with_held_locks_and_waiters_is_clean(server, name):
    c = rlock.Client(server.uri)
    lk = c.lock(name)
    lk.acquire()
    errs = []

    def waiter():
        try:
            lk.acquire()
        except rlock.RLockError as e:
            errs.append(e)
    ts = [threading.Thread(target=waiter) for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.2)
    c.close()
    for t in ts:
        t.join(5)
    assert all(not t.is_alive() for t in ts)
    assert len(errs) == 3 and all(isinstance(e, rlock.Closed) for e in errs)
    with pytest.raises(rlock.Closed):
        lk.acquire()
    with pytest.raises(rlock.Closed):
        c.lock(name)
    c.close()  # twice is fine


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_no_leak_over_many_lock_unlock_pairs(client, name):
    lk = client.lock(name)
    fl = client.fenced_lock(name + "f")
    for _ in range(2000):  # warm up allocator and caches
        lk.acquire(); lk.release()
    base = rss_kb()
    n = 10000
    for i in range(n):
        lk.acquire(); lk.release()
        if i % 10 == 0:
            fl.acquire(wait=0); fl.release()
            client.lock(name + str(i % 7)).locked()
    grown = rss_kb() - base
    print(f"RSS grew {grown} kB over {n} pairs")
    # a leak of even 100 bytes per pair would be ~1 MB
    assert grown < 800, grown


def test_threads_exclude_each_other(client, name, r):
    lk = client.lock(name)
    r.set(name + ":n", 0)
    per = 50

    def worker():
        for _ in range(per):
            with lk:
                v = int(r.get(name + ":n"))
                r.set(name + ":n", v + 1)
    import redis as _  # noqa: F401  (the counter client is redis-py)
    ts = [threading.Thread(target=worker) for _ in range(4)]
    # each thread its own redis-py connection pool is shared: fine, it is thread-safe
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert int(r.get(name + ":n")) == 4 * per


def test_interrupt_a_waiting_thread_is_cancelled(client, name):
    lk = client.fair_lock(name)
    holder = rlock.Owner()
    lk.acquire(owner=holder)
    res, tid = [], []

    def waiter():
        tid.append(rlock.thread_id())
        try:
            lk.acquire()
        except rlock.Cancelled as e:
            res.append(e.name)
    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 5
    while client.info(name)["queue_total"] != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.interrupt(tid[0]) == 1
    t.join(5)
    assert res == ["RLOCK_ECANCELED"]
    lk.release(owner=holder)
