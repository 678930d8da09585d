"""Peers: what a user would pick instead of firefly_orm, under the cell method names.

Each peer maps to the cells it can do (see :mod:`bench.cells`):

* **OpenAI Agents** ``SQLiteSession`` (SQLite) and ``SQLAlchemySession`` (SQLite
  through aiosqlite, PostgreSQL through psycopg async): ``add_items`` (W1),
  ``get_items()`` (W2 all), ``get_items(limit=20)`` (W2 last 20).  Their API is
  async only, so they are in the async comparisons.
* **LangChain** ``SQLChatMessageHistory`` (``langchain-community``; a sync
  SQLAlchemy engine, or an async one in the async comparison): ``add_messages``
  of a ``HumanMessage`` and an ``AIMessage`` (W1), ``messages`` /
  ``aget_messages()`` (W2; it has no last-N read, so the last 20 are the last 20
  of everything).
* **LangGraph checkpointer** (``SqliteSaver`` / ``AsyncSqliteSaver``,
  ``PostgresSaver`` / ``AsyncPostgresSaver``): how a LangGraph app keeps a chat,
  the ``messages`` channel of the thread's checkpoints.  W1 = load the latest
  checkpoint and save the next one with the turn appended (``get_tuple`` +
  ``put``: a lower bound of what a graph step writes); W2 = the latest
  checkpoint's messages (the last 20 are sliced from them).
* **LangGraph store** (``SqliteStore`` / ``AsyncSqliteStore``, ``PostgresStore``
  / ``AsyncPostgresStore``): W3 key operations, ``put`` / ``get`` / ``delete``
  under the namespace ``("working", scope)``.

A peer whose package is missing raises ImportError when built, which the
comparison reports as "not installed".  SQLite peers get the same durability as
every other implementation (WAL, ``synchronous=FULL``; the settings read back
are in the JSON); PostgreSQL peers run in a schema of their own (``search_path``)
with the server's ``synchronous_commit``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from bench.cells import CONVERSATION, KEYS, PEER, Entry, entry

#: The peer packages whose versions go into the results.
PACKAGES = (
    "openai-agents",
    "langchain-community",
    "langchain-core",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
)
#: The namespace root of the LangGraph store's W3 keys.
STORE_ROOT = "working"
_PRAGMAS = ("journal_mode=WAL", "synchronous=FULL", "busy_timeout=30000")

OPENAI_SQLITE = "OpenAI Agents SQLiteSession"
OPENAI_SQLALCHEMY = "OpenAI Agents SQLAlchemySession"
LANGCHAIN = "LangChain SQLChatMessageHistory"
LANGGRAPH_SAVER = "LangGraph checkpointer"
LANGGRAPH_STORE = "LangGraph store"


def versions() -> dict[str, str]:
    """Installed versions of the peer packages ("not installed" for missing ones)."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


@dataclass(frozen=True)
class Place:
    """Where peers keep their data: SQLite files, or PostgreSQL schemas."""

    #: A new SQLite file path for a label (SQLite comparisons).
    sqlite_path: Callable[[str], str] | None = None
    #: The SQLAlchemy URL (``postgresql+psycopg://``) and the libpq conninfo.
    pg_url: str | None = None
    pg_conninfo: str | None = None
    #: Creates a schema for a label (dropped by the runner at the end) and names it.
    pg_schema: Callable[[str], str] | None = None


def _sqlite_pragmas(conn: Any) -> None:
    cur = conn.cursor()
    try:
        for pragma in _PRAGMAS:
            cur.execute(f"PRAGMA {pragma}")
    finally:
        cur.close()


def _sqlite_settings(conn: sqlite3.Connection) -> dict[str, Any]:
    return {
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
        "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],
    }


def _sqlite_conn(path: str, *, autocommit: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, check_same_thread=False, **({"isolation_level": None} if autocommit else {})
    )
    _sqlite_pragmas(conn)
    return conn


def durable_sqlite_engine(path: str, *, asynchronous: bool) -> Any:
    """A SQLAlchemy engine on the SQLite file ``path`` (aiosqlite when ``asynchronous``)
    whose every connection gets the bench's pragmas (WAL, ``synchronous=FULL``)."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    if asynchronous:
        engine: Any = create_async_engine(f"sqlite+aiosqlite:///{path}")
    else:
        engine = sa.create_engine(f"sqlite:///{path}")
    sync_engine = getattr(engine, "sync_engine", engine)
    sa.event.listen(sync_engine, "connect", lambda dbapi, _record: _sqlite_pragmas(dbapi))
    return engine


def postgres_engine(url: str, schema: str, *, asynchronous: bool) -> Any:
    """A SQLAlchemy engine on PostgreSQL at ``url`` whose connections use ``schema``."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    create = create_async_engine if asynchronous else sa.create_engine
    return create(url, connect_args={"options": _pg_options(schema)})


