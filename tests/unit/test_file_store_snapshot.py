"""FileStore's ``.json`` files are JSON documents again: snapshot plus commit log (issue 33).

* After every committed operation each ``<namespace>.json`` is read by
  ``json.load``, and with its ``.log.jsonl`` applied (by
  :mod:`helpers.file_store_files`, which only knows the documented format)
  equals what the store returns.
* A directory in the previous format (each ``.json`` a JSON-lines log; a
  directory written by that version, with a torn line and a half-applied
  journal, is checked in under ``tests/fixtures/file_store_v1``) is converted when
  opened, and reads what that version read.
* Hypothesis: random operation sequences give the same namespaces, read from
  the files, as an :class:`~firefly_orm.store.InMemoryStore` run.
* Appends stay O(1): the bytes written per append do not grow with the
  namespace, except at compactions, which are amortised.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pydantic
import pytest
from entry_samples import sample_entries
from helpers.file_store_files import (
    disagreements,
    live,
    log_of,
    read_namespace,
    read_snapshot,
    snapshots,
    write_previous_format,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import StoreCorruptedError
from firefly_orm.file_store import FileStore
from firefly_orm.file_store import _commit as file_commit
from firefly_orm.file_store import _journal as file_journal
from firefly_orm.file_store import _log as file_log
from firefly_orm.protocols import MemoryStore
from firefly_orm.store import InMemoryStore

V1_DIRECTORY = Path(__file__).parents[1] / "fixtures" / "file_store_v1"


def stored(store: MemoryStore, namespace: str) -> dict[str, dict[str, Any]]:
    return {e.entry_id: e.to_json_dict() for e in store.load(namespace)}


def files_agree(store: FileStore) -> list[str]:
    """Every snapshot is JSON and, with its log, equals the store (empty: nothing wrong)."""
    return disagreements(store.base_dir, lambda ns: stored(store, ns), store.namespaces)


# --------------------------------------------------------------------------- every operation


def test_every_committed_operation_leaves_json_snapshots_equal_to_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_log, "COMPACT_MIN_BYTES", 2048)  # compactions happen too
    store = FileStore(tmp_path)
    past = datetime.now(UTC) - timedelta(days=1)
    samples = sample_entries()
    checks = 0

    def check() -> None:
        nonlocal checks
        assert files_agree(store) == []
        file_commit.forget(store.path_for("a"))  # and as a new process parses it
        assert files_agree(FileStore(tmp_path)) == []
        checks += 1

    for entry in samples:
        store.save("a", entry)
        check()
    for i in range(30):  # updates and deletes: past the compaction bound
        store.save("a", samples[0].copy_entry(content={"revision": i, "pad": "x" * 100}))
        store.save("b", MemoryEntry(entry_id=f"b{i}", key=f"k{i % 4}", content=i))
        if i % 3 == 0:
            store.delete("b", f"b{i // 2}")
        check()
    store.save("a", MemoryEntry(key="expired", expires_at=past))
    check()
    assert store.cleanup_expired() == 1
    check()
    with store.unit_of_work() as uow:  # one commit over three namespaces (a journal)
        uow.entries.delete("a", [samples[1].entry_id])
        uow.entries.save("b", MemoryEntry(key="moved", content=samples[1].content))
        uow.entries.save("c", MemoryEntry(key="new namespace"))
        uow.commit()
    check()
    store.clear("b")
    check()
    assert not log_of(store.path_for("b")).exists()
    assert store.compact() == 1  # "a" has commits in its log; "c" is a snapshot alone
    for snapshot in snapshots(tmp_path):  # after compact (or close), the .json alone is all
        assert read_snapshot(snapshot) == read_namespace(snapshot)
    check()
    store.delete("c", stored(store, "c").popitem()[0])  # its last entry: files removed
    assert not store.path_for("c").exists() and not store.log_path_for("c").exists()
    check()
    print(f"\n[FileStore snapshots] {checks} committed operations checked")


def test_the_snapshot_is_the_upstream_shape_and_the_log_names_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    first, second = MemoryEntry(key="k", content={"a": [1, 2]}), MemoryEntry(key="other")
    store.save("ns", first)
    assert not store.log_path_for("ns").exists()  # a new namespace: its snapshot only
    document = read_snapshot(store.path_for("ns"))
    assert document == {first.entry_id: first.copy_entry(namespace="ns").to_json_dict()}
    store.delete("ns", "absent")  # nothing to delete: nothing written
    assert not store.log_path_for("ns").exists()
    store.save("ns", second)
    store.delete("ns", second.entry_id)
    header, *records = (
        json.loads(line) for line in store.log_path_for("ns").read_bytes().splitlines()
    )
    sha = hashlib.sha256(store.path_for("ns").read_bytes()).hexdigest()
    assert header["snapshot"] == {"sha256": sha, "bytes": store.path_for("ns").stat().st_size}
    assert (header["namespace"], header["version"], header["base"]) == ("ns", 2, None)
    assert [r.get("put") for r in records] == [
        [second.copy_entry(namespace="ns").to_json_dict()],
        None,
    ]
    assert records[1]["del"] == [second.entry_id]
    store.close()  # folds the log: the snapshot is the namespace again
    assert read_snapshot(store.path_for("ns")) == read_namespace(store.path_for("ns"))
    assert list(read_snapshot(store.path_for("ns"))) == [first.entry_id]


def test_a_compaction_stopped_between_its_renames_leaves_a_stale_log_that_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    for i in range(5):
        store.save("ns", MemoryEntry(entry_id=f"e{i}", content=i))
    old_log = store.log_path_for("ns").read_bytes()

    def stops(self: file_log.NamespaceLog, base: Any) -> None:
        raise KeyboardInterrupt  # killed after the snapshot's rename, before the log's

    monkeypatch.setattr(file_log.NamespaceLog, "_start_log", stops)
    with pytest.raises(KeyboardInterrupt):
        store.compact("ns")
    monkeypatch.undo()
    assert store.log_path_for("ns").read_bytes() == old_log  # stale: names the old snapshot
    assert list(read_snapshot(store.path_for("ns"))) == [f"e{i}" for i in range(5)]
    for reader in (store, FileStore(tmp_path)):
        file_commit.forget(store.path_for("ns"))
        assert [e.content for e in reader.load("ns")] == [0, 1, 2, 3, 4]
    store.save("ns", MemoryEntry(entry_id="e0", content="new"))  # starts a fresh log
    assert files_agree(store) == []
    reopened = {e.entry_id: e.content for e in FileStore(tmp_path).load("ns")}
    assert reopened == {"e0": "new", "e1": 1, "e2": 2, "e3": 3, "e4": 4}


def test_a_log_left_by_a_removed_namespace_is_never_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    entry = MemoryEntry(entry_id="same", content="same")
    store.save("ns", entry)
    store.save("ns", MemoryEntry(entry_id="extra", content="extra"))  # in the log
    snapshot = store.path_for("ns").read_bytes()
    real_unlink = file_log._unlink

    def stops_after_the_snapshot(path: Path) -> None:
        real_unlink(path)
        if path.suffix == ".json":
            raise KeyboardInterrupt  # killed between the two removals

    monkeypatch.setattr(file_log, "_unlink", stops_after_the_snapshot)
    with pytest.raises(KeyboardInterrupt):
        store.clear("ns")
    monkeypatch.undo()
    assert store.log_path_for("ns").exists() and store.load("ns") == []
    store.save("ns", entry)  # the same snapshot bytes as before: the old log must not apply
    assert store.path_for("ns").read_bytes() == snapshot
    assert not store.log_path_for("ns").exists()
    assert [e.entry_id for e in FileStore(tmp_path).load("ns")] == ["same"]
    store.clear("ns")
    (tmp_path / store.log_path_for("ns").name).write_bytes(b"left over")
    FileStore(tmp_path)  # opening removes logs without a snapshot
    assert not store.log_path_for("ns").exists()


# --------------------------------------------------------------------------- the previous format


def test_a_directory_in_the_previous_format_is_converted_on_open(tmp_path: Path) -> None:
    directory = tmp_path / "v1"
    shutil.copytree(V1_DIRECTORY, directory)
    expected = json.loads((V1_DIRECTORY.parent / "file_store_v1.expected.json").read_text())
    files = snapshots(directory)
    assert all(p.read_bytes().startswith(b'{"format":"firefly_orm.file_log"') for p in files)
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        json.loads(files[0].read_text())  # the report of issue 33
    assert file_journal.pending(directory) != []  # a commit its writer did not finish

    store = FileStore(directory)
    assert file_journal.pending(directory) == []
    assert store.namespaces == sorted(expected)
    for namespace, entries in expected.items():
        assert [e.to_json_dict() for e in store.load(namespace)] == entries, namespace
        path = store.path_for(namespace)
        read_snapshot(path)  # converted: the .json is JSON again
        assert read_namespace(path) == {e["entry_id"]: e for e in entries}
    store.save("working:default", MemoryEntry(key="k9", content="after the upgrade"))
    assert files_agree(store) == []
    file_commit.forget(store.path_for("working:default"))
    assert store.load_by_key("working:default", "k9").content == "after the upgrade"  # type: ignore[union-attr]


def _to_previous_format(store: FileStore, namespace: str) -> Path:
    """Write ``namespace`` as the previous version did: a log in the .json file."""
    path = store.path_for(namespace)
    entries = [e.to_json_dict() for e in store.load(namespace)]
    file_commit.forget(path)
    write_previous_format(path, namespace, entries)
    return path


def test_a_previous_format_file_is_read_then_converted_by_its_next_write(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for i in range(3):
        store.save("ns", MemoryEntry(key=f"k{i}", content=i))
    path = _to_previous_format(store, "ns")  # appears after the store was opened
    assert [e.content for e in store.load("ns")] == [0, 1, 2]
    assert path.read_bytes().startswith(b'{"format"')  # a read changes nothing
    store.save("ns", MemoryEntry(key="k3", content=3))
    assert list(live(read_namespace(path))) == [e.entry_id for e in store.load("ns")]
    assert [e.content for e in store.load("ns")] == [0, 1, 2, 3]
    assert files_agree(store) == []


def test_a_corrupt_file_of_the_previous_format_does_not_stop_the_store_opening(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    store.save("good", MemoryEntry(content=1))
    bad = store.path_for("bad")
    content = b'{"format":"firefly_orm.file_log","version":1,"namespace":"bad"\n{"id"'
    bad.write_bytes(content)
    reopened = FileStore(tmp_path)  # logged, left alone
    assert [e.content for e in reopened.load("good")] == [1]
    with pytest.raises(StoreCorruptedError, match=str(bad)):
        reopened.load("bad")
    assert bad.read_bytes() == content


# --------------------------------------------------------------------------- hypothesis

NAMESPACES = ("n0", "n1", "n2")
_ops = st.one_of(
    st.tuples(st.just("save"), st.sampled_from(NAMESPACES), st.integers(0, 5), st.integers(0, 40)),
    st.tuples(st.just("delete"), st.sampled_from(NAMESPACES), st.integers(0, 5), st.just(0)),
    st.tuples(st.just("clear"), st.sampled_from(NAMESPACES), st.just(0), st.just(0)),
    st.tuples(st.just("move"), st.sampled_from(NAMESPACES), st.integers(0, 5), st.integers(0, 40)),
    st.tuples(st.just("compact"), st.sampled_from(NAMESPACES), st.just(0), st.just(0)),
)
_BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(namespace: str, n: int, size: int) -> MemoryEntry:
    # Ids are unique per namespace: on FileStore an id is scoped to its namespace.
    return MemoryEntry(
        entry_id=f"{namespace}-{n}",
        key=f"k{n % 3}",
        content="y" * size * 10,
        created_at=_BASE_TIME + timedelta(seconds=n),
    )


def _apply(store: FileStore | InMemoryStore, op: tuple[str, str, int, int]) -> None:
    kind, namespace, n, size = op
    if kind == "save":
        store.save(namespace, _entry(namespace, n, size))
    elif kind == "delete":
        store.delete(namespace, f"{namespace}-{n}")
    elif kind == "clear":
        store.clear(namespace)
    elif kind == "move":  # one unit of work over two namespaces (a journaled commit)
        other = NAMESPACES[(NAMESPACES.index(namespace) + 1) % len(NAMESPACES)]
        with store.unit_of_work() as uow:
            uow.entries.delete(namespace, [f"{namespace}-{n}"])
            uow.entries.save(other, _entry(other, n, size))
            uow.commit()
    elif isinstance(store, FileStore):  # compact: nothing to do in memory
        store.compact(namespace)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(_ops, min_size=1, max_size=25))
def test_random_operations_on_files_equal_an_in_memory_run(
    ops: list[tuple[str, str, int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_log, "COMPACT_MIN_BYTES", 600)  # some sequences compact by themselves
    reference = InMemoryStore()
    with tempfile.TemporaryDirectory() as directory:
        store = FileStore(directory)
        for op in ops:
            _apply(store, op)
            _apply(reference, op)
        for namespace in NAMESPACES:
            path = store.path_for(namespace)
            on_disk = read_namespace(path) if path.exists() else {}
            assert on_disk == stored(reference, namespace), (namespace, ops)
            assert stored(store, namespace) == stored(reference, namespace)
        assert store.namespaces == [ns for ns in NAMESPACES if reference.load(ns)]


# --------------------------------------------------------------------------- O(1) appends


def _appends(directory: Path, size: int, updates: int) -> tuple[list[int], int]:
    """Bytes written by each of ``updates`` saves into a namespace of ``size`` entries."""
    store = FileStore(directory)
    with store.unit_of_work() as uow:
        for i in range(size):
            uow.entries.save("ns", MemoryEntry(entry_id=f"e{i:05d}", content="z" * 300))
        uow.commit()
    per_append, lines = [], 0
    for i in range(updates):
        entry = MemoryEntry(entry_id=f"e{i % size:05d}", content="u" * 300)
        before = file_log.counters.bytes_written
        store.save("ns", entry)
        per_append.append(file_log.counters.bytes_written - before)
        lines += len(file_log.encode_record("0" * 32, file_log.Edit(puts=[entry])))
    return per_append, lines


def test_bytes_written_per_append_do_not_grow_with_the_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_log, "COMPACT_MIN_BYTES", 16 * 1024)
    small, small_lines = _appends(tmp_path / "small", 50, 120)
    large, large_lines = _appends(tmp_path / "large", 2000, 120)
    typical = sorted(small)[len(small) // 2]
    print(
        f"\n[FileStore appends] median bytes per append: 50 entries {typical}, "
        f"2000 entries {sorted(large)[len(large) // 2]}; totals {sum(small)} / {sum(large)}, "
        f"compactions {sum(b > 2 * typical for b in small)} / {sum(b > 2 * typical for b in large)}"
    )
    # Each append writes its record line (the version digits may differ by a byte or two)...
    assert abs(sorted(large)[len(large) // 2] - typical) <= 4
    assert sum(b > 2 * typical for b in large) == 0  # 120 updates: too few to compact 2000
    # ... and compactions, when the dead bytes outweigh the live ones, are amortised:
    # the 50-entry namespace compacts several times yet writes at most 3x its lines.
    assert sum(b > 2 * typical for b in small) >= 2
    assert sum(small) <= 3 * small_lines + 2000
    assert sum(large) <= large_lines + 1000  # the lines, and the log's header once


# --------------------------------------------------------------------------- upstream tooling


class UpstreamEntry(pydantic.BaseModel):
    """An entry as upstream's tooling models it (its eight fields; pydantic ignores extras)."""

    entry_id: str
    scope: Literal["conversation", "working", "long_term"] = "working"
    key: str | None = None
    content: Any = None
    metadata: dict[str, Any] = {}
    created_at: datetime
    expires_at: datetime | None = None
    importance: float = 0.5


def test_upstream_tooling_reads_a_closed_store_s_json_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for entry in sample_entries():
        store.save("working:default", entry)
    store.save("working:default", sample_entries()[1].copy_entry(content="later"))  # in the log
    store.close()
    with open(store.path_for("working:default"), encoding="utf-8") as handle:
        document = json.load(handle)
    read = {i: UpstreamEntry.model_validate(item) for i, item in document.items()}
    assert {i: (e.content, e.key, e.created_at, e.expires_at) for i, e in read.items()} == {
        e.entry_id: (e.content, e.key, e.created_at, e.expires_at)
        for e in store.load("working:default")
    }
