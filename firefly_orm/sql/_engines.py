"""The engines of one store: sync and async, for reads and for writes, and their disposal.

:class:`Engines` builds each engine on first use (or wraps the caller's),
applies the store's schema with ``schema_translate_map`` and caches the
variants the store runs on:

* ``"default"``: :attr:`SQLAlchemyStore.engine` / ``async_engine`` themselves;
  read-only units of work and the schema check.
* ``"write"``: write transactions; on SQLite they start with
  ``BEGIN IMMEDIATE`` (the write lock up front instead of failing to upgrade a
  read lock later).  On PostgreSQL at ``READ COMMITTED`` a store's write unit
  of work starts on the ``"single"`` connection instead and begins its
  transaction at the first statement that needs one
  (:meth:`Engines.deferred_write_level`), so a one-statement ``add_turn`` is
  one round trip.
* ``"single"``: operations that are one statement (the store's ``save``,
  ``load``, ``load_by_key``, ``delete``...): no ``BEGIN``/``COMMIT`` at all,
  the statement is atomic on its own.  SQLite: no ``BEGIN`` (the driver is in
  autocommit; a write statement takes the write lock as it starts, waiting
  ``busy_timeout`` like ``BEGIN IMMEDIATE``).  PostgreSQL: the connection in
  autocommit, when transactions run at ``READ COMMITTED`` (the default): one
  round trip instead of three, and no ``ROLLBACK``, which would make psycopg
  drop its prepared statements.
* ``"read"``: read-only units of work.  SQLite: a ``BEGIN`` (one snapshot for
  all their statements).  PostgreSQL at ``READ COMMITTED``: autocommit, like
  ``"single"``: there each statement of a transaction takes a snapshot of its
  own anyway, so ``BEGIN``/``ROLLBACK`` would add two round trips and nothing
  else.  At a stricter isolation level (the caller's engine, or the server's
  ``default_transaction_isolation``) both modes keep their transaction.

On a PostgreSQL engine built from a URL (psycopg, no ``isolation_level`` of
the caller's) the pool's connections stay in autocommit and a transaction
begins with an explicit ``BEGIN`` (:func:`_install_postgresql_hooks`): the
autocommit variants cost no switch of psycopg's ``autocommit`` per checkout.
A caller's engine keeps SQLAlchemy's own switching.

Engines built from a URL are the store's and are disposed by
:meth:`Engines.close`; engines the caller passes in are never disposed.  Every
SQLite engine, built or given, gets the listener of
:mod:`firefly_orm.sql._interrupted` (a cancelled statement's cursor closed
before its connection).

No hidden pools: an engine is built only from a URL the caller gave (``url``
or ``async_url``), never from the URL of a caller's engine.  A store given only
a sync ``engine`` runs its async work on that engine, in worker threads
(:class:`ThreadedEngine`, returned by :meth:`Engines.async_target`); a store
given only an ``async_engine`` has no sync engine, and its sync work raises
:class:`~firefly_orm.errors.MissingEngineError` naming ``engine=``.  (The
other way round is not possible: a caller's async pool is bound to the
caller's event loop, and sync code would have to drive it from another one.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, cast, get_args

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from firefly_orm.bridges._threads import finish_from_sync, pause
from firefly_orm.entry._json import load_json
from firefly_orm.errors import MissingEngineError, MissingExtraError, redact_url, url_secrets
from firefly_orm.sql._held import HeldConnections
from firefly_orm.sql._interrupted import close_interrupted_cursors
from firefly_orm.sql._threaded import ThreadedConnection, ThreadedEngine
from firefly_orm.sql._vectors import VECTORS_OPTION, install_vector_hooks, vector_engine_options

__all__ = [
    "NO_BEGIN_OPTION",
    "Engines",
    "Mode",
    "ThreadedConnection",
    "ThreadedEngine",
    "enable_sqlite_savepoints",
    "is_memory_sqlite",
]

logger = logging.getLogger("firefly_orm")

T = TypeVar("T")
P = ParamSpec("P")

#: Which variant of an engine: see the module docstring.
Mode = Literal["default", "read", "single", "write"]

_WRITE_OPTION = "firefly_orm_write"
#: Run this connection's statements in autocommit (no BEGIN): on SQLite, and on
#: a PostgreSQL pool kept in autocommit (:data:`_AUTOCOMMIT_POOL`).  Used only for
#: single-statement operations (atomic by themselves) and, on PostgreSQL at
#: ``READ COMMITTED``, reads (each statement takes its own snapshot anyway).
NO_BEGIN_OPTION = "firefly_orm_no_begin"
#: PostgreSQL: the execution options of a connection without transactions.
_AUTOCOMMIT = {"isolation_level": "AUTOCOMMIT"}
#: PostgreSQL, on an engine built here: its pool's connections stay in autocommit
#: and transactions begin with an explicit ``BEGIN`` (:func:`_install_postgresql_hooks`).
_AUTOCOMMIT_POOL = "firefly_orm_autocommit_pool"
#: Key in a pooled connection's ``info``: the transaction being begun sends ``BEGIN``.
_SEND_BEGIN = "firefly_orm_send_begin"
#: ``Engines.deferred_write_level`` not worked out yet.
_UNKNOWN = object()
#: Isolation levels at which a PostgreSQL transaction gives each statement a
#: snapshot of its own (READ UNCOMMITTED is READ COMMITTED there): a statement
#: in autocommit sees what it would see inside one.
_PER_STATEMENT_SNAPSHOTS = frozenset({"READ COMMITTED", "READ UNCOMMITTED", "AUTOCOMMIT"})


def enable_sqlite_savepoints(engine: Engine | AsyncEngine) -> None:
    """Let SQLAlchemy control transactions on a SQLite engine (pysqlite or aiosqlite).

    The sqlite3 driver's own transaction handling breaks SAVEPOINTs; this applies
    SQLAlchemy's documented recipe (driver autocommit off, ``BEGIN`` emitted by
    SQLAlchemy).  Call it on *your* SQLite engine before joining our units of
    work to your session (``store.unit_of_work(session=...)``).  Stores do it
    themselves for the engines they create.
    """
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    @event.listens_for(sync_engine, "connect")
    def _driver_autocommit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get(NO_BEGIN_OPTION, False):
            return
        write = options.get(_WRITE_OPTION, False)
        # Straight to the DBAPI cursor: the statement needs no SQLAlchemy
        # execution context, and this runs once per transaction.
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        finally:
            cursor.close()


#: Milliseconds a store's SQLite connection waits for another connection's locks.
SQLITE_BUSY_TIMEOUT_MS = 30000
#: SQLite's primary result codes of a lock held by another connection.
_SQLITE_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED


def _is_sqlite_busy(exc: Exception) -> bool:
    """Whether ``exc`` (sqlite3's, or aiosqlite's, which is the same) is SQLite's busy/locked."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_BUSY_CODES
    return "locked" in str(exc).lower()


