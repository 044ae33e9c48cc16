"""rlock: Redisson-compatible distributed locks for Python.

A thin Python layer over rlock's C library (the extension module
``rlock._rlock``): a Python service and a Java service using Redisson guard
one resource with the same lock name. See docs/python.md.

Times are float seconds, as in :mod:`threading`; ``None`` means "no limit"
for waits and "held until released, renewed by the watchdog" for leases.
"""

from __future__ import annotations

import builtins
import enum
import logging
import math
import threading
import weakref

from . import _rlock

__all__ = [
    "Client", "Lock", "FencedLock", "MultiLock", "FastMultiLock", "Semaphore", "PermitSemaphore",
    "CountDownLatch", "Owner", "RLockError", "Timeout", "AcquireTimeout",
    "LockLost", "NotOwner", "Closed", "Cancelled", "ConnectionLost",
    "InvalidArgument", "ForkError", "ReentryError", "DEFAULTS",
    "__version__", "library_version", "thread_id", "now",
]

__version__ = _rlock.HEADER_VERSION


def library_version() -> str:
    """The running C library's version (rlock_version())."""
    return _rlock.version()


def thread_id() -> int:
    """The calling thread's owner id (rlock_thread_id())."""
    return _rlock.thread_id()


def now() -> float:
    """The library's monotonic clock, in seconds (rlock_now_ms() / 1000)."""
    return _rlock.now_ms() / 1000.0


# ---- errors -----------------------------------------------------------------

class RLockError(Exception):
    """An error of the C library: ``code`` (negative RLOCK_E* value),
    ``name`` ("RLOCK_ETIMEDOUT") and ``detail`` (rlock_last_error())."""

    def __init__(self, code: int, name: str, detail: str = ""):
        self.code = code
        self.name = name
        self.detail = detail
        super().__init__(code, name, detail)

    def __str__(self) -> str:
        msg = _MESSAGES.get(self.code, "error")
        if self.detail:
            return f"{self.name}: {msg}: {self.detail}"
        return f"{self.name}: {msg}"


class Timeout(RLockError, builtins.TimeoutError):
    """RLOCK_ETIMEDOUT: Redis did not answer in time."""


class AcquireTimeout(Timeout):
    """Not acquired within ``wait`` (a ``with`` block or ``acquire(
    raise_on_timeout=True)``); code and name are RLOCK_ETIMEDOUT's."""


class LockLost(RLockError):
    """RLOCK_ELOCKLOST: the lock expired or was deleted while held."""


class NotOwner(RLockError):
    """RLOCK_ENOTOWNER: the lock is not held by this owner."""


class Closed(RLockError):
    """RLOCK_ECLOSED: the client is closed."""


class Cancelled(RLockError):
    """RLOCK_ECANCELED: the acquire was cancelled or interrupted."""


class ConnectionLost(RLockError, builtins.ConnectionError):
    """RLOCK_ECONN: the connection to Redis failed or was lost."""


class InvalidArgument(RLockError, ValueError):
    """RLOCK_EINVAL (and RLOCK_ENAMETOOLONG, RLOCK_EURI): a bad argument."""


class ForkError(RLockError):
    """RLOCK_EFORK: a client used in a forked child: open a new one."""


class ReentryError(RLockError):
    """RLOCK_EREENTRY: a non-reentrant lock taken again by its holder."""


_MESSAGES = {code: msg for code, _name, msg in _rlock.error_table()}
_CODES = {name: code for code, name, _msg in _rlock.error_table()}
_CLASSES = {
    _CODES["RLOCK_ETIMEDOUT"]: Timeout,
    _CODES["RLOCK_ELOCKLOST"]: LockLost,
    _CODES["RLOCK_ENOTOWNER"]: NotOwner,
    _CODES["RLOCK_ECLOSED"]: Closed,
    _CODES["RLOCK_ECANCELED"]: Cancelled,
    _CODES["RLOCK_ECONN"]: ConnectionLost,
    _CODES["RLOCK_EINVAL"]: InvalidArgument,
    _CODES["RLOCK_ENAMETOOLONG"]: InvalidArgument,
    _CODES["RLOCK_EURI"]: InvalidArgument,
    _CODES["RLOCK_EFORK"]: ForkError,
    _CODES["RLOCK_EREENTRY"]: ReentryError,
}
_rlock._register(_CLASSES, RLockError, threading.main_thread().ident)


def _acquire_timeout(wait: float | None, what: str) -> AcquireTimeout:
    return AcquireTimeout(_CODES["RLOCK_ETIMEDOUT"], "RLOCK_ETIMEDOUT",
                          f"{what} not acquired within {wait} s")


# ---- times ------------------------------------------------------------------

_MS_MAX = 2 ** 40  # the C library's largest lease


def _ms(value, what: str, *, none: int, allow_zero: bool = True) -> int:
    """Seconds (int or float) -> ms. None -> `none`."""
    if value is None:
        return none
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or None, "
                        f"not {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{what} must not be NaN")
    if value < 0:
        raise ValueError(f"{what} must not be negative (None: no limit)")
    if value == 0 and not allow_zero:
        raise ValueError(f"{what} must be positive (None: watchdog)")
    if math.isinf(value) or value * 1000 > _MS_MAX:
        raise ValueError(f"{what} is too large (at most 2^40 ms)")
    ms = int(math.ceil(value * 1000))
    if ms == 0 and value > 0:
        ms = 1
    return ms


def _wait_ms(wait) -> int:
    return _ms(wait, "wait", none=-1)


def _lease_ms(lease) -> int:
    return _ms(lease, "lease", none=-1, allow_zero=False)


