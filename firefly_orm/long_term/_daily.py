"""Daily logs of long-term memory: what :meth:`LongTermMemory.remember` kept, day by day.

Every ``remember`` also writes one log line, in the SAME unit of work as the
item (:func:`store_and_log`), into the namespace ``<namespace>:daily-log``:

* a *line* row per remembered item, key ``line:<YYYY-MM-DD>:<time>:<item id>``
  (UTC day and time of the write, so a day's lines sort by time), content
  ``{"day", "at", "item_id", "text", "kind", "importance", "tags", "key"}``;
* a *day* row per owner and day, key ``day:<YYYY-MM-DD>`` (its id derived from
  the day and the owner, so writing it again is a plain upsert): the list of
  days is one key-prefix read, however many lines they hold.

Rows carry the item's owner (``user_id``), so ``erase_user`` removes a user's
log too, and an owner's reads see their own lines only.  The log is history:
forgetting, replacing or evicting an item leaves its line, and
:meth:`DailyLogs.prune_daily_logs` is what removes lines (whole days before a
date).  :class:`DailyLogs` is the part of
:class:`~firefly_orm.long_term.LongTermMemory` that reads and prunes them.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    retrying,
    sync_method,
)
from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id
from firefly_orm.entry._model import keyed_row
from firefly_orm.entry._rules import check_bound_user
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term._embedding import Embedded
from firefly_orm.long_term._model import item_from_entry, parse_iso
from firefly_orm.long_term._ops import store_items
from firefly_orm.protocols import UnitOfWork

__all__ = ["DailyLogLine", "DailyLogs", "is_log_namespace", "log_namespace", "store_and_log"]

_LINE = "line:"
_DAY = "day:"


_LOG_SUFFIX = ":daily-log"


def log_namespace(namespace: str) -> str:
    """The namespace of the daily log of the long-term namespace ``namespace``."""
    return f"{namespace}{_LOG_SUFFIX}"


def is_log_namespace(namespace: str) -> bool:
    """Whether ``namespace`` holds a daily log (not items)."""
    return namespace.endswith(_LOG_SUFFIX)


@dataclass(frozen=True)
class DailyLogLine:
    """One line of a daily log: an item as it was remembered.

    Attributes:
        day: The UTC day it was remembered.
        at: When (timezone-aware UTC).
        item_id: The item's id (it may have been forgotten or replaced since).
        text: What was remembered.
        kind: ``"semantic"`` or ``"episodic"``.
        importance: Its importance then.
        tags: Its tags then.
        key: Its key, or ``None``.
        user_id: Its owner, or ``None``.
    """

    day: date
    at: datetime
    item_id: str
    text: str
    kind: str
    importance: float
    tags: tuple[str, ...]
    key: str | None
    user_id: str | None

    def __str__(self) -> str:
        """``[HH:MM:SS] [kind] text``: the line as a log file would show it."""
        return f"[{self.at:%H:%M:%S}] [{self.kind}] {self.text}"


def _day_of(entry: MemoryEntry) -> date:
    return entry.created_at.astimezone(UTC).date()


def _line_row(namespace: str, item: MemoryEntry) -> MemoryEntry:
    at = item.created_at.astimezone(UTC)
    key = f"{_LINE}{at.date().isoformat()}:{at.isoformat()}:{item.entry_id}"
    stored = item_from_entry(item)
    content = {
        "day": at.date().isoformat(),
        "at": at.isoformat(),
        "item_id": item.entry_id,
        "text": stored.text,
        "kind": stored.kind,
        "importance": stored.importance,
        "tags": list(stored.tags),
        "key": item.key,
    }
    return keyed_row(namespace, MemoryScope.LONG_TERM, key, content, user_id=item.user_id)


def _day_row(namespace: str, day: date, user_id: str | None) -> MemoryEntry:
    key = f"{_DAY}{day.isoformat()}"
    return MemoryEntry.from_dict(
        dict(
            entry_id=derived_entry_id(namespace, f"{key}\x00{user_id or ''}"),
            namespace=namespace,
            scope=MemoryScope.LONG_TERM,
            key=key,
            content={"day": day.isoformat()},
            user_id=user_id,
        )
    )


def store_and_log(
    uow: UnitOfWork,
    namespace: str,
    entries: Sequence[MemoryEntry],
    limit: int | None,
    embedded: Embedded | None = None,
) -> list[str]:
    """:func:`~firefly_orm.long_term._ops.store_items`, plus one log line per entry
    (and its day row), in the same unit of work; returns what the limit evicted."""
    evicted = store_items(uow, namespace, entries, limit, embedded)
    logs = log_namespace(namespace)
    for entry in entries:
        uow.entries.save(logs, _line_row(logs, entry))
        uow.entries.save(logs, _day_row(logs, _day_of(entry), entry.user_id))
    return evicted


def _check_day(name: str, value: Any) -> date:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise EntryValidationError(name, "a datetime must be timezone-aware")
        return value.astimezone(UTC).date()
    if isinstance(value, date):
        return value
    return parse_iso(value, date.fromisoformat, name, "a date (or YYYY-MM-DD)")


def _line(row: MemoryEntry) -> DailyLogLine:
    content = row.content
    return DailyLogLine(
        day=date.fromisoformat(content["day"]),
        at=datetime.fromisoformat(content["at"]),
        item_id=content["item_id"],
        text=content["text"],
        kind=content["kind"],
        importance=float(content["importance"]),
        tags=tuple(content["tags"]),
        key=content["key"],
        user_id=row.user_id,
    )


def read_days(uow: UnitOfWork, logs: str, user_id: str | None) -> list[date]:
    """The days with log lines (``user_id``'s, or every owner's), oldest first."""
    rows = uow.entries.list(logs, key_prefix=_DAY, user_id=user_id)
    return sorted({date.fromisoformat(row.content["day"]) for row in rows})


def read_day(uow: UnitOfWork, logs: str, day: date, user_id: str | None) -> list[DailyLogLine]:
    """The lines of ``day`` (``user_id``'s, or every owner's), in time order."""
    rows = uow.entries.list(logs, key_prefix=f"{_LINE}{day.isoformat()}:", user_id=user_id)
    return sorted((_line(row) for row in rows), key=lambda line: (line.at, line.item_id))


def prune_days(uow: UnitOfWork, logs: str, before: date, user_id: str | None) -> int:
    """Delete the lines (and day rows) of the days before ``before``; how many lines."""
    removed = 0
    for day_row in uow.entries.list(logs, key_prefix=_DAY, user_id=user_id):
        day = date.fromisoformat(day_row.content["day"])
        if day >= before:
            continue
        lines = uow.entries.list(logs, key_prefix=f"{_LINE}{day.isoformat()}:", user_id=user_id)
        uow.entries.delete(logs, [row.entry_id for row in lines])
        uow.entries.delete(logs, day_row.entry_id)
        removed += len(lines)
    return removed


class DailyLogs(MemoryLayer):
    """The daily-log reads and pruning of :class:`~firefly_orm.long_term.LongTermMemory`.

    Owners as for items: a method's ``user_id``, else the memory's, picks
    whose log is read or pruned; with neither, every owner's.
    """

    _namespace: str
    _user_id: str | None

    def _log_owner(self, user_id: str | None) -> str | None:
        """``user_id`` (checked; bound, it must be the memory's user), else the memory's."""
        if user_id is None:
            return self._user_id
        return check_bound_user(user_id, self._user_id, "memory")

    def _log_days(self, *, user_id: str | None = None) -> Operation[builtins.list[date]]:
        """The UTC days on which something was remembered (and not pruned), oldest first."""
        owner = self._log_owner(user_id)
        logs = log_namespace(self._namespace)
        return (yield from Transaction.read(read_days, logs, owner))

    def _daily_log(
        self, day: date | datetime | str, *, user_id: str | None = None
    ) -> Operation[builtins.list[DailyLogLine]]:
        """What was remembered on ``day`` (a ``date``, an aware ``datetime`` or
        ``"YYYY-MM-DD"``; UTC days), in time order; ``[]`` for a day without lines.

        Raises:
            EntryValidationError: ``day`` is not a day.
        """
        checked, owner = _check_day("day", day), self._log_owner(user_id)
        logs = log_namespace(self._namespace)
        return (yield from Transaction.read(read_day, logs, checked, owner))

    def _prune_daily_logs(
        self, *, before: date | datetime | str, user_id: str | None = None
    ) -> Operation[int]:
        """Delete the log lines of every day before ``before`` (one unit of work);
        how many lines were deleted.  The items themselves are kept.

        Raises:
            EntryValidationError: ``before`` is not a day (nothing deleted).
        """
        checked, owner = _check_day("before", before), self._log_owner(user_id)
        logs = log_namespace(self._namespace)
        return (yield from retrying(Transaction.write(prune_days, logs, checked, owner)))

    log_days = sync_method(_log_days)
    daily_log = sync_method(_daily_log)
    prune_daily_logs = sync_method(_prune_daily_logs)

    async_log_days = async_method(_log_days)
    async_daily_log = async_method(_daily_log)
    async_prune_daily_logs = async_method(_prune_daily_logs)
