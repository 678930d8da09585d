"""LongTermMemory on every layer backend, sync and async (issue 11).

Remember/get/list/count/forget/clear, upserts by key, per-user isolation,
recall ranking (relevance, then importance, then recency) with crafted data,
filters that still fill ``limit``, hostile queries, ``long_term_limit``
eviction order, episodic expiry and ``cleanup_expired``, persistence across a
new store object, export/import, and validation that writes nothing.

Tests that recall need the store's full-text search; on a store whose units
of work cannot search yet (MongoDB, until its search lands) they check that
``recall`` refuses with ``StoreError`` and then skip (:func:`need_search`).
"""

from __future__ import annotations

import asyncio
import doctest
import math
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from modes import call
from store_backends import OpenedBackend

from firefly_orm.entry import MemoryEntry, MemoryScope, utcnow
from firefly_orm.errors import EntryValidationError, StoreError
from firefly_orm.long_term import LongTermMemory, MemoryItem, Recalled, store_items
from firefly_orm.long_term import _memory as memory
from firefly_orm.store import InMemoryStore
from firefly_orm.uow import (
    StagedChanges,
    StagedUnitOfWork,
    async_unit_of_work_for,
    supports_search,
    unit_of_work_for,
)

NS = "long-term"


async def need_search(mode: str, store: Any) -> None:
    """Skip unless the store's units of work can search; first check the refusal is clean."""
    with unit_of_work_for(store, read_only=True) as uow:
        searchable = supports_search(uow.entries)
    if searchable:
        return
    ltm = LongTermMemory(store=store, namespace="search-probe")
    await call(mode, ltm, "remember", "kept while recall is refused")
    with pytest.raises(StoreError, match="full-text search"):
        await call(mode, ltm, "recall", "kept")
    assert await call(mode, ltm, "count") == 1
    pytest.skip(f"{type(store).__name__} cannot search yet (supports_search is False)")


def texts(found: list[Recalled] | list[MemoryItem]) -> list[str]:
    return [r.item.text if isinstance(r, Recalled) else r.text for r in found]


# --------------------------------------------------------------------------- basics


async def test_remember_get_list_count_forget(store: Any, mode: str) -> None:
    ltm = LongTermMemory(store=store, user_id="ada", language="english")
    first = await call(mode, ltm, "remember", "Ada prefers tea", importance=0.8, tags=["drinks"])
    second = await call(
        mode, ltm, "remember", "Ada met Bob", kind="episodic", metadata={"where": "Paris"}
    )
    item = await call(mode, ltm, "get", first)
    assert isinstance(item, MemoryItem)
    assert (item.id, item.text, item.importance, item.tags) == (
        first,
        "Ada prefers tea",
        0.8,
        ("drinks",),
    )
    assert (item.kind, item.user_id, item.key, item.expires_at) == ("semantic", "ada", None, None)
    assert item.created_at.tzinfo is not None
    assert texts(await call(mode, ltm, "list")) == ["Ada met Bob", "Ada prefers tea"]
    assert await call(mode, ltm, "count") == 2
    assert await call(mode, ltm, "count", kind="episodic") == 1
    assert await call(mode, ltm, "count", tags=["drinks"]) == 1
    # the entry layout other tools (CLI stats, export) rely on
    (raw,) = [e for e in store.load(NS) if e.entry_id == second]
    assert raw.scope == MemoryScope.LONG_TERM and raw.user_id == "ada"
    assert raw.content == {"text": "Ada met Bob", "tags": [], "kind": "episodic"}
    assert (raw.search_text, raw.search_language) == ("Ada met Bob", "english")
    assert raw.metadata == {"where": "Paris"}
    assert await call(mode, ltm, "forget", first) is True
    assert await call(mode, ltm, "forget", first) is False
    assert await call(mode, ltm, "get", first) is None
    assert await call(mode, ltm, "count") == 1


