"""No hidden pools: a store on the app's engine opens no connection pool of its own.

Given only a sync ``engine=``, the store's async methods (``async_initialize``,
the ``async_*`` operations, ``async_unit_of_work``, the memory layers' async
methods) run on that engine's pool in worker threads.  Given only an
``async_engine=``, its sync methods refuse with
:class:`~firefly_orm.errors.MissingEngineError` naming ``engine=``.  Either
way, the database sees only the app's connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
import time
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from dbutil import drop_schema
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import MissingEngineError
from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, enable_sqlite_savepoints


def _save_entry(uow: UnitOfWork, key: str) -> None:
    uow.entries.save("ns", MemoryEntry(key=key, content=key))


async def _every_async_path(store: SQLAlchemyStore) -> None:
    """Each kind of async call a store has, once; then a few at the same time."""
    await store.async_initialize()
    await store.async_save("ns", MemoryEntry(key="a", content="a"))
    async with store.async_unit_of_work() as uow:
        await uow.run_sync(_save_entry, "b")
        await uow.commit()
    async with store.async_unit_of_work(read_only=True) as uow:
        assert await uow.run_sync(lambda u: u.entries.get_by_key("ns", "b")) is not None
    conv = ConversationMemory(store=store)
    cid = await conv.async_new_conversation()
    await conv.async_add_turn(cid, "hello", "hi")
    assert [t.assistant_response for t in await conv.async_get_turns(cid)] == ["hi"]
    await asyncio.gather(
        *(store.async_save("ns", MemoryEntry(key=f"c{i}", content=i)) for i in range(4))
    )
    assert await store.async_cleanup_expired() == 0
    assert {e.key for e in await store.async_load("ns")} >= {"a", "b", "c0", "c3"}


class PoolWatch:
    """Every pool a connection is checked out of while the watch is on (any engine)."""

    def __init__(self) -> None:
        self.pools: set[int] = set()

    def _connected(self, conn: sa.Connection) -> None:
        self.pools.add(id(conn.engine.pool))

    def __enter__(self) -> PoolWatch:
        sa.event.listen(sa.Engine, "engine_connect", self._connected)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(sa.Engine, "engine_connect", self._connected)


# --------------------------------------------------------------------------- SQLite


def test_sqlite_async_methods_run_on_the_apps_engine(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.sqlite3'}")
    enable_sqlite_savepoints(engine)
    store = SQLAlchemyStore(engine=engine, migrate=True)
    with PoolWatch() as watch:
        asyncio.run(_every_async_path(store))
        store.save("ns", MemoryEntry(key="sync", content=1))
    assert watch.pools == {id(engine.pool)}
    with pytest.raises(MissingEngineError, match="async_engine="):
        store.async_engine  # noqa: B018  (there is none, and none is built)
    store.close()
    engine.dispose()


def test_sqlite_in_memory_app_engine_is_the_one_database(tmp_path: Path) -> None:
    """An in-memory app engine: a second pool would be a second, empty database."""
    engine = sa.create_engine(
        "sqlite://", poolclass=sa.pool.StaticPool, connect_args={"check_same_thread": False}
    )
    store = SQLAlchemyStore(engine=engine, migrate=True)
    store.save("ns", MemoryEntry(key="sync", content="written by sync code"))

    async def read() -> Any:
        entry = await store.async_load_by_key("ns", "sync")
        return entry.content if entry is not None else None

    assert asyncio.run(read()) == "written by sync code"
    engine.dispose()


async def _cancel_at_each_point(
    points: int, calls: Callable[[int], tuple[Coroutine[Any, Any, Any], ...]]
) -> None:
    """Each of ``calls(n)``, cancelled after ``n`` yields to the loop, for every ``n`` below
    ``points`` (so the cancellation lands at each await of each call, in turn)."""
    for yields in range(points):
        for call in calls(yields):
            task = asyncio.ensure_future(call)
            for _ in range(yields):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def test_cancelled_async_calls_return_their_connections(tmp_path: Path) -> None:
    """A task cancelled at any point of an async call leaves no connection checked out."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.sqlite3'}")
    enable_sqlite_savepoints(engine)
    store = SQLAlchemyStore(engine=engine, migrate=True)
    store.initialize()

    async def in_unit_of_work(key: str) -> None:
        async with store.async_unit_of_work() as uow:
            await uow.run_sync(_save_entry, key)
            await uow.commit()

    async def cancel_at_each_point() -> None:
        await _cancel_at_each_point(
            40,
            lambda yields: (
                store.async_save("ns", MemoryEntry(content=yields)),
                in_unit_of_work("k"),
            ),
        )

    asyncio.run(cancel_at_each_point())  # returns once every worker thread is done
    assert _pool(engine).checkedout() == 0, _pool(engine).status()
    store.save("ns", MemoryEntry(key="after", content=1))  # the database is not locked
    assert store.load_by_key("ns", "after") is not None
    engine.dispose()


