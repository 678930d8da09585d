"""UnifiedMemory (issue 30): one write path, federated recall with the tier of each hit,
a budgeted context and a reset that keeps long-term knowledge; SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from knowledge_stores import SQL_KINDS, open_sql_store
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import KnowledgeExtractor, KnowledgeGraph
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import MemoryStore
from firefly_orm.pydantic_ai import MemoryAgent
from firefly_orm.sql import SQLiteStore
from firefly_orm.unified import UnifiedMemory

#: What the fake extraction model answers per user message.
ANSWERS = {
    "I moved to Berlin": {
        "entities": [{"name": "Berlin", "type": "city"}],
        "triples": [{"subject": "user", "predicate": "lives_in", "object": "Berlin"}],
    },
    "actually I live in Munich now": {
        "entities": [{"name": "Munich", "type": "city", "aliases": ["München"]}],
        "triples": [{"subject": "user", "predicate": "lives_in", "object": "Munich"}],
    },
}


@pytest.fixture(params=SQL_KINDS)
def graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    """SQLite and PostgreSQL (MongoDB runs the same layers; left out to keep the suite fast)."""
    yield from open_sql_store(request, tmp_path)


def _model(calls: list[str]) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = next(p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart))
        assert isinstance(prompt, str)
        calls.append(prompt)
        tool = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(tool, json.dumps(ANSWERS[prompt]))])

    return FunctionModel(answer)


def test_one_write_path_federated_recall_context_and_reset(graph_store: MemoryStore) -> None:
    """The support-agent scenario across every tier, sync and async."""
    manager = MemoryManager(store=graph_store, user_id="ann")
    graph = KnowledgeGraph(graph_store)
    calls: list[str] = []
    memory = UnifiedMemory(manager, graph, KnowledgeExtractor(graph, _model(calls)))
    first = memory.add_turn("c1", "I moved to Berlin", "Noted, Berlin.", state_delta={"step": 1})
    memory.add_turn(
        "c1",
        "actually I live in Munich now",
        "Got it, Munich.",
        state_delta={"user:moved": True, "step": 2, "temp:x": 0},
    )
    assert calls == list(ANSWERS)
    # state_delta reaches manager.add_turn: written with the turn; a bad one writes
    # neither the turn nor the state, and nothing is extracted.
    assert manager.get_state("c1") == {"step": 2, "user:moved": True}
    with pytest.raises(EntryValidationError):
        memory.add_turn("c1", "I moved to Berlin", "Noted.", state_delta={"step": {1}})
    assert calls == list(ANSWERS) and len(manager.conversation.get_turns("c1")) == 2
    # The facts cite the turns; Berlin is superseded, not piled up.
    (fact,) = graph.facts_about("ann", "user")
    assert fact.object == "Munich" and fact.evidence[0].startswith("c1:")
    assert graph.history("ann") and f"c1:{first.turn_id}" in str(graph.history("ann"))
    manager.remember("Ann pays for the annual plan", importance=0.9)
    manager.remember("Ann asked support about a Munich invoice", kind="episodic")

    hits = memory.recall("Munich", limit=10)
    tiers = {h.tier for h in hits}
    assert tiers == {"fact", "entity", "long_term", "conversation"}, hits
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    texts = {h.tier: h.text for h in hits}
    assert texts["fact"] == "user lives in Munich" and texts["entity"] == "Munich (city)"
    assert "Munich" in texts["conversation"] and "Munich" in texts["long_term"]
    # "I" names the user entity: the current fact, never the superseded one.
    mine = memory.recall("where do I live?", tiers=["fact"])
    assert [h.text for h in mine] == ["user lives in Munich"] and mine[0].source == fact
    # The alias finds the entity; the async twin answers the same.
    assert [h.text for h in memory.recall("München", tiers=["entity"])] == ["Munich (city)"]
    again = asyncio.run(memory.async_recall("Munich", limit=10))
    assert [(h.tier, h.text) for h in again] == [(h.tier, h.text) for h in hits]

    context = memory.assemble_context("Munich annual plan", max_tokens=200)
    assert context.startswith("Known facts:\n- user lives in Munich")
    assert "Long-term memory:" in context and "Past conversations:" not in context
    full = memory.assemble_context("Munich", max_tokens=200, include_conversation=True)
    assert "Past conversations:\n- actually I live in Munich now Got it, Munich." in full
    assert memory.assemble_context("Munich", max_tokens=3) == ""
    with pytest.raises(EntryValidationError):
        memory.assemble_context("Munich", max_tokens=-1)

    memory.reset()
    assert not manager.conversation_exists("c1")
    after = memory.recall("Munich annual plan", limit=10)
    assert {h.tier for h in after} == {"fact", "entity", "long_term"}
    assert [h.text for h in after if h.tier == "long_term"] == ["Ann pays for the annual plan"]
    asyncio.run(memory.async_reset())


def test_deferred_extraction_and_bad_wiring(tmp_path: Path) -> None:
    """Deferred: the turn is stored and its extraction queued, no model call; a graph needs a
    bound manager; an extractor of another graph is refused (SQLite)."""
    graph_store = SQLiteStore(tmp_path / "unified.db")
    graph_store.initialize()
    manager = MemoryManager(store=graph_store).for_user("bob")
    graph = KnowledgeGraph(graph_store)
    calls: list[str] = []
    extractor = KnowledgeExtractor(graph, _model(calls))
    memory = UnifiedMemory(manager, extractor=extractor, defer_extraction=True)
    assert memory.graph is graph
    asyncio.run(memory.async_add_turn("c2", "I moved to Berlin", "Noted.", state_delta={"a": 1}))
    assert manager.get_state("c2") == {"a": 1}
    assert calls == [] and extractor.stats()["pending"] == 1
    assert memory.recall("Berlin", tiers=["fact"]) == []
    assert extractor.process_pending().recorded == 1
    assert [h.text for h in memory.recall("Berlin", tiers=["fact"])] == ["user lives in Berlin"]
    with pytest.raises(EntryValidationError):
        UnifiedMemory(MemoryManager(store=graph_store), graph)
    with pytest.raises(EntryValidationError):
        UnifiedMemory(manager, KnowledgeGraph(graph_store), extractor)
    with pytest.raises(EntryValidationError):
        memory.recall("Berlin", tiers=["nowhere"])  # type: ignore[list-item]
    graph_store.close()


def test_memory_agent_with_a_graph_gets_its_tools(tmp_path: Path) -> None:
    """MemoryAgent(graph=...): each run has facts_about / related over its user's graph; a run
    for no user is refused; without a graph the agent has no such tools (SQLite)."""
    store = SQLiteStore(tmp_path / "agent.db")
    store.initialize()
    graph = KnowledgeGraph(store)
    graph.add_fact("ann", "user", "lives_in", "Munich", evidence="t1")
    graph.add_fact("bob", "user", "lives_in", "Paris", evidence="t2")
    tools: list[list[str]] = []
    answers: list[Any] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tools.append(sorted(t.name for t in info.function_tools))
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if "facts_about" in tools[-1] and not returns:
            return ModelResponse(parts=[ToolCallPart("facts_about", {"entity": "user"})])
        answers.extend(r.content for r in returns)
        return ModelResponse(parts=[TextPart("done")])

    model = FunctionModel(answer)
    agent = MemoryAgent(Agent(model), memory=MemoryManager(store=store), graph=graph)
    assert agent.run_sync("Where do I live?", user_id="ann").output == "done"
    assert tools[0] == ["facts_about", "related"]
    ((fact,),) = answers
    assert isinstance(fact, dict) and (fact["object"], fact["evidence"]) == ("Munich", ["t1"])
    with pytest.raises(EntryValidationError):
        agent.run_sync("Where do I live?")
    tools.clear()
    MemoryAgent(Agent(model), memory=MemoryManager(store=store)).run_sync("hi", user_id="ann")
    assert tools == [[]]
    store.close()
