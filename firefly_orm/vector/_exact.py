"""Exact vector search for the stores without a vector index (memory, files, MongoDB).

Core floor: imports nothing above :mod:`firefly_orm.vector._spec` and
:mod:`firefly_orm._search`.

* Vectors are kept as 32-bit floats (:func:`stored_vector`), as pgvector's
  ``vector`` and sqlite-vec's ``float[N]`` columns keep them, so every store
  compares the same numbers and ranks the same data the same way.
* :func:`exact_hits` scores candidates by cosine similarity, applies the
  request's filters (:meth:`~firefly_orm.vector.VectorRequest.accepts`) before
  the cut, and orders them as every store does (score, importance, newest).
* :class:`VectorTable` holds the vectors of a store in process memory, one
  spec per namespace; the in-memory and file stores keep theirs in one.
* :func:`check_vector_changes` is the commit-time check of a staged unit of
  work's vectors (one spec per namespace), run before anything is written.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from firefly_orm._search import SearchHit, best_hits
from firefly_orm.entry import MemoryEntry
from firefly_orm.vector._spec import EmbeddingMismatchError, EmbeddingSpec, VectorRequest

__all__ = [
    "StagedVectors",
    "VectorTable",
    "check_vector_changes",
    "exact_hits",
    "stored_vector",
]

#: ``(spec, vector)`` per ``(namespace, entry_id)``: the vectors a unit of work stages.
StagedVectors = Mapping[tuple[str, str], tuple[EmbeddingSpec, Sequence[float]]]


def stored_vector(vector: Iterable[float]) -> array[float]:
    """``vector`` as stored: 32-bit floats (what pgvector and sqlite-vec keep too)."""
    return array("f", vector)


def _cosine(query: Sequence[float], query_norm: float, vector: Sequence[float]) -> float:
    dot = math.fsum(a * b for a, b in zip(query, vector, strict=True))
    norm = query_norm * math.sqrt(math.fsum(b * b for b in vector))
    return dot / norm if norm else 0.0


def exact_hits(
    request: VectorRequest, candidates: Iterable[tuple[MemoryEntry, Sequence[float]]]
) -> list[SearchHit]:
    """The candidates ``request`` accepts, scored by cosine similarity, best first, cut.

    ``candidates`` are ``(entry, vector)`` pairs of vectors of ``request.spec``
    (the caller picks those); the entries are returned as given (copy them
    before handing them out).
    """
    if request.finds_nothing:
        return []
    query = stored_vector(request.vector)
    query_norm = math.sqrt(math.fsum(a * a for a in query))
    hits = (
        SearchHit(entry, _cosine(query, query_norm, vector))
        for entry, vector in candidates
        if request.accepts(entry)
    )
    return best_hits(hits, request.limit)


@dataclass
class _Namespace:
    spec: EmbeddingSpec
    vectors: dict[str, array[float]] = field(default_factory=dict)


class VectorTable:
    """The vectors of a store, by namespace and entry id (one spec per namespace).

    Not thread-safe: the store calls it under its own lock.  A namespace whose
    last vector goes no longer has a spec.
    """

    def __init__(self) -> None:
        self._namespaces: dict[str, _Namespace] = {}

    def spec(self, namespace: str) -> EmbeddingSpec | None:
        """The spec of ``namespace``'s vectors (``None``: it holds none)."""
        held = self._namespaces.get(namespace)
        return None if held is None else held.spec

    def ids(self, namespace: str) -> set[str]:
        """The entry ids of ``namespace`` that have a vector."""
        held = self._namespaces.get(namespace)
        return set() if held is None else set(held.vectors)

    def get(self, namespace: str, entry_id: str) -> array[float] | None:
        """The vector of one entry, or ``None``."""
        held = self._namespaces.get(namespace)
        return None if held is None else held.vectors.get(entry_id)

    def items(self) -> Iterable[tuple[str, EmbeddingSpec, str, array[float]]]:
        """Every vector: ``(namespace, spec, entry_id, vector)``."""
        for namespace, held in self._namespaces.items():
            for entry_id, vector in held.vectors.items():
                yield namespace, held.spec, entry_id, vector

    def put(
        self, namespace: str, entry_id: str, spec: EmbeddingSpec, vector: Iterable[float]
    ) -> None:
        """Store (or replace) one vector.

        Raises:
            EmbeddingMismatchError: ``namespace`` holds vectors of another spec.
        """
        held = self._namespaces.get(namespace)
        if held is None:
            held = self._namespaces[namespace] = _Namespace(spec)
        elif held.spec != spec:
            raise EmbeddingMismatchError(namespace, held.spec, spec)
        held.vectors[entry_id] = stored_vector(vector)

    def remove(self, namespace: str, entry_id: str) -> bool:
        """Delete one vector; whether there was one."""
        held = self._namespaces.get(namespace)
        if held is None or held.vectors.pop(entry_id, None) is None:
            return False
        if not held.vectors:
            del self._namespaces[namespace]
        return True

    def drop(self, namespace: str) -> None:
        """Delete every vector of ``namespace``."""
        self._namespaces.pop(namespace, None)

    def search(
        self, request: VectorRequest, entry: Callable[[str], MemoryEntry | None]
    ) -> list[SearchHit]:
        """:func:`exact_hits` over the namespace's vectors of ``request.spec``.

        ``entry(entry_id)`` gives the stored entry (``None``: skip it).
        """
        held = self._namespaces.get(request.namespace)
        if held is None or held.spec != request.spec:
            return []
        pairs = ((entry(entry_id), vector) for entry_id, vector in held.vectors.items())
        return exact_hits(request, ((e, v) for e, v in pairs if e is not None))


def check_vector_changes(
    staged: StagedVectors,
    dropped: Iterable[str],
    stored_spec: Callable[[str], EmbeddingSpec | None],
) -> None:
    """Refuse, before anything is written, staged vectors that would mix specs.

    ``dropped`` are the namespaces whose stored vectors go first (their spec
    no longer counts); ``stored_spec(namespace)`` is the committed spec.

    Raises:
        EmbeddingMismatchError: A namespace would hold vectors of two specs.
    """
    gone = set(dropped)
    chosen: dict[str, EmbeddingSpec] = {}
    for (namespace, _), (spec, _) in staged.items():
        if namespace not in chosen:
            current = None if namespace in gone else stored_spec(namespace)
            chosen[namespace] = spec if current is None else current
        if chosen[namespace] != spec:
            raise EmbeddingMismatchError(namespace, chosen[namespace], spec)
