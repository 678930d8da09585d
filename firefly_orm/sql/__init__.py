"""One SQLAlchemy store for SQLite and PostgreSQL, sync and async.

:class:`SQLAlchemyStore` runs every operation as a plain function over a sync
:class:`~sqlalchemy.engine.Connection` or :class:`~sqlalchemy.orm.Session`.
Sync methods call it inside a Connection transaction; the ``async_*`` twins
await the very same function through ``AsyncConnection.run_sync`` on
SQLAlchemy's native async engine (aiosqlite, psycopg async) — no thread hop,
one implementation (a store given only your sync ``engine=`` runs them on it
in worker threads instead).  A Session is used only to join a caller's transaction
(``unit_of_work(session=...)``, :meth:`SQLAlchemyStore.bind_session`).

Where things are:

* :mod:`~firefly_orm.sql._statements`: the table, the statements (built once)
  and the row <-> entry mapping.
* :mod:`~firefly_orm.sql._ops`: each operation, written once over a
  Session/Connection, and the unit-of-work repository.
* :mod:`~firefly_orm.sql._uow`: the sync and async units of work.
* :mod:`~firefly_orm.sql._runners`: where an operation gets its transaction
  (the store's engines, or a SAVEPOINT of a caller's session).
* :mod:`~firefly_orm.sql._engines`: the store's engines and their disposal.
* :mod:`~firefly_orm.sql._replica`: where reads go with a read replica
  (read-your-writes window, ``consistent_reads``).
* :mod:`~firefly_orm.sql._operations`: the store's operations (validation, then
  a runner), shared by the store and its session-bound view.
* :mod:`~firefly_orm.sql._store`: the store (lifecycle, migrations, errors).
* :mod:`~firefly_orm.sql._presets`: :class:`SQLiteStore`, :class:`PostgreSQLStore`.

The schema name is applied per store with ``schema_translate_map``; the table
definition has no schema, so stores with different schemas share one process.

Ownership: engines the store builds from a URL are disposed by
:meth:`SQLAlchemyStore.close`; engines you pass in (``engine=``,
``async_engine=``) are never disposed.
"""

from __future__ import annotations

from firefly_orm.sql._engines import enable_sqlite_savepoints
from firefly_orm.sql._ops import SQLEntryRepository as SQLEntryRepository
from firefly_orm.sql._presets import PostgreSQLStore, SQLiteStore
from firefly_orm.sql._statements import TABLE as TABLE
from firefly_orm.sql._store import SessionBoundStore, SQLAlchemyStore
from firefly_orm.sql._uow import AsyncSQLUnitOfWork as AsyncSQLUnitOfWork
from firefly_orm.sql._uow import SQLUnitOfWork as SQLUnitOfWork

# SQLEntryRepository, TABLE and the unit-of-work classes stay importable from
# here (``X as X`` re-exports), as before; ``__all__`` lists the public API.
__all__ = [
    "PostgreSQLStore",
    "SQLAlchemyStore",
    "SQLiteStore",
    "SessionBoundStore",
    "enable_sqlite_savepoints",
]
