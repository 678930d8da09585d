"""The plain SQLAlchemy ORM code a user would write instead of firefly_orm (issue 35's anchor).

What an application already on SQLAlchemy writes for a chat history and a
key-value store with the ORM, one ``Session`` per operation, nothing else:

* ``W1 append``: an ORM object per message, ``session.add_all`` + ``commit``
  (SQLAlchemy sends the two rows as one ``INSERT ... RETURNING``);
* ``W2 read all`` / ``W2 last 20``: ``select(Message)`` of the conversation
  ``ORDER BY id`` (the last ``n``: ``DESC LIMIT n``, reversed in Python);
* ``W3 key ops``: ``session.merge`` of a ``Fact`` (the ORM's upsert: a
  ``SELECT`` by primary key, then ``INSERT`` or ``UPDATE``) + ``commit``;
  ``session.get``; an ORM-enabled ``delete()`` + ``commit``.

Same engines and durability as the SQLAlchemy-based peers (:mod:`bench.peers`):
SQLite in WAL mode with ``synchronous=FULL`` (aiosqlite for async), PostgreSQL
through psycopg in a schema of its own (``search_path``).  The sync and the
async class share the statements (this module's functions); only the session
calls differ.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from bench.minimal import namespace_of

#: The label of these rows in the W1-W3 table.
LABEL = "plain SQLAlchemy ORM"


class Base(DeclarativeBase):
    """The application's own declarative base."""


class Message(Base):
    """One chat message: an ORM object per message."""

    __tablename__ = "orm_messages"
    __table_args__ = (sa.Index("ix_orm_messages_conversation", "conversation", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation: Mapped[str]
    role: Mapped[str]
    content: Mapped[str]


class Fact(Base):
    """One working-memory key."""

    __tablename__ = "orm_facts"

    namespace: Mapped[str] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(primary_key=True)
    value: Mapped[Any] = mapped_column(sa.JSON().with_variant(JSONB(), "postgresql"))


def _rows(cid: str, messages: list[dict[str, Any]]) -> list[Message]:
    return [Message(conversation=cid, role=m["role"], content=m["content"]) for m in messages]


def _read_all(cid: str) -> sa.Select[Message]:
    return sa.select(Message).where(Message.conversation == cid).order_by(Message.id)


def _read_last(cid: str, n: int) -> sa.Select[Message]:
    return (
        sa.select(Message).where(Message.conversation == cid).order_by(Message.id.desc()).limit(n)
    )


def _delete(namespace: str, key: str) -> sa.Delete:
    return sa.delete(Fact).where(Fact.namespace == namespace, Fact.key == key)


def _messages(rows: Any) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.content} for m in rows]


class PlainORM:
    """The sync anchor on any SQLAlchemy engine (tables created at start)."""

    name = LABEL

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        Base.metadata.create_all(engine)
        self.sessions = sessionmaker(engine)
        self.detail: dict[str, Any] = {"w3 set": "Session.merge + commit"}

    def append(self, cid: str, user: str, assistant: str, messages: list[dict[str, Any]]) -> None:
        with self.sessions() as session:
            session.add_all(_rows(cid, messages))
            session.commit()

    def read_all(self, cid: str) -> list[dict[str, Any]]:
        with self.sessions() as session:
            return _messages(session.scalars(_read_all(cid)))

    def read_last(self, cid: str, n: int) -> list[dict[str, Any]]:
        with self.sessions() as session:
            return _messages(reversed(session.scalars(_read_last(cid, n)).all()))

    def kv_set(self, scope: str, key: str, value: Any) -> None:
        with self.sessions() as session:
            session.merge(Fact(namespace=namespace_of(scope), key=key, value=value))
            session.commit()

    def kv_get(self, scope: str, key: str) -> Any:
        with self.sessions() as session:
            fact = session.get(Fact, (namespace_of(scope), key))
            return None if fact is None else fact.value

    def kv_delete(self, scope: str, key: str) -> None:
        with self.sessions() as session:
            session.execute(_delete(namespace_of(scope), key))
            session.commit()

    def close(self) -> None:
        self.engine.dispose()


class AsyncPlainORM:
    """The async anchor: ``AsyncSession`` on an async engine (``open`` creates the tables)."""

    name = LABEL

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.ext.asyncio import async_sessionmaker

        self.engine = engine
        self.sessions = async_sessionmaker(engine)
        self.detail: dict[str, Any] = {"w3 set": "AsyncSession.merge + commit"}

    async def open(self) -> None:
        async with self.engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)

    async def append(
        self, cid: str, user: str, assistant: str, messages: list[dict[str, Any]]
    ) -> None:
        async with self.sessions() as session:
            session.add_all(_rows(cid, messages))
            await session.commit()

    async def read_all(self, cid: str) -> list[dict[str, Any]]:
        async with self.sessions() as session:
            return _messages(await session.scalars(_read_all(cid)))

    async def read_last(self, cid: str, n: int) -> list[dict[str, Any]]:
        async with self.sessions() as session:
            return _messages(reversed((await session.scalars(_read_last(cid, n))).all()))

    async def kv_set(self, scope: str, key: str, value: Any) -> None:
        async with self.sessions() as session:
            await session.merge(Fact(namespace=namespace_of(scope), key=key, value=value))
            await session.commit()

    async def kv_get(self, scope: str, key: str) -> Any:
        async with self.sessions() as session:
            fact = await session.get(Fact, (namespace_of(scope), key))
            return None if fact is None else fact.value

    async def kv_delete(self, scope: str, key: str) -> None:
        async with self.sessions() as session:
            await session.execute(_delete(namespace_of(scope), key))
            await session.commit()

    async def close(self) -> None:
        await self.engine.dispose()


__all__ = ["LABEL", "AsyncPlainORM", "PlainORM"]
