"""One SQLAlchemy store for SQLite and PostgreSQL, sync and async.

:class:`SQLAlchemyStore` runs every operation as a plain function over a sync
:class:`~sqlalchemy.engine.Connection` or :class:`~sqlalchemy.orm.Session` (the
``_op_*`` functions below).  Sync methods call them inside a Connection
transaction; the ``async_*`` twins await the very same functions through
``AsyncConnection.run_sync`` on SQLAlchemy's native async engine (aiosqlite,
psycopg async) — no thread hop, one implementation.  A Session is used only to
join a caller's transaction (``unit_of_work(session=...)``).

The schema name is applied per store with ``schema_translate_map``; the table
definition has no schema, so stores with different schemas share one process.

Ownership: engines the store builds from a URL are disposed by :meth:`close`;
engines you pass in (``engine=``, ``async_engine=``) are never disposed.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from firefly_orm import migrate
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    utcnow,
    validate_entry,
    validate_key,
    validate_namespace,
)
from firefly_orm.errors import (
    ConcurrencyError,
    DatabaseConnectionError,
    EntryValidationError,
    FireflyOrmError,
    MissingExtraError,
    StoreError,
    redact_url,
)

__all__ = [
    "PostgreSQLStore",
    "SQLAlchemyStore",
    "SQLiteStore",
    "SessionBoundStore",
    "enable_sqlite_savepoints",
]

logger = logging.getLogger("firefly_orm")
T = TypeVar("T")

TABLE: sa.Table = MemoryEntry.__table__  # type: ignore[attr-defined]
_C = TABLE.c
_COLUMNS = (
    _C.entry_id,
    _C.namespace,
    _C.scope,
    _C.key,
    _C.content,
    _C["metadata"],
    _C.created_at,
    _C.expires_at,
    _C.importance,
    _C.version,
)
_WRITE_OPTION = "firefly_orm_write"
#: On SQLite: run this connection's statements in autocommit (no BEGIN).  Used
#: only for single-statement reads, which SQLite makes atomic by themselves.
_AUTOCOMMIT_READ_OPTION = "firefly_orm_autocommit_read"
#: Alembic's ``context``/``op`` are process-wide proxies: one migration at a time
#: per process (PostgreSQL adds an advisory lock, SQLite BEGIN IMMEDIATE, for
#: other processes).
_MIGRATION_LOCK = threading.Lock()
_migration_owner: int | None = None  # thread holding _MIGRATION_LOCK
#: dispose() tasks scheduled by close() inside a running loop (kept referenced)
_PENDING_DISPOSALS: set[asyncio.Task[None]] = set()


def _acquire_migration_lock() -> None:
    """Take the process-wide migration lock (sync callers)."""
    global _migration_owner
    if not _MIGRATION_LOCK.acquire(blocking=False):
        if _migration_owner == threading.get_ident():
            raise StoreError(
                "initialize() would deadlock: an async_initialize() is running on this "
                "thread's event loop; await store.async_initialize() (or the async_* "
                "methods) instead of calling sync methods from that loop"
            )
        _MIGRATION_LOCK.acquire()
    _migration_owner = threading.get_ident()


def _release_migration_lock() -> None:
    global _migration_owner
    _migration_owner = None
    _MIGRATION_LOCK.release()


# --------------------------------------------------------------------------- row mapping


def _row_to_entry(row: Any) -> MemoryEntry:
    # Values come straight from typed columns (UTC datetimes, MemoryScope,
    # decoded JSON), so the fast constructor is safe here.
    return MemoryEntry._from_values(
        {
            "entry_id": row[0],
            "namespace": row[1],
            "scope": row[2],
            "key": row[3],
            "content": row[4],
            "metadata_": row[5],
            "created_at": row[6],
            "expires_at": row[7],
            "importance": row[8],
            "version": row[9],
        }
    )


def _values(namespace: str, entry: MemoryEntry) -> dict[str, Any]:
    return {
        "entry_id": entry.entry_id,
        "namespace": namespace,
        "scope": MemoryScope(entry.scope),
        "key": entry.key,
        "content": entry.content,
        "metadata": entry.metadata_,
        "created_at": entry.created_at,
        "expires_at": entry.expires_at,
        "importance": float(entry.importance),
        "version": max(entry.version, 1),
    }


def _prefix_upper(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix`` (or None)."""
    stripped = prefix.rstrip("\U0010ffff")
    if not stripped:
        return None
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


# --------------------------------------------------------------------------- statements
# Built once and executed with bound parameters: constructing a Core statement
# (and its cache key) on every call cost more than running it.

_P = sa.bindparam
_LIVE = sa.or_(_C.expires_at.is_(None), _C.expires_at > _P("now"))
_SELECT = sa.select(*_COLUMNS)
_LOAD = _SELECT.where(_C.namespace == _P("ns"), _LIVE).order_by(_C.created_at, _C.entry_id)
_GET = _SELECT.where(_C.entry_id == _P("eid"), _C.namespace == _P("ns"), _LIVE)
_BY_KEY = (
    _SELECT.where(_C.namespace == _P("ns"), _C.key == _P("key"), _LIVE)
    .order_by(_C.created_at.desc(), _C.entry_id.desc())
    .limit(1)
)
_BY_KEY_FOR_UPDATE = _BY_KEY.with_for_update()
_DELETE = sa.delete(TABLE).where(
    _C.namespace == _P("ns"), _C.entry_id.in_(_P("eids", expanding=True))
)
_CLEAR = sa.delete(TABLE).where(_C.namespace == _P("ns"))
_CLEANUP = sa.delete(TABLE).where(_C.expires_at <= _P("now"))
_UPDATE_VERSIONED = sa.update(TABLE).where(
    _C.entry_id == _P("w_eid"), _C.namespace == _P("w_ns"), _C.version == _P("w_version")
)


