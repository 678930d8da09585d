"""Upstream's ``memory.manager``: firefly_orm's ``MemoryManager``.

The constructor takes upstream's keyword-only arguments (``store``,
``max_conversation_tokens=128_000``, ``summarize_threshold``,
``working_scope_id="default"``) and firefly_orm's own (``summarizer``, the
conversation policies, long-term memory).  ``summarize_threshold`` defaults to
``None`` (no threshold), not upstream's 10: it is the eviction trigger here
(turns above it are evicted down to it), so 10 would keep only the newest turn.
``from_config()`` reads the same ``FIREFLY_AGENTIC_MEMORY_*`` variables; the
database store it builds and initialises is the compatible class, so
``await manager.store.close()`` works as with a store built by hand.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from firefly_orm.compat.firefly.memory import _sql
from firefly_orm.manager import MemoryManager as _MemoryManager
from firefly_orm.sql._presets import PostgreSQLStore as _PostgreSQLStore
from firefly_orm.sql._presets import SQLiteStore as _SQLiteStore
from firefly_orm.store import MemoryStore

if TYPE_CHECKING:
    from firefly_orm.config import MemorySettings
    from firefly_orm.conversation import Summarizer

__all__ = ["MemoryManager", "upstream_shaped"]


def _compatible_class(kind: type) -> type | None:
    """The compatible class of a firefly_orm store class (``None``: it has no other shape)."""
    if kind is _SQLiteStore:
        return _sql.SQLiteStore
    if kind is _PostgreSQLStore:
        return _sql.PostgreSQLStore
    mongo = sys.modules.get("firefly_orm.mongo._store")  # loaded iff a MongoDBStore exists
    if mongo is not None and kind is mongo.MongoDBStore:
        from firefly_orm.compat.firefly.memory._mongo import MongoDBStore

        return MongoDBStore
    return None


def upstream_shaped(store: MemoryStore) -> MemoryStore:
    """Give a store that :func:`firefly_orm.config.build_store` made upstream's lifecycle shapes.

    A firefly_orm ``SQLiteStore``, ``PostgreSQLStore`` or ``MongoDBStore``
    becomes an instance of its compatible subclass in place (the subclasses add
    behaviour only, no state); any other store is returned as it is.
    """
    compatible = _compatible_class(type(store))
    if compatible is not None:
        store.__class__ = compatible
    return store


class MemoryManager(_MemoryManager):
    """firefly_orm's :class:`~firefly_orm.MemoryManager`, whose ``from_config`` stores
    have upstream's awaitable ``initialize``/``close``/``cleanup_expired``."""

    @classmethod
    def from_config(
        cls,
        settings: MemorySettings | None = None,
        *,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
    ) -> MemoryManager:
        """A manager from ``FIREFLY_AGENTIC_MEMORY_*`` (store built and initialised).

        As :meth:`firefly_orm.MemoryManager.from_config`: an unknown backend or a
        missing URL is a ``ValueError`` naming the variable, ``sqlite`` is a
        backend too, and the environment is read on every call.
        """
        manager = super().from_config(
            settings, working_scope_id=working_scope_id, summarizer=summarizer
        )
        upstream_shaped(manager.store)
        assert isinstance(manager, MemoryManager)  # built by cls._configured
        return manager

    @classmethod
    async def async_from_config(
        cls,
        settings: MemorySettings | None = None,
        *,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
    ) -> MemoryManager:
        """Async form of :meth:`from_config` (the store initialises on the event loop)."""
        manager = await super().async_from_config(
            settings, working_scope_id=working_scope_id, summarizer=summarizer
        )
        upstream_shaped(manager.store)
        assert isinstance(manager, MemoryManager)  # built by cls._configured
        return manager
