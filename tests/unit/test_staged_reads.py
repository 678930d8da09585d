"""Reads inside a staged unit of work fetch only what they need.

The staged unit of work (InMemoryStore, FileStore, MongoDB) reads through the
``StagedBackend`` primitives (by id, by key, a limited window of a key range) and
overlays its own staged writes.  These tests count what the backend hands back
during an ``add_turn``-like sequence at 10 and 1,000 stored entries (the counts
must not grow), and pin the overlay's edge cases against a reference store.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Unpack

import pytest

from firefly_orm.entry import MemoryEntry, derived_entry_id, utcnow
from firefly_orm.file_store import FileStore
from firefly_orm.protocols import ListOptions, StagedBackend
from firefly_orm.store import InMemoryStore
from firefly_orm.uow import StagedChanges, StagedUnitOfWork, select_entries

NS = "conversation:c1"
OTHER = "conversation:c2"
HEAD = "head"
TURN = "turn:"


def turn_key(n: int) -> str:
    return f"{TURN}{n:08d}"


def turn(n: int, **fields: Any) -> MemoryEntry:
    return MemoryEntry(
        entry_id=derived_entry_id(NS, turn_key(n)), key=turn_key(n), content=n, **fields
    )


class CountingBackend:
    """A StagedBackend proxy that records each read and how many entries it returned."""

    def __init__(self, inner: StagedBackend) -> None:
        self.inner = inner
        self.reads: list[tuple[str, str, int]] = []

    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        found = self.inner.read_entry(namespace, entry_id)
        self.reads.append(("read_entry", namespace, 0 if found is None else 1))
        return found

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        rows = self.inner.read_by_key(namespace, key)
        self.reads.append(("read_by_key", namespace, len(rows)))
        return rows

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        rows = self.inner.read_list(namespace, **options)
        self.reads.append(("read_list", namespace, len(rows)))
        return rows

    def apply_changes(self, changes: StagedChanges) -> None:
        self.inner.apply_changes(changes)


@pytest.fixture(params=["memory", "file"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[InMemoryStore | FileStore]:
    if request.param == "memory":
        yield InMemoryStore()
    else:
        yield FileStore(tmp_path / "files")


def fill(store: InMemoryStore | FileStore, turns: int) -> None:
    """A conversation namespace: one head and ``turns`` turns."""
    with store.unit_of_work() as uow:
        uow.entries.save(NS, MemoryEntry(key=HEAD, content={"next": turns}))
        for n in range(turns):
            uow.entries.save(NS, turn(n))
        uow.commit()


def add_turn(uow: StagedUnitOfWork, evict: int) -> None:
    """What ``add_turn`` does: read the head, read the oldest turns, write."""
    head = uow.entries.get_by_key(NS, HEAD, for_update=True)
    assert head is not None
    n = head.content["next"]
    oldest = uow.entries.list(NS, key_prefix=TURN, limit=evict)
    assert [e.content for e in oldest] == list(range(evict))
    uow.entries.delete(NS, [e.entry_id for e in oldest])
    uow.entries.save(NS, turn(n))
    # read back through the overlay: the window must still hold ``evict`` rows
    window = uow.entries.list(NS, key_prefix=TURN, limit=evict)
    assert len(window) == min(evict, n + 1 - len(oldest))
    assert all(e.entry_id not in {o.entry_id for o in oldest} for e in window)
    uow.entries.save(NS, head.copy_entry(content={"next": n + 1}), expected_version=head.version)
    uow.commit()


def reads_for_one_turn(store: InMemoryStore | FileStore, stored: int) -> list[tuple[str, str, int]]:
    fill(store, stored)
    counting = CountingBackend(store)
    add_turn(StagedUnitOfWork(counting), evict=2)
    assert len(store.load(NS)) == 1 + stored - 2 + 1
    return counting.reads


def test_add_turn_reads_the_same_at_10_and_1000_entries(
    backend: InMemoryStore | FileStore, tmp_path: Path
) -> None:
    small = reads_for_one_turn(backend, 10)
    large_store = InMemoryStore() if isinstance(backend, InMemoryStore) else FileStore(tmp_path)
    large = reads_for_one_turn(large_store, 1000)
    assert small == large
    # the head; the two oldest turns; the window of two read again over three
    # staged writes (two deletes and a save), so the backend is asked for 2 + 3
    assert small == [("read_by_key", NS, 1), ("read_list", NS, 2), ("read_list", NS, 5)]


def test_in_memory_add_turn_copies_the_same_at_10_and_1000_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    copies = {"n": 0}
    original = MemoryEntry.copy_entry

    def counting_copy(self: MemoryEntry, **changes: Any) -> MemoryEntry:
        copies["n"] += 1
        return original(self, **changes)

    counts = []
    for stored in (10, 1000):
        store = InMemoryStore()
        fill(store, stored)
        copies["n"] = 0
        with monkeypatch.context() as patch:
            patch.setattr(MemoryEntry, "copy_entry", counting_copy)
            with store.unit_of_work() as uow:
                add_turn(uow, evict=2)
        counts.append(copies["n"])
    assert counts[0] == counts[1]
    assert counts[0] < 20


# --------------------------------------------------------------------------- overlay edge cases


def keys(entries: list[MemoryEntry]) -> list[str | None]:
    return [e.key for e in entries]


def test_staged_delete_inside_a_limited_window(backend: InMemoryStore | FileStore) -> None:
    fill(backend, 10)
    with backend.unit_of_work() as uow:
        uow.entries.delete(NS, [turn(0).entry_id, turn(1).entry_id, turn(9).entry_id])
        oldest = uow.entries.list(NS, key_prefix=TURN, limit=3)
        newest = uow.entries.list(NS, key_prefix=TURN, limit=3, newest_first=True)
        everything = uow.entries.list(NS, limit=20)
    assert keys(oldest) == [turn_key(2), turn_key(3), turn_key(4)]
    assert keys(newest) == [turn_key(8), turn_key(7), turn_key(6)]
    assert len(everything) == 1 + 10 - 3


def test_staged_writes_enter_and_leave_the_window(backend: InMemoryStore | FileStore) -> None:
    fill(backend, 5)
    with backend.unit_of_work() as uow:
        # an update that moves turn 0 out of the prefix, and a new turn sorting first
        uow.entries.save(NS, turn(0).copy_entry(key="archived:0"))
        uow.entries.save(NS, MemoryEntry(key=f"{TURN}-1", content=-1))
        assert [e.content for e in uow.entries.list(NS, key_prefix=TURN, limit=2)] == [-1, 1]
        assert uow.entries.list_contents(NS, key_prefix="archived:") == [0]
        assert uow.entries.list_contents(NS, key_prefix=TURN, limit=0) == []


def test_moved_id_is_hidden_from_its_old_namespace(backend: InMemoryStore | FileStore) -> None:
    fill(backend, 3)
    first = turn(0)
    with backend.unit_of_work() as uow:
        uow.entries.save(OTHER, first)
        assert uow.entries.get(NS, first.entry_id) is None
        assert uow.entries.get(OTHER, first.entry_id) is not None
        assert keys(uow.entries.list(NS, key_prefix=TURN, limit=1)) == [turn_key(1)]
        assert uow.entries.get_by_key(NS, turn_key(0)) is None
        assert keys(uow.entries.list(OTHER)) == [turn_key(0)]


def test_get_by_key_falls_back_to_an_older_match(backend: InMemoryStore | FileStore) -> None:
    older = MemoryEntry(key="k", content="older")
    newer = MemoryEntry(key="k", content="newer")
    backend.save(NS, older)
    backend.save(NS, newer)
    with backend.unit_of_work() as uow:
        got = uow.entries.get_by_key(NS, "k")
        assert got is not None and got.content == "newer"
        uow.entries.delete(NS, newer.entry_id)
        got = uow.entries.get_by_key(NS, "k")
        assert got is not None and got.content == "older"
        staged = MemoryEntry(key="k", content="staged")
        uow.entries.save(NS, staged)
        got = uow.entries.get_by_key(NS, "k")
        assert got is not None and got.content == "staged"
        got.content = "mutated"  # a copy: the staged write is unchanged
        again = uow.entries.get_by_key(NS, "k")
        assert again is not None and again.content == "staged"


def test_cleared_namespace_reads_nothing_from_the_backend(
    backend: InMemoryStore | FileStore,
) -> None:
    fill(backend, 5)
    counting = CountingBackend(backend)
    with StagedUnitOfWork(counting) as uow:
        uow.entries.clear(NS)
        fresh = MemoryEntry(key=turn_key(99), content="fresh")
        uow.entries.save(NS, fresh)
        assert uow.entries.get_by_key(NS, HEAD) is None
        assert uow.entries.get(NS, turn(1).entry_id) is None
        assert uow.entries.list_contents(NS, key_prefix=TURN, limit=3) == ["fresh"]
        assert uow.entries.get(NS, fresh.entry_id) is not None
    assert [r for r in counting.reads if r[1] == NS] == []


def test_expired_rows_never_show_and_never_shorten_the_window(
    backend: InMemoryStore | FileStore,
) -> None:
    past = utcnow() - timedelta(seconds=1)
    for n in range(3):
        backend.save(NS, turn(n, expires_at=past))
    for n in range(3, 6):
        backend.save(NS, turn(n))
    with backend.unit_of_work() as uow:
        assert keys(uow.entries.list(NS, key_prefix=TURN, limit=2)) == [turn_key(3), turn_key(4)]
        assert uow.entries.get(NS, turn(0).entry_id) is None
        assert uow.entries.get_by_key(NS, turn_key(1)) is None
        uow.entries.save(NS, turn(9, expires_at=past))  # a staged expired write
        uow.entries.save(NS, turn(0))  # revives an expired row
        assert uow.entries.get(NS, turn(9).entry_id) is None
        assert keys(uow.entries.list(NS, key_prefix=TURN, limit=2)) == [turn_key(0), turn_key(3)]


def test_read_list_returns_only_the_window(backend: InMemoryStore | FileStore) -> None:
    fill(backend, 50)
    rows = backend.read_list(NS, key_prefix=TURN, limit=3, newest_first=True)
    assert keys(rows) == [turn_key(49), turn_key(48), turn_key(47)]
    assert [e.content for e in backend.read_by_key(NS, turn_key(7))] == [7]
    one = backend.read_entry(NS, turn(7).entry_id)
    assert one is not None and one.content == 7
    assert backend.read_entry(OTHER, turn(7).entry_id) is None


@pytest.mark.parametrize("seed", range(25))
def test_overlay_matches_a_store_that_applied_the_same_changes(seed: int) -> None:
    """Random staged changes: every read equals the reads after a plain replay.

    Moves between namespaces are included; deleting or clearing an id moved in
    the same unit of work is not (the staged unit of work cannot know where the
    moved id was stored, a known limit of staged stores).
    """
    rng = random.Random(seed)
    home: dict[str, str] = {}  # entry_id -> namespace it is stored in (reference)
    moved: dict[str, str] = {}  # entry_id -> namespace it was moved into in the uow
    staged_store, reference = InMemoryStore(), InMemoryStore()
    past = utcnow() - timedelta(seconds=1)
    pool: list[MemoryEntry] = []
    for n in range(30):
        e = MemoryEntry(
            key=rng.choice([None, "a", "b", f"{TURN}{rng.randrange(10)}"]),
            content=n,
            expires_at=past if rng.random() < 0.15 else None,
        )
        ns = rng.choice([NS, OTHER])
        staged_store.save(ns, e)
        reference.save(ns, e)
        home[e.entry_id] = ns
        pool.append(e)

    with staged_store.unit_of_work() as uow:
        for step in range(rng.randrange(1, 15)):
            ns = rng.choice([NS, OTHER])
            action = rng.random()
            if action < 0.35:
                e = rng.choice(pool).copy_entry(key=rng.choice(["a", f"{TURN}{step}", None]))
                e.content = f"updated {step}"
                if home.get(e.entry_id, ns) != ns:
                    moved[e.entry_id] = ns
                uow.entries.save(ns, e)
                reference.save(ns, e)
                home[e.entry_id] = ns
            elif action < 0.6:
                e = MemoryEntry(key=rng.choice(["a", "b", f"{TURN}{step}"]), content=f"new {step}")
                pool.append(e)
                uow.entries.save(ns, e)
                reference.save(ns, e)
                home[e.entry_id] = ns
            elif action < 0.9:
                victim = rng.choice(pool).entry_id
                if moved.get(victim) == ns:
                    continue
                uow.entries.delete(ns, victim)
                reference.delete(ns, victim)
                if home.get(victim) == ns:
                    del home[victim]
            elif ns not in moved.values():
                uow.entries.clear(ns)
                reference.clear(ns)
                home = {i: where for i, where in home.items() if where != ns}

        for ns in (NS, OTHER):
            for options in (
                ListOptions(),
                ListOptions(limit=3),
                ListOptions(key_prefix=TURN, limit=2),
                ListOptions(key_prefix=TURN, limit=4, newest_first=True),
                ListOptions(newest_first=True, limit=5),
            ):
                want = select_entries(reference.load(ns), **options)
                got = uow.entries.list(ns, **options)
                assert [(e.entry_id, e.content) for e in got] == [
                    (e.entry_id, e.content) for e in want
                ], (ns, options)
            for key in ("a", "b"):
                want_one = reference.load_by_key(ns, key)
                got_one = uow.entries.get_by_key(ns, key)
                assert (got_one and got_one.entry_id) == (want_one and want_one.entry_id)
            for e in pool:
                want_e = reference.read_entry(ns, e.entry_id)
                got_e = uow.entries.get(ns, e.entry_id)
                assert (got_e and got_e.content) == (want_e and want_e.content)
        uow.commit()
    for ns in (NS, OTHER):
        assert [(e.entry_id, e.content) for e in staged_store.load(ns)] == [
            (e.entry_id, e.content) for e in reference.load(ns)
        ]
