"""Unit of work and entry repository.

A unit of work is one transaction over a store: everything done through
``uow.entries`` becomes visible together on :meth:`UnitOfWork.commit`, or not at
all (leaving the ``with`` block without committing rolls back)::

    with store.unit_of_work() as uow:
        head = uow.entries.get_by_key("conversation:c1", "head", for_update=True)
        uow.entries.save("conversation:c1", turn)
        uow.entries.save("conversation:c1", new_head, expected_version=head.version)
        uow.commit()

Async code uses ``async with store.async_unit_of_work() as uow`` and runs a sync
function over the unit of work with ``await uow.run_sync(fn, *args)``; on SQL
stores that function runs on the native async driver through
``AsyncSession.run_sync``, so each operation is written once.

What each store guarantees:

* SQL stores: one database transaction (a SAVEPOINT when joining a caller's
  Session); ``for_update`` is ``SELECT ... FOR UPDATE`` on PostgreSQL (SQLite
  serialises writers with ``BEGIN IMMEDIATE``).
* :class:`~firefly_orm.store.InMemoryStore` and :class:`~firefly_orm.FileStore`:
  changes are staged and applied atomically on commit, under the store's lock
  (the file store also holds an inter-process file lock); version preconditions
  are checked at commit.
* Any other :class:`~firefly_orm.store.MemoryStore` (a custom backend with only
  the five protocol methods) gets :class:`BestEffortUnitOfWork`: changes are
  staged and replayed on commit through ``save``/``delete``; preconditions are
  checked just before, but a crash half-way through the replay can leave part of
  the changes applied, and two processes can race between the check and the
  writes.  Give your store a ``unit_of_work()`` method for real atomicity.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

from firefly_orm.entry import MemoryEntry, validate_entry, validate_key, validate_namespace
from firefly_orm.errors import ConcurrencyError

__all__ = [
    "AsyncUnitOfWork",
    "BestEffortUnitOfWork",
    "EntryRepository",
    "StagedBackend",
    "StagedChanges",
    "StagedUnitOfWork",
    "SyncBackedAsyncUnitOfWork",
    "UnitOfWork",
    "apply_version",
    "async_unit_of_work_for",
    "check_preconditions",
    "sort_entries",
    "unit_of_work_for",
]

logger = logging.getLogger("firefly_orm")
T = TypeVar("T")


@runtime_checkable
class EntryRepository(Protocol):
    """Reads and writes entries inside one unit of work.

    Reads never return expired entries.  ``list`` orders by ``key`` when a
    ``key_prefix`` is given, otherwise by ``(created_at, entry_id)``.
    """

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None: ...

    def get_by_key(
        self, namespace: str, key: str, *, for_update: bool = False
    ) -> MemoryEntry | None: ...

    def list(
        self,
        namespace: str,
        *,
        key_prefix: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[MemoryEntry]: ...

    def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        """Upsert ``entry``.

        ``expected_version=None`` writes unconditionally; ``0`` requires that no
        entry with this id exists; ``n > 0`` requires the stored version to be
        ``n``.  A failed precondition raises :class:`ConcurrencyError` (at once
        or at commit, depending on the store).  The stored version becomes the
        previous one plus one (``max(entry.version, 1)`` on insert).
        """
        ...

    def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None: ...

    def clear(self, namespace: str) -> None: ...


class UnitOfWork(Protocol):
    """A sync unit of work; use as a context manager, call :meth:`commit`."""

    entries: EntryRepository

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class AsyncUnitOfWork(Protocol):
    """An async unit of work: ``await uow.run_sync(fn, *args)``, ``await uow.commit()``."""

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def commit(self) -> None: ...

    async def rollback(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def sort_entries(entries: Iterable[MemoryEntry], *, by_key: bool = False) -> list[MemoryEntry]:
    """The store-wide stable order: ``(created_at, entry_id)`` or ``key``."""
    if by_key:
        return sorted(entries, key=lambda e: (e.key or "", e.created_at, e.entry_id))
    return sorted(entries, key=lambda e: (e.created_at, e.entry_id))


# --------------------------------------------------------------------------- staged UoW


@dataclass
class _Precondition:
    namespace: str
    entry_id: str
    expected_version: int


@dataclass
class StagedChanges:
    """What a staged unit of work will apply on commit, in order."""

    cleared: set[str] = field(default_factory=set)
    #: (namespace, entry_id) -> entry to write, or None to delete
    writes: dict[tuple[str, str], MemoryEntry | None] = field(default_factory=dict)
    preconditions: list[_Precondition] = field(default_factory=list)

    def namespaces(self) -> set[str]:
        return (
            self.cleared | {ns for ns, _ in self.writes} | {p.namespace for p in self.preconditions}
        )


class StagedBackend(Protocol):
    """What :class:`StagedUnitOfWork` needs from a store."""

    def _staged_read(self, namespace: str) -> list[MemoryEntry]:
        """Every stored entry of ``namespace`` (expired included), as copies."""
        ...

    def _staged_apply(self, changes: StagedChanges) -> None:
        """Check the preconditions and apply the changes atomically."""
        ...


class _StagedRepository:
    def __init__(self, uow: StagedUnitOfWork) -> None:
        self._uow = uow

    def _visible(self, namespace: str) -> list[MemoryEntry]:
        changes = self._uow.changes
        base = [] if namespace in changes.cleared else self._uow.backend._staged_read(namespace)
        by_id = {e.entry_id: e for e in base}
        for (ns, entry_id), entry in changes.writes.items():
            if ns != namespace:
                # an id saved into another namespace in this unit of work has moved
                if entry is not None:
                    by_id.pop(entry_id, None)
                continue
            if entry is None:
                by_id.pop(entry_id, None)
            else:
                by_id[entry_id] = entry.copy_entry()
        return [e for e in by_id.values() if not e.is_expired]

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        validate_namespace(namespace)
        for entry in self._visible(namespace):
            if entry.entry_id == entry_id:
                return entry
        return None

    def get_by_key(
        self, namespace: str, key: str, *, for_update: bool = False
    ) -> MemoryEntry | None:
        validate_namespace(namespace)
        validate_key(key)
        matches = [e for e in self._visible(namespace) if e.key == key]
        return sort_entries(matches)[-1] if matches else None

    def list(
        self,
        namespace: str,
        *,
        key_prefix: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[MemoryEntry]:
        validate_namespace(namespace)
        entries = self._visible(namespace)
        if key_prefix is not None:
            entries = [e for e in entries if e.key is not None and e.key.startswith(key_prefix)]
        ordered = sort_entries(entries, by_key=key_prefix is not None)
        if newest_first:
            ordered.reverse()
        return ordered if limit is None else ordered[:limit]

    def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        validate_entry(entry, namespace)
        copy = entry.copy_entry(namespace=namespace)
        changes = self._uow.changes
        if expected_version is not None:
            changes.preconditions.append(_Precondition(namespace, entry.entry_id, expected_version))
        # A move between namespaces deletes the old row (entry_id is global).
        for ns_id in [k for k in changes.writes if k[1] == entry.entry_id and k[0] != namespace]:
            changes.writes[ns_id] = None
        changes.writes[(namespace, entry.entry_id)] = copy

    def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None:
        validate_namespace(namespace)
        ids = [entry_ids] if isinstance(entry_ids, str) else list(entry_ids)
        for entry_id in ids:
            self._uow.changes.writes[(namespace, entry_id)] = None

    def clear(self, namespace: str) -> None:
        validate_namespace(namespace)
        changes = self._uow.changes
        changes.cleared.add(namespace)
        for key in [k for k in changes.writes if k[0] == namespace]:
            del changes.writes[key]


class StagedUnitOfWork:
    """Unit of work that stages changes and hands them to the store on commit."""

    def __init__(self, backend: StagedBackend) -> None:
        self.backend = backend
        self.changes = StagedChanges()
        self.entries: EntryRepository = _StagedRepository(self)
        self._done = False

    def commit(self) -> None:
        if self._done:
            raise RuntimeError("this unit of work has already been committed or rolled back")
        self.backend._staged_apply(self.changes)
        self._done = True

    def rollback(self) -> None:
        self.changes = StagedChanges()
        self._done = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._done:
            self.rollback()


class SyncBackedAsyncUnitOfWork:
    """Async face of a sync unit of work (for stores without async I/O).

    With ``offload=True`` (the default) the work and the commit run in a worker
    thread, so a store doing blocking I/O (files, a custom backend) never blocks
    the event loop; an in-process store passes ``offload=False``.
    """

    def __init__(self, uow: UnitOfWork, *, offload: bool = True) -> None:
        self._uow = uow
        self._offload = offload

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._offload:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._call(fn, self._uow, *args)

    async def commit(self) -> None:
        await self._call(self._uow.commit)

    async def rollback(self) -> None:
        await self._call(self._uow.rollback)

    async def __aenter__(self) -> Self:
        self._uow.__enter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._uow.__exit__(exc_type, exc, tb)


def apply_version(entry: MemoryEntry, previous: MemoryEntry | None) -> MemoryEntry:
    """The entry as stored: version bumped from ``previous`` (or ``max(v, 1)``)."""
    entry.version = previous.version + 1 if previous is not None else max(entry.version, 1)
    return entry


def check_preconditions(
    changes: StagedChanges, current: Callable[[str, str], MemoryEntry | None]
) -> None:
    """Raise :class:`ConcurrencyError` if a version precondition no longer holds."""
    for pre in changes.preconditions:
        stored = current(pre.namespace, pre.entry_id)
        if stored is not None and stored.namespace != pre.namespace:
            stored = None
        actual = 0 if stored is None else stored.version
        if actual != pre.expected_version:
            raise ConcurrencyError(
                f"entry {pre.entry_id!r} in {pre.namespace!r} is at version {actual}, "
                f"expected {pre.expected_version}"
            )


# --------------------------------------------------------------------------- best effort


class _ProtocolStore(Protocol):
    def save(self, namespace: str, entry: MemoryEntry) -> None: ...

    def load(self, namespace: str) -> list[MemoryEntry]: ...

    def delete(self, namespace: str, entry_id: str) -> None: ...

    def clear(self, namespace: str) -> None: ...


class _ProtocolBackend:
    """Adapts a plain five-method store to :class:`StagedBackend`."""

    def __init__(self, store: _ProtocolStore) -> None:
        self.store = store

    def _staged_read(self, namespace: str) -> list[MemoryEntry]:
        return [e.copy_entry() for e in self.store.load(namespace)]

    def _staged_apply(self, changes: StagedChanges) -> None:
        cache: dict[str, dict[str, MemoryEntry]] = {}

        def current(namespace: str, entry_id: str) -> MemoryEntry | None:
            if namespace not in cache:
                cache[namespace] = {e.entry_id: e for e in self.store.load(namespace)}
            return cache[namespace].get(entry_id)

        check_preconditions(changes, current)
        for namespace in sorted(changes.cleared):
            self.store.clear(namespace)
        for (namespace, entry_id), entry in changes.writes.items():
            if entry is None:
                self.store.delete(namespace, entry_id)
            else:
                previous = None if namespace in changes.cleared else current(namespace, entry_id)
                self.store.save(namespace, apply_version(entry, previous))


class BestEffortUnitOfWork(StagedUnitOfWork):
    """Unit of work for a store that only has the five protocol methods.

    See the module docstring for what it does and does not guarantee.
    """

    def __init__(self, store: _ProtocolStore) -> None:
        super().__init__(_ProtocolBackend(store))


_TAKES_READ_ONLY: dict[Any, bool] = {}


def _takes_read_only(factory: Callable[..., Any]) -> bool:
    func = getattr(factory, "__func__", factory)
    known = _TAKES_READ_ONLY.get(func)
    if known is None:
        try:
            known = "read_only" in inspect.signature(factory).parameters
        except (TypeError, ValueError):  # pragma: no cover - callables without signatures
            known = False
        _TAKES_READ_ONLY[func] = known
    return known


def _call_factory(factory: Callable[..., Any], read_only: bool) -> Any:
    """Call a store's unit-of-work factory, passing ``read_only`` only if it takes it."""
    if read_only and _takes_read_only(factory):
        return factory(read_only=True)
    return factory()


@contextmanager
def unit_of_work_for(store: Any, *, read_only: bool = False) -> Iterator[UnitOfWork]:
    """``store.unit_of_work()`` when the store has one, else a best-effort one.

    ``read_only=True`` is a hint for stores that can use it (SQL stores start a
    plain transaction instead of a write-locking one); the unit of work must then
    not write.
    """
    factory = getattr(store, "unit_of_work", None)
    if factory is not None:
        with _call_factory(factory, read_only) as uow:
            yield uow
    else:
        with BestEffortUnitOfWork(store) as uow:
            yield uow


def async_unit_of_work_for(store: Any, *, read_only: bool = False) -> Any:
    """``store.async_unit_of_work()`` when the store has one, else a sync-backed one."""
    factory = getattr(store, "async_unit_of_work", None)
    if factory is not None:
        return _call_factory(factory, read_only)
    sync_factory = getattr(store, "unit_of_work", None)
    uow = (
        _call_factory(sync_factory, read_only)
        if sync_factory is not None
        else BestEffortUnitOfWork(store)
    )
    return SyncBackedAsyncUnitOfWork(uow)
