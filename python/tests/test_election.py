"""Leader election in Python (issue 38): campaign as a context manager and
as an awaitable, proclaim, resign, leading, leader, observe; against other
Python candidates, a C candidate (rlock's CLI `rlock elect`) and a Java
candidate (the real Redisson peer holding getFencedLock(name))."""
import asyncio
import os
import signal
import subprocess
import threading
import time

import pytest

import rlock
from conftest import Server
from interop import Peer


def cli_path():
    p = os.environ.get("RLOCK_CLI")
    assert p, "RLOCK_CLI not set (meson test sets it to the built rlock tool)"
    return p


def leftovers(r, name):
    """Keys of `name` that outlive the election: none but the fenced lock's
    token counter (kept on purpose: tokens never go backwards) and
    Redisson's unlock latches (which expire)."""
    out = []
    for k in r.keys(f"*{name}*"):
        if k.startswith(b"redisson_lock_token:"):
            continue
        if k.startswith(b"redisson_unlock_latch:") and r.pttl(k) > 0:
            continue
        out.append(k)
    return out


def terms_seen(states):
    """(term, last value seen) per leader's term, in the order observed (a
    new leader may be seen before it has written its value: value None,
    its term the lock's token)."""
    out = []
    for s in states:
        if not s.has_leader:
            continue
        if out and out[-1][0] == s.term:
            out[-1] = (s.term, s.value if s.value is not None else out[-1][1])
        else:
            out.append((s.term, s.value))
    return out


def wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("condition not met within %s s" % timeout)


def test_campaign_proclaim_resign(server, r, name):
    events, ends = [], []
    c = rlock.Client(server.uri, on_event=events.append)
    try:
        before = c.stats()
        assert c.leader(name) == rlock.LeaderState(False, 0, None, None, None)
        e = c.election(name, on_end=lambda t, why: ends.append((t, why)))
        assert e.leading() is None
        with e.campaign("host-a", wait=5) as term:
            assert isinstance(term, int) and term > 0
            lead = e.leading()
            assert lead is not None and lead[0] == term
            assert lead[1] > rlock.now() + 1.0  # the lease guarantee ahead
            st = c.leader(name)
            assert st.has_leader and st.term == term and st.value == b"host-a"
            assert st.holder.startswith(c.id + ":")
            assert 0 < st.ttl <= 30.0
            e.proclaim(b"host-a2")
            assert c.leader(name).value == b"host-a2"
            assert c.leader(name).term == term  # no re-election
        # the with resigned: nobody leads, nothing left on the server
        assert e.leading() is None
        assert c.leader(name).has_leader is False
        assert leftovers(r, name) == []
        wait_for(lambda: ends)
        assert ends == [(term, "resigned")]
        wait_for(lambda: any(ev["type"] == "term_ended" for ev in events))
        mine = [(ev["type"], ev["term"]) for ev in events if ev["kind"] == "election"]
        assert mine == [("elected", term), ("term_ended", term)]
        after = c.stats()
        assert after["terms_won"] - before["terms_won"] == 1
        assert after["terms_resigned"] - before["terms_resigned"] == 1
        assert after["terms_lost"] == before["terms_lost"]
        e.close()
    finally:
        c.close()


def test_two_python_candidates_hand_over_on_resign(server, name):
    a, b = rlock.Client(server.uri), rlock.Client(server.uri)
    seen = []
    obs = a.observe(name, seen.append, poll=0.5)
    try:
        ea, eb = a.election(name), b.election(name)
        ta = ea.campaign("A", wait=5)
        with pytest.raises(rlock.AcquireTimeout):
            eb.campaign("B", wait=0)  # one try: A leads
        got = {}

        def run_b():
            got["term"] = eb.campaign("B", wait=20)
            got["at"] = time.monotonic()
        t = threading.Thread(target=run_b)
        t.start()
        time.sleep(0.3)
        assert "term" not in got  # B waits while A leads
        resigned = time.monotonic()
        ea.resign()
        t.join(20)
        assert got["term"] > ta
        # at once, not after A's lease (30 s)
        assert got["at"] - resigned < 2.0, got["at"] - resigned
        assert a.leader(name).value == b"B"
        with pytest.raises(rlock.NotOwner):
            ea.resign()
        eb.resign()
        wait_for(lambda: seen and not seen[-1].has_leader and
                 any(s.value == b"B" for s in seen))
        # in order: nobody, A, (nobody), B, nobody - each term once
        assert terms_seen(seen) == [(ta, b"A"), (got["term"], b"B")], seen
        ea.close()
        eb.close()
    finally:
        obs.close()
        a.close()
        b.close()


