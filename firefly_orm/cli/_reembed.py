"""``firefly-orm reembed`` (internal): a namespace's vectors made again by another embedding model.

``--model`` names a pydantic-ai embedding model (``openai:text-embedding-3-small``,
``sentence-transformers:all-MiniLM-L6-v2``, ...; its provider's credentials
come from the environment as pydantic-ai reads them); ``--embedder-factory
MODULE:NAME`` imports an ``EmbeddingModel`` or ``Embedder`` (or a callable
returning one) of your own instead.  Each ``--namespace`` is re-embedded by
:func:`firefly_orm.long_term.reembed`: ``--batch-size`` entries per embedding
call and transaction, the old model's vectors dropped, resumable (run the same
command again after an interruption).  The database must be migrated with
``firefly-orm migrate --vectors``.  A progress bar per namespace is drawn on
stderr when it is a terminal (or with ``--progress``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from firefly_orm.cli import _target
from firefly_orm.cli._target import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Progress,
    _model_or_factory,
    _resolve_target,
    print_summary,
)

if TYPE_CHECKING:
    from firefly_orm.long_term import ReembedProgress

__all__: list[str] = []


def _embedder_kinds() -> tuple[type[Any], ...]:
    from pydantic_ai.embeddings import Embedder, EmbeddingModel

    return (Embedder, EmbeddingModel)


def _embedder(args: argparse.Namespace) -> Any:
    """The embedder the arguments name (refused before the database is opened)."""
    return _model_or_factory(
        args.model,
        args.embedder_factory,
        "--embedder-factory",
        _embedder_kinds,
        "an EmbeddingModel or Embedder",
    )


def _progress(namespace: str, enabled: bool) -> Callable[[ReembedProgress], None]:
    """A progress bar of one namespace's re-embedding (drawn once its size is known)."""
    bar: list[Progress] = []

    def on_batch(step: ReembedProgress) -> None:
        if not bar:
            bar.append(Progress(step.total, f"reembed {namespace}", enabled=enabled))
        bar[0].advance(step.done - bar[0].done)

    return on_batch


def _cmd_reembed(args: argparse.Namespace) -> int:
    from firefly_orm.long_term import reembed

    if isinstance(args.batch_size, int) and args.batch_size < 1:
        raise CliError("--batch-size must be at least 1", EXIT_USAGE)
    embedder = _embedder(args)
    target = _resolve_target(args)
    reports = []
    with _target._store(target, args, vectors=True) as store:
        for namespace in args.namespaces:
            reports.append(
                reembed(
                    store,
                    namespace,
                    embedder,
                    batch_size=args.batch_size,
                    on_batch=_progress(namespace, args.progress),
                )
            )
    for report in reports:
        summary = {
            "namespace": report.namespace,
            "model": None if report.spec is None else report.spec.model,
            "dimensions": None if report.spec is None else report.spec.dimensions,
            "previous_model": None if report.previous is None else report.previous.model,
            "total": report.total,
            "embedded": report.embedded,
            "batches": report.batches,
        }
        dropped = "" if report.previous is None else f", vectors of {report.previous} dropped"
        print_summary(
            args,
            summary,
            f"{report.namespace}: {report.embedded} vector(s) of {report.spec or 'no model'} "
            f"stored in {report.batches} batch(es) ({report.total} entries with text{dropped})",
        )
    return EXIT_OK
