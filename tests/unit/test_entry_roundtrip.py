"""MemoryEntry through pydantic: serialised and validated back, on every path (issue 16, item 4).

``metadata`` is the mapped attribute ``metadata_`` with the alias ``metadata``;
every output names it ``metadata`` (whatever ``by_alias`` says), every input
accepts it, and the output validates back into an equal entry:

* property-based (hypothesis) over random entries: every field, any storable
  Unicode, nested JSON content, ``None`` and aware datetimes at any offset;
* ``model_dump`` (python and JSON modes) / ``model_validate``,
  ``model_dump_json`` / ``model_validate_json``, the constructor, and a pydantic
  ``TypeAdapter(list[MemoryEntry])`` (what FastAPI uses for a response model);
* entries as the stores build them when they read (``from_dict``, no
  validation) serialise exactly like constructed ones (entries read back from
  every store: tests/integration/test_entry_roundtrip_stores.py);
* a FastAPI app: a response of stored entries, a request body, the OpenAPI schema.
"""

from __future__ import annotations

import json
import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from entry_samples import sample_entries
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    MAX_USER_ID_LENGTH,
    MemoryEntry,
    MemoryScope,
)
from firefly_orm.store import InMemoryStore

#: The public field names, in declaration order, as every output must show them.
PUBLIC_FIELDS = ["metadata" if name == "metadata_" else name for name in MemoryEntry.model_fields]
ENTRIES = TypeAdapter(list[MemoryEntry])

# --------------------------------------------------------------------------- strategies

#: Storable text: any code point but surrogates; ``no_nul`` for the fields
#: that refuse NUL (ids, keys, user ids, search text).
_CHARS = st.characters(codec="utf-8")
_CHARS_NO_NUL = st.characters(codec="utf-8", blacklist_characters="\x00")
_text = st.text(_CHARS, max_size=20)
_name = st.text(_CHARS_NO_NUL, min_size=1, max_size=20)

_json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_json = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_offsets = st.sampled_from(
    [
        UTC,
        timezone(timedelta(hours=5, minutes=30)),
        timezone(-timedelta(hours=8)),
        timezone(timedelta(hours=14)),
    ]
)
_aware = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2999, 12, 31), timezones=_offsets
)

entries = st.builds(
    MemoryEntry,
    entry_id=st.text(_CHARS_NO_NUL, min_size=1, max_size=64),
    namespace=st.text(_CHARS_NO_NUL, max_size=20),
    scope=st.sampled_from(MemoryScope),
    key=st.none() | st.text(_CHARS_NO_NUL, max_size=20),
    content=_json,
    metadata=st.dictionaries(_text, _json, max_size=4),
    created_at=_aware,
    expires_at=st.none() | _aware,
    importance=st.floats(min_value=0.0, max_value=1.0),
    version=st.integers(min_value=0, max_value=MAX_ENTRY_VERSION),
    user_id=st.none() | st.text(_CHARS_NO_NUL, min_size=1, max_size=MAX_USER_ID_LENGTH),
    search_text=st.none() | st.text(_CHARS_NO_NUL, max_size=40),
    search_language=st.none()
    | st.from_regex(r"[a-z_][a-z0-9_]{0,62}", fullmatch=True).filter(lambda s: len(s) < 64),
)


def metadata_of(entry: MemoryEntry) -> Any:
    """``entry.metadata`` (typed as the class's SQLAlchemy MetaData for mypy)."""
    return entry.metadata


def assert_same(got: MemoryEntry, want: MemoryEntry) -> None:
    """Equal field by field, datetimes at the same instant *and* the same UTC offset."""
    assert type(got) is MemoryEntry
    assert got.to_dict() == want.to_dict()
    assert metadata_of(got) == metadata_of(want)
    for name in ("created_at", "expires_at"):
        got_time, want_time = getattr(got, name), getattr(want, name)
        assert (got_time is None) == (want_time is None)
        if got_time is not None:
            assert got_time.utcoffset() == want_time.utcoffset()


def assert_public_keys(data: Any) -> None:
    assert isinstance(data, dict)
    assert sorted(data) == sorted(PUBLIC_FIELDS)


