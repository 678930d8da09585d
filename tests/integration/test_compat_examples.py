"""Upstream's documented examples against the compatibility package, on real databases.

The calls follow the Firefly memory guide's examples (the PostgreSQL and
MongoDB store sections, the manager, working memory, entries, forking,
export/import, configuration from the environment) with only the import prefix
changed: ``fireflyframework_agentic`` -> ``firefly_orm.compat.firefly``.  Each
runs on SQLite, PostgreSQL and MongoDB, including upstream's asynchronous
``await store.initialize()`` / ``await store.close()`` /
``await store.cleanup_expired()``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dbutil import drop_mongo_database, drop_schema

from firefly_orm.compat.firefly.exceptions import (
    DatabaseConnectionError,
    DatabaseStoreError,
    FireflyAgenticError,
    FireflyMemoryError,
)
from firefly_orm.compat.firefly.memory import (
    MemoryEntry,
    MemoryManager,
    MemoryScope,
    MemoryStore,
    SQLiteStore,
    WorkingMemory,
)
from firefly_orm.compat.firefly.memory.database_store import MongoDBStore, PostgreSQLStore

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
KINDS.append(pytest.param("mongo", marks=pytest.mark.mongo))

#: Builds a new compatible store object over one test's database (call it again
#: for "another process").
StoreFactory = Callable[[], Any]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StoreFactory]:
    """Upstream's constructor call for ``kind``, on a database of this test's own."""
    name = "t_" + uuid.uuid4().hex[:10]
    if kind == "sqlite":
        monkeypatch.chdir(tmp_path)  # the guide's relative path: data/firefly_memory.sqlite3
        yield lambda: SQLiteStore("data/firefly_memory.sqlite3")
    elif kind == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
        try:
            yield lambda: PostgreSQLStore(url=url, pool_size=10, pool_min_size=2, schema_name=name)
        finally:
            drop_schema(url, name)
    else:
        url = str(request.getfixturevalue("mongo_url"))
        try:
            yield lambda: MongoDBStore(url=url, database=name, collection="entries", pool_size=10)
        finally:
            drop_mongo_database(url, name)


async def test_database_store_example(new_store: StoreFactory) -> None:
    """The store sections: initialize, a manager on the store, shutdown; then restart."""
    store = new_store()
    await store.initialize()  # required before any operation
    await store.initialize()  # idempotent
    as_protocol: object = store
    assert isinstance(as_protocol, MemoryStore)

    memory = MemoryManager(
        store=store,
        max_conversation_tokens=32_000,
        summarize_threshold=10,
        working_scope_id="main-session",
    )
    cid = memory.new_conversation()
    raw = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    memory.add_turn(cid, "hello", "hi", raw)
    assert memory.get_message_history(cid) == raw
    memory.set_fact("doc_type", "invoice")
    assert memory.get_fact("doc_type") == "invoice"
    assert memory.get_working_context() == "Working Memory:\n- doc_type: invoice"
    store.save("agent_1", MemoryEntry(key="note", content={"n": 1}))  # "use like any store"
    await store.close()  # during application shutdown

    # A new process: everything is still there (upstream kept conversations in memory only).
    again = new_store()
    await again.initialize()
    resumed = MemoryManager(store=again, working_scope_id="main-session")
    assert resumed.get_message_history(cid) == raw
    assert resumed.conversation.get_turns(cid)[0].assistant_response == "hi"
    assert resumed.get_fact("doc_type") == "invoice"
    assert (await again.async_load_by_key("agent_1", "note")).content == {"n": 1}
    await again.close()


async def test_cleanup_expired_example(new_store: StoreFactory) -> None:
    store = new_store()
    await store.initialize()
    now = datetime.now(UTC)
    store.save(
        "ttl", MemoryEntry(scope=MemoryScope.LONG_TERM, key="old", expires_at=now - timedelta(1))
    )
    await store.async_save("ttl", MemoryEntry(key="old2", expires_at=now - timedelta(seconds=1)))
    store.save("ttl", MemoryEntry(key="later", content="kept", expires_at=now + timedelta(1)))
    # Expired entries are invisible at once and deleted by cleanup_expired().
    assert [e.key for e in store.load("ttl")] == ["later"]
    removed = await store.cleanup_expired()
    if isinstance(store, MongoDBStore):  # its TTL monitor may have deleted some first
        assert 0 <= removed <= 2
    else:
        assert removed == 2
    assert await store.cleanup_expired() == 0
    assert [e.key for e in await store.async_load("ttl")] == ["later"]
    await store.close()


async def test_working_memory_scopes_share_a_store(new_store: StoreFactory) -> None:
    """The guide's scoped-isolation example, on a database store."""
    store = new_store()
    await store.initialize()
    agent_a_mem = WorkingMemory(store=store, scope_id="agent_a")
    agent_b_mem = WorkingMemory(store=store, scope_id="agent_b")
    agent_a_mem.set("key", "from A")
    agent_b_mem.set("key", "from B")
    assert agent_a_mem.get("key") == "from A"
    assert agent_b_mem.get("key") == "from B"
    wm = WorkingMemory(store=store, scope_id="idp-session-42")
    wm.set("doc_type", "invoice")
    wm.set("vendor", "Acme Corp", importance=0.9)
    assert (wm.has("vendor"), wm.keys()) == (True, ["doc_type", "vendor"])
    assert wm.items() == [("doc_type", "invoice"), ("vendor", "Acme Corp")]
    wm.delete("vendor")
    assert wm.to_context_string() == "Working Memory:\n- doc_type: invoice"
    await store.close()