async def test_key_makes_remember_an_upsert(store: Any, mode: str) -> None:
    ltm = LongTermMemory(store=store, user_id="ada")
    first = await call(mode, ltm, "remember", "Ada lives in London", key="city", tags=["home"])
    before = await call(mode, ltm, "get", "city")
    second = await call(mode, ltm, "remember", "Ada lives in Paris", key="city", importance=0.9)
    assert first == second
    after = await call(mode, ltm, "get", "city")
    assert (after.text, after.importance, after.tags, after.key) == (
        "Ada lives in Paris",
        0.9,
        (),
        "city",
    )
    assert after.created_at > before.created_at
    assert await call(mode, ltm, "count") == 1
    assert len(store.load(NS)) == 1
    assert (await call(mode, ltm, "get", first)).text == "Ada lives in Paris"  # by id too
    assert await call(mode, ltm, "forget", "city") is True
    assert await call(mode, ltm, "get", "city") is None


async def test_users_are_isolated(store: Any, mode: str) -> None:
    ann = LongTermMemory(store=store, user_id="ann")
    bob = LongTermMemory(store=store, user_id="bob")
    ann_id = await call(mode, ann, "remember", "my favourite colour is green", key="colour")
    bob_id = await call(mode, bob, "remember", "my favourite colour is blue", key="colour")
    assert ann_id != bob_id  # the same key, two users: two items
    assert (await call(mode, ann, "get", "colour")).text == "my favourite colour is green"
    assert (await call(mode, bob, "get", "colour")).text == "my favourite colour is blue"
    assert await call(mode, ann, "get", bob_id) is None  # another user's id
    assert await call(mode, ann, "forget", bob_id) is False
    for method, args in (
        ("forget", ("colour",)),
        ("get", ("colour",)),
        ("recall", ("colour",)),
        ("remember", ("x",)),
        ("list", ()),
        ("count", ()),
        ("clear", ()),
    ):
        with pytest.raises(EntryValidationError, match="serves user 'ann' only"):
            await call(mode, ann, method, *args, user_id="bob")  # ann's memory is ann's alone
    assert (await call(mode, bob, "get", "colour")).text == "my favourite colour is blue"
    admin = LongTermMemory(store=store)  # unbound: may act for any owner
    assert await call(mode, admin, "forget", "colour", user_id="bob") is True  # explicit owner
    await call(mode, bob, "remember", "bob again", key="colour")
    assert texts(await call(mode, ann, "list")) == ["my favourite colour is green"]
    assert await call(mode, ann, "count") == 1
    everyone = LongTermMemory(store=store)  # no owner: reads every owner
    assert await call(mode, everyone, "count") == 2
    assert await call(mode, everyone, "get", "colour") is None  # keys are per owner
    await call(mode, ann, "clear")
    assert await call(mode, ann, "count") == 0
    assert texts(await call(mode, bob, "list")) == ["bob again"]
    await call(mode, everyone, "clear")
    assert store.load(NS) == []


async def test_list_pages_newest_first_and_filters(store: Any, mode: str) -> None:
    ltm = LongTermMemory(store=store)
    for n in range(7):
        tags = ["even"] if n % 2 == 0 else []
        await call(
            mode, ltm, "remember", f"note {n}", tags=tags, kind="episodic" if n == 3 else "semantic"
        )
    pages = [texts(await call(mode, ltm, "list", limit=3, offset=o)) for o in (0, 3, 6, 9)]
    assert pages == [["note 6", "note 5", "note 4"], ["note 3", "note 2", "note 1"], ["note 0"], []]
    assert texts(await call(mode, ltm, "list", limit=2, offset=1, tags=["even"])) == [
        "note 4",
        "note 2",
    ]
    assert texts(await call(mode, ltm, "list", kind="episodic")) == ["note 3"]
    assert len(await call(mode, ltm, "list", limit=None)) == 7


# --------------------------------------------------------------------------- recall


async def test_recall_after_upsert_and_per_user(store: Any, mode: str) -> None:
    await need_search(mode, store)
    ann = LongTermMemory(store=store, user_id="ann")
    bob = LongTermMemory(store=store, user_id="bob")
    await call(mode, ann, "remember", "ann lives in London", key="city")
    await call(mode, ann, "remember", "ann lives in Paris", key="city")
    await call(mode, bob, "remember", "bob lives in London and keeps a secret diary")
    assert texts(await call(mode, ann, "recall", "where does she live? London or Paris")) == [
        "ann lives in Paris"
    ]
    assert await call(mode, ann, "recall", "secret diary") == []  # bob's, never ann's
    admin = LongTermMemory(store=store)
    assert texts(await call(mode, admin, "recall", "secret diary", user_id="bob")) == [
        "bob lives in London and keeps a secret diary"
    ]
    assert texts(await call(mode, bob, "recall", "Paris")) == []


