"""One-statement operations without BEGIN/COMMIT; async SQLite in one thread hop per operation.

PostgreSQL (issue 18): the store's single-statement operations (``save``,
``load``, ``load_by_key``, ``delete``, ``clear``, ``cleanup_expired``), the
memory layers' operations built on them (``WorkingMemory.set``/``get``) and
read-only units of work (history reads, ``get_recent``) run with the
connection in autocommit at ``READ COMMITTED``: no ``BEGIN``, no
``COMMIT``/``ROLLBACK``, and psycopg keeps its prepared statements (a
``ROLLBACK`` makes it drop them).  Checked off the driver: after each of our
statements the connection has no transaction open.  A stricter isolation
level, and a caller's session, keep their transactions.

SQLite: a store built from a path runs its async methods on its sync engine,
the whole operation in one worker-thread call (counted as the
``call_soon_threadsafe`` wake-ups of the event loop).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema
from sqlalchemy.orm import Session

from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import MissingEngineError, StoreError
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore
from firefly_orm.working import WorkingMemory

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    schema = "ac_" + uuid.uuid4().hex[:10]
    yield schema
    drop_schema(postgres_url, schema)


def _status(dbapi_connection: Any) -> str:
    """``IDLE`` (no transaction open) or ``INTRANS``... of a psycopg connection."""
    return str(dbapi_connection.info.transaction_status.name)


class StatementLog:
    """Each statement our engines ran, with the driver's transaction status right after it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._hooks: list[tuple[Any, Any]] = []

    def watch(self, engine: sa.Engine) -> None:
        def after(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            self.seen.append(
                (statement.split()[0].upper(), _status(conn.connection.dbapi_connection))
            )

        sa.event.listen(engine, "after_cursor_execute", after)
        self._hooks.append((engine, after))

    def take(self) -> list[tuple[str, str]]:
        seen, self.seen = self.seen, []
        return seen

    def close(self) -> None:
        for engine, fn in self._hooks:
            sa.event.remove(engine, "after_cursor_execute", fn)


def _watched(store: SQLAlchemyStore) -> StatementLog:
    log = StatementLog()
    log.watch(store.engine)
    log.watch(store.async_engine.sync_engine)
    return log


def _operations(store: SQLAlchemyStore) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """``(name, sync call, async call)`` for every one-statement operation we promise."""
    working = WorkingMemory(store=store, scope_id="s")
    memory = ConversationMemory(store=store, max_tokens=10_000)
    entry = MemoryEntry(key="k", content={"v": 1})
    return [
        ("save", lambda: store.save("ns", entry), lambda: store.async_save("ns", entry)),
        ("load", lambda: store.load("ns"), lambda: store.async_load("ns")),
        (
            "load_by_key",
            lambda: store.load_by_key("ns", "k"),
            lambda: store.async_load_by_key("ns", "k"),
        ),
        (
            "delete",
            lambda: store.delete("ns", entry.entry_id),
            lambda: store.async_delete("ns", entry.entry_id),
        ),
        ("clear", lambda: store.clear("ns"), lambda: store.async_clear("ns")),
        ("cleanup_expired", store.cleanup_expired, store.async_cleanup_expired),
        ("working set", lambda: working.set("k", 1), lambda: working.async_set("k", 1)),
        ("working get", lambda: working.get("k"), lambda: working.async_get("k")),
        (
            "get_recent",
            lambda: memory.get_recent("c", 2),
            lambda: memory.async_get_recent("c", 2),
        ),
        (
            "get_message_history",
            lambda: memory.get_message_history("c"),
            lambda: memory.async_get_message_history("c"),
        ),
    ]


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_statement_operations_run_without_begin_or_commit(
    postgres_url: str, pg_schema: str, mode: str
) -> None:
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    memory = ConversationMemory(store=store, max_tokens=10_000)
    for i in range(3):
        memory.add_turn("c", f"q{i}", f"a{i}")
    log = _watched(store)
    found: dict[str, list[tuple[str, str]]] = {}

    async def run_async(operations: list[Any]) -> None:
        for _name, _, call in operations:
            await call()  # the first async connection learns the server's isolation level
        log.take()
        for name, _, call in operations:
            await call()
            found[name] = log.take()
        await store.async_close()

    operations = _operations(store)
    if mode == "sync":
        for name, call, _ in operations:
            call()
            found[name] = log.take()
    else:
        asyncio.run(run_async(operations))
    log.close()
    store.close()
    for name, statements in found.items():
        assert len(statements) == 1, (name, statements)
        verb, status = statements[0]
        assert verb not in ("BEGIN", "COMMIT", "ROLLBACK"), name
        assert status == "IDLE", (name, "ran inside a transaction")


@pytest.mark.postgres
def test_reads_keep_psycopgs_prepared_statements(postgres_url: str, pg_schema: str) -> None:
    """No ROLLBACK after a read: the statement psycopg prepared stays prepared on the server."""
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema, pool_size=1, pool_min_size=0)
    store.save("ns", MemoryEntry(key="k", content=1))
    for _ in range(12):  # psycopg prepares a statement on its 5th run (prepare_threshold)
        assert store.load_by_key("ns", "k") is not None
    with store.engine.connect() as conn:  # the pool's only connection
        prepared = conn.execute(
            sa.text("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE :table"),
            {"table": "%memory_entries%"},
        ).scalar()
    store.close()
    assert prepared and prepared >= 1


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failing_single_statement_raises_store_error_and_writes_nothing(
    postgres_url: str, pg_schema: str, mode: str
) -> None:
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    store.initialize()
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"ALTER TABLE \"{pg_schema}\".memory_entries ADD CONSTRAINT no_bad CHECK (key <> 'bad')"
        )
    bad, good = MemoryEntry(key="bad", content=1), MemoryEntry(key="good", content=2)

    async def run_async() -> list[MemoryEntry]:
        with pytest.raises(StoreError, match="violated a constraint"):
            await store.async_save("ns", bad)
        await store.async_save("ns", good)  # the connection is fine afterwards
        loaded = await store.async_load("ns")
        await store.async_close()
        return loaded

    if mode == "sync":
        with pytest.raises(StoreError, match="violated a constraint"):
            store.save("ns", bad)
        store.save("ns", good)
        loaded = store.load("ns")
    else:
        loaded = asyncio.run(run_async())
    assert [e.key for e in loaded] == ["good"]
    store.close()


