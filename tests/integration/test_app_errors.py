"""The app's errors stay the app's: memory written inside the app's session.

An app that writes memory inside its own session (``store.bind_session(session)``,
``store.unit_of_work(session=...)``, sync and async) may have objects of its
own pending in that session.  When those fail to flush (a NOT NULL or unique
violation; on PostgreSQL a value too long for its column), the app must get
its own exception, with its own type (``IntegrityError``, ``DataError``), so
its ``except IntegrityError`` still works; nothing of ours may be written.
The same holds for the app's own statements in the body of
``unit_of_work(session=...)``.  Failures of our own statements are still
:class:`~firefly_orm.errors.StoreError`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import TABLE_NAME, MemoryEntry
from firefly_orm.errors import FireflyOrmError, StoreError
from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql import SQLAlchemyStore, enable_sqlite_savepoints


class AppBase(DeclarativeBase):
    """The app's own declarative base."""


class Customer(AppBase):
    __tablename__ = "app_customers"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(sa.String(20), unique=True)  # NOT NULL


TAKEN = "taken@example.org"

#: How the app's own pending object fails, and the exception the app must get.
FAILURES: dict[str, tuple[dict[str, Any], type[Exception]]] = {
    "not-null": ({"email": None}, sa.exc.IntegrityError),
    "unique": ({"email": TAKEN}, sa.exc.IntegrityError),
    "too-long": ({"email": "x" * 40}, sa.exc.DataError),  # PostgreSQL only
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The app's database: a SQLite file, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.sqlite3'}"
        return
    admin_url: str = request.getfixturevalue("postgres_url")
    schema = "apperr_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(admin_url, poolclass=sa.pool.NullPool)
    with admin.begin() as conn:
        conn.execute(sa.schema.CreateSchema(schema))
    try:
        yield (
            sa.engine.make_url(admin_url)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    finally:
        drop_schema(admin, schema)
        admin.dispose()


def _seed(conn: sa.Connection) -> None:
    AppBase.metadata.create_all(conn)
    conn.execute(sa.insert(Customer).values(email=TAKEN))


@pytest.fixture
def app(app_url: str) -> Iterator[tuple[sa.Engine, SQLAlchemyStore]]:
    engine = sa.create_engine(app_url)
    if engine.dialect.name == "sqlite":
        enable_sqlite_savepoints(engine)
    with engine.begin() as conn:
        _seed(conn)
    store = SQLAlchemyStore(engine=engine, migrate=True)
    store.initialize()
    yield engine, store
    store.close()
    engine.dispose()


@pytest.fixture
async def async_app(app_url: str) -> AsyncIterator[tuple[AsyncEngine, SQLAlchemyStore]]:
    url = sa.engine.make_url(app_url)
    if url.get_backend_name() == "sqlite":
        url = url.set(drivername="sqlite+aiosqlite")
    engine = create_async_engine(url)
    if engine.dialect.name == "sqlite":
        enable_sqlite_savepoints(engine)
    async with engine.begin() as conn:
        await conn.run_sync(_seed)
    store = SQLAlchemyStore(async_engine=engine, migrate=True)
    await store.async_initialize()
    yield engine, store
    await store.async_close()
    await engine.dispose()


def _failure(name: str, dialect: str) -> tuple[dict[str, Any], type[Exception]]:
    if name == "too-long" and dialect != "postgresql":
        pytest.skip("SQLite does not enforce a column's length")
    return FAILURES[name]


def _assert_apps(error: BaseException, expected: type[Exception]) -> None:
    """The app's own exception: its type, not ours, nothing wrapping it."""
    assert type(error) is expected
    assert not isinstance(error, FireflyOrmError)
    assert "app_customers" in str(error)


def _save_entry(uow: UnitOfWork, namespace: str) -> None:
    uow.entries.save(namespace, MemoryEntry(key="k", content="ours"))


# --------------------------------------------------------------------------- sync


@pytest.mark.parametrize("failure", list(FAILURES))
def test_add_turn_lets_the_apps_flush_error_through(
    app: tuple[sa.Engine, SQLAlchemyStore], failure: str
) -> None:
    engine, store = app
    values, expected = _failure(failure, engine.dialect.name)
    with Session(engine) as session:
        conv = ConversationMemory(store=store.bind_session(session))
        cid = conv.new_conversation()
        session.add(Customer(**values))
        with pytest.raises(expected) as info:
            conv.add_turn(cid, "hello", "hi")
        _assert_apps(info.value, expected)
        session.rollback()
    assert ConversationMemory(store=store).get_turns(cid) == []


@pytest.mark.parametrize("failure", list(FAILURES))
def test_bound_save_lets_the_apps_flush_error_through(
    app: tuple[sa.Engine, SQLAlchemyStore], failure: str
) -> None:
    engine, store = app
    values, expected = _failure(failure, engine.dialect.name)
    with Session(engine) as session:
        session.add(Customer(**values))
        with pytest.raises(expected) as info:
            store.bind_session(session).save("ns", MemoryEntry(content="ours"))
        _assert_apps(info.value, expected)
        session.rollback()
    assert store.load("ns") == []


def test_objects_added_inside_the_unit_of_work_stay_the_apps(
    app: tuple[sa.Engine, SQLAlchemyStore],
) -> None:
    """Objects the app adds between our statements are flushed as the app's, not by ours."""
    engine, store = app
    with Session(engine) as session:
        with (
            pytest.raises(sa.exc.IntegrityError) as info,
            store.unit_of_work(session=session) as uow,
        ):
            session.add(Customer(email=TAKEN))
            _save_entry(uow, "ns")
        _assert_apps(info.value, sa.exc.IntegrityError)
        session.rollback()
        with (
            pytest.raises(sa.exc.IntegrityError) as info,
            store.unit_of_work(session=session) as uow,
        ):
            _save_entry(uow, "ns")
            session.add(Customer(email=None))
            uow.commit()
        _assert_apps(info.value, sa.exc.IntegrityError)
        session.rollback()
    assert store.load("ns") == []


def test_our_own_failures_are_still_store_errors(app: tuple[sa.Engine, SQLAlchemyStore]) -> None:
    engine, store = app
    with Session(engine) as session:
        session.add(Customer(email="fine@example.org"))  # valid: flushed as the app's
        session.execute(sa.text(f"DROP TABLE {TABLE_NAME}"))  # undone by the rollback
        with pytest.raises(StoreError, match=f"^save failed on .*{TABLE_NAME}"):
            store.bind_session(session).save("ns", MemoryEntry(content="ours"))
        session.rollback()
    assert store.load("ns") == []


def test_the_apps_own_statements_in_the_unit_of_work_keep_their_errors(
    app: tuple[sa.Engine, SQLAlchemyStore],
) -> None:
    """A statement the app runs itself inside ``unit_of_work(session=...)`` fails as the app's."""
    engine, store = app
    with Session(engine) as session:
        with (
            pytest.raises(sa.exc.IntegrityError) as info,
            store.unit_of_work(session=session) as uow,
        ):
            _save_entry(uow, "ns")
            session.execute(sa.insert(Customer).values(email=TAKEN))
        _assert_apps(info.value, sa.exc.IntegrityError)
        with (
            pytest.raises(sa.exc.DBAPIError, match="app_no_such_table") as raw,
            store.unit_of_work(session=session),
        ):
            session.execute(sa.text("SELECT * FROM app_no_such_table"))
        assert not isinstance(raw.value, FireflyOrmError)
        session.rollback()
    assert store.load("ns") == []


def test_our_failures_inside_the_apps_unit_of_work_are_store_errors(
    app: tuple[sa.Engine, SQLAlchemyStore],
) -> None:
    engine, store = app
    with Session(engine) as session:
        with (
            pytest.raises(StoreError, match=f"^save failed on .*{TABLE_NAME}"),
            store.unit_of_work(session=session) as uow,
        ):
            session.execute(sa.text(f"DROP TABLE {TABLE_NAME}"))  # undone by the rollback
            _save_entry(uow, "ns")
        session.rollback()
    assert store.load("ns") == []


def test_the_apps_valid_objects_and_our_rows_commit_together(
    app: tuple[sa.Engine, SQLAlchemyStore],
) -> None:
    engine, store = app
    with Session(engine) as session:
        conv = ConversationMemory(store=store.bind_session(session))
        cid = conv.new_conversation()
        session.add(Customer(email="new@example.org"))
        conv.add_turn(cid, "hello", "hi")
        session.commit()
    with Session(engine) as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Customer)) == 2
    assert [t.assistant_response for t in ConversationMemory(store=store).get_turns(cid)] == ["hi"]


