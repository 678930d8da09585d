"""Long-term memory transactions: plain sync functions over one unit of work.

Each takes the unit of work first and the namespace explicitly, so another
layer can run them inside its own unit of work (promoting evicted turns in the
same unit of work as the eviction: :func:`store_items`).
:class:`~firefly_orm.long_term.LongTermMemory` runs each public operation as
one of them (:mod:`firefly_orm.bridges._steps`).

What each read costs (``N``: the live items of the owner read):

* ``get`` / ``forget``: one or two reads by primary key.
* ``recall``: one full-text search (an index lookup, :mod:`firefly_orm._search`),
  cut to ``limit``; with a ``tags``/``kind`` filter, searches in growing
  windows (``limit * 4``, then 4x larger, then every match past
  :data:`MAX_WINDOW`) until ``limit`` items pass the filter.
* ``list``: one indexed read of the newest ``offset + limit`` entries (the
  user's index with an owner), in growing windows with a filter.
* ``count``, ``clear(user)``, ``export`` and the limit after a write: one
  indexed read of the owner's ``N`` live items (the repository has no count
  and no importance order); with a limit, ``N`` is at most the limit plus
  what the write added.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from firefly_orm.entry import MemoryEntry
from firefly_orm.long_term._embedding import Embedded, vector_repository
from firefly_orm.long_term._model import (
    SEMANTIC,
    ItemDraft,
    MemoryItem,
    Recalled,
    item_from_entry,
    keyed_entry_id,
)
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "MAX_WINDOW",
    "ItemFilter",
    "clear_items",
    "count_items",
    "enforce_limit",
    "export_items",
    "find_entry",
    "forget_item",
    "import_items",
    "owned_entries",
    "read_item",
    "read_items",
    "recall_items",
    "store_items",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: A filtered read asks for ``limit * GROWTH`` rows first, then GROWTH times more.
GROWTH = 4
#: The smallest first window of a filtered read.
MIN_WINDOW = 16
#: Past this window a filtered read asks for every remaining row at once.
MAX_WINDOW = 4096


@dataclass(frozen=True)
class ItemFilter:
    """What ``list``, ``recall`` and ``count`` keep besides the owner.

    Attributes:
        tags: An item passes when it has every one of these tags.
        kind: An item passes when it is of this kind (``None``: any).
    """

    tags: tuple[str, ...] = ()
    kind: str | None = None

    @property
    def active(self) -> bool:
        """Whether anything is filtered."""
        return bool(self.tags) or self.kind is not None

    def matches(self, tags: Sequence[str], kind: str) -> bool:
        """Whether an item with these tags and this kind passes."""
        if self.kind is not None and kind != self.kind:
            return False
        return all(tag in tags for tag in self.tags)

    def accepts(self, item: MemoryItem) -> bool:
        """Whether ``item`` passes."""
        return self.matches(item.tags, item.kind)

    def accepts_content(self, content: Any) -> bool:
        """Whether the item whose entry ``content`` this is passes."""
        if not self.active:
            return True
        if not isinstance(content, dict):
            return False
        tags = content.get("tags")
        kind = content.get("kind") or SEMANTIC
        return self.matches(tags if isinstance(tags, list) else [], str(kind))


def _collect(
    fetch: Callable[[int | None], list[T]], need: int, accept: Callable[[T], bool]
) -> list[T]:
    """The first ``need`` rows that ``accept`` keeps, fetching growing windows.

    ``fetch(window)`` returns the first ``window`` rows (``None``: all), in
    order; it is asked again with a larger window while too few rows pass
    and more may exist.
    """
    window: int | None = max(need * GROWTH, MIN_WINDOW)
    while True:
        rows = fetch(window)
        kept = [row for row in rows if accept(row)]
        if len(kept) >= need or window is None or len(rows) < window:
            return kept[:need]
        window = window * GROWTH if window < MAX_WINDOW else None


# --------------------------------------------------------------------------- writes


def _eviction_order(entry: MemoryEntry) -> tuple[Any, ...]:
    """Least important first, then oldest (then the entry id, for a stable order)."""
    return (entry.importance, entry.created_at, entry.entry_id)


def owned_entries(uow: UnitOfWork, namespace: str, user_id: str | None) -> list[MemoryEntry]:
    """The live entries of ``user_id`` (``None``: the unowned ones) in ``namespace``."""
    entries = uow.entries.list(namespace, user_id=user_id)
    if user_id is None:
        entries = [e for e in entries if e.user_id is None]
    return entries


def enforce_limit(uow: UnitOfWork, namespace: str, user_id: str | None, limit: int) -> list[str]:
    """Evict the owner's items beyond ``limit``: least important, then oldest, first.

    The limit is per owner: a user's items count toward that user's limit
    only, and the unowned items share one.  Expired items are not counted
    (they are never returned, and ``cleanup_expired`` removes them).  The
    item just written is evicted itself when it ranks lowest.

    Returns:
        The evicted entry ids.
    """
    entries = owned_entries(uow, namespace, user_id)
    excess = len(entries) - limit
    if excess <= 0:
        return []
    victims = sorted(e.entry_id for e in heapq.nsmallest(excess, entries, key=_eviction_order))
    uow.entries.delete(namespace, victims)
    logger.info(
        "long-term memory %r: %d item(s) of %s over the limit of %d evicted",
        namespace,
        len(victims),
        "the unowned items" if user_id is None else f"user {user_id!r}",
        limit,
    )
    return victims


def store_items(
    uow: UnitOfWork,
    namespace: str,
    entries: Sequence[MemoryEntry],
    limit: int | None,
    embedded: Embedded | None = None,
) -> list[str]:
    """Save ``entries`` (upserts by id), their vectors, then apply ``limit`` to each owner.

    The transaction behind ``remember`` and ``import_items``; another layer
    may call it inside its own unit of work with entries built by
    :meth:`LongTermMemory.entry_for <firefly_orm.long_term.LongTermMemory.entry_for>`.
    ``embedded``: one vector per entry, in order (computed before the unit of
    work opened); the store must keep vectors
    (:class:`~firefly_orm.protocols.VectorRepository`), and the namespace's
    vectors must be of the same model, else nothing is written.  Entries the
    limit evicts take their vectors along.

    Returns:
        The entry ids evicted by the limit (possibly some of ``entries``).

    Raises:
        VectorUnavailableError: ``embedded`` on a store that keeps no vectors.
        EmbeddingMismatchError: The namespace holds another model's vectors.
    """
    vectors = None if embedded is None else vector_repository(uow)
    for entry in entries:
        uow.entries.save(namespace, entry)
    if vectors is not None and embedded is not None:
        by_id = {e.entry_id: v for e, v in zip(entries, embedded.vectors, strict=True)}
        vectors.save_vectors(namespace, embedded.spec, by_id)
    if limit is None:
        return []
    evicted: list[str] = []
    for user_id in dict.fromkeys(entry.user_id for entry in entries):
        evicted.extend(enforce_limit(uow, namespace, user_id, limit))
    return evicted


def find_entry(
    uow: UnitOfWork, namespace: str, ref: str, user_id: str | None
) -> MemoryEntry | None:
    """The live entry ``ref`` names: ``user_id``'s key ``ref``, else the entry with id ``ref``.

    With a ``user_id``, an id of another user's entry finds nothing.
    """
    entry = uow.entries.get(namespace, keyed_entry_id(namespace, user_id, ref))
    if entry is not None and entry.key == ref:
        return entry
    entry = uow.entries.get(namespace, ref)
    if entry is None or (user_id is not None and entry.user_id != user_id):
        return None
    return entry


def forget_item(uow: UnitOfWork, namespace: str, ref: str, user_id: str | None) -> bool:
    """Delete the item ``ref`` names (see :func:`find_entry`); whether there was one."""
    entry = find_entry(uow, namespace, ref, user_id)
    if entry is None:
        return False
    uow.entries.delete(namespace, entry.entry_id)
    logger.debug("long-term memory %r: forgot %s", namespace, entry.entry_id)
    return True


def clear_items(uow: UnitOfWork, namespace: str, user_id: str | None) -> None:
    """Delete ``user_id``'s live items, or with ``None`` every entry of the namespace."""
    if user_id is None:
        uow.entries.clear(namespace)
        return
    ids = [e.entry_id for e in uow.entries.list(namespace, user_id=user_id)]
    uow.entries.delete(namespace, ids)


