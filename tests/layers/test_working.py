"""WorkingMemory: upstream behaviour, atomic set, validation, async twins, every store."""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fakes import ThreadRecordingStore

from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id
from firefly_orm.errors import EntryValidationError, StoreError
from firefly_orm.store import InMemoryStore
from firefly_orm.working import WorkingMemory


class FailingSaves:
    """Delegates to a real store; ``save``/``async_save`` raise while ``failing``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failing = False

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        if self.failing:
            raise StoreError("disk on fire")
        self.inner.save(namespace, entry)

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        if self.failing:
            raise StoreError("disk on fire")
        await self.inner.async_save(namespace, entry)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_defaults_and_namespace() -> None:
    wm = WorkingMemory()
    assert wm.scope_id == "default"
    assert wm.namespace == "working:default"
    assert isinstance(wm.store, InMemoryStore)


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        WorkingMemory(InMemoryStore())  # type: ignore[call-arg]


def test_scope_id_must_be_a_string() -> None:
    with pytest.raises(EntryValidationError):
        WorkingMemory(scope_id=42)  # type: ignore[arg-type]


def test_set_get_has_delete(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="s1")
    assert wm.get("name") is None
    assert wm.get("name", "fallback") == "fallback"
    assert not wm.has("name")
    wm.set("name", "Ada")
    wm.set("prefs", {"lang": "en", "n": [1, 2]})
    assert wm.get("name") == "Ada"
    assert wm.get("prefs") == {"lang": "en", "n": [1, 2]}
    assert wm.has("name")
    wm.delete("name")
    assert not wm.has("name")
    assert wm.get("name", 0) == 0
    wm.delete("name")  # silent when absent
    assert wm.keys() == ["prefs"]


def test_falsy_values_are_values(store: Any) -> None:
    wm = WorkingMemory(store=store)
    wm.set("zero", 0)
    wm.set("none", None)
    assert wm.get("zero", "d") == 0
    assert wm.has("none")
    assert wm.get("none", "d") is None


def test_entry_shape(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="agent-7")
    wm.set("k", [1, "two"], importance=0.8)
    entries = store.load("working:agent-7")
    assert len(entries) == 1
    entry = entries[0]
    assert entry.entry_id == derived_entry_id("working:agent-7", "k")
    assert entry.scope == MemoryScope.WORKING
    assert entry.key == "k"
    assert entry.content == [1, "two"]
    assert entry.importance == pytest.approx(0.8)
    assert entry.metadata == {"scope_id": "agent-7"}
    assert entry.expires_at is None
    stored = wm.get_entry("k")
    assert stored is not None and stored.importance == pytest.approx(0.8)


def test_set_replaces_and_moves_key_to_end(store: Any) -> None:
    wm = WorkingMemory(store=store)
    wm.set("a", 1)
    wm.set("b", 2)
    wm.set("c", 3)
    wm.set("a", 10, importance=0.9)
    assert wm.keys() == ["b", "c", "a"]
    assert wm.items() == [("b", 2), ("c", 3), ("a", 10)]
    assert wm.to_dict() == {"b": 2, "c": 3, "a": 10}
    assert len(store.load("working:default")) == 3
    entry = wm.get_entry("a")
    assert entry is not None and entry.importance == pytest.approx(0.9)


def test_context_string_format(store: Any) -> None:
    wm = WorkingMemory(store=store)
    assert wm.to_context_string() == ""
    wm.set("user", "Ada")
    wm.set("count", 3)
    wm.set("tags", ["x", "y"])
    assert wm.to_context_string() == (
        "Working Memory:\n- user: Ada\n- count: 3\n- tags: ['x', 'y']"
    )


def test_clear_only_touches_own_scope(store: Any) -> None:
    a = WorkingMemory(store=store, scope_id="a")
    b = WorkingMemory(store=store, scope_id="b")
    a.set("k", "from a")
    b.set("k", "from b")
    assert a.get("k") == "from a"
    assert b.get("k") == "from b"
    a.clear()
    assert a.keys() == []
    assert b.to_dict() == {"k": "from b"}


def _expired_fact(namespace: str, key: str) -> MemoryEntry:
    """The entry ``WorkingMemory`` would write for ``key``, expired long ago."""
    return MemoryEntry(
        entry_id=derived_entry_id(namespace, key),
        scope=MemoryScope.WORKING,
        key=key,
        content="x",
        expires_at=datetime(2000, 1, 1, tzinfo=UTC),
    )


def test_expired_entries_are_invisible(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="ttl")
    store.save("working:ttl", _expired_fact("working:ttl", "gone"))
    assert wm.get("gone") is None
    assert not wm.has("gone")
    assert wm.keys() == []
    wm.set("gone", "back")
    assert wm.get("gone") == "back"


def test_entries_written_by_others_are_deduplicated_and_deleted(store: Any) -> None:
    """A key written under a foreign entry id: reads see the newest, delete removes all."""
    wm = WorkingMemory(store=store, scope_id="mixed")
    store.save("working:mixed", MemoryEntry(scope=MemoryScope.WORKING, key="k", content="old"))
    wm.set("k", "new")
    wm.set("other", 1)
    assert wm.get("k") == "new"
    assert wm.items() == [("k", "new"), ("other", 1)]
    wm.delete("k")
    assert not wm.has("k")
    assert [e.key for e in store.load("working:mixed")] == ["other"]


async def test_async_delete_removes_foreign_entries_of_the_key(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="mixed-async")
    foreign = MemoryEntry(scope=MemoryScope.WORKING, key="k", content="old")
    await store.async_save("working:mixed-async", foreign)
    await wm.async_set("k", "new")
    await wm.async_set("other", 1)
    await wm.async_delete("k")
    assert not await wm.async_has("k")
    assert [e.key for e in await store.async_load("working:mixed-async")] == ["other"]


async def test_async_get_tells_a_stored_null_from_a_missing_key(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="nulls")
    await wm.async_set("none", None)
    assert await wm.async_get("none", "d") is None
    assert await wm.async_get("missing", "d") == "d"
    await store.async_save("working:nulls", _expired_fact("working:nulls", "gone"))
    assert await wm.async_get("gone", "d") == "d"


def test_delete_leaves_the_same_key_of_other_scopes(store: Any) -> None:
    """Deleting a key (one statement on SQL stores) touches this scope's namespace only."""
    a = WorkingMemory(store=store, scope_id="del-a")
    b = WorkingMemory(store=store, scope_id="del-b")
    a.set("k", "a")
    b.set("k", "b")
    store.save("working:del-b", MemoryEntry(scope=MemoryScope.WORKING, key="k", content="b0"))
    a.delete("k")
    assert a.get("k") is None
    assert b.get("k") == "b0"  # the newest of b's two entries keyed "k"
    assert len(store.load("working:del-b")) == 2


