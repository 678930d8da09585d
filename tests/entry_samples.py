"""Entries that use every field, shared by the round-trip tests (unit and per store)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from firefly_orm.entry import MemoryEntry


def sample_entries() -> list[MemoryEntry]:
    """Entries using every field: Unicode, nested JSON, an offset expiry, search fields."""
    return [
        MemoryEntry(
            key="plain",
            content={"text": "héllo wörld ✓ \U0001f600", "nested": {"list": [1, 2.5, None, True]}},
            metadata={"source": "test", "tags": ["a", "b"], "deep": {"x": {"y": [1]}}},
            importance=0.75,
            user_id="ada",
            search_text="hello world",
            search_language="english",
            expires_at=datetime(2999, 1, 1, 12, 30, tzinfo=timezone(timedelta(hours=2))),
        ),
        MemoryEntry(key="empty", content=None, scope="long_term"),
        MemoryEntry(content=[], metadata={"m": {}}, importance=0.0, version=7),
    ]
