"""Search by meaning for :class:`~firefly_orm.integrations.langgraph.FireflyStore`.

LangGraph's ``index=`` configuration (``{"dims": int, "embed": ..., "fields":
[...]}``) checked once, and its embedder called as steps of the store's
operations (:class:`~firefly_orm.bridges._steps.CallOut`), before the unit of
work opens: no transaction is held across the embedding call.

``embed`` may be:

* what LangGraph's own stores take (``langgraph.store.base.embed.ensure_embeddings``):
  a LangChain ``Embeddings``, a sync or async function from a list of texts to
  a list of vectors, or a ``"provider:model"`` string (LangChain's
  ``init_embeddings``; needs ``langchain`` and the provider's package);
* a pydantic-ai ``Embedder`` or ``EmbeddingModel`` (what firefly_orm's own
  layers take; ``pydantic-ai`` extra).

The spec recorded with the vectors (:class:`~firefly_orm.vector.EmbeddingSpec`)
is ``dims`` and a model name: the string given, ``"langchain:<model>"`` for
an ``Embeddings`` with a ``model`` attribute, else ``"langgraph:<name of the
function or class>"``; for a pydantic-ai embedder, ``"<provider>:<model>"`` as
its results name them.  A namespace holds vectors of one spec: changing the
model of a store with vectors is refused (``EmbeddingMismatchError``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from langchain_core.embeddings import Embeddings
from langgraph.store.base.embed import EmbeddingsLambda, ensure_embeddings

from firefly_orm.bridges._steps import CallOut, Operation
from firefly_orm.errors import EntryValidationError, StoreError
from firefly_orm.long_term._embedding import Embedding
from firefly_orm.vector._spec import MAX_DIMENSIONS, EmbeddingSpec, check_vector

__all__ = ["QUERY_MODES", "QueryMode", "SearchIndex", "search_index"]

#: How a search with ``query`` ranks when the store has an ``index``.
QueryMode = Literal["semantic", "hybrid"]
#: The query modes.
QUERY_MODES: tuple[QueryMode, ...] = get_args(QueryMode)

Vector = tuple[float, ...]


@dataclass(frozen=True)
class SearchIndex:
    """A checked ``index=`` configuration: the embedder, the fields, the query mode."""

    dims: int
    fields: list[str] | None
    mode: QueryMode
    embeddings: Embeddings | None = None
    embedding: Embedding | None = None
    model: str = ""

    def documents(self, texts: Sequence[str]) -> Operation[tuple[EmbeddingSpec, list[Vector]]]:
        """The vectors of ``texts``, in order (one embedding call), and their spec.

        Raises:
            StoreError: The embedder returned another number of vectors.
            EntryValidationError: A vector of another size than ``dims``, not finite or zero.
        """
        if self.embedding is not None:
            spec, vectors = yield from self.embedding.documents(texts)
            return self._checked_spec(spec), vectors
        assert self.embeddings is not None
        fn, afn = _methods(self.embeddings, "documents")
        made = yield from CallOut(
            fn, (list(texts),), async_fn=afn, what="the embedder", use_instead="abatch"
        )
        spec = EmbeddingSpec(self.model, self.dims)
        if not isinstance(made, Sequence) or len(made) != len(texts):
            raise StoreError(f"the embedder returned no list of {len(texts)} vector(s)")
        return spec, [check_vector(v, spec, "embedding") for v in made]

    def query(self, text: str) -> Operation[tuple[EmbeddingSpec, Vector]]:
        """The vector of the query ``text`` and its spec."""
        if self.embedding is not None:
            made = yield from self.embedding.query(text)
            return self._checked_spec(made.spec), made.vector
        assert self.embeddings is not None
        fn, afn = _methods(self.embeddings, "query")
        made = yield from CallOut(fn, (text,), async_fn=afn, what="the embedder")
        spec = EmbeddingSpec(self.model, self.dims)
        return spec, check_vector(made, spec, "embedding")

    def _checked_spec(self, spec: EmbeddingSpec) -> EmbeddingSpec:
        if spec.dimensions != self.dims:
            raise EntryValidationError(
                "embedding", f"{spec.dimensions} dimensions, the index says dims={self.dims}"
            )
        return spec


def _methods(embeddings: Embeddings, kind: str) -> tuple[Any, Any]:
    """The sync and async methods to call (an async function wrapped by LangGraph: it alone)."""
    if isinstance(embeddings, EmbeddingsLambda) and getattr(embeddings, "afunc", None):
        afunc: Any = embeddings.afunc
        if kind == "documents":
            return afunc, afunc

        async def one(text: str) -> Any:
            return (await afunc([text]))[0]

        return one, one
    if kind == "documents":
        return embeddings.embed_documents, embeddings.aembed_documents
    return embeddings.embed_query, embeddings.aembed_query


def search_index(config: Any, mode: Any) -> SearchIndex | None:
    """``config`` (LangGraph's ``IndexConfig``) checked, or ``None`` without one.

    Raises:
        EntryValidationError: A bad ``dims``, ``fields`` or ``query_mode``.
        TypeError: ``config`` is no mapping, or ``embed`` is missing.
    """
    if mode not in QUERY_MODES:
        raise EntryValidationError("query_mode", f"must be one of {QUERY_MODES}, got {mode!r}")
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise TypeError("index must be a dict: {'dims': int, 'embed': ..., 'fields': [...]}")
    dims = config.get("dims")
    if isinstance(dims, bool) or not isinstance(dims, int) or not 0 < dims <= MAX_DIMENSIONS:
        raise EntryValidationError("dims", f"must be 1 to {MAX_DIMENSIONS}, got {dims!r}")
    fields = config.get("fields")
    if fields is not None and (
        isinstance(fields, str)
        or not isinstance(fields, Sequence)
        or not all(isinstance(f, str) and f for f in fields)
    ):
        raise EntryValidationError("fields", "must be a list of field paths")
    embed = config.get("embed")
    if embed is None:
        raise TypeError("index needs 'embed': an Embeddings, a function or a model name")
    listed = None if fields is None else list(fields)
    pydantic = _pydantic_embedding(embed)
    if pydantic is not None:
        return SearchIndex(dims, listed, mode, embedding=pydantic)
    return SearchIndex(dims, listed, mode, embeddings=ensure_embeddings(embed), model=_name(embed))


def _pydantic_embedding(embed: Any) -> Embedding | None:
    """``embed`` as an :class:`Embedding` when it is a pydantic-ai embedder or model."""
    try:
        from pydantic_ai.embeddings import Embedder, EmbeddingModel
    except ImportError:
        return None
    if isinstance(embed, EmbeddingModel):
        return Embedding(Embedder(embed))
    if isinstance(embed, Embedder):
        return Embedding(embed)
    return None


def _name(embed: Any) -> str:
    if isinstance(embed, str):
        return embed
    model = getattr(embed, "model", None)
    if isinstance(model, str) and model:
        return f"langchain:{model}"[:200]
    name = getattr(embed, "__qualname__", None) or type(embed).__qualname__
    return f"langgraph:{name}"[:200]