def _count(n, what: str, lo: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{what} must be an int, not {type(n).__name__}")
    if n < lo or n > _MS_MAX:
        raise ValueError(f"{what} must be in {lo}..2^40, not {n}")
    return n


# ---- owners -----------------------------------------------------------------

class Owner:
    """An explicit owner (rlock_owner_new()): a lock acquired with
    ``owner=o`` may be released by any thread passing the same owner."""

    __slots__ = ("id",)

    def __init__(self, id: int | None = None):
        self.id = _rlock.owner_new() if id is None else id

    def __repr__(self) -> str:
        return f"Owner({self.id})"


def _owner_id(owner) -> int | None:
    if owner is None:
        return None
    if isinstance(owner, Owner):
        return owner.id
    if isinstance(owner, int) and not isinstance(owner, bool):
        if owner <= 0 or owner >= 2 ** 64:
            raise ValueError("owner must be a positive 64-bit id")
        return owner
    raise TypeError(f"owner must be an Owner or an int, not {type(owner).__name__}")


# ---- client options ---------------------------------------------------------

# Python keyword -> (rlock_options field, ms conversion?)
_OPTS = {
    "client_name": ("client_name", False),
    "watchdog_timeout": ("watchdog_timeout_ms", True),
    "command_timeout": ("command_timeout_ms", True),
    "subscribe_timeout": ("subscribe_timeout_ms", True),
    "retry_attempts": ("retry_attempts", False),
    "retry_interval": ("retry_interval_ms", True),
    "sharded_pubsub": ("sharded_pubsub", False),
    "connect_timeout": ("connect_timeout_ms", True),
    "max_write_queue_bytes": ("max_write_queue_bytes", False),
    "tls_ca_file": ("tls_ca_file", False),
    "tls_ca_dir": ("tls_ca_dir", False),
    "tls_cert_file": ("tls_cert_file", False),
    "tls_key_file": ("tls_key_file", False),
    "tls_server_name": ("tls_server_name", False),
    "tls_insecure": ("tls_insecure", False),
    "spin_us": ("spin_us", False),
    "handoff_max": ("handoff_max", False),
    "sentinel_user": ("sentinel_user", False),
    "sentinel_password": ("sentinel_password", False),
    "replica_sync": ("replica_sync", False),
    "replica_sync_timeout": ("replica_sync_timeout_ms", True),
    "cluster_refresh": ("cluster_refresh_ms", True),
    "replica_sync_connected_only": ("replica_sync_connected_only", False),
    "replica_sync_mode": ("replica_sync_mode", False),
    "lease_risk": ("lease_risk_ms", True),
    "fenced_token_ttl": ("fenced_token_ttl_ms", True),
}


def _defaults() -> dict:
    d = _rlock.default_options()
    out = {}
    for kw, (field, secs) in _OPTS.items():
        v = d[field]
        out[kw] = v / 1000.0 if secs else v
    return out


#: The C library's defaults (rlock_options_init()), keyed as Client's
#: keyword arguments; times in seconds.
DEFAULTS = _defaults()

_DIAG_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO,
                3: logging.DEBUG}


def _handler(h, what):
    if h is None or callable(h) or isinstance(h, logging.Logger):
        return h
    if h is True:
        return logging.getLogger("rlock")
    raise TypeError(f"{what} must be a callable, a logging.Logger, True or None")


