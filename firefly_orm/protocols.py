"""The contracts between firefly_orm's layers and its stores, in one place.

A custom store implements as much of this as it wants; each step up buys a
stronger unit of work (see :mod:`firefly_orm.uow`):

1. **The five methods of** :class:`MemoryStore` (``save``, ``load``,
   ``load_by_key``, ``delete``, ``clear``): every memory layer works on it.  Its
   units of work are :class:`~firefly_orm.uow.BestEffortUnitOfWork`: changes are
   staged and replayed through ``save``/``delete`` on commit (version
   preconditions checked just before; a crash half-way can leave part of the
   changes applied), and reads inside them go through ``load``.
2. **Plus** :class:`StagedBackend` (``read_entry``, ``read_by_key``,
   ``read_list``, ``apply_changes``) and a ``unit_of_work`` returning
   ``StagedUnitOfWork(self)``: an atomic staged unit of work whose reads fetch
   only what they need (one entry, one key, a window of a key range), with the
   unit of work's own staged writes overlaid.  :class:`~firefly_orm.store.InMemoryStore`,
   :class:`~firefly_orm.FileStore` and the MongoDB store work this way.  Full-text
   search (``uow.entries.search``) needs one more method, ``read_search``
   (:class:`SearchBackend`); a staged backend without it refuses searches.
3. **Plus its own** ``unit_of_work(*, read_only=False)`` (:class:`UnitOfWorkStore`)
   and ``async_unit_of_work(*, read_only=False)`` (:class:`AsyncUnitOfWorkStore`)
   returning anything that behaves as :class:`UnitOfWork` /
   :class:`AsyncUnitOfWork`: the store owns the transaction (the SQL stores run
   one database transaction).

Optional extras a layer uses when a store has them: :class:`ContentReads`
(a key's content without its entry); :class:`VectorRepository` (vectors stored
beside the entries and searched by meaning, :mod:`firefly_orm.vector`), which a
staged backend offers through :class:`VectorBackend`.

The ``async_*`` twins of :class:`AsyncMemoryStore` need not be written by hand
for a store whose I/O is synchronous: :class:`firefly_orm.bridges.twins.AsyncTwins`
derives them.  :mod:`firefly_orm.testing` checks a store against all of this.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, TypedDict, TypeVar, Unpack, runtime_checkable

from firefly_orm._search import SearchHit, SearchOptions
from firefly_orm.entry import MemoryEntry
from firefly_orm.vector._protocols import VectorBackend, VectorRepository
from firefly_orm.vector._spec import EmbeddingSpec

__all__ = [
    "AppendedHead",
    "AsyncMemoryStore",
    "AsyncUnitOfWork",
    "AsyncUnitOfWorkStore",
    "ContentReads",
    "EntryRepository",
    "ListOptions",
    "MemoryStore",
    "SearchBackend",
    "SearchHit",
    "SearchOptions",
    "Precondition",
    "StagedBackend",
    "StagedChanges",
    "StoreLifecycle",
    "StoreMaintenance",
    "ExpiresOnServer",
    "JoinsSession",
    "LocksRows",
    "OwnAsyncRunner",
    "RunsDatabaseCalls",
    "RunsStatements",
    "SearchableRepository",
    "TurnAppend",
    "UnitOfWork",
    "UnitOfWorkStore",
    "VectorBackend",
    "VectorRepository",
    "declares",
]

T = TypeVar("T")


# --------------------------------------------------------------------------- stores


@runtime_checkable
class MemoryStore(Protocol):
    """The five synchronous methods every backend implements.

    The contract (checked by :mod:`firefly_orm.testing`): ``save`` is an upsert
    on ``entry_id`` that validates first and writes nothing on failure;
    ``load`` returns the non-expired entries in ``(created_at, entry_id)``
    order (``[]`` for an unknown namespace); ``load_by_key`` the newest
    non-expired match or ``None``; ``delete`` and ``clear`` are idempotent;
    namespaces are isolated; entries are copied in and out.
    """

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Insert or replace ``entry`` (by ``entry_id``) in ``namespace``."""
        ...

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` in ``(created_at, entry_id)`` order."""
        ...

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry with ``key``, or ``None``."""
        ...

    def delete(self, namespace: str, entry_id: str) -> None:
        """Remove one entry; no error if it does not exist."""
        ...

    def clear(self, namespace: str) -> None:
        """Remove every entry of ``namespace``."""
        ...


@runtime_checkable
class AsyncMemoryStore(Protocol):
    """The async twins of :class:`MemoryStore` (same contract, awaited)."""

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async form of :meth:`MemoryStore.save`."""
        ...

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async form of :meth:`MemoryStore.load`."""
        ...

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async form of :meth:`MemoryStore.load_by_key`."""
        ...

    async def async_delete(self, namespace: str, entry_id: str) -> None:
        """Async form of :meth:`MemoryStore.delete`."""
        ...

    async def async_clear(self, namespace: str) -> None:
        """Async form of :meth:`MemoryStore.clear`."""
        ...


@runtime_checkable
class ContentReads(Protocol):
    """Optional: a key's ``content`` without the entry around it.

    :meth:`WorkingMemory.get <firefly_orm.WorkingMemory.get>` uses it when the
    store has it (the SQL stores: one column read, no entry built) and
    ``load_by_key`` otherwise.  Same rule as ``load_by_key``: the newest
    non-expired entry with ``key``.
    """

    def load_content_by_key(self, namespace: str, key: str) -> list[Any]:
        """``[content]`` of that entry, ``[]`` when there is none (JSON ``null`` is a value)."""
        ...

    async def async_load_content_by_key(self, namespace: str, key: str) -> list[Any]:
        """Async form of :meth:`load_content_by_key`."""
        ...


# --------------------------------------------------------------------------- units of work


class ListOptions(TypedDict, total=False):
    """The options of a list read (:meth:`EntryRepository.list` and its kin).

    Attributes:
        key_prefix: Only entries whose key starts with it, ordered by
            ``(key, created_at, entry_id)``; ``None`` (the default) means every
            entry, ordered by ``(created_at, entry_id)``.
        limit: At most this many entries, taken after ordering (``None``: all).
        newest_first: Reverse the order (default ``False``).
        user_id: Only entries of this user (``None``, the default: every entry).
    """

    key_prefix: str | None
    limit: int | None
    newest_first: bool
    user_id: str | None


@runtime_checkable
class EntryRepository(Protocol):
    """Reads and writes entries inside one unit of work.

    Reads never return expired entries.  ``list`` orders by
    ``(key, created_at, entry_id)`` when a ``key_prefix`` is given (only keys
    starting with it), otherwise by ``(created_at, entry_id)``;
    ``newest_first`` reverses the order and ``limit`` applies after ordering.
    """

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The entry with this id in ``namespace``, or ``None``."""
        ...

    def get_by_key(
        self, namespace: str, key: str, *, for_update: bool = False
    ) -> MemoryEntry | None:
        """The newest entry of ``namespace`` with ``key``, or ``None``.

        ``for_update=True`` asks the store to lock it until the unit of work
        ends where it can (``SELECT ... FOR UPDATE`` on PostgreSQL).
        """
        ...

    def list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """Entries of ``namespace`` in the order described on the class.

        ``options`` are the keyword arguments of :class:`ListOptions`:
        ``key_prefix=None``, ``limit=None``, ``newest_first=False``,
        ``user_id=None``.
        """
        ...

    def list_contents(self, namespace: str, **options: Unpack[ListOptions]) -> builtins.list[Any]:
        """Like :meth:`list` (same :class:`ListOptions`), but only each entry's ``content``."""
        ...

    def search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> builtins.list[SearchHit]:
        """Full-text search: live entries of ``namespace`` whose ``search_text`` matches ``query``.

        Returns :class:`~firefly_orm._search.SearchHit` ``(entry, score)`` pairs,
        best first (score, then importance, then newest), at most ``limit``.
        The query is plain text: it is split into words and never parsed as
        query syntax (quotes, operators, NUL and the like only separate words);
        a query without words returns ``[]``.  Inside a unit of work the
        search sees the unit of work's own writes.  ``options`` are the
        keyword arguments of :class:`SearchOptions`; the rules are in
        :mod:`firefly_orm._search`.

        Raises:
            EntryValidationError: A bad argument (nothing is read).
            StoreError: The store cannot search (a staged backend without
                ``read_search``), or the database failed.
        """
        ...

    def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        """Upsert ``entry``.

        ``expected_version=None`` writes unconditionally; ``0`` requires that no
        entry with this id exists; ``n > 0`` requires the stored version to be
        ``n``.  A failed precondition raises
        :class:`~firefly_orm.errors.ConcurrencyError` (at once or at commit,
        depending on the store).  The stored version becomes the previous one
        plus one (``max(entry.version, 1)`` on insert).
        """
        ...

    def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None:
        """Remove one entry or several (missing ids are ignored)."""
        ...

    def clear(self, namespace: str) -> None:
        """Remove every entry of ``namespace``."""
        ...

    def erase_user(self, user_id: str) -> None:
        """Remove every entry of ``user_id``, in every namespace (expired ones too).

        Writes made later in the same unit of work are kept.
        """
        ...


class UnitOfWork(Protocol):
    """A sync unit of work; use as a context manager, call :meth:`commit`.

    Leaving the ``with`` block without committing rolls back.
    """

    entries: EntryRepository

    def commit(self) -> None:
        """Make every change visible together."""
        ...

    def rollback(self) -> None:
        """Drop every change."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...


class AsyncUnitOfWork(Protocol):
    """An async unit of work: ``await uow.run_sync(fn, *args)``, ``await uow.commit()``.

    ``fn`` is a sync function whose first argument is the sync
    :class:`UnitOfWork`; each operation is thus written once for both worlds.
    """

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(uow, *args)`` inside this unit of work and return its result."""
        ...

    async def commit(self) -> None:
        """Make every change visible together."""
        ...

    async def rollback(self) -> None:
        """Drop every change."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...


@runtime_checkable
class UnitOfWorkStore(Protocol):
    """A store that provides its own units of work.

    ``read_only=True`` is a hint (a SQL store starts a plain transaction
    instead of a write-locking one); the unit of work must then not write.
    Stores that cannot use the hint accept and ignore it.
    """

    def unit_of_work(self, *, read_only: bool = False) -> AbstractContextManager[UnitOfWork]:
        """A new unit of work (enter it with ``with``)."""
        ...


@runtime_checkable
class AsyncUnitOfWorkStore(Protocol):
    """A store that provides its own async units of work (see :class:`UnitOfWorkStore`)."""

    def async_unit_of_work(
        self, *, read_only: bool = False
    ) -> AbstractAsyncContextManager[AsyncUnitOfWork]:
        """A new async unit of work (enter it with ``async with``)."""
        ...


# --------------------------------------------------------------------------- request types


@dataclass(frozen=True)
class TurnAppend:
    """A conversation turn to add in one statement (``EntryRepository.append_turn``).

    The request a layer hands a store (the conversation layer builds it; the
    SQL stores run it), so neither imports the other.  The row layout it
    follows is in :mod:`firefly_orm._layout`.

    Attributes:
        namespace: The conversation's namespace.
        head_id: The id of its head row.
        conversation_id: The conversation id (written into the head).
        row: The turn row, built for any turn id: the statement gives it its
            ``entry_id``, ``key`` and ``content["turn_id"]`` from the head's
            ``next_turn_id``, and the head's ``user_id``.
        tokens: What the turn adds to the head's ``total_tokens``.
        messages: What it adds to the head's ``total_messages``.
        token_cap: The largest ``total_tokens`` that needs no eviction.
        message_cap: The largest ``total_messages`` that needs none (``None``: no limit).
        owner: The user the head must belong to (``None``: any).
    """

    namespace: str
    head_id: str
    conversation_id: str
    row: MemoryEntry
    tokens: int
    messages: int
    token_cap: int
    message_cap: int | None
    owner: str | None


@dataclass(frozen=True)
class AppendedHead:
    """The head after a one-statement append: its ``content``, ``version`` and owner."""

    content: Any
    version: int
    user_id: str | None


@dataclass
class Precondition:
    """A staged save's version precondition (checked on commit)."""

    namespace: str
    entry_id: str
    expected_version: int


@dataclass
class StagedChanges:
    """What a staged unit of work will apply on commit, in order."""

    cleared: set[str] = field(default_factory=set)
    #: users whose entries are erased from every namespace (applied first)
    erased_users: set[str] = field(default_factory=set)
    #: (namespace, entry_id) -> entry to write, or None to delete
    writes: dict[tuple[str, str], MemoryEntry | None] = field(default_factory=dict)
    preconditions: list[Precondition] = field(default_factory=list)
    #: entry_id -> namespaces a save staged it in (so a save finds a move in O(1))
    saved_in: dict[str, set[str]] = field(default_factory=dict, repr=False, compare=False)
    #: namespaces whose vectors are all dropped (applied after ``writes``)
    dropped_vectors: set[str] = field(default_factory=set)
    #: (namespace, entry_id) -> (spec, vector) to store (applied last; a
    #: :class:`VectorBackend` only; an entry deleted by ``writes`` takes its vector along)
    vectors: dict[tuple[str, str], tuple[EmbeddingSpec, tuple[float, ...]]] = field(
        default_factory=dict
    )

    def namespaces(self) -> set[str]:
        """Every namespace the changes touch (cleared, written or checked)."""
        return (
            self.cleared | {ns for ns, _ in self.writes} | {p.namespace for p in self.preconditions}
        )


# --------------------------------------------------------------------------- staged backend


@runtime_checkable
class StagedBackend(Protocol):
    """What :class:`~firefly_orm.uow.StagedUnitOfWork` needs from a store.

    Reads return *copies* of *live* (non-expired) entries and fetch only what
    is asked; the unit of work overlays its staged writes on them.
    """

    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry with this id in ``namespace``, or ``None``."""
        ...

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """Every live entry of ``namespace`` with ``key``, in any order."""
        ...

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """Live entries of ``namespace``, ordered and limited (see :class:`ListOptions`).

        Ordered by ``(key, created_at, entry_id)`` when ``key_prefix`` is
        given (only keys starting with it), else by ``(created_at, entry_id)``;
        ``newest_first`` reverses; ``limit`` applies after ordering.
        """
        ...

    def apply_changes(self, changes: StagedChanges) -> None:
        """Check the version preconditions, then apply ``changes`` atomically.

        Order: ``erased_users`` (every entry of those users, in every
        namespace), then ``cleared`` namespaces, then ``writes``.

        A failed precondition raises :class:`~firefly_orm.errors.ConcurrencyError`
        and applies nothing.
        """
        ...


@runtime_checkable
class SearchBackend(Protocol):
    """A :class:`StagedBackend` that can also search (what ``uow.entries.search`` needs).

    A separate protocol so a staged backend may add search later: without
    ``read_search`` its units of work refuse searches with a
    :class:`~firefly_orm.errors.StoreError` and stay usable for everything else.
    """

    def read_search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """The committed matches of ``query`` in ``namespace`` (copies), best first, cut.

        Same arguments, filters, order and ``limit`` as
        :meth:`EntryRepository.search` (build them with
        :meth:`firefly_orm._search.SearchRequest.build`); the unit of work
        overlays its staged writes (scoring those with the tokenised match) and
        may ask for a larger ``limit`` or ``None`` (every match), because each
        staged write can hide one stored result.  A database store runs its
        index here (MongoDB: an aggregation on the multikey
        ``(namespace, search_words)`` index, see :mod:`firefly_orm._search`).
        """
        ...


# --------------------------------------------------------------------------- lifecycle


class StoreLifecycle(Protocol):
    """Start-up and shut-down of a store that opens a database (SQL, MongoDB).

    :func:`firefly_orm.config.build_store` initialises such a store with
    :meth:`initialize`, and :func:`~firefly_orm.config.async_build_store` with
    :meth:`async_initialize` (so no blocking start-up runs on an event loop);
    a store whose initialisation failed is closed the same way.
    """

    def initialize(self) -> None:
        """Connect and prepare the database (idempotent); raise if it cannot be used."""
        ...

    async def async_initialize(self) -> None:
        """Async form of :meth:`initialize`."""
        ...

    def close(self) -> None:
        """Release the connections the store opened (idempotent)."""
        ...

    async def async_close(self) -> None:
        """Async form of :meth:`close`."""
        ...


# --------------------------------------------------------------------------- maintenance


@runtime_checkable
class StoreMaintenance(Protocol):
    """An optional capability: a store whose database keeps query-planner statistics.

    After a bulk write (importing conversations) the memory layers call
    :meth:`analyze` when the store has it, once the write is committed and
    outside any unit of work, so the database plans the next reads with the
    new rows counted (PostgreSQL otherwise waits for autovacuum).  A store
    without such statistics simply does not implement this.
    """

    def analyze(self) -> bool:
        """Refresh the planner statistics of the store's tables.

        Returns ``True`` when the database refreshed them, ``False`` when there
        was nothing to do or the database declined (e.g. the role does not own
        the table); declining is logged, never raised.
        """
        ...

    async def async_analyze(self) -> bool:
        """Async form of :meth:`analyze`."""
        ...


# --------------------------------------------------------------------------- declared store facts


@runtime_checkable
class LocksRows(Protocol):
    """A store fact: ``get_by_key(..., for_update=True)`` locks that one row until the
    unit of work ends (PostgreSQL's ``SELECT ... FOR UPDATE``) when ``locks_rows`` is true."""

    locks_rows: bool


@runtime_checkable
class ExpiresOnServer(Protocol):
    """A store fact: the database deletes expired entries itself when ``ttl_index`` is
    true (a MongoDB TTL index)."""

    ttl_index: bool


@runtime_checkable
class OwnAsyncRunner(Protocol):
    """An optional capability: the store runs a whole async unit of work its own way
    (the SQL stores: one worker-thread call on a sync engine)."""

    async def async_run_in_unit_of_work(
        self, work: Callable[[UnitOfWork], T], *, read_only: bool = False, commit: bool = False
    ) -> T:
        """``work(uow)`` in one unit of work; committed after it when ``commit``."""
        ...


@runtime_checkable
class JoinsSession(Protocol):
    """A store fact: its operations run in SAVEPOINTs of a caller's SQLAlchemy
    ``session`` (a ``Session`` or ``AsyncSession``: ``SQLAlchemyStore.bind_session``),
    whose transaction the caller ends.  An integration that calls a model ends
    the transaction its own reads began before the call (``firefly_orm.pydantic_ai``)."""

    session: Any


@runtime_checkable
class SearchableRepository(Protocol):
    """A repository that has ``search`` (a third-party one may not)."""

    def search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> builtins.list[SearchHit]:
        """See :meth:`EntryRepository.search`."""
        ...


@runtime_checkable
class RunsStatements(Protocol):
    """A repository that runs ``fn(target, *args)`` on its SQL ``Session`` or ``Connection``,
    inside its unit of work (the SQL stores: how the knowledge graph reaches its tables)."""

    def run_statements(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(target, *args)`` in this unit of work's transaction; its result."""
        ...


@runtime_checkable
class RunsDatabaseCalls(Protocol):
    """A store that awaits ``fn(database, collection_name, *args)`` on its own MongoDB client
    and loop, from sync code (MongoDBStore: how the knowledge graph reaches the collections
    it keeps beside the entries'); driver errors become ``StoreError``."""

    def run_database_call(self, fn: Callable[..., Awaitable[T]], /, *args: Any) -> T:
        """The result of ``await fn(database, collection_name, *args)``."""
        ...


_DECLARED: dict[tuple[type, type], bool] = {}


def declares(obj: object, protocol: type) -> bool:
    """Whether ``obj``'s class declares the runtime-checkable ``protocol``, checked once per class.

    The capability check of the layers: as ``isinstance(obj, protocol)`` (a
    declared contract, not a probe for a name), answered from a per-class cache
    because a runtime protocol check costs about as much as the fast paths it
    chooses; a class with ``__getattr__`` (a proxy) is checked per object.  Facts
    that are data (``locks_rows``, ``ttl_index``) are read from the object after
    this says it declares them.
    """
    cls = type(obj)
    if _answers_dynamically(cls):
        # A proxy (``__getattr__`` forwarding to another store) has the methods of
        # what it wraps, which may differ from one instance to the next.
        return isinstance(obj, protocol)
    key = (cls, protocol)
    found = _DECLARED.get(key)
    if found is None:
        found = _DECLARED[key] = isinstance(obj, protocol)
    return found


_DYNAMIC: dict[type, bool] = {}


def _answers_dynamically(cls: type) -> bool:
    """Whether instances of ``cls`` may find attributes through ``__getattr__``."""
    found = _DYNAMIC.get(cls)
    if found is None:
        found = _DYNAMIC[cls] = any("__getattr__" in vars(base) for base in cls.__mro__)
    return found
