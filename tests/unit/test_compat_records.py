"""Reading upstream records: the entry conversion, the namespace plan, sources, summaries.

No database server: upstream data is built by hand in temporary files
(``tests/helpers/upstream_layouts.py``) and imported into in-process stores.
The import into every real store is ``tests/integration/test_compat_import.py``.
"""

from __future__ import annotations

import json
import math
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers.upstream_layouts import (
    iso,
    sample_namespaces,
    upstream_entry,
    write_file_store,
    write_sqlite_store,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from firefly_orm.entry import MemoryScope
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore
from firefly_orm.uow import StagedChanges
from firefly_orm.upstream_import import (
    ImportOptions,
    ImportProgress,
    UpstreamFileSource,
    UpstreamMongoSource,
    UpstreamReadError,
    UpstreamRecord,
    UpstreamSourceError,
    UpstreamSQLiteSource,
    async_import_upstream,
    entry_from_upstream,
    import_upstream,
    plan_namespace,
    upstream_source,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

# --------------------------------------------------------------------------- the conversion

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)  # no lone surrogates
_key_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)
_zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
)
_moments = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2200, 1, 1), timezones=_zones
)


def _stamp(moment: datetime, zulu: bool) -> str:
    return iso(moment) if zulu else moment.isoformat()


@settings(max_examples=200, deadline=None)
@given(
    entry_id=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    scope=st.sampled_from([s.value for s in MemoryScope]),
    key=st.none() | _key_text,
    content=_json,
    metadata=st.dictionaries(_text, _json, max_size=4),
    created_at=_moments,
    expires_at=st.none() | _moments,
    importance=st.floats(min_value=0.0, max_value=1.0),
    zulu=st.booleans(),
)
def test_upstream_records_convert_field_for_field(
    entry_id: str,
    scope: str,
    key: str | None,
    content: Any,
    metadata: dict[str, Any],
    created_at: datetime,
    expires_at: datetime | None,
    importance: float,
    zulu: bool,
) -> None:
    record = {
        "entry_id": entry_id,
        "scope": scope,
        "key": key,
        "content": content,
        "metadata": metadata,
        "created_at": _stamp(created_at, zulu),
        "expires_at": None if expires_at is None else _stamp(expires_at, zulu),
        "importance": importance,
    }
    stored = json.loads(json.dumps(record))  # as upstream's files and columns hold it
    entry = entry_from_upstream("working:s", stored, entry_id=entry_id)
    assert (entry.entry_id, entry.namespace, entry.scope, entry.key) == (
        entry_id,
        "working:s",
        MemoryScope(scope),
        key,
    )
    assert entry.content == stored["content"]
    assert entry.metadata == stored["metadata"]
    assert entry.created_at == created_at and entry.created_at.tzinfo is UTC
    assert entry.expires_at == expires_at
    assert entry.importance == importance
    assert entry.version == 1 and entry.user_id is None


def _good() -> dict[str, Any]:
    return upstream_entry(created_at=NOW, key="k", content={"a": 1})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"importance": 1.5}, "importance"),
        ({"importance": -0.1}, "importance"),
        ({"importance": "0.7"}, "importance"),
        ({"importance": True}, "importance"),
        ({"importance": math.nan}, "importance"),
        ({"scope": "episodic"}, "scope"),
        ({"scope": ["working"]}, "scope"),
        ({"metadata": ["not", "an", "object"]}, "metadata"),
        ({"created_at": None}, "created_at"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"created_at": "2025-01-01T00:00:00"}, "created_at"),
        ({"expires_at": 1735689600}, "expires_at"),
        ({"key": 3}, "key"),
        ({"key": "a\x00b"}, "key"),
        ({"entry_id": ""}, "entry_id"),
        ({"entry_id": 42}, "entry_id"),
        ({"content": [1, math.inf]}, "content"),
        ({"metadata": {"m": math.nan}}, "metadata"),
    ],
)
def test_invalid_records_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(EntryValidationError) as caught:
        entry_from_upstream("ns", {**_good(), **change})
    assert caught.value.field == field


def test_missing_fields_take_upstreams_defaults_but_created_at_is_required() -> None:
    entry = entry_from_upstream("ns", {"entry_id": "abc", "created_at": iso(NOW)})
    assert (entry.scope, entry.key, entry.content, entry.importance) == (
        MemoryScope.WORKING,
        None,
        None,
        0.5,
    )
    assert entry.to_dict()["metadata"] == {}
    assert entry_from_upstream("ns", {"created_at": iso(NOW)}, entry_id="xyz").entry_id == "xyz"
    with pytest.raises(EntryValidationError) as caught:
        entry_from_upstream("ns", {"entry_id": "abc"})
    assert caught.value.field == "created_at"


def test_id_must_match_where_it_is_stored() -> None:
    with pytest.raises(EntryValidationError, match="does not match"):
        entry_from_upstream("ns", _good(), entry_id="other")


