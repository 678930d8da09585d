"""Runners: where a store's operations and units of work get their transaction.

A store hands every operation (a function of :mod:`firefly_orm.sql.ops`) to
its runner, which initialises the store on first use, maps errors and runs
the function on a transaction:

* :class:`EngineRunner` (a store's own): a Connection transaction of the write
  engine for writes; for single-statement reads a plain connection, which on
  SQLite runs without ``BEGIN`` at all.  Reads and read-only units of work run
  on the engines its :class:`~firefly_orm.sql.replica.ReadRouter` chooses (a
  read replica's, unless this process wrote a moment ago).
* :class:`SessionRunner` (a store bound to a caller's session, and
  ``unit_of_work(session=...)``): a SAVEPOINT of the caller's Session or
  AsyncSession, so the caller's commit or rollback decides.  The caller's
  pending objects are flushed first, and their errors reach the caller
  unchanged (see :mod:`firefly_orm.sql.uow`).

Both give sync and async units of work; the async side awaits the same
functions through ``run_sync``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from firefly_orm.sql.engines import Engines
from firefly_orm.sql.replica import ReadRouter
from firefly_orm.sql.uow import AsyncSQLUnitOfWork, ErrorMapper, SQLUnitOfWork, run_ours

__all__ = ["EngineRunner", "Runner", "SessionRunner"]

T = TypeVar("T")


class Runner(ABC):
    """Runs operations and opens units of work for one store (see the module docstring).

    Args:
        engines: The store's engines (and the schema to map in a caller's session).
        errors: Turns driver errors into :mod:`firefly_orm.errors` exceptions.
        ensure: Initialises the store on first use (sync).
        async_ensure: The same, awaited.
        router: Where reads go (a replica, or ``engines``); ``None``: always ``engines``.
    """

    def __init__(
        self,
        engines: Engines,
        errors: ErrorMapper,
        ensure: Callable[[], None],
        async_ensure: Callable[[], Awaitable[None]],
        router: ReadRouter | None = None,
    ) -> None:
        self.engines = engines
        self.errors = errors
        self.ensure = ensure
        self.async_ensure = async_ensure
        self.router = router if router is not None else ReadRouter(engines)

    def join(self, session: Session | AsyncSession) -> SessionRunner:
        """A runner for the same store whose transactions are SAVEPOINTs of ``session``."""
        return SessionRunner(session, self)

    @abstractmethod
    def call(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        """Run ``fn(target, *args)`` in a transaction (``what`` names it in errors)."""

    @abstractmethod
    async def acall(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        """Await ``fn(target, *args)`` through ``run_sync`` (see :meth:`call`)."""

    @abstractmethod
    def _new_uow(self, read_only: bool, consistent: bool) -> SQLUnitOfWork:
        """A unit of work of this runner's kind (not entered yet)."""

    @abstractmethod
    def _new_async_uow(self, read_only: bool, consistent: bool) -> AsyncSQLUnitOfWork:
        """Async form of :meth:`_new_uow`."""

    @contextmanager
    def unit_of_work(
        self, *, read_only: bool = False, consistent: bool = False, what: str = "unit of work"
    ) -> Iterator[SQLUnitOfWork]:
        """A unit of work, entered (the store initialised first).

        ``consistent``: a read-only one runs on the primary even with a replica.
        """
        self.ensure()
        uow = self._new_uow(read_only, consistent)
        try:
            with self.errors(what, uow.engines), uow:
                yield uow
        finally:
            if not read_only:
                self.router.wrote()

    @asynccontextmanager
    async def async_unit_of_work(
        self, *, read_only: bool = False, consistent: bool = False, what: str = "unit of work"
    ) -> AsyncIterator[AsyncSQLUnitOfWork]:
        """Async form of :meth:`unit_of_work`."""
        await self.async_ensure()
        uow = self._new_async_uow(read_only, consistent)
        try:
            with self.errors(what, uow.engines):
                async with uow:
                    yield uow
        finally:
            if not read_only:
                self.router.wrote()


class EngineRunner(Runner):
    """A store's own transactions, on its engines.

    Writes run in one Connection transaction (``BEGIN IMMEDIATE`` on SQLite)
    on the primary.  Reads are single statements: they run on a plain
    connection, without ``BEGIN``/``COMMIT`` on SQLite (the statement is
    atomic on its own), on the engines the router chooses.
    """

    def _engines_for(self, read_only: bool, consistent: bool = False) -> Engines:
        return self.router.for_read(consistent=consistent) if read_only else self.engines

    def call(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        self.ensure()
        if write:
            try:
                with self.errors(what), self.engines.sync_engine("write").begin() as conn:
                    return fn(conn, *args)
            finally:
                self.router.wrote()
        engines = self._engines_for(True)
        with self.errors(what, engines), engines.sync_engine("read").connect() as conn:
            return fn(conn, *args)

    async def acall(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        await self.async_ensure()
        if write:
            try:
                with self.errors(what):
                    async with self.engines.async_target("write").begin() as conn:
                        return await conn.run_sync(fn, *args)
            finally:
                self.router.wrote()
        engines = self._engines_for(True)
        with self.errors(what, engines):
            async with engines.async_target("read").connect() as aconn:
                return await aconn.run_sync(fn, *args)

    def _new_uow(self, read_only: bool, consistent: bool) -> SQLUnitOfWork:
        engines = self._engines_for(read_only, consistent)
        return SQLUnitOfWork(engines, self.errors, read_only=read_only)

    def _new_async_uow(self, read_only: bool, consistent: bool) -> AsyncSQLUnitOfWork:
        engines = self._engines_for(read_only, consistent)
        return AsyncSQLUnitOfWork(engines, self.errors, read_only=read_only)


class SessionRunner(Runner):
    """Transactions that are SAVEPOINTs of a caller's Session (or AsyncSession).

    Nothing is committed until the caller commits.  A sync ``Session`` serves
    the sync methods, an ``AsyncSession`` the async ones (the other raise
    :class:`TypeError`).  ``read_only`` changes nothing: the caller's
    transaction is what it is.
    """

    def __init__(self, session: Session | AsyncSession, store_runner: Runner) -> None:
        super().__init__(
            store_runner.engines,
            store_runner.errors,
            store_runner.ensure,
            store_runner.async_ensure,
            store_runner.router,
        )
        self.session = session

    def call(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        with self.unit_of_work(what=what) as uow:
            result = run_ours(uow.target, fn, *args)
            if write:
                uow.commit()
            return result

    async def acall(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        async with self.async_unit_of_work(what=what) as uow:
            result: T = await uow.run_on_target(run_ours, fn, *args, what=what)
            if write:
                await uow.commit()
            return result

    def _new_uow(self, read_only: bool, consistent: bool) -> SQLUnitOfWork:
        if not isinstance(self.session, Session):
            raise TypeError("bound to an AsyncSession: use the async_* methods")
        return SQLUnitOfWork(self.engines, self.errors, self.session)

    def _new_async_uow(self, read_only: bool, consistent: bool) -> AsyncSQLUnitOfWork:
        if not isinstance(self.session, AsyncSession):
            raise TypeError("bound to a sync Session: use the sync methods")
        return AsyncSQLUnitOfWork(self.engines, self.errors, self.session)