@functools.cache
def _upsert(dialect: str) -> Any:
    """``INSERT ... ON CONFLICT (entry_id) DO UPDATE`` (version bumped server-side)."""
    insert = postgresql.insert(TABLE) if dialect == "postgresql" else sqlite.insert(TABLE)
    update: dict[str, Any] = {
        col.key: insert.excluded[col.key]
        for col in _COLUMNS
        if col.key not in ("entry_id", "version")
    }
    update["version"] = _C.version + 1
    return insert.on_conflict_do_update(index_elements=[_C.entry_id], set_=update)


@functools.cache
def _insert_new(dialect: str) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING``: inserts only if the id is free."""
    insert = postgresql.insert(TABLE) if dialect == "postgresql" else sqlite.insert(TABLE)
    # RETURNING tells whether a row was inserted (rowcount is not reliable for
    # ON CONFLICT DO NOTHING across drivers).
    return insert.on_conflict_do_nothing(index_elements=[_C.entry_id]).returning(_C.entry_id)


@functools.lru_cache(maxsize=128)
def _list_statement(prefix_mode: str, limit: int | None, newest_first: bool) -> Any:
    stmt = _SELECT.where(_C.namespace == _P("ns"), _LIVE)
    if prefix_mode == "range":
        stmt = stmt.where(_C.key >= _P("lo"), _C.key < _P("hi"))
    elif prefix_mode == "from":
        stmt = stmt.where(_C.key >= _P("lo"))
    elif prefix_mode == "any_key":
        stmt = stmt.where(_C.key.is_not(None))
    order: list[Any] = (
        [_C.key, _C.created_at, _C.entry_id]
        if prefix_mode != "none"
        else [_C.created_at, _C.entry_id]
    )
    if newest_first:
        order = [col.desc() for col in order]
    stmt = stmt.order_by(*order)
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt


@functools.lru_cache(maxsize=128)
def _list_contents_statement(prefix_mode: str, limit: int | None, newest_first: bool) -> Any:
    full = _list_statement(prefix_mode, limit, newest_first)
    return full.with_only_columns(_C.content, maintain_column_froms=True)


#: Session.info key holding the schema map while one of our units of work runs
#: inside a caller's session (whose engine knows nothing of our schema).
_TRANSLATE_KEY = "firefly_orm.schema_translate_map"


def _exec(session: Session | Connection, stmt: Any, params: dict[str, Any]) -> Any:
    translate = session.info.get(_TRANSLATE_KEY)
    if translate is None:
        return session.execute(stmt, params)
    return session.execute(stmt, params, execution_options={"schema_translate_map": translate})


def _push_translation(session: Session, schema: str | None) -> Callable[[], None] | None:
    """Map our table to ``schema`` on a caller's session; return the undo function."""
    if schema is None:
        return None
    missing = object()
    saved = session.info.get(_TRANSLATE_KEY, missing)
    session.info[_TRANSLATE_KEY] = {None: schema}

    def restore() -> None:
        if saved is missing:
            session.info.pop(_TRANSLATE_KEY, None)
        else:
            session.info[_TRANSLATE_KEY] = saved

    return restore


def _dialect(session: Session | Connection) -> str:
    if isinstance(session, Connection):
        return session.dialect.name
    return session.get_bind().dialect.name


# --------------------------------------------------------------------------- operations
# Each operation is written once, over a sync Connection or Session.  Sync methods
# call them directly; async methods await them through run_sync.


def _op_save(session: Session | Connection, namespace: str, entry: MemoryEntry) -> None:
    _exec(session, _upsert(_dialect(session)), _values(namespace, entry))


def _op_save_versioned(
    session: Session | Connection, namespace: str, entry: MemoryEntry, expected_version: int
) -> None:
    values = _values(namespace, entry)
    if expected_version == 0:
        values["version"] = 1
        inserted = _exec(session, _insert_new(_dialect(session)), values).first()
        if inserted is None:
            raise ConcurrencyError(f"entry {entry.entry_id!r} already exists in {namespace!r}")
        return
    values["version"] = expected_version + 1
    del values["entry_id"]
    values.update(w_eid=entry.entry_id, w_ns=namespace, w_version=expected_version)
    result = _exec(session, _UPDATE_VERSIONED, values)
    if result.rowcount != 1:
        raise ConcurrencyError(
            f"entry {entry.entry_id!r} in {namespace!r} is no longer at version {expected_version}"
        )


def _op_load(session: Session | Connection, namespace: str) -> list[MemoryEntry]:
    rows = _exec(session, _LOAD, {"ns": namespace, "now": utcnow()})
    return [_row_to_entry(row) for row in rows]


def _op_get(session: Session | Connection, namespace: str, entry_id: str) -> MemoryEntry | None:
    row = _exec(session, _GET, {"eid": entry_id, "ns": namespace, "now": utcnow()}).first()
    return _row_to_entry(row) if row is not None else None


def _op_load_by_key(
    session: Session | Connection, namespace: str, key: str, for_update: bool = False
) -> MemoryEntry | None:
    stmt = _BY_KEY_FOR_UPDATE if for_update else _BY_KEY
    row = _exec(session, stmt, {"ns": namespace, "key": key, "now": utcnow()}).first()
    return _row_to_entry(row) if row is not None else None