# --------------------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(entry=entries, by_alias=st.sampled_from([None, True, False]))
def test_dump_and_validate_round_trip_in_python_and_json_modes(
    entry: MemoryEntry, by_alias: bool | None
) -> None:
    for mode in ("python", "json"):
        data = entry.model_dump(mode=mode, by_alias=by_alias)
        assert_public_keys(data)
        assert data["metadata"] == (
            metadata_of(entry) if mode == "python" else json.loads(json.dumps(metadata_of(entry)))
        )
        assert_same(MemoryEntry.model_validate(data), entry)
        assert_same(MemoryEntry(**data), entry)

    text = entry.model_dump_json(by_alias=by_alias)
    assert_public_keys(json.loads(text))
    assert json.loads(text) == entry.model_dump(mode="json")  # a JSON log line
    assert_same(MemoryEntry.model_validate_json(text), entry)
    assert_same(MemoryEntry.model_validate(json.loads(text)), entry)


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(entries, max_size=4), by_alias=st.sampled_from([None, True, False]))
def test_a_type_adapter_of_a_list_round_trips(
    batch: list[MemoryEntry], by_alias: bool | None
) -> None:
    # What FastAPI does with ``response_model=list[MemoryEntry]`` and a request body.
    text = ENTRIES.dump_json(batch, by_alias=by_alias)
    for item in json.loads(text):
        assert_public_keys(item)
    data = ENTRIES.dump_python(batch, mode="json", by_alias=by_alias)
    assert data == json.loads(text)
    for got_batch in (ENTRIES.validate_json(text), ENTRIES.validate_python(data)):
        assert len(got_batch) == len(batch)
        for got, want in zip(got_batch, batch, strict=True):
            assert_same(got, want)


@settings(max_examples=80, deadline=None)
@given(entry=entries)
def test_entries_built_like_store_reads_serialise_like_constructed_ones(
    entry: MemoryEntry,
) -> None:
    # ``from_dict`` (MongoDB, file and in-memory reads; no checks) must give the
    # same output, in either of its inputs (python values, the file store's JSON).
    for source in (entry.to_dict(), entry.to_json_dict()):
        read = MemoryEntry.from_dict(source)
        assert read.model_dump(mode="json") == entry.model_dump(mode="json")
        assert json.loads(read.model_dump_json()) == json.loads(entry.model_dump_json())
        assert_same(MemoryEntry.model_validate_json(read.model_dump_json()), entry)


# --------------------------------------------------------------------------- the metadata name


def test_the_reported_case_keeps_its_metadata() -> None:
    entry = MemoryEntry(metadata={"m": 1})
    assert metadata_of(MemoryEntry.model_validate(entry.model_dump(mode="json"))) == {"m": 1}
    assert metadata_of(MemoryEntry.model_validate(entry.model_dump())) == {"m": 1}
    assert metadata_of(MemoryEntry.model_validate_json(entry.model_dump_json())) == {"m": 1}
    assert "metadata_" not in entry.model_dump_json(by_alias=False)


def test_input_accepts_the_field_name_too() -> None:
    # Output written before the fix (``metadata_``) still validates.
    entry = MemoryEntry(metadata={"m": 1})
    old = {**entry.model_dump(), "metadata_": {"m": 1}}
    del old["metadata"]
    assert metadata_of(MemoryEntry.model_validate(old)) == {"m": 1}
    assert metadata_of(MemoryEntry(metadata_={"m": 2})) == {"m": 2}


@pytest.mark.parametrize("method", ["model_dump", "model_dump_json"])
def test_include_and_exclude_take_the_public_name(method: str) -> None:
    entry = MemoryEntry(content=1, metadata={"a": {"b": 1, "c": 2}})

    def dump(**options: Any) -> dict[str, Any]:
        out = getattr(entry, method)(**options)
        return json.loads(out) if isinstance(out, str) else dict(out)

    assert "metadata" not in dump(exclude={"metadata"})
    assert "content" in dump(exclude={"metadata"})
    assert dump(include={"metadata"}) == {"metadata": {"a": {"b": 1, "c": 2}}}
    assert dump(include={"metadata": {"a": {"b"}}, "content": True}) == {
        "content": 1,
        "metadata": {"a": {"b": 1}},
    }
    assert dump(include={"metadata_"}) == {"metadata": {"a": {"b": 1, "c": 2}}}


