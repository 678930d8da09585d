"""A store bound to the app's session, called with the wrong kind of method.

The usual way in: an ``async def`` FastAPI route gets the app's sync
``Session`` from a dependency, binds the memory to it and awaits an
``async_*`` method.  A sync ``Session`` cannot run async work, so the call
must fail before anything runs, and the message must say what works instead:
an ``AsyncSession`` with the ``async_*`` methods, or the unbound store, or the
sync methods from sync code.  The other way round (an ``AsyncSession`` and a
sync method) names the ``async_*`` methods and the sync ``Session``, also on a
store that has no sync engine (where the store's own "no sync engine" error
would point at the wrong fix).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated

import pytest
import sqlalchemy as sa
from fastapi import Depends, FastAPI, Request
from fastapi.testclient import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from firefly_orm import MemoryEntry, MemoryManager, SQLAlchemyStore
from firefly_orm.sql import enable_sqlite_savepoints

#: What the message for a sync Session in async code must name.
ASYNC_ADVICE = (
    "bound to a sync Session",
    "AsyncSession",
    "store.bind_session(async_session)",
    "async_*",
    "unbound store",
    "a plain `def` route",
)
#: What the message for an AsyncSession in sync code must name.
SYNC_ADVICE = (
    "bound to an AsyncSession",
    "await the async_* methods",
    "store.bind_session(session)",
    "unbound store",
)


def assert_names(message: str, words: tuple[str, ...]) -> None:
    missing = [word for word in words if word not in message]
    assert not missing, f"{missing} not in: {message}"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.sqlite3'}")
    enable_sqlite_savepoints(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: sa.Engine) -> Iterator[SQLAlchemyStore]:
    store = SQLAlchemyStore(engine=engine, migrate=True)
    store.initialize()
    yield store
    store.close()


def get_session(request: Request) -> Iterator[Session]:
    """The app's sync session, one per request (the usual FastAPI dependency)."""
    with Session(request.app.state.engine) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def test_async_route_with_the_apps_sync_session(engine: sa.Engine, store: SQLAlchemyStore) -> None:
    app = FastAPI()
    app.state.engine = engine

    @app.post("/chat")
    async def chat(session: SessionDep) -> dict[str, int]:
        memory = MemoryManager(store=store.bind_session(session), user_id="ada")
        turn = await memory.async_add_turn("chat-1", "Hello?", "Hi!")
        session.commit()
        return {"turn_id": turn.turn_id}

    with TestClient(app) as client, pytest.raises(TypeError) as raised:
        client.post("/chat")
    assert_names(str(raised.value), ASYNC_ADVICE)
    assert "sqlalchemy.orm.session.Session" in str(raised.value)
    assert store.load("conversation:chat-1") == []


async def test_async_calls_on_a_sync_session(engine: sa.Engine, store: SQLAlchemyStore) -> None:
    with Session(engine) as session:
        bound = store.bind_session(session)
        with pytest.raises(TypeError) as raised:
            await bound.async_save("ns", MemoryEntry(content="x"))
        assert_names(str(raised.value), ASYNC_ADVICE)
        with pytest.raises(TypeError) as raised:
            async with store.async_unit_of_work(session=session):  # type: ignore[arg-type]
                pass
        assert_names(str(raised.value), ASYNC_ADVICE)
        # the sync methods still serve it, and the session goes on
        bound.save("ns", MemoryEntry(content="kept"))
        session.commit()
    assert [e.content for e in store.load("ns")] == ["kept"]


@pytest.fixture
async def async_store(tmp_path: Path) -> AsyncIterator[SQLAlchemyStore]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite3'}")
    enable_sqlite_savepoints(engine)
    store = SQLAlchemyStore(async_engine=engine, migrate=True)  # no sync engine
    await store.async_initialize()
    yield store
    await store.async_close()
    await engine.dispose()


async def test_sync_calls_on_an_async_session(async_store: SQLAlchemyStore) -> None:
    async with AsyncSession(async_store.async_engine) as session:
        memory = MemoryManager(store=async_store.bind_session(session))
        with pytest.raises(TypeError) as raised:
            memory.add_turn("chat-1", "Hello?", "Hi!")
        assert_names(str(raised.value), SYNC_ADVICE)
        assert "sqlalchemy.ext.asyncio.session.AsyncSession" in str(raised.value)
        with (
            pytest.raises(TypeError) as raised,
            async_store.unit_of_work(session=session),  # type: ignore[arg-type]
        ):
            pass
        assert_names(str(raised.value), SYNC_ADVICE)
        # the async methods still serve it
        await memory.async_add_turn("chat-1", "Hello?", "Hi!")
        await session.commit()
    turns = await MemoryManager(store=async_store).conversation.async_get_turns("chat-1")
    assert [t.user_prompt for t in turns] == ["Hello?"]
