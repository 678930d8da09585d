"""The SQL stores with upstream's lifecycle shapes (see :mod:`._lifecycle`)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, ClassVar

from firefly_orm.compat.firefly.memory._lifecycle import failed_to_connect, lifecycle_call
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
    (WAL, migrations); upstream's ``firefly_memory`` table is brought over with
    :func:`firefly_orm.upstream_import.import_upstream`.
    """

    upstream_database = "SQLite"


class PostgreSQLStore(UpstreamSQLLifecycle, _PostgreSQLStore):
    """:class:`firefly_orm.PostgreSQLStore` with upstream's awaitable lifecycle.

    ``PostgreSQLStore(url, *, pool_size=10, pool_min_size=2, timeout=30.0,
    schema_name="firefly_memory")`` as upstream; ``postgresql://`` URLs use
    psycopg 3 (sync and async).  ``await store.initialize()`` runs the
    migrations on the async engine; ``await store.close()`` disposes the pools;
    ``await store.cleanup_expired()`` returns how many entries it deleted.
    """

    upstream_database = "PostgreSQL"
