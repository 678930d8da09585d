"""MemoryEntry validation and JSON encoding edge cases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from firefly_orm.entry import (
    MemoryEntry,
    decode_json_from_jsonb,
    encode_json_for_jsonb,
    validate_entry,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.sql import SQLiteStore
from firefly_orm.store import InMemoryStore


@pytest.mark.parametrize(
    ("field", "entry", "namespace"),
    [
        ("namespace", MemoryEntry(content=1), "bad\udc00ns"),
        ("key", MemoryEntry(key="k\udc00", content=1), "ns"),
        ("content", MemoryEntry(content={"text": "x\ud800"}), "ns"),
        ("metadata", MemoryEntry(content=1, metadata={"m": "\udfff"}), "ns"),
        (
            "created_at",
            MemoryEntry(created_at=datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))),
            "ns",
        ),
        (
            "expires_at",
            MemoryEntry(
                expires_at=datetime(9999, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-1)))
            ),
            "ns",
        ),
    ],
)
def test_invalid_text_and_datetimes_are_rejected_before_writing(
    field: str, entry: MemoryEntry, namespace: str
) -> None:
    with pytest.raises(EntryValidationError) as info:
        validate_entry(entry, namespace)
    assert info.value.field == field
    store = InMemoryStore()
    with pytest.raises(EntryValidationError):
        store.save(namespace, entry)
    if field != "namespace":
        assert store.load(namespace) == []


def test_tuples_with_large_floats_survive_jsonb_encoding() -> None:
    value = {"t": (1e20, 2.5)}
    encoded = encode_json_for_jsonb(value)
    assert encoded != value  # wrapped: JSONB would turn 1e20 into an int
    assert decode_json_from_jsonb(encoded) == {"t": [1e20, 2.5]}


def test_key_prefix_ending_in_the_last_code_point(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.sqlite3")
    prefix = "z\U0010ffff"
    store.save("ns", MemoryEntry(key=prefix + "a", content=1))
    store.save("ns", MemoryEntry(key="y", content=2))
    with store.unit_of_work(read_only=True) as uow:
        assert [e.key for e in uow.entries.list("ns", key_prefix=prefix)] == [prefix + "a"]
    store.close()


def test_aware_datetimes_are_normalised_to_utc(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.sqlite3")
    when = datetime(2030, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    store.save("ns", MemoryEntry(key="k", content=1, expires_at=when))
    found = store.load_by_key("ns", "k")
    assert found is not None and found.expires_at == when
    assert found.expires_at.tzinfo == UTC
    store.close()
