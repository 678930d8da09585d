"""Alembic migrations: one head, round trips, model == schema, CLI (wheel: test_cli.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from cli_runner import run_cli
from dbutil import drop_schema
from store_backends import DEFAULT_SCHEMA_GROUP

from firefly_orm import migrate
from firefly_orm._layout import LISTING_INDEXES
from firefly_orm._search import SQLITE_FTS_TABLES, is_search_index_object
from firefly_orm.entry import TABLE_NAME, metadata
from firefly_orm.errors import EntryValidationError, MigrationRequiredError
from firefly_orm.sql._graph import GRAPH_TABLES

REPO = Path(__file__).resolve().parents[2]
#: The knowledge graph's tables (0008), beside the entries.
GRAPH_NAMES = {table.name for table in GRAPH_TABLES}


def _diff(url: str, schema: str | None, model: sa.MetaData = metadata) -> list[object]:
    """Autogenerate comparison between ``model`` and the migrated database."""
    target = sa.MetaData()
    for table in model.tables.values():
        # None (documented: the target MetaData's schema, i.e. none) is missing from the stub.
        table.to_metadata(target, schema=schema)  # type: ignore[arg-type]

    def include(name: str | None, type_: str, parent: object) -> bool:
        if type_ == "schema":
            return name == schema
        if type_ == "table":
            return name == TABLE_NAME
        # PostgreSQL's generated tsvector column and its GIN index are not in the model,
        # nor the conversation list's expression indexes (0009).
        if type_ == "index" and name in LISTING_INDEXES:
            return False
        return not is_search_index_object(name, type_)

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    "include_schemas": schema is not None,
                    "include_name": include,
                },
            )
            return list(compare_metadata(ctx, target))
    finally:
        engine.dispose()


def _tables(url: str, schema: str | None) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names(schema=schema))
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'migrate.sqlite3'}"


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    schema = "mig_" + uuid.uuid4().hex[:10]
    yield schema
    drop_schema(postgres_url, schema)


def test_one_head_with_branch_label() -> None:
    script = ScriptDirectory.from_config(migrate.make_config())
    assert len(script.get_heads()) == 1
    bases = [script.get_revision(rev) for rev in script.get_bases()]
    assert len(bases) == 1
    assert bases[0] is not None and "firefly_orm" in bases[0].branch_labels
    assert migrate.head() == script.get_heads()[0]


def _all_revisions() -> list[str]:
    script = ScriptDirectory.from_config(migrate.make_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def test_revision_files_are_read_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store start-ups and migrations share one ScriptDirectory: each revision file read once.

    A proxy for the start-up cost: two fresh stores migrate (each runs env.py),
    a third starts at head, then a downgrade and an upgrade run; Alembic's
    ``ScriptDirectory`` is built once for all of them and each revision file is
    loaded once (env.py once per migration run).
    """
    import alembic.script.base as script_base
    import alembic.util.pyfiles as pyfiles

    from firefly_orm.migrate import _config
    from firefly_orm.sql import SQLiteStore

    monkeypatch.setattr(_config, "_scripts", {})  # a process that has read nothing yet
    built: list[str] = []
    loaded: list[str] = []
    real_init, real_load = script_base.ScriptDirectory.__init__, pyfiles.load_module_py

    def counting_init(self: script_base.ScriptDirectory, *args: Any, **kwargs: Any) -> None:
        built.append(str(args[0] if args else kwargs["dir"]))
        real_init(self, *args, **kwargs)

    def counting_load(module_id: str, path: str | os.PathLike[str]) -> ModuleType:
        loaded.append(Path(path).name)
        return real_load(module_id, path)

    monkeypatch.setattr(script_base.ScriptDirectory, "__init__", counting_init)
    monkeypatch.setattr(pyfiles, "load_module_py", counting_load)
    for name in ("one.db", "two.db", "one.db"):
        store = SQLiteStore(tmp_path / name)
        try:
            store.initialize()
        finally:
            store.close()
    url = f"sqlite:///{tmp_path / 'one.db'}"
    migrate.downgrade(url, "base")
    migrate.upgrade(url)
    assert migrate.check(url) == [] and migrate.check(f"sqlite:///{tmp_path / 'two.db'}") == []

    revision_files = sorted(p.name for p in Path(migrate.versions_location()).glob("*.py"))
    assert built == [migrate.script_location()]
    assert sorted(n for n in loaded if n != "env.py") == revision_files
    assert loaded.count("env.py") == 4  # two fresh stores, the downgrade, the upgrade