@pytest.mark.postgres
def test_a_stricter_isolation_level_keeps_its_transactions(
    postgres_url: str, pg_schema: str
) -> None:
    """On an engine at REPEATABLE READ, reads and writes stay inside BEGIN ... COMMIT."""
    engine = sa.create_engine(postgres_url, isolation_level="REPEATABLE READ")
    store = SQLAlchemyStore(engine=engine, migrate=True, schema_name=pg_schema)
    store.save("ns", MemoryEntry(key="k", content=1))
    log = StatementLog()
    log.watch(store.engine)
    store.save("ns", MemoryEntry(key="k2", content=2))
    assert store.load_by_key("ns", "k") is not None
    WorkingMemory(store=store, scope_id="s").get("x")
    seen = log.take()
    log.close()
    store.close()
    engine.dispose()
    assert len(seen) == 3 and all(status == "INTRANS" for _, status in seen), seen


@pytest.mark.postgres
def test_a_session_bound_store_stays_in_the_callers_transaction(
    postgres_url: str, pg_schema: str
) -> None:
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema)
    store.initialize()
    engine = sa.create_engine(postgres_url)
    log = StatementLog()
    log.watch(engine)
    with Session(engine) as session:
        bound = store.bind_session(session)
        bound.save("ns", MemoryEntry(key="k", content=1))
        assert bound.load_by_key("ns", "k") is not None
        session.rollback()  # the caller's decision: nothing of ours is kept
    seen = log.take()
    log.close()
    assert store.load_by_key("ns", "k") is None
    assert {verb for verb, _ in seen} >= {"SAVEPOINT", "INSERT", "SELECT"}
    assert all(status == "INTRANS" for _, status in seen), seen
    store.close()
    engine.dispose()


