"""The content hook: one wrapper that redacts and encrypts on every save and decrypts on every read.

:func:`protect` wraps any store (SQLite, PostgreSQL, MongoDB, FileStore,
InMemoryStore, a five-method store of your own) in a :class:`ProtectedStore`.
Every path a memory layer takes to the store goes through it:

* the store's own calls (``save``, ``load``, ``load_by_key``... and their
  ``async_`` twins), which working memory and artifacts use;
* units of work, sync and async (``unit_of_work``, ``async_unit_of_work``,
  ``async_run_in_unit_of_work``): their ``entries`` repository is a
  :class:`ProtectedRepository` around the store's own.

On every save, in this order: the entry is validated (nothing is written when
it is bad); the redactor (when configured) replaces what it detects in
``content``, ``search_text`` and ``metadata`` (all but its own record), and the
saved entry's ``metadata`` records what was redacted under
:data:`REDACTIONS_KEY` (kind, path, count: never the value); then the content
is encrypted (when the namespace is) and ``search_text`` dropped unless kept in
clear (``Encryption(searchable=...)``).
On every read the content is decrypted.  Fast paths that build a row in SQL
(``append_turn``) or return contents without their row (``list_contents_before``)
cannot be protected: the wrapper answers "not supported" for the namespaces it
transforms and the layers take their general path.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, Protocol, Self, TypeVar, Unpack, cast, runtime_checkable

from firefly_orm.bridges._steps import locks_rows
from firefly_orm.bridges._threads import call_blocking
from firefly_orm.entry import MemoryEntry, validate_entry
from firefly_orm.privacy._encryption import Encryption
from firefly_orm.privacy._errors import EncryptedSearchError
from firefly_orm.protocols import (
    AppendedHead,
    AsyncMemoryStore,
    AsyncUnitOfWork,
    EntryRepository,
    JoinsSession,
    ListOptions,
    MemoryStore,
    SearchHit,
    SearchOptions,
    StoreMaintenance,
    TurnAppend,
    UnitOfWork,
    declares,
)
from firefly_orm.uow import (
    ClosesOnExit,
    RepositoryBase,
    arun_in_unit_of_work,
    async_unit_of_work_for,
    optional_operations,
    unit_of_work_for,
)

__all__ = [
    "REDACTIONS_KEY",
    "ContentRedactor",
    "Protection",
    "ProtectedRepository",
    "ProtectedStore",
    "ProtectedUnitOfWork",
    "RedactionRecord",
    "protect",
]

logger = logging.getLogger("firefly_orm")

T = TypeVar("T")

#: The ``metadata`` key under which a saved entry records what was redacted.
REDACTIONS_KEY = "redactions"


@runtime_checkable
class RedactionRecord(Protocol):
    """What one redaction rule replaced: its kind, where, how many times (never the value)."""

    @property
    def kind(self) -> str:
        """What was found (``"email"``, ``"phone"``...)."""
        ...

    @property
    def path(self) -> str:
        """Where in the value (a JSON path such as ``$.text``)."""
        ...

    @property
    def count(self) -> int:
        """How many were replaced there."""
        ...


@runtime_checkable
class ContentRedactor(Protocol):
    """A redactor (:class:`firefly_orm.privacy.Redactor`, or your own).

    ``redact(value)`` returns the value with what it detects replaced, and a
    record of each kind it replaced.
    """

    def redact(self, content: Any) -> tuple[Any, Sequence[RedactionRecord]]:
        """``(redacted value, records)``; ``records`` is empty when nothing was found."""
        ...


# --------------------------------------------------------------------------- the transform


class Protection:
    """What a :class:`ProtectedStore` does to entries: redaction, then encryption.

    Args:
        encryption: Field-level encryption (``None``: no namespace is encrypted).
        redactor: Applied to every saved entry's ``content`` and ``search_text``
            (``None``: nothing is redacted).
    """

    def __init__(
        self, encryption: Encryption | None = None, redactor: ContentRedactor | None = None
    ) -> None:
        if encryption is not None and not isinstance(encryption, Encryption):
            raise TypeError(f"encryption must be an Encryption, got {type(encryption).__name__}")
        if redactor is not None and not isinstance(redactor, ContentRedactor):
            raise TypeError(
                f"redaction must have redact(content) -> (content, records), "
                f"got {type(redactor).__name__}"
            )
        self.encryption = encryption
        self.redactor = redactor

    def encrypts(self, namespace: str) -> bool:
        """Whether rows of ``namespace`` are encrypted."""
        return self.encryption is not None and self.encryption.encrypts(namespace)

    def transforms(self, namespace: str) -> bool:
        """Whether saves into ``namespace`` are changed (redacted or encrypted)."""
        return self.redactor is not None or self.encrypts(namespace)

    def check_search(self, namespace: str) -> None:
        """Refuse a search where ``search_text`` is never stored (:class:`EncryptedSearchError`)."""
        encryption = self.encryption
        if encryption is not None and not encryption.keeps_search_text(namespace):
            raise EncryptedSearchError(
                f"namespace {namespace!r} is encrypted and its search text is not stored, so it "
                "cannot be searched (Encryption(searchable=[...]) keeps it in clear)"
            )

    def _redact(self, value: Any, field: str, records: list[dict[str, Any]]) -> Any:
        if self.redactor is None:
            return value
        redacted, found = self.redactor.redact(value)
        for record in found:
            records.append(
                {
                    "field": field,
                    "kind": str(record.kind),
                    "path": str(record.path),
                    "count": int(record.count),
                }
            )
        return redacted

    def inbound(self, namespace: str, entry: MemoryEntry) -> MemoryEntry:
        """The entry as stored: validated, redacted, encrypted (a new entry; ``entry`` is kept)."""
        validate_entry(entry, namespace)
        if not self.transforms(namespace):
            return entry
        records: list[dict[str, Any]] = []
        content = self._redact(entry.content, "content", records)
        search_text = entry.search_text
        if search_text is not None:
            search_text = self._redact(search_text, "search_text", records)
        metadata = entry.metadata_
        if self.redactor is not None and metadata:
            # The entry's own metadata too (a fact's source, an artifact's reason),
            # all but the record of earlier redactions.
            own = {k: v for k, v in metadata.items() if k != REDACTIONS_KEY}
            kept = {k: v for k, v in metadata.items() if k == REDACTIONS_KEY}
            metadata = {**self._redact(own, "metadata", records), **kept}
        if records:
            metadata = dict(metadata)
            earlier = metadata.get(REDACTIONS_KEY)
            metadata[REDACTIONS_KEY] = [*(earlier if isinstance(earlier, list) else ()), *records]
            logger.debug(
                "redacted %d value(s) of entry %r in %r before saving",
                sum(r["count"] for r in records),
                entry.entry_id,
                namespace,
            )
        search_language = entry.search_language
        encryption = self.encryption
        if encryption is not None and encryption.encrypts(namespace):
            content = encryption.seal(namespace, entry.entry_id, content, user_id=entry.user_id)
            if not encryption.keeps_search_text(namespace):
                search_text = search_language = None
        stored = MemoryEntry.from_dict(
            {
                "entry_id": entry.entry_id,
                "namespace": namespace,
                "scope": entry.scope,
                "key": entry.key,
                "content": content,
                "metadata": metadata,
                "created_at": entry.created_at,
                "expires_at": entry.expires_at,
                "importance": entry.importance,
                "version": entry.version,
                "user_id": entry.user_id,
                "search_text": search_text,
                "search_language": search_language,
            }
        )
        return validate_entry(stored, namespace)

    def outbound(self, namespace: str, entry: MemoryEntry | None) -> MemoryEntry | None:
        """A stored entry as the caller sees it (decrypted in place; it is the caller's copy)."""
        encryption = self.encryption
        if entry is not None and encryption is not None and encryption.encrypts(namespace):
            entry.content = encryption.open(
                namespace, entry.entry_id, entry.content, user_id=entry.user_id
            )
        return entry

    def outbound_all(self, namespace: str, entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
        """:meth:`outbound` of each entry."""
        encryption = self.encryption
        rows = list(entries)
        if encryption is not None and encryption.encrypts(namespace):
            for entry in rows:
                entry.content = encryption.open(
                    namespace, entry.entry_id, entry.content, user_id=entry.user_id
                )
        return rows


# --------------------------------------------------------------------------- units of work


class ProtectedRepository(RepositoryBase):
    """An entry repository whose contents go through a :class:`Protection`."""

    def __init__(self, inner: EntryRepository, protection: Protection) -> None:
        self.inner = inner
        self.protection = protection

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        return self.protection.outbound(namespace, self.inner.get(namespace, entry_id))

    def get_by_key(
        self, namespace: str, key: str, *, for_update: bool = False
    ) -> MemoryEntry | None:
        found = self.inner.get_by_key(namespace, key, for_update=for_update)
        return self.protection.outbound(namespace, found)

    def list(self, namespace: str, **options: Unpack[ListOptions]) -> builtins.list[MemoryEntry]:
        return self.protection.outbound_all(namespace, self.inner.list(namespace, **options))

    def list_contents(self, namespace: str, **options: Unpack[ListOptions]) -> builtins.list[Any]:
        if not self.protection.encrypts(namespace):
            return self.inner.list_contents(namespace, **options)
        return [entry.content for entry in self.list(namespace, **options)]

    def search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> builtins.list[SearchHit]:
        self.protection.check_search(namespace)
        hits = self.inner.search(namespace, query, **options)
        if not self.protection.encrypts(namespace):
            return hits
        entries = self.protection.outbound_all(namespace, (hit.entry for hit in hits))
        return [SearchHit(entry, hit.score) for entry, hit in zip(entries, hits, strict=True)]

    def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        stored = self.protection.inbound(namespace, entry)
        self.inner.save(namespace, stored, expected_version=expected_version)

    def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None:
        self.inner.delete(namespace, entry_ids)

    def clear(self, namespace: str) -> None:
        self.inner.clear(namespace)

    def erase_user(self, user_id: str) -> None:
        self.inner.erase_user(user_id)

    def append_turn(self, request: TurnAppend) -> AppendedHead | None:
        """The store's one-statement append where nothing is transformed; else "not supported"."""
        if self.protection.transforms(request.namespace):
            return None
        return optional_operations(self.inner).append_turn(request)


class ProtectedUnitOfWork:
    """A sync unit of work whose ``entries`` is a :class:`ProtectedRepository`."""

    def __init__(self, inner: UnitOfWork, protection: Protection) -> None:
        self.inner = inner
        self._protection = protection
        self._wrapped: tuple[EntryRepository, ProtectedRepository] | None = None

    @property
    def entries(self) -> EntryRepository:
        """The inner unit of work's repository, protected."""
        current = self.inner.entries
        wrapped = self._wrapped
        if wrapped is None or wrapped[0] is not current:
            wrapped = self._wrapped = (current, ProtectedRepository(current, self._protection))
        return wrapped[1]

    @entries.setter
    def entries(self, value: EntryRepository) -> None:
        self.inner.entries = value

    def commit(self) -> None:
        """Commit the inner unit of work."""
        self.inner.commit()

    def rollback(self) -> None:
        """Roll the inner unit of work back."""
        self.inner.rollback()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


def _protected_call(
    uow: UnitOfWork, protection: Protection, fn: Callable[..., T], args: tuple[Any, ...]
) -> T:
    return fn(ProtectedUnitOfWork(uow, protection), *args)


class _ProtectedAsyncUnitOfWork:
    """An async unit of work whose work sees a :class:`ProtectedUnitOfWork`."""

    def __init__(
        self, manager: AbstractAsyncContextManager[AsyncUnitOfWork], protection: Protection
    ) -> None:
        self._manager = manager
        self._protection = protection
        self._uow: AsyncUnitOfWork | None = None

    def _entered(self) -> AsyncUnitOfWork:
        if self._uow is None:
            raise RuntimeError("use the unit of work inside 'async with'")
        return self._uow

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(protected sync uow, *args)`` inside the inner unit of work."""
        return await self._entered().run_sync(_protected_call, self._protection, fn, args)

    async def commit(self) -> None:
        """Commit the inner unit of work."""
        await self._entered().commit()

    async def rollback(self) -> None:
        """Roll the inner unit of work back."""
        await self._entered().rollback()

    async def __aenter__(self) -> Self:
        self._uow = await self._manager.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._manager.__aexit__(*exc_info)


# --------------------------------------------------------------------------- the store


@runtime_checkable
class _Initializes(Protocol):
    def initialize(self) -> None: ...

    async def async_initialize(self) -> None: ...


@runtime_checkable
class _Closes(Protocol):
    def close(self) -> None: ...

    async def async_close(self) -> None: ...


@runtime_checkable
class _CleansUp(Protocol):
    def cleanup_expired(self) -> int: ...


class ProtectedStore(ClosesOnExit):
    """A store whose contents are redacted and encrypted on the way in, decrypted on the way out.

    Build it with :func:`protect`.  Hand it to the memory layers
    (``MemoryManager(store=...)``, ``ConversationMemory(store=...)``...) in place
    of the store it wraps; reading the wrapped store directly returns the
    stored (encrypted) contents.

    Lifecycle calls (``initialize``, ``close``, their ``async_`` forms) and
    maintenance (``analyze``, ``cleanup_expired``) go to the wrapped store.
    """

    def __init__(self, inner: MemoryStore, protection: Protection) -> None:
        if isinstance(inner, ProtectedStore):
            raise TypeError("this store is protected already; wrap the store inside it once")
        if not isinstance(inner, MemoryStore):
            raise TypeError(f"protect() needs a MemoryStore, got {type(inner).__name__}")
        self.inner = inner
        self.protection = protection

    def __repr__(self) -> str:
        return f"ProtectedStore({self.inner!r})"

    # ------------------------------------------------------------------ store calls
    async def _acall(self, sync: Callable[[], T], async_: Callable[[], Awaitable[T]]) -> T:
        if declares(self.inner, AsyncMemoryStore):
            return await async_()
        return await call_blocking(sync)

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Validate, redact, encrypt and save ``entry`` (see the module docstring)."""
        self.inner.save(namespace, self.protection.inbound(namespace, entry))

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async form of :meth:`save`."""
        stored = self.protection.inbound(namespace, entry)
        inner = self.inner
        await self._acall(
            lambda: inner.save(namespace, stored),
            lambda: cast(AsyncMemoryStore, inner).async_save(namespace, stored),
        )

    def load(self, namespace: str) -> list[MemoryEntry]:
        """The live entries of ``namespace``, decrypted."""
        return self.protection.outbound_all(namespace, self.inner.load(namespace))

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async form of :meth:`load`."""
        inner = self.inner
        rows = await self._acall(
            lambda: inner.load(namespace),
            lambda: cast(AsyncMemoryStore, inner).async_load(namespace),
        )
        return self.protection.outbound_all(namespace, rows)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest live entry with ``key``, decrypted, or ``None``."""
        return self.protection.outbound(namespace, self.inner.load_by_key(namespace, key))

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async form of :meth:`load_by_key`."""
        inner = self.inner
        found = await self._acall(
            lambda: inner.load_by_key(namespace, key),
            lambda: cast(AsyncMemoryStore, inner).async_load_by_key(namespace, key),
        )
        return self.protection.outbound(namespace, found)

    def delete(self, namespace: str, entry_id: str) -> None:
        """Remove one entry (no error if it does not exist)."""
        self.inner.delete(namespace, entry_id)

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async form of :meth:`delete`."""
        inner = self.inner
        await self._acall(
            lambda: inner.delete(namespace, entry_id),
            lambda: cast(AsyncMemoryStore, inner).async_delete(namespace, entry_id),
        )

    def clear(self, namespace: str) -> None:
        """Remove every entry of ``namespace``."""
        self.inner.clear(namespace)

    async def async_clear(self, namespace: str) -> None:
        """Async form of :meth:`clear`."""
        inner = self.inner
        await self._acall(
            lambda: inner.clear(namespace),
            lambda: cast(AsyncMemoryStore, inner).async_clear(namespace),
        )

    # ------------------------------------------------------------------ units of work
    @contextmanager
    def unit_of_work(self, *, read_only: bool = False) -> Iterator[UnitOfWork]:
        """A unit of work of the wrapped store, its ``entries`` protected."""
        with unit_of_work_for(self.inner, read_only=read_only) as uow:
            yield ProtectedUnitOfWork(uow, self.protection)

    def async_unit_of_work(
        self, *, read_only: bool = False
    ) -> AbstractAsyncContextManager[AsyncUnitOfWork]:
        """An async unit of work of the wrapped store, its work seeing protected ``entries``."""
        manager = async_unit_of_work_for(self.inner, read_only=read_only)
        return _ProtectedAsyncUnitOfWork(manager, self.protection)

    async def async_run_in_unit_of_work(
        self, work: Callable[[UnitOfWork], T], *, read_only: bool = False, commit: bool = False
    ) -> T:
        """``work(uow)`` in one unit of work of the wrapped store (its own way), protected."""
        protection = self.protection

        def protected(uow: UnitOfWork) -> T:
            return work(ProtectedUnitOfWork(uow, protection))

        return await arun_in_unit_of_work(self.inner, protected, read_only=read_only, commit=commit)

    @property
    def locks_rows(self) -> bool:
        """The wrapped store's fact (``SELECT ... FOR UPDATE`` on PostgreSQL)."""
        return locks_rows(self.inner)

    @property
    def session(self) -> Any:
        """The caller's session the wrapped store joins (``bind_session``), else ``None``.

        So an agent run on a protected session-bound store still ends the
        transaction its reads began before calling the model.
        """
        if declares(self.inner, JoinsSession):
            return cast(JoinsSession, self.inner).session
        return None

    # ------------------------------------------------------------------ lifecycle, maintenance
    def initialize(self, **options: Any) -> None:
        """Initialise the wrapped store (its options, such as ``migrate=False``, pass through)."""
        if declares(self.inner, _Initializes):
            cast(Any, self.inner).initialize(**options)

    async def async_initialize(self, **options: Any) -> None:
        """Async form of :meth:`initialize`."""
        if declares(self.inner, _Initializes):
            await cast(Any, self.inner).async_initialize(**options)

    def close(self) -> None:
        """Close the wrapped store."""
        if declares(self.inner, _Closes):
            cast(_Closes, self.inner).close()

    async def async_close(self) -> None:
        """Async form of :meth:`close`."""
        if declares(self.inner, _Closes):
            await cast(_Closes, self.inner).async_close()

    def analyze(self) -> bool:
        """The wrapped store's ``analyze`` (``False`` when it has none)."""
        if declares(self.inner, StoreMaintenance):
            return cast(StoreMaintenance, self.inner).analyze()
        return False

    async def async_analyze(self) -> bool:
        """Async form of :meth:`analyze`."""
        if declares(self.inner, StoreMaintenance):
            return await cast(StoreMaintenance, self.inner).async_analyze()
        return False

    def cleanup_expired(self) -> int:
        """The wrapped store's ``cleanup_expired`` (``0`` when it has none)."""
        if declares(self.inner, _CleansUp):
            return cast(_CleansUp, self.inner).cleanup_expired()
        return 0

    async def async_cleanup_expired(self) -> int:
        """Async form of :meth:`cleanup_expired`."""
        return await call_blocking(self.cleanup_expired)


def protect(
    store: MemoryStore,
    *,
    encryption: Encryption | None = None,
    redaction: ContentRedactor | None = None,
) -> ProtectedStore:
    """``store`` wrapped so every content is redacted and encrypted at rest.

    Args:
        store: Any store (SQL, MongoDB, FileStore, InMemoryStore, your own).
        encryption: Field-level encryption of ``content`` (:class:`Encryption`).
        redaction: A redactor applied before encryption to every saved
            ``content`` and ``search_text`` (:class:`~firefly_orm.privacy.Redactor`).

    Raises:
        TypeError: Neither option given, or a wrong type.
    """
    if encryption is None and redaction is None:
        raise TypeError("protect() needs encryption=..., redaction=... or both")
    return ProtectedStore(store, Protection(encryption, redaction))
