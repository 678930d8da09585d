"""Full-text search rules shared by every store (firefly_orm._search), without a database.

Query words, the quoting handed to SQLite/PostgreSQL, argument validation, the
tokenised match and its inverted index, the entry fields, the staged overlay and
the capability check, and FileStore's index rebuilt from its file.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from firefly_orm._search import (
    MAX_QUERY_TERMS,
    MAX_TERM_LENGTH,
    SearchHit,
    SearchRequest,
    TermIndex,
    best_hits,
    fts5_query,
    match_entries,
    query_terms,
    text_terms,
    websearch_query,
)
from firefly_orm.entry import (
    MAX_SEARCH_TEXT_LENGTH,
    MemoryEntry,
    utcnow,
    validate_entry,
)
from firefly_orm.errors import EntryValidationError, StoreError
from firefly_orm.file_store import FileStore
from firefly_orm.file_store import _commit as file_commit
from firefly_orm.store import InMemoryStore
from firefly_orm.uow import BestEffortUnitOfWork, StagedUnitOfWork, supports_search

# --------------------------------------------------------------------------- words


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("Hello, World!", ("hello", "world")),
        ('"quoted" OR NOT near(a b)', ("quoted", "or", "not", "near", "a", "b")),
        ("col:term -x wild* ^caret", ("col", "term", "x", "wild", "caret")),
        ("a\x00b", ("a", "b")),
        ("snake_case", ("snake", "case")),
        ("ada ADA Ada", ("ada",)),
        ("ÉLAN Straße Ελληνικά 日本語", ("élan", "straße", "ελληνικά", "日本語")),
        ("cafe\u0301", ("cafe\u0301",)),  # a combining accent stays inside the word
        ("&|!*()<->\"'\\", ()),
        ("", ()),
        ("\ud800x", ("x",)),
    ],
)
def test_query_terms(query: str, terms: tuple[str, ...]) -> None:
    assert query_terms(query) == terms


def test_query_terms_are_capped() -> None:
    many = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 10))
    assert query_terms(many) == tuple(f"w{i}" for i in range(MAX_QUERY_TERMS))
    assert query_terms("x" * (MAX_TERM_LENGTH + 1) + " y " + "z" * MAX_TERM_LENGTH) == (
        "y",
        "z" * MAX_TERM_LENGTH,
    )
    # Repeats do not use up the cap.
    assert len(query_terms("same " * 1000 + " ".join(f"v{i}" for i in range(40)))) == 32


def test_query_must_be_text() -> None:
    with pytest.raises(EntryValidationError) as info:
        query_terms(b"bytes")  # type: ignore[arg-type]
    assert info.value.field == "query"


def test_words_reach_the_databases_quoted() -> None:
    terms = query_terms('or "x" NEAR')
    assert fts5_query(terms) == '"or" OR "x" OR "near"'
    assert websearch_query(terms) == '"or" or "x" or "near"'


def test_text_terms() -> None:
    assert text_terms(None) == frozenset()
    assert text_terms("") == frozenset()
    assert text_terms("It's Ada's: ada") == {"it", "s", "ada"}
    assert text_terms("x" * (MAX_TERM_LENGTH + 1) + " y") == {"y"}


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": 1.5}, "limit"),
        ({"limit": False}, "limit"),
        ({"min_importance": float("nan")}, "min_importance"),
        ({"min_importance": True}, "min_importance"),
        ({"user_id": "x" * 300}, "user_id"),
        ({"key_prefix": 5}, "key_prefix"),
        ({"key_prefix": "\x00"}, "key_prefix"),
        ({"language": "Simple"}, "language"),
        ({"language": "a b"}, "language"),
    ],
)
def test_bad_search_arguments(options: dict[str, Any], field: str) -> None:
    with pytest.raises(EntryValidationError) as info:
        SearchRequest.build("ns", "word", **options)
    assert info.value.field == field


def test_request_defaults_and_nothing_to_find() -> None:
    request = SearchRequest.build("ns", "Word")
    assert (request.terms, request.limit, request.language) == (("word",), 10, "simple")
    assert not request.finds_nothing
    assert SearchRequest.build("ns", "!!").finds_nothing
    assert SearchRequest.build("ns", "word", limit=0).finds_nothing
    with pytest.raises(EntryValidationError):
        SearchRequest.build("", "word")


def _entry(text: str | None, **fields: Any) -> MemoryEntry:
    return MemoryEntry(namespace="ns", content=None, search_text=text, **fields)


def test_match_entries_scores_the_share_of_words_found() -> None:
    both, one, neither = _entry("ada lovelace"), _entry("ada byron"), _entry("grace")
    expired = _entry("ada lovelace", expires_at=utcnow() - timedelta(seconds=1))
    hits = match_entries(
        [one, neither, both, expired, _entry(None)], SearchRequest.build("ns", "Lovelace ada")
    )
    assert hits == [SearchHit(both, 1.0), SearchHit(one, 0.5)]


def test_best_hits_breaks_ties_by_importance_then_recency() -> None:
    base = utcnow()
    low = _entry("x", importance=0.2, created_at=base)
    high = _entry("x", importance=0.8, created_at=base)
    newer = _entry("x", importance=0.2, created_at=base + timedelta(seconds=1))
    better = _entry("x", importance=0.0, created_at=base)
    hits = [SearchHit(low, 0.5), SearchHit(high, 0.5), SearchHit(newer, 0.5), SearchHit(better, 1)]
    ranked = [h.entry for h in best_hits(hits, None)]
    assert ranked == [better, high, newer, low]
    assert [h.entry for h in best_hits(hits, 2)] == [better, high]


def test_term_index_matches_a_fresh_scan() -> None:
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(30)]
    index = TermIndex()
    entries: dict[str, MemoryEntry] = {}
    for step in range(2000):
        entry_id = f"e{rng.randrange(200)}"
        if rng.random() < 0.2:
            index.remove(entry_id)
            entries.pop(entry_id, None)
            continue
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.randrange(0, 5)))
        entry = _entry(text or None, entry_id=entry_id, importance=rng.random())
        entries[entry_id] = entry
        index.add(entry_id, entry.search_text)
        if step % 100 == 0:
            query = " ".join(rng.sample(vocabulary, 3))
            request = SearchRequest.build("ns", query, limit=None)
            assert index.hits(entries, request) == match_entries(entries.values(), request)
    index.clear()
    assert len(index) == 0
    assert index.hits(entries, SearchRequest.build("ns", "w1")) == []


# --------------------------------------------------------------------------- entries


def test_entry_search_fields_round_trip_as_dicts() -> None:
    entry = MemoryEntry(key="k", search_text="Ada", search_language="english")
    for data in (entry.to_dict(), json.loads(json.dumps(entry.to_json_dict()))):
        again = MemoryEntry.from_dict(data)
        assert (again.search_text, again.search_language) == ("Ada", "english")
    older = {k: v for k, v in entry.to_json_dict().items() if not k.startswith("search_")}
    restored = MemoryEntry.from_dict(older)  # an export from before the fields existed
    assert (restored.search_text, restored.search_language) == (None, None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("search_text", "x" * (MAX_SEARCH_TEXT_LENGTH + 1)),
        ("search_text", "\x00"),
        ("search_text", "\ud800"),
        ("search_text", ["list"]),
        ("search_language", "EN"),
        ("search_language", "1english"),
        ("search_language", "x" * 64),
        ("search_language", 3),
    ],
)
def test_bad_search_fields(field: str, value: Any) -> None:
    entry = MemoryEntry(key="k")
    setattr(entry, field, value)
    with pytest.raises(EntryValidationError) as info:
        validate_entry(entry, "ns")
    assert info.value.field == field


def test_good_search_fields() -> None:
    validate_entry(MemoryEntry(search_text="x" * MAX_SEARCH_TEXT_LENGTH), "ns")
    validate_entry(MemoryEntry(search_text="", search_language="english_2"), "ns")


# --------------------------------------------------------------------------- units of work


class _NoSearchBackend:
    """A staged backend from before search existed (as the MongoDB store is today)."""

    def __init__(self) -> None:
        self.store = InMemoryStore()

    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        return self.store.read_entry(namespace, entry_id)

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        return self.store.read_by_key(namespace, key)

    def read_list(self, namespace: str, **options: Any) -> list[MemoryEntry]:
        return self.store.read_list(namespace, **options)

    def apply_changes(self, changes: Any) -> None:
        self.store.apply_changes(changes)


def test_a_staged_backend_without_read_search_refuses_searches() -> None:
    uow = StagedUnitOfWork(_NoSearchBackend())
    assert not supports_search(uow.entries)
    with pytest.raises(StoreError, match="_NoSearchBackend does not implement full-text search"):
        uow.entries.search("ns", "word")
    assert uow.entries.search("ns", "") == []  # nothing to find is still no error
    assert uow.entries.list("ns") == []  # the rest of the unit of work works


def test_capability_of_the_other_units_of_work() -> None:
    assert supports_search(StagedUnitOfWork(InMemoryStore()).entries)

    class FiveMethods:
        def __init__(self) -> None:
            self.inner = InMemoryStore()

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

    store = FiveMethods()
    store.save("ns", MemoryEntry(key="k", search_text="ada"))
    with BestEffortUnitOfWork(store) as uow:
        assert supports_search(uow.entries)
        assert [h.entry.key for h in uow.entries.search("ns", "ADA")] == ["k"]


def test_in_memory_index_forgets_moved_and_cleared_entries() -> None:
    store = InMemoryStore()
    entry = MemoryEntry(key="k", search_text="kiwi")
    store.save("a", entry)
    store.save("b", entry)  # an id is global here: it moves
    assert store.read_search("a", "kiwi") == []
    assert [h.entry.namespace for h in store.read_search("b", "kiwi")] == ["b"]
    store.save("b", entry.copy_entry(search_text="mango"))
    assert store.read_search("b", "kiwi") == []
    store.clear("b")
    assert store.read_search("b", "mango") == []
    assert store._words == {}  # no index left behind for an empty namespace


def test_file_store_search_survives_a_fresh_parse(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for i in range(50):
        text = "kiwi" if i % 10 == 0 else f"filler {i}"
        store.save("ns", MemoryEntry(key=f"k{i:02d}", search_text=text, importance=i / 100))
    [first] = store.read_by_key("ns", "k00")
    store.save("ns", first.copy_entry(search_text="changed"))
    store.delete("ns", store.read_by_key("ns", "k10")[0].entry_id)
    expected = ["k40", "k30", "k20"]
    assert [h.entry.key for h in store.read_search("ns", "kiwi")] == expected
    file_commit.forget(store.path_for("ns"))  # as a new process would: parse the file again
    again = FileStore(tmp_path)
    hits = again.read_search("ns", "kiwi changed")
    assert [h.entry.key for h in hits] == [*expected, "k00"]
    assert {h.score for h in hits} == {0.5}
    # Copies out: changing a hit changes nothing stored.
    hits[0].entry.search_text = "tampered"
    assert [h.entry.key for h in again.read_search("ns", "kiwi")] == expected
