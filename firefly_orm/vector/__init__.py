"""Semantic recall: vectors stored beside the entries, searched by meaning, fused with text.

What is here (the rules every store follows are in :mod:`firefly_orm.vector._spec`):

* :class:`EmbeddingSpec`: the embedding model that made a vector (name and
  dimensions); one per namespace, another is refused with
  :class:`EmbeddingMismatchError`;
* :class:`VectorRequest` / :class:`VectorSearchOptions`: a vector search and
  its filters (user, importance, kind, tags, expiry), applied inside the scan;
* :func:`reciprocal_rank_fusion`: how hybrid recall fuses the full-text and
  the vector rankings;
* :class:`VectorUnavailableError`: vector search cannot run here (a missing
  ``vector`` extra, a Python without SQLite extension loading, a PostgreSQL
  server without pgvector); the message says what to install or enable;
* :func:`sqlite_vec_module` / :func:`load_sqlite_vec`: a SQLite DB-API module
  that loads ``sqlite-vec``, and the loading, for an engine of your own.

The stores implement :class:`firefly_orm.protocols.VectorRepository`;
:class:`~firefly_orm.long_term.LongTermMemory` (``embedder=``) embeds what it
remembers and recalls in ``"text"``, ``"semantic"`` or ``"hybrid"`` mode.  The
guide: ``docs/guide/memory/semantic-recall.md``.
"""

from firefly_orm.vector._errors import VectorUnavailableError
from firefly_orm.vector._spec import (
    MAX_DIMENSIONS,
    RRF_K,
    EmbeddingMismatchError,
    EmbeddingSpec,
    VectorRequest,
    VectorSearchOptions,
    check_vector,
    fuse_by,
    reciprocal_rank_fusion,
)
from firefly_orm.vector._sqlite_vec import load_sqlite_vec, sqlite_vec_module

__all__ = [
    "MAX_DIMENSIONS",
    "RRF_K",
    "EmbeddingMismatchError",
    "EmbeddingSpec",
    "VectorRequest",
    "VectorSearchOptions",
    "VectorUnavailableError",
    "check_vector",
    "fuse_by",
    "load_sqlite_vec",
    "reciprocal_rank_fusion",
    "sqlite_vec_module",
]
