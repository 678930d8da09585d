"""The last N messages of a conversation on every store, sync and async (issue 18).

``get_recent_messages(cid, n)`` is what a user of OpenAI Agents'
``session.get_items(limit=n)`` asks for, with the rule of every window: it
starts at a message a history may open with and never splits a tool call from
its result.
"""

from __future__ import annotations

from typing import Any

import pytest
from modes import call
from pydantic_ai import messages as pai
from store_backends import OpenedBackend

from firefly_orm.conversation import ConversationMemory
from firefly_orm.errors import EntryValidationError
from firefly_orm.manager import MemoryManager


def pair(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]


def tool_round(n: int) -> list[dict[str, Any]]:
    call_id = f"call{n}"
    return [
        {"role": "user", "content": f"weather {n}?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "sunny"},
        {"role": "assistant", "content": "it is sunny"},
    ]


async def test_last_n_messages_start_inside_a_turn_at_an_opening_message(
    layer_backend: OpenedBackend, mode: str
) -> None:
    # The memory's own limits do not bound it: last-N is what the caller asks for.
    mem = ConversationMemory(store=layer_backend.store, max_messages=100, max_tokens=10_000)
    for n in range(3):
        await call(mode, mem, "add_turn", "c", f"q{n}", f"a{n}", pair(n))
    # Two requests in one turn: the window may start at the second.
    double = pair(3) + pair(4)
    await call(mode, mem, "add_turn", "c", "q3", "a4", double)

    assert await call(mode, mem, "get_recent_messages", "c", 2) == pair(4)
    assert await call(mode, mem, "get_recent_messages", "c", 4) == double
    assert await call(mode, mem, "get_recent_messages", "c", 6) == pair(2) + double
    # An odd count cannot start on an assistant message: one fewer.
    assert await call(mode, mem, "get_recent_messages", "c", 5) == double
    everything = pair(0) + pair(1) + pair(2) + double
    assert await call(mode, mem, "get_recent_messages", "c", 100) == everything
    assert await call(mode, mem, "get_recent_messages", "c", 0) == []
    assert await call(mode, mem, "get_recent_messages", "unknown", 3) == []


async def test_last_n_messages_never_split_a_tool_call_from_its_result(
    layer_backend: OpenedBackend, mode: str
) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=10_000)
    await call(mode, mem, "add_turn", "c", "q0", "a0", pair(0))
    await call(mode, mem, "add_turn", "c", "weather 1?", "it is sunny", tool_round(1))

    # The newest 3 open with the tool call's message, 2 with its result: neither may start.
    assert await call(mode, mem, "get_recent_messages", "c", 3) == []
    assert await call(mode, mem, "get_recent_messages", "c", 2) == []
    assert await call(mode, mem, "get_recent_messages", "c", 4) == tool_round(1)
    assert await call(mode, mem, "get_recent_messages", "c", 5) == tool_round(1)
    assert await call(mode, mem, "get_recent_messages", "c", 6) == pair(0) + tool_round(1)


async def test_turns_of_one_message_read_back_as_far_as_the_window_needs(
    layer_backend: OpenedBackend, mode: str
) -> None:
    """A read that needs more turns than one per two messages reads older ones too.

    The last 8 of four one-prompt turns and six turns that go on with an
    answer (which cannot open a history) start at the third prompt: the
    newest five turns hold no message a window may start at.
    """
    mem = ConversationMemory(store=layer_backend.store, max_tokens=10_000)
    prompts = [[{"role": "user", "content": f"q{n}"}] for n in range(4)]
    answers = [[{"role": "assistant", "content": f"a{n}"}] for n in range(6)]
    for n, raw in enumerate(prompts + answers):
        await call(mode, mem, "add_turn", "c", f"p{n}", f"r{n}", raw)
    newest = [m for raw in prompts[2:] + answers for m in raw]
    assert await call(mode, mem, "get_recent_messages", "c", 8) == newest
    assert await call(mode, mem, "get_recent_messages", "c", 7) == newest[1:]
    assert await call(mode, mem, "get_recent_messages", "c", 6) == []


async def test_a_history_whose_newest_turns_cannot_open_reads_the_older_ones(
    layer_backend: OpenedBackend, mode: str
) -> None:
    """Whole-turn history reads batch too: more turns than the first batch that go
    on with an answer after one that opens.  Before the fix the read stopped at
    the first batch, found no turn to start at, and returned nothing."""
    mem = ConversationMemory(store=layer_backend.store, max_tokens=1_000_000)
    answers = [[{"role": "assistant", "content": f"more {n}"}] for n in range(40)]
    for n, raw in enumerate([pair(0), *answers]):
        await call(mode, mem, "add_turn", "c", f"p{n}", f"r{n}", raw)
    everything = pair(0) + [m for raw in answers for m in raw]
    assert await call(mode, mem, "get_message_history", "c") == everything


async def test_turns_without_raw_messages_and_pydantic_ai_messages(
    layer_backend: OpenedBackend, mode: str
) -> None:
    mem = ConversationMemory(store=layer_backend.store)
    await call(mode, mem, "add_turn", "plain", "hello", "hi there")
    await call(mode, mem, "add_turn", "plain", "q1", "a1", pair(1))
    # A turn without raw messages stands for its prompt and answer, in the others' style.
    assert await call(mode, mem, "get_recent_messages", "plain", 4) == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi there"},
        *pair(1),
    ]

    request = pai.ModelRequest(parts=[pai.UserPromptPart(content="capital of France?")])
    response = pai.ModelResponse(parts=[pai.TextPart(content="Paris")])
    await call(mode, mem, "add_turn", "pai", "capital of France?", "Paris", [request, response])
    recent = await call(mode, mem, "get_recent_messages", "pai", 2)
    assert [type(m) for m in recent] == [pai.ModelRequest, pai.ModelResponse]
    assert recent[0].parts[0].content == "capital of France?"
    assert recent[1].parts[0].content == "Paris"


async def test_bad_arguments_are_refused(layer_backend: OpenedBackend, mode: str) -> None:
    mem = ConversationMemory(store=layer_backend.store)
    for bad in (-1, True, 2.0, "3"):
        with pytest.raises(EntryValidationError, match="count"):
            await call(mode, mem, "get_recent_messages", "c", bad)
    with pytest.raises(EntryValidationError, match="conversation_id"):
        await call(mode, mem, "get_recent_messages", "", 2)


async def test_the_manager_forwards_it(layer_backend: OpenedBackend, mode: str) -> None:
    manager = MemoryManager(store=layer_backend.store)
    cid = await call(mode, manager, "new_conversation")
    await call(mode, manager, "add_turn", cid, "q0", "a0", pair(0))
    await call(mode, manager, "add_turn", cid, "q1", "a1", pair(1))
    assert await call(mode, manager, "get_recent_messages", cid, 2) == pair(1)