def _op_list(
    session: Session | Connection,
    namespace: str,
    key_prefix: str | None,
    limit: int | None,
    newest_first: bool,
) -> list[MemoryEntry]:
    params: dict[str, Any] = {"ns": namespace, "now": utcnow()}
    mode = _prefix_mode(key_prefix, params)
    rows = _exec(session, _list_statement(mode, limit, newest_first), params)
    return [_row_to_entry(row) for row in rows]


def _op_list_contents(
    session: Session | Connection,
    namespace: str,
    key_prefix: str | None,
    limit: int | None,
    newest_first: bool,
) -> list[Any]:
    params: dict[str, Any] = {"ns": namespace, "now": utcnow()}
    mode = _prefix_mode(key_prefix, params)
    return list(
        _exec(session, _list_contents_statement(mode, limit, newest_first), params).scalars()
    )


def _prefix_mode(key_prefix: str | None, params: dict[str, Any]) -> str:
    if key_prefix is None:
        return "none"
    if key_prefix:
        upper = _prefix_upper(key_prefix)
        params["lo"] = key_prefix
        if upper is None:
            return "from"
        params["hi"] = upper
        return "range"
    return "any_key"


def _op_delete(session: Session | Connection, namespace: str, entry_ids: list[str]) -> None:
    if entry_ids:
        _exec(session, _DELETE, {"ns": namespace, "eids": entry_ids})


def _op_clear(session: Session | Connection, namespace: str) -> None:
    _exec(session, _CLEAR, {"ns": namespace})


def _op_cleanup_expired(session: Session | Connection) -> int:
    result = _exec(session, _CLEANUP, {"now": utcnow()})
    return int(result.rowcount)


# --------------------------------------------------------------------------- unit of work


