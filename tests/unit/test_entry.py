"""MemoryEntry validation and JSON encoding edge cases."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from firefly_orm.entry import (
    MemoryEntry,
    decode_json_from_jsonb,
    encode_json_for_jsonb,
    key_prefix_upper_bound,
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


# --------------------------------------------------------------------------- key prefix bound

#: Code points where UTF-8 changes length or the surrogate gap opens/closes.
_EDGES = [
    0x01,
    0x7F,
    0x80,
    0x7FF,
    0x800,
    0xD7FE,
    0xD7FF,
    0xE000,
    0xFFFF,
    0x10000,
    0x10FFFE,
    0x10FFFF,
]


def _char(rng: random.Random) -> str:
    """A storable character: often an edge code point, never NUL nor a surrogate."""
    if rng.random() < 0.5:
        return chr(rng.choice(_EDGES))
    code = rng.randrange(1, 0x10FFFF - 0x800 + 1)
    return chr(code if code < 0xD800 else code + 0x800)


def _text(rng: random.Random, longest: int) -> str:
    return "".join(_char(rng) for _ in range(rng.randrange(longest + 1)))


@pytest.mark.parametrize(
    ("prefix", "bound"),
    [
        ("", None),
        ("\U0010ffff", None),
        ("\U0010ffff\U0010ffff", None),
        ("k", "l"),
        ("turn:", "turn;"),
        ("k\ud7ff", "k\ue000"),
        ("k\ud7ff\U0010ffff", "k\ue000"),
        ("k\U0010ffff", "l"),
        ("k\U0010ffff\U0010ffff", "l"),
        ("\ud7fe", "\ud7ff"),
        ("\uffff", "\U00010000"),
    ],
)
def test_key_prefix_upper_bound_cases(prefix: str, bound: str | None) -> None:
    assert key_prefix_upper_bound(prefix) == bound


def test_key_prefix_upper_bound_encloses_exactly_the_prefixed_strings() -> None:
    # Random prefixes (seeded, so a failure reproduces), checked in Python's
    # code-point order and in UTF-8 byte order (what COLLATE "C" and MongoDB use).
    rng = random.Random(20240909)
    for _ in range(3000):
        prefix = _text(rng, 4)
        bound = key_prefix_upper_bound(prefix)
        if bound is not None:
            bound.encode("utf-8")  # storable: no lone surrogate
            assert prefix < bound
        else:
            assert prefix.strip("\U0010ffff") == ""
        for _ in range(5):
            inside = prefix + _text(rng, 3)
            assert prefix <= inside
            assert bound is None or (inside < bound and inside.encode() < bound.encode())
            # a near miss: the prefix cut short, then something else
            cut = rng.randrange(len(prefix) + 1)
            near = prefix[:cut] + _text(rng, 3)
            in_range = prefix <= near and (bound is None or near < bound)
            assert in_range == near.startswith(prefix), (prefix, near, bound)
            in_bytes = prefix.encode() <= near.encode() and (
                bound is None or near.encode() < bound.encode()
            )
            assert in_bytes == in_range
