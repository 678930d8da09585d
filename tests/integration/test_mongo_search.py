"""Full-text search on MongoDB: stored words, the index lookup, the order, recovery, upgrades.

The contract suite (``tests/contract``, and ``TestStoreContractWithoutTransactions``
in ``test_mongo_store.py``) checks the rules of :mod:`firefly_orm._search`; this
module checks how MongoDB serves them (:mod:`firefly_orm.mongo._queries`):

* every entry with ``search_text`` stores its words (``search_words``) in the
  same document, unset with the text;
* a search is an index lookup: the aggregation the store sends, explained by
  the server, walks ``ix_namespace_search_words`` (no collection scan) and
  examines only the documents holding a query word; and only the best
  ``limit`` documents come back to the client (counted by
  :class:`~firefly_orm.testing._mongo_reads.DocumentsRead`);
* a random workload: results, order and scores equal the tokenised match of
  the in-process stores, in both commit modes;
* user text is never query syntax (``$text`` would AND quoted phrases and
  negate ``-word``; here they are words);
* a commit cut short is rolled forward or undone with its words;
* a collection built with the previous index set gets the new index from
  ``initialize()`` and its documents stay readable.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient, monitoring

from firefly_orm._search import SearchHit, SearchRequest, match_entries, query_terms
from firefly_orm.bridges._loop_thread import shared_loop
from firefly_orm.entry import MemoryEntry, derived_entry_id, utcnow
from firefly_orm.mongo import MongoDBStore, document_to_entry, entry_to_document
from firefly_orm.mongo._document import SEARCH_INDEX, SEARCH_WORDS
from firefly_orm.mongo._journal import Journal
from firefly_orm.testing._mongo_reads import DocumentsRead

pytestmark = pytest.mark.mongo

RawClient = MongoClient[dict[str, Any]]

#: The populated namespace of the plan and read-count tests.
BIG = "big"
#: (500 entries against 5 read tell an index lookup from a scan as well as 2,000 did,
#: at a quarter of the test server's time.)
BIG_ENTRIES = 500
#: Entries of BIG holding the word "needle": every NEEDLE_EVERY-th.
NEEDLES = 5
NEEDLE_EVERY = BIG_ENTRIES // NEEDLES


@pytest.fixture(scope="module")
def mongo_test_url(mongo_url: str) -> str:
    return mongo_url


@pytest.fixture(scope="module")
def raw_client(mongo_test_url: str) -> Iterator[RawClient]:
    client: RawClient = MongoClient(mongo_test_url, tz_aware=True)
    yield client
    client.close()


@pytest.fixture
def db_name(raw_client: RawClient) -> Iterator[str]:
    name = "t_" + uuid.uuid4().hex[:10]
    yield name
    raw_client.drop_database(name)


@pytest.fixture(params=[None, False], ids=["auto", "no-transactions"])
def store(
    request: pytest.FixtureRequest, mongo_test_url: str, db_name: str
) -> Iterator[MongoDBStore]:
    s = MongoDBStore(mongo_test_url, database=db_name, transactions=request.param)
    yield s
    s.close()


def keys(hits: list[SearchHit]) -> list[str | None]:
    return [hit.entry.key for hit in hits]


# --------------------------------------------------------------------------- stored shape


def test_search_fields_are_stored_with_their_words(
    mongo_test_url: str, db_name: str, raw_client: RawClient
) -> None:
    collection = raw_client[db_name]["entries"]
    entry = MemoryEntry(
        key="k", search_text="Ada LOVELACE: ada's notes, café", search_language="english"
    )
    with MongoDBStore(mongo_test_url, database=db_name) as store:
        store.save("ns", entry)
        doc = collection.find_one({"key": "k"})
        assert doc is not None
        assert doc["search_text"] == entry.search_text and doc["search_language"] == "english"
        assert doc[SEARCH_WORDS] == ["ada", "café", "lovelace", "notes", "s"]
        [loaded] = store.load("ns")
        assert (loaded.search_text, loaded.search_language) == (entry.search_text, "english")

        store.save("ns", entry.copy_entry(search_text="?! --", search_language=None))
        doc = collection.find_one({"key": "k"})
        assert doc is not None and doc["search_text"] == "?! --"  # no words: none stored
        assert SEARCH_WORDS not in doc and "search_language" not in doc

        store.save("ns", entry.copy_entry(search_text=None, search_language=None))
        doc = collection.find_one({"key": "k"})
        assert doc is not None
        assert not {"search_text", "search_language", SEARCH_WORDS} & set(doc)
        assert doc["version"] == 3


def test_converter_carries_the_search_fields() -> None:
    entry = MemoryEntry(key="k", search_text="Grace Hopper", search_language="simple")
    doc = entry_to_document(entry, "ns")
    assert doc[SEARCH_WORDS] == ["grace", "hopper"]
    assert document_to_entry(doc).to_dict() == entry.to_dict() | {"namespace": "ns"}
    plain = entry_to_document(MemoryEntry(), "ns")
    assert not {"search_text", "search_language", SEARCH_WORDS} & set(plain)


# --------------------------------------------------------------------------- the index lookup


class Commands(monitoring.CommandListener):
    """Remembers the ``aggregate`` commands a client sends."""

    def __init__(self) -> None:
        self.aggregates: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "aggregate":
            self.aggregates.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture(scope="module")
def populated(mongo_test_url: str, raw_client: RawClient) -> Iterator[str]:
    """A database whose namespace BIG holds BIG_ENTRIES entries, NEEDLES of them with "needle"."""
    name = "t_" + uuid.uuid4().hex[:10]
    with MongoDBStore(mongo_test_url, database=name) as store, store.unit_of_work() as uow:
        for i in range(BIG_ENTRIES):
            text = f"common entry{i} group{i % 50}" + (" needle" if i % NEEDLE_EVERY == 0 else "")
            entry = MemoryEntry(
                key=f"k{i:05d}",
                search_text=text,
                user_id=f"u{i % 3}",
                importance=(i % 10) / 10,
            )
            uow.entries.save(BIG, entry)
        # The same word in another namespace is not part of BIG's lookup.
        for _ in range(50):
            uow.entries.save("elsewhere", MemoryEntry(search_text="needle common"))
        uow.commit()
    yield name
    raw_client.drop_database(name)


@pytest.fixture
def counted(
    mongo_test_url: str,
) -> Iterator[tuple[AsyncMongoClient[dict[str, Any]], Commands, DocumentsRead]]:
    commands, documents = Commands(), DocumentsRead()

    async def new_client() -> AsyncMongoClient[dict[str, Any]]:
        return AsyncMongoClient(
            mongo_test_url, tz_aware=True, event_listeners=[commands, documents]
        )

    client = shared_loop().call(new_client())  # born on the loop the store uses
    yield client, commands, documents
    shared_loop().call(client.close())


def _plan_facts(explained: Any) -> tuple[set[str], set[str], list[int]]:
    """(stages, index names, totalDocsExamined figures) of the winning plans, recursively."""
    stages: set[str] = set()
    indexes: set[str] = set()
    examined: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("stage"), str):
                stages.add(node["stage"])
            if isinstance(node.get("indexName"), str):
                indexes.add(node["indexName"])
            if isinstance(node.get("totalDocsExamined"), int):
                examined.append(node["totalDocsExamined"])
            for name, value in node.items():
                if name != "rejectedPlans":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(explained)
    return stages, indexes, examined


@pytest.mark.parametrize(
    "options",
    [{}, {"user_id": "u1", "key_prefix": "k0", "min_importance": 0.0}, {"limit": None}],
    ids=["plain", "filtered", "unlimited"],
)
def test_a_search_is_an_index_lookup(
    populated: str,
    raw_client: RawClient,
    counted: tuple[AsyncMongoClient[dict[str, Any]], Commands, DocumentsRead],
    options: dict[str, Any],
) -> None:
    """The server's plan of the very aggregation the store sent: the words index, no scan."""
    client, commands, _ = counted
    store = MongoDBStore(client=client, database=populated)
    hits = store.read_search(BIG, "needle absent", **options)
    assert len(hits) == (2 if "user_id" in options else NEEDLES)
    [sent] = commands.aggregates
    explained = raw_client[populated].command(
        "explain",
        {"aggregate": sent["aggregate"], "pipeline": sent["pipeline"], "cursor": {}},
        verbosity="executionStats",
    )
    stages, indexes, examined = _plan_facts(explained)
    print(
        f"\nsearch {options} over {BIG_ENTRIES} entries: stages={sorted(stages)} "
        f"indexes={sorted(indexes)} documents examined={examined} results={len(hits)}"
    )
    assert "COLLSCAN" not in stages
    assert "IXSCAN" in stages and SEARCH_INDEX in indexes
    assert examined and max(examined) <= NEEDLES  # only the documents holding a word
    store.close()


