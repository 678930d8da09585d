"""FileStore's snapshot and log: per-operation cost, legacy files, torn lines, compaction, journals.

The cost tests read :data:`firefly_orm.file_store._log.counters` (bytes of namespace files
parsed, entries decoded, bytes written, bytes hashed) around one operation at two sizes of the
conversation: deterministic proxies of the time an operation takes.  Processes are
forked where a test needs "another process" (its own parsed-state cache).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import astuple
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import StoreCorruptedError
from firefly_orm.file_store import FileStore
from firefly_orm.file_store import _commit as file_commit
from firefly_orm.file_store import _journal as file_journal
from firefly_orm.file_store import _log as file_log
from firefly_orm.store import InMemoryStore

CID = "c"
TOKENS_PER_TURN = 10


class FlatEstimator:
    """Every turn costs the same number of tokens (so each add_turn evicts exactly one)."""

    def estimate(self, text: str) -> int:
        return TOKENS_PER_TURN


def memory(store: FileStore, turns: int) -> ConversationMemory:
    """A conversation memory that keeps ``turns`` turns and archives the evicted ones."""
    budget = TOKENS_PER_TURN * turns
    return ConversationMemory(
        store=store,
        max_tokens=budget,
        summarize_threshold=budget,
        estimator=FlatEstimator(),  # type: ignore[arg-type]
        keep_evicted=True,
    )


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Directories holding a conversation of 100 and of 5,000 turns (and a short archive)."""
    made = {}
    for turns in (100, 5000):
        directory = tmp_path_factory.mktemp(f"turns{turns}")
        mem = memory(FileStore(directory), turns)
        text = "lorem ipsum dolor sit amet " * 8
        mem.import_conversation(
            {
                "conversation_id": CID,
                "turns": [
                    {"user_prompt": f"{i} {text}", "assistant_response": text} for i in range(turns)
                ],
            }
        )
        mem.add_turn(CID, "first eviction", "creates the archive")
        made[turns] = directory
    return made


def filled(
    templates: dict[int, Path], directory: Path, turns: int
) -> tuple[FileStore, ConversationMemory]:
    """A copy of a template, used once (so that it is parsed and cached)."""
    shutil.copytree(templates[turns], directory)
    store = FileStore(directory)
    mem = memory(store, turns)
    mem.add_turn(CID, "warm-up", "evicts one more turn into the archive")
    return store, mem


def counted(action: Callable[[], Any]) -> tuple[int, int, int]:
    """(bytes parsed, entries decoded, bytes written) by ``action``; it must hash nothing."""
    before = astuple(file_log.counters)
    action()
    after = astuple(file_log.counters)
    parsed, decoded, written, hashed = (a - b for a, b in zip(after, before, strict=True))
    assert hashed == 0
    return parsed, decoded, written


def run_in_child(target: Callable[..., None], *args: Any) -> None:
    """Run ``target`` in a forked process (its own cache, as another process would have)."""
    process = multiprocessing.get_context("fork").Process(target=target, args=args)
    process.start()
    process.join(60)
    assert process.exitcode == 0


def _add_turn_in_child(directory: str, turns: int, prompt: str) -> None:
    memory(FileStore(directory), turns).add_turn(CID, prompt, "from another process")


