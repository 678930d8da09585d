"""Facts compared by meaning (issue 30): with an embedder, "resides in" is the slot
"lives in" holds; the embedder is called with no unit of work open and the match is
re-checked inside the write.  SQLite, PostgreSQL and MongoDB."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from knowledge_stores import GRAPH_KINDS, open_graph_store
from pydantic_ai.embeddings import EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType

from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import Extraction, KnowledgeGraph, Triple
from firefly_orm.protocols import MemoryStore
from firefly_orm.sql import SQLAlchemyStore, SQLiteStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
#: The concept test model puts synonyms of one concept at a cosine of about 0.63.
THRESHOLD = 0.6


@pytest.fixture(params=GRAPH_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    yield from open_graph_store(request, tmp_path)


class Watching(ConceptEmbeddingModel):
    """The concept model, counting its texts and the SQL connections checked out while it
    runs (so whether a transaction was open); ``during`` runs inside the call."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__()
        self.store = store
        self.texts: list[str] = []
        self.held: list[int] = []
        self.during: Callable[[], Awaitable[None]] | None = None

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        self.texts.extend([inputs] if isinstance(inputs, str) else inputs)
        if isinstance(self.store, SQLAlchemyStore):
            self.held.append(self.store.engine.pool.checkedout())  # type: ignore[attr-defined]
        if self.during is not None:
            await self.during()
        return await super().embed(inputs, input_type=input_type, settings=settings)


def test_a_synonym_confirms_and_supersedes_in_the_same_slot(store: MemoryStore) -> None:
    model = Watching(store)
    graph = KnowledgeGraph(store, embedder=model, meaning_threshold=THRESHOLD)
    assert graph.add_fact("ann", "user", "lives in", "Berlin", observed_at=T0).outcome == "add"
    assert model.texts == []  # nothing held yet: nothing to compare, no call

    same = graph.add_fact("ann", "user", "resides in", "berlin", observed_at=T0 + DAY)
    assert same.outcome == "confirm" and same.fact is not None
    assert same.fact.predicate == "lives_in"
    assert sorted(model.texts) == ["lives in", "resides in"]
    assert graph.history("ann", limit=1)[0]["detail"]["said"] == "resides_in"

    moved = graph.add_fact("ann", "user", "Resides in", "Munich", observed_at=T0 + 2 * DAY)
    assert moved.outcome == "supersede" and moved.fact is not None
    assert (moved.fact.predicate, moved.fact.object) == ("lives_in", "Munich")
    assert [f.object for f in moved.superseded] == ["Berlin"]
    assert sorted(model.texts) == ["lives in", "resides in"]  # vectors kept: no new call
    (then,) = graph.facts_about("ann", "user", as_of=T0 + DAY)
    assert then.object == "Berlin"

    # Unrelated meaning: a slot of its own.  Objects are never matched by meaning.
    work = graph.add_fact("ann", "user", "works at", "Acme", observed_at=T0 + 3 * DAY)
    assert work.outcome == "add"
    changes = graph.record(
        "ann",
        Extraction(triples=[Triple(subject="user", predicate="is based in", object="Paris")]),
        observed_at=T0 + 4 * DAY,
    )
    assert [c.outcome for c in changes] == ["supersede"]
    now = {f.predicate: f.object for f in graph.facts_about("ann", "user")}
    assert now == {"lives_in": "Paris", "works_at": "Acme"}
    if isinstance(store, SQLAlchemyStore):
        assert model.held and not any(model.held)  # no connection held during a call


def test_without_an_embedder_a_synonym_is_another_fact(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "plain.sqlite3")  # the rule without meaning, as before
    store.initialize()
    graph = KnowledgeGraph(store)
    graph.add_fact("ann", "user", "lives in", "Berlin", observed_at=T0)
    assert graph.add_fact("ann", "user", "resides in", "Munich").outcome == "add"
    assert len(graph.facts_about("ann", "user")) == 2
    store.close()


def test_the_match_is_rechecked_inside_the_write(store: MemoryStore) -> None:
    """The held fact goes away while the embedder runs: the new one is added under
    its own predicate, nothing is superseded."""
    model = Watching(store)
    graph = KnowledgeGraph(store, embedder=model, meaning_threshold=THRESHOLD)
    other = KnowledgeGraph(store)

    async def scenario() -> None:
        await graph.async_add_fact("ann", "user", "lives in", "Berlin", observed_at=T0)

        async def forget_berlin() -> None:
            model.during = None
            await other.entities.async_forget("ann", "Berlin")

        model.during = forget_berlin
        change = await graph.async_add_fact(
            "ann", "user", "resides in", "Munich", observed_at=T0 + DAY
        )
        assert change.outcome == "add" and change.fact is not None
        assert change.fact.predicate == "resides_in" and not change.superseded

    asyncio.run(scenario())
    assert [(f.predicate, f.object) for f in graph.facts_about("ann", "user")] == [
        ("resides_in", "Munich")
    ]


def test_bad_meaning_settings(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "unused.sqlite3")  # never opened: refused before
    bad: list[Any] = [0.0, -0.1, 1.5, True, "high"]
    for threshold in bad:
        with pytest.raises(EntryValidationError, match="meaning_threshold"):
            KnowledgeGraph(store, embedder=ConceptEmbeddingModel(), meaning_threshold=threshold)
    with pytest.raises(EntryValidationError, match="embedder"):
        KnowledgeGraph(store, embedder=42)  # type: ignore[arg-type]
