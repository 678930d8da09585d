"""Unit tests of firefly_orm.uow: the staged and best-effort units of work."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from firefly_orm.entry import MemoryEntry, utcnow, validate_entry
from firefly_orm.errors import ConcurrencyError, EntryValidationError
from firefly_orm.store import InMemoryStore
from firefly_orm.uow import (
    BestEffortUnitOfWork,
    StagedUnitOfWork,
    SyncBackedAsyncUnitOfWork,
    UnitOfWork,
    async_unit_of_work_for,
    sort_entries,
    unit_of_work_for,
)

NS = "uow:test"
OTHER = "uow:other"


class DictStore:
    """A custom store with only the five protocol methods; copies in and out.

    It stores what it is given verbatim (versions included), like a naive
    third-party backend would, and counts calls so tests can see the replay.
    """

    def __init__(self) -> None:
        self.data: dict[str, dict[str, MemoryEntry]] = {}
        self.calls: list[tuple[str, str]] = []

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        validate_entry(entry, namespace)
        self.calls.append(("save", namespace))
        for entries in self.data.values():
            entries.pop(entry.entry_id, None)
        self.data.setdefault(namespace, {})[entry.entry_id] = entry.copy_entry(namespace=namespace)

    def load(self, namespace: str) -> list[MemoryEntry]:
        entries = self.data.get(namespace, {}).values()
        return [e.copy_entry() for e in sort_entries(entries) if not e.is_expired]

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        matches = [e for e in self.load(namespace) if e.key == key]
        return matches[-1] if matches else None

    def delete(self, namespace: str, entry_id: str) -> None:
        self.calls.append(("delete", namespace))
        self.data.get(namespace, {}).pop(entry_id, None)

    def clear(self, namespace: str) -> None:
        self.calls.append(("clear", namespace))
        self.data.pop(namespace, None)


def entry(key: str | None = None, content: Any = "v", **fields: Any) -> MemoryEntry:
    return MemoryEntry(key=key, content=content, **fields)


def contents(store: Any, namespace: str = NS) -> list[Any]:
    return [e.content for e in store.load(namespace)]


@pytest.fixture(params=["staged", "best_effort"])
def store(request: pytest.FixtureRequest) -> Any:
    """An InMemoryStore (StagedUnitOfWork) or a five-method DictStore (best effort)."""
    return InMemoryStore() if request.param == "staged" else DictStore()


def uow_for(store: Any) -> StagedUnitOfWork:
    if isinstance(store, InMemoryStore):
        uow = store.unit_of_work()
        assert type(uow) is StagedUnitOfWork
        return uow
    return BestEffortUnitOfWork(store)


# --------------------------------------------------------------------------- both kinds


def test_read_your_writes(store: Any) -> None:
    stored = entry("a", "stored")
    store.save(NS, stored)
    with uow_for(store) as uow:
        staged = entry("b", "staged")
        uow.entries.save(NS, staged)
        got = uow.entries.get(NS, staged.entry_id)
        assert got is not None and got.content == "staged"
        by_key = uow.entries.get_by_key(NS, "b")
        assert by_key is not None and by_key.entry_id == staged.entry_id
        assert [e.content for e in uow.entries.list(NS)] == ["stored", "staged"]
        # an update of a stored entry is visible inside, not outside
        uow.entries.save(NS, stored.copy_entry(content="updated"))
        by_key = uow.entries.get_by_key(NS, "a")
        assert by_key is not None and by_key.content == "updated"
        assert contents(store) == ["stored"]
        uow.entries.delete(NS, stored.entry_id)
        assert uow.entries.get(NS, stored.entry_id) is None
        assert contents(store) == ["stored"]
        uow.commit()
    assert contents(store) == ["staged"]


def test_staged_entries_are_copies(store: Any) -> None:
    with uow_for(store) as uow:
        staged = entry("k", {"list": [1]})
        uow.entries.save(NS, staged)
        staged.content["list"].append(2)
        got = uow.entries.get(NS, staged.entry_id)
        assert got is not None and got.content == {"list": [1]}
        got.content["list"].append(3)
        uow.commit()
    assert contents(store) == [{"list": [1]}]


def test_clear_then_save_in_one_uow(store: Any) -> None:
    for i in range(3):
        store.save(NS, entry(f"old{i}", i))
    store.save(OTHER, entry("keep", "other"))
    with uow_for(store) as uow:
        uow.entries.clear(NS)
        assert uow.entries.list(NS) == []
        uow.entries.save(NS, entry("new", "new"))
        assert [e.key for e in uow.entries.list(NS)] == ["new"]
        uow.commit()
    assert contents(store) == ["new"]
    assert contents(store, OTHER) == ["other"]


def test_save_then_clear_drops_the_staged_save(store: Any) -> None:
    store.save(NS, entry("old", "old"))
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("new", "new"))
        uow.entries.clear(NS)
        uow.commit()
    assert contents(store) == []


def test_rollback_by_default(store: Any) -> None:
    store.save(NS, entry("a", "a"))
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("b", "b"))
        uow.entries.clear(NS)
    assert contents(store) == ["a"]


def test_exception_rolls_back_and_propagates(store: Any) -> None:
    store.save(NS, entry("a", "a"))
    with pytest.raises(KeyError), uow_for(store) as uow:
        uow.entries.save(NS, entry("b", "b"))
        raise KeyError("boom")
    assert contents(store) == ["a"]


def test_explicit_rollback_then_commit_is_refused(store: Any) -> None:
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("b", "b"))
        uow.rollback()
        with pytest.raises(RuntimeError):
            uow.commit()
    assert contents(store) == []


def test_commit_twice_raises(store: Any) -> None:
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("a", "a"))
        uow.commit()
        with pytest.raises(RuntimeError, match="already"):
            uow.commit()
    assert contents(store) == ["a"]
    assert [e.version for e in store.load(NS)] == [1]


def test_expected_version_zero(store: Any) -> None:
    head = entry("head", "v1")
    with uow_for(store) as uow:
        uow.entries.save(NS, head, expected_version=0)
        uow.commit()
    assert [(e.content, e.version) for e in store.load(NS)] == [("v1", 1)]
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("bystander"))
        uow.entries.save(NS, head.copy_entry(content="dup"), expected_version=0)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert [(e.content, e.version) for e in store.load(NS)] == [("v1", 1)]


def test_expected_version_n(store: Any) -> None:
    head = entry("head", "v1")
    store.save(NS, head)
    with uow_for(store) as uow:
        current = uow.entries.get_by_key(NS, "head", for_update=True)
        assert current is not None and current.version == 1
        uow.entries.save(NS, current.copy_entry(content="v2"), expected_version=1)
        uow.commit()
    [stored] = store.load(NS)
    assert (stored.content, stored.version) == ("v2", 2)
    for wrong in (1, 3):
        with uow_for(store) as uow:
            uow.entries.save(NS, entry("other"))
            uow.entries.save(NS, head.copy_entry(content="stale"), expected_version=wrong)
            with pytest.raises(ConcurrencyError, match="version 2"):
                uow.commit()
    assert [(e.key, e.content, e.version) for e in store.load(NS)] == [("head", "v2", 2)]


def test_expected_version_is_checked_in_the_right_namespace(store: Any) -> None:
    head = entry("head")
    store.save(OTHER, head)
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("x"), expected_version=1)
        uow.entries.save(NS, head.copy_entry(), expected_version=1)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert contents(store) == []


def test_a_second_write_in_one_unit_of_work_is_conditioned_on_the_first(store: Any) -> None:
    """A read after a write in the same unit of work gives the version to expect next."""
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("head", "v1"), expected_version=0)
        seen = uow.entries.get_by_key(NS, "head")
        assert seen is not None
        uow.entries.save(NS, seen.copy_entry(content="v2"), expected_version=seen.version)
        with pytest.raises(ConcurrencyError, match="in this unit of work"):
            uow.entries.save(NS, seen.copy_entry(content="x"), expected_version=seen.version + 1)
        uow.commit()
    assert [(e.content, e.version) for e in store.load(NS)] == [("v2", 1)]
    with uow_for(store) as uow:
        [stored] = uow.entries.list(NS)
        uow.entries.delete(NS, stored.entry_id)
        with pytest.raises(ConcurrencyError, match="at version 0 in this unit of work"):
            uow.entries.save(NS, stored.copy_entry(), expected_version=stored.version)
        uow.entries.save(NS, stored.copy_entry(content="again"), expected_version=0)
        uow.commit()
    assert contents(store) == ["again"]


def test_precondition_checked_against_concurrent_writer(store: Any) -> None:
    head = entry("head", "v1")
    store.save(NS, head)
    with uow_for(store) as uow:
        seen = uow.entries.get_by_key(NS, "head")
        assert seen is not None and seen.version == 1
        # another writer gets in between the read and the commit
        store.save(NS, head.copy_entry(content="theirs", version=2))
        uow.entries.save(NS, seen.copy_entry(content="mine"), expected_version=seen.version)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    [stored] = store.load(NS)
    assert stored.content == "theirs"


def test_versions_bump_through_the_uow(store: Any) -> None:
    e = entry("k")
    for expected in (1, 2, 3):
        with uow_for(store) as uow:
            uow.entries.save(NS, e.copy_entry(content=expected))
            uow.commit()
        assert [(x.content, x.version) for x in store.load(NS)] == [(expected, expected)]


def test_list_ordering_prefix_limit(store: Any) -> None:
    base = utcnow()
    keys = ["t:2", "t:1", "h", "t:3", None]
    made = [entry(k, i, created_at=base + timedelta(seconds=i)) for i, k in enumerate(keys)]
    for e in made:
        store.save(NS, e)
    store.save(NS, entry("t:0", created_at=base, expires_at=base - timedelta(seconds=1)))
    with uow_for(store) as uow:
        assert [e.content for e in uow.entries.list(NS)] == [0, 1, 2, 3, 4]
        assert [e.content for e in uow.entries.list(NS, newest_first=True, limit=2)] == [4, 3]
        assert [e.key for e in uow.entries.list(NS, key_prefix="t:")] == ["t:1", "t:2", "t:3"]
        assert [e.key for e in uow.entries.list(NS, key_prefix="t:", newest_first=True)] == [
            "t:3",
            "t:2",
            "t:1",
        ]
        assert uow.entries.get_by_key(NS, "t:0") is None
        uow.entries.delete(NS, [made[0].entry_id, made[1].entry_id])
        assert [e.content for e in uow.entries.list(NS)] == [2, 3, 4]
        uow.commit()
    assert contents(store) == [2, 3, 4]


@pytest.mark.parametrize("option", ["limt", "newest_frist", "key_prefx"])
def test_list_rejects_a_misspelt_option(store: Any, option: str) -> None:
    store.save(NS, entry("k"))
    misspelt: dict[str, Any] = {option: 1}
    with uow_for(store) as uow:
        with pytest.raises(TypeError, match=option):
            uow.entries.list(NS, **misspelt)
        with pytest.raises(TypeError, match=option):
            uow.entries.list_contents(NS, **misspelt)


def test_get_by_key_returns_newest(store: Any) -> None:
    base = utcnow()
    store.save(NS, entry("k", "old", created_at=base))
    store.save(NS, entry("k", "new", created_at=base + timedelta(seconds=1)))
    with uow_for(store) as uow:
        uow.entries.save(NS, entry("k", "middle", created_at=base + timedelta(milliseconds=500)))
        got = uow.entries.get_by_key(NS, "k")
        assert got is not None and got.content == "new"


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("importance", {"importance": 2.0}),
        ("content", {"content": {1, 2}}),
        ("namespace", None),
    ],
)
def test_invalid_save_raises_at_once(store: Any, field: str, change: dict[str, Any] | None) -> None:
    bad = entry("k")
    for name, value in (change or {}).items():
        setattr(bad, name, value)
    namespace = "" if change is None else NS
    with uow_for(store) as uow:
        with pytest.raises(EntryValidationError) as info:
            uow.entries.save(namespace, bad)
        assert info.value.field == field
        uow.entries.save(NS, entry("ok", "ok"))
        uow.commit()
    assert contents(store) == ["ok"]


def test_move_between_namespaces_inside_a_uow(store: Any) -> None:
    e = entry("k", "moving")
    store.save(NS, e)
    with uow_for(store) as uow:
        uow.entries.save(OTHER, e)
        moved = uow.entries.get(OTHER, e.entry_id)
        assert moved is not None and moved.namespace == OTHER
        uow.commit()
    assert contents(store) == []
    assert contents(store, OTHER) == ["moving"]


# --------------------------------------------------------------------------- best effort only


def test_best_effort_replays_through_the_five_methods() -> None:
    store = DictStore()
    store.save(NS, entry("a", "a"))
    store.calls.clear()
    with BestEffortUnitOfWork(store) as uow:
        uow.entries.clear(OTHER)
        uow.entries.save(NS, entry("b", "b"))
        uow.entries.delete(NS, "missing")
        assert store.calls == []  # nothing touches the store before commit
        uow.commit()
    assert sorted(store.calls) == [("clear", OTHER), ("delete", NS), ("save", NS)]
    assert contents(store) == ["a", "b"]


def test_best_effort_sets_versions_for_a_verbatim_store() -> None:
    store = DictStore()
    e = entry("k")
    with BestEffortUnitOfWork(store) as uow:
        uow.entries.save(NS, e)
        uow.commit()
    with BestEffortUnitOfWork(store) as uow:
        uow.entries.save(NS, e.copy_entry(content="2"), expected_version=1)
        uow.commit()
    assert [(x.content, x.version) for x in store.load(NS)] == [("2", 2)]


def test_unit_of_work_for_picks_the_store_own_uow() -> None:
    memory = InMemoryStore()
    with unit_of_work_for(memory) as uow:
        assert type(uow) is StagedUnitOfWork
        assert uow.backend is memory
    with unit_of_work_for(DictStore()) as uow:
        assert isinstance(uow, BestEffortUnitOfWork)


def test_unit_of_work_satisfies_the_protocol() -> None:
    uow: UnitOfWork = BestEffortUnitOfWork(DictStore())
    assert hasattr(uow, "entries") and callable(uow.commit)


async def test_async_unit_of_work_for_a_five_method_store() -> None:
    store = DictStore()
    store.save(NS, entry("a", "a"))
    auow = async_unit_of_work_for(store)
    assert isinstance(auow, SyncBackedAsyncUnitOfWork)

    def add(uow: UnitOfWork, key: str) -> list[str]:
        uow.entries.save(NS, entry(key, key))
        return [e.content for e in uow.entries.list(NS)]

    async with auow as uow:
        assert await uow.run_sync(add, "b") == ["a", "b"]
        assert contents(store) == ["a"]
        await uow.commit()
    assert contents(store) == ["a", "b"]

    async with async_unit_of_work_for(store) as rolled_back:
        await rolled_back.run_sync(add, "c")
    assert contents(store) == ["a", "b"]


async def test_async_unit_of_work_for_in_memory_store() -> None:
    store = InMemoryStore()
    first = entry("a", "a")
    async with async_unit_of_work_for(store) as uow:
        await uow.run_sync(lambda u: u.entries.save(NS, first, expected_version=0))
        await uow.commit()
    dup = first.copy_entry(content="b")
    with pytest.raises(ConcurrencyError):
        async with async_unit_of_work_for(store) as uow:
            await uow.run_sync(lambda u: u.entries.save(NS, dup, expected_version=0))
            await uow.commit()
    assert contents(store) == ["a"]


def test_staged_move_hides_the_entry_in_its_old_namespace(store: Any) -> None:
    e = entry("k", "moving")
    store.save(NS, e)
    with uow_for(store) as uow:
        uow.entries.save(OTHER, e)
        assert uow.entries.get(NS, e.entry_id) is None
        assert uow.entries.list(NS) == []