@pytest.mark.parametrize("transactions", [None, False], ids=["auto", "no-transactions"])
def test_a_search_reads_only_the_best_documents(
    populated: str,
    counted: tuple[AsyncMongoClient[dict[str, Any]], Commands, DocumentsRead],
    transactions: bool | None,
) -> None:
    """Documents the client receives for one ``uow.entries.search``: at most the limit."""
    client, _, documents = counted
    store = MongoDBStore(client=client, database=populated, transactions=transactions)

    def read_by_one_search(query: str, limit: int | None) -> tuple[int, int]:
        with store.unit_of_work(read_only=True) as uow:
            documents.count = 0
            found = uow.entries.search(BIG, query, limit=limit)
            return len(found), documents.count

    rare = read_by_one_search("needle", 10)
    common = read_by_one_search("common", 10)
    top = read_by_one_search("common needle", 3)
    every_rare = read_by_one_search("needle", None)
    print(
        f"\ndocuments read by one search among {BIG_ENTRIES} entries ({transactions=}): "
        f"{NEEDLES} matches limit 10 -> {rare[1]}, {BIG_ENTRIES} matches limit 10 -> "
        f"{common[1]}, limit 3 -> {top[1]}, {NEEDLES} matches unlimited -> {every_rare[1]}"
    )
    assert rare == (NEEDLES, NEEDLES)
    assert common == (10, 10)
    assert top == (3, 3)
    assert every_rare == (NEEDLES, NEEDLES)
    store.close()


