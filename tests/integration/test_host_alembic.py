"""firefly_orm's migrations inside a host application's Alembic (tests/host_app/).

The recommended way (``alembic-one-head.ini``): the host's env.py calls
``migrate.run_with_host``; the app's unchanged commands (upgrade, downgrade,
revision --autogenerate, check, current, history, stamp; online and ``--sql``)
see one head, upgrade ours with theirs and never touch ours otherwise.
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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import forked
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from cli_runner import run_cli
from dbutil import drop_schema
from sqlmodel import SQLModel

from firefly_orm import migrate
from firefly_orm._search import SQLITE_FTS_TABLES
from firefly_orm.entry import TABLE_NAME, MemoryEntry, metadata
from firefly_orm.errors import EntryValidationError, MigrationRequiredError
from firefly_orm.sql import SQLAlchemyStore

HOST_APP = Path(__file__).resolve().parents[1] / "host_app"
BIN = Path(sys.executable).parent
OUR_VERSIONS_RESOURCE = "firefly_orm:migrations/versions"
HOST_REVISIONS = ("h001_host_orders", "h002_host_users", "h003_host_items")
HOST_HEAD = HOST_REVISIONS[-1]
HOST_TABLES = {"host_orders", "host_users", "host_items"}


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
    """The host's ``alembic`` command, in its own process (as the host runs it).

    The process is a fork of a warm interpreter (``tests/forked.py``): the console
    script's entry point with these arguments and this environment, without a
    second of start-up per command.
    """
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FIREFLY_", "HOST_APP"))}
    environ.update(env)
    return forked.run(
        [BIN / "alembic", "-c", str(host / ini), "-x", f"url={url}", *args],
        env=environ,
        timeout=120,
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
    assert db.versions("alembic_version") == [HOST_HEAD]
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
    assert not HOST_TABLES & db.tables()
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
    assert migrate.head() in heads.stdout and HOST_HEAD in heads.stdout

    ours = host_alembic(host_dir, ini, db.url, "upgrade", "firefly_orm@head")
    assert ours.returncode == 0, ours.stderr
    tables = db.tables()
    assert TABLE_NAME in tables  # in the host connection's default schema
    assert not HOST_TABLES & tables  # only our branch ran
    assert migrate.VERSION_TABLE not in tables  # recorded in the host's table instead
    assert db.versions("alembic_version") == [migrate.head()]

    both = host_alembic(host_dir, ini, db.url, "upgrade", "heads")
    assert both.returncode == 0, both.stderr
    assert db.versions("alembic_version") == sorted([migrate.head(), HOST_HEAD])
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


# --------------------------------------------------------------------------- one head

ONE_HEAD_INI = "alembic-one-head.ini"


@dataclass
class App:
    """The host app wired with ``migrate.run_with_host`` on one database."""

    host: Path
    db: Db
    memory_schema: str | None  # None: our tables in the default schema

    def alembic(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """The app's own ``alembic`` command, unchanged (no -x for us)."""
        env.setdefault("HOST_APP_MEMORY_SCHEMA", self.memory_schema or "")
        return host_alembic(self.host, ONE_HEAD_INI, self.db.url, *args, **env)

    def ours(self) -> list[str]:
        return self.db.versions(migrate.VERSION_TABLE, schema=self.memory_schema)

    def theirs(self) -> list[str]:
        return self.db.versions("alembic_version")

    def store(self) -> SQLAlchemyStore:
        return SQLAlchemyStore(self.db.url, schema_name=self.memory_schema)


APP_PARAMS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("postgres-own-schema", marks=pytest.mark.postgres),
]


@contextmanager
def make_app(request: pytest.FixtureRequest, kind: str, where: Path) -> Iterator[App]:
    """A fresh database for the app (PostgreSQL: its own default schema via search_path)."""
    where.mkdir(parents=True, exist_ok=True)
    host = where / "host_app"
    shutil.copytree(HOST_APP, host, ignore=shutil.ignore_patterns("__pycache__"))
    if kind == "sqlite":
        yield App(host, Db(f"sqlite:///{where / 'app.sqlite3'}", "sqlite", None), None)
        return
    admin_url: str = request.getfixturevalue("postgres_url")
    schema = "app_" + uuid.uuid4().hex[:10]
    memory = "appmem_" + uuid.uuid4().hex[:10] if kind.endswith("own-schema") else None
    engine = sa.create_engine(admin_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.schema.CreateSchema(schema))
    engine.dispose()
    try:
        yield App(host, Db(with_search_path(admin_url, schema), "postgres", schema), memory)
    finally:
        for name in (schema, memory):
            if name:
                drop_schema(admin_url, name)


