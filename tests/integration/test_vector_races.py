"""Two writers of different embedding models racing into one empty namespace: one wins.

A namespace holds the vectors of one embedding model (``EmbeddingSpec``).  The
check reads the namespace's spec before writing, so two writers that both read
"no vectors yet" could each store their own model's vectors.  Each store
serializes the check with the write: PostgreSQL by a transaction-level
advisory lock per namespace, SQLite by its serialized write transactions, the
in-memory and file stores by the locks of their commits, MongoDB by the
namespace locks of its commit journal (the check is repeated under them) or,
with transactions, by a document both transactions update (the later one
conflicts, is retried, and then sees the other's vectors).

Each test runs two threads released together by a barrier: the SQL stores'
writers are released as their units of work open (a SQLite write transaction
holds the database, so one cannot wait inside it for the other); the other
stores stage their vectors first and are released to commit together.
Exactly one must succeed, the other must get ``EmbeddingMismatchError``, and
the namespace must hold the winner's vectors only.

The MongoDB vector path with transactions (``MongoDBStore(transactions=True)``)
is also run end to end here: save, search, delete, drop, mismatch.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbutil import drop_mongo_database
from vector_stores import VECTOR_STORES, vector_store

from firefly_orm.entry import MemoryEntry
from firefly_orm.mongo import MongoDBStore
from firefly_orm.protocols import VectorRepository
from firefly_orm.uow import unit_of_work_for
from firefly_orm.vector import EmbeddingMismatchError, EmbeddingSpec

NS = "long_term:race"
SPECS = (EmbeddingSpec("test:model-a", 8), EmbeddingSpec("test:model-b", 8))
ROUNDS = 3


@pytest.fixture(params=VECTOR_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store that keeps vectors."""
    with vector_store(request, tmp_path) as opened:
        yield opened


@pytest.fixture
def mongo_transactions(mongo_url: str) -> Iterator[MongoDBStore]:
    """A MongoDB store with transactions forced on (the test server answers them)."""
    database = f"t_{uuid.uuid4().hex[:10]}"
    mongo = MongoDBStore(mongo_url, database=database, transactions=True)
    try:
        mongo.initialize()
        assert mongo.uses_transactions
        yield mongo
    finally:
        mongo.close()
        drop_mongo_database(mongo_url, database)


def _vectors(uow: Any) -> VectorRepository:
    assert isinstance(uow.entries, VectorRepository)
    return uow.entries


def _sql(store: Any) -> bool:
    return hasattr(store, "engine")


def _race(store: Any, namespace: str) -> list[BaseException | None]:
    """Two writers, one vector each, of the two models, into ``namespace``; their outcomes."""
    with unit_of_work_for(store) as uow:
        for n in range(2):
            uow.entries.save(namespace, MemoryEntry(entry_id=f"{namespace}-{n}", content=n))
        uow.commit()
    barrier = threading.Barrier(2, timeout=30)
    outcomes: list[BaseException | None] = [None, None]
    sql = _sql(store)

    def writer(n: int) -> None:
        vector = [float(n + 1)] * SPECS[n].dimensions
        try:
            if sql:
                barrier.wait()
            with unit_of_work_for(store) as uow:
                _vectors(uow).save_vectors(namespace, SPECS[n], {f"{namespace}-{n}": vector})
                if not sql:
                    barrier.wait()
                uow.commit()
        except BaseException as exc:  # reported to the test thread
            outcomes[n] = exc

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    return outcomes


def test_two_models_racing_into_an_empty_namespace_one_wins(store: Any) -> None:
    _one_wins(store)


@pytest.mark.mongo
def test_two_models_racing_with_mongo_transactions(mongo_transactions: MongoDBStore) -> None:
    _one_wins(mongo_transactions)


def _one_wins(store: Any) -> None:
    for round_ in range(ROUNDS):
        namespace = f"{NS}{round_}"
        outcomes = _race(store, namespace)
        refused = [n for n, exc in enumerate(outcomes) if isinstance(exc, EmbeddingMismatchError)]
        others = [exc for exc in outcomes if not isinstance(exc, EmbeddingMismatchError | None)]
        assert not others, others
        assert len(refused) == 1, f"round {round_}: both writers stored their model's vectors"
        winner = 1 - refused[0]
        with unit_of_work_for(store, read_only=True) as uow:
            vectors = _vectors(uow)
            assert vectors.embedding_spec(namespace) == SPECS[winner]
            query = [1.0] * 8
            for n, spec in enumerate(SPECS):
                found = [h.entry.entry_id for h in vectors.vector_search(namespace, query, spec)]
                assert found == ([f"{namespace}-{n}"] if n == winner else [])


@pytest.mark.mongo
def test_mongo_vectors_with_transactions(mongo_transactions: MongoDBStore) -> None:
    """Save, search, delete, drop and the mismatch refusal, inside MongoDB transactions."""
    store, (spec, other) = mongo_transactions, SPECS
    with unit_of_work_for(store) as uow:
        for n in range(3):
            uow.entries.save(NS, MemoryEntry(entry_id=f"t-{n}", content=n, importance=n / 2))
        _vectors(uow).save_vectors(
            NS, spec, {f"t-{n}": [1.0] * (n + 1) + [0.0] * (7 - n) for n in range(3)}
        )
        uow.commit()
    with unit_of_work_for(store) as uow:  # refused: the unit of work is not committed
        uow.entries.save(NS, MemoryEntry(entry_id="t-9", content=9))
        with pytest.raises(EmbeddingMismatchError):
            _vectors(uow).save_vectors(NS, other, {"t-9": [1.0] * 8})
    with unit_of_work_for(store, read_only=True) as uow:
        vectors = _vectors(uow)
        assert uow.entries.get(NS, "t-9") is None
        hits = vectors.vector_search(NS, [1.0] + [0.0] * 7, spec, limit=2)
        assert [h.entry.entry_id for h in hits] == ["t-0", "t-1"]
        important = vectors.vector_search(NS, [1.0] * 8, spec, min_importance=0.5)
        assert [h.entry.entry_id for h in important] == ["t-2", "t-1"]
        assert vectors.embedding_spec(NS) == spec
    with unit_of_work_for(store) as uow:
        uow.entries.delete(NS, "t-0")
        uow.commit()
    with unit_of_work_for(store, read_only=True) as uow:
        hits = _vectors(uow).vector_search(NS, [1.0] + [0.0] * 7, spec, limit=None)
        assert [h.entry.entry_id for h in hits] == ["t-1", "t-2"]
    with unit_of_work_for(store) as uow:
        _vectors(uow).drop_vectors(NS)
        _vectors(uow).save_vectors(NS, other, {"t-1": [1.0] * 8})
        uow.commit()
    with unit_of_work_for(store, read_only=True) as uow:
        vectors = _vectors(uow)
        assert vectors.embedding_spec(NS) == other
        assert vectors.vector_search(NS, [1.0] * 8, spec) == []
        assert [h.entry.entry_id for h in vectors.vector_search(NS, [1.0] * 8, other)] == ["t-1"]