def test_facts_persist_across_instances(store: Any) -> None:
    WorkingMemory(store=store, scope_id="p").set("k", {"v": 1})
    assert WorkingMemory(store=store, scope_id="p").get("k") == {"v": 1}


def test_sqlite_facts_survive_a_new_store(tmp_path: Path) -> None:
    sql = pytest.importorskip("firefly_orm.sql")
    path = tmp_path / "m.sqlite3"
    first = sql.SQLiteStore(path)
    WorkingMemory(store=first, scope_id="p").set("k", "kept", importance=0.3)
    first.close()
    second = sql.SQLiteStore(path)
    try:
        wm = WorkingMemory(store=second, scope_id="p")
        assert wm.get("k") == "kept"
        entry = wm.get_entry("k")
        assert entry is not None and entry.importance == pytest.approx(0.3)
    finally:
        second.close()


def test_repr_does_no_io() -> None:
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"repr touched the store ({name})")

    wm = WorkingMemory(store=Exploding(), scope_id="r")
    assert repr(wm) == "WorkingMemory(scope_id='r', store=Exploding)"


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [-0.01, 1.01, math.nan, math.inf, True, "0.5", None])
def test_importance_is_validated_and_old_value_kept(store: Any, bad: Any) -> None:
    wm = WorkingMemory(store=store)
    wm.set("k", "old", importance=0.4)
    with pytest.raises(EntryValidationError) as info:
        wm.set("k", "new", importance=bad)
    assert info.value.field == "importance"
    assert wm.get("k") == "old"
    entry = wm.get_entry("k")
    assert entry is not None and entry.importance == pytest.approx(0.4)


@pytest.mark.parametrize("edge", [0, 0.0, 1, 1.0])
def test_importance_bounds_accepted(edge: float) -> None:
    wm = WorkingMemory()
    wm.set("k", "v", importance=edge)
    entry = wm.get_entry("k")
    assert entry is not None and entry.importance == edge


def test_non_json_value_rejected_and_old_value_kept(store: Any) -> None:
    wm = WorkingMemory(store=store)
    wm.set("k", "old")
    with pytest.raises(EntryValidationError):
        wm.set("k", object())
    assert wm.get("k") == "old"


def test_metadata_is_kept_with_the_scope_id(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="agent-7")
    wm.set("k", 1, metadata={"source": "tool"})
    entry = wm.get_entry("k")
    assert entry is not None
    assert entry.to_dict()["metadata"] == {"source": "tool", "scope_id": "agent-7"}
    wm.set("k", 2, metadata={"scope_id": "agent-7"})  # the memory's own scope id is fine
    assert wm.get("k") == 2


async def test_metadata_with_another_scope_id_is_refused(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="agent-7")
    wm.set("k", "old")
    with pytest.raises(EntryValidationError, match="'spoofed'") as info:
        wm.set("k", "new", metadata={"source": "tool", "scope_id": "spoofed"})
    assert info.value.field == "metadata"
    with pytest.raises(EntryValidationError):
        await wm.async_set("other", "new", metadata={"scope_id": "agent-8"})
    assert wm.items() == [("k", "old")]
    entry = wm.get_entry("k")
    assert entry is not None
    assert entry.to_dict()["metadata"] == {"scope_id": "agent-7"}


