"""MongoDBStore against a real MongoDB wire-protocol server (see tests/mongo_server.py)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient

from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id, utcnow
from firefly_orm.errors import (
    ConcurrencyError,
    DatabaseConnectionError,
    EntryValidationError,
    StoreError,
)
from firefly_orm.mongo import (
    JSON_WRAPPER_KEY,
    MongoDBStore,
    document_to_entry,
    entry_to_document,
)
from firefly_orm.testing import StoreContract
from firefly_orm.testing._mongo_reads import DocumentsRead
from firefly_orm.uow import UnitOfWork

pytestmark = pytest.mark.mongo


@pytest.fixture(scope="module")
def mongo_test_url(mongo_url: str) -> str:
    """conftest's ``mongo_url`` (env URL, testcontainers, SecantusDB; else skip or fail)."""
    return mongo_url


@pytest.fixture(scope="module")
def raw_client(mongo_test_url: str) -> Iterator[MongoClient[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_test_url, tz_aware=False)
    yield client
    client.close()


@pytest.fixture
def db_name(raw_client: MongoClient[dict[str, Any]]) -> Iterator[str]:
    name = "t_" + uuid.uuid4().hex[:10]
    yield name
    raw_client.drop_database(name)


@pytest.fixture
def store(mongo_test_url: str, db_name: str) -> Iterator[MongoDBStore]:
    s = MongoDBStore(mongo_test_url, database=db_name)
    yield s
    s.close()


@pytest.fixture
def store_no_ttl(mongo_test_url: str, db_name: str) -> Iterator[MongoDBStore]:
    """A store without the TTL index: the server never deletes expired entries itself.

    For tests that count what ``cleanup_expired`` removes: with the index, the
    server's TTL monitor may delete them first (the count is then lower).
    """
    s = MongoDBStore(mongo_test_url, database=db_name, ttl_index=False)
    yield s
    s.close()


def raw_docs(client: MongoClient[dict[str, Any]], db: str, coll: str = "entries") -> list[Any]:
    return list(client[db][coll].find({}, {"_id": 0}))


def entry(**kw: Any) -> MemoryEntry:
    return MemoryEntry(**kw)


# --------------------------------------------------------------------------- basics


def test_round_trip_keeps_every_field(store: MongoDBStore) -> None:
    created = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    expires = utcnow() + timedelta(hours=1, microseconds=789)
    e = entry(
        scope=MemoryScope.LONG_TERM,
        key="fact",
        content={"nested": [1, 2.5, None, True, {"x": "y"}]},
        metadata={"source": "test", "n": 3},
        created_at=created,
        expires_at=expires,
        importance=0.75,
    )
    store.save("ns", e)
    [loaded] = store.load("ns")
    expected = e.to_dict() | {"namespace": "ns", "version": 1}
    assert loaded.to_dict() == expected
    assert loaded.created_at.tzinfo is not None and loaded.created_at.utcoffset() == timedelta(0)
    by_key = store.load_by_key("ns", "fact")
    assert by_key is not None and by_key.to_dict() == expected


def test_datetimes_are_bson_dates_and_unset_fields_are_absent(
    store: MongoDBStore, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    expires = utcnow() + timedelta(days=1)
    store.save("ns", entry(key="k", content=1, expires_at=expires))
    store.save("ns", entry(content=2))
    docs = {d["content"]: d for d in raw_docs(raw_client, db_name)}
    with_key, plain = docs[1], docs[2]
    assert isinstance(with_key["created_at"], datetime)
    assert isinstance(with_key["expires_at"], datetime)
    assert with_key["expires_at"].replace(tzinfo=UTC) == expires.replace(
        microsecond=expires.microsecond // 1000 * 1000
    )
    assert with_key["expires_at_us"] == expires.microsecond % 1000
    assert with_key["scope"] == "working" and with_key["key"] == "k"
    assert "key" not in plain and "expires_at" not in plain and "expires_at_us" not in plain
    # The range filters a user would write work on the stored type.
    coll = raw_client[db_name]["entries"]
    assert coll.count_documents({"expires_at": {"$gt": datetime.now(UTC)}}) == 1


def test_upsert_bumps_version_and_keeps_one_document(
    store: MongoDBStore, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    e = entry(key="k", content="v1")
    store.save("ns", e)
    store.save("ns", e.copy_entry(content="v2"))
    store.save("ns", e.copy_entry(content="v3"))
    [loaded] = store.load("ns")
    assert loaded.content == "v3" and loaded.version == 3
    assert len(raw_docs(raw_client, db_name)) == 1
    fresh = entry(content="x", version=5)
    store.save("ns", fresh)
    assert store.load("ns")[-1].version == 5
    assert fresh.version == 5  # the caller's object is not modified


def test_saving_under_another_namespace_moves_the_entry(store: MongoDBStore) -> None:
    e = entry(key="k", content=1)
    store.save("a", e)
    store.save("b", e)
    assert store.load("a") == []
    [moved] = store.load("b")
    assert moved.namespace == "b" and moved.version == 2


def test_load_orders_by_created_at_then_entry_id(store: MongoDBStore) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    specs = [
        ("e", base + timedelta(seconds=2)),
        ("b", base + timedelta(microseconds=2)),  # same millisecond as the next two
        ("a", base + timedelta(microseconds=1)),
        ("d", base),
        ("c", base),
    ]
    for entry_id, created in specs:
        store.save("ns", entry(entry_id=entry_id, created_at=created, content=entry_id))
    assert [e.entry_id for e in store.load("ns")] == ["c", "d", "a", "b", "e"]


def test_load_by_key_returns_the_newest_live_match(store: MongoDBStore) -> None:
    base = utcnow()
    old = entry(key="k", content="old", created_at=base)
    mid = entry(key="k", content="mid", created_at=base + timedelta(microseconds=300))
    newest_expired = entry(
        key="k",
        content="expired",
        created_at=base + timedelta(seconds=1),
        expires_at=base - timedelta(seconds=1),
    )
    for e in (mid, newest_expired, old):
        store.save("ns", e)
    found = store.load_by_key("ns", "k")
    assert found is not None and found.content == "mid"
    assert store.load_by_key("ns", "other") is None
    assert store.load_by_key("other-ns", "k") is None


def test_expired_entries_are_filtered_and_cleaned_up(
    store_no_ttl: MongoDBStore, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    store = store_no_ttl
    now = utcnow()
    store.save("a", entry(content="gone", expires_at=now - timedelta(milliseconds=1)))
    store.save("b", entry(key="k", content="gone too", expires_at=now - timedelta(days=1)))
    store.save("a", entry(content="live", expires_at=now + timedelta(hours=1)))
    store.save("a", entry(content="forever"))
    assert [e.content for e in store.load("a")] == ["live", "forever"]
    assert store.load_by_key("b", "k") is None
    assert len(raw_docs(raw_client, db_name)) == 4  # filtered, not yet deleted
    assert store.cleanup_expired() == 2
    assert sorted(d["content"] for d in raw_docs(raw_client, db_name)) == ["forever", "live"]
    assert store.cleanup_expired() == 0


def test_delete_and_clear_are_idempotent_and_namespaced(store: MongoDBStore) -> None:
    a1, a2, b1 = entry(content=1), entry(content=2), entry(content=3)
    store.save("a", a1)
    store.save("a", a2)
    store.save("b", b1)
    store.delete("a", a1.entry_id)
    store.delete("a", a1.entry_id)
    store.delete("b", a2.entry_id)  # wrong namespace: nothing happens
    assert [e.entry_id for e in store.load("a")] == [a2.entry_id]
    store.clear("a")
    store.clear("a")
    store.clear("never-used")
    assert store.load("a") == []
    assert [e.entry_id for e in store.load("b")] == [b1.entry_id]
    assert store.load("unknown") == []


def test_store_hands_out_copies(store: MongoDBStore) -> None:
    e = entry(key="k", content={"list": [1]}, metadata={"m": {"x": 1}})
    store.save("ns", e)
    e.content["list"].append(2)
    e.metadata_["m"]["x"] = 99
    [loaded] = store.load("ns")
    assert loaded.content == {"list": [1]} and loaded.metadata_ == {"m": {"x": 1}}
    loaded.content["list"].append(3)
    again = store.load_by_key("ns", "k")
    assert again is not None and again.content == {"list": [1]}


@pytest.mark.parametrize(
    "bad",
    [
        {"importance": 1.5},
        {"importance": float("nan")},
        {"created_at": datetime(2025, 1, 1)},  # naive
        {"expires_at": datetime(2030, 1, 1)},  # naive
        {"content": {1, 2}},  # not JSON
        {"key": "a\x00b"},
        {"scope": "nonsense"},
    ],
)
def test_invalid_entries_write_nothing(
    store: MongoDBStore,
    raw_client: MongoClient[dict[str, Any]],
    db_name: str,
    bad: dict[str, Any],
) -> None:
    good = entry(key="k", content="good")
    store.save("ns", good)
    for broken in (good.copy_entry(), entry(key="new")):
        for name, value in bad.items():
            setattr(broken, name, value)
        with pytest.raises(EntryValidationError):
            store.save("ns", broken)
    assert [d["content"] for d in raw_docs(raw_client, db_name)] == ["good"]


def test_invalid_namespace_is_rejected(store: MongoDBStore) -> None:
    for ns in ("", "a\x00b"):
        with pytest.raises(EntryValidationError):
            store.save(ns, entry())
        with pytest.raises(EntryValidationError):
            store.load(ns)
    with pytest.raises(EntryValidationError):
        store.load_by_key("ns", "a\x00")


@pytest.mark.parametrize("namespace", ["", "a\x00b", "bad\udc00", None])
def test_staged_reads_reject_an_invalid_namespace(store: MongoDBStore, namespace: Any) -> None:
    reads: list[Callable[[], object]] = [
        lambda: store.read_entry(namespace, "id"),
        lambda: store.read_by_key(namespace, "k"),
        lambda: store.read_list(namespace),
        lambda: store.read_list(namespace, key_prefix="k", limit=1),
    ]
    for read in reads:
        with pytest.raises(EntryValidationError) as caught:
            read()
        assert caught.value.field == "namespace"


@pytest.mark.parametrize("key", ["a\x00", "bad\udc00", None, 3])
def test_staged_read_by_key_rejects_an_invalid_key(store: MongoDBStore, key: Any) -> None:
    with pytest.raises(EntryValidationError) as caught:
        store.read_by_key("ns", key)
    assert caught.value.field == "key"


def test_awkward_values_round_trip(
    store: MongoDBStore, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    values: list[Any] = [
        "héllo wörld ✓ 日本語 🚀",
        "nul\x00inside",
        {"$schema": "http://json-schema.org", "a.b": 1, "": "empty key"},
        {JSON_WRAPPER_KEY: "looks like our wrapper"},
        {"huge": 2**80, "neg": -(2**70)},
        [None, False, 0, -1.5, "", [], {}],
        None,
        "x" * (1024 * 1024),
    ]
    ids = []
    for i, value in enumerate(values):
        e = entry(content=value, metadata={"$meta": i, "ünï": "çødé"}, key=f"k-✓-{i}")
        store.save("ns-ü", e)
        ids.append(e.entry_id)
    loaded = {e.entry_id: e for e in store.load("ns-ü")}
    for i, (entry_id, value) in enumerate(zip(ids, values, strict=True)):
        assert loaded[entry_id].content == value
        assert loaded[entry_id].metadata_ == {"$meta": i, "ünï": "çødé"}
        by_key = store.load_by_key("ns-ü", f"k-✓-{i}")
        assert by_key is not None and by_key.content == value
    # Plain values are stored as plain BSON (queryable), not wrapped.
    plain = raw_client[db_name]["entries"].find_one({"entry_id": ids[0]})
    assert plain is not None and plain["content"] == values[0]


def test_converter_round_trip_is_exact() -> None:
    e = entry(
        key="k",
        content={"a": [1, 2]},
        created_at=datetime(2025, 1, 1, 0, 0, 0, 999999, tzinfo=UTC),
        expires_at=datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    )
    doc = entry_to_document(e, "ns")
    assert doc["created_at_us"] == 999 and doc["expires_at_us"] == 1
    assert document_to_entry(doc).to_dict() == e.to_dict() | {"namespace": "ns"}
    naive = dict(doc, created_at=doc["created_at"].replace(tzinfo=None))
    assert document_to_entry(naive).created_at == e.created_at


# --------------------------------------------------------------------------- indexes


def _indexes(client: MongoClient[dict[str, Any]], db: str, coll: str) -> dict[str, Any]:
    return {ix["name"]: ix for ix in client[db][coll].list_indexes()}


def test_indexes_are_created(
    store: MongoDBStore, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    store.initialize()
    store.initialize()  # idempotent
    ix = _indexes(raw_client, db_name, "entries")
    assert list(ix["ix_namespace_created"]["key"]) == [
        "namespace",
        "created_at",
        "created_at_us",
        "entry_id",
    ]
    assert list(ix["ix_namespace_key_created"]["key"])[:3] == ["namespace", "key", "created_at"]
    assert ix["ix_namespace_key_created"]["partialFilterExpression"] == {"key": {"$exists": True}}
    assert ix["ix_expires_at"]["partialFilterExpression"] == {"expires_at": {"$exists": True}}
    assert ix["ix_expires_at"]["expireAfterSeconds"] == 0
    assert ix["ux_entry_id"]["unique"] is True
    # Full-text search: one key per word of an entry (see test_mongo_search.py).
    assert list(ix["ix_namespace_search_words"]["key"]) == ["namespace", "search_words"]


def test_ttl_index_can_be_disabled(
    mongo_test_url: str, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    with MongoDBStore(mongo_test_url, database=db_name, ttl_index=False):
        pass
    ix = _indexes(raw_client, db_name, "entries")
    assert "expireAfterSeconds" not in ix["ix_expires_at"]
    assert ix["ix_expires_at"]["partialFilterExpression"] == {"expires_at": {"$exists": True}}
    # A store asking for the TTL index on that collection gets an error, not silence.
    other = MongoDBStore(mongo_test_url, database=db_name, ttl_index=True)
    try:
        with pytest.raises(StoreError, match="ttl_index"):
            other.initialize()
    finally:
        other.close()


def test_unique_entry_id_index_is_enforced(
    store: MongoDBStore, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    e = entry()
    store.save("ns", e)
    from pymongo.errors import DuplicateKeyError

    with pytest.raises(DuplicateKeyError):
        raw_client[db_name]["entries"].insert_one({"entry_id": e.entry_id})


# --------------------------------------------------------------------------- names, errors


@pytest.mark.parametrize(
    "database", ["", "a b", "a.b", "a$b", "a/b", "a\\b", 'a"b', "a\x00", "x" * 64]
)
def test_invalid_database_names(mongo_test_url: str, database: str) -> None:
    with pytest.raises(EntryValidationError) as info:
        MongoDBStore(mongo_test_url, database=database)
    assert isinstance(info.value, ValueError) and info.value.field == "database"


@pytest.mark.parametrize(
    "collection", ["", "system.users", "a$b", ".a", "a.", "a..b", "a\x00b", "c" * 300]
)
def test_invalid_collection_names(mongo_test_url: str, collection: str) -> None:
    with pytest.raises(EntryValidationError) as info:
        MongoDBStore(mongo_test_url, collection=collection)
    assert info.value.field == "collection"


def test_valid_unusual_names_work(mongo_test_url: str, raw_client: Any) -> None:
    db = "t_" + uuid.uuid4().hex[:8] + "-ü"
    try:
        with MongoDBStore(mongo_test_url, database=db, collection="memory.entries-ü") as s:
            s.save("ns", entry(content=1))
            assert [e.content for e in s.load("ns")] == [1]
        assert raw_client[db]["memory.entries-ü"].count_documents({}) == 1
    finally:
        raw_client.drop_database(db)


def test_unreachable_server_raises_connection_error_without_password() -> None:
    url = "mongodb://agent:s3cr3t-pw@127.0.0.1:1/?serverSelectionTimeoutMS=300"
    s = MongoDBStore(url, database="x")
    try:
        with pytest.raises(DatabaseConnectionError) as info:
            s.save("ns", entry())
        assert "s3cr3t-pw" not in str(info.value)
        assert "s3cr3t-pw" not in repr(s)
    finally:
        s.close()


def test_url_or_client_is_required() -> None:
    with pytest.raises(EntryValidationError):
        MongoDBStore()


# --------------------------------------------------------------------------- sync / async


def test_many_sync_calls_in_a_row(store: MongoDBStore) -> None:
    # Upstream ran asyncio.run per call and broke the pool on the second call.
    for i in range(10):
        store.save("ns", entry(key=f"k{i}", content=i))
        assert len(store.load("ns")) == i + 1
    assert [e.content for e in store.load("ns")] == list(range(10))


def test_store_works_across_event_loops(store: MongoDBStore) -> None:
    asyncio.run(store.async_initialize())  # a throw-away loop
    store.save("ns", entry(content="sync"))
    asyncio.run(store.async_save("ns", entry(content="loop 2")))
    contents = asyncio.run(store.async_load("ns"))
    assert [e.content for e in contents] == ["sync", "loop 2"]
    assert [e.content for e in store.load("ns")] == ["sync", "loop 2"]


async def test_sync_calls_from_a_thread_while_a_loop_runs(store: MongoDBStore) -> None:
    await store.async_save("ns", entry(content="from the loop"))
    errors: list[BaseException] = []
    seen: list[int] = []

    def worker(n: int) -> None:
        try:
            for i in range(5):
                store.save("ns", entry(content=f"t{n}-{i}"))
            seen.append(len(store.load("ns")))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    # The loop keeps serving async calls while the threads run.
    loaded = await store.async_load("ns")
    assert loaded[0].content == "from the loop"
    await asyncio.gather(*(asyncio.to_thread(t.join) for t in threads))
    assert errors == []
    assert all(n >= 6 for n in seen)
    assert len(await store.async_load("ns")) == 16


async def test_async_twins(store_no_ttl: MongoDBStore) -> None:
    store = store_no_ttl
    e = entry(key="k", content="v1")
    await store.async_save("ns", e)
    await store.async_save("ns", e.copy_entry(content="v2"))
    await store.async_save("ns", entry(content="expired", expires_at=utcnow()))
    loaded = await store.async_load("ns")
    assert [(x.content, x.version) for x in loaded] == [("v2", 2)]
    found = await store.async_load_by_key("ns", "k")
    assert found is not None and found.content == "v2"
    assert await store.async_cleanup_expired() == 1
    await store.async_delete("ns", e.entry_id)
    await store.async_delete("ns", e.entry_id)
    assert await store.async_load("ns") == []
    await store.async_save("ns", entry())
    await store.async_clear("ns")
    assert await store.async_load("ns") == []
    with pytest.raises(EntryValidationError):
        await store.async_save("ns", entry(importance=-0.1))
    await store.async_close()
    await store.async_close()


def test_close_is_idempotent_and_store_reopens(store: MongoDBStore) -> None:
    store.save("ns", entry(content=1))
    store.close()
    store.close()
    assert [e.content for e in store.load("ns")] == [1]


def test_two_stores_with_different_collections(
    mongo_test_url: str, raw_client: MongoClient[dict[str, Any]], db_name: str
) -> None:
    first = MongoDBStore(mongo_test_url, database=db_name, collection="first")
    second = MongoDBStore(mongo_test_url, database=db_name, collection="second")
    try:
        first.save("ns", entry(content="one"))
        asyncio.run(second.async_save("ns", entry(content="two")))
        first.save("ns", entry(content="one again"))
        assert [e.content for e in first.load("ns")] == ["one", "one again"]
        assert [e.content for e in second.load("ns")] == ["two"]
        assert first.document_model is not second.document_model
        for coll in ("first", "second"):
            assert "ux_entry_id" in _indexes(raw_client, db_name, coll)
        assert "entries" not in raw_client[db_name].list_collection_names()
    finally:
        first.close()
        second.close()


def test_stores_share_the_loop_thread_and_close_only_their_client(
    mongo_test_url: str, db_name: str
) -> None:
    from firefly_orm.bridges._loop_thread import shared_loop

    first = MongoDBStore(mongo_test_url, database=db_name, collection="first")
    second = MongoDBStore(mongo_test_url, database=db_name, collection="second")
    try:
        first.save("ns", entry(content="one"))
        second.save("ns", entry(content="two"))
        loop = shared_loop()
        first.close()
        assert shared_loop() is loop and loop.running  # closing a store keeps the loop
        assert [e.content for e in second.load("ns")] == ["two"]

        async def sync_call_inside_a_running_loop() -> list[Any]:
            return [e.content for e in first.load("ns")]  # reconnects after close()

        assert asyncio.run(sync_call_inside_a_running_loop()) == ["one"]
        names = [t.name for t in threading.enumerate()]
        assert names.count("firefly-orm-loop") == 1  # one loop thread for every store
    finally:
        first.close()
        second.close()


# --------------------------------------------------------------------------- unit of work


@pytest.fixture(params=["auto", "no-transactions"])
def uow_store(
    request: pytest.FixtureRequest, mongo_test_url: str, db_name: str
) -> Iterator[MongoDBStore]:
    transactions = None if request.param == "auto" else False
    s = MongoDBStore(mongo_test_url, database=db_name, transactions=transactions)
    yield s
    s.close()


def _head(version: int = 1, content: Any = None) -> MemoryEntry:
    return entry(
        entry_id=derived_entry_id("conv", "head"), key="head", content=content, version=version
    )


def test_uow_commit_applies_everything(uow_store: MongoDBStore) -> None:
    uow_store.save("conv", _head(content={"turns": 0}))
    old = entry(key="turn:0", content="old turn")
    uow_store.save("conv", old)
    uow_store.save("other", entry(content="x"))
    uow: UnitOfWork
    with uow_store.unit_of_work() as uow:
        head = uow.entries.get_by_key("conv", "head", for_update=True)
        assert head is not None and head.version == 1
        uow.entries.save("conv", entry(key="turn:1", content="new turn"))
        uow.entries.delete("conv", old.entry_id)
        uow.entries.save("conv", head.copy_entry(content={"turns": 1}), expected_version=1)
        uow.entries.clear("other")
        # Staged changes are visible inside the unit of work, not outside.
        assert [e.key for e in uow.entries.list("conv", key_prefix="turn:")] == ["turn:1"]
        assert [e.content for e in uow_store.load("other")] == ["x"]
        uow.commit()
    by_key = {e.key: e for e in uow_store.load("conv")}
    assert set(by_key) == {"head", "turn:1"}
    assert by_key["head"].content == {"turns": 1} and by_key["head"].version == 2
    assert uow_store.load("other") == []


def test_uow_without_commit_writes_nothing(uow_store: MongoDBStore) -> None:
    uow_store.save("conv", entry(content="kept"))
    with uow_store.unit_of_work() as uow:
        uow.entries.save("conv", entry(content="staged"))
        uow.entries.clear("conv")
    assert [e.content for e in uow_store.load("conv")] == ["kept"]
    with pytest.raises(RuntimeError), uow_store.unit_of_work() as uow:
        uow.entries.save("conv", entry(content="staged"))
        raise RuntimeError("boom")
    assert [e.content for e in uow_store.load("conv")] == ["kept"]


def test_uow_precondition_failure_writes_nothing(uow_store: MongoDBStore) -> None:
    uow_store.save("conv", _head(content="v1"))
    with uow_store.unit_of_work() as uow:
        head = uow.entries.get_by_key("conv", "head")
        assert head is not None
        # A concurrent writer bumps the head after we read it.
        uow_store.save("conv", head.copy_entry(content="concurrent"))
        uow.entries.save("conv", entry(key="turn:1", content="turn"))
        uow.entries.save("conv", head.copy_entry(content="mine"), expected_version=head.version)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    [stored] = uow_store.load("conv")
    assert stored.content == "concurrent" and stored.version == 2


def test_uow_expected_version_zero_means_insert_only(uow_store: MongoDBStore) -> None:
    with uow_store.unit_of_work() as uow:
        uow.entries.save("conv", _head(content="first"), expected_version=0)
        uow.commit()
    with uow_store.unit_of_work() as uow:
        uow.entries.save("conv", entry(key="turn", content="t"))
        uow.entries.save("conv", _head(content="second"), expected_version=0)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert [(e.content, e.version) for e in uow_store.load("conv")] == [("first", 1)]


def test_uow_two_units_based_on_one_version_only_one_commits(uow_store: MongoDBStore) -> None:
    uow_store.save("conv", _head(content=0))
    first, second = uow_store.unit_of_work(), uow_store.unit_of_work()
    with first, second:
        for n, uow in enumerate((first, second), start=1):
            head = uow.entries.get_by_key("conv", "head")
            assert head is not None
            uow.entries.save("conv", head.copy_entry(content=n), expected_version=head.version)
        first.commit()
        with pytest.raises(ConcurrencyError):
            second.commit()
    head = uow_store.load_by_key("conv", "head")
    assert head is not None and (head.content, head.version) == (1, 2)


def test_uow_conditional_write_catches_a_change_after_the_check(
    uow_store: MongoDBStore,
    raw_client: MongoClient[dict[str, Any]],
    db_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A writer that slips in between the precondition read and the write is caught."""
    import firefly_orm.mongo._commit as mongo_module

    uow_store.save("conv", _head(content="v1"))
    original = mongo_module._conditional_write
    bumped: list[bool] = []

    async def racing_write(*args: Any, **kwargs: Any) -> None:
        if not bumped:
            bumped.append(True)
            raw_client[db_name]["entries"].update_one(
                {"key": "head"}, {"$inc": {"version": 1}, "$set": {"content": "racer"}}
            )
        await original(*args, **kwargs)

    monkeypatch.setattr(mongo_module, "_conditional_write", racing_write)
    with uow_store.unit_of_work() as uow:
        head = uow.entries.get_by_key("conv", "head")
        assert head is not None
        uow.entries.save("conv", head.copy_entry(content="mine"), expected_version=1)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert bumped == [True]
    stored = uow_store.load_by_key("conv", "head")
    assert stored is not None and (stored.content, stored.version) == ("racer", 2)


def test_uow_clear_then_save_and_move(uow_store: MongoDBStore) -> None:
    moved = entry(content="moving")
    uow_store.save("a", moved)
    uow_store.save("a", entry(content="cleared"))
    with uow_store.unit_of_work() as uow:
        uow.entries.clear("a")
        uow.entries.save("a", entry(content="after clear"))
        uow.entries.save("b", moved)
        uow.commit()
    assert [e.content for e in uow_store.load("a")] == ["after clear"]
    assert [e.content for e in uow_store.load("b")] == ["moving"]


def test_uow_list_limit_and_order(uow_store: MongoDBStore) -> None:
    base = utcnow()
    for i in range(5):
        uow_store.save("ns", entry(key=f"t{i}", content=i, created_at=base + timedelta(seconds=i)))
    with uow_store.unit_of_work() as uow:
        newest = uow.entries.list("ns", limit=2, newest_first=True)
        assert [e.content for e in newest] == [4, 3]
        got = uow.entries.get("ns", newest[0].entry_id)
        assert got is not None and got.content == 4


def test_transactions_detected_from_the_server(
    mongo_test_url: str, db_name: str, raw_client: MongoClient[dict[str, Any]]
) -> None:
    hello = raw_client.admin.command("hello")
    expected = "setName" in hello or hello.get("msg") == "isdbgrid"
    with MongoDBStore(mongo_test_url, database=db_name) as s:
        assert s.uses_transactions is expected
    with MongoDBStore(mongo_test_url, database=db_name, transactions=False) as s:
        assert s.uses_transactions is False


async def test_async_unit_of_work(uow_store: MongoDBStore) -> None:
    await uow_store.async_save("conv", _head(content="v1"))

    def step(uow: UnitOfWork, text: str) -> int:
        head = uow.entries.get_by_key("conv", "head", for_update=True)
        assert head is not None
        uow.entries.save("conv", entry(key="turn", content=text))
        uow.entries.save("conv", head.copy_entry(content=text), expected_version=head.version)
        return head.version

    async with uow_store.async_unit_of_work() as uow:
        assert await uow.run_sync(step, "v2") == 1
        await uow.commit()
    head = await uow_store.async_load_by_key("conv", "head")
    assert head is not None and (head.content, head.version) == ("v2", 2)

    async with uow_store.async_unit_of_work() as uow:
        await uow.run_sync(step, "never")
        await uow.rollback()
    assert len(await uow_store.async_load("conv")) == 2


# --------------------------------------------------------------------------- staged reads


def test_staged_reads_are_live_copies_of_only_what_is_asked(store: MongoDBStore) -> None:
    base = utcnow()
    turns = [
        entry(key=f"turn:{i:03d}", content=i, created_at=base - timedelta(minutes=5 - i))
        for i in range(5)
    ]
    for e in turns:
        store.save("conv", e)
    store.save("conv", entry(key="head", content="h"))
    store.save("conv", entry(key="turn:999", content="gone", expires_at=base))
    store.save("conv", entry(key="turn;", content="past the range"))  # ';' follows ':'
    store.save("other", entry(key="turn:000", content="other namespace"))

    got = store.read_entry("conv", turns[2].entry_id)
    assert got is not None and got.content == 2 and got.version == 1
    assert store.read_entry("other", turns[2].entry_id) is None
    assert [e.content for e in store.read_by_key("conv", "head")] == ["h"]
    assert store.read_by_key("conv", "turn:999") == []  # expired

    def contents(**kw: Any) -> list[Any]:
        return [e.content for e in store.read_list("conv", **kw)]

    assert contents(key_prefix="turn:") == [0, 1, 2, 3, 4]
    assert contents(key_prefix="turn:", limit=2) == [0, 1]
    assert contents(key_prefix="turn:", limit=2, newest_first=True) == [4, 3]
    assert contents(key_prefix="turn:", limit=0) == []
    # '' = every entry that has a key, in key order
    assert contents(key_prefix="") == ["h", 0, 1, 2, 3, 4, "past the range"]
    assert contents(limit=3) == [0, 1, 2]  # no prefix: (created_at, entry_id) order
    assert len(contents()) == 7
    copy = store.read_list("conv", key_prefix="turn:", limit=1)[0]
    copy.content = "changed"
    assert contents(key_prefix="turn:", limit=1) == [0]


def test_entries_expiring_within_the_reading_millisecond(
    store: MongoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BSON dates hold milliseconds; the microseconds still decide what is live."""
    import firefly_orm.mongo._queries as queries_module

    now = datetime(2030, 1, 1, 0, 0, 0, 500, tzinfo=UTC)
    monkeypatch.setattr(queries_module, "utcnow", lambda: now)
    store.save(
        "ns",
        entry(key="k:1", content="expired 100us ago", expires_at=now - timedelta(microseconds=100)),
    )
    store.save("ns", entry(key="k:2", content="forever"))
    store.save(
        "ns", entry(key="k:3", content="100us left", expires_at=now + timedelta(microseconds=100))
    )
    store.save(
        "ns", entry(key="k:4", content="expired", expires_at=now - timedelta(milliseconds=2))
    )
    # The first window of two holds the entry expired within this millisecond:
    # the read widens its window instead of coming back one short.
    window = store.read_list("ns", key_prefix="k:", limit=2)
    assert [e.content for e in window] == ["forever", "100us left"]
    assert store.read_by_key("ns", "k:1") == []
    assert store.load_by_key("ns", "k:1") is None
    assert sorted(e.content for e in store.load("ns")) == ["100us left", "forever"]


@pytest.mark.parametrize(
    ("prefix", "inside", "outside"),
    [
        ("k\ud7ff", "k\ud7ff\U0010ffff", "k\ue000"),  # the next character skips surrogates
        ("k\U0010ffff", "k\U0010ffffz", "l"),  # a maximal last character is dropped
        ("é", "é✓", "ê"),
    ],
)
def test_key_prefix_range_bounds(
    store: MongoDBStore, prefix: str, inside: str, outside: str
) -> None:
    store.save("ns", entry(key=prefix, content="prefix"))
    store.save("ns", entry(key=inside, content="inside"))
    store.save("ns", entry(key=outside, content="outside"))
    found = [e.content for e in store.read_list("ns", key_prefix=prefix)]
    assert found == ["prefix", "inside"]


@pytest.fixture
def counted_store(
    mongo_test_url: str, db_name: str
) -> Iterator[tuple[MongoDBStore, DocumentsRead]]:
    from firefly_orm.bridges._loop_thread import shared_loop

    counter = DocumentsRead()

    async def new_client() -> AsyncMongoClient[dict[str, Any]]:
        return AsyncMongoClient(mongo_test_url, tz_aware=True, event_listeners=[counter])

    client = shared_loop().call(new_client())  # born on the loop the store uses
    store = MongoDBStore(client=client, database=db_name)
    yield store, counter
    store.close()
    shared_loop().call(client.close())


@pytest.mark.parametrize("transactions", [None, False], ids=["auto", "no-transactions"])
@pytest.mark.parametrize("evict", [False, True], ids=["no-eviction", "eviction"])
def test_add_turn_reads_as_many_documents_at_300_turns_as_at_10(
    counted_store: tuple[MongoDBStore, DocumentsRead], evict: bool, transactions: bool | None
) -> None:
    """One add_turn reads O(1) documents whatever the conversation's length.

    (300 turns, thirty times 10, tells a constant from a growing count; 1,000 cost the
    suite a minute of the test server's time for the same answer.)

    Without transactions the check for unfinished commits (one indexed lookup
    per namespace per unit of work) reads no document when there is none.
    """
    from firefly_orm.conversation import ConversationMemory

    counted, counter = counted_store
    store = MongoDBStore(
        client=counted._client, database=counted.database_name, transactions=transactions
    )
    unlimited = 10**12

    def documents_read_by_one_add_turn(stored_turns: int) -> int:
        loader = ConversationMemory(
            store=store, max_tokens=unlimited, summarize_threshold=unlimited
        )
        data = {
            "turns": [
                {"user_prompt": f"question {i} " * 20, "assistant_response": "answer " * 40}
                for i in range(stored_turns)
            ]
        }
        cid = loader.import_conversation(data)  # one transaction, no eviction
        # With eviction the budget holds exactly the stored turns, so the new
        # turn evicts the oldest one; without, nothing is ever evicted.
        budget = loader.get_total_tokens(cid) if evict else unlimited
        memory = ConversationMemory(
            store=store, max_tokens=budget, summarize_threshold=0 if evict else unlimited
        )
        counter.count = 0
        memory.add_turn(cid, "question " * 20, "answer " * 40)
        read = counter.count
        turns = memory.get_turns(cid)
        assert len(turns) == (stored_turns if evict else stored_turns + 1)
        assert turns[0].turn_id == (1 if evict else 0)
        return read

    at_10 = documents_read_by_one_add_turn(10)
    at_300 = documents_read_by_one_add_turn(300)
    print(f"\ndocuments read by one add_turn ({store.uses_transactions=}): {at_10} at 10 turns")
    assert at_10 > 0  # the counter sees the reads at all
    assert at_300 == at_10


# --------------------------------------------------------------------------- without transactions


class TestStoreContractWithoutTransactions(StoreContract):
    """The whole store contract on the journaled (standalone server) path."""

    @pytest.fixture
    def mode(self) -> str:
        return "sync"

    @pytest.fixture
    def store(self, mongo_test_url: str, db_name: str) -> Iterator[MongoDBStore]:
        s = MongoDBStore(mongo_test_url, database=db_name, transactions=False)
        yield s
        s.close()


def test_journaled_writes_leave_no_journal_and_plain_documents(
    mongo_test_url: str, db_name: str, raw_client: MongoClient[dict[str, Any]]
) -> None:
    """Single writes take a lock only; multi-write commits mark their documents."""
    with MongoDBStore(mongo_test_url, database=db_name, transactions=False) as s:
        s.save("ns", entry(key="plain", content=1))
        s.delete("ns", "missing")
        with s.unit_of_work() as uow:
            uow.entries.save("ns", entry(key="a", content=2))
            uow.entries.save("ns", entry(key="b", content=3))
            uow.commit()
        s.clear("other")
    docs = {d["key"]: d for d in raw_docs(raw_client, db_name)}
    assert set(docs) == {"plain", "a", "b"}  # no lock or journal document left
    assert "_firefly_commit" not in docs["plain"]
    assert docs["a"]["_firefly_commit"] == docs["b"]["_firefly_commit"]
    assert [d["version"] for d in docs.values()] == [1, 1, 1]


def test_concurrent_writers_without_transactions_keep_the_head_consistent(
    mongo_test_url: str, db_name: str
) -> None:
    """Threads adding turns to one conversation (eviction, archive): every head adds up."""
    from firefly_orm.conversation import ConversationMemory

    s = MongoDBStore(mongo_test_url, database=db_name, transactions=False)
    memory = ConversationMemory(store=s, max_tokens=60, summarize_threshold=0, keep_evicted=True)
    added: list[int] = []
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(12):
                added.append(memory.add_turn("c", f"q{n}-{i} " * 3, f"a{n}-{i} " * 3).turn_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        live = memory.get_turns("c")
        archived = memory.get_archived_turns("c")
        assert memory.get_total_tokens("c") == sum(t.token_estimate for t in live)
        ids = [t.turn_id for t in archived] + [t.turn_id for t in live]
        assert sorted(ids) == sorted(added) == list(range(48))
    finally:
        s.close()
