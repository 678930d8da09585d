"""A pydantic-ai agent whose conversation memory is a MemoryManager on a real database.

The agent runs on a :class:`~pydantic_ai.models.function.FunctionModel` (no
network): its function records every message list it is sent and answers with
the user prompts it saw, so the tests can check what the model actually received
through ``message_history=manager.get_message_history(cid)``.

Each test runs on a SQLite file and on PostgreSQL (own schema, dropped
afterwards; skipped without a server).  "Restart" means: close the store, open a
NEW store and a NEW MemoryManager on the same database, and carry on.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from store_backends import OpenedBackend, backend_params, open_backend

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.conversation._messages import estimate_turn
from firefly_orm.manager import MemoryManager
from firefly_orm.tokens import TokenEstimator

PROMPTS = [
    "My name is Ada and I like graphs.",
    "What is my name?",
    "Which topic do I like?",
    "Summarise what you know about me.",
    "Thanks, that is all for today.",
]
LARGE_BUDGET = 1_000_000
TOOL_NAME = "lookup_fact"
INSTRUCTIONS = "You are a terse test assistant."


# --------------------------------------------------------------------------- the model


def user_prompts(messages: Sequence[ModelMessage]) -> list[str]:
    """The text user prompts in ``messages``, in order."""
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def tool_call_ids(messages: Sequence[ModelMessage]) -> list[str]:
    return [
        part.tool_call_id
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]


def tool_return_ids(messages: Sequence[ModelMessage]) -> list[str]:
    return [
        part.tool_call_id
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def answer_for(earlier_prompts: Sequence[str]) -> str:
    """What the recording model answers when it saw ``earlier_prompts`` before the new one."""
    return f"I saw {len(earlier_prompts)} earlier prompt(s): " + " | ".join(earlier_prompts)


class RecordingModel:
    """A FunctionModel function that records what it is sent.

    It answers with the earlier user prompts it received (see :func:`answer_for`).
    With ``call_tool_once``, its very first request is answered with a call of
    :data:`TOOL_NAME`, and the request carrying the tool's return gets a text
    answer quoting it.
    """

    def __init__(self, *, call_tool_once: bool = False) -> None:
        self.calls: list[list[ModelMessage]] = []
        self.instructions: list[str | None] = []
        self._tool_pending = call_tool_once
        self._ids = itertools.count()

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls.append(list(messages))
        self.instructions.append(info.instructions)
        last = messages[-1]
        returns = [p for p in getattr(last, "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(content=f"the tool said {returns[0].content}")])
        if self._tool_pending:
            self._tool_pending = False
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        tool_name=TOOL_NAME,
                        args={"topic": "graphs"},
                        tool_call_id=f"call-{next(self._ids)}",
                    )
                ]
            )
        prompts = user_prompts(messages)
        return ModelResponse(parts=[TextPart(content=answer_for(prompts[:-1]))])


def make_agent(model: RecordingModel, **kwargs: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(model), **kwargs)

    @agent.tool_plain(name=TOOL_NAME)
    def lookup_fact(topic: str) -> str:
        return f"fact about {topic}"

    return agent


def dump(messages: Sequence[ModelMessage]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


def check_real_messages(history: Sequence[Any]) -> None:
    """``history`` holds real pydantic-ai messages, starting with a request."""
    assert history, "expected a non-empty history"
    for message in history:
        assert isinstance(message, ModelRequest | ModelResponse), type(message)
    assert isinstance(history[0], ModelRequest)


# --------------------------------------------------------------------------- databases


@pytest.fixture(params=backend_params(["sqlite", "postgres"]))
def database(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    """A SQLite file or a PostgreSQL schema from the registry; ``reopen()`` is a restart."""
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()  # idempotent for stores a test closed already


# --------------------------------------------------------------------------- tests


def test_agent_sees_earlier_turns_and_after_a_restart(database: OpenedBackend) -> None:
    model = RecordingModel()
    agent = make_agent(model)
    store = database.store
    manager = MemoryManager(store=store, max_conversation_tokens=LARGE_BUDGET)
    cid = manager.new_conversation()
    stored: list[ModelMessage] = []

    for k, prompt in enumerate(PROMPTS[:3]):
        history = manager.get_message_history(cid)
        assert dump(history) == dump(stored)
        result = agent.run_sync(prompt, message_history=history)
        # the model was sent every earlier prompt, then the new one
        assert user_prompts(model.calls[-1]) == PROMPTS[: k + 1]
        assert result.output == answer_for(PROMPTS[:k])
        turn = manager.add_turn(cid, prompt, str(result.output), result.new_messages())
        assert turn.turn_id == k
        stored.extend(result.new_messages())

    # restart: a new store and a new manager on the same database
    store.close()
    store = database.reopen()
    manager = MemoryManager(store=store, max_conversation_tokens=LARGE_BUDGET)
    history = manager.get_message_history(cid)
    check_real_messages(history)
    assert [type(m) for m in history] == [ModelRequest, ModelResponse] * 3
    assert history == stored
    assert dump(history) == dump(stored)
    assert [t.user_prompt for t in manager.conversation.get_turns(cid)] == PROMPTS[:3]

    result = agent.run_sync(PROMPTS[3], message_history=history)
    assert user_prompts(model.calls[-1]) == PROMPTS[:4]
    assert result.output == answer_for(PROMPTS[:3])
    manager.add_turn(cid, PROMPTS[3], str(result.output), result.new_messages())
    assert user_prompts(manager.get_message_history(cid)) == PROMPTS[:4]


async def test_async_agent_sees_earlier_turns_and_after_a_restart(database: OpenedBackend) -> None:
    model = RecordingModel()
    agent = make_agent(model)
    store = database.store
    manager = MemoryManager(store=store, max_conversation_tokens=LARGE_BUDGET)
    cid = await manager.async_new_conversation()
    stored: list[ModelMessage] = []

    for k, prompt in enumerate(PROMPTS[:3]):
        history = await manager.async_get_message_history(cid)
        assert dump(history) == dump(stored)
        result = await agent.run(prompt, message_history=history)
        assert user_prompts(model.calls[-1]) == PROMPTS[: k + 1]
        assert result.output == answer_for(PROMPTS[:k])
        turn = await manager.async_add_turn(cid, prompt, str(result.output), result.new_messages())
        assert turn.turn_id == k
        stored.extend(result.new_messages())

    await store.async_close()
    store = database.reopen()
    manager = MemoryManager(store=store, max_conversation_tokens=LARGE_BUDGET)
    history = await manager.async_get_message_history(cid)
    check_real_messages(history)
    assert history == stored
    assert dump(history) == dump(stored)

    result = await agent.run(PROMPTS[3], message_history=history)
    assert user_prompts(model.calls[-1]) == PROMPTS[:4]
    assert result.output == answer_for(PROMPTS[:3])
    await manager.async_add_turn(cid, PROMPTS[3], str(result.output), result.new_messages())
    # the sync and async paths read the same rows
    assert user_prompts(await manager.async_get_message_history(cid)) == PROMPTS[:4]
    assert user_prompts(manager.get_message_history(cid)) == PROMPTS[:4]
    await store.async_close()


def newest_fitting(turns: Sequence[tuple[str, str, int]], budget: int) -> list[str]:
    """Prompts of the newest turns whose estimates fit ``budget`` (summed here, not
    by the library): what the model should be sent as history."""
    kept: list[str] = []
    total = 0
    for prompt, _, estimate in reversed(turns):
        total += estimate
        if total > budget:
            break
        kept.append(prompt)
    return kept[::-1]


def test_small_budget_drops_oldest_turns_and_keeps_tool_pairs(database: OpenedBackend) -> None:
    estimator = TokenEstimator()
    budget = 45  # about two turns of this test
    model = RecordingModel(call_tool_once=True)
    agent = make_agent(model, instructions=INSTRUCTIONS)
    store = database.store
    manager = MemoryManager(store=store, max_conversation_tokens=budget, summarize_threshold=0)
    cid = manager.new_conversation()
    done: list[tuple[str, str, int]] = []  # (prompt, output, estimate) of every run so far
    seen_tool_turn = False

    for run, prompt in enumerate(PROMPTS):
        expected_history = newest_fitting(done, budget)
        history = manager.get_message_history(cid)
        if expected_history:
            check_real_messages(history)
        result = agent.run_sync(prompt, message_history=history)

        sent = model.calls[-1] if run else model.calls[0]
        # the model saw exactly the newest turns that fit, then the new prompt
        assert user_prompts(sent) == [*expected_history, prompt]
        assert model.instructions[-1] == INSTRUCTIONS  # re-sent on every run
        if run == 0:
            # the first run called the tool: four messages, one turn
            assert len(model.calls) == 2
            assert str(result.output) == "the tool said fact about graphs"
            assert [type(m) for m in result.new_messages()] == [
                ModelRequest,
                ModelResponse,
                ModelRequest,
                ModelResponse,
            ]
        else:
            assert result.output == answer_for(expected_history)
        # tool calls and their returns travel together: both or neither
        assert tool_call_ids(sent) == tool_return_ids(sent)
        if PROMPTS[0] in expected_history:
            assert tool_call_ids(sent) == ["call-0"]
            seen_tool_turn = seen_tool_turn or run > 0
        else:
            assert tool_call_ids(sent) == []

        manager.add_turn(cid, prompt, str(result.output), result.new_messages())
        # A turn with raw messages is estimated over what the model reads of them.
        estimate, _ = estimate_turn(
            estimator, prompt, str(result.output), encode_raw_messages(result.new_messages())
        )
        done.append((prompt, str(result.output), estimate))

        # the retained turns are the newest that fit; the history holds whole turns
        retained = manager.conversation.get_turns(cid)
        assert [t.user_prompt for t in retained] == newest_fitting(done, budget) or (
            len(retained) == 1 and retained[0].user_prompt == prompt
        )
        assert sum(t.token_estimate for t in retained) == manager.conversation.get_total_tokens(cid)
        estimates = {p: e for p, _, e in done}
        for turn in retained:
            assert turn.token_estimate == estimates[turn.user_prompt]
            assert turn.token_estimate >= estimator.estimate(
                f"{turn.user_prompt}\n{turn.assistant_response}"
            )

    # the setup really exercised both cases
    assert seen_tool_turn, "the tool turn was never sent back to the model"
    assert PROMPTS[0] not in user_prompts(model.calls[-1]), "nothing was evicted"

    # after a restart the model is sent the same (newest) turns
    store.close()
    store = database.reopen()
    manager = MemoryManager(store=store, max_conversation_tokens=budget, summarize_threshold=0)
    history = manager.get_message_history(cid)
    check_real_messages(history)
    assert user_prompts(history) == newest_fitting(done, budget)
    assert tool_call_ids(history) == tool_return_ids(history) == []
