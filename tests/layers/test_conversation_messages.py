"""ConversationMemory.add / add_many / add_turns on every store, sync and async.

Messages added one at a time are grouped into turns (a user message after a
complete exchange starts one; everything else joins the newest turn), so a tool
call and its result are never in two turns; a batch is one unit of work.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from modes import call
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from store_backends import OpenedBackend, backend_params, layer_mode_params

from firefly_orm.conversation import ConversationMemory, ConversationTurn, TrimEvent
from firefly_orm.errors import EntryValidationError


def ask(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def say(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def tool_call(call_id: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"}, tool_call_id=call_id)])


def tool_result(call_id: str) -> ModelRequest:
    return ModelRequest(parts=[ToolReturnPart("weather", "sunny", tool_call_id=call_id)])


def shape(turns: list[ConversationTurn]) -> list[tuple[int, int]]:
    return [(t.turn_id, t.message_count) for t in turns]


def exchange(n: int) -> list[ModelMessage]:
    return [ask(f"q{n}"), say(f"a{n}")]


#: Every backend in sync mode; the async forms (one shared code path) on three.
BACKEND_MODES = pytest.mark.parametrize(
    ("layer_backend", "mode"),
    layer_mode_params(async_on=("memory", "sqlite", "postgres")),
    indirect=True,
)


class Boom(RuntimeError):
    pass


def failing_summarizer(turns: list[ConversationTurn]) -> str:
    raise Boom("summarizer down")


@BACKEND_MODES
async def test_messages_one_at_a_time_keep_a_tool_call_with_its_result(
    layer_backend: OpenedBackend, mode: str
) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    first = await call(mode, mem, "add", "c", ask("weather?"))
    assert (first.turn_id, first.user_prompt, first.assistant_response) == (0, "weather?", "")
    await call(mode, mem, "add", "c", tool_call("t1"))
    # A user message while the call waits for its result joins the turn.
    await call(mode, mem, "add", "c", ask("hurry"))
    # A new process completes the dangling call: its result joins the same turn.
    again = ConversationMemory(store=layer_backend.reopen(), max_tokens=None)
    await call(mode, again, "add", "c", tool_result("t1"))
    last = await call(mode, again, "add", "c", say("It is sunny"))
    assert (last.turn_id, last.message_count) == (0, 5)
    assert last.user_prompt == "weather?\nhurry"
    assert last.assistant_response == "It is sunny"
    assert last.updated_at is not None and last.updated_at >= last.timestamp
    nxt = await call(mode, again, "add", "c", ask("thanks"))
    assert nxt.turn_id == 1
    turns = await call(mode, again, "get_turns", "c")
    assert shape(turns) == [(0, 5), (1, 1)]
    expected = [ask("weather?"), tool_call("t1"), ask("hurry"), tool_result("t1")]
    assert [type(m) for m in turns[0].raw_messages] == [type(m) for m in [*expected, say("x")]]
    assert turns[0].raw_messages[3].parts[0].tool_call_id == "t1"
    history = await call(mode, again, "get_message_history", "c")
    assert len(history) == 6
    assert await call(mode, again, "verify", "c") == []
    total = await call(mode, again, "get_total_tokens", "c")
    assert total == sum(t.token_estimate for t in turns)


@BACKEND_MODES
async def test_add_many_groups_evicts_and_keeps_the_head_exact(
    layer_backend: OpenedBackend, mode: str
) -> None:
    trims: list[TrimEvent] = []
    mem = ConversationMemory(
        store=layer_backend.store, max_tokens=None, max_messages=4, on_trim=trims.append
    )
    written = await call(
        mode, mem, "add_many", "c", [*exchange(0), *exchange(1), ask("q2"), tool_call("t")]
    )
    assert shape(written) == [(0, 2), (1, 2), (2, 2)]
    # The batch evicted its own first turn (6 messages > 4), in the same unit of work.
    assert shape(await call(mode, mem, "get_turns", "c")) == [(1, 2), (2, 2)]
    assert [e.evicted_turn_ids for e in trims] == [(0,)]
    grown = await call(mode, mem, "add_many", "c", [tool_result("t"), say("done")])
    assert shape(grown) == [(2, 4)]
    assert shape(await call(mode, mem, "get_turns", "c")) == [(2, 4)]
    assert await call(mode, mem, "verify", "c") == []
    assert await call(mode, mem, "add_many", "c", []) == []


@BACKEND_MODES
async def test_a_batch_is_all_or_nothing(layer_backend: OpenedBackend, mode: str) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    await call(mode, mem, "add_many", "c", exchange(0))
    failing = ConversationMemory(
        store=layer_backend.store,
        max_tokens=None,
        max_messages=4,
        summarizer=failing_summarizer,
    )
    # The third exchange evicts, and the summarizer fails: none of the batch is stored.
    with pytest.raises(Boom):
        await call(mode, failing, "add_many", "c", [*exchange(1), *exchange(2)])
    with pytest.raises(Boom):
        await call(
            mode,
            failing,
            "add_turns",
            "c",
            [ConversationTurn(user_prompt="p1", assistant_response="r1")] * 2,
        )
    with pytest.raises(TypeError):  # a mix of pydantic-ai and JSON messages
        await call(mode, mem, "add_many", "c", [ask("q"), {"role": "user", "content": "x"}])
    turns = await call(mode, mem, "get_turns", "c")
    assert shape(turns) == [(0, 2)]
    assert await call(mode, mem, "verify", "c") == []


@BACKEND_MODES
async def test_add_turns_and_json_messages(layer_backend: OpenedBackend, mode: str) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    stored = await call(
        mode,
        mem,
        "add_turns",
        "c",
        [
            ConversationTurn(user_prompt="p0", assistant_response="r0", metadata={"k": 1}),
            ConversationTurn(user_prompt="p1", assistant_response="r1"),
        ],
        user_id="ada",
    )
    assert shape(stored) == [(0, 2), (1, 2)]
    assert await call(mode, mem, "owner_of", "c") == "ada"
    assert (await call(mode, mem, "get_turns", "c"))[0].metadata == {"k": 1}
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "w"}}]},
        {"role": "tool", "tool_call_id": "x", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny"},
        {"role": "user", "content": "thanks"},
    ]
    written = await call(mode, mem, "add_many", "j", msgs)
    assert shape(written) == [(0, 4), (1, 1)]
    assert written[0].assistant_response == "It is sunny"
    assert await call(mode, mem, "get_message_history", "j") == msgs
    # A grown turn's updated_at survives an export and an import.
    grown = await call(mode, mem, "add", "j", {"role": "assistant", "content": "welcome"})
    assert (grown.turn_id, grown.message_count) == (1, 2) and grown.updated_at is not None
    exported = await call(mode, mem, "export_conversation", "j")
    assert "updated_at" not in exported["turns"][0]
    assert exported["turns"][1]["updated_at"] == grown.updated_at.isoformat()
    await call(mode, mem, "import_conversation", exported, conversation_id="k")
    imported = await call(mode, mem, "get_turns", "k")
    assert [t.updated_at for t in imported] == [None, grown.updated_at]


@pytest.mark.parametrize(
    "layer_backend", backend_params(["sqlite", "postgres", "mongo", "redis"]), indirect=True
)
def test_concurrent_writers_lose_no_message(layer_backend: OpenedBackend) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    mem.add("c", ask("start"))

    def writer(tag: str) -> None:
        for n in range(4):
            mem.add_many("c", [ask(f"{tag}{n}"), say(f"{tag}{n}!")])

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    turns = mem.get_turns("c")
    assert sum(t.message_count for t in turns) == 17
    prompts = "\n".join(t.user_prompt for t in turns).split("\n")
    assert sorted(prompts) == sorted(["start", *(f"{t}{n}" for t in "ab" for n in range(4))])
    assert mem.verify("c") == []


@BACKEND_MODES
async def test_a_tool_result_of_no_call_is_refused_and_nothing_written(
    layer_backend: OpenedBackend, mode: str
) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    await call(mode, mem, "add_many", "c", [ask("q"), say("a")])
    # Joined to the complete turn, it would hide that turn from every history read.
    with pytest.raises(EntryValidationError, match="nope"):
        await call(mode, mem, "add", "c", tool_result("nope"))
    with pytest.raises(EntryValidationError, match="nope"):
        await call(mode, mem, "add_many", "c", [ask("next"), tool_call("t2"), tool_result("nope")])
    assert shape(await call(mode, mem, "get_turns", "c")) == [(0, 2)]
    assert len(await call(mode, mem, "get_message_history", "c")) == 2
