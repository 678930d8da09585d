"""firefly_orm's migrations inside a host application's Alembic (tests/host_app/).

Mode (a): our own version table (``firefly_orm_alembic_version``) beside the
host's ``alembic_version``; the host's env.py uses ``migrate.include_name``.
Mode (b): our versions directory in the host's ``version_locations``; the host
runs the ``firefly_orm@head`` branch.  Both on SQLite and PostgreSQL; on
PostgreSQL each test gets its own schema, made the connection's default schema
with ``search_path`` (as a host's own default schema would be).
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from dbutil import drop_schema
from sqlmodel import SQLModel

from firefly_orm import migrate
from firefly_orm.entry import TABLE_NAME, MemoryEntry, metadata
from firefly_orm.errors import MigrationRequiredError
from firefly_orm.sql import SQLAlchemyStore

HOST_APP = Path(__file__).resolve().parents[1] / "host_app"
BIN = Path(sys.executable).parent
OUR_VERSIONS_RESOURCE = "firefly_orm:migrations/versions"


@dataclass
class Db:
    """A database for one test: ``url`` has the test's schema as its default schema."""

    url: str
    backend: str
    schema: str | None  # the default schema on PostgreSQL (None on SQLite)

    def tables(self, schema: str | None = None) -> set[str]:
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        try:
            return set(sa.inspect(engine).get_table_names(schema=schema))
        finally:
            engine.dispose()

    def versions(self, table: str, schema: str | None = None) -> list[str]:
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                t = sa.table(table, sa.column("version_num"), schema=schema)
                return sorted(conn.execute(sa.select(t.c.version_num)).scalars())
        finally:
            engine.dispose()


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose connections use ``schema`` as their default schema."""
    parsed = sa.engine.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    return parsed.render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        yield Db(f"sqlite:///{tmp_path / 'host.sqlite3'}", "sqlite", None)
        return
    admin_url: str = request.getfixturevalue("postgres_url")
    schema = "host_" + uuid.uuid4().hex[:10]
    engine = sa.create_engine(admin_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.schema.CreateSchema(schema))
    engine.dispose()
    try:
        yield Db(with_search_path(admin_url, schema), "postgres", schema)
    finally:
        drop_schema(admin_url, schema)


def _package_has_migrations() -> bool:
    return (importlib.resources.files("firefly_orm") / "migrations" / "versions").is_dir()


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A copy of tests/host_app; from a checkout, the package resource in the
    mode-(b) ini is replaced by :func:`migrate.versions_location` (the wheel
    test runs the ini unchanged against the installed package)."""
    target = tmp_path / "host_app"
    shutil.copytree(HOST_APP, target, ignore=shutil.ignore_patterns("__pycache__"))
    if not _package_has_migrations():
        ini = target / "alembic-with-firefly.ini"
        ini.write_text(ini.read_text().replace(OUR_VERSIONS_RESOURCE, migrate.versions_location()))
    return target