class Client:
    """A client of one Redis deployment (rlock_client_new()).

    ``Client("redis://127.0.0.1:6379", watchdog_timeout=10.0)``: the URI
    (None: $REDIS_URL, else redis://127.0.0.1:6379) and any field of
    rlock_options as a keyword (times in float seconds: ``watchdog_timeout``
    for ``watchdog_timeout_ms``; see ``rlock.DEFAULTS``). ``on_event``,
    ``on_diag``, ``on_lock_lost``: a callable, a ``logging.Logger`` or True
    (the logger "rlock"); they run on a dispatcher thread of this client,
    never on the library's loop thread.
    """

    def __init__(self, uri: str | None = None, *, on_event=None, on_diag=None,
                 on_lock_lost=None, **options):
        if uri is not None and not isinstance(uri, str):
            raise TypeError(f"uri must be str or None, not {type(uri).__name__}")
        opts = {"uri": uri}
        for kw, value in options.items():
            if kw not in _OPTS:
                raise TypeError(f"Client() got an unknown option {kw!r}")
            field, secs = _OPTS[kw]
            if value is None:
                continue
            if secs:
                if kw == "lease_risk" and value == -1:
                    opts[field] = -1
                    continue
                opts[field] = _ms(value, kw, none=0)
            else:
                opts[field] = value
        self._on_event = _handler(on_event, "on_event")
        self._on_diag = _handler(on_diag, "on_diag")
        self._on_lost = _handler(on_lock_lost, "on_lock_lost")
        self._c = _rlock.Client(opts, diag=self._on_diag is not None,
                                events=self._on_event is not None,
                                lost=self._on_lost is not None)
        self._id = self._c.id
        self._dispatcher = None
        if self._on_event or self._on_diag or self._on_lost:
            self._dispatcher = threading.Thread(
                target=self._dispatch, name="rlock-events", daemon=True)
            self._dispatcher.start()
        self._lock = threading.Lock()

    # -- events --
    def _dispatch(self) -> None:
        c = self._c
        while True:
            for it in c.events_wait():
                kind = it[0]
                if kind == "end":
                    return
                try:
                    if kind == "event":
                        _deliver(self._on_event, it[1], logging.INFO,
                                 lambda e: _event_text(e))
                    elif kind == "diag":
                        lvl = it[1]
                        if isinstance(self._on_diag, logging.Logger):
                            self._on_diag.log(_DIAG_LEVELS.get(lvl, logging.INFO),
                                              "%s", it[2])
                        else:
                            self._on_diag(_rlock.diag_level_name(lvl), it[2])
                    elif kind in ("term", "state"):
                        _election_item(self, it)
                    elif kind == "lost":
                        if isinstance(self._on_lost, logging.Logger):
                            self._on_lost.error("lock %s lost (owner %s)",
                                                it[1], it[2])
                        else:
                            self._on_lost(it[1], it[2])
                except Exception:  # a handler's error must not stop delivery
                    logging.getLogger("rlock").exception("rlock event handler failed")

    # -- life --
    @property
    def id(self) -> str:
        """The client's UUID (the first part of every owner string)."""
        return self._id

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        """Closes the client: waiters get Closed, renewals stop (held locks
        expire after the watchdog timeout, as in Redisson). Idempotent."""
        self._c.close()
        d = self._dispatcher
        if d is not None and d is not threading.current_thread():
            d.join()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- handles --
    def lock(self, name, *, wait=None, lease=None) -> "Lock":
        """Redisson getLock(name): a reentrant lock."""
        return Lock(self, "lock", name, wait, lease)

    def fair_lock(self, name, *, wait=None, lease=None) -> "Lock":
        """getFairLock(name)."""
        return Lock(self, "fair", name, wait, lease)

    def read_lock(self, name, *, wait=None, lease=None) -> "Lock":
        """getReadWriteLock(name).readLock()."""
        return Lock(self, "read", name, wait, lease)

    def write_lock(self, name, *, wait=None, lease=None) -> "Lock":
        """getReadWriteLock(name).writeLock()."""
        return Lock(self, "write", name, wait, lease)

    def fenced_lock(self, name, *, wait=None, lease=None) -> "FencedLock":
        """getFencedLock(name): acquire() returns the fencing token."""
        return FencedLock(self, "fenced", name, wait, lease)

    def spin_lock(self, name, *, wait=None, lease=None) -> "Lock":
        """getSpinLock(name)."""
        return Lock(self, "spin", name, wait, lease)

    def nonreentrant_lock(self, name, *, fair=False, wait=None, lease=None) -> "Lock":
        """getNonReentrantLock(name) / getNonReentrantFairLock(name)."""
        return Lock(self, "nonreentrant_fair" if fair else "nonreentrant",
                    name, wait, lease)

    def multi_lock(self, *locks: "Lock", wait=None, lease=None) -> "MultiLock":
        """getMultiLock(lock, ...): every lock, all or none."""
        return MultiLock(self, locks, wait, lease)

    def fast_multi_lock(self, group, *values, wait=None, lease=None) -> "FastMultiLock":
        """getMultiLock(group, values): the values of one group, all or
        none, in one hash (Java's values must use StringCodec)."""
        return FastMultiLock(self, group, values, wait, lease)

    def semaphore(self, name) -> "Semaphore":
        """getSemaphore(name)."""
        return Semaphore(self, name)

    def permit_semaphore(self, name) -> "PermitSemaphore":
        """getPermitExpirableSemaphore(name)."""
        return PermitSemaphore(self, name)

    def latch(self, name) -> "CountDownLatch":
        """getCountDownLatch(name)."""
        return CountDownLatch(self, name)

    def guard(self, name) -> "Guard":
        """The fencing guard `name` (rlock_guard_new()): writes that run
        only with a fenced lock's current token. No command is sent."""
        return Guard(self, name)

    # -- introspection --
    def info(self, name) -> dict:
        """What is stored under `name` (rlock_client_info()): kind, holders,
        queue, permits, token, count, ttl_ms, waiters ..."""
        return self._c.info(name)

    def scan(self, pattern: str | None = None, count: int = 0) -> list:
        """Every lock, semaphore and latch name matching the glob
        (rlock_scan_*): on every master."""
        if not isinstance(count, int) or isinstance(count, bool):
            raise TypeError("count must be an int")
        return self._c.scan(pattern, count)

    def force_unlock(self, name, kind: str | None = None) -> bool:
        """Kind-aware force unlock (rlock_client_force_unlock())."""
        return self._c.force_unlock(name, kind)

    def interrupt(self, owner) -> int:
        """Interrupts the acquires of a thread id or Owner (Cancelled)."""
        return self._c.interrupt(_owner_id(owner) or 0)

    def stats(self) -> dict:
        """The client's counters and histograms (rlock_client_stats())."""
        return self._c.stats()

    def prometheus(self, label: str | None = None) -> str:
        """The stats in Prometheus text format 0.0.4."""
        return self._c.stats_text(label, False)

    def stats_json(self, label: str | None = None) -> str:
        return self._c.stats_text(label, True)

    def caps(self) -> dict:
        return self._c.caps()

    # -- asyncio plumbing --
    def _bridge(self):
        from . import _aio
        return _aio.bridge(self)


def _deliver(h, ev, level, text):
    if isinstance(h, logging.Logger):
        lvl = logging.WARNING if ev["type"] in ("lost", "renewal_failed",
                                                "lease_at_risk",
                                                "disconnected",
                                                "stale") else logging.DEBUG
        h.log(lvl, "%s", text(ev))
    else:
        h(ev)


def _event_text(ev: dict) -> str:
    parts = [ev["type"]]
    for k in ("kind", "name", "owner", "error", "detail", "host", "term"):
        if ev.get(k):
            parts.append(f"{k}={ev[k]}")
    return " ".join(parts)


# ---- locks ------------------------------------------------------------------

class _Waitable:
    """Shared parts of handles whose acquire waits."""

    __slots__ = ("client", "_h", "_wait", "_lease", "__weakref__")

    def _check_client(self):
        if self.client._c.closed:
            raise Closed(_CODES["RLOCK_ECLOSED"], "RLOCK_ECLOSED",
                         "the client is closed")


