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

from firefly_orm.long_term._embedding import vector_repository
from firefly_orm.long_term._model import Recalled, item_from_entry
from firefly_orm.long_term._ops import ItemFilter, recall_items
from firefly_orm.protocols import UnitOfWork
from firefly_orm.vector._spec import EmbeddingMismatchError, EmbeddingSpec, fuse_by

__all__ = [
    "HYBRID_DEPTH",
    "HYBRID_MIN_DEPTH",
    "RECALL_MODES",
    "hybrid_items",
    "semantic_items",
]

#: The modes of ``recall``.
RECALL_MODES = ("text", "semantic", "hybrid")
#: Hybrid recall reads each ranking this many times deeper than the limit...
HYBRID_DEPTH = 4
#: ...and at least this deep.
HYBRID_MIN_DEPTH = 20


def semantic_items(
    uow: UnitOfWork,
    namespace: str,
    vector: tuple[float, ...],
    spec: EmbeddingSpec,
    *,
    limit: int,
    min_importance: float | None,
    user_id: str | None,
    where: ItemFilter,
) -> list[Recalled]:
    """The ``limit`` items nearest ``vector``, filters inside the store's scan.

    Raises:
        VectorUnavailableError: The store keeps no vectors.
        EmbeddingMismatchError: The namespace's vectors are another model's.
    """
    if limit == 0:
        return []
    vectors = vector_repository(uow)
    stored = vectors.embedding_spec(namespace)
    if stored is not None and stored != spec:
        raise EmbeddingMismatchError(namespace, stored, spec)
    hits = vectors.vector_search(
        namespace,
        vector,
        spec,
        limit=limit,
        user_id=user_id,
        min_importance=min_importance,
        kind=where.kind,
        tags=where.tags,
    )
    return [Recalled(item_from_entry(hit.entry), hit.score) for hit in hits]


def hybrid_items(
    uow: UnitOfWork,
    namespace: str,
    query: str,
    vector: tuple[float, ...],
    spec: EmbeddingSpec,
    *,
    limit: int,
    min_importance: float | None,
    user_id: str | None,
    language: str | None,
    where: ItemFilter,
) -> list[Recalled]:
    """The ``limit`` best items of the fused text and vector rankings (one unit of work)."""
    if limit == 0:
        return []
    depth = max(limit * HYBRID_DEPTH, HYBRID_MIN_DEPTH)
    by_words = recall_items(
        uow,
        namespace,
        query,
        limit=depth,
        min_importance=min_importance,
        user_id=user_id,
        language=language,
        where=where,
    )
    by_meaning = semantic_items(
        uow,
        namespace,
        vector,
        spec,
        limit=depth,
        min_importance=min_importance,
        user_id=user_id,
        where=where,
    )
    fused = fuse_by([by_words, by_meaning], key=lambda found: found.item.id)
    return [Recalled(found.item, score) for found, score in fused[:limit]]
