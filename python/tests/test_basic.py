import threading
import time

import pytest

import rlock


def test_import_reports_the_library_version():
    assert rlock.__version__ == rlock.library_version()
    assert rlock.library_version().count(".") == 2


def test_defaults_come_from_the_c_library():
    d = rlock.DEFAULTS
    assert d["watchdog_timeout"] == 30.0
    assert d["command_timeout"] == 3.0
    assert d["handoff_max"] == 3
    assert d["spin_us"] == 250


def test_lock_with_block_holds_and_releases(client, name, r):
    lk = client.lock(name)
    with lk:
        assert lk.is_held()
        assert lk.locked()
        assert lk.hold_count() == 1
        field = r.hkeys(name)[0].decode()
        assert field == f"{client.id}:{rlock.thread_id()}"
    assert not lk.locked()
    assert r.exists(name) == 0


def test_reentry_is_per_python_thread(client, name):
    lk = client.lock(name)
    assert lk.acquire()
    assert lk.acquire()
    assert lk.hold_count() == 2
    got = []
    t = threading.Thread(target=lambda: got.append(
        (lk.acquire(wait=0.05), lk.is_held(), lk.hold_count())))
    t.start()
    t.join()
    assert got == [(False, False, 0)]
    assert lk.release() is True
    assert lk.hold_count() == 1
    assert lk.release() is True
    assert lk.hold_count() == 0
    t = threading.Thread(target=lambda: got.append(lk.acquire(wait=0) and lk.release()))
    t.start()
    t.join()
    assert got[-1] is True


def test_wait_and_lease_in_float_seconds(client, name):
    lk = client.lock(name)
    assert lk.acquire(lease=0.5)
    ttl = lk.remain_ttl()
    assert 0.3 < ttl <= 0.5
    other = []
    t0 = time.monotonic()
    t = threading.Thread(target=lambda: other.append(lk.acquire(wait=0.2)))
    t.start()
    t.join()
    assert other == [False]
    assert 0.15 < time.monotonic() - t0 < 2.0
    assert lk.release()
    assert lk.remain_ttl() is None


def test_with_block_timeout_is_a_timeout_error(client, name):
    holder = client.lock(name)
    holder.acquire()
    res = []

    def other():
        try:
            with client.lock(name, wait=0.1):
                res.append("got it")
        except TimeoutError as e:
            res.append(e)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    holder.release()
    assert isinstance(res[0], rlock.AcquireTimeout)
    assert res[0].name == "RLOCK_ETIMEDOUT"
    assert "not acquired within 0.1 s" in str(res[0])


def test_unlock_not_held_is_not_owner(client, name):
    with pytest.raises(rlock.NotOwner) as ei:
        client.lock(name).release()
    assert ei.value.name == "RLOCK_ENOTOWNER"
    assert ei.value.code == -9
    assert isinstance(ei.value, rlock.RLockError)


def test_lost_lock_is_lock_lost(client, name, r):
    lk = client.lock(name)
    lk.acquire(lease=5)
    r.delete(name)
    with pytest.raises(rlock.LockLost) as ei:
        lk.release()
    assert ei.value.name == "RLOCK_ELOCKLOST"


def test_explicit_owner_released_by_another_thread(client, name):
    lk = client.lock(name)
    o = rlock.Owner()
    assert lk.acquire(owner=o)
    assert lk.is_held(owner=o) and not lk.is_held()
    res = []
    t = threading.Thread(target=lambda: res.append(lk.release(owner=o)))
    t.start()
    t.join()
    assert res == [True]
    assert not lk.locked()


def test_fenced_tokens_grow(client, name):
    f = client.fenced_lock(name)
    t1 = f.acquire()
    assert t1 > 0
    assert f.release()
    with f as t2:
        # floored with the server's clock (issue 37): above, not always +1
        assert t2 > t1
        assert f.token() == t2


