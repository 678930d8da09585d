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
import json
from typing import Any

from firefly_orm.cli import _target
from firefly_orm.cli._target import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    _model_or_factory,
    _resolve_target,
)

__all__ = ["add_knowledge"]


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
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(
            f"{recorded} extraction(s) recorded, {retried} to retry later, {failed} given up "
            f"({passes} pass(es)); queue: {left.get('pending', 0)} pending, "
            f"{left.get('failed', 0)} failed"
        )
    return EXIT_OK


def add_knowledge(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Register ``knowledge`` (``process-pending``) on the ``firefly-orm`` parser."""
    p = sub.add_parser("knowledge", help="the knowledge graph's queued extractions")
    actions = p.add_subparsers(dest="knowledge_command", required=True, metavar="ACTION")
    p = actions.add_parser(
        "process-pending",
        help="retry the queued extractions with a model (one transaction each)",
        parents=[common],
    )
    p.set_defaults(func=_cmd_process_pending)
    p.add_argument("--model", help="a pydantic-ai model, e.g. openai:gpt-4o-mini")
    p.add_argument(
        "--model-factory",
        metavar="MODULE:NAME",
        help="import a pydantic-ai Model (or a callable returning one) instead",
    )
    p.add_argument("--limit", type=int, default=50, help="extractions per pass (default 50)")
    p.add_argument("--once", action="store_true", help="one pass only (default: until drained)")
    p.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        help="model calls an extraction gets in all before it is marked failed (default 3)",
    )
    p.add_argument("--actor", default="cli", help="who the history names (default cli)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
