"""Upstream's ``memory.manager``: firefly_orm's ``MemoryManager``.

The constructor takes upstream's keyword-only arguments (``store``,
``max_conversation_tokens=128_000``, ``summarize_threshold``,
``working_scope_id="default"``) and firefly_orm's own (``summarizer``, the
conversation policies, long-term memory).  ``summarize_threshold`` defaults to
``None`` (no threshold), not upstream's 10: it is the eviction trigger here
(turns above it are evicted down to it), so 10 would keep only the newest turn.
``from_config()`` reads the same ``FIREFLY_AGENTIC_MEMORY_*`` variables; the
database store it builds and initialises is the compatible class, so
``await manager.store.close()`` works as with a store built by hand.  On the
``file`` and ``sqlite`` backends it first looks for upstream data where the
store opens, as the compatible ``FileStore`` and ``SQLiteStore`` do: data never
imported is refused (:class:`~firefly_orm.upstream_import.UpstreamDataFoundError`,
nothing written), or imported once with ``import_upstream=True``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from firefly_orm.bridges._threads import call_blocking
from firefly_orm.compat.firefly.memory import _sql
from firefly_orm.compat.firefly.memory._file import FileStore
from firefly_orm.config import load_settings
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


def _upstream_sqlite(settings: MemorySettings, import_upstream: bool) -> _sql.SQLiteStore | None:
    """Refuse or import upstream data where ``settings``' store opens (file backends).

    ``file``: done here (the compatible ``FileStore`` imports as it opens).
    ``sqlite``: the compatible ``SQLiteStore`` that refused nothing, for the
    caller to initialise (which imports) and close; ``None`` for the others.
    """
    if settings.backend == "file":
        FileStore(settings.file_dir, import_upstream=import_upstream)
    elif settings.backend == "sqlite":
        return _sql.SQLiteStore(settings.resolved_sqlite_path(), import_upstream=import_upstream)
    return None


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
        import_upstream: bool = False,
    ) -> MemoryManager:
        """A manager from ``FIREFLY_AGENTIC_MEMORY_*`` (store built and initialised).

        As :meth:`firefly_orm.MemoryManager.from_config`: an unknown backend or a
        missing URL is a ``ValueError`` naming the variable, ``sqlite`` is a
        backend too, and the environment is read on every call.

        Args:
            settings: Use these instead of reading the environment.
            working_scope_id: Scope of the manager's facts.
            summarizer: Overrides the configured summarizer.
            import_upstream: Import upstream data found where a ``file`` or
                ``sqlite`` store opens (once, in one unit of work).

        Raises:
            UpstreamDataFoundError: Upstream data never imported is where the
                store opens, and ``import_upstream`` is false (nothing written).
        """
        settings = settings if settings is not None else load_settings()
        sqlite = _upstream_sqlite(settings, import_upstream)
        if sqlite is not None:
            with sqlite:  # closed with the sync form
                sqlite.ensure_initialized()
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
        import_upstream: bool = False,
    ) -> MemoryManager:
        """Async form of :meth:`from_config` (the store initialises on the event loop).

        The look for upstream data (and a ``file`` import) runs in a worker thread.
        """
        settings = settings if settings is not None else load_settings()
        sqlite = await call_blocking(_upstream_sqlite, settings, import_upstream)
        if sqlite is not None:
            try:
                await sqlite.async_initialize()
            finally:
                await sqlite.async_close()
        manager = await super().async_from_config(
            settings, working_scope_id=working_scope_id, summarizer=summarizer
        )
        upstream_shaped(manager.store)
        assert isinstance(manager, MemoryManager)  # built by cls._configured
        return manager
