"""Unit of work and entry repository.

A unit of work is one transaction over a store: everything done through
``uow.entries`` becomes visible together on :meth:`UnitOfWork.commit`, or not at
all (leaving the ``with`` block without committing rolls back)::

    with store.unit_of_work() as uow:
        head = uow.entries.get_by_key("conversation:c1", "head", for_update=True)
        uow.entries.save("conversation:c1", turn)
        uow.entries.save("conversation:c1", new_head, expected_version=head.version)
        uow.commit()

Async code uses ``async with store.async_unit_of_work() as uow`` and runs a sync
function over the unit of work with ``await uow.run_sync(fn, *args)``; on SQL
stores that function runs on the native async driver through
``AsyncSession.run_sync``, so each operation is written once.

What each store guarantees (the contracts are in :mod:`firefly_orm.protocols`):

* SQL stores: one database transaction (a SAVEPOINT when joining a caller's
  Session); ``for_update`` is ``SELECT ... FOR UPDATE`` on PostgreSQL (SQLite
  serialises writers with ``BEGIN IMMEDIATE``).
* Stores implementing :class:`~firefly_orm.protocols.StagedBackend`
  (:class:`~firefly_orm.store.InMemoryStore`, :class:`~firefly_orm.FileStore`,
  the MongoDB store) get :class:`StagedUnitOfWork`: changes are staged and
  handed to the store's ``apply_changes`` on commit, which checks the version
  preconditions and applies them atomically.  Reads fetch only what they ask
  for (one id, one key, a window of a key range) and see the unit of work's
  own staged writes overlaid, so their cost does not grow with the namespace.
  Full-text search asks the store's ``read_search``
  (:class:`~firefly_orm.protocols.SearchBackend`) and scores the staged writes
  with the tokenised match of :mod:`firefly_orm._search`.
* Any other :class:`~firefly_orm.protocols.MemoryStore` (a custom backend with
  only the five protocol methods) gets :class:`BestEffortUnitOfWork`: changes
  are staged and replayed on commit through ``save``/``delete``; preconditions
  are checked just before, but a crash half-way through the replay can leave
  part of the changes applied, and two processes can race between the check
  and the writes.  Give your store a ``unit_of_work()`` method for real
  atomicity.  Searches load the namespace and run the tokenised match over it.
"""

from __future__ import annotations

import builtins
import heapq
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, TypeVar, Unpack, cast

from firefly_orm._search import SearchHit, SearchRequest, best_hits, match_entries
from firefly_orm.bridges.twins import SyncBackedAsyncUnitOfWork
from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    MemoryEntry,
    validate_entry,
    validate_key,
    validate_namespace,
    validate_user_id,
    version_exhausted,
)
from firefly_orm.errors import ConcurrencyError, StoreError
from firefly_orm.protocols import (
    AppendedHead,
    AsyncUnitOfWork,
    AsyncUnitOfWorkStore,
    EntryRepository,
    ListOptions,
    MemoryStore,
    OwnAsyncRunner,
    Precondition,
    SearchableRepository,
    SearchBackend,
    SearchOptions,
    StagedBackend,
    StagedChanges,
    TurnAppend,
    UnitOfWork,
    UnitOfWorkStore,
    declares,
)
from firefly_orm.vector._staged import StagedVectorOperations

__all__ = [
    "AsyncUnitOfWork",
    "BestEffortUnitOfWork",
    "ClosesOnExit",
    "EntryRepository",
    "OpensOnEnter",
    "RepositoryBase",
    "StagedBackend",
    "StagedChanges",
    "StagedUnitOfWork",
    "SyncBackedAsyncUnitOfWork",
    "UnitOfWork",
    "apply_version",
    "optional_operations",
    "arun_in_unit_of_work",
    "async_unit_of_work_for",
    "check_preconditions",
    "check_version_room",
    "select_entries",
    "sort_entries",
    "supports_search",
    "unit_of_work_for",
]

logger = logging.getLogger("firefly_orm")

T = TypeVar("T")


class _Closes(Protocol):
    def close(self) -> None: ...

    async def async_close(self) -> None: ...


