"""What is specific to the SQLAlchemy store (the shared contract is elsewhere)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from firefly_orm import migrate
from firefly_orm.entry import MemoryEntry
from firefly_orm.entry._json import load_json
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    MigrationRequiredError,
    StoreError,
)
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    schema = "sql_" + uuid.uuid4().hex[:10]
    yield schema
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
    engine.dispose()


def test_sqlite_creates_parent_dirs_and_sets_pragmas(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "memory.sqlite3"
    store = SQLiteStore(path)
    store.save("ns", MemoryEntry(key="k", content=1))
    assert path.exists()
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    store.close()


def test_sqlite_persists_across_store_instances(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    first = SQLiteStore(path)
    first.save("ns", MemoryEntry(key="k", content={"v": 1}))
    first.close()
    second = SQLiteStore(path)
    found = second.load_by_key("ns", "k")
    assert found is not None and found.content == {"v": 1}
    second.close()


def test_async_path_uses_native_async_drivers(tmp_path: Path) -> None:
    """With async_url=, SQLite's async methods run on aiosqlite (a path alone: worker threads)."""
    path = tmp_path / "m.sqlite3"
    store = SQLiteStore(path, async_url=f"sqlite:///{path}")
    assert store.async_engine.dialect.driver == "aiosqlite"
    assert store.engine.dialect.driver == "pysqlite"

    async def run() -> list[MemoryEntry]:
        await store.async_save("ns", MemoryEntry(key="k", content="async"))
        loaded = await store.async_load("ns")
        await store.async_close()
        return loaded

    assert [e.content for e in asyncio.run(run())] == ["async"]


@pytest.mark.postgres
def test_postgres_async_driver(postgres_url: str, pg_schema: str) -> None:
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    assert store.async_engine.dialect.driver == "psycopg"
    assert store.async_engine.dialect.is_async

    async def run() -> None:
        await store.async_save("ns", MemoryEntry(key="k", content=1))
        assert (await store.async_load_by_key("ns", "k")) is not None
        await store.async_close()

    asyncio.run(run())


def test_rejects_bad_configuration(tmp_path: Path) -> None:
    with pytest.raises(EntryValidationError, match="schema_name"):
        SQLAlchemyStore(f"sqlite:///{tmp_path / 'x.db'}", schema_name="s")
    with pytest.raises(EntryValidationError, match="url"):
        SQLAlchemyStore("mysql://u@h/db")
    with pytest.raises(EntryValidationError, match="url"):
        SQLAlchemyStore("not a url")
    with pytest.raises(EntryValidationError):
        SQLiteStore(":memory:")
    with pytest.raises(EntryValidationError, match="schema_name"):
        PostgreSQLStore("postgresql://u@h/db", schema_name="bad;name")
    with pytest.raises(EntryValidationError, match="url"):
        PostgreSQLStore("sqlite:///x.db")
    with pytest.raises(EntryValidationError, match="pool_size"):
        PostgreSQLStore("postgresql://u@h/db", pool_size=2, pool_min_size=5)
    with pytest.raises(EntryValidationError):
        SQLAlchemyStore()


def test_unreachable_database_hides_password() -> None:
    store = PostgreSQLStore(
        "postgresql+psycopg://app:s3cr3t-pw@127.0.0.1:1/nowhere", timeout=1, pool_min_size=0
    )
    with pytest.raises(DatabaseConnectionError) as info:
        store.load("ns")
    message = str(info.value)
    assert "s3cr3t-pw" not in message
    assert "127.0.0.1:1" in message
    assert "***" in message
    assert "s3cr3t-pw" not in repr(store)
    store.close()


def test_callers_engine_is_not_disposed(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'host.sqlite3'}")
    store = SQLAlchemyStore(engine=engine, migrate=True)
    store.save("ns", MemoryEntry(key="k", content=1))
    store.close()
    # the host's engine still works and still holds its pool
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM memory_entries")).scalar() == 1
    engine.dispose()


def test_callers_async_engine_is_not_disposed(tmp_path: Path) -> None:
    async def run() -> int:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'host.sqlite3'}")
        store = SQLAlchemyStore(async_engine=engine, migrate=True)
        await store.async_save("ns", MemoryEntry(key="k", content=1))
        await store.async_close()
        async with engine.connect() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM memory_entries"))).scalar()
        await engine.dispose()
        return int(count or 0)

    assert asyncio.run(run()) == 1


