"""The host-app leak of issue 34, replayed: user b can no longer touch user a's conversation.

A SQLModel app with its own engine and table keeps its users' chat memory in
its database (SQLite file, PostgreSQL schema) through a store on its engine,
each request's memory bound to the request's session and user, as the README
says.  The calls are the ones that leaked: b reading, appending to and
clearing a's conversation, and b creating a conversation that ``erase_user``
must then remove.  Every check of what is stored reads the table with raw SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import registry
from sqlmodel import Field, Session, SQLModel

from firefly_orm import ConversationNotFoundError, MemoryManager, SQLAlchemyStore
from firefly_orm.sql import enable_sqlite_savepoints


class HostModel(SQLModel, registry=registry(metadata=sa.MetaData())):
    """The app's own tables, on their own MetaData."""


class Chat(HostModel, table=True):
    __tablename__ = "host_chats"

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(max_length=64)
    conversation_id: str = Field(max_length=64)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[sa.Engine, str | None]]:
    """The app's engine (its table created) and the schema of the memory tables."""
    if request.param == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
        enable_sqlite_savepoints(engine)
        schema = None
    else:
        url = request.getfixturevalue("postgres_url")
        engine = sa.create_engine(url)
        schema = "host_" + uuid.uuid4().hex[:10]
    HostModel.metadata.create_all(engine)
    try:
        yield engine, schema
    finally:
        if schema is not None:
            with engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        HostModel.metadata.drop_all(engine)
        engine.dispose()


def _rows(engine: sa.Engine, schema: str | None, conversation_id: str) -> list[tuple[object, ...]]:
    """Every stored row of a conversation (raw SQL): namespace, key, owner, content."""
    table = f'"{schema}".memory_entries' if schema else "memory_entries"
    with engine.connect() as conn:
        result = conn.execute(
            sa.text(
                f"SELECT namespace, key, user_id, CAST(content AS TEXT) FROM {table} "
                "WHERE namespace IN (:live, :archive) OR (namespace = :index AND key = :cid) "
                "ORDER BY namespace, key"
            ),
            {
                "live": f"conversation:{conversation_id}",
                "archive": f"conversation-archive:{conversation_id}",
                "index": "conversations",
                "cid": conversation_id,
            },
        )
        return [tuple(row) for row in result]


def test_user_b_cannot_read_append_to_or_clear_user_as_conversation(
    app: tuple[sa.Engine, str | None],
) -> None:
    engine, schema = app
    store = SQLAlchemyStore(engine=engine, schema_name=schema)
    store.initialize(migrate=True)  # the app's start-up (a real app: its Alembic)
    with Session(engine) as session:  # a request of user a
        memory = MemoryManager(store=store.bind_session(session), user_id="a")
        cid = memory.new_conversation()
        memory.add_turn(cid, "my card PIN hint is the cat's name", "noted")
        session.add(Chat(owner="a", conversation_id=cid))
        session.commit()
    stored = _rows(engine, schema, cid)
    assert stored and {row[2] for row in stored} == {"a"}

    with Session(engine) as session:  # a request of user b naming a's conversation
        memory = MemoryManager(store=store.bind_session(session), user_id="b")
        for attempt in (
            lambda: memory.conversation.get_turns(cid),
            lambda: memory.get_context(cid),
            lambda: memory.add_turn(cid, "append to a's chat", "ok"),
            lambda: memory.clear_conversation(cid),
            lambda: memory.conversation.export_conversation(cid),
        ):
            with pytest.raises(ConversationNotFoundError, match="not found"):
                attempt()
        assert memory.conversation_exists(cid) is False
        session.commit()
    assert _rows(engine, schema, cid) == stored  # nothing written

    with Session(engine) as session:  # b's own conversation, created by add_turn
        memory = MemoryManager(store=store.bind_session(session), user_id="b")
        memory.add_turn("b-chat", "hello", "hi")
        session.commit()
    assert {row[2] for row in _rows(engine, schema, "b-chat")} == {"b"}
    MemoryManager(store=store, user_id="b").erase_user("b")
    assert _rows(engine, schema, "b-chat") == []  # erase_user left nothing behind
    assert _rows(engine, schema, cid) == stored  # and took nothing of a's
    store.close()
