"""Re-embedding a namespace with another model: in batches, resumable after a crash.

:func:`reembed` (and :func:`async_reembed`, ``firefly-orm reembed``) gives every
live entry of a namespace that has ``search_text`` a vector of the new
embedder's model, whatever vectors the namespace held before:

1. a sample batch is embedded (before any unit of work opens, like every
   embedding call) and its spec compared with the namespace's: another
   model's vectors are dropped, in the same unit of work that stores the
   sample's new vectors (a namespace never holds two models' vectors);
2. then, batch after batch, the entries still without a vector
   (``uow.entries.unembedded``, oldest first) are read, embedded outside any
   transaction, and their vectors stored in one unit of work each.  An entry
   deleted or whose text changed while its batch was embedded is skipped (a
   changed one comes back in a later batch).

A crash (kill -9) at any point loses nothing: the entries are never written,
and each batch commits whole or not at all.  Run it again with the same model
and it goes on where it stopped (the namespace already holds that model's
vectors, so nothing is dropped); with the model it replaced, or a third one, it
starts over.  Recall by meaning in that namespace finds only the entries
re-embedded so far until it finishes; text recall is unaffected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from firefly_orm.bridges._steps import Operation, Transaction, arun, retrying, run
from firefly_orm.entry import MemoryEntry, validate_namespace
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term._embedding import EmbedderLike, Embedding, as_embedder, vector_repository
from firefly_orm.protocols import MemoryStore, UnitOfWork
from firefly_orm.vector._spec import EmbeddingSpec

__all__ = [
    "DEFAULT_REEMBED_BATCH_SIZE",
    "MAX_REEMBED_BATCH_SIZE",
    "ReembedProgress",
    "ReembedReport",
    "async_reembed",
    "reembed",
]

logger = logging.getLogger("firefly_orm")

#: Entries embedded (and stored) per unit of work by default.
DEFAULT_REEMBED_BATCH_SIZE = 64
#: The largest batch accepted (one unit of work must stay short).
MAX_REEMBED_BATCH_SIZE = 2_048


@dataclass
class ReembedReport:
    """What a re-embedding did.

    Attributes:
        namespace: The namespace re-embedded.
        spec: The spec of its vectors now (``None``: it holds no text to embed).
        previous: The spec of the vectors dropped (``None``: none were).
        total: Live entries with text when it started.
        embedded: Vectors stored by this run.
        batches: Units of work that stored vectors.
    """

    namespace: str
    spec: EmbeddingSpec | None = None
    previous: EmbeddingSpec | None = None
    total: int = 0
    embedded: int = 0
    batches: int = 0


@dataclass(frozen=True)
class ReembedProgress:
    """Handed to ``on_batch`` after each committed batch.

    Attributes:
        done: Entries of the namespace with a vector of the new model now.
        total: Live entries with text when the run started.
        report: The run's report so far.
    """

    done: int
    total: int
    report: ReembedReport


def _census(
    uow: UnitOfWork, namespace: str, batch_size: int
) -> tuple[int, int, list[MemoryEntry], bool]:
    """``(live entries with text, how many wait for a vector, a sample, is it waiting)``.

    The sample is the first batch waiting for a vector, else the first entries.
    """
    texts = [e for e in uow.entries.list(namespace) if e.search_text]
    waiting = vector_repository(uow).unembedded(namespace, limit=max(len(texts), 1))
    if waiting:
        return len(texts), len(waiting), waiting[:batch_size], True
    return len(texts), 0, texts[:batch_size], False


def _next_batch(uow: UnitOfWork, namespace: str, batch_size: int) -> list[MemoryEntry]:
    """The next entries without a vector, oldest first."""
    return vector_repository(uow).unembedded(namespace, limit=batch_size)


def _store(
    uow: UnitOfWork,
    namespace: str,
    embedded: Sequence[tuple[MemoryEntry, tuple[float, ...]]],
    spec: EmbeddingSpec,
    other_model_only: bool,
) -> tuple[int, EmbeddingSpec | None]:
    """Store the vectors of the entries unchanged since they were read (one unit of work).

    Another model's vectors in the namespace are dropped first; with
    ``other_model_only`` (a sample of entries that had vectors), nothing is
    stored when the namespace already holds ``spec``'s.  Returns ``(vectors
    stored, the spec dropped or None)``.
    """
    vectors = vector_repository(uow)
    current = vectors.embedding_spec(namespace)
    dropped = None
    if current is not None and current != spec:
        vectors.drop_vectors(namespace)
        dropped = current
    elif other_model_only:
        return 0, None
    fresh: dict[str, tuple[float, ...]] = {}
    for entry, vector in embedded:
        stored = uow.entries.get(namespace, entry.entry_id)
        if stored is not None and stored.search_text == entry.search_text:
            fresh[entry.entry_id] = vector
    if fresh:
        vectors.save_vectors(namespace, spec, fresh)
    return len(fresh), dropped


def _reembedding(
    namespace: str,
    embedding: Embedding,
    batch_size: int,
    on_batch: Callable[[ReembedProgress], None] | None,
) -> Operation[ReembedReport]:
    report = ReembedReport(namespace)
    report.total, waiting, batch, sample_waits = yield from Transaction.read(
        _census, namespace, batch_size
    )
    done, first = report.total - waiting, True
    while batch:
        spec, vectors = yield from embedding.documents([e.search_text or "" for e in batch])
        pairs = list(zip(batch, vectors, strict=True))
        sample_only = first and not sample_waits
        stored, dropped = yield from retrying(
            Transaction.write(_store, namespace, pairs, spec, sample_only)
        )
        report.spec, first = spec, False
        if dropped is not None:
            report.previous, done = dropped, 0
            logger.info("reembed %r: dropped the vectors of %s", namespace, dropped)
        if stored:
            report.embedded += stored
            report.batches += 1
            done += stored
        batch = yield from Transaction.read(_next_batch, namespace, batch_size)
        if on_batch is not None:
            on_batch(ReembedProgress(min(done, report.total), report.total, report))
    if report.embedded:
        logger.info(
            "reembed %r: %d vector(s) of %s stored in %d batch(es)",
            namespace,
            report.embedded,
            report.spec,
            report.batches,
        )
    return report


def _arguments(namespace: str, embedder: EmbedderLike, batch_size: int) -> Embedding:
    validate_namespace(namespace)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise EntryValidationError("batch_size", f"must be an integer, got {batch_size!r}")
    if not 1 <= batch_size <= MAX_REEMBED_BATCH_SIZE:
        raise EntryValidationError(
            "batch_size", f"must be 1..{MAX_REEMBED_BATCH_SIZE}, got {batch_size}"
        )
    return Embedding(as_embedder(embedder), batch_size=batch_size)


def reembed(
    store: MemoryStore,
    namespace: str,
    embedder: EmbedderLike,
    *,
    batch_size: int = DEFAULT_REEMBED_BATCH_SIZE,
    on_batch: Callable[[ReembedProgress], None] | None = None,
) -> ReembedReport:
    """Give every live entry of ``namespace`` with text a vector of ``embedder``'s model.

    See the module docstring: batches of ``batch_size`` entries, each embedded
    outside any transaction and stored in one unit of work; the vectors of
    another model are dropped; resumable after a crash (run it again).

    Args:
        store: A store that keeps vectors (``SQLiteStore``/``PostgreSQLStore``
            with ``vectors=True``, ``InMemoryStore``, ``MongoDBStore``, ...).
        namespace: The namespace, e.g. a long-term memory's ``"long_term:<user>"``.
        embedder: A pydantic-ai ``Embedder``, ``EmbeddingModel`` or model name.
        batch_size: Entries per embedding call and unit of work (1..2,048).
        on_batch: Called after each committed batch.

    Raises:
        VectorUnavailableError: The store keeps no vectors.
        EntryValidationError: A bad argument (nothing was done).
        EmbeddingMismatchError: Another process stored another model's vectors
            in the namespace meanwhile (the batches committed stay).
    """
    embedding = _arguments(namespace, embedder, batch_size)
    return run(store, _reembedding(namespace, embedding, batch_size, on_batch))


async def async_reembed(
    store: MemoryStore,
    namespace: str,
    embedder: EmbedderLike,
    *,
    batch_size: int = DEFAULT_REEMBED_BATCH_SIZE,
    on_batch: Callable[[ReembedProgress], None] | None = None,
) -> ReembedReport:
    """Async form of :func:`reembed`."""
    embedding = _arguments(namespace, embedder, batch_size)
    return await arun(store, _reembedding(namespace, embedding, batch_size, on_batch))
