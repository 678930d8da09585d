"""Runners: where a store's operations and units of work get their transaction.

A store hands every operation (a function of :mod:`firefly_orm.sql.ops`) to
its runner, which initialises the store on first use, maps errors and runs
the function on a transaction:

* :class:`EngineRunner` (a store's own): a Connection transaction of the write
  engine for writes; for single-statement reads a plain connection, which on
  SQLite runs without ``BEGIN`` at all.
* :class:`SessionRunner` (a store bound to a caller's session, and
  ``unit_of_work(session=...)``): a SAVEPOINT of the caller's Session or
  AsyncSession, so the caller's commit or rollback decides.

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
from firefly_orm.sql.uow import AsyncSQLUnitOfWork, ErrorMapper, SQLUnitOfWork

__all__ = ["EngineRunner", "Runner", "SessionRunner"]

T = TypeVar("T")


class Runner(ABC):
    """Runs operations and opens units of work for one store (see the module docstring).

    Args:
        engines: The store's engines (and the schema to map in a caller's session).
        errors: Turns driver errors into :mod:`firefly_orm.errors` exceptions.
        ensure: Initialises the store on first use (sync).
        async_ensure: The same, awaited.
    """

    def __init__(
        self,
        engines: Engines,
        errors: ErrorMapper,
        ensure: Callable[[], None],
        async_ensure: Callable[[], Awaitable[None]],
    ) -> None:
        self.engines = engines
        self.errors = errors
        self.ensure = ensure
        self.async_ensure = async_ensure

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
    def _new_uow(self, read_only: bool) -> SQLUnitOfWork:
        """A unit of work of this runner's kind (not entered yet)."""

    @abstractmethod
    def _new_async_uow(self, read_only: bool) -> AsyncSQLUnitOfWork:
        """Async form of :meth:`_new_uow`."""

    @contextmanager
    def unit_of_work(
        self, *, read_only: bool = False, what: str = "unit of work"
    ) -> Iterator[SQLUnitOfWork]:
        """A unit of work, entered (the store initialised first)."""
        uow = self._new_uow(read_only)
        self.ensure()
        with self.errors(what), uow:
            yield uow

    @asynccontextmanager
    async def async_unit_of_work(
        self, *, read_only: bool = False, what: str = "unit of work"
    ) -> AsyncIterator[AsyncSQLUnitOfWork]:
        """Async form of :meth:`unit_of_work`."""
        uow = self._new_async_uow(read_only)
        await self.async_ensure()
        with self.errors(what):
            async with uow:
                yield uow


class EngineRunner(Runner):
    """A store's own transactions, on its engines.

    Writes run in one Connection transaction (``BEGIN IMMEDIATE`` on SQLite).
    Reads are single statements: they run on a plain connection, without
    ``BEGIN``/``COMMIT`` on SQLite (the statement is atomic on its own).
    """

    def call(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        self.ensure()
        with self.errors(what):
            if write:
                with self.engines.sync_engine("write").begin() as conn:
                    return fn(conn, *args)
            with self.engines.sync_engine("read").connect() as conn:
                return fn(conn, *args)

    async def acall(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        await self.async_ensure()
        with self.errors(what):
            if write:
                async with self.engines.async_engine("write").begin() as conn:
                    return await conn.run_sync(fn, *args)
            async with self.engines.async_engine("read").connect() as aconn:
                return await aconn.run_sync(fn, *args)

    def _new_uow(self, read_only: bool) -> SQLUnitOfWork:
        return SQLUnitOfWork(self.engines, self.errors, read_only=read_only)

    def _new_async_uow(self, read_only: bool) -> AsyncSQLUnitOfWork:
        return AsyncSQLUnitOfWork(self.engines, self.errors, read_only=read_only)


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
        )
        self.session = session

    def call(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        with self.unit_of_work(what=what) as uow:
            result = fn(uow.target, *args)
            if write:
                uow.commit()
            return result

    async def acall(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        async with self.async_unit_of_work(what=what) as uow:
            result = await uow.run_on_target(fn, *args, what=what)
            if write:
                await uow.commit()
            return result

    def _new_uow(self, read_only: bool) -> SQLUnitOfWork:
        if not isinstance(self.session, Session):
            raise TypeError("bound to an AsyncSession: use the async_* methods")
        return SQLUnitOfWork(self.engines, self.errors, self.session)

    def _new_async_uow(self, read_only: bool) -> AsyncSQLUnitOfWork:
        if not isinstance(self.session, AsyncSession):
            raise TypeError("bound to a sync Session: use the sync methods")
        return AsyncSQLUnitOfWork(self.engines, self.errors, self.session)
