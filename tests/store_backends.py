"""The one test backend registry: every store the suites run, by name.

Each :class:`Backend` says how to open a store over one test's :class:`Place`
(its temporary directory and, for database backends, a schema or database of
its own), how to close it, sync or async, and how to drop what the test left
behind.  :class:`OpenedBackend` is one test's backend: ``store``, plus
``reopen()`` for a NEW store object over the same data (what a new process
would see; the same object for in-process stores).

Databases come only from conftest's ``postgres_url`` / ``postgres_admin_engine``
/ ``mongo_url`` fixtures (environment URL, then testcontainers, then, for
MongoDB, a SecantusDB server; else a skip, or a failure under ``--require-db``).

Suites pick backends by :class:`Suite`: the contract suite runs every backend
(``contract_params``), the memory layers run :data:`LAYER_BACKENDS`
(``layer_params``).  Adding a backend is one entry in :data:`BACKENDS`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_mongo_database, drop_schema

from firefly_orm.entry import MemoryEntry, validate_entry, validate_key, validate_namespace
from firefly_orm.migrate import VERSION_TABLE
from firefly_orm.testing import MODES
from firefly_orm.uow import apply_version, sort_entries


class Suite(Enum):
    """The suites a backend takes part in."""

    CONTRACT = "contract"
    LAYERS = "layers"


@dataclass(frozen=True)
class Place:
    """Where one test's data lives; a reopened store gets the same place."""

    tmp_path: Path
    #: A fresh name (``t_<hex>``): the schema or database of this test.
    name: str
    postgres_url: str | None = None
    postgres_admin: sa.Engine | None = None
    mongo_url: str | None = None
    redis_url: str | None = None

    def postgres(self) -> str:
        """The PostgreSQL URL (the backend asked for it)."""
        assert self.postgres_url is not None, "backend did not declare database='postgres'"
        return self.postgres_url

    def mongo(self) -> str:
        """The MongoDB URL (the backend asked for it)."""
        assert self.mongo_url is not None, "backend did not declare database='mongo'"
        return self.mongo_url

    def redis(self) -> str:
        """The Redis URL (the backend asked for it)."""
        assert self.redis_url is not None, "backend did not declare database='redis'"
        return self.redis_url


@dataclass(frozen=True)
class Backend:
    """One store backend: how to open, close and clean up after it."""

    name: str
    #: A new store object over ``place`` (called again by ``reopen``).
    open: Callable[[Place], Any]
    #: Close one store from sync code (``None``: nothing to close).
    close: Callable[[Any], None] | None = None
    #: Close one store from async code (``None``: use ``close``).
    aclose: Callable[[Any], Awaitable[None]] | None = None
    #: Remove the test's data once every store is closed (``None``: nothing to drop).
    drop: Callable[[Place], None] | None = None
    #: ``"postgres"``, ``"mongo"`` or ``"redis"`` when the backend needs that database.
    database: str | None = None
    #: The fixture giving the URL to open when it is not the database's own
    #: (``"pgbouncer_url"``: PostgreSQL through PgBouncer); the admin engine stays direct.
    url_fixture: str | None = None
    #: The modes the store supports (``"sync"``, ``"async"``).
    modes: tuple[str, ...] = MODES
    #: Whether ``reopen`` hands back the first store (its data lives in the object).
    in_process: bool = False
    suites: frozenset[Suite] = field(default=frozenset({Suite.CONTRACT, Suite.LAYERS}))
    #: Whether ``Place.name`` is a migrated schema borrowed from this process's pool
    #: (handed back emptied by ``drop``) rather than a new one.
    pooled_schema: bool = False

    #: The xdist group of a backend whose data is shared by every test process (the
    #: default schema): its tests run in one worker, one after another.
    shared_group: str | None = None

    @property
    def marks(self) -> tuple[pytest.MarkDecorator, ...]:
        """``pytest.mark.postgres`` / ``pytest.mark.mongo`` for database backends."""
        marks: tuple[pytest.MarkDecorator, ...] = (
            () if self.database is None else (getattr(pytest.mark, self.database),)
        )
        if self.shared_group is not None:
            marks += (pytest.mark.xdist_group(self.shared_group),)
        return marks


