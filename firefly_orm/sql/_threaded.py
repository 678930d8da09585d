"""The async face of a sync engine: a store's async work run in worker threads.

A store given only a sync ``engine=`` (and a SQLite store, whose preset
chooses threads) runs its ``async_*`` methods on :class:`ThreadedEngine`
instead of a second, async connection pool; see
:mod:`firefly_orm.sql._engines`.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from sqlalchemy.engine import Connection, Dialect, Engine, RootTransaction

from firefly_orm.bridges._threads import call_blocking

__all__ = ["ThreadedConnection", "ThreadedEngine", "ThreadedTransaction"]

T = TypeVar("T")
P = ParamSpec("P")


class ThreadedEngine:
    """The async face of a caller's sync :class:`Engine`: its work runs in worker threads.

    A store given only ``engine=`` runs its ``async_*`` methods, async units of
    work and ``async_initialize`` on this instead of building a second, async
    connection pool from the engine's URL: each call checks a connection out of
    *your* pool and runs the same sync work on it in a worker thread
    (:func:`~firefly_orm.bridges._threads.call_blocking`), so the event loop is
    never blocked.  It offers the part of :class:`AsyncEngine` the store uses:
    :meth:`connect` and :meth:`begin`.

    Args:
        engine: The sync engine (with the store's execution options applied).
    """

    def __init__(self, engine: Engine) -> None:
        self.sync_engine = engine

    @property
    def dialect(self) -> Dialect:
        """The sync engine's dialect."""
        return self.sync_engine.dialect

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, sync work on :attr:`sync_engine`, in ONE worker-thread call.

        For work that checks a connection out, runs and ends its transaction
        itself (:meth:`Engines.run`, a whole unit of work): one hand-off to
        a thread per operation instead of one per step.  Cancelling the
        awaiting task does not stop the thread: the work finishes (or fails)
        there, and only its outcome is lost.
        """
        return await call_blocking(fn, *args, **kwargs)

    def connect(self) -> ThreadedConnection:
        """A connection: ``await`` it, or use it with ``async with``."""
        return ThreadedConnection(self.sync_engine)

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[ThreadedConnection]:
        """A connection in a transaction, committed at the end (rolled back on error)."""
        async with self.connect() as conn:
            tx = await conn.begin()
            try:
                yield conn
            except BaseException:
                await tx.rollback()
                raise
            await tx.commit()


class ThreadedConnection:
    """A sync :class:`Connection` driven from async code, one worker-thread call at a time.

    ``await engine.connect()`` (or ``async with``) checks the connection out;
    :meth:`run_sync` runs ``fn(connection, *args)``; :meth:`begin` starts a
    transaction.  Calls on one connection never overlap, not even after the
    awaiting task was cancelled (the thread finishes first; the next call waits
    for it).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._conn: Connection | None = None
        self._busy = threading.Lock()
        self._abandoned = False

    async def _call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        def locked() -> T:
            with self._busy:
                return fn(*args, **kwargs)

        return await call_blocking(locked)

    def _checkout(self) -> None:
        conn = self._engine.connect()
        with self._busy:
            if not self._abandoned:
                self._conn = conn
                return
        conn.close()  # its task was cancelled meanwhile: back to the pool

    async def start(self) -> Self:
        """Check a connection out of the engine's pool (in a worker thread)."""
        if self._conn is None:
            try:
                await call_blocking(self._checkout)
            except asyncio.CancelledError:
                with self._busy:  # held only for an instant by the checkout thread
                    self._abandoned = True
                await self.close()  # checked out just before the flag was seen
                raise
        return self

    def __await__(self) -> Generator[Any, None, Self]:
        return self.start().__await__()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _connection(self) -> Connection:
        if self._conn is None:
            raise RuntimeError("this connection is not open (await it or use 'async with')")
        return self._conn

    async def begin(self) -> ThreadedTransaction:
        """Begin a transaction on the connection (``BEGIN IMMEDIATE`` waits in the thread)."""
        conn = self._connection()
        return ThreadedTransaction(self, await self._call(conn.begin))

    async def run_sync(
        self, fn: Callable[Concatenate[Connection, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(connection, *args, **kwargs)`` in a worker thread; return its result."""
        return await self._call(functools.partial(fn, self._connection(), *args, **kwargs))

    async def close(self) -> None:
        """Return the connection to the pool (rolling back what is left open)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._call(conn.close)


class ThreadedTransaction:
    """The transaction of a :class:`ThreadedConnection` (commit/rollback in its thread calls)."""

    def __init__(self, conn: ThreadedConnection, tx: RootTransaction) -> None:
        self._conn = conn
        self._tx = tx

    @property
    def is_active(self) -> bool:
        """Whether the transaction is still open."""
        return self._tx.is_active

    async def commit(self) -> None:
        """Commit."""
        await self._conn._call(self._tx.commit)

    async def rollback(self) -> None:
        """Roll back, unless a commit whose task was cancelled has ended it meanwhile."""
        await self._conn._call(self._rollback_if_active)

    def _rollback_if_active(self) -> None:
        if self._tx.is_active:
            self._tx.rollback()
