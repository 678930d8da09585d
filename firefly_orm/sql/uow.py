"""Units of work on SQL: one transaction, or a SAVEPOINT in a caller's session.

Both classes are built from the store's :class:`~firefly_orm.sql.engines.Engines`
(where a store-owned transaction gets its connection, and the schema to map
inside a caller's session) and an :data:`ErrorMapper` (which turns driver
errors into :mod:`firefly_orm.errors`); they know nothing else of the store.

Store-owned units of work run on a plain Connection transaction (lighter than
a Session); a Session is used only to join a caller's transaction.

The caller's errors stay the caller's: in a caller's session, the objects the
caller has pending are flushed by :func:`flush_callers` before our SAVEPOINT,
before each of our statements and before our release, and an error of that
flush (a NOT NULL or unique violation, a value too long for the app's column)
propagates unchanged, with its own type (``IntegrityError``, ``DataError``...);
our statements then run with autoflush off (:func:`run_ours`).  Only errors
of our own statements become :mod:`firefly_orm.errors` exceptions.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, Self, TypeVar, cast

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from firefly_orm.protocols import EntryRepository
from firefly_orm.sql.engines import Engines, Mode, ThreadedConnection
from firefly_orm.sql.ops import SQLEntryRepository, Target, push_translation

__all__ = [
    "AsyncSQLUnitOfWork",
    "ErrorMapper",
    "SQLUnitOfWork",
    "flush_callers",
    "is_callers_error",
    "run_ours",
]

T = TypeVar("T")
S = TypeVar("S", Session, AsyncSession)

#: Attribute set on an exception raised by flushing a caller's own pending objects.
_CALLERS_FLUSH = "_firefly_orm_callers_flush"


def flush_callers(session: Session) -> None:
    """Flush what the caller has pending in ``session``, so our statements flush none of it.

    An error of that flush is the caller's (their own objects failed): it
    propagates unchanged, marked so that an :class:`ErrorMapper` lets it
    through (:func:`is_callers_error`).  Nothing of ours has run yet.
    """
    try:
        session.flush()
    except Exception as exc:
        setattr(exc, _CALLERS_FLUSH, True)
        raise


def is_callers_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from flushing a caller's own objects (:func:`flush_callers`)."""
    return getattr(exc, _CALLERS_FLUSH, False) is True


def run_ours(target: Target, fn: Callable[..., T], *args: Any) -> T:
    """Run our ``fn(target, *args)``; in a caller's Session, after flushing the caller's objects.

    On a :class:`Session` the caller's pending objects are flushed first
    (:func:`flush_callers`: their errors stay theirs; not when the caller
    turned autoflush off) and ``fn`` runs with autoflush off, so its
    statements flush nothing of the caller's.
    """
    if not isinstance(target, Session):
        return fn(target, *args)
    if target.autoflush:
        flush_callers(target)
    with target.no_autoflush:
        return fn(target, *args)


class _CallersFirst:
    """The entries of a unit of work in a caller's Session: each call goes through :func:`run_ours`.

    The caller's code runs between our calls (``with store.unit_of_work(session=s)``)
    and may add objects to ``s``; they are flushed as the caller's before each
    of our statements, never by them.
    """

    def __init__(self, entries: SQLEntryRepository, session: Session) -> None:
        self._entries = entries
        self._session = session

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._entries, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return run_ours(self._session, lambda _session: method(*args, **kwargs))

        return call


def _entries_on(target: Target) -> EntryRepository:
    """Our repository over ``target`` (through :class:`_CallersFirst` on a caller's Session)."""
    entries = SQLEntryRepository(target)
    if isinstance(target, Session):
        return cast(EntryRepository, _CallersFirst(entries, target))
    return entries


class ErrorMapper(Protocol):
    """``errors(what, engines)``: a context manager turning driver errors into ours.

    Driver errors raised inside become :mod:`firefly_orm.errors` exceptions
    naming ``what`` and the server of ``engines`` (default: the store's primary);
    errors of a caller's own objects (:func:`is_callers_error`) pass unchanged.
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
        read_only: For a store-owned transaction: the ``"read"`` engine instead
            of the write one (on SQLite ``BEGIN`` instead of ``BEGIN IMMEDIATE``;
            on PostgreSQL at ``READ COMMITTED`` no ``BEGIN``/``ROLLBACK`` at all,
            see :mod:`firefly_orm.sql.engines`).
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
        self._mode: Mode = "read" if read_only else "write"
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
    store's write engine (its read engine when ``read_only``).  With a
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
            flush_callers(self._external)  # the caller's objects, before our SAVEPOINT
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
        self.entries = _entries_on(self.target)
        return self

    def commit(self) -> None:
        """Commit the transaction (release the savepoint in a caller's session)."""
        tx = self._active_tx()
        if self._external is not None:
            flush_callers(self._external)  # what the caller added meanwhile is theirs
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

    _conn: AsyncConnection | ThreadedConnection | None = None
    _runner: AsyncSession | AsyncConnection | ThreadedConnection | None = None

    async def __aenter__(self) -> Self:
        if self._external is not None:
            await self._external.run_sync(flush_callers)  # before our SAVEPOINT
            self._runner = self._external
            self._translate(self._external.sync_session)
            try:
                self._tx = await self._external.begin_nested()
            except BaseException:
                self._undo_translation()
                raise
        else:
            self._runner = self._conn = await self.engines.async_target(self._mode).connect()
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
        if self._external is not None:
            await self._external.run_sync(flush_callers)
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
        self.entries = _entries_on(session)

    def commit(self) -> None:
        raise RuntimeError("inside run_sync, commit with `await uow.commit()` afterwards")

    def rollback(self) -> None:
        raise RuntimeError("inside run_sync, roll back with `await uow.rollback()` afterwards")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
