"""Working memory: scoped key-value facts with an importance score.

Facts of one scope live in the namespace ``working:<scope_id>`` as entries of
scope :attr:`~firefly_orm.entry.MemoryScope.WORKING`, one entry per key.

:meth:`WorkingMemory.set` is one atomic upsert: the entry id is derived from the
namespace and the key (:func:`~firefly_orm.entry.derived_entry_id`), so a single
``store.save`` replaces the old value on every store.  Concurrent setters never
leave two entries for a key, and a failed write leaves the previous value in
place (the module this is modelled on deleted first and inserted second).

Each method is written once as an operation (:mod:`firefly_orm.bridges._steps`)
and has an ``async_`` twin derived from it: single reads and writes call the
store's own methods (its ``async_*`` ones from async code; a store without them
has the sync method run in a worker thread), :meth:`WorkingMemory.delete` runs
one unit of work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from firefly_orm._layout import USER_WORKING_NAMESPACE_PREFIX, WORKING_NAMESPACE_PREFIX
from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    StoreCall,
    Transaction,
    async_method,
    sync_method,
)
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    validate_key,
    validate_namespace,
    validate_user_id,
)
from firefly_orm.entry._rules import check_unit_interval
from firefly_orm.errors import EntryValidationError
from firefly_orm.protocols import AsyncMemoryStore, ContentReads, UnitOfWork, declares
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.uow import optional_operations

__all__ = ["WorkingMemory", "format_context", "read_facts", "working_namespace"]

#: Stop deleting after this many stray entries for one key (guards against a
#: store whose delete silently does nothing).
_MAX_STRAY_DELETES = 64


def delete_fact(uow: UnitOfWork, namespace: str, key: str, entry_id: str) -> None:
    """Delete a fact inside a unit of work, with any stray entries of the same key.

    Entries with this key but another id (written by other tools) go too.  A
    repository with ``delete_key`` (the SQL stores) does it in one statement;
    others delete by id, then look the key up until no entry has it.
    """
    optional = optional_operations(uow.entries)
    if optional.supports_delete_key:
        optional.delete_key(namespace, key, entry_id)
        return
    uow.entries.delete(namespace, entry_id)
    for _ in range(_MAX_STRAY_DELETES):
        stray = uow.entries.get_by_key(namespace, key)
        if stray is None:
            return
        uow.entries.delete(namespace, stray.entry_id)


# The capability checks are declares(store, ContentReads): a runtime protocol
# check costs about 10 us on Python 3.11, as much as the content-only read
# saves, so it is answered once per store class.


def _content_of(store: MemoryStore, namespace: str, key: str) -> list[Any]:
    """``[content]`` of ``key`` or ``[]`` (:class:`~firefly_orm.protocols.ContentReads`)."""
    if not declares(store, ContentReads):
        return _contents(store.load_by_key(namespace, key))
    return cast(ContentReads, store).load_content_by_key(namespace, key)


async def _async_content_of(store: AsyncMemoryStore, namespace: str, key: str) -> list[Any]:
    """Async form of :func:`_content_of`."""
    if not declares(store, ContentReads):
        return _contents(await store.async_load_by_key(namespace, key))
    return await cast(ContentReads, store).async_load_content_by_key(namespace, key)


def _contents(entry: MemoryEntry | None) -> list[Any]:
    return [] if entry is None else [entry.content]


def format_context(items: list[tuple[str, Any]]) -> str:
    """Render facts as the working-memory context string.

    ``""`` when there are none, else ``"Working Memory:"`` followed by one
    ``"- key: value"`` line per fact (``str()`` of the value), no trailing newline.
    """
    if not items:
        return ""
    return "\n".join(["Working Memory:", *(f"- {key}: {value}" for key, value in items)])


def _facts(entries: list[MemoryEntry]) -> list[tuple[str, Any]]:
    """(key, value) pairs in store order; one per key (the newest wins, at its position)."""
    newest: dict[str, MemoryEntry] = {}
    for entry in entries:
        if entry.key is None:
            continue
        newest.pop(entry.key, None)  # a later (newer) entry moves the key to the end
        newest[entry.key] = entry
    return [(key, entry.content) for key, entry in newest.items()]


def working_namespace(scope_id: str, user_id: str | None = None) -> str:
    """The namespace of a working scope: ``working:<scope_id>``, or the user's own.

    A user's scope is ``working-user:<len(user_id)>:<user_id>:<scope_id>``: the
    length makes it unambiguous whatever either part contains, and the prefix
    keeps it apart from every shared scope.
    """
    if user_id is None:
        return f"{WORKING_NAMESPACE_PREFIX}{scope_id}"
    return f"{USER_WORKING_NAMESPACE_PREFIX}{len(user_id)}:{user_id}:{scope_id}"


def read_facts(uow: UnitOfWork, namespace: str) -> list[tuple[str, Any]]:
    """The facts of ``namespace`` inside a unit of work (as :meth:`WorkingMemory.items`)."""
    return _facts(uow.entries.list(namespace))


def _check_importance(importance: Any) -> float:
    return check_unit_interval(importance, "importance", "must be a number between 0.0 and 1.0")


def _check_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise EntryValidationError("metadata", "must be a dict with string keys")
    return dict(metadata)


class WorkingMemory(MemoryLayer):
    """Key-value facts of one scope (an agent, a session, a sub-task).

    Args:
        store: Where facts are kept; a new :class:`~firefly_orm.store.InMemoryStore`
            when ``None``.
        scope_id: Names the scope; facts live in namespace ``working:<scope_id>``.
        user_id: The user whose facts these are: the scope is then that user's
            own (namespace :func:`working_namespace`), so two users' memories on
            one scope never see each other's facts, and every fact is tagged
            with the user (``erase_user`` removes them).

    Example:
        >>> wm = WorkingMemory(scope_id="session-42")
        >>> wm.set("user_name", "Ada", importance=0.9)
        >>> wm.get("user_name")
        'Ada'
        >>> print(wm.to_context_string())
        Working Memory:
        - user_name: Ada
    """

    def __init__(
        self,
        *,
        store: MemoryStore | None = None,
        scope_id: str = "default",
        user_id: str | None = None,
    ) -> None:
        if not isinstance(scope_id, str):
            raise EntryValidationError(
                "scope_id", f"must be a string, got {type(scope_id).__name__}"
            )
        self._user_id = None if user_id is None else validate_user_id(user_id)
        super().__init__(store if store is not None else InMemoryStore())
        self._scope_id = scope_id
        self._namespace = validate_namespace(working_namespace(scope_id, self._user_id))

    # ------------------------------------------------------------------ properties
    @property
    def scope_id(self) -> str:
        """The scope this memory reads and writes."""
        return self._scope_id

    @property
    def namespace(self) -> str:
        """The store namespace of this scope (:func:`working_namespace`)."""
        return self._namespace

    @property
    def user_id(self) -> str | None:
        """The user whose facts these are, or ``None``."""
        return self._user_id

    def __repr__(self) -> str:
        # No I/O here: a repr must not query a database.
        return f"WorkingMemory(scope_id={self._scope_id!r}, store={type(self._store).__name__})"

    # ------------------------------------------------------------------ shared core
    def _entry_id(self, key: str) -> str:
        return derived_entry_id(self._namespace, key)

    def _metadata(self, metadata: Any) -> dict[str, Any]:
        """``metadata`` with ``"scope_id"`` set; a different ``"scope_id"`` is refused."""
        checked = _check_metadata(metadata)
        scope_id = checked.setdefault("scope_id", self._scope_id)
        if scope_id != self._scope_id:
            raise EntryValidationError(
                "metadata",
                f"'scope_id' is {scope_id!r} but this memory's scope is {self._scope_id!r}",
            )
        return checked

    def _build(self, key: str, value: Any, importance: Any, metadata: Any) -> MemoryEntry:
        """The entry that :meth:`set` writes (no I/O).

        The key, importance and metadata's scope are checked here; the entry as a
        whole (``value`` and ``metadata`` as JSON) once, by the store's ``save``,
        which validates before it writes anything (the
        :class:`~firefly_orm.protocols.MemoryStore` contract, checked for every
        store by :mod:`firefly_orm.testing`), with the same errors.
        """
        validate_key(key)
        return MemoryEntry.from_dict(
            dict(
                entry_id=self._entry_id(key),
                namespace=self._namespace,
                scope=MemoryScope.WORKING,
                key=key,
                content=value,
                importance=_check_importance(importance),
                metadata=self._metadata(metadata),
                user_id=self._user_id,
            )
        )

    # ------------------------------------------------------------------ operations
    def _set(
        self,
        key: str,
        value: Any,
        *,
        importance: float = 0.5,
        metadata: Mapping[str, Any] | None = None,
    ) -> Operation[None]:
        """Store ``value`` under ``key``, replacing any previous value atomically.

        Args:
            key: The fact's name.
            value: Any JSON-serialisable value.
            importance: 0.0-1.0, kept on the entry.
            metadata: A JSON object kept on the entry, with ``"scope_id"`` set to
                this memory's scope (it may already hold that scope id, no other).

        Raises:
            EntryValidationError: ``importance`` out of range, ``value`` or
                ``metadata`` not JSON, ``metadata`` with another ``"scope_id"``
                than this memory's, or a bad key; nothing is written.
        """
        namespace, entry = self._namespace, self._build(key, value, importance, metadata)
        yield from StoreCall(
            lambda store: store.save(namespace, entry),
            lambda store: store.async_save(namespace, entry),
        )

    def _get(self, key: str, default: Any = None) -> Operation[Any]:
        """The value of ``key``, or ``default`` when it is not set."""
        namespace, key = self._namespace, validate_key(key)
        found = yield from StoreCall(
            lambda store: _content_of(store, namespace, key),
            lambda store: _async_content_of(store, namespace, key),
        )
        return found[0] if found else default

    def _get_entry(self, key: str) -> Operation[MemoryEntry | None]:
        """The stored entry of ``key`` (with importance and timestamps), or ``None``."""
        namespace, key = self._namespace, validate_key(key)
        return (
            yield from StoreCall(
                lambda store: store.load_by_key(namespace, key),
                lambda store: store.async_load_by_key(namespace, key),
            )
        )

    def _has(self, key: str) -> Operation[bool]:
        """Whether ``key`` is set."""
        entry = yield from self._get_entry(key)
        return entry is not None

    def _delete(self, key: str) -> Operation[None]:
        """Remove ``key``; no error when it is not set (one unit of work)."""
        key = validate_key(key)
        yield from Transaction.write(delete_fact, self._namespace, key, self._entry_id(key))

    def _keys(self) -> Operation[list[str]]:
        """The keys that are set, oldest write first."""
        items = yield from self._items()
        return [key for key, _ in items]

    def _items(self) -> Operation[list[tuple[str, Any]]]:
        """``(key, value)`` pairs, oldest write first (re-set keys move to the end)."""
        namespace = self._namespace
        entries = yield from StoreCall(
            lambda store: store.load(namespace), lambda store: store.async_load(namespace)
        )
        return _facts(entries)

    def _to_dict(self) -> Operation[dict[str, Any]]:
        """The facts as a dict."""
        items = yield from self._items()
        return dict(items)

    def _to_context_string(self) -> Operation[str]:
        """The facts for a prompt: ``"Working Memory:\\n- key: value..."`` or ``""``."""
        items = yield from self._items()
        return format_context(items)

    def _clear(self) -> Operation[None]:
        """Remove every fact of this scope."""
        namespace = self._namespace
        yield from StoreCall(
            lambda store: store.clear(namespace), lambda store: store.async_clear(namespace)
        )

    # ------------------------------------------------------------------ public forms
    set = sync_method(_set)
    get = sync_method(_get)
    get_entry = sync_method(_get_entry)
    has = sync_method(_has)
    delete = sync_method(_delete)
    keys = sync_method(_keys)
    items = sync_method(_items)
    to_dict = sync_method(_to_dict)
    to_context_string = sync_method(_to_context_string)
    clear = sync_method(_clear)

    async_set = async_method(_set)
    async_get = async_method(_get)
    async_get_entry = async_method(_get_entry)
    async_has = async_method(_has)
    async_delete = async_method(_delete)
    async_keys = async_method(_keys)
    async_items = async_method(_items)
    async_to_dict = async_method(_to_dict)
    async_to_context_string = async_method(_to_context_string)
    async_clear = async_method(_clear)