class Lock(_Waitable):
    """A lock handle of one kind (lock, fair, read, write, spin,
    nonreentrant, nonreentrant_fair; FencedLock for fenced).

    Held per Python thread by default (re-entrant where the kind is, as
    Java's per-thread holds); pass ``owner=`` for an explicit owner. As a
    context manager it acquires with the ``wait`` and ``lease`` given to
    the client's ``lock()`` and raises AcquireTimeout when not acquired."""

    __slots__ = ()

    def __init__(self, client: Client, kind: str, name, wait=None, lease=None):
        if not isinstance(client, Client):
            raise TypeError("client must be an rlock.Client")
        self.client = client
        self._wait = _wait_ms(wait)
        self._lease = _lease_ms(lease)
        self._h = client._c.handle(kind, name)

    @property
    def name(self) -> str:
        return self._h.name

    @property
    def kind(self) -> str:
        return self._h.kind

    def __repr__(self) -> str:
        return f"<rlock.Lock {self.kind} {self.name!r}>"

    def acquire(self, blocking: bool = True, timeout: float = -1, *,
                wait=None, lease=None, owner=None) -> bool:
        """Acquires the lock; True if acquired.

        ``threading.Lock`` style (blocking, timeout; -1 = no limit) or
        ``wait=`` seconds (None: no limit); ``lease`` seconds (None: held
        until released, renewed by the watchdog). Interruptible with
        Ctrl-C on the main thread (nothing is left queued)."""
        if wait is None:
            if not blocking:
                w = 0
            elif timeout is None or timeout == -1:
                w = -1
            else:
                w = _wait_ms(timeout)
        else:
            w = _wait_ms(wait)
        return self._h.acquire(1, w, _lease_ms(lease), _owner_id(owner)) == 1

    def release(self, *, owner=None) -> bool:
        """Releases one hold: True once it is released (a re-entered lock
        stays held until its last release: see hold_count()). NotOwner /
        LockLost as in Redisson."""
        return self._h.release(_owner_id(owner)) == 1

    unlock = release

    def __enter__(self):
        if self._h.acquire(1, self._wait, self._lease, None) != 1:
            raise _acquire_timeout(self._wait / 1000, self.name)
        return self

    def __exit__(self, *exc):
        self._h.release(None)

    def locked(self) -> bool:
        """Whether anyone holds it (isLocked)."""
        return self._h.query("is_locked")

    is_locked = locked

    def is_held(self, *, owner=None) -> bool:
        """isHeldByCurrentThread (or by `owner`)."""
        return self._h.query("is_held", _owner_id(owner))

    def hold_count(self, *, owner=None) -> int:
        return self._h.query("hold_count", _owner_id(owner))

    def remain_ttl(self) -> float | None:
        """Seconds until the key expires; None: not held; inf: no TTL."""
        ms = self._h.query("ttl")
        if ms == -2:
            return None
        if ms == -1:
            return math.inf
        return ms / 1000.0

    def force_unlock(self) -> bool:
        return self._h.query("force_unlock")

    def force_unlock_owner(self, owner: str) -> bool:
        """Releases every hold of the owner string "<uuid>:<thread>"."""
        return self._h.force_unlock_owner(owner)

    def lease_guaranteed(self, *, owner=None) -> tuple:
        """(ok, until): ``until`` on rlock.now()'s clock, up to which the
        hold cannot have expired; ok False when that time has passed
        (rlock_is_lease_guaranteed())."""
        ok, until = self._h.query("lease_guaranteed", _owner_id(owner))
        return ok == 1, until / 1000.0

    # -- asyncio --
    async def acquire_async(self, *, wait=None, lease=None, owner=None) -> bool:
        """Awaitable acquire, owned by the current asyncio task (or
        `owner`). Cancelling the task cancels the wait (nothing is left
        queued on the server)."""
        from . import _aio
        st, _v, _ids = await _aio.acquire(self, 1, _wait_ms(wait),
                                          _lease_ms(lease), owner)
        return st == 1

    async def release_async(self, *, owner=None) -> bool:
        from . import _aio
        return await _aio.release(self, owner) == 0

    async def __aenter__(self):
        from . import _aio
        st, _v, _ids = await _aio.acquire(self, 1, self._wait, self._lease, None)
        if st != 1:
            raise _acquire_timeout(self._wait / 1000, self.name)
        return self

    async def __aexit__(self, *exc):
        from . import _aio
        await _aio.release(self, None)


class FencedLock(Lock):
    """getFencedLock: acquire() returns the fencing token (0: not
    acquired); ``with`` gives the token as its target."""

    __slots__ = ()

    def acquire(self, blocking: bool = True, timeout: float = -1, *,
                wait=None, lease=None, owner=None) -> int:
        if wait is None:
            w = 0 if not blocking else (-1 if timeout in (None, -1) else _wait_ms(timeout))
        else:
            w = _wait_ms(wait)
        st, token = self._h.acquire(1, w, _lease_ms(lease), _owner_id(owner))
        return token if st == 1 else 0

    def token(self) -> int:
        """The token counter's current value (getToken)."""
        return self._h.query("token")

    def __enter__(self) -> int:
        st, token = self._h.acquire(1, self._wait, self._lease, None)
        if st != 1:
            raise _acquire_timeout(self._wait / 1000, self.name)
        return token

    async def acquire_async(self, *, wait=None, lease=None, owner=None) -> int:
        from . import _aio
        st, v, _ids = await _aio.acquire(self, 1, _wait_ms(wait),
                                         _lease_ms(lease), owner)
        return v if st == 1 else 0

    def check(self, token: int) -> "FenceState":
        """Is `token` the current holder's (rlock_check_token(), one
        read)? FenceState.CURRENT, STALE, FREE or UNKNOWN."""
        return FenceState(_rlock.fenced_check(self._h, token))

    async def check_async(self, token: int) -> "FenceState":
        from . import _aio
        self._check_client()
        return FenceState(await _aio.call(
            lambda q, t: _rlock.fenced_check_async(self._h, q, t, token)))