def test_observe_async_iterator_and_campaign_async(client, name):
    async def main():
        states = []
        e = client.election(name)
        async with client.observe(name, poll=0.5) as obs:
            first, led = asyncio.Event(), asyncio.Event()

            async def watch():
                async for st in obs:
                    states.append(st)
                    first.set()
                    if st.has_leader and st.value == b"async-leader":
                        led.set()
                    if len(states) > 1 and not st.has_leader:
                        return
            w = asyncio.create_task(watch())
            await asyncio.wait_for(first.wait(), 10)  # the state at the start
            term = await e.campaign_async("async-leader", wait=5)
            assert e.leading()[0] == term
            # An observer reads the state again when the win is announced
            # (docs/election.md): a resign sent before that read would undo
            # the win unseen, as a loaded machine once did here. So the
            # leader resigns once its observer has seen it lead.
            await asyncio.wait_for(led.wait(), 10)
            await asyncio.get_running_loop().run_in_executor(None, e.resign)
            await asyncio.wait_for(w, 10)
        # nobody, the leader (maybe first without its value), nobody
        assert not states[0].has_leader and not states[-1].has_leader
        assert terms_seen(states) == [(term, b"async-leader")], states
        assert all(s.has_leader for s in states[1:-1]), states
        e.close()
    asyncio.run(main())


def test_campaign_async_cancel_leaves_nothing_queued(server, name):
    a, b = rlock.Client(server.uri), rlock.Client(server.uri)
    try:
        ea, eb = a.election(name), b.election(name)
        ta = ea.campaign("A")

        async def main():
            task = asyncio.create_task(eb.campaign_async("B"))
            await asyncio.sleep(0.3)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        asyncio.run(main())
        ea.resign()
        # the cancelled candidate does not win later
        time.sleep(0.5)
        assert a.leader(name).has_leader is False
        assert eb.leading() is None
        # the handle is free for a new campaign
        tb = eb.campaign("B", wait=5)
        assert tb > ta
        eb.resign()
        ea.close()
        eb.close()
    finally:
        a.close()
        b.close()


def test_c_candidate_seen_by_python(server, name):
    """A C candidate (rlock elect) leads: a Python observer sees its value,
    a Python candidate waits and wins when the C side's command ends."""
    c = rlock.Client(server.uri)
    seen = []
    obs = c.observe(name, seen.append, poll=0.5)
    proc = subprocess.Popen([cli_path(), "elect", "-u", server.uri, "--value",
                             "from-c", name, "--", "sleep", "2"])
    try:
        # the C side wins the lock, then writes its value: an observer may
        # see the leader without a value in between (docs/election.md)
        st = wait_for(lambda: (lambda s: s if s.has_leader and s.value is not None
                               else None)(c.leader(name)))
        assert st.value == b"from-c" and st.term > 0
        e = c.election(name)
        with pytest.raises(rlock.AcquireTimeout):
            e.campaign("py", wait=0)
        term = e.campaign("py", wait=20)  # the C side resigns when sleep ends
        assert proc.wait(10) == 0
        assert term > st.term
        assert c.leader(name).value == b"py"
        wait_for(lambda: any(s.value == b"py" for s in seen))
        assert terms_seen(seen) == [(st.term, b"from-c"), (term, b"py")], seen
        e.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
        obs.close()
        c.close()


def test_java_candidate_seen_by_python(server, name):
    """A Java service holding getFencedLock(name) is the leader, with no
    value; the Python candidate waits for it and wins on its unlock."""
    peer = Peer(str(server.port))
    c = rlock.Client(server.uri)
    seen = []
    obs = c.observe(name, seen.append, poll=0.3)
    try:
        assert peer.call(f"lock X/{name}") == "OK"
        jtoken = int(peer.call(f"token X/{name}").split()[1])
        st = c.leader(name)
        assert st.has_leader and st.value is None and st.term == jtoken
        assert st.holder.startswith(peer.id + ":")
        e = c.election(name)
        with pytest.raises(rlock.AcquireTimeout):
            e.campaign("py", wait=0)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("t", e.campaign("py", wait=20)))
        t.start()
        time.sleep(0.3)
        assert "t" not in got
        assert peer.call(f"unlock X/{name}") == "OK"
        t.join(20)
        assert got["t"] > jtoken
        wait_for(lambda: any(s.value == b"py" for s in seen))
        assert terms_seen(seen) == [(jtoken, None), (got["t"], b"py")], seen
        e.resign()
        e.close()
    finally:
        obs.close()
        c.close()
        peer.close()