def test_a_constructed_entry_lists_its_fields_in_declaration_order() -> None:
    entry = MemoryEntry(content={"x": "é"}, metadata={"m": "✓"})
    assert list(entry.model_dump()) == PUBLIC_FIELDS
    assert list(json.loads(entry.model_dump_json())) == PUBLIC_FIELDS
    assert list(ENTRIES.dump_python([entry])[0]) == PUBLIC_FIELDS


def test_the_json_schema_names_metadata_in_both_directions() -> None:
    for mode in ("validation", "serialization"):
        schema = MemoryEntry.model_json_schema(mode=mode)
        assert list(schema["properties"]) == PUBLIC_FIELDS, mode
        assert schema["properties"]["metadata"]["type"] == "object"
        assert schema["properties"]["importance"]["type"] == "number"
        listed = ENTRIES.json_schema(mode=mode)
        assert list(listed["$defs"]["MemoryEntry"]["properties"]) == PUBLIC_FIELDS, mode


# --------------------------------------------------------------------------- FastAPI


@pytest.fixture
def client() -> TestClient:
    store = InMemoryStore()
    for entry in sample_entries():
        store.save("api", entry)
    app = FastAPI()

    @app.get("/entries", response_model=list[MemoryEntry])
    def list_entries() -> list[MemoryEntry]:
        return store.load("api")

    @app.post("/entries", response_model=MemoryEntry)
    def add_entry(entry: MemoryEntry) -> MemoryEntry:
        store.save("api", entry)
        found = store.load_by_key("api", entry.key) if entry.key else None
        return found if found is not None else entry

    return TestClient(app)


def test_fastapi_responses_show_metadata_under_its_name(client: TestClient) -> None:
    response = client.get("/entries")
    assert response.status_code == 200
    body = response.json()
    assert len(body) == 3
    for item in body:
        assert_public_keys(item)
    assert {json.dumps(i["metadata"], sort_keys=True) for i in body} == {
        json.dumps(metadata_of(e), sort_keys=True) for e in sample_entries()
    }


def test_fastapi_request_bodies_are_coerced_and_stored(client: TestClient) -> None:
    body = {
        "key": "posted",
        "content": {"text": "ünïcode"},
        "metadata": {"m": 1},
        "importance": "0.25",
        "expires_at": "2999-01-01T00:00:00+01:00",
    }
    response = client.post("/entries", json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["metadata"] == {"m": 1}
    assert out["importance"] == 0.25
    assert datetime.fromisoformat(out["expires_at"]) == datetime(2998, 12, 31, 23, tzinfo=UTC)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"importance": 1.5}, "importance"),
        ({"importance": "high"}, "importance"),
        ({"expires_at": "2999-01-01T00:00:00"}, "expires_at"),
        ({"metadata": ["not", "a", "dict"]}, "metadata"),
        ({"scope": "nowhere"}, "scope"),
        ({"metdata": {}}, "metdata"),
    ],
)
def test_fastapi_rejects_bad_bodies_field_by_field(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    response = client.post("/entries", json=body)
    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["detail"]] == [["body", field]]
    assert len(client.get("/entries").json()) == 3  # nothing stored


def test_the_openapi_schema_names_metadata() -> None:
    app = FastAPI()

    @app.post("/echo", response_model=list[MemoryEntry])
    def echo(entry: MemoryEntry) -> list[MemoryEntry]:
        return [entry]

    schemas = TestClient(app).get("/openapi.json").json()["components"]["schemas"]
    entry_schemas = [s for name, s in schemas.items() if name.startswith("MemoryEntry")]
    assert entry_schemas
    for schema in entry_schemas:
        assert list(schema["properties"]) == PUBLIC_FIELDS
        assert not set(schema["properties"]) & set(string.punctuation)