async def test_ranking_relevance_then_importance_then_recency(store: Any, mode: str) -> None:
    await need_search(mode, store)
    ltm = LongTermMemory(store=store)
    # relevance beats importance (and age): the oldest, least important item matches best
    await call(mode, ltm, "remember", "apple banana cherry", importance=0.1)
    await call(mode, ltm, "remember", "apple pie", importance=0.9)
    # equal relevance: importance beats recency
    await call(mode, ltm, "remember", "orange juice", importance=0.8)
    await call(mode, ltm, "remember", "orange juice", importance=0.3)
    # equal relevance and importance: the newest first
    older = await call(mode, ltm, "remember", "grape soda", importance=0.5)
    newer = await call(mode, ltm, "remember", "grape soda", importance=0.5)
    found = await call(mode, ltm, "recall", "apple banana cherry")
    assert texts(found) == ["apple banana cherry", "apple pie"]
    assert found[0].score > found[1].score
    found = await call(mode, ltm, "recall", "orange juice")
    assert [r.item.importance for r in found] == [0.8, 0.3]
    assert found[0].score == pytest.approx(found[1].score)
    assert [r.item.id for r in await call(mode, ltm, "recall", "grape soda")] == [newer, older]
    assert texts(await call(mode, ltm, "recall", "apple", limit=1)) == ["apple pie"]


async def test_filters_still_fill_the_limit(store: Any, mode: str) -> None:
    await need_search(mode, store)
    ltm = LongTermMemory(store=store, user_id="ann")
    noise = [{"text": "project status update", "importance": 0.9, "tags": ["noise"]}] * 60
    keep = [
        {"text": "project status update", "importance": 0.1, "tags": ["keep"], "kind": "episodic"}
    ] * 3
    items = [{**item, "id": f"n{i}", "user_id": "ann"} for i, item in enumerate(noise + keep)]
    await call(mode, ltm, "import_items", items)
    # the three kept items rank below all 60 others: over-fetching must reach them
    found = await call(mode, ltm, "recall", "project status", limit=3, tags=["keep"])
    assert [r.item.tags for r in found] == [("keep",)] * 3
    assert len(await call(mode, ltm, "recall", "project", limit=5, kind="episodic")) == 3
    assert len(await call(mode, ltm, "recall", "project", limit=100, min_importance=0.5)) == 60
    assert await call(mode, ltm, "recall", "project", min_importance=0.95) == []
    assert await call(mode, ltm, "recall", "project", limit=0) == []


HOSTILE_QUERIES = [
    '"',
    '"alpha',
    "alpha OR",
    "OR",
    "AND NOT",
    "NEAR(alpha beta",
    "NEAR(",
    "*",
    "alpha*",
    "-alpha",
    "^alpha",
    "search_text:alpha",
    "alpha\x00beta",
    "\x00",
    "'; DROP TABLE memory_entries; --",
    "((((((",
    "a & | ! ~ <-> b",
    "",
    "   ",
    "x" * 200_000,
    "alpha " + "y " * 100_000,
    "\U0001f600 é ß 東京",
]


async def test_hostile_queries_are_searched_as_words(store: Any, mode: str) -> None:
    await need_search(mode, store)
    ltm = LongTermMemory(store=store)
    alpha = await call(mode, ltm, "remember", "alpha beta gamma")
    hostile = await call(mode, ltm, "remember", 'He said "NEAR(x) OR y*" -- AND NOT z')
    for query in HOSTILE_QUERIES:
        found = await call(mode, ltm, "recall", query, limit=10)
        ids = {r.item.id for r in found}
        if "alpha" in query.lower():
            assert alpha in ids, query[:40]
        if query.strip("\"'*^-() ") in ("", "x" * 200_000) or query == "\x00":
            assert found == [], query[:40]
    assert [r.item.id for r in await call(mode, ltm, "recall", "NEAR")] == [hostile]
    assert {r.item.id for r in await call(mode, ltm, "recall", "OR")} == {hostile}
    assert await call(mode, ltm, "count") == 2  # nothing was dropped or executed