def import_items(
    uow: UnitOfWork,
    namespace: str,
    drafts: Sequence[ItemDraft],
    entries: Sequence[MemoryEntry],
    limit: int | None,
    embedded: Embedded | None = None,
) -> list[str]:
    """Write imported items (``entries[i]`` built from ``drafts[i]``); return their ids.

    An unkeyed item whose exported id is already an entry of this namespace
    with the same owner replaces it (a backup restored over itself); any other
    unkeyed item with an id gets an id derived from it (so importing the same
    file twice writes each item once, ids never clash with another namespace's
    entries, and an import never overwrites another owner's item).
    """
    written: list[MemoryEntry] = []
    for draft, entry in zip(drafts, entries, strict=True):
        source = draft.source_id
        if draft.key is None and source is not None:
            existing = uow.entries.get(namespace, source)
            if existing is not None and existing.user_id == entry.user_id:
                entry = entry.copy_entry(entry_id=source)
        written.append(entry)
    store_items(uow, namespace, written, limit, embedded)
    return [entry.entry_id for entry in written]


# --------------------------------------------------------------------------- reads


def read_item(uow: UnitOfWork, namespace: str, ref: str, user_id: str | None) -> MemoryItem | None:
    """The item ``ref`` names (see :func:`find_entry`), or ``None``."""
    entry = find_entry(uow, namespace, ref, user_id)
    return None if entry is None else item_from_entry(entry)