def _switch_to_wal(cursor: Any, timeout_ms: int) -> None:
    """``PRAGMA journal_mode=WAL``, retried with backoff for up to ``timeout_ms``.

    SQLite does not wait in its busy handler for this switch: it reads the
    file's header in a read transaction, then upgrades it to a write one to
    mark the file as WAL, and a busy upgrade of a read transaction fails at
    once (waiting could deadlock).  So while another connection holds the
    write lock of a file still in rollback-journal mode (a fresh file being
    migrated by ``alembic upgrade head``'s own engine, say) the switch reports
    ``database is locked`` whatever ``busy_timeout`` says: we wait for that
    lock here instead, as the busy handler would.  A file already in WAL mode
    needs no lock (SQLite keeps the mode; the PRAGMA only reports it).
    """
    deadline = time.monotonic() + timeout_ms / 1000
    delay, tries = 0.001, 0
    while True:
        tries += 1
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.fetchall()
        except Exception as exc:
            if not _is_sqlite_busy(exc) or time.monotonic() + delay > deadline:
                raise
            pause(delay)  # on an aiosqlite engine's loop, the loop runs meanwhile
            delay = min(delay * 2, 0.1)
            continue
        if tries > 1:
            logger.debug("SQLite journal_mode=WAL switched after %d tries (lock held)", tries)
        return


