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
from firefly_orm.conversation._usage import GROUPINGS, USAGE_FIELDS

__all__ = ["add_usage"]


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


def add_usage(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Register ``usage`` on the ``firefly-orm`` parser's sub-commands."""
    p = sub.add_parser(
        "usage",
        help="the turns' token usage summed per conversation, user, day or month",
        parents=[common],
    )
    p.set_defaults(func=_cmd_usage)
    p.add_argument("--user", help="every conversation of this user")
    p.add_argument("--conversation", help="this conversation (live and archived turns)")
    p.add_argument("--by", choices=GROUPINGS, help="one row per group (default: one total)")
    p.add_argument("--since", type=_moment, help="turns stored at or after (ISO; UTC by default)")
    p.add_argument("--until", type=_moment, help="turns stored before (ISO; UTC by default)")
    p.add_argument("--json", action="store_true", help="print JSON")