async def test_language_is_used_for_indexing_and_search(store: Any, mode: str) -> None:
    await need_search(mode, store)
    ltm = LongTermMemory(store=store, language="english")
    await call(mode, ltm, "remember", "the dogs were barking all night")
    # "dogs" is stemmed to "dog" on PostgreSQL on both sides, matched as written elsewhere
    assert texts(await call(mode, ltm, "recall", "dogs")) == ["the dogs were barking all night"]


class NoSearchStore:
    """A staged store whose units of work cannot search (no ``read_search``)."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    def unit_of_work(self, *, read_only: bool = False) -> StagedUnitOfWork:
        return StagedUnitOfWork(self)

    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        return self.inner.read_entry(namespace, entry_id)

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        return self.inner.read_by_key(namespace, key)

    def read_list(self, namespace: str, **options: Any) -> list[MemoryEntry]:
        return self.inner.read_list(namespace, **options)

    def apply_changes(self, changes: StagedChanges) -> None:
        self.inner.apply_changes(changes)

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        self.inner.save(namespace, entry)

    def load(self, namespace: str) -> list[MemoryEntry]:
        return self.inner.load(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self.inner.load_by_key(namespace, key)

    def delete(self, namespace: str, entry_id: str) -> None:
        self.inner.delete(namespace, entry_id)

    def clear(self, namespace: str) -> None:
        self.inner.clear(namespace)


async def test_a_store_without_search_refuses_only_recall(mode: str) -> None:
    store = NoSearchStore()
    with pytest.raises(pytest.skip.Exception):
        await need_search(mode, store)
    ltm = LongTermMemory(store=store, user_id="ann", long_term_limit=2)
    for n in range(3):
        await call(mode, ltm, "remember", f"note {n}", key=f"k{n}")
    assert texts(await call(mode, ltm, "list")) == ["note 2", "note 1"]
    assert await call(mode, ltm, "forget", "k1") is True
    with pytest.raises(StoreError, match="full-text search"):
        await call(mode, ltm, "recall", "note")
    assert await call(mode, ltm, "recall", "?!") == []  # no words: nothing to ask


# --------------------------------------------------------------------------- limits


async def test_limit_evicts_least_important_then_oldest_per_user(store: Any, mode: str) -> None:
    ann = LongTermMemory(store=store, user_id="ann", long_term_limit=3)
    ids = {}
    for name, importance in (("a", 0.5), ("b", 0.2), ("c", 0.9), ("d", 0.5)):
        ids[name] = await call(mode, ann, "remember", f"item {name}", importance=importance)

    async def present() -> set[str]:
        return {item.text[-1] for item in await call(mode, ann, "list", limit=None)}

    assert await present() == {"a", "c", "d"}  # b: least important
    ids["e"] = await call(mode, ann, "remember", "item e", importance=0.5)
    assert await present() == {"c", "d", "e"}  # a: oldest of the three at 0.5
    ids["f"] = await call(mode, ann, "remember", "item f", importance=0.1)
    assert await present() == {"c", "d", "e"}  # f ranks lowest: evicted at once
    assert await call(mode, ann, "get", ids["f"]) is None
    await call(mode, ann, "remember", "item k", key="k", importance=1.0)
    assert await present() == {"c", "e", "k"}  # d: now the oldest of the two at 0.5
    bob = LongTermMemory(store=store, user_id="bob", long_term_limit=3)
    for n in range(5):
        await call(mode, bob, "remember", f"bob {n}")
    assert await call(mode, bob, "count") == 3  # bob's limit...
    assert await present() == {"c", "e", "k"}  # ...never touches ann's items
    assert texts(await call(mode, bob, "list")) == ["bob 4", "bob 3", "bob 2"]
    nobody = LongTermMemory(store=store, long_term_limit=1)  # the unowned items share one
    await call(mode, nobody, "remember", "unowned 1")
    await call(mode, nobody, "remember", "unowned 2")
    assert [e.content["text"] for e in store.load(NS) if e.user_id is None] == ["unowned 2"]
    assert await present() == {"c", "e", "k"}
    assert len(store.load(NS)) == 7


async def test_a_caller_unit_of_work_decides(store: Any, mode: str) -> None:
    """store_items joins the caller's unit of work (how promotion will write items)."""
    ltm = LongTermMemory(store=store, user_id="ann", long_term_limit=1)
    await call(mode, ltm, "remember", "already here", importance=0.2)
    entry = ltm.entry_for("written with the caller's work", importance=0.9)

    async def write(commit: bool) -> list[str]:
        if mode == "sync":
            with unit_of_work_for(store) as uow:
                evicted = store_items(uow, ltm.namespace, [entry], ltm.long_term_limit)
                if commit:
                    uow.commit()
            return evicted
        async with async_unit_of_work_for(store) as auow:
            evicted = await auow.run_sync(store_items, ltm.namespace, [entry], ltm.long_term_limit)
            if commit:
                await auow.commit()
        return evicted

    assert len(await write(commit=False)) == 1
    assert texts(await call(mode, ltm, "list")) == ["already here"]  # rolled back: both kept
    assert len(await write(commit=True)) == 1
    assert texts(await call(mode, ltm, "list")) == ["written with the caller's work"]