def _install_sqlite_hooks(sync_engine: Engine) -> None:
    """busy_timeout + WAL + synchronous=FULL per connection; SQLAlchemy-controlled BEGIN."""
    is_memory = sync_engine.url.database in (None, "", ":memory:")

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            # The busy timeout first: the WAL switch waits for it too.
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            if not is_memory:
                _switch_to_wal(cursor, SQLITE_BUSY_TIMEOUT_MS)
            cursor.execute("PRAGMA synchronous=FULL")
        finally:
            cursor.close()

    enable_sqlite_savepoints(sync_engine)


def _install_postgresql_hooks(sync_engine: Engine) -> None:
    """Keep the pool's psycopg connections in autocommit; ``BEGIN`` sent for transactions.

    SQLAlchemy runs a variant with ``isolation_level="AUTOCOMMIT"`` by
    switching psycopg's ``autocommit`` on at every checkout and back at every
    check-in: about 30 us an operation sync, and four more awaits async.  On an
    engine the store built, the connections are in autocommit from the start
    instead, and a transaction begins with an explicit ``BEGIN`` (at the
    server's default isolation level, as psycopg's own would), except on the
    variants marked ``NO_BEGIN_OPTION`` (one statement, atomic alone).  psycopg
    commits or rolls back an explicit transaction as its own, and does nothing
    when none is open.  A connection a caller switched to an isolation level of
    its own begins as psycopg does, and is put back in autocommit at its next
    checkout.
    """

    @event.listens_for(sync_engine, "connect")
    def _autocommit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.autocommit = True

    @event.listens_for(sync_engine, "checkout")
    def _still_autocommit(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if not dbapi_connection.autocommit:  # reset by SQLAlchemy after a caller's level
            dbapi_connection.autocommit = True

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        # One statement at a time, or a caller asking for autocommit: no BEGIN.
        conn.connection.info[_SEND_BEGIN] = not (
            options.get(NO_BEGIN_OPTION, False) or options.get("isolation_level") == "AUTOCOMMIT"
        )

    plain_begin = sync_engine.dialect.do_begin

    def do_begin(dbapi_connection: Any) -> None:
        # Connection.begin() calls this right after the "begin" event, inside
        # SQLAlchemy's error handling: a failed BEGIN becomes a DBAPIError, and a
        # lost connection is invalidated, as for any statement.  A connection a
        # caller switched to an isolation level is out of autocommit: psycopg
        # begins on its own.
        send = dbapi_connection.info.pop(_SEND_BEGIN, False)
        if not send or not dbapi_connection.dbapi_connection.autocommit:
            plain_begin(dbapi_connection)
            return
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("BEGIN")
        finally:
            cursor.close()

    # The dialect instance is this engine's own (and its variants').
    sync_engine.dialect.do_begin = do_begin  # type: ignore[method-assign]


def _sets_isolation(engine_kwargs: dict[str, Any]) -> bool:
    """Whether ``create_engine`` arguments choose an isolation level."""
    options = engine_kwargs.get("execution_options") or {}
    return "isolation_level" in engine_kwargs or "isolation_level" in options


def is_memory_sqlite(url: URL) -> bool:
    """Whether ``url`` names an in-memory SQLite database (one per connection)."""
    database = url.database or ""
    return database in ("", ":memory:") or url.query.get("mode") == "memory"


def _sqlite_mode_options(mode: Mode) -> dict[str, Any]:
    """SQLite's execution options of ``mode`` (``BEGIN IMMEDIATE`` for writes, none alone)."""
    if mode == "write":
        return {_WRITE_OPTION: True}
    return {NO_BEGIN_OPTION: True} if mode == "single" else {}


#: SQLite: the execution options of each mode on a held connection, every
#: option named, so a mode never keeps the options of the one before it.
_HELD_OPTIONS: dict[Mode, dict[str, Any]] = {
    mode: {_WRITE_OPTION: False, NO_BEGIN_OPTION: False, **_sqlite_mode_options(mode)}
    for mode in get_args(Mode)
}


def _mode_options(mode: Mode, engine: Engine | AsyncEngine) -> dict[str, Any] | None:
    """The execution options of ``mode`` over ``engine`` (the default variant).

    ``{}``: the default engine itself serves ``mode``.  ``None``: not known yet
    (a PostgreSQL engine learns the server's isolation level on its first
    connection; until then the default engine serves, in a transaction).
    """
    dialect = engine.dialect.name
    if mode == "write" or dialect == "sqlite":
        return _sqlite_mode_options(mode)  # the write option is every dialect's
    if mode == "default" or dialect != "postgresql":
        return {}
    level = _isolation_level(engine)
    if level is None:
        return None
    if level not in _PER_STATEMENT_SNAPSHOTS:
        return {}
    if engine.get_execution_options().get(_AUTOCOMMIT_POOL, False):
        return {NO_BEGIN_OPTION: True}  # the connections are in autocommit already
    return dict(_AUTOCOMMIT)


def _isolation_level(engine: Engine | AsyncEngine) -> str | None:
    """The isolation level ``engine``'s transactions run at (``None``: not known yet).

    The engine's own ``isolation_level`` option, else the server's default,
    which the dialect learns on the first connection.
    """
    level = engine.get_execution_options().get("isolation_level")
    if level is None:
        level = getattr(engine.dialect, "default_isolation_level", None)
    return cast(str | None, level)


def _async_url_for(url: URL) -> URL:
    backend, driver = url.get_backend_name(), url.get_driver_name()
    if backend == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    if backend == "postgresql":
        if driver in ("psycopg", "asyncpg", "psycopg_async"):
            return url
        return url.set(drivername="postgresql+psycopg")
    return url


def _no_defaults(url: URL) -> dict[str, Any]:
    return {}


async def _dispose(engines: list[AsyncEngine]) -> None:
    for engine in engines:
        await engine.dispose()


#: What the store's async work runs on: a native async engine, or a caller's sync one.
AsyncTarget = AsyncEngine | ThreadedEngine


class Engines:
    """The sync and async engines of one store, each variant built once.

    Args:
        url: URL of the engines to build (normalised); ``None`` with a given engine.
        engine: The caller's sync engine (never disposed here).
        async_engine: The caller's async engine (never disposed here).
        async_url: URL of the async engine when it differs from ``url``.
        schema: Schema our table is mapped to (``None``: the default one).
        engine_kwargs: Extra ``create_engine`` arguments; they win over ``defaults``.
        defaults: Per-backend ``create_engine`` arguments for a URL (the presets').
        async_in_threads: For engines built from ``url`` (no ``async_url``):
            run async work on the sync engine in worker threads
            (:class:`ThreadedEngine`) instead of building a native async one.

    :attr:`vectors` (set by a store built with ``vectors=True``) marks every
    engine with :data:`~firefly_orm.sql._vectors.VECTORS_OPTION` and builds
    engines for vectors (:func:`~firefly_orm.sql._vectors.install_vector_hooks`).
    """

    def __init__(
        self,
        url: URL | None,
        *,
        engine: Engine | None = None,
        async_engine: AsyncEngine | None = None,
        async_url: URL | None = None,
        schema: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        defaults: Callable[[URL], dict[str, Any]] | None = None,
        async_in_threads: bool = False,
    ) -> None:
        self.url = url
        self._url_async_in_threads = async_in_threads
        self.async_url = async_url
        self.schema = schema
        self._given: dict[bool, Engine | AsyncEngine | None] = {False: engine, True: async_engine}
        self._engine_kwargs = dict(engine_kwargs or {})
        self._defaults = defaults or _no_defaults
        self._cache: dict[tuple[bool, Mode], Engine | AsyncTarget] = {}
        self._deferred_levels: dict[bool, object] = {}
        self._owned: list[Engine | AsyncEngine] = []
        self._lock = threading.RLock()
        #: A SQLite file engine built here: its connections held per thread.
        self._held: HeldConnections | None = None
        #: Which of the PostgreSQL engines built here (sync: False, async: True)
        #: keep their connections in autocommit (:func:`_install_postgresql_hooks`).
        self._autocommit_pools: set[bool] = set()
        self.vectors = False

    # ------------------------------------------------------------------ what we connect to
    def _given_engine(self) -> Engine | AsyncEngine | None:
        sync = self._given[False]
        return sync if sync is not None else self._given[True]

    def _configured_url(self) -> URL:
        if self.url is not None:
            return self.url
        given = self._given_engine()
        assert given is not None
        return given.url

    @property
    def dialect_name(self) -> str:
        """``"sqlite"``, ``"postgresql"``, ... (from the given engine or the URL)."""
        given = self._given_engine()
        if given is not None:
            return given.dialect.name
        return self._configured_url().get_backend_name()

    def display_url(self) -> str:
        """The URL we connect to, secrets hidden (for messages and reprs)."""
        return redact_url(self._configured_url())

    def secrets(self) -> tuple[str, ...]:
        """The secrets in the URL we connect to (to scrub them from driver messages)."""
        return url_secrets(self._configured_url())

    # ------------------------------------------------------------------ engines
    def sync_engine(self, mode: Mode = "default") -> Engine:
        """The sync engine for ``mode`` (built on first use)."""
        engine = self._cache.get((False, mode))
        return cast(Engine, engine if engine is not None else self._build(False, mode))

    def connect(self, mode: Mode) -> Connection:
        """A sync connection for ``mode``; give it back with :meth:`release`.

        On a SQLite file engine built here, the thread's held connection
        (:mod:`firefly_orm.sql._held`) unless it is in use; otherwise one
        checked out of the mode's engine.
        """
        held = self._held
        if held is not None:
            conn = held.take(_HELD_OPTIONS[mode])
            if conn is not None:
                return conn
        return self.sync_engine(mode).connect()

    def release(self, conn: Connection) -> None:
        """Give back a connection from :meth:`connect` (its transaction ended)."""
        held = self._held
        if held is None or not held.give_back(conn):
            conn.close()

    def run(
        self,
        mode: Mode,
        fn: Callable[Concatenate[Connection, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(connection, *args, **kwargs)`` on a connection for ``mode``, in its transaction.

        Committed when ``fn`` returns, rolled back when it raises.  On the
        ``"single"`` variants there is no transaction to end: the statement was
        its own (a ``COMMIT`` at ``REPEATABLE READ`` and above, which, unlike a
        ``ROLLBACK``, keeps psycopg's prepared statements).
        """
        conn = self.connect(mode)
        try:
            with conn.begin():
                return fn(conn, *args, **kwargs)
        finally:
            self.release(conn)

    def async_target(self, mode: Mode = "default") -> AsyncTarget:
        """What async work for ``mode`` runs on (built on first use).

        The native async engine; or, for a store given only a sync engine, a
        :class:`ThreadedEngine` over that engine's ``mode`` variant.
        """
        engine = self._cache.get((True, mode))
        return cast(AsyncTarget, engine if engine is not None else self._build(True, mode))

    def async_engine(self, mode: Mode = "default") -> AsyncEngine:
        """The native async engine for ``mode`` (built on first use).

        Raises:
            MissingEngineError: Only a sync engine was given (async work runs on
                it in worker threads; there is no async engine).
        """
        engine = self.async_target(mode)
        if isinstance(engine, ThreadedEngine):
            whose = "its own sync engine" if self.url is not None else "the sync engine (engine=)"
            raise MissingEngineError(
                f"this store runs its async_* methods on {whose} in worker threads, one "
                "per operation, and has no AsyncEngine; pass async_url= (or async_engine=) "
                "for a native async one"
            )
        return engine

    def deferred_write_level(self, is_async: bool = False) -> str | None:
        """The isolation level a write unit of work begins at when it needs a transaction.

        ``None``: write units of work begin at once (SQLite, a threaded async
        target, or a PostgreSQL engine whose ``"single"`` variant is not in
        autocommit: a stricter isolation level, or not known yet).  Otherwise
        (PostgreSQL at ``READ COMMITTED``) they start on the ``"single"``
        connection, and a one-statement write run first commits on its own
        (see :class:`~firefly_orm.sql._uow.SQLUnitOfWork`).
        """
        known = self._deferred_levels.get(is_async, _UNKNOWN)
        if known is not _UNKNOWN:
            return cast(str | None, known)
        if self.dialect_name != "postgresql" or (is_async and self.async_in_threads):
            self._deferred_levels[is_async] = None
            return None
        single = self.async_target("single") if is_async else self.sync_engine("single")
        if (is_async, "single") not in self._cache:
            return None  # the server's level is not known before the first connection
        level: str | None = None
        options = cast(Engine | AsyncEngine, single).get_execution_options()
        if options.get(NO_BEGIN_OPTION, False) or options.get("isolation_level") == "AUTOCOMMIT":
            default = self.async_target("default") if is_async else self.sync_engine("default")
            level = _isolation_level(cast(Engine | AsyncEngine, default))
            if level == "AUTOCOMMIT":  # the caller's engine is itself in autocommit
                level = None
        self._deferred_levels[is_async] = level
        return level

    @property
    def async_in_threads(self) -> bool:
        """Whether async work runs on the sync engine in worker threads (:class:`ThreadedEngine`).

        True for a store given only a sync ``engine=``, and for one built from
        a URL whose preset chose threads (no ``async_url=``); never with an
        ``async_engine=`` or ``async_url=``.
        """
        if self._given[True] is not None or self.async_url is not None:
            return False
        if self.url is None:
            return self._given[False] is not None
        return self._url_async_in_threads

    def _build(self, is_async: bool, mode: Mode) -> Engine | AsyncTarget:
        with self._lock:
            engine = self._cache.get((is_async, mode))
            if engine is not None:
                return engine
            if is_async and self.async_in_threads:
                engine = ThreadedEngine(self.sync_engine(mode))
                known = (False, mode) in self._cache
                if mode == "default":
                    logger.debug(
                        "async work on %s runs on the sync engine, in worker threads",
                        self.display_url(),
                    )
            elif mode == "default":
                engine, known = self._translated(self._base(is_async), is_async), True
                if self._holds_connections(is_async):
                    self._held = HeldConnections(cast(Engine, engine))
            else:
                default = cast(Engine | AsyncEngine, self._build(is_async, "default"))
                options = _mode_options(mode, default)
                known = options is not None
                engine = default.execution_options(**options) if options else default
            if known:
                self._cache[is_async, mode] = engine
            return engine

    def _holds_connections(self, is_async: bool) -> bool:
        """Whether the sync engine is a SQLite file one built here (held per thread)."""
        if is_async or self._given[False] is not None or self.url is None:
            return False
        return self.url.get_backend_name() == "sqlite" and not is_memory_sqlite(self.url)

    def _base(self, is_async: bool) -> Engine | AsyncEngine:
        given = self._given[is_async]
        base = given if given is not None else self._built(is_async)
        if base.dialect.name == "sqlite":  # the caller's engine too
            close_interrupted_cursors(base.sync_engine if isinstance(base, AsyncEngine) else base)
        return base

    def _built(self, is_async: bool) -> Engine | AsyncEngine:
        """An engine built from the caller's URL, with the store's hooks."""
        if not is_async and self.url is None:
            raise MissingEngineError(
                "this store was given only an async engine (async_engine=), so it has no sync "
                "engine for sync methods and builds no second connection pool from your "
                "engine's URL: use the async_* methods, or pass engine= (a sync engine on the "
                "same database) as well"
            )
        created = self._create(self._url_for(is_async), is_async)
        sync_engine = created.sync_engine if isinstance(created, AsyncEngine) else created
        if created.dialect.name == "sqlite":
            _install_sqlite_hooks(sync_engine)
        elif created.dialect.driver in ("psycopg", "psycopg_async") and not _sets_isolation(
            self._engine_kwargs
        ):
            _install_postgresql_hooks(sync_engine)
            self._autocommit_pools.add(is_async)
        if self.vectors:
            install_vector_hooks(sync_engine)
        self._owned.append(created)
        return created

    def _url_for(self, is_async: bool) -> URL:
        """The URL to build an engine from: only ever one the caller gave."""
        if is_async:
            return _async_url_for(self.async_url or self._configured_url())
        assert self.url is not None
        return self.url

    def _translated(self, engine: Engine | AsyncEngine, is_async: bool) -> Engine | AsyncEngine:
        options: dict[str, Any] = {}
        if is_async in self._autocommit_pools:
            options[_AUTOCOMMIT_POOL] = True
        if self.schema is not None:
            options["schema_translate_map"] = {None: self.schema}
        if self.vectors:
            options[VECTORS_OPTION] = True
        return engine.execution_options(**options) if options else engine

    def _create(self, url: URL, is_async: bool) -> Engine | AsyncEngine:
        # The caller's engine_kwargs win over the preset's defaults.
        defaults = self._defaults(url)
        if url.get_backend_name() == "postgresql":
            # psycopg decodes JSONB with this (the faster parse of the same values).
            defaults = {"json_deserializer": load_json, **defaults}
        kwargs = {**defaults, **self._engine_kwargs}
        if self.vectors:
            kwargs = vector_engine_options(url, is_async, kwargs)
        if "connect_args" in defaults or "connect_args" in self._engine_kwargs:
            kwargs["connect_args"] = {
                **defaults.get("connect_args", {}),
                **self._engine_kwargs.get("connect_args", {}),
            }
        try:
            if is_async:
                return create_async_engine(url, **kwargs)
            return sa.create_engine(url, **kwargs)
        except ImportError as exc:
            backend = url.get_backend_name()
            raise MissingExtraError(
                f"{backend} with driver {url.get_driver_name()}",
                "postgres" if backend == "postgresql" else "sqlite",
                exc.name,
            ) from exc

    # ------------------------------------------------------------------ disposal
    def _release(self) -> list[Engine | AsyncEngine]:
        """Forget every cached engine; return the owned ones (to dispose)."""
        with self._lock:
            owned, self._owned = self._owned, []
            held, self._held = self._held, None
            self._autocommit_pools.clear()
            self._deferred_levels.clear()
            self._cache.clear()
        if held is not None:
            held.close()
        return owned

    def close(self) -> None:
        """Dispose the engines built here; the next use builds new ones.

        Async engines need an event loop to close their connections: without a
        running loop one is run for it; inside one, their disposal is scheduled
        on it (prefer ``await`` :meth:`aclose` there).  Both through
        :func:`~firefly_orm.bridges._threads.finish_from_sync`, which says why
        a short private loop is the right one.
        """
        owned = self._release()
        pending = [engine for engine in owned if isinstance(engine, AsyncEngine)]
        for engine in owned:
            if isinstance(engine, Engine):
                engine.dispose()
        if not pending:
            return
        finish_from_sync(_dispose(pending))

    async def aclose(self) -> None:
        """Async form of :meth:`close` (awaits the async engines' disposal)."""
        owned = self._release()
        for engine in owned:
            if isinstance(engine, Engine):
                engine.dispose()
        await _dispose([engine for engine in owned if isinstance(engine, AsyncEngine)])