def test_election_bad_input(client, r, name):
    e = client.election(name)
    with pytest.raises(rlock.InvalidArgument):
        e.campaign("", wait=0)
    with pytest.raises(rlock.InvalidArgument):
        e.campaign(b"x" * 4097, wait=0)
    with pytest.raises(TypeError):
        e.campaign(5, wait=0)
    with pytest.raises(ValueError):
        e.campaign("v", wait=-1)
    with pytest.raises(TypeError):
        e.campaign("v", on_end="not callable")
    with pytest.raises(rlock.NotOwner):
        e.resign()
    with pytest.raises(rlock.NotOwner):
        e.proclaim("v")
    assert leftovers(r, name) == []
    big = e.campaign(b"x" * 4096, wait=0)  # the limit itself is fine
    with pytest.raises(rlock.ReentryError):
        e.campaign("again", wait=0)
    with pytest.raises(rlock.InvalidArgument):
        e.proclaim(b"")
    assert client.leader(name).term == big
    e.resign()
    assert leftovers(r, name) == []
    # a name held by another kind of lock
    lk = client.read_lock(name + ":rw")
    assert lk.acquire()
    with pytest.raises(rlock.RLockError) as ei:
        client.election(name + ":rw").campaign("v", wait=0)
    assert ei.value.name in ("RLOCK_EKIND", "RLOCK_EWRONGTYPE")
    with pytest.raises(rlock.RLockError):
        client.leader(name + ":rw")
    lk.release()
    # names (as for every lock: ValueError)
    with pytest.raises(ValueError):
        client.election("")
    with pytest.raises(ValueError):
        client.leader("")
    with pytest.raises(ValueError):
        client.observe("")
    with pytest.raises(TypeError):
        client.observe(name, "not callable")
    # an observer of a name nobody campaigns for: one empty state
    async def first():
        async with client.observe(name + ":nobody") as obs:
            return await asyncio.wait_for(obs.__anext__(), 10)
    assert asyncio.run(first()) == rlock.LeaderState(False, 0, None, None, None)
    assert leftovers(r, name) == []
    e.close()
    # a closed client
    c2 = rlock.Client(client_uri(r))
    e2 = c2.election(name)
    c2.close()
    with pytest.raises(rlock.Closed):
        c2.election(name)
    with pytest.raises(rlock.Closed):
        c2.leader(name)
    with pytest.raises(rlock.RLockError):
        e2.campaign("v", wait=0)
    e2.close()


def client_uri(r):
    kw = r.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}"


def test_loss_goes_to_on_end_on_the_dispatcher_thread(server, r, name):
    """The lock deleted under the leader (as an expiry would): the
    watchdog finds it gone, the term ends as lost, once, on the client's
    dispatcher thread; leading() says None."""
    import threading as th
    ends, events = [], []

    def on_end(term, why):
        ends.append((term, why, th.current_thread().name))
    c = rlock.Client(server.uri, watchdog_timeout=1.0,
                     on_event=lambda ev: events.append(ev) if ev["kind"] == "election" else None)
    try:
        before = c.stats()["terms_lost"]
        e = c.election(name, on_end=on_end)
        term = e.campaign("v", wait=5)
        assert e.leading() is not None
        assert r.delete(name) == 1
        wait_for(lambda: ends, 10)
        assert ends == [(term, "lost", "rlock-events")]
        assert e.leading() is None
        with pytest.raises(rlock.NotOwner):
            e.resign()
        assert c.stats()["terms_lost"] - before == 1
        wait_for(lambda: any(ev["type"] == "term_ended" for ev in events))
        assert [(ev["type"], ev["term"]) for ev in events] == [
            ("elected", term), ("term_ended", term)]
        time.sleep(0.5)
        assert len(ends) == 1  # exactly once
        e.close()
    finally:
        c.close()


def test_ctrl_c_during_a_campaign(server, client, name):
    """SIGINT while a campaign waits (main thread): KeyboardInterrupt within
    a second, and the campaign is over - it does not win later."""
    from test_threads import child
    e = client.election(name)
    term = e.campaign("holder")
    p = child(server, f"""
        c = rlock.Client(sys.argv[1])
        e = c.election({name!r})
        print("waiting", flush=True)
        try:
            e.campaign("child")
            print("won?!", flush=True)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
        # the leader resigns next; this candidate must not win then
        while c.leader({name!r}).has_leader:
            time.sleep(0.02)
        time.sleep(0.5)
        print("leading", e.leading(), flush=True)
        e.close()
        c.close()
    """)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.5)
    t_sig = time.monotonic()
    p.send_signal(signal.SIGINT)
    line = p.stdout.readline().split()
    assert line[0] == "interrupted", line
    assert float(line[1]) - t_sig < 1.0
    e.resign()
    assert client.leader(name).has_leader is False
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert out.strip() == "leading None"
    assert client.leader(name).has_leader is False
    assert term > 0
    e.close()
