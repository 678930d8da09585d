"""FileStore's parsed-state cache is bounded, strictly (issue 34, attack 8).

Opening a 20,000-turn conversation added 71 MB to a process: the namespace
just used was always kept parsed, whatever its size.  Now the cache holds at
most :data:`~firefly_orm.file_store._commit.CACHE_MAX_ENTRIES` entries and
:data:`~firefly_orm.file_store._commit.CACHE_MAX_BYTES` bytes of records over
all namespaces, least recently used dropped first, and a namespace over a
bound on its own is not kept (it is parsed again at its next use).

Deterministic proxies, no memory measurement: the cache's own totals, and
``counters.entries_decoded`` (entries built from the files).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.file_store import FileStore
from firefly_orm.file_store import _commit as file_commit
from firefly_orm.file_store._log import counters
from firefly_orm.uow import unit_of_work_for

MAX_ENTRIES = 40
MAX_BYTES = 16_000


@pytest.fixture
def small_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh, small cache for this test (the process-wide one is left alone)."""
    monkeypatch.setattr(file_commit, "_cache", file_commit._StateCache())
    monkeypatch.setattr(file_commit, "CACHE_MAX_ENTRIES", MAX_ENTRIES)
    monkeypatch.setattr(file_commit, "CACHE_MAX_BYTES", MAX_BYTES)


def _within_bounds() -> None:
    _, entries, size = file_commit.cache_totals()
    assert entries <= MAX_ENTRIES
    assert size <= MAX_BYTES


def _fill(store: FileStore, namespace: str, count: int, text: str = "x" * 50) -> None:
    with unit_of_work_for(store) as uow:
        for i in range(count):
            uow.entries.save(namespace, MemoryEntry(key=f"k{i:05d}", content={"i": i, "t": text}))
        uow.commit()


def _decoded_by(action: object) -> int:
    before = counters.entries_decoded
    assert callable(action)
    action()
    return counters.entries_decoded - before


@pytest.mark.usefixtures("small_cache")
def test_a_namespace_larger_than_the_cache_is_not_kept(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    _fill(store, "big", 3 * MAX_ENTRIES)
    _within_bounds()
    assert [e.content["i"] for e in store.load("big")] == list(range(3 * MAX_ENTRIES))
    _within_bounds()
    assert file_commit.cache_totals()[0] == 0
    # So each use parses it again: memory bounded, the parse paid per use.
    assert _decoded_by(lambda: store.load("big")) == 3 * MAX_ENTRIES


@pytest.mark.usefixtures("small_cache")
def test_a_namespace_over_the_byte_bound_alone_is_not_kept(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    _fill(store, "wide", 5, text="y" * (MAX_BYTES // 4))  # few entries, many bytes
    assert len(store.load("wide")) == 5
    assert file_commit.cache_totals() == (0, 0, 0)


@pytest.mark.usefixtures("small_cache")
def test_small_namespaces_are_kept_least_recently_used_first_out(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for n in range(6):
        _fill(store, f"ns{n}", 10)
        _within_bounds()
    for n in range(6):
        assert len(store.load(f"ns{n}")) == 10
        _within_bounds()
    namespaces, entries, _ = file_commit.cache_totals()
    assert (namespaces, entries) == (4, 40)
    # The most recently used are the ones kept: reading them again parses nothing.
    assert _decoded_by(lambda: store.load("ns5")) == 0
    assert _decoded_by(lambda: store.load("ns0")) == 10


@pytest.mark.usefixtures("small_cache")
def test_a_long_conversation_stays_right_and_the_cache_bounded(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    memory = ConversationMemory(store=store)
    cid = "long-conversation"
    for i in range(MAX_ENTRIES + 10):
        memory.add_turn(cid, f"turn {i}", "ok")
        _within_bounds()
    turns = memory.get_turns(cid)
    assert [t.user_prompt for t in turns] == [f"turn {i}" for i in range(MAX_ENTRIES + 10)]
    _within_bounds()
    # Another process (a new store object, the cache emptied) reads the same.
    file_commit._cache.discard(str(store.path_for("any")))
    again = ConversationMemory(store=FileStore(tmp_path)).get_turns(cid)
    assert [t.user_prompt for t in again] == [t.user_prompt for t in turns]
    _within_bounds()


def test_the_default_bounds() -> None:
    assert file_commit.CACHE_MAX_ENTRIES == 100_000
    assert file_commit.CACHE_MAX_BYTES == 32 * 1024 * 1024


def test_entries_are_kept_packed_and_handed_out_fresh(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    _fill(store, "packed", 20, text="the same words again and again " * 20)
    state = file_commit.load_state(store.path_for("packed"), "packed")
    assert state is not None
    kept = sum(len(packed.blob) for packed in state.index._entries.values())
    assert kept < state.live_bytes / 2  # JSON, compressed
    first, second = store.load("packed"), store.load("packed")
    assert first == second and first[0] is not second[0]
    first[0].content["i"] = -1  # a reader's change stays the reader's
    assert store.load("packed")[0].content["i"] == 0
    assert store.read_by_key("packed", "k00003")[0].content["i"] == 3
    assert [e.key for e in store.read_list("packed", newest_first=True, limit=2)] == [
        "k00019",
        "k00018",
    ]
