"""A PostgreSQL store's own pool keeps its connections in autocommit (issue 35).

SQLAlchemy runs an ``isolation_level="AUTOCOMMIT"`` variant by switching
psycopg's ``autocommit`` at every checkout and back at every check-in.  On the
engines a store builds, the connections stay in autocommit and a transaction
begins with an explicit ``BEGIN`` (``firefly_orm.sql._engines``).  Checked on a
real server: the dialect's isolation-level switch is counted, and the driver's
transaction status is read after statements.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema

from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import ConcurrencyError
from firefly_orm.sql import PostgreSQLStore
from firefly_orm.working import WorkingMemory

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

NS = "pool"


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    schema = "acp_" + uuid.uuid4().hex[:10]
    yield schema
    drop_schema(postgres_url, schema)


@pytest.fixture
def store(postgres_url: str, pg_schema: str) -> Iterator[PostgreSQLStore]:
    store = PostgreSQLStore(postgres_url, schema_name=pg_schema, migrate=True)
    store.initialize()
    yield store
    store.close()


class Switches:
    """Counts the dialect's isolation-level switches (``set_isolation_level``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, dialect: Any) -> None:
        self.count = 0
        original = dialect.set_isolation_level

        def counted(dbapi_connection: Any, level: str) -> None:
            self.count += 1
            original(dbapi_connection, level)

        monkeypatch.setattr(dialect, "set_isolation_level", counted)


def _status(conn: sa.Connection) -> str:
    dbapi: Any = conn.connection.dbapi_connection
    return str(dbapi.info.transaction_status.name)


def test_operations_do_not_switch_autocommit(
    store: PostgreSQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    working = WorkingMemory(store=store, scope_id="s")
    working.set("warm", 1)
    switches = Switches(monkeypatch, store.engine.dialect)
    for i in range(10):
        working.set(f"k{i}", i)
        assert working.get(f"k{i}") == i
        working.delete(f"k{i}")
    with store.unit_of_work() as uow:  # a transaction of two statements
        uow.entries.save(NS, MemoryEntry(key="a", content=1))
        uow.entries.save(NS, MemoryEntry(key="b", content=2))
        uow.commit()
    assert switches.count == 0


def test_async_operations_do_not_switch_autocommit(
    postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> int:
        store = PostgreSQLStore(postgres_url, schema_name=pg_schema, migrate=True)
        try:
            await store.async_initialize()
            working = WorkingMemory(store=store, scope_id="s")
            await working.async_set("warm", 1)
            switches = Switches(monkeypatch, store.async_engine.dialect)
            for i in range(10):
                await working.async_set(f"k{i}", i)
                assert await working.async_get(f"k{i}") == i
            return switches.count
        finally:
            await store.async_close()

    assert asyncio.run(run()) == 0


def test_a_unit_of_work_is_still_one_transaction(store: PostgreSQLStore) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), store.unit_of_work() as uow:
        uow.entries.save(NS, MemoryEntry(key="a", content=1))
        uow.entries.save(NS, MemoryEntry(key="b", content=2))
        raise Boom
    assert store.load(NS) == []
    store.save(NS, MemoryEntry(key="a", content=1))
    stored = store.load_by_key(NS, "a")
    assert stored is not None
    with pytest.raises(ConcurrencyError), store.unit_of_work() as uow:
        uow.entries.save(NS, MemoryEntry(key="c", content=3))
        # expected_version=0: "no entry with this id yet", and there is one.
        uow.entries.save(NS, stored.model_copy(update={"content": 9}), expected_version=0)
    assert [e.key for e in store.load(NS)] == ["a"]


def test_the_stores_engine_begins_transactions_for_the_caller(store: PostgreSQLStore) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.text("SELECT 1"))
        assert _status(conn) == "INTRANS"
        first = conn.execute(sa.text("SELECT now()")).scalar_one()
        assert conn.execute(sa.text("SELECT now()")).scalar_one() == first
    with store.engine.connect() as conn:  # autobegin, then a rollback on close
        conn.execute(sa.text("SELECT 1"))
        assert _status(conn) == "INTRANS"


def test_a_callers_isolation_level_is_kept_and_then_undone(store: PostgreSQLStore) -> None:
    with store.engine.connect().execution_options(isolation_level="SERIALIZABLE") as conn:
        level = conn.execute(sa.text("SHOW transaction_isolation")).scalar_one()
        assert level == "serializable"
        assert _status(conn) == "INTRANS"
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("SELECT 1"))
        assert _status(conn) == "IDLE"  # no BEGIN sent for an explicit autocommit
    # Back in the pool in autocommit: the store's one-statement operations
    # still commit on their own, at the server's level.
    store.save(NS, MemoryEntry(key="after", content=1))
    with store.engine.connect() as conn:
        dbapi: Any = conn.connection.dbapi_connection
        assert dbapi.autocommit is True
        level = conn.execute(sa.text("SHOW transaction_isolation")).scalar_one()
        assert level == "read committed"
    assert store.load_by_key(NS, "after") is not None


def test_a_chosen_isolation_level_keeps_sqlalchemys_own_switching(
    postgres_url: str, pg_schema: str
) -> None:
    store = PostgreSQLStore(
        postgres_url,
        schema_name=pg_schema,
        migrate=True,
        engine_kwargs={"isolation_level": "REPEATABLE READ"},
    )
    try:
        store.initialize()
        store.save(NS, MemoryEntry(key="a", content=1))
        with store.engine.connect() as conn:
            dbapi: Any = conn.connection.dbapi_connection
            assert dbapi.autocommit is False
            level = conn.execute(sa.text("SHOW transaction_isolation")).scalar_one()
            assert level == "repeatable read"
    finally:
        store.close()