def test_concurrent_writers_and_the_limit(layer_backend: OpenedBackend) -> None:
    """Writers racing at the limit may leave a few extra items; the next write evicts them."""
    limit, threads, each = 5, 4, 8
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        ltm = LongTermMemory(store=layer_backend.reopen(), user_id="ann", long_term_limit=limit)
        try:
            for i in range(each):
                ltm.remember(f"writer {n} note {i}", importance=0.5)
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert errors == []
    ltm = LongTermMemory(store=layer_backend.store, user_id="ann", long_term_limit=limit)
    after_race = ltm.count()
    ltm.remember("the last word", importance=0.5)
    print(
        f"{layer_backend.name}: {threads} writers x {each} items, limit {limit}: "
        f"{after_race} items after the race, {ltm.count()} after one more write"
    )
    assert limit <= after_race <= limit + threads - 1
    assert ltm.count() == limit
    assert "the last word" in texts(ltm.list())


# --------------------------------------------------------------------------- retention


#: How long the short-lived episodic items of these tests live, in seconds.
RETENTION_S = 0.3


async def wait_past(moment: datetime) -> None:
    await asyncio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()) + 0.05)


async def test_episodic_items_expire_and_cleanup_removes_them(
    layer_backend: OpenedBackend, mode: str
) -> None:
    store = layer_backend.store
    week = LongTermMemory(store=store, episodic_retention_days=7)
    short = LongTermMemory(store=store, episodic_retention_days=RETENTION_S / 86_400)
    weekly = await call(mode, week, "remember", "booked the train", kind="episodic")
    item = await call(mode, week, "get", weekly)
    assert abs(item.expires_at - item.created_at - timedelta(days=7)) < timedelta(seconds=1)
    fact = await call(mode, short, "remember", "Bob likes trains")  # semantic: kept
    assert (await call(mode, short, "get", fact)).expires_at is None
    later = utcnow() + timedelta(days=1)
    pinned = await call(mode, short, "remember", "trip", kind="episodic", expires_at=later)
    stored = (await call(mode, short, "get", pinned)).expires_at
    assert abs(stored - later) <= timedelta(milliseconds=1)  # given: kept (MongoDB keeps ms)
    event = await call(mode, short, "remember", "met Bob at the station", kind="episodic")
    deadline = utcnow() + timedelta(seconds=RETENTION_S)  # after its expires_at
    await wait_past(deadline)
    assert await call(mode, short, "get", event) is None
    assert set(texts(await call(mode, short, "list"))) == {
        "booked the train",
        "Bob likes trains",
        "trip",
    }
    assert await call(mode, short, "count", kind="episodic") == 2
    removed = await call(mode, store, "cleanup_expired")
    # MongoDB's TTL index may have removed it first
    assert removed == 1 or (layer_backend.name == "mongo" and removed == 0)
    assert await call(mode, store, "cleanup_expired") == 0
    assert await call(mode, short, "count") == 3


async def test_expired_items_are_never_recalled(store: Any, mode: str) -> None:
    await need_search(mode, store)
    ltm = LongTermMemory(store=store, episodic_retention_days=RETENTION_S / 86_400)
    later = utcnow() + timedelta(days=1)
    await call(mode, ltm, "remember", "Bob waved again", kind="episodic", expires_at=later)
    await call(mode, ltm, "remember", "the station has four platforms")
    await call(mode, ltm, "remember", "Bob waved at the station", kind="episodic")
    deadline = utcnow() + timedelta(seconds=RETENTION_S)  # after its expires_at
    await wait_past(deadline)
    assert set(texts(await call(mode, ltm, "recall", "Bob waved station"))) == {
        "Bob waved again",
        "the station has four platforms",
    }


