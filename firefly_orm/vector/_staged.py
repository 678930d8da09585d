"""The vector operations of a staged unit of work (memory, files, MongoDB).

:class:`StagedVectorOperations` is the half of
:class:`~firefly_orm.protocols.VectorRepository` that
:class:`~firefly_orm.uow.StagedUnitOfWork`'s repository inherits: vectors are
staged in :class:`~firefly_orm.protocols.StagedChanges` (``vectors``,
``dropped_vectors``) and applied by the store's ``apply_changes``; the reads ask
the store's :class:`~firefly_orm.vector._protocols.VectorBackend` for committed
state and overlay the unit of work's own writes.

Core floor (beside the protocol it serves): the repository hands in its staged
changes and the ids its staged writes hide through three small hooks.
"""

from __future__ import annotations

import builtins
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Protocol, Unpack

from firefly_orm._search import SearchHit, best_hits
from firefly_orm.entry import MemoryEntry, validate_namespace
from firefly_orm.errors import EntryValidationError
from firefly_orm.vector._errors import VectorUnavailableError
from firefly_orm.vector._exact import exact_hits
from firefly_orm.vector._protocols import VectorBackend
from firefly_orm.vector._spec import (
    EmbeddingMismatchError,
    EmbeddingSpec,
    VectorRequest,
    VectorSearchOptions,
    check_vector,
)

__all__ = ["StagedVectorOperations", "VectorChanges"]


class VectorChanges(Protocol):
    """The fields of :class:`~firefly_orm.protocols.StagedChanges` the vector operations use."""

    cleared: set[str]
    dropped_vectors: set[str]
    vectors: dict[tuple[str, str], tuple[EmbeddingSpec, tuple[float, ...]]]