def test_check_only_initialize_requires_head(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    store = SQLiteStore(path)
    with pytest.raises(MigrationRequiredError, match="not at head"):
        store.initialize(migrate=False)
    migrate.upgrade(f"sqlite:///{path}")
    store.initialize(migrate=False)
    store.save("ns", MemoryEntry(content=1))
    assert len(store.load("ns")) == 1
    store.close()


def test_database_check_constraint_backstops_validation(tmp_path: Path) -> None:
    """Even a write that bypasses validation cannot store importance 2.0."""
    store = SQLiteStore(tmp_path / "m.sqlite3")
    store.initialize()
    with (
        pytest.raises(sa.exc.IntegrityError, match="importance"),
        store.engine.begin() as conn,
    ):
        conn.execute(
            sa.text(
                "INSERT INTO memory_entries (entry_id, namespace, scope, content, metadata,"
                " created_at, importance, version) VALUES ('x', 'ns', 'working', '1', '{}',"
                " '2026-01-01 00:00:00', 2.0, 1)"
            )
        )
    with (
        pytest.raises(sa.exc.IntegrityError, match="scope"),
        store.engine.begin() as conn,
    ):
        conn.execute(
            sa.text(
                "INSERT INTO memory_entries (entry_id, namespace, scope, content, metadata,"
                " created_at, importance, version) VALUES ('y', 'ns', 'bogus', '1', '{}',"
                " '2026-01-01 00:00:00', 0.5, 1)"
            )
        )
    store.close()


@pytest.mark.postgres
def test_two_schemas_in_one_process(postgres_url: str) -> None:
    a_name, b_name = "sa_" + uuid.uuid4().hex[:8], "sb_" + uuid.uuid4().hex[:8]
    a = PostgreSQLStore(postgres_url, schema_name=a_name)
    b = PostgreSQLStore(postgres_url, schema_name=b_name)
    try:
        a.save("shared", MemoryEntry(key="k", content="from a"))
        b.save("shared", MemoryEntry(key="k", content="from b"))
        got_a, got_b = a.load("shared"), b.load("shared")
        assert [e.content for e in got_a] == ["from a"]
        assert [e.content for e in got_b] == ["from b"]
    finally:
        a.close()
        b.close()
        engine = sa.create_engine(postgres_url)
        with engine.begin() as conn:
            for name in (a_name, b_name):
                conn.execute(sa.schema.DropSchema(name, cascade=True, if_exists=True))
        engine.dispose()


def test_sqlite_concurrent_thread_writers(tmp_path: Path) -> None:
    """Eight threads writing at once: no 'database is locked', nothing lost."""
    store = SQLiteStore(tmp_path / "m.sqlite3")
    store.initialize()
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(25):
                store.save("ns", MemoryEntry(key=f"{n}-{i}", content=i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.load("ns")) == 200
    store.close()


def _init_worker(url: str, schema: str, queue: multiprocessing.Queue[str]) -> None:
    try:
        store = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
        store.initialize()
        store.save("ns", MemoryEntry(content="ok"))
        store.close()
        queue.put("ok")
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put(f"error: {exc!r}")


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_initialize_migrates_once(postgres_url: str, pg_schema: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[str] = ctx.Queue()
    procs = [
        ctx.Process(target=_init_worker, args=(postgres_url, pg_schema, queue)) for _ in range(4)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == ["ok"] * 4
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    assert len(store.load("ns")) == 4
    assert migrate.check(postgres_url, schema_name=pg_schema) == []
    store.close()


def test_store_reopens_after_close(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.sqlite3")
    store.save("ns", MemoryEntry(content=1))
    store.close()
    # close() releases connections; the store can be used again afterwards
    assert len(store.load("ns")) == 1
    store.close()


def test_first_use_from_many_threads_initializes_once(tmp_path: Path) -> None:
    """A fresh store (and fresh stores on one file) used from 8 threads at once."""
    path = tmp_path / "race.sqlite3"
    shared = SQLiteStore(path)
    others = [SQLiteStore(path) for _ in range(4)]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        store = shared if n % 2 else others[n // 2]
        try:
            barrier.wait()
            store.save("ns", MemoryEntry(key=str(n), content=n))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(int(e.key or -1) for e in shared.load("ns")) == list(range(8))
    for store in [shared, *others]:
        store.close()


def _sqlite_init_worker(path: str, n: int, queue: multiprocessing.Queue[str]) -> None:
    try:
        store = SQLiteStore(path)
        store.save("ns", MemoryEntry(key=str(n), content=n))
        store.close()
        queue.put("ok")
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put(f"error: {exc!r}")


@pytest.mark.slow
def test_first_use_from_many_processes_sqlite(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[str] = ctx.Queue()
    path = str(tmp_path / "procs.sqlite3")
    procs = [ctx.Process(target=_sqlite_init_worker, args=(path, n, queue)) for n in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == ["ok"] * 4
    store = SQLiteStore(path)
    assert len(store.load("ns")) == 4
    store.close()


def test_read_only_unit_of_work_does_not_block_writers(tmp_path: Path) -> None:
    """Under WAL a read-only unit of work runs alongside a writer's transaction."""
    store = SQLiteStore(tmp_path / "m.sqlite3")
    store.save("ns", MemoryEntry(key="a", content=1))
    with store.unit_of_work(read_only=True) as reader:
        assert [e.key for e in reader.entries.list("ns")] == ["a"]
        # a writer commits while the reader's transaction is open
        with store.unit_of_work() as writer:
            writer.entries.save("ns", MemoryEntry(key="b", content=2))
            writer.commit()
        # the reader keeps its snapshot
        assert [e.key for e in reader.entries.list("ns")] == ["a"]
    assert sorted(e.key or "" for e in store.load("ns")) == ["a", "b"]
    store.close()


@pytest.fixture
def icu_database_url(postgres_url: str) -> Iterator[str]:
    """A database whose default collation is linguistic (ICU en-US), not C."""
    name = "ff_icu_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    f'CREATE DATABASE "{name}" TEMPLATE template0 '
                    "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
                )
            )
        yield (
            sa.engine.make_url(postgres_url)
            .set(database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_key_prefixes_under_a_linguistic_collation(icu_database_url: str) -> None:
    """Under ICU/glibc collations 'turn;' sorts before 'turn:'; keys use COLLATE "C"."""
    from firefly_orm.manager import MemoryManager

    store = PostgreSQLStore(icu_database_url, schema_name="icu_memory", pool_min_size=0)
    try:
        with store.engine.connect() as conn:
            # the premise: this database's default collation breaks the naive range
            assert conn.execute(sa.text("SELECT 'turn:0001' < 'turn;'")).scalar() is False
        ns = "conversation:x"
        for i in range(3):
            store.save(ns, MemoryEntry(key=f"turn:{i:04d}", content=i))
        with store.unit_of_work(read_only=True) as uow:
            keys = [e.key for e in uow.entries.list(ns, key_prefix="turn:")]
        assert keys == ["turn:0000", "turn:0001", "turn:0002"]
        manager = MemoryManager(store=store)
        cid = manager.new_conversation()
        manager.add_turn(cid, "hello", "hi", [{"role": "user", "content": "hello"}])
        manager.add_turn(cid, "again", "yes", [{"role": "user", "content": "again"}])
        assert [m["content"] for m in manager.get_message_history(cid)] == ["hello", "again"]
    finally:
        store.close()


def test_in_memory_sqlite_urls_are_refused() -> None:
    for url in ("sqlite://", "sqlite:///:memory:", "sqlite:///file:x?mode=memory&uri=true"):
        with pytest.raises(EntryValidationError, match="InMemoryStore"):
            SQLAlchemyStore(url)


def test_relative_sqlite_path_survives_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteStore("data/memory.sqlite3")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    store.save("ns", MemoryEntry(content=1))
    assert (tmp_path / "data" / "memory.sqlite3").exists()
    store.close()


@pytest.mark.postgres
def test_engine_kwargs_win_over_preset_defaults(postgres_url: str, pg_schema: str) -> None:
    store = PostgreSQLStore(
        postgres_url,
        schema_name=pg_schema,
        pool_min_size=0,
        engine_kwargs={
            "pool_recycle": 60,
            "connect_args": {"application_name": "firefly-test"},
        },
    )
    assert store.engine.pool._recycle == 60
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW application_name").scalar() == "firefly-test"
        assert int(conn.exec_driver_sql("SHOW statement_timeout").scalar() or 0) == 0
    store.close()


@pytest.mark.postgres
def test_postgres_engines_read_jsonb_with_the_fast_parser_unless_told_otherwise(
    postgres_url: str, pg_schema: str
) -> None:
    """Our engines decode JSONB with ``load_json``; ``engine_kwargs`` still win."""
    content = {"big": 2**80, "float": 0.1, "text": "caf\u00e9 \U0001f600", "deep": [[[[1.5]]]]}
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema, pool_min_size=0)
    assert store.engine.dialect._json_deserializer is load_json
    store.save("ns", MemoryEntry(key="k", content=content))
    got = store.load_by_key("ns", "k")
    assert got is not None and got.content == content
    store.close()

    parsed: list[object] = []

    def counting(text: str | bytes) -> object:
        parsed.append(text)
        return json.loads(text)

    store = PostgreSQLStore(
        postgres_url,
        schema_name=pg_schema,
        pool_min_size=0,
        engine_kwargs={"json_deserializer": counting},
    )
    got = store.load_by_key("ns", "k")
    assert got is not None and got.content == content and parsed
    store.close()


def test_sync_initialize_inside_async_initialize_fails_instead_of_hanging(
    tmp_path: Path,
) -> None:
    """A sync call on the loop thread while async_initialize holds the lock."""
    first = SQLiteStore(tmp_path / "a.sqlite3")
    second = SQLiteStore(tmp_path / "b.sqlite3")
    outcome: list[str] = []

    async def sync_call_meanwhile() -> None:
        await asyncio.sleep(0)  # let async_initialize take the lock first
        try:
            second.save("ns", MemoryEntry(content=1))
            outcome.append("saved")
        except StoreError as exc:
            outcome.append(str(exc))

    async def main() -> None:
        await asyncio.gather(first.async_initialize(), sync_call_meanwhile())
        await first.async_close()

    asyncio.run(main())
    assert len(outcome) == 1
    assert outcome[0] == "saved" or "would deadlock" in outcome[0]
    second.close()


def test_close_inside_a_running_loop_closes_async_connections(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    store = SQLiteStore(path, async_url=f"sqlite:///{path}")

    async def main() -> int:
        await store.async_save("ns", MemoryEntry(content=1))
        pool = store.async_engine.sync_engine.pool
        assert isinstance(pool, sa.pool.QueuePool)
        store.close()  # sync close from inside the loop
        await asyncio.sleep(0.05)
        return int(pool.checkedin())

    assert asyncio.run(main()) == 0


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_close_after_the_loop_ended_closes_async_connections(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A sync close() once asyncio.run() has returned still closes the pooled async connections."""
    store: SQLAlchemyStore
    if backend == "sqlite":
        path = tmp_path / "m.sqlite3"
        store = SQLiteStore(path, async_url=f"sqlite:///{path}")  # aiosqlite
    else:
        store = PostgreSQLStore(
            request.getfixturevalue("postgres_url"),
            schema_name=request.getfixturevalue("pg_schema"),
        )

    async def use() -> sa.pool.QueuePool:
        await store.async_save("ns", MemoryEntry(content=1))
        pool = store.async_engine.sync_engine.pool
        assert isinstance(pool, sa.pool.QueuePool)
        return pool

    pool = asyncio.run(use())
    assert pool.checkedin() == 1
    store.close()  # no loop is running here any more
    assert pool.checkedin() == 0


def test_operational_errors_that_are_not_connection_problems(tmp_path: Path) -> None:
    """A missing table is a StoreError, not a DatabaseConnectionError."""
    store = SQLiteStore(tmp_path / "m.sqlite3")
    store.initialize()
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE memory_entries")
    with pytest.raises(StoreError) as info:
        store.load("ns")
    assert not isinstance(info.value, DatabaseConnectionError)
    assert "no such table" in str(info.value)
    store.close()


@pytest.mark.postgres
def test_short_postgres_scheme_is_accepted(postgres_url: str, pg_schema: str) -> None:
    """Hosted DATABASE_URLs often say postgres://."""
    url = sa.engine.make_url(postgres_url).set(drivername="postgres")
    store = PostgreSQLStore(url.render_as_string(hide_password=False), schema_name=pg_schema)
    assert store.engine.dialect.driver == "psycopg"
    store.save("ns", MemoryEntry(content=1))
    assert len(store.load("ns")) == 1
    store.close()
