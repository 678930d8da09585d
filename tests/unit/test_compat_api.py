"""The compatibility package: upstream's module layout, names, exceptions and call shapes.

No database: the examples of upstream's memory guide that need no server run
here (in-memory and file stores); the database ones are in
``tests/integration/test_compat_examples.py``.
"""

from __future__ import annotations

import asyncio
import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest

import firefly_orm
from firefly_orm.compat.firefly.memory._lifecycle import (
    CONNECT_FAILURE_PREFIX,
    failed_to_connect,
    lifecycle_call,
)
from firefly_orm.errors import DatabaseConnectionError, StoreError

PREFIX = "firefly_orm.compat.firefly"

#: Upstream's public memory surface: module -> the names code imports from it.
UPSTREAM_LAYOUT: dict[str, tuple[str, ...]] = {
    "memory": (
        "ConversationMemory",
        "ConversationTurn",
        "FileStore",
        "InMemoryStore",
        "MemoryEntry",
        "MemoryManager",
        "MemoryScope",
        "MemoryStore",
        "SQLiteStore",
        "WorkingMemory",
        "create_llm_summarizer",
    ),
    "memory.types": ("ConversationTurn", "MemoryEntry", "MemoryScope"),
    "memory.store": ("FileStore", "InMemoryStore", "MemoryStore", "SQLiteStore"),
    "memory.database_store": ("MongoDBStore", "PostgreSQLStore"),
    "memory.conversation": ("ConversationMemory",),
    "memory.working": ("WorkingMemory",),
    "memory.manager": ("MemoryManager",),
    "memory.summarization": ("create_llm_summarizer",),
    "content.compression": ("TokenEstimator",),
    "exceptions": (
        "DatabaseConnectionError",
        "DatabaseStoreError",
        "FireflyAgenticError",
        "FireflyMemoryError",
    ),
}


@pytest.mark.parametrize("module", sorted(UPSTREAM_LAYOUT))
def test_upstream_module_paths_and_names(module: str) -> None:
    imported = importlib.import_module(f"{PREFIX}.{module}")
    for name in UPSTREAM_LAYOUT[module]:
        assert hasattr(imported, name), f"{module}.{name}"


def test_memory_all_is_upstreams() -> None:
    memory = importlib.import_module(f"{PREFIX}.memory")
    assert sorted(memory.__all__) == sorted(UPSTREAM_LAYOUT["memory"])


def test_names_are_firefly_orms_own_classes() -> None:
    from firefly_orm.compat.firefly.content.compression import TokenEstimator
    from firefly_orm.compat.firefly.memory import (
        ConversationMemory,
        FileStore,
        InMemoryStore,
        MemoryEntry,
        MemoryManager,
        SQLiteStore,
        WorkingMemory,
    )
    from firefly_orm.compat.firefly.memory.database_store import MongoDBStore, PostgreSQLStore

    assert MemoryEntry is firefly_orm.MemoryEntry
    assert ConversationMemory is firefly_orm.ConversationMemory
    assert WorkingMemory is firefly_orm.WorkingMemory
    assert InMemoryStore is firefly_orm.InMemoryStore
    assert TokenEstimator is firefly_orm.TokenEstimator
    # The database stores and the manager are thin subclasses (upstream's lifecycle shapes),
    # FileStore one that looks for upstream's files where it opens.
    assert issubclass(FileStore, firefly_orm.FileStore)
    assert issubclass(SQLiteStore, firefly_orm.SQLiteStore)
    assert issubclass(PostgreSQLStore, firefly_orm.PostgreSQLStore)
    assert issubclass(MongoDBStore, firefly_orm.MongoDBStore)
    assert issubclass(MemoryManager, firefly_orm.MemoryManager)


