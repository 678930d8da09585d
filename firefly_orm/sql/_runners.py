"""Runners: where a store's operations and units of work get their transaction.

A store hands every operation (a function of :mod:`firefly_orm.sql._ops`) to
its runner, which initialises the store on first use, maps errors and runs
the function on a transaction:

* :class:`EngineRunner` (a store's own): the store's operations are one
  statement each, and run on the ``"single"`` engines (see
  :mod:`firefly_orm.sql._engines`): no ``BEGIN``/``COMMIT`` on SQLite, nor on
  PostgreSQL at ``READ COMMITTED``; units of work get a Connection
  transaction (``BEGIN IMMEDIATE`` on SQLite for writes; read-only ones
  without ``BEGIN``/``ROLLBACK`` on PostgreSQL at ``READ COMMITTED``).  Reads
  and read-only units of work run on the engines its
  :class:`~firefly_orm.sql._replica.ReadRouter` chooses (a read replica's,
  unless this process wrote a moment ago).  Where async work runs on a sync
  engine in worker threads (:class:`~firefly_orm.sql._engines.ThreadedEngine`),
  an operation, or a whole unit of work run by :meth:`Runner.arun_in_unit_of_work`,
  is one hand-off to a thread.
* :class:`SessionRunner` (a store bound to a caller's session, and
  ``unit_of_work(session=...)``): a SAVEPOINT of the caller's Session or
  AsyncSession, so the caller's commit or rollback decides.  The caller's
  pending objects are flushed first, and their errors reach the caller
  unchanged (see :mod:`firefly_orm.sql._uow`); so do the errors of the
  caller's own statements in the body of a unit of work: only our calls'
  errors are mapped (:attr:`Runner.maps_body`).

Both give sync and async units of work; the async side awaits the same
functions through ``run_sync`` (or runs the sync path in a worker thread).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from typing import Any, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.util import greenlet_spawn

from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql._engines import Engines, ThreadedEngine
from firefly_orm.sql._replica import ReadRouter
from firefly_orm.sql._uow import AsyncSQLUnitOfWork, ErrorMapper, SQLUnitOfWork, run_ours

__all__ = ["EngineRunner", "Runner", "SessionRunner"]


T = TypeVar("T")


def _in_transaction(
    engine: Engine, fn: Callable[..., T], *args: Any, opened: list[Connection]
) -> T:
    """``fn(connection, *args)`` in a transaction of ``engine`` (see :func:`_in_one_greenlet`)."""
    conn = engine.connect()
    opened.append(conn)
    with conn.begin():
        return fn(conn, *args)


def _give_back(opened: list[Connection]) -> None:
    """Close the connections in ``opened`` (emptied first: none is closed twice)."""
    conns = list(opened)
    opened.clear()
    for conn in conns:
        conn.close()


async def _in_one_greenlet(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args, opened=...)``, sync code on a native async engine's sync facade, in one
    greenlet: its driver calls are awaited as ``AsyncConnection.run_sync`` awaits them,
    without a greenlet each for the connect, ``BEGIN``, the call, ``COMMIT`` and close.

    ``fn`` adds each connection it opens to ``opened``; they are given back in the
    greenlet when it succeeds (on psycopg a connection whose transaction ended has no round
    trip left to give it back; on a driver whose check-in is one, aiosqlite's
    rollback, a cancellation landing there makes SQLAlchemy log and replace that
    connection, and the operation's work stands).  When it raises, or its task is
    cancelled, what is left in ``opened`` is closed here and run to completion
    however often the task is cancelled meanwhile, as ``AsyncConnection`` closes
    itself.
    """
    opened: list[Connection] = []
    try:
        return await greenlet_spawn(_then_give_back, fn, opened, *args)
    finally:
        if opened:
            await _to_completion(greenlet_spawn(_give_back, opened))


def _then_give_back(fn: Callable[..., T], opened: list[Connection], *args: Any) -> T:
    """``fn(*args, opened=opened)``, then its connections given back (in the greenlet)."""
    result = fn(*args, opened=opened)
    _give_back(opened)
    return result