def test_kinds(client, name):
    rd = client.read_lock(name)
    wr = client.write_lock(name)
    assert rd.acquire()
    res = []
    t = threading.Thread(target=lambda: res.append((rd.acquire(wait=0), wr.acquire(wait=0))))
    t.start()
    t.join()
    assert res == [(True, False)]
    rd.release()
    for kind in ("fair_lock", "spin_lock"):
        lk = getattr(client, kind)(name + kind)
        with lk:
            assert lk.is_held()
        assert lk.kind == {"fair_lock": "fair", "spin_lock": "spin"}[kind]
    nr = client.nonreentrant_lock(name + "nr")
    assert nr.acquire()
    with pytest.raises(rlock.ReentryError) as ei:
        nr.acquire()
    assert ei.value.name == "RLOCK_EREENTRY"
    nr.release()
    nrf = client.nonreentrant_lock(name + "nrf", fair=True)
    assert nrf.kind == "nonreentrant_fair"
    with nrf:
        with pytest.raises(rlock.ReentryError):
            nrf.acquire(wait=0)


def test_multilock_all_or_none(client, name):
    a, b = client.lock(name + "a"), client.lock(name + "b")
    ml = client.multi_lock(a, b)
    with ml:
        assert a.is_held() and b.is_held() and ml.is_held()
    assert not a.locked() and not b.locked()
    res = []
    t = threading.Thread(target=lambda: (b.acquire(), res.append(1)))
    t.start()
    t.join()
    assert ml.acquire(wait=0.1) is False
    assert not a.locked()


def test_semaphore_one_and_several(client, name):
    s = client.semaphore(name)
    assert s.try_set_permits(3)
    assert not s.try_set_permits(3)
    assert s.acquire()
    assert s.acquire(2)
    assert s.available_permits() == 0
    assert s.acquire(wait=0.05) is False
    s.release(3)
    assert s.available_permits() == 3
    assert s.drain_permits() == 3
    s.add_permits(1)
    with s:
        assert s.available_permits() == 0
    assert s.available_permits() == 1


def test_permit_semaphore_ids(client, name):
    ps = client.permit_semaphore(name)
    assert ps.try_set_permits(3)
    ids = ps.acquire(2, lease=10)
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)
    assert ps.available_permits() == 1 and ps.acquired_permits() == 2
    assert 9 < ps.lease_time(ids[0]) <= 10
    assert ps.update_lease(ids[0], None)
    assert ps.lease_time(ids[0]) is None
    assert ps.acquire(2, wait=0) is None
    assert ps.release(ids) == 2
    with pytest.raises(rlock.NotOwner):
        ps.release(ids[0])
    assert not ps.try_release(ids[1])
    assert ps.permits() == 3


def test_latch(client, name):
    l = client.latch(name)
    assert l.try_set_count(2)
    assert l.count() == 2
    assert l.wait(0.05) is False
    res = []
    t = threading.Thread(target=lambda: res.append(l.wait(5)))
    t.start()
    l.count_down()
    l.count_down()
    t.join()
    assert res == [True] and l.count() == 0


def test_lease_guaranteed(client, name):
    lk = client.lock(name)
    lk.acquire(lease=10)
    ok, until = lk.lease_guaranteed()
    assert ok and 9 < until - rlock.now() <= 10
    lk.release()
    with pytest.raises(rlock.NotOwner):
        lk.lease_guaranteed()


def test_info_and_scan(client, name):
    lk = client.fenced_lock(name)
    lk.acquire()
    i = client.info(name)
    assert i["kind"] == "fenced" and i["locked"] is True
    assert i["holders"][0]["key"] == f"{client.id}:{rlock.thread_id()}"
    assert i["holders"][0]["count"] == 1
    assert i["token"] >= 1
    assert name in client.scan(name.replace("[", "?") + "*")
    lk.release()
    assert client.info(name + "none")["kind"] == "none"


