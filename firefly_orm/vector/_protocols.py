"""The vector capabilities of a store (re-exported by :mod:`firefly_orm.protocols`).

Here, on the core floor beside :mod:`firefly_orm.vector._spec`, so that
:mod:`firefly_orm.protocols` stays one readable page; the rules the methods
follow are in :mod:`firefly_orm.vector._spec`.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Protocol, Unpack, runtime_checkable

from firefly_orm._search import SearchHit
from firefly_orm.entry import MemoryEntry
from firefly_orm.vector._spec import EmbeddingSpec, VectorSearchOptions

__all__ = ["VectorBackend", "VectorRepository"]


@runtime_checkable
class VectorRepository(Protocol):
    """An optional capability of a unit of work's repository: vectors beside the entries.

    The rules every store follows are in :mod:`firefly_orm.vector._spec`: each
    vector belongs to one entry of one namespace and records its
    :class:`~firefly_orm.vector.EmbeddingSpec`; one spec per namespace; an
    entry's deletion (``delete``, ``clear``, ``erase_user``, expiry cleanup,
    eviction) removes its vector in the same transaction; searches see the
    unit of work's own writes and apply their filters before the cut.
    Build the search arguments with :meth:`firefly_orm.vector.VectorRequest.build`.
    """

    def save_vectors(
        self, namespace: str, spec: EmbeddingSpec, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Store (or replace) the vector of each entry id of ``vectors``, made by ``spec``.

        Every id must name an entry of ``namespace`` (saved before in this unit
        of work, or stored).

        Raises:
            EntryValidationError: A vector of the wrong length or not finite, or
                an id that is no entry of ``namespace``; nothing is written.
            EmbeddingMismatchError: ``namespace`` holds vectors of another
                spec; nothing is written.
        """
        ...

    def vector_search(
        self,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        **options: Unpack[VectorSearchOptions],
    ) -> builtins.list[SearchHit]:
        """Live entries of ``namespace`` nearest ``vector`` (cosine), best first, cut to ``limit``.

        Only vectors of ``spec`` are compared.  ``score`` is the cosine
        similarity; ties go to importance, then the newest.  ``options``:
        :class:`~firefly_orm.vector.VectorSearchOptions`.

        Raises:
            EntryValidationError: A bad argument (nothing is read).
        """
        ...

    def embedding_spec(self, namespace: str) -> EmbeddingSpec | None:
        """The spec of the vectors ``namespace`` holds (``None``: it holds none)."""
        ...

    def unembedded(self, namespace: str, *, limit: int) -> builtins.list[MemoryEntry]:
        """Up to ``limit`` live entries of ``namespace`` with ``search_text`` and no vector.

        Ordered by ``(created_at, entry_id)``: what a re-embedding or a
        back-fill embeds next.
        """
        ...

    def drop_vectors(self, namespace: str) -> None:
        """Delete every vector of ``namespace`` (its entries stay)."""
        ...


@runtime_checkable
class VectorBackend(Protocol):
    """A staged backend that stores vectors (what a staged :class:`VectorRepository` needs).

    Besides :class:`~firefly_orm.protocols.StagedBackend`'s methods: its
    ``apply_changes`` also applies the ``dropped_vectors`` and ``vectors`` of
    :class:`~firefly_orm.protocols.StagedChanges`, after the entry writes, in the same
    atomic step; deleting an entry deletes its vector.  The reads return
    committed state; the unit of work overlays its own writes.
    """

    def read_vector_search(
        self,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        **options: Unpack[VectorSearchOptions],
    ) -> list[SearchHit]:
        """As :meth:`VectorRepository.vector_search`, over committed entries (copies)."""
        ...

    def read_embedding_spec(self, namespace: str) -> EmbeddingSpec | None:
        """As :meth:`VectorRepository.embedding_spec`, committed state."""
        ...

    def read_vector_ids(self, namespace: str) -> set[str]:
        """The ids of the entries of ``namespace`` that have a committed vector."""
        ...
