"""MongoDB backend: :class:`MemoryDocument` (a Beanie 2 document) and :class:`MongoDBStore`.

Storage layout (one document per :class:`~firefly_orm.entry.MemoryEntry`):

* every entry field is a document field; ``scope`` is its string value;
* ``created_at`` / ``expires_at`` are real BSON dates (never ISO strings), so
  range filters, sorting and the TTL index work.  BSON dates hold milliseconds;
  the sub-millisecond microseconds (0-999) go to ``created_at_us`` /
  ``expires_at_us`` so an entry reads back exactly as it was saved and entries
  created within one millisecond keep their order;
* ``key`` and ``expires_at`` are *omitted* (not ``null``) when unset, so the
  partial indexes (``{$exists: true}``) only hold entries that have them;
* JSON values that BSON or MongoDB field-name rules cannot hold as they are
  (keys starting with ``$``, containing ``.`` or NUL, empty keys, integers
  outside 64 bits) are stored as ``{"__firefly_orm_json__": "<JSON text>"}``
  and decoded on read.

:func:`entry_to_document` and :func:`document_to_entry` are the one place that
converts between the two shapes.

Indexes (created through Beanie on :meth:`MongoDBStore.initialize`; a failure
raises :class:`~firefly_orm.errors.StoreError`, it is never swallowed):
``(namespace, created_at, created_at_us, entry_id)`` for ordered loads,
``(namespace, key, created_at, created_at_us, entry_id)`` partial on
``key`` existing, ``expires_at`` partial on existing (with ``ttl_index=True`` the
same index is also a real TTL index, ``expireAfterSeconds=0``: MongoDB allows only
one index per key pattern, so one index serves both), and ``entry_id`` unique.

Sync and async: a pymongo ``AsyncMongoClient`` is bound to the event loop that
first uses it.  Every store therefore owns ONE private event loop running in a
daemon thread (its "portal"); the client lives there and every database
operation runs there.  Sync methods submit the operation to the portal and wait
(so they work from plain scripts, from worker threads and while some other event
loop runs — there is no ``asyncio.run`` per call, the upstream bug that broke the
pool on the second call).  Async methods also hop onto the portal
(``asyncio.wrap_future``) instead of keeping one client per caller loop: one
connection pool per store, callers on any number of loops (pytest's per-test
loops, ``asyncio.run`` in a CLI, a web server) share it, and the caller's loop
is never blocked.  The price is one thread hand-off per call, small next to a
network round trip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    utcnow,
    validate_entry,
    validate_key,
    validate_namespace,
)
from firefly_orm.errors import (
    ConcurrencyError,
    DatabaseConnectionError,
    EntryValidationError,
    MissingExtraError,
    StoreCorruptedError,
    StoreError,
    redact_url,
)
from firefly_orm.uow import StagedChanges, StagedUnitOfWork, SyncBackedAsyncUnitOfWork

try:
    from beanie import Document, init_beanie
    from pymongo import AsyncMongoClient, DeleteMany, DeleteOne, IndexModel, UpdateOne
    from pymongo.asynchronous.client_session import AsyncClientSession
    from pymongo.asynchronous.collection import AsyncCollection
    from pymongo.errors import (
        ConnectionFailure,
        DuplicateKeyError,
        OperationFailure,
        PyMongoError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("MongoDBStore", "mongo", exc.name) from exc

__all__ = [
    "MemoryDocument",
    "MemoryDocumentFields",
    "MongoDBStore",
    "document_to_entry",
    "entry_to_document",
    "memory_indexes",
    "validate_collection_name",
    "validate_database_name",
]

logger = logging.getLogger("firefly_orm")
T = TypeVar("T")

#: Wrapper key for JSON values stored as JSON text (see the module docstring).
JSON_WRAPPER_KEY = "__firefly_orm_json__"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------- the document


class MemoryDocumentFields(BaseModel):
    """The fields of a stored entry, as a plain pydantic model (used to check reads)."""

    model_config = ConfigDict(extra="ignore")

    entry_id: str
    namespace: str
    scope: MemoryScope
    key: str | None = None
    content: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    created_at_us: int = Field(default=0, ge=0, le=999)
    expires_at: datetime | None = None
    expires_at_us: int | None = Field(default=None, ge=0, le=999)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    version: int = Field(default=1, ge=0)


class MemoryDocument(Document, MemoryDocumentFields):
    """Beanie document mirroring :class:`~firefly_orm.entry.MemoryEntry`.

    Each :class:`MongoDBStore` binds its own subclass of this model to its
    collection (Beanie keeps the collection in class-level settings, so a
    subclass per store lets stores with different collections share a process).
    """

    class Settings:
        name = "entries"


def memory_indexes(*, ttl_index: bool = True) -> list[IndexModel]:
    """The indexes of an entries collection.

    Args:
        ttl_index: Make the ``expires_at`` index a TTL index
            (``expireAfterSeconds=0``) so MongoDB removes expired entries itself.
    """
    expires_options: dict[str, Any] = {
        "name": "ix_expires_at",
        "partialFilterExpression": {"expires_at": {"$exists": True}},
    }
    if ttl_index:
        expires_options["expireAfterSeconds"] = 0
    return [
        IndexModel(
            [("namespace", 1), ("created_at", 1), ("created_at_us", 1), ("entry_id", 1)],
            name="ix_namespace_created",
        ),
        IndexModel(
            [
                ("namespace", 1),
                ("key", 1),
                ("created_at", 1),
                ("created_at_us", 1),
                ("entry_id", 1),
            ],
            name="ix_namespace_key_created",
            partialFilterExpression={"key": {"$exists": True}},
        ),
        IndexModel([("expires_at", 1)], **expires_options),
        IndexModel([("entry_id", 1)], name="ux_entry_id", unique=True),
    ]


def _document_model(collection: str, ttl_index: bool) -> type[MemoryDocument]:
    """A :class:`MemoryDocument` subclass bound (by Beanie) to ``collection``."""
    index_models = memory_indexes(ttl_index=ttl_index)

    class StoreMemoryDocument(MemoryDocument):
        class Settings:
            name = collection
            indexes = index_models

    return StoreMemoryDocument


# --------------------------------------------------------------------------- conversion


def _split_time(value: datetime) -> tuple[datetime, int]:
    """UTC datetime -> (the millisecond-precision part, the remaining microseconds)."""
    value = value.astimezone(UTC)
    sub_ms = value.microsecond % 1000
    return value.replace(microsecond=value.microsecond - sub_ms), sub_ms


def _join_time(value: datetime, sub_ms: int | None) -> datetime:
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value + timedelta(microseconds=sub_ms or 0)


def _needs_wrapping(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not _INT64_MIN <= value <= _INT64_MAX
    if isinstance(value, dict):
        for k, v in value.items():
            if not k or k.startswith("$") or "." in k or "\x00" in k:
                return True
            if _needs_wrapping(v):
                return True
        return False
    if isinstance(value, list):
        return any(_needs_wrapping(v) for v in value)
    return False


def _is_wrapper(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and JSON_WRAPPER_KEY in value


def _encode_json(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    normalised = json.loads(text)  # tuples -> lists, non-str keys -> str (as to_dict does)
    if _is_wrapper(normalised) or _needs_wrapping(normalised):
        return {JSON_WRAPPER_KEY: text}
    return normalised


def _decode_json(value: Any) -> Any:
    if _is_wrapper(value) and isinstance(value[JSON_WRAPPER_KEY], str):
        return json.loads(value[JSON_WRAPPER_KEY])
    return value


def entry_to_document(entry: MemoryEntry, namespace: str) -> dict[str, Any]:
    """MemoryEntry -> the BSON-ready field dict stored in MongoDB (no ``_id``).

    The entry must have passed :func:`~firefly_orm.entry.validate_entry`.
    ``key``/``expires_at`` are left out when unset.
    """
    created, created_us = _split_time(entry.created_at)
    doc: dict[str, Any] = {
        "entry_id": entry.entry_id,
        "namespace": namespace,
        "scope": MemoryScope(entry.scope).value,
        "content": _encode_json(entry.content),
        "metadata": _encode_json(entry.metadata_),
        "created_at": created,
        "created_at_us": created_us,
        "importance": float(entry.importance),
        "version": entry.version,
    }
    if entry.key is not None:
        doc["key"] = entry.key
    if entry.expires_at is not None:
        doc["expires_at"], doc["expires_at_us"] = _split_time(entry.expires_at)
    return doc


def document_to_entry(document: Mapping[str, Any]) -> MemoryEntry:
    """A stored document (as pymongo returns it) -> a detached MemoryEntry.

    Datetimes come back timezone-aware UTC whether or not the client was
    created with ``tz_aware=True``.

    Raises:
        StoreCorruptedError: The document does not have the expected shape.
    """
    try:
        fields = MemoryDocumentFields.model_validate(dict(document))
    except ValidationError as exc:
        raise StoreCorruptedError(
            f"stored MongoDB document {document.get('_id')!r} is not a memory entry: {exc}"
        ) from None
    metadata = _decode_json(fields.metadata)
    if not isinstance(metadata, dict):
        raise StoreCorruptedError(f"entry {fields.entry_id!r}: metadata is not an object")
    return MemoryEntry.from_dict(
        {
            "entry_id": fields.entry_id,
            "namespace": fields.namespace,
            "scope": fields.scope,
            "key": fields.key,
            "content": _decode_json(fields.content),
            "metadata": metadata,
            "created_at": _join_time(fields.created_at, fields.created_at_us),
            "expires_at": (
                None
                if fields.expires_at is None
                else _join_time(fields.expires_at, fields.expires_at_us)
            ),
            "importance": fields.importance,
            "version": fields.version,
        }
    )


_OPTIONAL_FIELDS = ("key", "expires_at", "expires_at_us")


def _upsert_pipeline(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An update pipeline writing ``doc`` and bumping the stored version.

    The version becomes the stored one plus one, or ``max(version, 1)`` on
    insert, in one atomic server-side step.  Every value is a ``$literal`` so
    strings that start with ``$`` are never read as field paths.
    """
    first_version = max(int(doc["version"]), 1)
    values: dict[str, Any] = {
        name: {"$literal": value}
        for name, value in doc.items()
        if name not in ("entry_id", "version")
    }
    values["version"] = {"$add": [{"$ifNull": ["$version", first_version - 1]}, 1]}
    pipeline: list[dict[str, Any]] = [{"$set": values}]
    absent = [name for name in _OPTIONAL_FIELDS if name not in doc]
    if absent:
        pipeline.append({"$unset": absent})
    return pipeline