# --------------------------------------------------------------------------- persistence


async def test_a_new_store_object_sees_what_was_remembered(
    layer_backend: OpenedBackend, mode: str
) -> None:
    first = LongTermMemory(store=layer_backend.store, user_id="ada")
    item_id = await call(mode, first, "remember", "Ada's cat is called Turing", key="cat")
    second = LongTermMemory(store=layer_backend.reopen(), user_id="ada")
    assert (await call(mode, second, "get", "cat")).id == item_id
    assert texts(await call(mode, second, "list")) == ["Ada's cat is called Turing"]
    await need_search(mode, second.store)
    assert texts(await call(mode, second, "recall", "what is the cat called?")) == [
        "Ada's cat is called Turing"
    ]


async def test_export_import_round_trip(store: Any, mode: str) -> None:
    src = LongTermMemory(store=store, namespace="lt-src")
    await call(mode, src, "remember", "keyed fact", key="k", user_id="ann", tags=["a", "b"])
    await call(mode, src, "remember", "plain fact", importance=0.7, metadata={"n": [1, 2]})
    later = utcnow() + timedelta(days=2)
    await call(mode, src, "remember", "an event", kind="episodic", expires_at=later, user_id="bob")
    exported = await call(mode, src, "export_items")
    assert [d["text"] for d in exported] == ["keyed fact", "plain fact", "an event"]

    dst = LongTermMemory(store=store, namespace="lt-dst")
    ids = await call(mode, dst, "import_items", exported)
    again = await call(mode, dst, "import_items", exported)
    assert again == ids and len(set(ids)) == 3  # a second import writes each item once
    copied = await call(mode, dst, "export_items")
    strip = [{k: v for k, v in d.items() if k != "id"} for d in exported]
    assert [{k: v for k, v in d.items() if k != "id"} for d in copied] == strip
    assert not set(ids) & {d["id"] for d in exported}  # no id shared with the source namespace
    assert await call(mode, src, "import_items", exported) == [d["id"] for d in exported]
    assert await call(mode, src, "count") == 3  # restored over itself
    assert (await call(mode, dst, "get", "k", user_id="ann")).tags == ("a", "b")
    third = LongTermMemory(store=store, namespace="lt-third")  # MemoryItem objects import too
    await call(mode, third, "import_items", await call(mode, src, "list", limit=None))
    assert sorted(texts(await call(mode, third, "list"))) == [
        "an event",
        "keyed fact",
        "plain fact",
    ]


# --------------------------------------------------------------------------- validation

BAD_REMEMBER: list[tuple[tuple[Any, ...], dict[str, Any], str]] = [
    (("",), {}, "content"),
    (("   ",), {}, "content"),
    ((42,), {}, "content"),
    (("x" * 100_001,), {}, "content"),
    (("a\x00b",), {}, "content"),
    (("\ud800",), {}, "content"),
    (("t",), {"importance": 1.5}, "importance"),
    (("t",), {"importance": -0.1}, "importance"),
    (("t",), {"importance": math.nan}, "importance"),
    (("t",), {"importance": True}, "importance"),
    (("t",), {"importance": "0.5"}, "importance"),
    (("t",), {"tags": "python"}, "tags"),
    (("t",), {"tags": [1]}, "tags"),
    (("t",), {"tags": [""]}, "tags"),
    (("t",), {"tags": ["a\x00"]}, "tags"),
    (("t",), {"tags": [f"t{i}" for i in range(65)]}, "tags"),
    (("t",), {"kind": "bogus"}, "kind"),
    (("t",), {"kind": None}, "kind"),
    (("t",), {"metadata": [1]}, "metadata"),
    (("t",), {"metadata": {1: "a"}}, "metadata"),
    (("t",), {"metadata": {"f": object()}}, "metadata"),
    (("t",), {"key": ""}, "key"),
    (("t",), {"key": "a\x00"}, "key"),
    (("t",), {"key": 5}, "key"),
    (("t",), {"user_id": ""}, "user_id"),
    (("t",), {"user_id": "x" * 256}, "user_id"),
    (("t",), {"expires_at": datetime(2100, 1, 1)}, "expires_at"),
    (("t",), {"expires_at": datetime(2000, 1, 1, tzinfo=UTC)}, "expires_at"),
    (("t",), {"expires_at": "2100-01-01T00:00:00+00:00"}, "expires_at"),
]