def test_sqlite_upgrade_downgrade_upgrade(sqlite_url: str) -> None:
    revisions = _all_revisions()
    assert revisions[-1] == migrate.head()
    assert migrate.check(sqlite_url) == revisions
    migrate.upgrade(sqlite_url)
    assert _tables(sqlite_url, None) == {
        TABLE_NAME,
        migrate.VERSION_TABLE,
        *SQLITE_FTS_TABLES,
        *GRAPH_NAMES,
    }
    assert migrate.current(sqlite_url) == migrate.head()
    assert migrate.check(sqlite_url) == []
    migrate.downgrade(sqlite_url, "base")
    assert _tables(sqlite_url, None) == set()  # our empty version table goes too
    assert migrate.current(sqlite_url) is None
    migrate.upgrade(sqlite_url)
    assert migrate.current(sqlite_url) == migrate.head()
    migrate.upgrade(sqlite_url)  # idempotent


def test_data_survives_every_upgrade_step(sqlite_url: str) -> None:
    """A database created at the first revision keeps its rows through each upgrade."""
    from firefly_orm.entry import MemoryEntry
    from firefly_orm.sql import SQLAlchemyStore
    from firefly_orm.sql._statements import TABLE, entry_values

    revisions = _all_revisions()
    migrate.upgrade(sqlite_url, revision=revisions[0])
    engine = sa.create_engine(sqlite_url)
    # Write the row as the first revision's table holds it: only its columns.
    present = {col["name"] for col in sa.inspect(engine).get_columns(TABLE_NAME)}
    old_table = sa.Table(
        TABLE_NAME, sa.MetaData(), *[c._copy() for c in TABLE.columns if c.name in present]
    )
    values = entry_values("ns", MemoryEntry(key="k", content={"kept": True}))
    with engine.begin() as conn:
        conn.execute(old_table.insert().values({k: v for k, v in values.items() if k in present}))
    for revision in revisions[1:]:
        migrate.upgrade(sqlite_url, revision=revision)
        assert migrate.current(sqlite_url) == revision
    fresh = SQLAlchemyStore(engine=engine)
    found = fresh.load_by_key("ns", "k")
    assert found is not None and found.content == {"kept": True}
    assert _diff(sqlite_url, None) == []
    fresh.close()
    engine.dispose()


