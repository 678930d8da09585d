"""Units of work on SQL: one transaction, or a SAVEPOINT in a caller's session.

Both classes are built from the store's :class:`~firefly_orm.sql.engines.Engines`
(where a store-owned transaction gets its connection, and the schema to map
inside a caller's session) and an :data:`ErrorMapper` (which turns driver
errors into :mod:`firefly_orm.errors`); they know nothing else of the store.

Store-owned units of work run on a plain Connection transaction (lighter than
a Session); a Session is used only to join a caller's transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, Self, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from firefly_orm.protocols import EntryRepository
from firefly_orm.sql.engines import Engines, Mode
from firefly_orm.sql.ops import SQLEntryRepository, Target, push_translation

__all__ = ["AsyncSQLUnitOfWork", "ErrorMapper", "SQLUnitOfWork"]

T = TypeVar("T")
S = TypeVar("S", Session, AsyncSession)


class ErrorMapper(Protocol):
    """``errors(what, engines)``: a context manager turning driver errors into ours.

    Driver errors raised inside become :mod:`firefly_orm.errors` exceptions
    naming ``what`` and the server of ``engines`` (default: the store's primary).
    """

    def __call__(
        self, what: str, engines: Engines | None = None, /
    ) -> AbstractContextManager[None]: ...


class _Transaction(Generic[S]):
    """What both units of work share: how they are built, and their transaction's state.

    Args:
        engines: Where a store-owned transaction gets its connection, and the
            schema to map inside a caller's session.
        errors: Turns driver errors into :mod:`firefly_orm.errors` exceptions.
        session: A caller's session to join through a SAVEPOINT (else a
            Connection transaction of the store's own).
        read_only: For a store-owned transaction: the plain engine instead of
            the write one (on SQLite, ``BEGIN`` instead of ``BEGIN IMMEDIATE``).
    """

    def __init__(
        self,
        engines: Engines,
        errors: ErrorMapper,
        session: S | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        self.engines = engines
        self._errors = errors
        self._external: S | None = session
        self._mode: Mode = "default" if read_only else "write"
        self._restore: Callable[[], None] | None = None
        self._tx: Any = None
        self._done = False

    def _active_tx(self) -> Any:
        if self._done or self._tx is None:
            raise RuntimeError("this unit of work is not active")
        return self._tx

    def _needs_rollback(self) -> bool:
        """Whether the transaction is still open and must be rolled back (marks it done)."""
        if self._tx is None or self._done:
            return False
        self._done = True
        return bool(self._tx.is_active)

    def _translate(self, session: Session) -> None:
        """Map our table to the store's schema in the caller's ``session``."""
        self._restore = push_translation(session, self.engines.schema)

    def _undo_translation(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None


class SQLUnitOfWork(_Transaction[Session]):
    """One transaction; rolls back unless :meth:`commit` is called.

    Without ``session`` the work runs on a Connection transaction of the
    store's write engine (its plain engine when ``read_only``).  With a
    caller's ``session``, it runs inside a SAVEPOINT of it (``begin_nested``):
    :meth:`commit` releases the savepoint and the caller's own commit (or
    rollback) decides the outcome; a failure rolls back only the savepoint.
    """

    entries: EntryRepository
    #: The Session or Connection the work runs on (while entered).
    target: Target
    _conn: Connection | None = None

    def __enter__(self) -> Self:
        if self._external is not None:
            self.target = self._external
            self._translate(self._external)
            try:
                self._tx = self._external.begin_nested()
            except BaseException:
                self._undo_translation()
                raise
        else:
            self.target = self._conn = self.engines.sync_engine(self._mode).connect()
            try:
                self._tx = self._conn.begin()
            except BaseException:
                self._conn.close()
                raise
        self.entries = SQLEntryRepository(self.target)
        return self

    def commit(self) -> None:
        """Commit the transaction (release the savepoint in a caller's session)."""
        tx = self._active_tx()
        with self._errors("commit", self.engines):
            tx.commit()
        self._done = True

    def rollback(self) -> None:
        """Roll the transaction (or the savepoint) back; no-op once finished."""
        if self._needs_rollback():
            self._tx.rollback()

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.rollback()
        finally:
            if self._conn is not None:
                self._conn.close()
            self._undo_translation()


class AsyncSQLUnitOfWork(_Transaction[AsyncSession]):
    """Async unit of work on the native async engine (or a caller's AsyncSession).

    ``await uow.run_sync(fn, *args)`` calls ``fn(sync_uow, *args)`` where
    ``sync_uow`` has the same ``entries`` repository over the sync facade of the
    async connection, so the logic written for sync units of work runs unchanged.
    """

    _conn: AsyncConnection | None = None
    _runner: AsyncSession | AsyncConnection | None = None

    async def __aenter__(self) -> Self:
        if self._external is not None:
            self._runner = self._external
            self._translate(self._external.sync_session)
            try:
                self._tx = await self._external.begin_nested()
            except BaseException:
                self._undo_translation()
                raise
        else:
            self._runner = self._conn = await self.engines.async_engine(self._mode).connect()
            try:
                self._tx = await self._conn.begin()
            except BaseException:
                await self._conn.close()
                raise
        return self

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(uow, *args)`` with a sync unit-of-work view of this transaction."""
        return await self.run_on_target(_with_view, fn, *args)

    async def run_on_target(
        self, fn: Callable[..., T], *args: Any, what: str = "unit of work"
    ) -> T:
        """Run ``fn(target, *args)`` on the sync Session/Connection of this transaction.

        ``what`` names the work in error messages (e.g. ``"save failed on ..."``).
        """
        if self._runner is None:
            raise RuntimeError("this unit of work is not active")
        with self._errors(what, self.engines):
            result: T = await self._runner.run_sync(fn, *args)
            return result

    async def commit(self) -> None:
        """Commit the transaction (release the savepoint in a caller's session)."""
        tx = self._active_tx()
        with self._errors("commit", self.engines):
            await tx.commit()
        self._done = True

    async def rollback(self) -> None:
        """Roll the transaction (or the savepoint) back; no-op once finished."""
        if self._needs_rollback():
            await self._tx.rollback()

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.rollback()
        finally:
            if self._conn is not None:
                await self._conn.close()
            self._undo_translation()


def _with_view(target: Target, fn: Callable[..., T], *args: Any) -> T:
    return fn(_SessionUnitOfWork(target), *args)


class _SessionUnitOfWork:
    """Sync view handed to ``run_sync`` callbacks; commit is the async owner's job."""

    def __init__(self, session: Target) -> None:
        self.entries = SQLEntryRepository(session)

    def commit(self) -> None:
        raise RuntimeError("inside run_sync, commit with `await uow.commit()` afterwards")

    def rollback(self) -> None:
        raise RuntimeError("inside run_sync, roll back with `await uow.rollback()` afterwards")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