@pytest.mark.parametrize("args,kwargs,field", BAD_REMEMBER)
async def test_bad_remember_writes_nothing(
    store: Any, mode: str, args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    ltm = LongTermMemory(store=store, long_term_limit=5)
    with pytest.raises(EntryValidationError) as err:
        await call(mode, ltm, "remember", *args, **kwargs)
    assert err.value.field == field
    assert store.load(NS) == []


async def test_bad_reads_are_refused(store: Any, mode: str) -> None:
    ltm = LongTermMemory(store=store)
    bad_calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("recall", (5,), {}),
        ("recall", ("q",), {"limit": -1}),
        ("recall", ("q",), {"min_importance": "high"}),
        ("recall", ("q",), {"tags": "a"}),
        ("recall", ("q",), {"kind": "other"}),
        ("recall", ("q",), {"user_id": ""}),
        ("list", (), {"limit": -1}),
        ("list", (), {"offset": -1}),
        ("get", ("",), {}),
        ("get", ("a\x00",), {}),
        ("forget", (5,), {}),
        ("count", (), {"kind": "x"}),
        ("import_items", ({"text": "a dict, not a list"},), {}),
    ]
    for name, args, kwargs in bad_calls:
        with pytest.raises(EntryValidationError):
            await call(mode, ltm, name, *args, **kwargs)


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"text": "ok", "importance": 3}, "items[1].importance"),
        ({"text": "ok", "bogus": 1}, "items[1].bogus"),
        ({"importance": 0.5}, "items[1].text"),
        ({"text": "ok", "created_at": "yesterday"}, "items[1].created_at"),
        ({"text": "ok", "created_at": "2024-01-01T00:00:00"}, "items[1].created_at"),
        ({"text": "ok", "id": ""}, "items[1].id"),
        ({"text": "ok", "key": "same"}, "items[1]"),
        ("not a dict", "items[1]"),
        ({"text": "ok", "metadata": {"k": "\ud800"}}, "items[1].metadata"),
    ],
)
async def test_bad_import_writes_nothing(store: Any, mode: str, bad: Any, field: str) -> None:
    ltm = LongTermMemory(store=store)
    good = {"text": "good item", "key": "same"}
    with pytest.raises(EntryValidationError) as err:
        await call(mode, ltm, "import_items", [good, bad, {"text": "another good one"}])
    assert err.value.field == field
    assert store.load(NS) == []


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"namespace": ""}, "namespace"),
        ({"namespace": "a\x00"}, "namespace"),
        ({"user_id": ""}, "user_id"),
        ({"language": "English"}, "language"),
        ({"language": "en-US"}, "language"),
        ({"long_term_limit": 0}, "long_term_limit"),
        ({"long_term_limit": True}, "long_term_limit"),
        ({"long_term_limit": 2.5}, "long_term_limit"),
        ({"episodic_retention_days": 0}, "episodic_retention_days"),
        ({"episodic_retention_days": -1}, "episodic_retention_days"),
        ({"episodic_retention_days": math.inf}, "episodic_retention_days"),
        ({"episodic_retention_days": 1e12}, "episodic_retention_days"),
        ({"episodic_retention_days": "7"}, "episodic_retention_days"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(EntryValidationError) as err:
        LongTermMemory(**kwargs)
    assert err.value.field == field


def test_settings_and_docstring_example() -> None:
    ltm = LongTermMemory(
        namespace="lt:agent-1", user_id="u", long_term_limit=10, episodic_retention_days=7
    )
    assert (ltm.namespace, ltm.user_id, ltm.long_term_limit, ltm.episodic_retention_days) == (
        "lt:agent-1",
        "u",
        10,
        7,
    )
    assert "lt:agent-1" in repr(ltm)
    assert LongTermMemory.async_recall.__doc__ == "Async twin of :meth:`recall`."
    failures, tried = doctest.testmod(memory, verbose=False)
    assert tried > 0 and failures == 0
