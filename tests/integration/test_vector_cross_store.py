"""Every store answers a vector search alike: the same hits, in the same order, the same scores.

The same data (random vectors, several users, importances, kinds and tags, an
expired item) goes into each store that keeps vectors; each search, with and
without filters, is compared with a brute-force answer computed here: cosine
similarity of the 32-bit values every store keeps, the filters applied before
the cut, ties to importance then newest.  Memory, MongoDB (exact scans),
SQLite (sqlite-vec) and PostgreSQL (pgvector) must all give it.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from vector_stores import VECTOR_STORES, vector_store

from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.protocols import VectorRepository
from firefly_orm.uow import unit_of_work_for
from firefly_orm.vector import EmbeddingSpec

NS = "long_term:cross"
DIMENSIONS = 24
SPEC = EmbeddingSpec("test:random", DIMENSIONS)
USERS = ("ada", "bob", None)
KINDS = ("semantic", "episodic")
TAGS = ("work", "home", "travel")
SEARCHES: list[dict[str, Any]] = [
    {"limit": 5},
    {"limit": None},
    {"limit": 3, "user_id": "ada"},
    {"limit": 4, "min_importance": 0.6},
    {"limit": 5, "kind": "episodic"},
    {"limit": 5, "tags": ["work", "home"]},
    {"limit": 2, "user_id": "bob", "kind": "semantic", "min_importance": 0.2},
]


def _float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"{len(values)}f", struct.pack(f"{len(values)}f", *values)))


def _data() -> list[tuple[MemoryEntry, list[float]]]:
    rng = random.Random(2029)
    rows = []
    for i in range(40):
        tags = sorted(rng.sample(TAGS, rng.randint(0, 2)))
        entry = MemoryEntry(
            entry_id=f"item-{i:02d}",
            content={"text": f"item {i}", "kind": rng.choice(KINDS), "tags": tags},
            search_text=f"item {i}",
            importance=round(rng.random(), 2),
            user_id=rng.choice(USERS),
            expires_at=utcnow() - timedelta(seconds=1) if i == 7 else None,
        )
        rows.append((entry, [rng.gauss(0, 1) for _ in range(DIMENSIONS)]))
    return rows


DATA = _data()
QUERIES = [[random.Random(seed).gauss(0, 1) for _ in range(DIMENSIONS)] for seed in (1, 2, 3)]


def _expected(query: list[float], options: dict[str, Any]) -> list[tuple[str, float]]:
    """The brute-force answer: every accepted item scored, best first, cut."""
    q = _float32(query)
    found = []
    for entry, vector in DATA:
        content = entry.content
        if entry.entry_id == "item-07":  # expired
            continue
        if options.get("user_id") is not None and entry.user_id != options["user_id"]:
            continue
        if entry.importance < (options.get("min_importance") or -1.0):
            continue
        if options.get("kind") is not None and content["kind"] != options["kind"]:
            continue
        if not set(options.get("tags") or ()) <= set(content["tags"]):
            continue
        v = _float32(vector)
        dot = math.fsum(a * b for a, b in zip(q, v, strict=True))
        norm = math.sqrt(math.fsum(a * a for a in q)) * math.sqrt(math.fsum(b * b for b in v))
        found.append((dot / norm, entry.importance, entry.entry_id))
    found.sort(reverse=True)
    cut = found if options.get("limit") is None else found[: options["limit"]]
    return [(entry_id, score) for score, _, entry_id in cut]


@pytest.fixture(params=VECTOR_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store that keeps vectors."""
    with vector_store(request, tmp_path) as opened:
        yield opened


def test_every_store_gives_the_brute_force_answer(store: Any) -> None:
    with unit_of_work_for(store) as uow:
        for entry, _ in DATA:
            uow.entries.save(NS, entry.copy_entry(expires_at=None))
        assert isinstance(uow.entries, VectorRepository)
        uow.entries.save_vectors(NS, SPEC, {e.entry_id: v for e, v in DATA})
        uow.commit()
    with unit_of_work_for(store) as uow:  # expired since its vector was stored
        uow.entries.save(NS, DATA[7][0])
        uow.commit()
    with unit_of_work_for(store, read_only=True) as uow:
        vectors = uow.entries
        assert isinstance(vectors, VectorRepository)
        for query in QUERIES:
            for options in SEARCHES:
                hits = vectors.vector_search(NS, query, SPEC, **options)
                expected = _expected(query, options)
                got = [(h.entry.entry_id, h.score) for h in hits]
                assert [i for i, _ in got] == [i for i, _ in expected], options
                for (_, score), (_, want) in zip(got, expected, strict=True):
                    assert score == pytest.approx(want, abs=1e-5)


def test_a_new_text_drops_the_vector_and_a_resave_keeps_it(store: Any) -> None:
    """As the SQL stores' trigger does: the vector said the old text."""
    with unit_of_work_for(store) as uow:
        for entry, _ in DATA[:3]:
            uow.entries.save(NS, entry.copy_entry(expires_at=None))
        assert isinstance(uow.entries, VectorRepository)
        uow.entries.save_vectors(NS, SPEC, {e.entry_id: v for e, v in DATA[:3]})
        uow.commit()
    first, second = DATA[0][0], DATA[1][0]
    with unit_of_work_for(store) as uow:
        uow.entries.save(NS, first.copy_entry(importance=0.99))  # same text: kept
        uow.entries.save(NS, second.copy_entry(search_text="another text"))  # new text: dropped
        uow.commit()
    with unit_of_work_for(store, read_only=True) as uow:
        vectors = uow.entries
        assert isinstance(vectors, VectorRepository)
        assert [e.entry_id for e in vectors.unembedded(NS, limit=10)] == [second.entry_id]
        hits = vectors.vector_search(NS, DATA[1][1], SPEC, limit=None)
        assert {h.entry.entry_id for h in hits} == {first.entry_id, DATA[2][0].entry_id}
