"""The SQL stores' vocabulary: each operation validated, then handed to a runner.

:class:`StoreOperations` is the base of :class:`~firefly_orm.sql.SQLAlchemyStore`
(its own transactions) and :class:`~firefly_orm.sql.SessionBoundStore`
(SAVEPOINTs of a caller's session); the two differ only in their runner
(:mod:`firefly_orm.sql._runners`).  The operations themselves, one statement
each, are in :mod:`firefly_orm.sql._ops`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from firefly_orm.entry import MemoryEntry, validate_entry, validate_key, validate_namespace
from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql import _ops as ops
from firefly_orm.sql._replica import consistent_reads
from firefly_orm.sql._runners import Runner
from firefly_orm.sql._uow import AsyncSQLUnitOfWork, SQLUnitOfWork

__all__ = ["StoreOperations"]

T = TypeVar("T")


class StoreOperations:
    """The store's vocabulary, each operation handed to ``self._runner``.

    Shared by :class:`~firefly_orm.sql.SQLAlchemyStore` (its own transactions)
    and :class:`~firefly_orm.sql.SessionBoundStore` (SAVEPOINTs of a caller's
    session): only the runner differs.
    """

    _runner: Runner

    @property
    def locks_rows(self) -> bool:
        """True on PostgreSQL: ``for_update`` reads lock one row, not the database.

        (See :func:`firefly_orm.bridges._steps.locks_rows`.)
        """
        return self._runner.engines.dialect_name == "postgresql"

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Upsert ``entry`` into ``namespace`` (validated first)."""
        validate_entry(entry, namespace)
        self._runner.call("save", ops.save, namespace, entry, write=True)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` in ``(created_at, entry_id)`` order."""
        validate_namespace(namespace)
        return self._runner.call("load", ops.load, namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry with ``key``."""
        validate_namespace(namespace)
        validate_key(key)
        return self._runner.call("load_by_key", ops.load_by_key, namespace, key)

    def load_content_by_key(self, namespace: str, key: str) -> list[Any]:
        """What :meth:`load_by_key` finds, only its ``content``: ``[content]``, or ``[]``.

        One column read and no entry built: the read behind
        :meth:`WorkingMemory.get <firefly_orm.WorkingMemory.get>`.
        """
        validate_namespace(namespace)
        validate_key(key)
        return self._runner.call("load_content_by_key", ops.load_content_by_key, namespace, key)

    def delete(self, namespace: str, entry_id: str) -> None:
        """Delete one entry (no error if absent)."""
        validate_namespace(namespace)
        self._runner.call("delete", ops.delete, namespace, [entry_id], write=True)

    def clear(self, namespace: str) -> None:
        """Delete every entry of ``namespace``."""
        validate_namespace(namespace)
        self._runner.call("clear", ops.clear, namespace, write=True)

    def cleanup_expired(self) -> int:
        """Delete expired entries in every namespace; return how many."""
        return self._runner.call("cleanup_expired", ops.cleanup_expired, write=True)

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async twin of :meth:`save`."""
        validate_entry(entry, namespace)
        await self._runner.acall("save", ops.save, namespace, entry, write=True)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async twin of :meth:`load`."""
        validate_namespace(namespace)
        return await self._runner.acall("load", ops.load, namespace)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async twin of :meth:`load_by_key`."""
        validate_namespace(namespace)
        validate_key(key)
        return await self._runner.acall("load_by_key", ops.load_by_key, namespace, key)

    async def async_load_content_by_key(self, namespace: str, key: str) -> list[Any]:
        """Async twin of :meth:`load_content_by_key`."""
        validate_namespace(namespace)
        validate_key(key)
        return await self._runner.acall(
            "load_content_by_key", ops.load_content_by_key, namespace, key
        )

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async twin of :meth:`delete`."""
        validate_namespace(namespace)
        await self._runner.acall("delete", ops.delete, namespace, [entry_id], write=True)

    async def async_clear(self, namespace: str) -> None:
        """Async twin of :meth:`clear`."""
        validate_namespace(namespace)
        await self._runner.acall("clear", ops.clear, namespace, write=True)

    async def async_cleanup_expired(self) -> int:
        """Async twin of :meth:`cleanup_expired`."""
        return await self._runner.acall("cleanup_expired", ops.cleanup_expired, write=True)

    def run_in_unit_of_work(
        self, work: Callable[[UnitOfWork], T], *, read_only: bool = False, commit: bool = False
    ) -> T:
        """``work(uow)`` in one unit of work; committed after it when ``commit``.

        The same as ``with store.unit_of_work(read_only=...) as uow`` around
        ``work``; its async twin is where it differs.

        Raises:
            StoreError: The database failed (nothing of ``work`` is committed).
        """
        return self._runner.run_in_unit_of_work(work, read_only=read_only, commit=commit)

    async def async_run_in_unit_of_work(
        self, work: Callable[[UnitOfWork], T], *, read_only: bool = False, commit: bool = False
    ) -> T:
        """Async twin of :meth:`run_in_unit_of_work`: the sync ``work`` in one unit of work.

        On the native async driver ``work`` runs through ``run_sync``; where
        the async methods run on the sync engine in worker threads, the whole
        unit of work (connection, ``BEGIN``, ``work``, ``COMMIT``) is one
        worker-thread call instead of one per step.  (The step driver of the
        memory layers runs their transactions through it.)
        """
        return await self._runner.arun_in_unit_of_work(work, read_only=read_only, commit=commit)

    def unit_of_work(
        self,
        *,
        read_only: bool = False,
        session: Session | None = None,
        consistent: bool = False,
    ) -> AbstractContextManager[SQLUnitOfWork]:
        """A unit of work: one transaction, or a SAVEPOINT in the caller's ``session``.

        Args:
            read_only: Start a plain (deferred) transaction.  On SQLite write
                units of work start with ``BEGIN IMMEDIATE``; read-only ones let
                readers run alongside writers under WAL.  With a read replica,
                read-only units of work run there (see ``replica_url``).
            session: The caller's Session; the work joins its transaction through
                a SAVEPOINT and the caller's commit decides the outcome.
            consistent: A read-only unit of work on the primary even when a
                replica would serve it (see also :meth:`consistent_reads`).
        """
        runner = self._runner if session is None else self._runner.join(session)
        return runner.unit_of_work(read_only=read_only, consistent=consistent)

    def async_unit_of_work(
        self,
        *,
        read_only: bool = False,
        session: AsyncSession | None = None,
        consistent: bool = False,
    ) -> AbstractAsyncContextManager[AsyncSQLUnitOfWork]:
        """Async unit of work on the native async engine (or the caller's AsyncSession)."""
        runner = self._runner if session is None else self._runner.join(session)
        return runner.async_unit_of_work(read_only=read_only, consistent=consistent)

    def consistent_reads(self) -> AbstractContextManager[None]:
        """A block whose reads all go to the primary, never to a read replica.

        For reads that must see what another process has just written (the
        replica may lag)::

            with store.consistent_reads():
                turns = memory.get_turns(conversation_id)

        It holds for the calling thread or asyncio task (a context variable),
        for every store, and works around ``await`` calls as well.  Without a
        replica every read is on the primary anyway.
        """
        return consistent_reads()