# --------------------------------------------------------------------------- rules and order

VOCABULARY = [f"w{i}" for i in range(12)]


def _text(rng: random.Random) -> str | None:
    if rng.random() < 0.15:
        return None
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randrange(1, 6)))


def _assert_like_the_tokenised_match(store: MongoDBStore, rng: random.Random) -> int:
    """Random searches: ids, order and scores equal the tokenised match over ``load``."""
    checked = 0
    for namespace in ("ns-a", "ns-b"):
        stored = store.load(namespace)
        for _ in range(25):
            query = " ".join(rng.sample([*VOCABULARY, "absent"], rng.randrange(1, 4)))
            options: dict[str, Any] = {"limit": rng.choice([None, 1, 3, 10])}
            if rng.random() < 0.3:
                options["user_id"] = rng.choice(["ann", "bob"])
            if rng.random() < 0.3:
                options["key_prefix"] = rng.choice(["k1", "k", ""])
            if rng.random() < 0.3:
                options["min_importance"] = 0.5
            expected = match_entries(stored, SearchRequest.build(namespace, query, **options))
            found = store.read_search(namespace, query, **options)
            assert [(h.entry.entry_id, h.score) for h in found] == [
                (h.entry.entry_id, h.score) for h in expected
            ], (namespace, query, options)
            with store.unit_of_work(read_only=True) as uow:
                staged = uow.entries.search(namespace, query, **options)
            assert [h.entry.entry_id for h in staged] == [h.entry.entry_id for h in expected]
            checked += 1
    return checked