class SQLEntryRepository:
    """:class:`~firefly_orm.uow.EntryRepository` over one Session or Connection transaction."""

    def __init__(self, session: Session | Connection) -> None:
        self.session = session

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        validate_namespace(namespace)
        return _op_get(self.session, namespace, entry_id)

    def get_by_key(
        self, namespace: str, key: str, *, for_update: bool = False
    ) -> MemoryEntry | None:
        validate_namespace(namespace)
        validate_key(key)
        return _op_load_by_key(self.session, namespace, key, for_update)

    def list(
        self,
        namespace: str,
        *,
        key_prefix: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[MemoryEntry]:
        validate_namespace(namespace)
        return _op_list(self.session, namespace, key_prefix, limit, newest_first)

    def list_contents(
        self,
        namespace: str,
        *,
        key_prefix: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> builtins.list[Any]:
        """Like :meth:`list` but only each entry's ``content`` (a cheaper read)."""
        validate_namespace(namespace)
        return _op_list_contents(self.session, namespace, key_prefix, limit, newest_first)

    def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        validate_entry(entry, namespace)
        if expected_version is None:
            _op_save(self.session, namespace, entry)
        else:
            _op_save_versioned(self.session, namespace, entry, expected_version)

    def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None:
        validate_namespace(namespace)
        ids = [entry_ids] if isinstance(entry_ids, str) else list(entry_ids)
        _op_delete(self.session, namespace, ids)

    def clear(self, namespace: str) -> None:
        validate_namespace(namespace)
        _op_clear(self.session, namespace)


class SQLUnitOfWork:
    """One transaction; rolls back unless :meth:`commit` is called.

    The store's own units of work run on a plain Connection transaction.  With a
    caller's ``session``, the work runs inside a SAVEPOINT of it
    (``begin_nested``): :meth:`commit` releases the savepoint and the caller's
    own commit (or rollback) decides the outcome; a failure rolls back only the
    savepoint.
    """

    def __init__(
        self, store: SQLAlchemyStore, session: Session | None = None, *, read_only: bool = False
    ) -> None:
        self._store = store
        self._external = session
        self._read_only = read_only
        self._restore: Callable[[], None] | None = None
        self._conn: Connection | None = None
        self._tx: sa.Transaction | sa.orm.SessionTransaction | None = None
        self._done = False
        self.entries: SQLEntryRepository

    def __enter__(self) -> Self:
        target: Session | Connection
        if self._external is not None:
            target = self._external
            self._restore = _push_translation(self._external, self._store.schema_name)
            try:
                self._tx = self._external.begin_nested()
            except BaseException:
                if self._restore is not None:
                    self._restore()
                raise
        else:
            engine = self._store.engine if self._read_only else self._store._write_engine()
            target = self._conn = engine.connect()
            try:
                self._tx = self._conn.begin()
            except BaseException:
                self._conn.close()
                raise
        self.entries = SQLEntryRepository(target)
        return self

    def commit(self) -> None:
        if self._done or self._tx is None:
            raise RuntimeError("this unit of work is not active")
        with self._store._wrap("commit"):
            self._tx.commit()
        self._done = True

    def rollback(self) -> None:
        if self._tx is None or self._done:
            return
        if self._tx.is_active:
            self._tx.rollback()
        self._done = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if not self._done:
                self.rollback()
        finally:
            if self._conn is not None:
                self._conn.close()
            if self._restore is not None:
                self._restore()


class AsyncSQLUnitOfWork:
    """Async unit of work on the native async engine (or a caller's AsyncSession).

    ``await uow.run_sync(fn, *args)`` calls ``fn(sync_uow, *args)`` where
    ``sync_uow`` has the same ``entries`` repository over the sync facade of the
    async connection, so the logic written for sync units of work runs unchanged.
    """

    def __init__(
        self,
        store: SQLAlchemyStore,
        session: AsyncSession | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        self._store = store
        self._external = session
        self._read_only = read_only
        self._restore: Callable[[], None] | None = None
        self._conn: AsyncConnection | None = None
        self._runner: AsyncSession | AsyncConnection | None = None
        self._tx: Any = None
        self._done = False

    async def __aenter__(self) -> Self:
        await self._store.async_ensure_initialized()
        if self._external is not None:
            self._runner = self._external
            self._restore = _push_translation(self._external.sync_session, self._store.schema_name)
            try:
                self._tx = await self._external.begin_nested()
            except BaseException:
                if self._restore is not None:
                    self._restore()
                raise
        else:
            engine = (
                self._store.async_engine if self._read_only else self._store._async_write_engine()
            )
            self._runner = self._conn = await engine.connect()
            try:
                self._tx = await self._conn.begin()
            except BaseException:
                await self._conn.close()
                raise
        return self

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(uow, *args)`` with a sync unit-of-work view of this transaction."""
        if self._runner is None:
            raise RuntimeError("this unit of work is not active")

        def call(sync_target: Session | Connection) -> T:
            return fn(_SessionUnitOfWork(sync_target), *args)

        with self._store._wrap("unit of work"):
            result: T = await self._runner.run_sync(call)
            return result

    async def commit(self) -> None:
        if self._done or self._tx is None:
            raise RuntimeError("this unit of work is not active")
        with self._store._wrap("commit"):
            await self._tx.commit()
        self._done = True

    async def rollback(self) -> None:
        if self._tx is None or self._done:
            return
        if self._tx.is_active:
            await self._tx.rollback()
        self._done = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if not self._done:
                await self.rollback()
        finally:
            if self._conn is not None:
                await self._conn.close()
            if self._restore is not None:
                self._restore()


class _SessionUnitOfWork:
    """Sync view handed to ``run_sync`` callbacks; commit is the async owner's job."""

    def __init__(self, session: Session | Connection) -> None:
        self.entries = SQLEntryRepository(session)

    def commit(self) -> None:
        raise RuntimeError("inside run_sync, commit with `await uow.commit()` afterwards")

    def rollback(self) -> None:
        raise RuntimeError("inside run_sync, roll back with `await uow.rollback()` afterwards")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


# --------------------------------------------------------------------------- the store


def _async_url_for(url: URL) -> URL:
    backend, driver = url.get_backend_name(), url.get_driver_name()
    if backend == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    if backend == "postgresql":
        if driver in ("psycopg", "asyncpg", "psycopg_async"):
            return url
        return url.set(drivername="postgresql+psycopg")
    return url


def _sync_url_for(url: URL) -> URL:
    backend, driver = url.get_backend_name(), url.get_driver_name()
    if backend == "sqlite":
        return url.set(drivername="sqlite")
    if backend == "postgresql" and driver in ("asyncpg", "psycopg_async"):
        return url.set(drivername="postgresql+psycopg")
    return url


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
        if options.get(_AUTOCOMMIT_READ_OPTION, False):
            return
        write = options.get(_WRITE_OPTION, False)
        # Straight to the DBAPI cursor: the statement needs no SQLAlchemy
        # execution context, and this runs once per transaction.
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        finally:
            cursor.close()


def _is_memory_sqlite(url: URL) -> bool:
    database = url.database or ""
    return database in ("", ":memory:") or url.query.get("mode") == "memory"


def _install_sqlite_hooks(sync_engine: Engine) -> None:
    """WAL + busy_timeout per connection; SQLAlchemy-controlled BEGIN.

    Write units of work start with ``BEGIN IMMEDIATE`` (taking the write lock up
    front instead of failing to upgrade a read lock later); see
    :func:`enable_sqlite_savepoints`.
    """
    is_memory = sync_engine.url.database in (None, "", ":memory:")

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            if not is_memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=FULL")
        finally:
            cursor.close()

    enable_sqlite_savepoints(sync_engine)


class SQLAlchemyStore:
    """Memory store on SQLAlchemy: SQLite or PostgreSQL, sync and async.

    Args:
        url: Database URL (``sqlite:///path``, ``postgresql+psycopg://...``); the
            store builds (and owns) a sync engine and, on first async use, an
            async one (aiosqlite / psycopg async).
        engine: A caller-owned sync :class:`Engine` (never disposed by us).
        async_engine: A caller-owned :class:`AsyncEngine` (never disposed by us).
        async_url: URL for the async engine when it differs from ``url``.
        schema_name: PostgreSQL schema for our tables (``None``: the connection's
            default schema). Not supported on SQLite.
        engine_kwargs: Extra keyword arguments for engines the store creates.

    Operations initialise the store on first use (running the migrations);
    call :meth:`initialize` yourself to fail fast at start-up, or
    ``initialize(migrate=False)`` when an admin migrates and this process only
    has DML rights (it then checks the schema is at head).
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: Engine | None = None,
        async_engine: AsyncEngine | None = None,
        async_url: str | URL | None = None,
        schema_name: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if url is None and engine is None and async_engine is None:
            raise EntryValidationError("url", "give a database URL, an engine or an async_engine")
        if url is not None and engine is not None:
            raise EntryValidationError("url", "give either url or engine, not both")
        self._engine_kwargs = dict(engine_kwargs or {})
        self._owned: list[Engine | AsyncEngine] = []
        self._url = migrate.normalize_url(url) if url is not None else None
        self._async_url = migrate.normalize_url(async_url) if async_url is not None else None
        self._base_engine = engine
        self._base_async_engine = async_engine
        self._sync_engine: Engine | None = None
        self._async_engine_proxy: AsyncEngine | None = None
        self._write_engine_cache: Engine | None = None
        self._async_write_engine_cache: AsyncEngine | None = None
        self._read_engine_cache: Engine | None = None
        self._async_read_engine_cache: AsyncEngine | None = None
        dialect = self._dialect_name()
        if dialect not in ("sqlite", "postgresql"):
            raise EntryValidationError(
                "url", f"unsupported database {dialect!r} (SQLite and PostgreSQL are supported)"
            )
        if dialect == "sqlite" and schema_name is not None:
            raise EntryValidationError("schema_name", "SQLite has no schemas; leave it None")
        if dialect == "sqlite" and self._url is not None and _is_memory_sqlite(self._url):
            raise EntryValidationError(
                "url",
                "an in-memory SQLite database exists per connection (each thread and the "
                "async engine would see a different, empty one); use InMemoryStore",
            )
        self._schema = migrate.validate_schema_name(schema_name)
        self._lock = threading.Lock()
        self._initialized = False
        self._closed = False

    # ------------------------------------------------------------------ engines
    def _dialect_name(self) -> str:
        if self._base_engine is not None:
            return self._base_engine.dialect.name
        if self._base_async_engine is not None:
            return self._base_async_engine.dialect.name
        assert self._url is not None
        return self._url.get_backend_name()

    def _display_url(self) -> str:
        for candidate in (self._url, self._base_engine, self._base_async_engine):
            if candidate is not None:
                url = candidate if isinstance(candidate, URL) else candidate.url
                return redact_url(url)
        return "<unknown>"

    def _translate(self, engine: Engine) -> Engine:
        if self._schema is None:
            return engine
        return engine.execution_options(schema_translate_map={None: self._schema})

    def _create_engine(self, url: URL, *, is_async: bool) -> Any:
        # The caller's engine_kwargs win over the preset's defaults.
        defaults = self._engine_options(url)
        kwargs = {**defaults, **self._engine_kwargs}
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
            raise MissingExtraError(
                f"{url.get_backend_name()} with driver {url.get_driver_name()}",
                "postgres" if url.get_backend_name() == "postgresql" else "sqlite",
                exc.name,
            ) from exc

    def _engine_options(self, url: URL) -> dict[str, Any]:
        """Per-backend engine arguments; presets override this."""
        return {}

    @property
    def engine(self) -> Engine:
        """The sync engine (with our schema translation applied)."""
        if self._closed:
            raise StoreError("this store is closed")
        if self._sync_engine is None:
            with self._lock:
                if self._sync_engine is None:
                    base = self._base_engine
                    if base is None:
                        url = self._url
                        if url is None:
                            assert self._base_async_engine is not None
                            url = _sync_url_for(self._base_async_engine.url)
                        base = self._create_engine(url, is_async=False)
                        if base.dialect.name == "sqlite":
                            _install_sqlite_hooks(base)
                        self._owned.append(base)
                    self._sync_engine = self._translate(base)
        return self._sync_engine

    @property
    def async_engine(self) -> AsyncEngine:
        """The async engine (native async driver, schema translation applied)."""
        if self._closed:
            raise StoreError("this store is closed")
        if self._async_engine_proxy is None:
            with self._lock:
                if self._async_engine_proxy is None:
                    base = self._base_async_engine
                    if base is None:
                        source = self._async_url or self._url
                        if source is None:
                            assert self._base_engine is not None
                            source = self._base_engine.url
                        base = self._create_engine(_async_url_for(source), is_async=True)
                        if base.dialect.name == "sqlite":
                            _install_sqlite_hooks(base.sync_engine)
                        self._owned.append(base)
                    if self._schema is not None:
                        base = base.execution_options(schema_translate_map={None: self._schema})
                    self._async_engine_proxy = base
        return self._async_engine_proxy

    def _write_engine(self) -> Engine:
        engine = self._write_engine_cache
        if engine is None:
            engine = self._write_engine_cache = self.engine.execution_options(
                **{_WRITE_OPTION: True}
            )
        return engine

    def _read_engine(self) -> Engine:
        engine = self._read_engine_cache
        if engine is None:
            engine = self._read_engine_cache = self.engine.execution_options(
                **{_AUTOCOMMIT_READ_OPTION: True}
            )
        return engine

    def _async_read_engine(self) -> AsyncEngine:
        engine = self._async_read_engine_cache
        if engine is None:
            engine = self._async_read_engine_cache = self.async_engine.execution_options(
                **{_AUTOCOMMIT_READ_OPTION: True}
            )
        return engine

    def _async_write_engine(self) -> AsyncEngine:
        engine = self._async_write_engine_cache
        if engine is None:
            engine = self._async_write_engine_cache = self.async_engine.execution_options(
                **{_WRITE_OPTION: True}
            )
        return engine

    @property
    def schema_name(self) -> str | None:
        """The schema our tables live in (None: the default one / SQLite)."""
        return self._schema

    # ------------------------------------------------------------------ errors
    @contextmanager
    def _wrap(self, what: str) -> Iterator[None]:
        try:
            yield
        except FireflyOrmError:
            raise
        except sa.exc.TimeoutError as exc:  # no pooled connection within `timeout`
            raise DatabaseConnectionError(
                f"{what} timed out waiting for a connection to {self._display_url()}: {exc}"
            ) from exc
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            kind = DatabaseConnectionError if _is_connection_problem(exc) else StoreError
            raise kind(f"{what} failed on {self._display_url()}: {_short(exc)}") from exc
        except UnicodeError as exc:
            raise StoreError(f"{what} failed: text could not be encoded ({exc})") from exc
        except sa.exc.IntegrityError as exc:
            raise StoreError(
                f"{what} violated a constraint on {self._display_url()}: {_short(exc)}"
            ) from exc
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{what} failed on {self._display_url()}: {_short(exc)}") from exc
        except OSError as exc:
            raise DatabaseConnectionError(f"{what} failed on {self._display_url()}: {exc}") from exc

    # ------------------------------------------------------------------ lifecycle
    def initialize(self, *, migrate: bool = True) -> None:
        """Create or upgrade our tables (idempotent; safe across threads and processes).

        Args:
            migrate: ``True`` runs the Alembic migrations (under an advisory
                lock on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite).  ``False``
                only checks that the database is at head and raises
                :class:`MigrationRequiredError` otherwise — for processes whose
                role has DML rights only.
        """
        if self._initialized:
            return
        _acquire_migration_lock()
        try:
            if self._initialized:
                return
            with self._wrap("initialize"):
                if migrate:
                    _upgrade(self._write_engine(), self._schema)
                else:
                    _require_head(self.engine, self._schema)
                self._after_initialize()
            self._initialized = True
        finally:
            _release_migration_lock()
        logger.debug("store initialised on %s", self._display_url())

    def _after_initialize(self) -> None:
        """Hook for presets (e.g. warming the pool); runs once, under the init lock."""

    async def async_initialize(self, *, migrate: bool = True) -> None:
        """Async twin of :meth:`initialize` (Alembic runs on the async engine via run_sync)."""
        if self._initialized:
            return
        # Poll the process-wide lock instead of blocking: a coroutine holding it
        # awaits I/O inside run_sync, and a blocking acquire on the same loop
        # thread would deadlock.
        global _migration_owner
        while not _MIGRATION_LOCK.acquire(blocking=False):
            await asyncio.sleep(0.005)
        _migration_owner = threading.get_ident()
        try:
            if self._initialized:
                return
            with self._wrap("initialize"):
                async with self._async_write_engine().connect() as conn:
                    if migrate:
                        await conn.run_sync(_upgrade, self._schema)
                    else:
                        await conn.run_sync(_require_head, self._schema)
            self._initialized = True
        finally:
            _release_migration_lock()

    def ensure_initialized(self) -> None:
        """Initialise on first use (called by every operation)."""
        if not self._initialized:
            self.initialize()

    async def async_ensure_initialized(self) -> None:
        """Async twin of :meth:`ensure_initialized`."""
        if not self._initialized:
            await self.async_initialize()

    def close(self) -> None:
        """Dispose the engines this store created (never a caller's engine)."""
        for engine in self._owned:
            if isinstance(engine, Engine):
                engine.dispose()
        self._owned = [e for e in self._owned if isinstance(e, AsyncEngine)]
        if self._owned:
            # Async engines need an event loop to close their connections.
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(self.async_close())
                return
            # Inside a running loop: close the async pool's connections on that
            # loop (prefer `await store.async_close()` there).
            loop = asyncio.get_running_loop()
            for engine in self._owned:
                if isinstance(engine, AsyncEngine):
                    task = loop.create_task(engine.dispose())
                    _PENDING_DISPOSALS.add(task)
                    task.add_done_callback(_PENDING_DISPOSALS.discard)
            self._owned = []
        self._reset()

    async def async_close(self) -> None:
        """Async twin of :meth:`close`."""
        for engine in self._owned:
            if isinstance(engine, AsyncEngine):
                await engine.dispose()
            else:
                engine.dispose()
        self._owned = []
        self._reset()

    def _reset(self) -> None:
        self._sync_engine = None
        self._async_engine_proxy = None
        self._write_engine_cache = None
        self._async_write_engine_cache = None
        self._read_engine_cache = None
        self._async_read_engine_cache = None
        self._initialized = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.async_close()

    # ------------------------------------------------------------------ running ops
    # Single operations run on a plain Connection transaction (lighter than a
    # Session); units of work use Sessions so they can join a caller's.
    # Writes: one transaction (BEGIN IMMEDIATE on SQLite).  Single-statement
    # reads: on SQLite no BEGIN/COMMIT at all (the statement is atomic on its own).
    def _run(self, what: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        self.ensure_initialized()
        with self._wrap(what):
            if write:
                with self._write_engine().begin() as conn:
                    return fn(conn, *args)
            with self._read_engine().connect() as conn:
                return fn(conn, *args)

    async def _async_run(
        self, what: str, fn: Callable[..., T], *args: Any, write: bool = False
    ) -> T:
        await self.async_ensure_initialized()
        with self._wrap(what):
            if write:
                async with self._async_write_engine().begin() as conn:
                    return await conn.run_sync(fn, *args)
            async with self._async_read_engine().connect() as conn:
                return await conn.run_sync(fn, *args)

    # ------------------------------------------------------------------ protocol
    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Upsert ``entry`` into ``namespace`` (validated first)."""
        validate_entry(entry, namespace)
        self._run("save", _op_save, namespace, entry, write=True)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` in ``(created_at, entry_id)`` order."""
        validate_namespace(namespace)
        return self._run("load", _op_load, namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry with ``key``."""
        validate_namespace(namespace)
        validate_key(key)
        return self._run("load_by_key", _op_load_by_key, namespace, key)

    def delete(self, namespace: str, entry_id: str) -> None:
        """Delete one entry (no error if absent)."""
        validate_namespace(namespace)
        self._run("delete", _op_delete, namespace, [entry_id], write=True)

    def clear(self, namespace: str) -> None:
        """Delete every entry of ``namespace``."""
        validate_namespace(namespace)
        self._run("clear", _op_clear, namespace, write=True)

    def cleanup_expired(self) -> int:
        """Delete expired entries in every namespace; return how many."""
        return self._run("cleanup_expired", _op_cleanup_expired, write=True)

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async twin of :meth:`save`."""
        validate_entry(entry, namespace)
        await self._async_run("save", _op_save, namespace, entry, write=True)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async twin of :meth:`load`."""
        validate_namespace(namespace)
        return await self._async_run("load", _op_load, namespace)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async twin of :meth:`load_by_key`."""
        validate_namespace(namespace)
        validate_key(key)
        return await self._async_run("load_by_key", _op_load_by_key, namespace, key)

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async twin of :meth:`delete`."""
        validate_namespace(namespace)
        await self._async_run("delete", _op_delete, namespace, [entry_id], write=True)

    async def async_clear(self, namespace: str) -> None:
        """Async twin of :meth:`clear`."""
        validate_namespace(namespace)
        await self._async_run("clear", _op_clear, namespace, write=True)

    async def async_cleanup_expired(self) -> int:
        """Async twin of :meth:`cleanup_expired`."""
        return await self._async_run("cleanup_expired", _op_cleanup_expired, write=True)

    # ------------------------------------------------------------------ units of work
    @contextmanager
    def unit_of_work(
        self, session: Session | None = None, *, read_only: bool = False
    ) -> Iterator[SQLUnitOfWork]:
        """A unit of work: one transaction, or a SAVEPOINT in the caller's ``session``.

        Args:
            session: The caller's Session; the work joins its transaction through
                a SAVEPOINT and the caller's commit decides the outcome.
            read_only: Start a plain (deferred) transaction.  On SQLite write
                units of work start with ``BEGIN IMMEDIATE``; read-only ones let
                readers run alongside writers under WAL.
        """
        self.ensure_initialized()
        with self._wrap("unit of work"), SQLUnitOfWork(self, session, read_only=read_only) as uow:
            yield uow

    @asynccontextmanager
    async def async_unit_of_work(
        self, session: AsyncSession | None = None, *, read_only: bool = False
    ) -> AsyncIterator[AsyncSQLUnitOfWork]:
        """Async unit of work on the native async engine (or the caller's AsyncSession)."""
        with self._wrap("unit of work"):
            async with AsyncSQLUnitOfWork(self, session, read_only=read_only) as uow:
                yield uow

    def bind_session(self, session: Session | AsyncSession) -> SessionBoundStore:
        """A view of this store whose every write joins ``session``'s transaction.

        Give it to the memory layers to make their writes part of your
        transaction::

            with Session(engine) as session:
                session.add(Order(...))
                memory = MemoryManager(store=store.bind_session(session))
                memory.add_turn(cid, prompt, answer)
                session.commit()          # the order and the turn, or neither

        Each operation runs in a SAVEPOINT of your transaction; your commit or
        rollback decides.  A sync ``Session`` gives the sync methods, an
        ``AsyncSession`` the ``async_*`` ones.
        """
        return SessionBoundStore(self, session)

    def __repr__(self) -> str:
        schema = f", schema_name={self._schema!r}" if self._schema else ""
        return f"{type(self).__name__}({self._display_url()!r}{schema})"


class SessionBoundStore:
    """A :class:`SQLAlchemyStore` whose operations join a caller's session.

    Made by :meth:`SQLAlchemyStore.bind_session`.  Every method runs in a
    SAVEPOINT of the caller's transaction (through the store's unit of work), so
    nothing is committed until the caller commits.
    """

    def __init__(self, store: SQLAlchemyStore, session: Session | AsyncSession) -> None:
        self.store = store
        self.session = session

    def _sync_session(self) -> Session:
        if not isinstance(self.session, Session):
            raise TypeError("bound to an AsyncSession: use the async_* methods")
        return self.session

    def _async_session(self) -> AsyncSession:
        if not isinstance(self.session, AsyncSession):
            raise TypeError("bound to a sync Session: use the sync methods")
        return self.session

    @contextmanager
    def unit_of_work(self, *, read_only: bool = False) -> Iterator[SQLUnitOfWork]:
        """The store's unit of work inside the bound session (a SAVEPOINT)."""
        with self.store.unit_of_work(session=self._sync_session()) as uow:
            yield uow

    @asynccontextmanager
    async def async_unit_of_work(
        self, *, read_only: bool = False
    ) -> AsyncIterator[AsyncSQLUnitOfWork]:
        """Async twin of :meth:`unit_of_work` (needs an AsyncSession)."""
        async with self.store.async_unit_of_work(session=self._async_session()) as uow:
            yield uow

    def _run(self, fn: Callable[..., T], *args: Any, write: bool) -> T:
        with self.unit_of_work() as uow:
            result = fn(uow, *args)
            if write:
                uow.commit()
            return result

    async def _async_run(self, fn: Callable[..., T], *args: Any, write: bool) -> T:
        async with self.async_unit_of_work() as uow:
            result = await uow.run_sync(fn, *args)
            if write:
                await uow.commit()
            return result

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Upsert ``entry`` inside the bound transaction."""
        self._run(_repo_save, namespace, entry, write=True)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Entries of ``namespace`` as the bound transaction sees them."""
        return self._run(_repo_load, namespace, write=False)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Newest entry with ``key`` as the bound transaction sees it."""
        return self._run(_repo_load_by_key, namespace, key, write=False)

    def delete(self, namespace: str, entry_id: str) -> None:
        """Delete one entry inside the bound transaction."""
        self._run(_repo_delete, namespace, entry_id, write=True)

    def clear(self, namespace: str) -> None:
        """Clear ``namespace`` inside the bound transaction."""
        self._run(_repo_clear, namespace, write=True)

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async twin of :meth:`save`."""
        await self._async_run(_repo_save, namespace, entry, write=True)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async twin of :meth:`load`."""
        return await self._async_run(_repo_load, namespace, write=False)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async twin of :meth:`load_by_key`."""
        return await self._async_run(_repo_load_by_key, namespace, key, write=False)

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async twin of :meth:`delete`."""
        await self._async_run(_repo_delete, namespace, entry_id, write=True)

    async def async_clear(self, namespace: str) -> None:
        """Async twin of :meth:`clear`."""
        await self._async_run(_repo_clear, namespace, write=True)


def _repo_save(uow: Any, namespace: str, entry: MemoryEntry) -> None:
    uow.entries.save(namespace, entry)


def _repo_load(uow: Any, namespace: str) -> list[MemoryEntry]:
    result: list[MemoryEntry] = uow.entries.list(namespace)
    return result


def _repo_load_by_key(uow: Any, namespace: str, key: str) -> MemoryEntry | None:
    result: MemoryEntry | None = uow.entries.get_by_key(namespace, key)
    return result


def _repo_delete(uow: Any, namespace: str, entry_id: str) -> None:
    uow.entries.delete(namespace, entry_id)


def _repo_clear(uow: Any, namespace: str) -> None:
    uow.entries.clear(namespace)


# Module-level so that ``initialize(migrate=...)`` (whose parameter shadows the
# module name) and its async twin (through run_sync) share them.
def _upgrade(target: Engine | Connection, schema: str | None) -> None:
    migrate.upgrade(target, schema_name=schema)


def _require_head(target: Engine | Connection, schema: str | None) -> None:
    migrate.require_head(target, schema_name=schema)


_CONNECTION_WORDS = (
    "connect",
    "unable to open database",
    "server closed",
    "terminating connection",
    "timeout expired",
    "network",
)


def _is_connection_problem(exc: sa.exc.DBAPIError) -> bool:
    """Whether a driver error means the database could not be reached.

    Other operational errors (a locked SQLite database, a deadlock, a statement
    timeout, a missing table) are :class:`StoreError`, so retry logic keyed on
    :class:`DatabaseConnectionError` only sees real connection problems.
    """
    if exc.connection_invalidated:
        return True
    state = getattr(exc.orig, "sqlstate", None)
    if state:  # PostgreSQL: class 08 = connection exception, 57P0x = shutdown
        return bool(state.startswith("08") or state.startswith("57P0"))
    text = str(exc.orig).lower()
    return any(word in text for word in _CONNECTION_WORDS)


def _short(exc: sa.exc.SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig) if orig is not None else str(exc).split("\n", 1)[0]
    return text.strip().split("\n", 1)[0]


class SQLiteStore(SQLAlchemyStore):
    """SQLite preset: a file path, parent directories created, WAL + busy_timeout.

    ``SQLiteStore(":memory:")`` is refused (each connection would see its own
    empty database); use :class:`~firefly_orm.store.InMemoryStore` instead.
    """

    def __init__(self, path: str | Path, **kwargs: Any) -> None:
        if str(path) == ":memory:":
            raise EntryValidationError("path", "use InMemoryStore for a non-persistent store")
        # Absolute now: a later chdir must not move the database.
        path = Path(os.path.abspath(os.fspath(path)))
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        super().__init__(URL.create("sqlite", database=str(path)), **kwargs)


class PostgreSQLStore(SQLAlchemyStore):
    """PostgreSQL preset (psycopg 3, sync and async).

    Args:
        url: ``postgresql://`` or ``postgresql+psycopg://`` URL.
        pool_size: Connections kept in the pool (SQLAlchemy ``pool_size``; the
            pool grows by up to the same number again under load).
        pool_min_size: Connections opened by :meth:`initialize` so the pool is
            warm before the first request.
        timeout: Seconds to wait for a connection (connect and pool checkout).
        schema_name: Schema for our tables (created by the migrations).
    """

    def __init__(
        self,
        url: str | URL,
        *,
        pool_size: int = 10,
        pool_min_size: int = 2,
        timeout: float = 30.0,
        schema_name: str | None = migrate.DEFAULT_SCHEMA,
        **kwargs: Any,
    ) -> None:
        if pool_size < 1 or pool_min_size < 0 or pool_min_size > pool_size:
            raise EntryValidationError(
                "pool_size", "need pool_size >= 1 and 0 <= pool_min_size <= pool_size"
            )
        if timeout <= 0:
            raise EntryValidationError("timeout", "must be positive")
        self.pool_size = pool_size
        self.pool_min_size = pool_min_size
        self.timeout = timeout
        parsed = migrate.normalize_url(url)  # postgres:// and postgresql:// -> psycopg
        if parsed.get_backend_name() != "postgresql":
            raise EntryValidationError("url", f"not a PostgreSQL URL: {redact_url(parsed)}")
        if parsed.get_driver_name() in ("psycopg2", "pg8000", "asyncpg"):
            # psycopg 3 is the driver we ship (sync and async); keep one.
            parsed = parsed.set(drivername="postgresql+psycopg")
        super().__init__(parsed, schema_name=schema_name, **kwargs)

    def _engine_options(self, url: URL) -> dict[str, Any]:
        return {
            "pool_size": self.pool_size,
            "max_overflow": self.pool_size,
            "pool_timeout": self.timeout,
            # No pre-ping (it costs a round trip per checkout); a connection
            # found dead raises once and invalidates the pool, and recycling
            # keeps idle connections fresh.  Pass
            # engine_kwargs={"pool_pre_ping": True} to trade speed for that.
            "pool_recycle": 1800,
            "connect_args": {"connect_timeout": max(1, int(self.timeout))},
        }

    def _after_initialize(self) -> None:
        # Open pool_min_size connections now so the pool is warm before the first request.
        conns = [self.engine.connect() for _ in range(self.pool_min_size)]
        for conn in conns:
            conn.close()
