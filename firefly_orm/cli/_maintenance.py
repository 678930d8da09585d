"""The maintenance commands (internal): stats and cleanup-expired."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

import sqlalchemy as sa

from firefly_orm.cli import _target
from firefly_orm.cli._target import EXIT_OK, Progress, _resolve_target
from firefly_orm.conversation import conversation_namespace
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    utcnow,
)

__all__ = [
    "CONVERSATION_PREFIX",
    "collect_stats",
]

#: Namespace prefix of every conversation (what ``stats`` counts as one).
CONVERSATION_PREFIX = conversation_namespace("")


def _table() -> sa.Table:
    table: sa.Table = MemoryEntry.__table__  # type: ignore[attr-defined]
    return table


def collect_stats(store: Any) -> dict[str, Any]:
    """Counts for ``firefly-orm stats`` over a SQL store (stored rows, expired included).

    Returns:
        ``{"total", "expired", "conversations", "by_scope": {scope: n},
        "by_prefix": {namespace text before the first ':': n},
        "long_term": {"entries", "expired", "by_namespace": {namespace: n}}}``;
        ``long_term`` counts the entries of scope ``LONG_TERM`` (long-term
        memory items and any other entry of that scope).
    """
    table = _table()
    c = table.c
    now = utcnow()
    long_term = c.scope == MemoryScope.LONG_TERM.value
    with store.engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        expired = conn.execute(
            sa.select(sa.func.count()).select_from(table).where(c.expires_at <= now)
        ).scalar_one()
        long_term_expired = conn.execute(
            sa.select(sa.func.count()).select_from(table).where(long_term, c.expires_at <= now)
        ).scalar_one()
        long_term_by_namespace = {
            str(namespace): int(n)
            for namespace, n in conn.execute(
                sa.select(c.namespace, sa.func.count()).where(long_term).group_by(c.namespace)
            )
        }
        by_scope = {
            str(scope): int(n)
            for scope, n in conn.execute(sa.select(c.scope, sa.func.count()).group_by(c.scope))
        }
        by_prefix: Counter[str] = Counter()
        conversations = 0
        for namespace, n in conn.execute(
            sa.select(c.namespace, sa.func.count()).group_by(c.namespace)
        ):
            by_prefix[str(namespace).split(":", 1)[0]] += int(n)
            if str(namespace).startswith(CONVERSATION_PREFIX):
                conversations += 1
    return {
        "total": int(total),
        "expired": int(expired),
        "conversations": conversations,
        "by_scope": dict(sorted(by_scope.items())),
        "by_prefix": dict(sorted(by_prefix.items())),
        "long_term": {
            "entries": sum(long_term_by_namespace.values()),
            "expired": int(long_term_expired),
            "by_namespace": dict(sorted(long_term_by_namespace.items())),
        },
    }


def _cmd_stats(args: argparse.Namespace) -> int:
    target = _resolve_target(args)
    with _target._store(target, args) as store:
        stats = collect_stats(store)
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return EXIT_OK
    print(f"database:      {target.describe()}")
    print(f"entries:       {stats['total']}")
    print(f"expired:       {stats['expired']}")
    print(f"conversations: {stats['conversations']}")
    long_term = stats["long_term"]
    print(f"long-term:     {long_term['entries']} ({long_term['expired']} expired)")
    print("by scope:")
    for scope, n in stats["by_scope"].items():
        print(f"  {scope:<16} {n}")
    print("by namespace prefix:")
    for prefix, n in stats["by_prefix"].items():
        print(f"  {prefix:<16} {n}")
    print("long-term entries by namespace:")
    for namespace, n in long_term["by_namespace"].items():
        print(f"  {namespace:<16} {n}")
    return EXIT_OK


def _cmd_cleanup(args: argparse.Namespace) -> int:
    target = _resolve_target(args)
    table = _table()
    c = table.c
    deleted = 0
    with _target._store(target, args) as store:
        cutoff = utcnow()
        with store.engine.connect() as conn:
            rows = conn.execute(
                sa.select(c.namespace, c.entry_id)
                .where(c.expires_at <= cutoff)
                .order_by(c.namespace, c.entry_id)
            ).all()
        progress = Progress(len(rows), "cleanup-expired", enabled=args.progress)
        for start in range(0, len(rows), args.batch_size):
            batch = rows[start : start + args.batch_size]
            by_ns: dict[str, list[str]] = {}
            for namespace, entry_id in batch:
                by_ns.setdefault(str(namespace), []).append(str(entry_id))
            with store.unit_of_work() as uow:
                for namespace, ids in by_ns.items():
                    uow.entries.delete(namespace, ids)
                uow.commit()
            deleted += len(batch)
            progress.advance(len(batch))
    print(f"deleted {deleted} expired entr{'y' if deleted == 1 else 'ies'}")
    return EXIT_OK
