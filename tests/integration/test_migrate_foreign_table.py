"""A ``memory_entries`` table our migrations did not create (issue 16 follow-up).

The Firefly framework's own PostgreSQL store created ``memory_entries`` (in its
``firefly_memory`` schema, ours by default too) in its own shape: ``entry_id``,
``namespace`` and ``content``, as its SQLite store's table (read by
``firefly_orm.upstream_import``).  Our first revision would then fail with a
bare "already exists".  Every way of upgrading refuses such a schema instead,
with what was found and what to do, and writes nothing; on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from dbutil import drop_schema

from firefly_orm import migrate
from firefly_orm.entry import TABLE_NAME, metadata
from firefly_orm.envnames import ENV_POSTGRES_SCHEMA, ENV_SQLITE_PATH
from firefly_orm.errors import MigrationRequiredError
from firefly_orm.sql import SQLAlchemyStore

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass
class Db:
    """A database with (on PostgreSQL) a schema of the test's own, not created yet."""

    url: str
    schema: str | None

    def engine(self) -> sa.Engine:
        return sa.create_engine(self.url, poolclass=sa.pool.NullPool)

    def snapshot(self) -> dict[str, object]:
        """Every table of the schema with its columns, and the upstream table's rows."""
        engine = self.engine()
        try:
            inspector = sa.inspect(engine)
            tables = {
                name: [c["name"] for c in inspector.get_columns(name, schema=self.schema)]
                for name in sorted(inspector.get_table_names(schema=self.schema))
            }
            with engine.connect() as conn:
                table = sa.table(TABLE_NAME, sa.column("entry_id"), schema=self.schema)
                rows = sorted(conn.execute(sa.select(table.c.entry_id)).scalars())
            return {"tables": tables, "rows": rows}
        finally:
            engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        yield Db(f"sqlite:///{tmp_path / 'upstream.sqlite3'}", None)
        return
    url: str = request.getfixturevalue("postgres_url")
    schema = "upstream_" + uuid.uuid4().hex[:10]
    try:
        yield Db(url, schema)
    finally:
        drop_schema(url, schema)


def _upstream_table(db: Db, *, rows: int) -> None:
    """``memory_entries`` in the Firefly framework store's shape, with ``rows`` entries."""
    table = sa.Table(
        TABLE_NAME,
        sa.MetaData(),
        sa.Column("entry_id", sa.String(), primary_key=True),
        sa.Column("namespace", sa.String(), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        schema=db.schema,
    )
    engine = db.engine()
    try:
        with engine.begin() as conn:
            if db.schema is not None:
                conn.execute(sa.schema.CreateSchema(db.schema))
            table.create(conn)
            for i in range(rows):
                conn.execute(table.insert().values(entry_id=f"e{i}", namespace="ns", content={}))
    finally:
        engine.dispose()


def _assert_explains(message: str, db: Db, *, empty: bool) -> None:
    where = f"{db.schema}.{TABLE_NAME}" if db.schema else TABLE_NAME
    assert f"{where} already exists" in message
    assert "is not firefly_orm's" in message and "entry_id, namespace, content" in message
    assert ("It is empty" if empty else "It is NOT empty") in message
    assert "Nothing was changed" in message and "drop it" in message
    assert "Migrating from the Firefly framework" in message
    if db.schema is None:
        assert "another database file" in message and ENV_SQLITE_PATH in message
    else:
        assert "schema_name=" in message and ENV_POSTGRES_SCHEMA in message
        assert "Firefly framework's own PostgreSQL store" in message
    assert "relation" not in message and "already exists\n" not in message


@pytest.mark.parametrize("rows", [0, 2])
def test_every_upgrade_refuses_a_foreign_table_and_writes_nothing(db: Db, rows: int) -> None:
    _upstream_table(db, rows=rows)
    before = db.snapshot()

    with pytest.raises(MigrationRequiredError) as info:
        migrate.upgrade(db.url, schema_name=db.schema)
    _assert_explains(str(info.value), db, empty=rows == 0)
    assert db.snapshot() == before

    store = SQLAlchemyStore(db.url, schema_name=db.schema)
    try:
        with pytest.raises(MigrationRequiredError) as info:
            store.initialize()
        _assert_explains(str(info.value), db, empty=rows == 0)
    finally:
        store.close()
    assert db.snapshot() == before

    # ``alembic upgrade head`` through our env.py (its own connection)
    result = subprocess.run(
        [str(BIN / "alembic"), "-x", f"url={db.url}"]
        + (["-x", f"schema={db.schema}"] if db.schema else [])
        + ["upgrade", "head"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("FIREFLY_AGENTIC_")},
    )
    assert result.returncode != 0
    _assert_explains(result.stderr, db, empty=rows == 0)
    assert db.snapshot() == before

    # the read-only commands still answer: never migrated, everything pending
    assert migrate.current(db.url, schema_name=db.schema) is None
    assert len(migrate.check(db.url, schema_name=db.schema)) > 1


def test_inside_the_callers_transaction_only_the_migration_is_undone(db: Db) -> None:
    _upstream_table(db, rows=1)
    engine = db.engine()
    table = sa.table(
        TABLE_NAME,
        sa.column("entry_id"),
        sa.column("namespace"),
        sa.column("content"),
        schema=db.schema,
    )
    try:
        with engine.connect() as conn:
            conn.execute(table.insert().values(entry_id="mine", namespace="ns", content="{}"))
            with pytest.raises(MigrationRequiredError):
                migrate.upgrade(conn, schema_name=db.schema)
            conn.commit()  # the caller's own work is still there to commit
    finally:
        engine.dispose()
    assert db.snapshot()["rows"] == ["e0", "mine"]
    assert migrate.current(db.url, schema_name=db.schema) is None


def test_once_the_table_is_gone_the_upgrade_runs(db: Db) -> None:
    _upstream_table(db, rows=0)
    with pytest.raises(MigrationRequiredError):
        migrate.upgrade(db.url, schema_name=db.schema)
    engine = db.engine()
    try:
        with engine.begin() as conn:
            conn.execute(sa.schema.DropTable(sa.Table(TABLE_NAME, sa.MetaData(), schema=db.schema)))
    finally:
        engine.dispose()
    migrate.upgrade(db.url, schema_name=db.schema)
    assert migrate.check(db.url, schema_name=db.schema) == []


def test_a_table_of_ours_made_without_migrations_is_told_apart(db: Db) -> None:
    """``metadata.create_all`` made our table but recorded no revision: stamp, do not drop."""
    engine = db.engine()
    try:
        with engine.begin() as conn:
            if db.schema is not None:
                conn.execute(sa.schema.CreateSchema(db.schema))
            conn = conn.execution_options(schema_translate_map={None: db.schema})
            metadata.create_all(conn)
    finally:
        engine.dispose()
    with pytest.raises(MigrationRequiredError) as info:
        migrate.upgrade(db.url, schema_name=db.schema)
    message = str(info.value)
    assert "has firefly_orm's columns" in message and migrate.VERSION_TABLE in message
    assert "firefly-orm stamp" in message and "drop it" not in message