class _Opens(Protocol):
    def initialize(self) -> None: ...

    async def async_initialize(self) -> None: ...


_OpensT = TypeVar("_OpensT", bound=_Opens)


class ClosesOnExit:
    """Mixin: ``with store:`` / ``async with store:`` close the store on the way out.

    For a :class:`~firefly_orm.protocols.StoreLifecycle` store: entering hands
    back the store, leaving closes it (``close`` / ``async_close``) however the
    block ends.
    """

    def __enter__(self) -> Self:
        return self

    def __exit__(self: _Closes, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self: _Closes, *exc_info: object) -> None:
        await self.async_close()


class OpensOnEnter(ClosesOnExit):
    """:class:`ClosesOnExit` that also initialises the store on the way in.

    For a store that connects and checks its server only when asked
    (``initialize`` / ``async_initialize``), so that a ``with`` block fails at
    its start when the server cannot be used.
    """

    def __enter__(self: _OpensT) -> _OpensT:
        self.initialize()
        return self

    async def __aenter__(self: _OpensT) -> _OpensT:
        await self.async_initialize()
        return self


# --------------------------------------------------------------------------- ordering


def _by_time(entry: MemoryEntry) -> tuple[Any, ...]:
    return (entry.created_at, entry.entry_id)


def _by_key(entry: MemoryEntry) -> tuple[Any, ...]:
    return (entry.key or "", entry.created_at, entry.entry_id)


def sort_entries(entries: Iterable[MemoryEntry], *, by_key: bool = False) -> list[MemoryEntry]:
    """The store-wide stable order: ``(created_at, entry_id)`` or ``key``."""
    return sorted(entries, key=_by_key if by_key else _by_time)


def select_entries(
    entries: Iterable[MemoryEntry],
    *,
    key_prefix: str | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    user_id: str | None = None,
) -> list[MemoryEntry]:
    """The live entries a ``list`` read returns, in its order (no copies made).

    Drops expired entries, entries of other users when ``user_id`` is given
    and, with ``key_prefix``, entries whose key does not start with it; orders
    by ``(key, created_at, entry_id)`` when a prefix is given, else by
    ``(created_at, entry_id)``; ``newest_first`` reverses; ``limit`` keeps
    the first ``limit`` (selected without sorting the rest).
    """
    if key_prefix is None:
        live = (e for e in entries if not e.is_expired)
    else:
        live = (
            e
            for e in entries
            if e.key is not None and e.key.startswith(key_prefix) and not e.is_expired
        )
    if user_id is not None:
        live = (e for e in live if e.user_id == user_id)
    order = _by_time if key_prefix is None else _by_key
    if limit is None:
        return sorted(live, key=order, reverse=newest_first)
    pick = heapq.nlargest if newest_first else heapq.nsmallest
    return pick(max(limit, 0), live, key=order)


def _newest(entries: Iterable[MemoryEntry]) -> MemoryEntry | None:
    newest = select_entries(entries, limit=1, newest_first=True)
    return newest[0] if newest else None


# --------------------------------------------------------------------------- staged UoW


@dataclass
class _Overlay:
    """The staged writes as one namespace sees them."""

    cleared: bool
    #: ids whose stored row is replaced, deleted or moved away by a staged write
    hidden: set[str]
    #: users whose stored rows are erased
    erased: set[str]
    #: entries staged into the namespace (not copies; copy before handing out)
    staged: list[MemoryEntry]


