"""Fencing: writes that only the lock's current holder can make. The
guard beside the data refuses a write whose token is older than one it
has seen - the late write of a holder that was paused past its lease.
REDIS_URL names the server."""
import rlock

with rlock.Client() as client:
    lk = client.fenced_lock("reports")
    guard = client.guard("{reports}:guard")   # keys "{reports}:..." share its slot

    with lk as old_token:                     # an earlier holder's token
        guard.set("{reports}:latest", "draft", lock=lk, token=old_token)

    with lk as token:                         # the next holder
        guard.set("{reports}:latest", "final", lock=lk, token=token)
        print("check of the old token:", lk.check(old_token).name)

    try:                                      # the earlier holder, too late
        guard.set("{reports}:latest", "stale draft", lock=lk, token=old_token)
    except rlock.StaleTokenError as e:
        print("refused:", e.name)
