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
exactly the keys starting with ``prefix``.

Entries are kept packed (:class:`_Packed`): the fields the reads order and
filter by (``created_at``, ``key``, ``expires_at``, ``user_id``) and the entry's
JSON, compressed when longer than :data:`COMPRESS_OVER` bytes, about a fifth of
the memory of a parsed entry (a 1.4 KB conversation turn: 4.5 KB parsed).  An
entry is built again, from its JSON as the file holds it, only when a read
hands it out: each read gets entries of its own.
"""

from __future__ import annotations

import heapq
import json
import zlib
from bisect import bisect_left, insort
from collections.abc import Collection, Iterator
from datetime import datetime
from typing import Any

from firefly_orm._search import SearchHit, SearchRequest, TermIndex, tokenised_score
from firefly_orm.entry import MemoryEntry, MemoryScope, key_prefix_upper_bound, utcnow

__all__ = ["COMPRESS_OVER", "EntryIndex"]

_TimeItem = tuple[datetime, str]
_KeyItem = tuple[str, datetime, str]

#: Packed entries whose JSON is longer are kept zlib-compressed (level 1).
COMPRESS_OVER = 256


class _Packed:
    """One entry as the index keeps it: what reads order and filter by, and its JSON."""

    __slots__ = ("blob", "created_at", "expires_at", "importance", "key", "user_id", "zipped")

    def __init__(self, entry: MemoryEntry) -> None:
        self.created_at = entry.created_at
        self.key = entry.key
        self.expires_at = entry.expires_at
        self.user_id = entry.user_id
        self.importance = entry.importance
        data = json.dumps(_json_fields(entry), ensure_ascii=False, separators=(",", ":"))
        raw = data.encode("utf-8", "surrogatepass")
        self.zipped = len(raw) > COMPRESS_OVER
        self.blob = zlib.compress(raw, 1) if self.zipped else raw

    def unpack(self) -> MemoryEntry:
        """A new entry, equal to the one packed."""
        raw = zlib.decompress(self.blob) if self.zipped else self.blob
        return MemoryEntry.from_dict(json.loads(raw.decode("utf-8", "surrogatepass")))

    def expired(self, now: datetime) -> bool:
        """Whether the entry is expired at ``now`` (as :attr:`MemoryEntry.is_expired`)."""
        return self.expires_at is not None and now >= self.expires_at

    def accepted_by(self, request: SearchRequest, now: datetime) -> bool:
        """:meth:`SearchRequest.accepts <firefly_orm._search.SearchRequest.accepts>` at ``now``."""
        return request.admits(
            user_id=self.user_id,
            key=self.key,
            importance=self.importance,
            expired=self.expired(now),
        )


def _json_fields(entry: MemoryEntry) -> dict[str, Any]:
    """:meth:`MemoryEntry.to_json_dict` without its deep copies (the dict is only serialised)."""
    expires_at = entry.expires_at
    return {
        "entry_id": entry.entry_id,
        "namespace": entry.namespace,
        "scope": str(MemoryScope(entry.scope)),
        "key": entry.key,
        "content": entry.content,
        "metadata": entry.metadata_,
        "created_at": entry.created_at.isoformat(),
        "expires_at": None if expires_at is None else expires_at.isoformat(),
        "importance": entry.importance,
        "version": entry.version,
        "user_id": entry.user_id,
        "search_text": entry.search_text,
        "search_language": entry.search_language,
    }


class EntryIndex:
    """A namespace's entries by id, by ``(created_at, entry_id)`` and by key."""

    def __init__(self) -> None:
        self._entries: dict[str, _Packed] = {}
        self._by_time: list[_TimeItem] = []
        self._by_key: list[_KeyItem] = []
        self._words = TermIndex()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry with this id (expired or not; a new object), or ``None``."""
        packed = self._entries.get(entry_id)
        return None if packed is None else packed.unpack()

    def values(self) -> Iterator[MemoryEntry]:
        """Every entry (new objects), expired ones included, in ``(created_at, entry_id)`` order."""
        entries = self._entries
        return (entries[entry_id].unpack() for _, entry_id in self._by_time)

    def ids(self) -> list[str]:
        """Every entry id (no order)."""
        return list(self._entries)

    def expired_ids(self) -> list[str]:
        """The ids of the entries expired now, in ``(created_at, entry_id)`` order."""
        now, entries = utcnow(), self._entries
        return [i for _, i in self._by_time if entries[i].expired(now)]

    def ids_of_users(self, user_ids: Collection[str]) -> list[str]:
        """The ids of the entries of these users, in ``(created_at, entry_id)`` order."""
        entries = self._entries
        return [i for _, i in self._by_time if entries[i].user_id in user_ids]

    def put(self, entry: MemoryEntry) -> bool:
        """Insert or replace ``entry`` (by id); whether it replaced one."""
        replaced = self.remove(entry.entry_id)
        packed = _Packed(entry)
        self._entries[entry.entry_id] = packed
        insort(self._by_time, (packed.created_at, entry.entry_id))
        if packed.key is not None:
            insort(self._by_key, (packed.key, packed.created_at, entry.entry_id))
        if entry.search_text is not None:
            self._words.add(entry.entry_id, entry.search_text)
        return replaced

    def remove(self, entry_id: str) -> bool:
        """Remove the entry with this id; whether there was one."""
        packed = self._entries.pop(entry_id, None)
        if packed is None:
            return False
        _discard(self._by_time, (packed.created_at, entry_id))
        if packed.key is not None:
            _discard(self._by_key, (packed.key, packed.created_at, entry_id))
        self._words.remove(entry_id)
        return True

    def clear(self) -> None:
        """Remove every entry."""
        self._entries.clear()
        self._by_time.clear()
        self._by_key.clear()
        self._words.clear()

    def with_key(self, key: str) -> list[MemoryEntry]:
        """Every live entry with exactly this key, oldest first (new objects)."""
        items = self._by_key
        position = bisect_left(items, (key,))
        now = utcnow()
        found: list[_Packed] = []
        while position < len(items) and items[position][0] == key:
            packed = self._entries[items[position][2]]
            if not packed.expired(now):
                found.append(packed)
            position += 1
        return [packed.unpack() for packed in found]

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
        ``limit`` of them (new objects: only those are built).  Entries of other
        users are skipped on the way, so a ``user_id`` read costs what it skips.
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
        found: list[_Packed] = []
        entries = self._entries
        now = utcnow()
        for position in positions:
            packed = entries[items[position][-1]]
            if packed.expired(now) or (user_id is not None and packed.user_id != user_id):
                continue
            found.append(packed)
            if limit is not None and len(found) >= limit:
                break
        return [packed.unpack() for packed in found]

    def search(self, request: SearchRequest) -> list[SearchHit]:
        """The live matches of ``request`` (tokenised match), best first, cut (new objects).

        Filtered and ranked on the packed fields (as :func:`~firefly_orm._search.best_hits`
        ranks: score, importance, ``created_at``, ``entry_id``, all descending);
        only the hits returned are built.
        """
        now, entries = utcnow(), self._entries
        ranked: list[tuple[float, float, datetime, str]] = []
        for entry_id, matched in self._words.counts(request.terms).items():
            packed = entries.get(entry_id)
            if packed is not None and packed.accepted_by(request, now):
                score = tokenised_score(matched, request)
                ranked.append((score, packed.importance, packed.created_at, entry_id))
        best = (
            sorted(ranked, reverse=True)
            if request.limit is None
            else heapq.nlargest(request.limit, ranked)
        )
        return [SearchHit(entries[i].unpack(), score) for score, _, _, i in best]


def _discard(items: list[Any], item: Any) -> None:
    position = bisect_left(items, item)
    if position < len(items) and items[position] == item:
        del items[position]
