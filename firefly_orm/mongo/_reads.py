"""How a :class:`~firefly_orm.mongo.MongoDBStore` is read as a staged backend.

:class:`UnitOfWorkReads` is the :class:`~firefly_orm.protocols.StagedBackend`
(and :class:`~firefly_orm.protocols.SearchBackend`) a MongoDB unit of work runs
on: the store's indexed reads, built here (by id, by key, a key-prefix or time
range with a limit, a full-text search of :mod:`firefly_orm.mongo._queries`)
and run by the store.  Without transactions (see
:mod:`firefly_orm.mongo._journal`) every read also checks its namespace for a
commit in progress; a unit of work's reads (``remember=True``) remember which
namespaces they have checked, and a namespace is checked after the unit of
work's first read of it, not after every read: a commit that starts later
changes what the unit of work's version preconditions protect, so the unit of
work's commit fails instead.  The store's own ``read_*`` methods use
``remember=False``: each read checks.
"""

from __future__ import annotations

from typing import Any, Protocol, Unpack

from firefly_orm._search import SearchHit, SearchRequest
from firefly_orm.entry import MemoryEntry, validate_key, validate_namespace, validate_user_id
from firefly_orm.mongo._document import BY_KEY, BY_TIME, key_prefix_filter
from firefly_orm.mongo._queries import find_live, search_live
from firefly_orm.mongo._vectors import SettledReader, VectorReads, settled_read
from firefly_orm.protocols import ListOptions, SearchOptions
from firefly_orm.uow import StagedChanges

__all__ = ["UnitOfWorkReads"]


class _Reader(SettledReader, Protocol):
    """The store methods :class:`UnitOfWorkReads` uses."""

    def apply_changes(self, changes: StagedChanges) -> None: ...


class UnitOfWorkReads(VectorReads):
    """The store as one unit of work (or, with ``remember=False``, the store itself) reads it.

    See the module docstring; the vector reads are
    :class:`~firefly_orm.mongo._vectors.VectorReads`.  Every read validates its arguments first
    (:class:`~firefly_orm.errors.EntryValidationError`, nothing read).
    """

    def __init__(self, store: _Reader, *, remember: bool) -> None:
        self._store = store
        self._settled: set[str] | None = set() if remember else None

    def _find(
        self,
        namespace: str,
        query: dict[str, Any],
        order: list[tuple[str, int]] | None,
        limit: int | None = None,
    ) -> list[MemoryEntry]:
        return settled_read(
            self, namespace, "unit of work read", lambda col: find_live(col, query, order, limit)
        )

    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.read_entry`."""
        validate_namespace(namespace)
        found = self._find(namespace, {"entry_id": entry_id, "namespace": namespace}, None, 1)
        return found[0] if found else None

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.read_by_key`."""
        validate_namespace(namespace)
        validate_key(key)
        return self._find(namespace, {"namespace": namespace, "key": key}, BY_TIME)

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.read_list`."""
        validate_namespace(namespace)
        limit = options.get("limit")
        if limit is not None and limit <= 0:
            return []
        query: dict[str, Any] = {"namespace": namespace}
        user_id = options.get("user_id")
        if user_id is not None:
            query["user_id"] = validate_user_id(user_id)
        order = BY_TIME
        key_prefix = options.get("key_prefix")
        if key_prefix is not None:
            query.update(key_prefix_filter(key_prefix))
            order = BY_KEY
        if options.get("newest_first", False):
            order = [(name, -1) for name, _ in order]
        return self._find(namespace, query, order, limit)

    def read_search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.read_search`."""
        request = SearchRequest.build(namespace, query, **options)
        if request.finds_nothing:
            return []
        return settled_read(self, namespace, "search", lambda col: search_live(col, request))

    def apply_changes(self, changes: StagedChanges) -> None:
        """See :meth:`~firefly_orm.mongo.MongoDBStore.apply_changes`."""
        self._store.apply_changes(changes)