async def _to_completion(work: Coroutine[Any, Any, None]) -> None:
    """Await ``work`` to its end even if this task is cancelled meanwhile (again and
    again), then raise the cancellation, or ``work``'s error."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    task.result()


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

    #: Whether the errors of a unit of work's body are mapped too.  ``False``
    #: in a caller's session, where the body is the caller's code and its own
    #: statements' errors are the caller's; ours are mapped where they run (the
    #: repository calls, ``run_sync``, and the unit of work's begin, commit and
    #: rollback: :class:`~firefly_orm.sql._uow.SQLUnitOfWork`).
    maps_body = True

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
            with self._body_errors(what, uow.engines), uow:
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
            with self._body_errors(what, uow.engines):
                async with uow:
                    yield uow
        finally:
            if not read_only:
                self.router.wrote()

    def _body_errors(self, what: str, engines: Engines) -> AbstractContextManager[None]:
        """What maps the errors of a unit of work as a whole (see :attr:`maps_body`)."""
        return self.errors(what, engines) if self.maps_body else nullcontext()

    def run_in_unit_of_work(
        self,
        work: Callable[[UnitOfWork], T],
        *,
        read_only: bool = False,
        commit: bool = False,
        what: str = "unit of work",
    ) -> T:
        """``work(uow)`` in one unit of work, committed after it when ``commit``."""
        with self.unit_of_work(read_only=read_only, what=what) as uow:
            result = work(uow)
            if commit:
                uow.commit()
        return result

    async def arun_in_unit_of_work(
        self,
        work: Callable[[UnitOfWork], T],
        *,
        read_only: bool = False,
        commit: bool = False,
        what: str = "unit of work",
    ) -> T:
        """Async form of :meth:`run_in_unit_of_work` (``work`` stays sync: ``run_sync``)."""
        async with self.async_unit_of_work(read_only=read_only, what=what) as uow:
            result: T = await uow.run_sync(work)
            if commit:
                await uow.commit()
        return result


class EngineRunner(Runner):
    """A store's own transactions, on its engines.

    :meth:`call` runs one statement on the ``"single"`` engines: without
    ``BEGIN``/``COMMIT`` on SQLite, and on PostgreSQL at ``READ COMMITTED``
    (the statement is atomic on its own); writes on the primary, reads on the
    engines the router chooses.  Units of work: a Connection transaction
    (``BEGIN IMMEDIATE`` on SQLite for writes).  On a
    :class:`~firefly_orm.sql._engines.ThreadedEngine` an operation, and a unit
    of work run by :meth:`arun_in_unit_of_work`, is one worker-thread call.
    """

    def _engines_for(self, read_only: bool, consistent: bool = False) -> Engines:
        return self.router.for_read(consistent=consistent) if read_only else self.engines

    def call(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        self.ensure()
        engines = self.engines if write else self._engines_for(True)
        try:
            with self.errors(what, engines):
                return engines.run("single", fn, *args)
        finally:
            if write:
                self.router.wrote()

    async def acall(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        await self.async_ensure()
        engines = self.engines if write else self._engines_for(True)
        try:
            with self.errors(what, engines):
                target = engines.async_target("single")
                if isinstance(target, ThreadedEngine):
                    return await target.run(engines.run, "single", fn, *args)
                return await _in_one_greenlet(_in_transaction, target.sync_engine, fn, *args)
        finally:
            if write:
                self.router.wrote()

    async def arun_in_unit_of_work(
        self,
        work: Callable[[UnitOfWork], T],
        *,
        read_only: bool = False,
        commit: bool = False,
        what: str = "unit of work",
    ) -> T:
        """Async form of :meth:`run_in_unit_of_work`: one worker-thread call on a
        ThreadedEngine, one greenlet on a native async engine."""
        await self.async_ensure()  # first: initialising marks a write (reads go to the primary)
        engines = self._engines_for(read_only)
        target = engines.async_target("read" if read_only else "write")
        if isinstance(target, ThreadedEngine):
            return await target.run(self._unit_on, engines, work, read_only, commit, what)
        with self.errors(what, engines):  # the closing too
            return await _in_one_greenlet(self._unit_on, engines, work, read_only, commit, what)

    def _unit_on(
        self,
        engines: Engines,
        work: Callable[[UnitOfWork], T],
        read_only: bool,
        commit: bool,
        what: str,
        opened: list[Connection] | None = None,
    ) -> T:
        """:meth:`run_in_unit_of_work` on ``engines`` (chosen before the hand-off); with
        ``opened``, on their native async engines' sync facades (in one greenlet)."""
        uow = SQLUnitOfWork(engines, self.errors, read_only=read_only, opened=opened)
        try:
            with self.errors(what, engines), uow:
                result = work(uow)
                if commit:
                    uow.commit()
                return result
        finally:
            if not read_only:
                self.router.wrote()

    def _new_uow(self, read_only: bool, consistent: bool) -> SQLUnitOfWork:
        engines = self._engines_for(read_only, consistent)
        return SQLUnitOfWork(engines, self.errors, read_only=read_only)

    def _new_async_uow(self, read_only: bool, consistent: bool) -> AsyncSQLUnitOfWork:
        engines = self._engines_for(read_only, consistent)
        return AsyncSQLUnitOfWork(engines, self.errors, read_only=read_only)


