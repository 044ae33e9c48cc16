"""asyncio: awaitable acquire, `async with`, cancellation. REDIS_URL names
the server."""
import asyncio

import rlock


async def worker(client, n, done):
    # each task is its own owner: tasks exclude each other
    async with client.lock("jobs:nightly", wait=10.0):
        done.append(n)
        await asyncio.sleep(0.01)


async def main():
    with rlock.Client() as client:
        done = []
        await asyncio.gather(*(worker(client, n, done) for n in range(5)))
        print("ran one at a time:", done)

        # cancelling a waiting task leaves nothing queued on the server
        fair = client.fair_lock("jobs:fair")
        holder = rlock.Owner()
        fair.acquire(owner=holder)
        try:
            await asyncio.wait_for(fair.acquire_async(), timeout=0.2)
        except asyncio.TimeoutError:
            print("gave up waiting")
        fair.release(owner=holder)


asyncio.run(main())
