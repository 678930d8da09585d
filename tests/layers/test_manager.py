"""MemoryManager: the facade, fork semantics, summarizer pass-through, from_config."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from dbutil import drop_schema

from firefly_orm.config import ConfigurationError
from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.errors import EntryValidationError
from firefly_orm.manager import MemoryManager
from firefly_orm.store import InMemoryStore
from firefly_orm.working import WorkingMemory

ENV_PREFIX = "FIREFLY_AGENTIC_MEMORY_"


class RecordingSummarizer:
    """A sync summarizer that records what it was given."""

    def __init__(self) -> None:
        self.calls: list[list[ConversationTurn]] = []

    def __call__(self, turns: list[ConversationTurn]) -> str:
        self.calls.append(list(turns))
        real = [t for t in turns if t.turn_id >= 0]
        return f"summary of turns {[t.turn_id for t in real]}"


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


# --------------------------------------------------------------------------- construction


def test_keyword_only_and_defaults() -> None:
    with pytest.raises(TypeError):
        MemoryManager(InMemoryStore())  # type: ignore[call-arg]
    mgr = MemoryManager()
    assert isinstance(mgr.store, InMemoryStore)
    assert isinstance(mgr.conversation, ConversationMemory)
    assert isinstance(mgr.working, WorkingMemory)
    assert mgr.conversation.max_tokens == 128_000
    # No threshold by default (issue 33): 10 would now evict every turn but the newest.
    assert mgr.conversation.summarize_threshold is None
    assert mgr.working.scope_id == "default"
    assert mgr.conversation.store is mgr.store
    assert mgr.working.store is mgr.store
    assert not mgr.is_fork and mgr.parent is None


def test_falsy_store_is_used() -> None:
    """``store is None`` decides, not truthiness (upstream used ``store or ...``)."""

    class EmptyStore(InMemoryStore):
        def __len__(self) -> int:
            return 0

    falsy = EmptyStore()
    assert not falsy
    mgr = MemoryManager(store=falsy)
    assert mgr.store is falsy
    mgr.set_fact("k", 1)
    assert falsy.load("working:default")[0].content == 1


def test_the_default_keeps_turns_up_to_the_budget_and_none_turns_it_off(store: Any) -> None:
    """Issue 33: the threshold now evicts down to itself; the manager's default (no
    threshold) keeps what earlier releases kept, and ``max_conversation_tokens=None``
    turns the token limit off."""
    mgr = MemoryManager(store=store, max_conversation_tokens=40)
    cid = mgr.new_conversation()
    for n in range(4):
        mgr.add_turn(cid, f"q{n} " * 4, f"a{n} " * 4, [{"m": n}])  # 10 tokens each
    assert len(mgr.conversation.get_turns(cid)) == 4  # 40 is not > 40 (10 would evict)
    mgr.add_turn(cid, "q4 " * 4, "a4 " * 4, [{"m": 4}])
    assert mgr.get_message_history(cid) == [{"m": n} for n in range(1, 5)]
    unlimited = MemoryManager(store=store, max_conversation_tokens=None)
    cid = unlimited.new_conversation()
    for n in range(3):
        unlimited.add_turn(cid, "q " * 2000, "a " * 2000, [{"m": n}])
    assert unlimited.get_message_history(cid) == [{"m": n} for n in range(3)]
    assert len(unlimited.assemble_context(cid)) == 3


def test_parameters_reach_the_parts() -> None:
    mgr = MemoryManager(max_conversation_tokens=500, summarize_threshold=700, working_scope_id="s")
    assert mgr.conversation.max_tokens == 500
    assert mgr.conversation.summarize_threshold == 700
    assert mgr.working.scope_id == "s"
    assert "working_scope_id='s'" in repr(mgr)


# --------------------------------------------------------------------------- conversations


def test_conversation_round_trip(store: Any) -> None:
    mgr = MemoryManager(store=store)
    cid = mgr.new_conversation()
    raw = [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "hello"}]
    turn = mgr.add_turn(cid, "hi", "hello", raw, metadata={"agent": "a1"})
    assert turn.turn_id == 0
    assert turn.metadata == {"agent": "a1"}
    mgr.add_turn(cid, "and then", "more", [{"n": 3}])
    assert mgr.get_message_history(cid) == [*raw, {"n": 3}]
    assert [t.user_prompt for t in mgr.conversation.get_turns(cid)] == ["hi", "and then"]
    assert mgr.get_message_history("never-seen") == []


def test_add_turn_without_raw_messages(store: Any) -> None:
    mgr = MemoryManager(store=store)
    turn = mgr.add_turn("host-id", "q", "a")
    assert turn.raw_messages == []
    assert mgr.conversation.get_turns("host-id")[0].assistant_response == "a"


def test_history_respects_budget(store: Any) -> None:
    mgr = MemoryManager(store=store, max_conversation_tokens=30)
    cid = mgr.new_conversation()
    for i in range(4):
        mgr.add_turn(cid, words(5, f"p{i}"), words(5, f"r{i}"), [{"turn": i}])
    # each turn is 10 words -> 13 tokens; 2 turns fit in 30
    assert mgr.get_message_history(cid) == [{"turn": 2}, {"turn": 3}]


def test_clear_conversation(store: Any) -> None:
    mgr = MemoryManager(store=store)
    keep = mgr.new_conversation()
    drop = mgr.new_conversation()
    mgr.add_turn(keep, "a", "b", [{"k": 1}])
    mgr.add_turn(drop, "c", "d", [{"d": 1}])
    mgr.clear_conversation(drop)
    assert mgr.get_message_history(drop) == []
    assert mgr.get_message_history(keep) == [{"k": 1}]


def test_state_survives_a_new_manager(store: Any) -> None:
    first = MemoryManager(store=store, working_scope_id="agent")
    cid = first.new_conversation()
    first.add_turn(cid, "remember", "ok", [{"m": 1}])
    first.set_fact("colour", "blue")
    second = MemoryManager(store=store, working_scope_id="agent")
    assert second.get_message_history(cid) == [{"m": 1}]
    assert second.get_fact("colour") == "blue"


# --------------------------------------------------------------------------- facts


def test_facts(store: Any) -> None:
    mgr = MemoryManager(store=store, working_scope_id="facts")
    assert mgr.get_working_context() == ""
    assert mgr.get_fact("missing", "dflt") == "dflt"
    mgr.set_fact("user", "Ada", importance=0.9)
    mgr.set_fact("lang", "en")
    assert mgr.get_fact("user") == "Ada"
    entry = mgr.working.get_entry("user")
    assert entry is not None and entry.importance == pytest.approx(0.9)
    assert mgr.get_working_context() == "Working Memory:\n- user: Ada\n- lang: en"
    mgr.clear_working()
    assert mgr.get_working_context() == ""


@pytest.mark.parametrize("bad", [1.5, -1, float("nan")])
def test_set_fact_validates_importance(bad: float) -> None:
    mgr = MemoryManager()
    mgr.set_fact("k", "old")
    with pytest.raises(EntryValidationError):
        mgr.set_fact("k", "new", importance=bad)
    assert mgr.get_fact("k") == "old"


def test_clear_all_on_a_root_manager(store: Any) -> None:
    mgr = MemoryManager(store=store, working_scope_id="root")
    other_scope = WorkingMemory(store=store, scope_id="someone-else")
    other_scope.set("kept", True)
    a = mgr.new_conversation()
    mgr.add_turn(a, "x", "y", [{"a": 1}])
    mgr.add_turn("implicit", "x", "y", [{"i": 1}])
    mgr.set_fact("k", 1)
    mgr.clear_all()
    assert mgr.get_message_history(a) == []
    assert mgr.get_message_history("implicit") == []
    assert mgr.conversation.conversation_ids == []
    assert mgr.get_fact("k") is None
    assert other_scope.get("kept") is True  # only this manager's working scope


# --------------------------------------------------------------------------- fork


def test_fork_shares_conversations_and_isolates_facts(store: Any) -> None:
    parent = MemoryManager(store=store, working_scope_id="parent")
    child = parent.fork(working_scope_id="child")
    assert child.is_fork and child.parent is parent
    assert child.store is parent.store
    assert child.conversation is parent.conversation
    assert child.working is not parent.working
    assert child.working.scope_id == "child"

    cid = parent.new_conversation()
    parent.add_turn(cid, "from parent", "ok", [{"who": "parent"}])
    child.add_turn(cid, "from child", "ok", [{"who": "child"}])
    assert parent.get_message_history(cid) == [{"who": "parent"}, {"who": "child"}]
    assert child.get_message_history(cid) == parent.get_message_history(cid)

    parent.set_fact("p", 1)
    child.set_fact("c", 2)
    assert parent.get_fact("c") is None
    assert child.get_fact("p") is None
    assert parent.get_working_context() == "Working Memory:\n- p: 1"
    assert child.get_working_context() == "Working Memory:\n- c: 2"


def test_fork_with_the_parent_scope_sees_parent_facts() -> None:
    parent = MemoryManager(working_scope_id="same")
    parent.set_fact("k", "v")
    twin = parent.fork(working_scope_id="same")
    assert twin.get_fact("k") == "v"
    twin.set_fact("k", "changed")
    assert parent.get_fact("k") == "changed"


def test_fork_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        MemoryManager().fork("x")  # type: ignore[call-arg]


def test_fork_clear_all_keeps_parent_conversations(store: Any) -> None:
    """Upstream: a child's clear_all() wiped the parent's conversations.  Not here."""
    parent = MemoryManager(store=store, working_scope_id="parent")
    shared = parent.new_conversation()
    parent.add_turn(shared, "parent turn", "ok", [{"p": 1}])
    parent.set_fact("pf", 1)

    child = parent.fork(working_scope_id="child")
    child.add_turn(shared, "child turn", "ok", [{"c": 1}])
    own = child.new_conversation()
    child.add_turn(own, "child only", "ok", [{"own": 1}])
    child.set_fact("cf", 2)

    child.clear_all()
    assert parent.get_message_history(shared) == [{"p": 1}, {"c": 1}]
    assert child.get_message_history(own) == []
    assert own not in parent.conversation.conversation_ids
    assert shared in parent.conversation.conversation_ids
    assert child.get_fact("cf") is None
    assert parent.get_fact("pf") == 1

    # the root still clears everything, conversations a fork started included
    own2 = child.new_conversation()
    child.add_turn(own2, "again", "ok", [{"own2": 1}])
    parent.clear_all()
    assert parent.conversation.conversation_ids == []
    assert child.get_message_history(own2) == []


def test_grandchild_clear_all_only_touches_its_own() -> None:
    root = MemoryManager()
    child = root.fork(working_scope_id="child")
    grandchild = child.fork(working_scope_id="grandchild")
    c_conv = child.new_conversation()
    g_conv = grandchild.new_conversation()
    child.add_turn(c_conv, "a", "b", [{"c": 1}])
    grandchild.add_turn(g_conv, "a", "b", [{"g": 1}])
    grandchild.clear_all()
    assert child.get_message_history(c_conv) == [{"c": 1}]
    assert root.get_message_history(g_conv) == []


def test_fork_clear_conversation_is_explicit() -> None:
    parent = MemoryManager()
    shared = parent.new_conversation()
    parent.add_turn(shared, "a", "b", [{"x": 1}])
    parent.fork(working_scope_id="c").clear_conversation(shared)
    assert parent.get_message_history(shared) == []


# --------------------------------------------------------------------------- summarizer


def test_summarizer_passes_through_the_manager(store: Any) -> None:
    summarizer = RecordingSummarizer()
    mgr = MemoryManager(
        store=store, max_conversation_tokens=30, summarize_threshold=30, summarizer=summarizer
    )
    cid = mgr.new_conversation()
    for i in range(4):  # 13 tokens each
        mgr.add_turn(cid, words(5, f"p{i}"), words(5, f"r{i}"), [{"turn": i}])
    assert summarizer.calls, "the summarizer given to the manager was never called"
    assert mgr.conversation.get_summary(cid) is not None
    assert mgr.conversation.get_summary(cid).startswith("summary of turns")  # type: ignore[union-attr]
    evicted = [t.turn_id for call in summarizer.calls for t in call if t.turn_id >= 0]
    assert evicted == [0, 1]
    assert mgr.conversation.get_summary(cid) == "summary of turns [1]"
    # the second call got the first summary as the synthetic turn -1
    assert summarizer.calls[1][0].turn_id == -1
    assert summarizer.calls[1][0].assistant_response == "summary of turns [0]"
    assert mgr.get_message_history(cid) == [{"turn": 2}, {"turn": 3}]


def test_without_summarizer_no_summary() -> None:
    mgr = MemoryManager(max_conversation_tokens=30, summarize_threshold=30)
    cid = mgr.new_conversation()
    for i in range(4):
        mgr.add_turn(cid, words(5), words(5), [{"turn": i}])
    assert mgr.conversation.get_summary(cid) is None
    assert mgr.get_message_history(cid) == [{"turn": 2}, {"turn": 3}]


async def test_async_summarizer_passes_through_the_manager() -> None:
    seen: list[int] = []

    class AsyncOnly:
        async def async_summarize(self, turns: list[ConversationTurn]) -> str:
            seen.extend(t.turn_id for t in turns if t.turn_id >= 0)
            return "async summary"

    mgr = MemoryManager(max_conversation_tokens=30, summarize_threshold=30, summarizer=AsyncOnly())
    cid = await mgr.async_new_conversation()
    for i in range(3):
        await mgr.async_add_turn(cid, words(5), words(5), [{"turn": i}])
    assert seen == [0]
    assert mgr.conversation.get_summary(cid) == "async summary"


# --------------------------------------------------------------------------- async twins


async def test_async_twins(store: Any) -> None:
    mgr = MemoryManager(store=store, working_scope_id="async")
    cid = await mgr.async_new_conversation()
    turn = await mgr.async_add_turn(cid, "q", "a", [{"m": 1}], metadata={"x": 1})
    assert turn.metadata == {"x": 1}
    assert await mgr.async_get_message_history(cid) == [{"m": 1}]
    await mgr.async_set_fact("k", "v", importance=0.7)
    assert await mgr.async_get_fact("k") == "v"
    assert await mgr.async_get_fact("nope", 5) == 5
    assert await mgr.async_get_working_context() == "Working Memory:\n- k: v"
    # sync and async see the same state
    assert mgr.get_fact("k") == "v"
    assert mgr.get_message_history(cid) == [{"m": 1}]
    await mgr.async_clear_working()
    assert await mgr.async_get_working_context() == ""
    await mgr.async_clear_conversation(cid)
    assert await mgr.async_get_message_history(cid) == []
    other = await mgr.async_new_conversation()
    await mgr.async_add_turn(other, "q", "a", [{"o": 1}])
    await mgr.async_set_fact("k2", 1)
    await mgr.async_clear_all()
    assert mgr.conversation.conversation_ids == []
    assert await mgr.async_get_fact("k2") is None


async def test_async_fork_clear_all_keeps_parent_conversations() -> None:
    parent = MemoryManager()
    shared = await parent.async_new_conversation()
    await parent.async_add_turn(shared, "a", "b", [{"p": 1}])
    child = parent.fork(working_scope_id="child")
    own = await child.async_new_conversation()
    await child.async_add_turn(own, "a", "b", [{"c": 1}])
    await child.async_set_fact("cf", 1)
    await child.async_clear_all()
    assert await parent.async_get_message_history(shared) == [{"p": 1}]
    assert await child.async_get_message_history(own) == []
    assert await child.async_get_fact("cf") is None


async def test_async_importance_validated() -> None:
    mgr = MemoryManager()
    with pytest.raises(EntryValidationError):
        await mgr.async_set_fact("k", 1, importance=3)
    assert await mgr.async_get_fact("k") is None


# --------------------------------------------------------------------------- from_config


def test_from_config_defaults(env: pytest.MonkeyPatch) -> None:
    mgr = MemoryManager.from_config()
    assert isinstance(mgr.store, InMemoryStore)
    assert mgr.conversation.max_tokens == 128_000
    # No threshold by default (issue 33): 10 would now evict every turn but the newest.
    assert mgr.conversation.summarize_threshold is None
    assert mgr.working.scope_id == "default"


def test_from_config_reads_env_at_call_time(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv(f"{ENV_PREFIX}MAX_CONVERSATION_TOKENS", "1000")
    env.setenv(f"{ENV_PREFIX}SUMMARIZE_THRESHOLD", "1500")
    first = MemoryManager.from_config()
    assert first.conversation.max_tokens == 1000
    assert first.conversation.summarize_threshold == 1500
    assert isinstance(first.store, InMemoryStore)

    env.setenv(f"{ENV_PREFIX}BACKEND", "file")
    env.setenv(f"{ENV_PREFIX}FILE_DIR", str(tmp_path / "fdir"))
    env.setenv(f"{ENV_PREFIX}MAX_CONVERSATION_TOKENS", "2000")
    second = MemoryManager.from_config()  # no reset_config() needed
    from firefly_orm.file_store import FileStore

    assert isinstance(second.store, FileStore)
    assert second.conversation.max_tokens == 2000
    second.set_fact("k", "v")
    assert any((tmp_path / "fdir").iterdir())


def test_from_config_sqlite(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from firefly_orm.sql import SQLiteStore

    path = tmp_path / "nested" / "cfg.sqlite3"
    env.setenv(f"{ENV_PREFIX}BACKEND", "SQLite")
    env.setenv(f"{ENV_PREFIX}SQLITE_PATH", str(path))
    mgr = MemoryManager.from_config(working_scope_id="cfg")
    try:
        assert isinstance(mgr.store, SQLiteStore)
        assert path.exists()  # initialised (migrated) by from_config
        mgr.set_fact("k", 42)
        cid = mgr.new_conversation()
        mgr.add_turn(cid, "q", "a", [{"r": 1}])
    finally:
        mgr.store.close()  # type: ignore[attr-defined]
    again = MemoryManager.from_config(working_scope_id="cfg")
    try:
        assert again.get_fact("k") == 42
        assert again.get_message_history(cid) == [{"r": 1}]
    finally:
        again.store.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", ["sqllite", "postgresql", "rediss", "memory", ""])
def test_from_config_unknown_backend_is_an_error(env: pytest.MonkeyPatch, bad: str) -> None:
    env.setenv(f"{ENV_PREFIX}BACKEND", bad)
    with pytest.raises(ConfigurationError) as info:
        MemoryManager.from_config()
    message = str(info.value)
    assert f"{ENV_PREFIX}BACKEND" in message
    for allowed in ("in_memory", "file", "sqlite", "postgres", "mongodb", "redis"):
        assert allowed in message


def test_from_config_missing_postgres_url(env: pytest.MonkeyPatch) -> None:
    env.setenv(f"{ENV_PREFIX}BACKEND", "postgres")
    with pytest.raises(ValueError, match=f"{ENV_PREFIX}POSTGRES_URL"):
        MemoryManager.from_config()


def test_from_config_does_not_read_dotenv_in_cwd(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        f"{ENV_PREFIX}BACKEND=nonsense\n{ENV_PREFIX}MAX_CONVERSATION_TOKENS=7\n"
    )
    mgr = MemoryManager.from_config()
    assert isinstance(mgr.store, InMemoryStore)
    assert mgr.conversation.max_tokens == 128_000


def test_from_config_summary_model_builds_a_summarizer(env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pydantic_ai")
    from firefly_orm.summarization import LLMSummarizer

    env.setenv(f"{ENV_PREFIX}SUMMARY_MODEL", "test")
    env.setenv(f"{ENV_PREFIX}MAX_CONVERSATION_TOKENS", "30")
    env.setenv(f"{ENV_PREFIX}SUMMARIZE_THRESHOLD", "30")
    mgr = MemoryManager.from_config()
    cid = mgr.new_conversation()
    for i in range(3):
        mgr.add_turn(cid, words(5), words(5, "answer"), [{"turn": i}])
    summary = mgr.conversation.get_summary(cid)
    assert summary  # the pydantic-ai "test" model answered through the manager
    assert isinstance(mgr.conversation._summarizer, LLMSummarizer)


def test_from_config_explicit_summarizer_wins(env: pytest.MonkeyPatch) -> None:
    env.setenv(f"{ENV_PREFIX}SUMMARY_MODEL", "test")
    env.setenv(f"{ENV_PREFIX}MAX_CONVERSATION_TOKENS", "30")
    env.setenv(f"{ENV_PREFIX}SUMMARIZE_THRESHOLD", "30")
    summarizer = RecordingSummarizer()
    mgr = MemoryManager.from_config(summarizer=summarizer)
    cid = mgr.new_conversation()
    for i in range(3):
        mgr.add_turn(cid, words(5), words(5), [{"turn": i}])
    assert mgr.conversation.get_summary(cid) == "summary of turns [0]"


@pytest.mark.postgres
def test_from_config_postgres(env: pytest.MonkeyPatch, postgres_url: str) -> None:
    from firefly_orm.sql import PostgreSQLStore

    schema = "t_" + uuid.uuid4().hex[:10]
    env.setenv(f"{ENV_PREFIX}BACKEND", "postgres")
    env.setenv(f"{ENV_PREFIX}POSTGRES_URL", postgres_url)
    env.setenv(f"{ENV_PREFIX}POSTGRES_SCHEMA", schema)
    env.setenv(f"{ENV_PREFIX}POSTGRES_POOL_SIZE", "3")
    env.setenv(f"{ENV_PREFIX}POSTGRES_POOL_MIN_SIZE", "1")
    try:
        mgr = MemoryManager.from_config()
        try:
            assert isinstance(mgr.store, PostgreSQLStore)
            assert mgr.store.schema_name == schema
            assert mgr.store.pool_size == 3
            # repeated sync calls keep working (upstream's pool broke after the first)
            for i in range(3):
                mgr.set_fact(f"k{i}", i)
            cid = mgr.new_conversation()
            mgr.add_turn(cid, "q", "a", [{"pg": 1}])
            assert mgr.get_working_context() == "Working Memory:\n- k0: 0\n- k1: 1\n- k2: 2"
            assert mgr.get_message_history(cid) == [{"pg": 1}]
        finally:
            mgr.store.close()  # type: ignore[attr-defined]
    finally:
        drop_schema(postgres_url, schema)


@pytest.mark.postgres
async def test_async_from_config_postgres(env: pytest.MonkeyPatch, postgres_url: str) -> None:
    from firefly_orm.sql import PostgreSQLStore

    schema = "t_" + uuid.uuid4().hex[:10]
    env.setenv(f"{ENV_PREFIX}BACKEND", "postgres")
    env.setenv(f"{ENV_PREFIX}POSTGRES_URL", postgres_url)
    env.setenv(f"{ENV_PREFIX}POSTGRES_SCHEMA", schema)
    try:
        mgr = await MemoryManager.async_from_config()
        try:
            assert isinstance(mgr.store, PostgreSQLStore)
            await mgr.async_set_fact("k", "v")
            cid = await mgr.async_new_conversation()
            await mgr.async_add_turn(cid, "q", "a", [{"apg": 1}])
            assert await mgr.async_get_fact("k") == "v"
            assert await mgr.async_get_message_history(cid) == [{"apg": 1}]
        finally:
            await mgr.store.async_close()  # type: ignore[attr-defined]
    finally:
        drop_schema(postgres_url, schema)


def test_from_config_unreachable_postgres_hides_password(env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psycopg")
    from firefly_orm.errors import FireflyOrmError

    url = "postgresql+psycopg://app:S3cretPw@127.0.0.1:1/nowhere"
    env.setenv(f"{ENV_PREFIX}BACKEND", "postgres")
    env.setenv(f"{ENV_PREFIX}POSTGRES_URL", url)
    env.setenv(f"{ENV_PREFIX}POSTGRES_TIMEOUT", "2")
    with pytest.raises(FireflyOrmError) as info:
        MemoryManager.from_config()
    assert "S3cretPw" not in str(info.value)
    assert "S3cretPw" not in repr(info.value)