def test_exception_aliases_catch_what_firefly_orm_raises() -> None:
    from firefly_orm.compat.firefly import exceptions as upstream

    assert upstream.DatabaseConnectionError is DatabaseConnectionError
    assert issubclass(upstream.DatabaseConnectionError, upstream.DatabaseStoreError)
    assert issubclass(upstream.DatabaseStoreError, upstream.FireflyMemoryError)
    assert issubclass(upstream.FireflyMemoryError, upstream.FireflyAgenticError)
    for error in (
        firefly_orm.EntryValidationError("importance", "bad"),
        firefly_orm.ConcurrencyError("raced"),
        firefly_orm.StoreCorruptedError("torn"),
    ):
        assert isinstance(error, upstream.FireflyMemoryError)
    assert isinstance(firefly_orm.ConcurrencyError("x"), upstream.DatabaseStoreError)


def test_bad_schema_name_is_still_a_value_error() -> None:
    from firefly_orm.compat.firefly.memory.database_store import PostgreSQLStore

    with pytest.raises(ValueError, match="schema"):
        PostgreSQLStore("postgresql://u@localhost/db", schema_name="bad name;")


@pytest.mark.parametrize(
    ("words", "tokens"), [(7, 9), (30, 39), (0, 1), (6, 7), (10, 13), (60, 79)]
)
def test_token_estimator_worked_values(words: int, tokens: int) -> None:
    from firefly_orm.compat.firefly.content.compression import TokenEstimator

    estimator = TokenEstimator()
    text = " ".join(f"w{i}" for i in range(words))
    assert estimator.estimate(text) == tokens
    assert estimator.fits(text, tokens)
    assert not estimator.fits(text, tokens - 1)


# --------------------------------------------------------------------------- lifecycle calls


def test_lifecycle_call_without_a_loop_runs_now() -> None:
    ran: list[str] = []

    def now() -> int:
        ran.append("now")
        return 3

    pending = lifecycle_call(now, _never)
    assert ran == ["now"]
    assert asyncio.run(_await(pending)) == 3
    assert asyncio.run(lifecycle_call(lambda: 4, _never)) == 4  # asyncio.run(store.initialize())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Dropped by sync code: no "never awaited" warning (type checkers do flag it).
        lifecycle_call(lambda: None, _never)  # type: ignore[unused-coroutine]


async def test_lifecycle_call_inside_a_loop_waits_for_await() -> None:
    ran: list[str] = []

    async def later() -> int:
        ran.append("later")
        return 5

    pending = lifecycle_call(_never_sync, later)
    assert ran == []  # nothing happens before it is awaited
    assert await pending == 5
    assert ran == ["later"]


def test_failed_to_connect_prefixes_connection_errors_once() -> None:
    with (
        pytest.raises(DatabaseConnectionError) as caught,
        failed_to_connect("PostgreSQL"),
        failed_to_connect("PostgreSQL"),
    ):
        raise DatabaseConnectionError("server closed the connection")
    assert str(caught.value) == (
        f"{CONNECT_FAILURE_PREFIX} PostgreSQL: server closed the connection"
    )
    assert isinstance(caught.value.__cause__, DatabaseConnectionError)
    with pytest.raises(StoreError) as other, failed_to_connect("PostgreSQL"):
        raise StoreError("disk full")
    assert str(other.value) == "disk full"  # other errors pass unchanged


def _never_sync() -> Any:
    raise AssertionError("the sync form ran inside an event loop")


def _never() -> Any:
    raise AssertionError("the async form was chosen without an event loop")


async def _await(pending: Any) -> Any:
    return await pending


def test_sqlite_store_sync_lifecycle_from_plain_code(tmp_path: Path) -> None:
    """``SQLiteStore`` needs no server: the lifecycle calls from sync code and from a loop."""
    from firefly_orm.compat.firefly.memory import MemoryEntry, SQLiteStore

    store = SQLiteStore(tmp_path / "data" / "firefly_memory.sqlite3")
    store.initialize()  # type: ignore[unused-coroutine]  # plain sync call: done at once
    store.save("ns", MemoryEntry(key="k", content=1))
    assert asyncio.run(store.cleanup_expired()) == 0
    store.close()  # type: ignore[unused-coroutine]

    async def shutdown() -> None:
        await store.initialize()
        assert [e.content for e in await store.async_load("ns")] == [1]
        await store.close()

    asyncio.run(shutdown())
    with store:  # the context manager closes with the sync form
        assert store.load_by_key("ns", "k") is not None