class MultiLock(_Waitable):
    """getMultiLock(locks...): all or none, Java's algorithm."""

    __slots__ = ("locks",)
    _make = staticmethod(_rlock.multilock)

    def __init__(self, client, locks, wait=None, lease=None):
        locks = tuple(locks)
        for lk in locks:
            if not isinstance(lk, Lock):
                raise TypeError(f"MultiLock members must be rlock.Lock, not {type(lk).__name__}")
        self.client = client
        self.locks = locks
        self._wait = _wait_ms(wait)
        self._lease = _lease_ms(lease)
        self._h = self._make([lk._h for lk in locks])

    def acquire(self, *, wait=None, lease=None, owner=None) -> bool:
        return self._h.acquire(1, _wait_ms(wait), _lease_ms(lease),
                               _owner_id(owner)) == 1

    def release(self, *, owner=None) -> None:
        self._h.release(_owner_id(owner))

    def is_held(self, *, owner=None) -> bool:
        return self._h.query("is_held", _owner_id(owner))

    def __enter__(self):
        if self._h.acquire(1, self._wait, self._lease, None) != 1:
            raise _acquire_timeout(self._wait / 1000, "MultiLock")
        return self

    def __exit__(self, *exc):
        self._h.release(None)

    async def acquire_async(self, *, wait=None, lease=None, owner=None) -> bool:
        from . import _aio
        st, _v, _ids = await _aio.acquire(self, 1, _wait_ms(wait),
                                          _lease_ms(lease), owner)
        return st == 1


class FastMultiLock(_Waitable):
    """getMultiLock(group, values) (Redisson's FasterMultiLock). No async
    form in Python yet (the C library's rlock_lock_async takes it); on the
    main thread a wait is made of tries of at most 200 ms, so Ctrl-C
    works."""

    __slots__ = ()

    def __init__(self, client, group, values, wait=None, lease=None):
        self.client = client
        self._wait = _wait_ms(wait)
        self._lease = _lease_ms(lease)
        self._h = client._c.fast_multilock(group, values)

    def acquire(self, *, wait=None, lease=None, owner=None) -> bool:
        return self._h.acquire(1, _wait_ms(wait), _lease_ms(lease),
                               _owner_id(owner)) == 1

    def release(self, *, owner=None) -> bool:
        """True when every value was freed, False when still held."""
        return self._h.release(_owner_id(owner)) == 1

    def locked(self) -> bool:
        return self._h.query("is_locked")

    def is_held(self, *, owner=None) -> bool:
        return self._h.query("is_held", _owner_id(owner))

    def force_unlock(self) -> int:
        """Frees every value whoever holds it: how many had a holder."""
        return self._h.query("force_unlock")

    def renew(self, lease, *, owner=None) -> bool:
        return self._h.renew(_owner_id(owner), _lease_ms(lease))

    def __enter__(self):
        if self._h.acquire(1, self._wait, self._lease, None) != 1:
            raise _acquire_timeout(self._wait / 1000, "FasterMultiLock")
        return self

    def __exit__(self, *exc):
        self._h.release(None)


class Semaphore(_Waitable):
    """getSemaphore(name): permits belong to nobody."""

    __slots__ = ()

    def __init__(self, client: Client, name):
        self.client = client
        self._h = client._c.handle("semaphore", name)

    def try_set_permits(self, permits: int, ttl=None) -> bool:
        return self._h.op("try_set", _count(permits, "permits"),
                          0 if ttl is None else _ms(ttl, "ttl", none=0, allow_zero=False)) == 1

    def acquire(self, permits: int = 1, *, wait=None) -> bool:
        return self._h.acquire(_count(permits, "permits"), _wait_ms(wait), 0) == 1

    def release(self, permits: int = 1) -> None:
        self._h.op("release", _count(permits, "permits"))

    def release_if_exists(self, permits: int = 1) -> bool:
        return self._h.op("release_if_exists", _count(permits, "permits", 0)) == 1

    def add_permits(self, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int):
            raise TypeError("permits must be an int")
        if permits == 0 or abs(permits) > _MS_MAX:
            raise ValueError("permits must be non-zero, at most 2^40 either way")
        self._h.op("add", permits)

    def drain_permits(self) -> int:
        return self._h.op("drain")

    def available_permits(self) -> int:
        return self._h.op("available")

    def __enter__(self):
        self._h.acquire(1, -1, 0)
        return self

    def __exit__(self, *exc):
        self._h.op("release", 1)

    async def acquire_async(self, permits: int = 1, *, wait=None) -> bool:
        from . import _aio
        st, _v, _ids = await _aio.acquire(self, _count(permits, "permits"),
                                          _wait_ms(wait), 0, None)
        return st == 1


class PermitSemaphore(_Waitable):
    """getPermitExpirableSemaphore(name): each permit has an id (32 hex
    characters) and optionally a lease."""

    __slots__ = ()

    def __init__(self, client: Client, name):
        self.client = client
        self._h = client._c.handle("permit_semaphore", name)

    def try_set_permits(self, permits: int) -> bool:
        return self._h.op("try_set", _count(permits, "permits")) == 1

    def set_permits(self, permits: int) -> None:
        self._h.op("set", _count(permits, "permits", 0))

    def add_permits(self, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int):
            raise TypeError("permits must be an int")
        self._h.op("add", permits)

    def acquire(self, permits: int = 1, *, wait=None, lease=None) -> list | None:
        """Takes `permits` permits (all or none): their ids, or None when
        not taken within `wait`."""
        st, ids = self._h.acquire(_count(permits, "permits"), _wait_ms(wait),
                                  _lease_ms(lease))
        return ids if st == 1 else None

    def release(self, ids) -> int:
        """Returns the permits (all or none); NotOwner if one is not taken."""
        return self._h.permit_op("release", _ids(ids))

    def try_release(self, ids) -> bool:
        return self._h.permit_op("try_release", _ids(ids)) > 0

    def update_lease(self, id: str, lease) -> bool:
        return self._h.permit_op("update_lease", _ids(id), _lease_ms(lease)) == 1

    def lease_time(self, id: str) -> float | None:
        ms = self._h.permit_op("lease_time", _ids(id))
        return None if ms < 0 else ms / 1000.0

    def available_permits(self) -> int:
        return self._h.op("available")

    def acquired_permits(self) -> int:
        return self._h.op("acquired")

    def permits(self) -> int:
        return self._h.op("permits")

    async def acquire_async(self, permits: int = 1, *, wait=None, lease=None):
        from . import _aio
        st, _v, ids = await _aio.acquire(self, _count(permits, "permits"),
                                         _wait_ms(wait), _lease_ms(lease), None)
        return ids if st == 1 else None