@pytest.mark.parametrize("bad", ["text", {1: "int key"}, {"k": object()}])
def test_bad_metadata_rejected_and_old_value_kept(bad: Any) -> None:
    wm = WorkingMemory()
    wm.set("k", "old")
    with pytest.raises(EntryValidationError) as info:
        wm.set("k", "new", metadata=bad)
    assert info.value.field == "metadata"
    assert wm.get("k") == "old"


@pytest.mark.parametrize("bad_key", [None, 3, "a\x00b"])
def test_bad_keys_rejected(bad_key: Any) -> None:
    wm = WorkingMemory()
    with pytest.raises(EntryValidationError):
        wm.set(bad_key, 1)
    with pytest.raises(EntryValidationError):
        wm.get(bad_key)


# --------------------------------------------------------------------------- atomicity


def test_failed_save_keeps_old_value(store: Any) -> None:
    wrapper = FailingSaves(store)
    wm = WorkingMemory(store=wrapper, scope_id="f")
    wm.set("k", "old")
    wrapper.failing = True
    with pytest.raises(StoreError):
        wm.set("k", "new")
    wrapper.failing = False
    assert wm.get("k") == "old"
    assert len(store.load("working:f")) == 1


async def test_failed_async_save_keeps_old_value(store: Any) -> None:
    wrapper = FailingSaves(store)
    wm = WorkingMemory(store=wrapper, scope_id="f")
    await wm.async_set("k", "old")
    wrapper.failing = True
    with pytest.raises(StoreError):
        await wm.async_set("k", "new")
    wrapper.failing = False
    assert await wm.async_get("k") == "old"


def test_concurrent_setters_leave_one_entry(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="race")
    # First use initialises SQL stores; that race has its own tests
    # (tests/integration/test_sql_store.py); this test is about set().
    assert not wm.has("shared")
    threads = 8
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def setter(i: int) -> None:
        try:
            barrier.wait()
            for round_ in range(5):
                wm.set("shared", {"writer": i, "round": round_}, importance=i / 10)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=setter, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    entries = store.load("working:race")
    assert len(entries) == 1
    value = wm.get("shared")
    assert value["round"] == 4 and 0 <= value["writer"] < threads
    assert entries[0].importance == pytest.approx(value["writer"] / 10)


# --------------------------------------------------------------------------- async twins


async def test_async_twins(store: Any) -> None:
    wm = WorkingMemory(store=store, scope_id="async")
    assert await wm.async_to_context_string() == ""
    await wm.async_set("a", 1, importance=0.2)
    await wm.async_set("b", "two")
    await wm.async_set("a", 3)
    assert await wm.async_get("a") == 3
    assert await wm.async_get("zz", "d") == "d"
    assert await wm.async_has("b")
    assert not await wm.async_has("zz")
    assert await wm.async_keys() == ["b", "a"]
    assert await wm.async_items() == [("b", "two"), ("a", 3)]
    assert await wm.async_to_dict() == {"b": "two", "a": 3}
    assert await wm.async_to_context_string() == "Working Memory:\n- b: two\n- a: 3"
    # the sync and async paths see the same data
    assert wm.to_dict() == {"b": "two", "a": 3}
    await wm.async_delete("b")
    assert wm.keys() == ["a"]
    await wm.async_clear()
    assert await wm.async_keys() == []


async def test_async_validation() -> None:
    wm = WorkingMemory()
    with pytest.raises(EntryValidationError):
        await wm.async_set("k", 1, importance=2)
    assert not await wm.async_has("k")


async def test_async_on_sync_only_store_runs_in_worker_thread() -> None:
    custom = ThreadRecordingStore()
    wm = WorkingMemory(store=custom, scope_id="c")
    await wm.async_set("k", "v")
    assert await wm.async_get("k") == "v"
    assert await wm.async_to_dict() == {"k": "v"}
    await wm.async_delete("k")
    await wm.async_clear()
    assert custom.threads
    assert threading.current_thread().name not in custom.threads
    # and the sync path works on it too
    wm.set("x", 1)
    assert wm.items() == [("x", 1)]


def test_users_on_one_scope_never_see_each_others_facts(store: Any) -> None:
    """Two users' memories on the same scope id: separate facts, erase_user takes one's only."""
    from firefly_orm.manager import MemoryManager
    from firefly_orm.working import working_namespace

    ann = MemoryManager(store=store, user_id="ann")
    bob = MemoryManager(store=store, user_id="bob")
    ann.set_fact("name", "Ann")
    bob.set_fact("name", "Bob")
    assert (ann.get_fact("name"), bob.get_fact("name")) == ("Ann", "Bob")
    assert MemoryManager(store=store).get_fact("name") is None  # the shared scope has none
    ann.erase_user("ann")
    assert (ann.get_fact("name"), bob.get_fact("name")) == (None, "Bob")
    # an unambiguous namespace whatever the parts contain
    assert working_namespace("c", "a:b") != working_namespace("b:c", "a")
    assert working_namespace("x", None) == "working:x"
    view = MemoryManager(store=store).for_user("carol", working_scope_id="s")
    assert (view.user_id, view.working.scope_id, view.long_term.user_id) == ("carol", "s", "carol")
    with pytest.raises(EntryValidationError, match="user"):
        ann.for_user("bob")