def test_sqlite_migrated_schema_equals_model(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    assert _diff(sqlite_url, None) == []


def test_diff_detects_a_model_change(sqlite_url: str) -> None:
    """The comparison used above is able to fail."""
    migrate.upgrade(sqlite_url)
    changed = sa.MetaData()
    table = metadata.tables[TABLE_NAME].to_metadata(changed)
    table.append_column(sa.Column("extra", sa.Integer(), nullable=True))
    diff = _diff(sqlite_url, None, changed)
    assert any("extra" in repr(item) for item in diff)


@pytest.mark.postgres
def test_postgres_custom_schema_round_trip(postgres_url: str, pg_schema: str) -> None:
    migrate.upgrade(postgres_url, schema_name=pg_schema)
    assert _tables(postgres_url, pg_schema) == {TABLE_NAME, migrate.VERSION_TABLE, *GRAPH_NAMES}
    # our version table lives in the schema, not in public
    assert migrate.VERSION_TABLE not in _tables(postgres_url, "public")
    assert _diff(postgres_url, pg_schema) == []
    migrate.downgrade(postgres_url, "base", schema_name=pg_schema)
    assert _tables(postgres_url, pg_schema) == set()  # and the schema, empty then
    assert migrate.check(postgres_url, schema_name=pg_schema) == _all_revisions()
    migrate.upgrade(postgres_url, schema_name=pg_schema)
    assert _diff(postgres_url, pg_schema) == []


@pytest.mark.postgres
@pytest.mark.xdist_group(DEFAULT_SCHEMA_GROUP)  # drops the default schema the contract suite uses
def test_postgres_default_schema_equals_model(postgres_url: str) -> None:
    schema = migrate.DEFAULT_SCHEMA
    drop_schema(postgres_url, schema)
    try:
        migrate.upgrade(postgres_url, schema_name=schema)
        assert _diff(postgres_url, schema) == []
    finally:
        drop_schema(postgres_url, schema)


@pytest.mark.postgres
@pytest.mark.parametrize("reserved", ["user", "select"])
def test_postgres_reserved_word_schema(postgres_url: str, reserved: str) -> None:
    """Names that are SQL keywords are quoted, never interpolated."""
    drop_schema(postgres_url, reserved)
    try:
        migrate.upgrade(postgres_url, schema_name=reserved)
        assert TABLE_NAME in _tables(postgres_url, reserved)
    finally:
        drop_schema(postgres_url, reserved)


@pytest.mark.parametrize("bad", ["", "1abc", "a;drop table x", "a-b", "x" * 64, "sch ema"])
def test_bad_schema_names_rejected(bad: str) -> None:
    with pytest.raises(EntryValidationError) as info:
        migrate.validate_schema_name(bad)
    assert info.value.field == "schema_name"


def test_require_head(sqlite_url: str) -> None:
    with pytest.raises(MigrationRequiredError, match="not at head"):
        migrate.require_head(sqlite_url)
    migrate.upgrade(sqlite_url)
    migrate.require_head(sqlite_url)


def _alembic(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("alembic")
    return subprocess.run(
        [str(exe), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("FIREFLY_AGENTIC_")},
    )


def test_alembic_cli_from_repo_root_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    result = _alembic("-x", f"url={url}", "upgrade", "head")
    assert result.returncode == 0, result.stderr
    assert migrate.current(url) == migrate.head()
    result = _alembic("-x", f"url={url}", "downgrade", "base")
    assert result.returncode == 0, result.stderr
    assert migrate.current(url) is None


def test_alembic_cli_without_url_explains() -> None:
    result = _alembic("upgrade", "head")
    assert result.returncode != 0
    assert "-x url=" in result.stderr


@pytest.mark.postgres
def test_alembic_cli_postgres_schema(postgres_url: str, pg_schema: str) -> None:
    result = _alembic("-x", f"url={postgres_url}", "-x", f"schema={pg_schema}", "upgrade", "head")
    assert result.returncode == 0, result.stderr
    assert migrate.current(postgres_url, schema_name=pg_schema) == migrate.head()
    assert _diff(postgres_url, pg_schema) == []


def test_database_from_a_newer_release_is_refused(sqlite_url: str) -> None:
    """A revision we do not know is never migrated over, and the error says why."""
    from firefly_orm.sql import SQLAlchemyStore

    migrate.upgrade(sqlite_url)
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999_future'"))
    for call in (
        lambda: migrate.check(sqlite_url),
        lambda: migrate.upgrade(sqlite_url),
        lambda: SQLAlchemyStore(sqlite_url).initialize(),
        lambda: SQLAlchemyStore(sqlite_url).initialize(migrate=False),
    ):
        with pytest.raises(MigrationRequiredError, match="newer firefly_orm"):
            call()
    with engine.connect() as conn:
        assert conn.execute(sa.text(f"SELECT version_num FROM {migrate.VERSION_TABLE}")).all() == [
            ("9999_future",)
        ]
    engine.dispose()
    result = run_cli("check", "--url", sqlite_url)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "newer firefly_orm" in result.stderr


def _check_names(url: str, schema: str | None) -> set[str]:
    engine = sa.create_engine(url)
    try:
        checks = sa.inspect(engine).get_check_constraints(TABLE_NAME, schema=schema)
        return {name for c in checks if (name := c.get("name"))}
    finally:
        engine.dispose()


_MODEL_CHECKS = {
    c.name for c in metadata.tables[TABLE_NAME].constraints if isinstance(c, sa.CheckConstraint)
}


def test_sqlite_constraint_names_match_the_model(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    assert {"ck_memory_entries_importance_range", "ck_memory_entries_scope_values"} == _MODEL_CHECKS
    assert _check_names(sqlite_url, None) == _MODEL_CHECKS


@pytest.mark.postgres
def test_postgres_constraint_names_match_the_model(postgres_url: str, pg_schema: str) -> None:
    migrate.upgrade(postgres_url, schema_name=pg_schema)
    assert _check_names(postgres_url, pg_schema) == _MODEL_CHECKS


# --------------------------------------------------------------------------- review fixes


def _short_scheme(url: str) -> str:
    """``url`` with the plain ``postgres://`` scheme (no driver named)."""
    parsed = sa.engine.make_url(url).set(drivername="postgres")
    return parsed.render_as_string(hide_password=False)


def _run_sql_script(url: str, script: str) -> None:
    """Run an offline SQL script as a DBA would (psql-like: the script's own BEGIN/COMMIT)."""
    import psycopg

    conninfo = sa.engine.make_url(url).set(drivername="postgresql")
    with psycopg.connect(conninfo.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(script.encode())


@pytest.mark.postgres
def test_offline_sql_creates_everything_in_the_schema(postgres_url: str, pg_schema: str) -> None:
    """`alembic upgrade head --sql` for a custom schema: runnable on a fresh database
    and usable by a store that does not migrate (CREATE SCHEMA, tables in the schema)."""
    from firefly_orm.entry import MemoryEntry
    from firefly_orm.sql import PostgreSQLStore

    result = _alembic(
        "-x", f"url={_short_scheme(postgres_url)}", "-x", f"schema={pg_schema}",
        "upgrade", "head", "--sql",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert f"CREATE SCHEMA IF NOT EXISTS {pg_schema}" in script
    assert "CREATE TABLE memory_entries" not in script  # every table names the schema
    _run_sql_script(postgres_url, script)
    assert _tables(postgres_url, pg_schema) == {TABLE_NAME, migrate.VERSION_TABLE, *GRAPH_NAMES}
    assert migrate.current(postgres_url, schema_name=pg_schema) == migrate.head()
    assert _diff(postgres_url, pg_schema) == []
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    try:
        store.initialize(migrate=False)
        entry = MemoryEntry(key="k", content={"offline": True})
        store.save("ns", entry)
        loaded = store.load_by_key("ns", "k")
        assert loaded is not None and loaded.content == {"offline": True}
    finally:
        store.close()


def _sqlite_schema(url: str) -> dict[tuple[str, str], list[str]]:
    """Every object of a SQLite database, its SQL as a sorted list of lines.

    Sorted because a batch copy writes a table's constraints in no fixed order.
    """
    import sqlite3

    conn = sqlite3.connect(str(sa.engine.make_url(url).database))
    try:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    finally:
        conn.close()
    return {
        (kind, name): sorted(line.strip().rstrip(",") for line in (sql or "").splitlines())
        for kind, name, sql in rows
    }


def _run_sqlite_script(url: str, script: str) -> None:
    """Run an offline SQL script as ``sqlite3 file < script.sql`` would."""
    import sqlite3

    conn = sqlite3.connect(str(sa.engine.make_url(url).database))
    try:
        conn.executescript(script)
    finally:
        conn.close()


def test_sqlite_offline_sql_gives_the_online_schema(tmp_path: Path) -> None:
    """`alembic upgrade head --sql` on SQLite (batch copies described, not reflected):
    applied to an empty file, and from a revision to a database holding rows there,
    it gives exactly what an online upgrade gives, rows kept."""
    from firefly_orm.entry import MemoryEntry
    from firefly_orm.sql import SQLAlchemyStore

    online, offline, stepped = (f"sqlite:///{tmp_path / name}.sqlite3" for name in "abc")
    migrate.upgrade(online)
    result = _alembic("-x", f"url={offline}", "upgrade", "head", "--sql")
    assert result.returncode == 0, result.stderr
    assert "_alembic_tmp_memory_entries" in result.stdout  # 0003's batch copy is in it
    _run_sqlite_script(offline, result.stdout)
    assert _sqlite_schema(offline) == _sqlite_schema(online)
    assert migrate.current(offline) == migrate.head()
    assert _diff(offline, None) == []

    # A database at the revision before the copy, holding a row: the rest offline.
    before_copy = "0002_key_index_entry_id"
    migrate.upgrade(stepped, revision=before_copy)
    engine = sa.create_engine(stepped, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO {TABLE_NAME} (entry_id, namespace, scope, key, content, metadata, "
            "created_at, expires_at, importance, version) VALUES ('e1', 'ns', 'working', 'k', "
            """'{"kept": 1.5}', '{}', '2026-01-01 00:00:00.000000', NULL, 0.5, 1)"""
        )
    engine.dispose()
    result = _alembic("-x", f"url={stepped}", "upgrade", f"{before_copy}:head", "--sql")
    assert result.returncode == 0, result.stderr
    _run_sqlite_script(stepped, result.stdout)
    assert _sqlite_schema(stepped) == _sqlite_schema(online)
    store = SQLAlchemyStore(stepped)
    try:
        store.initialize(migrate=False)
        found = store.load_by_key("ns", "k")
        assert found is not None and found.content == {"kept": 1.5}
        store.save("ns", MemoryEntry(key="new", content=1.0))
        assert [e.key for e in store.load("ns")] == ["k", "new"]
    finally:
        store.close()


@pytest.mark.postgres
def test_alembic_cli_accepts_the_short_postgres_scheme(postgres_url: str, pg_schema: str) -> None:
    """`-x url=postgres://...` gets the psycopg driver (SQLAlchemy alone rejects it)."""
    url = _short_scheme(postgres_url)
    result = _alembic("-x", f"url={url}", "-x", f"schema={pg_schema}", "upgrade", "head")
    assert result.returncode == 0, result.stderr
    assert migrate.current(postgres_url, schema_name=pg_schema) == migrate.head()


@pytest.fixture
def orders(postgres_url: str, pg_schema: str) -> Iterator[tuple[sa.Engine, sa.Table]]:
    """A host table in the test's schema, and an engine to reach it."""
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    table = sa.Table("orders", sa.MetaData(), sa.Column("id", sa.Integer), schema=pg_schema)
    with engine.begin() as conn:
        conn.execute(sa.schema.CreateSchema(pg_schema))
        table.create(conn)
    try:
        yield engine, table
    finally:
        engine.dispose()


def _ids(engine: sa.Engine, table: sa.Table) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())


@pytest.mark.postgres
def test_check_and_current_leave_the_callers_transaction_alone(
    postgres_url: str, pg_schema: str, orders: tuple[sa.Engine, sa.Table]
) -> None:
    engine, table = orders
    migrate.upgrade(postgres_url, schema_name=pg_schema)
    with engine.connect() as conn:
        conn.execute(table.insert().values(id=1))
        assert migrate.check(conn, schema_name=pg_schema) == []
        assert migrate.current(conn, schema_name=pg_schema) == migrate.head()
        migrate.require_head(conn, schema_name=pg_schema)
        assert conn.in_transaction()
        conn.execute(table.insert().values(id=2))
        conn.commit()
    assert _ids(engine, table) == [1, 2]
    # A connection that was not in a transaction is left without one.
    with engine.connect() as conn:
        assert migrate.current(conn, schema_name=pg_schema) == migrate.head()
        assert not conn.in_transaction()


@pytest.mark.postgres
def test_upgrade_never_commits_the_callers_transaction(
    postgres_url: str, pg_schema: str, orders: tuple[sa.Engine, sa.Table]
) -> None:
    engine, table = orders
    target = pg_schema + "_m"
    try:
        # Not at head: the migration runs inside the caller's transaction...
        with engine.connect() as conn:
            conn.execute(table.insert().values(id=1))
            migrate.upgrade(conn, schema_name=target)
            assert migrate.current(conn, schema_name=target) == migrate.head()
            conn.rollback()
        # ...so the caller's rollback undoes both its insert and the migration.
        assert _ids(engine, table) == []
        assert migrate.current(postgres_url, schema_name=target) is None
        # At head: a no-op that leaves the caller's pending insert uncommitted.
        migrate.upgrade(postgres_url, schema_name=target)
        with engine.connect() as conn:
            conn.execute(table.insert().values(id=2))
            migrate.upgrade(conn, schema_name=target)
            migrate.stamp(conn, "head", schema_name=target)
            conn.rollback()
        assert _ids(engine, table) == []
        # The caller commits: everything lands.
        with engine.connect() as conn:
            conn.execute(table.insert().values(id=3))
            migrate.downgrade(conn, "base", schema_name=target)
            conn.commit()
        assert _ids(engine, table) == [3]
        assert migrate.current(postgres_url, schema_name=target) is None
    finally:
        drop_schema(postgres_url, target)


@pytest.mark.postgres
@pytest.mark.parametrize("query", ["foo=bar", "connect_timeout=abc"])
def test_bad_connect_arguments_are_a_connection_error(postgres_url: str, query: str) -> None:
    from firefly_orm.errors import DatabaseConnectionError

    secret = "s3cr3t-" + uuid.uuid4().hex[:6]
    parsed = sa.engine.make_url(postgres_url).set(password=secret)
    url = parsed.render_as_string(hide_password=False) + "?" + query
    for call in (migrate.current, migrate.check, migrate.upgrade):
        with pytest.raises(DatabaseConnectionError) as info:
            call(url)
        assert secret not in str(info.value)
        assert query.split("=")[0] in str(info.value)


def test_connection_error_hides_the_password_in_every_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver message quoting the URL-quoted password (``p%40ss``) shows neither form."""
    from firefly_orm.errors import DatabaseConnectionError

    engine = sa.create_engine("postgresql+psycopg://app:p%40ss@127.0.0.1:1/db")

    def refuse() -> sa.Connection:
        reason = Exception("no route to postgresql://app:p%40ss@127.0.0.1:1/db (p@ss rejected)")
        raise sa.exc.OperationalError("connect", {}, reason)

    monkeypatch.setattr(engine, "connect", refuse)
    try:
        for call in (migrate.current, migrate.check, migrate.upgrade):
            with pytest.raises(DatabaseConnectionError) as info:
                call(engine)
            message = str(info.value)
            assert "p%40ss" not in message and "p@ss" not in message
            assert "no route to postgresql://app:***@127.0.0.1:1/db (*** rejected)" in message
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- 0006: full-text search

_BEFORE_SEARCH = "0005_user_id"
_SEARCH_REVISION = "0006_full_text_search"
#: What a later revision (0010: the conversation list's columns) adds to the model.
_LATER_COLUMNS = {"head_updated_at", "head_archived"}
_LATER_INDEXES = {"ix_memory_entries_head_updated", "ix_memory_entries_head_created"}


def _diff_at_search_revision(url: str, schema: str | None) -> list[object]:
    """:func:`_diff` at 0006, without what the model has from later revisions."""

    def later(item: Any) -> bool:
        if item[0] == "add_column":
            return item[3].name in _LATER_COLUMNS
        return item[0] == "add_index" and item[1].name in _LATER_INDEXES

    return [item for item in _diff(url, schema) if not later(item)]


_FTS_TRIGGERS = {f"memory_entries_fts_{event}" for event in ("insert", "delete", "update")}


def _sqlite_names(url: str, kind: str) -> set[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT name FROM sqlite_master WHERE type = :t"), {"t": kind}
            )
            return set(rows.scalars())
    finally:
        engine.dispose()


def _columns(url: str, schema: str | None) -> set[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        return {c["name"] for c in sa.inspect(engine).get_columns(TABLE_NAME, schema=schema)}
    finally:
        engine.dispose()


def _fts_integrity_check(url: str) -> None:
    """FTS5's own check that the index matches the table row for row (raises if not)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO memory_entries_fts(memory_entries_fts, rank) "
                "VALUES ('integrity-check', 1)"
            )
    finally:
        engine.dispose()


def _write_old_row(url: str, key: str) -> None:
    """A row written by a release at the revision before full-text search (its columns only)."""
    from firefly_orm.entry import MemoryEntry
    from firefly_orm.sql._statements import TABLE, entry_values

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            present = _columns(url, None)
            values = entry_values("ns", MemoryEntry(key=key, content={"old": key}))
            conn.execute(TABLE.insert().values({k: v for k, v in values.items() if k in present}))
    finally:
        engine.dispose()


def _search_keys(store: object, query: str) -> list[str | None]:
    from firefly_orm.uow import unit_of_work_for

    with unit_of_work_for(store, read_only=True) as uow:  # type: ignore[arg-type]
        return [hit.entry.key for hit in uow.entries.search("ns", query)]


def test_sqlite_full_text_search_upgrade_and_downgrade(sqlite_url: str) -> None:
    from firefly_orm.entry import MemoryEntry
    from firefly_orm.sql import SQLAlchemyStore

    migrate.upgrade(sqlite_url, revision=_BEFORE_SEARCH)
    for i in range(3):
        _write_old_row(sqlite_url, f"old{i}")
    migrate.upgrade(sqlite_url, revision=_SEARCH_REVISION)
    assert _tables(sqlite_url, None) >= SQLITE_FTS_TABLES
    assert _sqlite_names(sqlite_url, "trigger") == _FTS_TRIGGERS
    assert {"search_text", "search_language"} <= _columns(sqlite_url, None)
    _fts_integrity_check(sqlite_url)  # the rows written before were indexed ("rebuild")
    assert _diff_at_search_revision(sqlite_url, None) == []
    store = SQLAlchemyStore(sqlite_url)
    store.save("ns", MemoryEntry(key="new", search_text="remember the kiwi"))
    assert _search_keys(store, "kiwi") == ["new"]
    store.close()

    migrate.downgrade(sqlite_url, _BEFORE_SEARCH)
    assert _tables(sqlite_url, None) == {TABLE_NAME, migrate.VERSION_TABLE}
    assert _sqlite_names(sqlite_url, "trigger") == set()
    assert not {"search_text", "search_language"} & _columns(sqlite_url, None)
    assert migrate.current(sqlite_url) == _BEFORE_SEARCH
    _write_old_row(sqlite_url, "written-while-down")

    migrate.upgrade(sqlite_url)
    _fts_integrity_check(sqlite_url)
    assert _diff(sqlite_url, None) == []
    store = SQLAlchemyStore(sqlite_url)
    keys = {"old0", "old1", "old2", "new", "written-while-down"}
    assert {e.key for e in store.load("ns")} == keys
    assert _search_keys(store, "kiwi") == []  # the downgrade dropped the text with its column
    store.save("ns", MemoryEntry(key="again", search_text="kiwi again"))
    assert _search_keys(store, "kiwi") == ["again"]
    store.close()


def _pg_search_objects(url: str, schema: str) -> dict[str, object]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            generated = conn.execute(
                sa.text(
                    "SELECT attgenerated FROM pg_attribute WHERE attrelid = "
                    "CAST(:t AS regclass) AND attname = 'search_vector' AND NOT attisdropped"
                ),
                {"t": f'"{schema}".{TABLE_NAME}'},
            ).scalar()
            index = conn.execute(
                sa.text(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = :s "
                    "AND indexname = 'ix_memory_entries_search'"
                ),
                {"s": schema},
            ).scalar()
            function = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = :s AND p.proname = 'firefly_orm_search_vector'"
                ),
                {"s": schema},
            ).scalar()
            return {"generated": generated, "index": index, "functions": function}
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_full_text_search_upgrade_and_downgrade(postgres_url: str, pg_schema: str) -> None:
    from firefly_orm.entry import MemoryEntry
    from firefly_orm.sql import PostgreSQLStore

    migrate.upgrade(postgres_url, schema_name=pg_schema, revision=_BEFORE_SEARCH)
    migrate.upgrade(postgres_url, schema_name=pg_schema, revision=_SEARCH_REVISION)
    found = _pg_search_objects(postgres_url, pg_schema)
    assert found["generated"] == "s" and found["functions"] == 1
    assert isinstance(found["index"], str)
    assert "USING gin (search_vector)" in found["index"]
    assert "WITH (fastupdate=off) WHERE (search_vector IS NOT NULL)" in found["index"]
    assert {"search_text", "search_language", "search_vector"} <= _columns(postgres_url, pg_schema)
    assert _diff_at_search_revision(postgres_url, pg_schema) == []
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    store.save("ns", MemoryEntry(key="kept", content=1, search_text="remember the kiwi"))
    assert _search_keys(store, "kiwi") == ["kept"]
    store.close()

    migrate.downgrade(postgres_url, _BEFORE_SEARCH, schema_name=pg_schema)
    assert _pg_search_objects(postgres_url, pg_schema) == {
        "generated": None,
        "index": None,
        "functions": 0,
    }
    assert not {"search_text", "search_language", "search_vector"} & _columns(
        postgres_url, pg_schema
    )
    assert migrate.current(postgres_url, schema_name=pg_schema) == _BEFORE_SEARCH

    migrate.upgrade(postgres_url, schema_name=pg_schema)
    assert _diff(postgres_url, pg_schema) == []
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    [kept] = store.load("ns")
    assert (kept.key, kept.content, kept.search_text) == ("kept", 1, None)
    store.save("ns", kept.copy_entry(search_text="kiwi again"))
    assert _search_keys(store, "kiwi") == ["kept"]
    store.close()