def host_alembic(
    host: Path, ini: str, url: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """The host's ``alembic`` command, in its own process (as the host runs it)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FIREFLY_", "HOST_APP"))}
    environ.update(env)
    return subprocess.run(
        [str(BIN / "alembic"), "-c", str(host / ini), "-x", f"url={url}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )


# --------------------------------------------------------------------------- metadata hygiene


def test_our_table_is_not_on_sqlmodel_metadata() -> None:
    assert TABLE_NAME in metadata.tables
    assert TABLE_NAME not in SQLModel.metadata.tables
    assert set(metadata.tables) == {TABLE_NAME}


def test_include_name_hides_exactly_our_tables() -> None:
    for ours in (TABLE_NAME, migrate.VERSION_TABLE):
        assert migrate.include_name(ours, "table", {}) is False
    assert migrate.include_name("host_orders", "table", {}) is True
    assert migrate.include_name("alembic_version", "table", {}) is True
    assert migrate.include_name("public", "schema", {}) is True


def test_in_process_compare_metadata(tmp_path: Path) -> None:
    """compare_metadata with a host MetaData: our tables are invisible with the
    filter, proposed for removal without it, and the host's missing table shows."""
    url = f"sqlite:///{tmp_path / 'h.sqlite3'}"
    migrate.upgrade(url)
    host = sa.MetaData()
    sa.Table("host_orders", host, sa.Column("id", sa.Integer, primary_key=True))
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:

            def diff(**opts: object) -> list[object]:
                ctx = MigrationContext.configure(conn, opts=opts)
                return list(compare_metadata(ctx, host))

            filtered = diff(include_name=migrate.include_name)
            unfiltered = diff()
            with_object_filter = diff(include_object=migrate.include_object)
    finally:
        engine.dispose()
    assert [op[0] for op in filtered] == ["add_table"]  # type: ignore[index]
    assert "host_orders" in repr(filtered)
    assert TABLE_NAME not in repr(filtered)
    assert TABLE_NAME not in repr(with_object_filter)
    assert TABLE_NAME in repr(unfiltered)


# --------------------------------------------------------------------------- mode (a)


def test_mode_a_own_version_table_beside_hosts(db: Db, host_dir: Path) -> None:
    # our tables first, in the SAME (default) schema as the host's
    migrate.upgrade(db.url, schema_name=None)
    up = host_alembic(host_dir, "alembic.ini", db.url, "upgrade", "head")
    assert up.returncode == 0, up.stderr
    assert {TABLE_NAME, migrate.VERSION_TABLE, "host_orders", "alembic_version"} <= db.tables()
    assert db.versions("alembic_version") == ["h001_host_orders"]
    assert db.versions(migrate.VERSION_TABLE) == [migrate.head()]

    check = host_alembic(host_dir, "alembic.ini", db.url, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr

    # negative control: without include_name the host would drop our table
    unfiltered = host_alembic(host_dir, "alembic.ini", db.url, "check", HOST_APP_NO_FILTER="1")
    assert unfiltered.returncode != 0
    assert "remove_table" in unfiltered.stdout + unfiltered.stderr
    assert TABLE_NAME in unfiltered.stdout + unfiltered.stderr

    # sanity: a host model without a migration IS reported, ours still is not
    extra = host_alembic(host_dir, "alembic.ini", db.url, "check", HOST_APP_EXTRA_MODEL="1")
    out = extra.stdout + extra.stderr
    assert extra.returncode != 0
    assert "host_notes" in out
    assert TABLE_NAME not in out

    # each side's migrations leave the other's alone
    down = host_alembic(host_dir, "alembic.ini", db.url, "downgrade", "base")
    assert down.returncode == 0, down.stderr
    assert "host_orders" not in db.tables()
    assert migrate.check(db.url) == []


# --------------------------------------------------------------------------- mode (b)


def _all_revisions() -> list[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.make_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def test_versions_location_holds_our_revisions() -> None:
    files = {p.stem for p in Path(migrate.versions_location()).glob("*.py")}
    assert set(_all_revisions()) <= files


def test_mode_b_host_runs_our_branch(db: Db, host_dir: Path) -> None:
    ini = "alembic-with-firefly.ini"
    heads = host_alembic(host_dir, ini, db.url, "heads")
    assert heads.returncode == 0, heads.stderr
    assert migrate.head() in heads.stdout and "h001_host_orders" in heads.stdout

    ours = host_alembic(host_dir, ini, db.url, "upgrade", "firefly_orm@head")
    assert ours.returncode == 0, ours.stderr
    tables = db.tables()
    assert TABLE_NAME in tables  # in the host connection's default schema
    assert "host_orders" not in tables  # only our branch ran
    assert migrate.VERSION_TABLE not in tables  # recorded in the host's table instead
    assert db.versions("alembic_version") == [migrate.head()]

    both = host_alembic(host_dir, ini, db.url, "upgrade", "heads")
    assert both.returncode == 0, both.stderr
    assert db.versions("alembic_version") == sorted([migrate.head(), "h001_host_orders"])
    check = host_alembic(host_dir, ini, db.url, "check")
    assert check.returncode == 0, check.stdout + check.stderr

    # our API and a check-only store recognise the host-managed database
    assert migrate.current(db.url) == migrate.head()
    assert migrate.check(db.url) == []
    migrate.upgrade(db.url)  # at head: a no-op, creates no second version table
    assert migrate.VERSION_TABLE not in db.tables()
    store = SQLAlchemyStore(db.url)
    try:
        store.initialize(migrate=False)
        store.save("ns", MemoryEntry(key="k", content={"mode": "b"}))
        found = store.load_by_key("ns", "k")
        assert found is not None and found.content == {"mode": "b"}
    finally:
        store.close()

    # the host takes our branch back down: we notice
    down = host_alembic(host_dir, ini, db.url, "downgrade", "firefly_orm@base")
    assert down.returncode == 0, down.stderr
    assert TABLE_NAME not in db.tables()
    assert migrate.current(db.url) is None
    assert migrate.check(db.url) == _all_revisions()
    fresh = SQLAlchemyStore(db.url)
    try:
        with pytest.raises(MigrationRequiredError, match="not at head"):
            fresh.initialize(migrate=False)
    finally:
        fresh.close()


def _revisions_use_revision_schema() -> bool:
    return any(
        "revision_schema" in path.read_text()
        for path in Path(migrate.versions_location()).glob("*.py")
    )


@pytest.mark.postgres
def test_mode_b_custom_schema(postgres_url: str, host_dir: Path) -> None:
    """``-x firefly_orm_schema=NAME``: the host's env runs our revisions into NAME."""
    if not _revisions_use_revision_schema():
        pytest.skip("our revisions do not call migrate.revision_schema() yet")
    host_schema = "host_" + uuid.uuid4().hex[:10]
    mem_schema = "mem_" + uuid.uuid4().hex[:10]
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.schema.CreateSchema(host_schema))
    engine.dispose()
    url = with_search_path(postgres_url, host_schema)
    try:
        up = host_alembic(
            host_dir,
            "alembic-with-firefly.ini",
            url,
            "-x",
            f"{migrate.HOST_SCHEMA_OPTION}={mem_schema}",
            "upgrade",
            "heads",
        )
        assert up.returncode == 0, up.stderr
        db = Db(url, "postgres", host_schema)
        assert TABLE_NAME in db.tables(mem_schema)
        assert TABLE_NAME not in db.tables(host_schema)
        assert "host_orders" in db.tables(host_schema)
        assert migrate.check(url, schema_name=mem_schema) == []
        store = SQLAlchemyStore(url, schema_name=mem_schema)
        try:
            store.initialize(migrate=False)
            store.save("ns", MemoryEntry(content="custom"))
            assert [e.content for e in store.load("ns")] == ["custom"]
        finally:
            store.close()
    finally:
        drop_schema(postgres_url, host_schema)
        drop_schema(postgres_url, mem_schema)


@pytest.mark.postgres
def test_mode_b_tables_in_another_schema_are_not_at_head(postgres_url: str) -> None:
    """Our revision in the host's alembic_version only counts when memory_entries is in
    the store's schema; otherwise check() explains instead of claiming head."""
    tables_at = "mb_" + uuid.uuid4().hex[:10]
    store_schema = tables_at + "_s"
    host_url = with_search_path(postgres_url, tables_at)
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(sa.schema.CreateSchema(tables_at))
        # What the host's Alembic leaves without -x firefly_orm_schema: our tables and
        # revision in the host connection's default schema, in ITS alembic_version.
        migrate.upgrade(host_url, schema_name=tables_at)
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"CREATE TABLE {tables_at}.alembic_version (version_num varchar(32) primary key)"
            )
            conn.exec_driver_sql(
                f"INSERT INTO {tables_at}.alembic_version "
                f"SELECT version_num FROM {tables_at}.{migrate.VERSION_TABLE}"
            )
            conn.exec_driver_sql(f"DROP TABLE {tables_at}.{migrate.VERSION_TABLE}")
        # The schema holding the tables is recognised as migrated by the host...
        assert migrate.check(host_url, schema_name=tables_at) == []
        # ...another schema is not: an explanation, not a false "at head".
        for call in (migrate.check, migrate.current, migrate.upgrade):
            with pytest.raises(MigrationRequiredError) as info:
                call(host_url, schema_name=store_schema)
            message = str(info.value)
            assert TABLE_NAME in message and "alembic_version" in message
            assert store_schema in message and migrate.HOST_SCHEMA_OPTION in message
        store = SQLAlchemyStore(host_url, schema_name=store_schema)
        try:
            with pytest.raises(MigrationRequiredError):
                store.initialize(migrate=False)
        finally:
            store.close()
    finally:
        with engine.begin() as conn:
            for schema in (tables_at, store_schema):
                conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
        engine.dispose()
