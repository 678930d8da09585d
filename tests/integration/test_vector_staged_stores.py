"""Vectors on the stores without a vector index: memory, files, MongoDB (exact cosine search).

Each test runs on every such backend through ``uow.entries`` (the
:class:`~firefly_orm.protocols.VectorRepository` of a staged unit of work), with
:class:`~firefly_orm.testing.embeddings.ConceptEmbeddingModel` vectors, so a hit
is found by meaning and not by a constant.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from store_backends import OpenedBackend, backend_params, open_backend

from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.protocols import UnitOfWork, VectorRepository
from firefly_orm.testing.embeddings import ConceptEmbeddingModel, concept_vector
from firefly_orm.uow import unit_of_work_for
from firefly_orm.vector import EmbeddingMismatchError, EmbeddingSpec

STAGED_VECTOR_BACKENDS = ("memory", "file", "mongo")
NS = "long_term:u"
SPEC = EmbeddingSpec(f"firefly_orm:{ConceptEmbeddingModel().model_name}", 256)
OTHER = EmbeddingSpec("other:model", 256)

TEXTS = {
    "email": "the customer prefers email over phone calls",
    "report": "the quarterly report is due on friday",
    "dog": "our dog is named Rex",
    "build": "the build failed on the python server",
    "peanuts": "he is allergic to peanuts",
    "berlin": "she moved to Berlin last year",
}


@pytest.fixture(params=backend_params(STAGED_VECTOR_BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    opened = open_backend(request, request.param)
    yield opened
    opened.close()


def repo(uow: UnitOfWork) -> VectorRepository:
    assert isinstance(uow.entries, VectorRepository)
    return uow.entries


def entry(name: str, **fields: Any) -> MemoryEntry:
    text = TEXTS.get(name, name)
    return MemoryEntry(entry_id=name, content={"text": text}, search_text=text, **fields)


def remember(store: Any, names: list[str], *, spec: EmbeddingSpec = SPEC, **fields: Any) -> None:
    with unit_of_work_for(store) as uow:
        for name in names:
            uow.entries.save(NS, entry(name, **fields))
        vectors = {name: concept_vector(TEXTS.get(name, name)) for name in names}
        repo(uow).save_vectors(NS, spec, vectors)
        uow.commit()


def search(store: Any, query: str, **options: Any) -> list[str]:
    with unit_of_work_for(store, read_only=True) as uow:
        hits = repo(uow).vector_search(NS, concept_vector(query), SPEC, **options)
    return [hit.entry.entry_id for hit in hits]


def state(store: Any) -> tuple[EmbeddingSpec | None, set[str]]:
    """The namespace's spec and the ids of the entries still waiting for a vector."""
    with unit_of_work_for(store, read_only=True) as uow:
        spec = repo(uow).embedding_spec(NS)
        waiting = {e.entry_id for e in repo(uow).unembedded(NS, limit=1000)}
    return spec, waiting


def test_a_paraphrase_is_recalled_by_meaning(backend: OpenedBackend) -> None:
    remember(backend.store, list(TEXTS))
    assert search(backend.store, "how should we contact her?", limit=3)[0] == "email"
    assert search(backend.reopen(), "where does she live now?", limit=1) == ["berlin"]
    assert state(backend.store) == (SPEC, set())


def test_a_search_sees_the_unit_of_works_own_vectors_and_a_rollback_keeps_none(
    backend: OpenedBackend,
) -> None:
    remember(backend.store, ["report", "dog"])
    with unit_of_work_for(backend.store) as uow:
        uow.entries.save(NS, entry("email"))
        repo(uow).save_vectors(NS, SPEC, {"email": concept_vector(TEXTS["email"])})
        query = concept_vector("phone her")
        assert [h.entry.entry_id for h in repo(uow).vector_search(NS, query, SPEC, limit=1)] == [
            "email"
        ]
        uow.entries.delete(NS, "dog")
        found = repo(uow).vector_search(NS, concept_vector("our pet"), SPEC, limit=5)
        assert "dog" not in {h.entry.entry_id for h in found}
        # rolled back: nothing of it stays
    assert sorted(search(backend.store, "phone her", limit=5)) == ["dog", "report"]
    assert state(backend.store) == (SPEC, set())


