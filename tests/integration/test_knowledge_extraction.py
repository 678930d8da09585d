"""Extraction by a model into the knowledge graph (issue 30), SQLite, PostgreSQL and MongoDB."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from knowledge_stores import GRAPH_KINDS, SQL_KINDS, open_graph_store, open_sql_store
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import KnowledgeExtractor, KnowledgeGraph
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import MemoryStore
from firefly_orm.sql import SQLAlchemyStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)

#: What the fake model answers per message (anything else: a malformed answer).
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
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLAlchemyStore]:
    yield from open_sql_store(request, tmp_path)


@pytest.fixture(params=GRAPH_KINDS)
def graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    yield from open_graph_store(request, tmp_path)


class FakeModel:
    """A FunctionModel answering from ANSWERS; on a SQL store it records whether a connection
    (so a transaction) was held during the call."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.calls: list[str] = []
        self.held: list[int] = []
        self.broken = False
        self.model = FunctionModel(self.answer)

    def answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = next(
            part.content
            for message in messages
            for part in message.parts
            if isinstance(part, UserPromptPart)
        )
        assert isinstance(prompt, str)
        self.calls.append(prompt)
        if isinstance(self.store, SQLAlchemyStore):
            pool = self.store.engine.pool
            self.held.append(pool.checkedout())  # type: ignore[attr-defined]
        if self.broken or prompt not in ANSWERS:
            return ModelResponse(parts=[TextPart("sorry, no JSON today")])
        tool = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(tool, json.dumps(ANSWERS[prompt]))])


def test_berlin_then_munich_by_the_model(graph_store: MemoryStore) -> None:
    """The done-when scenario through the model, with the turns stored first by the app."""
    manager = MemoryManager(store=graph_store)
    graph = KnowledgeGraph(graph_store)
    fake = FakeModel(graph_store)
    extractor = KnowledgeExtractor(graph, fake.model)
    said = [T0, T0 + timedelta(days=10)]
    for when, text in zip(said, ANSWERS, strict=True):
        turn = manager.add_turn("c1", "user", text, user_id="ann")
        result = extractor.extract_from_turn(
            "ann", text, turn_ref=f"c1:{turn.turn_id}", observed_at=when
        )
        assert result.pending_id is None and result.error is None
    # No connection (so no transaction) held during the model calls.
    assert fake.held == ([0, 0] if isinstance(graph_store, SQLAlchemyStore) else [])
    (current,) = graph.facts_about("ann", "user")
    assert current.object == "Munich" and current.valid_from == said[1]
    (before,) = graph.facts_about("ann", "user", as_of=T0 + timedelta(days=5))
    assert (before.object, before.valid_to) == ("Berlin", said[1])
    assert before.evidence == ["c1:0"] and current.evidence == ["c1:1"]
    munich = graph.entities.get("ann", "münchen")
    assert munich is not None and munich.entity_type == "city"


def test_malformed_answers_are_retried_a_bounded_number_of_times(
    graph_store: MemoryStore,
) -> None:
    manager = MemoryManager(store=graph_store)
    graph = KnowledgeGraph(graph_store)
    fake = FakeModel(graph_store)
    extractor = KnowledgeExtractor(graph, fake.model, max_attempts=2)
    text = "I moved to Berlin"
    manager.add_turn("c1", "user", text, user_id="ann")
    fake.broken = True
    result = extractor.extract_from_turn("ann", text, turn_ref="c1:0", observed_at=T0)
    assert result.pending_id is not None and result.error is not None and not result.changes
    assert text in str(manager.get_recent_messages("c1", 5))  # the turn stays
    assert graph.facts_about("ann", "user") == []
    assert extractor.stats() == {"pending": 1, "failed": 0}
    # Still broken: the second attempt is the last one.
    report = extractor.process_pending()
    assert (report.recorded, report.retried_later, report.failed) == (0, 0, 1)
    assert extractor.stats() == {"pending": 0, "failed": 1}
    assert extractor.process_pending().recorded == 0  # failed ones are not retried

    # Another turn deferred, then drained once the model answers.
    fake.broken = False
    deferred = extractor.extract_from_turn(
        "ann", "actually I live in Munich now", turn_ref="c1:1", defer=True
    )
    assert deferred.pending_id is not None
    calls = len(fake.calls)
    assert extractor.process_pending().recorded == 1
    assert len(fake.calls) == calls + 1 and not any(fake.held)
    assert [f.object for f in graph.facts_about("ann", "user")] == ["Munich"]
    assert extractor.stats() == {"pending": 0, "failed": 1}


def test_bad_arguments(sql_store: SQLAlchemyStore) -> None:
    graph = KnowledgeGraph(sql_store)
    fake = FakeModel(sql_store)
    with pytest.raises(EntryValidationError):
        KnowledgeExtractor(graph, fake.model, max_attempts=0)
    extractor = KnowledgeExtractor(graph, fake.model)
    with pytest.raises(EntryValidationError):
        extractor.extract_from_turn("ann", "hi", turn_ref="")
    with pytest.raises(EntryValidationError):
        extractor.extract_from_turn("ann", "hi", turn_ref="t", observed_at=datetime(2026, 1, 1))
    assert fake.calls == [] and extractor.stats() == {"pending": 0, "failed": 0}


def test_async_extraction(graph_store: MemoryStore) -> None:
    graph = KnowledgeGraph(graph_store)
    fake = FakeModel(graph_store)
    extractor = KnowledgeExtractor(graph, fake.model)

    async def scenario() -> list[str]:
        result = await extractor.async_extract_from_turn("ann", "I moved to Berlin", turn_ref="t1")
        assert [c.outcome for c in result.changes] == ["add"]
        assert (await extractor.async_stats()) == {"pending": 0, "failed": 0}
        return [f.object for f in await graph.async_facts_about("ann", "user")]

    assert asyncio.run(scenario()) == ["Berlin"]
