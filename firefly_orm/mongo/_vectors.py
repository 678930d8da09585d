"""Vectors in a :class:`~firefly_orm.mongo.MongoDBStore`: in the documents, searched exactly.

Storage
    An entry's vector is a field of its document,
    :data:`~firefly_orm.mongo._document.VECTOR_FIELD` ``= {"model", "dimensions",
    "values"}`` (the values as 32-bit floats widened to doubles, as the other
    stores keep them).  Deleting the document (``delete``, ``clear``,
    ``erase_user``, expiry cleanup, the TTL index) deletes the vector with it; a
    re-save keeps it; a save that moves the entry to another namespace drops
    it (:func:`~firefly_orm.mongo._document.upsert_pipeline`).  The ordinary
    reads never fetch it.

Search
    Exact: a vector search reads the documents of the namespace that have a
    vector of the asked spec, with the user and importance filters in the
    query (on the ``(namespace, ...)`` / ``(user_id, namespace, ...)``
    indexes), and compares every vector here (:mod:`firefly_orm.vector._exact`),
    expired entries, kind and tags filtered before the cut.  **The scan is bounded**: at most
    :data:`MAX_VECTOR_SCAN` documents per search, the newest; beyond that the
    older entries of that namespace (and user, when the search names one) are
    not compared, and a warning is logged.  Keep a namespace (or a user's share
    of it) under that bound, or use PostgreSQL (pgvector's HNSW index).
    MongoDB Atlas's ``$vectorSearch`` is not used: it needs an Atlas Search
    index, which neither a plain ``mongod`` nor SecantusDB (the test server)
    offers, and a code path no test runs is not shipped.

Commits
    A unit of work's vectors are written after its entries, in the same
    transaction, or as journal specs of the same commit without transactions
    (``{"vector": namespace, "id": entry_id, "value": {...}}`` and
    ``{"unvector": namespace}``, replayed forward like the others).  One spec
    per namespace is checked before anything is written, race-safe: without
    transactions the check is repeated under the commit's namespace locks; in
    a transaction the commit first updates the namespace's writers document
    (:data:`VECTOR_WRITERS_PREFIX`), so of two transactions writing vectors to
    one namespace the later conflicts and is retried, and its check then sees
    the other's vectors.  (A writer that crashed after taking the locks is
    rolled forward by recovery without a new check.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol, TypeVar, Unpack

from firefly_orm._search import SearchHit
from firefly_orm.entry import MemoryEntry, utcnow, validate_namespace
from firefly_orm.errors import StoreCorruptedError
from firefly_orm.mongo._document import (
    BY_TIME_NEWEST_FIRST,
    VECTOR_FIELD,
    document_to_entry,
    is_live,
)
from firefly_orm.mongo._driver import AsyncClientSession, Collection, UpdateMany, UpdateOne
from firefly_orm.vector._exact import check_vector_changes, exact_hits, stored_vector
from firefly_orm.vector._spec import EmbeddingSpec, VectorRequest, VectorSearchOptions

__all__ = [
    "MAX_VECTOR_SCAN",
    "VECTOR_WRITERS_PREFIX",
    "SettledReader",
    "VectorReads",
    "check_vectors",
    "settled_read",
    "vector_namespaces",
    "vector_specs",
    "vector_write",
    "vector_writes",
]

logger = logging.getLogger("firefly_orm.mongo")

T = TypeVar("T")

#: The most documents one vector search reads and compares (the newest first).
MAX_VECTOR_SCAN = 20_000
#: The ``entry_id`` prefix of the documents vector writers update in a transaction
#: (:func:`_conflict_with_other_writers`).
VECTOR_WRITERS_PREFIX = "\x00vectors:"
_MODEL = f"{VECTOR_FIELD}.model"
_DIMENSIONS = f"{VECTOR_FIELD}.dimensions"


class _Changes(Protocol):
    cleared: set[str]
    dropped_vectors: set[str]
    vectors: dict[tuple[str, str], tuple[EmbeddingSpec, tuple[float, ...]]]


# --------------------------------------------------------------------------- writes


def vector_namespaces(changes: _Changes) -> set[str]:
    """The namespaces whose vectors ``changes`` write or drop (locked like written ones)."""
    return changes.dropped_vectors | {namespace for namespace, _ in changes.vectors}


def vector_specs(changes: _Changes) -> list[dict[str, Any]]:
    """The journal specs of ``changes``' vectors: the drops, then each vector."""
    specs: list[dict[str, Any]] = [{"unvector": ns} for ns in sorted(changes.dropped_vectors)]
    for (namespace, entry_id), (spec, vector) in changes.vectors.items():
        value = {
            "model": spec.model,
            "dimensions": spec.dimensions,
            "values": list(stored_vector(vector)),
        }
        specs.append({"vector": namespace, "id": entry_id, "value": value})
    return specs