# --------------------------------------------------------------------------- async


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_async_add_turn_lets_the_apps_flush_error_through(
    async_app: tuple[AsyncEngine, SQLAlchemyStore], failure: str
) -> None:
    engine, store = async_app
    values, expected = _failure(failure, engine.dialect.name)
    async with AsyncSession(engine) as session:
        conv = ConversationMemory(store=store.bind_session(session))
        cid = await conv.async_new_conversation()
        session.add(Customer(**values))
        with pytest.raises(expected) as info:
            await conv.async_add_turn(cid, "hello", "hi")
        _assert_apps(info.value, expected)
        await session.rollback()
    assert await ConversationMemory(store=store).async_get_turns(cid) == []


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_async_bound_save_lets_the_apps_flush_error_through(
    async_app: tuple[AsyncEngine, SQLAlchemyStore], failure: str
) -> None:
    engine, store = async_app
    values, expected = _failure(failure, engine.dialect.name)
    async with AsyncSession(engine) as session:
        session.add(Customer(**values))
        with pytest.raises(expected) as info:
            await store.bind_session(session).async_save("ns", MemoryEntry(content="ours"))
        _assert_apps(info.value, expected)
        await session.rollback()
    assert await store.async_load("ns") == []


async def test_async_objects_added_inside_the_unit_of_work_stay_the_apps(
    async_app: tuple[AsyncEngine, SQLAlchemyStore],
) -> None:
    engine, store = async_app
    async with AsyncSession(engine) as session:
        with pytest.raises(sa.exc.IntegrityError) as info:
            async with store.async_unit_of_work(session=session) as uow:
                session.add(Customer(email=TAKEN))
                await uow.run_sync(_save_entry, "ns")
        _assert_apps(info.value, sa.exc.IntegrityError)
        await session.rollback()
        with pytest.raises(sa.exc.IntegrityError) as info:
            async with store.async_unit_of_work(session=session) as uow:
                await uow.run_sync(_save_entry, "ns")
                session.add(Customer(email=None))
                await uow.commit()
        _assert_apps(info.value, sa.exc.IntegrityError)
        await session.rollback()
    assert await store.async_load("ns") == []


