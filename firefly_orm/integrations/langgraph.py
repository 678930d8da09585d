"""A LangGraph ``BaseStore`` on any firefly_orm store.

:class:`FireflyStore` implements LangGraph's long-term memory store
(``langgraph.store.base.BaseStore``: ``batch`` / ``abatch`` over ``GetOp``,
``PutOp``, ``SearchOp`` and ``ListNamespacesOp``, and so ``get``, ``put``,
``delete``, ``search``, ``list_namespaces`` and their async twins), so a graph
compiled with ``store=`` (and the tools that read ``get_store()``) keeps its
items in SQLite, PostgreSQL, MongoDB, Redis, files or memory.  Install the
``langgraph`` extra.

::

    from firefly_orm import SQLiteStore
    from firefly_orm.integrations.langgraph import FireflyStore

    store = FireflyStore(SQLiteStore("memory.sqlite3"))
    store.put(("users", "ada"), "prefs", {"food": "Ada likes spicy ramen"})
    store.search(("users",), query="ramen")

Layout: every item is one entry of one firefly_orm namespace (``namespace=``,
default :data:`DEFAULT_NAMESPACE`), of scope ``long_term``.  The LangGraph
namespace and key make the entry's key, ``"users.ada..prefs"`` (each label and
a ``.``, then ``.`` and the key: labels never hold a ``.``, so the first
``..`` ends the namespace), so a namespace prefix is a key prefix, one index
range.  The value is the entry's JSON content; ``updated_at`` and the TTL are
in its metadata; ``created_at`` is the entry's own.  The entry id is derived
from the namespace, owner and key, so a put is one upsert.

* **One batch, one unit of work** when it writes: its operations run in
  order inside it (a get after a put of the same batch sees the put), and an
  operation that fails (a value that is not JSON, a bad namespace) rolls the
  whole batch back.  Ops are checked before anything is read or written.  A
  batch without puts reads in one read-only unit of work.
* **Search with** ``query`` is the store's full-text search
  (:mod:`firefly_orm._search`: PostgreSQL ``tsvector``, SQLite FTS5, word
  indexes elsewhere) over the item's text: the string values of the fields
  ``index`` names (the store's ``index_fields``, by default the whole value;
  ``index=False``: not found by a query, still by filters), ranked by
  relevance, ``score`` set.  Without ``query``: the newest updates first,
  ``score`` ``None``.  ``filter`` (equality, nested objects, dotted keys, ``$eq``,
  ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``), then ``offset`` and ``limit``, are
  applied in this process to the matches.
* **Search by meaning** (``index=``, LangGraph's ``IndexConfig``; the
  embedders taken are listed under :class:`FireflyStore`):
  the texts of a batch's puts are embedded in one call before its unit of
  work opens; each vector is stored with its item in that unit of work
  (our vector layer, :class:`~firefly_orm.protocols.VectorRepository`) and
  deleted with it (a put with ``index=False`` over an embedded item drops the
  old vector).  A search with ``query`` embeds it (before the read) and ranks
  by cosine similarity (``query_mode="semantic"``, the ``score``) or fuses
  that ranking with the full-text one by reciprocal rank (``"hybrid"``);
  ``filter``, ``offset`` and ``limit`` then apply as above.  Items without a
  vector are found by a query only in hybrid mode.
* **TTL** (``supports_ttl``): a put's ``ttl`` (minutes; ``ttl=`` config's
  ``default_ttl``) sets the entry's ``expires_at``; expired items are never
  read (``omit_expired`` always holds) and the store's own ``cleanup_expired``
  (``firefly-orm cleanup-expired``) deletes them: there is no sweeper thread.
  A get or search with ``refresh_ttl`` pushes the expiry of the items it
  returns (in the batch's unit of work when the batch writes, else in one
  more, best effort: an item changed meanwhile keeps its own expiry).
* **An owner** (``user_id=``): items are written as that user's, and only
  that user's are read, so :meth:`~firefly_orm.conversation.ConversationMemory.erase_user`
  (``uow.entries.erase_user``) removes them with the rest of the user's data.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path

from firefly_orm._layout import layer_of_namespace
from firefly_orm.bridges._steps import Operation, Transaction, arun, run
from firefly_orm.entry import (
    MAX_SEARCH_TEXT_LENGTH,
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    utcnow,
    validate_namespace,
    validate_search_language,
    validate_user_id,
)
from firefly_orm.errors import ConcurrencyError, EntryValidationError
from firefly_orm.integrations._langgraph_index import QueryMode, SearchIndex, search_index
from firefly_orm.long_term._embedding import vector_repository
from firefly_orm.protocols import UnitOfWork
from firefly_orm.store import MemoryStore
from firefly_orm.vector._spec import EmbeddingSpec, fuse_by

__all__ = ["DEFAULT_NAMESPACE", "FireflyStore"]

logger = logging.getLogger("firefly_orm")

#: The firefly_orm namespace a :class:`FireflyStore` keeps its items in unless told otherwise.
DEFAULT_NAMESPACE = "langgraph-store"
#: Metadata fields of an item's entry.
_UPDATED_AT, _TTL = "updated_at", "ttl_minutes"
#: The comparison operators a search filter may use.
_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


class FireflyStore(BaseStore):
    """A LangGraph store whose items are entries of a firefly_orm store.

    Args:
        store: Any firefly_orm store (its transactions, migrations and
            ``erase_user`` apply).
        namespace: The firefly_orm namespace of the items (default
            :data:`DEFAULT_NAMESPACE`); stores that share it share items.
            Another layer's namespaces (``conversation:...``, ``working:...``,
            ``artifacts...``) are refused.
        user_id: The owner of every item written, and the only owner read.
        index_fields: The fields whose text a query searches when a put does
            not say (``index=None``); paths as LangGraph's (``"a.b"``,
            ``"items[*].text"``); default ``["$"]``, every string of the value.
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes) for puts
            that give none, ``refresh_on_read`` (default ``True``).
            ``sweep_interval_minutes`` is not supported (use the store's
            ``cleanup_expired``); ``omit_expired`` always holds.
        language: The PostgreSQL text-search configuration of the items' text
            and of queries (default ``"simple"``).
        index: LangGraph's ``IndexConfig`` for search by meaning: ``dims``,
            ``embed`` (a LangChain ``Embeddings``, a sync or async function of a
            list of texts, a ``"provider:model"`` string as LangGraph reads it,
            or a pydantic-ai ``Embedder`` / ``EmbeddingModel``) and ``fields``
            (as ``index_fields``; give one of the two).  The store must keep
            vectors (``SQLiteStore`` / ``PostgreSQLStore`` with ``vectors=True``,
            ``InMemoryStore``, ``FileStore``, ``MongoDBStore``).
        query_mode: With ``index``, how a search with ``query`` ranks:
            ``"semantic"`` (default, as LangGraph's stores: cosine similarity,
            the ``score``) or ``"hybrid"`` (the vector and the full-text
            rankings fused by reciprocal rank, the fused score; an item without
            a vector is still found by its words).

    Raises:
        EntryValidationError: A bad ``namespace``, ``user_id``, ``language``,
            ``ttl``, ``index`` or ``query_mode``.
        TypeError: ``store`` is a LangGraph store, ``index_fields`` is not a list
            of strings, or both ``index_fields`` and ``index["fields"]`` are given.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: MemoryStore,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        user_id: str | None = None,
        index_fields: Sequence[str] | None = None,
        ttl: TTLConfig | None = None,
        language: str | None = None,
        index: IndexConfig | Mapping[str, Any] | None = None,
        query_mode: QueryMode = "semantic",
    ) -> None:
        if isinstance(store, BaseStore):
            raise TypeError("store must be a firefly_orm store, not a LangGraph store")
        self._store = store
        self._namespace = _own_namespace(namespace)
        self._user_id = None if user_id is None else validate_user_id(user_id)
        self._index: SearchIndex | None = search_index(index, query_mode)
        if self._index is not None and self._index.fields is not None:
            if index_fields is not None:
                raise TypeError("give index_fields or index['fields'], not both")
            index_fields = self._index.fields
        self._fields = _check_fields(["$"] if index_fields is None else index_fields)
        self._language = None if language is None else validate_search_language(language)
        self.ttl_config = _check_ttl(ttl)

    @property
    def store(self) -> MemoryStore:
        """The firefly_orm store the items live in."""
        return self._store

    @property
    def namespace(self) -> str:
        """The firefly_orm namespace of the items."""
        return self._namespace

    @property
    def user_id(self) -> str | None:
        """The owner of the items this store reads and writes, or ``None``."""
        return self._user_id

    def __repr__(self) -> str:
        return (
            f"FireflyStore(store={type(self._store).__name__}, namespace={self._namespace!r}, "
            f"user_id={self._user_id!r})"
        )

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; one result per op (see the module docstring).

        Raises:
            InvalidNamespaceError: A bad namespace label (nothing read or written).
            EntryValidationError: A value that cannot be stored (nothing written).
            TypeError: An op or a value of the wrong type (nothing read or written).
        """
        return run(self._store, self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of :meth:`batch`."""
        return await arun(self._store, self._batch(list(ops)))

    # ------------------------------------------------------------------ the operation
    def _batch(self, ops: list[Op]) -> Operation[list[Result]]:
        checked = [self._checked(op) for op in ops]
        plan = _Batch(self, checked, utcnow())
        if self._index is not None:  # embedded before any unit of work opens
            yield from self._embed(plan, self._index)
        if any(isinstance(op, PutOp) for op in ops):
            return (yield from Transaction.write(plan.run, refresh=True))
        results = yield from Transaction.read(plan.run, refresh=False)
        if plan.to_refresh:
            try:
                yield from Transaction.write(plan.refresh)
            except ConcurrencyError:  # an item written meanwhile keeps its own expiry
                logger.debug("langgraph store: a TTL refresh lost a race; skipped")
        return results

    def _checked(self, op: Any) -> Op:
        """``op`` if it is a LangGraph op with good namespaces and values, else raise."""
        if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
            raise TypeError(f"not a LangGraph store op: {type(op).__name__}")
        validate_op_namespace(op)
        if isinstance(op, GetOp | PutOp):
            if not op.namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
            if not isinstance(op.key, str) or "\x00" in op.key:
                raise EntryValidationError("key", "must be a string without NUL characters")
        if isinstance(op, PutOp):
            if op.namespace[0] == "langgraph":
                raise InvalidNamespaceError(
                    f'Root label for namespace cannot be "langgraph". Got: {op.namespace}'
                )
            if op.value is not None and not isinstance(op.value, Mapping):
                raise TypeError(f"a value must be a mapping or None, got {type(op.value).__name__}")
            if op.index not in (None, False):
                _check_fields(op.index)
            _check_minutes("ttl", op.ttl)
        if isinstance(op, SearchOp | ListNamespacesOp):
            _check_page(op.limit, op.offset)
        if isinstance(op, SearchOp) and op.filter is not None and not isinstance(op.filter, dict):
            raise TypeError("a search filter must be a dict")
        return op

    def _embed(self, plan: _Batch, index: SearchIndex) -> Operation[None]:
        """Embed the texts of the batch's puts (one call) and its queries into ``plan``."""
        texts: dict[int, str] = {}
        for position, op in enumerate(plan.ops):
            if isinstance(op, PutOp) and op.value is not None and op.index is not False:
                text = _text(op.value, self._fields if op.index is None else op.index)
                if text:
                    texts[position] = text
        if texts:
            spec, vectors = yield from index.documents(list(texts.values()))
            plan.vectors = {p: (spec, v) for p, v in zip(texts, vectors, strict=True)}
        for op in plan.ops:
            if isinstance(op, SearchOp) and op.query and op.query not in plan.queries:
                plan.queries[op.query] = yield from index.query(op.query)

    def _entry_id(self, key: str) -> str:
        return derived_entry_id(self._namespace, f"{self._user_id or ''}\x00{key}")

    def _owned(self, entry: MemoryEntry) -> bool:
        return entry.user_id == self._user_id

    def _refreshes(self, asked: bool) -> bool:
        config = self.ttl_config or {}
        return asked and bool(config.get("refresh_on_read", True))

    def _entry(
        self, op: PutOp, value: Mapping[str, Any], old: MemoryEntry | None, now: datetime
    ) -> MemoryEntry:
        """The entry a put writes."""
        metadata: dict[str, Any] = {_UPDATED_AT: now.isoformat()}
        if op.ttl is not None:
            metadata[_TTL] = op.ttl
        fields = self._fields if op.index is None else op.index
        key = entry_key(op.namespace, op.key)
        return MemoryEntry.from_dict(
            dict(
                entry_id=self._entry_id(key),
                namespace=self._namespace,
                scope=MemoryScope.LONG_TERM,
                key=key,
                content=dict(value),
                metadata=metadata,
                created_at=old.created_at if old is not None else now,
                expires_at=None if op.ttl is None else now + timedelta(minutes=op.ttl),
                user_id=self._user_id,
                search_text=None if fields is False else _text(value, fields),
                search_language=self._language,
            )
        )