@pytest.fixture(params=APP_PARAMS)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    with make_app(request, request.param, tmp_path) as made:
        yield made


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def _memory_rows(app: App) -> list[object]:
    store = app.store()
    try:
        store.initialize(migrate=False)  # at head, or MigrationRequiredError
        return [e.content for e in store.load("ns")]
    finally:
        store.close()


def test_one_head_app_commands(app: App) -> None:
    """Every app command, unchanged, on SQLite and PostgreSQL, ours in both placements."""
    heads = _ok(app.alembic("heads"))
    assert heads.split() == [HOST_HEAD, "(host)", "(head)"]  # one head: the app's

    # upgrade head: the app's revisions AND ours, in one go
    _ok(app.alembic("upgrade", "head"))
    assert app.theirs() == [HOST_HEAD]
    assert app.ours() == [migrate.head()]
    assert app.db.tables() >= HOST_TABLES
    assert TABLE_NAME in app.db.tables(app.memory_schema)
    if app.memory_schema is not None:  # ours in their schema, the app's where they were
        assert TABLE_NAME not in app.db.tables()
        assert not HOST_TABLES & app.db.tables(app.memory_schema)
    store = app.store()
    try:
        store.initialize(migrate=False)
        store.save("ns", MemoryEntry(key="k", content="kept"))
    finally:
        store.close()

    # current / history: the app's revisions only, as before
    current = _ok(app.alembic("current"))
    assert HOST_HEAD in current and migrate.head() not in current
    history = _ok(app.alembic("history"))
    assert all(rev in history for rev in HOST_REVISIONS)
    assert not any(rev in history for rev in _all_revisions())

    # check / autogenerate: no diff for our tables; the app's own filter still applies
    with sa.create_engine(app.db.url, poolclass=sa.pool.NullPool).begin() as conn:
        conn.execute(sa.text("CREATE TABLE tmp_scratch (id INTEGER PRIMARY KEY)"))
    assert "No new upgrade operations detected" in _ok(app.alembic("check"))
    unfiltered = app.alembic("check", HOST_APP_NO_FILTER="1")  # negative control
    if app.memory_schema is None:  # ours beside the app's: only our filter hides them
        assert unfiltered.returncode != 0
        assert TABLE_NAME in unfiltered.stdout + unfiltered.stderr
        assert "tmp_scratch" not in unfiltered.stdout + unfiltered.stderr
    else:  # in their own schema, invisible to an app without include_schemas=True
        assert unfiltered.returncode == 0, unfiltered.stdout + unfiltered.stderr
    _ok(app.alembic("revision", "--autogenerate", "-m", "nothing", "--rev-id", "h004_empty"))
    generated = (app.host / "versions" / "h004_empty_nothing.py").read_text()
    body = generated.split("def upgrade() -> None:", 1)[1]
    assert "op." not in body, generated  # an empty migration, both directions
    assert "down_revision: str | Sequence[str] | None = 'h003_host_items'" in generated
    (app.host / "versions" / "h004_empty_nothing.py").unlink()

    # downgrade -1 / <rev>: the APP's last revision; ours, and our rows, untouched
    _ok(app.alembic("downgrade", "-1"))
    assert app.theirs() == [HOST_REVISIONS[1]]
    assert "host_items" not in app.db.tables()
    assert app.ours() == [migrate.head()]
    assert _memory_rows(app) == ["kept"]
    _ok(app.alembic("downgrade", "base"))
    assert not HOST_TABLES & app.db.tables()
    assert app.ours() == [migrate.head()]
    assert _memory_rows(app) == ["kept"]

    # ours one revision behind (a newer firefly_orm installed): the app's upgrade catches up
    previous = _all_revisions()[-2]
    migrate.downgrade(app.db.url, previous, schema_name=app.memory_schema)
    assert app.ours() == [previous]
    _ok(app.alembic("upgrade", HOST_REVISIONS[0]))  # any upgrade, not only "head"
    assert app.ours() == [migrate.head()]
    assert app.theirs() == [HOST_REVISIONS[0]]
    _ok(app.alembic("upgrade", "head"))
    assert app.theirs() == [HOST_HEAD]
    assert _memory_rows(app) == ["kept"]

    # stamp: the app's table only
    _ok(app.alembic("stamp", HOST_REVISIONS[1]))
    assert app.theirs() == [HOST_REVISIONS[1]]
    assert app.ours() == [migrate.head()]
    _ok(app.alembic("stamp", "head"))
    assert app.theirs() == [HOST_HEAD]


