"""Embedding in a SQLAlchemy app: the host's engine, session and transaction.

A memory write joins the host's transaction through a SAVEPOINT
(``store.unit_of_work(session=...)`` / ``store.async_unit_of_work(session=...)``):
the host's commit keeps both rows, the host's rollback drops both, and a failure
inside the memory work undoes only the savepoint.  SQLite hosts use the
documented pysqlite/aiosqlite recipe (SQLAlchemy-controlled BEGIN) so SAVEPOINT
works.  The guide's embedding samples (``docs_src/embedding_*.py``) are run by
``test_docs_src.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from firefly_orm.entry import TABLE_NAME, MemoryEntry
from firefly_orm.errors import StoreError
from firefly_orm.sql import SQLAlchemyStore, enable_sqlite_savepoints


class HostBase(DeclarativeBase):
    """The host application's own declarative base (its own MetaData)."""


class HostOrder(HostBase):
    __tablename__ = "host_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(sa.String(100))


class Boom(Exception):
    """Raised on purpose inside the memory work."""


# --------------------------------------------------------------------------- databases


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres-custom-schema", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The host's URL (its tables in its default schema) + our schema_name."""
    if request.param == "sqlite":
        yield {"url": f"sqlite:///{tmp_path / 'app.sqlite3'}", "schema": None, "sqlite": True}
        return
    admin_url: str = request.getfixturevalue("postgres_url")
    host_schema = "emb_" + uuid.uuid4().hex[:10]
    ours = "emm_" + uuid.uuid4().hex[:10] if request.param.endswith("custom-schema") else None
    admin = sa.create_engine(admin_url, poolclass=sa.pool.NullPool)
    with admin.begin() as conn:
        conn.execute(sa.schema.CreateSchema(host_schema))
    url = (
        sa.engine.make_url(admin_url)
        .update_query_dict({"options": f"-csearch_path={host_schema}"})
        .render_as_string(hide_password=False)
    )
    try:
        yield {"url": url, "schema": ours, "sqlite": False}
    finally:
        with admin.begin() as conn:
            for name in (host_schema, ours):
                if name:
                    conn.execute(sa.schema.DropSchema(name, cascade=True, if_exists=True))
        admin.dispose()


@pytest.fixture
def host(backend: dict[str, Any]) -> Iterator[tuple[sa.Engine, SQLAlchemyStore]]:
    engine = sa.create_engine(backend["url"])
    if backend["sqlite"]:
        enable_sqlite_savepoints(engine)
    HostBase.metadata.create_all(engine)
    store = SQLAlchemyStore(engine=engine, migrate=True, schema_name=backend["schema"])
    store.initialize()
    yield engine, store
    store.close()
    engine.dispose()


@pytest.fixture
async def async_host(
    backend: dict[str, Any],
) -> AsyncIterator[tuple[AsyncEngine, SQLAlchemyStore]]:
    url = sa.engine.make_url(backend["url"])
    if backend["sqlite"]:
        url = url.set(drivername="sqlite+aiosqlite")
    engine = create_async_engine(url)
    if backend["sqlite"]:
        enable_sqlite_savepoints(engine.sync_engine)
    async with engine.begin() as conn:
        await conn.run_sync(HostBase.metadata.create_all)
    store = SQLAlchemyStore(async_engine=engine, migrate=True, schema_name=backend["schema"])
    await store.async_initialize()
    yield engine, store
    await store.async_close()
    await engine.dispose()


def _orders(engine: sa.Engine) -> list[str]:
    with Session(engine) as s:
        return list(s.scalars(sa.select(HostOrder.item).order_by(HostOrder.id)))


# --------------------------------------------------------------------------- sync


def test_host_commit_keeps_both(host: tuple[sa.Engine, SQLAlchemyStore]) -> None:
    engine, store = host
    with Session(engine) as session:
        session.add(HostOrder(item="book"))
        with store.unit_of_work(session=session) as uow:
            uow.entries.save("orders", MemoryEntry(key="last", content="book"))
            uow.commit()  # releases the savepoint only
        # nothing is visible outside the host's transaction yet
        assert store.load("orders") == []
        session.commit()
    assert _orders(engine) == ["book"]
    found = store.load_by_key("orders", "last")
    assert found is not None and found.content == "book"


def test_host_rollback_drops_both(host: tuple[sa.Engine, SQLAlchemyStore]) -> None:
    engine, store = host
    with Session(engine) as session:
        session.add(HostOrder(item="pen"))
        with store.unit_of_work(session=session) as uow:
            uow.entries.save("orders", MemoryEntry(key="last", content="pen"))
            uow.commit()
        session.rollback()
    assert _orders(engine) == []
    assert store.load("orders") == []


def test_memory_failure_rolls_back_only_the_savepoint(
    host: tuple[sa.Engine, SQLAlchemyStore],
) -> None:
    engine, store = host
    with Session(engine) as session:
        session.add(HostOrder(item="lamp"))
        session.flush()
        with pytest.raises(Boom), store.unit_of_work(session=session) as uow:
            uow.entries.save("orders", MemoryEntry(key="last", content="lamp"))
            raise Boom
        # the host's transaction is intact and goes on
        session.add(HostOrder(item="desk"))
        session.commit()
    assert _orders(engine) == ["lamp", "desk"]
    assert store.load("orders") == []


def test_uncommitted_memory_work_is_undone(host: tuple[sa.Engine, SQLAlchemyStore]) -> None:
    """Leaving the block without uow.commit() rolls the savepoint back."""
    engine, store = host
    with Session(engine) as session:
        session.add(HostOrder(item="cup"))
        with store.unit_of_work(session=session) as uow:
            uow.entries.save("orders", MemoryEntry(content="forgotten"))
        session.commit()
    assert _orders(engine) == ["cup"]
    assert store.load("orders") == []