def _pg_options(schema: str) -> str:
    return f"-c search_path={schema}"


# --------------------------------------------------------------------------- messages


def _to_langchain(messages: list[dict[str, Any]]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    kinds = {"user": HumanMessage, "assistant": AIMessage}
    return [kinds[m["role"]](content=m["content"]) for m in messages]


def _from_langchain(messages: list[Any]) -> list[dict[str, Any]]:
    roles = {"human": "user", "ai": "assistant"}
    return [{"role": roles[m.type], "content": m.content} for m in messages]


# --------------------------------------------------------------------------- LangChain


class LangChainChat:
    """``SQLChatMessageHistory`` on a sync SQLAlchemy engine, one object per conversation."""

    def __init__(self, engine: Any) -> None:
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        self.cls = SQLChatMessageHistory
        self.engine = engine
        self.histories: dict[str, Any] = {}

    def prepare(self, cids: list[str]) -> None:
        for cid in cids:
            self.histories[cid] = self.cls(session_id=cid, connection=self.engine)

    def append(self, cid: str, user: str, assistant: str, messages: list[Any]) -> None:
        self.histories[cid].add_messages(_to_langchain(messages))

    def read_all(self, cid: str) -> list[Any]:
        return _from_langchain(self.histories[cid].messages)

    def read_last(self, cid: str, n: int) -> list[Any]:
        return self.read_all(cid)[-n:]

    def close(self) -> None:
        self.engine.dispose()


class AsyncLangChainChat:
    """``SQLChatMessageHistory`` on an async SQLAlchemy engine (``aadd_messages`` ...)."""

    def __init__(self, engine: Any) -> None:
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        self.cls = SQLChatMessageHistory
        self.engine = engine
        self.histories: dict[str, Any] = {}

    async def open(self) -> None:
        pass

    async def prepare(self, cids: list[str]) -> None:
        for cid in cids:
            history = self.histories[cid] = self.cls(session_id=cid, connection=self.engine)
            await history.aget_messages()  # creates the table once per object, untimed

    async def append(self, cid: str, user: str, assistant: str, messages: list[Any]) -> None:
        await self.histories[cid].aadd_messages(_to_langchain(messages))

    async def read_all(self, cid: str) -> list[Any]:
        return _from_langchain(await self.histories[cid].aget_messages())

    async def read_last(self, cid: str, n: int) -> list[Any]:
        return (await self.read_all(cid))[-n:]

    async def close(self) -> None:
        await self.engine.dispose()


# --------------------------------------------------------------------------- LangGraph


def _thread(cid: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": cid, "checkpoint_ns": ""}}


def _next_checkpoint(
    saver: Any, cid: str, latest: Any, messages: list[Any]
) -> tuple[dict[str, Any], Any, dict[str, Any], dict[str, Any]]:
    """(parent config, checkpoint, metadata, new versions) of the turn after ``latest``."""
    from langgraph.checkpoint.base import empty_checkpoint

    if latest is None:
        parent, old, current, step = _thread(cid), [], None, -1
    else:
        parent = latest.config
        old = latest.checkpoint["channel_values"].get("messages", [])
        current = latest.checkpoint["channel_versions"].get("messages")
        step = latest.metadata.get("step", -1)
    new_version = saver.get_next_version(current, None)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [*old, *messages]}
    checkpoint["channel_versions"] = {"messages": new_version}
    metadata = {"source": "loop", "step": step + 1, "parents": {}}
    return parent, checkpoint, metadata, {"messages": new_version}


def _messages_of(latest: Any) -> list[Any]:
    return [] if latest is None else list(latest.checkpoint["channel_values"].get("messages", []))


class SaverChat:
    """A LangGraph checkpointer (sync) keeping the chat in the ``messages`` channel."""

    def __init__(self, saver: Any, conn: Any) -> None:
        self.saver = saver
        self.conn = conn
        saver.setup()
        self.detail: dict[str, Any] = {"w1": "get_tuple + put of the next checkpoint"}

    def append(self, cid: str, user: str, assistant: str, messages: list[Any]) -> None:
        latest = self.saver.get_tuple(_thread(cid))
        self.saver.put(*_next_checkpoint(self.saver, cid, latest, messages))

    def read_all(self, cid: str) -> list[Any]:
        return _messages_of(self.saver.get_tuple(_thread(cid)))

    def read_last(self, cid: str, n: int) -> list[Any]:
        return self.read_all(cid)[-n:]

    def close(self) -> None:
        self.conn.close()


class AsyncSaverChat:
    """A LangGraph async checkpointer (``aget_tuple`` + ``aput``); ``open`` builds it."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build
        self.saver: Any = None
        self.conn: Any = None
        self.detail: dict[str, Any] = {"w1": "aget_tuple + aput of the next checkpoint"}

    async def open(self) -> None:
        self.saver, self.conn = await self.build()
        await self.saver.setup()

    async def append(self, cid: str, user: str, assistant: str, messages: list[Any]) -> None:
        latest = await self.saver.aget_tuple(_thread(cid))
        await self.saver.aput(*_next_checkpoint(self.saver, cid, latest, messages))

    async def read_all(self, cid: str) -> list[Any]:
        return _messages_of(await self.saver.aget_tuple(_thread(cid)))

    async def read_last(self, cid: str, n: int) -> list[Any]:
        return (await self.read_all(cid))[-n:]

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


class StoreKeys:
    """A LangGraph store (sync): ``put`` / ``get`` / ``delete``."""

    def __init__(self, store: Any, conn: Any) -> None:
        self.store = store
        self.conn = conn
        store.setup()

    def kv_set(self, scope: str, key: str, value: Any) -> None:
        self.store.put((STORE_ROOT, scope), key, value)

    def kv_get(self, scope: str, key: str) -> Any:
        item = self.store.get((STORE_ROOT, scope), key)
        return None if item is None else item.value

    def kv_delete(self, scope: str, key: str) -> None:
        self.store.delete((STORE_ROOT, scope), key)

    def close(self) -> None:
        self.conn.close()


class AsyncStoreKeys:
    """A LangGraph async store (``aput`` / ``aget`` / ``adelete``); ``open`` builds it."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build
        self.store: Any = None
        self.conn: Any = None

    async def open(self) -> None:
        self.store, self.conn = await self.build()
        await self.store.setup()

    async def kv_set(self, scope: str, key: str, value: Any) -> None:
        await self.store.aput((STORE_ROOT, scope), key, value)

    async def kv_get(self, scope: str, key: str) -> Any:
        item = await self.store.aget((STORE_ROOT, scope), key)
        return None if item is None else item.value

    async def kv_delete(self, scope: str, key: str) -> None:
        await self.store.adelete((STORE_ROOT, scope), key)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


# --------------------------------------------------------------------------- OpenAI Agents


class OpenAISessions:
    """OpenAI Agents sessions (async API), one session object per conversation."""

    def __init__(self, make: Callable[[str], Any], dispose: Callable[[], Any] | None) -> None:
        self.make = make
        self.dispose = dispose
        self.sessions: dict[str, Any] = {}

    async def open(self) -> None:
        pass

    async def prepare(self, cids: list[str]) -> None:
        for cid in cids:
            session = self.sessions[cid] = self.make(cid)
            await session.get_items()  # connects / creates the tables, untimed

    async def append(self, cid: str, user: str, assistant: str, messages: list[Any]) -> None:
        await self.sessions[cid].add_items(messages)

    async def read_all(self, cid: str) -> list[Any]:
        result: list[Any] = await self.sessions[cid].get_items()
        return result

    async def read_last(self, cid: str, n: int) -> list[Any]:
        result: list[Any] = await self.sessions[cid].get_items(limit=n)
        return result

    async def close(self) -> None:
        for session in self.sessions.values():
            closing = getattr(session, "close", None)
            if closing is not None:
                result = closing()
                if hasattr(result, "__await__"):
                    await result
        if self.dispose is not None:
            await self.dispose()


# --------------------------------------------------------------------------- factories


def _async_only(label: str, cells: frozenset[str]) -> Entry:
    return Entry(label, PEER, None, cells, status="async API only (see the async rows)")


def sync_peers(backend: str, place: Place) -> list[Entry]:
    """The sync peers of ``backend`` ("sqlite" or "postgres")."""
    entries: list[Entry] = []
    if backend == "sqlite":
        assert place.sqlite_path is not None
        path = place.sqlite_path

        def langchain() -> LangChainChat:
            return LangChainChat(durable_sqlite_engine(path("langchain"), asynchronous=False))

        def saver() -> SaverChat:
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = _sqlite_conn(path("lg-saver"), autocommit=False)
            chat = SaverChat(SqliteSaver(conn), conn)
            chat.detail.update(_sqlite_settings(conn))
            return chat

        def store() -> StoreKeys:
            from langgraph.store.sqlite import SqliteStore

            conn = _sqlite_conn(path("lg-store"), autocommit=True)
            return StoreKeys(SqliteStore(conn), conn)

        entries.append(_async_only(OPENAI_SQLITE, CONVERSATION))
    else:
        assert place.pg_url and place.pg_conninfo and place.pg_schema
        url, conninfo, schema = place.pg_url, place.pg_conninfo, place.pg_schema

        def langchain() -> LangChainChat:
            return LangChainChat(postgres_engine(url, schema("langchain"), asynchronous=False))

        def _pg_conn(label: str) -> Any:
            import psycopg
            from psycopg.rows import dict_row

            return psycopg.connect(
                conninfo,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                options=_pg_options(schema(label)),
            )

        def saver() -> SaverChat:
            from langgraph.checkpoint.postgres import PostgresSaver

            conn = _pg_conn("lg_saver")
            return SaverChat(PostgresSaver(conn), conn)

        def store() -> StoreKeys:
            from langgraph.store.postgres import PostgresStore

            conn = _pg_conn("lg_store")
            return StoreKeys(PostgresStore(conn), conn)

    entries.append(_async_only(OPENAI_SQLALCHEMY, CONVERSATION))
    entries.append(entry(LANGCHAIN, PEER, CONVERSATION, langchain))
    entries.append(entry(LANGGRAPH_SAVER, PEER, CONVERSATION, saver))
    entries.append(entry(LANGGRAPH_STORE, PEER, KEYS, store))
    return entries


def async_peers(backend: str, place: Place) -> list[Entry]:
    """The async peers of ``backend``; each is opened by the comparison."""
    entries: list[Entry] = []
    if backend == "sqlite":
        assert place.sqlite_path is not None
        path = place.sqlite_path

        def openai_sqlite() -> OpenAISessions:
            from agents.memory import SQLiteSession

            file = path("openai-sqlite")
            return OpenAISessions(lambda cid: SQLiteSession(cid, file), None)

        def async_engine(label: str) -> Any:
            return durable_sqlite_engine(path(label), asynchronous=True)

        async def saver() -> tuple[Any, Any]:
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            conn = await aiosqlite.connect(path("lg-saver"))
            for pragma in _PRAGMAS:
                await conn.execute(f"PRAGMA {pragma}")
            return AsyncSqliteSaver(conn), conn

        async def store() -> tuple[Any, Any]:
            import aiosqlite
            from langgraph.store.sqlite.aio import AsyncSqliteStore

            conn = await aiosqlite.connect(path("lg-store"), isolation_level=None)
            for pragma in _PRAGMAS:
                await conn.execute(f"PRAGMA {pragma}")
            return AsyncSqliteStore(conn), conn

        entries.append(entry(OPENAI_SQLITE, PEER, CONVERSATION, openai_sqlite))
    else:
        assert place.pg_url and place.pg_conninfo and place.pg_schema
        url, conninfo, schema = place.pg_url, place.pg_conninfo, place.pg_schema

        def async_engine(label: str) -> Any:
            return postgres_engine(url, schema(label.replace("-", "_")), asynchronous=True)

        async def _pg_conn(label: str) -> Any:
            import psycopg
            from psycopg.rows import dict_row

            return await psycopg.AsyncConnection.connect(
                conninfo,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                options=_pg_options(schema(label)),
            )

        async def saver() -> tuple[Any, Any]:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            conn = await _pg_conn("lg_saver")
            return AsyncPostgresSaver(conn), conn

        async def store() -> tuple[Any, Any]:
            from langgraph.store.postgres.aio import AsyncPostgresStore

            conn = await _pg_conn("lg_store")
            return AsyncPostgresStore(conn), conn

    def openai_sqlalchemy() -> OpenAISessions:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        engine = async_engine("openai-sqlalchemy")
        return OpenAISessions(
            lambda cid: SQLAlchemySession(cid, engine=engine, create_tables=True), engine.dispose
        )

    def langchain() -> AsyncLangChainChat:
        import langchain_community.chat_message_histories  # noqa: F401  (installed?)

        return AsyncLangChainChat(async_engine("langchain"))

    def lg_saver() -> AsyncSaverChat:
        import langgraph.checkpoint.base  # noqa: F401  (installed?)

        return AsyncSaverChat(saver)

    def lg_store() -> AsyncStoreKeys:
        import langgraph.store.base  # noqa: F401  (installed?)

        return AsyncStoreKeys(store)

    entries.append(entry(OPENAI_SQLALCHEMY, PEER, CONVERSATION, openai_sqlalchemy))
    entries.append(entry(LANGCHAIN, PEER, CONVERSATION, langchain))
    entries.append(entry(LANGGRAPH_SAVER, PEER, CONVERSATION, lg_saver))
    entries.append(entry(LANGGRAPH_STORE, PEER, KEYS, lg_store))
    return entries
