"""Nothing migrates behind the app's back (issue 34, section 2).

A store on the app's engine, and any work through the app's session, runs no
DDL unless built with ``migrate=True``: on a database that is not at head its
first operation (read or write, sync or async) raises
:class:`MigrationRequiredError` and nothing is written.  Every statement sent
to the database is captured (``before_cursor_execute`` on every engine of the
process) and none is DDL.  A store looking in the wrong schema names the
schema our tables are in.  ``firefly-orm downgrade base`` leaves no empty
schema behind, and never drops one that holds anything else.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from firefly_orm import migrate
from firefly_orm.cli import main as cli_main
from firefly_orm.entry import TABLE_NAME, MemoryEntry
from firefly_orm.errors import MigrationRequiredError
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore, enable_sqlite_savepoints

#: Statements that change the schema, or write rows.
_DDL = re.compile(r"^\s*(CREATE|ALTER|DROP|TRUNCATE|COMMENT|GRANT|REVOKE)\b", re.IGNORECASE)
_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|UPSERT|REPLACE)\b", re.IGNORECASE)


@contextmanager
def captured() -> Iterator[list[str]]:
    """Every statement any engine of this process sends while the block runs."""
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)


def ddl_in(statements: list[str]) -> list[str]:
    return [s for s in statements if _DDL.match(s)]


def writes_in(statements: list[str]) -> list[str]:
    return [s for s in statements if _WRITE.match(s)]


# --------------------------------------------------------------------------- databases


class AppDb:
    """An app's database: its URL (default schema: ``app_schema`` on PostgreSQL)."""

    def __init__(self, url: str, app_schema: str | None) -> None:
        self.url = url
        self.app_schema = app_schema

    @property
    def sqlite(self) -> bool:
        return self.app_schema is None

    def async_url(self) -> str:
        return self.url.replace("sqlite://", "sqlite+aiosqlite://", 1)

    def tables(self, schema: str | None = None) -> set[str]:
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                inspector = sa.inspect(conn)
                if schema is not None and not inspector.has_schema(schema):
                    return set()
                return set(inspector.get_table_names(schema=schema))
        finally:
            engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    """An unmigrated database; on PostgreSQL the app's own schema is its default one."""
    if request.param == "sqlite":
        yield AppDb(f"sqlite:///{tmp_path / 'app.sqlite3'}", None)
        return
    admin_url: str = request.getfixturevalue("postgres_url")
    schema = "nddl_app_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(admin_url, poolclass=sa.pool.NullPool)
    with admin.begin() as conn:
        conn.execute(sa.schema.CreateSchema(schema))
    url = (
        sa.engine.make_url(admin_url)
        .update_query_dict({"options": f"-csearch_path={schema}"})
        .render_as_string(hide_password=False)
    )
    try:
        yield AppDb(url, schema)
    finally:
        drop_schema(admin, schema)
        admin.dispose()


def app_engine(db: AppDb) -> sa.Engine:
    engine = sa.create_engine(db.url)
    if db.sqlite:
        enable_sqlite_savepoints(engine)
    return engine


# --------------------------------------------------------------------------- first use, no DDL