class RepositoryBase:
    """The optional operations of a repository, declared with "not supported" defaults.

    Our repositories (SQL, staged) derive from it; a layer calls an optional
    operation only on a :class:`RepositoryBase` (:func:`optional_operations`) and takes
    its general path on ``None``, the documented answer for "not supported here".
    A third-party repository that only follows
    :class:`~firefly_orm.protocols.EntryRepository` gets these defaults.  A
    repository that implements one sets its ``supports_*`` flag, so a caller
    can choose its path before reading anything.
    """

    #: ``delete_key`` deletes (else it returns ``None``).
    supports_delete_key: ClassVar[bool] = False
    #: ``list_contents_before`` reads a page (else it returns ``None``).
    supports_list_contents_before: ClassVar[bool] = False

    def append_turn(self, request: TurnAppend) -> AppendedHead | None:
        """Add a conversation turn in the fewest statements when no eviction is needed.

        ``None`` (the default): nothing was written; the caller takes the general path.
        """
        return None

    def delete_key(self, namespace: str, key: str, entry_id: str) -> int | None:
        """Delete entry ``entry_id`` and every entry keyed ``key`` in one statement; how many.

        ``None`` (the default): not supported, nothing was deleted.
        """
        return None

    def list_contents_before(
        self, namespace: str, *, key_prefix: str, before_key: str, limit: int
    ) -> builtins.list[Any] | None:
        """Contents of the entries keyed ``key_prefix...`` below ``before_key``, newest first.

        ``None`` (the default): not supported (page with ``list_contents``).
        """
        return None


_NOT_SUPPORTED = RepositoryBase()


def optional_operations(entries: EntryRepository) -> RepositoryBase:
    """``entries`` if it declares the optional operations, else the "not supported" defaults."""
    return entries if isinstance(entries, RepositoryBase) else _NOT_SUPPORTED