class OpenedBackend:
    """One test's backend: its store, ``reopen()``, and the clean-up of both."""

    def __init__(self, backend: Backend, place: Place) -> None:
        self.backend = backend
        self.place = place
        self.store: Any = backend.open(place)
        self._opened: list[Any] = [self.store]

    @property
    def name(self) -> str:
        """The backend's name in :data:`BACKENDS`."""
        return self.backend.name

    def reopen(self) -> Any:
        """A new store object over the same data (the same object for in-process stores)."""
        if self.backend.in_process:
            return self.store
        store = self.backend.open(self.place)
        self._opened.append(store)
        return store

    def close(self) -> None:
        """Close every store opened here (sync), then drop the test's data."""
        try:
            if self.backend.close is not None:
                for store in self._opened:
                    self.backend.close(store)
        finally:
            self._drop()

    async def aclose(self) -> None:
        """Close every store opened here (async when the backend can), then drop the data."""
        if self.backend.aclose is None:
            self.close()
            return
        try:
            for store in self._opened:
                await self.backend.aclose(store)
        finally:
            self._drop()

    def _drop(self) -> None:
        self._opened.clear()
        if self.backend.drop is not None:
            self.backend.drop(self.place)


def open_backend(request: pytest.FixtureRequest, name: str) -> OpenedBackend:
    """Open backend ``name`` for the requesting test (database fixtures only if needed)."""
    backend = BACKENDS[name]
    tmp_path: Path = request.getfixturevalue("tmp_path")
    place = Place(tmp_path=tmp_path, name="t_" + uuid.uuid4().hex[:10])
    if backend.database == "postgres":
        place = replace(
            place,
            name=_SCHEMAS.borrow() if backend.pooled_schema else place.name,
            postgres_url=request.getfixturevalue(backend.url_fixture or "postgres_url"),
            postgres_admin=request.getfixturevalue("postgres_admin_engine"),
        )
    elif backend.database == "mongo":
        place = replace(place, mongo_url=request.getfixturevalue("mongo_url"))
    elif backend.database == "redis":
        place = replace(place, redis_url=request.getfixturevalue("redis_url"))
    return OpenedBackend(backend, place)


# --------------------------------------------------------------------------- the backends


def _open_memory(place: Place) -> Any:
    from firefly_orm.store import InMemoryStore

    return InMemoryStore()


def _open_file(place: Place) -> Any:
    from firefly_orm.file_store import FileStore

    return FileStore(place.tmp_path / "files")


# --------------------------------------------------------------------------- migrate once
#
# Every database test used to run the whole Alembic chain on a new file or schema.
# Each test process (xdist worker) now migrates once per backend: SQLite tests get
# a copy of a migrated template file; PostgreSQL tests borrow a migrated schema of
# the worker's pool and hand it back emptied (TRUNCATE), or dropped when the test
# changed its shape.  A test that needs a fresh, unmigrated place still gets one:
# the migration suites (tests/integration/test_migrations.py and others) open
# their own stores.

_SQLITE_TEMPLATE: list[Path] = []


def _sqlite_template() -> Path:
    """A migrated SQLite file (made once per process, removed at its exit)."""
    if not _SQLITE_TEMPLATE:
        from firefly_orm.sql import SQLiteStore

        directory = Path(tempfile.mkdtemp(prefix="firefly-orm-template-"))
        atexit.register(shutil.rmtree, directory, True)
        path = directory / "memory.sqlite3"
        store = SQLiteStore(path)
        try:
            store.initialize()
        finally:
            store.close()  # the last connection closing checkpoints the WAL into the file
        _SQLITE_TEMPLATE.append(path)
    return _SQLITE_TEMPLATE[0]


def _open_sqlite(place: Place) -> Any:
    from firefly_orm.sql import SQLiteStore

    path = place.tmp_path / "db" / "memory.sqlite3"
    if not path.exists():  # a reopen finds the test's own file
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_sqlite_template(), path)
    return SQLiteStore(path)


class SchemaPool:
    """Migrated PostgreSQL schemas of this process, lent one per test and handed back empty.

    A schema is handed back emptied (``DELETE`` of our tables) when its tables,
    indexes and migration version are those it was lent with; otherwise (a test
    dropped an index, downgraded, added a table) it is dropped, and the next
    borrower migrates a new one.  (``DELETE`` rather than ``TRUNCATE``: a test's few
    rows go in a millisecond, where ``TRUNCATE`` makes new files for every table and
    index, about 30 ms of the server's CPU and 0.2 s per test; our tables have no
    foreign keys and no delete triggers, so the order does not matter.)
    """

    def __init__(self) -> None:
        self._free: list[str] = []
        self._count = 0
        self._reference_shape: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def borrow(self) -> str:
        """A schema name: migrated already, or new (the store migrates it on first use)."""
        with self._lock:
            if self._free:
                return self._free.pop()
            self._count += 1
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            return f"tp_{worker}_{os.getpid()}_{self._count}"

    def give_back(self, admin: sa.Engine, schema: str) -> None:
        """Empty ``schema`` for the next test, or drop it when its shape changed."""
        reference = self._reference(admin)
        with admin.begin() as conn:
            shape = _schema_shape(conn, schema)
            if shape == reference:
                for table in shape["tables"]:
                    if table != VERSION_TABLE:
                        conn.exec_driver_sql(f'DELETE FROM "{schema}"."{table}"')
                reusable = True
            else:
                conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
                reusable = False
        if reusable:
            with self._lock:
                self._free.append(schema)

    def _reference(self, admin: sa.Engine) -> dict[str, Any]:
        """The shape of a schema our migrations just made (taken once per process)."""
        with self._lock:
            if self._reference_shape is None:
                from firefly_orm import migrate

                name = f"tp_ref_{os.getpid()}"
                migrate.upgrade(admin, schema_name=name)
                try:
                    with admin.connect() as conn:
                        self._reference_shape = _schema_shape(conn, name)
                finally:
                    drop_schema(admin, name)
            return self._reference_shape