#: A first operation of a store: each is the first thing the store does.
OPERATIONS: dict[str, Callable[[Any], object]] = {
    "save": lambda store: store.save("ns", MemoryEntry(key="k", content="x")),
    "load": lambda store: store.load("ns"),
    "unit_of_work": lambda store: store.run_in_unit_of_work(
        lambda uow: uow.entries.save("ns", MemoryEntry(content="x")), commit=True
    ),
    "initialize": lambda store: store.initialize(),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_store_on_the_apps_engine_runs_no_ddl(app_db: AppDb, operation: str) -> None:
    engine = app_engine(app_db)
    store = SQLAlchemyStore(engine=engine)
    assert store.migrates is False
    try:
        with captured() as statements, pytest.raises(MigrationRequiredError) as info:
            OPERATIONS[operation](store)
    finally:
        store.close()
        engine.dispose()
    assert statements, "the check reads the database"
    assert ddl_in(statements) == [] and writes_in(statements) == []
    message = str(info.value)
    assert "database not at head" in message and "migrate=True" in message
    assert app_db.tables(app_db.app_schema) == set()  # nothing written


@pytest.mark.parametrize("how", ["engine", "async_engine", "async_session"])
def test_async_paths_run_no_ddl(app_db: AppDb, how: str) -> None:
    """The async twins: on the app's sync engine (worker threads), its AsyncEngine, its session."""

    async def first_use() -> tuple[list[str], str]:
        sync = app_engine(app_db) if how == "engine" else None
        async_engine = create_async_engine(app_db.async_url()) if how != "engine" else None
        if async_engine is not None and app_db.sqlite:
            enable_sqlite_savepoints(async_engine)
        store = SQLAlchemyStore(engine=sync, async_engine=async_engine)
        try:
            with captured() as statements, pytest.raises(MigrationRequiredError) as info:
                if how == "async_session":
                    assert async_engine is not None
                    async with AsyncSession(async_engine) as session:
                        await store.bind_session(session).async_save("ns", MemoryEntry(content="x"))
                else:
                    await store.async_save("ns", MemoryEntry(content="x"))
            return statements, str(info.value)
        finally:
            await store.async_close()
            if async_engine is not None:
                await async_engine.dispose()
            if sync is not None:
                sync.dispose()

    statements, message = asyncio.run(first_use())
    assert statements and ddl_in(statements) == [] and writes_in(statements) == []
    assert "aiosqlite" not in message  # the command to run takes the sync driver
    assert app_db.tables(app_db.app_schema) == set()


@pytest.mark.parametrize("via", ["bind_session", "unit_of_work"])
def test_work_through_the_apps_session_runs_no_ddl(app_db: AppDb, via: str) -> None:
    """A store built from a URL still runs no DDL for work joined to the app's session."""
    engine = app_engine(app_db)
    schema = None if app_db.sqlite else app_db.app_schema
    store = SQLAlchemyStore(app_db.url, schema_name=schema)
    assert store.migrates is True  # its own work would migrate: it owns its engine
    try:
        with (
            Session(engine) as session,
            captured() as statements,
            pytest.raises(MigrationRequiredError, match="through your session"),
        ):
            if via == "bind_session":
                store.bind_session(session).save("ns", MemoryEntry(content="x"))
            else:
                with store.unit_of_work(session=session) as uow:
                    uow.entries.save("ns", MemoryEntry(content="x"))
    finally:
        store.close()
        engine.dispose()
    assert statements and ddl_in(statements) == [] and writes_in(statements) == []
    assert app_db.tables(app_db.app_schema) == set()


def test_a_url_store_told_not_to_migrate_runs_no_ddl(app_db: AppDb) -> None:
    store: SQLAlchemyStore
    if app_db.sqlite:
        store = SQLiteStore(app_db.url.removeprefix("sqlite:///"), migrate=False)
    else:
        store = PostgreSQLStore(
            app_db.url, schema_name=app_db.app_schema, migrate=False, pool_min_size=0
        )
    try:
        with captured() as statements, pytest.raises(MigrationRequiredError) as info:
            store.save("ns", MemoryEntry(content="x"))
    finally:
        store.close()
    assert statements and ddl_in(statements) == [] and writes_in(statements) == []
    assert "migrate=True" not in str(info.value)  # told so: no hint about the default
    assert app_db.tables(app_db.app_schema) == set()


def test_migrate_true_migrates_on_the_apps_engine(app_db: AppDb) -> None:
    """The capture sees DDL when there is some: the opt-in migrates, then works."""
    engine = app_engine(app_db)
    store = SQLAlchemyStore(engine=engine, migrate=True)
    try:
        with captured() as statements:
            store.save("ns", MemoryEntry(key="k", content="x"))
        found = store.load_by_key("ns", "k")
    finally:
        store.close()
        engine.dispose()
    assert any(s.lstrip().upper().startswith("CREATE TABLE") for s in ddl_in(statements))
    assert found is not None and found.content == "x"
    assert TABLE_NAME in app_db.tables(app_db.app_schema)


@pytest.mark.parametrize("app_db", ["sqlite"], indirect=True)  # the same on PostgreSQL
def test_an_explicit_initialize_migrates_and_then_the_store_works(app_db: AppDb) -> None:
    engine = app_engine(app_db)
    store = SQLAlchemyStore(engine=engine)
    try:
        store.initialize(migrate=True)  # the app's start-up asks for it
        store.save("ns", MemoryEntry(content="x"))
        assert [e.content for e in store.load("ns")] == ["x"]
    finally:
        store.close()
        engine.dispose()


def test_a_store_at_head_works_without_migrating(app_db: AppDb) -> None:
    migrate.upgrade(app_db.url, schema_name=app_db.app_schema)
    engine = app_engine(app_db)
    store = SQLAlchemyStore(engine=engine)
    try:
        with captured() as statements:
            store.save("ns", MemoryEntry(content="x"))
            with Session(engine) as session:
                store.bind_session(session).save("ns", MemoryEntry(content="y"))
                session.commit()
        assert sorted(e.content for e in store.load("ns")) == ["x", "y"]
    finally:
        store.close()
        engine.dispose()
    assert ddl_in(statements) == []


@pytest.mark.parametrize("app_db", ["sqlite"], indirect=True)  # the same on PostgreSQL
def test_a_refusing_store_works_once_the_app_has_migrated(app_db: AppDb) -> None:
    """The refusal is not remembered: the next operation checks again."""
    engine = app_engine(app_db)
    store = SQLAlchemyStore(engine=engine)
    try:
        with pytest.raises(MigrationRequiredError):
            store.save("ns", MemoryEntry(content="x"))
        migrate.upgrade(engine)  # the app's deploy step
        store.save("ns", MemoryEntry(content="x"))
        assert [e.content for e in store.load("ns")] == ["x"]
    finally:
        store.close()
        engine.dispose()


def test_the_migrate_option_is_checked() -> None:
    with pytest.raises(ValueError, match="migrate"):
        SQLAlchemyStore("sqlite:///unused.db", migrate="no")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the wrong schema


@pytest.fixture
def fresh_pg(postgres_url: str) -> Iterator[AppDb]:
    """A database of its own (no other test's schemas in it), its default schema the app's."""
    name = "nddl_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(postgres_url).set(database=name)
    with sa.create_engine(url, poolclass=sa.pool.NullPool).begin() as conn:
        conn.execute(sa.schema.CreateSchema("app"))
    app_url = url.update_query_dict({"options": "-csearch_path=app"})
    try:
        yield AppDb(app_url.render_as_string(hide_password=False), "app")
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_a_store_without_schema_name_names_the_schema_our_tables_are_in(fresh_pg: AppDb) -> None:
    """The app keeps our tables in a schema of their own; the store was built without it."""
    migrate.upgrade(fresh_pg.url, schema_name="firefly_memory")
    engine = app_engine(fresh_pg)
    store = SQLAlchemyStore(engine=engine)  # no schema_name=: looks in the app's schema
    try:
        with captured() as statements, pytest.raises(MigrationRequiredError) as info:
            store.save("ns", MemoryEntry(content="x"))
        message = str(info.value)
        assert "'firefly_memory' (at head)" in message and "check schema_name=" in message
        assert "schema_name='firefly_memory'" in message and "looks in 'app'" in message
        assert ddl_in(statements) == [] and writes_in(statements) == []
        assert fresh_pg.tables("app") == set()  # no stray copy of our tables
        # The same from the command line's check and from initialize(migrate=False).
        with pytest.raises(MigrationRequiredError, match="'firefly_memory' \\(at head\\)"):
            migrate.require_head(fresh_pg.url)
        # With the right schema the same engine works, and writes where the tables are.
        right = SQLAlchemyStore(engine=engine, schema_name="firefly_memory")
        right.save("ns", MemoryEntry(content="x"))
        right.close()
        again = SQLAlchemyStore(engine=engine, schema_name="firefly_memory")
        assert [e.content for e in again.load("ns")] == ["x"]
        again.close()
    finally:
        store.close()
        engine.dispose()


@pytest.mark.postgres
def test_an_older_copy_elsewhere_is_named_with_its_revision(fresh_pg: AppDb) -> None:
    first = sorted(migrate.check(fresh_pg.url, schema_name="app"))[0]
    migrate.upgrade(fresh_pg.url, schema_name="old_memory", revision=first)
    with pytest.raises(MigrationRequiredError) as info:
        migrate.require_head(fresh_pg.url, schema_name="app")
    assert f"'old_memory' (at {first})" in str(info.value)


@pytest.mark.postgres
def test_a_schema_dropped_while_the_hint_is_made_is_skipped(fresh_pg: AppDb) -> None:
    """Other processes drop schemas at any time: one listed, then gone, is not an error."""
    migrate.upgrade(fresh_pg.url, schema_name="gone_memory")
    migrate.upgrade(fresh_pg.url, schema_name="kept_memory")
    admin = sa.create_engine(fresh_pg.url, poolclass=sa.pool.NullPool)
    dropped: list[str] = []

    def drop_it_first(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "gone_memory.firefly_orm_alembic_version" in statement and not dropped:
            dropped.append(statement)
            with admin.begin() as conn:
                conn.execute(sa.text("DROP SCHEMA gone_memory CASCADE"))

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", drop_it_first)
    try:
        with pytest.raises(MigrationRequiredError) as info:
            migrate.require_head(fresh_pg.url, schema_name="app")
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", drop_it_first)
        admin.dispose()
    assert dropped  # the race happened
    assert "'kept_memory' (at head)" in str(info.value)
    assert "gone_memory" not in str(info.value)


@pytest.mark.postgres
def test_no_schema_hint_when_our_tables_are_nowhere_else(fresh_pg: AppDb) -> None:
    with pytest.raises(MigrationRequiredError) as info:
        migrate.require_head(fresh_pg.url, schema_name="app")
    assert "another schema" not in str(info.value)
    assert "schema_name=" not in str(info.value)


# --------------------------------------------------------------------------- downgrade base


def _cli(*args: str) -> int:
    return cli_main(list(args))


@pytest.mark.postgres
def test_downgrade_base_drops_the_schema_it_emptied(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = "nddl_down_" + uuid.uuid4().hex[:8]
    db = AppDb(postgres_url, schema)
    try:
        assert _cli("migrate", "--url", postgres_url, "--schema", schema) == 0
        assert TABLE_NAME in db.tables(schema)
        assert _cli("downgrade", "base", "--url", postgres_url, "--schema", schema) == 0
        assert f"schema {schema} dropped" in capsys.readouterr().out
        engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            assert not sa.inspect(conn).has_schema(schema)
        engine.dispose()
        assert migrate.current(postgres_url, schema_name=schema) is None
        migrate.upgrade(postgres_url, schema_name=schema)  # and it comes back
        assert migrate.current(postgres_url, schema_name=schema) == migrate.head()
    finally:
        drop_schema(postgres_url, schema)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "other",
    # Not a table: a check that looked only for tables would drop this schema.
    ["CREATE FUNCTION {s}.app_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'"],
    ids=["function"],
)
def test_downgrade_base_keeps_a_schema_that_holds_anything_else(
    postgres_url: str, other: str, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = "nddl_keep_" + uuid.uuid4().hex[:8]
    db = AppDb(postgres_url, schema)
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    try:
        migrate.upgrade(postgres_url, schema_name=schema)
        with engine.begin() as conn:
            conn.execute(sa.text(other.format(s=schema)))
        assert _cli("downgrade", "base", "--url", postgres_url, "--schema", schema) == 0
        assert f"schema {schema} kept" in capsys.readouterr().out
        with engine.connect() as conn:
            assert sa.inspect(conn).has_schema(schema)
            names = set(
                conn.execute(
                    sa.text(
                        "SELECT relname FROM pg_class c JOIN pg_namespace n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relkind = 'r'"
                    ),
                    {"s": schema},
                ).scalars()
            )
            functions = set(
                conn.execute(
                    sa.text(
                        "SELECT proname FROM pg_proc p JOIN pg_namespace n "
                        "ON n.oid = p.pronamespace WHERE n.nspname = :s"
                    ),
                    {"s": schema},
                ).scalars()
            )
        # Ours gone (tables, version table, trigger functions); the app's object stays.
        assert names == set() and functions == {"app_fn"}
        assert db.tables(schema) == names
    finally:
        engine.dispose()
        drop_schema(postgres_url, schema)


@pytest.mark.postgres
@pytest.mark.parametrize("app_db", ["postgres"], indirect=True)
def test_downgrade_base_in_the_default_schema_keeps_the_schema(app_db: AppDb) -> None:
    """Without a schema name our tables are in the app's default schema: it is never dropped."""
    migrate.upgrade(app_db.url)  # app_db.url's default schema is the app's
    assert TABLE_NAME in app_db.tables(app_db.app_schema)
    migrate.downgrade(app_db.url, "base")
    assert app_db.tables(app_db.app_schema) == set()  # our version table went too
    engine = sa.create_engine(app_db.url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        assert sa.inspect(conn).has_schema(str(app_db.app_schema))
    engine.dispose()


def test_downgrade_base_on_sqlite_leaves_no_table_of_ours(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}"
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE app_things (id int)"))
    migrate.downgrade(url, "base")
    with engine.connect() as conn:
        assert set(sa.inspect(conn).get_table_names()) == {"app_things"}
    engine.dispose()
    assert migrate.current(url) is None