class StagedVectorOperations:
    """``save_vectors``, ``vector_search``, ``embedding_spec``, ``unembedded``, ``drop_vectors``.

    For a repository that stages its writes; it provides :meth:`_vector_changes`,
    :meth:`_vector_backend`, :meth:`_shadowed`, and the ``get`` / ``list`` reads
    (with its staged writes overlaid).
    """

    # -- the repository's hooks
    def _vector_changes(self) -> VectorChanges:
        raise NotImplementedError

    def _vector_backend(self) -> object:
        raise NotImplementedError

    def _shadowed(self, namespace: str) -> tuple[set[str], dict[str, MemoryEntry], set[str]]:
        """``(ids whose stored row is deleted or moved, re-saved entries, erased users)``."""
        raise NotImplementedError

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        raise NotImplementedError

    def list(self, namespace: str) -> builtins.list[MemoryEntry]:
        raise NotImplementedError

    # -- the operations
    def _backend(self) -> VectorBackend:
        backend = self._vector_backend()
        if not isinstance(backend, VectorBackend):
            raise VectorUnavailableError(
                f"{type(backend).__name__} keeps no vectors (no VectorBackend): use a store with "
                "vector search or recall with mode='text'; nothing was done"
            )
        return backend

    def _stored_gone(self, namespace: str) -> bool:
        changes = self._vector_changes()
        return namespace in changes.cleared or namespace in changes.dropped_vectors

    def embedding_spec(self, namespace: str) -> EmbeddingSpec | None:
        """The spec of the vectors ``namespace`` holds, staged ones first (``None``: none)."""
        validate_namespace(namespace)
        backend = self._backend()
        for (ns, _), (spec, _) in self._vector_changes().vectors.items():
            if ns == namespace:
                return spec
        return None if self._stored_gone(namespace) else backend.read_embedding_spec(namespace)

    def save_vectors(
        self, namespace: str, spec: EmbeddingSpec, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Stage the vectors (checked now, applied on commit); see ``VectorRepository``."""
        validate_namespace(namespace)
        if not isinstance(spec, EmbeddingSpec):
            raise EntryValidationError("spec", f"must be an EmbeddingSpec, got {spec!r}")
        checked = {entry_id: check_vector(v, spec) for entry_id, v in vectors.items()}
        for entry_id in checked:
            if self.get(namespace, entry_id) is None:
                raise EntryValidationError("vectors", f"{entry_id!r} is no entry of {namespace!r}")
        current = self.embedding_spec(namespace)
        if current is not None and current != spec:
            raise EmbeddingMismatchError(namespace, current, spec)
        staged = self._vector_changes().vectors
        for entry_id, vector in checked.items():
            staged[(namespace, entry_id)] = (spec, vector)

    def drop_vectors(self, namespace: str) -> None:
        """Stage the deletion of every vector of ``namespace`` (its entries stay)."""
        validate_namespace(namespace)
        self._backend()
        changes = self._vector_changes()
        changes.dropped_vectors.add(namespace)
        for key in [k for k in changes.vectors if k[0] == namespace]:
            del changes.vectors[key]

    def unembedded(self, namespace: str, *, limit: int) -> builtins.list[MemoryEntry]:
        """Live entries with ``search_text`` and no vector, oldest first, at most ``limit``.

        Cost: every call lists the whole namespace (the stores without SQL have
        no "entries without a vector" index, nor a list that starts after a
        cursor) and reads the ids of its vectors, so it is O(N) for a namespace
        of N entries whatever ``limit`` is, and re-embedding it in batches of B
        is O(N²/B) entry reads.  Measured on a loaded 2-core VM, 2,000 entries
        in an ``InMemoryStore``: 22 s with batches of 64, 1.8 s with 512
        (FileStore: 32 s and 2.4 s).  Re-embed large namespaces of these stores
        with a large ``batch_size`` (up to 2,048); the SQL stores answer with
        one indexed query.
        """
        backend = self._backend()
        done = set() if self._stored_gone(namespace) else backend.read_vector_ids(namespace)
        done.update(i for ns, i in self._vector_changes().vectors if ns == namespace)
        pending = (e for e in self.list(namespace) if e.search_text and e.entry_id not in done)
        return builtins.list(itertools.islice(pending, max(limit, 0)))

    def vector_search(
        self,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        **options: Unpack[VectorSearchOptions],
    ) -> builtins.list[SearchHit]:
        """The store's nearest entries with the staged writes and vectors overlaid."""
        request = VectorRequest.build(namespace, vector, spec, **options)
        if request.finds_nothing:
            return []
        backend, changes = self._backend(), self._vector_changes()
        gone, restaged, erased = self._shadowed(namespace)
        staged = [(i, s, v) for (ns, i), (s, v) in changes.vectors.items() if ns == namespace]
        fresh = {entry_id: v for entry_id, s, v in staged if s == spec}
        hits: builtins.list[SearchHit] = []
        if not self._stored_gone(namespace):
            if restaged:
                # re-saved entries are judged by their staged fields: no filter, no cut
                found = backend.read_vector_search(namespace, request.vector, spec, limit=None)
            else:
                # each staged write or vector hides at most one stored hit
                window = None
                if request.limit is not None and not erased:
                    window = request.limit + len(gone) + len(fresh)
                options = request.options(limit=window)
                found = backend.read_vector_search(namespace, request.vector, spec, **options)
            for hit in found:
                entry_id = hit.entry.entry_id
                if entry_id in fresh or entry_id in gone or hit.entry.user_id in erased:
                    continue
                entry = restaged.get(entry_id)
                if entry is not None and entry.search_text != hit.entry.search_text:
                    continue  # a new text: its stored vector goes on commit
                entry = hit.entry if entry is None else entry.copy_entry()
                if request.accepts(entry):
                    hits.append(SearchHit(entry, hit.score))
        if fresh:
            pairs = [(self.get(namespace, entry_id), v) for entry_id, v in fresh.items()]
            unlimited = dataclasses.replace(request, limit=None)
            hits.extend(exact_hits(unlimited, [(e, v) for e, v in pairs if e is not None]))
        return best_hits(hits, request.limit)
