"""Working memory: scoped key-value facts with an importance score.

Facts of one scope live in the namespace ``working:<scope_id>`` as entries of
scope :attr:`~firefly_orm.entry.MemoryScope.WORKING`, one entry per key.

:meth:`WorkingMemory.set` is one atomic upsert: the entry id is derived from the
namespace and the key (:func:`~firefly_orm.entry.derived_entry_id`), so a single
``store.save`` replaces the old value on every store.  Concurrent setters never
leave two entries for a key, and a failed write leaves the previous value in
place (the module this is modelled on deleted first and inserted second).

Every I/O method has an ``async_`` twin that uses the store's ``async_*``
methods (a store without them has its sync method run in a worker thread); the
entry building and result shaping are shared by both paths.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    validate_entry,
    validate_key,
    validate_namespace,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.uow import UnitOfWork, async_unit_of_work_for, unit_of_work_for

__all__ = ["WorkingMemory", "format_context"]

T = TypeVar("T")

#: Stop deleting after this many stray entries for one key (guards against a
#: store whose delete silently does nothing).
_MAX_STRAY_DELETES = 64


def _delete_in(uow: UnitOfWork, namespace: str, key: str, entry_id: str) -> None:
    """Delete a fact inside a unit of work, with any stray entries of the same key.

    Entries with this key but another id (written by other tools) go too.
    """
    uow.entries.delete(namespace, entry_id)
    for _ in range(_MAX_STRAY_DELETES):
        stray = uow.entries.get_by_key(namespace, key)
        if stray is None:
            return
        uow.entries.delete(namespace, stray.entry_id)


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


def _check_importance(importance: Any) -> float:
    if (
        isinstance(importance, bool)
        or not isinstance(importance, int | float)
        or importance != importance  # NaN
        or not 0.0 <= importance <= 1.0
    ):
        raise EntryValidationError(
            "importance", f"must be a number between 0.0 and 1.0, got {importance!r}"
        )
    return float(importance)


class WorkingMemory:
    """Key-value facts of one scope (an agent, a session, a sub-task).

    Args:
        store: Where facts are kept; a new :class:`~firefly_orm.store.InMemoryStore`
            when ``None``.
        scope_id: Names the scope; facts live in namespace ``working:<scope_id>``.

    Example:
        >>> wm = WorkingMemory(scope_id="session-42")
        >>> wm.set("user_name", "Ada", importance=0.9)
        >>> wm.get("user_name")
        'Ada'
        >>> print(wm.to_context_string())
        Working Memory:
        - user_name: Ada
    """

    def __init__(self, *, store: MemoryStore | None = None, scope_id: str = "default") -> None:
        if not isinstance(scope_id, str):
            raise EntryValidationError(
                "scope_id", f"must be a string, got {type(scope_id).__name__}"
            )
        self._store: MemoryStore = store if store is not None else InMemoryStore()
        self._scope_id = scope_id
        self._namespace = validate_namespace(f"working:{scope_id}")

    # ------------------------------------------------------------------ properties
    @property
    def scope_id(self) -> str:
        """The scope this memory reads and writes."""
        return self._scope_id

    @property
    def namespace(self) -> str:
        """The store namespace of this scope (``working:<scope_id>``)."""
        return self._namespace

    @property
    def store(self) -> MemoryStore:
        """The underlying store."""
        return self._store

    def __repr__(self) -> str:
        # No I/O here: a repr must not query a database.
        return f"WorkingMemory(scope_id={self._scope_id!r}, store={type(self._store).__name__})"

    # ------------------------------------------------------------------ shared core
    def _entry_id(self, key: str) -> str:
        return derived_entry_id(self._namespace, key)

    def _build(self, key: str, value: Any, importance: Any) -> MemoryEntry:
        """The validated entry that :meth:`set` writes (no I/O)."""
        validate_key(key)
        entry = MemoryEntry.from_dict(
            dict(
                entry_id=self._entry_id(key),
                namespace=self._namespace,
                scope=MemoryScope.WORKING,
                key=key,
                content=value,
                importance=_check_importance(importance),
                metadata={"scope_id": self._scope_id},
            )
        )
        return validate_entry(entry, self._namespace)

    # ------------------------------------------------------------------ sync API
    def set(self, key: str, value: Any, *, importance: float = 0.5) -> None:
        """Store ``value`` under ``key``, replacing any previous value atomically.

        Args:
            key: The fact's name.
            value: Any JSON-serialisable value.
            importance: 0.0-1.0, kept on the entry.

        Raises:
            EntryValidationError: ``importance`` out of range, ``value`` not JSON,
                or a bad key; nothing is written.
        """
        entry = self._build(key, value, importance)
        self._store.save(self._namespace, entry)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when it is not set."""
        entry = self._store.load_by_key(self._namespace, validate_key(key))
        return default if entry is None else entry.content

    def get_entry(self, key: str) -> MemoryEntry | None:
        """The stored entry of ``key`` (with importance and timestamps), or ``None``."""
        return self._store.load_by_key(self._namespace, validate_key(key))

    def has(self, key: str) -> bool:
        """Whether ``key`` is set."""
        return self._store.load_by_key(self._namespace, validate_key(key)) is not None

    def delete(self, key: str) -> None:
        """Remove ``key``; no error when it is not set (one unit of work)."""
        validate_key(key)
        with unit_of_work_for(self._store) as uow:
            _delete_in(uow, self._namespace, key, self._entry_id(key))
            uow.commit()

    def keys(self) -> list[str]:
        """The keys that are set, oldest write first."""
        return [key for key, _ in self.items()]

    def items(self) -> list[tuple[str, Any]]:
        """``(key, value)`` pairs, oldest write first (re-set keys move to the end)."""
        return _facts(self._store.load(self._namespace))

    def to_dict(self) -> dict[str, Any]:
        """The facts as a dict."""
        return dict(self.items())

    def to_context_string(self) -> str:
        """The facts for a prompt: ``"Working Memory:\\n- key: value..."`` or ``""``."""
        return format_context(self.items())

    def clear(self) -> None:
        """Remove every fact of this scope."""
        self._store.clear(self._namespace)

    # ------------------------------------------------------------------ async API
    async def _call(self, name: str, *args: Any) -> Any:
        """Await the store's ``async_<name>``, or run ``<name>`` in a worker thread."""
        async_method: Callable[..., Any] | None = getattr(self._store, f"async_{name}", None)
        if async_method is not None:
            return await async_method(*args)
        sync_method: Callable[..., Any] = getattr(self._store, name)
        return await asyncio.to_thread(sync_method, *args)

    async def async_set(self, key: str, value: Any, *, importance: float = 0.5) -> None:
        """Async twin of :meth:`set`."""
        entry = self._build(key, value, importance)
        await self._call("save", self._namespace, entry)

    async def async_get(self, key: str, default: Any = None) -> Any:
        """Async twin of :meth:`get`."""
        entry = await self.async_get_entry(key)
        return default if entry is None else entry.content

    async def async_get_entry(self, key: str) -> MemoryEntry | None:
        """Async twin of :meth:`get_entry`."""
        entry: MemoryEntry | None = await self._call(
            "load_by_key", self._namespace, validate_key(key)
        )
        return entry

    async def async_has(self, key: str) -> bool:
        """Async twin of :meth:`has`."""
        return await self.async_get_entry(key) is not None

    async def async_delete(self, key: str) -> None:
        """Async twin of :meth:`delete`."""
        validate_key(key)
        async with async_unit_of_work_for(self._store) as uow:
            await uow.run_sync(_delete_in, self._namespace, key, self._entry_id(key))
            await uow.commit()

    async def async_keys(self) -> list[str]:
        """Async twin of :meth:`keys`."""
        return [key for key, _ in await self.async_items()]

    async def async_items(self) -> list[tuple[str, Any]]:
        """Async twin of :meth:`items`."""
        entries: list[MemoryEntry] = await self._call("load", self._namespace)
        return _facts(entries)

    async def async_to_dict(self) -> dict[str, Any]:
        """Async twin of :meth:`to_dict`."""
        return dict(await self.async_items())

    async def async_to_context_string(self) -> str:
        """Async twin of :meth:`to_context_string`."""
        return format_context(await self.async_items())

    async def async_clear(self) -> None:
        """Async twin of :meth:`clear`."""
        await self._call("clear", self._namespace)
