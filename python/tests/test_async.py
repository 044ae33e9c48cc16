import asyncio
import threading
import time

import pytest

import rlock


def run(coro):
    return asyncio.run(coro)


def test_async_with_and_task_ownership(client, name):
    lk = client.lock(name)

    async def main():
        async with lk:
            # the hold is the task's: re-entry in the task, others wait
            assert await lk.acquire_async(wait=0)
            assert await lk.release_async() is True  # one of two holds released

            async def other():
                return await lk.acquire_async(wait=0.05)
            assert await asyncio.create_task(other()) is False
        assert not lk.locked()
    run(main())


def test_awaitable_acquire_is_woken_by_release(client, name):
    lk = client.lock(name)

    async def main():
        holder = rlock.Owner()
        assert lk.acquire(owner=holder)
        t0 = time.monotonic()
        waiter = asyncio.create_task(lk.acquire_async(wait=5))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        lk.release(owner=holder)
        assert await waiter
        assert time.monotonic() - t0 < 2
        await lk.release_async(owner=None) if False else None
        return waiter
    run(main())


def test_cancel_leaves_nothing_queued(client, name):
    fl = client.fair_lock(name)
    holder = rlock.Owner()
    assert fl.acquire(owner=holder)

    async def main():
        t = asyncio.create_task(fl.acquire_async())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if client.info(name)["queue_total"] == 1:
                break
        assert client.info(name)["queue_total"] == 1
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        # cancelled: the C wait is over; its queue entry goes with it
        t0 = time.monotonic()
        while client.info(name)["queue_total"] and time.monotonic() - t0 < 2:
            await asyncio.sleep(0.001)
        print("queue entry gone after", time.monotonic() - t0)
        assert client.info(name)["queue_total"] == 0
    run(main())
    fl.release(owner=holder)
    assert not fl.locked()


def test_wait_for_timeout_cancels(client, name):
    lk = client.lock(name)
    holder = rlock.Owner()
    lk.acquire(owner=holder)

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(lk.acquire_async(), 0.1)
        assert client.info(name)["holders_total"] == 1
    run(main())
    lk.release(owner=holder)


def test_many_waiters_no_thread_each(client, name):
    lk = client.lock(name)
    counter = {"n": 0, "inside": 0, "max": 0}

    async def worker():
        async with lk:
            counter["inside"] += 1
            counter["max"] = max(counter["max"], counter["inside"])
            await asyncio.sleep(0)
            counter["n"] += 1
            counter["inside"] -= 1

    async def main():
        before = threading.active_count()
        tasks = [asyncio.create_task(worker()) for _ in range(100)]
        await asyncio.sleep(0.05)
        assert threading.active_count() == before
        await asyncio.gather(*tasks)
    run(main())
    assert counter["n"] == 100 and counter["max"] == 1


def test_async_semaphore_permits_latch(client, name):
    async def main():
        s = client.semaphore(name + "s")
        s.try_set_permits(1)
        assert await s.acquire_async()
        assert await s.acquire_async(wait=0.05) is False
        s.release()
        ps = client.permit_semaphore(name + "p")
        ps.try_set_permits(2)
        ids = await ps.acquire_async(2, lease=5)
        assert len(ids) == 2
        assert ps.release(ids) == 2
        l = client.latch(name + "l")
        l.try_set_count(1)
        w = asyncio.create_task(l.wait_async(5))
        await asyncio.sleep(0.05)
        l.count_down()
        assert await w
        f = client.fenced_lock(name + "f")
        tok = await f.acquire_async()
        assert tok > 0
        await f.release_async()
    run(main())


def test_async_error_is_raised(client, name):
    async def main():
        with pytest.raises(rlock.NotOwner):
            await client.lock(name).release_async()
    run(main())


def test_finished_loops_are_not_kept(client, name):
    import gc
    from rlock import _aio
    lk = client.lock(name)

    async def once():
        async with lk:
            pass
    for _ in range(5):
        asyncio.run(once())
    gc.collect()
    assert len(_aio._bridges) == 0
