"""``firefly-orm usage``: the turns' usage summed per conversation, user, day or month.

A report over :meth:`~firefly_orm.conversation.ConversationMemory.usage_totals`
(one aggregate query over an index, from the stored turns: nothing else is
kept that could disagree with them).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from firefly_orm.cli import _target
from firefly_orm.cli._target import EXIT_OK, EXIT_USAGE, CliError, _resolve_target
from firefly_orm.conversation import ConversationMemory
from firefly_orm.conversation._usage import USAGE_FIELDS

__all__: list[str] = []


def _moment(text: str) -> datetime:
    """``--since`` / ``--until``: an ISO date or date-time, UTC unless it names an offset."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO date or date-time: {text!r}") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _cmd_usage(args: argparse.Namespace) -> int:
    if (args.user is None) == (args.conversation is None):
        raise CliError("give --user or --conversation", EXIT_USAGE)
    target = _resolve_target(args)
    with _target._store(target, args) as store:
        memory = ConversationMemory(store=store)
        totals = memory.usage_totals(
            args.conversation, user_id=args.user, by=args.by, since=args.since, until=args.until
        )
    if args.json:
        print(json.dumps([t.to_dict() for t in totals], indent=2))
        return EXIT_OK
    header = [args.by or "total", "turns", *USAGE_FIELDS]
    rows = [
        [t.group or "all", str(t.turns), *(str(v) for v in t.counters().values())] for t in totals
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                cell.rjust(w) if n else cell.ljust(w)
                for n, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return EXIT_OK