def test_results_order_and_scores_equal_the_tokenised_match(store: MongoDBStore) -> None:
    rng = random.Random(17)
    # Ties on purpose: three importances, creation times sharing milliseconds.
    base = datetime(2030, 1, 1, tzinfo=UTC)
    entries: list[MemoryEntry] = []
    for i in range(120):
        entry = MemoryEntry(
            key=None if i % 7 == 0 else f"k{i}",
            search_text=_text(rng),
            user_id=rng.choice(["ann", "bob", None]),
            importance=rng.choice([0.1, 0.5, 0.9]),
            created_at=base + timedelta(milliseconds=i // 4, microseconds=rng.randrange(1000)),
            expires_at=utcnow() - timedelta(seconds=1) if i % 15 == 0 else None,
        )
        entries.append(entry)
    with store.unit_of_work() as uow:
        for entry in entries:
            uow.entries.save(rng.choice(["ns-a", "ns-b"]), entry)
        uow.commit()
    checked = _assert_like_the_tokenised_match(store, rng)
    for entry in rng.sample(entries, 40):  # upserts: new text, same text, text removed, moves
        text = entry.search_text if rng.random() < 0.3 else _text(rng)
        store.save(rng.choice(["ns-a", "ns-b"]), entry.copy_entry(search_text=text))
    for entry in rng.sample(entries, 10):
        store.delete(entry.namespace or "ns-a", entry.entry_id)
    checked += _assert_like_the_tokenised_match(store, rng)
    with store.unit_of_work() as uow:
        uow.entries.erase_user("bob")
        for current in uow.entries.list("ns-a", limit=10):
            uow.entries.save(
                "ns-a", current.copy_entry(search_text=_text(rng)), expected_version=current.version
            )
        uow.commit()
    checked += _assert_like_the_tokenised_match(store, rng)
    print(f"\n{checked} random searches ({store.uses_transactions=}) equal the tokenised match")


def test_user_text_is_never_query_syntax(store: MongoDBStore) -> None:
    """What ``$text`` would read as syntax is searched as words here."""
    for key, text in [
        ("both", "Ada Lovelace"),
        ("ada", "Ada Byron"),
        ("love", "lovelace only"),
        ("dollar", "ne null where regex"),
    ]:
        store.save("ns", MemoryEntry(key=key, search_text=text))
    # A quoted phrase: OR over its words (``$text`` would require the phrase).
    # (Ties newest first.)
    assert keys(store.read_search("ns", '"ada lovelace"')) == ["both", "love", "ada"]
    # A leading minus: the word (``$text`` would exclude it).
    assert set(keys(store.read_search("ns", "-ada"))) == {"both", "ada"}
    assert set(keys(store.read_search("ns", "lovelace -ada"))) == {"both", "ada", "love"}
    # Query operators: words, compared as values.
    assert keys(store.read_search("ns", '{"$ne": null}')) == ["dollar"]
    assert keys(store.read_search("ns", "$where: function() { return true }")) == ["dollar"]
    assert keys(store.read_search("ns", "$regex .*")) == ["dollar"]  # not a pattern
    assert store.read_search("ns", ".* ^ $") == []
    assert query_terms('"ada lovelace" -x $ne') == ("ada", "lovelace", "x", "ne")


def test_entries_expiring_within_the_reading_millisecond_are_not_found(
    mongo_test_url: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BSON dates hold milliseconds; the microseconds still decide, and the window widens."""
    import firefly_orm.mongo._queries as queries_module

    now = datetime(2030, 1, 1, 0, 0, 0, 500, tzinfo=UTC)
    monkeypatch.setattr(queries_module, "utcnow", lambda: now)
    rows = [
        ("expired 100us ago", 0.9, now - timedelta(microseconds=100)),
        ("forever", 0.5, None),
        ("100us left", 0.4, now + timedelta(microseconds=100)),
        ("expired", 0.95, now - timedelta(milliseconds=2)),
    ]
    with MongoDBStore(mongo_test_url, database=db_name) as store:
        for key, importance, expires in rows:
            entry = MemoryEntry(
                key=key, search_text="word", importance=importance, expires_at=expires
            )
            store.save("ns", entry)
        # The best stored match expired 100us ago, within this millisecond.
        assert keys(store.read_search("ns", "word", limit=2)) == ["forever", "100us left"]
        assert keys(store.read_search("ns", "word", limit=None)) == ["forever", "100us left"]


# --------------------------------------------------------------------------- recovery


class Crash(BaseException):
    """Stands for the writer's process dying at this point (no clean-up runs)."""


def _crash_in(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, after_calls: int) -> None:
    original = getattr(target, name)
    calls: list[int] = []

    async def crashing(*args: Any, **kwargs: Any) -> Any:
        if len(calls) >= after_calls:
            raise Crash(name)
        calls.append(1)
        return await original(*args, **kwargs)

    monkeypatch.setattr(target, name, crashing)


def _head(namespace: str, text: str) -> MemoryEntry:
    return MemoryEntry(entry_id=derived_entry_id(namespace, "head"), key="head", search_text=text)


def _commit_new_heads_and_a_fact(store: MongoDBStore) -> None:
    with store.unit_of_work() as uow:
        for namespace in ("a", "b"):
            uow.entries.save(namespace, _head(namespace, "new text"), expected_version=1)
        uow.entries.save("a", MemoryEntry(key="fact", search_text="fresh fact"))
        uow.commit()


@pytest.fixture
def standalone(mongo_test_url: str, db_name: str) -> Iterator[MongoDBStore]:
    store = MongoDBStore(mongo_test_url, database=db_name, transactions=False)
    for namespace in ("a", "b"):
        store.save(namespace, _head(namespace, "old text"))
    yield store
    store.close()


def test_a_search_completes_a_commit_cut_short_with_its_words(
    standalone: MongoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crash_in(monkeypatch, Journal, "finish", 0)  # after the conditional writes
    with pytest.raises(Crash):
        _commit_new_heads_and_a_fact(standalone)
    monkeypatch.undo()
    # The search meets the commit's lock, rolls it forward, and reads again.
    assert keys(standalone.read_search("a", "fresh")) == ["fact"]
    assert keys(standalone.read_search("a", "new")) == ["head"]
    assert standalone.read_search("a", "old") == []
    assert keys(standalone.read_search("b", "new")) == ["head"]


def test_a_search_undoes_a_commit_cut_short_with_its_words(
    standalone: MongoDBStore,
    monkeypatch: pytest.MonkeyPatch,
    raw_client: RawClient,
    db_name: str,
) -> None:
    import firefly_orm.mongo._commit as commit_module

    _crash_in(monkeypatch, commit_module, "_conditional_write", 1)  # head "a" written only
    with pytest.raises(Crash):
        _commit_new_heads_and_a_fact(standalone)
    monkeypatch.undo()
    collection = raw_client[db_name]["entries"]
    cut = collection.find_one({"namespace": "a", "key": "head"})
    assert cut is not None and cut[SEARCH_WORDS] == ["new", "text"]
    # Another writer changes head "b": the commit can no longer complete.
    collection.update_one({"namespace": "b", "key": "head"}, {"$set": {"version": 7}})
    # The search in "a" undoes it: the earlier document comes back with its words.
    assert keys(standalone.read_search("a", "old")) == ["head"]
    assert standalone.read_search("a", "new fresh") == []
    restored = collection.find_one({"namespace": "a", "key": "head"})
    assert restored is not None and restored[SEARCH_WORDS] == ["old", "text"]


# --------------------------------------------------------------------------- upgrade

#: The indexes of an entries collection before full-text search (the previous release).
PREVIOUS_INDEXES: list[tuple[list[tuple[str, int]], dict[str, Any]]] = [
    (
        [("namespace", 1), ("created_at", 1), ("created_at_us", 1), ("entry_id", 1)],
        {"name": "ix_namespace_created"},
    ),
    (
        [("namespace", 1), ("key", 1), ("created_at", 1), ("created_at_us", 1), ("entry_id", 1)],
        {"name": "ix_namespace_key_created", "partialFilterExpression": {"key": {"$exists": True}}},
    ),
    (
        [
            ("user_id", 1),
            ("namespace", 1),
            ("created_at", 1),
            ("created_at_us", 1),
            ("entry_id", 1),
        ],
        {
            "name": "ix_user_namespace_created",
            "partialFilterExpression": {"user_id": {"$exists": True}},
        },
    ),
    (
        [("expires_at", 1)],
        {
            "name": "ix_expires_at",
            "partialFilterExpression": {"expires_at": {"$exists": True}},
            "expireAfterSeconds": 0,
        },
    ),
    ([("entry_id", 1)], {"name": "ux_entry_id", "unique": True}),
]


def test_a_collection_of_the_previous_release_gets_the_search_index(
    mongo_test_url: str, db_name: str, raw_client: RawClient
) -> None:
    collection = raw_client[db_name]["entries"]
    for keys_, options in PREVIOUS_INDEXES:
        collection.create_index(keys_, **options)
    # Documents as the previous release wrote them: no search fields at all.
    old = [MemoryEntry(key=f"old{i}", content=i, user_id="ann") for i in range(1_000)]
    collection.insert_many([entry_to_document(e, "ns") for e in old])
    before = {ix["name"]: ix for ix in collection.list_indexes()}
    assert SEARCH_INDEX not in before

    with MongoDBStore(mongo_test_url, database=db_name) as store:
        store.initialize()  # idempotent
        after = {ix["name"]: ix for ix in collection.list_indexes()}
        print(f"\nindexes after initialize() on a collection of 1,000 entries: {sorted(after)}")
        assert dict(after[SEARCH_INDEX]["key"]) == {"namespace": 1, SEARCH_WORDS: 1}
        assert {name: after[name] for name in before} == before  # the others unchanged
        assert len(store.load("ns")) == 1_000
        assert store.read_search("ns", "old0 ann") == []  # nothing was indexed before
        first = store.read_list("ns", key_prefix="old0", limit=1)[0]
        store.save("ns", first.copy_entry(search_text="now searchable"))
        assert keys(store.read_search("ns", "searchable")) == ["old0"]
    # A store of the new release opened again finds everything in place.
    with MongoDBStore(mongo_test_url, database=db_name) as again:
        assert keys(again.read_search("ns", "now")) == ["old0"]
