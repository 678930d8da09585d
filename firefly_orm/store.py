"""The in-process :class:`InMemoryStore` (and the store protocols, re-exported).

Every store honours the same contract (checked by :mod:`firefly_orm.testing`;
the protocols themselves live in :mod:`firefly_orm.protocols`):

* ``save(namespace, entry)`` is an upsert on ``entry_id`` (an id is global: saving
  it under another namespace moves it); the entry is validated first and nothing
  is written when validation fails.
* ``load(namespace)`` returns the non-expired entries ordered by
  ``(created_at, entry_id)``; an unknown namespace gives ``[]``.
* ``load_by_key(namespace, key)`` returns the newest non-expired match or ``None``.
* ``delete`` and ``clear`` are idempotent; namespaces are isolated.
* Stores hand out copies: mutating an entry you saved or loaded never changes
  what is stored.

Full-text search (``uow.entries.search``) on :class:`InMemoryStore` is the
tokenised match of :mod:`firefly_orm._search` over a per-namespace inverted index.
Vector search (``uow.entries.vector_search``) is exact: every vector of the
namespace is compared (:mod:`firefly_orm.vector._exact`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Unpack

from firefly_orm._search import SearchHit, SearchRequest, TermIndex
from firefly_orm.bridges.twins import AsyncTwins
from firefly_orm.entry import MemoryEntry, validate_entry, validate_key, validate_namespace
from firefly_orm.protocols import AsyncMemoryStore, ListOptions, MemoryStore, SearchOptions
from firefly_orm.uow import (
    StagedChanges,
    StagedUnitOfWork,
    apply_version,
    check_preconditions,
    select_entries,
)
from firefly_orm.vector._exact import VectorTable, check_vector_changes
from firefly_orm.vector._spec import EmbeddingSpec, VectorRequest, VectorSearchOptions

__all__ = ["AsyncMemoryStore", "InMemoryStore", "MemoryStore"]


class InMemoryStore(AsyncTwins):
    """A thread-safe store in process memory (nothing survives the process).

    Entries are copied in and out, so callers can never change stored data by
    mutating their objects.  The ``async_*`` methods are derived from the sync
    ones (:class:`~firefly_orm.bridges.twins.AsyncTwins`) and run inline.

    Inside a unit of work, a read by id is O(1) and a read by key O(matches);
    only the entries a read returns are copied.  A search visits the entries
    holding one of the query's words (an inverted index per namespace) and
    scores them by the share of the query's words they contain.
    """

    twins_in_thread = False

    def __init__(self) -> None:
        self._data: dict[str, dict[str, MemoryEntry]] = {}
        self._where: dict[str, str] = {}  # entry_id -> namespace
        self._keyed: dict[tuple[str, str], set[str]] = {}  # (namespace, key) -> entry ids
        self._words: dict[str, TermIndex] = {}  # namespace -> its search_text words
        self._vectors = VectorTable()  # namespace -> entry id -> vector (one spec each)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ protocol
    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Insert or replace ``entry`` (by ``entry_id``); an id saved elsewhere moves here."""
        validate_entry(entry, namespace)
        copy = entry.copy_entry(namespace=namespace)
        with self._lock:
            self._write(namespace, copy)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` in ``(created_at, entry_id)`` order."""
        return self.read_list(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry of ``namespace`` with ``key``, or ``None``."""
        validate_namespace(namespace)
        validate_key(key)
        with self._lock:
            newest = select_entries(self._with_key(namespace, key), limit=1, newest_first=True)
        return newest[0].copy_entry() if newest else None

    def delete(self, namespace: str, entry_id: str) -> None:
        """Remove one entry; no error if it does not exist."""
        validate_namespace(namespace)
        with self._lock:
            self._remove(namespace, entry_id)

    def clear(self, namespace: str) -> None:
        """Remove every entry of ``namespace``."""
        validate_namespace(namespace)
        with self._lock:
            for entry_id in list(self._data.get(namespace, {})):
                self._remove(namespace, entry_id)
            self._data.pop(namespace, None)

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
            for namespace, entries in self._data.items():
                for entry_id in [i for i, e in entries.items() if e.is_expired]:
                    self._remove(namespace, entry_id)
                    removed += 1
        return removed

    def unit_of_work(self, *, read_only: bool = False) -> StagedUnitOfWork:
        """A unit of work whose changes apply atomically (under the lock) on commit.

        ``read_only`` is accepted for the common signature; it changes nothing here.
        """
        return StagedUnitOfWork(self)

    def __repr__(self) -> str:
        with self._lock:
            count = sum(len(v) for v in self._data.values())
        return f"InMemoryStore(namespaces={len(self._data)}, entries={count})"

    # ------------------------------------------------------------------ staged backend
    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry with this id in ``namespace`` (a copy), or ``None``."""
        validate_namespace(namespace)
        with self._lock:
            entry = self._data.get(namespace, {}).get(entry_id)
            if entry is None or entry.is_expired:
                return None
            return entry.copy_entry()

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """Every live entry of ``namespace`` with ``key`` (copies)."""
        validate_namespace(namespace)
        validate_key(key)
        with self._lock:
            return [e.copy_entry() for e in self._with_key(namespace, key) if not e.is_expired]

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """Live entries of ``namespace``, ordered and limited (copies of those only)."""
        validate_namespace(namespace)
        with self._lock:
            rows = select_entries(self._data.get(namespace, {}).values(), **options)
            return [e.copy_entry() for e in rows]

    def read_search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """The committed matches of ``query`` (copies), best first (:mod:`firefly_orm._search`)."""
        request = SearchRequest.build(namespace, query, **options)
        if request.finds_nothing:
            return []
        with self._lock:
            index = self._words.get(namespace)
            if index is None:
                return []
            hits = index.hits(self._data.get(namespace, {}), request)
            return [SearchHit(hit.entry.copy_entry(), hit.score) for hit in hits]

    def read_vector_search(
        self,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        **options: Unpack[VectorSearchOptions],
    ) -> list[SearchHit]:
        """The committed entries nearest ``vector`` (copies), best first (exact cosine)."""
        request = VectorRequest.build(namespace, vector, spec, **options)
        with self._lock:
            hits = self._vectors.search(request, self._data.get(namespace, {}).get)
            return [SearchHit(hit.entry.copy_entry(), hit.score) for hit in hits]

    def read_embedding_spec(self, namespace: str) -> EmbeddingSpec | None:
        """The spec of ``namespace``'s committed vectors (``None``: it holds none)."""
        validate_namespace(namespace)
        with self._lock:
            return self._vectors.spec(namespace)

    def read_vector_ids(self, namespace: str) -> set[str]:
        """The ids of the entries of ``namespace`` with a committed vector."""
        validate_namespace(namespace)
        with self._lock:
            return self._vectors.ids(namespace)

    def apply_changes(self, changes: StagedChanges) -> None:
        """Check the version preconditions and apply ``changes``, all under the lock."""
        with self._lock:

            def current(namespace: str, entry_id: str) -> MemoryEntry | None:
                ns = self._where.get(entry_id)
                return self._data[ns][entry_id] if ns is not None else None

            check_preconditions(changes, current)
            check_vector_changes(changes.vectors, changes.dropped_vectors, self._vectors.spec)
            for user_id in changes.erased_users:
                for namespace, entries in list(self._data.items()):
                    for entry_id in [i for i, e in entries.items() if e.user_id == user_id]:
                        self.delete(namespace, entry_id)
            for namespace in changes.cleared:
                self.clear(namespace)
            for (namespace, entry_id), entry in changes.writes.items():
                if entry is None:
                    self.delete(namespace, entry_id)
                else:
                    self._write(namespace, entry.copy_entry())
            for namespace in changes.dropped_vectors:
                self._vectors.drop(namespace)
            for (namespace, entry_id), (spec, vector) in changes.vectors.items():
                if entry_id in self._data.get(namespace, {}):  # else deleted meanwhile
                    self._vectors.put(namespace, entry_id, spec, vector)

    # ------------------------------------------------------------------ internals
    # Callers hold the lock.
    def _with_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        entries = self._data.get(namespace, {})
        return [entries[i] for i in self._keyed.get((namespace, key), ())]

    def _write(self, namespace: str, entry: MemoryEntry) -> None:
        old_ns = self._where.get(entry.entry_id)
        previous = None if old_ns is None else self._data[old_ns][entry.entry_id]
        apply_version(entry, previous)  # raises before anything is removed
        # a re-save keeps its vector, unless its text changed (the vector no longer says it)
        kept = self._vectors.get(namespace, entry.entry_id)
        if previous is None or previous.search_text != entry.search_text:
            kept = None
        spec = self._vectors.spec(namespace)
        if old_ns is not None:
            self._remove(old_ns, entry.entry_id)
        if kept is not None and spec is not None:
            self._vectors.put(namespace, entry.entry_id, spec, kept)
        self._data.setdefault(namespace, {})[entry.entry_id] = entry
        self._where[entry.entry_id] = namespace
        if entry.key is not None:
            self._keyed.setdefault((namespace, entry.key), set()).add(entry.entry_id)
        if entry.search_text is not None:
            self._words.setdefault(namespace, TermIndex()).add(entry.entry_id, entry.search_text)

    def _remove(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        entry = self._data.get(namespace, {}).pop(entry_id, None)
        if entry is None:
            return None
        self._vectors.remove(namespace, entry_id)
        self._where.pop(entry_id, None)
        if entry.key is not None:
            ids = self._keyed.get((namespace, entry.key))
            if ids is not None:
                ids.discard(entry_id)
                if not ids:
                    del self._keyed[(namespace, entry.key)]
        words = self._words.get(namespace)
        if words is not None:
            words.remove(entry_id)
            if not len(words):
                del self._words[namespace]
        return entry
