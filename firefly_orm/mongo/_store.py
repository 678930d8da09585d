"""The MongoDB store: :class:`MongoDBStore`.

Sync and async: a pymongo ``AsyncMongoClient`` is bound to the event loop that
first uses it, so every store keeps its client on ONE loop, the process-wide
loop thread of :mod:`firefly_orm.bridges._loop_thread`, and every database
operation runs there.  Sync methods submit the operation to that loop and wait
(so they work from plain scripts, from worker threads and while some other
event loop runs: there is no ``asyncio.run`` per call, the upstream bug that
broke the pool on the second call).  Async methods await the operation running
on that loop instead of keeping one client per caller loop: one connection pool
per store, callers on any number of loops (pytest's per-test loops,
``asyncio.run`` in a CLI, a web server) share it, and the caller's loop is
never blocked.  The price is one thread hand-off per call, small next to a
network round trip.  Many stores share the loop; each owns its client.

Units of work are :class:`~firefly_orm.uow.StagedUnitOfWork`: the store is a
:class:`~firefly_orm.protocols.StagedBackend` whose reads are indexed queries
(one id, one key, a key-prefix range with a limit), so a conversation turn
reads the same few documents whatever the conversation's length; and a
:class:`~firefly_orm.protocols.SearchBackend`: full-text search is one
aggregation on the ``(namespace, search_words)`` index
(:mod:`firefly_orm.mongo._queries`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, Unpack

from firefly_orm._search import SearchHit
from firefly_orm.bridges._loop_thread import LoopThread, shared_loop
from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    MemoryEntry,
    utcnow,
    validate_entry,
    validate_key,
    validate_namespace,
    version_exhausted,
)
from firefly_orm.errors import (
    ConcurrencyError,
    DatabaseConnectionError,
    EntryValidationError,
    StoreError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.mongo._commit import apply_changes, apply_journaled
from firefly_orm.mongo._document import (
    BY_TIME,
    BY_TIME_NEWEST_FIRST,
    MemoryDocument,
    document_model_for,
    entry_to_document,
    expired_filter,
    upsert_pipeline,
    validate_collection_name,
    validate_database_name,
    validate_url,
)
from firefly_orm.mongo._driver import (
    AsyncClientSession,
    AsyncMongoClient,
    Collection,
    ConnectionFailure,
    DuplicateKeyError,
    InvalidDocument,
    OperationFailure,
    PyMongoError,
    init_beanie,
)
from firefly_orm.mongo._graph import erase_graph_users
from firefly_orm.mongo._journal import MAX_SETTLE_ROUNDS, Journal
from firefly_orm.mongo._queries import find_live
from firefly_orm.mongo._reads import UnitOfWorkReads
from firefly_orm.protocols import ListOptions, SearchOptions
from firefly_orm.uow import (
    OpensOnEnter,
    StagedChanges,
    StagedUnitOfWork,
    SyncBackedAsyncUnitOfWork,
)

__all__ = ["MongoDBStore"]

logger = logging.getLogger("firefly_orm")
T = TypeVar("T")


class MongoDBStore(OpensOnEnter):
    """A :class:`~firefly_orm.protocols.MemoryStore` on MongoDB through Beanie.

    Args:
        url: MongoDB connection URL (``mongodb://`` or ``mongodb+srv://``).
            Optional when ``client`` is given.
        database: Database name (validated against MongoDB's rules).
        collection: Collection name (validated; ``system.*`` is refused).
        pool_size: ``maxPoolSize`` of the client the store creates.
        client: An ``AsyncMongoClient`` to use instead of creating one.  The
            store runs its I/O on firefly_orm's shared loop thread, so the
            client must not have been used on another loop yet; the store never
            closes it.
        ttl_index: Make the ``expires_at`` index a TTL index so MongoDB deletes
            expired entries by itself (within about a minute); reads filter
            expired entries regardless.
        transactions: Use multi-document transactions in units of work.
            ``None`` (default) detects support (replica set or sharded cluster).
            Without them, writes go through namespace locks and a commit
            journal (see :meth:`unit_of_work`).
        commit_lease: Without transactions: seconds a commit's locks are
            trusted to belong to a running writer on ANOTHER machine; after
            that they are taken over and the commit is completed or undone.
            (A writer on the same machine is known dead at once when its
            process is gone.)

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
        commit_lease: float = 30.0,
    ) -> None:
        if url is None and client is None:
            raise EntryValidationError("url", "give a MongoDB URL or a client")
        if url is not None and (not isinstance(url, str) or not url):
            raise EntryValidationError("url", "must be a non-empty string")
        if url is not None:
            validate_url(url)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise EntryValidationError("pool_size", "must be a positive integer")
        if (
            isinstance(commit_lease, bool)
            or not isinstance(commit_lease, int | float)
            or not 0 < commit_lease < 10**6
        ):
            raise EntryValidationError("commit_lease", "must be a number of seconds in (0, 1e6)")
        self._url = url
        self._secrets = url_secrets(url)
        self._database_name = validate_database_name(database)
        self._collection_name = validate_collection_name(collection, database)
        self._pool_size = pool_size
        self._client: AsyncMongoClient[dict[str, Any]] | None = client
        self._owns_client = client is None
        self._ttl_index = ttl_index
        self._transactions_option = transactions
        self._use_transactions = False
        self._commit_lease = float(commit_lease)
        self._journal: Journal | None = None
        self._model: type[MemoryDocument] | None = None
        self._collection: Collection | None = None
        #: The loop thread the client lives on (None until first use).
        self._loop_thread: LoopThread | None = None
        self._loop_lock = threading.Lock()
        self._init_lock: asyncio.Lock | None = None
        #: The store's own staged-backend reads (each checks for commits in progress).
        self._reads = UnitOfWorkReads(self, remember=False)

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
    def ttl_index(self) -> bool:
        """Whether the ``expires_at`` index is a TTL index: the server then deletes
        expired entries on its own schedule too (MongoDB: about once a minute), so
        :meth:`cleanup_expired` counts only those it found still there."""
        return self._ttl_index

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
        """Close the client the store created (idempotent).

        The shared loop thread keeps running for other users; the store can be
        used again afterwards (it reconnects).
        """
        loop = self._live_loop()
        if loop is not None:
            loop.call(self._close_client())

    async def async_close(self) -> None:
        """Async twin of :meth:`close`."""
        loop = self._live_loop()
        if loop is not None:
            await loop.acall(self._close_client())

    # ------------------------------------------------------------------ protocol
    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Upsert ``entry`` (by ``entry_id``) into ``namespace``; bumps the version.

        Raises:
            EntryValidationError: The entry is invalid (nothing is written).
            StoreError: The database operation failed.
        """
        self._call(self._save(namespace, entry, self._prepare(namespace, entry)))

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` ordered by ``(created_at, entry_id)``."""
        return self._call(self._load(validate_namespace(namespace)))

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry of ``namespace`` with ``key``, or ``None``."""
        return self._call(self._load_by_key(validate_namespace(namespace), validate_key(key)))

    def delete(self, namespace: str, entry_id: str) -> None:
        """Delete one entry of ``namespace``; no error if it does not exist."""
        self._call(self._delete(validate_namespace(namespace), entry_id))

    def clear(self, namespace: str) -> None:
        """Delete every entry of ``namespace``."""
        self._call(self._clear(validate_namespace(namespace)))

    def cleanup_expired(self) -> int:
        """Delete expired entries in every namespace; return how many were deleted."""
        return self._call(self._cleanup_expired())

    # ------------------------------------------------------------------ async twins
    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async twin of :meth:`save`."""
        await self._acall(self._save(namespace, entry, self._prepare(namespace, entry)))

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async twin of :meth:`load`."""
        return await self._acall(self._load(validate_namespace(namespace)))

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async twin of :meth:`load_by_key`."""
        return await self._acall(
            self._load_by_key(validate_namespace(namespace), validate_key(key))
        )

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async twin of :meth:`delete`."""
        await self._acall(self._delete(validate_namespace(namespace), entry_id))

    async def async_clear(self, namespace: str) -> None:
        """Async twin of :meth:`clear`."""
        await self._acall(self._clear(validate_namespace(namespace)))

    async def async_cleanup_expired(self) -> int:
        """Async twin of :meth:`cleanup_expired`."""
        return await self._acall(self._cleanup_expired())

    # ------------------------------------------------------------------ unit of work
    def unit_of_work(self, *, read_only: bool = False) -> StagedUnitOfWork:
        """A unit of work over this store.

        Reads inside it are indexed queries of only what is asked (see
        :class:`~firefly_orm.protocols.StagedBackend`) with the staged writes
        overlaid.  Changes are staged in memory and applied on ``commit()``:

        * on a replica set or sharded cluster (or ``transactions=True``) in one
          multi-document transaction: all or nothing, and version
          preconditions (``expected_version``) are checked inside it, so a
          concurrent writer makes the commit fail with
          :class:`~firefly_orm.errors.ConcurrencyError` (MongoDB's write
          conflicts are retried by the driver and the preconditions re-checked);
        * on a standalone server, without transactions
          (:mod:`firefly_orm.mongo._journal`): the commit first locks every
          namespace it writes (one lock document per namespace, exclusive
          through the unique ``entry_id`` index) and, when it has more than one
          write, stores its journal (every write, with the expected versions)
          in the same insert.  The writes carrying a precondition then run as
          conditional updates (``{entry_id, version: n}``; ``n == 0`` must
          insert), so a concurrent writer makes the commit fail with
          :class:`~firefly_orm.errors.ConcurrencyError` and undo what it
          wrote; the rest follows as one ordered bulk write that ends by
          deleting the journal and the locks.  Commits on one namespace thus
          run one after the other.  **All or nothing after a crash**: a commit
          cut short (kill -9, a lost server) is completed (its conditional
          writes were made) or undone (they were not, or conflict) by the
          first read or write of one of its namespaces in any process, or by
          :meth:`initialize`; readers wait while its writer still runs.  A
          writer is known dead at once on the same machine (its process is
          gone); on another machine after ``commit_lease`` seconds.  While a
          commit runs, a read may see part of it (there is no snapshot), but a
          unit of work never commits a plan made on such a read: it is
          re-read once the commit is done, or the version preconditions fail.
          Plain ``save``/``delete``/``clear`` are such commits too.  Every
          store writing one collection must use the same mode.

        ``get_by_key(..., for_update=True)`` takes no lock; the version
        preconditions are what protect a read-modify-write.  ``read_only`` is
        accepted for the common signature and changes nothing here.
        """
        return StagedUnitOfWork(UnitOfWorkReads(self, remember=True))

    def async_unit_of_work(self, *, read_only: bool = False) -> SyncBackedAsyncUnitOfWork:
        """Async form of :meth:`unit_of_work` (same guarantees)."""
        # The staged work and the commit run in a worker thread; their I/O goes
        # to the shared loop thread, so the caller's loop keeps running meanwhile.
        return SyncBackedAsyncUnitOfWork(self.unit_of_work(read_only=read_only))

    # ------------------------------------------------------------------ staged backend
    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry with ``entry_id`` in ``namespace``, or ``None`` (one indexed lookup)."""
        return self._reads.read_entry(namespace, entry_id)

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """Every live entry of ``namespace`` with ``key`` (the ``(namespace, key)`` index)."""
        return self._reads.read_by_key(namespace, key)

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """Live entries of ``namespace``, ordered and limited by the server.

        With ``key_prefix``: the keys in ``[prefix, key_prefix_upper_bound(prefix))`` in
        ``(key, created_at, entry_id)`` order (one range of the
        ``(namespace, key, ...)`` index); else ``(created_at, entry_id)``
        order.  ``newest_first`` reverses; at most ``limit`` documents are read.
        ``user_id``: only that user's entries (the ``(user_id, namespace, ...)``
        index when no key prefix is given).
        """
        return self._reads.read_list(namespace, **options)

    def read_search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """The live matches of ``query`` in ``namespace``, best first (:mod:`firefly_orm._search`).

        One aggregation on the ``(namespace, search_words)`` index: only the
        documents holding one of the query's words are read by the server, and
        at most ``limit`` come back (see :mod:`firefly_orm.mongo._queries` for
        the pipeline and the score, the tokenised match's; ``language`` is
        ignored).

        Raises:
            EntryValidationError: If an argument is invalid (nothing is read).
            StoreError: The database operation failed.
        """
        return self._reads.read_search(namespace, query, **options)

    def apply_changes(self, changes: StagedChanges) -> None:
        """Check the version preconditions and apply ``changes`` (see :meth:`unit_of_work`)."""
        self._call(self._apply_changes(changes))

    def run_database_call(self, fn: Callable[..., Awaitable[T]], /, *args: Any) -> T:
        """``await fn(database, collection_name, *args)`` on this store's client and loop.

        How the knowledge graph (:mod:`firefly_orm.knowledge`) reaches its
        collections beside the entries'; driver errors become ``StoreError``.
        """

        async def op(col: Collection) -> T:
            return await fn(col.database, self._collection_name, *args)

        return self._call(self._run("knowledge graph call", op))

    # ------------------------------------------------------------------ loop plumbing
    def _loop(self) -> LoopThread:
        """The shared loop thread, noting it as the one the client lives on."""
        loop = shared_loop()
        with self._loop_lock:
            if loop is not self._loop_thread:
                # First use, or the loop the client lived on is gone (stopped, or
                # this is a forked child): a client of ours bound to it is unusable.
                if self._owns_client:
                    self._client = None
                self._collection = None
                self._journal = None
                self._model = None
                self._init_lock = None
                self._loop_thread = loop
        return loop

    def _live_loop(self) -> LoopThread | None:
        """The loop thread the client lives on, if it still runs."""
        loop = self._loop_thread
        return loop if loop is not None and loop.running else None

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            loop = self._loop()
        except BaseException:
            coro.close()
            raise
        return loop.call(coro)

    async def _acall(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            loop = self._loop()
        except BaseException:
            coro.close()
            raise
        return await loop.acall(coro)

    def _prepare(self, namespace: str, entry: MemoryEntry) -> dict[str, Any]:
        validate_entry(entry, namespace)
        try:
            return entry_to_document(entry, namespace)
        except (TypeError, ValueError) as exc:
            raise EntryValidationError("content", f"cannot be stored: {exc}") from None

    # ------------------------------------------------------------------ errors
    def _where(self) -> str:
        return redact_url(self._url) if self._url is not None else "the given client"

    def _store_error(self, exc: BaseException, action: str) -> StoreError:
        text = scrub_secret(str(exc), self._secrets)
        cls: type[StoreError] = (
            DatabaseConnectionError if isinstance(exc, ConnectionFailure) else StoreError
        )
        if isinstance(exc, OperationFailure) and exc.code in (85, 86):
            text += (
                " (an index of the collection exists with other options; was it created "
                "with a different ttl_index setting? drop it or pass the same setting)"
            )
        return cls(f"MongoDB {action} failed on {self._where()}: {text}")

    async def _guard(self, action: str, op: Awaitable[T]) -> T:
        try:
            return await op
        except (StoreError, EntryValidationError):
            raise
        except InvalidDocument as exc:  # e.g. DocumentTooLarge: over MongoDB's 16 MB
            raise EntryValidationError(
                "entry", f"cannot be stored as a MongoDB document: {exc}"
            ) from exc
        except PyMongoError as exc:
            err = self._store_error(exc, action)
            if scrub_secret(str(exc), self._secrets) != str(exc):
                raise err from None  # the driver's message holds a secret
            raise err from exc

    # ------------------------------------------------------------------ loop side
    async def _ensure_initialized(self) -> Collection:
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
                f"cannot reach MongoDB at {self._where()}: {scrub_secret(str(exc), self._secrets)}"
            ) from None
        hello = await client.admin.command("hello")
        if self._transactions_option is None:
            self._use_transactions = "logicalSessionTimeoutMinutes" in hello and (
                "setName" in hello or hello.get("msg") == "isdbgrid"
            )
        else:
            self._use_transactions = self._transactions_option
        model = document_model_for(self._collection_name, ttl_index=self._ttl_index)
        await init_beanie(database=client[self._database_name], document_models=[model])
        collection = model.get_pymongo_collection()
        journal = Journal(collection, self._commit_lease)
        # Commits of writers that died half-way (without transactions) are
        # completed or undone before anyone uses the store.
        await journal.sweep()
        self._model = model
        self._journal = journal
        self._collection = collection
        logger.debug(
            "MongoDBStore ready: %s.%s (transactions=%s)",
            self._database_name,
            self._collection_name,
            self._use_transactions,
        )

    async def _close_client(self) -> None:
        client = self._client
        self._collection = None
        self._journal = None
        self._model = None
        if client is not None and self._owns_client:
            self._client = None
            await client.close()
        # a client that is not ours is kept for a later re-initialisation

    async def _run(self, action: str, op: Callable[[Collection], Awaitable[T]]) -> T:
        collection = await self._ensure_initialized()
        return await self._guard(action, op(collection))

    async def _find(
        self,
        query: dict[str, Any],
        order: list[tuple[str, int]] | None,
        limit: int | None = None,
        *,
        namespace: str,
        action: str = "unit of work read",
        settled: set[str] | None = None,
    ) -> list[MemoryEntry]:
        """Live entries of ``namespace`` matching ``query``, in ``order``, at most ``limit``."""
        return await self._settled_read(
            namespace, action, settled, lambda col: find_live(col, query, order, limit)
        )

    async def _settled_read(
        self,
        namespace: str,
        action: str,
        settled: set[str] | None,
        read: Callable[[Collection], Awaitable[T]],
    ) -> T:
        """``read(collection)``, a read of ``namespace``, once no commit is in progress there.

        Without transactions the namespace is checked after the read for a
        commit in progress (unless it is in ``settled``, the namespaces a unit
        of work has already checked): its writer is waited for, or its commit
        recovered, and the read is done again.
        """

        async def op(col: Collection) -> T:
            rounds = 0
            while True:
                found = await read(col)
                journal = self._journal
                if journal is None or self._use_transactions:
                    return found
                if settled is not None and namespace in settled:
                    return found
                if not await journal.settle([namespace]):
                    if settled is not None:
                        settled.add(namespace)
                    return found
                rounds += 1
                if rounds >= MAX_SETTLE_ROUNDS:
                    raise ConcurrencyError(
                        f"namespace {namespace!r} kept being written while it was read"
                    )

        return await self._run(action, op)

    async def _journaled(self, col: Collection, changes: StagedChanges) -> bool:
        """Apply ``changes`` through the journal when there are no transactions."""
        if self._use_transactions:
            return False
        assert self._journal is not None
        await apply_journaled(col, changes, self._journal)
        return True

    async def _save(self, namespace: str, entry: MemoryEntry, doc: dict[str, Any]) -> None:
        async def op(col: Collection) -> None:
            if await self._journaled(
                col, StagedChanges(writes={(namespace, entry.entry_id): entry})
            ):
                return
            pipeline = upsert_pipeline(doc)
            # Not at the largest version: there the filter misses and the upsert's
            # insert collides with the stored id.
            target = {"entry_id": doc["entry_id"], "version": {"$lt": MAX_ENTRY_VERSION}}
            try:
                await col.update_one(target, pipeline, upsert=True)
            except DuplicateKeyError:
                # Two upserts inserted the same new id at once: the other one won,
                # so this one is now an update (or the entry is at the largest version).
                try:
                    await col.update_one(target, pipeline, upsert=True)
                except DuplicateKeyError:
                    raise version_exhausted(entry.entry_id) from None

        await self._run("save", op)

    async def _load(self, namespace: str) -> list[MemoryEntry]:
        query = {"namespace": namespace}
        return await self._find(query, BY_TIME, namespace=namespace, action="load")

    async def _load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        query = {"namespace": namespace, "key": key}
        found = await self._find(
            query, BY_TIME_NEWEST_FIRST, 1, namespace=namespace, action="load_by_key"
        )
        return found[0] if found else None

    async def _delete(self, namespace: str, entry_id: str) -> None:
        async def op(col: Collection) -> None:
            if not await self._journaled(col, StagedChanges(writes={(namespace, entry_id): None})):
                await col.delete_one({"namespace": namespace, "entry_id": entry_id})

        await self._run("delete", op)

    async def _clear(self, namespace: str) -> None:
        async def op(col: Collection) -> None:
            if not await self._journaled(col, StagedChanges(cleared={namespace})):
                await col.delete_many({"namespace": namespace})

        await self._run("clear", op)

    async def _cleanup_expired(self) -> int:
        async def op(col: Collection) -> int:
            result = await col.delete_many(expired_filter(utcnow()))
            return result.deleted_count

        return await self._run("cleanup_expired", op)

    async def _apply_changes(self, changes: StagedChanges) -> None:
        async def op(col: Collection) -> None:
            if not await self._journaled(col, changes):
                assert self._client is not None
                async with self._client.start_session() as session:

                    async def body(s: AsyncClientSession) -> None:
                        await apply_changes(col, changes, s)

                    await session.with_transaction(body)
            # After the entries: an erase cut short is finished by the next erase_user.
            await erase_graph_users(col.database, self._collection_name, changes.erased_users)

        await self._run("unit of work commit", op)
