"""A summarizer made with ``model=None`` asks the model of the agent whose run stores the turn.

The agents run on pydantic-ai's ``FunctionModel``: one function answers both the
run's requests and the summary request, and records which model got what, so
the tests see where the summary request went.  Outside an agent, ``model=None``
keeps reading ``FIREFLY_AGENTIC_MEMORY_SUMMARY_MODEL`` (unset: the fallback).
"""

from __future__ import annotations

import logging

import pytest
from store_backends import OpenedBackend

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.conversation import ConversationTurn
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import MemoryAgent
from firefly_orm.summarization import (
    FALLBACK_SUMMARY,
    SUMMARY_MODEL_ENV,
    create_llm_summarizer,
    current_agent_model,
    using_agent_model,
)

#: What identifies the summary request among a model's requests.
SUMMARY_PROMPT_START = "Summarize the following conversation turns"


class Recorder:
    """A model function answering run requests with ``answer`` and summaries with ``summary``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.summary_requests: list[str] = []
        self.run_requests = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = " ".join(
            str(part.content) for part in messages[-1].parts if isinstance(part, UserPromptPart)
        )
        if prompt.startswith(SUMMARY_PROMPT_START):
            self.summary_requests.append(prompt)
            return ModelResponse(parts=[TextPart(f"summary by {self.name}")])
        self.run_requests += 1
        return ModelResponse(parts=[TextPart(f"answer {self.run_requests} from {self.name}")])

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


@pytest.fixture(autouse=True)
def _no_summary_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SUMMARY_MODEL_ENV, raising=False)


def _manager(store: object, **summarizer_options: object) -> MemoryManager:
    """A manager whose second turn evicts the first (and so asks for a summary)."""
    return MemoryManager(
        store=store,  # type: ignore[arg-type]
        max_conversation_tokens=None,
        summarize_threshold=12,
        summarizer=create_llm_summarizer(**summarizer_options),  # type: ignore[arg-type]
    )


PROMPTS = ("Please remember that my order number is 1042 today", "Has my order shipped yet")


def test_sync_run_summary_goes_to_the_agents_model(layer_backend: OpenedBackend) -> None:
    own = Recorder("own")
    agent = MemoryAgent(Agent(own.model), memory=_manager(layer_backend.store))
    first = agent.run_sync(PROMPTS[0])
    agent.run_sync(PROMPTS[1], conversation_id=first.conversation_id)
    assert len(own.summary_requests) == 1
    assert PROMPTS[0] in own.summary_requests[0]
    assert agent.memory.conversation.get_summary(first.conversation_id) == "summary by own"
    assert current_agent_model() is None  # nothing leaks out of the run


async def test_async_run_summary_goes_to_the_agents_model(layer_backend: OpenedBackend) -> None:
    own = Recorder("own")
    agent = MemoryAgent(Agent(own.model), memory=_manager(layer_backend.store))
    first = await agent.run(PROMPTS[0])
    await agent.run(PROMPTS[1], conversation_id=first.conversation_id)
    assert len(own.summary_requests) == 1
    summary = await agent.memory.conversation.async_get_summary(first.conversation_id)
    assert summary == "summary by own"


async def test_a_runs_model_argument_is_the_model_asked() -> None:
    own, per_run = Recorder("own"), Recorder("per-run")
    agent = MemoryAgent(Agent(own.model), memory=_manager(None))
    first = await agent.run(PROMPTS[0])
    await agent.run(PROMPTS[1], conversation_id=first.conversation_id, model=per_run.model)
    assert own.summary_requests == [] and len(per_run.summary_requests) == 1
    assert agent.memory.conversation.get_summary(first.conversation_id) == "summary by per-run"


def test_a_summarizer_with_a_model_keeps_it_inside_an_agent() -> None:
    own, chosen = Recorder("own"), Recorder("chosen")
    agent = MemoryAgent(Agent(own.model), memory=_manager(None, model=chosen.model))
    first = agent.run_sync(PROMPTS[0])
    agent.run_sync(PROMPTS[1], conversation_id=first.conversation_id)
    assert own.summary_requests == [] and len(chosen.summary_requests) == 1


def test_delegated_sub_agents_summarise_with_their_own_model() -> None:
    from firefly_orm.pydantic_ai import delegate

    parent, sub = Recorder("parent"), Recorder("sub")
    memory = _manager(None)
    MemoryAgent(Agent(parent.model), memory=memory)
    worker = delegate(memory, Agent(sub.model), name="worker")
    first = worker.run_sync(PROMPTS[0])
    worker.run_sync(PROMPTS[1], conversation_id=first.conversation_id)
    assert parent.summary_requests == [] and len(sub.summary_requests) == 1


TURNS = [ConversationTurn(turn_id=0, user_prompt="hi", assistant_response="Order 7 shipped. Yes.")]


def test_outside_an_agent_model_none_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    summarize = create_llm_summarizer()
    with caplog.at_level(logging.WARNING, logger="firefly_orm"):
        assert summarize(TURNS) == "Order 7 shipped."  # no model anywhere: the fallback
    assert SUMMARY_MODEL_ENV in caplog.text
    monkeypatch.setenv(SUMMARY_MODEL_ENV, "test")  # pydantic-ai's TestModel
    assert summarize(TURNS) not in {"Order 7 shipped.", FALLBACK_SUMMARY}


async def test_using_agent_model_nests_and_reaches_both_forms() -> None:
    outer, inner = Recorder("outer"), Recorder("inner")
    summarize = create_llm_summarizer()
    with using_agent_model(outer.model):
        with using_agent_model(inner.model):
            assert await summarize.async_summarize(TURNS) == "summary by inner"
        assert await summarize.async_summarize(TURNS) == "summary by outer"
    assert current_agent_model() is None
    with using_agent_model(outer.model):  # the sync form runs on the loop thread
        assert summarize(TURNS) == "summary by outer"