class _StagedRepository(RepositoryBase, StagedVectorOperations):
    """Backend reads of only what is asked, with the staged writes overlaid.

    The vector operations (:class:`~firefly_orm.protocols.VectorRepository`, for a
    backend that is a :class:`~firefly_orm.protocols.VectorBackend`) come from
    :class:`~firefly_orm.vector._staged.StagedVectorOperations`, over the hooks below.
    """

    def __init__(self, uow: StagedUnitOfWork) -> None:
        self._uow = uow

    def _vector_changes(self) -> StagedChanges:
        return self._uow.changes

    def _vector_backend(self) -> object:
        return self._uow.backend

    def _shadowed(self, namespace: str) -> tuple[set[str], dict[str, MemoryEntry], set[str]]:
        overlay = self._overlay(namespace)
        restaged = {e.entry_id: e for e in overlay.staged}
        return overlay.hidden - restaged.keys(), restaged, overlay.erased

    def _overlay(self, namespace: str) -> _Overlay:
        changes = self._uow.changes
        hidden: set[str] = set()
        staged: list[MemoryEntry] = []
        for (ns, entry_id), entry in changes.writes.items():
            if ns == namespace:
                hidden.add(entry_id)
                if entry is not None:
                    staged.append(entry)
            elif entry is not None:
                hidden.add(entry_id)  # saved into another namespace here: it moved
        return _Overlay(
            cleared=namespace in changes.cleared,
            hidden=hidden,
            erased=changes.erased_users,
            staged=staged,
        )

    @staticmethod
    def _visible(entry: MemoryEntry, overlay: _Overlay) -> bool:
        """Whether a stored row survives the staged writes."""
        return entry.entry_id not in overlay.hidden and entry.user_id not in overlay.erased

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        validate_namespace(namespace)
        overlay = self._overlay(namespace)
        for entry in overlay.staged:
            if entry.entry_id == entry_id:
                return None if entry.is_expired else entry.copy_entry()
        if overlay.cleared or entry_id in overlay.hidden:
            return None
        stored = self._uow.backend.read_entry(namespace, entry_id)
        return stored if stored is not None and self._visible(stored, overlay) else None

    def get_by_key(
        self, namespace: str, key: str, *, for_update: bool = False
    ) -> MemoryEntry | None:
        validate_namespace(namespace)
        validate_key(key)
        overlay = self._overlay(namespace)
        stored = [] if overlay.cleared else self._uow.backend.read_by_key(namespace, key)
        candidates = [e for e in stored if self._visible(e, overlay)]
        candidates.extend(e for e in overlay.staged if e.key == key)
        newest = _newest(candidates)
        if newest is not None and any(newest is e for e in overlay.staged):
            return newest.copy_entry()
        return newest

    def list(
        self,
        namespace: str,
        *,
        key_prefix: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        user_id: str | None = None,
    ) -> list[MemoryEntry]:
        validate_namespace(namespace)
        if user_id is not None:
            validate_user_id(user_id)
        overlay = self._overlay(namespace)
        stored: list[MemoryEntry] = []
        if not overlay.cleared:
            # Each staged write can hide at most one stored row of the window,
            # so this many rows always leave ``limit`` once the overlay is applied.
            window = None if limit is None else max(limit, 0) + len(self._uow.changes.writes)
            if overlay.erased:
                window = None  # an erased user may hide any number of stored rows
            options: ListOptions = {
                "key_prefix": key_prefix,
                "limit": window,
                "newest_first": newest_first,
            }
            if user_id is not None:
                options["user_id"] = user_id
            stored = self._uow.backend.read_list(namespace, **options)
        staged = select_entries(overlay.staged, key_prefix=key_prefix, user_id=user_id)
        merged = [e for e in stored if self._visible(e, overlay)]
        merged.extend(e.copy_entry() for e in staged)
        return select_entries(
            merged, key_prefix=key_prefix, limit=limit, newest_first=newest_first, user_id=user_id
        )

    def list_contents(self, namespace: str, **options: Unpack[ListOptions]) -> builtins.list[Any]:
        """Like :meth:`list` (which checks ``options``) but only each entry's ``content``."""
        return [e.content for e in self.list(namespace, **options)]

    def search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> builtins.list[SearchHit]:
        """The backend's matches with the staged writes overlaid (see ``EntryRepository``)."""
        request = SearchRequest.build(namespace, query, **options)
        if request.finds_nothing:
            return []
        backend = self._uow.backend
        if not isinstance(backend, SearchBackend):
            raise StoreError(
                f"{type(backend).__name__} does not implement full-text search "
                "(no read_search); nothing was read"
            )
        overlay = self._overlay(namespace)
        stored: list[SearchHit] = []
        if not overlay.cleared:
            # As in ``list``: each staged write hides at most one stored hit.
            window = None
            if request.limit is not None and not overlay.erased:
                window = request.limit + len(self._uow.changes.writes)
            found = backend.read_search(namespace, query, **request.options(limit=window))
            stored = [hit for hit in found if self._visible(hit.entry, overlay)]
        staged = [
            SearchHit(hit.entry.copy_entry(), hit.score)
            for hit in match_entries(overlay.staged, request)
        ]
        return best_hits([*stored, *staged], request.limit)

    def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        validate_entry(entry, namespace)
        copy = entry.copy_entry(namespace=namespace)
        changes = self._uow.changes
        if expected_version is not None:
            staged = changes.writes.get((namespace, entry.entry_id), _UNSTAGED)
            if staged is _UNSTAGED:
                changes.preconditions.append(
                    Precondition(namespace, entry.entry_id, expected_version)
                )
            else:
                # Written earlier in this unit of work: what a read here returned is
                # the staged copy, so the condition is on it, checked now (a SQL
                # transaction checks it against its own write the same way); the
                # stored row is guarded by the first write's condition, if any.
                _check_staged_version(namespace, entry.entry_id, staged, expected_version)
        # A move between namespaces deletes the old row (entry_id is global).
        saved_in = changes.saved_in.setdefault(entry.entry_id, set())
        for other in saved_in - {namespace}:
            if (other, entry.entry_id) in changes.writes:
                changes.writes[(other, entry.entry_id)] = None
        saved_in.add(namespace)
        changes.writes[(namespace, entry.entry_id)] = copy

    def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None:
        validate_namespace(namespace)
        ids = [entry_ids] if isinstance(entry_ids, str) else list(entry_ids)
        for entry_id in ids:
            self._uow.changes.writes[(namespace, entry_id)] = None

    def clear(self, namespace: str) -> None:
        validate_namespace(namespace)
        changes = self._uow.changes
        changes.cleared.add(namespace)
        for key in [k for k in changes.writes if k[0] == namespace]:
            del changes.writes[key]

    def erase_user(self, user_id: str) -> None:
        validate_user_id(user_id)
        changes = self._uow.changes
        changes.erased_users.add(user_id)
        for key, entry in changes.writes.items():
            if entry is not None and entry.user_id == user_id:
                changes.writes[key] = None


