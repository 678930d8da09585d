"""The LangGraph store adapter's search by meaning (``index=``) on stores that keep vectors.

Ports the behaviours of LangGraph's vector store tests (``test_vector_store_*``
in ``libs/checkpoint-sqlite/tests/test_store.py``: a query ranks by similarity
with a score, ``fields`` chooses the text embedded, ``index=False`` items are
not embedded, filters and namespace prefixes still apply, a delete removes the
vector), and checks what our layers add: the puts of a batch embedded in one
call before the unit of work, a deleted or re-put item leaves no stale vector,
nothing written on a bad vector or a store without vectors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp
from vector_stores import vector_store

from firefly_orm import InMemoryStore
from firefly_orm.errors import EntryValidationError
from firefly_orm.integrations.langgraph import DEFAULT_NAMESPACE, FireflyStore
from firefly_orm.long_term._embedding import vector_repository
from firefly_orm.sql import SQLiteStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel, concept_vector
from firefly_orm.vector import EmbeddingSpec, VectorUnavailableError

DIMS = 64
DIET = "Ada is vegetarian and allergic to peanuts"
JOB = "Ada was hired by a software company"
PET = "Bob has two cats and a puppy"
#: Shares no word with DIET: found by meaning only.
QUESTION = "what does she eat for dinner?"


class Counting:
    """A LangGraph-style sync embedding function that counts its calls."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [concept_vector(t, DIMS) for t in texts]


@pytest.fixture(params=["memory", "sqlite", pytest.param("pgvector", marks=pytest.mark.pgvector)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store that keeps vectors."""
    with vector_store(request, tmp_path) as opened:
        yield opened


def _vector_ids(store: Any) -> set[str]:
    """The entry ids of the items with a stored vector (a search over every vector)."""
    with store.unit_of_work() as uow:
        spec = EmbeddingSpec("langgraph:Counting", DIMS)
        hits = vector_repository(uow).vector_search(
            DEFAULT_NAMESPACE, concept_vector("anything", DIMS), spec, limit=None
        )
        return {hit.entry.entry_id for hit in hits}


def test_a_paraphrase_is_found_by_meaning(store: Any) -> None:
    embed = Counting()
    lg = FireflyStore(store, index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    lg.batch(
        [
            PutOp(("users", "ada"), "diet", {"text": DIET, "kind": "food"}),
            PutOp(("users", "ada"), "job", {"text": JOB, "kind": "work"}),
            PutOp(("users", "bob"), "pet", {"text": PET, "kind": "pet"}),
        ]
    )
    assert len(embed.calls) == 1 and len(embed.calls[0]) == 3  # one call for the batch
    assert FireflyStore(store).search(("users",), query=QUESTION) == []  # no shared word

    found = lg.search(("users",), query=QUESTION)
    assert found[0].key == "diet"
    scores = [i.score for i in found]
    assert all(isinstance(s, float) and -1.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert scores[0] > scores[-1]  # type: ignore[operator]
    # filters and the namespace prefix still apply
    assert [i.key for i in lg.search(("users",), query=QUESTION, filter={"kind": "pet"})] == ["pet"]
    assert [i.key for i in lg.search(("users", "bob"), query=QUESTION)] == ["pet"]
    assert [i.key for i in lg.search(("users",), query=QUESTION, limit=1, offset=1)] != ["diet"]

    # a delete takes the vector with the item; an index=False re-put drops the old one
    before = _vector_ids(store)
    assert len(before) == 3
    lg.delete(("users", "ada"), "diet")
    lg.put(("users", "ada"), "job", {"text": JOB}, index=False)
    assert len(_vector_ids(store)) == 1
    assert [i.key for i in lg.search(("users",), query=QUESTION)] == ["pet"]
    assert lg.get(("users", "ada"), "job") is not None  # the item itself stays


async def test_hybrid_with_a_pydantic_ai_embedder_async(tmp_path: Path) -> None:
    sqlite = SQLiteStore(tmp_path / "h.sqlite3", vectors=True)
    try:
        lg = FireflyStore(
            sqlite,
            index={"dims": DIMS, "embed": ConceptEmbeddingModel(dimensions=DIMS)},
            query_mode="hybrid",
        )
        await lg.aput(("notes",), "diet", {"text": DIET})
        # written without an index: text, no vector
        await FireflyStore(sqlite).aput(("notes",), "plain", {"text": "a dinner receipt"})
        found = [i.key for i in await lg.asearch(("notes",), query=QUESTION)]
        assert sorted(found) == ["diet", "plain"]  # by meaning, and by its word "dinner"
        semantic = FireflyStore(
            sqlite, index={"dims": DIMS, "embed": ConceptEmbeddingModel(dimensions=DIMS)}
        )
        assert [i.key for i in await semantic.asearch(("notes",), query=QUESTION)] == ["diet"]
    finally:
        sqlite.close()


def test_nothing_written_on_a_bad_vector_or_a_store_without_vectors(tmp_path: Path) -> None:
    plain = SQLiteStore(tmp_path / "plain.sqlite3")
    wrong = SQLiteStore(tmp_path / "wrong.sqlite3", vectors=True)
    try:
        with pytest.raises(EntryValidationError):
            FireflyStore(plain, index={"dims": 0, "embed": Counting()})
        no_vectors = FireflyStore(plain, index={"dims": DIMS, "embed": Counting()})
        with pytest.raises(VectorUnavailableError):
            no_vectors.put(("a",), "k", {"text": DIET})
        assert FireflyStore(plain).get(("a",), "k") is None
        too_short = FireflyStore(wrong, index={"dims": DIMS + 1, "embed": Counting()})
        with pytest.raises(EntryValidationError):
            too_short.put(("a",), "k", {"text": DIET})
        assert FireflyStore(wrong).get(("a",), "k") is None
    finally:
        plain.close()
        wrong.close()


async def test_an_async_embed_function_from_async_code() -> None:
    """LangGraph wraps an async function for both paths; sync calls run it on our loop."""
    seen: list[int] = []

    async def embed(texts: list[str]) -> list[list[float]]:
        seen.append(len(texts))
        return [concept_vector(t, DIMS) for t in texts]

    lg = FireflyStore(InMemoryStore(), index={"dims": DIMS, "embed": embed})
    await lg.abatch([PutOp(("n",), "diet", {"t": DIET}), PutOp(("n",), "pet", {"t": PET})])
    assert [i.key for i in (await lg.asearch(("n",), query=QUESTION))][:1] == ["diet"]
    assert seen == [2, 1]  # one call for both puts, one for the query


def test_an_async_embed_function_from_sync_code() -> None:
    async def embed(texts: list[str]) -> list[list[float]]:
        return [concept_vector(t, DIMS) for t in texts]

    lg = FireflyStore(InMemoryStore(), index={"dims": DIMS, "embed": embed})
    lg.put(("n",), "diet", {"t": DIET})
    lg.put(("n",), "pet", {"t": PET})
    assert [i.key for i in lg.search(("n",), query=QUESTION)] == ["diet", "pet"]