@pytest.fixture
def compact_always(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(file_log, "COMPACT_MIN_BYTES", 0)
    yield


# --------------------------------------------------------------------------- format


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the records of a namespace's log (see firefly_orm.file_store._log)."""
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"", "a log ends with a complete line"
    header, *records = (json.loads(line) for line in lines[:-1])
    return header, records


# --------------------------------------------------------------------------- cost


def test_add_turn_and_history_cost_the_same_at_100_and_5000_turns(
    templates: dict[int, Path], tmp_path: Path
) -> None:
    figures = {}
    for turns in (100, 5000):
        store, mem = filled(templates, tmp_path / str(turns), turns)
        add = counted(partial(mem.add_turn, CID, "next", "evicts one turn to the archive"))
        read = counted(partial(mem.get_message_history, CID))
        namespace = f"conversation:{CID}"
        size = sum(
            p.stat().st_size for p in (store.path_for(namespace), store.log_path_for(namespace))
        )
        figures[turns] = (add, read, size)
    (add_small, read_small, size_small), (add_large, read_large, size_large) = figures.values()
    print(f"\nper add_turn (bytes parsed, entries decoded, bytes written): {figures}")
    assert size_large > 40 * size_small  # the namespace really is 50x larger
    # A read parses nothing new; an add_turn decodes only its own lines (turn, head,
    # archived turn) and writes only them: the same at both sizes (give or take the
    # digits of the head's token total).
    assert read_small == read_large == (0, 0, 0)
    assert add_small[1] == add_large[1] > 0
    for small, large in zip(add_small, add_large, strict=True):
        assert abs(large - small) <= 16


def test_another_process_s_append_is_read_as_a_tail(
    templates: dict[int, Path], tmp_path: Path
) -> None:
    for turns in (100, 5000):
        directory = tmp_path / str(turns)
        store, mem = filled(templates, directory, turns)
        path = store.log_path_for(f"conversation:{CID}")
        size = path.stat().st_size
        run_in_child(_add_turn_in_child, str(directory), turns, f"child-{turns}")
        grown = path.stat().st_size - size
        parsed, decoded, _ = counted(partial(mem.get_message_history, CID))
        assert 0 < grown < 2000
        assert parsed == grown  # this file's tail only (the archive is not read)
        assert decoded == 2  # the new turn and the head
        assert mem.get_turns(CID)[-1].user_prompt == f"child-{turns}"


# --------------------------------------------------------------------------- compaction


def test_compaction_keeps_content_and_bounds_the_file(tmp_path: Path, compact_always: None) -> None:
    store, reference = FileStore(tmp_path), InMemoryStore()
    head = MemoryEntry(key="head", content=0)
    for i in range(120):
        item = MemoryEntry(entry_id=f"e{i}", key=f"k{i % 7}", content=i)
        for target in (store, reference):
            target.save("ns", head.copy_entry(content=i))
            target.save("ns", item)
            if i >= 5:
                target.delete("ns", f"e{i - 5}")
    path = store.path_for("ns")
    header, _ = read_log(store.log_path_for("ns"))
    assert header["base"] is not None  # started by a compaction of an earlier log

    def dump(entries: list[MemoryEntry]) -> list[dict[str, Any]]:
        return [e.to_dict() for e in entries]

    live_bytes = sum(len(json.dumps(e.to_json_dict())) for e in store.load("ns"))
    assert path.stat().st_size + store.log_path_for("ns").stat().st_size < 3 * live_bytes + 1000
    assert dump(store.load("ns")) == dump(reference.load("ns"))
    file_commit.forget(path)  # parse it from scratch, as a new process would
    assert dump(store.load("ns")) == dump(reference.load("ns"))
    for key in ("head", "k3"):
        assert store.load_by_key("ns", key).to_dict() == reference.load_by_key("ns", key).to_dict()  # type: ignore[union-attr]


def _compact_in_child(directory: str) -> None:
    file_log.COMPACT_MIN_BYTES = 0
    store = FileStore(directory)
    store.save("ns", MemoryEntry(entry_id="head", key="head", content="child"))


def test_a_compaction_elsewhere_is_adopted_without_reparsing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for i in range(150):  # 150 versions of the head: mostly dead records, yet under 64 KiB
        store.save("ns", MemoryEntry(entry_id="head", key="head", content=i))
        if i % 10 == 0:
            store.save("ns", MemoryEntry(key=f"k{i}", content="x" * 100))
    log = store.log_path_for("ns")
    size = store.path_for("ns").stat().st_size + log.stat().st_size
    assert read_log(log)[0]["base"] is None  # never compacted
    run_in_child(_compact_in_child, str(tmp_path))
    assert read_log(log)[0]["base"] is not None
    before = file_log.counters.bytes_hashed
    parsed, decoded = file_log.counters.bytes_parsed, file_log.counters.entries_decoded
    store.load("ns")
    parsed = file_log.counters.bytes_parsed - parsed
    decoded = file_log.counters.entries_decoded - decoded
    hashed = file_log.counters.bytes_hashed - before
    assert parsed < size / 10  # the header and the child's line, not the snapshot
    assert hashed == store.path_for("ns").stat().st_size  # the snapshot checked, not parsed
    assert decoded == 1
    assert store.load_by_key("ns", "head").content == "child"  # type: ignore[union-attr]
    assert len(store.load("ns")) == 16


# --------------------------------------------------------------------------- legacy files


def legacy_file(store: FileStore, namespace: str, entries: list[MemoryEntry]) -> Path:
    """A namespace file as earlier versions wrote it (one JSON object, indented)."""
    path = store.path_for(namespace)
    data = {e.entry_id: e.copy_entry(namespace=namespace).to_json_dict() for e in entries}
    path.write_text(json.dumps(data, indent=2))
    return path


def test_legacy_files_are_read_as_snapshots(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    old = [MemoryEntry(key=f"k{i}", content=i) for i in range(3)]
    path = legacy_file(store, "ns", old)
    legacy_file(store, "other", [MemoryEntry(key="x", content="other")])
    assert [e.content for e in store.load("ns")] == [0, 1, 2]
    assert store.load_by_key("ns", "k1").content == 1  # type: ignore[union-attr]
    assert store.namespaces == ["ns", "other"]
    legacy_bytes = {name: store.path_for(name).read_bytes() for name in ("ns", "other")}
    with store.unit_of_work() as uow:
        assert [e.content for e in uow.entries.list("ns", limit=2, newest_first=True)] == [2, 1]
        uow.entries.save("ns", MemoryEntry(key="new", content=3))
        uow.entries.save("other", MemoryEntry(key="y", content="more"))
        uow.commit()
    for name in ("ns", "other"):  # a legacy file is a snapshot: the commit went to a log
        assert json.loads(store.path_for(name).read_bytes()) == json.loads(legacy_bytes[name]), name
        assert read_log(store.log_path_for(name))[1][0]["put"]
    assert file_journal.pending(tmp_path) == []
    file_commit.forget(path)
    assert [e.content for e in store.load("ns")] == [0, 1, 2, 3]
    assert sorted(e.content for e in store.load("other")) == ["more", "other"]


# --------------------------------------------------------------------------- torn and bad lines


def test_a_torn_last_line_is_ignored_then_cut_off(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("ns", MemoryEntry(key="a", content=0))
    store.save("ns", MemoryEntry(key="a", content=1))  # the snapshot holds 0, the log 1
    store.delete("ns", store.load("ns")[0].entry_id)
    path = store.log_path_for("ns")
    good = path.read_bytes()
    for torn in (b'{"id":"x","put":[{"entry_id":"b"', b'{"id":"x","put":[{"entry_id\x00\n'):
        path.write_bytes(good + torn)
        for reader in (store, FileStore(tmp_path)):
            assert [e.content for e in reader.load("ns")] == [1]
        file_commit.forget(store.path_for("ns"))
        assert [e.content for e in store.load("ns")] == [1]
        assert path.read_bytes() == good + torn  # reads change nothing
    store.save("ns", MemoryEntry(key="b", content=2))
    data = path.read_bytes()
    assert data.startswith(good) and b"\x00" not in data and data.endswith(b"\n")
    file_commit.forget(store.path_for("ns"))
    assert [e.content for e in store.load("ns")] == [1, 2]


def _rewritten(path: Path, content: bytes) -> None:
    tmp = path.with_name("replacement")
    tmp.write_bytes(content)
    os.replace(tmp, path)


def test_bad_lines_and_headers_are_corruption(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("ns", MemoryEntry(key="a", content=0))
    store.save("ns", MemoryEntry(key="a", content=1))
    path = store.log_path_for("ns")
    header, record = path.read_bytes().splitlines(keepends=True)
    entry_json = json.loads(record)["put"][0]
    other_ns = json.dumps({"id": "x", "put": [{**entry_json, "namespace": "zz"}]}).encode()
    cases = {
        "garbage middle line": header + b"nonsense\n" + record,
        "unknown record field": header + b'{"id":"x","nope":1}\n',
        "entry of another namespace": header + other_ns + b"\n",
        "invalid entry": header
        + json.dumps({"put": [{**entry_json, "importance": 7}]}).encode()
        + b"\n",
        "newer format": header.replace(b'"version":2', b'"version":3') + record,
        "no header": record,
        "header of another namespace": header.replace(b'"namespace":"ns"', b'"namespace":"x"'),
    }
    for name, content in cases.items():
        _rewritten(path, content)
        for call in (lambda: store.load("ns"), lambda: store.save("ns", MemoryEntry())):
            with pytest.raises(StoreCorruptedError) as info:
                call()
            assert f"memory log {path}" in str(info.value), name
            assert path.read_bytes() == content, name


def test_a_symlinked_namespace_file_is_refused(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    os.symlink(target, store.path_for("ns"))
    with pytest.raises(StoreCorruptedError, match="memory file"):
        store.load("ns")
    with pytest.raises(StoreCorruptedError):
        store.save("ns", MemoryEntry())
    assert target.read_text() == "precious"
    store.path_for("ns").unlink()
    store.save("ns", MemoryEntry())
    store.log_path_for("ns").unlink(missing_ok=True)
    os.symlink(target, store.log_path_for("ns"))  # the log too
    for call in (lambda: store.load("ns"), lambda: store.save("ns", MemoryEntry())):
        with pytest.raises(StoreCorruptedError, match="memory log"):
            call()
    assert target.read_text() == "precious"


# --------------------------------------------------------------------------- journals


def test_a_half_applied_commit_is_completed_by_the_next_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    store.save("a", MemoryEntry(entry_id="moving", key="t", content="in a"))
    real_run = file_commit._run
    calls = {"n": 0}

    def dies_on_second_file(plan: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # as if the process stopped here
        return real_run(plan)

    monkeypatch.setattr(file_commit, "_run", dies_on_second_file)
    monkeypatch.setattr(file_commit, "_undo", lambda done: False)
    with pytest.raises(KeyboardInterrupt), store.unit_of_work() as uow:
        uow.entries.delete("a", ["moving"])
        uow.entries.save("b", MemoryEntry(entry_id="moving", key="t", content="in b"))
        uow.commit()
    monkeypatch.undo()
    [journal] = file_journal.pending(tmp_path)
    # "b" (created) sorts before "a" (emptied, so removed last): b was written, a not yet.
    assert store.path_for("a").exists() and store.path_for("b").exists()
    assert [e.content for e in store.load("a")] == []  # locking "a" completed the commit
    assert [e.content for e in store.load("b")] == ["in b"]
    assert not journal.exists()
    assert not store.path_for("a").exists()


def test_a_leftover_journal_is_completed_on_open_and_only_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    store.save("a", MemoryEntry(key="x", content=0))
    store.save("b", MemoryEntry(key="y", content=0))
    seen: list[bytes] = []
    real_remove = file_journal.remove

    def keep(path: Path) -> None:
        seen.append(path.read_bytes())
        raise KeyboardInterrupt  # stopped after every file was written, before the removal

    monkeypatch.setattr(file_journal, "remove", keep)
    with pytest.raises(KeyboardInterrupt), store.unit_of_work() as uow:
        uow.entries.save("a", MemoryEntry(key="x2", content=1))
        uow.entries.save("b", MemoryEntry(key="y2", content=1))
        uow.commit()
    monkeypatch.setattr(file_journal, "remove", real_remove)
    sizes = {ns: store.log_path_for(ns).stat().st_size for ns in "ab"}
    assert len(file_journal.pending(tmp_path)) == 1
    FileStore(tmp_path)  # opening completes it: both lines are there, nothing is appended
    assert file_journal.pending(tmp_path) == []
    assert {ns: store.log_path_for(ns).stat().st_size for ns in "ab"} == sizes
    assert [e.content for e in store.load("a")] == [0, 1]
    assert [e.content for e in store.load("b")] == [0, 1]


def test_a_corrupt_journal_is_reported_and_left_alone(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("a", MemoryEntry(content=1))
    directory = tmp_path / file_journal.JOURNAL_DIR
    directory.mkdir()
    bad = directory / ("0" * 32 + ".json")
    bad.write_text('{"format": "firefly_orm.file_journal", "version": 1')
    with pytest.raises(StoreCorruptedError, match="commit journal"):
        store.load("a")
    with pytest.raises(StoreCorruptedError, match=str(bad)):
        FileStore(tmp_path)
    assert bad.exists()


# --------------------------------------------------------------------------- cache and temps


def test_a_small_cache_still_gives_right_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_commit, "CACHE_MAX_ENTRIES", 5)
    store = FileStore(tmp_path)
    for i in range(30):
        store.save(f"ns{i % 6}", MemoryEntry(key=f"k{i}", content=i))
    for n in range(6):
        assert [e.content for e in store.load(f"ns{n}")] == list(range(n, 30, 6))


def test_temporary_files_of_dead_writers_are_removed_on_open(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.save("ns", MemoryEntry(content=1))
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead, alive = finished.pid, os.getpid()
    name = store.path_for("ns").name
    journals = tmp_path / file_journal.JOURNAL_DIR
    journals.mkdir()
    orphans = [
        tmp_path / f".{name}.{dead}.abc123.tmp",
        journals / f".{'1' * 32}.json.{dead}.x1.tmp",
        tmp_path / f".{name}.old_v1.tmp",  # an earlier version's name, two hours old
    ]
    kept = [tmp_path / f".{name}.{alive}.abc123.tmp", tmp_path / f".{name}.new_v1.tmp"]
    for path in orphans + kept:
        path.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(orphans[2], (two_hours_ago, two_hours_ago))
    FileStore(tmp_path)
    assert [p.exists() for p in orphans] == [False, False, False]
    assert [p.exists() for p in kept] == [True, True]
    assert [e.content for e in store.load("ns")] == [1]