# --------------------------------------------------------------------------- guide examples


def test_quick_start_and_manager_examples() -> None:
    from firefly_orm.compat.firefly.memory import MemoryManager

    memory = MemoryManager(max_conversation_tokens=32_000)
    conv_id = memory.new_conversation()
    raw = [{"role": "user", "content": "What is Python?"}, {"role": "assistant", "content": "A."}]
    memory.add_turn(conv_id, "What is Python?", "A.", raw)
    assert memory.get_message_history(conv_id) == raw
    mgr = MemoryManager(
        store=None, max_conversation_tokens=32_000, summarize_threshold=10,
        working_scope_id="main-session",
    )  # fmt: skip
    assert mgr.working.scope_id == "main-session"
    mgr.set_fact("doc_type", "invoice")
    assert mgr.get_fact("doc_type") == "invoice"
    mgr.clear_working()
    assert mgr.get_working_context() == ""
    with pytest.raises(TypeError):
        MemoryManager(None)  # type: ignore[call-arg]  # keyword-only, as upstream


def test_summarization_example() -> None:
    from firefly_orm.compat.firefly.memory import ConversationMemory, ConversationTurn

    def my_summarizer(turns: list[ConversationTurn]) -> str:
        texts = [f"{t.user_prompt} -> {t.assistant_response}" for t in turns]
        return "Summary of earlier conversation: " + "; ".join(texts)

    conv_mem = ConversationMemory(max_tokens=40, summarize_threshold=30, summarizer=my_summarizer)
    cid = conv_mem.new_conversation()
    for i in range(6):
        conv_mem.add_turn(cid, f"question {i} " * 3, f"answer {i} " * 3, [])
    summary = conv_mem.get_summary(cid)
    assert summary is not None and "question 0" in summary
    assert sum(t.token_estimate for t in conv_mem.get_turns(cid)) <= 40


def test_custom_backend_example() -> None:
    from firefly_orm.compat.firefly.memory import MemoryEntry, MemoryStore, WorkingMemory

    class DictStore:
        def __init__(self) -> None:
            self.rows: dict[str, dict[str, MemoryEntry]] = {}

        def save(self, namespace: str, entry: MemoryEntry) -> None:
            self.rows.setdefault(namespace, {})[entry.entry_id] = entry

        def load(self, namespace: str) -> list[MemoryEntry]:
            return list(self.rows.get(namespace, {}).values())

        def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
            matches = [e for e in self.load(namespace) if e.key == key]
            return matches[-1] if matches else None

        def delete(self, namespace: str, entry_id: str) -> None:
            self.rows.get(namespace, {}).pop(entry_id, None)

        def clear(self, namespace: str) -> None:
            self.rows.pop(namespace, None)

    store = DictStore()
    assert isinstance(store, MemoryStore)
    wm = WorkingMemory(store=store, scope_id="redis-like")
    wm.set("k", "v")
    assert wm.get("k") == "v"
    assert list(store.rows) == ["working:redis-like"]


async def test_file_store_async_wrappers_example(tmp_path: Path) -> None:
    from firefly_orm.compat.firefly.memory import FileStore, MemoryEntry

    store = FileStore(base_dir=tmp_path / ".firefly_memory")
    entry = MemoryEntry(key="greeting", content={"text": "hello"})
    await store.async_save("conversations", entry)
    entries = await store.async_load("conversations")
    assert [(e.entry_id, e.content) for e in entries] == [(entry.entry_id, {"text": "hello"})]