def _sqlite_offline_supported() -> bool:
    """Our SQLite batch revisions render offline only when they carry ``copy_from``."""
    text = (Path(migrate.versions_location()) / "0003_sqlite_json_as_text.py").read_text()
    return "copy_from" in text


def _apply_script(db: Db, script: str) -> None:
    """Run an offline script as a DBA would (statements as written, autocommit)."""
    if db.backend == "sqlite":
        import sqlite3

        raw = sqlite3.connect(str(sa.engine.make_url(db.url).database))
        try:
            raw.executescript(script)
        finally:
            raw.close()
        return
    engine = sa.create_engine(db.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            driver = conn.connection.driver_connection
            driver.autocommit = True  # type: ignore[union-attr]
            driver.execute(script)  # type: ignore[union-attr]
    finally:
        engine.dispose()


def _schema_snapshot(db: Db, schema: str | None) -> dict[str, object]:
    """Tables, columns, indexes and foreign keys of one schema, without its name."""
    engine = sa.create_engine(db.url, poolclass=sa.pool.NullPool)
    try:
        inspector = sa.inspect(engine)
        snapshot: dict[str, object] = {}
        for table in sorted(inspector.get_table_names(schema=schema)):
            snapshot[table] = (
                [
                    (c["name"], str(c["type"]), c["nullable"])
                    for c in inspector.get_columns(table, schema=schema)
                ],
                sorted(
                    (str(i["name"]), tuple(map(str, i["column_names"])), bool(i["unique"]))
                    for i in inspector.get_indexes(table, schema=schema)
                ),
                sorted(
                    (fk["referred_table"], tuple(fk["constrained_columns"]))
                    for fk in inspector.get_foreign_keys(table, schema=schema)
                ),
            )
        if db.backend == "sqlite":
            with engine.connect() as conn:
                snapshot["sqlite_master"] = sorted(
                    conn.execute(sa.text("SELECT type, name FROM sqlite_master")).all()
                )
        return snapshot
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", APP_PARAMS)
def test_one_head_offline_script_matches_online(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``alembic upgrade head --sql`` holds our DDL too; applied, it gives the online schema."""
    if kind == "sqlite" and not _sqlite_offline_supported():
        pytest.skip("0003_sqlite_json_as_text has no copy_from: SQLite batch needs a database")
    with (
        make_app(request, kind, tmp_path / "online") as online,
        make_app(request, kind, tmp_path / "offline") as offline,
    ):
        _ok(online.alembic("upgrade", "head"))
        result = offline.alembic("upgrade", "head", "--sql")
        script = result.stdout
        assert result.returncode == 0, result.stderr
        assert f"-> {migrate.head()}" in script and f"-> {HOST_HEAD}" in script
        if kind != "sqlite":  # one transaction: the app's BEGIN/COMMIT, none of ours
            assert script.count("BEGIN;") == 1 and script.count("COMMIT;") == 1
        _apply_script(offline.db, script)
        assert offline.theirs() == online.theirs() == [HOST_HEAD]
        assert offline.ours() == online.ours() == [migrate.head()]
        for side in ("default", "memory"):
            schemas = [
                (a.db.schema if side == "default" else a.memory_schema) for a in (online, offline)
            ]
            if side == "memory" and online.memory_schema is None:
                continue
            assert _schema_snapshot(online.db, schemas[0]) == _schema_snapshot(
                offline.db, schemas[1]
            )
        # the offline-built database works for the store and for the app's next commands
        assert _memory_rows(offline) == []
        assert "No new upgrade operations detected" in _ok(offline.alembic("check"))


def test_one_head_offline_ranges(app: App) -> None:
    """A range script cannot know our revision: it says so, or starts where -x says."""
    start = f"{HOST_REVISIONS[0]}:head"
    plain = _ok(app.alembic("upgrade", start, "--sql"))
    assert f"-> {HOST_HEAD}" in plain
    assert "-- firefly_orm: its tables are not in this script" in plain
    assert f"-x {migrate.HOST_OFFLINE_FROM_OPTION}=REV" in plain
    assert TABLE_NAME not in plain

    previous = _all_revisions()[-2]
    opt = f"{migrate.HOST_OFFLINE_FROM_OPTION}={previous}"
    ranged = _ok(app.alembic("-x", opt, "upgrade", start, "--sql"))
    assert f"Running upgrade {previous} -> {migrate.head()}" in ranged
    assert f"-> {_all_revisions()[0]}" not in ranged
    assert f"-> {HOST_HEAD}" in ranged

    skipped = _ok(
        app.alembic("-x", f"{migrate.HOST_OFFLINE_FROM_OPTION}=head", "upgrade", start, "--sql")
    )
    assert TABLE_NAME not in skipped and "firefly_orm" not in skipped

    down = _ok(app.alembic("downgrade", f"{HOST_HEAD}:{HOST_REVISIONS[0]}", "--sql"))
    assert "DROP TABLE host_items" in down and TABLE_NAME not in down
    assert migrate.VERSION_TABLE not in down


# --------------------------------------------------------------------------- which command


PROBE_ENV = """
import sqlalchemy as sa
from alembic import context

from firefly_orm import migrate
from firefly_orm.migrate import _env as alembic_env

config = context.config
engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
with engine.connect() as connection:
    context.configure(
        connection=connection, target_metadata=sa.MetaData(), **migrate.autogenerate_filters()
    )
    config.attributes["seen"].append(alembic_env._alembic_command(context))
    with context.begin_transaction():
        migrate.run_with_host(context, connection)
        context.run_migrations()
engine.dispose()
"""


def test_run_with_host_tells_the_alembic_command(tmp_path: Path) -> None:
    """Pins how run_with_host tells the command (the step function Alembic passes
    to the environment): fails when an Alembic release changes it."""
    from alembic import command
    from alembic.config import Config

    host = tmp_path / "probe"
    shutil.copytree(HOST_APP, host, ignore=shutil.ignore_patterns("__pycache__"))
    (host / "env.py").write_text(PROBE_ENV)
    url = f"sqlite:///{tmp_path / 'probe.sqlite3'}"
    cfg = Config()
    cfg.set_main_option("script_location", str(host))
    cfg.set_main_option("version_locations", str(host / "versions"))
    cfg.set_main_option("path_separator", "space")
    cfg.set_main_option("sqlalchemy.url", url)
    seen: list[str | None] = []
    cfg.attributes["seen"] = seen

    command.stamp(cfg, "head")
    command.current(cfg)
    command.history(cfg, indicate_current=True)
    command.check(cfg)
    command.revision(cfg, "probe", autogenerate=True, rev_id="h004_probe")
    command.stamp(cfg, "base")
    command.downgrade(cfg, "base")
    assert migrate.current(url) is None  # none of those touched ours
    command.upgrade(cfg, "head")
    assert migrate.current(url) == migrate.head()
    assert seen == [
        "stamp",
        "current",
        "history",
        "check",
        "revision",
        "stamp",
        "downgrade",
        "upgrade",
    ]


class _UnknownCaller:
    """An Alembic-like context whose command cannot be told."""

    def __init__(self) -> None:
        self.opts: dict[str, object] = {"fn": lambda rev, context: []}

    def get_context(self) -> _UnknownCaller:
        return self

    def is_offline_mode(self) -> bool:
        return False


def test_run_with_host_does_nothing_when_the_command_is_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'unknown.sqlite3'}"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn, caplog.at_level("WARNING", logger="firefly_orm"):
            migrate.run_with_host(_UnknownCaller(), conn)
            conn.commit()
        assert migrate.current(url) is None
        assert "cannot tell which Alembic command" in caplog.text
        with engine.connect() as conn:  # the caller may force it
            migrate.run_with_host(_UnknownCaller(), conn, upgrade_ours=True)
            conn.commit()
        assert migrate.current(url) == migrate.head()
    finally:
        engine.dispose()


def test_run_with_host_refuses_a_bad_schema_name() -> None:
    with pytest.raises(EntryValidationError):
        migrate.run_with_host(_UnknownCaller(), None, schema_name="bad name; drop")


# --------------------------------------------------------------------------- filters


def test_autogenerate_filters_compose_with_the_apps() -> None:
    seen: list[str | None] = []

    def app_filter(name: str | None, type_: str, parent_names: object) -> bool:
        seen.append(name)
        return name != "legacy"

    filters = migrate.autogenerate_filters(include_name=app_filter, schema_name="mem")
    keep = filters["include_name"]
    assert keep("orders", "table", {}) is True
    assert keep("legacy", "table", {}) is False  # the app's filter still decides
    for ours in (TABLE_NAME, migrate.VERSION_TABLE, *SQLITE_FTS_TABLES):
        assert keep(ours, "table", {}) is False
    assert keep("ix_memory_entries_search", "index", {"table_name": TABLE_NAME}) is False
    assert keep("ix_orders_item", "index", {"table_name": "orders"}) is True
    assert keep("mem", "schema", {}) is False  # our own schema, with include_schemas=True
    assert keep("public", "schema", {}) is True
    assert "legacy" in seen and TABLE_NAME not in seen  # ours decided first

    obj_filter = migrate.autogenerate_filters()["include_object"]
    table = sa.Table(TABLE_NAME, sa.MetaData(), sa.Column("x", sa.Integer, index=True))
    index = next(iter(table.indexes))
    assert obj_filter(table, TABLE_NAME, "table", True, None) is False
    assert obj_filter(index, index.name, "index", True, None) is False
    with pytest.raises(EntryValidationError):
        migrate.autogenerate_filters(schema_name="no good")


@pytest.mark.postgres
def test_upgrade_on_a_callers_connection_leaves_its_schema_mapping(postgres_url: str) -> None:
    """The app's connection keeps its own schema_translate_map after ours ran on it."""
    schema = "conn_" + uuid.uuid4().hex[:10]
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn, conn.begin():
            migrate.upgrade(conn, schema_name=schema)
            assert "schema_translate_map" not in conn.get_execution_options() or (
                conn.get_execution_options()["schema_translate_map"] is None
            )
        assert migrate.check(postgres_url, schema_name=schema) == []
    finally:
        engine.dispose()
        drop_schema(postgres_url, schema)


# --------------------------------------------------------------------------- advice


def test_advice_hides_the_password_and_fits_the_backend() -> None:
    pg = migrate.migrate_advice("postgresql://app:s3cret@db/app", "mem", None)
    assert "s3cret" not in pg and "--schema mem" in pg and "run_with_host" in pg
    assert "`firefly-orm migrate --url postgresql+psycopg://app:***@db/app --schema mem`" in pg
    assert "--schema ''" in migrate.migrate_advice("postgresql://app@db/app", None, None)
    assert "--schema" not in migrate.migrate_advice("sqlite:///app.db", None, None)
    hosted = migrate.migrate_advice("postgresql://app@db/app", "mem", migrate.HOST_VERSION_TABLE)
    assert f"`alembic -x {migrate.HOST_SCHEMA_OPTION}=mem upgrade firefly_orm@head`" in hosted
    assert "firefly-orm migrate" not in hosted  # it refuses such a database


def _advised(message: str, start: str) -> list[str]:
    """The first backticked command in ``message`` that starts with ``start``."""
    import shlex

    command = next(part for part in message.split("`")[1::2] if part.startswith(start))
    return shlex.split(command)


@pytest.mark.parametrize("own_schema", [False, True])
def test_start_up_advice_runs_on_own_version_table(
    db: Db, own_schema: bool, tmp_path: Path
) -> None:
    """initialize(migrate=False) and `firefly-orm check` name a command that works."""
    if own_schema and db.backend == "sqlite":
        pytest.skip("SQLite has no schemas")
    schema = f"{db.schema}_mem" if own_schema else None
    migrate.upgrade(db.url, schema_name=schema, revision=_all_revisions()[-2])
    store = SQLAlchemyStore(db.url, schema_name=schema)
    try:
        with pytest.raises(MigrationRequiredError) as info:
            store.initialize(migrate=False)
    finally:
        store.close()
    message = str(info.value)
    assert "alembic upgrade head" in message and "run_with_host" in message
    cli_args = ["--url", db.url] + ([] if db.backend == "sqlite" else ["--schema", schema or ""])
    check = run_cli("check", *cli_args)
    assert check.returncode == 1 and "firefly-orm migrate --url" in check.stderr
    advised = _advised(message, "firefly-orm migrate")
    assert advised[0] == "firefly-orm"  # the installed script (test_cli.py runs it)
    result = run_cli(*advised[1:])
    try:
        assert result.returncode == 0, result.stderr
        assert migrate.check(db.url, schema_name=schema) == []
    finally:
        if schema:
            drop_schema(db.url, schema)


def test_start_up_advice_runs_on_host_managed_branch(db: Db, host_dir: Path) -> None:
    """Our revision in the app's alembic_version: the advice is the app's firefly_orm@head."""
    ini = "alembic-with-firefly.ini"
    behind = f"{migrate.BRANCH_LABEL}@{_all_revisions()[-2]}"
    _ok(host_alembic(host_dir, ini, db.url, "upgrade", behind))
    store = SQLAlchemyStore(db.url)
    try:
        with pytest.raises(MigrationRequiredError) as info:
            store.initialize(migrate=False)
    finally:
        store.close()
    message = str(info.value)
    assert "firefly-orm migrate" not in message
    advised = _advised(message, "alembic")
    assert advised == ["alembic", "upgrade", f"{migrate.BRANCH_LABEL}@head"]
    check = run_cli("check", "--url", db.url, "--schema", "")
    assert check.returncode == 1 and "upgrade firefly_orm@head" in check.stderr
    assert "firefly-orm migrate" not in check.stderr
    _ok(host_alembic(host_dir, ini, db.url, *advised[1:]))
    assert migrate.check(db.url) == []