@dataclass
class _Batch:
    """One batch run in one unit of work: its ops, its clock, the items to refresh after."""

    owner: FireflyStore
    ops: list[Op]
    now: datetime
    to_refresh: dict[str, MemoryEntry] = field(default_factory=dict)
    #: The vector of each put (by position in ``ops``) that has one.
    vectors: dict[int, tuple[EmbeddingSpec, tuple[float, ...]]] = field(default_factory=dict)
    #: The vector of each search query.
    queries: dict[str, tuple[EmbeddingSpec, tuple[float, ...]]] = field(default_factory=dict)

    def run(self, uow: UnitOfWork, *, refresh: bool) -> list[Result]:
        results = [self._one(uow, position, op) for position, op in enumerate(self.ops)]
        if refresh and self.to_refresh:
            self.refresh(uow)
        return results

    def refresh(self, uow: UnitOfWork) -> None:
        """Push the expiry of the items read with ``refresh_ttl`` (unchanged since read)."""
        namespace = self.owner.namespace
        for entry_id, seen in self.to_refresh.items():
            current = uow.entries.get(namespace, entry_id)
            minutes = None if current is None else current.metadata_.get(_TTL)
            if current is None or current.version != seen.version or minutes is None:
                continue
            current.expires_at = self.now + timedelta(minutes=float(minutes))
            uow.entries.save(namespace, current, expected_version=current.version)

    def _one(self, uow: UnitOfWork, position: int, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(uow, op)
        if isinstance(op, PutOp):
            self._put(uow, op, self.vectors.get(position))
            return None
        if isinstance(op, SearchOp):
            return self._search(uow, op)
        return self._list_namespaces(uow, op)

    def _seen(self, entry: MemoryEntry, refresh_ttl: bool) -> None:
        if self.owner._refreshes(refresh_ttl) and entry.metadata_.get(_TTL) is not None:
            self.to_refresh[entry.entry_id] = entry

    def _get(self, uow: UnitOfWork, op: GetOp) -> Item | None:
        entry_id = self.owner._entry_id(entry_key(op.namespace, op.key))
        entry = uow.entries.get(self.owner.namespace, entry_id)
        if entry is None or not self.owner._owned(entry):
            return None
        self._seen(entry, op.refresh_ttl)
        return _item(entry)

    def _put(
        self,
        uow: UnitOfWork,
        op: PutOp,
        vector: tuple[EmbeddingSpec, tuple[float, ...]] | None,
    ) -> None:
        namespace = self.owner.namespace
        entry_id = self.owner._entry_id(entry_key(op.namespace, op.key))
        old = uow.entries.get(namespace, entry_id)
        self.to_refresh.pop(entry_id, None)  # a put sets its own expiry
        if op.value is None:
            if old is not None:
                uow.entries.delete(namespace, entry_id)  # its vector with it
            return
        if old is not None and vector is None and self.owner._index is not None:
            uow.entries.delete(namespace, entry_id)  # no stale vector of the old value
        uow.entries.save(namespace, self.owner._entry(op, op.value, old, self.now))
        if vector is not None:
            vector_repository(uow).save_vectors(namespace, vector[0], {entry_id: vector[1]})

    def _search(self, uow: UnitOfWork, op: SearchOp) -> list[SearchItem]:
        namespace, prefix = self.owner.namespace, prefix_key(op.namespace_prefix)
        scored: list[tuple[MemoryEntry, float | None]]
        meaning = self.queries.get(op.query) if op.query else None
        if op.query and meaning is not None:
            scored = self._by_meaning(uow, op.query, prefix, meaning)
        elif op.query:
            hits = uow.entries.search(
                namespace,
                op.query,
                limit=None,
                key_prefix=prefix,
                user_id=self.owner.user_id,
                language=self.owner._language,
            )
            scored = [(hit.entry, hit.score) for hit in hits]
        else:
            listed = uow.entries.list(namespace, key_prefix=prefix, user_id=self.owner.user_id)
            listed.sort(key=lambda e: (_updated_at(e), e.key or ""), reverse=True)
            scored = [(entry, None) for entry in listed]
        matched = [
            (entry, score)
            for entry, score in scored
            if self.owner._owned(entry) and matches(entry.content, op.filter)
        ]
        page = matched[op.offset : op.offset + op.limit]
        for entry, _ in page:
            self._seen(entry, op.refresh_ttl)
        return [_search_item(entry, score) for entry, score in page]

    def _by_words(self, uow: UnitOfWork, query: str, prefix: str) -> list[MemoryEntry]:
        hits = uow.entries.search(
            self.owner.namespace,
            query,
            limit=None,
            key_prefix=prefix,
            user_id=self.owner.user_id,
            language=self.owner._language,
        )
        return [hit.entry for hit in hits]

    def _by_meaning(
        self,
        uow: UnitOfWork,
        query: str,
        prefix: str,
        meaning: tuple[EmbeddingSpec, tuple[float, ...]],
    ) -> list[tuple[MemoryEntry, float | None]]:
        """The items under ``prefix`` nearest the query (hybrid: fused with its words)."""
        spec, vector = meaning
        hits = vector_repository(uow).vector_search(
            self.owner.namespace, vector, spec, limit=None, user_id=self.owner.user_id
        )
        near = [(h.entry, h.score) for h in hits if (h.entry.key or "").startswith(prefix)]
        if self.owner._index is None or self.owner._index.mode == "semantic":
            return [(entry, score) for entry, score in near]
        fused = fuse_by(
            [[entry for entry, _ in near], self._by_words(uow, query, prefix)],
            key=lambda entry: entry.entry_id,
        )
        return [(entry, score) for entry, score in fused]

    def _list_namespaces(self, uow: UnitOfWork, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        fixed: list[str] = []
        for condition in conditions:  # the labels before the first wildcard: a key range
            if condition.match_type == "prefix":
                fixed = list(condition.path[: _first_wildcard(condition.path)])
                break
        listed = uow.entries.list(
            self.owner.namespace,
            key_prefix=prefix_key(tuple(fixed)),
            user_id=self.owner.user_id,
        )
        found: set[tuple[str, ...]] = set()
        for entry in listed:
            if entry.key is None or not self.owner._owned(entry):
                continue
            path = split_key(entry.key)[0]
            if all(namespace_matches(c, path) for c in conditions):
                found.add(path if op.max_depth is None else path[: op.max_depth])
        return sorted(found)[op.offset : op.offset + op.limit]


# --------------------------------------------------------------------------- layout


def entry_key(namespace: tuple[str, ...], key: str) -> str:
    """The entry key of item ``key`` of LangGraph ``namespace``: ``"a.b..key"``."""
    return f"{prefix_key(namespace)}.{key}"


def prefix_key(namespace: tuple[str, ...]) -> str:
    """The key prefix of every item under ``namespace`` (``""`` for the empty prefix)."""
    return "".join(f"{label}." for label in namespace)


def split_key(stored: str) -> tuple[tuple[str, ...], str]:
    """``(namespace, key)`` of an entry key made by :func:`entry_key`."""
    end = stored.index("..")
    return tuple(stored[:end].split(".")), stored[end + 2 :]


def namespace_matches(condition: MatchCondition, path: tuple[str, ...]) -> bool:
    """Whether ``path`` matches a LangGraph match condition (``"*"`` matches any label)."""
    pattern = tuple(condition.path)
    if len(path) < len(pattern):
        return False
    if condition.match_type == "prefix":
        part = path[: len(pattern)]
    elif condition.match_type == "suffix":
        part = path[len(path) - len(pattern) :]
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or p == label for p, label in zip(pattern, part, strict=True))


def matches(value: Any, wanted: Mapping[str, Any] | None) -> bool:
    """Whether an item's ``value`` passes a LangGraph search ``filter``."""
    if not wanted:
        return True
    if not isinstance(value, Mapping):
        return False
    return all(_compare(_field(value, name), expected) for name, expected in wanted.items())


def _field(value: Mapping[str, Any], name: str) -> Any:
    """``value[name]``; a dotted name that is no key walks nested objects (``"user.id"``),
    as LangGraph's SQL stores read filter keys."""
    if name in value or "." not in name:
        return value.get(name)
    found: Any = value
    for part in name.split("."):
        if not isinstance(found, Mapping):
            return None
        found = found.get(part)
    return found


def _compare(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in expected):
            return all(_operator(actual, name, operand) for name, operand in expected.items())
        return isinstance(actual, Mapping) and all(
            _compare(actual.get(k), v) for k, v in expected.items()
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(expected)
            and all(_compare(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return _same(actual, expected)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1`` (nor ``false`` ``0``), ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _operator(actual: Any, name: str, operand: Any) -> bool:
    if name not in _OPERATORS:
        raise ValueError(f"Unsupported operator: {name}")
    if name == "$eq":
        return _same(actual, operand)
    if name == "$ne":
        return not _same(actual, operand)
    if not _number(actual) or not _number(operand):
        return False  # an order comparison with a missing or non-numeric value: no match
    a, b = float(actual), float(operand)
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[name]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _first_wildcard(path: Sequence[str]) -> int:
    return next((i for i, label in enumerate(path) if label == "*"), len(path))


def _strings(value: Any) -> list[str]:
    """Every string (and number) inside a JSON value, depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [str(value)]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def _text(value: Mapping[str, Any], fields: Sequence[str]) -> str | None:
    """The text a query searches: the strings of ``fields`` (``"$"``: the whole value)."""
    parts: list[str] = []
    for path in fields:
        parts.extend(_strings(value) if path == "$" else get_text_at_path(dict(value), path))
    text = "\n".join(p for p in parts if p)
    return text[:MAX_SEARCH_TEXT_LENGTH] or None


def _updated_at(entry: MemoryEntry) -> datetime:
    stamp = entry.metadata_.get(_UPDATED_AT)
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) else entry.created_at


def _item(entry: MemoryEntry) -> Item:
    namespace, key = split_key(entry.key or "")
    return Item(
        value=entry.content,
        key=key,
        namespace=namespace,
        created_at=entry.created_at,
        updated_at=_updated_at(entry),
    )


def _search_item(entry: MemoryEntry, score: float | None) -> SearchItem:
    namespace, key = split_key(entry.key or "")
    return SearchItem(
        namespace, key, entry.content, entry.created_at, _updated_at(entry), score=score
    )


# --------------------------------------------------------------------------- checks


def _own_namespace(namespace: Any) -> str:
    checked: str = validate_namespace(namespace)
    layer = layer_of_namespace(checked)
    if layer is not None:
        raise EntryValidationError(
            "namespace", f"{checked!r} holds the {layer} layer's rows; pick one of your own"
        )
    return checked


def _check_fields(fields: Any) -> list[str]:
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise TypeError("index fields must be a list of field paths")
    if not all(isinstance(f, str) and f for f in fields):
        raise TypeError("index fields must be non-empty strings")
    return list(fields)


def _check_minutes(name: str, minutes: Any) -> None:
    if minutes is None:
        return
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int | float)
        or not math.isfinite(minutes)
        or minutes <= 0
    ):
        raise EntryValidationError(name, f"must be a positive number of minutes, got {minutes!r}")


def _check_ttl(config: Any) -> TTLConfig | None:
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise EntryValidationError("ttl", "must be a TTLConfig dict")
    _check_minutes("default_ttl", config.get("default_ttl"))
    if config.get("sweep_interval_minutes") is not None:
        raise EntryValidationError(
            "ttl",
            "sweep_interval_minutes is not supported: run the store's cleanup_expired "
            "(firefly-orm cleanup-expired); expired items are never read meanwhile",
        )
    checked: TTLConfig = {**config}  # type: ignore[typeddict-item]
    return checked


def _check_page(limit: Any, offset: Any) -> None:
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise EntryValidationError(name, f"must be a non-negative integer, got {value!r}")
