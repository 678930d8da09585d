"""The :class:`LongTermMemory` class: validates inputs and runs one unit of work per operation.

Each public method is defined once, as an operation method ``_<name>``
(:mod:`firefly_orm.bridges._steps`); ``<name>`` and ``async_<name>`` are
derived from it.  The transactions are in :mod:`firefly_orm.long_term._ops`.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from firefly_orm._layout import layer_of_namespace
from firefly_orm._maintenance import refresh_statistics
from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    retrying,
    sync_method,
)
from firefly_orm.conversation._model import check_int
from firefly_orm.conversation._search import check_mode
from firefly_orm.entry import (
    MemoryEntry,
    validate_namespace,
    validate_search_language,
    validate_user_id,
)
from firefly_orm.entry._rules import check_bound_user
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import _ops as ops
from firefly_orm.long_term._daily import DailyLogs, store_and_log
from firefly_orm.long_term._embedding import Embedded, Embedding, as_embedder
from firefly_orm.long_term._model import (
    SEMANTIC,
    ItemDraft,
    MemoryItem,
    Recalled,
    check_kind,
    check_ref,
    check_tags,
    parse_import_item,
)
from firefly_orm.long_term._recall import (
    RecallMode,
    RecallRequest,
    run_recall,
)
from firefly_orm.store import InMemoryStore, MemoryStore

if TYPE_CHECKING:
    from firefly_orm.long_term._embedding import EmbedderLike

__all__ = ["DEFAULT_NAMESPACE", "MAX_RETENTION_DAYS", "LongTermMemory"]

logger = logging.getLogger(__name__)

#: The namespace a :class:`LongTermMemory` uses unless told otherwise.
DEFAULT_NAMESPACE = "long-term"
#: The longest ``episodic_retention_days`` accepted (100 years).
MAX_RETENTION_DAYS = 36_525


def _check_limit(limit: Any) -> int | None:
    if limit is None:
        return None
    return check_int("long_term_limit", limit, 1)


def _check_retention(days: Any) -> timedelta | None:
    if days is None:
        return None
    if (
        isinstance(days, bool)
        or not isinstance(days, int | float)
        or not math.isfinite(days)
        or days <= 0
    ):
        raise EntryValidationError(
            "episodic_retention_days", f"must be a positive number of days, got {days!r}"
        )
    if days > MAX_RETENTION_DAYS:
        raise EntryValidationError(
            "episodic_retention_days",
            f"must be at most {MAX_RETENTION_DAYS} (100 years; None keeps them), got {days!r}",
        )
    return timedelta(days=days)


def _check_min_importance(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise EntryValidationError("min_importance", f"must be a number, got {value!r}")
    return None if value <= 0.0 else float(value)


def _own_namespace(namespace: Any) -> str:
    """``namespace`` validated, and not one of another layer's (where items would be
    read as that layer's rows: a turn, a fact, a workspace file)."""
    checked: str = validate_namespace(namespace)
    layer = layer_of_namespace(checked)
    if layer is not None:
        raise EntryValidationError(
            "namespace", f"{checked!r} holds the {layer} layer's rows; pick one of your own"
        )
    return checked


