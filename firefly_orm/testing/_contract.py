"""The store half of the contract suite: :class:`StoreContract`.

See :mod:`firefly_orm.testing` for how to run it against a store, and
:mod:`firefly_orm.testing._uow_contract` for the unit-of-work tests it inherits.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    MAX_JSON_DEPTH,
    MemoryEntry,
    MemoryScope,
    new_entry_id,
    utcnow,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.testing._drivers import StoreDriver
from firefly_orm.testing._samples import (
    BAD_ENTRIES,
    ids_of,
    in_future,
    in_past,
    make_entry,
    nested_list,
    ordered_ids,
    to_ms,
)
from firefly_orm.testing._uow_contract import UnitOfWorkContract

__all__ = ["StoreContract"]


class StoreContract(UnitOfWorkContract):
    """Base class of the contract suite; subclass it and provide ``store`` and ``mode``.

    See the module docstring for the fixtures and what each test checks.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]

    @pytest_asyncio.fixture
    async def contract(self, store: Any, mode: str) -> AsyncIterator[StoreDriver]:
        """The store under test behind a :class:`StoreDriver` for ``mode``."""
        driver = StoreDriver(store, mode)
        yield driver
        await driver.cleanup()

    # ------------------------------------------------------------------ basics

    async def test_unknown_namespace_is_empty(self, contract: StoreDriver) -> None:
        ns = contract.ns("unknown")
        assert await contract.load(ns) == []
        assert await contract.load_by_key(ns, "missing") is None

    async def test_save_then_load_round_trips_every_field(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        created = to_ms(utcnow() - timedelta(minutes=5))
        expires = in_future(days=1)
        entry = MemoryEntry(
            scope=MemoryScope.LONG_TERM,
            key="fact",
            content={"text": "hello", "n": [1, 2.5, None, True]},
            metadata={"source": "test", "nested": {"a": [1]}},
            created_at=created,
            expires_at=expires,
            importance=0.75,
        )
        await contract.save(ns, entry)
        [loaded] = await contract.load(ns)
        assert isinstance(loaded, MemoryEntry)
        assert loaded.entry_id == entry.entry_id
        assert loaded.namespace == ns
        assert loaded.scope == MemoryScope.LONG_TERM
        assert loaded.key == "fact"
        assert loaded.content == {"text": "hello", "n": [1, 2.5, None, True]}
        assert loaded.metadata_ == {"source": "test", "nested": {"a": [1]}}
        assert loaded.created_at == created
        assert loaded.expires_at == expires
        assert loaded.importance == 0.75
        assert loaded.version == 1
        by_key = await contract.load_by_key(ns, "fact")
        assert by_key is not None
        assert by_key.to_dict() == loaded.to_dict()

    @pytest.mark.parametrize("scope", list(MemoryScope))
    async def test_every_scope_round_trips(self, contract: StoreDriver, scope: MemoryScope) -> None:
        ns = contract.ns()
        await contract.save(ns, make_entry(scope=scope))
        [loaded] = await contract.load(ns)
        assert loaded.scope == scope
        assert isinstance(loaded.scope, MemoryScope)

    async def test_json_values_round_trip(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        values: list[Any] = [
            None,
            True,
            False,
            0,
            -17,
            2**53,
            0.1,
            "",
            "plain",
            [],
            {},
            [1, "two", [3.0, {"four": None}]],
            {"": "empty key", "nested": {"deep": [{"x": 1}]}},
            # A dict that looks like an escape wrapper a backend might use.
            {"__firefly_orm_json__": "[1, 2]"},
            {"$set": 1, "a.b": 2},
        ]
        entries = [make_entry(content=value) for value in values]
        for entry in entries:
            await contract.save(ns, entry)
        loaded = await contract.load(ns)
        assert [e.content for e in loaded] == values
        for got, want in zip(loaded, values, strict=True):
            assert json.dumps(got.content, sort_keys=True) == json.dumps(want, sort_keys=True)

    async def test_floats_stay_floats(self, contract: StoreDriver) -> None:
        """Floats in exponent form must not come back as (different) ints.

        PostgreSQL's JSONB stores numbers as ``numeric`` and prints ``1e20`` as
        ``100000000000000000000``, which a JSON parser reads as an int.
        """
        ns = contract.ns()
        values = [0.1, 2.0, -1.5e300, 1e20, 1e16, 1e-7, 5e-324, 123456789.125]
        await contract.save(ns, make_entry(content=values, metadata={"f": 1e20}))
        [loaded] = await contract.load(ns)
        assert loaded.content == values
        assert [type(v) for v in loaded.content] == [float] * len(values)
        assert type(loaded.metadata_["f"]) is float

    async def test_top_level_numbers_keep_their_type(self, contract: StoreDriver) -> None:
        """A content that is just a number comes back as that number, same type.

        A SQLite column declared ``JSON`` has NUMERIC affinity and turned a
        stored ``1.0`` into ``1`` and ``2**70`` into a float.
        """
        ns = contract.ns()
        values: list[Any] = [1.0, 2**70, -0.5, 7, "1.0", True, None]
        for i, value in enumerate(values):
            await contract.save(ns, make_entry(key=f"k{i}", content=value))
        for i, value in enumerate(values):
            loaded = await contract.load_by_key(ns, f"k{i}")
            assert loaded is not None
            assert loaded.content == value and type(loaded.content) is type(value)

    # ------------------------------------------------------------------ upsert and versions

    async def test_save_is_upsert_on_entry_id(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = make_entry(key="k", content="first")
        await contract.save(ns, entry)
        await contract.save(ns, entry.copy_entry(content="second", importance=0.9))
        loaded = await contract.load(ns)
        assert len(loaded) == 1
        assert loaded[0].entry_id == entry.entry_id
        assert loaded[0].content == "second"
        assert loaded[0].importance == 0.9
        by_key = await contract.load_by_key(ns, "k")
        assert by_key is not None and by_key.content == "second"

    async def test_stored_version_bumps_on_every_save(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = make_entry(version=0)
        await contract.save(ns, entry)
        assert [e.version for e in await contract.load(ns)] == [1]
        await contract.save(ns, entry)
        assert [e.version for e in await contract.load(ns)] == [2]
        # The stored version counts writes; the caller's (stale) version does not matter.
        await contract.save(ns, entry.copy_entry(version=1, content="again"))
        [loaded] = await contract.load(ns)
        assert (loaded.version, loaded.content) == (3, "again")

    async def test_insert_keeps_a_higher_version(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        await contract.save(ns, make_entry(version=5))
        assert [e.version for e in await contract.load(ns)] == [5]

    async def test_saving_an_id_in_another_namespace(self, contract: StoreDriver) -> None:
        """Either a move (ids global: SQL, Mongo, in-memory) or two independent entries.

        ``FileStore`` scopes ids to a namespace; both behaviours keep namespaces
        consistent, which is what this checks.
        """
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        entry = make_entry(content="first")
        await contract.save(ns_a, entry)
        await contract.save(ns_b, entry.copy_entry(content="second"))
        [in_b] = await contract.load(ns_b)
        assert (in_b.entry_id, in_b.namespace, in_b.content) == (entry.entry_id, ns_b, "second")
        left_in_a = await contract.load(ns_a)
        if left_in_a:  # per-namespace ids: the entry in ns_a is untouched and independent
            [in_a] = left_in_a
            assert (in_a.entry_id, in_a.namespace, in_a.content, in_a.version) == (
                entry.entry_id,
                ns_a,
                "first",
                1,
            )
            await contract.delete(ns_b, entry.entry_id)
            assert ids_of(await contract.load(ns_a)) == [entry.entry_id]
        else:  # global ids: a move
            await contract.delete(ns_a, entry.entry_id)
            assert ids_of(await contract.load(ns_b)) == [entry.entry_id]

    # ------------------------------------------------------------------ ordering

    async def test_load_orders_by_created_at_then_entry_id(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        base = to_ms(utcnow())
        second = timedelta(seconds=1)
        times = [base, base + second, base + second, base + 2 * second]
        early, mid_low, mid_high, late = (
            make_entry(entry_id=i, created_at=t) for i, t in zip(ordered_ids(4), times, strict=True)
        )
        # Saved out of order; equal created_at falls back to entry_id.
        for entry in (late, mid_high, early, mid_low):
            await contract.save(ns, entry)
        expected = ids_of([early, mid_low, mid_high, late])
        assert ids_of(await contract.load(ns)) == expected
        # Re-saving an entry does not move it.
        await contract.save(ns, early.copy_entry(content="updated"))
        await contract.save(ns, mid_low.copy_entry(content="updated"))
        assert ids_of(await contract.load(ns)) == expected

    async def test_default_created_at_keeps_creation_order(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entries = [make_entry(content=i) for i in range(20)]
        for entry in reversed(entries):
            await contract.save(ns, entry)
        assert [e.content for e in await contract.load(ns)] == list(range(20))

    # ------------------------------------------------------------------ load_by_key

    async def test_load_by_key_returns_newest_non_expired_match(
        self, contract: StoreDriver
    ) -> None:
        ns = contract.ns()
        base = to_ms(utcnow() - timedelta(hours=1))
        old = make_entry(key="k", content="old", created_at=base)
        mid = make_entry(key="k", content="mid", created_at=base + timedelta(minutes=1))
        new = make_entry(key="k", content="new", created_at=base + timedelta(minutes=2))
        other = make_entry(key="other", content="x", created_at=base + timedelta(minutes=3))
        for entry in (mid, new, old, other):
            await contract.save(ns, entry)
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == new.entry_id
        # A newer but expired match is ignored.
        expired = make_entry(
            key="k", content="expired", created_at=base + timedelta(minutes=4), expires_at=in_past()
        )
        await contract.save(ns, expired)
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == new.entry_id
        # A newer match that expires in the future wins.
        future = make_entry(
            key="k",
            content="future",
            created_at=base + timedelta(minutes=5),
            expires_at=in_future(),
        )
        await contract.save(ns, future)
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == future.entry_id
        assert await contract.load_by_key(ns, "missing") is None
        assert await contract.load_by_key(contract.ns("elsewhere"), "k") is None

    async def test_load_by_key_tie_goes_to_larger_entry_id(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        created = to_ms(utcnow())
        low, high = ordered_ids(2)
        await contract.save(ns, make_entry(entry_id=high, key="k", created_at=created))
        await contract.save(ns, make_entry(entry_id=low, key="k", created_at=created))
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == high

    async def test_load_by_key_after_update_and_delete(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = make_entry(key="k", content=1)
        await contract.save(ns, entry)
        await contract.save(ns, entry.copy_entry(key="renamed"))
        assert await contract.load_by_key(ns, "k") is None
        renamed = await contract.load_by_key(ns, "renamed")
        assert renamed is not None and renamed.entry_id == entry.entry_id
        await contract.delete(ns, entry.entry_id)
        assert await contract.load_by_key(ns, "renamed") is None

    # ------------------------------------------------------------------ expiry

    async def test_expired_entries_are_never_returned(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        expired = make_entry(key="gone", content="expired", expires_at=in_past())
        long_expired = make_entry(key="gone2", expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        alive = make_entry(key="alive", content="alive", expires_at=in_future())
        forever = make_entry(key="forever", content="forever")
        for entry in (expired, long_expired, alive, forever):
            await contract.save(ns, entry)
        assert ids_of(await contract.load(ns)) == ids_of([alive, forever])
        assert await contract.load_by_key(ns, "gone") is None
        assert await contract.load_by_key(ns, "gone2") is None
        found = await contract.load_by_key(ns, "alive")
        assert found is not None and found.expires_at == alive.expires_at

    async def test_an_entry_expires_when_updated_with_a_past_expiry(
        self, contract: StoreDriver
    ) -> None:
        ns = contract.ns()
        entry = make_entry(key="k", expires_at=in_future())
        await contract.save(ns, entry)
        assert len(await contract.load(ns)) == 1
        await contract.save(ns, entry.copy_entry(expires_at=in_past()))
        assert await contract.load(ns) == []
        assert await contract.load_by_key(ns, "k") is None
        # ... and comes back when the expiry is lifted again.
        await contract.save(ns, entry.copy_entry(expires_at=None))
        assert ids_of(await contract.load(ns)) == [entry.entry_id]

    async def test_cleanup_expired_deletes_expired_entries(self, contract: StoreDriver) -> None:
        if not contract.has_cleanup_expired():
            pytest.skip(f"{type(contract.store).__name__} has no cleanup_expired in this mode")
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        await contract.cleanup_expired()  # whatever expired before this test
        alive = make_entry(content="alive", expires_at=in_future())
        forever = make_entry(content="forever")
        for entry in (
            alive,
            make_entry(expires_at=in_past()),
            make_entry(expires_at=in_past(days=3)),
        ):
            await contract.save(ns_a, entry)
        await contract.save(ns_a, forever)
        await contract.save(ns_b, make_entry(expires_at=in_past()))
        removed = await contract.cleanup_expired()
        assert type(removed) is int
        if contract.server_expires_entries():
            # The server's TTL monitor may have deleted some of the three first.
            assert 0 <= removed <= 3
        else:
            assert removed == 3
        assert await contract.cleanup_expired() == 0
        assert ids_of(await contract.load(ns_a)) == ids_of([alive, forever])
        assert await contract.load(ns_b) == []

    # ------------------------------------------------------------------ delete / clear

    async def test_delete_removes_one_entry_and_is_idempotent(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        keep, drop = make_entry(content="keep"), make_entry(content="drop")
        await contract.save(ns, keep)
        await contract.save(ns, drop)
        await contract.delete(ns, drop.entry_id)
        assert ids_of(await contract.load(ns)) == [keep.entry_id]
        await contract.delete(ns, drop.entry_id)
        await contract.delete(ns, new_entry_id())
        await contract.delete(contract.ns("never-used"), keep.entry_id)
        assert ids_of(await contract.load(ns)) == [keep.entry_id]

    async def test_clear_is_idempotent_and_scoped(self, contract: StoreDriver) -> None:
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        await contract.save(ns_a, make_entry())
        await contract.save(ns_a, make_entry())
        kept = make_entry()
        await contract.save(ns_b, kept)
        await contract.clear(ns_a)
        assert await contract.load(ns_a) == []
        await contract.clear(ns_a)
        await contract.clear(contract.ns("never-used"))
        assert ids_of(await contract.load(ns_b)) == [kept.entry_id]
        # A cleared namespace can be written again.
        again = make_entry()
        await contract.save(ns_a, again)
        assert ids_of(await contract.load(ns_a)) == [again.entry_id]

    async def test_namespaces_are_isolated(self, contract: StoreDriver) -> None:
        labels = [
            "plain",
            "Plain",
            "working:s1",
            "a/b",
            "a_b",
            "a\\b",
            "../../escape",
            ".",
            "with space",
            "caf\u00e9",  # NFC
            "cafe\u0301",  # NFD: a different string
            "n" * 600,
        ]
        namespaces = [contract.ns(label) for label in labels]
        entries = {ns: make_entry(key="k", content=ns) for ns in namespaces}
        for ns, entry in entries.items():
            await contract.save(ns, entry)
        for ns, entry in entries.items():
            assert ids_of(await contract.load(ns)) == [entry.entry_id], ns
            found = await contract.load_by_key(ns, "k")
            assert found is not None and found.content == ns
        # delete with the wrong namespace must not touch the entry
        first, second = namespaces[0], namespaces[1]
        await contract.delete(second, entries[first].entry_id)
        assert ids_of(await contract.load(first)) == [entries[first].entry_id]
        await contract.clear(first)
        assert await contract.load(first) == []
        for ns in namespaces[1:]:
            assert ids_of(await contract.load(ns)) == [entries[ns].entry_id], ns

    # ------------------------------------------------------------------ content edge cases

    async def test_unicode_namespace_key_and_content(self, contract: StoreDriver) -> None:
        ns = contract.ns("\U0001f98a-\u8a18\u61b6-\u0630\u0627\u0643\u0631\u0629")
        key = "\u952e\U0001f511\u0645\u0641\u062a\u0627\u062d"
        content = {
            "emoji": "\U0001f30d\U0001f468\u200d\U0001f469\u200d\U0001f467",
            "cjk": "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
            "rtl": "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
            "\u30ad\u30fc": "non-ascii object key",
        }
        metadata = {"\u00e9t\u00e9": "\u2603", "astral": "\U0001d518"}
        entry = make_entry(key=key, content=content, metadata=metadata)
        await contract.save(ns, entry)
        found = await contract.load_by_key(ns, key)
        assert found is not None
        assert (found.namespace, found.key, found.content, found.metadata_) == (
            ns,
            key,
            content,
            metadata,
        )
        assert [e.content for e in await contract.load(ns)] == [content]

    async def test_one_megabyte_content(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        big = "0123456789abcdef\u00e9" * 62_000  # > 1 MB as UTF-8
        assert len(big.encode()) > 1_000_000
        entry = make_entry(key="big", content={"text": big, "list": [big[:1000]] * 10})
        await contract.save(ns, entry)
        found = await contract.load_by_key(ns, "big")
        assert found is not None and found.content == entry.content
        [loaded] = await contract.load(ns)
        assert loaded.content["text"] == big

    async def test_nul_characters_in_content_and_metadata(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        content = {"text": "a\x00b", "a\x00key": ["\x00", "\x00\x00"], "plain": "ok"}
        metadata = {"note": "x\x00y", "k\x00": "v"}
        entry = make_entry(key="nul", content=content, metadata=metadata)
        scalar = make_entry(key="scalar", content="a\x00b")
        await contract.save(ns, entry)
        await contract.save(ns, scalar)
        found = await contract.load_by_key(ns, "nul")
        assert found is not None
        assert found.content == content
        assert found.metadata_ == metadata
        found_scalar = await contract.load_by_key(ns, "scalar")
        assert found_scalar is not None and found_scalar.content == "a\x00b"
        assert [e.content for e in await contract.load(ns)] == [content, "a\x00b"]

    async def test_timezone_aware_datetimes_round_trip(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        india = timezone(timedelta(hours=5, minutes=30))
        pacific = timezone(timedelta(hours=-8))
        created = datetime(2024, 5, 6, 7, 8, 9, 123_000, tzinfo=india)
        expires = in_future(days=2).astimezone(pacific)
        entry = make_entry(key="tz", created_at=created, expires_at=expires)
        await contract.save(ns, entry)
        for found in [await contract.load_by_key(ns, "tz"), *(await contract.load(ns))]:
            assert found is not None
            assert found.created_at.tzinfo is not None
            assert found.created_at.utcoffset() is not None
            assert found.expires_at is not None and found.expires_at.tzinfo is not None
            assert found.created_at == created
            assert found.expires_at == expires

    # ------------------------------------------------------------------ copies

    async def test_entries_are_copied_in_and_out(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = make_entry(key="k", content={"items": [1]}, metadata={"m": {"n": 1}})
        await contract.save(ns, entry)
        # The caller's object is still usable and unchanged (apart from version).
        assert (entry.key, entry.content, entry.metadata_) == ("k", {"items": [1]}, {"m": {"n": 1}})
        entry.content["items"].append(2)
        entry.metadata_["m"]["n"] = 2
        entry.key = "changed"
        entry.importance = 0.1
        [loaded] = await contract.load(ns)
        assert (loaded.key, loaded.content, loaded.metadata_, loaded.importance) == (
            "k",
            {"items": [1]},
            {"m": {"n": 1}},
            0.5,
        )
        loaded.content["items"].append(3)
        loaded.metadata_["m"]["n"] = 3
        loaded.key = "mutated"
        by_key = await contract.load_by_key(ns, "k")
        assert by_key is not None
        assert (by_key.content, by_key.metadata_) == ({"items": [1]}, {"m": {"n": 1}})
        by_key.content["items"].clear()
        [again] = await contract.load(ns)
        assert (again.key, again.content, again.metadata_) == ("k", {"items": [1]}, {"m": {"n": 1}})

    # ------------------------------------------------------------------ validation

    @pytest.mark.parametrize(
        ("field", "breaker"),
        [pytest.param(field, breaker, id=name) for name, field, breaker in BAD_ENTRIES],
    )
    async def test_invalid_entry_is_rejected_and_nothing_written(
        self, contract: StoreDriver, field: str, breaker: Callable[[MemoryEntry], None]
    ) -> None:
        ns = contract.ns()
        good = make_entry(key="k", content="original")
        await contract.save(ns, good)
        # An update of the existing entry ...
        update = good.copy_entry(content="changed")
        breaker(update)
        with pytest.raises(EntryValidationError) as info:
            await contract.save(ns, update)
        assert info.value.field == field
        assert field in str(info.value)
        # ... and a brand-new entry.
        fresh = make_entry(key="k2", content="fresh")
        breaker(fresh)
        with pytest.raises(EntryValidationError) as info:
            await contract.save(ns, fresh)
        assert info.value.field == field
        [stored] = await contract.load(ns)
        assert (stored.entry_id, stored.content, stored.version) == (
            good.entry_id,
            "original",
            1,
        )
        assert await contract.load_by_key(ns, "k2") is None

    async def test_values_at_the_limits_round_trip(self, contract: StoreDriver) -> None:
        """The deepest accepted nesting, non-colliding non-string keys and the
        largest accepted version are stored and loaded back (as JSON has them)."""
        ns = contract.ns()
        deepest = nested_list(MAX_JSON_DEPTH)
        deep_dicts: Any = "leaf"
        for _ in range(MAX_JSON_DEPTH):
            deep_dicts = {"d": deep_dicts}
        entry = make_entry(
            key="deep",
            content={"list": nested_list(MAX_JSON_DEPTH - 1), "keys": {1: "a", "2": "b"}},
            metadata=deep_dicts,
            version=MAX_ENTRY_VERSION,
        )
        other = make_entry(key="other", content=deepest)
        await contract.save(ns, entry)
        await contract.save(ns, other)
        loaded = {e.key: e for e in await contract.load(ns)}
        assert loaded["deep"].content == {
            "list": nested_list(MAX_JSON_DEPTH - 1),
            "keys": {"1": "a", "2": "b"},
        }
        assert loaded["deep"].metadata_ == deep_dicts
        assert loaded["deep"].version == MAX_ENTRY_VERSION
        assert loaded["other"].content == deepest

    @pytest.mark.parametrize("namespace", ["", "a\x00b", "\x00"], ids=["empty", "nul", "only-nul"])
    async def test_invalid_namespace_is_rejected(
        self, contract: StoreDriver, namespace: str
    ) -> None:
        entry = make_entry(key="k")
        calls: list[Callable[[], Any]] = [
            lambda: contract.save(namespace, entry),
            lambda: contract.load(namespace),
            lambda: contract.load_by_key(namespace, "k"),
            lambda: contract.delete(namespace, entry.entry_id),
            lambda: contract.clear(namespace),
        ]
        for call in calls:
            with pytest.raises(EntryValidationError) as info:
                await call()
            assert info.value.field == "namespace"
        # The entry was not written anywhere (ids are global: it can be saved fresh).
        ns = contract.ns()
        await contract.save(ns, entry)
        assert [e.version for e in await contract.load(ns)] == [1]

    async def test_nul_in_lookup_key_is_rejected(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        with pytest.raises(EntryValidationError) as info:
            await contract.load_by_key(ns, "a\x00b")
        assert info.value.field == "key"
