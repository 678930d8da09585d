"""Drivers: call a store, or its unit of work, the same way in sync and in async mode.

The contract suite is written once, as coroutines, against :class:`StoreDriver`;
the driver forwards each call to the store's sync method (``save``) or to its
``async_`` twin (``async_save``), chosen by ``mode``.  Each forwarding is a typed
call on :class:`~firefly_orm.protocols.MemoryStore` /
:class:`~firefly_orm.protocols.AsyncMemoryStore`, not a method looked up by name.

Example::

    driver = StoreDriver(store, "async")
    namespace = driver.ns("facts")
    await driver.save(namespace, MemoryEntry(key="k", content=1))
    async with driver.unit_of_work() as uow:
        await uow.save(namespace, MemoryEntry(key="j", content=2))
        await uow.commit()
    await driver.cleanup()  # clears every namespace ns() handed out
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar, Unpack, runtime_checkable

import pytest

from firefly_orm.entry import MemoryEntry
from firefly_orm.protocols import (
    AsyncMemoryStore,
    AsyncUnitOfWork,
    AsyncUnitOfWorkStore,
    ExpiresOnServer,
    ListOptions,
    MemoryStore,
    SearchHit,
    SearchOptions,
    UnitOfWork,
    UnitOfWorkStore,
)
from firefly_orm.uow import async_unit_of_work_for, supports_search, unit_of_work_for

__all__ = ["MODES", "NAMESPACE_PREFIX", "StoreDriver", "UnitOfWorkDriver"]

#: The two ways the suite calls a store.
MODES = ("sync", "async")

#: Every namespace the suite creates starts with this prefix.
NAMESPACE_PREFIX = "ffc-"

T = TypeVar("T")


@runtime_checkable
class _CleansUp(Protocol):
    """A store offering the optional ``cleanup_expired``."""

    def cleanup_expired(self) -> int: ...


@runtime_checkable
class _AsyncCleansUp(Protocol):
    """A store offering the optional ``async_cleanup_expired``."""

    async def async_cleanup_expired(self) -> int: ...


class UnitOfWorkDriver:
    """Calls a unit of work's repository the same way in sync and async mode.

    Exactly one of ``sync_uow`` and ``async_uow`` is given; in async mode each
    repository call runs through the unit of work's ``run_sync``.
    """

    def __init__(
        self, sync_uow: UnitOfWork | None = None, async_uow: AsyncUnitOfWork | None = None
    ) -> None:
        if (sync_uow is None) == (async_uow is None):
            raise ValueError("give exactly one of sync_uow and async_uow")
        self._sync = sync_uow
        self._async = async_uow

    async def _run(self, fn: Callable[[UnitOfWork], T]) -> T:
        if self._async is not None:
            return await self._async.run_sync(fn)
        assert self._sync is not None
        return fn(self._sync)

    async def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """``uow.entries.get``."""
        return await self._run(lambda u: u.entries.get(namespace, entry_id))

    async def get_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """``uow.entries.get_by_key``."""
        return await self._run(lambda u: u.entries.get_by_key(namespace, key))

    async def list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """``uow.entries.list``."""
        return await self._run(lambda u: u.entries.list(namespace, **options))

    async def list_contents(
        self, namespace: str, **options: Unpack[ListOptions]
    ) -> builtins.list[Any]:
        """``uow.entries.list_contents``."""
        return await self._run(lambda u: u.entries.list_contents(namespace, **options))

    async def search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> builtins.list[SearchHit]:
        """``uow.entries.search``."""
        return await self._run(lambda u: u.entries.search(namespace, query, **options))

    async def can_search(self) -> bool:
        """Whether ``uow.entries.search`` works here (:func:`~firefly_orm.uow.supports_search`)."""
        return await self._run(lambda u: supports_search(u.entries))

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

    async def erase_user(self, user_id: str) -> None:
        """``uow.entries.erase_user``."""
        await self._run(lambda u: u.entries.erase_user(user_id))

    async def commit(self) -> None:
        """Commit the unit of work."""
        if self._async is not None:
            await self._async.commit()
        else:
            assert self._sync is not None
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

    def _sync_store(self) -> MemoryStore:
        if not isinstance(self.store, MemoryStore):
            pytest.fail(f"{type(self.store).__name__} lacks the MemoryStore methods")
        return self.store

    def _async_store(self) -> AsyncMemoryStore:
        if not isinstance(self.store, AsyncMemoryStore):
            pytest.fail(
                f"{type(self.store).__name__} has no async_* twins; "
                "restrict the `mode` fixture to the modes your store supports"
            )
        return self.store

    async def save(self, namespace: str, entry: MemoryEntry) -> None:
        """``save`` / ``async_save``."""
        if self.mode == "sync":
            self._sync_store().save(namespace, entry)
        else:
            await self._async_store().async_save(namespace, entry)

    async def load(self, namespace: str) -> list[MemoryEntry]:
        """``load`` / ``async_load``."""
        if self.mode == "sync":
            return self._sync_store().load(namespace)
        return await self._async_store().async_load(namespace)

    async def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """``load_by_key`` / ``async_load_by_key``."""
        if self.mode == "sync":
            return self._sync_store().load_by_key(namespace, key)
        return await self._async_store().async_load_by_key(namespace, key)

    async def delete(self, namespace: str, entry_id: str) -> None:
        """``delete`` / ``async_delete``."""
        if self.mode == "sync":
            self._sync_store().delete(namespace, entry_id)
        else:
            await self._async_store().async_delete(namespace, entry_id)

    async def clear(self, namespace: str) -> None:
        """``clear`` / ``async_clear``."""
        if self.mode == "sync":
            self._sync_store().clear(namespace)
        else:
            await self._async_store().async_clear(namespace)

    def can_erase_users(self) -> bool:
        """Whether the store's units of work can erase a user (not a plain five-method store)."""
        return isinstance(self.store, UnitOfWorkStore | AsyncUnitOfWorkStore)

    async def can_search(self) -> bool:
        """Whether the store's units of work implement full-text search.

        Asked of a unit of work's repository (:func:`~firefly_orm.uow.supports_search`):
        False only for a staged backend without ``read_search``.
        """
        async with self.unit_of_work(read_only=True) as uow:
            return await uow.can_search()

    def has_cleanup_expired(self) -> bool:
        """Whether the store offers ``cleanup_expired`` in this mode."""
        wanted = _CleansUp if self.mode == "sync" else _AsyncCleansUp
        return isinstance(self.store, wanted)

    def server_expires_entries(self) -> bool:
        """Whether the database also deletes expired entries itself (a MongoDB TTL
        index): ``cleanup_expired`` may then find some of them already gone."""
        return isinstance(self.store, ExpiresOnServer) and bool(self.store.ttl_index)

    async def cleanup_expired(self) -> int:
        """``cleanup_expired`` / ``async_cleanup_expired``."""
        store = self.store
        if self.mode == "sync" and isinstance(store, _CleansUp):
            return store.cleanup_expired()
        if self.mode == "async" and isinstance(store, _AsyncCleansUp):
            return await store.async_cleanup_expired()
        pytest.fail(f"{type(store).__name__} has no cleanup_expired in {self.mode} mode")

    @asynccontextmanager
    async def unit_of_work(self, *, read_only: bool = False) -> AsyncIterator[UnitOfWorkDriver]:
        """The store's unit of work (``unit_of_work_for`` / ``async_unit_of_work_for``)."""
        if self.mode == "sync":
            with unit_of_work_for(self.store, read_only=read_only) as uow:
                yield UnitOfWorkDriver(sync_uow=uow)
        else:
            async with async_unit_of_work_for(self.store, read_only=read_only) as auow:
                yield UnitOfWorkDriver(async_uow=auow)

    async def cleanup(self) -> None:
        """Clear every namespace this driver handed out."""
        for namespace in self._namespaces:
            await self.clear(namespace)