async def test_fork_and_export_import_examples(new_store: StoreFactory) -> None:
    store = new_store()
    await store.initialize()
    mgr = MemoryManager(store=store, working_scope_id="main-session")
    mgr.set_fact("user", "Ada")
    child = mgr.fork(working_scope_id="sub-agent-classify")
    child.set_fact("classification", "invoice")
    assert mgr.get_fact("classification") is None  # parent's working memory is unaffected
    assert child.get_fact("user") is None

    cid = mgr.new_conversation()
    mgr.add_turn(cid, "What is Python?", "A language.", [])
    data = mgr.conversation.export_conversation(cid)
    assert set(data) == {"conversation_id", "turns", "summary", "total_tokens"}
    new_id = mgr.conversation.import_conversation(data, conversation_id="custom-id")
    assert new_id == "custom-id"
    turns = mgr.conversation.get_turns("custom-id")
    assert [t.user_prompt for t in turns] == ["What is Python?"]
    await store.close()


async def test_lifecycle_never_runs_the_blocking_forms_on_the_loop(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside an event loop the three lifecycle calls run the async forms only."""
    from firefly_orm.mongo._store import MongoDBStore as OurMongo
    from firefly_orm.sql._store import SQLAlchemyStore

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a blocking lifecycle form ran on the event loop")

    for owner in (SQLAlchemyStore, OurMongo):
        for name in ("initialize", "close", "cleanup_expired"):
            monkeypatch.setattr(owner, name, refuse)
    store = new_store()
    pending = store.initialize()
    assert asyncio.iscoroutine(pending)
    await pending
    await store.async_save("ns", MemoryEntry(key="k", content=1))
    assert await store.cleanup_expired() == 0
    await store.close()


def test_sync_code_can_use_the_same_calls(new_store: StoreFactory) -> None:
    """Without a running loop: ``asyncio.run(store.initialize())`` and plain calls work."""
    store = new_store()
    asyncio.run(store.initialize())
    store.save("ns", MemoryEntry(key="k", content=1, expires_at=datetime.now(UTC)))
    assert asyncio.run(store.cleanup_expired()) == 1
    store.initialize()  # plain call from sync code: done at once
    store.save("ns", MemoryEntry(key="k2", content=2))
    asyncio.run(store.close())
    store.close()  # idempotent
    again = new_store()
    assert [e.content for e in again.load("ns")] == [2]  # initialised on first use
    again.close()


@pytest.mark.parametrize(
    ("store_kind", "build"),
    [
        pytest.param(
            "PostgreSQL",
            lambda: PostgreSQLStore("postgresql://app:pa55-word@127.0.0.1:1/app", timeout=2),
            id="postgres",
        ),
        pytest.param(
            "MongoDB",
            lambda: MongoDBStore(
                "mongodb://app:pa55-word@127.0.0.1:1/?serverSelectionTimeoutMS=300"
            ),
            id="mongo",
        ),
    ],
)
async def test_unreachable_server_says_failed_to_connect(
    store_kind: str, build: Callable[[], Any]
) -> None:
    store = build()
    with pytest.raises(DatabaseConnectionError) as caught:
        await store.initialize()
    message = str(caught.value)
    assert message.startswith(f"Failed to connect to {store_kind}: ")
    assert "pa55-word" not in message
    assert isinstance(caught.value, DatabaseStoreError)
    assert isinstance(caught.value, FireflyMemoryError)
    assert isinstance(caught.value, FireflyAgenticError)
    await store.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_from_config_example(
    kind: str, request: pytest.FixtureRequest, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The environment the guide documents, then ``MemoryManager.from_config()``."""
    name = "t_" + uuid.uuid4().hex[:10]
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    if kind == "sqlite":
        env.setenv("FIREFLY_AGENTIC_MEMORY_BACKEND", "sqlite")
        env.setenv("FIREFLY_AGENTIC_MEMORY_SQLITE_PATH", str(tmp_path / "memory.sqlite3"))
        expected: type = SQLiteStore
    elif kind == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
        env.setenv("FIREFLY_AGENTIC_MEMORY_BACKEND", "postgres")
        env.setenv("FIREFLY_AGENTIC_MEMORY_POSTGRES_URL", url)
        env.setenv("FIREFLY_AGENTIC_MEMORY_POSTGRES_POOL_SIZE", "10")
        env.setenv("FIREFLY_AGENTIC_MEMORY_POSTGRES_POOL_MIN_SIZE", "2")
        env.setenv("FIREFLY_AGENTIC_MEMORY_POSTGRES_SCHEMA", name)
        expected = PostgreSQLStore
        cleanup = lambda: drop_schema(url, name)  # noqa: E731
    else:
        url = str(request.getfixturevalue("mongo_url"))
        env.setenv("FIREFLY_AGENTIC_MEMORY_BACKEND", "mongodb")
        env.setenv("FIREFLY_AGENTIC_MEMORY_MONGODB_URL", url)
        env.setenv("FIREFLY_AGENTIC_MEMORY_MONGODB_DATABASE", name)
        env.setenv("FIREFLY_AGENTIC_MEMORY_MONGODB_COLLECTION", "entries")
        env.setenv("FIREFLY_AGENTIC_MEMORY_MONGODB_POOL_SIZE", "10")
        expected = MongoDBStore
        cleanup = lambda: drop_mongo_database(url, name)  # noqa: E731
    try:
        mgr = MemoryManager.from_config()
        assert isinstance(mgr, MemoryManager)
        assert type(mgr.store) is expected
        mgr.set_fact("doc_type", "invoice")
        assert await mgr.async_get_fact("doc_type") == "invoice"
        assert await mgr.store.cleanup_expired() == 0  # type: ignore[attr-defined]
        await mgr.store.close()  # type: ignore[attr-defined]
        # Used again after close: it reconnects on first use, sync and async.
        assert await mgr.async_get_fact("doc_type") == "invoice"
        assert mgr.get_fact("doc_type") == "invoice"
        child = mgr.fork(working_scope_id="sub")
        assert isinstance(child, MemoryManager)
        await mgr.store.close()  # type: ignore[attr-defined]

        amgr = await MemoryManager.async_from_config()
        assert type(amgr.store) is expected
        assert await amgr.async_get_fact("doc_type") == "invoice"
        await amgr.store.close()  # type: ignore[attr-defined]
    finally:
        cleanup()
