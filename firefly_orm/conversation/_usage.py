"""Usage totals: the turns' ``metadata["usage"]`` summed per conversation, user, day or month.

Computed from the stored turn rows at each call: no counter is kept beside
them, so the totals cannot drift from the turns (a deleted turn, an erased
user, a rewound turn moved to the archive: the totals follow the rows).
Counted: the turns of ``conversation:<id>`` and ``conversation-archive:<id>``
(turns evicted with ``keep_evicted=True`` still count; evicted turns that were
dropped are gone, their usage with them: keep evicted turns for billing).

A turn's usage is the object the integrations store
(:func:`firefly_orm.pydantic_ai._result.usage_metadata`, the OpenAI Agents
session): its integer counters :data:`USAGE_FIELDS` are summed, anything else
is ignored; ``turns`` counts the turns that have a usage object.

Where the rows are found (an index on every store; the sum reads each summed
row once, and no total is kept beside the turns):

* SQLite and PostgreSQL: one aggregate query
  (:func:`~firefly_orm.conversation._listing_sql.usage_rows`) over the
  namespace index (a conversation) or the user index (a user's turns).
* MongoDB: a conversation's turns through the namespace-and-key index; a
  user's through ``ix_user_created_key`` (owner, creation time, key: one
  ``find`` bounded by ``since`` / ``until`` that fetches turn rows only,
  :func:`~firefly_orm.conversation._listing_mongo.find_user_turns`), summed
  here.
* The memory and file stores keep every namespace's rows in a sorted index in
  process memory: the user's conversation ids come from their index rows
  (``conversation-index``, by owner), then each conversation's turns by key
  prefix, summed here.  That reads the user's turns and nothing else, which an
  aggregate reads anyway; a per-day index on top would only skip turns outside
  ``since`` / ``until``, and these stores are meant for one process's data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Literal

from firefly_orm._layout import (
    ARCHIVE_NAMESPACE_PREFIX,
    CONVERSATION_NAMESPACE_PREFIX,
    INDEX_NAMESPACE,
    TURN_COPY_OF,
    TURN_KEY_PREFIX,
    archive_namespace,
    conversation_namespace,
)
from firefly_orm.conversation._listing_sql import USAGE_FIELDS, usage_rows
from firefly_orm.entry import MemoryEntry
from firefly_orm.entry._model import field_values
from firefly_orm.errors import EntryValidationError
from firefly_orm.protocols import RunsStatements, UnitOfWork

__all__ = [
    "GROUPINGS",
    "USAGE_FIELDS",
    "Grouping",
    "TurnReader",
    "UsageRequest",
    "UsageTotal",
    "read_usage",
]

#: How totals may be grouped (``None``: one total).
Grouping = Literal["conversation", "day", "month"]
GROUPINGS = ("conversation", "day", "month")


@dataclass(frozen=True)
class UsageTotal:
    """The usage of a group of turns, summed.

    Attributes:
        group: The conversation id (``by="conversation"``), the UTC day
            (``"2026-11-28"``) or month (``"2026-11"``), or ``None`` (one total).
        turns: How many turns have a usage object.
        requests, input_tokens, output_tokens, total_tokens, tool_calls: The
            sums of those counters (integers only; 0 where a turn has none).
    """

    group: str | None
    turns: int
    requests: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    tool_calls: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"group": self.group, "turns": self.turns, **self.counters()}

    def counters(self) -> dict[str, int]:
        """The summed counters by name (:data:`USAGE_FIELDS`)."""
        return {name: getattr(self, name) for name in USAGE_FIELDS}


@dataclass(frozen=True)
class UsageRequest:
    """A checked usage request: one conversation or one user's, grouped, in a time range."""

    conversation_id: str | None
    user_id: str | None
    by: str | None
    since: datetime | None
    until: datetime | None

    def __post_init__(self) -> None:
        if (self.conversation_id is None) == (self.user_id is None):
            raise EntryValidationError("conversation_id", "give a conversation_id or a user_id")
        if self.by is not None and self.by not in GROUPINGS:
            raise EntryValidationError("by", f"must be None or one of {GROUPINGS}")
        for name in ("since", "until"):
            moment = getattr(self, name)
            if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
                raise EntryValidationError(name, "must be a timezone-aware datetime")


def _total(group: str | None, turns: int, sums: list[int]) -> UsageTotal:
    return UsageTotal(group, turns, *sums)