class StagedUnitOfWork:
    """Unit of work that stages changes and hands them to the store on commit.

    Args:
        backend: The store (or adapter) implementing
            :class:`~firefly_orm.protocols.StagedBackend`.
    """

    def __init__(self, backend: StagedBackend) -> None:
        self.backend = backend
        self.changes = StagedChanges()
        self.entries: EntryRepository = _StagedRepository(self)
        self._done = False

    def commit(self) -> None:
        """Apply the staged changes through ``backend.apply_changes``."""
        if self._done:
            raise RuntimeError("this unit of work has already been committed or rolled back")
        self.backend.apply_changes(self.changes)
        self._done = True

    def rollback(self) -> None:
        """Drop the staged changes."""
        self.changes = StagedChanges()
        self._done = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._done:
            self.rollback()


def apply_version(entry: MemoryEntry, previous: MemoryEntry | None) -> MemoryEntry:
    """The entry as stored: version bumped from ``previous`` (or ``max(v, 1)``).

    Raises:
        EntryValidationError: ``previous`` is at the largest version
            (:func:`check_version_room`; call it before changing anything).
    """
    check_version_room(previous)
    entry.version = previous.version + 1 if previous is not None else max(entry.version, 1)
    return entry


def check_version_room(previous: MemoryEntry | None) -> None:
    """Refuse to update an entry already at :data:`~firefly_orm.entry.MAX_ENTRY_VERSION`.

    Its next version would not fit the ``version`` column; nothing is written.
    """
    if previous is not None and previous.version >= MAX_ENTRY_VERSION:
        raise version_exhausted(previous.entry_id)


_UNSTAGED: Any = object()


def _check_staged_version(
    namespace: str, entry_id: str, staged: MemoryEntry | None, expected_version: int
) -> None:
    """Raise :class:`ConcurrencyError` unless ``staged`` (``None``: deleted) is at that version."""
    actual = 0 if staged is None else staged.version
    if actual != expected_version:
        raise ConcurrencyError(
            f"entry {entry_id!r} in {namespace!r} is at version {actual} in this unit of work, "
            f"expected {expected_version}"
        )


def check_preconditions(
    changes: StagedChanges, current: Callable[[str, str], MemoryEntry | None]
) -> None:
    """Raise before anything is written if ``changes`` cannot apply.

    :class:`ConcurrencyError` when a version precondition no longer holds;
    :class:`~firefly_orm.errors.EntryValidationError` when a write would update
    an entry already at the largest version (:func:`check_version_room`).
    """
    for (namespace, entry_id), entry in changes.writes.items():
        if entry is not None and namespace not in changes.cleared:
            check_version_room(current(namespace, entry_id))
    for pre in changes.preconditions:
        stored = current(pre.namespace, pre.entry_id)
        if stored is not None and stored.namespace != pre.namespace:
            stored = None
        actual = 0 if stored is None else stored.version
        if actual != pre.expected_version:
            raise ConcurrencyError(
                f"entry {pre.entry_id!r} in {pre.namespace!r} is at version {actual}, "
                f"expected {pre.expected_version}"
            )


# --------------------------------------------------------------------------- best effort


