"""Wrong types and values for every parameter: a Python exception with a
clear message, never a crash, nothing left behind."""
import math

import pytest

import rlock

BAD_NAMES = [
    (123, TypeError, "must be str or bytes"),
    (None, TypeError, "must be str or bytes"),
    (b"a\0b", ValueError, "NUL"),
    ("a\0b", ValueError, "NUL"),
    ("", ValueError, "empty"),
    (b"", ValueError, "empty"),
]


@pytest.mark.parametrize("factory", ["lock", "fair_lock", "read_lock",
                                     "write_lock", "fenced_lock", "spin_lock",
                                     "nonreentrant_lock", "semaphore",
                                     "permit_semaphore", "latch"])
@pytest.mark.parametrize("bad,exc,msg", BAD_NAMES)
def test_bad_names(client, factory, bad, exc, msg):
    with pytest.raises(exc, match=msg):
        getattr(client, factory)(bad)


def test_name_too_long(client):
    with pytest.raises(rlock.InvalidArgument) as ei:
        client.lock("x" * 65536)
    assert ei.value.name == "RLOCK_ENAMETOOLONG"


def test_bytes_names_work(client, r):
    lk = client.lock(b"py:bytes-name")
    with lk:
        assert r.exists("py:bytes-name")


BAD_WAITS = [
    (-1, ValueError, "negative"),
    (-0.5, ValueError, "negative"),
    (math.nan, ValueError, "NaN"),
    (math.inf, ValueError, "too large"),
    ("1", TypeError, "number of seconds"),
    (True, TypeError, "number of seconds"),
    ([1], TypeError, "number of seconds"),
]


@pytest.mark.parametrize("bad,exc,msg", BAD_WAITS)
def test_bad_wait(client, name, bad, exc, msg):
    lk = client.lock(name)
    with pytest.raises(exc, match=msg):
        lk.acquire(wait=bad)
    with pytest.raises(exc, match=msg):
        client.lock(name, wait=bad)
    with pytest.raises(exc, match=msg):
        client.semaphore(name).acquire(wait=bad)
    with pytest.raises(exc, match=msg):
        client.latch(name).wait(bad)
    assert not lk.locked()


@pytest.mark.parametrize("bad,exc,msg", BAD_WAITS + [(0, ValueError, "positive"),
                                                     (2.0 ** 41, ValueError, "too large")])
def test_bad_lease(client, name, bad, exc, msg):
    lk = client.lock(name)
    with pytest.raises(exc, match=msg):
        lk.acquire(lease=bad)
    with pytest.raises(exc, match=msg):
        client.lock(name, lease=bad)
    with pytest.raises(exc, match=msg):
        client.permit_semaphore(name).acquire(lease=bad)
    assert not lk.locked()


@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-1, ValueError),
                                     ("2", TypeError), (1.5, TypeError),
                                     (2 ** 41, ValueError), (None, TypeError)])
def test_bad_permits(client, name, bad, exc):
    s = client.semaphore(name)
    with pytest.raises(exc):
        s.acquire(bad)
    with pytest.raises(exc):
        s.release(bad)
    with pytest.raises(exc):
        s.try_set_permits(bad)
    ps = client.permit_semaphore(name + "p")
    with pytest.raises(exc):
        ps.acquire(bad)
    with pytest.raises(exc):
        client.latch(name + "l").try_set_count(bad)


def test_too_many_permits_at_once(client, name):
    ps = client.permit_semaphore(name)
    with pytest.raises(rlock.InvalidArgument) as ei:
        ps.acquire(1025)
    assert "1..1024" in str(ei.value)


@pytest.mark.parametrize("bad,exc", [("zz", rlock.InvalidArgument),
                                     ("0" * 31, rlock.InvalidArgument),
                                     (5, TypeError), ([5], TypeError),
                                     ([], rlock.InvalidArgument),
                                     ("a\0" + "0" * 30, ValueError)])
def test_bad_permit_ids(client, name, bad, exc):
    ps = client.permit_semaphore(name)
    ps.try_set_permits(1)
    with pytest.raises(exc):
        ps.release(bad)


@pytest.mark.parametrize("bad,exc", [(-1, ValueError), (0, ValueError),
                                     (2 ** 64, ValueError), ("me", TypeError),
                                     (1.0, TypeError)])
def test_bad_owner(client, name, bad, exc):
    with pytest.raises(exc, match="owner"):
        client.lock(name).acquire(owner=bad)


def test_bad_client_arguments(server):
    with pytest.raises(TypeError, match="uri"):
        rlock.Client(123)
    with pytest.raises(TypeError, match="unknown option"):
        rlock.Client(server.uri, watchdog=3)
    with pytest.raises(TypeError, match="retry_attempts"):
        rlock.Client(server.uri, retry_attempts="3")
    with pytest.raises(ValueError, match="command_timeout"):
        rlock.Client(server.uri, command_timeout=-1)
    with pytest.raises(rlock.InvalidArgument) as ei:
        rlock.Client(server.uri, watchdog_timeout=0.1)  # C range 300..
    assert ei.value.name == "RLOCK_EINVAL" and ei.value.detail
    with pytest.raises(rlock.InvalidArgument) as ei:
        rlock.Client("http://nowhere")
    assert ei.value.name == "RLOCK_EURI"
    with pytest.raises(ValueError, match="NUL"):
        rlock.Client(server.uri, client_name="a\0b")
    with pytest.raises(TypeError, match="on_event"):
        rlock.Client(server.uri, on_event=42)
    with pytest.raises(ValueError, match="out of range"):
        rlock.Client(server.uri, retry_attempts=2 ** 40)


def test_unreachable_server_is_a_connection_error():
    from conftest import free_port
    with pytest.raises(ConnectionError) as ei:
        rlock.Client(f"redis://127.0.0.1:{free_port()}", connect_timeout=1.0)
    assert ei.value.name == "RLOCK_ECONN"


def test_closed_client_and_its_locks(server, name):
    c = rlock.Client(server.uri)
    lk = c.lock(name)
    s = c.semaphore(name + "s")
    c.close()
    for call in (lambda: lk.acquire(), lambda: lk.release(), lambda: lk.locked(),
                 lambda: s.acquire(), lambda: c.lock(name), lambda: c.info(name),
                 lambda: c.stats(), lambda: c.scan()):
        with pytest.raises(rlock.Closed) as ei:
            call()
        assert ei.value.name == "RLOCK_ECLOSED"
    import asyncio
    with pytest.raises(rlock.Closed):
        asyncio.run(lk.acquire_async())


def test_multilock_members_must_be_locks(client, name):
    with pytest.raises(TypeError, match="rlock.Lock"):
        client.multi_lock(client.lock(name), "x")
    with pytest.raises(ValueError, match="at least one"):
        client.multi_lock()


def test_wrong_kind_on_a_name(client, name, r):
    r.set(name, "not a lock")
    with pytest.raises(rlock.RLockError) as ei:
        client.lock(name).acquire(wait=0)
    assert ei.value.name == "RLOCK_EWRONGTYPE"
    r.delete(name)
