"""``MemoryAgent.run`` / ``run_sync`` return the turn they stored (:class:`MemoryRunResult`).

On every memory-layer backend (conftest's ``layer_backend``: SQLite and
PostgreSQL among them): the result is still pydantic-ai's ``AgentRunResult``
(output, usage, messages, conversation id unchanged, pydantic serialisation in
pydantic-ai's shape), and ``result.turn`` / ``result.turn_id`` are the turn
that was stored, equal to what a read gives back, with no extra read.
"""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import pytest
from store_backends import OpenedBackend

pytest.importorskip("pydantic_ai")

from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.run import AgentRunResult

from firefly_orm.conversation import ConversationTurn
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import MemoryAgent, MemoryRunResult, delegate, usage_metadata


def count_messages(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answer with how many messages the model was sent."""
    return ModelResponse(parts=[TextPart(f"seen {len(messages)}")])


def make_agent() -> Agent[None, str]:
    return Agent(FunctionModel(count_messages), output_type=str, instructions="Be brief.")


def dump(messages: list[Any]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def assert_is_stored(result: MemoryRunResult[str], stored: ConversationTurn) -> None:
    """``result.turn`` is the turn read back from the store (times to the store's precision)."""
    turn = result.turn
    assert (turn.turn_id, turn.user_prompt, turn.assistant_response) == (
        stored.turn_id,
        stored.user_prompt,
        stored.assistant_response,
    )
    assert turn.metadata == stored.metadata
    assert (turn.token_estimate, turn.message_count) == (
        stored.token_estimate,
        stored.message_count,
    )
    assert dump(turn.raw_messages) == dump(stored.raw_messages) == dump(result.new_messages())
    assert abs(turn.timestamp - stored.timestamp) < timedelta(milliseconds=1)


def test_run_sync_returns_the_stored_turn(layer_backend: OpenedBackend) -> None:
    support = MemoryAgent(make_agent(), memory=MemoryManager(store=layer_backend.store))
    first = support.run_sync("Hello", user_id="ada")
    second = support.run_sync("Again", conversation_id=first.conversation_id, user_id="ada")

    for result in (first, second):
        assert isinstance(result, MemoryRunResult) and isinstance(result, AgentRunResult)
    assert (first.turn_id, second.turn_id) == (0, 1)
    assert (first.turn.user_prompt, first.turn.assistant_response) == ("Hello", first.output)
    assert second.output == "seen 3"  # the first turn's two messages, then the prompt
    assert second.turn.metadata["usage"] == usage_metadata(second.usage)
    assert second.turn.metadata["run_id"] == second.run_id

    stored = support.memory.conversation.get_turns(first.conversation_id)
    assert [t.turn_id for t in stored] == [0, 1]
    assert_is_stored(first, stored[0])
    assert_is_stored(second, stored[1])


async def test_run_returns_the_stored_turn(layer_backend: OpenedBackend) -> None:
    mgr = MemoryManager(store=layer_backend.store)
    writer = delegate(mgr, make_agent(), name="writer")  # a named agent: "agent" in metadata
    first = await writer.run("Draft it")
    cid = first.conversation_id
    second = await writer.run("Shorter", conversation_id=cid)

    turn: ConversationTurn = second.turn  # typed: no cast, no second read
    assert (first.turn_id, second.turn_id, turn.turn_id) == (0, 1, 1)
    assert turn.metadata["agent"] == "writer"
    stored = await mgr.conversation.async_get_turns(cid)
    assert_is_stored(first, stored[0])
    assert_is_stored(second, stored[1])

    # a new store object over the same data (a restarted worker) numbers on
    again = MemoryAgent(make_agent(), memory=MemoryManager(store=layer_backend.reopen()))
    third = await again.run("Done?", conversation_id=cid)
    assert third.turn_id == 2


def test_the_result_keeps_pydantic_ais_shape() -> None:
    support = MemoryAgent(make_agent(), memory=MemoryManager())
    result = support.run_sync("Hello")
    plain = make_agent().run_sync("Hello")

    # pydantic serialisation: pydantic-ai's keys, the turn not among them; it validates back
    adapter = TypeAdapter(AgentRunResult[str])
    data = adapter.dump_python(result, mode="json")
    assert set(data) == set(adapter.dump_python(plain, mode="json"))
    back = adapter.validate_python(data)
    assert (back.output, back.conversation_id) == (result.output, result.conversation_id)
    assert dump(back.new_messages()) == dump(result.new_messages())

    # pickled (a task queue's result): the turn travels with it
    copied = pickle.loads(pickle.dumps(result))
    assert isinstance(copied, MemoryRunResult)
    assert copied.turn == result.turn and copied.output == result.output

    # a result made elsewhere has no turn, and says so
    bare = MemoryRunResult(output="x")
    with pytest.raises(AttributeError, match="not returned by a MemoryAgent run"):
        _ = bare.turn
    # building one from pydantic-ai's result leaves that result as it was
    made = MemoryRunResult.of(plain, result.turn)
    assert made.turn_id == 0 and made.output == plain.output
    assert not isinstance(plain, MemoryRunResult)


def test_a_failed_run_returns_nothing_and_stores_nothing() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("the model is down")

    support = MemoryAgent(Agent(FunctionModel(broken)), memory=MemoryManager())
    with pytest.raises(RuntimeError, match="the model is down"):
        support.run_sync("Hello", conversation_id="c1")
    assert support.memory.conversation.get_turns("c1") == []
