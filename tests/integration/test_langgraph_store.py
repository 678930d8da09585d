"""The LangGraph store adapter on memory, SQLite and PostgreSQL.

LangGraph ships no conformance suite for ``BaseStore`` (the
``langgraph-checkpoint-conformance`` package covers checkpointers only, and the
store tests live in its repository, not in a package).  These tests port the
behaviours its store tests check, for every store that has them
(``libs/checkpoint-sqlite/tests/test_store.py``, ``test_async_store.py`` and
``libs/checkpoint-postgres/tests/test_store.py``), each naming the tests it
ports, and add what our layers give (one unit of work per batch, full-text
search, owners, TTL on our expiry).  Written here, not copied.  The vector
tests (``index=`` with an embedder) are ported in ``test_langgraph_store_index.py``.
Not ported: the tests of those stores' own SQL and migrations.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from helpers.adapter_processes import run_second_process
from helpers.langgraph_store_graph import ask
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)
from store_backends import OpenedBackend, backend_params

from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.integrations.langgraph import DEFAULT_NAMESPACE, FireflyStore
from firefly_orm.protocols import UnitOfWork
from firefly_orm.uow import unit_of_work_for

#: Each test runs on these backends (the adapter uses only the unit-of-work contract).
on_three = pytest.mark.parametrize(
    "layer_backend", backend_params(["memory", "sqlite", "postgres"]), indirect=True
)


@pytest.fixture
def lg(store: Any) -> FireflyStore:
    """A LangGraph store over the backend's store."""
    return FireflyStore(store)


@on_three
def test_batch_order_and_each_op(lg: FireflyStore) -> None:
    """Ports test_batch_order, test_batch_get_ops, test_batch_put_ops and
    test_batch_search_ops: one result per op, in order, from one batch."""
    lg.put(("test", "foo"), "key1", {"data": "value1", "tag": "a"})
    lg.put(("test", "bar"), "key2", {"data": "value2", "tag": "a"})
    lg.put(("test", "baz"), "key3", {"data": "value3", "tag": "b"})
    results = lg.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
            SearchOp(("test",), filter={"data": "value1"}),
            ListNamespacesOp(limit=10),
            GetOp(("test",), "key3"),
            SearchOp(("test",), filter={"tag": "a"}),
            SearchOp(("test",), limit=2),
            SearchOp(("test", "foo")),
            PutOp(("test",), "key4", {"data": "value4"}),
            PutOp(("test", "baz"), "key3", None),
            GetOp(("test",), "key4"),
        ]
    )
    first = results[0]
    assert isinstance(first, Item)
    assert (first.namespace, first.key, first.value) == (
        ("test", "foo"),
        "key1",
        {"data": "value1", "tag": "a"},
    )
    assert results[1] is None and results[8] is None and results[9] is None
    assert [i.key for i in results[2]] == ["key1"]  # type: ignore[union-attr]
    assert results[3] == [("test", "bar"), ("test", "baz"), ("test", "foo")]
    assert results[4] is None
    assert sorted(i.key for i in results[5]) == ["key1", "key2"]  # type: ignore[union-attr]
    assert len(results[6]) == 2  # type: ignore[arg-type]
    assert [i.namespace for i in results[7]] == [("test", "foo")]  # type: ignore[union-attr]
    assert isinstance(results[10], Item) and results[10].value == {"data": "value4"}
    assert lg.get(("test", "baz"), "key3") is None
    assert lg.list_namespaces() == [("test",), ("test", "bar"), ("test", "foo")]


