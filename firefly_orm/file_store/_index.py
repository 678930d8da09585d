"""The entries of one namespace in memory, kept in both read orders (for :class:`FileStore`).

:class:`EntryIndex` holds a namespace's entries by id plus two sorted lists,
``(created_at, entry_id)`` for every entry and ``(key, created_at, entry_id)``
for entries with a key, so that the reads a unit of work makes are answered
without sorting or scanning the namespace:

* by id: one dict lookup;
* by key: one binary search, then the matches;
* a window (``limit``) of the whole namespace or of a key prefix, oldest or
  newest first: one binary search, then the entries of the window (plus any
  expired ones skipped on the way);
* a full-text search: the entries holding one of the query's words, through an
  inverted index of ``search_text`` words (:class:`~firefly_orm._search.TermIndex`).

The order is the store-wide order of :func:`~firefly_orm.uow.select_entries`, and
the key-prefix range is ``[prefix, key_prefix_upper_bound(prefix))``, which holds
exactly the keys starting with ``prefix``.  Entries are stored as given and
handed out as they are: the caller copies them.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from firefly_orm._search import SearchHit, SearchRequest, TermIndex
from firefly_orm.entry import MemoryEntry, key_prefix_upper_bound

__all__ = ["EntryIndex"]

_TimeItem = tuple[datetime, str]
_KeyItem = tuple[str, datetime, str]


class EntryIndex:
    """A namespace's entries by id, by ``(created_at, entry_id)`` and by key."""

    def __init__(self) -> None:
        self._entries: dict[str, MemoryEntry] = {}
        self._by_time: list[_TimeItem] = []
        self._by_key: list[_KeyItem] = []
        self._words = TermIndex()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry with this id (expired or not), or ``None``."""
        return self._entries.get(entry_id)

    def values(self) -> Iterator[MemoryEntry]:
        """Every entry, expired ones included, in ``(created_at, entry_id)`` order."""
        entries = self._entries
        return (entries[entry_id] for _, entry_id in self._by_time)

    def ids(self) -> list[str]:
        """Every entry id (no order)."""
        return list(self._entries)

    def put(self, entry: MemoryEntry) -> MemoryEntry | None:
        """Insert or replace ``entry`` (by id); return the entry it replaced."""
        previous = self.remove(entry.entry_id)
        self._entries[entry.entry_id] = entry
        insort(self._by_time, (entry.created_at, entry.entry_id))
        if entry.key is not None:
            insort(self._by_key, (entry.key, entry.created_at, entry.entry_id))
        if entry.search_text is not None:
            self._words.add(entry.entry_id, entry.search_text)
        return previous

    def remove(self, entry_id: str) -> MemoryEntry | None:
        """Remove the entry with this id; return it (``None`` if there was none)."""
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return None
        _discard(self._by_time, (entry.created_at, entry_id))
        if entry.key is not None:
            _discard(self._by_key, (entry.key, entry.created_at, entry_id))
        self._words.remove(entry_id)
        return entry

    def clear(self) -> None:
        """Remove every entry."""
        self._entries.clear()
        self._by_time.clear()
        self._by_key.clear()
        self._words.clear()

    def with_key(self, key: str) -> list[MemoryEntry]:
        """Every live entry with exactly this key, oldest first."""
        items = self._by_key
        position = bisect_left(items, (key,))
        found: list[MemoryEntry] = []
        while position < len(items) and items[position][0] == key:
            entry = self._entries[items[position][2]]
            if not entry.is_expired:
                found.append(entry)
            position += 1
        return found

    def select(
        self,
        *,
        key_prefix: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        user_id: str | None = None,
    ) -> list[MemoryEntry]:
        """What :func:`~firefly_orm.uow.select_entries` returns over these entries.

        Live entries only (of ``user_id`` only, when given); ordered by ``(key,
        created_at, entry_id)`` with ``key_prefix`` (only keys starting with
        it), else ``(created_at, entry_id)``; ``newest_first`` reverses; at most
        ``limit`` of them.  Entries of other users are skipped on the way, so a
        ``user_id`` read costs what it skips.
        """
        if limit is not None and limit <= 0:
            return []
        items: list[Any]
        if key_prefix is None:
            items, lo, hi = self._by_time, 0, len(self._by_time)
        else:
            items = self._by_key
            lo = bisect_left(items, (key_prefix,))
            upper = key_prefix_upper_bound(key_prefix)
            hi = len(items) if upper is None else bisect_left(items, (upper,), lo=lo)
        positions = range(hi - 1, lo - 1, -1) if newest_first else range(lo, hi)
        found: list[MemoryEntry] = []
        entries = self._entries
        for position in positions:
            entry = entries[items[position][-1]]
            if entry.is_expired or (user_id is not None and entry.user_id != user_id):
                continue
            found.append(entry)
            if limit is not None and len(found) >= limit:
                break
        return found

    def search(self, request: SearchRequest) -> list[SearchHit]:
        """The live matches of ``request`` (tokenised match), best first, cut (not copied)."""
        return self._words.hits(self._entries, request)


def _discard(items: list[Any], item: Any) -> None:
    position = bisect_left(items, item)
    if position < len(items) and items[position] == item:
        del items[position]
