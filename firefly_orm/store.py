"""The :class:`MemoryStore` protocol and the in-process :class:`InMemoryStore`.

Every store honours the same contract (checked by :mod:`firefly_orm.testing`):

* ``save(namespace, entry)`` is an upsert on ``entry_id`` (an id is global: saving
  it under another namespace moves it); the entry is validated first and nothing
  is written when validation fails.
* ``load(namespace)`` returns the non-expired entries ordered by
  ``(created_at, entry_id)``; an unknown namespace gives ``[]``.
* ``load_by_key(namespace, key)`` returns the newest non-expired match or ``None``.
* ``delete`` and ``clear`` are idempotent; namespaces are isolated.
* Stores hand out copies: mutating an entry you saved or loaded never changes
  what is stored.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from firefly_orm.entry import MemoryEntry, validate_entry, validate_key, validate_namespace
from firefly_orm.uow import (
    StagedChanges,
    StagedUnitOfWork,
    SyncBackedAsyncUnitOfWork,
    apply_version,
    check_preconditions,
    sort_entries,
)

__all__ = ["AsyncMemoryStore", "InMemoryStore", "MemoryStore"]


@runtime_checkable
class MemoryStore(Protocol):
    """The five synchronous methods every backend implements."""

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Insert or replace ``entry`` (by ``entry_id``) in ``namespace``."""
        ...

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` in ``(created_at, entry_id)`` order."""
        ...

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry with ``key``, or ``None``."""
        ...

    def delete(self, namespace: str, entry_id: str) -> None:
        """Remove one entry; no error if it does not exist."""
        ...

    def clear(self, namespace: str) -> None:
        """Remove every entry of ``namespace``."""
        ...


@runtime_checkable
class AsyncMemoryStore(Protocol):
    """The async twins of :class:`MemoryStore`."""

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None: ...

    async def async_load(self, namespace: str) -> list[MemoryEntry]: ...

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None: ...

    async def async_delete(self, namespace: str, entry_id: str) -> None: ...

    async def async_clear(self, namespace: str) -> None: ...


class InMemoryStore:
    """A thread-safe store in process memory (nothing survives the process).

    Entries are copied in and out, so callers can never change stored data by
    mutating their objects.
    """

    def __init__(self) -> None:
        self._data: dict[str, dict[str, MemoryEntry]] = {}
        self._where: dict[str, str] = {}  # entry_id -> namespace
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ protocol
    def save(self, namespace: str, entry: MemoryEntry) -> None:
        validate_entry(entry, namespace)
        copy = entry.copy_entry(namespace=namespace)
        with self._lock:
            self._write(namespace, copy)

    def load(self, namespace: str) -> list[MemoryEntry]:
        validate_namespace(namespace)
        with self._lock:
            stored = list(self._data.get(namespace, {}).values())
        return [e.copy_entry() for e in sort_entries(stored) if not e.is_expired]

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        validate_namespace(namespace)
        validate_key(key)
        with self._lock:
            matches = [
                e
                for e in self._data.get(namespace, {}).values()
                if e.key == key and not e.is_expired
            ]
        return sort_entries(matches)[-1].copy_entry() if matches else None

    def delete(self, namespace: str, entry_id: str) -> None:
        validate_namespace(namespace)
        with self._lock:
            if self._data.get(namespace, {}).pop(entry_id, None) is not None:
                self._where.pop(entry_id, None)

    def clear(self, namespace: str) -> None:
        validate_namespace(namespace)
        with self._lock:
            for entry_id in self._data.pop(namespace, {}):
                self._where.pop(entry_id, None)

    # ------------------------------------------------------------------ async twins
    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async twin of :meth:`save` (no I/O: runs inline)."""
        self.save(namespace, entry)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async twin of :meth:`load`."""
        return self.load(namespace)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async twin of :meth:`load_by_key`."""
        return self.load_by_key(namespace, key)

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async twin of :meth:`delete`."""
        self.delete(namespace, entry_id)

    async def async_clear(self, namespace: str) -> None:
        """Async twin of :meth:`clear`."""
        self.clear(namespace)

    # ------------------------------------------------------------------ extras
    @property
    def namespaces(self) -> list[str]:
        """Namespaces that currently hold at least one entry."""
        with self._lock:
            return [ns for ns, entries in self._data.items() if entries]

    def cleanup_expired(self) -> int:
        """Delete expired entries in every namespace; return how many."""
        removed = 0
        with self._lock:
            for entries in self._data.values():
                for entry_id in [i for i, e in entries.items() if e.is_expired]:
                    del entries[entry_id]
                    self._where.pop(entry_id, None)
                    removed += 1
        return removed

    async def async_cleanup_expired(self) -> int:
        """Async twin of :meth:`cleanup_expired`."""
        return self.cleanup_expired()

    def unit_of_work(self) -> StagedUnitOfWork:
        """A unit of work whose changes apply atomically (under the lock) on commit."""
        return StagedUnitOfWork(self)

    def async_unit_of_work(self) -> SyncBackedAsyncUnitOfWork:
        """Async form of :meth:`unit_of_work`."""
        return SyncBackedAsyncUnitOfWork(self.unit_of_work(), offload=False)

    def __repr__(self) -> str:
        with self._lock:
            count = sum(len(v) for v in self._data.values())
        return f"InMemoryStore(namespaces={len(self._data)}, entries={count})"

    # ------------------------------------------------------------------ internals
    def _write(self, namespace: str, entry: MemoryEntry) -> None:
        old_ns = self._where.get(entry.entry_id)
        previous = None
        if old_ns is not None:
            previous = self._data.get(old_ns, {}).pop(entry.entry_id, None)
        apply_version(entry, previous)
        self._data.setdefault(namespace, {})[entry.entry_id] = entry
        self._where[entry.entry_id] = namespace

    def _staged_read(self, namespace: str) -> list[MemoryEntry]:
        with self._lock:
            return [e.copy_entry() for e in self._data.get(namespace, {}).values()]

    def _staged_apply(self, changes: StagedChanges) -> None:
        with self._lock:

            def current(namespace: str, entry_id: str) -> MemoryEntry | None:
                ns = self._where.get(entry_id)
                return self._data[ns][entry_id] if ns is not None else None

            check_preconditions(changes, current)
            for namespace in changes.cleared:
                self.clear(namespace)
            for (namespace, entry_id), entry in changes.writes.items():
                if entry is None:
                    self.delete(namespace, entry_id)
                else:
                    self._write(namespace, entry.copy_entry())
