"""The SQL stores with upstream's lifecycle shapes (see :mod:`._lifecycle`)."""

from __future__ import annotations

import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar

from firefly_orm._interop._upstream_once import (
    async_import_upstream_once,
    check_upstream_data,
    import_upstream_once,
    sqlite_import_commands,
)
from firefly_orm._interop._upstream_plan import UpstreamSource
from firefly_orm._interop._upstream_sources import find_upstream_sqlite, sqlite_has_table
from firefly_orm.compat.firefly.memory._lifecycle import failed_to_connect, lifecycle_call
from firefly_orm.migrate import VERSION_TABLE
from firefly_orm.sql._presets import PostgreSQLStore as _PostgreSQLStore
from firefly_orm.sql._presets import SQLiteStore as _SQLiteStore
from firefly_orm.sql._store import SQLAlchemyStore

__all__ = ["PostgreSQLStore", "SQLiteStore", "UpstreamSQLLifecycle"]


class UpstreamSQLLifecycle(SQLAlchemyStore):
    """Upstream's ``initialize()``, ``close()`` and ``cleanup_expired()`` on a SQL store.

    Each returns a coroutine to ``await`` (inside an event loop it runs the
    store's ``async_*`` form on the native async driver); from sync code
    without a loop it does the work at once.  Everything else is
    :class:`~firefly_orm.sql.SQLAlchemyStore`'s: sync ``save``/``load``/...,
    their ``async_*`` twins, units of work, lazy initialisation on first use.
    """

    upstream_database: ClassVar[str] = "the database"
    """The database named in upstream's ``"Failed to connect to ..."`` messages."""

    # The three lifecycle names return coroutines here (upstream's shape); the
    # sync forms stay reachable through the firefly_orm classes.
    def initialize(self) -> Coroutine[Any, Any, None]:  # type: ignore[override]
        """Create or upgrade our tables (idempotent); ``await store.initialize()``.

        Raises:
            DatabaseConnectionError: The database cannot be reached; the
                message starts with ``"Failed to connect to"``.
        """
        return lifecycle_call(self.ensure_initialized, self.async_initialize)

    def close(self) -> Coroutine[Any, Any, None]:  # type: ignore[override]
        """Dispose the engines this store created; ``await store.close()``.

        The store can be used again afterwards (it reconnects and initialises
        on first use, as upstream's did).
        """
        return lifecycle_call(lambda: SQLAlchemyStore.close(self), self.async_close)

    def cleanup_expired(self) -> Coroutine[Any, Any, int]:  # type: ignore[override]
        """Delete expired entries in every namespace; ``await`` it for the count."""
        return lifecycle_call(
            lambda: SQLAlchemyStore.cleanup_expired(self), self.async_cleanup_expired
        )

    # Lazy initialisation by sync operations must not go through the awaitable
    # ``initialize`` above (inside a running loop it would only be scheduled).
    def ensure_initialized(self) -> None:
        """Initialise on first use (sync operations), upstream's message on failure."""
        with failed_to_connect(self.upstream_database):
            SQLAlchemyStore.initialize(self)

    async def async_initialize(self, *, migrate: bool | None = None) -> None:
        """Async form of the initialisation, upstream's message on failure."""
        with failed_to_connect(self.upstream_database):
            await super().async_initialize(migrate=migrate)

    def __exit__(self, *exc: object) -> None:
        """Leaving ``with store:`` closes it with the sync form (no coroutine to await)."""
        SQLAlchemyStore.close(self)