class LongTermMemory(DailyLogs, MemoryLayer):
    """Facts and events kept beyond a conversation, found again by what they say.

    Every item is one entry of scope ``LONG_TERM`` in ``namespace`` (layout:
    :mod:`firefly_orm.long_term._model`); every operation is one unit of work
    (one database transaction on SQL), sync or async (``async_<name>``).

    Owners: each item belongs to a user (``user_id``) or to nobody.  A method's
    ``user_id`` argument, else the memory's ``user_id``, picks the owner:
    ``remember`` writes for it, ``recall``/``list``/``count``/``export_items``
    read only its items, ``get``/``forget`` resolve keys among its items (and
    refuse ids of other users' items), and ``clear`` deletes only its items.
    With neither set, reads and ``clear`` cover every owner of the namespace,
    and keys name the unowned items.  Bind a memory to a user for isolation:
    a bound memory serves that user only (a ``user_id`` argument naming
    another user raises ``EntryValidationError``, nothing read or written).

    Args:
        store: Where items live; a new :class:`~firefly_orm.store.InMemoryStore`
            when ``None``.
        namespace: The store namespace of the items (default
            :data:`DEFAULT_NAMESPACE`); memories that should share items use
            the same one.  Another layer's namespaces (``conversation:...``,
            ``working:...``, ``artifacts...``) are refused.
        user_id: The default owner (see above).
        language: The PostgreSQL text-search configuration items are indexed
            and searched with (``"english"``: stemming and stop words); ``None``
            is ``"simple"``.  Other stores match words as written.  Keep it the
            same for a namespace: items are searched with the language of the
            memory that recalls.
        long_term_limit: At most this many live items per owner; after each
            write the least important, then oldest, items beyond it are
            evicted in the same unit of work (the item just written too, when
            it ranks lowest).  Writers of one owner racing at the limit (outside
            SQLite, which runs one writer at a time) can leave a few items
            over it, until that owner's next write.  ``None``: no limit.
        episodic_retention_days: Episodic items without an ``expires_at``
            expire this many days (a float) after they are remembered; expired
            items are never returned and ``cleanup_expired`` on the store (or
            MongoDB's TTL index) removes them.  ``None``: they do not expire.
        embedder: Recall by meaning too (semantic and hybrid recall,
            :mod:`firefly_orm.vector`): a pydantic-ai ``Embedder``, an
            ``EmbeddingModel``, or a model name such as
            ``"openai:text-embedding-3-small"``.  What is remembered is
            embedded (in batches, before the unit of work opens) and its vector
            stored beside the item, in the same unit of work; ``recall``
            defaults to ``mode="hybrid"``.  The store must keep vectors
            (``SQLiteStore``/``PostgreSQLStore`` with ``vectors=True``, or the
            in-process and MongoDB stores), and one namespace keeps one model's
            vectors.  ``None``: text recall only.

    Example:
        >>> ltm = LongTermMemory(user_id="ada")
        >>> _ = ltm.remember("Ada prefers tea over coffee", importance=0.8, tags=["drinks"])
        >>> [r.item.text for r in ltm.recall("what does Ada drink? tea or coffee")]
        ['Ada prefers tea over coffee']
    """

    def __init__(
        self,
        *,
        store: MemoryStore | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        user_id: str | None = None,
        language: str | None = None,
        long_term_limit: int | None = None,
        episodic_retention_days: float | None = None,
        embedder: EmbedderLike | None = None,
    ) -> None:
        self._namespace = _own_namespace(namespace)
        self._embedding = None if embedder is None else Embedding(as_embedder(embedder))
        self._user_id = None if user_id is None else validate_user_id(user_id)
        self._language = (
            None if language is None else validate_search_language(language, "language")
        )
        self._limit = _check_limit(long_term_limit)
        self._retention = _check_retention(episodic_retention_days)
        self._retention_days = episodic_retention_days
        super().__init__(store if store is not None else InMemoryStore())

    # ------------------------------------------------------------------ settings
    @property
    def namespace(self) -> str:
        """The store namespace of the items."""
        return self._namespace

    @property
    def user_id(self) -> str | None:
        """The default owner of what this memory writes and reads."""
        return self._user_id

    @property
    def language(self) -> str | None:
        """The text-search configuration (``None``: ``"simple"``)."""
        return self._language

    @property
    def long_term_limit(self) -> int | None:
        """At most this many live items per owner (``None``: no limit)."""
        return self._limit

    @property
    def episodic_retention_days(self) -> float | None:
        """How long episodic items live, in days (``None``: forever)."""
        return self._retention_days

    @property
    def embedder(self) -> Any:
        """The pydantic-ai ``Embedder`` of semantic recall (``None``: text recall only)."""
        return None if self._embedding is None else self._embedding.embedder

    def _embed(self, entries: builtins.list[MemoryEntry]) -> Operation[Embedded | None]:
        """The vectors of ``entries``' texts (none without an embedder, or without entries)."""
        if self._embedding is None or not entries:
            return None
        return (yield from self._embedding.entries([e.search_text or "" for e in entries]))

    def __repr__(self) -> str:
        return (
            f"LongTermMemory(namespace={self._namespace!r}, user_id={self._user_id!r}, "
            f"language={self._language!r}, long_term_limit={self._limit}, "
            f"episodic_retention_days={self._retention_days}, "
            f"store={type(self._store).__name__})"
        )

    @staticmethod
    def recall_floor(min_importance: Any) -> float | None:
        """``min_importance`` checked as :meth:`recall` takes it (``None``: no floor)."""
        return _check_min_importance(min_importance)

    # ------------------------------------------------------------------ shared core
    def _owner(self, user_id: Any) -> str | None:
        """``user_id`` if given (checked), else the memory's default owner.

        Raises:
            EntryValidationError: A bad ``user_id``, or (this memory being bound
                to a user) another user's.
        """
        if user_id is None:
            return self._user_id
        return check_bound_user(user_id, self._user_id, "memory")

    def _own_draft(self, draft: ItemDraft, position: int) -> ItemDraft:
        """``draft`` as this memory imports it: a bound memory's user owns it."""
        if self._user_id is None:
            return draft
        if draft.user_id is None:
            return dataclasses.replace(draft, user_id=self._user_id)
        if draft.user_id != self._user_id:
            raise EntryValidationError(
                f"items[{position}].user_id", f"this memory serves user {self._user_id!r} only"
            )
        return draft

    def _filter(self, tags: Any, kind: Any) -> ops.ItemFilter:
        return ops.ItemFilter(
            tags=check_tags(tags), kind=None if kind is None else check_kind(kind)
        )

    def entry_for(
        self,
        content: str,
        *,
        importance: float = 0.5,
        tags: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
        key: str | None = None,
        user_id: str | None = None,
        expires_at: datetime | None = None,
        kind: str = SEMANTIC,
    ) -> MemoryEntry:
        """The validated entry :meth:`remember` would write (no I/O).

        For a layer that writes items inside its own unit of work with
        :func:`~firefly_orm.long_term._ops.store_items` (same arguments as
        :meth:`remember`).
        """
        draft = ItemDraft.build(
            content,
            importance=importance,
            tags=tags,
            kind=kind,
            metadata=metadata,
            key=key,
            user_id=self._owner(user_id),
            expires_at=expires_at,
            retention=self._retention,
        )
        return draft.entry(self._namespace, draft.entry_id(self._namespace), self._language)

    # ------------------------------------------------------------------ operations
    def _remember(
        self,
        content: str,
        *,
        importance: float = 0.5,
        tags: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
        key: str | None = None,
        user_id: str | None = None,
        expires_at: datetime | None = None,
        kind: str = SEMANTIC,
    ) -> Operation[str]:
        """Remember ``content``; return the item's id.

        With a ``key`` it is an upsert: the owner's item with that key is
        replaced entirely (text, importance, tags, metadata, expiry) and its
        ``created_at`` becomes now; the id stays the same.  With
        ``long_term_limit``, the owner's items beyond it are evicted in the
        same unit of work.

        Args:
            content: The text to remember (searched by :meth:`recall`), at most
                100,000 characters.
            importance: 0.0-1.0: ranks equally relevant recall results, and the
                least important items are evicted first.
            tags: Strings to filter :meth:`recall`, :meth:`list` and :meth:`count` by.
            metadata: A JSON object kept with the item.
            key: Makes the item addressable (and replaceable) by this key.
            user_id: The owner (default: the memory's ``user_id``).
            expires_at: A timezone-aware time after which the item is gone;
                episodic items default to now + ``episodic_retention_days``.
            kind: ``"semantic"`` (default) or ``"episodic"``.

        Raises:
            EntryValidationError: A bad argument; nothing is written.
        """
        entry = self.entry_for(
            content,
            importance=importance,
            tags=tags,
            metadata=metadata,
            key=key,
            user_id=user_id,
            expires_at=expires_at,
            kind=kind,
        )
        embedded = yield from self._embed([entry])
        yield from retrying(  # the item and its daily-log line, in one unit of work
            Transaction.write(store_and_log, self._namespace, [entry], self._limit, embedded)
        )
        logger.debug("long-term memory %r: remembered %s", self._namespace, entry.entry_id)
        return entry.entry_id

    def _forget(self, id_or_key: str, *, user_id: str | None = None) -> Operation[bool]:
        """Delete an item by key (the owner's) or by id; whether one was deleted.

        A key is looked up first, then an id; with an owner (``user_id`` or
        the memory's), another user's item is never deleted.
        """
        ref, owner = check_ref(id_or_key), self._owner(user_id)
        return (
            yield from retrying(Transaction.write(ops.forget_item, self._namespace, ref, owner))
        )

    def _get(self, id_or_key: str, *, user_id: str | None = None) -> Operation[MemoryItem | None]:
        """The item with this key (the owner's) or id, or ``None`` (as :meth:`forget` finds it)."""
        ref, owner = check_ref(id_or_key), self._owner(user_id)
        return (yield from Transaction.read(ops.read_item, self._namespace, ref, owner))

    def _list(
        self,
        *,
        user_id: str | None = None,
        limit: int | None = 50,
        offset: int = 0,
        tags: Iterable[str] | None = None,
        kind: str | None = None,
    ) -> Operation[builtins.list[MemoryItem]]:
        """The owner's items, newest first, ``offset`` skipped, at most ``limit`` (``None``: all).

        ``tags``: only items with every one of these tags; ``kind``: only items
        of this kind.
        """
        owner, where = self._owner(user_id), self._filter(tags, kind)
        limit = None if limit is None else check_int("limit", limit, 0)
        offset = check_int("offset", offset, 0)
        return (
            yield from Transaction.read(
                ops.read_items, self._namespace, owner, limit, offset, where
            )
        )

    def _recall(
        self,
        query: str,
        *,
        limit: int = 5,
        min_importance: float = 0.0,
        tags: Iterable[str] | None = None,
        user_id: str | None = None,
        kind: str | None = None,
        mode: RecallMode | None = None,
    ) -> Operation[builtins.list[Recalled]]:
        """The owner's items that match ``query`` best, as :class:`Recalled` (item, score).

        ``mode`` (:mod:`firefly_orm.long_term._recall`): ``"text"`` ranks by
        text relevance, then importance, then recency (one full-text search,
        :mod:`firefly_orm._search`); ``"semantic"`` by the cosine similarity of
        the query's vector and the items' (needs an ``embedder``); ``"hybrid"``
        fuses both rankings by reciprocal rank.  ``None`` (default):
        ``"hybrid"`` with an embedder, else ``"text"``.  The query is embedded
        before the unit of work opens.  ``query`` is plain text: quotes,
        operators and other search syntax are only word separators; a query
        without words finds nothing by text, a blank one nothing at all.  Items
        below ``min_importance``, and with ``tags``/``kind``, items without
        every tag or of another kind, are left out inside the searches; still
        up to ``limit`` items are returned when that many match.

        Raises:
            EntryValidationError: A bad argument, or a mode that needs an
                embedder without one (nothing is read).
            StoreError: The store cannot search (see :func:`firefly_orm.uow.supports_search`).
            VectorUnavailableError: ``"semantic"``/``"hybrid"`` on a store that
                keeps no vectors.
            EmbeddingMismatchError: The namespace's vectors are another model's.
        """
        if not isinstance(query, str):
            raise EntryValidationError("query", f"must be a str, got {type(query).__name__}")
        limit = check_int("limit", limit, 0)
        floor = _check_min_importance(min_importance)
        owner, where = self._owner(user_id), self._filter(tags, kind)
        request = RecallRequest(
            self._namespace, query, limit, floor, owner, self._language, where, self._mode(mode)
        )
        if request.mode != "text" and self._embedding is not None:
            if limit == 0 or not query.strip():
                return []
            meaning = yield from self._embedding.query(query)
            request = dataclasses.replace(request, meaning=meaning)
        return (yield from Transaction.read(run_recall, request))

    def _mode(self, mode: Any) -> RecallMode:
        """``mode`` checked (``None``: hybrid with an embedder, else text)."""
        return check_mode(
            mode,
            embedder=self._embedding is not None,
            what="recall",
            where="LongTermMemory(..., embedder=...)",
        )

    def _count(
        self,
        *,
        user_id: str | None = None,
        tags: Iterable[str] | None = None,
        kind: str | None = None,
    ) -> Operation[int]:
        """How many live items the owner has (with ``tags``/``kind``: that pass them)."""
        owner, where = self._owner(user_id), self._filter(tags, kind)
        return (yield from Transaction.read(ops.count_items, self._namespace, owner, where))

    def _clear(self, *, user_id: str | None = None) -> Operation[None]:
        """Delete the owner's items; without any owner, every entry of the namespace.

        Expired items of a user stay until ``cleanup_expired`` (they are
        never returned); to remove everything a user left in every namespace,
        use ``erase_user``.
        """
        owner = self._owner(user_id)
        yield from retrying(Transaction.write(ops.clear_items, self._namespace, owner))
        logger.info(
            "long-term memory %r: cleared %s",
            self._namespace,
            "every item" if owner is None else f"the items of user {owner!r}",
        )

    def _export_items(
        self, *, user_id: str | None = None
    ) -> Operation[builtins.list[dict[str, Any]]]:
        """The owner's live items, oldest first, as JSON-ready dicts (``MemoryItem.to_dict``)."""
        owner = self._owner(user_id)
        return (yield from Transaction.read(ops.export_items, self._namespace, owner))

    def _import_items(
        self, items: Iterable[Mapping[str, Any] | MemoryItem]
    ) -> Operation[builtins.list[str]]:
        """Write exported items (dicts or :class:`MemoryItem`), all or nothing; return their ids.

        Every item is checked first (a bad one raises
        :class:`EntryValidationError` naming ``items[i].<field>``, nothing
        written), then all are written in one unit of work, each keeping its
        owner, times and key; ``long_term_limit`` then applies per owner.  A
        keyed item replaces the owner's item with that key; an unkeyed item
        replaces the entry with its id when that is in this namespace, else
        gets an id derived from it, so importing a file twice writes each item
        once.  Two items naming the same item are refused.  The ids are
        returned in the order of ``items``.  A memory bound to a user imports
        items for that user only: items without an owner become the user's,
        another owner's item is refused (``items[i].user_id``, nothing written).
        """
        if isinstance(items, Mapping | str | bytes):
            raise EntryValidationError("items", "must be a list of item dicts")
        drafts = [self._own_draft(parse_import_item(data, i), i) for i, data in enumerate(items)]
        entries: builtins.list[MemoryEntry] = []
        seen: dict[str, int] = {}
        for i, draft in enumerate(drafts):
            try:
                entry = draft.entry(
                    self._namespace, draft.entry_id(self._namespace), self._language
                )
            except EntryValidationError as exc:
                message = str(exc).removeprefix(f"{exc.field}: ")
                raise EntryValidationError(f"items[{i}].{exc.field}", message) from None
            first = seen.setdefault(entry.entry_id, i)
            if first != i:
                raise EntryValidationError(f"items[{i}]", f"names the same item as items[{first}]")
            entries.append(entry)
        embedded = yield from self._embed(entries)
        ids = yield from retrying(
            Transaction.write(
                ops.import_items, self._namespace, drafts, entries, self._limit, embedded
            )
        )
        logger.info("long-term memory %r: imported %d item(s)", self._namespace, len(ids))
        yield from refresh_statistics(len(ids))
        return ids

    # ------------------------------------------------------------------ public forms
    remember = sync_method(_remember)
    forget = sync_method(_forget)
    get = sync_method(_get)
    list = sync_method(_list)
    recall = sync_method(_recall)
    count = sync_method(_count)
    clear = sync_method(_clear)
    export_items = sync_method(_export_items)
    import_items = sync_method(_import_items)

    async_remember = async_method(_remember)
    async_forget = async_method(_forget)
    async_get = async_method(_get)
    async_list = async_method(_list)
    async_recall = async_method(_recall)
    async_count = async_method(_count)
    async_clear = async_method(_clear)
    async_export_items = async_method(_export_items)
    async_import_items = async_method(_import_items)
