"""Embedding texts for long-term memory: pydantic-ai's ``Embedder``, called before any unit of work.

A memory with an embedder embeds what it remembers (``embed_documents``) and
what it recalls by (``embed_query``) as *steps* of its operations
(:class:`~firefly_orm.bridges._steps.CallOut`), before the transaction that
writes or reads opens: no transaction or row lock is ever held across the
network call.  pydantic-ai's ``Embedder`` is async; the async forms await it,
the sync forms run it on the shared loop thread of :mod:`firefly_orm.bridges`
(from sync code without a running loop; inside a loop use the ``async_``
forms).  Texts go in batches of :attr:`Embedding.batch_size`.

The spec recorded with each vector (:class:`~firefly_orm.vector.EmbeddingSpec`)
is ``"<provider>:<model>"`` as the embedding result names them, and the
length of the vectors returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

from firefly_orm.bridges._steps import CallOut, Operation
from firefly_orm.conversation._search import vector_entries
from firefly_orm.errors import EntryValidationError, MissingExtraError, StoreError
from firefly_orm.protocols import UnitOfWork, VectorRepository
from firefly_orm.vector._spec import EmbeddingSpec, ModelVector, check_vector

__all__ = ["DEFAULT_BATCH_SIZE", "Embedded", "Embedding", "as_embedder", "vector_repository"]

#: How many texts one embedding request carries at most.
DEFAULT_BATCH_SIZE = 64

if TYPE_CHECKING:  # pydantic-ai is an extra: imported when an embedder is given
    from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingResult

    #: An embedder as the memories accept it.
    EmbedderLike: TypeAlias = Embedder | EmbeddingModel | str
else:  # at run time the name must import without pydantic-ai
    EmbedderLike = Any


def _embeddings() -> ModuleType:
    """``pydantic_ai.embeddings``, or the error naming the extra to install."""
    try:
        import pydantic_ai.embeddings as embeddings
    except ImportError as exc:
        raise MissingExtraError("recall by meaning (embedder=)", "pydantic-ai", exc.name) from exc
    return embeddings


def as_embedder(value: Any) -> Embedder:
    """``value`` as a pydantic-ai ``Embedder``: an ``Embedder``, an ``EmbeddingModel``,
    or a model name such as ``"openai:text-embedding-3-small"`` (resolved on first use).

    Raises:
        EntryValidationError: Anything else.
        MissingExtraError: pydantic-ai is not installed.
    """
    embeddings = _embeddings()
    if isinstance(value, embeddings.Embedder):
        given: Embedder = value
        return given
    if isinstance(value, embeddings.EmbeddingModel | str) and (
        not isinstance(value, str) or value.strip()
    ):
        embedder: Embedder = embeddings.Embedder(value)
        return embedder
    raise EntryValidationError(
        "embedder",
        "must be a pydantic_ai Embedder, an EmbeddingModel or a model name such as "
        f"'openai:text-embedding-3-small', got {type(value).__name__}",
    )


def vector_repository(uow: UnitOfWork) -> VectorRepository:
    """``uow.entries`` as a :class:`~firefly_orm.protocols.VectorRepository`.

    Raises:
        VectorUnavailableError: The store keeps no vectors.
    """
    return vector_entries(uow, "recall with mode='text'")


@dataclass(frozen=True)
class Embedded:
    """Vectors made by one model, one per entry of a write, in the order of its entries."""

    spec: EmbeddingSpec
    vectors: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class Embedding:
    """An embedder and how a memory calls it (batches, checks, the spec it records)."""

    embedder: Embedder
    batch_size: int = DEFAULT_BATCH_SIZE

    def _call(self, texts: Sequence[str], input_type: str) -> CallOut[EmbeddingResult]:
        method = (
            self.embedder.embed_query if input_type == "query" else self.embedder.embed_documents
        )
        return CallOut(
            method,
            (list(texts),),
            what="the embedder (pydantic-ai's Embedder is async)",
            use_instead="the async_ form of this method",
        )

    @staticmethod
    def _spec(result: EmbeddingResult, expected: int) -> EmbeddingSpec:
        if len(result.embeddings) != expected:
            raise StoreError(
                f"the embedder returned {len(result.embeddings)} vector(s) for {expected} text(s)"
            )
        model = f"{result.provider_name}:{result.model_name}"
        return EmbeddingSpec(model, len(result.embeddings[0]))

    def documents(
        self, texts: Sequence[str]
    ) -> Operation[tuple[EmbeddingSpec, list[tuple[float, ...]]]]:
        """The vectors of ``texts`` (documents), in order, and their spec; batched.

        Raises:
            StoreError: The embedder's answer does not fit (count, or a batch of
                another model or size than the first).
            EntryValidationError: A vector is not finite or is all zeros.
        """
        spec: EmbeddingSpec | None = None
        vectors: list[tuple[float, ...]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            result = yield from self._call(batch, "document")
            found = self._spec(result, len(batch))
            if spec is not None and found != spec:
                raise StoreError(f"the embedder changed model mid-way: {spec}, then {found}")
            spec = found
            vectors.extend(check_vector(v, spec, "embedding") for v in result.embeddings)
        if spec is None:
            raise EntryValidationError("texts", "nothing to embed")
        return spec, vectors

    def query(self, text: str) -> Operation[ModelVector]:
        """The vector of the query ``text`` and the spec of the model that made it."""
        result = yield from self._call([text], "query")
        spec = self._spec(result, 1)
        return ModelVector(spec, check_vector(result.embeddings[0], spec, "embedding"))

    def entries(self, texts: Sequence[str]) -> Operation[Embedded]:
        """:meth:`documents` of the texts of a write's entries, as :class:`Embedded`."""
        spec, vectors = yield from self.documents(texts)
        return Embedded(spec, tuple(vectors))
