"""Units of work on SQL: one transaction, or a SAVEPOINT in a caller's session.

Both classes are built from the store's :class:`~firefly_orm.sql._engines.Engines`
(where a store-owned transaction gets its connection, and the schema to map
inside a caller's session) and an :data:`ErrorMapper` (which turns driver
errors into :mod:`firefly_orm.errors`); they know nothing else of the store.

Store-owned units of work run on a plain Connection transaction (lighter than
a Session); a Session is used only to join a caller's transaction.  On
PostgreSQL at ``READ COMMITTED`` a write unit of work defers its ``BEGIN``
(:class:`_DeferredBegin`): a one-statement append run first commits on its own
in one round trip; anything else begins the transaction before it runs.

The caller's errors stay the caller's: in a caller's session, the objects the
caller has pending are flushed by :func:`flush_callers` before our SAVEPOINT,
before each of our statements and before our release, and an error of that
flush (a NOT NULL or unique violation, a value too long for the app's column)
propagates unchanged, with its own type (``IntegrityError``, ``DataError``...);
our statements then run with autoflush off (:func:`run_ours`).  Only errors
of our own statements become :mod:`firefly_orm.errors` exceptions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, Protocol, Self, TypeVar, cast

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from firefly_orm.protocols import AppendedHead, EntryRepository, TurnAppend
from firefly_orm.sql._engines import NO_BEGIN_OPTION, Engines, Mode, ThreadedConnection
from firefly_orm.sql._ops import SQLEntryRepository, Target, push_translation
from firefly_orm.uow import RepositoryBase

__all__ = [
    "AsyncSQLUnitOfWork",
    "ErrorMapper",
    "SQLUnitOfWork",
    "flush_callers",
    "is_callers_error",
    "run_ours",
]

logger = logging.getLogger("firefly_orm")

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


class _EntriesProxy(RepositoryBase):
    """Our repository, each method call wrapped by :meth:`_wrap` (attributes pass through).

    Args:
        entries: The repository.
        errors: Maps driver errors of our calls (``None``: the caller maps them).
        engines: Named in the mapped errors.
    """

    def __init__(
        self, entries: SQLEntryRepository, errors: ErrorMapper | None, engines: Engines | None
    ) -> None:
        self._entries = entries
        self._errors = errors
        self._engines = engines

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._entries, name)
        if not callable(method):
            return method
        return self._wrap(name, method)

    # The optional operations of RepositoryBase, declared: each goes through
    # the wrapper like every other call (the base's defaults would not).
    supports_delete_key = True
    supports_list_contents_before = True

    def append_turn(self, request: TurnAppend) -> AppendedHead | None:
        result: AppendedHead | None = self.__getattr__("append_turn")(request)
        return result

    def delete_key(self, namespace: str, key: str, entry_id: str) -> int | None:
        result: int | None = self.__getattr__("delete_key")(namespace, key, entry_id)
        return result

    def list_contents_before(
        self, namespace: str, *, key_prefix: str, before_key: str, limit: int
    ) -> list[Any] | None:
        result: list[Any] | None = self.__getattr__("list_contents_before")(
            namespace, key_prefix=key_prefix, before_key=before_key, limit=limit
        )
        return result

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        raise NotImplementedError


class _CallersFirst(_EntriesProxy):
    """The entries of a unit of work in a caller's Session: each call goes through :func:`run_ours`.

    The caller's code runs between our calls (``with store.unit_of_work(session=s)``)
    and may add objects to ``s``; they are flushed as the caller's before each
    of our statements, never by them.  With ``errors``, each call maps its own
    driver errors (the body of the unit of work around it is the caller's).
    """

    def __init__(
        self,
        entries: SQLEntryRepository,
        session: Session,
        errors: ErrorMapper | None,
        engines: Engines | None,
    ) -> None:
        super().__init__(entries, errors, engines)
        self._session = session

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        errors, engines, session = self._errors, self._engines, self._session

        def call(*args: Any, **kwargs: Any) -> Any:
            if errors is None:
                return run_ours(session, lambda _session: method(*args, **kwargs))
            with errors(name, engines):
                return run_ours(session, lambda _session: method(*args, **kwargs))

        return call


def _entries_on(
    target: Target, errors: ErrorMapper | None = None, engines: Engines | None = None
) -> EntryRepository:
    """Our repository over ``target`` (through :class:`_CallersFirst` on a caller's Session).

    With ``errors``, each call on a caller's Session maps its own driver errors
    (the body of the unit of work around it is the caller's and is not mapped).
    """
    entries = SQLEntryRepository(target)
    if isinstance(target, Session):
        return cast(EntryRepository, _CallersFirst(entries, target, errors, engines))
    return entries


#: Repository methods that are one statement on PostgreSQL, atomic on its own
#: (:meth:`~firefly_orm.sql._ops.SQLEntryRepository.append_turn`,
#: :meth:`~firefly_orm.sql._ops.SQLEntryRepository.delete_key`): in a unit of
#: work whose transaction has not begun, they run without one.
_ATOMIC_ALONE = frozenset({"append_turn", "delete_key"})


class _DeferredBegin:
    """The transaction of a PostgreSQL write unit of work, begun when a statement needs it.

    The connection comes from the ``"single"`` engine (autocommit, at ``READ
    COMMITTED``).  A one-statement write (:data:`_ATOMIC_ALONE`) run before
    anything else commits on its own: the unit of work then costs one round
    trip instead of ``BEGIN``, the statement and ``COMMIT``.  Any other
    statement first switches the connection back to ``level`` and begins the
    transaction, exactly as an eager unit of work would have.  After a
    statement that committed alone nothing else may run in the unit of work
    (it would not be atomic with it): that raises :class:`RuntimeError`.
    """

    def __init__(self, conn: Connection, level: str, errors: ErrorMapper, engines: Engines) -> None:
        self.conn = conn
        self.level = level
        self.errors = errors
        self.engines = engines
        self.tx: Any = None
        self.committed_alone = False

    def entries(self, conn: Connection) -> EntryRepository:
        """Our repository over ``conn`` (this connection, or its ``run_sync`` facade)."""
        return cast(EntryRepository, _BeginsLazily(SQLEntryRepository(conn), self))

    def begin(self) -> None:
        """Begin the transaction, if it has not begun."""
        if self.tx is not None:
            return
        if self.committed_alone:
            raise RuntimeError(
                "a one-statement write of this unit of work has committed on its own; "
                "nothing else may run in it"
            )
        if self.conn.in_transaction():
            # SQLAlchemy's autobegin after a statement run in autocommit: nothing
            # is open on the server, and ending it sends nothing.
            self.conn.commit()
        if self.conn.get_execution_options().get(NO_BEGIN_OPTION, False):
            # A connection of a pool kept in autocommit: BEGIN is sent for it.
            self.conn.execution_options(**{NO_BEGIN_OPTION: False})
        else:
            self.conn.execution_options(isolation_level=self.level)
        self.tx = self.conn.begin()


#: How a failure of a statement that commits as it runs is named: like a failed
#: COMMIT, its outcome is unknown to the caller.
_ALONE_WHAT = "{name} (one statement, committed as it runs: it may have taken effect)"


class _BeginsLazily(_EntriesProxy):
    """The entries of a unit of work with a :class:`_DeferredBegin` transaction."""

    def __init__(self, entries: SQLEntryRepository, deferred: _DeferredBegin) -> None:
        super().__init__(entries, deferred.errors, deferred.engines)
        self._deferred = deferred

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        deferred = self._deferred
        errors, engines = deferred.errors, deferred.engines
        if name in _ATOMIC_ALONE:

            def alone(*args: Any, **kwargs: Any) -> Any:
                if deferred.tx is not None or deferred.committed_alone:
                    deferred.begin()
                    return method(*args, **kwargs)
                with errors(_ALONE_WHAT.format(name=name), engines):
                    result = method(*args, **kwargs)
                if result is not None:  # it ran on its own, and committed
                    deferred.committed_alone = True
                return result

            return alone

        def call(*args: Any, **kwargs: Any) -> Any:
            deferred.begin()
            return method(*args, **kwargs)

        return call


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
            see :mod:`firefly_orm.sql._engines`).
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
        self._deferred: _DeferredBegin | None = None
        self._done = False

    def _current_tx(self) -> Any:
        return self._tx if self._deferred is None else self._deferred.tx

    def _active_tx(self) -> Any:
        if self._done or self._current_tx() is None:
            raise RuntimeError("this unit of work is not active")
        return self._current_tx()

    def _nothing_to_commit(self) -> bool:
        """A deferred transaction that never began: mark the unit of work done, return True."""
        if self._deferred is None or self._deferred.tx is not None:
            return False
        if self._done:
            raise RuntimeError("this unit of work is not active")
        self._done = True
        return True

    def _needs_rollback(self) -> bool:
        """Whether the transaction is still open and must be rolled back (marks it done)."""
        tx = self._current_tx()
        if self._done or (tx is None and self._deferred is None):
            return False  # finished, or never entered
        self._done = True
        return tx is not None and bool(tx.is_active)

    @contextmanager
    def _ending(self, failed: bool) -> Iterator[None]:
        """Around the end of the transaction in ``__exit__``.

        In a caller's session our errors are mapped here (the store's runner
        maps nothing around the body, which is the caller's code), and after
        the body failed, a failed rollback of the savepoint is logged and the
        body's error stays the one raised.  A store-owned transaction's runner
        maps around the whole unit of work.
        """
        if self._external is None:
            yield
            return
        try:
            with self._errors("unit of work", self.engines):
                yield
        except Exception:
            if not failed:
                raise
            logger.warning("rolling back the savepoint after an error failed", exc_info=True)

    def _translate(self, session: Session) -> None:
        """Map our table to the store's schema in the caller's ``session``."""
        self._restore = push_translation(session, self.engines.schema, self.engines.vectors)

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

    ``opened``: the connection comes from the store's native async engine's
    sync facade (``AsyncEngine.sync_engine``) and is added to ``opened``
    instead of being closed here: the whole unit of work runs in one greenlet
    (:meth:`~firefly_orm.sql._runners.EngineRunner.arun_in_unit_of_work`), and
    the runner gives the connection back (after a failure, run to completion
    however often the task is cancelled, as ``AsyncConnection`` closes itself).
    """

    def __init__(
        self,
        engines: Engines,
        errors: ErrorMapper,
        session: Session | None = None,
        *,
        read_only: bool = False,
        opened: list[Connection] | None = None,
    ) -> None:
        super().__init__(engines, errors, session, read_only=read_only)
        self._opened = opened

    def _open(self, mode: Mode, *, held: bool = True) -> Connection:
        """A connection for ``mode`` (``held``: the thread's held one when there is one)."""
        if self._opened is None:
            return self.engines.connect(mode) if held else self.engines.sync_engine(mode).connect()
        conn = self.engines.async_engine(mode).sync_engine.connect()
        self._opened.append(conn)
        return conn

    def _release(self, conn: Connection) -> None:
        if self._opened is None:  # else the runner closes it
            self.engines.release(conn)

    entries: EntryRepository
    _target: Target
    _conn: Connection | None = None

    @property
    def target(self) -> Target:
        """The Session or Connection the work runs on (while entered).

        Statements run on it directly are inside the unit of work's
        transaction: asking for it begins a deferred one.
        """
        if self._deferred is not None:
            self._deferred.begin()
        return self._target

    def __enter__(self) -> Self:
        if self._external is not None:
            flush_callers(self._external)  # the caller's objects, before our SAVEPOINT
            self._target = self._external
            self._translate(self._external)
            try:
                with self._errors("unit of work", self.engines):
                    self._tx = self._external.begin_nested()
            except BaseException:
                self._undo_translation()
                raise
        else:
            level = (
                self.engines.deferred_write_level(is_async=self._opened is not None)
                if self._mode == "write"
                else None
            )
            if level is not None:
                self._target = self._conn = self._open("single", held=False)
                self._deferred = _DeferredBegin(self._conn, level, self._errors, self.engines)
                self.entries = self._deferred.entries(self._conn)
                return self
            self._target = self._conn = self._open(self._mode)
            try:
                self._tx = self._conn.begin()
            except BaseException:
                self._release(self._conn)
                raise
        self.entries = _entries_on(self._target, self._errors, self.engines)
        return self

    def commit(self) -> None:
        """Commit the transaction (release the savepoint in a caller's session)."""
        if self._nothing_to_commit():
            return
        tx = self._active_tx()
        if self._external is not None:
            flush_callers(self._external)  # what the caller added meanwhile is theirs
        with self._errors("commit", self.engines):
            tx.commit()
        self._done = True

    def rollback(self) -> None:
        """Roll the transaction (or the savepoint) back; no-op once finished."""
        tx = self._current_tx()
        if self._needs_rollback():
            tx.rollback()

    def __exit__(self, *exc_info: object) -> None:
        try:
            with self._ending(exc_info[0] is not None):
                self.rollback()
        finally:
            if self._conn is not None:
                self._release(self._conn)
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
                with self._errors("unit of work", self.engines):
                    self._tx = await self._external.begin_nested()
            except BaseException:
                self._undo_translation()
                raise
        else:
            level = (
                self.engines.deferred_write_level(is_async=True) if self._mode == "write" else None
            )
            if level is not None:
                conn = await self.engines.async_engine("single").connect()
                self._runner = self._conn = conn
                if conn.sync_connection is None:  # set by connect(); for the type checker
                    raise RuntimeError("the async connection has no sync facade")
                self._deferred = _DeferredBegin(
                    conn.sync_connection, level, self._errors, self.engines
                )
                return self
            self._runner = self._conn = await self.engines.async_target(self._mode).connect()
            try:
                self._tx = await self._conn.begin()
            except BaseException:
                await self._conn.close()
                raise
        return self

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(uow, *args)`` with a sync unit-of-work view of this transaction."""
        return await self._run(_with_view, fn, self._deferred, *args)

    async def run_on_target(
        self, fn: Callable[..., T], *args: Any, what: str = "unit of work"
    ) -> T:
        """Run ``fn(target, *args)`` on the sync Session/Connection of this transaction.

        ``what`` names the work in error messages (e.g. ``"save failed on ..."``).
        """
        if self._deferred is not None:  # fn's statements are not ours to count: begin
            return await self._run(_begun, self._deferred, fn, *args, what=what)
        return await self._run(fn, *args, what=what)

    async def _run(self, fn: Callable[..., T], *args: Any, what: str = "unit of work") -> T:
        if self._runner is None:
            raise RuntimeError("this unit of work is not active")
        with self._errors(what, self.engines):
            result: T = await self._runner.run_sync(fn, *args)
            return result

    async def commit(self) -> None:
        """Commit the transaction (release the savepoint in a caller's session)."""
        if self._nothing_to_commit():
            return
        tx = self._active_tx()
        if self._external is not None:
            await self._external.run_sync(flush_callers)
        with self._errors("commit", self.engines):
            if self._deferred is not None:  # begun on the sync facade: end it through it
                assert isinstance(self._conn, AsyncConnection)
                await self._conn.commit()
            else:
                await tx.commit()
        self._done = True

    async def rollback(self) -> None:
        """Roll the transaction (or the savepoint) back; no-op once finished."""
        tx = self._current_tx()
        if self._needs_rollback():
            if self._deferred is not None:
                assert isinstance(self._conn, AsyncConnection)
                await self._conn.rollback()
            else:
                await tx.rollback()

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            with self._ending(exc_info[0] is not None):
                await self.rollback()
        finally:
            if self._conn is not None:
                await self._conn.close()
            self._undo_translation()


def _begun(target: Target, deferred: _DeferredBegin, fn: Callable[..., T], *args: Any) -> T:
    deferred.begin()
    return fn(target, *args)


def _with_view(
    target: Target, fn: Callable[..., T], deferred: _DeferredBegin | None, *args: Any
) -> T:
    return fn(_SessionUnitOfWork(target, deferred), *args)


class _SessionUnitOfWork:
    """Sync view handed to ``run_sync`` callbacks; commit is the async owner's job."""

    def __init__(self, session: Target, deferred: _DeferredBegin | None = None) -> None:
        if deferred is not None and isinstance(session, Connection):
            self.entries: EntryRepository = deferred.entries(session)
        else:
            self.entries = _entries_on(session)

    def commit(self) -> None:
        raise RuntimeError("inside run_sync, commit with `await uow.commit()` afterwards")

    def rollback(self) -> None:
        raise RuntimeError("inside run_sync, roll back with `await uow.rollback()` afterwards")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