class _LoadingBackend:
    """Adapts a plain five-method store to :class:`StagedBackend` through ``load``."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        for entry in self.store.load(namespace):
            if entry.entry_id == entry_id:
                return entry.copy_entry()
        return None

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        return [e.copy_entry() for e in self.store.load(namespace) if e.key == key]

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        return [e.copy_entry() for e in select_entries(self.store.load(namespace), **options)]

    def read_search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        return match_entries(
            self.store.load(namespace), SearchRequest.build(namespace, query, **options)
        )

    def apply_changes(self, changes: StagedChanges) -> None:
        cache: dict[str, dict[str, MemoryEntry]] = {}

        def current(namespace: str, entry_id: str) -> MemoryEntry | None:
            if namespace not in cache:
                cache[namespace] = {e.entry_id: e for e in self.store.load(namespace)}
            return cache[namespace].get(entry_id)

        if changes.erased_users:
            raise StoreError(
                f"{type(self.store).__name__} cannot erase a user's entries: it cannot list "
                "its namespaces (implement StagedBackend or unit_of_work(); nothing was written)"
            )
        check_preconditions(changes, current)
        for namespace in sorted(changes.cleared):
            self.store.clear(namespace)
        for (namespace, entry_id), entry in changes.writes.items():
            if entry is None:
                self.store.delete(namespace, entry_id)
            else:
                previous = None if namespace in changes.cleared else current(namespace, entry_id)
                self.store.save(namespace, apply_version(entry, previous))


class BestEffortUnitOfWork(StagedUnitOfWork):
    """Unit of work for a store that only has the five protocol methods.

    See the module docstring for what it does and does not guarantee.
    """

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(_LoadingBackend(store))


def supports_search(entries: EntryRepository) -> bool:
    """Whether ``entries.search`` can answer (an explicit capability check).

    False only for the repository of a staged unit of work whose backend has no
    ``read_search`` (:class:`~firefly_orm.protocols.SearchBackend`): its
    searches raise :class:`~firefly_orm.errors.StoreError`.
    """
    if isinstance(entries, _StagedRepository):
        return isinstance(entries._uow.backend, SearchBackend)
    return declares(entries, SearchableRepository)


# --------------------------------------------------------------------------- entry points
# Capability checks against declared protocols, answered once per class
# (:func:`~firefly_orm.protocols.declares`).


@contextmanager
def unit_of_work_for(store: MemoryStore, *, read_only: bool = False) -> Iterator[UnitOfWork]:
    """``store.unit_of_work(read_only=...)`` when the store has one, else a best-effort one.

    ``read_only=True`` is a hint for stores that can use it (SQL stores start a
    plain transaction instead of a write-locking one); the unit of work must then
    not write.
    """
    if declares(store, UnitOfWorkStore):
        with cast(UnitOfWorkStore, store).unit_of_work(read_only=read_only) as uow:
            yield uow
    else:
        with BestEffortUnitOfWork(store) as staged:
            yield staged


def async_unit_of_work_for(
    store: MemoryStore, *, read_only: bool = False
) -> AbstractAsyncContextManager[AsyncUnitOfWork]:
    """``store.async_unit_of_work(read_only=...)`` when the store has one, else a sync-backed one.

    A store with only a sync ``unit_of_work`` (or none) gets it wrapped in a
    :class:`SyncBackedAsyncUnitOfWork` that runs the work in a worker thread.
    """
    if declares(store, AsyncUnitOfWorkStore):
        return cast(AsyncUnitOfWorkStore, store).async_unit_of_work(read_only=read_only)
    if declares(store, UnitOfWorkStore):
        own = cast(UnitOfWorkStore, store).unit_of_work(read_only=read_only)
        return SyncBackedAsyncUnitOfWork(own)
    return SyncBackedAsyncUnitOfWork(BestEffortUnitOfWork(store))


async def arun_in_unit_of_work(
    store: MemoryStore,
    work: Callable[[UnitOfWork], T],
    *,
    read_only: bool = False,
    commit: bool = False,
) -> T:
    """``work(uow)`` (a sync function) in one async unit of work of ``store``; its result.

    Committed after ``work`` when ``commit``, rolled back otherwise and when
    ``work`` raises.  A store with ``async_run_in_unit_of_work`` (the SQL
    stores) runs it its own way: where its async methods run on a sync engine
    in worker threads, the whole unit of work is one worker-thread call.  Any
    other store: :func:`async_unit_of_work_for` and ``await uow.run_sync(work)``.
    """
    if declares(store, OwnAsyncRunner):
        runner = cast(OwnAsyncRunner, store)
        return await runner.async_run_in_unit_of_work(work, read_only=read_only, commit=commit)
    async with async_unit_of_work_for(store, read_only=read_only) as uow:
        result: T = await uow.run_sync(work)
        if commit:
            await uow.commit()
    return result
