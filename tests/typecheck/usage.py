"""Correct calls of the public layer methods, for every type checker.

``tests/unit/test_typing.py`` runs mypy --strict, pyright and ty over this file
and expects no error.  The public methods are derived from operations
(``add_turn = sync_method(_add_turn)``, :mod:`firefly_orm.bridges._steps`); a
checker that does not bind them as methods reads ``manager.add_turn(cid, ...)``
as a call of an unbound function and reports the ``self`` it thinks is missing
("Expected MemoryManager, found str", "No argument provided for ...").  Each
result is assigned to an annotated variable, so a wrong return type fails too.
pytest never runs this file (its name is not ``test_*``); the values behind the
types are checked in ``test_typing.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from firefly_orm import (
    ConversationMemory,
    ConversationTurn,
    InMemoryStore,
    LongTermMemory,
    MemoryEntry,
    MemoryItem,
    MemoryManager,
    Recalled,
    WorkingMemory,
)
from firefly_orm.artifacts import ArtifactFile, ArtifactWorkspace, FileInfo


def manager_calls() -> None:
    manager = MemoryManager(store=InMemoryStore(), user_id="u")
    cid: str = manager.new_conversation()
    turn: ConversationTurn = manager.add_turn(cid, "q", "a")
    turn = manager.add_turn(cid, "q", "a", [{"role": "user"}], metadata={"k": 1})
    history: list[Any] = manager.get_message_history(cid)
    manager.set_fact("k", 1, importance=0.9)
    fact: Any = manager.get_fact("k")
    context: str = manager.get_working_context()
    item_id: str = manager.remember("likes tea", importance=0.7)
    recalled: list[Recalled] = manager.recall("tea", limit=3)
    forgotten: bool = manager.forget(item_id)
    manager.clear_conversation(cid)
    manager.clear_all()
    print(turn, history, fact, context, recalled, forgotten)


async def manager_async_calls() -> None:
    manager = MemoryManager(store=InMemoryStore(), user_id="u")
    cid: str = await manager.async_new_conversation()
    turn: ConversationTurn = await manager.async_add_turn(cid, "q", "a")
    history: list[Any] = await manager.async_get_message_history(cid)
    await manager.async_set_fact("k", "v")
    fact: Any = await manager.async_get_fact("k", "default")
    await manager.async_clear_all()
    print(turn, history, fact)


def conversation_calls() -> None:
    conversation = ConversationMemory(store=InMemoryStore(), max_tokens=100)
    cid: str = conversation.new_conversation(user_id="u")
    turn: ConversationTurn = conversation.add_turn(cid, "q", "a", metadata={"x": 1})
    turns: list[ConversationTurn] = conversation.get_turns(cid)
    context: list[Any] = conversation.get_context(cid)
    print(turn, turns, context)


async def conversation_async_calls() -> None:
    conversation = ConversationMemory()
    cid: str = await conversation.async_new_conversation()
    turn: ConversationTurn = await conversation.async_add_turn(cid, "q", "a")
    turns: list[ConversationTurn] = await conversation.async_get_turns(cid)
    print(turn, turns)


def working_calls() -> None:
    working = WorkingMemory(store=InMemoryStore(), scope_id="s")
    working.set("k", 1)
    value: Any = working.get("k")
    entry: MemoryEntry | None = working.get_entry("k")
    present: bool = working.has("k")
    keys: list[str] = working.keys()
    text: str = working.to_context_string()
    working.delete("k")
    working.clear()
    print(value, entry, present, keys, text)


async def working_async_calls() -> None:
    working = WorkingMemory()
    await working.async_set("k", 1)
    value: Any = await working.async_get("k")
    present: bool = await working.async_has("k")
    print(value, present)


def long_term_calls() -> None:
    memory = LongTermMemory(store=InMemoryStore(), user_id="u")
    item_id: str = memory.remember("likes tea", importance=0.8, tags=["drink"])
    recalled: list[Recalled] = memory.recall("tea", limit=2)
    item: MemoryItem | None = memory.get(item_id)
    items: list[MemoryItem] = memory.list(limit=10)
    forgotten: bool = memory.forget(item_id)
    print(recalled, item, items, forgotten)


async def long_term_async_calls() -> None:
    memory = LongTermMemory()
    item_id: str = await memory.async_remember("likes tea")
    recalled: list[Recalled] = await memory.async_recall("tea")
    print(item_id, recalled)


def workspace_calls() -> None:
    workspace = ArtifactWorkspace("task-1", store=InMemoryStore())
    info: FileInfo = workspace.write_text("notes.md", "hello", actor="agent")
    text: str = workspace.read_text("notes.md")
    found: ArtifactFile | None = workspace.read("notes.md")
    exists: bool = workspace.exists("notes.md")
    print(info, text, found, exists)


async def workspace_async_calls() -> None:
    workspace = ArtifactWorkspace("task-1")
    info: FileInfo = await workspace.async_write_text("notes.md", "hello")
    text: str = await workspace.async_read_text("notes.md")
    print(info, text)


def forms_as_values() -> None:
    # A bound form is a callable without ``self``; the class attribute takes it.
    add_turn: Callable[..., ConversationTurn] = MemoryManager().add_turn
    unbound: Callable[..., ConversationTurn] = MemoryManager.add_turn
    set_fact: Callable[..., Coroutine[Any, Any, None]] = MemoryManager().async_set_fact
    print(add_turn, unbound, set_fact)