def _unlocked(path: Path) -> None:
    """A plain ``sqlite3`` connection takes the write lock at once, or this raises
    ``database is locked``."""
    other = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()


async def _cancelled_at_returning(
    sync_engine: sa.Engine, path: Path, call: Coroutine[Any, Any, Any]
) -> None:
    """Await ``call``, its task cancelled as its first ``RETURNING`` statement is sent
    (aiosqlite's thread runs it anyway, and its row stays unread); then the file must be
    unlocked."""
    armed = [True]

    def cancel(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if armed and "RETURNING" in statement:
            armed.clear()
            task = asyncio.current_task()
            assert task is not None
            task.cancel()

    sa.event.listen(sync_engine, "before_cursor_execute", cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await call
    finally:
        sa.event.remove(sync_engine, "before_cursor_execute", cancel)
    assert not armed, "the call sent no RETURNING statement"
    _unlocked(path)


@pytest.mark.parametrize("engine_of", ["caller", "store"])
def test_aiosqlite_cancelled_statements_leave_the_file_unlocked(
    tmp_path: Path, engine_of: str
) -> None:
    """A task cancelled while aiosqlite runs or fetches its statement leaves no lock behind.

    SQLAlchemy closes such a connection without its cursor; a statement not reset (the
    store's ``RETURNING``, its row unread) then kept the write lock until the cursor was
    garbage-collected, and every other writer waited (with the garbage collector off
    here, for good: the checks below found the file locked).  First each kind of call is
    cancelled inside its ``RETURNING`` statement, then at each of 150 points.
    """
    path = tmp_path / "app.sqlite3"
    caller_engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    if engine_of == "caller":
        store = SQLAlchemyStore(async_engine=caller_engine, migrate=True)
    else:
        store = SQLAlchemyStore(
            url=f"sqlite:///{path}", async_url=f"sqlite+aiosqlite:///{path}", migrate=True
        )
    conv = ConversationMemory(store=store)

    async def in_unit_of_work(key: str) -> None:
        async with store.async_unit_of_work() as uow:
            await uow.run_sync(_save_entry, key)
            await uow.commit()

    async def run() -> None:
        await store.async_initialize()
        cid = await conv.async_new_conversation()
        sync_engine = store.async_engine.sync_engine
        await _cancelled_at_returning(sync_engine, path, store.async_save("ns", MemoryEntry()))
        await _cancelled_at_returning(sync_engine, path, in_unit_of_work("u"))
        await _cancelled_at_returning(sync_engine, path, conv.async_add_turn(cid, "q", "a"))
        await _cancel_at_each_point(
            150,  # the store's own engine runs its pragmas on each new connection first
            lambda yields: (
                store.async_save("ns", MemoryEntry(key=f"k{yields % 3}", content=yields)),
                in_unit_of_work("u"),
                conv.async_add_turn(cid, f"q{yields}", "a"),
            ),
        )
        await store.async_close()
        await caller_engine.dispose()

    collecting = gc.isenabled()
    gc.disable()  # what a zombie connection waits for
    try:
        asyncio.run(run())
        _unlocked(path)
    finally:
        if collecting:
            gc.enable()
        gc.collect()


def test_the_interrupted_cursor_listener_is_installed_once_per_dialect(tmp_path: Path) -> None:
    """Two stores on one engine, and one on an ``execution_options`` copy of it (the same
    dialect): one listener, beside the application's own."""
    from firefly_orm.sql._interrupted import _close_interrupted_cursor

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.sqlite3'}")
    sa.event.listen(engine, "handle_error", lambda _context: None)  # the app's own
    for given in (engine, engine, engine.execution_options(isolation_level="SERIALIZABLE")):
        store = SQLAlchemyStore(engine=given, migrate=True)
        store.save("ns", MemoryEntry(content=1))
        store.close()
    listeners = list(engine.dialect.dispatch.handle_error)
    assert listeners.count(_close_interrupted_cursor) == 1
    assert len(listeners) == 2
    engine.dispose()


def test_sqlite_async_engine_alone_refuses_sync_methods(tmp_path: Path) -> None:
    async def run() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite3'}")
        store = SQLAlchemyStore(async_engine=engine, migrate=True)
        with PoolWatch() as watch:
            await store.async_save("ns", MemoryEntry(key="a", content=1))
            await asyncio.to_thread(_sync_calls_refuse, store)
        assert watch.pools == {id(engine.sync_engine.pool)}
        await store.async_close()
        await engine.dispose()

    asyncio.run(run())


def _sync_calls_refuse(store: SQLAlchemyStore) -> None:
    """Every sync entry point of an async-only store refuses, naming ``engine=``."""
    calls: dict[str, Callable[[], object]] = {
        "initialize": lambda: SQLAlchemyStore(async_engine=store.async_engine).initialize(),
        "save": lambda: store.save("ns", MemoryEntry(content=2)),
        "load": lambda: store.load("ns"),
        "unit_of_work": lambda: store.unit_of_work().__enter__(),
        "engine": lambda: store.engine,
        "add_turn": lambda: ConversationMemory(store=store).add_turn(uuid.uuid4().hex, "q", "a"),
    }
    for name, call in calls.items():
        with pytest.raises(MissingEngineError, match="engine=") as info:
            call()
        assert "async_engine=" in str(info.value), name


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def pg_app(postgres_url: str, postgres_admin_engine: sa.Engine) -> Iterator[dict[str, Any]]:
    """The app's URL (application_name set in it, so any pool built from it is counted)."""
    name = "fo_pools_" + uuid.uuid4().hex[:10]
    url = sa.engine.make_url(postgres_url).update_query_dict(
        {"application_name": name, "options": f"-csearch_path={name}"}
    )
    with postgres_admin_engine.begin() as conn:
        conn.execute(sa.schema.CreateSchema(name))
    try:
        yield {"url": url, "name": name}
    finally:
        drop_schema(postgres_admin_engine, name)


def _pool(engine: sa.Engine) -> sa.pool.QueuePool:
    return cast(sa.pool.QueuePool, engine.pool)


def _backends(admin: sa.Engine, application_name: str, expect: int | None = None) -> int:
    """How many server connections carry ``application_name``.

    With ``expect``: the count once it equals ``expect``, or after
    :data:`SETTLE_SECONDS` the last count read.  A server process exits
    asynchronously after its client closes the connection, so under load a
    closed connection can still be listed for a moment; a connection that
    stays open (a hidden pool's) is still counted when the wait ends.
    """
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        with admin.connect() as conn:
            count = int(
                conn.scalar(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
                    {"name": application_name},
                )
                or 0
            )
        if expect is None or count == expect or time.monotonic() >= deadline:
            return count
        time.sleep(0.05)


#: How long :func:`_backends` waits for exiting server processes to leave.
SETTLE_SECONDS = 5.0


@pytest.mark.postgres
def test_postgres_async_methods_add_no_connections(
    pg_app: dict[str, Any], postgres_admin_engine: sa.Engine
) -> None:
    engine = sa.create_engine(pg_app["url"], pool_size=5, max_overflow=0)
    store = SQLAlchemyStore(engine=engine, migrate=True)
    store.initialize()
    store.save("ns", MemoryEntry(key="sync", content=1))
    before = _backends(postgres_admin_engine, pg_app["name"], expect=_pool(engine).checkedin())
    assert before == _pool(engine).checkedin() >= 1

    asyncio.run(_every_async_path(store))

    # every server connection of this app is one of its own pool's, all returned
    in_pool = _pool(engine).checkedin()
    assert _backends(postgres_admin_engine, pg_app["name"], expect=in_pool) == in_pool
    assert _pool(engine).checkedout() == 0
    assert _pool(engine).checkedin() <= 5, _pool(engine).status()
    store.close()
    engine.dispose()
    assert _backends(postgres_admin_engine, pg_app["name"], expect=0) == 0


@pytest.mark.postgres
def test_postgres_async_engine_alone_opens_no_sync_pool(
    pg_app: dict[str, Any], postgres_admin_engine: sa.Engine
) -> None:
    async def run() -> tuple[int, int]:
        engine: AsyncEngine = create_async_engine(pg_app["url"])
        store = SQLAlchemyStore(async_engine=engine, migrate=True)
        await store.async_save("ns", MemoryEntry(key="a", content=1))
        await asyncio.to_thread(_sync_calls_refuse, store)
        in_pool = _pool(engine.sync_engine).checkedin()
        counts = (_backends(postgres_admin_engine, pg_app["name"], expect=in_pool), in_pool)
        await store.async_close()
        await engine.dispose()
        return counts

    server_side, in_pool = asyncio.run(run())
    assert server_side == in_pool >= 1


@pytest.mark.postgres
@pytest.mark.parametrize("engine_of", ["caller", "store"])
def test_postgres_cancelled_async_calls_return_their_connections(
    pg_app: dict[str, Any], postgres_admin_engine: sa.Engine, engine_of: str
) -> None:
    """On a native async engine (the caller's ``async_engine=``, or the store's own with
    its autocommit pool), a task cancelled at any point of an async call (one statement,
    or a unit of work) leaves no connection checked out; the next calls work."""

    async def run() -> tuple[int, bool]:
        caller: AsyncEngine | None = None
        if engine_of == "caller":
            caller = create_async_engine(pg_app["url"], pool_size=3, max_overflow=0)
            store = SQLAlchemyStore(async_engine=caller, migrate=True)
        else:
            store = PostgreSQLStore(
                pg_app["url"].render_as_string(hide_password=False),
                schema_name=pg_app["name"],
                migrate=True,
                engine_kwargs={"pool_size": 3, "max_overflow": 0},
            )
        await store.async_save("ns", MemoryEntry(key="k", content=0))

        async def in_unit_of_work(key: str) -> None:
            async with store.async_unit_of_work() as uow:
                await uow.run_sync(_save_entry, key)
                await uow.commit()

        await _cancel_at_each_point(
            30,
            lambda yields: (
                store.async_save("ns", MemoryEntry(content=yields)),
                store.async_load_by_key("ns", "k"),
                in_unit_of_work("k"),
            ),
        )
        checked_out = _pool(store.async_engine.sync_engine).checkedout()
        # Every pooled connection is usable and idle: more calls than the pool holds.
        for i in range(6):
            await store.async_save("ns", MemoryEntry(key=f"after{i}", content=i))
        found = await store.async_load_by_key("ns", "after5") is not None
        await store.async_close()
        if caller is not None:
            await caller.dispose()
        return checked_out, found

    with warnings.catch_warnings():
        # SQLAlchemy drops (rather than checks in) a psycopg connection whose task was
        # cancelled in the middle of a round trip, with a warning when it is collected.
        warnings.simplefilter("ignore", sa.exc.SAWarning)
        checked_out, found = asyncio.run(run())
        gc.collect()
    assert checked_out == 0
    assert found
    assert _backends(postgres_admin_engine, pg_app["name"], expect=0) == 0
