"""reembed: a namespace's vectors made again by another model, in batches, resumable.

On every store that keeps vectors: memory, MongoDB, SQLite (sqlite-vec) and
PostgreSQL (pgvector).  The two models are
:class:`~firefly_orm.testing.embeddings.ConceptEmbeddingModel` under two names
and sizes, so recall by meaning can be checked after the switch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from vector_stores import VECTOR_STORES, vector_store

from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import LongTermMemory, ReembedProgress, async_reembed, reembed
from firefly_orm.sql import SQLiteStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel
from firefly_orm.vector import EmbeddingSpec, VectorUnavailableError

OLD = ConceptEmbeddingModel(dimensions=64, model_name="concept-old")
NEW = ConceptEmbeddingModel(dimensions=96, model_name="concept-new")
NEW_SPEC = EmbeddingSpec("firefly_orm:concept-new", 96)
OLD_SPEC = EmbeddingSpec("firefly_orm:concept-old", 64)
NS = "long_term:reembed"
ITEMS = [
    "the customer prefers email over phone calls",
    "the invoice is due on Friday",
    "she lives in Lisbon",
    "our dog is named Rex",
    "the build failed on the python server",
    "he is allergic to peanuts",
    "the meeting moved to Tuesday morning",
]


@pytest.fixture(params=VECTOR_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store that keeps vectors."""
    with vector_store(request, tmp_path) as opened:
        yield opened


def remembered(store: Any, model: ConceptEmbeddingModel) -> LongTermMemory:
    memory = LongTermMemory(store=store, namespace=NS, embedder=model)
    for text in ITEMS:
        memory.remember(text)
    return memory


def recall(store: Any, model: ConceptEmbeddingModel, query: str) -> list[str]:
    memory = LongTermMemory(store=store, namespace=NS, embedder=model)
    return [r.item.text for r in memory.recall(query, mode="semantic", limit=2)]


def test_reembedding_switches_the_namespace_to_the_new_model(store: Any) -> None:
    remembered(store, OLD)
    seen: list[ReembedProgress] = []
    report = reembed(store, NS, NEW, batch_size=3, on_batch=seen.append)
    assert (report.spec, report.previous) == (NEW_SPEC, OLD_SPEC)
    assert (report.total, report.embedded, report.batches) == (len(ITEMS), len(ITEMS), 3)
    assert [p.done for p in seen] == [3, 6, 7]
    assert all(p.total == len(ITEMS) for p in seen)
    assert recall(store, NEW, "how should we contact her?")[0] == ITEMS[0]
    # run again: nothing left to do, nothing dropped
    again = reembed(store, NS, NEW, batch_size=3)
    assert (again.embedded, again.previous, again.spec) == (0, None, NEW_SPEC)


def test_an_interrupted_run_resumes_where_it_stopped(store: Any) -> None:
    remembered(store, OLD)

    class Interrupted(Exception):
        pass

    def stop_after_two(progress: ReembedProgress) -> None:
        if progress.report.batches == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        reembed(store, NS, NEW, batch_size=2, on_batch=stop_after_two)
    resumed = reembed(store, NS, NEW, batch_size=2)
    assert resumed.previous is None  # the old vectors were already gone
    assert resumed.embedded == len(ITEMS) - 4
    assert recall(store, NEW, "where does she live?")[0] == ITEMS[2]


async def test_async_reembed_and_the_old_model_again(store: Any) -> None:
    memory = LongTermMemory(store=store, namespace=NS, embedder=NEW)
    for text in ITEMS:
        await memory.async_remember(text)
    report = await async_reembed(store, NS, OLD, batch_size=4)
    assert (report.spec, report.previous, report.embedded) == (OLD_SPEC, NEW_SPEC, len(ITEMS))
    old = LongTermMemory(store=store, namespace=NS, embedder=OLD)
    found = await old.async_recall("does he have a pet?", mode="semantic", limit=1)
    assert [r.item.text for r in found] == [ITEMS[3]]


def test_an_empty_namespace_and_bad_arguments(store: Any) -> None:
    report = reembed(store, "long_term:nobody", NEW)
    assert (report.spec, report.total, report.embedded) == (None, 0, 0)
    with pytest.raises(EntryValidationError, match="batch_size"):
        reembed(store, NS, NEW, batch_size=0)
    with pytest.raises(EntryValidationError):
        reembed(store, "", NEW)


def test_a_store_without_vectors_is_refused(tmp_path: Any) -> None:
    plain = SQLiteStore(tmp_path / "plain.sqlite3")
    try:
        LongTermMemory(store=plain, namespace=NS).remember("a fact")
        with pytest.raises(VectorUnavailableError, match="vectors"):
            reembed(plain, NS, NEW)
    finally:
        plain.close()


def test_the_cli_reembeds_with_a_progress_bar(tmp_path: Any) -> None:
    path = tmp_path / "cli.sqlite3"
    sqlite = SQLiteStore(path, vectors=True)
    try:
        remembered(sqlite, OLD)
    finally:
        sqlite.close()
    factory = "firefly_orm.testing.embeddings:ConceptEmbeddingModel"
    args = ["reembed", "--url", f"sqlite:///{path}", "--namespace", NS]
    done = run_cli(*args, "--embedder-factory", factory, "--batch-size", "3", "--progress")
    assert done.returncode == 0, done.stderr
    assert f"{NS}: {len(ITEMS)} vector(s) of firefly_orm:firefly-concept-v1" in done.stdout
    assert "dropped" in done.stdout
    assert f"reembed {NS} [" in done.stderr and f"{len(ITEMS)}/{len(ITEMS)}" in done.stderr
    again = run_cli(*args, "--embedder-factory", factory, "--json")
    assert '"embedded": 0' in again.stdout and '"previous_model": null' in again.stdout
    both = run_cli(*args, "--embedder-factory", factory, "--model", "openai:x")
    assert both.returncode == 2 and "either --model or --embedder-factory" in both.stderr
    bad = run_cli(*args, "--embedder-factory", "firefly_orm.testing.embeddings:nothing")
    assert bad.returncode == 2 and "nothing" in bad.stderr