@on_three
def test_basic_ops_list_namespaces_and_search(layer_backend: OpenedBackend) -> None:
    """Ports TestSqliteStore.test_basic_store_ops, test_list_namespaces, test_search
    and test_batch_list_namespaces_ops; and reads again through a reopened store."""
    lg = FireflyStore(layer_backend.store)
    lg.put(("test", "documents"), "doc1", {"title": "Test Document", "content": "Hello"})
    item = lg.get(("test", "documents"), "doc1")
    assert item is not None and item.value["title"] == "Test Document"
    lg.put(("test", "documents"), "doc1", {"title": "Updated", "content": "Hello, Updated!"})
    updated = lg.get(("test", "documents"), "doc1")
    assert updated is not None and updated.value["title"] == "Updated"
    assert updated.created_at == item.created_at and updated.updated_at > item.updated_at
    assert lg.get(("test", "other_documents"), "doc1") is None
    lg.delete(("test", "documents"), "doc1")
    assert lg.get(("test", "documents"), "doc1") is None

    spaces = [
        (a, b, c) for a in ("test", "prod") for b in ("docs", "images") for c in ("pub", "priv")
    ]
    for ns in spaces:
        lg.put(ns, "dummy", {"content": "dummy", "author": ns[1]})
    lg = FireflyStore(layer_backend.reopen())  # what another process sees
    assert sorted(lg.list_namespaces()) == sorted(spaces)
    assert all(ns[0] == "test" for ns in lg.list_namespaces(prefix=("test",)))
    assert len(lg.list_namespaces(prefix=("test",))) == 4
    assert sorted(lg.list_namespaces(suffix=("pub",))) == sorted(n for n in spaces if n[2] == "pub")
    assert lg.list_namespaces(prefix=("*", "images"), suffix=("priv",)) == [
        ("prod", "images", "priv"),
        ("test", "images", "priv"),
    ]
    assert lg.list_namespaces(max_depth=2) == [
        ("prod", "docs"),
        ("prod", "images"),
        ("test", "docs"),
        ("test", "images"),
    ]
    assert len(lg.list_namespaces(limit=3)) == 3
    assert lg.list_namespaces(limit=3, offset=6) == sorted(spaces)[6:]

    assert len(lg.search(("test",))) == 4
    assert len(lg.search(("test", "docs"))) == 2
    assert len(lg.search(("test",), filter={"author": "images"})) == 2
    assert len(lg.search(("test",), limit=3)) == 3
    assert len(lg.search(("test",), offset=3)) == 1
    newest = lg.search((), limit=1)[0]
    assert (newest.namespace, newest.score) == (spaces[-1], None)  # newest update first