def _live_filter(now: datetime) -> dict[str, Any]:
    """Matches entries that are not expired at ``now`` (microsecond-exact)."""
    now_ms, now_us = _split_time(now)
    return {
        "$or": [
            {"expires_at": {"$exists": False}},
            {"expires_at": {"$gt": now_ms}},
            {"expires_at": now_ms, "expires_at_us": {"$gt": now_us}},
        ]
    }


def _expired_filter(now: datetime) -> dict[str, Any]:
    """Matches entries expired at ``now`` (the boundary counts as expired)."""
    now_ms, now_us = _split_time(now)
    return {
        "$or": [
            {"expires_at": {"$lt": now_ms}},
            {"expires_at": now_ms, "expires_at_us": {"$lte": now_us}},
        ]
    }


_ORDER = [("created_at", 1), ("created_at_us", 1), ("entry_id", 1)]
_NEWEST_FIRST = [("created_at", -1), ("created_at_us", -1), ("entry_id", -1)]


# --------------------------------------------------------------------------- names

_DB_FORBIDDEN = frozenset('/\\. "$*<>:|?\x00')


def validate_database_name(name: Any) -> str:
    """Return ``name`` if MongoDB accepts it as a database name on every platform.

    Raises:
        EntryValidationError: (a ``ValueError``) when it does not.
    """
    if not isinstance(name, str) or not name:
        raise EntryValidationError("database", "must be a non-empty string")
    bad = sorted(set(name) & _DB_FORBIDDEN)
    if bad:
        raise EntryValidationError("database", f"must not contain any of {''.join(bad)!r}")
    if len(name.encode()) >= 64:
        raise EntryValidationError("database", "must be shorter than 64 bytes")
    return name