def test_filters_apply_inside_the_scan_before_the_cut(backend: OpenedBackend) -> None:
    near = [f"email {i}" for i in range(8)]
    remember(backend.store, near, user_id="someone-else")
    remember(backend.store, ["dog"], user_id="alice", importance=0.9)
    assert search(backend.store, "email", limit=1, user_id="alice") == ["dog"]
    assert search(backend.store, "email", limit=1, min_importance=0.8) == ["dog"]
    assert search(backend.store, "email", limit=0) == []
    assert len(search(backend.store, "email", limit=None)) == 9


def test_expired_entries_are_not_found_and_cleanup_removes_their_vectors(
    backend: OpenedBackend,
) -> None:
    remember(backend.store, ["dog", "email"])
    with unit_of_work_for(backend.store) as uow:  # expired since: a re-save keeps its vector
        uow.entries.save(NS, entry("email", expires_at=utcnow() - timedelta(seconds=1)))
        uow.commit()
    assert search(backend.store, "phone", limit=5) == ["dog"]
    assert backend.store.cleanup_expired() >= 1
    with unit_of_work_for(backend.store) as uow:  # the same id again, without a vector
        uow.entries.save(NS, entry("email"))
        uow.commit()
    assert state(backend.store) == (SPEC, {"email"})
    assert search(backend.store, "phone", limit=5) == ["dog"]


@pytest.mark.parametrize("how", ["delete", "erase_user", "clear", "store_delete", "store_clear"])
def test_deleting_an_entry_leaves_no_vector_behind(backend: OpenedBackend, how: str) -> None:
    remember(backend.store, ["email", "dog"], user_id="alice")
    if how.startswith("store_"):
        if how == "store_delete":
            backend.store.delete(NS, "email")
        else:
            backend.store.clear(NS)
    else:
        with unit_of_work_for(backend.store) as uow:
            if how == "delete":
                uow.entries.delete(NS, "email")
            elif how == "erase_user":
                uow.entries.erase_user("alice")
            else:
                uow.entries.clear(NS)
            uow.commit()
    with unit_of_work_for(backend.store) as uow:
        uow.entries.save(NS, entry("email"))
        uow.commit()
    spec, waiting = state(backend.store)
    assert "email" in waiting
    assert search(backend.store, "phone", limit=5) in (["dog"], [])
    assert spec == (None if how in ("erase_user", "clear", "store_clear") else SPEC)


def test_a_resave_keeps_the_vector_and_a_move_takes_it_away(backend: OpenedBackend) -> None:
    remember(backend.store, ["email", "dog"])
    with unit_of_work_for(backend.store) as uow:
        uow.entries.save(NS, entry("email", importance=0.7))
        uow.commit()
    assert search(backend.store, "phone", limit=1) == ["email"]
    with unit_of_work_for(backend.store) as uow:
        uow.entries.save("long_term:elsewhere", entry("email"))
        uow.commit()
    if backend.name == "file":  # its ids are per namespace: no move, two entries (documented)
        assert search(backend.store, "phone", limit=5) == ["email", "dog"]
        return
    assert search(backend.store, "phone", limit=5) == ["dog"]
    backend.store.save(NS, entry("email"))  # moved back: its old vector does not come back
    assert search(backend.store, "phone", limit=5) == ["dog"]
    assert state(backend.store) == (SPEC, {"email"})


def test_mixing_embedding_models_is_refused_and_nothing_is_written(
    backend: OpenedBackend,
) -> None:
    remember(backend.store, ["dog"])
    with pytest.raises(EmbeddingMismatchError, match="re-embed"):
        remember(backend.store, ["email"], spec=OTHER)
    assert state(backend.store) == (SPEC, set())
    assert search(backend.store, "phone", limit=5) == ["dog"]
    # after dropping the namespace's vectors another model is accepted
    with unit_of_work_for(backend.store) as uow:
        repo(uow).drop_vectors(NS)
        repo(uow).save_vectors(NS, OTHER, {"dog": concept_vector("dog")})
        uow.commit()
    assert state(backend.store)[0] == OTHER


def test_bad_vectors_and_unknown_ids_are_refused(backend: OpenedBackend) -> None:
    remember(backend.store, ["dog"])
    with unit_of_work_for(backend.store) as uow:
        with pytest.raises(EntryValidationError, match="dimensions"):
            repo(uow).save_vectors(NS, SPEC, {"dog": [1.0, 2.0]})
        with pytest.raises(EntryValidationError, match="no entry"):
            repo(uow).save_vectors(NS, SPEC, {"ghost": concept_vector("ghost")})
        with pytest.raises(EntryValidationError, match="zero vector"):
            repo(uow).save_vectors(NS, SPEC, {"dog": [0.0] * 256})


