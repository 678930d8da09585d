"""One asyncio event loop in a daemon thread, shared by the whole process.

Use it when SYNC code must drive an ASYNC-only library: the MongoDB store (pymongo's
async client and Beanie) and the LLM summarizer (pydantic-ai) run their coroutines
on this loop, so a plain function, a worker thread or code that is already inside
another event loop can call them and wait for the result.

Do not use it for SQL (SQLAlchemy's ``run_sync`` is the bridge there) nor for
stores whose I/O is sync (derive their ``async_*`` twins with
:mod:`firefly_orm.bridges.twins`, on the threads landing of
:mod:`firefly_orm.bridges._threads`).

Two helpers decide, from sync code, between this landing and the caller's own
loop: :func:`loop_running` (does an event loop run in the calling thread, which
a blocking wait would stall?) and :func:`lifecycle_call` (upstream's awaitable
lifecycle methods: the sync form at once where no loop runs, else the async
form for the caller to await).

One loop for everything keeps clients that cache connections (HTTP clients of
model providers, a ``AsyncMongoClient``) bound to a loop that stays alive.  The
loop is created on first use and again in a forked child (a fork keeps no
threads).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any, NoReturn, TypeVar

__all__ = ["LoopThread", "lifecycle_call", "loop_running", "shared_loop"]

T = TypeVar("T")


class LoopThread:
    """An event loop running forever in a daemon thread.

    :meth:`call` runs a coroutine on it and blocks until it finishes;
    :meth:`acall` awaits it from another event loop.
    """

    def __init__(self, name: str = "firefly-orm-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def in_loop_thread(self) -> bool:
        """Whether the caller runs on this loop's own thread."""
        return threading.current_thread() is self._thread

    @property
    def running(self) -> bool:
        """Whether the loop still accepts work."""
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the coroutine is closed if that fails."""
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except BaseException:
            coro.close()
            raise

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (not from the loop itself)."""
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError(
                "a blocking call cannot run on firefly_orm's loop thread itself; "
                "await the async form instead"
            )
        return self.submit(coro).result()

    async def acall(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on the loop, from another event loop."""
        if self.in_loop_thread:
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        """Stop the loop (pending tasks are cancelled); idempotent."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop_thread:
            self._thread.join()


_lock = threading.Lock()
_shared: LoopThread | None = None


def shared_loop() -> LoopThread:
    """The process-wide :class:`LoopThread`, started on first use."""
    global _shared
    with _lock:
        if _shared is None or not _shared.running:
            _shared = LoopThread("firefly-orm-loop")
        return _shared


def _forget_after_fork() -> None:
    global _shared, _lock
    _shared = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


# --------------------------------------------------------------------------- sync callers


def loop_running() -> bool:
    """Whether an event loop runs in the calling thread (a blocking wait would stall it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Finished(Coroutine[Any, Any, T]):
    """A coroutine whose work is already done: awaiting it returns ``value``.

    A real coroutine object would warn "never awaited" when a sync caller drops
    it; this one has nothing left to run, so dropping it is silent.
    ``asyncio.run`` and ``await`` accept it like any coroutine.
    """

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def send(self, value: Any, /) -> NoReturn:
        raise StopIteration(self._value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> NoReturn:
        if isinstance(typ, BaseException):
            raise typ
        raise typ if val is None else val

    def close(self) -> None:
        """Nothing to close: the work is done."""

    def __await__(self) -> Generator[Any, None, T]:
        return self._value
        yield  # pragma: no cover - makes this a generator that finishes at once

    def __repr__(self) -> str:
        return f"<finished lifecycle call: {self._value!r}>"


def lifecycle_call(
    now: Callable[[], T], later: Callable[[], Coroutine[Any, Any, T]]
) -> Coroutine[Any, Any, T]:
    """``later()`` when an event loop runs in this thread, else ``now()`` done at once.

    The shape of upstream's ``async def initialize()`` / ``close()`` on stores
    whose work is sync with ``async_*`` twins (the compat layer,
    :mod:`firefly_orm.compat.firefly.memory`): ``await store.initialize()``
    awaits the async form on the caller's loop, while a plain call (or the
    argument of ``asyncio.run(store.initialize())`` being evaluated) finds no
    loop to block and runs the sync form at once.

    Args:
        now: The sync form (may block: no loop runs in this thread).
        later: The async form, returned un-awaited for the caller to await.

    Returns:
        A coroutine: ``later()``'s, or a finished one holding ``now()``'s result.
    """
    if loop_running():
        return later()
    return _Finished(now())