@pytest.mark.postgres
def test_replica_reads_and_primary_writes_are_routed_as_before(
    postgres_url: str, pg_schema: str
) -> None:
    """Reads go to the replica URL, writes and reads-after-writes to the primary, all autocommit.

    The "replica" here is the same server under another host name, so the
    routing shows in which engine ran each statement.
    """
    url = sa.make_url(postgres_url)
    if url.host not in ("127.0.0.1", "localhost"):
        pytest.skip("needs a local server reachable as 127.0.0.1 and localhost")
    other = url.set(host="localhost" if url.host == "127.0.0.1" else "127.0.0.1")
    store = PostgreSQLStore(
        postgres_url,
        schema_name=pg_schema,
        replica_url=other.render_as_string(hide_password=False),
        replica_window=0.0,
    )
    hosts: list[tuple[str, str, str]] = []

    def after(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        status = _status(conn.connection.dbapi_connection)
        hosts.append((str(conn.engine.url.host), statement.split()[0].upper(), status))

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", after)
    try:
        store.initialize()
        store.load("ns")  # the replica's first connection learns its isolation level
        hosts.clear()
        store.save("ns", MemoryEntry(key="k", content=1))
        assert store.load_by_key("ns", "k") is not None
        with store.consistent_reads():
            assert store.load_by_key("ns", "k") is not None
    finally:
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", after)
        store.close()
    assert [(host, verb) for host, verb, _ in hosts] == [
        (url.host, "INSERT"),
        (other.host, "SELECT"),
        (url.host, "SELECT"),
    ]
    assert all(status == "IDLE" for *_, status in hosts)


# --------------------------------------------------------------------------- SQLite, async


class HopCounter:
    """Counts the event loop's ``call_soon_threadsafe`` calls: one per return from a thread."""

    def __init__(self) -> None:
        self.hops = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        original = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.hops += 1
            return original(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]


def _async_operations(store: SQLAlchemyStore) -> list[tuple[str, Callable[[], Any]]]:
    working = WorkingMemory(store=store, scope_id="s")
    memory = ConversationMemory(store=store, max_tokens=10_000)
    return [
        ("save", lambda: store.async_save("ns", MemoryEntry(key="k", content=1))),
        ("load_by_key", lambda: store.async_load_by_key("ns", "k")),
        ("working set", lambda: working.async_set("k", 1)),
        ("working get", lambda: working.async_get("k")),
        ("add_turn", lambda: memory.async_add_turn("c", "q", "a")),
        ("get_message_history", lambda: memory.async_get_message_history("c")),
        ("get_recent", lambda: memory.async_get_recent("c", 2)),
    ]


def _hops_per_operation(store: SQLAlchemyStore) -> dict[str, int]:
    async def main() -> dict[str, int]:
        operations = _async_operations(store)
        for _, call in operations:  # warm-up: initialise, connect, first turn
            await call()
        counter = HopCounter()
        counter.install(asyncio.get_running_loop())
        hops: dict[str, int] = {}
        for name, call in operations:
            before = counter.hops
            await call()
            hops[name] = counter.hops - before
        await store.async_close()
        return hops

    return asyncio.run(main())


def test_async_sqlite_from_a_path_is_one_thread_hop_per_operation(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.sqlite3")
    hops = _hops_per_operation(store)
    store.close()
    assert hops == dict.fromkeys(hops, 1), hops
    with pytest.raises(MissingEngineError, match="async_url="):
        store.async_engine  # noqa: B018  (none was built)


def test_async_url_gives_the_native_aiosqlite_engine(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    store = SQLiteStore(path, async_url=f"sqlite:///{path}")
    assert store.async_engine.dialect.driver == "aiosqlite"
    hops = _hops_per_operation(store)
    store.close()
    # aiosqlite returns from its thread once per driver call (cursor, execute, fetch...).
    assert all(count > 1 for count in hops.values()), hops
    reopened = SQLiteStore(path)
    assert reopened.load_by_key("ns", "k") is not None
    reopened.close()
