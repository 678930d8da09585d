"""Async twins for stores whose I/O is synchronous, derived instead of hand-written.

Use this bridge when a store's own I/O is blocking or in-process (in-memory
dicts, JSON files, a custom backend with a sync client): write the sync
methods once and inherit :class:`AsyncTwins`, which derives every ``async_*``
method (``async_save``, ``async_load``, ``async_load_by_key``,
``async_delete``, ``async_clear``, ``async_cleanup_expired`` and
``async_unit_of_work``) from its sync counterpart::

    class MyStore(AsyncTwins):
        twins_in_thread = True   # blocking I/O: twins run in a worker thread

        def save(self, namespace, entry): ...
        # load, load_by_key, delete, clear, cleanup_expired, unit_of_work

A store that does blocking I/O keeps ``twins_in_thread = True`` (the default),
so its twins run in a worker thread (:func:`call_blocking`, the threads
landing of :mod:`firefly_orm.bridges._threads`) and never block the event loop;
an in-process store sets it to ``False`` and its twins run inline (no thread
hand-off for a dict lookup).

Do not use it for a store with a native async driver: SQL stores await their
sync operations through SQLAlchemy's ``run_sync``, and async-only libraries go
through :mod:`firefly_orm.bridges._loop_thread`.

:class:`SyncBackedAsyncUnitOfWork` is the same bridge for units of work: the
async face of a sync unit of work (``await uow.run_sync(fn, *args)`` runs
``fn(sync_uow, *args)``).  It and :func:`call_blocking` live in
:mod:`firefly_orm.bridges._threads` and are re-exported here, where they were
first documented.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, Protocol, TypeVar

from firefly_orm.bridges._threads import SyncBackedAsyncUnitOfWork, call_blocking, offloaded
from firefly_orm.entry import MemoryEntry
from firefly_orm.protocols import UnitOfWork

__all__ = ["AsyncTwins", "SyncBackedAsyncUnitOfWork", "call_blocking"]

T = TypeVar("T")
P = ParamSpec("P")


# --------------------------------------------------------------------------- store twins
# The mixin's methods are typed on ``self`` with the sync methods they need, so
# mypy checks that a store inheriting AsyncTwins really has them.


class _Twinned(Protocol):
    twins_in_thread: bool


class _SyncStore(_Twinned, Protocol):
    def save(self, namespace: str, entry: MemoryEntry) -> None: ...

    def load(self, namespace: str) -> list[MemoryEntry]: ...

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None: ...

    def delete(self, namespace: str, entry_id: str) -> None: ...

    def clear(self, namespace: str) -> None: ...


class _CleansUp(_Twinned, Protocol):
    def cleanup_expired(self) -> int: ...


class _HasUnitOfWork(_Twinned, Protocol):
    def unit_of_work(self, *, read_only: bool = False) -> AbstractContextManager[UnitOfWork]: ...


async def _twin(store: _Twinned, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a sync store method from async code, in a worker thread if the store asks."""
    return await offloaded(store.twins_in_thread, fn, *args, **kwargs)


#: (sync method, its twin) pairs that only some stores have.
_OPTIONAL_TWINS = (
    ("cleanup_expired", "async_cleanup_expired"),
    ("unit_of_work", "async_unit_of_work"),
)


class AsyncTwins:
    """Mixin deriving a sync store's ``async_*`` methods (see the module docstring).

    ``async_cleanup_expired`` and ``async_unit_of_work`` are ``None`` on a
    subclass that has no ``cleanup_expired`` / ``unit_of_work``.

    Attributes:
        twins_in_thread: ``True`` (the default) runs each twin in a worker
            thread, for stores doing blocking I/O; ``False`` runs it inline,
            for in-process stores.
    """

    twins_in_thread: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A twin exists only where its sync method does: a store without
        # ``cleanup_expired`` (or ``unit_of_work``) must not seem to offer the
        # async form, or callers probing for it would pick a method that fails.
        # A subclass adding the sync method to a parent without it gets the
        # derived twin back instead of the parent's ``None`` (unless it defines
        # the twin itself).
        super().__init_subclass__(**kwargs)
        for sync_name, twin_name in _OPTIONAL_TWINS:
            if not callable(getattr(cls, sync_name, None)):
                setattr(cls, twin_name, None)
            elif getattr(cls, twin_name, None) is None and twin_name not in vars(cls):
                setattr(cls, twin_name, vars(AsyncTwins)[twin_name])

    async def async_save(self: _SyncStore, namespace: str, entry: MemoryEntry) -> None:
        """Async twin of ``save``."""
        await _twin(self, self.save, namespace, entry)

    async def async_load(self: _SyncStore, namespace: str) -> list[MemoryEntry]:
        """Async twin of ``load``."""
        return await _twin(self, self.load, namespace)

    async def async_load_by_key(self: _SyncStore, namespace: str, key: str) -> MemoryEntry | None:
        """Async twin of ``load_by_key``."""
        return await _twin(self, self.load_by_key, namespace, key)

    async def async_delete(self: _SyncStore, namespace: str, entry_id: str) -> None:
        """Async twin of ``delete``."""
        await _twin(self, self.delete, namespace, entry_id)

    async def async_clear(self: _SyncStore, namespace: str) -> None:
        """Async twin of ``clear``."""
        await _twin(self, self.clear, namespace)

    async def async_cleanup_expired(self: _CleansUp) -> int:
        """Async twin of ``cleanup_expired``."""
        return await _twin(self, self.cleanup_expired)

    def async_unit_of_work(
        self: _HasUnitOfWork, *, read_only: bool = False
    ) -> SyncBackedAsyncUnitOfWork:
        """Async form of ``unit_of_work`` (same guarantees)."""
        return SyncBackedAsyncUnitOfWork(
            self.unit_of_work(read_only=read_only), offload=self.twins_in_thread
        )
