"""Quick start: one order processed at a time, fleet-wide, by Python and
Java services alike (a Java service locks the same name with
redisson.getLock("orders:42")). REDIS_URL names the server."""
import logging

import rlock

logging.basicConfig(level=logging.INFO)

with rlock.Client(on_diag=logging.getLogger("rlock")) as client:
    with client.lock("orders:42", wait=5.0, lease=30.0):
        print("processing order 42")

    # re-entry per thread, as Java's per-thread holds
    lk = client.lock("orders:43")
    with lk:
        with lk:
            print("hold count", lk.hold_count())

    # a fencing token for the storage to check
    with client.fenced_lock("ledger") as token:
        print("writing with token", token)

    # at most 2 workers at once
    sem = client.semaphore("encoders")
    sem.try_set_permits(2)
    with sem:
        print("encoding; permits left", sem.available_permits())

    print(client.stats()["acquisitions"], "acquisitions")
