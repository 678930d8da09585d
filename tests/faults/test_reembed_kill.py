"""kill -9 in the middle of ``reembed``: nothing is lost, and a rerun finishes the job.

A SQLite store holds twelve long-term items with vectors of an old model.  A
child process (``reembed_child.py``) re-embeds them with a new model, three
items per unit of work, and is SIGKILLed:

* while embedding the first batch (nothing of the new model committed yet);
* while embedding the third batch (two batches committed);
* inside the second batch's unit of work, its vectors written, not committed.

Then: every item is there as it was, the namespace holds the vectors of one
model only (the old one's until the first batch commits, the new one's after,
exactly the committed batches'), and ``reembed`` run again goes on where the
child stopped (nothing dropped once the new model's vectors are in) and leaves
every item with a new vector: recall by meaning works with the new model.

Figures printed: batches committed by the child, vectors the rerun stored.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from firefly_orm.long_term import LongTermMemory, reembed
from firefly_orm.protocols import VectorRepository
from firefly_orm.sql import SQLiteStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel
from firefly_orm.uow import unit_of_work_for
from firefly_orm.vector import EmbeddingSpec

CHILD = Path(__file__).resolve().parent / "reembed_child.py"
NS = "long_term:kill"
OLD = ConceptEmbeddingModel(dimensions=48, model_name="concept-old")
NEW_NAME, NEW_DIMENSIONS = "concept-new", 80
NEW = ConceptEmbeddingModel(dimensions=NEW_DIMENSIONS, model_name=NEW_NAME)
NEW_SPEC = EmbeddingSpec(f"firefly_orm:{NEW_NAME}", NEW_DIMENSIONS)
OLD_SPEC = EmbeddingSpec("firefly_orm:concept-old", 48)
BATCH = 3
FACTS = [
    "the customer prefers email over phone calls",
    "she lives in Lisbon",
    "our dog is named Rex",
    "the invoice is due on Friday",
    "he is allergic to peanuts",
    "the build failed on the python server",
    "the meeting moved to Tuesday morning",
    "he speaks French and German",
    "her daughter plays the violin",
    "the flight to Tokyo leaves at noon",
    "the budget for the trip is small",
    "it rained all weekend",
]


def _state(store: SQLiteStore) -> tuple[list[tuple[str, str | None]], EmbeddingSpec | None, int]:
    """``(the items as (id, text), the namespace's spec, how many items wait for a vector)``."""
    with unit_of_work_for(store, read_only=True) as uow:
        items = [(e.entry_id, e.search_text) for e in uow.entries.list(NS)]
        vectors = uow.entries
        assert isinstance(vectors, VectorRepository)
        spec = vectors.embedding_spec(NS)
        waiting = len(vectors.unembedded(NS, limit=100))
    return items, spec, waiting


@pytest.mark.parametrize(
    ("kill_in", "at", "committed"), [("embed", 1, 0), ("embed", 3, 2), ("store", 2, 1)]
)
def test_a_killed_reembed_loses_nothing_and_resumes(
    tmp_path: Path, kill_in: str, at: int, committed: int
) -> None:
    location = tmp_path / "memory.sqlite3"
    store = SQLiteStore(location, vectors=True)
    try:
        memory = LongTermMemory(store=store, namespace=NS, embedder=OLD)
        for fact in FACTS:
            memory.remember(fact)
        before, spec, waiting = _state(store)
        assert (len(before), spec, waiting) == (len(FACTS), OLD_SPEC, 0)
    finally:
        store.close()

    config = {
        "location": str(location),
        "namespace": NS,
        "batch_size": BATCH,
        "model_name": NEW_NAME,
        "dimensions": NEW_DIMENSIONS,
        "kill_in": kill_in,
        "at": at,
    }
    child = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr  # the kill landed mid-run
    lines = [json.loads(line) for line in child.stdout.splitlines()]
    assert not any(line.get("done") is True for line in lines)
    assert [line["batch"] for line in lines] == list(range(1, committed + 1))

    store = SQLiteStore(location, vectors=True)
    try:
        after, spec, waiting = _state(store)
        assert after == before  # nothing lost, nothing changed
        if committed == 0:
            assert (spec, waiting) == (OLD_SPEC, 0)  # the old model's vectors, all of them
        else:
            assert (spec, waiting) == (NEW_SPEC, len(FACTS) - committed * BATCH)
        rerun = reembed(store, NS, NEW, batch_size=BATCH)
        assert rerun.previous == (OLD_SPEC if committed == 0 else None)
        assert rerun.embedded == len(FACTS) - committed * BATCH
        assert _state(store) == (before, NEW_SPEC, 0)
        found = LongTermMemory(store=store, namespace=NS, embedder=NEW).recall(
            "how should we contact her?", mode="semantic", limit=1
        )
        assert [r.item.text for r in found] == [FACTS[0]]
        print(f"kill in {kill_in} #{at}: {committed} batch(es) committed, rerun {rerun.embedded}")
    finally:
        store.close()
