"""PostgreSQL behind PgBouncer in transaction pooling mode (a PgBouncer of the run's own).

The store contract suite and the memory-layer suites run through PgBouncer too
(the ``pgbouncer`` backend of ``tests/store_backends.py``); here are what those
suites do not show:

* why ``pooler="transaction"`` exists: without it, a statement psycopg prepared in
  one transaction is missing in the next one, which PgBouncer ran on another
  server connection; with it (argument or ``?pooler=transaction`` on the URL),
  the same work passes;
* migrations through PgBouncer: upgrade, downgrade, upgrade, and several processes
  initialising a fresh schema at once (the migration lock is transaction-scoped);
* the multi-process conversation test (``integration/test_multiprocess.py``) with
  every worker going through PgBouncer.
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator
from typing import Any

import forked
import psycopg
import pytest
import sqlalchemy as sa
from dbutil import drop_schema
from integration import test_multiprocess as multiprocess_suite
from integration.test_sql_store import _init_worker
from pg_servers import PgBouncer, ServerUnavailable, unavailable

from firefly_orm import migrate
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import StoreError
from firefly_orm.sql import PostgreSQLStore

pytestmark = pytest.mark.postgres

#: Saves of one statement in one transaction: psycopg prepares it from the 6th on.
REPEATS = 8


def with_pooler(url: str) -> str:
    """``url`` declaring the transaction pooler on the URL itself."""
    return (
        sa.engine.make_url(url)
        .update_query_dict({"pooler": "transaction"})
        .render_as_string(hide_password=False)
    )


@pytest.fixture
def schema(postgres_admin_engine: sa.Engine) -> Iterator[str]:
    name = "pgb_" + uuid.uuid4().hex[:10]
    yield name
    drop_schema(postgres_admin_engine, name)


def _libpq(url: str) -> str:
    """A libpq connection string for a SQLAlchemy URL."""
    parsed = sa.engine.make_url(url)
    return (
        f"host={parsed.host} port={parsed.port} user={parsed.username} dbname={parsed.database}"
        + (f" password={parsed.password}" if parsed.password else "")
    )


async def _two_transactions(store: PostgreSQLStore, mode: str, bouncer: str) -> None:
    """One transaction saving REPEATS entries, then one more save while another
    client holds the server connection the first transaction ran on."""
    entries = [MemoryEntry(key=f"k{i}", content=i) for i in range(REPEATS)]
    extra = MemoryEntry(key="extra", content=0)

    def save_all(uow: Any, batch: list[MemoryEntry]) -> None:
        for entry in batch:
            uow.entries.save("ns", entry)

    if mode == "sync":
        with store.unit_of_work() as uow:
            save_all(uow, entries)
            uow.commit()
    else:
        async with store.async_unit_of_work() as auow:
            await auow.run_sync(save_all, entries)
            await auow.commit()
    # PgBouncer hands out its most recently used server connection first: this
    # client's open transaction takes the one the store just used.
    with psycopg.connect(_libpq(bouncer)) as holder:
        holder.execute("SELECT 1")
        if mode == "sync":
            with store.unit_of_work() as uow:
                save_all(uow, [extra])
                uow.commit()
        else:
            async with store.async_unit_of_work() as auow:
                await auow.run_sync(save_all, [extra])
                await auow.commit()


@pytest.fixture
def own_pgbouncer_url(request: pytest.FixtureRequest, postgres_url: str) -> Iterator[str]:
    """A PgBouncer of this test's own (the prepared statements it leaks stay there)."""
    bouncer = PgBouncer(postgres_url)
    try:
        bouncer.start()
    except ServerUnavailable as exc:
        unavailable(request.config, "pgbouncer", str(exc))
    try:
        yield bouncer.url_for(postgres_url)
    finally:
        bouncer.stop()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_without_the_pooler_option_a_prepared_statement_goes_missing(
    own_pgbouncer_url: str, schema: str, mode: str
) -> None:
    """The failure ``pooler="transaction"`` prevents (so the suites through PgBouncer can fail)."""
    store = PostgreSQLStore(own_pgbouncer_url, schema_name=schema, pool_size=1, pool_min_size=0)
    try:
        with pytest.raises(StoreError, match=r"prepared statement \"_pg3_\d+\" does not exist"):
            await _two_transactions(store, mode, own_pgbouncer_url)
    finally:
        await store.async_close()