def _schema_shape(conn: sa.Connection, schema: str) -> dict[str, Any]:
    """The tables, indexes, functions, triggers and migration version of ``schema``."""
    rows = conn.execute(
        sa.text(
            "SELECT 'table', tablename FROM pg_tables WHERE schemaname = :s "
            "UNION ALL SELECT 'index', replace(indexdef, quote_ident(:s) || '.', '') "
            "FROM pg_indexes WHERE schemaname = :s "
            "UNION ALL SELECT 'view', viewname FROM pg_views WHERE schemaname = :s "
            "UNION ALL SELECT 'trigger', t.tgname || ' ' || c.relname FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND NOT t.tgisinternal "
            "UNION ALL SELECT 'function', p.proname FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :s "
            # pg_attribute, not information_schema.columns (a view that costs 0.1 s here)
            "UNION ALL SELECT 'column', c.relname || '.' || a.attname || ' ' || "
            "format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "AND a.attnum > 0 AND NOT a.attisdropped"
        ),
        {"s": schema},
    ).all()
    tables = sorted(name for kind, name in rows if kind == "table")
    version: list[str] = []
    if VERSION_TABLE in tables:
        version = list(
            conn.execute(sa.text(f'SELECT version_num FROM "{schema}"."{VERSION_TABLE}"')).scalars()
        )
    return {"tables": tables, "all": sorted(map(tuple, rows)), "version": sorted(version)}


_SCHEMAS = SchemaPool()


def _open_postgres(place: Place) -> Any:
    from firefly_orm.sql import PostgreSQLStore

    return PostgreSQLStore(place.postgres(), schema_name=place.name)


def _open_pgbouncer(place: Place) -> Any:
    from firefly_orm.sql import PostgreSQLStore

    return PostgreSQLStore(place.postgres(), schema_name=place.name, pooler="transaction")


def _open_postgres_default_schema(place: Place) -> Any:
    from firefly_orm.sql import PostgreSQLStore

    return PostgreSQLStore(place.postgres())


def _drop_postgres_schema(place: Place) -> None:
    drop_schema(place.postgres_admin or place.postgres(), place.name)


def _give_back_schema(place: Place) -> None:
    if place.postgres_admin is None:
        _drop_postgres_schema(place)
        return
    _SCHEMAS.give_back(place.postgres_admin, place.name)


def _open_mongo(place: Place) -> Any:
    from firefly_orm.mongo import MongoDBStore

    return MongoDBStore(place.mongo(), database=place.name)


def _drop_mongo_database(place: Place) -> None:
    drop_mongo_database(place.mongo(), place.name)


def _open_redis(place: Place) -> Any:
    from firefly_orm.redis import RedisStore

    return RedisStore(place.redis(), prefix=place.name)


def _drop_redis_prefix(place: Place) -> None:
    from redis_server import drop_prefix

    drop_prefix(place.redis(), place.name)


def _close(store: Any) -> None:
    store.close()


async def _aclose(store: Any) -> None:
    await store.async_close()


