"""definable's ``Memory`` (issue 33) on every store, sync and async.

Message-granular ``add`` / ``add_many`` and ``get_entries`` with the user
filter; entries carry ``role``, ``user_id``, ``updated_at``; ``enabled=False``
reads and writes nothing and keeps the configuration; ``max_messages`` counts
messages; ``description`` reaches the agent's instructions; bad messages are
refused before anything is written.
"""

from __future__ import annotations

from typing import Any

import pytest
from modes import call

from firefly_orm.compat.definable import Memory, MessageEntry
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.store import InMemoryStore

USER = {"role": "user", "content": "My order 1042 is late"}
ANSWER = {"role": "assistant", "content": "Let me check"}


async def test_messages_are_added_and_read_per_user(store: Any, mode: str) -> None:
    memory = Memory(store=store, max_messages=3, description="orders")
    first = await call(mode, memory, "add", USER, "s1", user_id="ada")
    assert isinstance(first, MessageEntry)
    assert (first.role, first.content, first.user_id, first.turn_id) == (
        "user",
        USER["content"],
        "ada",
        0,
    )
    assert first.updated_at == first.created_at and first.created_at.tzinfo is not None
    more = [
        ANSWER,
        {"role": "user", "content": "any news?"},
        {"role": "assistant", "content": "shipped"},
    ]
    added = await call(mode, memory, "add_many", more, "s1", user_id="ada")
    assert [e.role for e in added] == ["assistant", "user", "assistant"]

    entries = await call(mode, memory, "get_entries", "s1", user_id="ada")
    assert [(e.role, e.content) for e in entries] == [
        ("assistant", "Let me check"),
        ("user", "any news?"),
        ("assistant", "shipped"),
    ]  # max_messages=3: the oldest message evicted
    assert {e.user_id for e in entries} == {"ada"} and {e.session_id for e in entries} == {"s1"}
    assert await call(mode, memory, "get_entries", "s1", user_id="bob") == []
    assert len(await call(mode, memory, "get_entries", "s1")) == 3  # no filter
    assert await call(mode, memory, "get_entries", "missing") == []
    with pytest.raises(ConversationNotFoundError):  # bob cannot write into ada's session
        await call(mode, memory, "add", USER, "s1", user_id="bob")
    assert len(await call(mode, memory, "get_entries", "s1", user_id="ada")) == 3


async def test_disabled_memory_reads_and_writes_nothing(store: Any, mode: str) -> None:
    memory = Memory(store=store, enabled=False, max_messages=7, description="orders")
    assert await call(mode, memory, "add", USER, "s1", user_id="ada") is None
    assert await call(mode, memory, "add_many", [USER, ANSWER], "s1", user_id="ada") == []
    assert await call(mode, memory, "get_entries", "s1", user_id="ada") == []
    assert memory.instructions is None
    assert memory.manager.user_conversations("ada") == []  # nothing written

    memory.enabled = True  # the configuration was kept
    await call(mode, memory, "add", USER, "s1", user_id="ada")
    assert memory.manager.conversation.max_messages == 7
    assert memory.instructions == "Your memory: orders"
    memory.enabled = False
    assert await call(mode, memory, "get_entries", "s1", user_id="ada") == []
    memory.enabled = True
    assert len(await call(mode, memory, "get_entries", "s1", user_id="ada")) == 1


@pytest.mark.parametrize(
    "messages",
    [
        [USER, {"role": "robot", "content": "x"}],
        [USER, {"role": "user", "content": 3}],
        [USER, {"content": "no role"}],
    ],
)
def test_bad_messages_are_refused_before_anything_is_written(messages: list[Any]) -> None:
    store = InMemoryStore()
    memory = Memory(store=store)
    with pytest.raises(EntryValidationError):
        memory.add_many(messages, "s1", user_id="ada")
    assert memory.get_entries("s1") == [] and store.load("conversation:s1") == []
    with pytest.raises(TypeError):
        memory.add_many(USER, "s1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Memory(enabled="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        memory.enabled = 1  # type: ignore[assignment]
    with pytest.raises(TypeError):
        Memory(model=42)


def test_a_model_gives_a_summarizer_and_objects_with_role_and_content_are_messages() -> None:
    summaries: list[int] = []

    def summarize(turns: list[Any]) -> str:
        summaries.append(len(turns))
        return "earlier"

    class Message:
        role = "user"
        content = "as an object"

    memory = Memory(model=summarize, max_messages=2)
    for n in range(3):
        memory.add({"role": "user", "content": f"m{n}"}, "s1")
    memory.add(Message(), "s1")
    assert summaries and memory.manager.conversation.get_summary("s1") is not None
    assert [e.content for e in memory.get_entries("s1")] == ["m2", "as an object"]
