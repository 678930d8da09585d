"""MemoryEntry validation and JSON encoding edge cases."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.orm import Session

from firefly_orm import entry as entry_module
from firefly_orm.entry import (
    EntryFieldsError,
    MemoryEntry,
    MemoryScope,
    decode_json_from_jsonb,
    encode_json_for_jsonb,
    key_prefix_upper_bound,
    validate_entry,
)
from firefly_orm.entry import _rules as entry_rules
from firefly_orm.errors import EntryValidationError
from firefly_orm.sql import SQLiteStore
from firefly_orm.store import InMemoryStore


@pytest.mark.parametrize(
    ("field", "fields", "namespace"),
    [
        ("namespace", {"content": 1}, "bad\udc00ns"),
        ("key", {"key": "k\udc00", "content": 1}, "ns"),
        ("content", {"content": {"text": "x\ud800"}}, "ns"),
        ("metadata", {"content": 1, "metadata": {"m": "\udfff"}}, "ns"),
        (
            "created_at",
            {"created_at": datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))},
            "ns",
        ),
        (
            "expires_at",
            {"expires_at": datetime(9999, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-1)))},
            "ns",
        ),
    ],
)
def test_invalid_text_and_datetimes_are_rejected_before_writing(
    field: str, fields: dict[str, Any], namespace: str
) -> None:
    if field != "namespace":
        # The constructor refuses the value at once ...
        with pytest.raises(EntryValidationError) as info:
            MemoryEntry(**fields)
        assert info.value.field == field
    # ... and an entry that skipped the checks (the trusted path, or an
    # attribute assigned later) is refused by every write.
    entry = MemoryEntry.from_dict(fields)
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


# ------------------------------------------------------------------------ construction (issue 16)


def test_the_constructor_coerces_like_pydantic() -> None:
    entry = MemoryEntry(
        importance="0.7",
        expires_at="2999-01-01T00:00:00+02:00",
        created_at=0,
        scope="long_term",
        version="3",
    )
    assert entry.importance == 0.7 and isinstance(entry.importance, float)
    assert entry.expires_at == datetime(2998, 12, 31, 22, tzinfo=UTC)
    assert entry.expires_at.utcoffset() == timedelta(hours=2)
    assert entry.is_expired is False
    assert entry.created_at == datetime(1970, 1, 1, tzinfo=UTC)
    assert entry.scope is MemoryScope.LONG_TERM
    assert entry.version == 3 and isinstance(entry.version, int)
    assert MemoryEntry(expires_at="2000-01-01T00:00:00Z").is_expired is True
    validate_entry(entry, "ns")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"importance": "high"}, "importance"),
        ({"importance": 1.5}, "importance"),
        ({"importance": -0.1}, "importance"),
        ({"importance": float("nan")}, "importance"),
        ({"importance": True}, "importance"),
        ({"version": True}, "version"),
        ({"version": 2.5}, "version"),
        ({"version": -1}, "version"),
        ({"expires_at": "2030-01-01T00:00:00"}, "expires_at"),  # naive
        ({"expires_at": datetime(2030, 1, 1)}, "expires_at"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"created_at": None}, "created_at"),
        ({"scope": "nowhere"}, "scope"),
        ({"entry_id": ""}, "entry_id"),
        ({"key": 5}, "key"),
        ({"key": "a\x00b"}, "key"),
        ({"user_id": ""}, "user_id"),
        ({"search_language": "English!"}, "search_language"),
        ({"content": {"x": object()}}, "content"),
        ({"content": float("inf")}, "content"),
        ({"metadata": None}, "metadata"),
        ({"metadata": ["a"]}, "metadata"),
        ({"metadata": {"m": {1, 2}}}, "metadata"),
        ({"metdata": {}}, "metdata"),
    ],
)
def test_the_constructor_rejects_bad_fields_at_once(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(EntryValidationError) as info:
        MemoryEntry(**fields)
    error = info.value
    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    # The same error is a pydantic ValidationError, located at the field, and
    # model_validate raises it too.
    assert isinstance(error, ValidationError) and isinstance(error, EntryFieldsError)
    assert [e["loc"] for e in error.errors()] == [(field,)]
    with pytest.raises(EntryFieldsError) as again:
        MemoryEntry.model_validate(fields)
    assert again.value.field == field


def test_every_rejected_field_is_listed() -> None:
    with pytest.raises(EntryFieldsError) as info:
        MemoryEntry(importance="x", version="y", scope="z")
    assert sorted(e["loc"][0] for e in info.value.errors()) == ["importance", "scope", "version"]
    assert str(info.value).endswith("(and 2 more problems)")


def test_a_rejected_value_is_shown_shortened() -> None:
    with pytest.raises(EntryFieldsError) as info:
        MemoryEntry(importance="x" * 10_000)
    assert len(str(info.value)) < 200


def test_assignment_is_checked_when_the_entry_is_written() -> None:
    entry = MemoryEntry(key="k", content=1)
    entry.importance = "0.7"  # type: ignore[assignment]
    store = InMemoryStore()
    with pytest.raises(EntryValidationError) as info:
        store.save("ns", entry)
    assert info.value.field == "importance"
    assert store.load("ns") == []


def test_the_trusted_read_path_skips_the_checks_and_writes_still_refuse(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Reads build entries with from_dict / the SQL row converter: no pydantic
    # validation and no rule checks per entry (the deterministic proxy of their speed).
    checks: list[str] = []
    check = entry_rules._check_fields

    def counted(fields: Any) -> None:
        checks.append(fields["entry_id"])
        check(fields)

    monkeypatch.setattr(entry_rules, "_check_fields", counted)
    sqlite = SQLiteStore(tmp_path / "m.sqlite3")
    memory = InMemoryStore()
    for i in range(5):
        entry = MemoryEntry(key=f"k{i}", content=i, metadata={"i": i})
        sqlite.save("ns", entry)
        memory.save("ns", entry)
    checks.clear()
    for store in (sqlite, memory):
        assert len(store.load("ns")) == 5
        assert store.load_by_key("ns", "k3") is not None
    assert checks == []
    sqlite.close()

    unchecked = MemoryEntry.from_dict({"key": "k", "importance": "0.7"})
    with pytest.raises(EntryValidationError) as info:
        memory.save("ns", unchecked)
    assert info.value.field == "importance"


def test_a_constructed_entry_works_in_an_orm_session() -> None:
    engine = sa.create_engine("sqlite://")
    entry_module.metadata.create_all(engine)
    entry = MemoryEntry(namespace="ns", key="k", content={"a": [1]}, metadata={"m": 1})
    with Session(engine) as session:
        session.add(entry)
        session.commit()
        entry.importance = 0.9
        session.commit()
    with Session(engine) as session:
        found = session.scalars(sa.select(MemoryEntry)).one()
        assert (found.key, found.content, found.metadata_, found.importance) == (
            "k",
            {"a": [1]},
            {"m": 1},
            0.9,
        )
    engine.dispose()


def test_model_copy_gives_an_entry_of_its_own() -> None:
    entry = MemoryEntry(key="k", content={"x": [1]}, metadata={"m": 1})
    shallow = entry.model_copy()
    assert sa.inspect(shallow).obj() is shallow  # not the original's ORM state
    assert sa.inspect(entry).obj() is entry
    assert shallow.to_dict() == entry.to_dict() and shallow.content is entry.content
    deep = entry.model_copy(update={"metadata": {"n": 2}, "importance": 0.9}, deep=True)
    assert (deep.metadata_, deep.importance, entry.metadata_) == ({"n": 2}, 0.9, {"m": 1})
    assert deep.content == entry.content and deep.content is not entry.content
    assert "importance" in deep.model_fields_set
    deep.importance = 0.1  # assignable: it has its own state
    assert (deep.importance, entry.importance) == (0.1, 0.5)