@pytest.mark.parametrize("declared", ["argument", "url"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_with_the_pooler_option_nothing_is_prepared(
    pgbouncer_url: str, schema: str, mode: str, declared: str
) -> None:
    if declared == "argument":
        store = PostgreSQLStore(
            pgbouncer_url, schema_name=schema, pool_size=1, pool_min_size=0, pooler="transaction"
        )
    else:
        store = PostgreSQLStore(
            with_pooler(pgbouncer_url), schema_name=schema, pool_size=1, pool_min_size=0
        )
    try:
        assert store.pooler == "transaction"
        assert "pooler" not in store.engine.url.query  # never handed to the driver
        await _two_transactions(store, mode, pgbouncer_url)
        keys = sorted(e.key for e in await store.async_load("ns") if e.key is not None)
        assert keys == sorted([f"k{i}" for i in range(REPEATS)] + ["extra"])
    finally:
        await store.async_close()


def test_migrations_up_down_up_through_pgbouncer(
    pgbouncer_url: str, postgres_url: str, schema: str
) -> None:
    migrate.upgrade(pgbouncer_url, schema_name=schema)
    assert migrate.current(postgres_url, schema_name=schema) == migrate.head()
    migrate.downgrade(pgbouncer_url, "base", schema_name=schema)
    assert migrate.current(postgres_url, schema_name=schema) is None
    migrate.upgrade(pgbouncer_url, schema_name=schema)
    assert migrate.check(postgres_url, schema_name=schema) == []


@pytest.mark.slow
def test_concurrent_first_initialize_through_pgbouncer_migrates_once(
    pgbouncer_url: str, postgres_url: str, schema: str
) -> None:
    """Four processes initialise one fresh schema at once, each through PgBouncer."""
    ctx = forked.context()
    queue: multiprocessing.Queue[str] = ctx.Queue()
    url = with_pooler(pgbouncer_url)
    procs = [ctx.Process(target=_init_worker, args=(url, schema, queue)) for _ in range(4)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    assert results == ["ok"] * 4
    assert migrate.check(postgres_url, schema_name=schema) == []
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            versions = conn.execute(
                sa.text(f'SELECT count(*) FROM "{schema}".{migrate.VERSION_TABLE}')
            ).scalar_one()
            rows = conn.execute(
                sa.text(f'SELECT count(*) FROM "{schema}".memory_entries')
            ).scalar_one()
    finally:
        engine.dispose()
    assert (versions, rows) == (1, 4)


@pytest.fixture
def bouncer_database(
    pgbouncer_url: str, postgres_admin_engine: sa.Engine
) -> Iterator[multiprocess_suite.Database]:
    """The multi-process test's database, every worker going through PgBouncer."""
    database = multiprocess_suite.Database(
        "postgres", with_pooler(pgbouncer_url), "t_" + uuid.uuid4().hex[:10]
    )
    store = database.open()
    try:
        store.initialize()
    finally:
        store.close()
    try:
        yield database
    finally:
        assert database.schema is not None
        drop_schema(postgres_admin_engine, database.schema)


@pytest.mark.slow
@pytest.mark.parametrize("lockstep", [False, True], ids=["free", "lockstep"])
def test_processes_share_one_conversation_through_pgbouncer(
    bouncer_database: multiprocess_suite.Database, lockstep: bool
) -> None:
    """The multi-process test's eviction scenario (summary chain, archive) through PgBouncer."""
    multiprocess_suite.test_processes_share_one_conversation_with_eviction(
        bouncer_database, lockstep
    )