def _ids(ids):
    if isinstance(ids, str):
        return (ids,)
    if isinstance(ids, (list, tuple)):
        return tuple(ids)
    raise TypeError(f"permit ids must be a str or a list of str, not {type(ids).__name__}")


class CountDownLatch(_Waitable):
    """getCountDownLatch(name)."""

    __slots__ = ()

    def __init__(self, client: Client, name):
        self.client = client
        self._h = client._c.handle("latch", name)

    def try_set_count(self, count: int) -> bool:
        return self._h.op("try_set", _count(count, "count")) == 1

    def count_down(self) -> None:
        self._h.op("count_down")

    def count(self) -> int:
        return self._h.op("count")

    def delete(self) -> bool:
        return self._h.op("delete") == 1

    def wait(self, timeout=None) -> bool:
        """Waits until the count is 0 (await): True open, False timed out."""
        return self._h.acquire(0, _wait_ms(timeout), 0) == 1

    await_ = wait

    async def wait_async(self, timeout=None) -> bool:
        from . import _aio
        st, _v, _ids = await _aio.acquire(self, 0, _wait_ms(timeout), 0, None)
        return st == 1


# ---- fencing (issue 37; docs/fencing.md) --------------------------------------

class StaleTokenError(RLockError):
    """RLOCK_ESTALE: a guarded write refused, its token older than one the
    guard has seen (a holder whose lock expired while it was paused).
    Nothing was written."""


class ForeignTokenError(RLockError):
    """RLOCK_EFOREIGN: the guard fences another lock than the token's.
    Nothing was written."""


# _rlock holds this very dict: new entries take effect at once
_CLASSES[_CODES["RLOCK_ESTALE"]] = StaleTokenError
_CLASSES[_CODES["RLOCK_EFOREIGN"]] = ForeignTokenError


class FenceState(enum.IntEnum):
    """What FencedLock.check() answers (rlock_fence_state)."""
    FREE = 0      #: the lock is not held
    CURRENT = 1   #: held, and the token is the latest (or higher)
    STALE = 2     #: held, with a later token than this one
    UNKNOWN = 3   #: held, but the token key is gone (fenced_token_ttl_ms)


# rlock_guard_op
_G_SET, _G_HSET, _G_INCRBY, _G_DEL, _G_EVAL = 1, 2, 3, 4, 5


def _lock_name(lock):
    if isinstance(lock, FencedLock):
        return lock.name
    if isinstance(lock, Lock):
        raise TypeError(f"lock must be a fenced lock or its name, not a {lock.kind} lock")
    if isinstance(lock, (str, bytes)):
        return lock
    raise TypeError(f"lock must be an rlock.FencedLock or a name, not {type(lock).__name__}")


class Guard:
    """A fencing guard (rlock_guard_new()): a hash under its own name,
    beside the data it fences, holding the lock it fences and the highest
    token that passed. Each write runs only if ``token`` is at least that
    highest token, and records it, atomically on the server; otherwise
    StaleTokenError and nothing is written. ``lock`` is the FencedLock (or
    its name) the token came from. In a cluster the keys must share the
    guard's slot (name the guard ``"{res}"`` and the keys ``"{res}:..."``).
    Every write has an awaitable ``..._async`` twin."""

    __slots__ = ("client", "name", "_g", "__weakref__")

    def __init__(self, client: Client, name):
        if not isinstance(client, Client):
            raise TypeError("client must be an rlock.Client")
        self.client = client
        self._g = _rlock.guard(client._c, name)
        self.name = name if isinstance(name, str) else name.decode("utf-8", "surrogateescape")

    def __repr__(self) -> str:
        return f"<rlock.Guard {self.name!r}>"

    @staticmethod
    def _args(op, lock, token, key=None, field=None, value=None, delta=0,
              script=None, keys=None, args=None):
        return (op, _lock_name(lock), token, key, field, value, delta, script,
                keys, args)

    def _write(self, *a, **kw) -> int:
        return self._g.write(*self._args(*a, **kw))

    async def _write_async(self, *a, **kw) -> int:
        from . import _aio
        args = self._args(*a, **kw)
        if self.client._c.closed:
            raise Closed(_CODES["RLOCK_ECLOSED"], "RLOCK_ECLOSED",
                         "the client is closed")
        return await _aio.call(lambda q, t: self._g.write_async(q, t, *args))

    def set(self, key, value, *, lock, token: int) -> None:
        """SET key value, guarded."""
        self._write(_G_SET, lock, token, key=key, value=value)

    def hset(self, key, field, value, *, lock, token: int) -> int:
        """HSET key field value, guarded: the fields added (0 or 1)."""
        return self._write(_G_HSET, lock, token, key=key, field=field, value=value)

    def incrby(self, key, delta: int, *, lock, token: int) -> int:
        """INCRBY key delta, guarded: the new value."""
        return self._write(_G_INCRBY, lock, token, key=key, delta=delta)

    def delete(self, key, *, lock, token: int) -> int:
        """DEL key, guarded: the keys removed (0 or 1)."""
        return self._write(_G_DEL, lock, token, key=key)

    def script(self, body, keys=(), args=(), *, lock, token: int) -> int:
        """The caller's Lua script, guarded (it sees KEYS and ARGV as with
        EVAL): its integer reply (0 for nil, a status or a non-number). An
        error it returns raises RLockError (RLOCK_ESERVER) and the guard
        does not record the token."""
        return self._write(_G_EVAL, lock, token, script=body, keys=keys, args=args)

    async def set_async(self, key, value, *, lock, token: int) -> None:
        await self._write_async(_G_SET, lock, token, key=key, value=value)

    async def hset_async(self, key, field, value, *, lock, token: int) -> int:
        return await self._write_async(_G_HSET, lock, token, key=key, field=field,
                                       value=value)

    async def incrby_async(self, key, delta: int, *, lock, token: int) -> int:
        return await self._write_async(_G_INCRBY, lock, token, key=key, delta=delta)

    async def delete_async(self, key, *, lock, token: int) -> int:
        return await self._write_async(_G_DEL, lock, token, key=key)

    async def script_async(self, body, keys=(), args=(), *, lock, token: int) -> int:
        return await self._write_async(_G_EVAL, lock, token, script=body,
                                       keys=keys, args=args)


