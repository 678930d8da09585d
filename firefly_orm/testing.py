"""The store contract suite: one set of tests every :class:`~firefly_orm.MemoryStore` must pass.

firefly_orm runs this suite against each of its own backends (in-memory, file,
SQLite, PostgreSQL, MongoDB), in sync mode (``save``/``load``/...) and in async
mode (``async_save``/``async_load``/...).  Authors of a custom backend can run the
very same suite against theirs.

Requirements: ``pytest`` and ``pytest-asyncio`` (the test methods are coroutines
and carry the ``asyncio`` mark, so pytest-asyncio's strict mode works too; there,
declare an async ``store`` fixture with ``@pytest_asyncio.fixture``).

Usage, in your own test module::

    import pytest
    from firefly_orm.testing import StoreContract

    from mypackage import RedisMemoryStore


    class TestRedisStoreContract(StoreContract):
        @pytest.fixture(params=["sync", "async"])
        def mode(self, request: pytest.FixtureRequest) -> str:
            # Use params=["sync"] if your store has no async_* twins.
            return request.param

        @pytest.fixture
        async def store(self, mode: str):
            store = RedisMemoryStore("redis://localhost/15")
            yield store
            if mode == "async":
                await store.async_close()
            else:
                store.close()

and, in your ``conftest.py``, so that failures show the compared values::

    import pytest

    pytest.register_assert_rewrite("firefly_orm.testing")

Two fixtures are yours to provide (in the subclass or a ``conftest.py``):

* ``store``: a fresh, empty-or-shared store object.  The suite only touches
  namespaces it creates itself (``ffc-<label>-<random token>``) and clears them
  at the end of every test, so pointing it at a shared database is safe.  The
  one exception is ``cleanup_expired()``, which by definition deletes expired
  entries of every namespace.
* ``mode``: ``"sync"`` or ``"async"``.  In sync mode the test calls the sync
  methods *from inside a running event loop* (as a sync helper of an async web
  app or a notebook would), so a store must not call ``asyncio.run()`` there.

What the store must do (each bullet is at least one test):

* ``save`` is an upsert on ``entry_id``; the stored ``version`` is the previous
  one plus one, or ``max(entry.version, 1)`` on insert.  Saving an id that lives
  in another namespace either moves it (ids global) or creates an independent
  entry (ids scoped to a namespace); both are accepted.
* ``load`` returns non-expired entries ordered by ``(created_at, entry_id)``;
  re-saving an entry does not move it; an unknown namespace gives ``[]``.
* ``load_by_key`` returns the newest non-expired match (ties broken by the
  larger ``entry_id``, i.e. the last one in ``load`` order) or ``None``.
* ``delete`` and ``clear`` are idempotent; namespaces are exact, isolated strings.
* Every JSON value round-trips: unicode, 1 MB strings, NUL characters inside
  strings (PostgreSQL JSONB cannot hold ``\\u0000`` as such).  Datetimes come
  back timezone-aware and equal (millisecond precision at least).
* Entries are copied in and out.
* Invalid input raises :class:`~firefly_orm.errors.EntryValidationError` naming
  the field, and nothing is written (call :func:`firefly_orm.entry.validate_entry`
  in your ``save``, and :func:`~firefly_orm.entry.validate_namespace` /
  :func:`~firefly_orm.entry.validate_key` in the readers).
* ``cleanup_expired() -> int`` (and ``async_cleanup_expired``) when the store has it.
* The unit of work obtained through :func:`firefly_orm.uow.unit_of_work_for` /
  :func:`firefly_orm.uow.async_unit_of_work_for` is all-or-nothing and enforces
  ``expected_version`` preconditions with :class:`~firefly_orm.errors.ConcurrencyError`.
  A five-method store gets :class:`~firefly_orm.uow.BestEffortUnitOfWork`, which
  passes these tests in a single process.

To opt out of a test that does not apply to your backend, override it in the
subclass with a method decorated ``@pytest.mark.skip(reason=...)``.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from firefly_orm.entry import MemoryEntry, MemoryScope, new_entry_id, utcnow
from firefly_orm.errors import ConcurrencyError, EntryValidationError
from firefly_orm.uow import async_unit_of_work_for, unit_of_work_for

__all__ = ["MODES", "NAMESPACE_PREFIX", "StoreContract", "StoreDriver", "UnitOfWorkDriver"]

#: The two ways the suite calls a store.
MODES = ("sync", "async")

#: Every namespace the suite creates starts with this prefix.
NAMESPACE_PREFIX = "ffc-"

_OPS = ("save", "load", "load_by_key", "delete", "clear")


def _ms(dt: datetime) -> datetime:
    """``dt`` truncated to whole milliseconds (what every backend can hold)."""
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


class UnitOfWorkDriver:
    """Calls a unit of work's repository the same way in sync and async mode."""

    def __init__(self, sync_uow: Any = None, async_uow: Any = None) -> None:
        self._sync = sync_uow
        self._async = async_uow

    async def _run(self, fn: Callable[[Any], Any]) -> Any:
        if self._async is not None:
            return await self._async.run_sync(fn)
        return fn(self._sync)

    async def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """``uow.entries.get``."""
        result: MemoryEntry | None = await self._run(lambda u: u.entries.get(namespace, entry_id))
        return result

    async def get_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """``uow.entries.get_by_key``."""
        result: MemoryEntry | None = await self._run(lambda u: u.entries.get_by_key(namespace, key))
        return result

    async def list(self, namespace: str, **kwargs: Any) -> list[MemoryEntry]:
        """``uow.entries.list``."""
        result: list[MemoryEntry] = await self._run(lambda u: u.entries.list(namespace, **kwargs))
        return result

    async def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        """``uow.entries.save``."""
        await self._run(
            lambda u: u.entries.save(namespace, entry, expected_version=expected_version)
        )

    async def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None:
        """``uow.entries.delete``."""
        await self._run(lambda u: u.entries.delete(namespace, entry_ids))

    async def clear(self, namespace: str) -> None:
        """``uow.entries.clear``."""
        await self._run(lambda u: u.entries.clear(namespace))

    async def commit(self) -> None:
        """Commit the unit of work."""
        if self._async is not None:
            await self._async.commit()
        else:
            self._sync.commit()


