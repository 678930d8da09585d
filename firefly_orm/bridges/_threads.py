"""The threads landing: sync code reached from async code, in worker threads.

Use it when async code must run blocking sync code (a sync store's I/O, a sync
unit of work, a sync SQLAlchemy engine, a sync call-out): :func:`call_blocking`
hands ``fn(*args)`` to a worker thread and awaits its result, so the event
loop keeps running meanwhile.  Everything else here is built on it:

* :func:`offloaded`: the same, or inline when the caller says the work does
  no blocking I/O (an in-process dict);
* :class:`SyncBackedAsyncUnitOfWork`: the async face of a sync unit of work
  (``await uow.run_sync(fn, *args)`` runs ``fn(sync_uow, *args)``);
* :func:`finish_from_sync`: the other direction, once: a sync ``close()``
  finishing an async clean-up (disposing async engines);
* :func:`pause`: a wait in sync code that may be running on an event loop's
  thread (SQLAlchemy drives a native async driver's sync hooks from a greenlet
  there): the loop keeps running while it waits.

Do not use it for async-only libraries (their coroutines must run on one loop:
:mod:`firefly_orm.bridges._loop_thread`) nor inside memory layers (they yield
steps: :mod:`firefly_orm.bridges._steps`).  The users are listed once, in
:mod:`firefly_orm.bridges`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, Self, TypeVar

from sqlalchemy.util.concurrency import await_only, in_greenlet

from firefly_orm.protocols import UnitOfWork

__all__ = ["SyncBackedAsyncUnitOfWork", "call_blocking", "finish_from_sync", "offloaded", "pause"]

T = TypeVar("T")
P = ParamSpec("P")


async def call_blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run the blocking ``fn(*args, **kwargs)`` from async code, in a worker thread.

    Cancelling the awaiting task does not stop the thread: the call finishes
    (or fails) there, and only its outcome is lost.
    """
    return await asyncio.to_thread(fn, *args, **kwargs)


async def offloaded(offload: bool, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker thread when ``offload``, else inline."""
    if offload:
        return await call_blocking(fn, *args, **kwargs)
    return fn(*args, **kwargs)


class SyncBackedAsyncUnitOfWork:
    """Async face of a sync unit of work (for stores without async I/O).

    Args:
        uow: The sync unit of work, or any context manager that yields one
            (it is entered and exited inline, in the caller's thread).
        offload: ``True`` (the default) runs the work and the commit in a
            worker thread, so a store doing blocking I/O (files, a custom
            backend) never blocks the event loop; an in-process store passes
            ``False``.
    """

    def __init__(self, uow: AbstractContextManager[UnitOfWork], *, offload: bool = True) -> None:
        self._manager = uow
        self._uow: UnitOfWork | None = None
        self._offload = offload

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await offloaded(self._offload, fn, *args, **kwargs)

    def _entered(self) -> UnitOfWork:
        if self._uow is None:
            raise RuntimeError("use the unit of work inside 'async with'")
        return self._uow

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(sync_uow, *args)`` and return its result."""
        return await self._call(fn, self._entered(), *args)

    async def commit(self) -> None:
        """Commit the sync unit of work."""
        await self._call(self._entered().commit)

    async def rollback(self) -> None:
        """Roll the sync unit of work back."""
        await self._call(self._entered().rollback)

    async def __aenter__(self) -> Self:
        self._uow = self._manager.__enter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._manager.__exit__(*exc_info)


#: Clean-ups :func:`finish_from_sync` scheduled on a running loop (kept
#: referenced until they end, or the loop could drop them half-way).
_PENDING: set[asyncio.Task[None]] = set()


def finish_from_sync(cleanup: Coroutine[Any, Any, None]) -> None:
    """Finish the async ``cleanup`` from sync code (a sync ``close()`` of async resources).

    Where no event loop runs in the calling thread, ``cleanup`` runs to its end
    on a short private loop in this thread.  That is right for the one user,
    disposing async SQL engines after ``asyncio.run(main())`` returned: the loop
    that opened their connections is gone, no loop is theirs any more (the
    shared loop thread no more than a fresh one), and both async drivers close
    on whichever loop awaits them (aiosqlite hands the close to its own worker
    thread; psycopg's ``AsyncConnection.close()`` is a synchronous
    ``PQfinish``), so the process-wide loop thread is not started for it.

    Inside a running loop (a sync ``close()`` called from a coroutine), blocking
    would stall that loop: ``cleanup`` is scheduled on it as a task instead (an
    async caller should await the async form of the clean-up).
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(cleanup)
        return
    task = loop.create_task(cleanup)
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)


def pause(seconds: float) -> None:
    """Wait ``seconds`` in sync code without stalling an event loop that drives it.

    Sync code that SQLAlchemy's asyncio layer runs (a connect hook of an
    aiosqlite engine, ``run_sync`` work) runs on the event loop's own thread,
    in a greenlet: ``time.sleep`` there would stall every task of that loop,
    including one that might end what the code waits for.  There the wait is
    an ``asyncio.sleep`` handed to the loop through the greenlet (SQLAlchemy's
    ``await_only``); anywhere else (a plain or worker thread) a ``time.sleep``.
    """
    if in_greenlet():
        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)