def test_conversation_turn_in_host_transaction(host: tuple[sa.Engine, SQLAlchemyStore]) -> None:
    from firefly_orm.conversation import ConversationMemory

    engine, store = host
    for commit in (False, True):
        with Session(engine) as session:
            session.add(HostOrder(item=f"order-{commit}"))
            conv = ConversationMemory(store=store.bind_session(session))
            cid = conv.new_conversation()
            conv.add_turn(cid, "hello", f"hi ({commit})")
            assert [t.assistant_response for t in conv.get_turns(cid)] == [f"hi ({commit})"]
            if commit:
                session.commit()
            else:
                session.rollback()
        outside = ConversationMemory(store=store)
        turns = outside.get_turns(cid)
        assert [t.assistant_response for t in turns] == ([f"hi ({commit})"] if commit else [])
    assert _orders(engine) == ["order-True"]


def test_callers_engine_survives_store_close(host: tuple[sa.Engine, SQLAlchemyStore]) -> None:
    engine, store = host
    store.save("ns", MemoryEntry(content=1))
    store.close()
    with Session(engine) as session:
        session.add(HostOrder(item="after close"))
        session.commit()
    assert _orders(engine) == ["after close"]


# --------------------------------------------------------------------------- async


async def _async_orders(engine: AsyncEngine) -> list[str]:
    async with AsyncSession(engine) as s:
        return list(await s.scalars(sa.select(HostOrder.item).order_by(HostOrder.id)))


def _save(uow: Any, namespace: str, entry: MemoryEntry) -> None:
    uow.entries.save(namespace, entry)


async def test_async_host_commit_and_rollback(
    async_host: tuple[AsyncEngine, SQLAlchemyStore],
) -> None:
    engine, store = async_host
    async with AsyncSession(engine) as session:
        session.add(HostOrder(item="kept"))
        async with store.async_unit_of_work(session=session) as uow:
            await uow.run_sync(_save, "orders", MemoryEntry(key="k", content="kept"))
            await uow.commit()
        await session.commit()
    async with AsyncSession(engine) as session:
        session.add(HostOrder(item="dropped"))
        async with store.async_unit_of_work(session=session) as uow:
            await uow.run_sync(_save, "orders", MemoryEntry(key="k2", content="dropped"))
            await uow.commit()
        await session.rollback()
    assert await _async_orders(engine) == ["kept"]
    assert [e.content for e in await store.async_load("orders")] == ["kept"]


async def test_async_memory_failure_rolls_back_only_the_savepoint(
    async_host: tuple[AsyncEngine, SQLAlchemyStore],
) -> None:
    engine, store = async_host
    async with AsyncSession(engine) as session:
        session.add(HostOrder(item="lamp"))
        await session.flush()
        with pytest.raises(Boom):
            async with store.async_unit_of_work(session=session) as uow:
                await uow.run_sync(_save, "orders", MemoryEntry(content="lamp"))
                raise Boom
        session.add(HostOrder(item="desk"))
        await session.commit()
    assert await _async_orders(engine) == ["lamp", "desk"]
    assert await store.async_load("orders") == []


# --------------------------------------------------------------------------- error messages

#: Operations of a bound store whose error message must start with their name.
BOUND_CALLS = ("save", "load", "delete")


def _sqlite_store(engine: sa.Engine | AsyncEngine) -> SQLAlchemyStore:
    enable_sqlite_savepoints(engine)
    if isinstance(engine, AsyncEngine):
        return SQLAlchemyStore(async_engine=engine, migrate=True)
    return SQLAlchemyStore(engine=engine, migrate=True)


@pytest.mark.parametrize("operation", BOUND_CALLS)
def test_bound_store_errors_name_the_operation(operation: str, tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.sqlite3'}")
    store = _sqlite_store(engine)
    store.initialize()
    try:
        with Session(engine) as session:
            session.execute(sa.text(f"DROP TABLE {TABLE_NAME}"))  # undone by the rollback
            bound = store.bind_session(session)
            calls: dict[str, Callable[[], object]] = {
                "save": lambda: bound.save("ns", MemoryEntry(content=1)),
                "load": lambda: bound.load("ns"),
                "delete": lambda: bound.delete("ns", "some-id"),
            }
            with pytest.raises(StoreError, match=rf"^{operation} failed on .*no such table"):
                calls[operation]()
            session.rollback()
        assert store.load("ns") == []
    finally:
        store.close()
        engine.dispose()


@pytest.mark.parametrize("operation", BOUND_CALLS)
async def test_async_bound_store_errors_name_the_operation(operation: str, tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite3'}")
    store = _sqlite_store(engine)
    await store.async_initialize()
    try:
        async with AsyncSession(engine) as session:
            await session.execute(sa.text(f"DROP TABLE {TABLE_NAME}"))  # undone by the rollback
            bound = store.bind_session(session)
            calls: dict[str, Callable[[], Awaitable[object]]] = {
                "save": lambda: bound.async_save("ns", MemoryEntry(content=1)),
                "load": lambda: bound.async_load("ns"),
                "delete": lambda: bound.async_delete("ns", "some-id"),
            }
            with pytest.raises(StoreError, match=rf"^{operation} failed on .*no such table"):
                await calls[operation]()
            await session.rollback()
        assert await store.async_load("ns") == []
    finally:
        await store.async_close()
        await engine.dispose()