@on_three
def test_namespace_boundaries_and_labels(lg: FireflyStore) -> None:
    """Ports test_search_namespace_segment_boundary, _wildcard_chars_are_literal,
    _is_case_sensitive, test_list_namespaces_segment_boundary,
    test_search_empty_prefix_is_unconstrained, test_namespace_labels_with_trailing_newline,
    test_list_namespaces_metacharacter_labels, test_non_ascii and
    test_cannot_put_empty_namespace."""
    spaces = [
        ("a",),
        ("a", "b"),
        ("ab",),
        ("a%",),
        ("a_",),
        ("A",),
        ("a\n",),
        ("x*", "[y]"),
        ("用户", "😀"),
    ]
    for ns in spaces:
        lg.put(ns, "k", {"ns": list(ns), "text": "こんにちは 🌍 héllo"})

    def found(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {item.namespace for item in lg.search(prefix, limit=100)}

    assert found(("a",)) == {("a",), ("a", "b")}
    assert found(("a%",)) == {("a%",)} and found(("a_",)) == {("a_",)}
    assert found(("A",)) == {("A",)} and found(("a\n",)) == {("a\n",)}
    assert found(()) == set(spaces)
    assert lg.list_namespaces(prefix=("a",)) == [("a",), ("a", "b")]
    assert lg.list_namespaces(prefix=("x*",)) == [("x*", "[y]")]
    assert lg.list_namespaces(suffix=("😀",)) == [("用户", "😀")]
    item = lg.get(("用户", "😀"), "k")
    assert item is not None and item.value["text"] == "こんにちは 🌍 héllo"
    assert [i.namespace for i in lg.search((), query="こんにちは héllo", limit=100)] != []
    # Keys may hold what labels may not; they never leak into the namespace.
    lg.put(("a",), "b..c.d", {"v": 1})
    assert lg.get(("a",), "b..c.d") is not None and lg.get(("a", "b"), "c.d") is None
    assert ("a", "b", "") not in lg.list_namespaces()
    for bad in [(), ("a.b",), ("",), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            lg.put(bad, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):  # batch() checks ops LangGraph's methods skip
        lg.batch([GetOp(("a.b",), "k")])


@on_three
async def test_filters_and_async_twins(lg: FireflyStore) -> None:
    """Ports test_sql_injection_filter_values, test_numeric_filter_safety,
    test_boolean_filter_safety, test_filter_keys_with_hyphens_and_digits and
    (through abatch) test_abatch_order / test_basic_store_ops (async)."""
    ns = ("filters",)
    await lg.aput(ns, "1", {"name": "x'; DROP TABLE store; --", "n": 1, "ok": True, "a-1": "h"})
    await lg.aput(ns, "2", {"name": "plain", "n": 5.5, "ok": False, "nested": {"k": [1, 2]}})
    await lg.aput(ns, "3", {"name": "plain", "n": "7", "ok": None})

    async def keys(filter: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in await lg.asearch(ns, filter=filter))

    assert await keys({"name": "x'; DROP TABLE store; --"}) == ["1"]
    assert await keys({"n": {"$gt": 1}}) == ["2"]  # "7" is a string: no order comparison
    assert await keys({"n": {"$gte": 1, "$lt": 6}}) == ["1", "2"]
    assert await keys({"n": {"$lte": 1}}) == ["1"]
    assert await keys({"name": {"$ne": "plain"}}) == ["1"]
    assert await keys({"name": {"$eq": "plain"}}) == ["2", "3"]
    assert await keys({"ok": True}) == ["1"] and await keys({"ok": False}) == ["2"]
    assert await keys({"ok": 1}) == []  # a boolean is no number
    assert await keys({"a-1": "h"}) == ["1"]
    assert await keys({"nested": {"k": [1, 2]}}) == ["2"]
    assert await keys({"nested.k": [1, 2]}) == ["2"]  # a dotted key walks objects
    assert await keys({"missing": "x"}) == []
    with pytest.raises(ValueError, match="Unsupported operator"):
        await keys({"n": {"$regex": ".*"}})
    results = await lg.abatch([GetOp(ns, "2"), PutOp(ns, "2", None), GetOp(ns, "2")])
    assert isinstance(results[0], Item) and results[1] is None and results[2] is None
    assert await lg.aget(ns, "2") is None
    assert await lg.alist_namespaces() == [ns]


@on_three
def test_full_text_query_and_index_fields(store: Any) -> None:
    """``query`` is our full-text search over the indexed fields (ours)."""
    lg = FireflyStore(store, index_fields=["text", "tags[*]"])
    ns = ("users", "ada")
    lg.put(ns, "food", {"text": "Ada likes spicy ramen", "tags": ["food"], "note": "pizza"})
    lg.put(ns, "lang", {"text": "Ada writes Python and Rust", "tags": ["code", "ramen"]})
    lg.put(ns, "hidden", {"text": "ramen ramen ramen"}, index=False)
    lg.put(ns, "title", {"text": "unrelated", "title": "ramen shop"}, index=["title"])
    lg.put(("users", "bob"), "food", {"text": "Bob likes ramen too"})
    hits = lg.search(ns, query="spicy ramen")
    assert {h.key for h in hits} == {"food", "lang", "title"}  # not "hidden", not bob's
    assert hits[0].key == "food" and all(h.score is not None for h in hits)
    assert lg.search(ns, query="pizza") == []  # "note" is not indexed
    assert [h.key for h in lg.search(ns, query="ramen", filter={"tags": ["food"]})] == ["food"]
    assert len(lg.search(("users",), query="ramen", limit=2, offset=2)) == 2
    assert {h.key for h in lg.search(ns, filter={"text": "ramen ramen ramen"})} == {"hidden"}
    assert lg.search(ns, query="!!!") == []


@on_three
def test_a_batch_is_one_unit_of_work(lg: FireflyStore) -> None:
    """A batch that writes is one unit of work: a failing op leaves nothing written,
    and later ops see earlier puts (ours)."""
    ns = ("atomic",)
    lg.put(ns, "kept", {"v": 1})
    with pytest.raises(EntryValidationError):
        lg.batch(
            [
                PutOp(ns, "new", {"v": 2}),
                PutOp(ns, "kept", None),
                PutOp(ns, "bad", {"v": float("nan")}),  # not JSON: the store refuses it
            ]
        )
    assert lg.get(ns, "new") is None and lg.get(ns, "kept") is not None
    with pytest.raises(TypeError):  # checked before anything is written
        lg.batch([PutOp(ns, "new", {"v": 2}), PutOp(ns, "x", ["not", "a", "mapping"])])  # type: ignore[arg-type]
    assert lg.get(ns, "new") is None
    seen = lg.batch([PutOp(ns, "new", {"v": 3}), SearchOp(ns), ListNamespacesOp()])
    assert sorted(i.key for i in seen[1]) == ["kept", "new"]  # type: ignore[union-attr]
    assert seen[2] == [ns]


def _expiry(store: Any, lg: FireflyStore, key: str) -> datetime | None:
    def read(uow: UnitOfWork) -> datetime | None:
        entry = uow.entries.get_by_key(lg.namespace, key)
        return None if entry is None else entry.expires_at

    with unit_of_work_for(store, read_only=True) as uow:
        return read(uow)


@on_three
async def test_ttl_on_our_expiry(store: Any) -> None:
    """Ports test_store_ttl and test_omit_expired_filters_read_paths: a put's ttl sets
    the entry's expiry, reads refresh it, expired items are never read."""
    lg = FireflyStore(store, ttl={"default_ttl": 10, "refresh_on_read": True})
    assert lg.supports_ttl
    ns = ("ttl",)
    lg.put(ns, "default", {"v": 1})
    lg.put(ns, "none", {"v": 2}, ttl=None)
    await lg.aput(ns, "gone", {"v": 3}, ttl=1e-9)  # expires a nanosecond after its write
    before = _expiry(store, lg, "ttl..default")
    assert before is not None
    assert timedelta(minutes=9) < before - utcnow() <= timedelta(minutes=10)
    assert _expiry(store, lg, "ttl..none") is None
    assert lg.get(ns, "gone", refresh_ttl=False) is None
    assert [i.key for i in lg.search(ns, refresh_ttl=False)] == ["none", "default"]
    assert lg.list_namespaces() == [ns]
    lg.get(ns, "default", refresh_ttl=False)
    assert _expiry(store, lg, "ttl..default") == before
    await lg.aget(ns, "default")  # refreshed in a second unit of work
    refreshed = _expiry(store, lg, "ttl..default")
    assert refreshed is not None and refreshed > before
    lg.search(ns, query="nothing")
    lg.batch([SearchOp(ns), PutOp(ns, "other", {"v": 4})])  # refreshed in the batch's own
    last = _expiry(store, lg, "ttl..default")
    assert last is not None and last > refreshed
    with pytest.raises(EntryValidationError):
        lg.put(ns, "bad", {"v": 1}, ttl=-1)
    with pytest.raises(EntryValidationError):
        FireflyStore(store, ttl={"sweep_interval_minutes": 5})


@on_three
def test_owners_namespaces_and_erase(store: Any) -> None:
    """An owner's store reads only its items; erase_user removes them; another
    layer's namespace is refused (ours)."""
    ada, bob = FireflyStore(store, user_id="ada"), FireflyStore(store, user_id="bob")
    ada.put(("prefs",), "food", {"text": "ramen"})
    bob.put(("prefs",), "food", {"text": "pizza"})
    other = FireflyStore(store, namespace="another-store")
    assert other.get(("prefs",), "food") is None and FireflyStore(store).search(()) == []
    assert ada.get(("prefs",), "food").value == {"text": "ramen"}  # type: ignore[union-attr]
    assert [i.value["text"] for i in bob.search((), query="ramen pizza")] == ["pizza"]
    with unit_of_work_for(store) as uow:
        uow.entries.erase_user("ada")
        uow.commit()
    assert ada.get(("prefs",), "food") is None and ada.list_namespaces() == []
    assert bob.list_namespaces() == [("prefs",)]
    assert ada.namespace == DEFAULT_NAMESPACE and "ada" in repr(ada)
    for bad in ["conversation:x", "working:s", ""]:
        with pytest.raises(EntryValidationError):
            FireflyStore(store, namespace=bad)


@pytest.mark.parametrize("layer_backend", backend_params(["sqlite", "postgres"]), indirect=True)
async def test_graph_resumes_in_a_second_process(layer_backend: OpenedBackend) -> None:
    """A compiled ``StateGraph`` whose node recalls and remembers through the store,
    with langchain-core's ``FakeListChatModel``: the second run (another process
    on SQLite, a reopened store on PostgreSQL, to keep the suite's time) sends
    the model the first run's memory (ours; the end-to-end check issue 31 asks for)."""
    lg = FireflyStore(layer_backend.store)
    first = await ask(lg, "ada", "Remember: I like spicy ramen", "Noted.")
    assert first == ["Known: ", "Remember: I like spicy ramen"]
    if layer_backend.name == "sqlite":
        printed = run_second_process(
            "langgraph_store_graph", layer_backend, "ada", "Which ramen do I like?", "Spicy."
        )
        second = json.loads(printed)
    else:
        again = FireflyStore(layer_backend.reopen())
        second = await ask(again, "ada", "Which ramen do I like?", "Spicy.")
    assert second == ["Known: Remember: I like spicy ramen", "Which ramen do I like?"]
    assert {i.value["text"] for i in lg.search(("memories", "ada"))} == {
        "Remember: I like spicy ramen",
        "Which ramen do I like?",
    }
    assert await ask(lg, "bob", "Which ramen do I like?", "No idea.") == [
        "Known: ",
        "Which ramen do I like?",
    ]
