"""The facts of vector search every store shares: the embedding spec, a search request, fusion.

Core floor: this module imports nothing above :mod:`firefly_orm.entry`,
:mod:`firefly_orm._layout` and :mod:`firefly_orm._search`, so the contracts
(:mod:`firefly_orm.protocols`), the stores and the layers all use it.

Stored vectors
    Each vector belongs to one entry (by ``entry_id``) of one namespace and
    records the :class:`EmbeddingSpec` (model name and dimensions) that made
    it.  One namespace holds vectors of one spec: a write of another spec is
    refused with :class:`EmbeddingMismatchError` and writes nothing.  Deleting
    an entry (``delete``, expiry cleanup, ``erase_user``, ``clear``) deletes its
    vector in the same transaction.

Search
    ``uow.entries.vector_search(namespace, vector, spec, **options)`` returns
    :class:`~firefly_orm._search.SearchHit` ``(entry, score)`` pairs of live
    entries, ``score`` the cosine similarity (``1 - cosine distance``, in
    ``[-1, 1]``, higher is better), best first (score, then importance, then
    newest), at most ``limit``.  The filters (:class:`VectorSearchOptions`:
    user, minimum importance, long-term ``kind`` and ``tags``, expiry) are
    applied inside the scan, before the cut, so a filtered search never loses
    hits to the limit.

Fusion
    :func:`reciprocal_rank_fusion` merges ranked lists (full-text and vector)
    by reciprocal rank: an item's fused score is ``sum(1 / (k + rank))`` over
    the lists it appears in (rank counted from 1), ``k`` :data:`RRF_K`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar

from firefly_orm._layout import ITEM_DEFAULT_KIND, ITEM_KIND_FIELD, ITEM_TAGS_FIELD
from firefly_orm._search import check_min_importance
from firefly_orm.entry import MemoryEntry, validate_namespace, validate_user_id
from firefly_orm.errors import EntryValidationError, StoreError

__all__ = [
    "DEFAULT_EF_SEARCH",
    "EF_SEARCH_PER_HIT",
    "MAX_DIMENSIONS",
    "MAX_EF_SEARCH",
    "MAX_MODEL_NAME_LENGTH",
    "RRF_K",
    "VECTOR_TABLE",
    "VECTOR_VERSION_TABLE",
    "HNSW_DIMENSIONS",
    "EmbeddingMismatchError",
    "EmbeddingSpec",
    "ModelVector",
    "VectorRequest",
    "VectorSearchOptions",
    "check_vector",
    "fuse_by",
    "reciprocal_rank_fusion",
]

#: The SQL table of stored vectors (one row per entry; see the vector migrations).
VECTOR_TABLE = "memory_vectors"
#: The version table of the vector migrations (their own history, beside the main one).
VECTOR_VERSION_TABLE = "firefly_orm_vector_alembic_version"
#: PostgreSQL: the vector sizes with an HNSW index (cosine) on ``memory_vectors``, one
#: partial index per size (vector migration v002); vectors of other sizes are
#: searched by the exact scan only.  A later revision indexing more sizes extends it.
HNSW_DIMENSIONS = (256, 384, 512, 768, 1024, 1536)
#: PostgreSQL: pgvector's ``hnsw.ef_search`` (the candidates an HNSW walk keeps) on
#: each connection of a store with vectors; pgvector's own default is 40.  Bench W8
#: (256 dimensions, limit 10, 100k items, recall@10 against exact search): 40 finds
#: 0.88-0.91 of the exact 10 nearest, 100 0.96, 160 0.98 (see ``bench/README.md``).
DEFAULT_EF_SEARCH = 160
#: A search of more than ``DEFAULT_EF_SEARCH / EF_SEARCH_PER_HIT`` hits keeps this many
#: candidates per hit (``hnsw.ef_search`` set for that search alone)...
EF_SEARCH_PER_HIT = 4
#: ...up to pgvector's largest ``hnsw.ef_search``.
MAX_EF_SEARCH = 1000
#: The most dimensions a stored vector may have (pgvector's ``vector`` type stores up to 16,000).
MAX_DIMENSIONS = 16_000
#: The longest embedding model name recorded.
MAX_MODEL_NAME_LENGTH = 200
#: The ``k`` of reciprocal rank fusion (the constant of Cormack et al., 2009).
RRF_K = 60

K = TypeVar("K", bound=Hashable)


class EmbeddingMismatchError(StoreError):
    """A namespace holds vectors of one embedding model; another model's were refused.

    Nothing was written.  ``stored`` is the namespace's spec, ``given`` the
    refused one.  Re-embed the namespace (``firefly-orm reembed``) to change
    models.
    """

    def __init__(self, namespace: str, stored: EmbeddingSpec, given: EmbeddingSpec) -> None:
        self.namespace = namespace
        self.stored = stored
        self.given = given
        super().__init__(
            f"namespace {namespace!r} holds vectors of {stored}; refusing vectors of {given} "
            "(one embedding model per namespace: re-embed the namespace to change models, "
            "`firefly-orm reembed`)"
        )


@dataclass(frozen=True)
class EmbeddingSpec:
    """The embedding model that made a vector: its name and its dimensions.

    Attributes:
        model: The model's name as ``provider:model`` (e.g.
            ``"openai:text-embedding-3-small"``), at most
            :data:`MAX_MODEL_NAME_LENGTH` characters.
        dimensions: How many numbers each vector holds (1 to :data:`MAX_DIMENSIONS`).
    """

    model: str
    dimensions: int

    def __post_init__(self) -> None:
        if (
            not isinstance(self.model, str)
            or not self.model.strip()
            or len(self.model) > MAX_MODEL_NAME_LENGTH
            or "\x00" in self.model
        ):
            raise EntryValidationError(
                "model",
                f"must be a non-blank string of at most {MAX_MODEL_NAME_LENGTH} characters "
                f"without NUL, got {self.model!r}",
            )
        if (
            isinstance(self.dimensions, bool)
            or not isinstance(self.dimensions, int)
            or not 1 <= self.dimensions <= MAX_DIMENSIONS
        ):
            raise EntryValidationError(
                "dimensions",
                f"must be an integer from 1 to {MAX_DIMENSIONS}, got {self.dimensions!r}",
            )

    def __str__(self) -> str:
        return f"{self.model} ({self.dimensions} dimensions)"


@dataclass(frozen=True)
class ModelVector:
    """One vector and the spec of the model that made it (a turn's, an item's or a
    query's), made before a unit of work opens."""

    spec: EmbeddingSpec
    vector: tuple[float, ...]


def check_vector(vector: Any, spec: EmbeddingSpec, field: str = "vector") -> tuple[float, ...]:
    """``vector`` as a tuple of floats of ``spec.dimensions`` finite numbers, not all zero.

    Raises:
        EntryValidationError: Not a sequence of numbers, the wrong length, a
            NaN or infinity, or the zero vector (it has no direction).
    """
    if isinstance(vector, str | bytes) or not isinstance(vector, Sequence):
        raise EntryValidationError(
            field, f"must be a sequence of numbers, got {type(vector).__name__}"
        )
    if len(vector) != spec.dimensions:
        raise EntryValidationError(
            field, f"has {len(vector)} dimensions, {spec.model} makes {spec.dimensions}"
        )
    if _FLOATS.issuperset(map(type, vector)):  # the common case, checked at C speed
        values = tuple(map(float, vector))
        if not all(map(math.isfinite, values)):
            bad = next(v for v in values if not math.isfinite(v))
            raise EntryValidationError(field, f"must hold finite numbers, got {bad!r}")
    else:
        values = _checked_numbers(vector, field)
    if not any(values):
        raise EntryValidationError(field, "is the zero vector (it has no direction to compare)")
    return values


#: The element types :func:`check_vector` takes without looking at each number.
_FLOATS = frozenset({float, int})


def _checked_numbers(vector: Sequence[Any], field: str) -> tuple[float, ...]:
    values: list[float] = []
    for number in vector:
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise EntryValidationError(field, f"must hold numbers, got {type(number).__name__}")
        value = float(number)
        if not math.isfinite(value):
            raise EntryValidationError(field, f"must hold finite numbers, got {value!r}")
        values.append(value)
    return tuple(values)


class VectorSearchOptions(TypedDict, total=False):
    """The options of a vector search (``uow.entries.vector_search``).

    Attributes:
        limit: At most this many results, the nearest (default 10; ``None``:
            every entry with a vector; ``0``: none).
        user_id: Only entries of this user (``None``: every entry).
        min_importance: Only entries with at least this importance (``None``: any).
        kind: Only long-term items of this kind (``content["kind"]``, missing
            counts as ``"semantic"``; ``None``: any).
        tags: Only long-term items holding every one of these tags
            (``content["tags"]``; empty: any).
    """

    limit: int | None
    user_id: str | None
    min_importance: float | None
    kind: str | None
    tags: Sequence[str]


@dataclass(frozen=True)
class VectorRequest:
    """A validated vector search: what every store's ``vector_search`` works from."""

    namespace: str
    vector: tuple[float, ...]
    spec: EmbeddingSpec
    limit: int | None = 10
    user_id: str | None = None
    min_importance: float | None = None
    kind: str | None = None
    tags: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        *,
        limit: int | None = 10,
        user_id: str | None = None,
        min_importance: float | None = None,
        kind: str | None = None,
        tags: Sequence[str] = (),
    ) -> VectorRequest:
        """Validate the arguments of a vector search (raise :class:`EntryValidationError`)."""
        validate_namespace(namespace)
        if not isinstance(spec, EmbeddingSpec):
            raise EntryValidationError(
                "spec", f"must be an EmbeddingSpec, got {type(spec).__name__}"
            )
        checked = check_vector(vector, spec)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise EntryValidationError(
                "limit", f"must be a non-negative integer or None, got {limit!r}"
            )
        if user_id is not None:
            validate_user_id(user_id)
        floor = check_min_importance(min_importance)
        if kind is not None and (not isinstance(kind, str) or "\x00" in kind):
            raise EntryValidationError("kind", f"must be a string or None, got {kind!r}")
        if isinstance(tags, str) or not all(isinstance(t, str) and "\x00" not in t for t in tags):
            raise EntryValidationError("tags", "must be a list of strings without NUL")
        return cls(
            namespace=namespace,
            vector=checked,
            spec=spec,
            limit=limit,
            user_id=user_id,
            min_importance=floor,
            kind=kind,
            tags=tuple(dict.fromkeys(tags)),
        )

    @property
    def finds_nothing(self) -> bool:
        """True when the answer is ``[]`` without asking the store (``limit=0``)."""
        return self.limit == 0

    def accepts(self, entry: MemoryEntry) -> bool:
        """Whether ``entry`` passes the filters: live, user, importance, kind, tags."""
        if entry.is_expired:
            return False
        if self.user_id is not None and entry.user_id != self.user_id:
            return False
        if self.min_importance is not None and entry.importance < self.min_importance:
            return False
        if self.kind is None and not self.tags:
            return True
        content = entry.content if isinstance(entry.content, dict) else {}
        kind = content.get(ITEM_KIND_FIELD) or ITEM_DEFAULT_KIND
        if self.kind is not None and kind != self.kind:
            return False
        tags = content.get(ITEM_TAGS_FIELD)
        held = tags if isinstance(tags, list) else []
        return all(tag in held for tag in self.tags)

    def similarity(self, vector: Sequence[float]) -> float:
        """The cosine similarity of the query vector and ``vector`` (the score of a hit)."""
        dot = sum(a * b for a, b in zip(self.vector, vector, strict=True))
        norm = math.sqrt(sum(a * a for a in self.vector)) * math.sqrt(sum(b * b for b in vector))
        return dot / norm if norm else 0.0

    def options(self, *, limit: int | None) -> VectorSearchOptions:
        """The keyword arguments that repeat this search with another ``limit``."""
        return {
            "limit": limit,
            "user_id": self.user_id,
            "min_importance": self.min_importance,
            "kind": self.kind,
            "tags": self.tags,
        }


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[K]], *, k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[K, float]]:
    """Fuse ranked lists of keys by reciprocal rank: ``[(key, fused score)]``, best first.

    A key's score is ``sum(weight / (k + rank))`` over the lists holding it
    (``rank`` from 1, a key's first place in a list counts); keys of equal
    score keep the order in which they were first met (the first list first).

    Args:
        rankings: Each list best first.
        k: Damps the weight of the top ranks (larger: flatter); at least 1.
        weights: One per list (default 1.0 each).

    Raises:
        EntryValidationError: ``k`` below 1, or ``weights`` of another length
            than ``rankings`` or not finite and non-negative.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise EntryValidationError("k", f"must be an integer of at least 1, got {k!r}")
    lists = [list(ranking) for ranking in rankings]
    if weights is None:
        factors = [1.0] * len(lists)
    else:
        factors = [float(w) for w in weights]
        if len(factors) != len(lists) or not all(math.isfinite(w) and w >= 0 for w in factors):
            raise EntryValidationError(
                "weights", f"must be {len(lists)} finite non-negative numbers, got {weights!r}"
            )
    scores: dict[K, float] = {}
    for ranking, weight in zip(lists, factors, strict=True):
        seen: set[K] = set()
        for rank, key in enumerate(ranking, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], order[pair[0]]))


def fuse_by(
    rankings: Iterable[Sequence[Any]], key: Callable[[Any], K], *, k: int = RRF_K
) -> list[tuple[Any, float]]:
    """:func:`reciprocal_rank_fusion` over lists of objects identified by ``key(obj)``.

    Returns ``[(object, fused score)]`` best first; the object kept for a key
    is the first one met.
    """
    lists = [list(ranking) for ranking in rankings]
    first: dict[K, Any] = {}
    for ranking in lists:
        for obj in ranking:
            first.setdefault(key(obj), obj)
    fused = reciprocal_rank_fusion([[key(obj) for obj in ranking] for ranking in lists], k=k)
    return [(first[name], score) for name, score in fused]