__all__ += ["StaleTokenError", "ForeignTokenError", "FenceState", "Guard"]


# ---- leader election (issue 38) ---------------------------------------------

import itertools  # noqa: E402
import typing  # noqa: E402

class LeaderState(typing.NamedTuple):
    """Who leads an election, as an observer sees it
    (rlock_election_state). ``value`` is None when the leader wrote none
    (a Java ``getFencedLock(name)`` holder, or a candidate that has not
    written it yet); ``holder`` is the lock's hash field
    ("<client id>:<thread id>"); ``ttl`` the lock's remaining time to live
    in seconds (None: no leader, or no expiry)."""
    has_leader: bool
    term: int
    value: bytes | None
    holder: str | None
    ttl: float | None


def _leader_state(t) -> LeaderState:
    has_leader, _has_value, term, ttl_ms, holder, value = t
    return LeaderState(bool(has_leader), term, value, holder or None,
                       ttl_ms / 1000.0 if ttl_ms >= 0 else None)


def _election_value(value) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value must be str or bytes, not {type(value).__name__}")


def _election_dispatcher(client: "Client") -> None:
    """Makes the client's event queue and starts its dispatcher thread if
    the client was opened without event handlers."""
    with client._lock:
        if not hasattr(client, "_elect_handlers"):
            client._elect_handlers = {}
            client._elect_tokens = itertools.count(1)
        if client._dispatcher is None:
            _rlock.election_queue(client._c)
            client._dispatcher = threading.Thread(
                target=client._dispatch, name="rlock-events", daemon=True)
            client._dispatcher.start()


def _election_register(client: "Client", handler) -> int:
    if handler is None:
        return 0
    if not callable(handler):
        raise TypeError("on_end / callback must be callable or None")
    _election_dispatcher(client)
    token = next(client._elect_tokens)
    client._elect_handlers[token] = handler
    return token


def _election_item(client: "Client", it) -> None:
    """On the dispatcher thread: a term ended, or an observer's state."""
    handlers = getattr(client, "_elect_handlers", {})
    if it[0] == "term":
        h = handlers.pop(it[1], None)
        if h is not None:
            h(it[3], "resigned" if it[2] == _ELECTION_RESIGNED else "lost")
    else:
        h = handlers.get(it[1])
        if h is not None:
            h(_leader_state(it[2]))


_ELECTION_WON, _ELECTION_RESIGNED = 1, 3


class Term(int):
    """The term won (an int: the fencing token of the winning acquisition).
    As a context manager it resigns on exit if this term still leads."""

    def __new__(cls, term: int, election: "Election"):
        o = int.__new__(cls, term)
        o._election = election
        return o

    def __enter__(self) -> "Term":
        return self

    def __exit__(self, *exc) -> None:
        self._election._end_term(int(self))