def vector_writes(changes: _Changes) -> list[UpdateMany | UpdateOne]:
    """The pymongo writes of ``changes``' vectors (after its entry writes, in one bulk)."""
    return [write for spec in vector_specs(changes) if (write := vector_write(spec)) is not None]


def vector_write(spec: Mapping[str, Any]) -> UpdateMany | UpdateOne | None:
    """The pymongo write of one vector spec (``None``: not a vector spec)."""
    if "unvector" in spec:
        return UpdateMany({"namespace": spec["unvector"]}, {"$unset": {VECTOR_FIELD: ""}})
    if "vector" in spec:
        # no upsert: a document deleted meanwhile (or by this commit) stays deleted
        target = {"namespace": spec["vector"], "entry_id": spec["id"]}
        return UpdateOne(target, {"$set": {VECTOR_FIELD: spec["value"]}})
    return None


def _spec_of(document: Mapping[str, Any]) -> EmbeddingSpec:
    value = document.get(VECTOR_FIELD)
    if not isinstance(value, Mapping):
        raise StoreCorruptedError(f"document {document.get('_id')!r} has no vector")
    try:
        return EmbeddingSpec(value["model"], value["dimensions"])
    except (KeyError, ValueError) as exc:
        raise StoreCorruptedError(
            f"document {document.get('_id')!r}: its vector is malformed ({exc})"
        ) from None


async def stored_spec(
    col: Collection, namespace: str, session: AsyncClientSession | None = None
) -> EmbeddingSpec | None:
    """The spec of the vectors ``namespace`` holds (``None``: none)."""
    found = await col.find_one(
        {"namespace": namespace, VECTOR_FIELD: {"$exists": True}},
        {"_id": 1, _MODEL: 1, _DIMENSIONS: 1},
        session=session,
    )
    return None if found is None else _spec_of(found)


def _writers_id(namespace: str) -> str:
    """The ``entry_id`` of the document the vector writers of ``namespace`` update."""
    return VECTOR_WRITERS_PREFIX + namespace


async def _conflict_with_other_writers(
    col: Collection, changes: _Changes, session: AsyncClientSession
) -> None:
    """In a transaction: update each written namespace's writers document.

    Two transactions storing vectors in one namespace then write one document,
    so they cannot both commit: the later one fails with a write conflict,
    which ``with_transaction`` retries on a new snapshot, where the spec check
    sees the committed vectors (without this, two writers of different models
    would each see an empty namespace and both commit).  The document (no
    ``namespace`` field, an ``entry_id`` starting with NUL, like the journal's)
    is matched by no query of entries.
    """
    for namespace in sorted({namespace for namespace, _ in changes.vectors}):
        await col.update_one(
            {"entry_id": _writers_id(namespace)},
            {"$inc": {"writes": 1}},
            upsert=True,
            session=session,
        )


async def check_vectors(
    col: Collection, changes: _Changes, session: AsyncClientSession | None
) -> None:
    """Refuse ``changes`` before anything is written if a namespace would mix specs.

    Raises:
        EmbeddingMismatchError: A staged vector's spec is not the namespace's.
    """
    gone = changes.dropped_vectors | changes.cleared
    if session is not None and changes.vectors:
        await _conflict_with_other_writers(col, changes, session)
    stored: dict[str, EmbeddingSpec | None] = {}
    for namespace, _ in changes.vectors:
        if namespace not in gone and namespace not in stored:
            stored[namespace] = await stored_spec(col, namespace, session)
    check_vector_changes(changes.vectors, gone, lambda namespace: stored.get(namespace))


# --------------------------------------------------------------------------- reads


