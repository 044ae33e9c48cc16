"""RedLock (getRedLock) from Python over rlock_new_redlock: three
independent redis-servers, a majority of them held."""
import asyncio

import pytest

import rlock
from conftest import Server


@pytest.fixture(scope="module")
def servers():
    ss = [Server() for _ in range(3)]
    yield ss
    for s in ss:
        s.stop()


def clients(servers):
    return [rlock.Client(s.uri, command_timeout=1.0) for s in servers]


def test_redlock_majority(servers, name):
    a, b = clients(servers), clients(servers)
    rs = [s.redis() for s in servers]
    try:
        ra = a[0].red_lock([c.lock(name) for c in a])
        rb = b[0].red_lock(*[c.lock(name) for c in b])
        assert isinstance(ra, rlock.MultiLock)
        assert ra.acquire(wait=0)
        assert [r.exists(name) for r in rs] == [1, 1, 1]
        assert ra.is_held()
        assert rb.acquire(wait=0) is False  # no majority for B
        assert [r.hlen(name) for r in rs] == [1, 1, 1]  # B left nothing
        ra.release()
        assert [r.exists(name) for r in rs] == [0, 0, 0]

        # one server's lock taken by someone else: 2 of 3 is a majority
        other = rlock.Client(servers[2].uri)
        lk = other.lock(name)
        assert lk.acquire()
        with rb:
            assert [r.exists(name) for r in rs] == [1, 1, 1]
            assert rb.is_held()
            assert ra.acquire(wait=0) is False
        # two of three taken by others: no majority
        lk1 = rlock.Client(servers[1].uri)
        assert lk1.lock(name).acquire()

        async def try_async():
            return await ra.acquire_async(wait=0.2)
        assert asyncio.run(try_async()) is False
        assert rs[0].exists(name) == 0  # the member it did take was undone
        lk1.close()
        lk.release()
        other.close()
    finally:
        for c in a + b:
            c.close()
        for r in rs:
            r.close()


def test_redlock_bad_input(servers, name):
    a = clients(servers)
    try:
        same = rlock.Client(servers[0].uri)
        with pytest.raises(rlock.InvalidArgument):
            a[0].red_lock(a[0].lock(name), a[0].lock(name + "2"))  # one client
        with pytest.raises(rlock.InvalidArgument):
            a[0].red_lock(a[0].lock(name), same.lock(name))  # one server
        with pytest.raises(ValueError):
            a[0].red_lock()
        with pytest.raises(TypeError):
            a[0].red_lock([a[0].semaphore(name)])
        same.close()
    finally:
        for c in a:
            c.close()