class SQLiteStore(UpstreamSQLLifecycle, _SQLiteStore):
    """:class:`firefly_orm.SQLiteStore` with awaitable ``initialize``/``close``/``cleanup_expired``.

    ``SQLiteStore(path)`` as upstream (parent directories are created).  Unlike
    upstream's, it keeps the entries in firefly_orm's ``memory_entries`` table
    (WAL, migrations).

    **A file upstream wrote.**  When ``path`` holds upstream's ``firefly_memory``
    table with rows that were never imported into this store, the constructor
    raises :class:`~firefly_orm.upstream_import.UpstreamDataFoundError` before
    anything is written (no table created); its message names the commands,
    ``firefly-orm migrate --url sqlite:///PATH`` then ``firefly-orm
    import-upstream PATH --url sqlite:///PATH``, which import the table into
    firefly_orm's tables of the same file.  With
    ``import_upstream=True`` the store imports it itself when it initialises
    (``await store.initialize()``, or the first operation): every namespace in
    ONE unit of work with the mark that says it is done
    (:func:`~firefly_orm.upstream_import.import_upstream_once`), so it happens
    once; an invalid record makes the initialisation fail with
    :class:`~firefly_orm.upstream_import.UpstreamImportError` and nothing
    imported.  Upstream's table is left as it was.  The look happens in the
    constructor: a read-only read of the file's schema (and, when upstream rows
    are there and firefly_orm's tables too, of the import's mark).

    Args:
        path: The database file.
        import_upstream: Import upstream's data found in the file (see above).
        **kwargs: :class:`firefly_orm.SQLiteStore`'s other arguments.

    Raises:
        UpstreamDataFoundError: Upstream data that was never imported, and
            ``import_upstream`` false.
    """

    upstream_database = "SQLite"
    #: Upstream data to import when the store initialises (``import_upstream=True``).
    _upstream_pending: UpstreamSource | None = None

    def __init__(self, path: str | Path, *, import_upstream: bool = False, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self._upstream_lock = threading.Lock()
        source = find_upstream_sqlite(self.path)
        try:
            self._upstream_pending = check_upstream_data(
                self,
                source,
                import_upstream=import_upstream,
                may_hold_mark=source is not None and sqlite_has_table(self.path, VERSION_TABLE),
                opened_as=f"SQLiteStore({str(path)!r}, import_upstream=True)",
                commands=() if source is None else sqlite_import_commands(self.path, source.table),
            )
        except BaseException:
            SQLAlchemyStore.close(self)  # the engines a look for the mark opened
            raise

    def ensure_initialized(self) -> None:
        """Initialise on first use, then import the upstream data it was asked to.

        Other threads' first uses wait for the import (and see its data).
        """
        super().ensure_initialized()
        if self._upstream_pending is None or _IMPORTING.get():
            return
        with self._upstream_lock:
            source = self._upstream_pending
            if source is not None:
                with _importing():
                    try:
                        import_upstream_once(source, self)
                    except BaseException:
                        self._initialized = False  # the next use tries again
                        raise
                self._upstream_pending = None

    async def async_initialize(self, *, migrate: bool | None = None) -> None:
        """Async form of the initialisation (and of the import it was asked to)."""
        await super().async_initialize(migrate=migrate)
        await self._async_import_pending()

    async def async_ensure_initialized(self) -> None:
        """Async form of the first-use initialisation (and import)."""
        await super().async_ensure_initialized()
        await self._async_import_pending()

    async def _async_import_pending(self) -> None:
        """Import the upstream data still to import.

        Tasks whose first uses overlap each run the import and wait for it:
        the first to commit writes it, the others find its mark and write nothing.
        """
        source = self._upstream_pending
        if source is None or _IMPORTING.get():
            return
        with _importing():
            try:
                await async_import_upstream_once(source, self)
            except BaseException:
                self._initialized = False
                raise
        self._upstream_pending = None


#: Set while this context runs a store's import (its own operations must not import).
_IMPORTING: ContextVar[bool] = ContextVar("firefly_orm_upstream_importing", default=False)


@contextmanager
def _importing() -> Iterator[None]:
    token = _IMPORTING.set(True)
    try:
        yield
    finally:
        _IMPORTING.reset(token)


class PostgreSQLStore(UpstreamSQLLifecycle, _PostgreSQLStore):
    """:class:`firefly_orm.PostgreSQLStore` with upstream's awaitable lifecycle.

    ``PostgreSQLStore(url, *, pool_size=10, pool_min_size=2, timeout=30.0,
    schema_name="firefly_memory")`` as upstream; ``postgresql://`` URLs use
    psycopg 3 (sync and async).  ``await store.initialize()`` runs the
    migrations on the async engine; ``await store.close()`` disposes the pools;
    ``await store.cleanup_expired()`` returns how many entries it deleted.
    """

    upstream_database = "PostgreSQL"
