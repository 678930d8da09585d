"""How a unit of work reads a :class:`~firefly_orm.mongo.MongoDBStore`.

:class:`UnitOfWorkReads` is the :class:`~firefly_orm.protocols.StagedBackend`
a MongoDB unit of work runs on: the store's indexed reads, remembering which
namespaces this unit of work has already checked for a commit in progress
(without transactions, see :mod:`firefly_orm.mongo.journal`).  A namespace is
checked after the unit of work's first read of it, not after every read: a
commit that starts later changes what the unit of work's version
preconditions protect, so the unit of work's commit fails instead.
"""

from __future__ import annotations

from typing import Protocol, Unpack

from firefly_orm.entry import MemoryEntry
from firefly_orm.protocols import ListOptions
from firefly_orm.uow import StagedChanges

__all__ = ["UnitOfWorkReads"]


class _Reader(Protocol):
    """The store methods :class:`UnitOfWorkReads` uses."""

    def _read_entry(
        self, namespace: str, entry_id: str, settled: set[str] | None
    ) -> MemoryEntry | None: ...

    def _read_by_key(
        self, namespace: str, key: str, settled: set[str] | None
    ) -> list[MemoryEntry]: ...

    def _read_list(
        self,
        namespace: str,
        key_prefix: str | None,
        limit: int | None,
        newest_first: bool,
        settled: set[str] | None,
        user_id: str | None = None,
    ) -> list[MemoryEntry]: ...

    def apply_changes(self, changes: StagedChanges) -> None: ...


class UnitOfWorkReads:
    """The store as one unit of work sees it (see the module docstring)."""

    def __init__(self, store: _Reader) -> None:
        self._store = store
        self._settled: set[str] = set()

    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.read_entry`."""
        return self._store._read_entry(namespace, entry_id, self._settled)

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.read_by_key`."""
        return self._store._read_by_key(namespace, key, self._settled)

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.read_list`."""
        return self._store._read_list(
            namespace,
            options.get("key_prefix"),
            options.get("limit"),
            bool(options.get("newest_first", False)),
            self._settled,
            options.get("user_id"),
        )

    def apply_changes(self, changes: StagedChanges) -> None:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.apply_changes`."""
        self._store.apply_changes(changes)
