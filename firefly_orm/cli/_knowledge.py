"""``firefly-orm knowledge process-pending``: drain the queued knowledge extractions.

Extractions queued by :meth:`KnowledgeExtractor.extract_from_turn
<firefly_orm.knowledge.KnowledgeExtractor.extract_from_turn>` (``defer=True``,
or a model call that failed) wait in ``knowledge_pending``.  This command runs
:meth:`~firefly_orm.knowledge.KnowledgeExtractor.process_pending` on them from
a scheduler (cron, a Kubernetes CronJob): passes of ``--limit`` extractions,
again while a pass emptied a full batch (``--once``: one pass), each
extraction one model call outside any transaction, then one transaction.
``--model`` names a pydantic-ai model (``openai:gpt-4o-mini``; its provider's
credentials come from the environment as pydantic-ai reads them);
``--model-factory MODULE:NAME`` imports a ``Model`` (or a callable returning
one) of your own instead.  It prints what was recorded, what waits for a
retry and what was given up, then what is left in the queue.
"""

from __future__ import annotations

import argparse
from typing import Any

from firefly_orm.cli import _target
from firefly_orm.cli._target import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    _model_or_factory,
    _resolve_target,
    print_summary,
)

__all__: list[str] = []


def _model_kinds() -> tuple[type[Any], ...]:
    from pydantic_ai.models import Model

    return (Model,)


def _model(args: argparse.Namespace) -> Any:
    """The model the arguments name (refused before the database is opened)."""
    return _model_or_factory(
        args.model, args.model_factory, "--model-factory", _model_kinds, "a pydantic-ai Model"
    )


def _cmd_process_pending(args: argparse.Namespace) -> int:
    from firefly_orm.knowledge import KnowledgeExtractor, KnowledgeGraph

    for name in ("limit", "max_attempts"):
        if getattr(args, name) < 1:
            raise CliError(f"--{name.replace('_', '-')} must be at least 1", EXIT_USAGE)
    model = _model(args)
    target = _resolve_target(args)
    recorded = retried = failed = passes = 0
    with _target._store(target, args) as store:
        extractor = KnowledgeExtractor(
            KnowledgeGraph(store, actor=args.actor), model, max_attempts=args.max_attempts
        )
        while True:
            report = extractor.process_pending(limit=args.limit)
            passes += 1
            recorded, failed = recorded + report.recorded, failed + report.failed
            retried += report.retried_later
            if args.once or report.recorded + report.failed < args.limit:
                break
        left = extractor.stats()
    summary = {
        "recorded": recorded,
        "retried_later": retried,
        "failed": failed,
        "passes": passes,
        "queue": left,
    }
    print_summary(
        args,
        summary,
        f"{recorded} extraction(s) recorded, {retried} to retry later, {failed} given up "
        f"({passes} pass(es)); queue: {left.get('pending', 0)} pending, "
        f"{left.get('failed', 0)} failed",
    )
    return EXIT_OK
