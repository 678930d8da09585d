"""The SQLite and PostgreSQL presets of :class:`~firefly_orm.sql._store.SQLAlchemyStore`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from firefly_orm import migrate
from firefly_orm.envnames import MAX_TIMEOUT_SECONDS
from firefly_orm.errors import EntryValidationError, redact_url
from firefly_orm.migrate._config import (
    POOLER_MODES,
    POOLER_OPTION,
    Pooler,
    check_pooler,
    pooler_connect_args,
    split_pooler_option,
)
from firefly_orm.sql._store import SQLAlchemyStore

__all__ = [
    "POOLER_MODES",
    "POOLER_OPTION",
    "PostgreSQLStore",
    "SQLiteStore",
    "pooler_connect_args",
    "split_pooler_option",
]


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
        timeout: Seconds to wait for a connection (connect and pool checkout); finite,
            positive, at most :data:`firefly_orm.config.MAX_TIMEOUT_SECONDS`.
        schema_name: Schema for our tables (created by the migrations).
        pooler: The pool mode of a connection pooler between the store and
            PostgreSQL (PgBouncer, ...): ``"transaction"`` or ``"session"``; also
            given as ``?pooler=transaction`` on the URL.  ``"transaction"``
            turns psycopg's server-side prepared statements off (a later
            transaction may run on another server connection, which does not
            have them); nothing else of the store keeps session state between
            transactions (the migration lock is ``pg_advisory_xact_lock``).
            ``"session"`` changes nothing.  ``None``: no pooler.
        **kwargs: :class:`~firefly_orm.sql._store.SQLAlchemyStore`'s other
            arguments (``replica_url``, ``replica_window``, ``engine_kwargs``, ...).
    """

    def __init__(
        self,
        url: str | URL,
        *,
        pool_size: int = 10,
        pool_min_size: int = 2,
        timeout: float = 30.0,
        schema_name: str | None = migrate.DEFAULT_SCHEMA,
        pooler: Pooler | None = None,
        **kwargs: Any,
    ) -> None:
        if pool_size < 1 or pool_min_size < 0 or pool_min_size > pool_size:
            raise EntryValidationError(
                "pool_size", "need pool_size >= 1 and 0 <= pool_min_size <= pool_size"
            )
        if isinstance(timeout, bool) or not 0 < timeout <= MAX_TIMEOUT_SECONDS:  # NaN fails too
            raise EntryValidationError(
                "timeout", f"must be a finite number of seconds in (0, {MAX_TIMEOUT_SECONDS:g}]"
            )
        self.pool_size = pool_size
        self.pool_min_size = pool_min_size
        self.timeout = timeout
        parsed = migrate.normalize_url(url)  # postgres:// and postgresql:// -> psycopg
        if parsed.get_backend_name() != "postgresql":
            raise EntryValidationError("url", f"not a PostgreSQL URL: {redact_url(parsed)}")
        if parsed.get_driver_name() in ("psycopg2", "pg8000", "asyncpg"):
            # psycopg 3 is the driver we ship (sync and async); keep one.
            parsed = parsed.set(drivername="postgresql+psycopg")
        parsed, declared = split_pooler_option(parsed, "url")
        replica = kwargs.get("replica_url")
        if replica is not None:
            kwargs["replica_url"], on_replica = split_pooler_option(
                migrate.normalize_url(replica), "replica_url"
            )
            declared = _agree(declared, on_replica, "replica_url")
        self.pooler: Pooler | None = _agree(
            check_pooler(pooler, "pooler") if pooler is not None else None, declared, "pooler"
        )
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
            "connect_args": {
                "connect_timeout": max(1, int(self.timeout)),
                **pooler_connect_args(self.pooler),
            },
        }

    def _after_initialize(self) -> None:
        # Open pool_min_size connections now so the pool is warm before the first request.
        conns = [self.engine.connect() for _ in range(self.pool_min_size)]
        for conn in conns:
            conn.close()


def _agree(first: Pooler | None, second: Pooler | None, field: str) -> Pooler | None:
    if first is not None and second is not None and first != second:
        raise EntryValidationError(field, f"pooler declared twice: {first!r} and {second!r}")
    return first if first is not None else second