async def test_async_apps_own_statements_in_the_unit_of_work_keep_their_errors(
    async_app: tuple[AsyncEngine, SQLAlchemyStore],
) -> None:
    engine, store = async_app
    async with AsyncSession(engine) as session:
        with pytest.raises(sa.exc.IntegrityError) as info:
            async with store.async_unit_of_work(session=session) as uow:
                await uow.run_sync(_save_entry, "ns")
                await session.execute(sa.insert(Customer).values(email=TAKEN))
        _assert_apps(info.value, sa.exc.IntegrityError)
        with pytest.raises(StoreError, match=f"{TABLE_NAME}"):
            async with store.async_unit_of_work(session=session) as uow:
                await session.execute(sa.text(f"DROP TABLE {TABLE_NAME}"))
                await uow.run_sync(_save_entry, "ns")
        await session.rollback()
    assert await store.async_load("ns") == []


async def test_async_our_own_failures_are_still_store_errors(
    async_app: tuple[AsyncEngine, SQLAlchemyStore],
) -> None:
    engine, store = async_app
    async with AsyncSession(engine) as session:
        session.add(Customer(email="fine@example.org"))
        await session.execute(sa.text(f"DROP TABLE {TABLE_NAME}"))  # undone by the rollback
        with pytest.raises(StoreError, match=f"^save failed on .*{TABLE_NAME}"):
            await store.bind_session(session).async_save("ns", MemoryEntry(content="ours"))
        await session.rollback()
    assert await store.async_load("ns") == []