def test_scores_are_cosine_similarities_and_ties_go_to_importance(
    backend: OpenedBackend,
) -> None:
    rng = random.Random(29)
    vectors = {f"e{i}": [rng.uniform(-1, 1) for _ in range(256)] for i in range(20)}
    with unit_of_work_for(backend.store) as uow:
        for i, name in enumerate(vectors):
            uow.entries.save(NS, entry(name, importance=i / 20))
        uow.entries.save(NS, entry("twin", importance=0.99))
        repo(uow).save_vectors(NS, SPEC, {**vectors, "twin": vectors["e3"]})
        uow.commit()
    with unit_of_work_for(backend.store, read_only=True) as uow:
        hits = repo(uow).vector_search(NS, vectors["e3"], SPEC, limit=3)
    assert [h.entry.entry_id for h in hits[:2]] == ["twin", "e3"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)
    assert hits[2].score < hits[1].score


@pytest.mark.mongo
def test_mongo_keeps_vectors_in_the_documents_and_bounds_the_scan(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from firefly_orm.mongo import _vectors

    opened = open_backend(request, "mongo")
    try:
        store = opened.store
        remember(store, ["email", "dog", "report"], user_id="alice")
        docs = raw_documents(opened)
        assert {d["entry_id"] for d in docs if "vector" in d} == {"email", "dog", "report"}
        assert all(d["vector"]["model"] == SPEC.model for d in docs if "vector" in d)
        monkeypatch.setattr(_vectors, "MAX_VECTOR_SCAN", 2)  # the newest two only
        with caplog.at_level("WARNING", logger="firefly_orm.mongo"):
            found = search(store, "phone", limit=5)
        assert "email" not in found and len(found) == 2
        assert "MAX_VECTOR_SCAN" in caplog.text
        with unit_of_work_for(store) as uow:
            uow.entries.erase_user("alice")
            uow.commit()
        assert not [d for d in raw_documents(opened) if "vector" in d]
    finally:
        opened.close()


def raw_documents(opened: OpenedBackend) -> list[dict[str, Any]]:
    """Every document of the test's collection, read with pymongo."""
    from pymongo import MongoClient

    store = opened.store
    client: MongoClient[dict[str, Any]] = MongoClient(opened.place.mongo())
    try:
        return list(client[store.database_name][store.collection_name].find({}))
    finally:
        client.close()


def test_filestore_keeps_vectors_in_a_file_beside_the_namespace(tmp_path: Any) -> None:
    from firefly_orm.file_store import FileStore
    from firefly_orm.file_store._vectors import _encode, vector_file

    store = FileStore(tmp_path)
    remember(store, ["email", "dog", "report"], user_id="alice")
    remember(store, ["build"], user_id="bob")
    path = vector_file(store.path_for(NS))
    assert path.exists() and b"firefly_orm:firefly-concept-v1" in path.read_bytes()
    # a writer killed while appending leaves a torn line: ignored, then cut off
    with open(path, "ab") as file:
        file.write(b'{"put":{"x":"AAAA')
    assert search(FileStore(tmp_path), "phone", limit=1) == ["email"]
    for i in range(12):  # rewrites and deletes: the file is compacted, not grown forever
        remember(store, [f"note {i}"])
        store.delete(NS, f"note {i}")
    assert path.read_bytes().count(b"\n") <= 2 * 4 + 8
    assert sorted(search(store, "phone", limit=None)) == ["build", "dog", "email", "report"]
    with unit_of_work_for(store) as uow:
        uow.entries.erase_user("alice")
        uow.commit()
    assert search(store, "phone", limit=None) == ["build"]
    assert store.read_vector_ids(NS) == {"build"}
    erased = _encode(concept_vector(TEXTS["email"])).encode()
    assert erased not in path.read_bytes()  # rewritten without it, not only marked deleted
    store.clear(NS)
    assert not path.exists()


def test_a_store_without_vector_reads_says_so(request: pytest.FixtureRequest) -> None:
    from firefly_orm.vector import VectorUnavailableError

    opened = open_backend(request, "five_method")  # a custom store: the best-effort unit of work
    try:
        opened.store.save(NS, entry("dog"))
        with unit_of_work_for(opened.store) as uow:
            with pytest.raises(VectorUnavailableError, match="keeps no vectors"):
                repo(uow).save_vectors(NS, SPEC, {"dog": concept_vector("dog")})
            with pytest.raises(VectorUnavailableError, match="mode='text'"):
                repo(uow).vector_search(NS, concept_vector("dog"), SPEC)
    finally:
        opened.close()
