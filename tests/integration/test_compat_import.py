"""Importing upstream data (FileStore files, SQLite table, MongoDB documents) into every store.

The upstream data is built by hand from the documented layouts
(``tests/helpers/upstream_layouts.py``), never with upstream's code.  Each
source is imported into each memory-layer backend (memory, file, SQLite,
PostgreSQL, MongoDB), sync and async, and read back through a NEW store object
over the same data (what another process sees).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dbutil import drop_mongo_database
from helpers.upstream_layouts import (
    Namespaces,
    create_sqlite_table,
    sample_namespaces,
    upstream_entry,
    write_file_store,
    write_mongo_collection,
    write_sqlite_store,
)
from store_backends import OpenedBackend

from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import DatabaseConnectionError, StoreError
from firefly_orm.sql import SQLiteStore
from firefly_orm.upstream_import import (
    ImportProgress,
    ImportSummary,
    UpstreamFileSource,
    UpstreamMongoSource,
    UpstreamSource,
    UpstreamSQLiteSource,
    async_import_upstream,
    import_upstream,
)
from firefly_orm.working import WorkingMemory

MODES = ("sync", "async")


@dataclass
class Upstream:
    """One upstream store of a kind, filled by ``write``, read by ``source``."""

    kind: str
    write: Callable[[Namespaces], None]
    source: UpstreamSource

    def imported_name(self, namespace: str) -> str:
        """The namespace an upstream namespace arrives under (FileStore lost ``/``)."""
        return namespace.replace("/", "_") if self.kind == "file" else namespace


@pytest.fixture(
    params=["file", "sqlite", pytest.param("mongo", marks=pytest.mark.mongo)],
)
def upstream(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Upstream]:
    """An empty upstream store of each kind."""
    kind = str(request.param)
    if kind == "file":
        base = tmp_path / "upstream-files"
        base.mkdir()
        yield Upstream(kind, lambda data: write_file_store(base, data), UpstreamFileSource(base))
    elif kind == "sqlite":
        path = tmp_path / "upstream" / "firefly_memory.sqlite3"
        create_sqlite_table(path).close()
        yield Upstream(
            kind, lambda data: write_sqlite_store(path, data), UpstreamSQLiteSource(path)
        )
    else:
        url = str(request.getfixturevalue("mongo_url"))
        database = "up_" + uuid.uuid4().hex[:10]
        try:
            yield Upstream(
                kind,
                lambda data: write_mongo_collection(url, database, "entries", data),
                UpstreamMongoSource(url, database=database),
            )
        finally:
            drop_mongo_database(url, database)


async def _import(
    mode: str, upstream: Upstream, store: Any, **options: Any
) -> tuple[ImportSummary, list[ImportProgress]]:
    seen: list[ImportProgress] = []
    if mode == "sync":
        summary = import_upstream(upstream.source, store, on_progress=seen.append, **options)
    else:
        summary = await async_import_upstream(
            upstream.source, store, on_progress=seen.append, **options
        )
    return summary, seen


async def _load(mode: str, store: Any, namespace: str) -> list[MemoryEntry]:
    if mode == "sync":
        return list(store.load(namespace))
    return list(await store.async_load(namespace))


def _expected(entries: list[dict[str, Any]], now: datetime) -> list[tuple[Any, ...]]:
    """What an upstream namespace should read back as: live entries, in load order."""
    rows = []
    for e in entries:
        expires = datetime.fromisoformat(e["expires_at"]) if e["expires_at"] else None
        if expires is not None and expires <= now:
            continue
        created = datetime.fromisoformat(e["created_at"])
        rows.append(
            (
                created,
                e["entry_id"],
                e["scope"],
                e["key"],
                e["content"],
                e["metadata"],
                expires,
                e["importance"],
            )
        )
    return sorted(rows, key=lambda row: (row[0], row[1]))


def _actual(entries: list[MemoryEntry]) -> list[tuple[Any, ...]]:
    return [
        (
            e.created_at,
            e.entry_id,
            str(e.scope),
            e.key,
            e.content,
            e.metadata,
            e.expires_at,
            e.importance,
        )
        for e in entries
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_import_into_every_store(
    upstream: Upstream, layer_backend: OpenedBackend, mode: str
) -> None:
    now = datetime.now(UTC)
    data = sample_namespaces(now)
    upstream.write(data)
    live = sum(len(_expected(entries, now)) for entries in data.values())
    expired = sum(len(entries) for entries in data.values()) - live

    summary, progress = await _import(mode, upstream, layer_backend.store)

    names = sorted(upstream.imported_name(ns) for ns in data)
    assert summary.ok, summary.describe()
    assert (summary.namespaces, summary.imported, summary.skipped_expired) == (
        len(data),
        live,
        expired,
    )
    assert summary.already_present == summary.skipped_invalid == 0
    assert [(p.position, p.total, p.result.namespace) for p in progress] == [
        (i, len(data), name) for i, name in enumerate(names, start=1)
    ]
    reopened = layer_backend.reopen()
    for namespace, entries in data.items():
        loaded = await _load(mode, reopened, upstream.imported_name(namespace))
        assert _actual(loaded) == _expected(entries, now), namespace

    # The facts are working memory's facts now, the entry that expires later included.
    facts = WorkingMemory(store=reopened, scope_id="session-42")
    assert facts.to_dict() == {
        "doc_type": "invoice",
        "vendor": data["working:session-42"][1]["content"],
        "cleared": None,
    }
    facts.set("doc_type", "receipt")
    assert facts.get("doc_type") == "receipt"
    assert facts.keys() == ["vendor", "cleared", "doc_type"]

    # Rerun: nothing new, nothing duplicated, the fact changed since is kept.
    again, _ = await _import(mode, upstream, layer_backend.store)
    assert (again.imported, again.already_present, again.skipped_expired) == (0, live, expired)
    assert facts.get("doc_type") == "receipt"
    for namespace, entries in data.items():
        loaded = await _load(mode, reopened, upstream.imported_name(namespace))
        expected_ids = {row[1] for row in _expected(entries, now)}
        if namespace == "working:session-42":
            expected_ids.add(facts.get_entry("doc_type").entry_id)  # type: ignore[union-attr]
        assert sorted(e.entry_id for e in loaded) == sorted(expected_ids)


@pytest.mark.parametrize("mode", MODES)
async def test_invalid_record_fails_its_namespace_only(
    upstream: Upstream, layer_backend: OpenedBackend, mode: str
) -> None:
    now = datetime.now(UTC)
    good = sample_namespaces(now)
    bad_entry = upstream_entry(created_at=now, key="weight", content=3, importance=1.5)
    broken = [
        upstream_entry(created_at=now - timedelta(minutes=2), key="a", content=1),
        bad_entry,
        upstream_entry(created_at=now - timedelta(minutes=1), key="b", content=2),
    ]
    upstream.write({**good, "working:broken": broken})

    summary, progress = await _import(mode, upstream, layer_backend.store)

    assert not summary.ok
    assert summary.namespaces_failed == 1
    assert [p.result.namespace for p in progress if p.result.failed] == ["working:broken"]
    (issue,) = summary.issues
    assert issue.namespace == "working:broken"
    assert bad_entry["entry_id"] in issue.where
    assert issue.message.startswith("importance:")
    assert await _load(mode, layer_backend.store, "working:broken") == []
    for namespace in good:
        assert await _load(mode, layer_backend.store, upstream.imported_name(namespace))

    # Asked to, the valid entries of the namespace go in and the bad one is reported.
    kept, _ = await _import(mode, upstream, layer_backend.store, skip_invalid=True)
    assert kept.ok
    assert (kept.imported, kept.skipped_invalid) == (2, 1)
    loaded = await _load(mode, layer_backend.reopen(), "working:broken")
    assert [e.key for e in loaded] == ["a", "b"]


async def test_replace_existing_overwrites_with_the_source_copy(
    upstream: Upstream, layer_backend: OpenedBackend
) -> None:
    now = datetime.now(UTC)
    entry = upstream_entry(created_at=now, key="colour", content="blue")
    upstream.write({"working:s": [entry]})
    assert import_upstream(upstream.source, layer_backend.store).imported == 1
    stored = layer_backend.store.load("working:s")[0]  # changed here since
    layer_backend.store.save("working:s", stored.copy_entry(content="green"))

    kept = import_upstream(upstream.source, layer_backend.store)
    assert (kept.imported, kept.already_present) == (0, 1)
    assert layer_backend.store.load("working:s")[0].content == "green"

    replaced = await async_import_upstream(
        upstream.source, layer_backend.store, replace_existing=True
    )
    assert (replaced.imported, replaced.already_present) == (1, 0)
    (back,) = layer_backend.reopen().load("working:s")
    assert (back.entry_id, back.content) == (entry["entry_id"], "blue")


def test_corrupt_file_is_reported_with_its_name(tmp_path: Path) -> None:
    from firefly_orm.store import InMemoryStore

    base = tmp_path / "files"
    write_file_store(base, sample_namespaces(datetime.now(UTC)))
    (base / "working:garbled.json").write_text('{"abc": {"entry_id": "abc", ', "utf-8")
    store = InMemoryStore()
    summary = import_upstream(UpstreamFileSource(base), store, skip_invalid=True)
    (failed,) = [r for r in summary.results if r.failed]
    assert failed.namespace == "working:garbled"
    assert failed.issues[0].where == "file working:garbled.json"
    assert "not JSON" in failed.issues[0].message
    assert store.load("working:garbled") == []
    assert summary.imported > 0


def test_corrupt_sqlite_row_fails_its_namespace(tmp_path: Path) -> None:
    from firefly_orm.store import InMemoryStore

    path = tmp_path / "upstream.sqlite3"
    now = datetime.now(UTC)
    write_sqlite_store(path, {"working:s": [upstream_entry(created_at=now, content=1)]})
    conn = create_sqlite_table(path)
    with conn:
        conn.execute("INSERT INTO firefly_memory VALUES ('deadbeef', 'working:s', '{oops')")
    conn.close()
    store = InMemoryStore()
    summary = import_upstream(UpstreamSQLiteSource(path), store)
    (issue,) = summary.issues
    assert (issue.namespace, issue.where) == ("working:s", "entry 'deadbeef'")
    assert "not JSON" in issue.message
    assert store.load("working:s") == []


@pytest.mark.mongo
def test_mongo_dates_must_be_iso_strings(mongo_url: str) -> None:
    from firefly_orm.store import InMemoryStore

    database = "up_" + uuid.uuid4().hex[:10]
    now = datetime.now(UTC)
    odd = upstream_entry(created_at=now, content="x")
    odd["created_at"] = "yesterday"
    try:
        write_mongo_collection(mongo_url, database, "entries", {"working:s": [odd]})
        summary = import_upstream(
            UpstreamMongoSource(mongo_url, database=database), InMemoryStore()
        )
    finally:
        drop_mongo_database(mongo_url, database)
    (issue,) = summary.issues
    assert issue.message.startswith("created_at: is not an ISO-8601 date-time")


def test_unreachable_mongo_source_fails_before_writing() -> None:
    from firefly_orm.store import InMemoryStore

    store = InMemoryStore()
    source = UpstreamMongoSource(
        "mongodb://reader:s3cret-pw@127.0.0.1:1/?authSource=admin", timeout=0.3
    )
    with pytest.raises(DatabaseConnectionError) as caught:
        import_upstream(source, store)
    assert str(caught.value).startswith("Failed to connect to the upstream MongoDB")
    assert "s3cret-pw" not in str(caught.value)
    assert "s3cret-pw" not in repr(source) + source.describe()
    assert store.namespaces == []


def test_import_in_place_next_to_our_table(tmp_path: Path) -> None:
    """An upstream SQLite file opened by our SQLiteStore: both tables live in one file."""
    path = tmp_path / "data" / "firefly_memory.sqlite3"
    now = datetime.now(UTC)
    data = sample_namespaces(now)
    write_sqlite_store(path, data)
    with SQLiteStore(path) as store:
        summary = import_upstream(UpstreamSQLiteSource(path), store)
        assert summary.ok
        assert summary.imported == sum(len(_expected(e, now)) for e in data.values())
        again = import_upstream(UpstreamSQLiteSource(path), store)
        assert (again.imported, again.already_present) == (0, summary.imported)
    with SQLiteStore(path) as reopened:
        for namespace, entries in data.items():
            assert _actual(reopened.load(namespace)) == _expected(entries, now)


def test_a_failing_target_stops_and_a_rerun_completes(tmp_path: Path) -> None:
    """The target fails while writing a namespace: that namespace holds nothing, the
    ones committed before stay, and a rerun imports the rest."""
    from firefly_orm.store import InMemoryStore
    from firefly_orm.uow import StagedChanges

    class FailingOnce(InMemoryStore):
        fail_namespace: str | None = "working:session-42"

        def apply_changes(self, changes: StagedChanges) -> None:
            if any(ns == self.fail_namespace for ns, _ in changes.writes):
                self.fail_namespace = None
                raise StoreError("disk full")
            super().apply_changes(changes)

    base = tmp_path / "files"
    now = datetime.now(UTC)
    data = sample_namespaces(now)
    write_file_store(base, data)
    store = FailingOnce()
    with pytest.raises(StoreError, match="disk full"):
        import_upstream(UpstreamFileSource(base), store)
    assert store.load("working:session-42") == []
    assert store.load("working:delegation:agent_a")  # sorted before it: committed
    summary = import_upstream(UpstreamFileSource(base), store)
    assert summary.ok
    for namespace, entries in data.items():
        assert _actual(store.load(namespace.replace("/", "_"))) == _expected(entries, now)