def validate_collection_name(name: Any, database: str = "") -> str:
    """Return ``name`` if MongoDB accepts it as a collection name.

    Raises:
        EntryValidationError: (a ``ValueError``) when it does not.
    """
    if not isinstance(name, str) or not name:
        raise EntryValidationError("collection", "must be a non-empty string")
    if "$" in name or "\x00" in name:
        raise EntryValidationError("collection", "must not contain '$' or NUL")
    if name.startswith(".") or name.endswith(".") or ".." in name:
        raise EntryValidationError("collection", "must not start or end with '.' or contain '..'")
    if name.startswith("system."):
        raise EntryValidationError("collection", "the 'system.' prefix is reserved")
    if len(f"{database}.{name}".encode()) > 255:
        raise EntryValidationError(
            "collection", "'<database>.<collection>' must be at most 255 bytes"
        )
    return name


# --------------------------------------------------------------------------- portal


class _Portal:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def in_portal_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except BaseException:
            coro.close()
            raise

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.in_portal_thread:
            coro.close()
            raise RuntimeError("MongoDBStore sync methods cannot run on the store's own loop")
        return self.submit(coro).result()

    async def acall(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_portal_thread:
            self._thread.join()


# --------------------------------------------------------------------------- the store


class MongoDBStore:
    """A :class:`~firefly_orm.store.MemoryStore` on MongoDB through Beanie.

    Args:
        url: MongoDB connection URL (``mongodb://`` or ``mongodb+srv://``).
            Optional when ``client`` is given.
        database: Database name (validated against MongoDB's rules).
        collection: Collection name (validated; ``system.*`` is refused).
        pool_size: ``maxPoolSize`` of the client the store creates.
        client: An ``AsyncMongoClient`` to use instead of creating one.  The
            store runs its I/O on its own event loop, so the client must not
            have been used on another loop yet; the store never closes it.
        ttl_index: Make the ``expires_at`` index a TTL index so MongoDB deletes
            expired entries by itself (within about a minute); reads filter
            expired entries regardless.
        transactions: Use multi-document transactions in units of work.
            ``None`` (default) detects support (replica set or sharded cluster).

    Every operation initialises the store on first use; ``initialize()`` does it
    eagerly (connect, ping, create the indexes) and is idempotent.  See the
    module docstring for how sync and async calls are served.

    Raises:
        EntryValidationError: Invalid database or collection name (a ``ValueError``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        database: str = "firefly_memory",
        collection: str = "entries",
        pool_size: int = 10,
        client: AsyncMongoClient[dict[str, Any]] | None = None,
        ttl_index: bool = True,
        transactions: bool | None = None,
    ) -> None:
        if url is None and client is None:
            raise EntryValidationError("url", "give a MongoDB URL or a client")
        if url is not None and (not isinstance(url, str) or not url):
            raise EntryValidationError("url", "must be a non-empty string")
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise EntryValidationError("pool_size", "must be a positive integer")
        self._url = url
        self._database_name = validate_database_name(database)
        self._collection_name = validate_collection_name(collection, database)
        self._pool_size = pool_size
        self._client: AsyncMongoClient[dict[str, Any]] | None = client
        self._owns_client = client is None
        self._ttl_index = ttl_index
        self._transactions_option = transactions
        self._use_transactions = False
        self._model: type[MemoryDocument] | None = None
        self._collection: AsyncCollection[dict[str, Any]] | None = None
        self._portal: _Portal | None = None
        self._portal_lock = threading.Lock()
        self._init_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------------ properties
    @property
    def database_name(self) -> str:
        """The MongoDB database name."""
        return self._database_name

    @property
    def collection_name(self) -> str:
        """The MongoDB collection name."""
        return self._collection_name

    @property
    def document_model(self) -> type[MemoryDocument] | None:
        """The Beanie document class bound to this store's collection (after init)."""
        return self._model

    @property
    def uses_transactions(self) -> bool:
        """Whether units of work commit in a multi-document transaction (after init)."""
        return self._use_transactions

    def __repr__(self) -> str:
        where = redact_url(self._url) if self._url is not None else "<client>"
        return (
            f"MongoDBStore({where!r}, database={self._database_name!r}, "
            f"collection={self._collection_name!r})"
        )

    # ------------------------------------------------------------------ lifecycle
    def initialize(self) -> None:
        """Connect, check the server answers and create the indexes (idempotent).

        Raises:
            DatabaseConnectionError: The server cannot be reached.
            StoreError: Index creation (or another driver call) failed.
        """
        self._call(self._ensure_initialized())

    async def async_initialize(self) -> None:
        """Async twin of :meth:`initialize`."""
        await self._acall(self._ensure_initialized())

    def close(self) -> None:
        """Close the client the store created and stop its loop (idempotent).

        The store can be used again afterwards (it reconnects).
        """
        with self._portal_lock:
            portal, self._portal = self._portal, None
        if portal is None:
            return
        try:
            portal.call(self._close_client())
        finally:
            portal.stop()

    async def async_close(self) -> None:
        """Async twin of :meth:`close`."""
        with self._portal_lock:
            portal, self._portal = self._portal, None
        if portal is None:
            return
        try:
            await portal.acall(self._close_client())
        finally:
            await asyncio.to_thread(portal.stop)

    def __enter__(self) -> Self:
        self.initialize()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await self.async_initialize()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.async_close()

    # ------------------------------------------------------------------ protocol
    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Upsert ``entry`` (by ``entry_id``) into ``namespace``; bumps the version.

        Raises:
            EntryValidationError: The entry is invalid (nothing is written).
            StoreError: The database operation failed.
        """
        self._call(self._save(self._prepare(namespace, entry)))

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` ordered by ``(created_at, entry_id)``."""
        validate_namespace(namespace)
        return self._call(self._load(namespace))

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry of ``namespace`` with ``key``, or ``None``."""
        validate_namespace(namespace)
        validate_key(key)
        return self._call(self._load_by_key(namespace, key))

    def delete(self, namespace: str, entry_id: str) -> None:
        """Delete one entry of ``namespace``; no error if it does not exist."""
        validate_namespace(namespace)
        self._call(self._delete(namespace, entry_id))

    def clear(self, namespace: str) -> None:
        """Delete every entry of ``namespace``."""
        validate_namespace(namespace)
        self._call(self._clear(namespace))

    def cleanup_expired(self) -> int:
        """Delete expired entries in every namespace; return how many were deleted."""
        return self._call(self._cleanup_expired())

    # ------------------------------------------------------------------ async twins
    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async twin of :meth:`save`."""
        await self._acall(self._save(self._prepare(namespace, entry)))

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async twin of :meth:`load`."""
        validate_namespace(namespace)
        return await self._acall(self._load(namespace))

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async twin of :meth:`load_by_key`."""
        validate_namespace(namespace)
        validate_key(key)
        return await self._acall(self._load_by_key(namespace, key))

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async twin of :meth:`delete`."""
        validate_namespace(namespace)
        await self._acall(self._delete(namespace, entry_id))

    async def async_clear(self, namespace: str) -> None:
        """Async twin of :meth:`clear`."""
        validate_namespace(namespace)
        await self._acall(self._clear(namespace))

    async def async_cleanup_expired(self) -> int:
        """Async twin of :meth:`cleanup_expired`."""
        return await self._acall(self._cleanup_expired())

    # ------------------------------------------------------------------ unit of work
    def unit_of_work(self) -> StagedUnitOfWork:
        """A unit of work over this store.

        Changes are staged in memory and applied on ``commit()``:

        * on a replica set or sharded cluster (or ``transactions=True``) in one
          multi-document transaction: all or nothing, and version
          preconditions (``expected_version``) are checked inside it, so a
          concurrent writer makes the commit fail with
          :class:`~firefly_orm.errors.ConcurrencyError` (MongoDB's write
          conflicts are retried by the driver and the preconditions re-checked);
        * on a standalone server, without transactions: preconditions are
          checked first and the writes that carry one are conditional updates
          (``{entry_id, version: n}``; ``n == 0`` must insert), applied before
          the other changes, so a conflict is detected before anything else is
          written; the remaining changes follow as one ordered bulk write.  A
          crash or a server error half-way through that bulk write can leave
          part of it applied.

        ``get_by_key(..., for_update=True)`` takes no lock; the version
        preconditions are what protect a read-modify-write.
        """
        return StagedUnitOfWork(self)

    def async_unit_of_work(self) -> SyncBackedAsyncUnitOfWork:
        """Async form of :meth:`unit_of_work` (same guarantees)."""
        # The staged work and the commit run in a worker thread; their I/O goes
        # to the store's own loop, so the caller's loop keeps running meanwhile.
        return SyncBackedAsyncUnitOfWork(self.unit_of_work())

    def _staged_read(self, namespace: str) -> list[MemoryEntry]:
        return self._call(self._find_all(namespace))

    def _staged_apply(self, changes: StagedChanges) -> None:
        self._call(self._apply_changes(changes))

    # ------------------------------------------------------------------ portal plumbing
    def _get_portal(self) -> _Portal:
        with self._portal_lock:
            if self._portal is None:
                self._portal = _Portal(f"firefly-orm-mongo-{self._collection_name}")
                self._init_lock = None
            return self._portal

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            portal = self._get_portal()
        except BaseException:
            coro.close()
            raise
        return portal.call(coro)

    async def _acall(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            portal = self._get_portal()
        except BaseException:
            coro.close()
            raise
        return await portal.acall(coro)

    def _prepare(self, namespace: str, entry: MemoryEntry) -> dict[str, Any]:
        validate_entry(entry, namespace)
        try:
            return entry_to_document(entry, namespace)
        except (TypeError, ValueError) as exc:
            raise EntryValidationError("content", f"cannot be stored: {exc}") from None

    # ------------------------------------------------------------------ errors
    def _store_error(self, exc: BaseException, action: str) -> StoreError:
        text = self._scrub(exc)
        cls: type[StoreError] = (
            DatabaseConnectionError if isinstance(exc, ConnectionFailure) else StoreError
        )
        if isinstance(exc, OperationFailure) and exc.code in (85, 86):
            text += (
                " (an index of the collection exists with other options; was it created "
                "with a different ttl_index setting? drop it or pass the same setting)"
            )
        return cls(f"MongoDB {action} failed on {self._where()}: {text}")

    def _password(self) -> str | None:
        if not self._url or "://" not in self._url or "@" not in self._url:
            return None
        creds = self._url.split("://", 1)[1].rsplit("@", 1)[0]
        return creds.split(":", 1)[1] if ":" in creds else None

    async def _guard(self, action: str, op: Awaitable[T]) -> T:
        try:
            return await op
        except (StoreError, EntryValidationError):
            raise
        except PyMongoError as exc:
            err = self._store_error(exc, action)
            secret = self._password()
            if secret and secret in str(exc):
                raise err from None
            raise err from exc

    # ------------------------------------------------------------------ portal side
    async def _ensure_initialized(self) -> AsyncCollection[dict[str, Any]]:
        if self._collection is not None:
            return self._collection
        if self._init_lock is None:
            self._init_lock = asyncio.Lock()
        async with self._init_lock:
            if self._collection is None:
                await self._guard("initialisation", self._initialize())
        assert self._collection is not None
        return self._collection

    async def _initialize(self) -> None:
        if self._client is None:
            assert self._url is not None
            try:
                self._client = AsyncMongoClient(
                    self._url, tz_aware=True, maxPoolSize=self._pool_size
                )
            except PyMongoError as exc:
                raise self._store_error(exc, "client creation") from None
            self._owns_client = True
        client = self._client
        try:
            await client.admin.command("ping")
        except RuntimeError as exc:  # a client bound to another event loop
            raise StoreError(f"cannot use the given AsyncMongoClient: {exc}") from exc
        except PyMongoError as exc:
            raise DatabaseConnectionError(
                f"cannot reach MongoDB at {self._where()}: {self._scrub(exc)}"
            ) from None
        hello = await client.admin.command("hello")
        if self._transactions_option is None:
            self._use_transactions = "logicalSessionTimeoutMinutes" in hello and (
                "setName" in hello or hello.get("msg") == "isdbgrid"
            )
        else:
            self._use_transactions = self._transactions_option
        model = _document_model(self._collection_name, self._ttl_index)
        await init_beanie(database=client[self._database_name], document_models=[model])
        self._model = model
        self._collection = model.get_pymongo_collection()
        logger.debug(
            "MongoDBStore ready: %s.%s (transactions=%s)",
            self._database_name,
            self._collection_name,
            self._use_transactions,
        )

    def _where(self) -> str:
        return redact_url(self._url) if self._url is not None else "the given client"

    def _scrub(self, exc: BaseException) -> str:
        text = str(exc)
        secret = self._password()
        return text.replace(secret, "***") if secret else text

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        self._collection = None
        self._model = None
        if client is not None and self._owns_client:
            await client.close()
        elif client is not None:
            self._client = client  # not ours: keep it for a later re-initialisation

    async def _run(
        self, action: str, op: Callable[[AsyncCollection[dict[str, Any]]], Awaitable[T]]
    ) -> T:
        collection = await self._ensure_initialized()
        return await self._guard(action, op(collection))

    async def _save(self, doc: dict[str, Any]) -> None:
        async def op(col: AsyncCollection[dict[str, Any]]) -> None:
            pipeline = _upsert_pipeline(doc)
            try:
                await col.update_one({"entry_id": doc["entry_id"]}, pipeline, upsert=True)
            except DuplicateKeyError:
                # Two upserts inserted the same new id at once: the other one won,
                # so this one is now an update.
                await col.update_one({"entry_id": doc["entry_id"]}, pipeline, upsert=True)

        await self._run("save", op)

    async def _load(self, namespace: str) -> list[MemoryEntry]:
        async def op(col: AsyncCollection[dict[str, Any]]) -> list[MemoryEntry]:
            query = {"namespace": namespace, **_live_filter(utcnow())}
            return [document_to_entry(d) async for d in col.find(query).sort(_ORDER)]

        return await self._run("load", op)

    async def _load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        async def op(col: AsyncCollection[dict[str, Any]]) -> MemoryEntry | None:
            query = {"namespace": namespace, "key": key, **_live_filter(utcnow())}
            async for doc in col.find(query).sort(_NEWEST_FIRST).limit(1):
                return document_to_entry(doc)
            return None

        return await self._run("load_by_key", op)

    async def _delete(self, namespace: str, entry_id: str) -> None:
        async def op(col: AsyncCollection[dict[str, Any]]) -> None:
            await col.delete_one({"namespace": namespace, "entry_id": entry_id})

        await self._run("delete", op)

    async def _clear(self, namespace: str) -> None:
        async def op(col: AsyncCollection[dict[str, Any]]) -> None:
            await col.delete_many({"namespace": namespace})

        await self._run("clear", op)

    async def _cleanup_expired(self) -> int:
        async def op(col: AsyncCollection[dict[str, Any]]) -> int:
            result = await col.delete_many(_expired_filter(utcnow()))
            return result.deleted_count

        return await self._run("cleanup_expired", op)

    async def _find_all(self, namespace: str) -> list[MemoryEntry]:
        async def op(col: AsyncCollection[dict[str, Any]]) -> list[MemoryEntry]:
            cursor = col.find({"namespace": namespace}).sort(_ORDER)
            return [document_to_entry(d) async for d in cursor]

        return await self._run("unit of work read", op)

    async def _apply_changes(self, changes: StagedChanges) -> None:
        async def op(col: AsyncCollection[dict[str, Any]]) -> None:
            if not self._use_transactions:
                await _apply(col, changes, None)
                return
            assert self._client is not None
            async with self._client.start_session() as session:

                async def body(s: AsyncClientSession) -> None:
                    await _apply(col, changes, s)

                await session.with_transaction(body)

        await self._run("unit of work commit", op)


async def _apply(
    col: AsyncCollection[dict[str, Any]],
    changes: StagedChanges,
    session: AsyncClientSession | None,
) -> None:
    """Apply staged changes (inside a transaction when ``session`` is given)."""
    # 1. Every precondition against the state before this commit.
    expected: dict[tuple[str, str], int] = {}
    for pre in changes.preconditions:
        expected.setdefault((pre.namespace, pre.entry_id), pre.expected_version)
    if changes.preconditions:
        ids = sorted({p.entry_id for p in changes.preconditions})
        stored = {
            d["entry_id"]: d
            async for d in col.find(
                {"entry_id": {"$in": ids}},
                {"entry_id": 1, "namespace": 1, "version": 1},
                session=session,
            )
        }
        for pre in changes.preconditions:
            doc = stored.get(pre.entry_id)
            actual = 0 if doc is None or doc.get("namespace") != pre.namespace else doc["version"]
            if actual != pre.expected_version:
                raise ConcurrencyError(
                    f"entry {pre.entry_id!r} in {pre.namespace!r} is at version {actual}, "
                    f"expected {pre.expected_version}"
                )

    # 2. Conditional writes (a precondition, no clear of the namespace, no move in
    #    this unit of work) first: each is atomic on its document.
    id_counts: dict[str, int] = {}
    for _, entry_id in changes.writes:
        id_counts[entry_id] = id_counts.get(entry_id, 0) + 1
    conditional: list[tuple[str, MemoryEntry, int]] = []
    ordered: list[tuple[tuple[str, str], MemoryEntry | None]] = []
    for (namespace, entry_id), entry in changes.writes.items():
        version = expected.get((namespace, entry_id))
        if (
            entry is not None
            and version is not None
            and namespace not in changes.cleared
            and id_counts[entry_id] == 1
        ):
            conditional.append((namespace, entry, version))
        else:
            ordered.append(((namespace, entry_id), entry))
    for namespace, entry, version in conditional:
        await _conditional_write(col, namespace, entry, version, session)

    # 3. Everything else, in staging order, as one ordered bulk write.
    ops: list[DeleteMany | DeleteOne | UpdateOne] = [
        DeleteMany({"namespace": ns}) for ns in sorted(changes.cleared)
    ]
    for (namespace, entry_id), entry in ordered:
        if entry is None:
            ops.append(DeleteOne({"namespace": namespace, "entry_id": entry_id}))
        else:
            doc = entry_to_document(entry, namespace)
            ops.append(UpdateOne({"entry_id": entry_id}, _upsert_pipeline(doc), upsert=True))
    if ops:
        await col.bulk_write(ops, ordered=True, session=session)


async def _conditional_write(
    col: AsyncCollection[dict[str, Any]],
    namespace: str,
    entry: MemoryEntry,
    expected_version: int,
    session: AsyncClientSession | None,
) -> None:
    doc = entry_to_document(entry, namespace)
    pipeline = _upsert_pipeline(doc)
    conflict = ConcurrencyError(
        f"entry {entry.entry_id!r} in {namespace!r} changed concurrently "
        f"(expected version {expected_version})"
    )
    if expected_version == 0:
        # Must not exist in this namespace: an upsert that can only match a copy
        # in another namespace (a move); an existing one here makes the insert
        # fail on the unique entry_id index.
        try:
            await col.update_one(
                {"entry_id": entry.entry_id, "namespace": {"$ne": namespace}},
                pipeline,
                upsert=True,
                session=session,
            )
        except DuplicateKeyError:
            raise conflict from None
        return
    result = await col.update_one(
        {"entry_id": entry.entry_id, "namespace": namespace, "version": expected_version},
        pipeline,
        session=session,
    )
    if result.matched_count != 1:
        raise conflict