def test_stats_and_prometheus(client, name):
    lk = client.lock(name)
    for _ in range(3):
        with lk:
            pass
    st = client.stats()
    assert st["acquisitions"] >= 3 and st["releases"] >= 3
    assert st["wait"]["count"] == sum(st["wait"]["buckets"])
    text = client.prometheus("svc")
    assert "rlock_acquisitions_total{client=\"svc\"}" in text
    assert client.stats_json().startswith("{")


def test_events_and_diag_off_the_loop_thread(server, name):
    got, diags = [], []
    loop_threads = set()

    def on_event(ev):
        loop_threads.add(threading.current_thread().name)
        got.append(ev)

    c = rlock.Client(server.uri, on_event=on_event,
                     on_diag=lambda lvl, msg: diags.append((lvl, msg)))
    try:
        lk = c.lock(name)
        with lk:
            pass
    finally:
        c.close()
    types = [e["type"] for e in got]
    assert types[:2] == ["acquired", "released"]
    assert got[0]["name"] == name and got[0]["kind"] == "lock"
    assert loop_threads == {"rlock-events"}
    assert any("connected" in m for _lvl, m in diags)


def test_events_to_logging(server, name, caplog):
    import logging
    caplog.set_level(logging.DEBUG, logger="rlock")
    c = rlock.Client(server.uri, on_event=True, on_diag=True)
    with c.lock(name):
        pass
    c.close()
    msgs = [rec.getMessage() for rec in caplog.records if rec.name == "rlock"]
    assert any(m.startswith("acquired") and name in m for m in msgs)
    assert any("connected" in m for m in msgs)


def test_lock_lost_callback(server, name, r):
    lost = []
    c = rlock.Client(server.uri, watchdog_timeout=0.3,
                     on_lock_lost=lambda n, o: lost.append((n, o)))
    lk = c.lock(name)
    lk.acquire()
    r.delete(name)
    deadline = time.monotonic() + 5
    while not lost and time.monotonic() < deadline:
        time.sleep(0.02)
    c.close()
    assert lost and lost[0][0] == name and lost[0][1].startswith(c.id)


def test_fast_multilock(client, name, r):
    fm = client.fast_multi_lock(name, "Jack_001", b"Jill_002", lease=10)
    with fm:
        assert fm.is_held() and fm.locked()
        # Redisson's field name of "Jack_001" (HighwayHash-128, base64)
        assert b"7pNoDdizVy2xY792MaFv+w" in r.hkeys(name)
        res = []
        t = threading.Thread(target=lambda: res.append(
            client.fast_multi_lock(name, "Jack_001").acquire(wait=0.05)))
        t.start()
        t.join()
        assert res == [False]
        assert fm.renew(20)
    assert not fm.locked()
    other = client.fast_multi_lock(name, "Jill_002")
    o = rlock.Owner()
    assert other.acquire(owner=o, lease=5)
    assert fm.acquire(wait=0) is False
    assert fm.force_unlock() == 1
    with pytest.raises(TypeError):
        client.fast_multi_lock(name, 5)
    with pytest.raises(ValueError):
        client.fast_multi_lock(name)


def test_every_c_option_is_a_keyword(server):
    fields = set(rlock._rlock.default_options()) - {"uri"}
    mapped = {field for field, _secs in rlock._OPTS.values()}
    assert fields == mapped
    assert set(rlock.DEFAULTS) == set(rlock._OPTS)
    # every keyword is accepted by a real open (defaults passed explicitly)
    kw = {k: v for k, v in rlock.DEFAULTS.items() if v is not None}
    kw["client_name"] = "py-all-options"
    c = rlock.Client(server.uri, **kw)
    c.close()


def test_a_failing_handler_does_not_stop_delivery(server, name):
    seen = []

    def handler(ev):
        seen.append(ev["type"])
        raise RuntimeError("handler bug")
    c = rlock.Client(server.uri, on_event=handler)
    with c.lock(name):
        pass
    c.close()
    assert seen[:2] == ["acquired", "released"]