def test_naive_datetimes_need_an_assumed_zone() -> None:
    record = {**_good(), "created_at": "2025-01-01T10:00:00", "expires_at": "2030-01-01T00:00"}
    with pytest.raises(EntryValidationError, match="no UTC offset"):
        entry_from_upstream("ns", record)
    berlin_winter = timezone(timedelta(hours=1))
    entry = entry_from_upstream("ns", record, assume_timezone=berlin_winter)
    assert entry.created_at == datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
    assert entry.expires_at == datetime(2029, 12, 31, 23, 0, tzinfo=UTC)


def test_a_record_must_be_an_object() -> None:
    with pytest.raises(EntryValidationError) as caught:
        entry_from_upstream("ns", ["entry_id", "abc"])
    assert caught.value.field == "entry"


# --------------------------------------------------------------------------- the plan


def test_plan_counts_expired_and_reports_problems() -> None:
    live = upstream_entry(created_at=NOW, expires_at=NOW + timedelta(microseconds=1))
    at_boundary = upstream_entry(created_at=NOW, expires_at=NOW)  # the boundary is expired
    gone = upstream_entry(created_at=NOW, expires_at=NOW - timedelta(days=1))
    twin = {**live}
    bad = {**_good(), "importance": 2}
    records = [
        UpstreamRecord("entry 'live'", live),
        UpstreamRecord("entry 'boundary'", at_boundary),
        UpstreamRecord("entry 'gone'", gone),
        UpstreamRecord("entry 'twin'", twin),
        UpstreamRecord("entry 'bad'", bad),
        UpstreamRecord("entry 'torn'", None, problem="content is not JSON"),
    ]
    plan = plan_namespace("working:s", records, ImportOptions(), NOW)
    assert [e.entry_id for e in plan.entries] == [live["entry_id"]]
    assert plan.expired == 2
    assert [(i.where, i.message.split(":")[0]) for i in plan.issues] == [
        ("entry 'twin'", "entry_id"),
        ("entry 'bad'", "importance"),
        ("entry 'torn'", "content is not JSON"),
    ]


def test_an_id_in_two_namespaces_is_imported_once(tmp_path: Path) -> None:
    """Stores keep one entry per id: the second namespace's copy is reported, not moved."""
    base = tmp_path / "files"
    shared = upstream_entry(created_at=NOW, key="k", content="first")
    write_file_store(
        base,
        {"working:a": [shared], "working:b": [{**shared, "content": "second"}]},
    )
    store = InMemoryStore()
    summary = import_upstream(UpstreamFileSource(base), store)
    assert [(r.namespace, r.failed) for r in summary.results] == [
        ("working:a", False),
        ("working:b", True),
    ]
    assert summary.issues[0].message == (
        f"entry_id: {shared['entry_id']!r} repeats (imported into 'working:a')"
    )
    assert [e.content for e in store.load("working:a")] == ["first"]
    assert store.load("working:b") == []


@pytest.mark.parametrize("namespace", ["", "a\x00b"])
def test_plan_refuses_unusable_namespaces(namespace: str) -> None:
    plan = plan_namespace(namespace, [UpstreamRecord("x", _good())], ImportOptions(), NOW)
    assert plan.entries == ()
    assert [i.where for i in plan.issues] == ["namespace"]


# --------------------------------------------------------------------------- sources