def _search_query(request: VectorRequest) -> dict[str, Any]:
    """The documents a search compares: no expiry condition (it would make SecantusDB scan
    the collection instead of the namespace's index range; expired ones are dropped here)."""
    query: dict[str, Any] = {
        "namespace": request.namespace,
        _MODEL: request.spec.model,
        _DIMENSIONS: request.spec.dimensions,
    }
    if request.user_id is not None:
        query["user_id"] = request.user_id
    if request.min_importance is not None:
        query["importance"] = {"$gte": request.min_importance}
    return query


def _values(document: Mapping[str, Any]) -> Sequence[float]:
    values = document[VECTOR_FIELD].get("values")
    if not isinstance(values, list):
        raise StoreCorruptedError(f"document {document.get('_id')!r}: its vector has no values")
    return values


async def search_vectors(col: Collection, request: VectorRequest) -> list[SearchHit]:
    """The exact nearest live entries of ``request`` (see the module docstring for the bound)."""
    now = utcnow()
    cursor = col.find(_search_query(request)).sort(BY_TIME_NEWEST_FIRST)
    candidates: list[tuple[MemoryEntry, Sequence[float]]] = []
    async for document in cursor.limit(MAX_VECTOR_SCAN + 1):
        if len(candidates) == MAX_VECTOR_SCAN:
            logger.warning(
                "vector search in %r compared the newest %d entries only (MAX_VECTOR_SCAN); "
                "older ones were not searched",
                request.namespace,
                MAX_VECTOR_SCAN,
            )
            break
        entry = document_to_entry(document)
        if is_live(entry, now):
            candidates.append((entry, _values(document)))
    return exact_hits(request, candidates)


async def vector_ids(col: Collection, namespace: str) -> set[str]:
    """The ids of the entries of ``namespace`` with a vector."""
    cursor = col.find({"namespace": namespace, VECTOR_FIELD: {"$exists": True}}, {"entry_id": 1})
    return {str(document["entry_id"]) async for document in cursor}


class SettledReader(Protocol):
    """The store methods every read of a unit of work goes through (vector reads and the others).

    ``_call`` runs a coroutine on the store's loop thread; ``_settled_read``
    reads a namespace once its pending commits are settled (see
    :mod:`firefly_orm.mongo._journal`).
    """

    def _call(self, coro: Coroutine[Any, Any, T]) -> T: ...

    async def _settled_read(
        self,
        namespace: str,
        action: str,
        settled: set[str] | None,
        read: Callable[[Collection], Awaitable[T]],
    ) -> T: ...


class _Reads(Protocol):
    """What :class:`VectorReads` needs of the unit of work's reads."""

    @property
    def _store(self) -> SettledReader: ...

    @property
    def _settled(self) -> set[str] | None: ...


def settled_read(
    reads: _Reads, namespace: str, action: str, read: Callable[[Collection], Awaitable[T]]
) -> T:
    """``read(collection)`` of ``namespace`` run on the store's loop thread, once the
    namespace's pending commits are settled (those ``reads`` has settled are not checked again).
    """
    store = reads._store
    return store._call(store._settled_read(namespace, action, reads._settled, read))


class VectorReads:
    """The :class:`~firefly_orm.protocols.VectorBackend` reads of a MongoDB unit of work (a mixin
    of :class:`~firefly_orm.mongo._reads.UnitOfWorkReads`)."""

    def read_vector_search(
        self: _Reads,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        **options: Unpack[VectorSearchOptions],
    ) -> list[SearchHit]:
        """The committed live entries nearest ``vector``, best first (exact, bounded scan).

        Raises:
            EntryValidationError: A bad argument (nothing is read).
            StoreError: The database operation failed.
        """
        request = VectorRequest.build(namespace, vector, spec, **options)
        if request.finds_nothing:
            return []
        return settled_read(
            self, namespace, "vector search", lambda col: search_vectors(col, request)
        )

    def read_embedding_spec(self: _Reads, namespace: str) -> EmbeddingSpec | None:
        """The spec of ``namespace``'s committed vectors (``None``: it holds none)."""
        validate_namespace(namespace)
        return settled_read(
            self, namespace, "vector spec read", lambda col: stored_spec(col, namespace)
        )

    def read_vector_ids(self: _Reads, namespace: str) -> set[str]:
        """The ids of the entries of ``namespace`` with a committed vector."""
        validate_namespace(namespace)
        return settled_read(
            self, namespace, "vector id read", lambda col: vector_ids(col, namespace)
        )