class Election:
    """A candidate for leadership of ``name`` (rlock_election_new), with an
    owner of its own: one campaign at a time. Candidates contend on the
    fenced lock of that name, so a Java service holding
    ``getFencedLock(name)`` is a candidate (and leader) too.
    ``on_end(term, reason)`` (reason "lost" or "resigned") runs on the
    client's dispatcher thread, exactly once per term won."""

    def __init__(self, client: "Client", name, on_end=None):
        if on_end is not None and not callable(on_end):
            raise TypeError("on_end must be callable or None")
        self.client = client
        self._e = _rlock.election(client._c, name)
        self._name = name
        self._on_end = on_end

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"Election({self._name!r})"

    def _start(self, q, token, value, wait, on_end) -> int:
        v = _election_value(value)
        wait_ms = _wait_ms(wait)
        end_token = _election_register(self.client, on_end or self._on_end)
        try:
            self._e.campaign_start(q, token, v, wait_ms, end_token)
        except BaseException:
            self._forget(end_token)
            raise
        return end_token

    def _forget(self, end_token: int) -> None:
        if end_token:
            self.client._elect_handlers.pop(end_token, None)

    def _result(self, status, term, wait, end_token) -> Term:
        if status != _ELECTION_WON:
            self._forget(end_token)
            raise AcquireTimeout(_CODES["RLOCK_ETIMEDOUT"], "RLOCK_ETIMEDOUT",
                                 f"election {self._name} not won within {wait} s")
        return Term(term, self)

    def campaign(self, value, *, wait=None, on_end=None) -> Term:
        """Campaigns with ``value`` (str or bytes, 1..4096 bytes) until won
        (``wait`` None) or for ``wait`` seconds (0: one try): the Term, or
        AcquireTimeout. ``with e.campaign(v) as term:`` resigns on exit.
        Ctrl-C on the main thread cancels the wait."""
        q = _rlock.Queue()
        end_token = self._start(q, 1, value, wait, on_end)
        items = []
        try:
            while True:
                items = q.wait(0.2)
                if items:
                    break
        except BaseException:
            self._e.cancel()
            while not items:
                items = q.wait(0.2)
            if items[0][2] == _ELECTION_WON:
                self._end_term(items[0][3])
            else:
                self._forget(end_token)
            raise
        _tag, _tok, status, term, detail, _ids = items[0]
        if status < 0:
            self._forget(end_token)
            raise _rlock.make_error(status, detail)
        return self._result(status, term, wait, end_token)

    async def campaign_async(self, value, *, wait=None, on_end=None) -> Term:
        """The same for asyncio. Cancelling the task cancels the campaign
        and awaits its end: nothing stays queued, and a campaign that won
        meanwhile is resigned before CancelledError goes on."""
        import asyncio
        from . import _aio
        b = _aio._bridge()
        token, fut = b.register()
        try:
            end_token = self._start(b.queue, token, value, wait, on_end)
        except BaseException:
            b.waiting.pop(token, None)
            raise
        try:
            status, term, _ids = await asyncio.shield(fut)
        except asyncio.CancelledError:
            if not fut.done():
                self._e.cancel()
            try:
                (status, term, _ids), _c = await _aio._settle(fut)
            except Exception:
                self._forget(end_token)
                raise asyncio.CancelledError()
            if status == _ELECTION_WON:
                await asyncio.get_running_loop().run_in_executor(
                    None, self._end_term, term)
            else:
                self._forget(end_token)
            raise
        except BaseException:
            self._forget(end_token)
            raise
        return self._result(status, term, wait, end_token)

    def _end_term(self, term: int) -> None:
        lead = self._e.leading()
        if lead is not None and lead[0] == term:
            try:
                self._e.resign()
            except NotOwner:
                pass  # lost meanwhile: on_end says so

    def proclaim(self, value) -> None:
        """The leader writes a new value (no re-election). NotOwner when
        not the leader; LockLost when the loss is being delivered."""
        self._e.proclaim(_election_value(value))

    def resign(self) -> None:
        """Ends this candidate's term now (the next candidate wins at once).
        NotOwner when not the leader (nothing sent)."""
        self._e.resign()

    def leading(self) -> tuple | None:
        """(term, until) while this candidate leads and its lease guarantee
        holds (until: rlock.now()'s clock, seconds), else None (act as
        lost)."""
        r = self._e.leading()
        return None if r is None else (r[0], r[1] / 1000.0)

    def close(self) -> None:
        """Resigns a term still held, cancels a campaign, frees the handle."""
        self._e.close()

    def __enter__(self) -> "Election":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ElectionObserver:
    """Observes an election without campaigning (rlock_election_observer):
    every change of leader, term, holder or value, in order, starting with
    the state at the start. With a callback (``client.observe(name, cb)``)
    each LeaderState goes to cb on the client's dispatcher thread; without
    one it is an async iterator (``async for state in client.observe(name)``).
    close() (or leaving ``with`` / ``async with``) stops it."""

    def __init__(self, client: "Client", name, callback=None, poll=None):
        poll_ms = _ms(poll, "poll", none=0, allow_zero=False)
        self._token = _election_register(client, callback)
        self._client = client
        self._q = None if callback is not None else _rlock.Queue()
        self._loop = None
        self._states = None
        self._closed = False
        try:
            self._o = _rlock.election_observe(client._c, name, poll_ms,
                                              self._q, self._token)
        except BaseException:
            if self._token:
                client._elect_handlers.pop(self._token, None)
            raise

    def close(self) -> None:
        self._closed = True
        self._o.close()
        if self._token:
            self._client._elect_handlers.pop(self._token, None)
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._q.fileno())

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "ElectionObserver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def __aenter__(self) -> "ElectionObserver":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def __aiter__(self) -> "ElectionObserver":
        if self._q is None:
            raise TypeError("an observer with a callback is not iterable")
        return self

    def _drain(self) -> None:
        for it in self._q.drain():
            self._states.put_nowait(_leader_state(it[2]))

    async def __anext__(self) -> LeaderState:
        import asyncio
        if self._loop is None:
            if self._closed:
                raise StopAsyncIteration
            self._loop = asyncio.get_running_loop()
            self._states = asyncio.Queue()
            self._loop.add_reader(self._q.fileno(), self._drain)
            self._drain()
        return await self._states.get()


def _client_election(self, name, *, on_end=None) -> Election:
    """A candidate for leadership of ``name`` (docs/python.md, "Leader
    election")."""
    return Election(self, name, on_end)


def _client_leader(self, name) -> LeaderState:
    """Who leads ``name`` now (one read; has_leader False when nobody
    does)."""
    return _leader_state(_rlock.election_leader(self._c, name))


def _client_observe(self, name, callback=None, *, poll=None) -> ElectionObserver:
    """Observes ``name``: an async iterator of LeaderState, or, with
    ``callback``, each state to callback on the dispatcher thread. ``poll``:
    the longest time (s) before a change nobody announces (a Java holder's
    acquire) is seen (None: 1 s)."""
    return ElectionObserver(self, name, callback, poll)


Client.election = _client_election
Client.leader = _client_leader
Client.observe = _client_observe

__all__ += ["LeaderState", "Term", "Election", "ElectionObserver"]


# ---- RedLock (docs/multilock.md) ----------------------------------------------

class RedLock(MultiLock):
    """getRedLock(locks...): a MultiLock held once a majority (n/2+1) of
    its members is, each member a lock of a client of another, independent
    server (rlock_new_redlock). Same calls as MultiLock."""

    __slots__ = ()
    _make = staticmethod(_rlock.redlock)


def _client_red_lock(self, *locks, wait=None, lease=None) -> RedLock:
    """getRedLock(lock, ...): ``client.red_lock(l1, l2, l3)`` or
    ``client.red_lock([l1, l2, l3])``, each lock from a client of another
    server. Two members on one client or one server: InvalidArgument."""
    if len(locks) == 1 and isinstance(locks[0], (list, tuple)):
        locks = tuple(locks[0])
    return RedLock(self, locks, wait, lease)


Client.red_lock = _client_red_lock

__all__ += ["RedLock"]