def test_upstream_source_picks_the_kind(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    database = tmp_path / "upstream.sqlite3"
    write_sqlite_store(database, {})
    text = tmp_path / "notes.txt"
    text.write_text("hello", "utf-8")

    assert upstream_source(files) == UpstreamFileSource(files)
    assert upstream_source(str(database)) == UpstreamSQLiteSource(database)
    assert upstream_source(database, table="other_t").table == "other_t"  # type: ignore[attr-defined]
    mongo = upstream_source("mongodb://h/?replicaSet=rs", collection="c")
    assert mongo == UpstreamMongoSource("mongodb://h/?replicaSet=rs", collection="c")
    assert (mongo.database, mongo.collection) == ("firefly_memory", "c")
    for location in (text, tmp_path / "missing"):
        with pytest.raises(UpstreamSourceError):
            upstream_source(location)
    with pytest.raises(EntryValidationError, match="MongoDB URLs only"):
        upstream_source(files, database="db")
    with pytest.raises(EntryValidationError, match="SQLite sources only"):
        upstream_source(files, table="t")
    with pytest.raises(EntryValidationError):
        UpstreamSQLiteSource(database, table='x"; DROP TABLE y; --')
    with pytest.raises(EntryValidationError):
        UpstreamMongoSource("postgresql://h/db")


def test_unusable_sources_fail_before_anything_is_written(tmp_path: Path) -> None:
    store = InMemoryStore()
    not_sqlite = tmp_path / "garbage.sqlite3"
    not_sqlite.write_bytes(b"\x00" * 4096)
    other_schema = tmp_path / "other.sqlite3"
    with sqlite3.connect(other_schema) as conn:
        conn.execute("CREATE TABLE memory_entries (entry_id TEXT)")
    conn.close()
    for source, words in (
        (UpstreamFileSource(tmp_path / "missing"), "not a directory"),
        (UpstreamSQLiteSource(tmp_path / "missing.sqlite3"), "no such file"),
        (UpstreamSQLiteSource(not_sqlite), "cannot read"),
        (UpstreamSQLiteSource(other_schema), "no table firefly_memory"),
    ):
        with pytest.raises(UpstreamSourceError, match=words):
            import_upstream(source, store)
    assert store.namespaces == []
    with pytest.raises(EntryValidationError, match="source"):
        import_upstream(str(tmp_path), store)  # type: ignore[arg-type]


def test_file_source_reports_unreadable_files_per_namespace(tmp_path: Path) -> None:
    base = tmp_path / "files"
    write_file_store(base, {"working:ok": [upstream_entry(created_at=NOW, content=1)]})
    (base / "working:list.json").write_text("[1, 2]", "utf-8")
    (base / "working:binary.json").write_bytes(b"\xff\xfe\x00")
    (base / "working:entry.json").write_text('{"abc": "not an entry"}', "utf-8")
    (base / "README.txt").write_text("not a namespace", "utf-8")
    (base / "sub.json").mkdir()  # a directory is no namespace file
    summary = import_upstream(UpstreamFileSource(base), InMemoryStore())
    assert [(r.namespace, r.failed) for r in summary.results] == [
        ("working:binary", True),
        ("working:entry", True),
        ("working:list", True),
        ("working:ok", False),
    ]
    messages = {i.namespace: f"{i.where}: {i.message}" for i in summary.issues}
    assert messages["working:list"].startswith("file working:list.json: must hold a JSON object")
    assert messages["working:binary"].startswith("file working:binary.json: is not UTF-8")
    assert messages["working:entry"] == "entry 'abc': entry: must be a JSON object, got str"
    for outside in ("../working:ok", "sub/x"):
        with pytest.raises(UpstreamReadError, match="not a file of this directory"):
            UpstreamFileSource(base).read(outside)


# --------------------------------------------------------------------------- the import


class CommitLog(InMemoryStore):
    """An InMemoryStore recording the namespaces and sizes of every commit that writes."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[tuple[set[str], int]] = []

    def apply_changes(self, changes: StagedChanges) -> None:
        if changes.writes:
            self.commits.append(({ns for ns, _ in changes.writes}, len(changes.writes)))
        super().apply_changes(changes)


def test_one_unit_of_work_per_namespace(tmp_path: Path) -> None:
    path = tmp_path / "upstream.sqlite3"
    data = sample_namespaces(datetime.now(UTC))
    write_sqlite_store(path, data)
    store = CommitLog()
    summary = import_upstream(UpstreamSQLiteSource(path), store)
    assert sorted(store.commits, key=lambda c: sorted(c[0])) == [
        ({"notes/2025"}, 1),
        ({"working:delegation:agent_a"}, 2),
        ({"working:session-42"}, 3),  # the expired entry is not written
    ]
    assert summary.imported == 6
    store.commits.clear()
    assert import_upstream(UpstreamSQLiteSource(path), store).already_present == 6
    assert store.commits == []  # a rerun writes nothing


async def test_async_import_takes_sync_and_async_progress_callbacks(tmp_path: Path) -> None:
    base = tmp_path / "files"
    write_file_store(base, sample_namespaces(datetime.now(UTC)))
    seen: list[str] = []

    async def on_progress(progress: ImportProgress) -> None:
        seen.append(progress.describe())

    summary = await async_import_upstream(
        UpstreamFileSource(base), InMemoryStore(), on_progress=on_progress
    )
    assert seen == [
        "[1/3] notes_2025: 1 imported, 0 already present, 0 expired, 0 invalid skipped",
        "[2/3] working:delegation:agent_a: 2 imported, 0 already present, 0 expired, "
        "0 invalid skipped",
        "[3/3] working:session-42: 3 imported, 0 already present, 1 expired, 0 invalid skipped",
    ]
    plain: list[int] = []
    again = await async_import_upstream(
        UpstreamFileSource(base), InMemoryStore(), on_progress=lambda p: plain.append(p.position)
    )
    assert plain == [1, 2, 3]
    assert again.to_dict() == summary.to_dict()


def test_summary_reads_well_and_serialises(tmp_path: Path) -> None:
    base = tmp_path / "files"
    bad = {**upstream_entry(created_at=NOW), "scope": "nope"}
    write_file_store(base, {"working:a": [upstream_entry(created_at=NOW)], "working:b": [bad]})
    summary = import_upstream(UpstreamFileSource(base), InMemoryStore())
    assert not summary.ok
    text = summary.describe()
    assert text.splitlines()[0] == (
        f"upstream FileStore directory {base}: 2 namespace(s), 1 entries imported, "
        "0 already present, 0 expired skipped, 0 invalid skipped, 1 namespace(s) failed"
    )
    assert f"working:b: entry {bad['entry_id']!r}: scope: must be one of" in text
    as_json = json.loads(json.dumps(summary.to_dict()))
    assert as_json["results"][1]["failed"] is True
    assert as_json["results"][1]["issues"][0]["where"] == f"entry {bad['entry_id']!r}"