def read_items(
    uow: UnitOfWork,
    namespace: str,
    user_id: str | None,
    limit: int | None,
    offset: int,
    where: ItemFilter,
) -> list[MemoryItem]:
    """Items newest first, ``offset`` skipped, at most ``limit`` (``None``: all)."""

    def fetch(window: int | None) -> list[MemoryItem]:
        entries = uow.entries.list(namespace, user_id=user_id, newest_first=True, limit=window)
        return [item_from_entry(e) for e in entries]

    if limit is None:
        items = [item for item in fetch(None) if where.accepts(item)]
    elif not where.active:
        items = fetch(offset + limit)
    else:
        items = _collect(fetch, offset + limit, where.accepts)
    return items[offset:] if limit is None else items[offset : offset + limit]


def recall_items(
    uow: UnitOfWork,
    namespace: str,
    query: str,
    *,
    limit: int,
    min_importance: float | None,
    user_id: str | None,
    language: str | None,
    where: ItemFilter,
) -> list[Recalled]:
    """The best ``limit`` matches of ``query``: relevance, then importance, then newest."""

    def fetch(window: int | None) -> list[Recalled]:
        hits = uow.entries.search(
            namespace,
            query,
            limit=window,
            user_id=user_id,
            min_importance=min_importance,
            language=language,
        )
        return [Recalled(item_from_entry(hit.entry), hit.score) for hit in hits]

    if limit == 0:
        return []
    if not where.active:
        return fetch(limit)
    return _collect(fetch, limit, lambda found: where.accepts(found.item))


def count_items(uow: UnitOfWork, namespace: str, user_id: str | None, where: ItemFilter) -> int:
    """How many live items ``user_id`` (``None``: every owner) has that pass ``where``."""
    contents = uow.entries.list_contents(namespace, user_id=user_id)
    return sum(1 for content in contents if where.accepts_content(content))


def export_items(uow: UnitOfWork, namespace: str, user_id: str | None) -> list[dict[str, Any]]:
    """Every live item of ``user_id`` (``None``: every owner), oldest first, as dicts."""
    return [item_from_entry(e).to_dict() for e in uow.entries.list(namespace, user_id=user_id)]
