"""The migration transaction: one per migration, holding the database's migration lock.

Every migration of firefly_orm's tables (:mod:`firefly_orm.migrate`'s
``upgrade``/``downgrade``/``stamp``, a store's ``initialize()``, ``firefly-orm
migrate`` and ``alembic upgrade`` through our ``env.py``) runs inside
:func:`migration_transaction`:

* PostgreSQL: ``pg_advisory_xact_lock`` with one key per schema name, taken
  first and released when the transaction ends (commit, rollback or a dropped
  connection); PostgreSQL's DDL is transactional.
* SQLite: ``BEGIN IMMEDIATE``, the database's write lock, taken before
  anything is read and held until COMMIT.  It is a file lock, so it serialises
  migrators in any number of processes; they wait for it in SQLite's busy
  handler (:data:`SQLITE_LOCK_TIMEOUT` seconds), then fail with
  ``database is locked``.  SQLite's DDL is transactional too: a migration
  killed at any point is rolled back by the journal on the next open.

Whoever runs inside reads the current revision itself after the lock is
granted (Alembic does), so a migrator that waited finds the work done.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

__all__ = ["SQLITE_LOCK_TIMEOUT", "migration_transaction"]

#: Seconds a SQLite migration waits for another migrator's (or writer's) write lock.
SQLITE_LOCK_TIMEOUT = 30.0


def _lock_key(schema_name: str | None) -> int:
    digest = hashlib.sha256(f"firefly_orm:{schema_name or ''}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextmanager
def migration_transaction(conn: Connection, schema: str | None) -> Iterator[None]:
    """One transaction on ``conn`` holding the migration lock of its database (and schema).

    The single place every migration runs in:

    * not in a transaction: begin one, take the lock (PostgreSQL advisory lock,
      SQLite ``BEGIN IMMEDIATE``), yield, commit — or roll back on any error;
    * already in the caller's transaction: a SAVEPOINT of it; the PostgreSQL
      advisory lock is then held until the caller ends its transaction.

    Whatever runs inside must read the current revision itself (Alembic does),
    so a migrator that waited for the lock finds the work already done.
    """
    postgres = conn.dialect.name == "postgresql"
    if conn.in_transaction():
        with conn.begin_nested():
            if postgres:
                _advisory_lock(conn, schema)
            yield
        return
    if conn.dialect.name == "sqlite":
        with _sqlite_busy_timeout(conn), conn.begin():
            _begin_immediate(conn)
            yield
        return
    with conn.begin():
        if postgres:
            _advisory_lock(conn, schema)
        yield


def _advisory_lock(conn: Connection, schema: str | None) -> None:
    """PostgreSQL: wait for the transaction-level advisory lock of ``schema``."""
    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_key(schema))))


def _begin_immediate(conn: Connection) -> None:
    """Make the transaction just begun on ``conn`` a SQLite ``BEGIN IMMEDIATE`` one.

    Neither pysqlite's legacy transaction handling (no BEGIN before DDL, so each
    CREATE/DROP would commit by itself) nor SQLAlchemy's pysqlite dialect sends
    a BEGIN, so we send it.  A begin hook (the stores' engines have one, and so
    may a caller's engine) may already have opened a transaction, perhaps a
    DEFERRED one that takes no lock: nothing has run in it yet, so it is rolled
    back and opened again IMMEDIATE.  The COMMIT is SQLAlchemy's (the driver
    commits an open transaction whatever its isolation level).
    """
    if getattr(conn.connection.driver_connection, "in_transaction", False):
        conn.exec_driver_sql("ROLLBACK")
    conn.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def _sqlite_busy_timeout(conn: Connection) -> Iterator[None]:
    """Wait :data:`SQLITE_LOCK_TIMEOUT` for SQLite's locks; the connection's setting restored after.

    The PRAGMAs go straight to the driver: through SQLAlchemy they would
    autobegin a transaction (and, on the stores' write engines, take the lock).
    """
    wanted = int(SQLITE_LOCK_TIMEOUT * 1000)
    previous = int(_driver_pragma(conn, "PRAGMA busy_timeout"))
    if previous == wanted:
        yield
        return
    _driver_pragma(conn, f"PRAGMA busy_timeout = {wanted}")
    try:
        yield
    finally:
        if not conn.invalidated and not conn.closed:
            _driver_pragma(conn, f"PRAGMA busy_timeout = {previous}")


def _driver_pragma(conn: Connection, statement: str) -> Any:
    """Run a PRAGMA on the DBAPI connection; its first value (None when it returns no row)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(statement)
        row = cursor.fetchone()
        return row[0] if row else None
    finally:
        cursor.close()