class FiveMethodStore:
    """A custom store with only the five protocol methods (no async, no unit of work).

    What a third-party backend author starts from: the contract suite runs it in
    sync mode, and the layers give it the best-effort unit of work.
    """

    def __init__(self) -> None:
        self._rows: dict[str, MemoryEntry] = {}  # entry_id -> entry (namespace inside)
        self._lock = threading.Lock()

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Upsert ``entry`` into ``namespace``."""
        validate_entry(entry, namespace)
        copy = entry.copy_entry(namespace=namespace)
        with self._lock:
            self._rows[copy.entry_id] = apply_version(copy, self._rows.get(copy.entry_id))

    def load(self, namespace: str) -> list[MemoryEntry]:
        """The live entries of ``namespace``, oldest first."""
        validate_namespace(namespace)
        with self._lock:
            rows = [e for e in self._rows.values() if e.namespace == namespace]
        return [e.copy_entry() for e in sort_entries(rows) if not e.is_expired]

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest live entry with ``key``, or ``None``."""
        validate_key(key)
        matches = [e for e in self.load(namespace) if e.key == key]
        return matches[-1] if matches else None

    def delete(self, namespace: str, entry_id: str) -> None:
        """Delete one entry (idempotent)."""
        validate_namespace(namespace)
        with self._lock:
            entry = self._rows.get(entry_id)
            if entry is not None and entry.namespace == namespace:
                del self._rows[entry_id]

    def clear(self, namespace: str) -> None:
        """Delete every entry of ``namespace`` (idempotent)."""
        validate_namespace(namespace)
        with self._lock:
            for entry_id in [i for i, e in self._rows.items() if e.namespace == namespace]:
                del self._rows[entry_id]


def _open_five_method(place: Place) -> Any:
    return FiveMethodStore()


_CONTRACT_ONLY = frozenset({Suite.CONTRACT})
#: The xdist group of every test that uses PostgreSQL's default schema (``firefly_memory``).
DEFAULT_SCHEMA_GROUP = "pg_default_schema"

#: Every backend, by name; adding one is one entry.
BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("memory", _open_memory, in_process=True),
        Backend("file", _open_file),
        Backend("sqlite", _open_sqlite, close=_close, aclose=_aclose),
        Backend(
            "postgres",
            _open_postgres,
            close=_close,
            aclose=_aclose,
            drop=_give_back_schema,
            database="postgres",
            pooled_schema=True,
        ),
        # PostgreSQL through PgBouncer in transaction pooling mode (tests/pg_servers.py).
        Backend(
            "pgbouncer",
            _open_pgbouncer,
            close=_close,
            aclose=_aclose,
            drop=_give_back_schema,
            database="postgres",
            url_fixture="pgbouncer_url",
            pooled_schema=True,
        ),
        # The default schema ("firefly_memory") is shared with anything else using the
        # test database, so it is not dropped: the contract suite only writes
        # namespaces of its own and clears them at the end of each test.
        Backend(
            "postgres_default_schema",
            _open_postgres_default_schema,
            close=_close,
            aclose=_aclose,
            database="postgres",
            shared_group=DEFAULT_SCHEMA_GROUP,
            suites=_CONTRACT_ONLY,
        ),
        Backend(
            "mongo",
            _open_mongo,
            close=_close,
            aclose=_aclose,
            drop=_drop_mongo_database,
            database="mongo",
        ),
        Backend(
            "redis",
            _open_redis,
            close=_close,
            aclose=_aclose,
            drop=_drop_redis_prefix,
            database="redis",
        ),
        Backend(
            "five_method",
            _open_five_method,
            modes=("sync",),
            in_process=True,
            suites=_CONTRACT_ONLY,
        ),
    )
}

#: The backends the memory-layer suites (conversation, working, manager) run on.
LAYER_BACKENDS: tuple[str, ...] = tuple(n for n, b in BACKENDS.items() if Suite.LAYERS in b.suites)


def backend_params(names: Iterable[str]) -> list[Any]:
    """``pytest.param(name)`` per backend name, with its database mark."""
    return [pytest.param(n, marks=BACKENDS[n].marks, id=n) for n in names]


def layer_params() -> list[Any]:
    """``pytest.param`` per layer backend, with its database mark."""
    return backend_params(LAYER_BACKENDS)


def layer_mode_params(async_on: Iterable[str]) -> list[Any]:
    """``pytest.param((backend, mode))`` per layer backend in sync mode, and in async mode
    on ``async_on`` only; use with ``@pytest.mark.parametrize(("layer_backend", "mode"),
    ..., indirect=True)`` where a test's async form need not run on every backend.

    (Not generated rather than skipped: ``--require-db`` fails a run whose database
    test was skipped.)
    """
    wanted = set(async_on)
    return [
        pytest.param(name, mode, marks=BACKENDS[name].marks, id=f"{name}-{mode}")
        for name in LAYER_BACKENDS
        for mode in MODES
        if mode == "sync" or name in wanted
    ]


def contract_params() -> list[Any]:
    """``pytest.param((backend, mode))`` per contract backend and supported mode."""
    return [
        pytest.param((b.name, mode), marks=b.marks, id=f"{b.name}-{mode}")
        for b in BACKENDS.values()
        if Suite.CONTRACT in b.suites
        for mode in b.modes
    ]
