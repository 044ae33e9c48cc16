"""asyncio for rlock: the C library's async calls, completed through one
eventfd per event loop (loop.add_reader), so no thread waits per waiter and
no Python runs on the library's loop thread."""

from __future__ import annotations

import asyncio
import itertools
import weakref

from . import _rlock

_bridges: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_task_owners: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Bridge:
    """The completion queue of one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        # weakly: _bridges is keyed by the loop, and a value that held its
        # key would keep every finished loop (and its eventfd) alive
        self._loop = weakref.ref(loop)
        self.queue = _rlock.Queue()
        self.tokens = itertools.count(1)
        self.waiting = {}  # token -> (future, undo or None)
        loop.add_reader(self.queue.fileno(), self._drain)

    def register(self, undo=None):
        token = next(self.tokens)
        fut = self._loop().create_future()
        self.waiting[token] = (fut, undo)
        return token, fut

    def _drain(self) -> None:
        for it in self.queue.drain():
            _tag, token, status, value, detail, ids = it
            entry = self.waiting.pop(token, None)
            if entry is None:
                continue
            fut, _undo = entry
            if fut.done():
                continue
            if status < 0:
                fut.set_exception(_rlock.make_error(status, detail))
            else:
                fut.set_result((status, value, ids))


def _bridge() -> _Bridge:
    loop = asyncio.get_running_loop()
    b = _bridges.get(loop)
    if b is None:
        b = _bridges[loop] = _Bridge(loop)
    return b


def task_owner() -> int:
    """The owner id of the current task: a task holds its locks as a
    thread does (re-entry within the task; other tasks wait)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("rlock's async calls need a running asyncio task")
    o = _task_owners.get(task)
    if o is None:
        o = _task_owners[task] = _rlock.owner_new()
    return o


def _owner(owner) -> int:
    from . import _owner_id
    o = _owner_id(owner)
    return o if o is not None else task_owner()


async def _settle(fut):
    """(result, cancelled): the future's result, however often the task is
    cancelled meanwhile, and whether it was."""
    cancelled = False
    while True:
        try:
            return await asyncio.shield(fut), cancelled
        except asyncio.CancelledError:
            cancelled = True
            if fut.done():
                return fut.result(), cancelled


async def acquire(handle, n: int, wait_ms: int, lease_ms: int, owner):
    """(status, value, ids) of the handle's async acquire. On cancellation:
    the C wait is cancelled, its completion awaited (so nothing is left
    queued when CancelledError goes on), and an acquire that won the race
    is undone."""
    from . import Lock, MultiLock
    handle._check_client()
    b = _bridge()
    kind_lock = isinstance(handle, (Lock, MultiLock))
    ow = _owner(owner) if kind_lock else 0
    token, fut = b.register()
    req = handle._h.acquire_async(b.queue, token, ow, n, wait_ms, lease_ms)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        if not fut.done():
            req.cancel()
        try:
            (st, _v, ids), _c = await _settle(fut)
        except Exception:
            raise asyncio.CancelledError()
        if st == 1:
            await _undo(handle, ow, n, ids)
        raise


async def _undo(handle, owner, n, ids) -> None:
    from . import Lock, MultiLock, PermitSemaphore, Semaphore
    if isinstance(handle, Lock):
        b = _bridge()
        token, fut = b.register()
        handle._h.unlock_async(b.queue, token, owner)
        try:
            await _settle(fut)
        except Exception:
            pass
        return
    loop = asyncio.get_running_loop()
    if isinstance(handle, MultiLock):
        await loop.run_in_executor(None, handle._h.release, owner)
    elif isinstance(handle, Semaphore):
        await loop.run_in_executor(None, handle._h.op, "release", n)
    elif isinstance(handle, PermitSemaphore) and ids:
        await loop.run_in_executor(None, handle._h.permit_op, "release", tuple(ids))


async def release(lock, owner) -> int:
    """Async unlock of a lock for the task (or owner): 0 when one hold was
    released (the C library's return convention)."""
    lock._check_client()
    b = _bridge()
    token, fut = b.register()
    lock._h.unlock_async(b.queue, token, _owner(owner))
    (st, _v, _ids), cancelled = await _settle(fut)
    if cancelled:  # the unlock is done; the cancellation goes on
        raise asyncio.CancelledError()
    return st


async def call(start):
    """The value of an async C call that cannot be cancelled (a
    guarded write, a fenced check): ``start(queue, token)`` starts it. A
    task cancelled meanwhile gets its CancelledError once the call has
    ended (a guarded write is never half done)."""
    b = _bridge()
    token, fut = b.register()
    try:
        start(b.queue, token)
    except BaseException:
        b.waiting.pop(token, None)
        raise
    (_st, value, _ids), cancelled = await _settle(fut)
    if cancelled:
        raise asyncio.CancelledError()
    return value