class SessionRunner(Runner):
    """Transactions that are SAVEPOINTs of a caller's Session (or AsyncSession).

    Nothing is committed until the caller commits.  A sync ``Session`` serves
    the sync methods, an ``AsyncSession`` the async ones; the other kind of
    call raises :class:`TypeError` before anything runs, with a message that
    says what to use instead.  ``read_only``
    changes nothing: the caller's transaction is what it is.
    """

    maps_body = False

    def __init__(self, session: Session | AsyncSession, store_runner: Runner) -> None:
        super().__init__(
            store_runner.engines,
            store_runner.errors,
            self._ensure_sync,
            self._ensure_async,
            store_runner.router,
        )
        self.session = session
        self._store_ensure = store_runner.ensure
        self._store_async_ensure = store_runner.async_ensure

    def _ensure_sync(self) -> None:
        """The session's kind is checked first, then the store initialised."""
        if not isinstance(self.session, Session):
            raise _wrong_session_kind(self.session, wanted_async=False)
        self._store_ensure()

    async def _ensure_async(self) -> None:
        if not isinstance(self.session, AsyncSession):
            raise _wrong_session_kind(self.session, wanted_async=True)
        await self._store_async_ensure()

    def call(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        with self.unit_of_work(what=what) as uow:
            with self.errors(what, uow.engines):
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
            raise _wrong_session_kind(self.session, wanted_async=False)
        return SQLUnitOfWork(self.engines, self.errors, self.session)

    def _new_async_uow(self, read_only: bool, consistent: bool) -> AsyncSQLUnitOfWork:
        if not isinstance(self.session, AsyncSession):
            raise _wrong_session_kind(self.session, wanted_async=True)
        return AsyncSQLUnitOfWork(self.engines, self.errors, self.session)


def _wrong_session_kind(session: object, *, wanted_async: bool) -> TypeError:
    """The error for a call of the wrong kind on a store bound to a caller's session.

    A sync ``Session`` cannot run the ``async_*`` methods (an ``async def``
    route handing its sync session to the memory is the usual way there), and
    an ``AsyncSession`` cannot run the sync ones.  The message names what
    works instead: the session of the other kind, the other methods, or the
    unbound store (the ``SQLAlchemyStore`` itself, on its own transactions).
    """
    kind = f"{type(session).__module__}.{type(session).__qualname__}"
    if wanted_async:
        return TypeError(
            f"this store is bound to a sync Session ({kind}), which cannot run the "
            "async_* methods or async_unit_of_work(). In async code (an `async def` "
            "route): bind an AsyncSession instead (store.bind_session(async_session), "
            "store.async_unit_of_work(session=async_session)) and await the async_* "
            "methods, or await the async_* methods of the unbound store (the "
            "SQLAlchemyStore itself, not store.bind_session(...): its own transaction, "
            "not yours). To keep the sync Session, call the sync methods (add_turn, not "
            "async_add_turn) from sync code (a plain `def` route)."
        )
    return TypeError(
        f"this store is bound to an AsyncSession ({kind}), which cannot run the sync "
        "methods or unit_of_work(): await the async_* methods instead (await "
        "memory.async_add_turn(...), store.async_unit_of_work(session=async_session)). "
        "In sync code (a plain `def` route): bind a sync Session "
        "(store.bind_session(session)), or use the sync methods of the unbound store "
        "(the SQLAlchemyStore itself: its own transaction, not yours)."
    )
