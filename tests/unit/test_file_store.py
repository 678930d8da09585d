"""FileStore-specific tests (the shared store contract is tested elsewhere)."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import filelock
import pytest

from firefly_orm.entry import MemoryEntry, MemoryScope, utcnow
from firefly_orm.errors import (
    ConcurrencyError,
    EntryValidationError,
    StoreCorruptedError,
    StoreError,
)
from firefly_orm.file_store import FileStore, namespace_file_name
from firefly_orm.uow import StagedUnitOfWork, UnitOfWork

PAST = datetime(2000, 1, 1, tzinfo=UTC)
FUTURE = datetime(2999, 1, 1, tzinfo=UTC)

WEIRD_NAMESPACES = [
    "a/b",
    "a_b",
    "a:b",
    "a\\b",
    "A_b",
    "A_B",
    "..",
    ".",
    "../x",
    "../../etc/passwd",
    "/abs",
    "/abs/../..",
    "~",
    "-rf",
    ".hidden",
    "con",
    "NUL",
    "x" * 1000,
    "x" * 999 + "y",
    "日本/語",
    "emoji \U0001f600",
    "line\nbreak",
    " ",
]


def entry(key: str | None = None, content: Any = "v", **fields: Any) -> MemoryEntry:
    return MemoryEntry(key=key, content=content, **fields)


def all_paths(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


def snapshot(directory: Path) -> dict[str, bytes]:
    """Contents of the data files (lock files are empty and may appear on any access)."""
    return {
        p.name: p.read_bytes()
        for p in directory.iterdir()
        if p.is_file() and not p.name.endswith(".lock")
    }


# --------------------------------------------------------------------------- layout


def test_constructor_creates_base_dir_with_parents(tmp_path: Path) -> None:
    base = tmp_path / "deep" / "er" / "mem"
    store = FileStore(base)
    assert base.is_dir()
    assert store.base_dir == base


def test_relative_base_dir_is_fixed_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = FileStore("rel")
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    store.save("ns", entry("k"))
    assert store.path_for("ns").parent == tmp_path / "rel"
    assert store.path_for("ns").is_file()
    assert list(other.iterdir()) == []


def test_default_base_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = FileStore()
    assert store.base_dir == tmp_path / ".firefly_memory"
    assert store.base_dir.is_dir()


def test_base_dir_that_is_a_file_raises_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError):
        FileStore(blocker)


def test_persistence_across_instances(tmp_path: Path) -> None:
    first = FileStore(tmp_path / "mem")
    e1 = entry("k1", {"nested": {"x": [1, "two", None]}}, metadata_={"src": "test"})
    e2 = entry("k2", "text", scope=MemoryScope.LONG_TERM, expires_at=FUTURE, importance=0.9)
    first.save("ns", e1)
    first.save("ns", e2)
    first.save("ns", e1)  # version 2

    second = FileStore(tmp_path / "mem")
    loaded = second.load("ns")
    assert [e.entry_id for e in loaded] == [e1.entry_id, e2.entry_id]
    assert loaded[0].to_dict() == e1.copy_entry(namespace="ns", version=2).to_dict()
    assert loaded[1].to_dict() == e2.copy_entry(namespace="ns", version=1).to_dict()
    assert loaded[1].created_at.tzinfo is not None
    assert loaded[1].expires_at == FUTURE
    assert second.load_by_key("ns", "k2") is not None
    assert second.namespaces == ["ns"]


def test_name_collisions_stay_isolated(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    names = ["a/b", "a_b", "a:b", "a\\b", "A_b", "a b"]
    for name in names:
        store.save(name, entry("k", content=name))
    assert len({store.path_for(n) for n in names}) == len(names)
    for name in names:
        loaded = store.load(name)
        assert [e.content for e in loaded] == [name]
        assert loaded[0].namespace == name
    store.clear("a_b")
    assert store.load("a_b") == []
    assert [e.content for e in store.load("a/b")] == ["a/b"]
    assert store.namespaces == sorted(n for n in names if n != "a_b")


def test_file_names_ignore_case_sensitivity_of_file_system() -> None:
    # Two namespaces differing only in case must differ in more than case.
    assert namespace_file_name("Ab").lower() != namespace_file_name("ab").lower()


@pytest.mark.parametrize("namespace", WEIRD_NAMESPACES)
def test_file_names_are_safe(namespace: str) -> None:
    name = namespace_file_name(namespace)
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,47}-[0-9a-f]{32}\.json", name)
    assert len(name) + len(".lock") < 255


def test_traversal_and_odd_namespaces_stay_inside_base_dir(tmp_path: Path) -> None:
    base = tmp_path / "store"
    store = FileStore(base)
    for ns in WEIRD_NAMESPACES:
        store.save(ns, entry("k", content=ns))
    # Nothing was created outside base_dir, nothing in a sub-directory.
    assert [p.name for p in tmp_path.iterdir()] == ["store"]
    assert all(p.parent == base and p.is_file() for p in all_paths(base))
    assert len(list(base.glob("*.json"))) == len(WEIRD_NAMESPACES)
    # Each namespace reads back its own entry, also through a fresh instance.
    again = FileStore(base)
    for ns in WEIRD_NAMESPACES:
        assert [e.content for e in again.load(ns)] == [ns]
    assert again.namespaces == sorted(WEIRD_NAMESPACES)


def test_invalid_namespace_is_rejected_before_touching_disk(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for bad in ["", "a\x00b"]:
        with pytest.raises(EntryValidationError):
            store.save(bad, entry("k"))
        with pytest.raises(EntryValidationError):
            store.load(bad)
        with pytest.raises(EntryValidationError):
            store.clear(bad)
    with pytest.raises(EntryValidationError):
        store.load_by_key("ns", "a\x00")
    assert list(tmp_path.iterdir()) == []


def test_invalid_entry_writes_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("ns", entry("ok"))
    before = snapshot(tmp_path)
    with pytest.raises(EntryValidationError):
        store.save("ns", entry("k", importance=2.0))
    with pytest.raises(EntryValidationError):
        store.save("ns", entry("k", created_at=datetime(2020, 1, 1)))  # naive
    with pytest.raises(EntryValidationError):
        store.save("other", entry("k", content={1, 2}))
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- semantics


def test_copies_in_and_out(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    e = entry("k", {"list": [1]})
    store.save("ns", e)
    assert e.version == 1 and e.namespace == ""
    e.content["list"].append(2)
    loaded = store.load("ns")[0]
    assert loaded.content == {"list": [1]}
    loaded.content["list"].append(3)
    assert store.load("ns")[0].content == {"list": [1]}


def test_versions_bump_and_survive_reopen(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    e = entry("k", version=7)
    store.save("ns", e)
    assert store.load("ns")[0].version == 7
    store.save("ns", e.copy_entry(content="new"))
    reopened = FileStore(tmp_path)
    got = reopened.load_by_key("ns", "k")
    assert got is not None and got.version == 8 and got.content == "new"


def test_load_by_key_returns_newest_non_expired(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    old = entry("k", "old", created_at=utcnow())
    new = entry("k", "new", created_at=utcnow())
    gone = entry("k", "gone", created_at=utcnow(), expires_at=PAST)
    for e in (new, gone, old):
        store.save("ns", e)
    got = store.load_by_key("ns", "k")
    assert got is not None and got.content == "new"
    assert [e.content for e in store.load("ns")] == ["old", "new"]
    assert store.load_by_key("ns", "missing") is None
    assert store.load_by_key("unknown", "k") is None


def test_entry_id_is_scoped_to_its_namespace(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    e = entry("k", "first")
    store.save("one", e)
    store.save("two", e.copy_entry(content="second"))
    # Documented: no cross-namespace move; each namespace has its own entry.
    assert [x.content for x in store.load("one")] == ["first"]
    assert [x.content for x in store.load("two")] == ["second"]
    assert store.load("two")[0].version == 1
    store.delete("two", e.entry_id)
    assert store.load("two") == []
    assert [x.content for x in store.load("one")] == ["first"]


def test_delete_and_clear_are_idempotent_and_remove_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    a, b = entry("a"), entry("b")
    store.save("ns", a)
    store.save("ns", b)
    store.delete("ns", "no-such-id")
    store.delete("never-used", a.entry_id)
    store.delete("ns", a.entry_id)
    store.delete("ns", a.entry_id)
    assert [e.entry_id for e in store.load("ns")] == [b.entry_id]
    store.delete("ns", b.entry_id)
    assert not store.path_for("ns").exists()
    assert store.namespaces == []
    store.save("ns", a)
    store.clear("ns")
    store.clear("ns")
    store.clear("never-used")
    assert not store.path_for("ns").exists()
    assert store.load("ns") == []


def test_cleanup_expired_over_all_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("one", entry("live"))
    store.save("one", entry("dead1", expires_at=PAST))
    store.save("two", entry("dead2", expires_at=PAST))
    store.save("two", entry("dead3", expires_at=PAST))
    store.save("three", entry("live", expires_at=FUTURE))
    assert store.namespaces == ["one", "three", "two"]  # expired entries still on disk
    assert store.cleanup_expired() == 3
    assert store.cleanup_expired() == 0
    assert not store.path_for("two").exists()
    assert [e.key for e in store.load("one")] == ["live"]
    assert store.namespaces == ["one", "three"]


def test_reads_of_unknown_namespaces_create_no_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    assert store.load("nothing") == []
    assert store.load_by_key("nothing", "k") is None
    store.delete("nothing", "id")
    store.clear("nothing")
    with store.unit_of_work() as uow:
        assert uow.entries.list("nothing") == []
    assert store.namespaces == []
    assert store.cleanup_expired() == 0
    assert list(tmp_path.iterdir()) == []


def test_foreign_files_in_base_dir_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text("not json at all")
    (tmp_path / "README").write_text("hello")
    store = FileStore(tmp_path)
    store.save("ns", entry("k", expires_at=PAST))
    assert store.namespaces == ["ns"]
    assert store.cleanup_expired() == 1
    assert (tmp_path / "notes.json").read_text() == "not json at all"


# --------------------------------------------------------------------------- corruption

CORRUPTIONS: dict[str, bytes] = {
    "not-json": b"{this is not json",
    "truncated": b'{"abc": {"entry_id": "abc", ',
    "empty-file": b"",
    "json-list": b"[]",
    "bad-utf8": b'{"\xff": 1}',
    "entry-not-object": b'{"abc": 5}',
    "unknown-field": b'{"abc": {"entry_id": "abc", "namespace": "ns", "bogus": 1}}',
}


def _corrupt(store: FileStore, kind: str) -> Path:
    path = store.path_for("ns")
    path.write_bytes(CORRUPTIONS[kind])
    return path


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_file_raises_and_is_never_overwritten(tmp_path: Path, kind: str) -> None:
    store = FileStore(tmp_path)
    path = _corrupt(store, kind)
    original = path.read_bytes()
    for call in (
        lambda: store.load("ns"),
        lambda: store.load_by_key("ns", "k"),
        lambda: store.save("ns", entry("k")),
        lambda: store.delete("ns", "abc"),
        lambda: store.namespaces,
        store.cleanup_expired,
    ):
        with pytest.raises(StoreCorruptedError) as info:
            call()
        assert str(path) in str(info.value)
        assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, path.name + ".lock"])


def test_corrupt_entries_are_detected(tmp_path: Path) -> None:
    # Files of earlier versions (one JSON object, entry_id -> entry) are checked entry by entry.
    store = FileStore(tmp_path)
    good = entry("k")
    path = store.path_for("ns")
    valid = {good.entry_id: good.copy_entry(namespace="ns").to_json_dict()}

    def write(data: dict[str, Any]) -> None:
        path.write_text(json.dumps(data))

    bad_cases: list[dict[str, Any]] = []
    wrong_ns = json.loads(json.dumps(valid))
    wrong_ns[good.entry_id]["namespace"] = "other"
    bad_cases.append(wrong_ns)
    wrong_id = {"different-id": valid[good.entry_id]}
    bad_cases.append(wrong_id)
    naive = json.loads(json.dumps(valid))
    naive[good.entry_id]["created_at"] = "2020-01-01T00:00:00"
    bad_cases.append(naive)
    bad_scope = json.loads(json.dumps(valid))
    bad_scope[good.entry_id]["scope"] = "nope"
    bad_cases.append(bad_scope)
    bad_importance = json.loads(json.dumps(valid))
    bad_importance[good.entry_id]["importance"] = 5
    bad_cases.append(bad_importance)
    for case in bad_cases:
        write(case)
        with pytest.raises(StoreCorruptedError):
            store.load("ns")
    write(valid)
    assert [e.entry_id for e in store.load("ns")] == [good.entry_id]


def test_file_of_another_namespace_is_detected(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("a", entry("k"))
    os.replace(store.path_for("a"), store.path_for("b"))
    with pytest.raises(StoreCorruptedError):
        store.load("b")
    with pytest.raises(StoreCorruptedError):
        _ = store.namespaces


def test_unreadable_file_raises_corrupted(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.path_for("ns").mkdir()  # reading a directory fails with an OSError
    with pytest.raises(StoreCorruptedError) as info:
        store.load("ns")
    assert str(store.path_for("ns")) in str(info.value)


def test_clear_removes_a_corrupt_file(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    path = _corrupt(store, "not-json")
    store.clear("ns")
    assert not path.exists()
    store.save("ns", entry("k"))
    assert len(store.load("ns")) == 1


# --------------------------------------------------------------------------- atomicity


def test_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    entries = [entry(f"k{i}") for i in range(20)]
    for i, e in enumerate(entries):
        store.save(f"ns{i % 3}", e)
    for e in entries[::2]:
        store.delete("ns0", e.entry_id)
        store.delete("ns1", e.entry_id)
    store.clear("ns2")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert all(n.endswith((".json", ".log.jsonl", ".json.lock")) for n in names), names
    assert not any(n.startswith(".") for n in names)
    assert {n for n in names if n.endswith(".json")} == {
        store.path_for("ns0").name,
        store.path_for("ns1").name,
    }


def test_failed_write_keeps_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    store.save("ns", entry("keep"))
    path = store.path_for("ns")
    before = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StoreError, match="cannot write"):
        store.save("ns", entry("lost"))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".lock"]
    assert [e.key for e in store.load("ns")] == ["keep"]


def test_failed_append_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path)
    store.save("ns", entry("keep"))
    path = store.path_for("ns")
    before = path.read_bytes()
    real_write = os.write

    def half_then_full_disk(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full_disk)
    with pytest.raises(StoreError, match="cannot write"):
        store.save("ns", entry("lost"))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [e.key for e in FileStore(tmp_path).load("ns")] == ["keep"]


def test_failed_rename_of_a_new_file_leaves_no_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    store.save("ns", entry("keep"))
    path = store.path_for("ns")
    before = path.read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StoreError):
        store.save("new", entry("lost"))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, path.name + ".lock", store.path_for("new").name + ".lock"]
    )
    assert store.load("new") == []


def test_lock_timeout_raises_store_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path, lock_timeout=0.05)
    store.save("ns", entry("k"))
    other = filelock.FileLock(str(store.path_for("ns")) + ".lock")
    with other:
        # Held through another descriptor (as another process would): must not be entered.
        with pytest.raises(StoreError, match="timed out"):
            store.save("ns", entry("blocked"))
        with pytest.raises(StoreError, match="timed out"):
            store.load("ns")
    assert [e.key for e in store.load("ns")] == ["k"]


# --------------------------------------------------------------------------- unit of work


def test_unit_of_work_applies_all_changes_together(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    doomed = entry("doomed")
    store.save("b", doomed)
    store.save("c", entry("wiped"))
    head = entry("head", 1)
    store.save("a", head)
    uow = store.unit_of_work()
    assert isinstance(uow, StagedUnitOfWork)
    with uow:
        stored = uow.entries.get_by_key("a", "head", for_update=True)
        assert stored is not None
        uow.entries.save("a", stored.copy_entry(content=2), expected_version=stored.version)
        uow.entries.save("b", entry("new"))
        uow.entries.delete("b", [doomed.entry_id])
        uow.entries.clear("c")
        # Nothing visible outside before commit.
        assert store.load_by_key("a", "head").content == 1  # type: ignore[union-attr]
        assert [e.key for e in store.load("b")] == ["doomed"]
        uow.commit()
    reopened = FileStore(tmp_path)
    got = reopened.load_by_key("a", "head")
    assert got is not None and got.content == 2 and got.version == 2
    assert [e.key for e in reopened.load("b")] == ["new"]
    assert reopened.load("c") == []
    assert not store.path_for("c").exists()


def test_unit_of_work_without_commit_writes_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("a", entry("k"))
    before = snapshot(tmp_path)
    with store.unit_of_work() as uow:
        uow.entries.save("a", entry("x"))
        uow.entries.save("new-ns", entry("y"))
        uow.entries.clear("a")
    assert snapshot(tmp_path) == before


def test_failed_precondition_raises_and_writes_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    head = entry("head", 1)
    store.save("a", head)
    before = snapshot(tmp_path)
    with store.unit_of_work() as uow:
        uow.entries.save("new-ns", entry("side"))
        uow.entries.delete("a", head.entry_id)
        # Conditioned on this unit of work's own delete: refused at once, as in SQL.
        with pytest.raises(ConcurrencyError, match="in this unit of work"):
            uow.entries.save("a", head.copy_entry(content=2), expected_version=5)
        uow.entries.save("a", entry("other", 3), expected_version=5)  # checked at commit
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert snapshot(tmp_path) == before
    assert not store.path_for("new-ns").exists()


def test_stale_read_in_unit_of_work_is_detected(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    head = entry("head", 1)
    store.save("a", head)
    with store.unit_of_work() as uow:
        seen = uow.entries.get("a", head.entry_id)
        assert seen is not None
        # Another writer (a second instance, as another process would be) gets in first.
        FileStore(tmp_path).save("a", head.copy_entry(content="theirs"))
        uow.entries.save("a", seen.copy_entry(content="mine"), expected_version=seen.version)
        uow.entries.save("b", entry("side"))
        with pytest.raises(ConcurrencyError):
            uow.commit()
    got = store.load_by_key("a", "head")
    assert got is not None and got.content == "theirs"
    assert store.load("b") == []


def test_insert_only_precondition(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    e = entry("k")
    with store.unit_of_work() as uow:
        uow.entries.save("a", e, expected_version=0)
        uow.commit()
    with store.unit_of_work() as uow:
        uow.entries.save("a", e, expected_version=0)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert store.load("a")[0].version == 1


def test_unit_of_work_with_corrupt_namespace_writes_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("good", entry("k"))
    before = snapshot(tmp_path)
    store.path_for("bad").write_bytes(b"garbage")
    with store.unit_of_work() as uow:
        uow.entries.save("good", entry("new"))
        uow.entries.save("bad", entry("new"))
        with pytest.raises(StoreCorruptedError):
            uow.commit()
    assert snapshot(tmp_path) == {**before, store.path_for("bad").name: b"garbage"}


def test_unit_of_work_protocol(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    def use(uow: UnitOfWork) -> None:
        uow.entries.save("ns", entry("k"))
        uow.commit()

    use(store.unit_of_work())
    assert len(store.load("ns")) == 1


# --------------------------------------------------------------------------- async


async def test_async_twins(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    keep, drop = entry("keep"), entry("drop")
    await store.async_save("ns", keep)
    await store.async_save("ns", drop)
    await store.async_save("ns", entry("dead", expires_at=PAST))
    assert [e.key for e in await store.async_load("ns")] == ["keep", "drop"]
    got = await store.async_load_by_key("ns", "drop")
    assert got is not None and got.entry_id == drop.entry_id
    await store.async_delete("ns", drop.entry_id)
    assert [e.key for e in await store.async_load("ns")] == ["keep"]
    assert await store.async_cleanup_expired() == 1
    await store.async_clear("ns")
    assert await store.async_load("ns") == []
    assert not store.path_for("ns").exists()


async def test_async_unit_of_work(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("ns", entry("k", 1))

    def bump(uow: UnitOfWork) -> int:
        current = uow.entries.get_by_key("ns", "k")
        assert current is not None
        uow.entries.save("ns", current.copy_entry(content=current.content + 1), expected_version=1)
        return int(current.content)

    async with store.async_unit_of_work() as uow:
        assert await uow.run_sync(bump) == 1
        await uow.commit()
    got = await store.async_load_by_key("ns", "k")
    assert got is not None and got.content == 2 and got.version == 2

    async with store.async_unit_of_work() as uow:
        await uow.run_sync(bump)  # expects version 1, store is at 2
        with pytest.raises(ConcurrencyError):
            await uow.commit()
    got = store.load_by_key("ns", "k")
    assert got is not None and got.content == 2


def test_repr_names_directory(tmp_path: Path) -> None:
    assert str(tmp_path) in repr(FileStore(tmp_path))


def test_created_at_order_survives_reopen(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    base = utcnow()
    later = entry("later", created_at=base + timedelta(seconds=5))
    earlier = entry("earlier", created_at=base)
    store.save("ns", later)
    store.save("ns", earlier)
    assert [e.key for e in FileStore(tmp_path).load("ns")] == ["earlier", "later"]
