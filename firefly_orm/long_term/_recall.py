"""Recall by meaning and hybrid recall: the transactions behind ``recall(mode=...)``.

Three modes (:data:`RECALL_MODES`):

* ``"text"``: the store's full-text search (:func:`~firefly_orm.long_term._ops.recall_items`);
  the score is the text relevance.
* ``"semantic"``: the nearest vectors (``uow.entries.vector_search``, cosine),
  with the owner, importance, kind and tags filters inside the scan; the score
  is the cosine similarity.  Items remembered without an embedder have no
  vector and are not found this way.
* ``"hybrid"``: both rankings, each read :data:`HYBRID_DEPTH` times deeper than
  the limit (at least :data:`HYBRID_MIN_DEPTH`), fused by reciprocal rank
  (:func:`~firefly_orm.vector.reciprocal_rank_fusion`, ``k`` =
  :data:`~firefly_orm.vector.RRF_K`); the score is the fused score.  An item
  found by both ranks above one found by one alone at the same places; an item
  without a vector is still found by its words.

The query vector is computed before the unit of work opens (see
:mod:`firefly_orm.long_term._embedding`).  A namespace whose vectors were made
by another model than the memory's embedder is refused
(:class:`~firefly_orm.vector.EmbeddingMismatchError`): the distances would
mean nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeAlias

from firefly_orm.conversation._search import (
    HYBRID_DEPTH,
    HYBRID_MIN_DEPTH,
    SEARCH_MODES,
    SearchMode,
    hybrid_depth,
)
from firefly_orm.long_term._embedding import vector_repository
from firefly_orm.long_term._model import Recalled, item_from_entry
from firefly_orm.long_term._ops import ItemFilter, recall_items
from firefly_orm.protocols import UnitOfWork
from firefly_orm.vector._spec import EmbeddingMismatchError, ModelVector, fuse_by

__all__ = [
    "HYBRID_DEPTH",
    "HYBRID_MIN_DEPTH",
    "RECALL_MODES",
    "RecallMode",
    "RecallRequest",
    "run_recall",
]

#: A mode of ``recall``: the modes of ``search_conversations``.
RecallMode: TypeAlias = SearchMode
#: The modes of ``recall``.
RECALL_MODES: tuple[RecallMode, ...] = SEARCH_MODES


@dataclass(frozen=True)
class RecallRequest:
    """A checked recall: what every mode searches for, and how."""

    namespace: str
    query: str
    limit: int
    min_importance: float | None
    user_id: str | None
    language: str | None
    where: ItemFilter
    mode: RecallMode = "text"
    #: The query's vector (``"semantic"`` and ``"hybrid"``).
    meaning: ModelVector | None = None


def run_recall(uow: UnitOfWork, request: RecallRequest) -> list[Recalled]:
    """The ``limit`` best items for ``request`` in its mode (one unit of work).

    Raises:
        VectorUnavailableError: A vector mode on a store that keeps no vectors.
        EmbeddingMismatchError: The namespace's vectors are another model's.
    """
    if request.meaning is None or request.mode == "text":
        return _by_words(uow, request)
    if request.mode == "semantic":
        return _by_meaning(uow, request, request.meaning)
    if request.limit == 0:
        return []
    deeper = replace(request, limit=hybrid_depth(request.limit))
    rankings = [_by_words(uow, deeper), _by_meaning(uow, deeper, request.meaning)]
    fused = fuse_by(rankings, key=lambda found: found.item.id)
    return [Recalled(found.item, score) for found, score in fused[: request.limit]]


def _by_words(uow: UnitOfWork, request: RecallRequest) -> list[Recalled]:
    return recall_items(
        uow,
        request.namespace,
        request.query,
        limit=request.limit,
        min_importance=request.min_importance,
        user_id=request.user_id,
        language=request.language,
        where=request.where,
    )


def _by_meaning(uow: UnitOfWork, request: RecallRequest, meaning: ModelVector) -> list[Recalled]:
    """The ``limit`` items nearest the query's vector, filters inside the store's scan."""
    if request.limit == 0:
        return []
    vectors = vector_repository(uow)
    hits = vectors.vector_search(
        request.namespace,
        meaning.vector,
        meaning.spec,
        limit=request.limit,
        user_id=request.user_id,
        min_importance=request.min_importance,
        kind=request.where.kind,
        tags=request.where.tags,
    )
    if not hits:  # a hit is a vector of the query's spec: a namespace holds one spec
        stored = vectors.embedding_spec(request.namespace)
        if stored is not None and stored != meaning.spec:
            raise EmbeddingMismatchError(request.namespace, stored, meaning.spec)
    return [Recalled(item_from_entry(hit.entry), hit.score) for hit in hits]