def _conversation_of(namespace: str) -> str:
    for prefix in (CONVERSATION_NAMESPACE_PREFIX, ARCHIVE_NAMESPACE_PREFIX):
        if namespace.startswith(prefix):
            return namespace[len(prefix) :]
    return namespace


#: Reads a user's turn rows itself (MongoDB: its indexed ``find``), given the
#: request: ``reader(request)``; the rows are filtered and summed like any others.
TurnReader = Callable[[UsageRequest], Iterable[MemoryEntry]]


def read_usage(
    uow: UnitOfWork, request: UsageRequest, reader: TurnReader | None = None
) -> list[UsageTotal]:
    """Transaction: the totals ``request`` asks for, ordered by group (``reader``:
    the store's own read of a user's turns, else SQL's or the general path)."""
    entries = uow.entries
    namespaces = None
    if request.conversation_id is not None:
        cid = request.conversation_id
        namespaces = [conversation_namespace(cid), archive_namespace(cid)]
    if reader is not None and namespaces is None:
        rows = _sum_rows(_kept(reader(request), request), request.by)
    elif isinstance(entries, RunsStatements):
        rows = entries.run_statements(
            partial(
                usage_rows,
                namespaces=namespaces,
                user_id=request.user_id,
                by=request.by,
                since=request.since,
                until=request.until,
            )
        )
    else:
        rows = _sum_rows(_turn_rows(uow, request, namespaces), request.by)
    if request.by != "conversation":
        return [_total(group, turns, sums) for group, turns, sums in rows] or [
            _total(None, 0, [0] * len(USAGE_FIELDS))
        ]
    merged: dict[str, tuple[int, list[int]]] = {}
    for group, turns, sums in rows:
        cid = _conversation_of(group or "")
        before = merged.get(cid, (0, [0] * len(USAGE_FIELDS)))
        merged[cid] = (before[0] + turns, [a + b for a, b in zip(before[1], sums, strict=True)])
    return [_total(cid, turns, sums) for cid, (turns, sums) in sorted(merged.items())]


def _turn_rows(
    uow: UnitOfWork, request: UsageRequest, namespaces: list[str] | None
) -> Iterable[MemoryEntry]:
    """The general path's turn rows (live and archived) of the conversation or the user."""
    if namespaces is None:
        ids = [
            row.key
            for row in uow.entries.list(INDEX_NAMESPACE, user_id=request.user_id)
            if row.key is not None
        ]
        namespaces = [
            ns for cid in ids for ns in (conversation_namespace(cid), archive_namespace(cid))
        ]
    for namespace in namespaces:
        yield from _kept(uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX), request)


def _kept(rows: Iterable[MemoryEntry], request: UsageRequest) -> Iterable[MemoryEntry]:
    """The rows the totals count: the user's, no copies, created in the time range."""
    for row in rows:
        fields = field_values(row)
        if request.user_id is not None and fields["user_id"] != request.user_id:
            continue
        if TURN_COPY_OF in (fields["metadata_"] or {}):
            continue  # copied from another conversation: counted there
        created = fields["created_at"]
        if request.since is not None and created < request.since:
            continue
        if request.until is not None and created >= request.until:
            continue
        yield row


def _usage_of(content: Any) -> dict[str, Any] | None:
    metadata = content.get("metadata") if isinstance(content, dict) else None
    usage = metadata.get("usage") if isinstance(metadata, dict) else None
    return usage if isinstance(usage, dict) else None


def _sum_rows(
    rows: Iterable[MemoryEntry], by: str | None
) -> list[tuple[str | None, int, list[int]]]:
    """Sum as the SQL aggregate does: integer counters only, grouped like it."""
    groups: dict[str | None, tuple[int, list[int]]] = {}
    for row in rows:
        fields = field_values(row)
        usage = _usage_of(fields["content"])
        group: str | None = None
        if by == "conversation":
            group = fields["namespace"]
        elif by in ("day", "month"):
            group = fields["created_at"].strftime("%Y-%m-%d" if by == "day" else "%Y-%m")
        turns, sums = groups.get(group, (0, [0] * len(USAGE_FIELDS)))
        if usage is not None:
            turns += 1
            for number, name in enumerate(USAGE_FIELDS):
                value = usage.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    sums[number] += value
        groups[group] = (turns, sums)
    return sorted(
        ((group, turns, sums) for group, (turns, sums) in groups.items()),
        key=lambda row: row[0] or "",
    )
