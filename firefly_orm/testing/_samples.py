"""Entries and times the contract suite builds its cases from."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    MAX_JSON_DEPTH,
    MemoryEntry,
    new_entry_id,
    utcnow,
)

__all__ = [
    "BAD_ENTRIES",
    "ids_of",
    "in_future",
    "in_past",
    "make_entry",
    "nested_list",
    "ordered_ids",
    "to_ms",
]


def to_ms(dt: datetime) -> datetime:
    """``dt`` truncated to whole milliseconds (what every backend can hold)."""
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


def make_entry(**fields: Any) -> MemoryEntry:
    """A :class:`MemoryEntry` with ``fields`` (``content`` defaults to ``"value"``)."""
    fields.setdefault("content", "value")
    return MemoryEntry(**fields)


def in_future(**delta: float) -> datetime:
    """Now plus ``delta`` (default one hour), in whole milliseconds."""
    return to_ms(utcnow() + timedelta(**(delta or {"hours": 1})))


def in_past(**delta: float) -> datetime:
    """Now minus ``delta`` (default one second), in whole milliseconds."""
    return to_ms(utcnow() - timedelta(**(delta or {"seconds": 1})))


def ids_of(entries: Iterable[MemoryEntry]) -> list[str]:
    """The entry ids, in order."""
    return [e.entry_id for e in entries]


def ordered_ids(count: int) -> list[str]:
    """``count`` fresh entry ids, sorted."""
    return sorted(new_entry_id() for _ in range(count))


#: Bad entries: (test id, field the error must name, how to break a good entry).
BAD_ENTRIES: list[tuple[str, str, Callable[[MemoryEntry], None]]] = [
    ("importance-1.5", "importance", lambda e: setattr(e, "importance", 1.5)),
    ("importance-negative", "importance", lambda e: setattr(e, "importance", -0.1)),
    ("importance-nan", "importance", lambda e: setattr(e, "importance", math.nan)),
    ("content-object", "content", lambda e: setattr(e, "content", object())),
    ("content-set", "content", lambda e: setattr(e, "content", {1, 2})),
    ("content-nested-set", "content", lambda e: setattr(e, "content", {"a": [{1}]})),
    ("content-inf", "content", lambda e: setattr(e, "content", math.inf)),
    ("metadata-list", "metadata", lambda e: setattr(e, "metadata", ["not", "a", "dict"])),
    ("metadata-object", "metadata", lambda e: setattr(e, "metadata", {"x": object()})),
    ("created_at-naive", "created_at", lambda e: setattr(e, "created_at", datetime(2024, 1, 1))),
    (
        "expires_at-naive",
        "expires_at",
        lambda e: setattr(e, "expires_at", datetime(2999, 1, 1)),
    ),
    ("key-nul", "key", lambda e: setattr(e, "key", "a\x00b")),
    # Hostile values: nesting far beyond the limit (a RecursionError once), one
    # level beyond it, keys that collide once JSON turns them into strings, and
    # versions outside the version column's range.
    ("content-10000-deep", "content", lambda e: setattr(e, "content", nested_list(10_000))),
    (
        "metadata-10000-deep",
        "metadata",
        lambda e: setattr(e, "metadata", {"m": nested_list(10_000)}),
    ),
    (
        "content-too-deep",
        "content",
        lambda e: setattr(e, "content", nested_list(MAX_JSON_DEPTH + 1)),
    ),
    ("content-colliding-keys", "content", lambda e: setattr(e, "content", {1: "a", "1": "b"})),
    (
        "metadata-colliding-keys",
        "metadata",
        lambda e: setattr(e, "metadata", {"m": [{True: 1, "true": 2}]}),
    ),
    ("version-2**63", "version", lambda e: setattr(e, "version", 2**63)),
    ("version-above-column", "version", lambda e: setattr(e, "version", MAX_ENTRY_VERSION + 1)),
    ("version-negative", "version", lambda e: setattr(e, "version", -1)),
]


def nested_list(depth: int, leaf: Any = "leaf") -> Any:
    """``leaf`` inside ``depth`` nested lists (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value