class StoreDriver:
    """Calls a store's sync methods or their ``async_`` twins behind one async API.

    Args:
        store: The store under test.
        mode: ``"sync"`` or ``"async"``.
    """

    def __init__(self, store: Any, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.store = store
        self.mode = mode
        self._token = uuid.uuid4().hex[:10]
        self._namespaces: list[str] = []

    def ns(self, label: str = "main") -> str:
        """A namespace private to this test (cleared when the test ends)."""
        namespace = f"{NAMESPACE_PREFIX}{label}-{self._token}"
        if namespace not in self._namespaces:
            self._namespaces.append(namespace)
        return namespace

    def _method(self, name: str) -> Callable[..., Any]:
        attr = name if self.mode == "sync" else f"async_{name}"
        method = getattr(self.store, attr, None)
        if method is None:
            pytest.fail(
                f"{type(self.store).__name__} has no {attr}(); "
                "restrict the `mode` fixture to the modes your store supports"
            )
        return method  # type: ignore[no-any-return]

    async def _call(self, name: str, *args: Any) -> Any:
        method = self._method(name)
        if self.mode == "sync":
            return method(*args)
        return await method(*args)

    async def save(self, namespace: str, entry: MemoryEntry) -> None:
        """``save`` / ``async_save``."""
        await self._call("save", namespace, entry)

    async def load(self, namespace: str) -> list[MemoryEntry]:
        """``load`` / ``async_load``."""
        result: list[MemoryEntry] = await self._call("load", namespace)
        return result

    async def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """``load_by_key`` / ``async_load_by_key``."""
        result: MemoryEntry | None = await self._call("load_by_key", namespace, key)
        return result

    async def delete(self, namespace: str, entry_id: str) -> None:
        """``delete`` / ``async_delete``."""
        await self._call("delete", namespace, entry_id)

    async def clear(self, namespace: str) -> None:
        """``clear`` / ``async_clear``."""
        await self._call("clear", namespace)

    def has_cleanup_expired(self) -> bool:
        """Whether the store offers ``cleanup_expired`` in this mode."""
        attr = "cleanup_expired" if self.mode == "sync" else "async_cleanup_expired"
        return callable(getattr(self.store, attr, None))

    async def cleanup_expired(self) -> int:
        """``cleanup_expired`` / ``async_cleanup_expired``."""
        result: int = await self._call("cleanup_expired")
        return result

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[UnitOfWorkDriver]:
        """The store's unit of work (``unit_of_work_for`` / ``async_unit_of_work_for``)."""
        if self.mode == "sync":
            with unit_of_work_for(self.store) as uow:
                yield UnitOfWorkDriver(sync_uow=uow)
        else:
            async with async_unit_of_work_for(self.store) as auow:
                yield UnitOfWorkDriver(async_uow=auow)

    async def cleanup(self) -> None:
        """Clear every namespace this driver handed out."""
        for namespace in self._namespaces:
            await self.clear(namespace)


def _entry(**fields: Any) -> MemoryEntry:
    fields.setdefault("content", "value")
    return MemoryEntry(**fields)


def _future(**delta: float) -> datetime:
    return _ms(utcnow() + timedelta(**(delta or {"hours": 1})))


def _past(**delta: float) -> datetime:
    return _ms(utcnow() - timedelta(**(delta or {"seconds": 1})))


def _ids(entries: Iterable[MemoryEntry]) -> list[str]:
    return [e.entry_id for e in entries]


def _ordered_ids(count: int) -> list[str]:
    return sorted(new_entry_id() for _ in range(count))


# Bad entries: (test id, field the error must name, how to break a good entry).
_BAD_ENTRIES: list[tuple[str, str, Callable[[MemoryEntry], None]]] = [
    ("importance-1.5", "importance", lambda e: setattr(e, "importance", 1.5)),
    ("importance-negative", "importance", lambda e: setattr(e, "importance", -0.1)),
    ("importance-nan", "importance", lambda e: setattr(e, "importance", math.nan)),
    ("content-object", "content", lambda e: setattr(e, "content", object())),
    ("content-set", "content", lambda e: setattr(e, "content", {1, 2})),
    ("content-nested-set", "content", lambda e: setattr(e, "content", {"a": [{1}]})),
    ("content-inf", "content", lambda e: setattr(e, "content", math.inf)),
    ("metadata-list", "metadata", lambda e: setattr(e, "metadata", ["not", "a", "dict"])),
    ("metadata-object", "metadata", lambda e: setattr(e, "metadata", {"x": object()})),
    ("created_at-naive", "created_at", lambda e: setattr(e, "created_at", datetime(2024, 1, 1))),
    (
        "expires_at-naive",
        "expires_at",
        lambda e: setattr(e, "expires_at", datetime(2999, 1, 1)),
    ),
    ("key-nul", "key", lambda e: setattr(e, "key", "a\x00b")),
]


class StoreContract:
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
        created = _ms(utcnow() - timedelta(minutes=5))
        expires = _future(days=1)
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
        await contract.save(ns, _entry(scope=scope))
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
        entries = [_entry(content=value) for value in values]
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
        await contract.save(ns, _entry(content=values, metadata={"f": 1e20}))
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
            await contract.save(ns, _entry(key=f"k{i}", content=value))
        for i, value in enumerate(values):
            loaded = await contract.load_by_key(ns, f"k{i}")
            assert loaded is not None
            assert loaded.content == value and type(loaded.content) is type(value)

    # ------------------------------------------------------------------ upsert and versions

    async def test_save_is_upsert_on_entry_id(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = _entry(key="k", content="first")
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
        entry = _entry(version=0)
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
        await contract.save(ns, _entry(version=5))
        assert [e.version for e in await contract.load(ns)] == [5]

    async def test_saving_an_id_in_another_namespace(self, contract: StoreDriver) -> None:
        """Either a move (ids global: SQL, Mongo, in-memory) or two independent entries.

        ``FileStore`` scopes ids to a namespace; both behaviours keep namespaces
        consistent, which is what this checks.
        """
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        entry = _entry(content="first")
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
            assert _ids(await contract.load(ns_a)) == [entry.entry_id]
        else:  # global ids: a move
            await contract.delete(ns_a, entry.entry_id)
            assert _ids(await contract.load(ns_b)) == [entry.entry_id]

    # ------------------------------------------------------------------ ordering

    async def test_load_orders_by_created_at_then_entry_id(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        base = _ms(utcnow())
        second = timedelta(seconds=1)
        times = [base, base + second, base + second, base + 2 * second]
        early, mid_low, mid_high, late = (
            _entry(entry_id=i, created_at=t) for i, t in zip(_ordered_ids(4), times, strict=True)
        )
        # Saved out of order; equal created_at falls back to entry_id.
        for entry in (late, mid_high, early, mid_low):
            await contract.save(ns, entry)
        expected = _ids([early, mid_low, mid_high, late])
        assert _ids(await contract.load(ns)) == expected
        # Re-saving an entry does not move it.
        await contract.save(ns, early.copy_entry(content="updated"))
        await contract.save(ns, mid_low.copy_entry(content="updated"))
        assert _ids(await contract.load(ns)) == expected

    async def test_default_created_at_keeps_creation_order(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entries = [_entry(content=i) for i in range(20)]
        for entry in reversed(entries):
            await contract.save(ns, entry)
        assert [e.content for e in await contract.load(ns)] == list(range(20))

    # ------------------------------------------------------------------ load_by_key

    async def test_load_by_key_returns_newest_non_expired_match(
        self, contract: StoreDriver
    ) -> None:
        ns = contract.ns()
        base = _ms(utcnow() - timedelta(hours=1))
        old = _entry(key="k", content="old", created_at=base)
        mid = _entry(key="k", content="mid", created_at=base + timedelta(minutes=1))
        new = _entry(key="k", content="new", created_at=base + timedelta(minutes=2))
        other = _entry(key="other", content="x", created_at=base + timedelta(minutes=3))
        for entry in (mid, new, old, other):
            await contract.save(ns, entry)
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == new.entry_id
        # A newer but expired match is ignored.
        expired = _entry(
            key="k", content="expired", created_at=base + timedelta(minutes=4), expires_at=_past()
        )
        await contract.save(ns, expired)
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == new.entry_id
        # A newer match that expires in the future wins.
        future = _entry(
            key="k", content="future", created_at=base + timedelta(minutes=5), expires_at=_future()
        )
        await contract.save(ns, future)
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == future.entry_id
        assert await contract.load_by_key(ns, "missing") is None
        assert await contract.load_by_key(contract.ns("elsewhere"), "k") is None

    async def test_load_by_key_tie_goes_to_larger_entry_id(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        created = _ms(utcnow())
        low, high = _ordered_ids(2)
        await contract.save(ns, _entry(entry_id=high, key="k", created_at=created))
        await contract.save(ns, _entry(entry_id=low, key="k", created_at=created))
        found = await contract.load_by_key(ns, "k")
        assert found is not None and found.entry_id == high

    async def test_load_by_key_after_update_and_delete(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = _entry(key="k", content=1)
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
        expired = _entry(key="gone", content="expired", expires_at=_past())
        long_expired = _entry(key="gone2", expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        alive = _entry(key="alive", content="alive", expires_at=_future())
        forever = _entry(key="forever", content="forever")
        for entry in (expired, long_expired, alive, forever):
            await contract.save(ns, entry)
        assert _ids(await contract.load(ns)) == _ids([alive, forever])
        assert await contract.load_by_key(ns, "gone") is None
        assert await contract.load_by_key(ns, "gone2") is None
        found = await contract.load_by_key(ns, "alive")
        assert found is not None and found.expires_at == alive.expires_at

    async def test_an_entry_expires_when_updated_with_a_past_expiry(
        self, contract: StoreDriver
    ) -> None:
        ns = contract.ns()
        entry = _entry(key="k", expires_at=_future())
        await contract.save(ns, entry)
        assert len(await contract.load(ns)) == 1
        await contract.save(ns, entry.copy_entry(expires_at=_past()))
        assert await contract.load(ns) == []
        assert await contract.load_by_key(ns, "k") is None
        # ... and comes back when the expiry is lifted again.
        await contract.save(ns, entry.copy_entry(expires_at=None))
        assert _ids(await contract.load(ns)) == [entry.entry_id]

    async def test_cleanup_expired_deletes_expired_entries(self, contract: StoreDriver) -> None:
        if not contract.has_cleanup_expired():
            pytest.skip(f"{type(contract.store).__name__} has no cleanup_expired in this mode")
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        await contract.cleanup_expired()  # whatever expired before this test
        alive = _entry(content="alive", expires_at=_future())
        forever = _entry(content="forever")
        for entry in (alive, _entry(expires_at=_past()), _entry(expires_at=_past(days=3))):
            await contract.save(ns_a, entry)
        await contract.save(ns_a, forever)
        await contract.save(ns_b, _entry(expires_at=_past()))
        removed = await contract.cleanup_expired()
        assert type(removed) is int
        assert removed == 3
        assert await contract.cleanup_expired() == 0
        assert _ids(await contract.load(ns_a)) == _ids([alive, forever])
        assert await contract.load(ns_b) == []

    # ------------------------------------------------------------------ delete / clear

    async def test_delete_removes_one_entry_and_is_idempotent(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        keep, drop = _entry(content="keep"), _entry(content="drop")
        await contract.save(ns, keep)
        await contract.save(ns, drop)
        await contract.delete(ns, drop.entry_id)
        assert _ids(await contract.load(ns)) == [keep.entry_id]
        await contract.delete(ns, drop.entry_id)
        await contract.delete(ns, new_entry_id())
        await contract.delete(contract.ns("never-used"), keep.entry_id)
        assert _ids(await contract.load(ns)) == [keep.entry_id]

    async def test_clear_is_idempotent_and_scoped(self, contract: StoreDriver) -> None:
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        await contract.save(ns_a, _entry())
        await contract.save(ns_a, _entry())
        kept = _entry()
        await contract.save(ns_b, kept)
        await contract.clear(ns_a)
        assert await contract.load(ns_a) == []
        await contract.clear(ns_a)
        await contract.clear(contract.ns("never-used"))
        assert _ids(await contract.load(ns_b)) == [kept.entry_id]
        # A cleared namespace can be written again.
        again = _entry()
        await contract.save(ns_a, again)
        assert _ids(await contract.load(ns_a)) == [again.entry_id]

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
        entries = {ns: _entry(key="k", content=ns) for ns in namespaces}
        for ns, entry in entries.items():
            await contract.save(ns, entry)
        for ns, entry in entries.items():
            assert _ids(await contract.load(ns)) == [entry.entry_id], ns
            found = await contract.load_by_key(ns, "k")
            assert found is not None and found.content == ns
        # delete with the wrong namespace must not touch the entry
        first, second = namespaces[0], namespaces[1]
        await contract.delete(second, entries[first].entry_id)
        assert _ids(await contract.load(first)) == [entries[first].entry_id]
        await contract.clear(first)
        assert await contract.load(first) == []
        for ns in namespaces[1:]:
            assert _ids(await contract.load(ns)) == [entries[ns].entry_id], ns

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
        entry = _entry(key=key, content=content, metadata=metadata)
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
        entry = _entry(key="big", content={"text": big, "list": [big[:1000]] * 10})
        await contract.save(ns, entry)
        found = await contract.load_by_key(ns, "big")
        assert found is not None and found.content == entry.content
        [loaded] = await contract.load(ns)
        assert loaded.content["text"] == big

    async def test_nul_characters_in_content_and_metadata(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        content = {"text": "a\x00b", "a\x00key": ["\x00", "\x00\x00"], "plain": "ok"}
        metadata = {"note": "x\x00y", "k\x00": "v"}
        entry = _entry(key="nul", content=content, metadata=metadata)
        scalar = _entry(key="scalar", content="a\x00b")
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
        expires = _future(days=2).astimezone(pacific)
        entry = _entry(key="tz", created_at=created, expires_at=expires)
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
        entry = _entry(key="k", content={"items": [1]}, metadata={"m": {"n": 1}})
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
        [pytest.param(field, breaker, id=name) for name, field, breaker in _BAD_ENTRIES],
    )
    async def test_invalid_entry_is_rejected_and_nothing_written(
        self, contract: StoreDriver, field: str, breaker: Callable[[MemoryEntry], None]
    ) -> None:
        ns = contract.ns()
        good = _entry(key="k", content="original")
        await contract.save(ns, good)
        # An update of the existing entry ...
        update = good.copy_entry(content="changed")
        breaker(update)
        with pytest.raises(EntryValidationError) as info:
            await contract.save(ns, update)
        assert info.value.field == field
        assert field in str(info.value)
        # ... and a brand-new entry.
        fresh = _entry(key="k2", content="fresh")
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

    @pytest.mark.parametrize("namespace", ["", "a\x00b", "\x00"], ids=["empty", "nul", "only-nul"])
    async def test_invalid_namespace_is_rejected(
        self, contract: StoreDriver, namespace: str
    ) -> None:
        entry = _entry(key="k")
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

    # ------------------------------------------------------------------ unit of work

    async def test_uow_commit_applies_everything(self, contract: StoreDriver) -> None:
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        existing = _entry(key="existing")
        await contract.save(ns_a, existing)
        await contract.save(ns_b, _entry(content="old-b"))
        first, second, fresh_b = _entry(key="one"), _entry(key="two"), _entry(content="new-b")
        async with contract.unit_of_work() as uow:
            await uow.save(ns_a, first)
            await uow.save(ns_a, second)
            await uow.delete(ns_a, existing.entry_id)
            await uow.clear(ns_b)
            await uow.save(ns_b, fresh_b)
            await uow.commit()
        assert _ids(await contract.load(ns_a)) == _ids([first, second])
        assert [e.content for e in await contract.load(ns_b)] == ["new-b"]
        one = await contract.load_by_key(ns_a, "one")
        assert one is not None and one.version == 1

    async def test_uow_without_commit_writes_nothing(self, contract: StoreDriver) -> None:
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        existing, in_b = _entry(content="a"), _entry(content="b")
        await contract.save(ns_a, existing)
        await contract.save(ns_b, in_b)
        async with contract.unit_of_work() as uow:
            await uow.save(ns_a, _entry(content="staged"))
            await uow.save(ns_a, existing.copy_entry(content="changed"))
            await uow.clear(ns_b)
        [stored] = await contract.load(ns_a)
        assert (stored.content, stored.version) == ("a", 1)
        assert _ids(await contract.load(ns_b)) == [in_b.entry_id]

    async def test_uow_error_rolls_back(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        existing = _entry(content="a")
        await contract.save(ns, existing)

        class Boom(Exception):
            pass

        with pytest.raises(Boom):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, _entry(content="staged"))
                await uow.delete(ns, existing.entry_id)
                raise Boom
        assert _ids(await contract.load(ns)) == [existing.entry_id]

    async def test_uow_reads_its_own_writes(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        existing = _entry(key="existing", content="x")
        await contract.save(ns, existing)
        staged = _entry(key="staged", content="y")
        async with contract.unit_of_work() as uow:
            await uow.save(ns, staged)
            got = await uow.get(ns, staged.entry_id)
            assert got is not None and got.content == "y"
            by_key = await uow.get_by_key(ns, "staged")
            assert by_key is not None and by_key.entry_id == staged.entry_id
            assert _ids(await uow.list(ns)) == _ids([existing, staged])
            # Not visible outside before commit.
            assert _ids(await contract.load(ns)) == [existing.entry_id]
            await uow.delete(ns, existing.entry_id)
            assert await uow.get(ns, existing.entry_id) is None
            assert await uow.get_by_key(ns, "existing") is None
            await uow.clear(ns)
            assert await uow.list(ns) == []
            after_clear = _entry(key="after", content="z")
            await uow.save(ns, after_clear)
            assert _ids(await uow.list(ns)) == [after_clear.entry_id]
            await uow.commit()
        assert [e.content for e in await contract.load(ns)] == ["z"]

    async def test_uow_repository_list_and_get(self, contract: StoreDriver) -> None:
        ns, other = contract.ns("a"), contract.ns("b")
        base = _ms(utcnow() - timedelta(minutes=10))
        entries = [
            _entry(key=key, created_at=base + timedelta(seconds=i))
            for i, key in enumerate(["turn:2", "turn:1", "head", "turn:3", None])
        ]
        entries.append(_entry(key="turn:0", expires_at=_past()))
        for entry in entries:
            await contract.save(ns, entry)
        elsewhere = _entry(key="turn:9")
        await contract.save(other, elsewhere)
        live = entries[:5]
        async with contract.unit_of_work() as uow:
            assert _ids(await uow.list(ns)) == _ids(live)
            assert _ids(await uow.list(ns, newest_first=True)) == _ids(reversed(live))
            assert _ids(await uow.list(ns, limit=2)) == _ids(live[:2])
            assert _ids(await uow.list(ns, newest_first=True, limit=2)) == _ids(live[:-3:-1])
            by_key = await uow.list(ns, key_prefix="turn:")
            assert [e.key for e in by_key] == ["turn:1", "turn:2", "turn:3"]
            assert [e.key for e in await uow.list(ns, key_prefix="turn:", limit=1)] == ["turn:1"]
            assert await uow.get(ns, elsewhere.entry_id) is None
            assert await uow.get(ns, entries[5].entry_id) is None  # expired
            assert await uow.get_by_key(ns, "turn:0") is None
            got = await uow.get(ns, entries[2].entry_id)
            assert got is not None and got.key == "head"
            await uow.delete(ns, [entries[0].entry_id, entries[1].entry_id])
            await uow.commit()
        assert _ids(await contract.load(ns)) == _ids(live[2:])

    async def test_uow_expected_version_zero_means_must_not_exist(
        self, contract: StoreDriver
    ) -> None:
        ns = contract.ns()
        entry = _entry(key="head", content="v1")
        async with contract.unit_of_work() as uow:
            await uow.save(ns, entry, expected_version=0)
            await uow.commit()
        [stored] = await contract.load(ns)
        assert (stored.content, stored.version) == ("v1", 1)
        bystander = _entry(key="bystander")
        with pytest.raises(ConcurrencyError):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, bystander)
                await uow.save(ns, entry.copy_entry(content="dup"), expected_version=0)
                await uow.commit()
        [stored] = await contract.load(ns)
        assert (stored.entry_id, stored.content, stored.version) == (entry.entry_id, "v1", 1)

    async def test_uow_expected_version_must_match(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = _entry(key="head", content="v1")
        await contract.save(ns, entry)
        loaded = await contract.load_by_key(ns, "head")
        assert loaded is not None and loaded.version == 1
        async with contract.unit_of_work() as uow:
            await uow.save(ns, loaded.copy_entry(content="v2"), expected_version=1)
            await uow.commit()
        current = await contract.load_by_key(ns, "head")
        assert current is not None and (current.content, current.version) == ("v2", 2)
        bystander = _entry(key="bystander")
        # A writer still holding version 1 loses.
        with pytest.raises(ConcurrencyError):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, bystander)
                await uow.save(ns, loaded.copy_entry(content="stale"), expected_version=1)
                await uow.commit()
        current = await contract.load_by_key(ns, "head")
        assert current is not None and (current.content, current.version) == ("v2", 2)
        assert await contract.load_by_key(ns, "bystander") is None
        # A precondition on an entry that does not exist fails too.
        with pytest.raises(ConcurrencyError):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, _entry(key="ghost"), expected_version=3)
                await uow.commit()
        assert await contract.load_by_key(ns, "ghost") is None

    async def test_uow_versions_bump_on_write(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = _entry(key="k")
        for expected in (1, 2, 3):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, entry.copy_entry(content=expected))
                await uow.commit()
            found = await contract.load_by_key(ns, "k")
            assert found is not None and (found.content, found.version) == (expected, expected)
