"""How a SQL store migrates, or refuses to: the process-wide lock, upgrade or check.

A store runs our migrations (:func:`upgrade`) or only reads the schema's
revision (:func:`require_head`, which runs no DDL) under one process-wide lock
(:func:`acquire_migration_lock`); whether it may migrate is its ``migrate=``
option (see :class:`~firefly_orm.sql.SQLAlchemyStore`), and a refusal of a
store that chose not to migrate says why (:func:`refusal_explained`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from firefly_orm import migrate
from firefly_orm.errors import MigrationRequiredError, StoreError
from firefly_orm.vector._errors import VectorUnavailableError

__all__ = [
    "NO_DDL_IN_SESSION",
    "NO_DDL_ON_CALLERS_ENGINE",
    "acquire_migration_lock",
    "async_acquire_migration_lock",
    "refusal_explained",
    "release_migration_lock",
    "require_head",
    "upgrade",
]

#: What a refusal adds for a store on the caller's engine that runs no DDL by default.
NO_DDL_ON_CALLERS_ENGINE = (
    " (a store on your engine runs no DDL by itself: migrate with your app's "
    "Alembic or `firefly-orm migrate`, or build the store with migrate=True)"
)
#: What a refusal adds for work through a caller's session (no DDL by default).
NO_DDL_IN_SESSION = (
    " (through your session this store runs no DDL: migrate with your app's "
    "Alembic or `firefly-orm migrate`, or build the store with migrate=True)"
)

# --------------------------------------------------------------------------- migration lock
#: Alembic's ``context``/``op`` are process-wide proxies: one migration at a time
#: per process (PostgreSQL adds an advisory lock, SQLite BEGIN IMMEDIATE, for
#: other processes).
_MIGRATION_LOCK = threading.Lock()
_migration_owner: int | None = None  # thread holding _MIGRATION_LOCK


def acquire_migration_lock() -> None:
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


async def async_acquire_migration_lock() -> None:
    """Take the process-wide migration lock (async callers)."""
    # Poll instead of blocking: a coroutine holding the lock awaits I/O inside
    # run_sync, and a blocking acquire on the same loop thread would deadlock.
    global _migration_owner
    while not _MIGRATION_LOCK.acquire(blocking=False):
        await asyncio.sleep(0.005)
    _migration_owner = threading.get_ident()


def release_migration_lock() -> None:
    """Release the process-wide migration lock."""
    global _migration_owner
    _migration_owner = None
    _MIGRATION_LOCK.release()


# Functions of their own so that ``initialize(migrate=...)`` (whose parameter
# shadows the module name) and its async twin (through run_sync) share them.
def upgrade(target: Engine | Connection, schema: str | None, vectors: bool = False) -> None:
    """Bring our tables in ``schema`` to head (DDL when they are behind); with ``vectors``
    the vector tables too (:func:`~firefly_orm.migrate.upgrade_vectors`)."""
    migrate.upgrade(target, schema_name=schema)
    if vectors:
        migrate.upgrade_vectors(target, schema_name=schema)
        _check_sqlite_vec(target)


def require_head(target: Engine | Connection, schema: str | None, vectors: bool = False) -> None:
    """Raise :class:`MigrationRequiredError` unless our tables are at head (reads only);
    with ``vectors`` the vector tables too."""
    migrate.require_head(target, schema_name=schema)
    if vectors:
        migrate.require_vectors(target, schema_name=schema)
        _check_sqlite_vec(target)


#: What a SQLite engine of the caller's needs for vector search.
SQLITE_VEC_ON_YOUR_ENGINE = (
    "build it with create_engine(url, module=firefly_orm.vector.sqlite_vec_module()) and "
    "load the extension on each connection: sqlalchemy.event.listen(engine, 'connect', "
    "lambda conn, _record: firefly_orm.vector.load_sqlite_vec(conn))"
)


def _check_sqlite_vec(target: Engine | Connection) -> None:
    """On SQLite, refuse a connection without ``sqlite-vec`` (searches call its functions)."""
    if target.dialect.name != "sqlite":
        return
    try:
        if isinstance(target, Connection):
            with target.begin_nested() if target.in_transaction() else nullcontext():
                target.execute(sa.text("SELECT vec_version()"))
        else:
            with target.connect() as conn:
                conn.execute(sa.text("SELECT vec_version()"))
    except sa.exc.OperationalError as exc:
        raise VectorUnavailableError(
            f"this SQLite engine has not loaded sqlite-vec: {SQLITE_VEC_ON_YOUR_ENGINE}"
        ) from exc


@contextmanager
def refusal_explained(hint: str) -> Iterator[None]:
    """Add ``hint`` (why the store did not migrate) to a :class:`MigrationRequiredError`."""
    try:
        yield
    except MigrationRequiredError as exc:
        if not hint:
            raise
        raise MigrationRequiredError(f"{exc}{hint}") from exc
